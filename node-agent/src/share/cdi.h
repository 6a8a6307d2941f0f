// The CDI spec of one claim (cdiVersion kCdiVersion): one device per share, named
// "<claimUID>-<device>-<shareID>", whose containerEdits point the shim at the share.
#pragma once

#include <string>
#include <vector>

#include "model/share_spec.h"

namespace tessera::agent {

inline constexpr char kCdiKind[] = "k8s.vgpu.tessera.dev/claim";
// A device name that starts with a digit (a claim UID) needs cdiVersion >= 0.5.0.
inline constexpr char kCdiVersion[] = "0.6.0";

struct CdiPaths {
  std::string host_shares_dir;       // "<root>/shares" as the container runtime sees it
  std::string container_shares_dir;  // where share folders appear in the container
  std::string shim_path;             // libvgpu.so, the same path on the host and in the container
  // MPS shares: "<root>/mps" (MpsBackend's root) and where its share folders appear in the
  // container; each share's pipe/ is mounted there and its shm/ over /dev/shm.
  std::string host_mps_dir;
  std::string container_mps_dir;
};

// "k8s.vgpu.tessera.dev-claim_<claimUID>.json": one file per claim.
inline constexpr char kCdiSpecFilePrefix[] = "k8s.vgpu.tessera.dev-claim_";
std::string cdi_spec_file_name(const std::string& claim_uid);
// "k8s.vgpu.tessera.dev/claim=<share name>", as kubelet hands it to the runtime.
std::string cdi_device_id(const ShareSpec& share);
// The spec as JSON text (deterministic: same shares, same bytes).
std::string build_cdi_spec(const std::vector<ShareSpec>& shares, const CdiPaths& paths);

}  // namespace tessera::agent

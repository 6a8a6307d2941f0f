// The CDI spec of one claim: one device per share, named "<claimUID>-<device>-<shareID>", whose
// containerEdits point the shim at the share, and spec-wide edits that every container given one
// of the claim's devices gets: the shim and how it is loaded, and the driver (unless the NVIDIA
// Container Toolkit's own CDI device brings it: see share/driver_edits.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/share_spec.h"
#include "share/driver_edits.h"
#include "share/partition_hook.h"
#include "tessera/status.h"

namespace tessera::agent {

inline constexpr char kCdiKind[] = "k8s.vgpu.tessera.dev/claim";

// How the shim gets into every process of the container.
enum class ShimLoading {
  // A file naming the shim, mounted read-only at /etc/ld.so.preload: the loader reads it for every
  // program, including those started with a cleared environment; the image's LD_PRELOAD and
  // LD_LIBRARY_PATH are left alone.
  kLdSoPreload,
  // LD_PRELOAD=<shim> in the container's environment. CDI can only set a variable, so this
  // replaces a value the image sets (see docs/node-agent.md).
  kLdPreloadEnv,
};
// "ld.so.preload", "LD_PRELOAD"; nullopt for anything else.
std::optional<ShimLoading> parse_shim_loading(const std::string& text);
const char* to_string(ShimLoading loading);

inline constexpr char kContainerPreloadFile[] = "/etc/ld.so.preload";

struct CdiPaths {
  std::string host_shares_dir;       // "<root>/shares" as the container runtime sees it
  std::string container_shares_dir;  // where share folders appear in the container
  std::string shim_path;             // libvgpu.so, the same path on the host and in the container
  // MPS shares: "<root>/mps" (MpsBackend's root) and where its share folders appear in the
  // container; each share's pipe/ is mounted there and its shm/ over /dev/shm.
  std::string host_mps_dir;
  std::string container_mps_dir;
  ShimLoading shim_loading = ShimLoading::kLdSoPreload;
  // kLdSoPreload: the host file (holding shim_path and a newline) mounted at /etc/ld.so.preload.
  std::string host_preload_file;
  // Where the driver holds partitions (docs/driver-partitions.md): each device of a share with a
  // memory limit on one of `gpus` gets a createRuntime hook that sets the share's soft and hard
  // limits on the container's own cgroup. nullopt: no hook (the shim alone holds memory).
  std::optional<PartitionHookConfig> partition_hook;
};

// What the ld.so.preload file holds: the shim's path and a newline.
std::string preload_file_contents(const std::string& shim_path);

// "k8s.vgpu.tessera.dev-claim_<claimUID>.json": one file per claim.
inline constexpr char kCdiSpecFilePrefix[] = "k8s.vgpu.tessera.dev-claim_";
std::string cdi_spec_file_name(const std::string& claim_uid);
// "k8s.vgpu.tessera.dev/claim=<share name>", as kubelet hands it to the runtime.
std::string cdi_device_id(const ShareSpec& share);
// What the claim returns for a share: our device, then the toolkit's device for its GPU when the
// driver comes from the toolkit's spec. An error (naming the GPU) when the driver cannot be given:
// the toolkit's spec has no device for it, or `driver` has neither way set.
Result<std::vector<std::string>> cdi_device_ids(const ShareSpec& share,
                                                const ContainerDriver& driver);

// The lowest cdiVersion whose schema holds everything `spec` uses (container-device-interface's
// specs-go/versions.go): 0.4.0 mount types; 0.5.0 device names starting with a digit, device node
// hostPaths; 0.6.0 annotations, a '.' in the kind's class; 0.7.0 intelRdt, additionalGids; 1.1.0
// intelRdt schemata or enableMonitoring, netDevices. 0.8.0 and 1.0.0 added nothing to the
// content. Else 0.3.0, the earliest the CDI library accepts.
std::string minimum_cdi_version(const nlohmann::json& spec);

// The spec as JSON text (deterministic: same shares, paths and driver, same bytes), declaring
// minimum_cdi_version of itself.
std::string build_cdi_spec(const std::vector<ShareSpec>& shares, const CdiPaths& paths,
                           const ContainerDriver& driver);

}  // namespace tessera::agent

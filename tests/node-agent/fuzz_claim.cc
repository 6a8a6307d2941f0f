// libFuzzer target over the node agent's untrusted input: ResourceClaim JSON as the API server
// returns it (share_spec.cc) and VgpuConfig parameters (vgpu_config.cc). Neither may crash, hang
// or trip a sanitizer on any input; a decoded share must have safe names and sane limits.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "model/share_spec.h"
#include "tessera/vgpu_config/vgpu_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  using namespace tessera::agent;
  const std::string text(reinterpret_cast<const char*>(data), size);
  ShareSpecInput input;
  input.claim_json = text;
  input.expected_uid = "0f6b3f0e-7c59-4d0e-9b4e-2f7a5d1c9e01";
  input.pool = "node-a";
  input.devices = {{"gpu-0", "GPU-0", 0, 1ull << 37}, {"gpu-1", "GPU-1", 1, 1ull << 37}};
  const tessera::Result<std::vector<ShareSpec>> specs = compute_share_specs(input);
  // An error says why; a success lists at least one share.
  if (!specs.is_ok() && specs.status().message().empty()) std::abort();
  if (specs.is_ok() && specs->empty()) std::abort();
  const std::vector<ShareSpec> none;
  for (const auto& spec : specs.is_ok() ? *specs : none) {
    if (!safe_name_component(spec.name())) std::abort();
    if (spec.cores && *spec.cores > 100) std::abort();
    if (spec.config.cores_limit && *spec.config.cores_limit > 100) std::abort();
  }
  const auto parameters = nlohmann::json::parse(text, nullptr, false);
  if (!parameters.is_discarded()) {
    const tessera::Result<vgpu_config::VgpuConfig> config =
        vgpu_config::decode_vgpu_config(parameters);
    if (!config.is_ok() && config.status().message().empty()) std::abort();
  }
  return 0;
}

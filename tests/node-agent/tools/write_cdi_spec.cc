// agent_write_cdi_spec: the node agent's prepare of one share, without kubelet or an API server,
// for scripts that apply the CDI spec with a real container runtime (podman). It takes the
// agent's own flags (--state-dir, --cdi-dir, --shim-path, --shim-loading, --driver-mode,
// --toolkit-spec-dirs, --driver-root, ...; --node-name is required as for the agent), discovers
// the driver as the agent does at start, and runs ShareManager::prepare on a ResourceClaim made
// from the flags below: the shim check, the share folder, /etc/ld.so.preload's file and the CDI
// spec are the agent's. Prints one JSON line: the spec's path, the device ids a container is
// given (`podman run --device <id>` for each), the share folder. --unprepare removes what a
// previous run with the same --state-dir, --cdi-dir and --claim-uid wrote.
#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "agent/agent_config.h"
#include "agent/node_agent.h"
#include "apiserver/claim_fixture.h"
#include "share/share_manager.h"
#include "tessera/kube/kube_client.h"
#include "tessera/quantity.h"

namespace {

using namespace tessera::agent;

class OneClaim : public tessera::kube::KubeClient {
 public:
  tessera::Result<tessera::kube::ApiResponse> request(const std::string& method,
                                                      const std::string& path,
                                                      const std::string&) override {
    if (method != "GET" || path != tessera::kube::resource_claim_path("tenants", name))
      return tessera::not_found(method + " " + path + ": HTTP 404: not found");
    return tessera::kube::ApiResponse{200, body};
  }
  std::string name, body;
};

int fail(const std::string& message) {
  std::cerr << "agent_write_cdi_spec: " << message << '\n';
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  AgentConfig config;
  std::string claim_uid = "0b6f2c1e-4a5d-4e7f-9a8b-1c2d3e4f5a6b";
  std::string gpu_uuid = "GPU-00000000-0000-0000-0000-000000000000";
  unsigned minor = 0;
  std::string gpu_memory = "16Gi", memory = "4Gi", cores = "50", share_id = "s-0";
  std::string container_shares_dir = "/var/run/tessera/shares";
  bool unprepare = false;
  CLI::App app{"Writes the node agent's CDI spec for one share (tests only)"};
  add_agent_flags(app, config);
  app.add_option("--claim-uid", claim_uid, "The claim's UID")->capture_default_str();
  app.add_option("--gpu-uuid", gpu_uuid, "The GPU's UUID (GPU-...)")->capture_default_str();
  app.add_option("--minor", minor, "The GPU's minor (/dev/nvidia<minor>)")->capture_default_str();
  app.add_option("--gpu-memory", gpu_memory, "The GPU's memory")->capture_default_str();
  app.add_option("--memory", memory, "The share's memory")->capture_default_str();
  app.add_option("--cores", cores, "The share's cores (percent)")->capture_default_str();
  app.add_option("--share-id", share_id, "The allocation's shareID")->capture_default_str();
  app.add_option("--container-shares-dir", container_shares_dir,
                 "Where share folders appear in the container")
      ->capture_default_str();
  app.add_flag("--unprepare", unprepare, "Remove what a previous run prepared");
  CLI11_PARSE(app, argc, argv);

  const std::optional<uint64_t> total = tessera::parse_byte_quantity(gpu_memory);
  if (!total) return fail("--gpu-memory " + gpu_memory + " is not a byte quantity");
  ShareManagerOptions options;
  if (const tessera::Status applied = apply_container_flags(config, options, /*announce=*/true);
      !applied.is_ok())
    return fail(applied.message());
  options.root = config.state_dir;
  options.cdi_dir = config.cdi_dir;
  options.node_name = config.node_name;
  options.container_shares_dir = container_shares_dir;

  const std::string device = "gpu-" + std::to_string(minor);
  OneClaim kube;
  kube.name = "claim-" + claim_uid;
  kube.body =
      testing::written_claim(kube.name, claim_uid, {{"gpu", device, share_id, memory, cores}},
                             nlohmann::json::array(), config.node_name)
          .dump();
  ShareManager manager(options, kube, {{device, gpu_uuid, minor, *total}});
  if (const tessera::Status started = manager.start(); !started.is_ok())
    return fail(started.message());
  const ClaimRef claim{"tenants", claim_uid, kube.name};
  if (unprepare) {
    const tessera::Status removed = manager.unprepare(claim);
    return removed.is_ok() ? 0 : fail(removed.message());
  }
  const PrepareResult prepared = manager.prepare(claim);
  if (!prepared.is_ok()) return fail(prepared.status().message());
  const PreparedDevice& share = prepared->front();
  nlohmann::json out = {
      {"spec", manager.cdi_spec_path(claim_uid)},
      {"cdi_device_ids", share.cdi_device_ids},
      {"share_dir", manager.checkpoint().empty()
                        ? ""
                        : manager.share_dir(manager.checkpoint().at(claim_uid).shares.front())}};
  if (options.shim_loading == ShimLoading::kLdSoPreload)
    out["preload_file"] = manager.preload_file_path();
  std::cout << out.dump() << '\n';
  return 0;
}

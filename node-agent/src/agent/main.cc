// tessera-node-agent: the per-node daemon. Serves the kubelet DRA plugin (registration, the DRA
// services and device health) for the NodeAgent, until SIGTERM or SIGINT.
#include <signal.h>

#include <cstdlib>
#include <iostream>

#include <CLI/CLI.hpp>

#include "agent/agent_config.h"
#include "agent/node_agent.h"
#include "devices/resource_slices.h"
#include "plugin/plugin_server.h"
#include "tessera/log.h"
#include "tessera/status.h"

namespace {

// The process edge: a failure's message on stderr and an exit status that says whether restarting
// can help. 2: the configuration is wrong (flags, kubeconfig, socket paths), so a restart fails the
// same way; 1: anything else (no driver yet, the API server away), which a restart may cure.
int report_failure(const tessera::Status& status) {
  tessera::log::error(status.message());
  return status.code() == tessera::StatusCode::kInvalidArgument ? 2 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tessera::agent;

  AgentConfig config;
  CLI::App app{"Tessera node agent: the vgpu.tessera.dev DRA kubelet plugin", "tessera-node-agent"};
  add_agent_flags(app, config);
  bool print_slices = false;
  app.add_flag("--print-resource-slices", print_slices,
               "Print the ResourceSlices this node would publish (GPUs from NVML) and exit");
  CLI11_PARSE(app, argc, argv);
  // The tests' crash point (agent_config.h); checked by NodeAgent::start.
  if (const char* kill_at = std::getenv("TESSERA_TEST_KILL_AT")) config.test_kill_at = kill_at;
  {
    tessera::log::Options logging;
    logging.logger = "tessera-node-agent";
    logging.level = tessera::log::verbose(tessera::log::Level::kInfo, config.verbosity);
    // Checked by the flag's validator already.
    logging.format = tessera::log::parse_format(config.log_format).value();
    tessera::log::configure(std::move(logging));
  }

  if (print_slices) {
    // A dry run for admins and GPU checks: no API server, no sockets. The owner reference's uid
    // is the Node's, read from the API when the agent publishes.
    const tessera::Result<std::vector<tessera::GpuInfo>> gpus = tessera::list_gpus();
    if (!gpus.is_ok()) return report_failure(gpus.status());
    const SliceIdentity identity{tessera::vgpu_config::kDriverName, config.node_name, ""};
    for (const auto& slice : build_resource_slices(*gpus, identity, 1))
      std::cout << slice.dump(2) << '\n';
    return 0;
  }

  // Block the stop signals before any thread starts, so every thread (gRPC's included) inherits
  // the mask and only sigwait below receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  NodeAgent agent(config);
  if (tessera::Status started = agent.start(); !started.is_ok()) {
    tessera::log::error(started.message());
    return 1;
  }

  PluginServerOptions options;
  options.driver_name = tessera::vgpu_config::kDriverName;
  options.registry_dir = config.kubelet_registry_dir;
  options.plugins_dir = config.kubelet_plugins_dir;
  options.pod_uid = config.pod_uid;
  PluginServer server(options, agent.preparer(), &agent.health());
  if (const tessera::Status started = server.start(); !started.is_ok())
    return report_failure(started);
  tessera::log::info("serving", {{"driver", tessera::vgpu_config::kDriverName},
                                 {"node", config.node_name},
                                 {"registration_socket", server.registration_socket().native()},
                                 {"dra_socket", server.dra_socket().native()}});

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  tessera::log::info("stopping", {{"signal", signal_number}});
  server.stop();
  agent.stop();
  return 0;
}

// tessera-node-agent: the per-node daemon. Serves the kubelet DRA plugin (registration, the DRA
// services and device health) for the NodeAgent, until SIGTERM or SIGINT.
#include <signal.h>

#include <iostream>

#include <CLI/CLI.hpp>

#include "agent/node_agent.h"
#include "plugin/agent_config.h"
#include "plugin/plugin_server.h"

int main(int argc, char** argv) {
  using namespace tessera::agent;

  AgentConfig config;
  CLI::App app{"Tessera node agent: the vgpu.tessera.dev DRA kubelet plugin", "tessera-node-agent"};
  add_agent_flags(app, config);
  CLI11_PARSE(app, argc, argv);

  // Block the stop signals before any thread starts, so every thread (gRPC's included) inherits
  // the mask and only sigwait below receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  NodeAgent agent(config);
  if (std::string error = agent.start(); !error.empty()) {
    std::cerr << "tessera-node-agent: " << error << '\n';
    return 1;
  }

  PluginServerOptions options;
  options.driver_name = kDriverName;
  options.registry_dir = config.kubelet_registry_dir;
  options.plugins_dir = config.kubelet_plugins_dir;
  PluginServer server(options, agent.preparer(), &agent.health());
  if (std::string error = server.start(); !error.empty()) {
    std::cerr << "tessera-node-agent: " << error << '\n';
    return 1;
  }
  std::cerr << "tessera-node-agent: serving " << kDriverName << " on node " << config.node_name
            << ": registration " << server.registration_socket().native() << ", DRA "
            << server.dra_socket().native() << '\n';

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  std::cerr << "tessera-node-agent: signal " << signal_number << ", stopping\n";
  server.stop();
  agent.stop();
  return 0;
}

// The kubelet plugin-registration service (pluginregistration.Registration), served on
// <registry dir>/<driver>-reg.sock. Kubelet finds the socket, calls GetInfo to learn the driver
// name, the DRA socket and the versions served, then tells the plugin whether it registered.
#pragma once

#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "kubelet/pluginregistration/api.grpc.pb.h"

namespace tessera::agent {

// Where the agent's own messages go (stderr in the daemon; captured in tests).
using PluginLogger = std::function<void(std::string_view message)>;
void log_to_stderr(std::string_view message);

struct RegistrationInfo {
  std::string driver_name;                      // kubelet matches it against results[].driver
  std::string endpoint;                         // absolute path of the DRA socket
  std::vector<std::string> supported_versions;  // kubelet takes the first it supports
};

// What kubelet last said through NotifyRegistrationStatus.
struct RegistrationState {
  int notifications = 0;  // 0: kubelet has not answered yet
  bool registered = false;
  std::string error;
};

class RegistrationService final : public pluginregistration::Registration::Service {
 public:
  explicit RegistrationService(RegistrationInfo info, PluginLogger log = log_to_stderr);

  grpc::Status GetInfo(grpc::ServerContext* context, const pluginregistration::InfoRequest* request,
                       pluginregistration::PluginInfo* reply) override;
  grpc::Status NotifyRegistrationStatus(
      grpc::ServerContext* context, const pluginregistration::RegistrationStatus* status,
      pluginregistration::RegistrationStatusResponse* reply) override;

  RegistrationState state() const;

 private:
  const RegistrationInfo info_;
  const PluginLogger log_;
  mutable std::mutex mutex_;
  RegistrationState state_;
};

}  // namespace tessera::agent

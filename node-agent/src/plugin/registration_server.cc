#include "registration_server.h"

#include <utility>

#include "tessera/log.h"

namespace tessera::agent {

void log_to_stderr(std::string_view message) {
  log::info(message);
}

RegistrationService::RegistrationService(RegistrationInfo info, PluginLogger log)
    : info_(std::move(info)), log_(std::move(log)) {}

grpc::Status RegistrationService::GetInfo(grpc::ServerContext* /*context*/,
                                          const pluginregistration::InfoRequest* /*request*/,
                                          pluginregistration::PluginInfo* reply) {
  reply->set_type("DRAPlugin");
  reply->set_name(info_.driver_name);
  reply->set_endpoint(info_.endpoint);
  for (const std::string& version : info_.supported_versions)
    reply->add_supported_versions(version);
  return grpc::Status::OK;
}

grpc::Status RegistrationService::NotifyRegistrationStatus(
    grpc::ServerContext* /*context*/, const pluginregistration::RegistrationStatus* status,
    pluginregistration::RegistrationStatusResponse* /*reply*/) {
  {
    std::lock_guard lock(mutex_);
    ++state_.notifications;
    state_.registered = status->plugin_registered();
    state_.error = status->error();
  }
  if (status->plugin_registered()) {
    log_("kubelet registered plugin " + info_.driver_name + " at " + info_.endpoint);
  } else {
    log_("kubelet failed to register plugin " + info_.driver_name + ": " +
         (status->error().empty() ? std::string("(no reason given)") : status->error()));
  }
  return grpc::Status::OK;
}

RegistrationState RegistrationService::state() const {
  std::lock_guard lock(mutex_);
  return state_;
}

}  // namespace tessera::agent

#include "health_service.h"

namespace tessera::agent {

namespace {

// Both versions' enums have the same numbers (UNKNOWN 0, HEALTHY 1, UNHEALTHY 2).
template <typename HealthStatus>
HealthStatus to_proto(DeviceHealthState state) {
  switch (state) {
    case DeviceHealthState::kHealthy:
      return static_cast<HealthStatus>(1);
    case DeviceHealthState::kUnhealthy:
      return static_cast<HealthStatus>(2);
    case DeviceHealthState::kUnknown:
      return static_cast<HealthStatus>(0);
  }
  return static_cast<HealthStatus>(0);
}

template <typename Response, typename HealthStatus>
Response build_response(const DeviceHealthSnapshot& snapshot) {
  Response response;
  for (const DeviceHealthReport& report : snapshot.devices) {
    auto* device = response.add_devices();
    device->mutable_device()->set_pool_name(report.pool_name);
    device->mutable_device()->set_device_name(report.device_name);
    device->set_health(to_proto<HealthStatus>(report.state));
    device->set_last_updated_time(report.last_updated_unix_s);
    device->set_health_check_timeout_seconds(report.health_check_timeout_seconds);
    device->set_message(report.message.substr(0, kHealthMessageMaxLength));
  }
  return response;
}

}  // namespace

v1alpha1::NodeWatchResourcesResponse to_watch_response(const DeviceHealthSnapshot& snapshot) {
  return build_response<v1alpha1::NodeWatchResourcesResponse, v1alpha1::HealthStatus>(snapshot);
}

v1::NodeWatchResourcesResponse to_watch_response_v1(const DeviceHealthSnapshot& snapshot) {
  return build_response<v1::NodeWatchResourcesResponse, v1::HealthStatus>(snapshot);
}

HealthService::HealthService(const DeviceHealthProvider& provider, std::chrono::milliseconds poll)
    : provider_(provider), poll_(poll) {}

std::vector<grpc::Service*> HealthService::services() {
  return {&v1_, &v1alpha1_};
}

std::vector<std::string> HealthService::service_names() {
  return {v1::DRAResourceHealth::service_full_name(),
          v1alpha1::DRAResourceHealth::service_full_name()};
}

template <typename Write>
grpc::Status HealthService::watch(grpc::ServerContext* context, Write write) {
  while (!stopping_.load() && !context->IsCancelled()) {
    DeviceHealthSnapshot snapshot = provider_.snapshot();
    if (!write(snapshot)) break;  // kubelet went away
    while (!provider_.wait_for_change(snapshot.generation, poll_)) {
      if (stopping_.load() || context->IsCancelled()) return grpc::Status::OK;
    }
  }
  return grpc::Status::OK;
}

grpc::Status HealthService::V1Alpha1::NodeWatchResources(
    grpc::ServerContext* context, const v1alpha1::NodeWatchResourcesRequest* /*request*/,
    grpc::ServerWriter<v1alpha1::NodeWatchResourcesResponse>* writer) {
  return owner_.watch(context, [writer](const DeviceHealthSnapshot& snapshot) {
    return writer->Write(to_watch_response(snapshot));
  });
}

grpc::Status HealthService::V1::NodeWatchResources(
    grpc::ServerContext* context, const v1::NodeWatchResourcesRequest* /*request*/,
    grpc::ServerWriter<v1::NodeWatchResourcesResponse>* writer) {
  return owner_.watch(context, [writer](const DeviceHealthSnapshot& snapshot) {
    return writer->Write(to_watch_response_v1(snapshot));
  });
}

}  // namespace tessera::agent

#include "health_service.h"

namespace tessera::agent {

namespace {

v1alpha1::HealthStatus to_proto(DeviceHealthState state) {
  switch (state) {
    case DeviceHealthState::kHealthy:
      return v1alpha1::HEALTHY;
    case DeviceHealthState::kUnhealthy:
      return v1alpha1::UNHEALTHY;
    case DeviceHealthState::kUnknown:
      return v1alpha1::UNKNOWN;
  }
  return v1alpha1::UNKNOWN;
}

}  // namespace

v1alpha1::NodeWatchResourcesResponse to_watch_response(const DeviceHealthSnapshot& snapshot) {
  v1alpha1::NodeWatchResourcesResponse response;
  for (const DeviceHealthReport& report : snapshot.devices) {
    v1alpha1::DeviceHealth* device = response.add_devices();
    device->mutable_device()->set_pool_name(report.pool_name);
    device->mutable_device()->set_device_name(report.device_name);
    device->set_health(to_proto(report.state));
    device->set_last_updated_time(report.last_updated_unix_s);
    device->set_health_check_timeout_seconds(report.health_check_timeout_seconds);
  }
  return response;
}

grpc::Status HealthService::NodeWatchResources(
    grpc::ServerContext* context, const v1alpha1::NodeWatchResourcesRequest* /*request*/,
    grpc::ServerWriter<v1alpha1::NodeWatchResourcesResponse>* writer) {
  while (!stopping_.load() && !context->IsCancelled()) {
    DeviceHealthSnapshot snapshot = provider_.snapshot();
    if (!writer->Write(to_watch_response(snapshot))) break;  // kubelet went away
    while (!provider_.wait_for_change(snapshot.generation, poll_)) {
      if (stopping_.load() || context->IsCancelled()) return grpc::Status::OK;
    }
  }
  return grpc::Status::OK;
}

}  // namespace tessera::agent

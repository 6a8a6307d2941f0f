// The kubelet DRA health service (v1alpha1.DRAResourceHealth), on the DRA socket next to
// DRAPlugin. NodeWatchResources streams the full device list at once and again on every change
// of the provider; the stream ends when kubelet cancels it or the server stops.
#pragma once

#include <atomic>
#include <chrono>

#include "devices/device_health.h"
#include "kubelet/dra-health/v1alpha1/api.grpc.pb.h"

namespace tessera::agent {

class HealthService final : public v1alpha1::DRAResourceHealth::Service {
 public:
  // `poll` bounds how long a stream takes to notice cancellation or stop().
  explicit HealthService(const DeviceHealthProvider& provider,
                         std::chrono::milliseconds poll = std::chrono::milliseconds(100))
      : provider_(provider), poll_(poll) {}

  grpc::Status NodeWatchResources(
      grpc::ServerContext* context, const v1alpha1::NodeWatchResourcesRequest* request,
      grpc::ServerWriter<v1alpha1::NodeWatchResourcesResponse>* writer) override;

  // Ends every open stream (within `poll`); called before the server shuts down.
  void stop() { stopping_.store(true); }

 private:
  const DeviceHealthProvider& provider_;
  const std::chrono::milliseconds poll_;
  std::atomic<bool> stopping_{false};
};

// The message for one snapshot (exposed for tests).
v1alpha1::NodeWatchResourcesResponse to_watch_response(const DeviceHealthSnapshot& snapshot);

}  // namespace tessera::agent

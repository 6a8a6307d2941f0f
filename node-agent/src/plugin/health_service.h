// The kubelet DRA health service in every version kubelet speaks, on the DRA socket next to
// DRAPlugin: v1alpha1.DRAResourceHealth (kubelet 1.34 to 1.39) and v1.DRAResourceHealth (kubelet
// 1.37 and later, which prefers it). Both have the same messages; `message` (field 5) carries the
// report's reason. NodeWatchResources streams the full device list at once and again on every
// change of the provider; the stream ends when kubelet cancels it or the server stops.
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "devices/device_health.h"
#include "kubelet/dra-health/v1/api.grpc.pb.h"
#include "kubelet/dra-health/v1alpha1/api.grpc.pb.h"

namespace grpc {
class Service;
}

namespace tessera::agent {

// The messages for one snapshot (exposed for tests).
v1alpha1::NodeWatchResourcesResponse to_watch_response(const DeviceHealthSnapshot& snapshot);
v1::NodeWatchResourcesResponse to_watch_response_v1(const DeviceHealthSnapshot& snapshot);

// kubelet cuts a longer message to 1021 characters and "..."; we send at most this many.
inline constexpr size_t kHealthMessageMaxLength = 1024;

class HealthService {
 public:
  // `poll` bounds how long a stream takes to notice cancellation or stop().
  explicit HealthService(const DeviceHealthProvider& provider,
                         std::chrono::milliseconds poll = std::chrono::milliseconds(100));
  HealthService(const HealthService&) = delete;
  HealthService& operator=(const HealthService&) = delete;

  // The gRPC services to register on the DRA socket, and their names as kubelet expects them in
  // the registration's supported_versions ("<package>.<service>"), newest first.
  std::vector<grpc::Service*> services();
  static std::vector<std::string> service_names();

  // Ends every open stream (within `poll`); called before the server shuts down.
  void stop() { stopping_.store(true); }

 private:
  // One stream loop for both versions: `write` sends one snapshot, false once kubelet is gone.
  template <typename Write>
  grpc::Status watch(grpc::ServerContext* context, Write write);

  class V1Alpha1 final : public v1alpha1::DRAResourceHealth::Service {
   public:
    explicit V1Alpha1(HealthService& owner) : owner_(owner) {}
    grpc::Status NodeWatchResources(
        grpc::ServerContext* context, const v1alpha1::NodeWatchResourcesRequest* request,
        grpc::ServerWriter<v1alpha1::NodeWatchResourcesResponse>* writer) override;

   private:
    HealthService& owner_;
  };
  class V1 final : public v1::DRAResourceHealth::Service {
   public:
    explicit V1(HealthService& owner) : owner_(owner) {}
    grpc::Status NodeWatchResources(
        grpc::ServerContext* context, const v1::NodeWatchResourcesRequest* request,
        grpc::ServerWriter<v1::NodeWatchResourcesResponse>* writer) override;

   private:
    HealthService& owner_;
  };

  const DeviceHealthProvider& provider_;
  const std::chrono::milliseconds poll_;
  std::atomic<bool> stopping_{false};
  V1Alpha1 v1alpha1_{*this};
  V1 v1_{*this};
};

}  // namespace tessera::agent

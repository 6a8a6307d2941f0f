// The kubelet plugin: registration on <registry dir>/<driver>-reg.sock, and the DRA services
// (v1, v1beta1, and the v1 and v1alpha1 health services when a health provider is given) on
// <plugins dir>/<driver>/dra.sock. Two gRPC servers over unix sockets.
//
// Given the agent pod's UID (a DaemonSet rolling update with maxSurge runs the old and the new pod
// side by side), kubelet's per-pod names instead: <driver>-<podUID>-reg.sock and
// <driver>/dra-<podUID>.sock, as the Go helper's RollingUpdate(uid) option names them
// (docs/node-agent.md, "Rolling updates"); each agent then replaces and removes only its own.
//
// Concurrency: gRPC's synchronous server runs each kubelet call on its own thread. Claims of one
// batch are prepared one after the other, in request order; different batches (kubelet prepares
// pods in parallel) run concurrently, so the ClaimPreparer must be thread-safe; calls for the same
// claim (a retried batch) wait for each other (claim_locks.h). Kubelet gives
// every call 45 s; a batch that takes longer is retried by kubelet, which is why prepare must be
// idempotent.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "devices/device_health.h"
#include "model/claim_locks.h"
#include "model/claim_preparer.h"
#include "registration_server.h"
#include "tessera/status.h"
#include "tessera/vgpu_config/driver_name.h"

namespace grpc {
class Server;
}

namespace tessera::agent {

class DraServiceV1;
class DraServiceV1Beta1;
class HealthService;

struct PluginServerOptions {
  std::string driver_name = vgpu_config::kDriverName;
  std::filesystem::path registry_dir = "/var/lib/kubelet/plugins_registry";
  std::filesystem::path plugins_dir = "/var/lib/kubelet/plugins";
  std::string pod_uid;  // empty: the fixed socket names (one agent per node at a time)
  PluginLogger log = log_to_stderr;
};

class PluginServer {
 public:
  // `health` may be null: the health service is then not served nor advertised.
  PluginServer(PluginServerOptions options, ClaimPreparer& preparer,
               const DeviceHealthProvider* health = nullptr);
  ~PluginServer();
  PluginServer(const PluginServer&) = delete;
  PluginServer& operator=(const PluginServer&) = delete;

  // Creates the DRA socket's folder, replaces stale sockets (a path that exists and is not a
  // socket is left alone: an error), serves DRA, then registration (kubelet must find the DRA
  // socket ready once it sees the registration socket). On error nothing is left serving:
  // kInvalidArgument for a socket path too long, kAlreadyExists for a path that is not a socket,
  // kFailedPrecondition when already started, kInternal otherwise.
  Status start();
  // Stops registration first (kubelet deregisters the plugin), then DRA; waits for calls in
  // flight; removes both sockets. Idempotent.
  void stop();

  std::filesystem::path registration_socket() const;
  std::filesystem::path dra_socket() const;  // absolute: kubelet dials what GetInfo says
  RegistrationState registration_state() const;
  const ClaimLocks& claim_locks() const { return claim_locks_; }

 private:
  PluginServerOptions options_;
  ClaimPreparer& preparer_;
  const DeviceHealthProvider* health_;
  ClaimLocks claim_locks_;  // shared by both DRA versions
  std::unique_ptr<DraServiceV1> dra_v1_;
  std::unique_ptr<DraServiceV1Beta1> dra_v1beta1_;
  std::unique_ptr<HealthService> health_service_;
  std::unique_ptr<RegistrationService> registration_;
  std::unique_ptr<grpc::Server> dra_server_;
  std::unique_ptr<grpc::Server> registration_server_;
};

// Removes `path` if it is a socket, leaves it if absent. Else why it could not: kAlreadyExists for
// a path that is something other than a socket, kInternal when it cannot be inspected or removed.
Status remove_stale_socket(const std::filesystem::path& path);

}  // namespace tessera::agent

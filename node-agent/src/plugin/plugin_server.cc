#include "plugin_server.h"

#include <sys/un.h>

#include <chrono>
#include <system_error>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "dra_service_v1.h"
#include "dra_service_v1beta1.h"
#include "health_service.h"

namespace tessera::agent {

namespace fs = std::filesystem;

namespace {

// How long stop() lets calls in flight finish before gRPC cancels them. Shorter than kubelet's
// 45 s: a prepare cut short is retried by kubelet against the next agent.
constexpr auto kShutdownGrace = std::chrono::seconds(10);

Status check_socket_path(const fs::path& path) {
  if (path.native().size() >= sizeof(sockaddr_un{}.sun_path)) {
    return invalid_argument("socket path " + path.native() + " is longer than " +
                            std::to_string(sizeof(sockaddr_un{}.sun_path) - 1) + " bytes");
  }
  return Status::ok();
}

std::unique_ptr<grpc::Server> serve(const fs::path& socket,
                                    const std::vector<grpc::Service*>& services) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + socket.native(), grpc::InsecureServerCredentials());
  for (grpc::Service* service : services) builder.RegisterService(service);
  return builder.BuildAndStart();
}

}  // namespace

Status remove_stale_socket(const fs::path& path) {
  std::error_code ec;
  fs::file_status status = fs::symlink_status(path, ec);
  if (status.type() == fs::file_type::not_found) return Status::ok();
  if (ec) return internal_error("cannot inspect " + path.native() + ": " + ec.message());
  if (status.type() != fs::file_type::socket) {
    return already_exists(path.native() + " exists and is not a socket; not replacing it");
  }
  if (!fs::remove(path, ec) && ec) {
    return internal_error("cannot remove stale socket " + path.native() + ": " + ec.message());
  }
  return Status::ok();
}

PluginServer::PluginServer(PluginServerOptions options, ClaimPreparer& preparer,
                           const DeviceHealthProvider* health)
    : options_(std::move(options)), preparer_(preparer), health_(health) {}

PluginServer::~PluginServer() {
  stop();
}

fs::path PluginServer::registration_socket() const {
  const std::string pod = options_.pod_uid.empty() ? "" : "-" + options_.pod_uid;
  return (fs::absolute(options_.registry_dir) / (options_.driver_name + pod + "-reg.sock"))
      .lexically_normal();
}

fs::path PluginServer::dra_socket() const {
  const std::string pod = options_.pod_uid.empty() ? "" : "-" + options_.pod_uid;
  return (fs::absolute(options_.plugins_dir) / options_.driver_name / ("dra" + pod + ".sock"))
      .lexically_normal();
}

RegistrationState PluginServer::registration_state() const {
  return registration_ ? registration_->state() : RegistrationState{};
}

Status PluginServer::start() {
  if (dra_server_) return failed_precondition("plugin server already started");
  const fs::path reg_socket = registration_socket();
  const fs::path dra = dra_socket();
  for (const fs::path& socket : {reg_socket, dra}) {
    TESSERA_RETURN_IF_ERROR(check_socket_path(socket));
  }
  std::error_code ec;
  for (const fs::path& dir : {reg_socket.parent_path(), dra.parent_path()}) {
    fs::create_directories(dir, ec);
    if (ec) return internal_error("cannot create " + dir.native() + ": " + ec.message());
  }
  for (const fs::path& socket : {reg_socket, dra}) {
    TESSERA_RETURN_IF_ERROR(remove_stale_socket(socket));
  }

  dra_v1_ = std::make_unique<DraServiceV1>(preparer_, claim_locks_);
  dra_v1beta1_ = std::make_unique<DraServiceV1Beta1>(preparer_, claim_locks_);
  std::vector<grpc::Service*> dra_services{dra_v1_.get(), dra_v1beta1_.get()};
  std::vector<std::string> versions{"v1.DRAPlugin", "v1beta1.DRAPlugin"};
  if (health_ != nullptr) {
    health_service_ = std::make_unique<HealthService>(*health_);
    for (grpc::Service* service : health_service_->services()) dra_services.push_back(service);
    for (std::string& name : HealthService::service_names()) versions.push_back(std::move(name));
  }
  dra_server_ = serve(dra, dra_services);
  if (!dra_server_) {
    stop();
    return internal_error("cannot serve the DRA services on " + dra.native());
  }

  registration_ = std::make_unique<RegistrationService>(
      RegistrationInfo{options_.driver_name, dra.native(), std::move(versions)}, options_.log);
  registration_server_ = serve(reg_socket, {registration_.get()});
  if (!registration_server_) {
    stop();
    return internal_error("cannot serve plugin registration on " + reg_socket.native());
  }
  return Status::ok();
}

void PluginServer::stop() {
  const auto deadline = std::chrono::system_clock::now() + kShutdownGrace;
  if (registration_server_) {
    registration_server_->Shutdown(deadline);
    registration_server_->Wait();
    registration_server_.reset();
    remove_stale_socket(registration_socket()).ignore();  // best effort: stopping regardless
  }
  if (health_service_) health_service_->stop();  // open health streams end at once
  if (dra_server_) {
    dra_server_->Shutdown(deadline);
    dra_server_->Wait();
    dra_server_.reset();
    remove_stale_socket(dra_socket()).ignore();
  }
  // The services outlive their servers: gRPC calls them until Wait() returns.
  health_service_.reset();
  dra_v1_.reset();
  dra_v1beta1_.reset();
  // registration_ is kept so registration_state() still answers after stop().
}

}  // namespace tessera::agent

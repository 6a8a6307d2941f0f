#include "views/agent_client.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "tessera/node/v1/node_api.grpc.pb.h"
#include "tessera/unique_fd.h"

namespace tessera::cli {

namespace v1 = tessera::node::v1;

namespace {

constexpr auto kCallDeadline = std::chrono::seconds(10);

std::string permission_advice(const std::string& path) {
  return "permission denied on " + path +
         ": the node agent's local API is root's; run as root (sudo tessera ...), or have the "
         "agent started with --api-socket-group <group> --api-socket-mode 0660 and join that "
         "group";
}

Status from_grpc(const grpc::Status& status, const std::string& path) {
  switch (status.error_code()) {
    case grpc::StatusCode::NOT_FOUND:
      return not_found(status.error_message());
    case grpc::StatusCode::UNAVAILABLE:
      return unavailable("the node agent at " + path +
                         " does not answer: " + status.error_message());
    case grpc::StatusCode::PERMISSION_DENIED:
      return failed_precondition(permission_advice(path));
    default:
      return internal_error("the node agent at " + path + ": " + status.error_message());
  }
}

}  // namespace

struct AgentClient::Channel {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::NodeApi::Stub> stub;
};

std::string api_socket_path(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* env = std::getenv("TESSERA_API_SOCKET"); env != nullptr && env[0] != '\0')
    return env;
  return kDefaultApiSocket;
}

Status check_api_socket(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR)
      return not_found("no node agent on this machine (no socket at " + path + ")");
    if (errno == EACCES) return failed_precondition(permission_advice(path));
    return internal_error("cannot inspect " + path + ": " + std::strerror(errno));
  }
  if (!S_ISSOCK(st.st_mode)) return unavailable(path + " is not a socket");
  sockaddr_un address{};
  if (path.size() >= sizeof address.sun_path)
    return failed_precondition("socket path " + path + " is too long");
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size());
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return internal_error(std::string("cannot make a unix socket: ") + std::strerror(errno));
  // A connect tells a permission problem (EACCES) and a dead agent (ECONNREFUSED) apart before
  // gRPC would hide both behind "unavailable".
  if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    if (errno == EACCES || errno == EPERM) return failed_precondition(permission_advice(path));
    if (errno == ECONNREFUSED)
      return unavailable("no node agent listens on " + path + " (a socket left by a stopped one)");
    return unavailable("cannot connect to " + path + ": " + std::strerror(errno));
  }
  return Status::ok();
}

Result<AgentClient> AgentClient::connect(const std::string& socket_path) {
  TESSERA_RETURN_IF_ERROR(check_api_socket(socket_path));
  auto channel = std::make_shared<Channel>();
  channel->channel =
      grpc::CreateChannel("unix://" + socket_path, grpc::InsecureChannelCredentials());
  channel->stub = v1::NodeApi::NewStub(channel->channel);
  return AgentClient(socket_path, std::move(channel));
}

Result<v1::ListSharesResponse> AgentClient::list_shares() const {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kCallDeadline);
  v1::ListSharesResponse response;
  const grpc::Status status =
      channel_->stub->ListShares(&context, v1::ListSharesRequest{}, &response);
  if (!status.ok()) return from_grpc(status, socket_path_);
  return response;
}

Result<v1::Share> AgentClient::get_share(const std::string& share) const {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kCallDeadline);
  v1::GetShareRequest request;
  request.set_share(share);
  v1::Share response;
  const grpc::Status status = channel_->stub->GetShare(&context, request, &response);
  if (!status.ok()) return from_grpc(status, socket_path_);
  return response;
}

Status AgentClient::watch_events(bool include_recent,
                                 const std::function<bool(const v1::Event&)>& on_event,
                                 const std::atomic<bool>& stop,
                                 const std::function<void()>& on_open) const {
  v1::WatchEventsRequest request;
  request.set_include_recent(include_recent);
  return watch(request, on_event, stop, on_open);
}

Status AgentClient::watch_recent(const std::function<bool(const v1::Event&)>& on_event,
                                 const std::atomic<bool>& stop) const {
  v1::WatchEventsRequest request;
  request.set_recent_only(true);
  return watch(request, on_event, stop, nullptr);
}

Status AgentClient::watch(const v1::WatchEventsRequest& request,
                          const std::function<bool(const v1::Event&)>& on_event,
                          const std::atomic<bool>& stop,
                          const std::function<void()>& on_open) const {
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<v1::Event>> reader =
      channel_->stub->WatchEvents(&context, request);
  // Read() blocks until an event comes: a watcher thread cancels the call when asked to stop.
  std::atomic<bool> finished{false};
  std::thread watcher([&] {
    while (!finished.load() && !stop.load())
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!finished.load()) context.TryCancel();
  });
  reader->WaitForInitialMetadata();
  if (on_open) on_open();
  v1::Event event;
  bool wanted = true;
  while (wanted && reader->Read(&event)) wanted = on_event(event);
  if (!wanted) context.TryCancel();
  const grpc::Status status = reader->Finish();
  finished.store(true);
  watcher.join();
  if (!wanted || stop.load()) return Status::ok();
  if (status.ok() && request.recent_only()) return Status::ok();
  if (status.ok()) return unavailable("the node agent at " + socket_path_ + " ended the stream");
  return from_grpc(status, socket_path_);
}

Result<v1::ListSharesResponse> list_agent_shares(const std::string& socket_path) {
  TESSERA_ASSIGN_OR_RETURN(AgentClient client, AgentClient::connect(api_socket_path(socket_path)));
  return client.list_shares();
}

}  // namespace tessera::cli

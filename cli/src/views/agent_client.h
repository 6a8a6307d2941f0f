// The node agent's local API (proto/tessera/node/v1/node_api.proto) as the CLI dials it: a unix
// socket, by default /var/lib/tessera/api.sock (--socket, or TESSERA_API_SOCKET). The socket is
// root's unless the agent was given --api-socket-group: a socket that exists but cannot be opened
// is said plainly (run as root, or ask for the group), a socket that does not exist means no agent
// on this machine, and the commands then show the local `tessera run` shares.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "tessera/node/v1/node_api.pb.h"
#include "tessera/status.h"

namespace tessera::cli {

inline constexpr const char* kDefaultApiSocket = "/var/lib/tessera/api.sock";

// `flag` when given, else $TESSERA_API_SOCKET when set, else kDefaultApiSocket.
std::string api_socket_path(const std::string& flag = "");

// Whether a client can dial `path`: ok; kNotFound when nothing is there (no agent); kUnavailable
// when it is no socket or no agent listens on it (a socket left by a dead one);
// kFailedPrecondition when this user may not open it ("run as root or ...").
Status check_api_socket(const std::string& path);

class AgentClient {
 public:
  // Checks the socket (check_api_socket) and makes a channel to it; nothing is sent yet.
  static Result<AgentClient> connect(const std::string& socket_path);

  Result<node::v1::ListSharesResponse> list_shares() const;
  // By share name or "<namespace>/<claim>"; kNotFound with the agent's message when none.
  Result<node::v1::Share> get_share(const std::string& share) const;
  // Streams events to `on_event` until it returns false, `stop` becomes true (checked a few times
  // a second), or the stream ends (the agent stopped: kUnavailable). `on_open` (when given) runs
  // once the agent accepted the stream.
  Status watch_events(bool include_recent,
                      const std::function<bool(const node::v1::Event&)>& on_event,
                      const std::atomic<bool>& stop,
                      const std::function<void()>& on_open = nullptr) const;

  // The events the agent still remembers, oldest first, then the end (ok).
  Status watch_recent(const std::function<bool(const node::v1::Event&)>& on_event,
                      const std::atomic<bool>& stop) const;

  const std::string& socket_path() const { return socket_path_; }

 private:
  struct Channel;
  Status watch(const node::v1::WatchEventsRequest& request,
               const std::function<bool(const node::v1::Event&)>& on_event,
               const std::atomic<bool>& stop, const std::function<void()>& on_open) const;
  AgentClient(std::string socket_path, std::shared_ptr<Channel> channel)
      : socket_path_(std::move(socket_path)), channel_(std::move(channel)) {}
  std::string socket_path_;
  std::shared_ptr<Channel> channel_;
};

// ListShares of the agent on `socket_path` (empty: api_socket_path()); kNotFound or kUnavailable
// when no agent answers there (the caller then reads the local shares). The shape of `tessera
// shares` and `tessera top`'s AgentLister.
Result<node::v1::ListSharesResponse> list_agent_shares(const std::string& socket_path);

}  // namespace tessera::cli

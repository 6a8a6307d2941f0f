// The local API (proto/tessera/node/v1/node_api.proto) on a unix socket: ListShares, GetShare and
// WatchEvents for tools on the node (`tessera shares`, `tessera top`, `tessera events`), and the
// loop that turns what changes between two snapshots of the node into events (snapshot_events.h).
//
// The socket: created in a fresh private folder (0700) beside it, given its mode (0600: root only)
// and group there, then renamed into place, so it is never reachable with looser permissions and a
// stale socket of a dead agent is replaced in one step. A path that is not a socket is left alone
// (an error). With a pod UID (the rolling update of docs/node-agent.md, two agents on one state
// folder) each agent serves its own api-<podUID>.sock, and api.sock is a hard link to the newest
// agent's: the new agent takes the name over at start, an agent that stops removes api.sock only
// while it is still its own, and an agent whose peer removed it links it again on its next pass.
// Tools always dial api.sock.
//
// Threads: gRPC's synchronous server, one thread per call; an open WatchEvents stream holds one
// and reads the event log (never blocking its publishers). stop() ends open streams within
// kStreamPoll and removes the socket.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "api/event_log.h"
#include "clock/clock.h"
#include "clock/periodic_loop.h"
#include "tessera/node/v1/node_api.pb.h"
#include "tessera/status.h"
#include "tessera/thread_annotations.h"

namespace grpc {
class Server;
}

namespace tessera::agent {

struct NodeApiServerOptions {
  std::filesystem::path socket = "/var/lib/tessera/api.sock";
  std::string pod_uid;  // given: api-<podUID>.sock beside `socket`, and `socket` linked to it
  mode_t mode = 0600;
  std::string group;  // given: the socket's group (mode 0660 lets that group's tools connect)
  Clock::duration poll_interval = std::chrono::seconds(1);
  // The node, stamped with the given wall time or, from the agent, with the time of the pass that
  // observed it (node_snapshot of the ObservationBoard's observation).
  std::function<tessera::node::v1::ListSharesResponse(std::int64_t unix_ms)> snapshot;
};

class NodeApiService;

class NodeApiServer {
 public:
  // `events` and `clock` outlive the server; the loop publishes into `events`.
  NodeApiServer(NodeApiServerOptions options, EventLog& events, Clock& clock = real_clock());
  ~NodeApiServer();
  NodeApiServer(const NodeApiServer&) = delete;
  NodeApiServer& operator=(const NodeApiServer&) = delete;

  // Takes the first snapshot (the baseline: what is there at start is no event), serves the
  // socket, starts the loop. kInvalidArgument for a socket path too long or an unknown group,
  // kAlreadyExists for a path that is something other than a socket, kFailedPrecondition when
  // already started, kInternal otherwise; nothing is left serving on error.
  Status start() TESSERA_EXCLUDES(snapshot_mutex_);
  // Ends open streams, stops serving, stops the loop, removes the socket (when still its own).
  // Idempotent.
  void stop();

  // One pass of the loop now: a snapshot, its events published, api.sock linked again if a peer
  // removed it. The loop calls it every poll_interval; tests may call it directly.
  void poll_once() TESSERA_EXCLUDES(snapshot_mutex_);
  std::uint64_t passes() const { return passes_.load(); }
  PeriodicLoop* loop() { return loop_.get(); }

  std::filesystem::path socket() const { return options_.socket; }
  std::filesystem::path own_socket() const;  // api-<podUID>.sock, or socket() without a pod UID

  // The latest snapshot (fresh), with cores_used_percent against the loop's last one.
  tessera::node::v1::ListSharesResponse snapshot_now() TESSERA_EXCLUDES(snapshot_mutex_);
  std::int64_t now_unix_ms() const;

 private:
  Status publish_socket(const std::filesystem::path& bound);
  void remove_own_sockets();

  NodeApiServerOptions options_;
  EventLog& events_;
  Clock& clock_;
  const std::int64_t wall_at_start_ms_;
  const Clock::time_point clock_at_start_;
  Mutex snapshot_mutex_;  // the loop and ListShares both read the node
  tessera::node::v1::ListSharesResponse last_ TESSERA_GUARDED_BY(snapshot_mutex_);
  // The loop's snapshot before last_ with an earlier stamp (cores_used_percent of a snapshot of
  // the same moment as last_).
  tessera::node::v1::ListSharesResponse before_last_ TESSERA_GUARDED_BY(snapshot_mutex_);
  std::atomic<std::uint64_t> passes_{0};
  ino_t socket_inode_ = 0;
  dev_t socket_device_ = 0;
  std::unique_ptr<NodeApiService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<PeriodicLoop> loop_;
};

// How often an open WatchEvents stream looks for events and for the end of the call.
inline constexpr std::chrono::milliseconds kStreamPoll{200};

// Ok when every path the server binds and publishes fits a unix socket address, else
// kInvalidArgument naming the one too long.
Status check_socket_paths(const NodeApiServerOptions& options);

// "0600" -> 0600 (octal, at most 0777), or kInvalidArgument naming the text.
Result<mode_t> parse_socket_mode(const std::string& text);

}  // namespace tessera::agent

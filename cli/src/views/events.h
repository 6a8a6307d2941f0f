// `tessera events [--follow] [-o text|json]`: what happened to the GPU shares of this machine. From
// the node agent's local API when one runs here (its recent events, then, with --follow, new ones
// as they come); without an agent, from the local `tessera run` shares: a snapshot of them once a
// second, each diffed with the last by the agent's own function
// (tessera/node_events/snapshot_events.h), so the events are the same kinds with the same words.
// The local shares keep no history: without an agent only --follow shows anything.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <iosfwd>
#include <string>

#include "tessera/node/v1/node_api.pb.h"
#include "tessera/status.h"
#include "views/namespace_filter.h"

namespace CLI {
class App;
}

namespace tessera::cli {

// The local `tessera run` shares as a node snapshot (views/local_node.h's read_local_node).
using LocalSnapshot = std::function<Result<node::v1::ListSharesResponse>()>;

struct EventsOptions {
  bool follow = false;
  std::string output = "text";  // "text", "wide" (with sequence and fields), "json" (one object
                                // per line) or "yaml" (one document per event)
  NamespaceFilter namespaces;   // -n: only events of that namespace (those with none are not)
  std::string socket;           // --socket; empty: api_socket_path()
  std::chrono::milliseconds local_interval{1000};  // between local snapshots
};

// One event as one line (no newline): "time  kind  share/claim/pod  message" for text; wide puts
// the sequence number first and the fields (key=value, sorted by key) last; the event's JSON for
// json: one line, as `tessera shares -o json` writes a message (message_to_json: every field,
// 64-bit integers as numbers); for yaml, the same as a YAML document ("---" first, no newline at
// the end).
std::string format_event(const node::v1::Event& event, const std::string& output);

// Runs the command: events to `out`, notes (which source, why not the agent) to `err`, until the
// recent ones are printed (no --follow) or `stop` becomes true. `local` may be null (no local
// reader in this build). Ok, or why not (the agent refused, a permission problem).
Status run_events(const EventsOptions& options, const LocalSnapshot& local, std::ostream& out,
                  std::ostream& err, const std::atomic<bool>& stop);

// Registers `events` on `app`; its callback runs the command (SIGINT/SIGTERM end --follow) and
// exits with its status. `local` as for run_events.
void add_events_command(CLI::App& app, LocalSnapshot local = nullptr);

}  // namespace tessera::cli

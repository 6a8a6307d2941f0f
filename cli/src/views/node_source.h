// Where `tessera shares` and `tessera top` get the node from: the node agent's local API when an
// agent answers, else the `tessera run` shares of this machine (views/local_node.h). `--local`
// skips the agent. Both give a Snapshot of one shape.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tessera/node/v1/node_api.pb.h"
#include "tessera/status.h"
#include "views/local_node.h"
#include "views/namespace_filter.h"

namespace CLI {
class App;
}

namespace tessera::cli {

struct Snapshot {
  node::v1::ListSharesResponse node;  // a share that could not be read whole has a read_error
  std::string source;                 // "agent" or "local"
};

struct SourceOptions {
  bool local_only = false;   // --local
  std::string agent_socket;  // --socket; empty: the agent's default
  LocalNodeOptions local;    // --share-root, --share-dir
  NamespaceFilter namespaces;
};

// The agent's ListShares over its socket (empty: its default). kUnavailable or kNotFound when no
// agent listens there: then the local shares are read.
using AgentLister =
    std::function<Result<node::v1::ListSharesResponse>(const std::string& agent_socket)>;
using SnapshotSource = std::function<Result<Snapshot>()>;

// The agent's client when this build has one, else an empty function (local shares only).
AgentLister default_agent_lister();

// A source that asks `agent` first (unless local_only or no agent), then the local folders; only
// the shares options.namespaces accepts are kept (`tessera run` shares have none).
SnapshotSource make_snapshot_source(SourceOptions options, AgentLister agent);

// --local, --socket, --share-root, --share-dir and the namespace options on `command`, into
// `options`.
void add_source_options(CLI::App& command, SourceOptions& options, bool short_namespace = true);

}  // namespace tessera::cli

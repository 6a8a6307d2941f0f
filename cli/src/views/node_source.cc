#include "views/node_source.h"
#include "views/agent_client.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <utility>

namespace tessera::cli {

AgentLister default_agent_lister() {
  return list_agent_shares;
}

SnapshotSource make_snapshot_source(SourceOptions options, AgentLister agent) {
  return [options = std::move(options), agent = std::move(agent)]() -> Result<Snapshot> {
    Snapshot snapshot;
    // Share folders named on the command line are local by definition.
    const bool local_only = options.local_only || !options.local.share_root.empty() ||
                            !options.local.share_folders.empty();
    const auto keep_filtered = [&options](node::v1::ListSharesResponse& node) {
      auto* shares = node.mutable_shares();
      shares->erase(std::remove_if(shares->begin(), shares->end(),
                                   [&options](const node::v1::Share& share) {
                                     return !options.namespaces.accepts(share.namespace_());
                                   }),
                    shares->end());
    };
    if (!local_only && agent) {
      Result<node::v1::ListSharesResponse> answered = agent(options.agent_socket);
      if (answered.is_ok()) {
        snapshot.node = std::move(answered).value();
        snapshot.source = "agent";
        keep_filtered(snapshot.node);
        return snapshot;
      }
      const StatusCode code = answered.status().code();
      // No agent on this machine (a workstation): its `tessera run` shares are all there is.
      if (code != StatusCode::kUnavailable && code != StatusCode::kNotFound)
        return answered.status().with_context("node agent");
    }
    TESSERA_ASSIGN_OR_RETURN(node::v1::ListSharesResponse local, read_local_node(options.local));
    snapshot.node = std::move(local);
    snapshot.source = "local";
    keep_filtered(snapshot.node);
    return snapshot;
  };
}

void add_source_options(CLI::App& command, SourceOptions& options, bool short_namespace) {
  command.add_flag("--local", options.local_only,
                   "Read the `tessera run` shares of this machine, without asking the node agent");
  command.add_option("--socket,--agent-socket", options.agent_socket,
                     "The node agent's local API socket (default: $TESSERA_API_SOCKET, else the "
                     "agent's own)");
  command.add_option("--share-root", options.local.share_root,
                     "Folder of the local shares (default: $XDG_RUNTIME_DIR/tessera/shares, or "
                     "/tmp/tessera-<uid>/shares)");
  command.add_option("--share-dir", options.local.share_folders,
                     "Read this share folder (as `tessera run --share-dir` keeps it) instead of "
                     "the share root; repeatable");
  add_namespace_options(command, options.namespaces, short_namespace);
}

}  // namespace tessera::cli

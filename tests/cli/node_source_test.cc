// Where the views get the node from: the agent when it answers, else the local share folders.
#include "views/node_source.h"

#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <filesystem>

#include "tessera/share_folder/limits_writer.h"

namespace tessera::cli {
namespace {

namespace fs = std::filesystem;
namespace v1 = tessera::node::v1;

class NodeSource : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/tessera-node-source-XXXXXX";
    root_ = mkdtemp(pattern);
    shares_ = root_ + "/xdg/tessera/shares";
    fs::create_directories(shares_ + "/local-share");
    ASSERT_EQ(share_folder::write_limits(shares_ + "/local-share", {{"GPU-aaaa", 1ull << 30, 100}})
                  .message(),
              "");
    options_.local.nvml_library = "";
    setenv("XDG_RUNTIME_DIR", (root_ + "/xdg").c_str(), 1);  // as a workstation finds them
  }
  void TearDown() override { fs::remove_all(root_); }

  // An agent that answers `answer` and counts its calls (and the socket asked for).
  AgentLister agent(Result<v1::ListSharesResponse> answer) {
    return [this, answer](const std::string& socket) -> Result<v1::ListSharesResponse> {
      ++agent_calls_;
      asked_socket_ = socket;
      return answer;
    };
  }
  static v1::ListSharesResponse agent_node() {
    v1::ListSharesResponse node;
    node.set_node("from-agent");
    node.add_shares()->set_name("tenants-claim");
    return node;
  }
  std::string root_;
  std::string shares_;
  SourceOptions options_;
  int agent_calls_ = 0;
  std::string asked_socket_;
};

TEST_F(NodeSource, TheAgentsAnswerWhenItHasOne) {
  options_.agent_socket = "/run/tessera.sock";
  const Result<Snapshot> snapshot = make_snapshot_source(options_, agent(agent_node()))();
  ASSERT_TRUE(snapshot.is_ok());
  EXPECT_EQ(snapshot->source, "agent");
  EXPECT_EQ(snapshot->node.node(), "from-agent");
  EXPECT_EQ(asked_socket_, "/run/tessera.sock");
}

TEST_F(NodeSource, TheLocalSharesWithoutAnAgent) {
  for (const Status& no_agent : {unavailable("nothing listens"), not_found("no socket")}) {
    const Result<Snapshot> snapshot = make_snapshot_source(options_, agent(no_agent))();
    ASSERT_TRUE(snapshot.is_ok()) << snapshot.status().message();
    EXPECT_EQ(snapshot->source, "local");
    ASSERT_EQ(snapshot->node.shares_size(), 1);
    EXPECT_EQ(snapshot->node.shares(0).name(), "local-share");
  }
  // A build without the agent's client reads the local shares at once.
  const Result<Snapshot> snapshot = make_snapshot_source(options_, AgentLister())();
  ASSERT_TRUE(snapshot.is_ok());
  EXPECT_EQ(snapshot->source, "local");
}

TEST_F(NodeSource, AnAgentThatIsThereButRefusesIsAnError) {
  const Result<Snapshot> snapshot = make_snapshot_source(
      options_, agent(failed_precondition("/var/lib/tessera/api.sock: permission denied")))();
  ASSERT_FALSE(snapshot.is_ok());
  EXPECT_EQ(snapshot.status().message(),
            "node agent: /var/lib/tessera/api.sock: permission denied");
}

TEST_F(NodeSource, LocalOrNamedFoldersSkipTheAgent) {
  options_.local.share_root = shares_;  // --share-root
  Result<Snapshot> snapshot = make_snapshot_source(options_, agent(agent_node()))();
  ASSERT_TRUE(snapshot.is_ok());
  EXPECT_EQ(snapshot->source, "local");
  options_.local.share_root.clear();
  options_.local_only = true;  // --local
  snapshot = make_snapshot_source(options_, agent(agent_node()))();
  ASSERT_TRUE(snapshot.is_ok());
  EXPECT_EQ(snapshot->source, "local");
  EXPECT_EQ(agent_calls_, 0);
}

TEST_F(NodeSource, ANamespaceKeepsOnlyItsShares) {
  v1::ListSharesResponse node = agent_node();
  node.mutable_shares(0)->set_namespace_("tenants");
  node.add_shares()->set_namespace_("research");
  node.add_shares()->set_name("tessera-run-share");  // no namespace
  options_.namespaces.name = "tenants";
  Result<Snapshot> snapshot = make_snapshot_source(options_, agent(node))();
  ASSERT_TRUE(snapshot.is_ok());
  ASSERT_EQ(snapshot->node.shares_size(), 1);
  EXPECT_EQ(snapshot->node.shares(0).name(), "tenants-claim");
  // The local shares have no namespace: none is in one.
  options_.local_only = true;
  snapshot = make_snapshot_source(options_, agent(node))();
  ASSERT_TRUE(snapshot.is_ok());
  EXPECT_EQ(snapshot->source, "local");
  EXPECT_EQ(snapshot->node.shares_size(), 0);
  // Every namespace (the default, or -A): all of them.
  options_.local_only = false;
  options_.namespaces = {};
  snapshot = make_snapshot_source(options_, agent(node))();
  ASSERT_TRUE(snapshot.is_ok());
  EXPECT_EQ(snapshot->node.shares_size(), 3);
}

TEST_F(NodeSource, OptionsParseIntoTheSourceOptions) {
  CLI::App app;
  SourceOptions parsed;
  add_source_options(app, parsed);
  app.parse("--share-dir /a --share-dir /b --share-root /r --socket /s --local", false);
  EXPECT_TRUE(parsed.local_only);
  EXPECT_EQ(parsed.agent_socket, "/s");
  EXPECT_EQ(parsed.local.share_root, "/r");
  EXPECT_EQ(parsed.local.share_folders, (std::vector<std::string>{"/a", "/b"}));
  EXPECT_EQ(parsed.namespaces.name, "");
  app.parse("-n tenants", false);
  EXPECT_EQ(parsed.namespaces.name, "tenants");
  app.parse("-A", false);
  EXPECT_TRUE(parsed.namespaces.all);
  EXPECT_THROW(app.parse("-A -n tenants", false), CLI::ExcludesError);
  // An empty namespace names none: refused, never read as "every namespace".
  EXPECT_THROW(app.parse(std::vector<std::string>{"", "--namespace"}), CLI::ValidationError);
  // `tessera top -n` is its iteration count: --namespace only.
  CLI::App top;
  SourceOptions top_options;
  add_source_options(top, top_options, /*short_namespace=*/false);
  top.parse("--namespace tenants", false);
  EXPECT_EQ(top_options.namespaces.name, "tenants");
  EXPECT_THROW(top.parse("-n tenants", false), CLI::ParseError);
}

}  // namespace
}  // namespace tessera::cli

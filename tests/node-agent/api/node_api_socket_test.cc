// The local API server's socket and stream, with a scripted snapshot source: the socket's mode and
// group, its removal, a stale socket replaced and a non-socket refused, two agents of a rolling
// update on one state folder, GetShare's NOT_FOUND, and a subscriber that never reads.
#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "api/event_log.h"
#include "api/node_api_server.h"
#include "tessera/node/v1/node_api.grpc.pb.h"

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;
namespace v1 = tessera::node::v1;

// How long a test waits for what must happen (a stop, a publisher past a stalled stream): liveness
// only, far beyond what it takes.
constexpr auto kLiveness = std::chrono::seconds(30);

std::unique_ptr<v1::NodeApi::Stub> stub_for(const fs::path& socket) {
  return v1::NodeApi::NewStub(
      grpc::CreateChannel("unix://" + socket.native(), grpc::InsecureChannelCredentials()));
}

v1::ListSharesResponse one_share_node(std::int64_t unix_ms) {
  v1::ListSharesResponse node;
  node.set_node("node-a");
  node.set_sampled_unix_ms(unix_ms);
  v1::Share* share = node.add_shares();
  share->set_name("uid-1-gpu-0-a");
  share->set_namespace_("tenants");
  share->set_claim("alpha");
  return node;
}

struct stat stat_of(const fs::path& path) {
  struct stat st {};
  EXPECT_EQ(lstat(path.c_str(), &st), 0) << path;
  return st;
}

// A socket file nobody listens on: what a killed agent leaves.
void leave_stale_socket(const fs::path& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof address.sun_path - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  close(fd);
}

bool answers(const fs::path& socket) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::ListSharesResponse response;
  return stub_for(socket)->ListShares(&context, {}, &response).ok() && response.node() == "node-a";
}

class NodeApiSocket : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("agent-api-socket-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  NodeApiServerOptions options(const std::string& pod_uid = "") {
    NodeApiServerOptions options;
    options.socket = dir_ / "api.sock";
    options.pod_uid = pod_uid;
    options.snapshot = one_share_node;
    return options;
  }

  fs::path dir_;
  SimulatedClock clock_;
  EventLog events_{clock_};
};

TEST_F(NodeApiSocket, IsRootOnlyAndRemovedOnStop) {
  NodeApiServer server(options(), events_, clock_);
  ASSERT_EQ(server.start().message(), "");
  const struct stat st = stat_of(dir_ / "api.sock");
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(st.st_uid, getuid());
  EXPECT_TRUE(answers(dir_ / "api.sock"));
  // The private folder it was bound in is gone.
  for (const auto& entry : fs::directory_iterator(dir_))
    EXPECT_EQ(entry.path().filename(), "api.sock");
  EXPECT_EQ(server.start().code(), StatusCode::kFailedPrecondition);
  server.stop();
  EXPECT_FALSE(fs::exists(fs::symlink_status(dir_ / "api.sock")));
  server.stop();  // idempotent
}

TEST_F(NodeApiSocket, ModeAndGroupForOperatorsTools) {
  NodeApiServerOptions given = options();
  given.mode = 0660;
  const struct group* own = getgrgid(getgid());
  ASSERT_NE(own, nullptr);
  given.group = own->gr_name;
  NodeApiServer server(given, events_, clock_);
  ASSERT_EQ(server.start().message(), "");
  const struct stat st = stat_of(dir_ / "api.sock");
  EXPECT_EQ(st.st_mode & 07777, 0660u);
  EXPECT_EQ(st.st_gid, getgid());
  server.stop();

  given.group = "no-such-group-tessera";
  NodeApiServer unknown(given, events_, clock_);
  EXPECT_EQ(unknown.start().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(fs::symlink_status(dir_ / "api.sock")));
  EXPECT_EQ(parse_socket_mode("0640").value(), 0640u);
  EXPECT_EQ(parse_socket_mode("rw").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parse_socket_mode("01777").status().code(), StatusCode::kInvalidArgument);
}

TEST_F(NodeApiSocket, AStaleSocketIsReplacedAndANonSocketRefused) {
  leave_stale_socket(dir_ / "api.sock");
  {
    NodeApiServer server(options(), events_, clock_);
    ASSERT_EQ(server.start().message(), "");
    EXPECT_TRUE(answers(dir_ / "api.sock"));
  }
  std::ofstream(dir_ / "api.sock") << "not a socket";
  NodeApiServer server(options(), events_, clock_);
  EXPECT_EQ(server.start().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(std::ifstream(dir_ / "api.sock").peek(), 'n');  // left alone
}

TEST_F(NodeApiSocket, TwoAgentsOfARollingUpdateDoNotFightOverTheName) {
  const std::string old_uid = "11111111-1111-1111-1111-111111111111";
  const std::string new_uid = "22222222-2222-2222-2222-222222222222";
  NodeApiServer old_agent(options(old_uid), events_, clock_);
  ASSERT_EQ(old_agent.start().message(), "");
  EXPECT_EQ(stat_of(dir_ / "api.sock").st_ino, stat_of(old_agent.own_socket()).st_ino);
  // The new pod takes the name over; the old one keeps serving its own.
  auto new_agent = std::make_unique<NodeApiServer>(options(new_uid), events_, clock_);
  ASSERT_EQ(new_agent->start().message(), "");
  EXPECT_EQ(stat_of(dir_ / "api.sock").st_ino, stat_of(new_agent->own_socket()).st_ino);
  EXPECT_TRUE(answers(dir_ / "api.sock"));
  EXPECT_TRUE(answers(old_agent.own_socket()));
  // A rollback: the new pod goes first and takes the name with it; the old one links it again on
  // its next pass.
  new_agent.reset();
  EXPECT_FALSE(fs::exists(fs::symlink_status(dir_ / "api.sock")));
  old_agent.poll_once();
  EXPECT_EQ(stat_of(dir_ / "api.sock").st_ino, stat_of(old_agent.own_socket()).st_ino);
  EXPECT_TRUE(answers(dir_ / "api.sock"));

  // The usual order: the new one starts, the old one stops and leaves the new one's name alone.
  NodeApiServer newer(options(new_uid), events_, clock_);
  ASSERT_EQ(newer.start().message(), "");
  old_agent.stop();
  EXPECT_FALSE(fs::exists(fs::symlink_status(dir_ / ("api-" + old_uid + ".sock"))));
  EXPECT_EQ(stat_of(dir_ / "api.sock").st_ino, stat_of(newer.own_socket()).st_ino);
  EXPECT_TRUE(answers(dir_ / "api.sock"));
  newer.stop();
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(NodeApiSocket, GetShareByNameOrClaimElseNotFound) {
  NodeApiServer server(options(), events_, clock_);
  ASSERT_EQ(server.start().message(), "");
  auto stub = stub_for(dir_ / "api.sock");
  for (const std::string key : {"uid-1-gpu-0-a", "tenants/alpha"}) {
    grpc::ClientContext context;
    v1::GetShareRequest request;
    request.set_share(key);
    v1::Share share;
    ASSERT_TRUE(stub->GetShare(&context, request, &share).ok()) << key;
    EXPECT_EQ(share.claim(), "alpha");
  }
  grpc::ClientContext context;
  v1::GetShareRequest request;
  request.set_share("tenants/nope");
  v1::Share share;
  const grpc::Status status = stub->GetShare(&context, request, &share);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(status.error_message(),
            "no share \"tenants/nope\" on node node-a (by share name or <namespace>/<claim>); "
            "shares here: uid-1-gpu-0-a (tenants/alpha)");
}

TEST_F(NodeApiSocket, ASubscriberThatNeverReadsDoesNotBlockPublishers) {
  NodeApiServer server(options(), events_, clock_);
  ASSERT_EQ(server.start().message(), "");
  auto stub = stub_for(dir_ / "api.sock");
  grpc::ClientContext context;
  v1::WatchEventsRequest request;
  auto reader = stub->WatchEvents(&context, request);
  reader->WaitForInitialMetadata();
  // Far more than the log holds and than the stream's flow-control window takes, unread.
  constexpr int kEvents = 50000;
  const auto start = std::chrono::steady_clock::now();
  auto publishing = std::async(std::launch::async, [&] {
    for (int i = 0; i < kEvents; ++i) {
      v1::Event event;
      event.set_kind(v1::Event::THROTTLED);
      event.set_message(std::string(200, 'x'));
      events_.publish(std::move(event));
    }
  });
  // A publisher that waited for this subscriber would never finish: bounded (liveness: it takes
  // tens of ms), the stream cancelled after the bound so that the test fails instead of hanging.
  const bool published = publishing.wait_for(kLiveness) == std::future_status::ready;
  if (!published) context.TryCancel();
  publishing.wait();
  std::printf(
      "FIGURE %d events published past a stalled subscriber in %.1f ms\n", kEvents,
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  ASSERT_TRUE(published) << "publishing waited for the subscriber that never reads";
  // The subscriber reads at last: what the stream buffered, then one marker for what it lost.
  v1::Event event;
  bool missed = false;
  uint64_t last = 0;
  while (!missed && reader->Read(&event)) {
    if (event.kind() == v1::Event::EVENTS_MISSED) {
      missed = true;
      EXPECT_GT(std::stoull(event.fields().at("missed")), 0u);
    } else {
      EXPECT_EQ(event.sequence(), last + 1);  // in order, without gaps until the marker
      last = event.sequence();
    }
  }
  EXPECT_TRUE(missed);
  if (reader->Read(&event)) {
    EXPECT_GT(event.sequence(), last + 1);
  }
  context.TryCancel();
  reader->Finish().ok();
  const auto stopping = std::chrono::steady_clock::now();
  server.stop();  // ends within the shutdown grace (2 s) at the latest
  EXPECT_LT(std::chrono::steady_clock::now() - stopping, kLiveness);
}

TEST_F(NodeApiSocket, RecentOnlyReplaysAndEnds) {
  NodeApiServer server(options(), events_, clock_);
  ASSERT_EQ(server.start().message(), "");
  for (int i = 0; i < 3; ++i) {
    v1::Event event;
    event.set_kind(v1::Event::PREPARED);
    events_.publish(std::move(event));
  }
  auto stub = stub_for(dir_ / "api.sock");
  grpc::ClientContext context;
  v1::WatchEventsRequest request;
  request.set_recent_only(true);
  auto reader = stub->WatchEvents(&context, request);
  v1::Event event;
  int count = 0;
  while (reader->Read(&event)) ++count;
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(count, 3);
}

TEST_F(NodeApiSocket, AServerStopsWithAStreamOpen) {
  NodeApiServer server(options(), events_, clock_);
  ASSERT_EQ(server.start().message(), "");
  auto stub = stub_for(dir_ / "api.sock");
  grpc::ClientContext context;
  auto reader = stub->WatchEvents(&context, v1::WatchEventsRequest{});
  reader->WaitForInitialMetadata();
  const auto start = std::chrono::steady_clock::now();
  server.stop();  // ends within the shutdown grace (2 s) at the latest
  EXPECT_LT(std::chrono::steady_clock::now() - start, kLiveness);
  v1::Event event;
  EXPECT_FALSE(reader->Read(&event));
  reader->Finish().ok();
}

}  // namespace
}  // namespace tessera::agent

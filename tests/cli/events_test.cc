// `tessera events`: the binary against a local API server (the agent's own NodeApiServer on a unix
// socket), with --follow until SIGINT and without; and without an agent, events derived from
// scripted snapshots of the local shares (what views/local_node.h's reader produces).
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "api/event_log.h"
#include "api/node_api_server.h"
#include "views/agent_client.h"
#include "views/events.h"
#include "views/shares_view.h"

namespace tessera::cli {
namespace {

namespace fs = std::filesystem;
namespace v1 = tessera::node::v1;
using nlohmann::json;

// `tessera events ...` with stdout on a pipe, read line by line.
class EventsProcess {
 public:
  explicit EventsProcess(std::vector<std::string> args) {
    args.insert(args.begin(), {TESSERA_BIN, "events"});
    std::vector<char*> argv;
    for (auto& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], 1);
      close(fds[0]);
      close(fds[1]);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(fds[1]);
    out_ = fds[0];
  }
  ~EventsProcess() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    close(out_);
  }
  // The next line of its output ("" at its end).
  std::string line() {
    while (buffer_.find('\n') == std::string::npos) {
      char chunk[4096];
      const ssize_t n = read(out_, chunk, sizeof chunk);
      if (n <= 0) return "";
      buffer_.append(chunk, static_cast<size_t>(n));
    }
    const size_t newline = buffer_.find('\n');
    std::string text = buffer_.substr(0, newline);
    buffer_.erase(0, newline + 1);
    return text;
  }
  void signal(int number) { kill(pid_, number); }
  // Its exit status (waits up to 10 s; -1 when it did not exit).
  int wait_exit() {
    for (int i = 0; i < 1000; ++i) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  bool exited_ = false;
  std::string buffer_;
};

v1::Event event_of(v1::Event::Kind kind, const std::string& claim, const std::string& message) {
  v1::Event event;
  event.set_kind(kind);
  event.set_share(claim + "-uid-gpu-0");
  event.set_namespace_("tenants");
  event.set_claim(claim);
  event.set_message(message);
  return event;
}

class EventsAgainstAnAgent : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("cli-events-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    agent::NodeApiServerOptions options;
    options.socket = dir_ / "api.sock";
    options.snapshot = [](std::int64_t unix_ms) {
      v1::ListSharesResponse node;
      node.set_node("node-a");
      node.set_sampled_unix_ms(unix_ms);
      return node;
    };
    server_ = std::make_unique<agent::NodeApiServer>(options, events_, clock_);
    ASSERT_EQ(server_->start().message(), "");
  }
  void TearDown() override {
    server_.reset();
    fs::remove_all(dir_);
  }
  std::string socket() const { return (dir_ / "api.sock").string(); }

  fs::path dir_;
  agent::SimulatedClock clock_;
  agent::EventLog events_{clock_};
  std::unique_ptr<agent::NodeApiServer> server_;
};

TEST_F(EventsAgainstAnAgent, FollowPrintsRecentThenNewEventsAsJsonLinesUntilInterrupted) {
  events_.publish(event_of(v1::Event::PREPARED, "alpha", "share of tenants/alpha prepared"));
  events_.publish(event_of(v1::Event::ALLOCATION_DENIED, "alpha", "1 allocation denied"));
  EventsProcess tessera({"--follow", "-o", "json", "--socket", socket()});
  const json first = json::parse(tessera.line());
  const json second = json::parse(tessera.line());
  EXPECT_EQ(first["kind"], "PREPARED");
  EXPECT_EQ(first["sequence"], 1);  // a number, as in `tessera shares -o json`
  EXPECT_EQ(first["claim"], "alpha");
  EXPECT_EQ(first["namespace"], "tenants");
  EXPECT_EQ(second["kind"], "ALLOCATION_DENIED");
  // A new event reaches the running command.
  events_.publish(event_of(v1::Event::UNPREPARED, "alpha", "share of tenants/alpha is gone"));
  const json third = json::parse(tessera.line());
  EXPECT_EQ(third["kind"], "UNPREPARED");
  EXPECT_EQ(third["sequence"], 3);
  tessera.signal(SIGINT);
  EXPECT_EQ(tessera.wait_exit(), 0);
}

TEST_F(EventsAgainstAnAgent, WithoutFollowPrintsTheRecentEventsOneLineEachAndExits) {
  events_.publish(event_of(v1::Event::PREPARED, "alpha", "share of tenants/alpha prepared"));
  v1::Event health;
  health.set_kind(v1::Event::HEALTH_CHANGED);
  health.set_gpu_uuid("GPU-1");
  health.set_message("GPU 0 (GPU-1) is unhealthy: xid-79");
  events_.publish(health);
  EventsProcess tessera({"--socket", socket()});
  const std::string prepared = tessera.line();
  const std::string changed = tessera.line();
  EXPECT_EQ(tessera.line(), "");  // and no more
  EXPECT_EQ(tessera.wait_exit(), 0);
  // time  kind  subject  message
  EXPECT_NE(prepared.find("Z  prepared  tenants/alpha share alpha-uid-gpu-0  share of "
                          "tenants/alpha prepared"),
            std::string::npos)
      << prepared;
  EXPECT_NE(changed.find("  health_changed  GPU-1  GPU 0 (GPU-1) is unhealthy: xid-79"),
            std::string::npos)
      << changed;
}

TEST_F(EventsAgainstAnAgent, ANamespaceKeepsItsEventsAndYamlIsOneDocumentEach) {
  events_.publish(event_of(v1::Event::PREPARED, "alpha", "share of tenants/alpha prepared"));
  v1::Event other = event_of(v1::Event::PREPARED, "gamma", "share of research/gamma prepared");
  other.set_namespace_("research");
  events_.publish(other);
  v1::Event health;  // a GPU's: in no namespace
  health.set_kind(v1::Event::HEALTH_CHANGED);
  health.set_gpu_uuid("GPU-1");
  events_.publish(health);
  EventsProcess tessera({"--socket", socket(), "-n", "research", "-o", "yaml"});
  std::string text;
  for (std::string line = tessera.line(); !line.empty(); line = tessera.line()) text += line + "\n";
  EXPECT_EQ(tessera.wait_exit(), 0);
  ASSERT_EQ(text.rfind("---\n", 0), 0u) << text;
  EXPECT_EQ(text.find("---", 1), std::string::npos) << text;  // one document: gamma's
  const Result<nlohmann::ordered_json> document = yaml_to_json(text.substr(4));
  ASSERT_TRUE(document.is_ok()) << document.status().message();
  EXPECT_EQ((*document)["claim"], "gamma");
  EXPECT_EQ((*document)["sequence"], 2);
  EXPECT_EQ((*document)["kind"], "PREPARED");

  EventsProcess all({"--socket", socket(), "-A"});
  int lines = 0;
  while (!all.line().empty()) ++lines;
  EXPECT_EQ(lines, 3);
  EXPECT_EQ(all.wait_exit(), 0);
}

TEST(EventsFormat, WideHasTheSequenceFirstAndTheFieldsLast) {
  v1::Event event = event_of(v1::Event::ALLOCATION_DENIED, "beta", "1 allocation denied");
  event.set_sequence(7);
  event.set_unix_ms(1764604800123);
  (*event.mutable_fields())["total"] = "3";
  (*event.mutable_fields())["denied"] = "1";
  EXPECT_EQ(format_event(event, "wide"),
            "7  2025-12-01T16:00:00.123Z  allocation_denied  tenants/beta share beta-uid-gpu-0  1 "
            "allocation denied  denied=1  total=3");
  const std::string yaml = format_event(event, "yaml");
  EXPECT_EQ(yaml.rfind("---\nsequence: 7\n", 0), 0u) << yaml;
  EXPECT_NE(yaml.back(), '\n');
}

TEST(EventsFormat, TextLineHasTheTimeKindSubjectAndMessage) {
  v1::Event event = event_of(v1::Event::THROTTLED, "beta", "launches waited 0.250 s");
  event.set_unix_ms(1764604800123);  // 2025-12-01T16:00:00.123Z
  event.set_pod("tenants/trainer");
  EXPECT_EQ(format_event(event, "text"),
            "2025-12-01T16:00:00.123Z  throttled  tenants/beta share beta-uid-gpu-0 pod "
            "tenants/trainer  launches waited 0.250 s");
  const json line = json::parse(format_event(event, "json"));
  EXPECT_EQ(line["kind"], "THROTTLED");
  EXPECT_EQ(line["pod"], "tenants/trainer");
}

TEST(EventsFormat, JsonWritesNumbersAsNumbersAsSharesJsonDoes) {
  v1::Event event = event_of(v1::Event::ALLOCATION_DENIED, "beta", "1 allocation denied");
  event.set_sequence(7);
  event.set_unix_ms(1764604800123);
  event.set_host_pid(4242);
  (*event.mutable_fields())["denied"] = "1";
  const std::string text = format_event(event, "json");
  EXPECT_EQ(text.find('\n'), std::string::npos) << text;  // one object a line
  const json line = json::parse(text);
  EXPECT_EQ(line["sequence"], 7u);
  EXPECT_EQ(line["unix_ms"], 1764604800123);
  EXPECT_EQ(line["host_pid"], 4242);
  EXPECT_EQ(line["kind"], "ALLOCATION_DENIED");
  EXPECT_EQ(line["fields"]["denied"], "1");
  EXPECT_EQ(line, json::parse(message_to_json(event).dump()));  // the CLI's one JSON printer
}

TEST(AgentSocket, AbsentIsNoAgentAndADeadSocketIsUnavailable) {
  const fs::path dir = fs::temp_directory_path() / ("cli-socket-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const Status absent = check_api_socket((dir / "api.sock").string());
  EXPECT_EQ(absent.code(), StatusCode::kNotFound);
  EXPECT_EQ(absent.message(),
            "no node agent on this machine (no socket at " + (dir / "api.sock").string() + ")");
  // A socket left by a dead agent: nobody listens.
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, (dir / "api.sock").c_str(), sizeof address.sun_path - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  close(fd);
  EXPECT_EQ(check_api_socket((dir / "api.sock").string()).code(), StatusCode::kUnavailable);
  EXPECT_EQ(AgentClient::connect((dir / "api.sock").string()).status().code(),
            StatusCode::kUnavailable);
  EXPECT_EQ(list_agent_shares((dir / "api.sock").string()).status().code(),
            StatusCode::kUnavailable);
  fs::remove_all(dir);
  setenv("TESSERA_API_SOCKET", "/run/elsewhere.sock", 1);
  EXPECT_EQ(api_socket_path(), "/run/elsewhere.sock");
  EXPECT_EQ(api_socket_path("/given.sock"), "/given.sock");
  unsetenv("TESSERA_API_SOCKET");
  EXPECT_EQ(api_socket_path(), kDefaultApiSocket);
}

// Without an agent: the local shares, snapshot by snapshot (scripted here as the local reader
// would read them), diffed by the agent's function.
TEST(EventsWithoutAnAgent, FollowDerivesEventsFromLocalSnapshots) {
  std::vector<v1::ListSharesResponse> script(4);
  for (size_t i = 0; i < script.size(); ++i) script[i].set_sampled_unix_ms(1000 + 1000 * i);
  for (size_t i : {1, 2}) {
    v1::Share* share = script[i].add_shares();
    share->set_name("run-1234");
    share->set_source("tessera-run");
    share->add_devices()->set_gpu_uuid("GPU-1");
  }
  script[2].mutable_shares(0)->set_allocations_denied(2);
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  LocalSnapshot local = [&]() -> Result<v1::ListSharesResponse> {
    const size_t i = next.fetch_add(1);
    if (i + 1 >= script.size()) stop.store(true);
    return script[std::min(i, script.size() - 1)];
  };
  EventsOptions options;
  options.follow = true;
  options.socket = "/nonexistent/api.sock";
  options.local_interval = std::chrono::milliseconds(10);
  std::ostringstream out, err;
  ASSERT_EQ(run_events(options, local, out, err, stop).message(), "");
  EXPECT_NE(err.str().find("no node agent on this machine"), std::string::npos) << err.str();
  std::istringstream lines(out.str());
  std::vector<std::string> printed;
  for (std::string line; std::getline(lines, line);) printed.push_back(line);
  ASSERT_EQ(printed.size(), 3u) << out.str();
  EXPECT_NE(printed[0].find("  prepared  share run-1234  share run-1234 prepared on GPU-1"),
            std::string::npos)
      << printed[0];
  EXPECT_NE(printed[1].find(
                "  allocation_denied  share run-1234  2 allocations of share run-1234 denied"),
            std::string::npos)
      << printed[1];
  EXPECT_NE(printed[2].find("  unprepared  share run-1234  share run-1234 is gone"),
            std::string::npos)
      << printed[2];

  // Without --follow the local shares have no past to show: said on stderr, nothing printed.
  options.follow = false;
  std::ostringstream none, note;
  next = 0;
  ASSERT_EQ(run_events(options, local, none, note, stop).message(), "");
  EXPECT_EQ(none.str(), "");
  EXPECT_NE(note.str().find("keep no history"), std::string::npos);
  // No local reader in this build: said.
  std::ostringstream ignored;
  EXPECT_EQ(run_events(options, nullptr, ignored, ignored, stop).code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace tessera::cli

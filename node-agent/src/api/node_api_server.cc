#include "api/node_api_server.h"

#include <grp.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <system_error>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "api/node_snapshot.h"
#include "tessera/log.h"
#include "tessera/node/v1/node_api.grpc.pb.h"
#include "tessera/node_events/snapshot_events.h"

namespace tessera::agent {

namespace fs = std::filesystem;
namespace v1 = tessera::node::v1;

namespace {

// How long stop() lets unary calls in flight finish before gRPC cancels them.
constexpr auto kShutdownGrace = std::chrono::seconds(2);

std::string errno_text() {
  return std::strerror(errno);
}

// Ok when `path` is absent or a socket; kAlreadyExists when it is something else.
Status replaceable(const fs::path& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::ok();
    return internal_error("cannot inspect " + path.native() + ": " + errno_text());
  }
  if (!S_ISSOCK(st.st_mode))
    return already_exists(path.native() + " exists and is not a socket; not replacing it");
  return Status::ok();
}

// The private folder a socket is bound in before it is renamed into place; removed on scope exit.
class BindFolder {
 public:
  static Result<BindFolder> create(const fs::path& beside) {
    std::string pattern = (beside.parent_path() / ".api-XXXXXX").native();
    if (mkdtemp(pattern.data()) == nullptr)  // mode 0700
      return internal_error("cannot create a folder beside " + beside.native() + ": " +
                            errno_text());
    BindFolder folder;
    folder.path_ = pattern;
    return folder;
  }
  BindFolder() = default;
  BindFolder(BindFolder&& other) noexcept : path_(std::exchange(other.path_, {})) {}
  BindFolder& operator=(BindFolder&&) = delete;
  ~BindFolder() {
    if (path_.empty()) return;
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  fs::path socket() const { return path_ / "api.sock"; }

 private:
  fs::path path_;
};

}  // namespace

Status check_socket_paths(const NodeApiServerOptions& options) {
  std::vector<fs::path> paths{options.socket};
  if (!options.pod_uid.empty())
    paths.push_back(options.socket.parent_path() / ("api-" + options.pod_uid + ".sock"));
  // The private folder's socket (see BindFolder) is this much longer than api.sock.
  paths.push_back(options.socket.parent_path() / ".api-XXXXXX" / "api.sock");
  // gRPC refuses paths near sun_path's 108 bytes (one of 106 was refused here): a margin.
  constexpr size_t kLongest = sizeof(sockaddr_un{}.sun_path) - 8;
  for (const fs::path& path : paths)
    if (path.native().size() > kLongest)
      return invalid_argument("socket path " + path.native() + " is longer than " +
                              std::to_string(kLongest) + " bytes");
  return Status::ok();
}

Result<mode_t> parse_socket_mode(const std::string& text) {
  char* end = nullptr;
  const unsigned long mode = std::strtoul(text.c_str(), &end, 8);
  if (text.empty() || *end != '\0' || mode > 0777)
    return invalid_argument("socket mode \"" + text + "\": must be octal, like 0600 or 0660");
  return static_cast<mode_t>(mode);
}

class NodeApiService final : public v1::NodeApi::Service {
 public:
  NodeApiService(NodeApiServer& server, EventLog& events) : server_(server), events_(events) {}

  grpc::Status ListShares(grpc::ServerContext*, const v1::ListSharesRequest*,
                          v1::ListSharesResponse* response) override {
    *response = server_.snapshot_now();
    return grpc::Status::OK;
  }

  grpc::Status GetShare(grpc::ServerContext*, const v1::GetShareRequest* request,
                        v1::Share* response) override {
    const v1::ListSharesResponse snapshot = server_.snapshot_now();
    if (const v1::Share* share = find_share(snapshot, request->share())) {
      *response = *share;
      return grpc::Status::OK;
    }
    std::string known;
    for (const v1::Share& share : snapshot.shares()) {
      known += known.empty() ? "" : ", ";
      known += share.name();
      if (!share.claim().empty()) known += " (" + share.namespace_() + "/" + share.claim() + ")";
    }
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        "no share \"" + request->share() + "\" on node " + snapshot.node() +
                            " (by share name or <namespace>/<claim>); shares here: " +
                            (known.empty() ? "none" : known));
  }

  grpc::Status WatchEvents(grpc::ServerContext* context, const v1::WatchEventsRequest* request,
                           grpc::ServerWriter<v1::Event>* writer) override {
    EventLog::Cursor cursor = events_.cursor(request->include_recent() || request->recent_only());
    if (request->recent_only()) {
      // What is held now, then the end: events published meanwhile are not waited for.
      const std::uint64_t last = events_.last_sequence();
      while (cursor.last < last) {
        for (const v1::Event& event : events_.read(cursor, std::chrono::milliseconds(0)))
          if (!writer->Write(event)) return grpc::Status::OK;
      }
      return grpc::Status::OK;
    }
    // Headers now, so a client sees the stream open before the first event.
    writer->SendInitialMetadata();
    while (!stopping_.load() && !context->IsCancelled()) {
      for (const v1::Event& event : events_.read(cursor, kStreamPoll))
        if (!writer->Write(event)) return grpc::Status::OK;  // the client went away
    }
    return grpc::Status::OK;
  }

  void stop() { stopping_.store(true); }

 private:
  NodeApiServer& server_;
  EventLog& events_;
  std::atomic<bool> stopping_{false};
};

NodeApiServer::NodeApiServer(NodeApiServerOptions options, EventLog& events, Clock& clock)
    : options_(std::move(options)),
      events_(events),
      clock_(clock),
      wall_at_start_ms_(std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count()),
      clock_at_start_(clock.now()) {}

NodeApiServer::~NodeApiServer() {
  stop();
}

std::int64_t NodeApiServer::now_unix_ms() const {
  return wall_at_start_ms_ +
         std::chrono::duration_cast<std::chrono::milliseconds>(clock_.now() - clock_at_start_)
             .count();
}

fs::path NodeApiServer::own_socket() const {
  if (options_.pod_uid.empty()) return options_.socket;
  return options_.socket.parent_path() / ("api-" + options_.pod_uid + ".sock");
}

v1::ListSharesResponse NodeApiServer::snapshot_now() {
  v1::ListSharesResponse now = options_.snapshot(now_unix_ms());
  MutexLock lock(snapshot_mutex_);
  // The loop's last snapshot may be of this same observation (the agent's snapshots are of the
  // last pass): the rate is then taken against the one before it.
  fill_cores_used(now.sampled_unix_ms() == last_.sampled_unix_ms() ? before_last_ : last_, now);
  return now;
}

void NodeApiServer::poll_once() {
  v1::ListSharesResponse now = options_.snapshot(now_unix_ms());
  std::vector<v1::Event> changes;
  {
    MutexLock lock(snapshot_mutex_);
    const bool same_moment = now.sampled_unix_ms() == last_.sampled_unix_ms();
    fill_cores_used(same_moment ? before_last_ : last_, now);
    changes = tessera::node_events::snapshot_events(last_, now);
    if (!same_moment) before_last_ = std::move(last_);
    last_ = std::move(now);
  }
  for (v1::Event& event : changes) events_.publish(std::move(event));
  // A peer of a rolling update that stopped took api.sock with it: the name is ours again (link
  // creates it only where it is absent, so a live newer peer keeps it).
  if (!options_.pod_uid.empty() && server_ &&
      link(own_socket().c_str(), options_.socket.c_str()) == 0)
    log::info("local API socket linked again (the peer agent that held it stopped)",
              {{"socket", options_.socket.native()}, {"own_socket", own_socket().native()}});
  passes_.fetch_add(1);
}

Status NodeApiServer::publish_socket(const fs::path& bound) {
  if (chmod(bound.c_str(), options_.mode) != 0)
    return internal_error("cannot set the mode of " + bound.native() + ": " + errno_text());
  if (!options_.group.empty()) {
    std::vector<char> buffer(16384);
    struct group entry {};
    struct group* found = nullptr;
    if (getgrnam_r(options_.group.c_str(), &entry, buffer.data(), buffer.size(), &found) != 0 ||
        found == nullptr)
      return invalid_argument("local API socket group \"" + options_.group + "\": no such group");
    if (chown(bound.c_str(), static_cast<uid_t>(-1), found->gr_gid) != 0)
      return internal_error("cannot give " + bound.native() + " to group " + options_.group + ": " +
                            errno_text());
  }
  const fs::path own = own_socket();
  if (rename(bound.c_str(), own.c_str()) != 0)
    return internal_error("cannot move the socket to " + own.native() + ": " + errno_text());
  struct stat st {};
  if (lstat(own.c_str(), &st) != 0)
    return internal_error("cannot inspect " + own.native() + ": " + errno_text());
  socket_inode_ = st.st_ino;
  socket_device_ = st.st_dev;
  if (!options_.pod_uid.empty()) {
    // Take api.sock over: a second name made in the private folder, renamed over the old one.
    if (link(own.c_str(), bound.c_str()) != 0 ||
        rename(bound.c_str(), options_.socket.c_str()) != 0)
      return internal_error("cannot link " + options_.socket.native() + " to " + own.native() +
                            ": " + errno_text());
  }
  return Status::ok();
}

Status NodeApiServer::start() {
  if (server_) return failed_precondition("local API server already started");
  if (!options_.snapshot) return invalid_argument("local API server without a snapshot source");
  TESSERA_RETURN_IF_ERROR(check_socket_paths(options_));
  for (const fs::path& path : {options_.socket, own_socket()})
    TESSERA_RETURN_IF_ERROR(replaceable(path));
  std::error_code ec;
  fs::create_directories(options_.socket.parent_path(), ec);
  if (ec)
    return internal_error("cannot create " + options_.socket.parent_path().native() + ": " +
                          ec.message());
  {
    MutexLock lock(snapshot_mutex_);
    last_ = options_.snapshot(now_unix_ms());
  }
  TESSERA_ASSIGN_OR_RETURN(BindFolder folder, BindFolder::create(options_.socket));
  const fs::path bound = folder.socket();

  service_ = std::make_unique<NodeApiService>(*this, events_);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + bound.native(), grpc::InsecureServerCredentials());
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (!server_) {
    service_.reset();
    return internal_error("cannot serve the local API on " + bound.native());
  }
  if (Status published = publish_socket(bound); !published.is_ok()) {
    stop();
    return published;
  }
  auto loop = PeriodicLoop::start(clock_, options_.poll_interval, [this] { poll_once(); });
  if (!loop.is_ok()) {
    stop();
    return loop.status().with_context("cannot start the local API's event loop");
  }
  loop_ = std::move(loop).value();
  return Status::ok();
}

void NodeApiServer::remove_own_sockets() {
  // Only what is still ours: a newer agent of a rolling update may own api.sock by now.
  for (const fs::path& path : {options_.socket, own_socket()}) {
    struct stat st {};
    if (lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode) && st.st_ino == socket_inode_ &&
        st.st_dev == socket_device_)
      unlink(path.c_str());
  }
}

void NodeApiServer::stop() {
  loop_.reset();                   // joins: no pass runs past here
  if (service_) service_->stop();  // open streams end within kStreamPoll
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() + kShutdownGrace);
    server_->Wait();
    server_.reset();
    if (socket_inode_ != 0) remove_own_sockets();
    socket_inode_ = 0;
  }
  service_.reset();  // after Wait(): gRPC calls the service until then
}

}  // namespace tessera::agent

#include "backends/mps_backend.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "backends/command_runner.h"
#include "tessera/file_io.h"

namespace tessera::agent {
namespace fs = std::filesystem;

namespace {

constexpr char kPidFile[] = "/nvidia-cuda-mps-control.pid";  // the daemon writes it (MPS docs)

// Alive and not a zombie, with the command name of the control program (a recycled pid is not).
bool process_is(int pid, const std::string& program) {
  if (pid <= 0) return false;
  char line[1024];
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  if (!read_small_file(path.c_str(), line, sizeof line).ok()) return false;
  const std::string stat = line;
  const auto open = stat.find('('), close = stat.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close + 2 >= stat.size())
    return false;
  const char state = stat[close + 2];
  if (state == 'Z' || state == 'X') return false;
  // comm is the program's file name cut to 15 bytes.
  const std::string comm = stat.substr(open + 1, close - open - 1);
  return comm == fs::path(program).filename().string().substr(0, 15);
}

// The pid file is in the pipe folder, which the share's containers mount read-write: a tenant
// could write another share's daemon pid there. The daemon this share owns was started with this
// share's pipe folder in its environment; any other process is not acted on.
bool daemon_of(int pid, const std::string& program, const std::string& pipe_dir) {
  if (!process_is(pid, program)) return false;
  std::ifstream environ_file("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  const std::string wanted = "CUDA_MPS_PIPE_DIRECTORY=" + pipe_dir;
  std::string entry;
  while (std::getline(environ_file, entry, '\0'))
    if (entry == wanted) return true;
  return false;
}

Status make_dir(const std::string& path, mode_t mode) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) return internal_error("cannot create " + path + ": " + ec.message());
  if (chmod(path.c_str(), mode) != 0)
    return internal_error("cannot chmod " + path + ": " + std::strerror(errno));
  return Status::ok();
}

}  // namespace

std::string MpsBackend::folder(const std::string& share_name) const {
  return options_.root + "/" + share_name;
}

uint32_t MpsBackend::thread_percentage(const ShareSpec& share) {
  // 0 % would leave the share no threads at all; MPS needs at least 1.
  return std::max<uint32_t>(1, share.cores.value_or(100));
}

std::vector<std::string> MpsBackend::environment(const std::string& share_name,
                                                 const std::string& uuid) const {
  std::vector<std::string> env{"CUDA_MPS_PIPE_DIRECTORY=" + pipe_dir(share_name),
                               "CUDA_MPS_LOG_DIRECTORY=" + log_dir(share_name)};
  if (!uuid.empty()) env.push_back("CUDA_VISIBLE_DEVICES=" + uuid);
  return env;
}

// The pid in a file of the tenant-writable pipe folder: never through a symlink, never waiting on a
// FIFO, a regular file only. 0 when there is none.
namespace {
int read_pid_file(const std::string& path) {
  char text[32];
  const ReadResult got = read_small_file(path.c_str(), text, sizeof text, FileSource::kUntrusted);
  return got.ok() && got.length > 0 ? std::atoi(text) : 0;
}
}  // namespace

int MpsBackend::daemon_pid(const std::string& share_name) const {
  const std::string pipe = pipe_dir(share_name);
  const int pid = read_pid_file(pipe + kPidFile);
  if (daemon_of(pid, options_.control, pipe)) return pid;
  // The pid file is missing or names another process (a tenant can write it): look for the
  // daemon itself, the control program started with this share's pipe folder.
  std::error_code ec;
  for (const auto& item : fs::directory_iterator("/proc", ec)) {
    const std::string name = item.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const int candidate = std::atoi(name.c_str());
    if (daemon_of(candidate, options_.control, pipe)) return candidate;
  }
  return 0;
}

std::vector<std::string> MpsBackend::share_folders() const {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& item : fs::directory_iterator(options_.root, ec))
    if (item.is_directory(ec)) names.push_back(item.path().filename().string());
  return names;
}

MpsDaemonState MpsBackend::inspect(const std::string& share_name) const {
  MpsDaemonState state;
  state.pid = daemon_pid(share_name);
  state.running = state.pid != 0;
  if (!state.running) return state;
  const Command query({options_.control}, environment(share_name, ""),
                      "get_default_active_thread_percentage\n", options_.timeout);
  const Result<CommandResult> result = run_command(query);
  if (Status answered = command_status(query, result); !answered.is_ok()) {
    state.error = answered;
    return state;
  }
  std::istringstream words(result->output);
  double value = 0;
  if (words >> value) {
    state.active_thread_percentage = value;
  } else {
    state.error = unavailable(describe(query) + ": unexpected answer " + result->output);
  }
  return state;
}

Status MpsBackend::set_limits(const ShareSpec& share) const {
  const std::string name = share.name();
  std::string input =
      "set_default_active_thread_percentage " + std::to_string(thread_percentage(share)) + "\n";
  if (share.memory_bytes) {
    const uint64_t mebibytes = std::max<uint64_t>(1, *share.memory_bytes >> 20);
    input += "set_default_device_pinned_mem_limit " + share.uuid + " " + std::to_string(mebibytes) +
             "M\n";
  }
  const Command command({options_.control}, environment(name, share.uuid), input, options_.timeout);
  TESSERA_RETURN_IF_ERROR(run_checked(command).with_context("MPS limits for share " + name));
  // The control program answers errors on stdout with exit 0 in some versions: check the value.
  const MpsDaemonState state = inspect(name);
  TESSERA_RETURN_IF_ERROR(state.error.with_context("MPS daemon of share " + name));
  if (!state.active_thread_percentage ||
      std::lround(*state.active_thread_percentage) != thread_percentage(share))
    return internal_error("MPS daemon of share " + name + " reports active thread percentage " +
                          (state.active_thread_percentage
                               ? std::to_string(*state.active_thread_percentage)
                               : std::string("none")) +
                          ", expected " + std::to_string(thread_percentage(share)));
  return Status::ok();
}

Status MpsBackend::start(const ShareSpec& share) {
  const std::string name = share.name();
  for (const auto& [path, mode] : {std::pair{folder(name), 0755},
                                   {pipe_dir(name), 0755},
                                   {log_dir(name), 0755},
                                   {shm_dir(name), 01777}})
    TESSERA_RETURN_IF_ERROR(make_dir(path, static_cast<mode_t>(mode)));
  if (daemon_pid(name) == 0) {
    std::error_code ec;
    fs::remove(pipe_dir(name) + kPidFile, ec);  // a dead daemon's
    Command launch({options_.control, "-d"}, environment(name, share.uuid), "", options_.timeout);
    launch.output_file = log_dir(name) + "/agent-launch.log";
    if (options_.private_dev_shm) launch.private_dev_shm = shm_dir(name);
    TESSERA_RETURN_IF_ERROR(
        run_checked(launch).with_context("cannot start the MPS daemon of share " + name));
    // -d returns once the daemon forked; its pid file appears shortly after.
    const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
    while (daemon_pid(name) == 0) {
      if (std::chrono::steady_clock::now() > deadline)
        return unavailable("the MPS daemon of share " + name + " did not write " + pipe_dir(name) +
                           kPidFile + " within " + std::to_string(options_.timeout.count()) +
                           " ms (see " + log_dir(name) + ")");
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  // A daemon that is still starting (found by its process before it answers: e.g. one whose
  // start a killed agent left running) refuses control commands for a moment: ask again until
  // the timeout, then say why.
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  for (;;) {
    Status status = set_limits(share);
    if (status.is_ok() || daemon_pid(name) == 0 || std::chrono::steady_clock::now() > deadline)
      return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

Status MpsBackend::stop(const std::string& share_name) {
  if (const int pid = daemon_pid(share_name); pid != 0) {
    const Command quit({options_.control}, environment(share_name, ""), "quit\n", options_.timeout);
    const Status quit_status = run_checked(quit);
    const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
    auto running = [&] { return daemon_of(pid, options_.control, pipe_dir(share_name)); };
    while (running() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (running()) {
      // It ignored quit (or the command failed): the share is being torn down regardless.
      kill(pid, SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (running())
        return unavailable("the MPS daemon of share " + share_name + " (pid " +
                           std::to_string(pid) + ") did not stop" +
                           (quit_status.is_ok() ? "" : ": " + quit_status.message()));
    }
  }
  std::error_code ec;
  fs::remove_all(folder(share_name), ec);
  if (ec) return internal_error("cannot remove " + folder(share_name) + ": " + ec.message());
  return Status::ok();
}

Status MpsBackend::prepare(const ShareSpec& share, const HolderLookup&) {
  return start(share);
}

Status MpsBackend::unprepare(const ShareSpec& share, const HolderLookup&) {
  return stop(share.name());
}

std::vector<DriftItem> MpsBackend::reconcile(const std::string&, const ShareSpec& share) {
  std::vector<DriftItem> found;
  auto record = [&found](const std::string& subject, const std::string& problem,
                         const std::string& action, const Status& repair) {
    found.push_back({subject, problem, repair.is_ok() ? action : "", repair.message()});
  };
  const std::string subject = "share " + share.name();
  const MpsDaemonState daemon = inspect(share.name());
  const uint32_t wanted = thread_percentage(share);
  if (!daemon.running) {
    record(subject, "MPS daemon not running", "restarted", start(share));
  } else if (!daemon.error.is_ok()) {
    record(subject, "MPS daemon not answering (" + daemon.error.message() + ")", "limits set again",
           start(share));
  } else if (!daemon.active_thread_percentage ||
             std::lround(*daemon.active_thread_percentage) != wanted) {
    record(subject,
           "MPS active thread percentage is " +
               std::to_string(std::lround(daemon.active_thread_percentage.value_or(-1))) +
               ", expected " + std::to_string(wanted),
           "limits set again", start(share));
  }
  return found;
}

std::vector<DriftItem> MpsBackend::remove_orphans(const std::vector<ShareSpec>& named,
                                                  const ReserveOrphan& reserve) {
  std::set<std::string> shares;  // MPS folders are per share
  for (const auto& share : named) shares.insert(share.name());
  std::vector<DriftItem> found;
  for (const auto& name : share_folders()) {
    if (shares.count(name)) continue;
    // A prepare naming the share since the pass began keeps its daemon; one naming it from now
    // on waits until this stop is done.
    const OrphanReservation reserved = reserve(name);
    if (!reserved) continue;
    found.push_back({"share " + name, "MPS folder no claim names", "daemon stopped, removed",
                     stop(name).message()});
  }
  return found;
}

}  // namespace tessera::agent

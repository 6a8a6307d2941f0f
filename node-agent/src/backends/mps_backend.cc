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

// The CUDA_MPS_PIPE_DIRECTORY a process was started with, "" when it has none.
std::string pipe_dir_of(int pid) {
  std::ifstream environ_file("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  constexpr std::string_view kName = "CUDA_MPS_PIPE_DIRECTORY=";
  std::string entry;
  while (std::getline(environ_file, entry, '\0'))
    if (entry.starts_with(kName)) return entry.substr(kName.size());
  return "";
}

// The pid file is in the pipe folder, which the share's containers mount read-write: a tenant
// could write another share's daemon pid there. The daemon this share owns was started with this
// share's pipe folder in its environment; any other process is not acted on.
bool daemon_of(int pid, const std::string& program, const std::string& pipe_dir) {
  return process_is(pid, program) && pipe_dir_of(pid) == pipe_dir;
}

// Field 22 of /proc/<pid>/stat: when the process started, in clock ticks after boot; 0 when it is
// gone. With the boot id, what tells a process from a later one given the same pid.
uint64_t start_time_of(int pid) {
  if (pid <= 0) return 0;
  char line[1024];
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  if (!read_small_file(path.c_str(), line, sizeof line).ok()) return 0;
  const char* close = std::strrchr(line, ')');
  if (close == nullptr) return 0;
  std::istringstream fields(close + 1);
  std::string field;
  for (int index = 3; index <= 22 && fields >> field; ++index)
    if (index == 22) return std::strtoull(field.c_str(), nullptr, 10);
  return 0;
}

std::string boot_id() {
  char text[64];
  const ReadResult got =
      read_small_file("/proc/sys/kernel/random/boot_id", text, sizeof text, FileSource::kTrusted);
  std::string id = got.ok() ? std::string(text, got.length) : "";
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
  return id.empty() ? "-" : id;
}

// Alive and not a zombie.
bool is_running(int pid) {
  char line[1024];
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  if (!read_small_file(path.c_str(), line, sizeof line).ok()) return false;
  const char* close = std::strrchr(line, ')');
  return close != nullptr && close[1] == ' ' && close[2] != 'Z' && close[2] != 'X' &&
         close[2] != '\0';
}

// A small file's text, "" when it cannot be read.
std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Every process's pid, from /proc.
std::vector<int> all_pids() {
  std::vector<int> pids;
  std::error_code ec;
  for (const auto& item : fs::directory_iterator("/proc", ec)) {
    const std::string name = item.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    pids.push_back(std::atoi(name.c_str()));
  }
  return pids;
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

MpsBackend::Found MpsBackend::find_daemon(const std::string& share_name) const {
  const std::string pipe = pipe_dir(share_name);
  // The share folder (not the pipe folder inside it) is the agent's alone: its record is trusted.
  char text[256];
  const ReadResult got =
      read_small_file(record_path(share_name).c_str(), text, sizeof text, FileSource::kTrusted);
  if (got.ok()) {
    std::istringstream fields(std::string(text, got.length));
    int pid = 0;
    uint64_t started = 0;
    std::string boot;
    if (fields >> pid >> started >> boot) {
      // A launch removes the record first, so it names the last daemon started for the share: when
      // that one is gone, so is the share's daemon (whatever now runs under its pid).
      if (boot == boot_id() && started != 0 && start_time_of(pid) == started &&
          daemon_of(pid, options_.control, pipe))
        return {pid, Found::kRecord};
      return {};
    }
  }
  // No record: the pid file is a hint only (a tenant can write it); else look for the daemon
  // itself, the control program started with this share's pipe folder.
  const int hinted = read_pid_file(pipe + kPidFile);
  if (daemon_of(hinted, options_.control, pipe)) return {hinted, Found::kPidFile};
  // Possibly not the daemon: a control command or a launch (-d) in flight has the same name and
  // environment. Good enough to act on now, never recorded.
  for (const int candidate : all_pids())
    if (daemon_of(candidate, options_.control, pipe)) return {candidate, Found::kScan};
  return {};
}

int MpsBackend::daemon_pid(const std::string& share_name) const {
  return find_daemon(share_name).pid;
}

Status MpsBackend::record_daemon(const std::string& share_name, int pid) const {
  const uint64_t started = start_time_of(pid);
  if (started == 0)
    return unavailable("the MPS daemon of share " + share_name + " (pid " + std::to_string(pid) +
                       ") exited");
  const std::string text =
      std::to_string(pid) + " " + std::to_string(started) + " " + boot_id() + "\n";
  if (const int error = write_file_atomically(record_path(share_name).c_str(), text); error != 0)
    return internal_error("cannot write " + record_path(share_name) + ": " + std::strerror(error));
  return Status::ok();
}

std::string MpsBackend::cgroup(const std::string& share_name) const {
  return options_.daemon_cgroup.empty() ? "" : options_.daemon_cgroup + "/" + share_name;
}

std::vector<std::pair<std::string, int>> MpsBackend::running_daemons() const {
  std::vector<std::pair<std::string, int>> found;
  const std::string prefix = options_.root + "/";
  constexpr std::string_view kPipe = "/pipe";
  for (const int pid : all_pids()) {
    if (!process_is(pid, options_.control)) continue;
    const std::string pipe = pipe_dir_of(pid);
    if (!pipe.starts_with(prefix) || !pipe.ends_with(kPipe)) continue;
    const std::string name = pipe.substr(prefix.size(), pipe.size() - prefix.size() - kPipe.size());
    if (!name.empty() && name.find('/') == std::string::npos) found.emplace_back(name, pid);
  }
  return found;
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
  const Found found = find_daemon(name);
  int pid = found.pid;
  if (pid == 0) {
    std::error_code ec;
    fs::remove(record_path(name), ec);          // names a daemon that is gone
    fs::remove(pipe_dir(name) + kPidFile, ec);  // a dead daemon's
    if (!options_.daemon_cgroup.empty()) TESSERA_RETURN_IF_ERROR(make_dir(cgroup(name), 0755));
    Command launch({options_.control, "-d"}, environment(name, share.uuid), "", options_.timeout);
    launch.output_file = log_dir(name) + "/agent-launch.log";
    if (options_.private_dev_shm) launch.private_dev_shm = shm_dir(name);
    // Not the agent's: its own session, and its own cgroup outside the agent's container.
    launch.new_session = true;
    launch.cgroup = cgroup(name);
    TESSERA_RETURN_IF_ERROR(
        run_checked(launch).with_context("cannot start the MPS daemon of share " + name));
    // -d returns once the daemon forked; its pid file appears shortly after.
    const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
    while ((pid = daemon_pid(name)) == 0) {
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
    if (status.is_ok()) break;
    if (daemon_pid(name) == 0 || std::chrono::steady_clock::now() > deadline) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const Result<bool> adopted = adopt(name);
  return adopted.is_ok() ? Status::ok() : adopted.status();
}

Result<bool> MpsBackend::adopt(const std::string& share_name) {
  const Found found = find_daemon(share_name);
  // A process found by its name and environment alone may be a command in flight: left alone.
  if (found.source != Found::kRecord && found.source != Found::kPidFile) return false;
  bool moved = false;
  if (!options_.daemon_cgroup.empty()) {
    // A daemon started where it ends with the agent's container (by an agent without
    // --mps-daemon-cgroup, or an older one), and the MPS servers it spawned: into its cgroup.
    const std::string target = cgroup(share_name);
    const std::string members = read_text(target + "/cgroup.procs");
    std::set<int> inside;
    std::istringstream listed(members);
    for (int pid = 0; listed >> pid;) inside.insert(pid);
    if (!inside.count(found.pid)) {
      TESSERA_RETURN_IF_ERROR(make_dir(target, 0755));
      std::vector<int> processes{found.pid};
      std::istringstream children(read_text("/proc/" + std::to_string(found.pid) + "/task/" +
                                            std::to_string(found.pid) + "/children"));
      for (int child = 0; children >> child;) processes.push_back(child);
      for (const int pid : processes) {
        const Status status = move_to_cgroup(pid, target);
        // A child that exited meanwhile needs no move.
        if (!status.is_ok() && (pid == found.pid || is_running(pid)))
          return status.with_context("MPS daemon of share " + share_name);
      }
      moved = true;
    }
  }
  // Recorded, so that from now on only that process is taken for the share's daemon.
  if (found.source == Found::kPidFile)
    TESSERA_RETURN_IF_ERROR(record_daemon(share_name, found.pid));
  return moved;
}

Status MpsBackend::stop(const std::string& share_name) {
  if (const int pid = daemon_pid(share_name); pid != 0) {
    // Without its pipe folder (removed by hand) no control command reaches the daemon: SIGTERM.
    Status quit_status = Status::ok();
    if (fs::exists(pipe_dir(share_name))) {
      const Command quit({options_.control}, environment(share_name, ""), "quit\n",
                         options_.timeout);
      quit_status = run_checked(quit);
    } else {
      kill(pid, SIGTERM);
    }
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
  if (!options_.daemon_cgroup.empty()) {
    // The daemon's cgroup; an MPS server left in it (its daemon was killed) is killed with it.
    const std::string folder_of_cgroup = cgroup(share_name);
    const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
    bool killed = false;
    for (int error = 0; rmdir(folder_of_cgroup.c_str()) != 0 && (error = errno) != ENOENT;) {
      if (error != EBUSY || std::chrono::steady_clock::now() > deadline)
        return internal_error("cannot remove cgroup " + folder_of_cgroup + ": " +
                              std::strerror(error));
      if (!killed) {
        std::ofstream(folder_of_cgroup + "/cgroup.kill") << "1";
        killed = true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
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
  } else if (const Result<bool> adopted = adopt(share.name()); !adopted.is_ok()) {
    record(subject, "MPS daemon not adopted", "", adopted.status());
  } else if (*adopted) {
    record(subject, "MPS daemon outside " + cgroup(share.name()), "moved into it", Status::ok());
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
  // A daemon whose share folder is gone (removed by hand, or a state folder wiped) serves nobody.
  std::set<std::string> stopped;
  for (const auto& [name, pid] : running_daemons()) {
    if (shares.count(name) || stopped.count(name) || fs::exists(folder(name))) continue;
    const OrphanReservation reserved = reserve(name);
    if (!reserved) continue;
    stopped.insert(name);
    found.push_back({"share " + name,
                     "MPS daemon (pid " + std::to_string(pid) + ") without a share folder",
                     "stopped", stop(name).message()});
  }
  return found;
}

}  // namespace tessera::agent

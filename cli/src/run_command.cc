#include "run_command.h"

#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

#include <fcntl.h>
#include <time.h>

#include "driver_wall.h"
#include "share_plan.h"
#include "tessera/gpu_info.h"
#include "tessera/local_shares.h"
#include "tessera/share_contract.h"
#include "tessera/share_folder/limits_writer.h"
#include "tessera/share_folder/snapshot.h"
#include "tessera/shared_library.h"
#include "tessera/vgpu/options.h"

namespace tessera::cli {
namespace {

volatile sig_atomic_t g_child = 0;

// tessera run's own messages (one place, so that they can move to structured logs at once).
void log(const std::string& message) {
  std::fprintf(stderr, "tessera run: %s\n", message.c_str());
}

void forward_signal(int signal_number) {
  if (g_child > 0) kill(g_child, signal_number);
}

bool is_file(const std::string& path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

std::string executable_dir() {
  std::error_code error;
  const auto path = std::filesystem::read_symlink("/proc/self/exe", error);
  return error ? std::string(".") : path.parent_path().string();
}

double monotonic_s() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) / 1e9;
}

// --verbose: what the share used, from its usage page (the shim's counters, docs/compute.md). The
// page is written by the command's processes: read as a copy (a process may truncate it), never
// through a mapping.
void print_summary(const std::string& dir, const std::vector<share_folder::DeviceLimit>& limits,
                   double seconds) {
  const share_folder::UsagePageCopy usage = share_folder::read_usage_page(dir + "/usage");
  if (usage.problem == share_folder::UsageProblem::kMissing) {
    std::fprintf(stderr, "tessera run: summary: no usage page (the command used no GPU)\n");
    return;
  }
  if (!usage.usable()) {
    std::fprintf(stderr, "tessera run: summary: %s\n", usage.message.c_str());
    return;
  }
  std::fprintf(stderr,
               "tessera run: summary: %.2f s, %llu launches, launching threads waited %.3f s "
               "at the compute gate\n",
               seconds, static_cast<unsigned long long>(usage.launches()),
               static_cast<double>(usage.throttled_ns()) / 1e9);
  for (size_t d = 0; d < limits.size() && d < share::kMaxDevices; ++d) {
    const share_folder::ComputeDeviceCopy& device = usage.compute[d];
    const double busy = static_cast<double>(device.busy_ns) / 1e9;
    const double others = static_cast<double>(device.others_busy_ns) / 1e9;
    const double closed = static_cast<double>(device.closed_ns) / 1e9;
    std::fprintf(stderr,
                 "tessera run: summary: GPU %zu %s: cores request %u%%, limit %u%%; GPU time "
                 "used %.3f s (%.1f%% of the wall time), others %.3f s, gate closed %.3f s, "
                 "memory held at exit %llu bytes\n",
                 d, limits[d].uuid.c_str(), limits[d].cores_request, limits[d].cores_limit, busy,
                 seconds > 0 ? 100 * busy / seconds : 0.0, others, closed,
                 static_cast<unsigned long long>(usage.memory_bytes(static_cast<uint32_t>(d))));
  }
}

// A folder tessera made (or will make) for this user's shares: not a symlink, a directory, this
// user's, closed to everyone else. Created 0700 when missing.
Status ensure_private_dir(const std::string& path) {
  if (mkdir(path.c_str(), 0700) != 0 && errno != EEXIST)
    return internal_error("cannot create " + path + ": " + std::strerror(errno));
  struct stat info {};
  if (lstat(path.c_str(), &info) != 0)
    return internal_error("cannot examine " + path + ": " + std::strerror(errno));
  if (S_ISLNK(info.st_mode)) return failed_precondition(path + " is a symlink: refused");
  if (!S_ISDIR(info.st_mode)) return failed_precondition(path + " is not a directory");
  if (info.st_uid != getuid())
    return failed_precondition(path + " belongs to uid " + std::to_string(info.st_uid) +
                               ", not to this user (uid " + std::to_string(getuid()) + ")");
  if ((info.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(info.st_mode & 07777));
    return failed_precondition(path + " has mode " + mode + ": other users could reach it (0700)");
  }
  return Status::ok();
}

// "<pid> <start time>" of this process: what tessera/local_shares.h's owner file holds.
Result<std::string> own_owner_line() {
  uint64_t start_time = 0;
  if (const int error = share::read_process_start_time("/proc", getpid(), start_time); error != 0)
    return internal_error(std::string("cannot read this process's start time: ") +
                          std::strerror(error));
  return std::to_string(getpid()) + " " + std::to_string(start_time) + "\n";
}

// Whether the owner file's process ("<pid> <start time>") still runs.
bool owner_alive(const std::string& owner_file) {
  std::ifstream in(owner_file);
  long pid = 0;
  uint64_t start_time = 0;
  if (!(in >> pid >> start_time) || pid <= 0) return false;
  uint64_t now_start = 0;
  const int error = share::read_process_start_time("/proc", static_cast<int>(pid), now_start);
  if (error == ESRCH) return false;
  return error != 0 || now_start == start_time;  // unreadable: assume alive, never remove
}

// The share directory: the one given (kept), or a temporary one under this user's local share
// root, with its owner file, removed when the command ends.
class ShareDir {
 public:
  static Result<ShareDir> create(const std::string& given) {
    if (!given.empty()) return ShareDir(given, false);
    TESSERA_ASSIGN_OR_RETURN(std::string root, prepare_local_share_root(share::local_share_root()));
    remove_stale_shares(root);
    TESSERA_ASSIGN_OR_RETURN(std::string owner, own_owner_line());
    std::string pattern = root + "/run-XXXXXX";
    if (!mkdtemp(pattern.data())) {
      return internal_error("cannot create a share directory in " + root + ": " +
                            std::strerror(errno));
    }
    ShareDir dir(std::move(pattern), true);
    const std::string owner_path = dir.path() + "/" + share::kLocalShareOwnerFile;
    std::ofstream out(owner_path, std::ios::trunc);
    out << owner;
    out.close();
    if (!out) return internal_error("cannot write " + owner_path);
    return dir;
  }
  ShareDir(ShareDir&& other) noexcept
      : path_(std::move(other.path_)), temporary_(std::exchange(other.temporary_, false)) {}
  ShareDir& operator=(ShareDir&&) = delete;
  ShareDir(const ShareDir&) = delete;
  ShareDir& operator=(const ShareDir&) = delete;
  ~ShareDir() {
    if (!temporary_) return;
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }

  const std::string& path() const { return path_; }

 private:
  ShareDir(std::string path, bool temporary) : path_(std::move(path)), temporary_(temporary) {}

  std::string path_;
  bool temporary_;
};

constexpr const char* kLibvgpuHint = " (give --libvgpu PATH or set TESSERA_LIBVGPU)";

// The libvgpu.so to preload: the one given, or the one found beside tessera.
Result<std::string> libvgpu_path(const std::string& given) {
  std::string path = given;
  if (path.empty()) {
    TESSERA_ASSIGN_OR_RETURN(std::string found, find_libvgpu(executable_dir()));
    path = std::move(found);
  }
  if (!is_file(path)) return not_found("libvgpu.so not found at " + path + kLibvgpuHint);
  // ld.so only warns about a preload it cannot load, and the command would run unconfined.
  if (Status library = check_shared_library(path); !library.is_ok())
    return failed_precondition("libvgpu " + library.message() +
                               ": the command would run without the shim" + kLibvgpuHint);
  return path;
}

// Runs the command in a child with libvgpu preloaded and the share's directory in its
// environment; returns its exit status once it ends.
Result<int> run_child(const RunOptions& options, const std::string& libvgpu, const std::string& dir,
                      const std::vector<share_folder::DeviceLimit>& limits,
                      const DriverWall& wall) {
  const pid_t parent = getpid();
  // The child runs nothing until it is inside the wall's cgroup: it waits for one byte.
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0)
    return internal_error(std::string("pipe failed: ") + std::strerror(errno));
  const pid_t child = fork();
  if (child < 0) {
    close(ready[0]);
    close(ready[1]);
    return internal_error(std::string("fork failed: ") + std::strerror(errno));
  }
  if (child == 0) {
    close(ready[1]);
    char go = 0;
    ssize_t got = 0;
    while ((got = read(ready[0], &go, 1)) < 0 && errno == EINTR) {
    }
    if (got != 1) _exit(kRunFailed);  // tessera failed to place it: run nothing
    close(ready[0]);
    // The command dies with tessera (even a SIGKILLed one). Set after fork, so a tessera that died
    // before the prctl is caught by the getppid() check instead.
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(kRunFailed);
    std::string preload = libvgpu;
    if (const char* existing = std::getenv("LD_PRELOAD"); existing && *existing) {
      preload += ":";
      preload += existing;
    }
    setenv("LD_PRELOAD", preload.c_str(), 1);
    setenv("TESSERA_SHARE_DIR", dir.c_str(), 1);
    if (!options.devices.empty()) setenv("CUDA_VISIBLE_DEVICES", options.devices.c_str(), 1);
    std::vector<char*> argv;
    for (const std::string& word : options.command) argv.push_back(const_cast<char*>(word.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    // The child's own edge: what exec failed with, as a shell reports it.
    std::fprintf(stderr, "tessera run: cannot run %s: %s\n", argv[0], std::strerror(errno));
    _exit(errno == ENOENT ? kCommandNotFound : kCommandNotRunnable);
  }

  close(ready[0]);
  if (Status placed = wall.add(child); !placed.is_ok()) {
    close(ready[1]);  // the child reads nothing and exits
    while (waitpid(child, nullptr, 0) < 0 && errno == EINTR) {
    }
    return placed.with_context("the driver's memory wall");
  }
  const char go = 1;
  const bool released = write(ready[1], &go, 1) == 1;
  close(ready[1]);
  if (!released) {
    kill(child, SIGKILL);
    while (waitpid(child, nullptr, 0) < 0 && errno == EINTR) {
    }
    return internal_error(std::string("cannot start the command: ") + std::strerror(errno));
  }

  const double started = monotonic_s();
  g_child = child;
  struct sigaction forward {};
  forward.sa_handler = forward_signal;
  sigemptyset(&forward.sa_mask);
  for (int signal_number : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) {
    sigaction(signal_number, &forward, nullptr);
  }
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (options.verbose) {
    print_summary(dir, limits, monotonic_s() - started);
    log("summary: " + wall.describe());
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : kKilledBySignalBase + WTERMSIG(status);
}

}  // namespace

std::string refuse_empty_value(const std::string& value) {
  return value.empty() ? "an empty value is not allowed (leave the flag out for its default)" : "";
}

Result<std::string> prepare_local_share_root(const std::string& root) {
  // The folders tessera owns: the per-user one (/tmp/tessera-<uid> or $XDG_RUNTIME_DIR/tessera)
  // and its shares/ folder. Anything above is the system's or XDG_RUNTIME_DIR itself.
  const std::filesystem::path shares(root);
  const std::filesystem::path user = shares.parent_path();
  TESSERA_RETURN_IF_ERROR(ensure_private_dir(user.string()));
  TESSERA_RETURN_IF_ERROR(ensure_private_dir(shares.string()));
  return root;
}

size_t remove_stale_shares(const std::string& root) {
  size_t removed = 0;
  DIR* folder = opendir(root.c_str());
  if (!folder) return 0;
  const time_t now = time(nullptr);
  while (const dirent* entry = readdir(folder)) {
    if (entry->d_name[0] == '.') continue;
    const std::string dir = root + "/" + entry->d_name;
    struct stat info {};
    if (lstat(dir.c_str(), &info) != 0 || !S_ISDIR(info.st_mode) || info.st_uid != getuid())
      continue;
    const std::string owner = dir + "/" + share::kLocalShareOwnerFile;
    struct stat owner_info {};
    std::string why;
    if (lstat(owner.c_str(), &owner_info) != 0) {
      // A share being created has no owner file for a moment: only an old one is abandoned.
      if (now - info.st_mtime < 60) continue;
      why = "it has no owner file";
    } else if (!owner_alive(owner)) {
      std::ifstream in(owner);
      std::string pid;
      in >> pid;
      why = "its tessera run (pid " + pid + ") is gone";
    } else {
      continue;
    }
    std::error_code error;
    std::filesystem::remove_all(dir, error);
    if (error) {
      log("cannot remove the stale share " + dir + ": " + error.message());
      continue;
    }
    log("removed the stale share " + dir + " (" + why + ")");
    ++removed;
  }
  closedir(folder);
  return removed;
}

Result<std::string> find_libvgpu(const std::string& dir) {
  if (const char* env = std::getenv("TESSERA_LIBVGPU"); env && *env) return std::string(env);
  for (const std::string& candidate :
       {dir + "/../lib/libvgpu.so", dir + "/../libvgpu/libvgpu.so"}) {
    if (is_file(candidate)) return std::filesystem::weakly_canonical(candidate).string();
  }
  return not_found(std::string("libvgpu.so not found") + kLibvgpuHint);
}

Result<int> run(const RunOptions& options) {
  TESSERA_ASSIGN_OR_RETURN(std::vector<GpuInfo> listed, list_gpus());
  // On a GPU in MIG mode CUDA's devices are its MIG devices: the share names them too, so that a
  // limit applies inside an instance (CUDA_VISIBLE_DEVICES=MIG-<uuid>).
  TESSERA_ASSIGN_OR_RETURN(std::vector<GpuInfo> migs, list_mig_devices());
  listed.insert(listed.end(), migs.begin(), migs.end());
  const std::vector<GpuInfo> gpus = std::move(listed);
  uint32_t priority = share::kPriorityNormal;
  if (!options.priority.empty() && !vgpu::parse_priority(options.priority, &priority)) {
    return invalid_argument("--priority '" + options.priority + "' is not high, normal or low");
  }
  TESSERA_ASSIGN_OR_RETURN(
      std::vector<share_folder::DeviceLimit> limits,
      plan_share(gpus, {options.memory, options.memory_limit, options.cores, options.cores_limit}));
  TESSERA_ASSIGN_OR_RETURN(std::string libvgpu, libvgpu_path(options.libvgpu));
  TESSERA_ASSIGN_OR_RETURN(DriverWall wall, DriverWall::prepare(limits));
  if (options.verbose) log(wall.describe());

  TESSERA_ASSIGN_OR_RETURN(ShareDir dir, ShareDir::create(options.share_dir));
  TESSERA_RETURN_IF_ERROR(share_folder::write_limits(dir.path(), limits, {priority}));
  Result<int> status = run_child(options, libvgpu, dir.path(), limits, wall);
  // Processes the command left behind keep the cgroup, which then stays (said here).
  if (Status released = wall.release(); !released.is_ok()) log(released.message());
  return status;
}

}  // namespace tessera::cli

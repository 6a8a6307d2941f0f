#include "run_command.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>

#include <fcntl.h>
#include <sys/mman.h>
#include <time.h>

#include "share_plan.h"
#include "tessera/gpu_info.h"
#include "tessera/share_contract.h"
#include "tessera/vgpu/options.h"
#include "tessera/vgpu/usage_counters.h"

namespace tessera::cli {
namespace {

volatile sig_atomic_t g_child = 0;

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

// --verbose: what the share used, from its usage page (the shim's counters, docs/compute.md).
void print_summary(const std::string& dir, const std::vector<share::DeviceLimit>& limits,
                   double seconds) {
  const std::string path = dir + "/usage";
  share::UsagePage* page = nullptr;
  if (const int error = share::map_usage_page(path.c_str(), false, page); error != 0) {
    if (error == ENOENT)
      std::fprintf(stderr, "tessera run: summary: no usage page (the command used no GPU)\n");
    return;
  }
  const auto& usage = *page;
  std::fprintf(stderr,
               "tessera run: summary: %.2f s, %llu launches, launching threads waited %.3f s "
               "at the compute gate\n",
               seconds, static_cast<unsigned long long>(vgpu::compute::share_launches(usage)),
               static_cast<double>(vgpu::compute::share_throttled_ns(usage)) / 1e9);
  for (size_t d = 0; d < limits.size() && d < share::kMaxDevices; ++d) {
    const share::ComputeDevice& device = usage.compute.devices[d];
    const double busy = static_cast<double>(device.busy_ns.load()) / 1e9;
    const double others = static_cast<double>(device.others_busy_ns.load()) / 1e9;
    const double closed = static_cast<double>(device.closed_ns.load()) / 1e9;
    std::fprintf(
        stderr,
        "tessera run: summary: GPU %zu %s: cores limit %u%%, burst %u%%; GPU time "
        "used %.3f s (%.1f%% of the wall time), others %.3f s, gate closed %.3f s, "
        "memory held at exit %llu bytes\n",
        d, limits[d].uuid.c_str(), limits[d].cores_limit, limits[d].cores_burst, busy,
        seconds > 0 ? 100 * busy / seconds : 0.0, others, closed,
        static_cast<unsigned long long>(share::share_usage(usage, static_cast<uint32_t>(d))));
  }
  share::unmap_usage_page(page);
}

// The share directory: the one given (kept), or a temporary one removed when the command ends.
class ShareDir {
 public:
  static Result<ShareDir> create(const std::string& given) {
    if (!given.empty()) return ShareDir(given, false);
    const char* base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    std::string pattern = std::string(base) + "/tessera-run-XXXXXX";
    if (!mkdtemp(pattern.data())) {
      return internal_error(std::string("cannot create a share directory in ") + base + ": " +
                            std::strerror(errno));
    }
    return ShareDir(std::move(pattern), true);
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
    Result<std::string> found = find_libvgpu(executable_dir());
    if (!found.is_ok()) return found.status();
    path = std::move(found).value();
  }
  if (!is_file(path)) return not_found("libvgpu.so not found at " + path + kLibvgpuHint);
  return path;
}

// Runs the command in a child with libvgpu preloaded and the share's directory in its
// environment; returns its exit status once it ends.
Result<int> run_child(const RunOptions& options, const std::string& libvgpu, const std::string& dir,
                      const std::vector<share::DeviceLimit>& limits) {
  const pid_t child = fork();
  if (child < 0) return internal_error(std::string("fork failed: ") + std::strerror(errno));
  if (child == 0) {
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
    _exit(errno == ENOENT ? 127 : 126);
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
  if (options.verbose) print_summary(dir, limits, monotonic_s() - started);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

Result<std::string> find_libvgpu(const std::string& dir) {
  if (const char* env = std::getenv("TESSERA_LIBVGPU"); env && *env) return std::string(env);
  for (const std::string& candidate :
       {dir + "/../lib/libvgpu.so", dir + "/../libvgpu/libvgpu.so"}) {
    if (is_file(candidate)) return std::filesystem::weakly_canonical(candidate).string();
  }
  return not_found(std::string("libvgpu.so not found") + kLibvgpuHint);
}

Result<int> run(const RunOptions& options) {
  Result<std::vector<GpuInfo>> listed = list_gpus();
  if (!listed.is_ok()) return listed.status();
  const std::vector<GpuInfo> gpus = std::move(listed).value();
  uint32_t priority = share::kPriorityNormal;
  if (!options.priority.empty() && !vgpu::parse_priority(options.priority, &priority)) {
    return invalid_argument("--priority '" + options.priority + "' is not high, normal or low");
  }
  Result<std::vector<share::DeviceLimit>> limits =
      plan_share(gpus, options.memory, options.cores, options.burst);
  if (!limits.is_ok()) return limits.status();
  Result<std::string> libvgpu = libvgpu_path(options.libvgpu);
  if (!libvgpu.is_ok()) return libvgpu.status();

  Result<ShareDir> dir = ShareDir::create(options.share_dir);
  if (!dir.is_ok()) return dir.status();
  if (std::string written = share::write_limits(dir->path(), *limits, priority); !written.empty()) {
    return internal_error(written);
  }
  return run_child(options, *libvgpu, dir->path(), *limits);
}

}  // namespace tessera::cli

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

#include <fcntl.h>
#include <sys/mman.h>
#include <time.h>

#include "compute/meter.h"
#include "options.h"
#include "share_plan.h"
#include "tessera/gpu_info.h"

namespace tessera::cli {
namespace {

constexpr int kCannotRun = 125;
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
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    std::fprintf(stderr, "tessera run: summary: no usage page (the command used no GPU)\n");
    return;
  }
  void* memory = ::mmap(nullptr, sizeof(share::UsagePage), PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (memory == MAP_FAILED) return;
  const auto& usage = *static_cast<const share::UsagePage*>(memory);
  if (share::valid_usage_page(usage)) {
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
  }
  ::munmap(memory, sizeof(share::UsagePage));
}

}  // namespace

std::string find_libvgpu(const std::string& dir) {
  if (const char* env = std::getenv("TESSERA_LIBVGPU"); env && *env) return env;
  for (const std::string& candidate :
       {dir + "/../lib/libvgpu.so", dir + "/../libvgpu/libvgpu.so"}) {
    if (is_file(candidate)) return std::filesystem::weakly_canonical(candidate).string();
  }
  return "";
}

int run(const RunOptions& options) {
  Result<std::vector<GpuInfo>> listed = list_gpus();
  if (!listed.is_ok()) {
    std::fprintf(stderr, "tessera run: %s\n", listed.status().message().c_str());
    return kCannotRun;
  }
  std::vector<GpuInfo> gpus = std::move(listed).value();
  std::string error;
  std::vector<share::DeviceLimit> limits;
  uint32_t priority = share::kPriorityNormal;
  if (!options.priority.empty() && !vgpu::parse_priority(options.priority, &priority)) {
    std::fprintf(stderr, "tessera run: --priority '%s' is not high, normal or low\n",
                 options.priority.c_str());
    return kCannotRun;
  }
  if (!plan_share(gpus, options.memory, options.cores, options.burst, limits, error)) {
    std::fprintf(stderr, "tessera run: %s\n", error.c_str());
    return kCannotRun;
  }
  const std::string libvgpu =
      options.libvgpu.empty() ? find_libvgpu(executable_dir()) : options.libvgpu;
  if (libvgpu.empty() || !is_file(libvgpu)) {
    std::fprintf(stderr,
                 "tessera run: libvgpu.so not found%s%s (give --libvgpu PATH or set "
                 "TESSERA_LIBVGPU)\n",
                 libvgpu.empty() ? "" : " at ", libvgpu.c_str());
    return kCannotRun;
  }

  bool temporary = false;
  std::string dir = options.share_dir;
  if (dir.empty()) {
    const char* base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    std::string pattern = std::string(base) + "/tessera-run-XXXXXX";
    if (!mkdtemp(pattern.data())) {
      std::fprintf(stderr, "tessera run: cannot create a share directory in %s: %s\n", base,
                   std::strerror(errno));
      return kCannotRun;
    }
    dir = pattern;
    temporary = true;
  }
  if (std::string written = share::write_limits(dir, limits, priority); !written.empty()) {
    std::fprintf(stderr, "tessera run: %s\n", written.c_str());
    if (temporary) std::filesystem::remove_all(dir);
    return kCannotRun;
  }

  const pid_t child = fork();
  if (child < 0) {
    std::fprintf(stderr, "tessera run: fork failed: %s\n", std::strerror(errno));
    if (temporary) std::filesystem::remove_all(dir);
    return kCannotRun;
  }
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
  if (temporary) std::filesystem::remove_all(dir);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace tessera::cli

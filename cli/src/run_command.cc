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

#include "gpu_inventory.h"
#include "share_plan.h"

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
  std::vector<Gpu> gpus;
  std::string error;
  if (!list_gpus(gpus, error)) {
    std::fprintf(stderr, "tessera run: %s\n", error.c_str());
    return kCannotRun;
  }
  std::vector<share::DeviceLimit> limits;
  if (!plan_share(gpus, options.memory, limits, error)) {
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
  if (std::string written = share::write_limits(dir, limits); !written.empty()) {
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
  if (temporary) std::filesystem::remove_all(dir);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace tessera::cli

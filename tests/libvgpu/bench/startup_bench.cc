// Start-up cost of libvgpu per process, alone and with 64 processes starting at once: each
// process execs vgpu_probe, creates its context and makes its first allocation (which opens the
// share region and claims a slot), then exits. The same runs without the shim, in the same
// invocation, are the baseline. A shim that serialises start-up (a lock held while discovering
// pids, say) shows up as an added cost that grows with the number of processes.
//
//   vgpu_startup_bench --probe vgpu_probe --shim libvgpu.so --lib-dir <simulator lib dir>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <fcntl.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

extern char** environ;

namespace {

double now_ms() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

struct Config {
  std::string probe, shim, lib_dir;
  int rounds = 5;
};

struct Sample {
  double wall_ms;  // spawn to exit
  double cpu_ms;   // user + system time of the process
};

// Starts `count` probes at once; returns each one's wall and CPU time.
std::vector<Sample> start_processes(Config& config, int count, bool with_shim) {
  char state[] = "/tmp/vgpu-startup-XXXXXX";
  const int fd = mkstemp(state);
  close(fd);
  unlink(state);
  std::vector<std::string> env_strings;
  for (char** entry = environ; *entry; ++entry) {
    if (std::strncmp(*entry, "LD_PRELOAD=", 11) && std::strncmp(*entry, "TESSERA_", 8) &&
        std::strncmp(*entry, "SIMGPU_", 7) && std::strncmp(*entry, "LD_LIBRARY_PATH=", 16)) {
      env_strings.emplace_back(*entry);
    }
  }
  env_strings.push_back("LD_LIBRARY_PATH=" + config.lib_dir);
  env_strings.push_back(std::string("SIMGPU_STATE=") + state);
  if (with_shim) {
    env_strings.push_back("LD_PRELOAD=" + config.shim);
    env_strings.push_back("TESSERA_MEMORY_LIMIT=8Gi");
  }
  std::vector<char*> envp;
  for (std::string& entry : env_strings) envp.push_back(entry.data());
  envp.push_back(nullptr);
  std::string init = "init", alloc = "alloc:mem:2Mi";
  char* argv[] = {config.probe.data(), init.data(), alloc.data(), nullptr};

  posix_spawn_file_actions_t quiet;
  posix_spawn_file_actions_init(&quiet);
  posix_spawn_file_actions_addopen(&quiet, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  std::map<pid_t, double> started;
  for (int i = 0; i < count; ++i) {
    pid_t pid = 0;
    const double t0 = now_ms();
    if (posix_spawn(&pid, config.probe.c_str(), &quiet, nullptr, argv, envp.data()) != 0) {
      std::perror("posix_spawn");
      std::exit(1);
    }
    started[pid] = t0;
  }
  posix_spawn_file_actions_destroy(&quiet);
  std::vector<Sample> samples;
  while (!started.empty()) {
    int status = 0;
    rusage usage{};
    const pid_t pid = wait4(-1, &status, 0, &usage);
    if (pid < 0) break;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "probe %d failed (status %d)\n", pid, status);
      std::exit(1);
    }
    const double cpu_ms =
        (static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1e3 +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e3);
    samples.push_back({now_ms() - started[pid], cpu_ms});
    started.erase(pid);
  }
  unlink(state);
  return samples;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  Config config;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--probe")
      config.probe = argv[i + 1];
    else if (flag == "--shim")
      config.shim = argv[i + 1];
    else if (flag == "--lib-dir")
      config.lib_dir = argv[i + 1];
    else if (flag == "--rounds")
      config.rounds = std::atoi(argv[i + 1]);
  }
  if (config.probe.empty() || config.shim.empty() || config.lib_dir.empty()) {
    std::fprintf(stderr, "usage: %s --probe P --shim S --lib-dir D [--rounds N]\n", argv[0]);
    return 2;
  }
  // Wall time at 64 processes on a small machine is mostly waiting for a core; CPU time per
  // process shows the shim's own work. Both are compared with the baseline of the same run.
  std::printf("%-10s %14s %14s %12s %14s %14s %12s\n", "processes", "wall base ms", "wall shim ms",
              "wall added", "cpu base ms", "cpu shim ms", "cpu added");
  for (int count : {1, 64}) {
    std::vector<double> wall_base, wall_shim, cpu_base, cpu_shim;
    for (int round = 0; round < config.rounds; ++round) {
      // Interleaved, so drift on the machine hits both alike.
      for (const Sample& s : start_processes(config, count, false)) {
        wall_base.push_back(s.wall_ms);
        cpu_base.push_back(s.cpu_ms);
      }
      for (const Sample& s : start_processes(config, count, true)) {
        wall_shim.push_back(s.wall_ms);
        cpu_shim.push_back(s.cpu_ms);
      }
    }
    std::printf("%-10d %14.2f %14.2f %12.2f %14.2f %14.2f %12.2f\n", count, median(wall_base),
                median(wall_shim), median(wall_shim) - median(wall_base), median(cpu_base),
                median(cpu_shim), median(cpu_shim) - median(cpu_base));
  }
  std::printf(
      "(medians per process over %d rounds; 'added' is the shim's cost over the baseline)\n",
      config.rounds);
  return 0;
}

// What the shim benchmarks share. They compare one program with and without libvgpu in the same
// run: the parent re-executes itself as children that differ only in LD_PRELOAD and one limit
// variable, and each child prints "benchmark-name nanoseconds" lines, which the parent collects.
// Each child launches an empty kernel on the primary context of device 0.
#pragma once

#include <benchmark/benchmark.h>
#include <cuda.h>

#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace tessera::bench {

inline constexpr char kChildVariable[] = "VGPU_BENCH_CHILD";

inline constexpr char kEmptyKernelPtx[] =
    ".version 8.0\n.target sm_90\n.address_size 64\n"
    ".visible .entry empty_kernel()\n{\n  ret;\n}\n";

// Makes device 0's primary context current and loads the empty kernel; false if CUDA failed.
inline bool load_empty_kernel(CUcontext* context, CUfunction* kernel) {
  CUdevice device = 0;
  CUmodule module = nullptr;
  return cuInit(0) == CUDA_SUCCESS && cuDeviceGet(&device, 0) == CUDA_SUCCESS &&
         cuDevicePrimaryCtxRetain(context, device) == CUDA_SUCCESS &&
         cuCtxSetCurrent(*context) == CUDA_SUCCESS &&
         cuModuleLoadData(&module, kEmptyKernelPtx) == CUDA_SUCCESS &&
         cuModuleGetFunction(kernel, module, "empty_kernel") == CUDA_SUCCESS;
}

// Child mode's output: "name nanoseconds-per-iteration" lines on stdout, which run_bench_child
// reads back.
class LineReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>& runs) override {
    // VGPU_BENCH_CPU_TIME=1: the thread's CPU time instead of wall time, for a loaded machine
    // (time spent descheduled is not the shim's).
    const bool cpu_time = std::getenv("VGPU_BENCH_CPU_TIME") != nullptr;
    for (const Run& run : runs) {
      const double time = cpu_time ? run.GetAdjustedCPUTime() : run.GetAdjustedRealTime();
      std::printf("%s %.1f\n", run.benchmark_name().c_str(),
                  time * 1e9 / benchmark::GetTimeUnitMultiplier(run.time_unit));
    }
  }
};

inline bool is_bench_child() {
  return std::getenv(kChildVariable) != nullptr;
}

// Runs this program again with LD_PRELOAD=`preload` (unset when null) and `limit_variable`=
// `limit_value` (unset when the value is null), in the cgroup whose cgroup.procs is `cgroup_procs`
// when one is given; returns the child's lines as name -> ns.
inline std::map<std::string, double> run_bench_child(char** argv, const char* preload,
                                                     const char* limit_variable,
                                                     const char* limit_value,
                                                     const std::string& cgroup_procs = {}) {
  int fds[2];
  if (pipe(fds) != 0) std::abort();
  const pid_t pid = fork();
  if (pid == 0) {
    if (!cgroup_procs.empty()) {
      const int procs = open(cgroup_procs.c_str(), O_WRONLY | O_CLOEXEC);
      if (procs < 0 || write(procs, "0", 1) != 1) _exit(126);  // "0": the writing process
      close(procs);
    }
    dup2(fds[1], 1);
    close(fds[0]);
    setenv(kChildVariable, "1", 1);
    if (preload) {
      setenv("LD_PRELOAD", preload, 1);
    } else {
      unsetenv("LD_PRELOAD");
    }
    if (limit_value) {
      setenv(limit_variable, limit_value, 1);
    } else {
      unsetenv(limit_variable);
    }
    execv("/proc/self/exe", argv);
    _exit(127);
  }
  close(fds[1]);
  std::map<std::string, double> results;
  FILE* input = fdopen(fds[0], "r");
  char name[256];
  double ns = 0;
  while (std::fscanf(input, "%255s %lf", name, &ns) == 2) results[name] = ns;
  std::fclose(input);
  waitpid(pid, nullptr, 0);
  return results;
}

// The median of `values` (not empty).
inline double median_of(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t middle = values.size() / 2;
  return values.size() % 2 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
}

// The parent: runs the benchmarks against the simulated driver (kernels of `kernel_us`) without
// the shim, with it and no limit, and with it and `limit_variable`=`limit_value` (`limit_label`
// names the limited columns); prints each benchmark's times and what the shim added. Returns the
// exit status: 1 if a run reported nothing.
//
// VGPU_BENCH_ROUNDS=N (default 1) runs the children N times, interleaved (bare, shim, shim+limit,
// bare, ...), and prints the medians: a machine whose load drifts during the run then shifts every
// column alike. VGPU_BENCH_SHIM_PATH measures another build of the shim instead of this one;
// VGPU_BENCH_BASELINE_SHIM adds a child per round with that build and the limit, and a column of
// what this build saves against it (before/after a change, in one run). `partition`, when given,
// is called once the simulated GPU's environment is set; a cgroup.procs path it returns adds two
// children per round inside that cgroup (the driver's memory partition), one without the shim and
// one with the shim and the limit, and a column of what the shim adds there (to set beside what it
// adds to a shim-only share: the driver's own cost inside a partition is in both of the children).
using PartitionSetup = std::function<std::string()>;
inline int compare_runs(char** argv, const char* kernel_us, const char* limit_variable,
                        const char* limit_value, const char* limit_label,
                        const PartitionSetup& partition = {}) {
  char state[] = "/tmp/vgpu-bench-state-XXXXXX";
  const int fd = mkstemp(state);
  close(fd);
  unlink(state);
  setenv("SIMGPU_STATE", state, 1);
  setenv("SIMGPU_DEVICES", "name=NVIDIA H200,memory=16Gi,sms=132,cc=9.0", 1);
  setenv("SIMGPU_KERNEL_US", kernel_us, 1);
  setenv("LD_LIBRARY_PATH", VGPU_BENCH_SIMLIB, 1);
  unsetenv("TESSERA_SHARE_DIR");
  const char* library = std::getenv("VGPU_BENCH_SHIM_PATH");
  if (!library || !*library) library = VGPU_BENCH_SHIM;
  const char* baseline = std::getenv("VGPU_BENCH_BASELINE_SHIM");
  if (baseline && !*baseline) baseline = nullptr;
  const char* rounds_text = std::getenv("VGPU_BENCH_ROUNDS");
  const long rounds = rounds_text ? std::atol(rounds_text) : 1;
  if (rounds < 1 || rounds > 1000) {
    std::fprintf(stderr, "VGPU_BENCH_ROUNDS=%s: expected a whole number from 1 to 1000\n",
                 rounds_text);
    return 2;
  }
  const std::string partition_procs = partition ? partition() : std::string();
  const bool partitioned = !partition_procs.empty();
  // Per benchmark name, each round's figure: bare, shim, shim+limit, baseline shim+limit, shim+
  // limit inside the driver's partition, bare inside it.
  std::map<std::string, std::vector<double>> columns[6];
  bool complete = !partition || partitioned;
  for (long round = 0; round < rounds; ++round) {
    const std::map<std::string, double> runs[6] = {
        run_bench_child(argv, nullptr, limit_variable, nullptr),
        run_bench_child(argv, library, limit_variable, nullptr),
        run_bench_child(argv, library, limit_variable, limit_value),
        baseline ? run_bench_child(argv, baseline, limit_variable, limit_value)
                 : std::map<std::string, double>{},
        partitioned ? run_bench_child(argv, library, limit_variable, limit_value, partition_procs)
                    : std::map<std::string, double>{},
        partitioned ? run_bench_child(argv, nullptr, limit_variable, nullptr, partition_procs)
                    : std::map<std::string, double>{}};
    for (int column = 0; column < 6; ++column) {
      if (runs[column].empty() &&
          (column < 3 || (column == 3 && baseline) || (column >= 4 && partitioned)))
        complete = false;
      for (const auto& [name, ns] : runs[column]) columns[column][name].push_back(ns);
    }
  }
  unlink(state);
  auto figure = [&](int column, const std::string& name) {
    const auto found = columns[column].find(name);
    return found == columns[column].end() ? 0.0 : median_of(found->second);
  };
  if (rounds > 1) std::printf("medians of %ld interleaved rounds\n", rounds);
  const std::string with_limit_ns = std::string("shim+") + limit_label + " ns";
  const std::string added_limit = std::string("added+") + limit_label;
  std::printf("%-22s %14s %14s %14s %12s %12s", "benchmark", "no shim ns", "shim ns",
              with_limit_ns.c_str(), "added ns", added_limit.c_str());
  if (baseline) std::printf(" %14s %12s", "baseline+lim", "saved ns");
  if (partitioned)
    std::printf(" %18s %18s %18s", "partition: no shim", "shim+limit", "added+limit");
  std::printf("\n");
  for (const auto& [name, values] : columns[0]) {
    const double base = median_of(values);
    const double with = figure(1, name);
    const double with_limit = figure(2, name);
    std::printf("%-22s %14.1f %14.1f %14.1f %12.1f %12.1f", name.c_str(), base, with, with_limit,
                with - base, with_limit - base);
    if (baseline) {
      const double before = figure(3, name);
      std::printf(" %14.1f %12.1f", before, before - with_limit);
    }
    if (partitioned) {
      const double inside = figure(4, name);
      const double bare_inside = figure(5, name);
      std::printf(" %18.1f %18.1f %18.1f", bare_inside, inside, inside - bare_inside);
    }
    std::printf("\n");
  }
  return complete ? 0 : 1;
}

// A benchmark program's main: as a child it runs its benchmarks; as the parent it compares the
// runs without the shim, with it, and with `limit_variable`=`limit_value` (compare_runs).
inline int bench_main(int argc, char** argv, const char* kernel_us, const char* limit_variable,
                      const char* limit_value, const char* limit_label,
                      const PartitionSetup& partition = {}) {
  if (is_bench_child()) {
    benchmark::Initialize(&argc, argv);
    LineReporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    return 0;
  }
  return compare_runs(argv, kernel_us, limit_variable, limit_value, limit_label, partition);
}

}  // namespace tessera::bench

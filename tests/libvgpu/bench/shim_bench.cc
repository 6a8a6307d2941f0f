// What libvgpu adds to the hot calls, measured against the simulated driver in one run: the
// program re-executes itself three times (no shim; shim without limits; shim with a limit and a
// share region) with Google Benchmark, then prints each benchmark's time and the time the shim
// added. Not a test gate: figures depend on the machine.
//
//   vgpu_bench [--benchmark_min_time=...]      (needs VGPU_BENCH_SHIM and VGPU_BENCH_SIMLIB,
//                                                set by the build)
//
// VGPU_BENCH_ITERATIONS=N runs every benchmark exactly N times instead (a fixed amount of work,
// for a profiler).
//
// VGPU_BENCH_DRIVER_PARTITION=1 (as root, with a cgroup v2 hierarchy mounted) makes the simulated
// driver an R615 for every child and adds one more child per round: the shim with the limit inside
// a cgroup whose driver partition is that limit (soft = hard = 8Gi), the share a node with the
// driver's wall gives. Its column says what the shim costs there against a shim-only share.
#include <benchmark/benchmark.h>
#include <cuda.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bench_support.h"
#include "tessera/cgroup/cgroup_v2.h"
#include "tessera/cgroup/driver_partition.h"
#include "tessera/quantity.h"

namespace {

CUcontext g_context = nullptr;
CUfunction g_kernel = nullptr;

bool set_up() {
  return g_context || tessera::bench::load_empty_kernel(&g_context, &g_kernel);
}

void BM_MemAllocFree(benchmark::State& state) {
  if (!set_up()) state.SkipWithError("no CUDA context");
  for (auto _ : state) {
    CUdeviceptr pointer = 0;
    if (cuMemAlloc_v2(&pointer, 1 << 20) != CUDA_SUCCESS) state.SkipWithError("alloc failed");
    cuMemFree_v2(pointer);
  }
}

void BM_LaunchKernel(benchmark::State& state) {
  if (!set_up()) state.SkipWithError("no CUDA context");
  int64_t launched = 0;
  for (auto _ : state) {
    cuLaunchKernel(g_kernel, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
    if (++launched % 256 == 0) {
      state.PauseTiming();
      cuCtxSynchronize();  // keep the simulated push buffer from filling
      state.ResumeTiming();
    }
  }
}

// The driver's partition the extra child runs in: a cgroup under this process's own, with the
// limit as its soft and hard limit on GPU 0. Kept until the run ends, then cleared and removed.
struct Partition {
  std::optional<tessera::nvml::Session> session;
  std::optional<tessera::cgroup::OwnedCgroup> cgroup;
  std::string uuid;
  ~Partition() {
    if (session && cgroup)
      (void)tessera::cgroup::clear_partitions(*session, cgroup->directory(), {uuid});
  }
};

std::string set_up_partition(Partition& partition, const char* limit) {
  auto refuse = [](const std::string& why) {
    std::fprintf(stderr, "VGPU_BENCH_DRIVER_PARTITION: %s\n", why.c_str());
    return std::string();
  };
  if (geteuid() != 0) return refuse("only root may set the driver's memory limits");
  const std::optional<uint64_t> bytes = tessera::parse_byte_quantity(limit);
  tessera::Result<std::vector<tessera::cgroup::Mount>> mounts = tessera::cgroup::cgroup2_mounts();
  if (!mounts.is_ok() || mounts->empty()) return refuse("no cgroup v2 hierarchy is mounted");
  tessera::Result<std::string> parent = tessera::cgroup::own_cgroup_directory(*mounts);
  if (!parent.is_ok()) return refuse(parent.status().message());
  tessera::Result<tessera::cgroup::OwnedCgroup> created =
      tessera::cgroup::OwnedCgroup::create(*parent, "vgpu-bench-" + std::to_string(getpid()));
  if (!created.is_ok()) return refuse(created.status().message());
  partition.cgroup = std::move(created).value();
  tessera::Result<tessera::nvml::Session> session =
      tessera::nvml::Session::open(std::string(VGPU_BENCH_SIMLIB) + "/libnvidia-ml.so.1");
  if (!session.is_ok()) return refuse(session.status().message());
  tessera::Result<nvmlDevice_t> device = session->device_by_index(0);
  tessera::Result<std::string> uuid =
      device.is_ok() ? session->uuid(*device) : tessera::Result<std::string>(device.status());
  if (!uuid.is_ok()) return refuse(uuid.status().message());
  if (const tessera::Status applied = tessera::cgroup::apply_partitions(
          *session, partition.cgroup->directory(), {{*uuid, *bytes, *bytes}});
      !applied.is_ok())
    return refuse(applied.message());
  partition.uuid = *uuid;
  partition.session = std::move(session).value();
  std::fprintf(stderr, "driver partition: %s on %s, soft = hard = %s\n",
               partition.cgroup->directory().c_str(), uuid->c_str(), limit);
  return partition.cgroup->directory() + "/cgroup.procs";
}

}  // namespace

int main(int argc, char** argv) {
  const char* iterations = std::getenv("VGPU_BENCH_ITERATIONS");
  const long fixed = iterations ? std::atol(iterations) : 0;
  using Function = void (*)(benchmark::State&);
  const std::pair<const char*, Function> benchmarks[] = {{"BM_MemAllocFree", BM_MemAllocFree},
                                                         {"BM_LaunchKernel", BM_LaunchKernel}};
  for (const auto& [name, function] : benchmarks) {
    auto* benchmark = benchmark::RegisterBenchmark(name, function);
    if (fixed > 0) benchmark->Iterations(fixed);
  }
  const bool with_partition =
      !tessera::bench::is_bench_child() && std::getenv("VGPU_BENCH_DRIVER_PARTITION") != nullptr;
  // Every child on the same simulated R615, so that only the partition differs between columns.
  if (with_partition) setenv("SIMGPU_DRIVER_VERSION", "615.40.01", 1);
  Partition partition;
  tessera::bench::PartitionSetup setup;
  if (with_partition) setup = [&partition] { return set_up_partition(partition, "8Gi"); };
  return tessera::bench::bench_main(argc, argv, "default=1", "TESSERA_MEMORY_LIMIT", "8Gi", "limit",
                                    setup);
}

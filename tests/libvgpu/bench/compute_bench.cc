// What the compute gate adds to a launch, measured against the simulated driver in one run: the
// program re-executes itself (no shim; shim without any limit; shim with a cores limit the
// benchmark stays under, so the gate is open and the share's meter thread runs) with Google
// Benchmark, and prints each launch path's time and what the shim added. Not a test gate.
//
//   vgpu_compute_bench [--benchmark_min_time=...]
#include <benchmark/benchmark.h>
#include <cuda.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "bench_support.h"

namespace {

CUcontext g_context = nullptr;
CUfunction g_kernel = nullptr;
CUgraphExec g_graph = nullptr;

bool set_up() {
  if (g_context) return true;
  if (!tessera::bench::load_empty_kernel(&g_context, &g_kernel)) return false;
  CUgraph graph = nullptr;
  CUDA_KERNEL_NODE_PARAMS params = {};
  params.func = g_kernel;
  params.gridDimX = params.gridDimY = params.gridDimZ = 1;
  params.blockDimX = params.blockDimY = params.blockDimZ = 1;
  CUgraphNode node = nullptr;
  return cuGraphCreate(&graph, 0) == CUDA_SUCCESS &&
         cuGraphAddKernelNode_v2(&node, graph, nullptr, 0, &params) == CUDA_SUCCESS &&
         cuGraphInstantiateWithFlags(&g_graph, graph, 0) == CUDA_SUCCESS;
}

template <typename Launch>
void run_launches(benchmark::State& state, Launch launch) {
  if (!set_up()) state.SkipWithError("no CUDA context");
  int64_t launched = 0;
  for (auto _ : state) {
    launch();
    if (++launched % 256 == 0) {
      state.PauseTiming();
      cuCtxSynchronize();  // keep the simulated push buffer from filling
      state.ResumeTiming();
    }
  }
}

void BM_cuLaunchKernel(benchmark::State& state) {
  run_launches(state,
               [] { cuLaunchKernel(g_kernel, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr); });
}
BENCHMARK(BM_cuLaunchKernel)->Repetitions(7);

void BM_cuLaunchKernelEx(benchmark::State& state) {
  CUlaunchConfig config = {};
  config.gridDimX = config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = config.blockDimY = config.blockDimZ = 1;
  run_launches(state, [&] { cuLaunchKernelEx(&config, g_kernel, nullptr, nullptr); });
}
BENCHMARK(BM_cuLaunchKernelEx)->Repetitions(7);

void BM_cuGraphLaunch(benchmark::State& state) {
  run_launches(state, [] { cuGraphLaunch(g_graph, nullptr); });
}
BENCHMARK(BM_cuGraphLaunch)->Repetitions(7);

// Child mode: "name nanoseconds-per-iteration" lines on stdout, the fastest of the repetitions
// (the machine is shared: the minimum is the figure least disturbed by other work).
class MinReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.run_type != Run::RT_Iteration) continue;
      const double ns =
          run.GetAdjustedRealTime() * 1e9 / benchmark::GetTimeUnitMultiplier(run.time_unit);
      const std::string name = run.run_name.function_name;
      if (!fastest_.count(name) || ns < fastest_[name]) fastest_[name] = ns;
    }
  }
  void Print() const {
    for (const auto& [name, ns] : fastest_) std::printf("%s %.1f\n", name.c_str(), ns);
  }

 private:
  std::map<std::string, double> fastest_;
};

}  // namespace

int main(int argc, char** argv) {
  if (tessera::bench::is_bench_child()) {
    benchmark::Initialize(&argc, argv);
    MinReporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    reporter.Print();
    return 0;
  }
  // Kernels of 50 ns: the benchmark uses a few percent of the GPU, so a 90% limit never closes
  // the gate and every launch takes the fast path.
  return tessera::bench::compare_runs(argv, "default=0.05", "TESSERA_CORES_LIMIT", "90", "cores");
}

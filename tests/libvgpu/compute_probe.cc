// compute_probe: keeps the GPU busy for a while through ONE launch entry point, resolved the way
// the CUDA runtime resolves them (cuGetProcAddress_v2 with the per-thread flag for _ptsz), and
// prints kernels/s as one JSON line with compute-burn's keys. compute_accuracy.py uses it for the
// entry points compute-burn does not reach (cuLaunchKernelEx_ptsz,
// cuLaunchCooperativeKernel_ptsz, cuGraphLaunch_ptsz).
//
//   compute_probe <entry point> <seconds>
#include <cuda.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

// One wave of burn_fma on a 132-SM H200 at 256 threads (8 resident blocks per SM): the
// simulator's kernel time is SIMGPU_KERNEL_US's burn_fma, as for compute-burn --blocks-per-sm 8.
constexpr char kPtx[] =
    ".version 8.0\n.target sm_90\n.address_size 64\n"
    ".visible .entry burn_fma()\n{\n  ret;\n}\n";

#define CHECK(call)                                                 \
  do {                                                              \
    const CUresult result_ = (call);                                \
    if (result_ != CUDA_SUCCESS) {                                  \
      std::fprintf(stderr, "%s failed: %d\n", #call, int(result_)); \
      std::exit(1);                                                 \
    }                                                               \
  } while (0)

template <typename Fn>
Fn resolve(const char* base, bool per_thread) {
  void* pointer = nullptr;
  CUdriverProcAddressQueryResult status{};
  CHECK(cuGetProcAddress_v2(
      base, &pointer, 12080,
      per_thread ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_DEFAULT,
      &status));
  if (!pointer) {
    std::fprintf(stderr, "%s not found\n", base);
    std::exit(1);
  }
  return reinterpret_cast<Fn>(pointer);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: compute_probe <entry point> <seconds>\n");
    return 2;
  }
  const std::string entry = argv[1];
  const double seconds = std::atof(argv[2]);
  const bool per_thread = entry.size() > 5 && entry.compare(entry.size() - 5, 5, "_ptsz") == 0;
  const std::string base = per_thread ? entry.substr(0, entry.size() - 5) : entry;

  CUdevice device = 0;
  CUcontext context = nullptr;
  CUmodule module = nullptr;
  CUfunction kernel = nullptr;
  CHECK(cuInit(0));
  CHECK(cuDeviceGet(&device, 0));
  CHECK(cuDevicePrimaryCtxRetain(&context, device));
  CHECK(cuCtxSetCurrent(context));
  CHECK(cuModuleLoadData(&module, kPtx));
  CHECK(cuModuleGetFunction(&kernel, module, "burn_fma"));
  int sms = 0;
  CHECK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device));
  const unsigned grid = static_cast<unsigned>(sms) * 8;
  const unsigned threads = 256;

  using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                unsigned, unsigned, CUstream, void**, void**);
  using LaunchExFn = CUresult (*)(const CUlaunchConfig*, CUfunction, void**, void**);
  using CoopFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, CUstream, void**);
  using GraphFn = CUresult (*)(CUgraphExec, CUstream);

  CUlaunchConfig config = {};
  config.gridDimX = grid;
  config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = threads;
  config.blockDimY = config.blockDimZ = 1;
  CUgraphExec exec = nullptr;
  if (base == "cuGraphLaunch") {
    CUgraph graph = nullptr;
    CUDA_KERNEL_NODE_PARAMS params = {};
    params.func = kernel;
    params.gridDimX = grid;
    params.gridDimY = params.gridDimZ = 1;
    params.blockDimX = threads;
    params.blockDimY = params.blockDimZ = 1;
    CUgraphNode node = nullptr;
    CHECK(cuGraphCreate(&graph, 0));
    CHECK(cuGraphAddKernelNode_v2(&node, graph, nullptr, 0, &params));
    CHECK(cuGraphInstantiateWithFlags(&exec, graph, 0));
  }

  CUresult (*launch)(void*, CUfunction, unsigned, CUlaunchConfig*, CUgraphExec) = nullptr;
  static void* resolved = nullptr;
  if (base == "cuLaunchKernel") {
    resolved = reinterpret_cast<void*>(resolve<LaunchFn>("cuLaunchKernel", per_thread));
    launch = [](void* fn, CUfunction f, unsigned g, CUlaunchConfig*, CUgraphExec) {
      return reinterpret_cast<LaunchFn>(fn)(f, g, 1, 1, 256, 1, 1, 0, nullptr, nullptr, nullptr);
    };
  } else if (base == "cuLaunchKernelEx") {
    resolved = reinterpret_cast<void*>(resolve<LaunchExFn>("cuLaunchKernelEx", per_thread));
    launch = [](void* fn, CUfunction f, unsigned, CUlaunchConfig* c, CUgraphExec) {
      return reinterpret_cast<LaunchExFn>(fn)(c, f, nullptr, nullptr);
    };
  } else if (base == "cuLaunchCooperativeKernel") {
    resolved = reinterpret_cast<void*>(resolve<CoopFn>("cuLaunchCooperativeKernel", per_thread));
    launch = [](void* fn, CUfunction f, unsigned g, CUlaunchConfig*, CUgraphExec) {
      return reinterpret_cast<CoopFn>(fn)(f, g, 1, 1, 256, 1, 1, 0, nullptr, nullptr);
    };
  } else if (base == "cuGraphLaunch") {
    resolved = reinterpret_cast<void*>(resolve<GraphFn>("cuGraphLaunch", per_thread));
    launch = [](void* fn, CUfunction, unsigned, CUlaunchConfig*, CUgraphExec e) {
      return reinterpret_cast<GraphFn>(fn)(e, nullptr);
    };
  } else {
    std::fprintf(stderr, "unknown entry point %s\n", entry.c_str());
    return 2;
  }

  uint64_t kernels = 0;
  const auto began = std::chrono::steady_clock::now();
  double elapsed = 0;
  do {
    for (int i = 0; i < 64; ++i) CHECK(launch(resolved, kernel, grid, &config, exec));
    CHECK(cuCtxSynchronize());
    kernels += 64;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  } while (elapsed < seconds);
  std::printf(
      "{\"launch\": \"%s\", \"kernels\": %llu, \"seconds\": %.6f, \"kernels_per_s\": %.3f}\n",
      entry.c_str(), static_cast<unsigned long long>(kernels), elapsed,
      static_cast<double>(kernels) / elapsed);
  return 0;
}

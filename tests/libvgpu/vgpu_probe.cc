// vgpu_probe: a CUDA program the libvgpu tests exec with LD_PRELOAD=libvgpu.so (and without, for
// baselines) against the simulated driver. It runs the commands given as arguments in order and
// prints one line per command, so each test states its scenario on the command line and checks
// the lines. Exit status 0 unless a command could not run.
//
//   init[:ordinal]          cuInit + primary context retain + set current
//   release[:ordinal]       cuDevicePrimaryCtxRelease_v2
//   ctx:<version>:<ordinal> cuCtxCreate_v2/_v3/_v4 (version 2, 3 or 4)
//   destroy                 cuCtxDestroy_v2 of the last created context
//   alloc:<api>:<a>[:<b>[:<c>]]  allocate through <api> (mem, pitch, managed, async, pool, vmm,
//                           array, array3d); sizes accept Ki/Mi/Gi; prints "alloc <api> <result>"
//   fill:<api>:<a>[:<b>]    allocate until the first failure: "fill <api> <count> <bytes> <result>"
//   free                    free the newest allocation through its API's free
//   freebad                 cuMemFree_v2 of a pointer nobody allocated
//   pooldestroy             cuMemPoolDestroy of the pool the "pool" API allocates from
//   freeall                 free everything
//   info / infonull / total[:ordinal] / nvml    the memory views
//   nvmluuid:<uuid>         the NVML memory view of the device of that UUID (a MIG device's)
//   sync                    cuCtxSynchronize
//   mt:<threads>:<n>:<size>[:async]  threads allocating and freeing concurrently (cuMemAlloc_v2, or
//                           cuMemAllocAsync from the default pool): "mt <failures>"
//   graph:<kind>:<size>[:<inst>]  a graph with one memory allocation node of <size> (kind node:
//                           cuGraphAddMemAllocNode; capture: cuMemAllocAsync captured on a
//                           stream; none: an empty graph), instantiated through <inst> (flags,
//                           params, legacy, v2, or proc: cuGraphInstantiate from
//                           cuGetProcAddress_v2)
//   glaunch[:proc] / gupload / gdestroy   launch / upload / destroy the newest executable graph
//   gtrim[:proc]            cuDeviceGraphMemTrim(0);  gattr: "gattr <reserved> <used>" of device 0
//   count:<symbol>          the shim's call counter for <symbol> (-1 without the shim)
//   procmatrix / dlsym      interception checks (see below)
//   ready / hold / churn:<api>:<size> / sleepms:<n> / waitfile:<path>   for multi-process tests
#include <cuda.h>
#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "tessera/cuda_abi/cuda_abi.h"
#include "tessera/nvml_abi.h"
#include "tessera/quantity.h"

#undef cuGetProcAddress
#undef cuGraphInstantiate
extern "C" CUresult cuGraphInstantiate(CUgraphExec*, CUgraph, CUgraphNode*, char*, size_t);
extern "C" CUresult cuGraphInstantiate_v2(CUgraphExec*, CUgraph, CUgraphNode*, char*, size_t);
extern "C" CUresult cuCtxCreate_v2(CUcontext*, unsigned int, CUdevice);
extern "C" CUresult cuCtxCreate_v3(CUcontext*, CUexecAffinityParam*, int, unsigned int, CUdevice);

namespace {

// The names libvgpu hooks, from its one list.
const char* const kHooked[] = {
#define TESSERA_HOOK(lib, kind, symbol, ret, params, args) #symbol,
#include "hooks.def"
};

bool is_hooked(const char* symbol) {
  for (const char* name : kHooked) {
    if (std::strcmp(name, symbol) == 0) return true;
  }
  return false;
}

struct Held {
  std::string api;
  CUdeviceptr pointer = 0;
  CUmemGenericAllocationHandle handle = 0;
  CUarray array = nullptr;
  uint64_t bytes = 0;
};

std::vector<Held> g_held;
std::vector<CUgraphExec> g_execs;
CUstream g_stream = nullptr;
std::vector<CUcontext> g_contexts;
CUmemoryPool g_pool = nullptr;

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t end = text.find(separator, start);
    parts.push_back(text.substr(start, end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return parts;
}

uint64_t size_arg(const std::vector<std::string>& parts, size_t index) {
  if (index >= parts.size()) return 0;
  auto bytes = tessera::parse_byte_quantity(parts[index]);
  if (!bytes) {
    std::fprintf(stderr, "vgpu_probe: bad size %s\n", parts[index].c_str());
    std::exit(2);
  }
  return *bytes;
}

CUresult allocate(const std::string& api, uint64_t a, uint64_t b, uint64_t c, Held* held) {
  held->api = api;
  if (api == "mem") {
    held->bytes = a;
    return cuMemAlloc_v2(&held->pointer, a);
  }
  if (api == "managed") {
    held->bytes = a;
    return cuMemAllocManaged(&held->pointer, a, CU_MEM_ATTACH_GLOBAL);
  }
  if (api == "pitch") {
    size_t pitch = 0;
    const CUresult r = cuMemAllocPitch_v2(&held->pointer, &pitch, a, b, 4);
    held->bytes = uint64_t{pitch} * b;
    return r;
  }
  if (api == "async") {
    held->bytes = a;
    const CUresult r = cuMemAllocAsync(&held->pointer, a, nullptr);
    return r;
  }
  if (api == "pool") {
    if (!g_pool) {
      CUmemPoolProps props{};
      props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
      props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      props.location.id = 0;
      if (CUresult r = cuMemPoolCreate(&g_pool, &props); r != CUDA_SUCCESS) return r;
    }
    held->bytes = a;
    return cuMemAllocFromPoolAsync(&held->pointer, a, g_pool, nullptr);
  }
  if (api == "vmm") {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    held->bytes = a;
    return cuMemCreate(&held->handle, a, &prop, 0);
  }
  if (api == "array" || api == "array3d") {
    CUDA_ARRAY3D_DESCRIPTOR d{};
    d.Width = a;
    d.Height = b;
    d.Depth = api == "array3d" ? c : 0;
    d.Format = CU_AD_FORMAT_UNSIGNED_INT8;
    d.NumChannels = 1;
    held->bytes = a * (b ? b : 1) * (d.Depth ? d.Depth : 1);
    if (api == "array") {
      CUDA_ARRAY_DESCRIPTOR d2{};
      d2.Width = a;
      d2.Height = b;
      d2.Format = CU_AD_FORMAT_UNSIGNED_INT8;
      d2.NumChannels = 1;
      return cuArrayCreate_v2(&held->array, &d2);
    }
    return cuArray3DCreate_v2(&held->array, &d);
  }
  std::fprintf(stderr, "vgpu_probe: unknown api %s\n", api.c_str());
  std::exit(2);
}

CUresult release(const Held& held) {
  if (held.api == "vmm") return cuMemRelease(held.handle);
  if (held.api == "array" || held.api == "array3d") return cuArrayDestroy(held.array);
  if (held.api == "async" || held.api == "pool") return cuMemFreeAsync(held.pointer, nullptr);
  return cuMemFree_v2(held.pointer);
}

long long call_count(const char* symbol) {
  using CountFn = long long (*)(const char*);
  auto count = reinterpret_cast<CountFn>(dlsym(RTLD_DEFAULT, "tessera_vgpu_call_count"));
  return count ? count(symbol) : -1;
}

// Every hooked base name x versions x flags through the shim's cuGetProcAddress_v2: the pointer
// must be the shim's wrapper for exactly the ABI the simulator's resolver chose (or the driver's
// own function for ABIs the shim does not hook), and calling it must be counted.
int proc_matrix() {
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  void* shim = dlopen("libvgpu.so", RTLD_NOW | RTLD_NOLOAD);
  if (!cuda || !shim) {
    std::printf("procmatrix 0 1 (libcuda %p shim %p)\n", cuda, shim);
    return 0;
  }
  using Resolver =
      CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto resolver = reinterpret_cast<Resolver>(dlsym(cuda, "cuGetProcAddress_v2"));
  int failures = 0;
  int checked = 0;
  if (resolver != dlsym(shim, "cuGetProcAddress_v2")) {
    std::fprintf(stderr, "dlsym(libcuda, cuGetProcAddress_v2) is not the shim's resolver\n");
    ++failures;
  }
  const cuuint64_t kFlags[] = {CU_GET_PROC_ADDRESS_DEFAULT, CU_GET_PROC_ADDRESS_LEGACY_STREAM,
                               CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM};
  for (const tessera::cuda_abi::ProcEntry& row : tessera::cuda_abi::cuda_proc_table()) {
    if (!is_hooked(row.symbol)) continue;  // a base name with at least one hooked ABI
    const int versions[] = {row.version, row.version + 10, 13000};
    for (int version : versions) {
      for (cuuint64_t flags : kFlags) {
        ++checked;
        const tessera::cuda_abi::ProcResolution expected =
            tessera::cuda_abi::resolve_proc_symbol(row.name, version, flags);
        void* pointer = nullptr;
        CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        const CUresult r = resolver(row.name, &pointer, version, flags, &status);
        if (!expected.symbol) {
          if (r == CUDA_SUCCESS || pointer) {
            std::fprintf(stderr, "%s v%d f%llu: expected not found\n", row.name, version,
                         static_cast<unsigned long long>(flags));
            ++failures;
          }
          continue;
        }
        void* want = is_hooked(expected.symbol) ? dlsym(shim, expected.symbol)
                                                : dlsym(cuda, expected.symbol);
        if (r != CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS || pointer != want ||
            !want) {
          std::fprintf(stderr, "%s v%d f%llu: got %p want %s (%p) r=%d\n", row.name, version,
                       static_cast<unsigned long long>(flags), pointer, expected.symbol, want,
                       static_cast<int>(r));
          ++failures;
          continue;
        }
        if (!is_hooked(expected.symbol)) continue;
        // Call it with harmless arguments (nulls; an invalid ordinal where 0 would act).
        using Any = CUresult (*)(uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t,
                                 uint64_t, uint64_t, uint64_t, uint64_t, uint64_t);
        const bool takes_ordinal = std::strncmp(expected.symbol, "cuDevicePrimaryCtx", 18) == 0 &&
                                   std::strcmp(expected.symbol, "cuDevicePrimaryCtxRetain") != 0;
        const long long before = call_count(expected.symbol);
        reinterpret_cast<Any>(pointer)(takes_ordinal ? 99 : 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
        if (call_count(expected.symbol) != before + 1) {
          std::fprintf(stderr, "%s: call not counted (%lld -> %lld)\n", expected.symbol, before,
                       call_count(expected.symbol));
          ++failures;
        }
      }
    }
  }
  std::printf("procmatrix %d %d\n", checked, failures);
  return 0;
}

// dlsym of hooked names through libcuda's handle, RTLD_DEFAULT and RTLD_NEXT gives the wrapper;
// other names give the driver's own functions.
int dlsym_check() {
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  void* shim = dlopen("libvgpu.so", RTLD_NOW | RTLD_NOLOAD);
  std::string problems;
  if (!cuda || !shim) problems += " no-handles";
  if (cuda && shim) {
    void* wrapper = dlsym(shim, "cuMemAlloc_v2");
    if (!wrapper) problems += " no-wrapper";
    if (dlsym(cuda, "cuMemAlloc_v2") != wrapper) problems += " libcuda-handle";
    if (dlsym(RTLD_DEFAULT, "cuMemAlloc_v2") != wrapper) problems += " rtld-default";
    if (dlsym(RTLD_NEXT, "cuMemAlloc_v2") != wrapper) problems += " rtld-next";
    if (dlsym(cuda, "cuGetProcAddress") != dlsym(shim, "cuGetProcAddress")) problems += " gpa";
    // Not hooked: the driver's own symbol, found in libcuda (the shim does not define it).
    void* plain = dlsym(cuda, "cuStreamQuery");
    Dl_info info{};
    if (!plain || !dladdr(plain, &info) || !std::strstr(info.dli_fname, "libcuda")) {
      problems += " passthrough";
    }
    if (dlsym(cuda, "cuNoSuchFunction") != nullptr) problems += " unknown-name";
    // RTLD_NEXT from this executable keeps its meaning: the next definition after the program.
    if (dlsym(RTLD_NEXT, "cuStreamQuery") != plain) problems += " rtld-next-passthrough";
    void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!nvml ||
        dlsym(nvml, "nvmlDeviceGetMemoryInfo_v2") != dlsym(shim, "nvmlDeviceGetMemoryInfo_v2")) {
      problems += " nvml";
    }
  }
  std::printf("dlsym %s\n", problems.empty() ? "ok" : problems.c_str());
  return 0;
}

// The driver entry `name` at `version` through the (shim's) cuGetProcAddress_v2.
void* resolve(const char* name, int version) {
  void* pointer = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  if (cuGetProcAddress_v2(name, &pointer, version, CU_GET_PROC_ADDRESS_DEFAULT, &status) !=
      CUDA_SUCCESS) {
    return nullptr;
  }
  return pointer;
}

CUresult build_graph(const std::string& kind, uint64_t bytes, const std::string& inst,
                     CUgraphExec* exec) {
  CUgraph graph = nullptr;
  if (kind == "capture") {
    if (!g_stream) {
      if (CUresult r = cuStreamCreate(&g_stream, CU_STREAM_NON_BLOCKING); r) return r;
    }
    if (CUresult r = cuStreamBeginCapture_v2(g_stream, CU_STREAM_CAPTURE_MODE_GLOBAL); r) return r;
    CUdeviceptr pointer = 0;
    const CUresult allocated = cuMemAllocAsync(&pointer, bytes, g_stream);
    if (CUresult r = cuStreamEndCapture(g_stream, &graph); r) return r;
    if (allocated != CUDA_SUCCESS) return allocated;
  } else {
    if (CUresult r = cuGraphCreate(&graph, 0); r) return r;
    if (kind == "node") {
      CUDA_MEM_ALLOC_NODE_PARAMS params{};
      params.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
      params.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      params.poolProps.location.id = 0;
      params.bytesize = bytes;
      CUgraphNode node = nullptr;
      if (CUresult r = cuGraphAddMemAllocNode(&node, graph, nullptr, 0, &params); r) return r;
    } else if (kind != "none") {
      std::fprintf(stderr, "vgpu_probe: unknown graph kind %s\n", kind.c_str());
      std::exit(2);
    }
  }
  if (inst == "params") {
    CUDA_GRAPH_INSTANTIATE_PARAMS params{};
    return cuGraphInstantiateWithParams(exec, graph, &params);
  }
  if (inst == "legacy") return cuGraphInstantiate(exec, graph, nullptr, nullptr, 0);
  if (inst == "v2") return cuGraphInstantiate_v2(exec, graph, nullptr, nullptr, 0);
  if (inst == "proc") {
    using Fn = CUresult (*)(CUgraphExec*, CUgraph, unsigned long long);
    auto instantiate = reinterpret_cast<Fn>(resolve("cuGraphInstantiate", 12000));
    return instantiate ? instantiate(exec, graph, 0) : CUDA_ERROR_NOT_FOUND;
  }
  return cuGraphInstantiateWithFlags(exec, graph, 0);
}

void print_result(const char* what, CUresult r) {
  const char* name = tessera::cuda_abi::cu_result_name(r);
  std::printf("%s %s\n", what, name ? name : "?");
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IONBF, 0);
  for (int i = 1; i < argc; ++i) {
    const std::string command = argv[i];
    const std::vector<std::string> parts = split(command, ':');
    const std::string& verb = parts[0];
    if (verb == "init") {
      const int ordinal = parts.size() > 1 ? std::atoi(parts[1].c_str()) : 0;
      CUresult r = cuInit(0);
      CUdevice device = 0;
      CUcontext context = nullptr;
      if (r == CUDA_SUCCESS) r = cuDeviceGet(&device, ordinal);
      if (r == CUDA_SUCCESS) r = cuDevicePrimaryCtxRetain(&context, device);
      if (r == CUDA_SUCCESS) r = cuCtxSetCurrent(context);
      print_result("init", r);
    } else if (verb == "release") {
      print_result("release", cuDevicePrimaryCtxRelease_v2(
                                  parts.size() > 1 ? std::atoi(parts[1].c_str()) : 0));
    } else if (verb == "ctx") {
      const int version = std::atoi(parts.at(1).c_str());
      const int ordinal = std::atoi(parts.at(2).c_str());
      CUcontext context = nullptr;
      CUresult r = CUDA_ERROR_INVALID_VALUE;
      if (version == 2) r = cuCtxCreate_v2(&context, 0, ordinal);
      if (version == 3) r = cuCtxCreate_v3(&context, nullptr, 0, 0, ordinal);
      if (version == 4) r = cuCtxCreate_v4(&context, nullptr, 0, ordinal);
      if (r == CUDA_SUCCESS) g_contexts.push_back(context);
      print_result("ctx", r);
    } else if (verb == "destroy") {
      CUresult r = CUDA_ERROR_INVALID_CONTEXT;
      if (!g_contexts.empty()) {
        r = cuCtxDestroy_v2(g_contexts.back());
        g_contexts.pop_back();
      }
      print_result("destroy", r);
    } else if (verb == "alloc") {
      Held held;
      const CUresult r =
          allocate(parts.at(1), size_arg(parts, 2), size_arg(parts, 3), size_arg(parts, 4), &held);
      if (r == CUDA_SUCCESS) g_held.push_back(held);
      print_result(("alloc " + parts[1]).c_str(), r);
    } else if (verb == "fill") {
      uint64_t count = 0;
      uint64_t bytes = 0;
      CUresult r = CUDA_SUCCESS;
      while (count < 100000) {
        Held held;
        r = allocate(parts.at(1), size_arg(parts, 2), size_arg(parts, 3), size_arg(parts, 4),
                     &held);
        if (r != CUDA_SUCCESS) break;
        g_held.push_back(held);
        ++count;
        bytes += held.bytes;
      }
      const char* name = tessera::cuda_abi::cu_result_name(r);
      std::printf("fill %s %llu %llu %s\n", parts[1].c_str(),
                  static_cast<unsigned long long>(count), static_cast<unsigned long long>(bytes),
                  name ? name : "?");
    } else if (verb == "free") {
      CUresult r = CUDA_ERROR_INVALID_VALUE;
      if (!g_held.empty()) {
        r = release(g_held.back());
        g_held.pop_back();
      }
      print_result("free", r);
    } else if (verb == "freeall") {
      CUresult worst = CUDA_SUCCESS;
      while (!g_held.empty()) {
        const CUresult r = release(g_held.back());
        if (r != CUDA_SUCCESS) worst = r;
        g_held.pop_back();
      }
      print_result("freeall", worst);
    } else if (verb == "info") {
      size_t free_bytes = 0;
      size_t total = 0;
      const CUresult r = cuMemGetInfo_v2(&free_bytes, &total);
      std::printf("info %s %zu %zu\n", tessera::cuda_abi::cu_result_name(r), free_bytes, total);
    } else if (verb == "infonull") {
      size_t value = 0;
      const CUresult a = cuMemGetInfo_v2(nullptr, &value);
      const CUresult b = cuMemGetInfo_v2(&value, nullptr);
      std::printf("infonull %s %s\n", tessera::cuda_abi::cu_result_name(a),
                  tessera::cuda_abi::cu_result_name(b));
    } else if (verb == "total") {
      size_t bytes = 0;
      const CUresult r =
          cuDeviceTotalMem_v2(&bytes, parts.size() > 1 ? std::atoi(parts[1].c_str()) : 0);
      std::printf("total %s %zu\n", tessera::cuda_abi::cu_result_name(r), bytes);
    } else if (verb == "nvml") {
      nvmlReturn_t r = nvmlInit_v2();
      nvmlDevice_t device = nullptr;
      if (r == NVML_SUCCESS) {
        r = nvmlDeviceGetHandleByIndex_v2(parts.size() > 1 ? std::atoi(parts[1].c_str()) : 0,
                                          &device);
      }
      nvmlMemory_t v1{};
      nvmlMemory_v2_t v2{};
      v2.version = nvmlMemory_v2;
      nvmlReturn_t r1 = r == NVML_SUCCESS ? nvmlDeviceGetMemoryInfo(device, &v1) : r;
      nvmlReturn_t r2 = r == NVML_SUCCESS ? nvmlDeviceGetMemoryInfo_v2(device, &v2) : r;
      std::printf("nvml %d %llu %llu %llu %d %llu %llu %llu %llu\n", static_cast<int>(r1), v1.total,
                  v1.free, v1.used, static_cast<int>(r2), v2.total, v2.free, v2.used, v2.reserved);
    } else if (verb == "nvmluuid") {
      nvmlReturn_t r = nvmlInit_v2();
      nvmlDevice_t device = nullptr;
      const std::string uuid = parts.size() > 1 ? parts[1] : "";
      if (r == NVML_SUCCESS) r = nvmlDeviceGetHandleByUUID(uuid.c_str(), &device);
      nvmlMemory_t v1{};
      const nvmlReturn_t r1 = r == NVML_SUCCESS ? nvmlDeviceGetMemoryInfo(device, &v1) : r;
      std::printf("nvmluuid %d %llu %llu %llu\n", static_cast<int>(r1), v1.total, v1.free, v1.used);
    } else if (verb == "mt") {
      // mt:<threads>:<iterations>:<size>: threads allocate and free concurrently in the current
      // context; prints how many allocations or frees failed.
      const int threads = std::atoi(parts.at(1).c_str());
      const int iterations = std::atoi(parts.at(2).c_str());
      const uint64_t bytes = size_arg(parts, 3);
      const bool async = parts.size() > 4 && parts[4] == "async";
      CUcontext context = nullptr;
      cuCtxGetCurrent(&context);
      std::atomic<int> failures{0};
      std::vector<std::thread> workers;
      for (int t = 0; t < threads; ++t) {
        workers.emplace_back([&] {
          cuCtxSetCurrent(context);
          for (int n = 0; n < iterations; ++n) {
            CUdeviceptr pointer = 0;
            if ((async ? cuMemAllocAsync(&pointer, bytes, nullptr)
                       : cuMemAlloc_v2(&pointer, bytes)) != CUDA_SUCCESS) {
              failures.fetch_add(1);
              continue;
            }
            if ((async ? cuMemFreeAsync(pointer, nullptr) : cuMemFree_v2(pointer)) !=
                CUDA_SUCCESS) {
              failures.fetch_add(1);
            }
          }
        });
      }
      for (auto& worker : workers) worker.join();
      std::printf("mt %d\n", failures.load());
    } else if (verb == "graph") {
      CUgraphExec exec = nullptr;
      const CUresult r = build_graph(parts.at(1), size_arg(parts, 2),
                                     parts.size() > 3 ? parts[3] : "flags", &exec);
      if (r == CUDA_SUCCESS) g_execs.push_back(exec);
      print_result(("graph " + parts[1]).c_str(), r);
    } else if (verb == "glaunch" || verb == "gupload") {
      using Fn = CUresult (*)(CUgraphExec, CUstream);
      Fn run = verb == "glaunch" ? &cuGraphLaunch : &cuGraphUpload;
      if (parts.size() > 1 && parts[1] == "proc") {
        run = reinterpret_cast<Fn>(
            resolve(verb == "glaunch" ? "cuGraphLaunch" : "cuGraphUpload", 12000));
      }
      CUresult r = CUDA_ERROR_INVALID_VALUE;
      if (run && !g_execs.empty()) r = run(g_execs.back(), nullptr);
      print_result(verb.c_str(), r);
    } else if (verb == "gdestroy") {
      CUresult r = CUDA_ERROR_INVALID_VALUE;
      if (!g_execs.empty()) {
        r = cuGraphExecDestroy(g_execs.back());
        g_execs.pop_back();
      }
      print_result("gdestroy", r);
    } else if (verb == "gtrim") {
      using Fn = CUresult (*)(CUdevice);
      Fn trim = &cuDeviceGraphMemTrim;
      if (parts.size() > 1 && parts[1] == "proc") {
        trim = reinterpret_cast<Fn>(resolve("cuDeviceGraphMemTrim", 12000));
      }
      print_result("gtrim", trim ? trim(0) : CUDA_ERROR_NOT_FOUND);
    } else if (verb == "gattr") {
      cuuint64_t reserved = ~0ull;
      cuuint64_t used = ~0ull;
      cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &reserved);
      cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &used);
      std::printf("gattr %llu %llu\n", static_cast<unsigned long long>(reserved),
                  static_cast<unsigned long long>(used));
    } else if (verb == "pooldestroy") {
      print_result("pooldestroy", cuMemPoolDestroy(g_pool));
      g_pool = nullptr;
    } else if (verb == "freebad") {
      print_result("freebad", cuMemFree_v2(0xdead0000beefull));
    } else if (verb == "sync") {
      print_result("sync", cuCtxSynchronize());
    } else if (verb == "count") {
      std::printf("count %s %lld\n", parts.at(1).c_str(), call_count(parts[1].c_str()));
    } else if (verb == "procmatrix") {
      proc_matrix();
    } else if (verb == "dlsym") {
      dlsym_check();
    } else if (verb == "ready") {
      std::printf("ready\n");
    } else if (verb == "hold") {
      while (true) pause();
    } else if (verb == "waitfile") {
      const std::string path = command.substr(std::strlen("waitfile:"));
      while (access(path.c_str(), F_OK) != 0) usleep(200);
    } else if (verb == "sleepms") {
      usleep(static_cast<useconds_t>(std::atoi(parts.at(1).c_str())) * 1000);
    } else if (verb == "churn") {
      std::printf("churning\n");
      while (true) {
        Held held;
        if (allocate(parts.at(1), size_arg(parts, 2), 0, 0, &held) == CUDA_SUCCESS) {
          release(held);
        }
      }
    } else {
      std::fprintf(stderr, "vgpu_probe: unknown command %s\n", command.c_str());
      return 2;
    }
  }
  return 0;
}

// Device memory on the simulated GPU: one pool shared by all processes, every allocation family,
// what cuMemGetInfo reports, and memory returning when a process dies.
#include <cuda.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <vector>

#include "sim_test_support.h"

namespace simgpu::testing {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kDevice = 16 * kGiB;
constexpr uint64_t kOverhead = 500 * kMiB;

int run(const std::function<int(FILE*)>& body) {
  Child child(body);
  return child.wait_exit();
}

TEST(SimMemory, ContextOverheadIsChargedAndMemGetInfoReportsTheDevice) {
  SimEnvironment env;
  EXPECT_EQ(run([](FILE*) {
              CUcontext context;
              if (CUresult r = init_primary(&context); r) return static_cast<int>(r);
              size_t free_bytes = 0, total = 0;
              if (cuMemGetInfo(&free_bytes, &total) != CUDA_SUCCESS) return 100;
              if (total != kDevice) return 101;
              if (free_bytes != kDevice - kOverhead) return 102;
              if (cuMemGetInfo(nullptr, &total) != CUDA_ERROR_INVALID_VALUE) return 103;
              return 0;
            }),
            0);
}

TEST(SimMemory, MemGetInfoNeedsAContext) {
  SimEnvironment env;
  EXPECT_EQ(run([](FILE*) {
              if (cuInit(0) != CUDA_SUCCESS) return 1;
              size_t free_bytes = 0, total = 0;
              return cuMemGetInfo(&free_bytes, &total) == CUDA_ERROR_INVALID_CONTEXT ? 0 : 2;
            }),
            0);
}

TEST(SimMemory, CallsBeforeInitFail) {
  SimEnvironment env;
  EXPECT_EQ(run([](FILE*) {
              int count = 0;
              if (cuDeviceGetCount(&count) != CUDA_ERROR_NOT_INITIALIZED) return 1;
              int version = 0;
              if (cuDriverGetVersion(&version) != CUDA_SUCCESS || version != 13000) return 2;
              return 0;
            }),
            0);
}

TEST(SimMemory, AllocationBeyondCapacityFailsWithOutOfMemory) {
  SimEnvironment env;
  EXPECT_EQ(run([](FILE*) {
              CUcontext context;
              if (CUresult r = init_primary(&context); r) return static_cast<int>(r);
              std::vector<CUdeviceptr> held;
              CUdeviceptr ptr = 0;
              uint64_t obtained = 0;
              while (cuMemAlloc(&ptr, kGiB) == CUDA_SUCCESS) {
                held.push_back(ptr);
                obtained += kGiB;
              }
              // 16 GiB less 500 MiB of context: 15 whole GiB fit.
              if (obtained != 15 * kGiB) return 100;
              if (cuMemAlloc(&ptr, kGiB) != CUDA_ERROR_OUT_OF_MEMORY) return 101;
              // The remainder, exactly, still fits.
              const uint64_t rest = kDevice - kOverhead - 15 * kGiB;
              if (cuMemAlloc(&ptr, rest) != CUDA_SUCCESS) return 102;
              if (cuMemAlloc(&ptr, 512) != CUDA_ERROR_OUT_OF_MEMORY) return 103;
              if (cuMemFree(ptr) != CUDA_SUCCESS) return 104;
              for (CUdeviceptr p : held) {
                if (cuMemFree(p) != CUDA_SUCCESS) return 105;
              }
              size_t free_bytes = 0, total = 0;
              cuMemGetInfo(&free_bytes, &total);
              return free_bytes == kDevice - kOverhead ? 0 : 106;
            }),
            0);
}

TEST(SimMemory, InvalidArgumentsGetDriverErrors) {
  SimEnvironment env;
  EXPECT_EQ(run([](FILE*) {
              CUcontext context;
              if (CUresult r = init_primary(&context); r) return static_cast<int>(r);
              CUdeviceptr ptr = 0;
              if (cuMemAlloc(&ptr, 0) != CUDA_ERROR_INVALID_VALUE) return 1;
              if (cuMemAlloc(nullptr, 16) != CUDA_ERROR_INVALID_VALUE) return 2;
              if (cuMemFree(0xdead0000) != CUDA_ERROR_INVALID_VALUE) return 3;
              if (cuMemFree(0) != CUDA_SUCCESS) return 4;
              size_t pitch = 0;
              if (cuMemAllocPitch(&ptr, &pitch, 100, 10, 3) != CUDA_ERROR_INVALID_VALUE) return 5;
              return 0;
            }),
            0);
}

TEST(SimMemory, PitchIsRoundedTo512Bytes) {
  SimEnvironment env;
  EXPECT_EQ(run([](FILE*) {
              CUcontext context;
              if (CUresult r = init_primary(&context); r) return static_cast<int>(r);
              CUdeviceptr ptr = 0;
              size_t pitch = 0;
              if (cuMemAllocPitch(&ptr, &pitch, 1000, 4096, 4) != CUDA_SUCCESS) return 1;
              if (pitch != 1024) return 2;
              size_t free_bytes = 0, total = 0;
              cuMemGetInfo(&free_bytes, &total);
              // 1024 x 4096 = 4 MiB, two whole pages.
              if (kDevice - kOverhead - free_bytes != 4 * kMiB) return 3;
              return cuMemFree(ptr) == CUDA_SUCCESS ? 0 : 4;
            }),
            0);
}

TEST(SimMemory, ManagedMemoryIsHostBackedAndNotChargedToTheDevice) {
  SimEnvironment env;
  EXPECT_EQ(run([](FILE*) {
              CUcontext context;
              if (CUresult r = init_primary(&context); r) return static_cast<int>(r);
              CUdeviceptr ptr = 0;
              if (cuMemAllocManaged(&ptr, 64 * kGiB, CU_MEM_ATTACH_GLOBAL) != CUDA_SUCCESS)
                return 1;
              reinterpret_cast<volatile char*>(ptr)[12345] = 7;  // host-accessible
              size_t free_bytes = 0, total = 0;
              cuMemGetInfo(&free_bytes, &total);
              if (free_bytes != kDevice - kOverhead) return 2;
              return cuMemFree(ptr) == CUDA_SUCCESS ? 0 : 3;
            }),
            0);
}

TEST(SimMemory, PoolsReserveKeepAndReleaseAtSynchronisation) {
  SimEnvironment env;
  EXPECT_EQ(
      run([](FILE*) {
        CUcontext context;
        if (CUresult r = init_primary(&context); r) return static_cast<int>(r);
        CUmemoryPool pool;
        if (cuDeviceGetDefaultMemPool(&pool, 0) != CUDA_SUCCESS) return 1;
        CUstream stream;
        cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
        CUdeviceptr ptr = 0;
        if (cuMemAllocAsync(&ptr, 3 * kGiB, stream) != CUDA_SUCCESS) return 2;
        cuuint64_t reserved = 0, used = 0;
        cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved);
        cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used);
        if (reserved != 3 * kGiB || used != 3 * kGiB) return 3;
        if (cuMemFreeAsync(ptr, stream) != CUDA_SUCCESS) return 4;
        cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved);
        if (reserved != 3 * kGiB) return 5;  // kept until synchronisation
        size_t free_bytes = 0, total = 0;
        cuMemGetInfo(&free_bytes, &total);
        if (free_bytes != kDevice - kOverhead - 3 * kGiB) return 6;
        cuStreamSynchronize(stream);  // release threshold 0: everything goes back
        cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved);
        if (reserved != 0) return 7;
        // With a high threshold the pool keeps its memory until trimmed.
        cuuint64_t threshold = UINT64_MAX;
        cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold);
        cuMemAllocAsync(&ptr, 2 * kGiB, stream);
        cuMemFreeAsync(ptr, stream);
        cuStreamSynchronize(stream);
        cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved);
        if (reserved != 2 * kGiB) return 8;
        cuuint64_t high = 0;
        cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &high);
        if (high != 3 * kGiB) return 9;
        if (cuMemPoolTrimTo(pool, kGiB) != CUDA_SUCCESS) return 10;
        cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved);
        if (reserved != kGiB) return 11;
        // A created pool draws from the same device memory.
        CUmemPoolProps props{};
        props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        props.location.id = 0;
        CUmemoryPool created;
        if (cuMemPoolCreate(&created, &props) != CUDA_SUCCESS) return 12;
        if (cuMemAllocFromPoolAsync(&ptr, 15 * kGiB, created, stream) != CUDA_ERROR_OUT_OF_MEMORY) {
          return 13;  // 1 GiB is still reserved by the default pool
        }
        if (cuMemAllocFromPoolAsync(&ptr, 14 * kGiB, created, stream) != CUDA_SUCCESS) return 14;
        return 0;
      }),
      0);
}

// The real driver's rule: a pool holding more than its release threshold (0 by default) gives the
// rest back at the next stream, event or context synchronisation, and only then (a host function
// waits for the stream but is no synchronisation of the program's).
TEST(SimMemory, PoolsReleaseAtEveryKindOfSynchronisationAndOnlyThere) {
  SimEnvironment env;
  EXPECT_EQ(run([](FILE*) {
              CUcontext context;
              if (CUresult r = init_primary(&context); r) return static_cast<int>(r);
              CUmemPoolProps props{};
              props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
              props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
              props.location.id = 0;
              CUmemoryPool created;
              if (cuMemPoolCreate(&created, &props) != CUDA_SUCCESS) return 1;
              cuuint64_t threshold = ~0ull;
              if (cuMemPoolGetAttribute(created, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold) ||
                  threshold != 0) {
                return 2;  // the default threshold is 0
              }
              CUstream stream;
              cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
              CUevent event;
              cuEventCreate(&event, CU_EVENT_DISABLE_TIMING);
              auto reserved = [&] {
                cuuint64_t value = ~0ull;
                cuMemPoolGetAttribute(created, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &value);
                return value;
              };
              auto fill_and_free = [&] {
                CUdeviceptr ptr = 0;
                if (cuMemAllocFromPoolAsync(&ptr, kGiB, created, stream) != CUDA_SUCCESS)
                  return false;
                return cuMemFreeAsync(ptr, stream) == CUDA_SUCCESS && reserved() == kGiB;
              };
              // A host function waits for the stream's work: the pool keeps its memory.
              if (!fill_and_free()) return 3;
              if (cuLaunchHostFunc(
                      stream, [](void*) {}, nullptr) != CUDA_SUCCESS)
                return 4;
              if (reserved() != kGiB) return 5;
              if (cuEventRecord(event, stream) != CUDA_SUCCESS) return 6;
              if (cuEventSynchronize(event) != CUDA_SUCCESS || reserved() != 0) return 7;
              if (!fill_and_free()) return 8;
              if (cuCtxSynchronize() != CUDA_SUCCESS || reserved() != 0) return 9;
              if (!fill_and_free()) return 10;
              if (cuCtxSynchronize_v2(context) != CUDA_SUCCESS || reserved() != 0) return 11;
              if (!fill_and_free()) return 12;
              if (cuStreamSynchronize(stream) != CUDA_SUCCESS || reserved() != 0) return 13;
              // Memory still in use stays; only the idle part above the threshold goes.
              CUdeviceptr kept = 0;
              if (cuMemAllocFromPoolAsync(&kept, kGiB, created, stream) != CUDA_SUCCESS) return 14;
              CUdeviceptr idle = 0;
              if (cuMemAllocFromPoolAsync(&idle, kGiB, created, stream) != CUDA_SUCCESS) return 15;
              if (cuMemFreeAsync(idle, stream) != CUDA_SUCCESS || reserved() != 2 * kGiB) return 15;
              threshold = 512 * kMiB;
              cuMemPoolSetAttribute(created, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold);
              if (cuStreamSynchronize(stream) != CUDA_SUCCESS || reserved() != kGiB) return 16;
              cuMemFreeAsync(kept, stream);
              if (cuStreamSynchronize(stream) != CUDA_SUCCESS || reserved() != 512 * kMiB)
                return 17;
              return 0;
            }),
            0);
}

cuuint64_t graph_attribute(CUgraphMem_attribute attribute) {
  cuuint64_t value = ~0ull;
  if (cuDeviceGetGraphMemAttribute(0, attribute, &value) != CUDA_SUCCESS) return ~0ull;
  return value;
}

size_t free_memory() {
  size_t free_bytes = 0, total = 0;
  cuMemGetInfo(&free_bytes, &total);
  return free_bytes;
}

TEST(SimMemory, GraphMemoryIsReservedAtLaunchKeptByTheGraphPoolAndTrimmed) {
  SimEnvironment env;
  const int code = run([](FILE*) {
    CUcontext context;
    if (CUresult r = init_primary(&context); r) return static_cast<int>(r);
    CUgraph graph;
    if (cuGraphCreate(&graph, 0) != CUDA_SUCCESS) return 1;
    CUDA_MEM_ALLOC_NODE_PARAMS params{};
    params.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    params.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    params.poolProps.location.id = 0;
    params.bytesize = 3 * kGiB + 1;  // 2 MiB pages: 3 GiB + 2 MiB
    CUgraphNode node;
    if (cuGraphAddMemAllocNode(&node, graph, nullptr, 0, &params) != CUDA_SUCCESS) return 2;
    if (params.dptr == 0) return 3;
    const uint64_t footprint = 3 * kGiB + 2 * kMiB;
    // The node is visible to cuGraphGetNodes / cuGraphNodeGetType / GetParams.
    size_t count = 0;
    CUgraphNode nodes[4] = {};
    count = 4;
    if (cuGraphGetNodes(graph, nodes, &count) != CUDA_SUCCESS || count != 1) return 4;
    CUgraphNodeType type;
    if (cuGraphNodeGetType(nodes[0], &type) != CUDA_SUCCESS ||
        type != CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
      return 5;
    }
    CUDA_MEM_ALLOC_NODE_PARAMS read{};
    if (cuGraphMemAllocNodeGetParams(nodes[0], &read) != CUDA_SUCCESS ||
        read.bytesize != params.bytesize || read.dptr != params.dptr) {
      return 6;
    }
    CUgraphExec exec;
    if (cuGraphInstantiateWithFlags(&exec, graph, 0) != CUDA_SUCCESS) return 7;
    const size_t before = free_memory();
    // Nothing is taken before the launch.
    if (graph_attribute(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) != 0) return 8;
    if (cuGraphLaunch(exec, nullptr) != CUDA_SUCCESS) return 9;
    if (graph_attribute(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) != footprint ||
        graph_attribute(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) != footprint ||
        free_memory() != before - footprint) {
      return 10;
    }
    // Relaunching maps nothing new.
    if (cuGraphLaunch(exec, nullptr) != CUDA_SUCCESS) return 11;
    if (free_memory() != before - footprint) return 12;
    // Destroyed: back to the graph pool, still reserved; a second executable reuses it.
    if (cuGraphExecDestroy(exec) != CUDA_SUCCESS) return 13;
    if (graph_attribute(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) != footprint ||
        graph_attribute(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) != 0 ||
        free_memory() != before - footprint) {
      return 14;
    }
    if (cuGraphInstantiateWithFlags(&exec, graph, 0) != CUDA_SUCCESS) return 15;
    if (cuGraphUpload(exec, nullptr) != CUDA_SUCCESS) return 16;  // upload maps too
    if (graph_attribute(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) != footprint ||
        free_memory() != before - footprint) {
      return 17;
    }
    // Trim keeps what is in use, then returns everything once the executable is gone.
    if (cuDeviceGraphMemTrim(0) != CUDA_SUCCESS) return 18;
    if (graph_attribute(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) != footprint) return 19;
    cuGraphExecDestroy(exec);
    if (cuDeviceGraphMemTrim(0) != CUDA_SUCCESS) return 20;
    if (graph_attribute(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) != 0 || free_memory() != before) {
      return 21;
    }
    // High marks, and their reset (only to 0, restarting at the current value).
    if (graph_attribute(CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH) != footprint ||
        graph_attribute(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH) != footprint) {
      return 22;
    }
    cuuint64_t value = 1;
    if (cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &value) !=
        CUDA_ERROR_INVALID_VALUE) {
      return 23;
    }
    value = 0;
    if (cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &value) != CUDA_SUCCESS ||
        cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH, &value) !=
            CUDA_SUCCESS) {
      return 24;
    }
    if (graph_attribute(CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH) != 0 ||
        graph_attribute(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH) != 0) {
      return 25;
    }
    if (cuDeviceGraphMemTrim(7) != CUDA_ERROR_INVALID_DEVICE) return 26;
    if (cuDeviceGetGraphMemAttribute(7, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &value) !=
        CUDA_ERROR_INVALID_DEVICE) {
      return 27;
    }
    // A launch that does not fit fails with OUT_OF_MEMORY and takes nothing.
    CUgraph big;
    cuGraphCreate(&big, 0);
    params.bytesize = kDevice;
    if (cuGraphAddMemAllocNode(&node, big, nullptr, 0, &params) != CUDA_SUCCESS) return 28;
    CUgraphExec big_exec;
    if (cuGraphInstantiateWithFlags(&big_exec, big, 0) != CUDA_SUCCESS) return 29;
    if (cuGraphLaunch(big_exec, nullptr) != CUDA_ERROR_OUT_OF_MEMORY) return 30;
    if (cuGraphUpload(big_exec, nullptr) != CUDA_ERROR_OUT_OF_MEMORY) return 31;
    if (graph_attribute(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) != 0 || free_memory() != before) {
      return 32;
    }
    return 0;
  });
  EXPECT_EQ(code, 0);
}

TEST(SimMemory, CapturedStreamOrderedAllocationsBecomeGraphMemoryNodes) {
  SimEnvironment env;
  const int code = run([](FILE*) {
    CUcontext context;
    if (CUresult r = init_primary(&context); r) return static_cast<int>(r);
    CUstream stream;
    cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
    CUmemoryPool pool;
    cuDeviceGetDefaultMemPool(&pool, 0);
    const size_t before = free_memory();
    if (cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL) != CUDA_SUCCESS) return 1;
    CUdeviceptr ptr = 0;
    // Larger than the device: capture takes nothing, so it succeeds.
    if (cuMemAllocAsync(&ptr, 2 * kDevice, stream) != CUDA_SUCCESS || ptr == 0) return 2;
    CUdeviceptr small = 0;
    if (cuMemAllocAsync(&small, 3 * kMiB, stream) != CUDA_SUCCESS) return 3;
    if (cuMemFreeAsync(small, stream) != CUDA_SUCCESS) return 4;
    if (cuMemFreeAsync(0xdead0000ull, stream) != CUDA_ERROR_INVALID_VALUE) return 5;
    cuuint64_t reserved = 0;
    cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved);
    if (reserved != 0 || free_memory() != before) return 6;
    CUgraph graph;
    if (cuStreamEndCapture(stream, &graph) != CUDA_SUCCESS) return 7;
    size_t count = 0;
    if (cuGraphGetNodes(graph, nullptr, &count) != CUDA_SUCCESS || count != 3) return 8;
    CUgraphNode nodes[3];
    cuGraphGetNodes(graph, nodes, &count);
    CUgraphNodeType types[3];
    for (int i = 0; i < 3; ++i) cuGraphNodeGetType(nodes[i], &types[i]);
    if (types[0] != CU_GRAPH_NODE_TYPE_MEM_ALLOC || types[1] != CU_GRAPH_NODE_TYPE_MEM_ALLOC ||
        types[2] != CU_GRAPH_NODE_TYPE_MEM_FREE) {
      return 9;
    }
    CUdeviceptr freed = 0;
    if (cuGraphMemFreeNodeGetParams(nodes[2], &freed) != CUDA_SUCCESS || freed != small) {
      return 10;
    }
    CUgraphExec exec;
    if (cuGraphInstantiateWithFlags(&exec, graph, 0) != CUDA_SUCCESS) return 11;
    if (cuGraphLaunch(exec, stream) != CUDA_ERROR_OUT_OF_MEMORY) return 12;
    cuGraphExecDestroy(exec);
    cuGraphDestroy(graph);
    // The same capture with a size that fits is charged at launch.
    cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
    if (cuMemAllocAsync(&ptr, kGiB, stream) != CUDA_SUCCESS) return 13;
    cuStreamEndCapture(stream, &graph);
    cuGraphInstantiateWithFlags(&exec, graph, 0);
    if (free_memory() != before) return 14;
    if (cuGraphLaunch(exec, stream) != CUDA_SUCCESS) return 15;
    if (free_memory() != before - kGiB) return 16;
    // Outside capture, cuMemAllocAsync is a pool allocation again.
    if (cuMemAllocAsync(&ptr, kGiB, stream) != CUDA_SUCCESS) return 17;
    cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved);
    if (reserved != kGiB || free_memory() != before - 2 * kGiB) return 18;
    return 0;
  });
  EXPECT_EQ(code, 0);
}

TEST(SimMemory, VirtualMemoryChargesPhysicalAllocationsUntilReleasedAndUnmapped) {
  SimEnvironment env;
  EXPECT_EQ(run([](FILE*) {
              CUcontext context;
              if (CUresult r = init_primary(&context); r) return static_cast<int>(r);
              CUmemAllocationProp prop{};
              prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
              prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
              prop.location.id = 0;
              size_t granularity = 0;
              if (cuMemGetAllocationGranularity(&granularity, &prop,
                                                CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS ||
                  granularity != 2 * kMiB) {
                return 1;
              }
              CUmemGenericAllocationHandle handle;
              if (cuMemCreate(&handle, 3 * kMiB, &prop, 0) != CUDA_ERROR_INVALID_VALUE) return 2;
              if (cuMemCreate(&handle, 4 * kGiB, &prop, 0) != CUDA_SUCCESS) return 3;
              CUdeviceptr va = 0;
              if (cuMemAddressReserve(&va, 4 * kGiB, 0, 0, 0) != CUDA_SUCCESS) return 4;
              if (cuMemMap(va, 4 * kGiB, 0, handle, 0) != CUDA_SUCCESS) return 5;
              CUmemAccessDesc access{};
              access.location = prop.location;
              access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
              if (cuMemSetAccess(va, 4 * kGiB, &access, 1) != CUDA_SUCCESS) return 6;
              size_t free_bytes = 0, total = 0;
              cuMemGetInfo(&free_bytes, &total);
              if (free_bytes != kDevice - kOverhead - 4 * kGiB) return 7;
              if (cuMemRelease(handle) != CUDA_SUCCESS) return 8;  // still mapped: still held
              cuMemGetInfo(&free_bytes, &total);
              if (free_bytes != kDevice - kOverhead - 4 * kGiB) return 9;
              if (cuMemUnmap(va, 4 * kGiB) != CUDA_SUCCESS) return 10;
              cuMemGetInfo(&free_bytes, &total);
              if (free_bytes != kDevice - kOverhead) return 11;
              if (cuMemAddressFree(va, 4 * kGiB) != CUDA_SUCCESS) return 12;
              CUmemGenericAllocationHandle too_big;
              if (cuMemCreate(&too_big, 16 * kGiB, &prop, 0) != CUDA_ERROR_OUT_OF_MEMORY) return 13;
              return 0;
            }),
            0);
}

TEST(SimMemory, ArraysAreChargedByTheirSize) {
  SimEnvironment env;
  EXPECT_EQ(run([](FILE*) {
              CUcontext context;
              if (CUresult r = init_primary(&context); r) return static_cast<int>(r);
              CUDA_ARRAY3D_DESCRIPTOR desc{};
              desc.Width = 1024;
              desc.Height = 1024;
              desc.Depth = 64;
              desc.Format = CU_AD_FORMAT_FLOAT;
              desc.NumChannels = 4;  // 1024 * 1024 * 64 * 16 B = 1 GiB
              CUarray array;
              if (cuArray3DCreate(&array, &desc) != CUDA_SUCCESS) return 1;
              size_t free_bytes = 0, total = 0;
              cuMemGetInfo(&free_bytes, &total);
              if (free_bytes != kDevice - kOverhead - kGiB) return 2;
              if (cuArrayDestroy(array) != CUDA_SUCCESS) return 3;
              cuMemGetInfo(&free_bytes, &total);
              if (free_bytes != kDevice - kOverhead) return 4;
              desc.NumChannels = 3;
              return cuArray3DCreate(&array, &desc) == CUDA_ERROR_INVALID_VALUE ? 0 : 5;
            }),
            0);
}

TEST(SimMemory, TwoProcessesShareOneDevicePool) {
  SimEnvironment env;
  Child holder([](FILE* out) {
    CUcontext context;
    if (CUresult r = init_primary(&context); r) return static_cast<int>(r);
    CUdeviceptr ptr = 0;
    if (cuMemAlloc(&ptr, 10 * kGiB) != CUDA_SUCCESS) return 1;
    std::fprintf(out, "ready\n");
    pause();  // holds the memory until killed
    return 0;
  });
  ASSERT_EQ(holder.read_line(), "ready");
  Child other([](FILE*) {
    CUcontext context;
    if (CUresult r = init_primary(&context); r) return static_cast<int>(r);
    size_t free_bytes = 0, total = 0;
    cuMemGetInfo(&free_bytes, &total);
    // Both contexts' overhead and the holder's 10 GiB are gone.
    if (free_bytes != kDevice - 2 * kOverhead - 10 * kGiB) return 1;
    CUdeviceptr ptr = 0;
    // 16 GiB - 2 x 500 MiB - 10 GiB = 5144 MiB left.
    if (cuMemAlloc(&ptr, 5145 * kMiB) != CUDA_ERROR_OUT_OF_MEMORY) return 2;
    if (cuMemAlloc(&ptr, 5144 * kMiB) != CUDA_SUCCESS) return 3;
    return 0;
  });
  EXPECT_EQ(other.wait_exit(), 0);
  holder.kill_now();
  EXPECT_EQ(holder.wait_exit(), 128 + SIGKILL);
  // The killed holder's memory is back for the next process.
  EXPECT_EQ(run([](FILE*) {
              CUcontext context;
              if (CUresult r = init_primary(&context); r) return static_cast<int>(r);
              CUdeviceptr ptr = 0;
              return cuMemAlloc(&ptr, 15 * kGiB) == CUDA_SUCCESS ? 0 : 1;
            }),
            0);
}

TEST(SimMemory, MemoryOfAKilledUnreapedProcessIsReclaimed) {
  SimEnvironment env;
  Child holder([](FILE* out) {
    CUcontext context;
    if (CUresult r = init_primary(&context); r) return static_cast<int>(r);
    CUdeviceptr ptr = 0;
    if (cuMemAlloc(&ptr, 15 * kGiB) != CUDA_SUCCESS) return 1;
    std::fprintf(out, "ready\n");
    pause();
    return 0;
  });
  ASSERT_EQ(holder.read_line(), "ready");
  holder.kill_now();  // a zombie until reaped: it must not count as alive
  // Until it is one (however long the machine takes to let it die), left unreaped.
  siginfo_t exited{};
  ASSERT_EQ(waitid(P_PID, static_cast<id_t>(holder.pid()), &exited, WEXITED | WNOWAIT), 0);
  EXPECT_EQ(run([](FILE*) {
              CUcontext context;
              if (CUresult r = init_primary(&context); r) return static_cast<int>(r);
              CUdeviceptr ptr = 0;
              return cuMemAlloc(&ptr, 15 * kGiB) == CUDA_SUCCESS ? 0 : 1;
            }),
            0);
}

TEST(SimMemory, FaultInjectionFailsTheNthAllocation) {
  SimEnvironment env;
  setenv("SIMGPU_FAIL_ALLOC_AT", "3", 1);
  EXPECT_EQ(run([](FILE*) {
              CUcontext context;  // the context's overhead is allocation 1
              if (CUresult r = init_primary(&context); r) return static_cast<int>(r);
              CUdeviceptr ptr = 0;
              if (cuMemAlloc(&ptr, kMiB) != CUDA_SUCCESS) return 1;
              if (cuMemAlloc(&ptr, kMiB) != CUDA_ERROR_OUT_OF_MEMORY) return 2;
              if (cuMemAlloc(&ptr, kMiB) != CUDA_SUCCESS) return 3;
              return 0;
            }),
            0);
  unsetenv("SIMGPU_FAIL_ALLOC_AT");
}

TEST(SimMemory, DestroyingAContextReturnsItsMemory) {
  SimEnvironment env;
  EXPECT_EQ(run([](FILE*) {
              if (cuInit(0) != CUDA_SUCCESS) return 1;
              CUcontext primary;
              if (CUresult r = init_primary(&primary); r) return static_cast<int>(r);
              CUcontext created;
              if (cuCtxCreate(&created, nullptr, 0, 0) != CUDA_SUCCESS) return 2;
              CUdeviceptr ptr = 0;
              if (cuMemAlloc(&ptr, 2 * kGiB) != CUDA_SUCCESS) return 3;
              size_t free_bytes = 0, total = 0;
              cuMemGetInfo(&free_bytes, &total);
              if (free_bytes != kDevice - 2 * kOverhead - 2 * kGiB) return 4;
              if (cuCtxDestroy(created) != CUDA_SUCCESS) return 5;
              cuCtxSetCurrent(primary);
              cuMemGetInfo(&free_bytes, &total);
              return free_bytes == kDevice - kOverhead ? 0 : 6;
            }),
            0);
}

TEST(SimMemory, VisibleDevicesSelectAndReorder) {
  SimEnvironment env("name=GPU A,memory=8Gi,sms=10,cc=9.0;name=GPU B,memory=4Gi,sms=20,cc=8.0");
  setenv("CUDA_VISIBLE_DEVICES", "1", 1);
  EXPECT_EQ(run([](FILE*) {
              if (cuInit(0) != CUDA_SUCCESS) return 1;
              int count = 0;
              cuDeviceGetCount(&count);
              if (count != 1) return 2;
              char name[64];
              cuDeviceGetName(name, sizeof name, 0);
              return std::string(name) == "GPU B" ? 0 : 3;
            }),
            0);
  unsetenv("CUDA_VISIBLE_DEVICES");
}

}  // namespace
}  // namespace simgpu::testing

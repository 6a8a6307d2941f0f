// memory-fill-runtime: the memory-fill sample through the CUDA runtime API (cudart) instead of
// the driver API: asks for memory in chunks through one runtime allocation call until the runtime
// refuses (cudaErrorMemoryAllocation) or --max is reached, then frees everything. What a quota
// sees here is what cudart asks of the driver on the program's behalf. cudaMallocHost is host
// memory: it must not take any device memory, which the report's mem_get_info_free shows.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/report.h"
#include "common/runtime.h"
#include "fill_cli.h"
#include "fill_plan.h"

namespace tessera::samples {
namespace {

// make_cudaExtent, which lives in a header meant for nvcc (driver_functions.h).
cudaExtent extent_of(size_t width, size_t height, size_t depth) {
  cudaExtent extent = {};
  extent.width = width;
  extent.height = height;
  extent.depth = depth;
  return extent;
}

// One way of obtaining memory through the runtime. allocate() returns the runtime's answer for
// one chunk and keeps what it got; release_all() frees everything, checking every call.
class ChunkAllocator {
 public:
  ChunkAllocator() = default;
  virtual ~ChunkAllocator() = default;
  ChunkAllocator(const ChunkAllocator&) = delete;
  ChunkAllocator& operator=(const ChunkAllocator&) = delete;

  // On success adds the bytes the chunk really holds to `obtained`.
  virtual cudaError_t allocate(uint64_t bytes, uint64_t& obtained) = 0;
  virtual void release_all() = 0;
};

// Allocators whose chunks are device pointers returned with cudaFree.
class FreedByCudaFree : public ChunkAllocator {
 public:
  void release_all() override {
    for (void* ptr : chunks_) CUDART_CHECK(cudaFree(ptr));
    chunks_.clear();
  }

 protected:
  std::vector<void*> chunks_;
};

class PlainAllocator : public FreedByCudaFree {
 public:
  cudaError_t allocate(uint64_t bytes, uint64_t& obtained) override {
    void* ptr = nullptr;
    const cudaError_t result = cudaMalloc(&ptr, bytes);
    if (result != cudaSuccess) return result;
    chunks_.push_back(ptr);
    obtained += bytes;
    return result;
  }
};

class ManagedAllocator : public FreedByCudaFree {
 public:
  cudaError_t allocate(uint64_t bytes, uint64_t& obtained) override {
    void* ptr = nullptr;
    const cudaError_t result = cudaMallocManaged(&ptr, bytes, cudaMemAttachGlobal);
    if (result != cudaSuccess) return result;
    chunks_.push_back(ptr);
    obtained += bytes;
    return result;
  }
};

// Rows of 64 KiB: a width every pitch alignment divides, so pitch == width.
constexpr uint64_t kRowBytes = 64 * 1024;

class PitchAllocator : public FreedByCudaFree {
 public:
  cudaError_t allocate(uint64_t bytes, uint64_t& obtained) override {
    void* ptr = nullptr;
    size_t pitch = 0;
    const uint64_t rows = bytes / kRowBytes;
    const cudaError_t result = cudaMallocPitch(&ptr, &pitch, kRowBytes, rows);
    if (result != cudaSuccess) return result;
    chunks_.push_back(ptr);
    obtained += pitch * rows;
    return result;
  }
};

// Pitched 3D memory in 2 MiB slices of 32 rows of 64 KiB.
class Pitched3DAllocator : public FreedByCudaFree {
 public:
  cudaError_t allocate(uint64_t bytes, uint64_t& obtained) override {
    cudaPitchedPtr pitched = {};
    const cudaExtent extent = extent_of(kRowBytes, kRows, bytes / kMinChunk);
    const cudaError_t result = cudaMalloc3D(&pitched, extent);
    if (result != cudaSuccess) return result;
    chunks_.push_back(pitched.ptr);
    obtained += pitched.pitch * extent.height * extent.depth;
    return result;
  }

 private:
  static constexpr uint64_t kRows = kMinChunk / kRowBytes;
};

// 3D arrays of floats in 2 MiB slices (1024 x 512 x 4 bytes), so any chunk up to 32 GiB stays
// inside the 16384-slice depth limit of an H100/H200.
class ArrayAllocator : public ChunkAllocator {
 public:
  cudaError_t allocate(uint64_t bytes, uint64_t& obtained) override {
    const cudaChannelFormatDesc format =
        cudaCreateChannelDesc(32, 0, 0, 0, cudaChannelFormatKindFloat);
    const cudaExtent extent = extent_of(kWidth, kHeight, bytes / kSliceBytes);
    cudaArray_t array = nullptr;
    const cudaError_t result = cudaMalloc3DArray(&array, &format, extent);
    if (result != cudaSuccess) return result;
    arrays_.push_back(array);
    obtained += extent.depth * kSliceBytes;
    return result;
  }

  void release_all() override {
    for (cudaArray_t array : arrays_) CUDART_CHECK(cudaFreeArray(array));
    arrays_.clear();
  }

 private:
  static constexpr uint64_t kWidth = 1024;
  static constexpr uint64_t kHeight = 512;
  static constexpr uint64_t kSliceBytes = kWidth * kHeight * sizeof(float);
  static_assert(kSliceBytes == kMinChunk);
  std::vector<cudaArray_t> arrays_;
};

// Page-locked host memory: counted, but it is not device memory.
class HostAllocator : public ChunkAllocator {
 public:
  cudaError_t allocate(uint64_t bytes, uint64_t& obtained) override {
    void* ptr = nullptr;
    const cudaError_t result = cudaMallocHost(&ptr, bytes);
    if (result != cudaSuccess) return result;
    chunks_.push_back(ptr);
    obtained += bytes;
    return result;
  }

  void release_all() override {
    for (void* ptr : chunks_) CUDART_CHECK(cudaFreeHost(ptr));
    chunks_.clear();
  }

 private:
  std::vector<void*> chunks_;
};

// Stream-ordered allocation from a memory pool: the device's default pool (cudaMallocAsync) or
// one of our own (cudaMemPoolCreate + cudaMallocFromPoolAsync). The release threshold is raised to
// the maximum so freed memory would stay reserved in the pool; the pool is trimmed (or
// destroyed) at the end so the memory really goes back.
class StreamOrderedAllocator : public ChunkAllocator {
 public:
  StreamOrderedAllocator(int device, bool own_pool) : own_pool_(own_pool) {
    CUDART_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    if (own_pool_) {
      cudaMemPoolProps props = {};
      props.allocType = cudaMemAllocationTypePinned;
      props.handleTypes = cudaMemHandleTypeNone;
      props.location.type = cudaMemLocationTypeDevice;
      props.location.id = device;
      CUDART_CHECK(cudaMemPoolCreate(&pool_, &props));
    } else {
      CUDART_CHECK(cudaDeviceGetDefaultMemPool(&pool_, device));
    }
    uint64_t threshold = UINT64_MAX;
    CUDART_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &threshold));
  }

  cudaError_t allocate(uint64_t bytes, uint64_t& obtained) override {
    void* ptr = nullptr;
    const cudaError_t result = own_pool_ ? cudaMallocFromPoolAsync(&ptr, bytes, pool_, stream_)
                                         : cudaMallocAsync(&ptr, bytes, stream_);
    if (result != cudaSuccess) return result;
    chunks_.push_back(ptr);
    // The allocation is stream-ordered: wait for it so the memory is really held when counted.
    CUDART_CHECK(cudaStreamSynchronize(stream_));
    obtained += bytes;
    return result;
  }

  void release_all() override {
    for (void* ptr : chunks_) CUDART_CHECK(cudaFreeAsync(ptr, stream_));
    chunks_.clear();
    CUDART_CHECK(cudaStreamSynchronize(stream_));
    if (own_pool_) {
      CUDART_CHECK(cudaMemPoolDestroy(pool_));
    } else {
      CUDART_CHECK(cudaMemPoolTrimTo(pool_, 0));
    }
    CUDART_CHECK(cudaStreamDestroy(stream_));
  }

 private:
  bool own_pool_;
  cudaStream_t stream_ = nullptr;
  cudaMemPool_t pool_ = nullptr;
  std::vector<void*> chunks_;
};

std::unique_ptr<ChunkAllocator> make_allocator(const std::string& api, int device) {
  if (api == "cudaMalloc") return std::make_unique<PlainAllocator>();
  if (api == "cudaMallocAsync") return std::make_unique<StreamOrderedAllocator>(device, false);
  if (api == "cudaMallocFromPoolAsync") {
    return std::make_unique<StreamOrderedAllocator>(device, true);
  }
  if (api == "cudaMallocManaged") return std::make_unique<ManagedAllocator>();
  if (api == "cudaMallocPitch") return std::make_unique<PitchAllocator>();
  if (api == "cudaMalloc3D") return std::make_unique<Pitched3DAllocator>();
  if (api == "cudaMalloc3DArray") return std::make_unique<ArrayAllocator>();
  if (api == "cudaMallocHost") return std::make_unique<HostAllocator>();
  throw std::logic_error("unknown api " + api);  // the command line validated the name
}

void run(const MemoryFillRuntimeOptions& options) {
  const RuntimeDevice device = open_runtime_device(options.device);

  std::optional<uint64_t> max = options.fill.max;
  // Managed memory is not bounded by the device on a real GPU, and filling the host with pinned
  // memory proves nothing, so those fills are always bounded.
  if (!max && options.api == "cudaMallocManaged") max = device.total_memory;
  if (!max && options.api == "cudaMallocHost") max = 1 * kGiB;

  std::unique_ptr<ChunkAllocator> allocator = make_allocator(options.api, device.ordinal);
  const uint64_t chunk = round_down(options.fill.chunk, kMinChunk);
  if (chunk == 0) throw std::runtime_error("--chunk must be at least 2 MiB");

  wait_for_start(options.fill);
  // Any error but cudaErrorMemoryAllocation is a failure of the sample.
  const FillResult filled =
      fill_chunks(options.fill, chunk, max, kMinChunk, [&](uint64_t bytes, uint64_t& obtained) {
        const cudaError_t status = allocator->allocate(bytes, obtained);
        if (status == cudaSuccess) return ChunkAnswer{true, {}};
        if (status != cudaErrorMemoryAllocation) {
          runtime_check(status, "allocating a chunk of " + std::to_string(bytes) + " bytes");
        }
        // The runtime keeps the error as its last one; clear it so later calls start clean.
        static_cast<void>(cudaGetLastError());
        return ChunkAnswer{false, runtime_error_name(status)};
      });
  size_t free_after_fill = 0;
  size_t total = 0;
  CUDART_CHECK(cudaMemGetInfo(&free_after_fill, &total));

  hold_memory(options.fill);
  allocator->release_all();
  size_t free_after_release = 0;
  CUDART_CHECK(cudaMemGetInfo(&free_after_release, &total));

  Json report = runtime_report_header("memory-fill-runtime", device, kBuiltDefaultStream);
  report["api"] = options.api;
  report["device_memory"] = options.api != "cudaMallocHost";
  add_fill_report(report, options.fill, filled,
                  {chunk, max, kMinChunk, free_after_fill, total, free_after_release});
  print_report(report);
}

}  // namespace
}  // namespace tessera::samples

int main(int argc, char** argv) {
  using namespace tessera::samples;
  MemoryFillRuntimeOptions options;
  if (const std::optional<int> status =
          parse_memory_fill_runtime_command_line(argc, argv, options)) {
    return *status;
  }
  return run_sample("memory-fill-runtime", [&] { run(options); });
}

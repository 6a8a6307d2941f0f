// memory-fill: asks the driver for device memory in chunks, through one allocation API, until the
// driver refuses (or --max is reached), then frees everything. It shows how much memory a
// process can obtain, and which API a quota must watch: on a real GPU every device-memory API
// below draws from the same pool, and managed memory is not bounded by it at all.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/driver.h"
#include "common/report.h"
#include "fill_cli.h"
#include "fill_plan.h"

namespace tessera::samples {
namespace {

// One way of obtaining device memory. allocate() returns the driver's answer for one chunk and
// keeps what it got; release_all() frees everything, checking every call. Nothing is freed on
// destruction: that only happens on an error path, where the exiting process frees it all.
class ChunkAllocator {
 public:
  explicit ChunkAllocator(const Driver& driver) : driver_(driver), cu_(driver.api()) {}
  virtual ~ChunkAllocator() = default;
  ChunkAllocator(const ChunkAllocator&) = delete;
  ChunkAllocator& operator=(const ChunkAllocator&) = delete;

  // Every chunk is a multiple of this.
  virtual uint64_t granularity() const { return kMinChunk; }
  // On success adds the bytes the chunk really holds to `obtained`.
  virtual CUresult allocate(uint64_t bytes, uint64_t& obtained) = 0;
  virtual void release_all() = 0;

 protected:
  const Driver& driver_;
  const DriverApi& cu_;
};

// Allocators whose chunks are device pointers returned with cuMemFree.
class FreedByMemFree : public ChunkAllocator {
 public:
  using ChunkAllocator::ChunkAllocator;

  void release_all() override {
    for (CUdeviceptr ptr : chunks_) CU_CHECK(driver_, cu_.cuMemFree_v2(ptr));
    chunks_.clear();
  }

 protected:
  std::vector<CUdeviceptr> chunks_;
};

class PlainAllocator : public FreedByMemFree {
 public:
  using FreedByMemFree::FreedByMemFree;

  CUresult allocate(uint64_t bytes, uint64_t& obtained) override {
    CUdeviceptr ptr = 0;
    const CUresult result = cu_.cuMemAlloc_v2(&ptr, bytes);
    if (result != CUDA_SUCCESS) return result;
    chunks_.push_back(ptr);
    obtained += bytes;
    return result;
  }
};

// Rows of 64 KiB of 4-byte elements: a width every pitch alignment divides, so pitch == width.
class PitchAllocator : public FreedByMemFree {
 public:
  using FreedByMemFree::FreedByMemFree;

  CUresult allocate(uint64_t bytes, uint64_t& obtained) override {
    CUdeviceptr ptr = 0;
    size_t pitch = 0;
    const uint64_t rows = bytes / kRowBytes;
    const CUresult result =
        cu_.cuMemAllocPitch_v2(&ptr, &pitch, kRowBytes, rows, /*ElementSizeBytes=*/4);
    if (result != CUDA_SUCCESS) return result;
    chunks_.push_back(ptr);
    obtained += pitch * rows;
    return result;
  }

 private:
  static constexpr uint64_t kRowBytes = 64 * 1024;
};

class ManagedAllocator : public FreedByMemFree {
 public:
  using FreedByMemFree::FreedByMemFree;

  CUresult allocate(uint64_t bytes, uint64_t& obtained) override {
    CUdeviceptr ptr = 0;
    const CUresult result = cu_.cuMemAllocManaged(&ptr, bytes, CU_MEM_ATTACH_GLOBAL);
    if (result != CUDA_SUCCESS) return result;
    chunks_.push_back(ptr);
    obtained += bytes;
    return result;
  }
};

// Stream-ordered allocation from a memory pool: the device's default pool (cuMemAllocAsync) or
// one of our own (cuMemAllocFromPoolAsync). The release threshold is raised to the maximum so
// freed memory would stay reserved in the pool, as allocator-heavy programs configure it; the
// pool is trimmed (or destroyed) at the end so the memory really goes back.
class StreamOrderedAllocator : public ChunkAllocator {
 public:
  StreamOrderedAllocator(const Driver& driver, CUdevice device, bool own_pool)
      : ChunkAllocator(driver), own_pool_(own_pool) {
    CU_CHECK(driver_, cu_.cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING));
    if (own_pool_) {
      CUmemPoolProps props = {};
      props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
      props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
      props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      props.location.id = device;
      CU_CHECK(driver_, cu_.cuMemPoolCreate(&pool_, &props));
    } else {
      CU_CHECK(driver_, cu_.cuDeviceGetDefaultMemPool(&pool_, device));
    }
    cuuint64_t threshold = UINT64_MAX;
    CU_CHECK(driver_,
             cu_.cuMemPoolSetAttribute(pool_, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
  }

  CUresult allocate(uint64_t bytes, uint64_t& obtained) override {
    CUdeviceptr ptr = 0;
    CUresult result = own_pool_ ? cu_.cuMemAllocFromPoolAsync(&ptr, bytes, pool_, stream_)
                                : cu_.cuMemAllocAsync(&ptr, bytes, stream_);
    if (result != CUDA_SUCCESS) return result;
    chunks_.push_back(ptr);
    // The allocation is stream-ordered: wait for it so the memory is really held when counted.
    CU_CHECK(driver_, cu_.cuStreamSynchronize(stream_));
    obtained += bytes;
    return result;
  }

  void release_all() override {
    for (CUdeviceptr ptr : chunks_) CU_CHECK(driver_, cu_.cuMemFreeAsync(ptr, stream_));
    chunks_.clear();
    CU_CHECK(driver_, cu_.cuStreamSynchronize(stream_));
    if (own_pool_) {
      CU_CHECK(driver_, cu_.cuMemPoolDestroy(pool_));
    } else {
      CU_CHECK(driver_, cu_.cuMemPoolTrimTo(pool_, 0));
    }
    CU_CHECK(driver_, cu_.cuStreamDestroy_v2(stream_));
  }

 private:
  bool own_pool_;
  CUstream stream_ = nullptr;
  CUmemoryPool pool_ = nullptr;
  std::vector<CUdeviceptr> chunks_;
};

// Virtual memory management: physical memory (cuMemCreate) mapped into a reserved address range
// and made accessible, the path of NCCL and PyTorch's expandable segments.
class VmmAllocator : public ChunkAllocator {
 public:
  VmmAllocator(const Driver& driver, CUdevice device) : ChunkAllocator(driver) {
    props_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    props_.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props_.location.id = device;
    size_t granularity = 0;
    CU_CHECK(driver_, cu_.cuMemGetAllocationGranularity(&granularity, &props_,
                                                        CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    // The smallest multiple of the driver's granularity that is at least kMinChunk.
    if (granularity != 0) granularity_ = (kMinChunk + granularity - 1) / granularity * granularity;
    access_.location = props_.location;
    access_.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  }

  uint64_t granularity() const override { return granularity_; }

  CUresult allocate(uint64_t bytes, uint64_t& obtained) override {
    Mapping mapping;
    mapping.bytes = bytes;
    CUresult result = cu_.cuMemCreate(&mapping.handle, bytes, &props_, 0);
    if (result != CUDA_SUCCESS) return result;
    result = cu_.cuMemAddressReserve(&mapping.address, bytes, 0, 0, 0);
    if (result == CUDA_SUCCESS) {
      result = cu_.cuMemMap(mapping.address, bytes, 0, mapping.handle, 0);
      if (result == CUDA_SUCCESS) {
        result = cu_.cuMemSetAccess(mapping.address, bytes, &access_, 1);
        if (result == CUDA_SUCCESS) {
          mappings_.push_back(mapping);
          obtained += bytes;
          return result;
        }
        cu_.cuMemUnmap(mapping.address, bytes);
      }
      cu_.cuMemAddressFree(mapping.address, bytes);
    }
    cu_.cuMemRelease(mapping.handle);
    return result;
  }

  void release_all() override {
    for (const Mapping& mapping : mappings_) {
      CU_CHECK(driver_, cu_.cuMemUnmap(mapping.address, mapping.bytes));
      CU_CHECK(driver_, cu_.cuMemAddressFree(mapping.address, mapping.bytes));
      CU_CHECK(driver_, cu_.cuMemRelease(mapping.handle));
    }
    mappings_.clear();
  }

 private:
  struct Mapping {
    CUmemGenericAllocationHandle handle = 0;
    CUdeviceptr address = 0;
    uint64_t bytes = 0;
  };
  CUmemAllocationProp props_ = {};
  CUmemAccessDesc access_ = {};
  uint64_t granularity_ = kMinChunk;
  std::vector<Mapping> mappings_;
};

// 3D arrays of floats in 2 MiB slices (1024 x 512 x 4 bytes), so any chunk up to 32 GiB stays
// inside the 16384-slice depth limit of an H100/H200.
class ArrayAllocator : public ChunkAllocator {
 public:
  using ChunkAllocator::ChunkAllocator;

  CUresult allocate(uint64_t bytes, uint64_t& obtained) override {
    CUDA_ARRAY3D_DESCRIPTOR descriptor = {};
    descriptor.Width = kWidth;
    descriptor.Height = kHeight;
    descriptor.Depth = bytes / kSliceBytes;
    descriptor.Format = CU_AD_FORMAT_FLOAT;
    descriptor.NumChannels = 1;
    CUarray array = nullptr;
    const CUresult result = cu_.cuArray3DCreate_v2(&array, &descriptor);
    if (result != CUDA_SUCCESS) return result;
    arrays_.push_back(array);
    obtained += descriptor.Depth * kSliceBytes;
    return result;
  }

  void release_all() override {
    for (CUarray array : arrays_) CU_CHECK(driver_, cu_.cuArrayDestroy(array));
    arrays_.clear();
  }

 private:
  static constexpr uint64_t kWidth = 1024;
  static constexpr uint64_t kHeight = 512;
  static constexpr uint64_t kSliceBytes = kWidth * kHeight * sizeof(float);
  static_assert(kSliceBytes == kMinChunk);
  std::vector<CUarray> arrays_;
};

std::unique_ptr<ChunkAllocator> make_allocator(const std::string& api, const Driver& driver,
                                               CUdevice device) {
  if (api == "alloc") return std::make_unique<PlainAllocator>(driver);
  if (api == "pitch") return std::make_unique<PitchAllocator>(driver);
  if (api == "managed") return std::make_unique<ManagedAllocator>(driver);
  if (api == "async") return std::make_unique<StreamOrderedAllocator>(driver, device, false);
  if (api == "pool") return std::make_unique<StreamOrderedAllocator>(driver, device, true);
  if (api == "vmm") return std::make_unique<VmmAllocator>(driver, device);
  if (api == "array") return std::make_unique<ArrayAllocator>(driver);
  throw std::logic_error("unknown api " + api);  // the command line validated the name
}

void run(const MemoryFillOptions& options) {
  const Driver driver = Driver::load(options.common.resolve);
  const DriverApi& cu = driver.api();
  PrimaryContext context(driver, options.common.device);
  const DeviceInfo& device = context.device();

  std::optional<uint64_t> max = options.fill.max;
  // A real driver hands out managed memory far beyond the device (140 TB on an H200), so a
  // managed fill is always bounded.
  if (options.api == "managed" && !max) max = device.total_memory;

  std::unique_ptr<ChunkAllocator> allocator = make_allocator(options.api, driver, device.device);
  const uint64_t granularity = allocator->granularity();
  const uint64_t chunk = round_down(options.fill.chunk, granularity);
  if (chunk == 0) {
    throw std::runtime_error("--chunk must be at least " + std::to_string(granularity) +
                             " bytes for --api " + options.api);
  }

  wait_for_start(options.fill);
  // Any error but CUDA_ERROR_OUT_OF_MEMORY is a failure of the sample.
  const FillResult filled =
      fill_chunks(options.fill, chunk, max, granularity, [&](uint64_t bytes, uint64_t& obtained) {
        const CUresult status = allocator->allocate(bytes, obtained);
        if (status == CUDA_SUCCESS) return ChunkAnswer{true, {}};
        if (status != CUDA_ERROR_OUT_OF_MEMORY) {
          driver.check(status, "allocating a chunk of " + std::to_string(bytes) + " bytes");
        }
        return ChunkAnswer{false, driver.error_name(status)};
      });
  size_t free_after_fill = 0;
  size_t total = 0;
  CU_CHECK(driver, cu.cuMemGetInfo_v2(&free_after_fill, &total));

  hold_memory(options.fill);
  allocator->release_all();
  size_t free_after_release = 0;
  CU_CHECK(driver, cu.cuMemGetInfo_v2(&free_after_release, &total));

  Json report = report_header("memory-fill", driver, device);
  report["api"] = options.api;
  add_fill_report(report, options.fill, filled,
                  {chunk, max, granularity, free_after_fill, total, free_after_release});
  print_report(report);
}

}  // namespace
}  // namespace tessera::samples

int main(int argc, char** argv) {
  using namespace tessera::samples;
  MemoryFillOptions options;
  if (const std::optional<int> status = parse_memory_fill_command_line(argc, argv, options)) {
    return *status;
  }
  return run_sample("memory-fill", [&] { run(options); });
}

// Stream memory operations (wait/write value, batches), 2-D and 3-D copies, and managed-memory
// hints (prefetch, advise). The simulator does not model memory contents or a device that waits on
// them: a wait-value operation is satisfied when the stream reaches it (nothing else can write the
// value: kernels do not run), a write-value writes where the memory is host-visible. Each call
// validates its stream and addresses as the driver does.
#include <cstring>

#include "driver.h"

using namespace simgpu::driver;

#undef cuStreamWaitValue32
#undef cuStreamWaitValue64
#undef cuStreamWriteValue32
#undef cuStreamWriteValue64
#undef cuStreamBatchMemOp
#undef cuMemcpy2D
#undef cuMemcpy2DAsync
#undef cuMemcpy2DUnaligned
#undef cuMemcpy3D
#undef cuMemcpy3DAsync
#undef cuMemPrefetchAsync
#undef cuMemAdvise

namespace {

// The address of a value operation: device memory of this process, or page-locked host memory
// (which the device reaches with unified addressing).
CUresult check_value_address(Driver& driver, CUdeviceptr address, size_t bytes) {
  if (address % bytes != 0) return CUDA_ERROR_INVALID_VALUE;
  if (check_device_range(driver, address, bytes) == CUDA_SUCCESS) return CUDA_SUCCESS;
  for (const auto& [base, region] : driver.host_regions) {
    if (address >= base && address + bytes <= base + region.size) return CUDA_SUCCESS;
  }
  for (const auto& [pointer, size] : driver.host_allocations) {
    const auto base = reinterpret_cast<CUdeviceptr>(pointer);
    if (address >= base && address + bytes <= base + size) return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult value_operation(CUstream handle, CUdeviceptr address, uint64_t value, size_t bytes,
                         bool write, unsigned flags) {
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  if (!resolve_stream(driver, handle)) return CUDA_ERROR_INVALID_HANDLE;
  constexpr unsigned kWaitFlags = CU_STREAM_WAIT_VALUE_GEQ | CU_STREAM_WAIT_VALUE_EQ |
                                  CU_STREAM_WAIT_VALUE_AND | CU_STREAM_WAIT_VALUE_NOR |
                                  CU_STREAM_WAIT_VALUE_FLUSH;
  if (write ? (flags & ~CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER) != 0
            : (flags & ~kWaitFlags) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (CUresult r = check_value_address(driver, address, bytes); r != CUDA_SUCCESS) return r;
  if (write) {
    if (void* view = host_view(driver, address, bytes)) {
      std::memcpy(view, &value, bytes);
    } else if (!is_device_address(driver, address)) {
      std::memcpy(reinterpret_cast<void*>(address), &value, bytes);  // page-locked host memory
    }
  }
  return CUDA_SUCCESS;
}

CUresult batch(CUstream stream, unsigned count, CUstreamBatchMemOpParams* operations,
               unsigned flags) {
  if (count == 0 || !operations || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < count; ++i) {
    const CUstreamBatchMemOpParams& op = operations[i];
    CUresult r = CUDA_SUCCESS;
    switch (op.operation) {
      case CU_STREAM_MEM_OP_WAIT_VALUE_32:
        r = value_operation(stream, op.waitValue.address, op.waitValue.value, 4, false,
                            op.waitValue.flags);
        break;
      case CU_STREAM_MEM_OP_WAIT_VALUE_64:
        r = value_operation(stream, op.waitValue.address, op.waitValue.value64, 8, false,
                            op.waitValue.flags);
        break;
      case CU_STREAM_MEM_OP_WRITE_VALUE_32:
        r = value_operation(stream, op.writeValue.address, op.writeValue.value, 4, true,
                            op.writeValue.flags);
        break;
      case CU_STREAM_MEM_OP_WRITE_VALUE_64:
        r = value_operation(stream, op.writeValue.address, op.writeValue.value64, 8, true,
                            op.writeValue.flags);
        break;
      case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
      case CU_STREAM_MEM_OP_BARRIER:
        break;
      default:
        r = CUDA_ERROR_INVALID_VALUE;
    }
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

// One side of a 2-D copy: where its first byte is and how far apart its rows are.
struct Side {
  CUmemorytype type;
  const void* host;
  CUdeviceptr device;
  CUarray array;
  size_t pitch;
  size_t x;
  size_t y;
};

// Validates one side and returns the host-visible bytes of row `row` (nullptr where contents are
// not modelled: device memory and arrays).
CUresult check_side(Driver& driver, Side& side, size_t width, size_t height) {
  CUmemorytype type = side.type;
  if (type == CU_MEMORYTYPE_UNIFIED) {
    type = is_device_address(driver, side.device) ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
    if (type == CU_MEMORYTYPE_HOST) side.host = reinterpret_cast<const void*>(side.device);
    side.type = type;
  }
  switch (type) {
    case CU_MEMORYTYPE_HOST:
      return side.host ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_MEMORYTYPE_DEVICE: {
      if (side.pitch < width && height > 1) return CUDA_ERROR_INVALID_VALUE;
      const size_t span = side.pitch * (height - 1) + width;
      return check_device_range(driver, side.device + side.y * side.pitch + side.x, span);
    }
    case CU_MEMORYTYPE_ARRAY: {
      auto* array = reinterpret_cast<ArrayObject*>(side.array);
      return driver.arrays.count(array) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    }
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

const uint8_t* row_of(Driver& driver, const Side& side, size_t row, size_t width) {
  const size_t offset = (side.y + row) * side.pitch + side.x;
  if (side.type == CU_MEMORYTYPE_HOST) return static_cast<const uint8_t*>(side.host) + offset;
  if (side.type == CU_MEMORYTYPE_DEVICE) {
    return static_cast<const uint8_t*>(host_view(driver, side.device + offset, width));
  }
  return nullptr;
}

CUresult copy_2d(const CUDA_MEMCPY2D* copy, CUstream stream) {
  if (!copy) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  Context* context = nullptr;
  if (CUresult r = require_context(driver, context); r != CUDA_SUCCESS) return r;
  if (stream && !resolve_stream(driver, stream)) return CUDA_ERROR_INVALID_HANDLE;
  if (copy->WidthInBytes == 0 || copy->Height == 0) return CUDA_SUCCESS;
  Side source{copy->srcMemoryType,
              copy->srcHost,
              copy->srcDevice,
              copy->srcArray,
              copy->srcPitch ? copy->srcPitch : copy->WidthInBytes,
              copy->srcXInBytes,
              copy->srcY};
  Side target{copy->dstMemoryType,
              copy->dstHost,
              copy->dstDevice,
              copy->dstArray,
              copy->dstPitch ? copy->dstPitch : copy->WidthInBytes,
              copy->dstXInBytes,
              copy->dstY};
  if (CUresult r = check_side(driver, source, copy->WidthInBytes, copy->Height); r) return r;
  if (CUresult r = check_side(driver, target, copy->WidthInBytes, copy->Height); r) return r;
  for (size_t row = 0; row < copy->Height; ++row) {
    auto* to = const_cast<uint8_t*>(row_of(driver, target, row, copy->WidthInBytes));
    if (!to) continue;
    const uint8_t* from = row_of(driver, source, row, copy->WidthInBytes);
    if (from) {
      std::memmove(to, from, copy->WidthInBytes);
    } else {
      std::memset(to, 0, copy->WidthInBytes);  // device memory reads as zeros
    }
  }
  return CUDA_SUCCESS;
}

// A 3-D copy is a 2-D copy per depth slice.
CUresult copy_3d(const CUDA_MEMCPY3D* copy, CUstream stream) {
  if (!copy) return CUDA_ERROR_INVALID_VALUE;
  const size_t src_height = copy->srcHeight ? copy->srcHeight : copy->Height;
  const size_t dst_height = copy->dstHeight ? copy->dstHeight : copy->Height;
  for (size_t z = 0; z < (copy->Depth ? copy->Depth : 1); ++z) {
    CUDA_MEMCPY2D slice{};
    slice.srcXInBytes = copy->srcXInBytes;
    slice.srcY = copy->srcY + (copy->srcZ + z) * src_height;
    slice.srcMemoryType = copy->srcMemoryType;
    slice.srcHost = copy->srcHost;
    slice.srcDevice = copy->srcDevice;
    slice.srcArray = copy->srcArray;
    slice.srcPitch = copy->srcPitch;
    slice.dstXInBytes = copy->dstXInBytes;
    slice.dstY = copy->dstY + (copy->dstZ + z) * dst_height;
    slice.dstMemoryType = copy->dstMemoryType;
    slice.dstHost = copy->dstHost;
    slice.dstDevice = copy->dstDevice;
    slice.dstArray = copy->dstArray;
    slice.dstPitch = copy->dstPitch;
    slice.WidthInBytes = copy->WidthInBytes;
    slice.Height = copy->Height;
    if (CUresult r = copy_2d(&slice, stream); r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

// Managed memory hints: the range must be managed memory (prefetch) or any CUDA memory (advise).
CUresult managed_hint(CUdeviceptr ptr, size_t count, CUstream stream, bool prefetch) {
  if (count == 0) return CUDA_ERROR_INVALID_VALUE;
  Driver& driver = Driver::get();
  std::lock_guard<std::mutex> lock(driver.mutex);
  if (CUresult r = check_initialized(driver); r != CUDA_SUCCESS) return r;
  if (prefetch && !resolve_stream(driver, stream)) return CUDA_ERROR_INVALID_HANDLE;
  CUdeviceptr base = 0;
  Allocation* allocation = find_allocation(driver, ptr, count, &base);
  if (!allocation) return CUDA_ERROR_INVALID_VALUE;
  if (prefetch && allocation->kind != AllocationKind::kManaged) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

}  // namespace

SIMGPU_EXPORT CUresult cuStreamWaitValue32_v2(CUstream stream, CUdeviceptr address,
                                              cuuint32_t value, unsigned int flags) {
  return value_operation(stream, address, value, 4, false, flags);
}
SIMGPU_EXPORT CUresult cuStreamWaitValue64_v2(CUstream stream, CUdeviceptr address,
                                              cuuint64_t value, unsigned int flags) {
  return value_operation(stream, address, value, 8, false, flags);
}
SIMGPU_EXPORT CUresult cuStreamWriteValue32_v2(CUstream stream, CUdeviceptr address,
                                               cuuint32_t value, unsigned int flags) {
  return value_operation(stream, address, value, 4, true, flags);
}
SIMGPU_EXPORT CUresult cuStreamWriteValue64_v2(CUstream stream, CUdeviceptr address,
                                               cuuint64_t value, unsigned int flags) {
  return value_operation(stream, address, value, 8, true, flags);
}
SIMGPU_EXPORT CUresult cuStreamBatchMemOp_v2(CUstream stream, unsigned int count,
                                             CUstreamBatchMemOpParams* operations,
                                             unsigned int flags) {
  return batch(stream, count, operations, flags);
}
// The CUDA 8-11.6 ABIs and the per-thread forms take the same arguments.
SIMGPU_EXPORT CUresult cuStreamWaitValue32(CUstream s, CUdeviceptr a, cuuint32_t v, unsigned f) {
  return cuStreamWaitValue32_v2(s, a, v, f);
}
SIMGPU_EXPORT CUresult cuStreamWaitValue64(CUstream s, CUdeviceptr a, cuuint64_t v, unsigned f) {
  return cuStreamWaitValue64_v2(s, a, v, f);
}
SIMGPU_EXPORT CUresult cuStreamWriteValue32(CUstream s, CUdeviceptr a, cuuint32_t v, unsigned f) {
  return cuStreamWriteValue32_v2(s, a, v, f);
}
SIMGPU_EXPORT CUresult cuStreamWriteValue64(CUstream s, CUdeviceptr a, cuuint64_t v, unsigned f) {
  return cuStreamWriteValue64_v2(s, a, v, f);
}
SIMGPU_EXPORT CUresult cuStreamBatchMemOp(CUstream s, unsigned n, CUstreamBatchMemOpParams* p,
                                          unsigned f) {
  return batch(s, n, p, f);
}
SIMGPU_EXPORT CUresult cuStreamWaitValue32_v2_ptsz(CUstream s, CUdeviceptr a, cuuint32_t v,
                                                   unsigned f) {
  return cuStreamWaitValue32_v2(s, a, v, f);
}
SIMGPU_EXPORT CUresult cuStreamWaitValue64_v2_ptsz(CUstream s, CUdeviceptr a, cuuint64_t v,
                                                   unsigned f) {
  return cuStreamWaitValue64_v2(s, a, v, f);
}
SIMGPU_EXPORT CUresult cuStreamWriteValue32_v2_ptsz(CUstream s, CUdeviceptr a, cuuint32_t v,
                                                    unsigned f) {
  return cuStreamWriteValue32_v2(s, a, v, f);
}
SIMGPU_EXPORT CUresult cuStreamWriteValue64_v2_ptsz(CUstream s, CUdeviceptr a, cuuint64_t v,
                                                    unsigned f) {
  return cuStreamWriteValue64_v2(s, a, v, f);
}
SIMGPU_EXPORT CUresult cuStreamBatchMemOp_v2_ptsz(CUstream s, unsigned n,
                                                  CUstreamBatchMemOpParams* p, unsigned f) {
  return batch(s, n, p, f);
}

SIMGPU_EXPORT CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D* copy) {
  return copy_2d(copy, nullptr);
}
SIMGPU_EXPORT CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D* copy) {
  return copy_2d(copy, nullptr);
}
SIMGPU_EXPORT CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D* copy, CUstream stream) {
  return copy_2d(copy, stream);
}
SIMGPU_EXPORT CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D* copy) {
  return copy_2d(copy, nullptr);
}
SIMGPU_EXPORT CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D* copy) {
  return copy_2d(copy, nullptr);
}
SIMGPU_EXPORT CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D* copy, CUstream stream) {
  return copy_2d(copy, stream);
}
SIMGPU_EXPORT CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D* copy) {
  return copy_3d(copy, nullptr);
}
SIMGPU_EXPORT CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D* copy, CUstream stream) {
  return copy_3d(copy, stream);
}
SIMGPU_EXPORT CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D* copy) {
  return copy_3d(copy, nullptr);
}
SIMGPU_EXPORT CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D* copy, CUstream stream) {
  return copy_3d(copy, stream);
}

// cuMemPrefetchAsync before CUDA 12.2 takes a device ordinal, after it a location and flags.
SIMGPU_EXPORT CUresult cuMemPrefetchAsync(CUdeviceptr ptr, size_t count, CUdevice,
                                          CUstream stream) {
  return managed_hint(ptr, count, stream, true);
}
SIMGPU_EXPORT CUresult cuMemPrefetchAsync_ptsz(CUdeviceptr ptr, size_t count, CUdevice device,
                                               CUstream stream) {
  return cuMemPrefetchAsync(ptr, count, device, stream);
}
SIMGPU_EXPORT CUresult cuMemPrefetchAsync_v2(CUdeviceptr ptr, size_t count, CUmemLocation,
                                             unsigned int flags, CUstream stream) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return managed_hint(ptr, count, stream, true);
}
SIMGPU_EXPORT CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr ptr, size_t count,
                                                  CUmemLocation location, unsigned int flags,
                                                  CUstream stream) {
  return cuMemPrefetchAsync_v2(ptr, count, location, flags, stream);
}
SIMGPU_EXPORT CUresult cuMemAdvise(CUdeviceptr ptr, size_t count, CUmem_advise advice, CUdevice) {
  if (advice < CU_MEM_ADVISE_SET_READ_MOSTLY || advice > CU_MEM_ADVISE_UNSET_ACCESSED_BY) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return managed_hint(ptr, count, nullptr, false);
}
SIMGPU_EXPORT CUresult cuMemAdvise_v2(CUdeviceptr ptr, size_t count, CUmem_advise advice,
                                      CUmemLocation location) {
  return cuMemAdvise(ptr, count, advice, location.id);
}

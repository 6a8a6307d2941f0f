// CUDA arrays (cuArrayCreate, cuArray3DCreate): charged by element size x extent, rounded as a
// linear allocation.
#include <cuda.h>

#include "accounting.h"
#include "hooks.h"
#include "state.h"
#include "tessera/cuda_abi/cuda_abi.h"

using namespace tessera::vgpu;

namespace {

uint64_t array_element_bytes(CUarray_format format) {
  const uint64_t bytes = tessera::cuda_abi::array_format_bytes(format);
  return bytes != 0 ? bytes : 16;  // a format the shim does not know: the widest, nothing escapes
}

bool array_bytes(const CUDA_ARRAY3D_DESCRIPTOR& d, uint64_t* out) {
  const uint64_t factors[] = {d.Width, d.Height ? d.Height : 1, d.Depth ? d.Depth : 1,
                              array_element_bytes(d.Format), d.NumChannels ? d.NumChannels : 1};
  uint64_t bytes = 1;
  for (uint64_t factor : factors) {
    if (factor != 0 && bytes > ~0ull / factor) return false;
    bytes *= factor;
  }
  *out = bytes;
  return true;
}

template <typename Call>
CUresult create_array(CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR* descriptor, Call call) {
  CUcontext context = nullptr;
  const GpuIndex index = array && descriptor ? current_device(nullptr, &context) : kPassThrough;
  if (index == kPassThrough) return call();
  uint64_t bytes = 0;
  uint64_t charge = 0;
  if (index == kBlocked || !array_bytes(*descriptor, &bytes) || !charged_size(bytes, &charge) ||
      !reserve_bytes(index, charge)) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const CUresult result = call();
  if (result != CUDA_SUCCESS) {
    release_bytes(index, charge);
    return result;
  }
  track(HandleKind::kArray, reinterpret_cast<uint64_t>(*array), index, charge,
        reinterpret_cast<uint64_t>(context));
  return result;
}

}  // namespace

CUresult cuArrayCreate_v2(CUarray* array, const CUDA_ARRAY_DESCRIPTOR* descriptor) {
  count_call(kHook_cuArrayCreate_v2);
  auto real = real_cuArrayCreate_v2();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  CUDA_ARRAY3D_DESCRIPTOR as3d{};
  if (descriptor) {
    as3d.Width = descriptor->Width;
    as3d.Height = descriptor->Height;
    as3d.Format = descriptor->Format;
    as3d.NumChannels = descriptor->NumChannels;
  }
  return create_array(array, descriptor ? &as3d : nullptr, [&] { return real(array, descriptor); });
}

CUresult cuArray3DCreate_v2(CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR* descriptor) {
  count_call(kHook_cuArray3DCreate_v2);
  auto real = real_cuArray3DCreate_v2();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  return create_array(array, descriptor, [&] { return real(array, descriptor); });
}

CUresult cuArrayDestroy(CUarray array) {
  count_call(kHook_cuArrayDestroy);
  auto real = real_cuArrayDestroy();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  return free_tracked(HandleKind::kArray, reinterpret_cast<uint64_t>(array),
                      [&] { return real(array); });
}

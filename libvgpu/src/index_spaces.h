// The shim's three index spaces, as distinct types (docs/libvgpu.md, "Index spaces"):
//
//   CudaOrdinal  a device as the driver numbers it (CUdevice; what the program passes)
//   GpuIndex     a GPU of this process: its position in Shim::gpus (one UUID, whatever shares
//                hold it); or kPassThrough / kBlocked
//   LimitsIndex  a device's position in one share's limits page (LimitsPage::devices)
//
// Each is an int in a struct with an explicit constructor and no conversion to int or to another,
// so passing one where another is meant does not compile. The translations happen at the
// boundary only: a CUDA ordinal (or context, or NVML UUID) becomes a GpuIndex in state.cc
// (device_for_ordinal, device_for_uuid, current_device), and a GpuIndex becomes a LimitsIndex of
// one share in share_device. The wrappers are trivially copyable ints: they cost nothing.
#pragma once

#include <type_traits>

namespace tessera::vgpu {

struct CudaOrdinal {
  constexpr CudaOrdinal() = default;
  constexpr explicit CudaOrdinal(int ordinal) : value(ordinal) {}
  friend constexpr bool operator==(CudaOrdinal, CudaOrdinal) = default;
  int value = 0;
};

struct GpuIndex {
  constexpr GpuIndex() = default;
  constexpr explicit GpuIndex(int index) : value(index) {}
  // A GPU of Shim::gpus (not kPassThrough or kBlocked).
  constexpr bool is_gpu() const { return value >= 0; }
  friend constexpr bool operator==(GpuIndex, GpuIndex) = default;
  int value = -1;
};

struct LimitsIndex {
  constexpr LimitsIndex() = default;
  constexpr explicit LimitsIndex(int index) : value(index) {}
  // False: the share's limits page does not list the device.
  constexpr bool found() const { return value >= 0; }
  friend constexpr bool operator==(LimitsIndex, LimitsIndex) = default;
  int value = -1;
};

// Where an operation on a device is accounted when it is not one of the process's GPUs.
inline constexpr GpuIndex kPassThrough{-1};  // no limits configured (or CUDA not ready)
inline constexpr GpuIndex kBlocked{-2};      // the device may not be used: every allocation fails
inline constexpr LimitsIndex kNotInShare{-1};

static_assert(std::is_trivially_copyable_v<CudaOrdinal> && sizeof(CudaOrdinal) == sizeof(int));
static_assert(std::is_trivially_copyable_v<GpuIndex> && sizeof(GpuIndex) == sizeof(int));
static_assert(std::is_trivially_copyable_v<LimitsIndex> && sizeof(LimitsIndex) == sizeof(int));

}  // namespace tessera::vgpu

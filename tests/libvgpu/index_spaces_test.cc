// The shim's three index spaces (libvgpu/src/index_spaces.h) are distinct types: a CUDA ordinal,
// a GPU of the process (Shim::gpus) and a limits-page index cannot stand in for one another. The
// static_asserts are the test (checked when this file compiles, with the shim's real signatures);
// compile_fail/limits_index_as_ordinal.cc is the same misuse as a program that must not compile
// (ctest libvgpu.index_spaces_compile_fail).
#include <gtest/gtest.h>

#include <type_traits>

#include "index_spaces.h"
#include "region.h"
#include "state.h"

namespace {

using tessera::vgpu::CudaOrdinal;
using tessera::vgpu::GpuIndex;
using tessera::vgpu::LimitsIndex;
using tessera::vgpu::Region;

// No conversion between the three, nor from or to int.
template <typename From, typename To>
constexpr bool kConverts = std::is_convertible_v<From, To>;
static_assert(!kConverts<LimitsIndex, CudaOrdinal> && !kConverts<GpuIndex, CudaOrdinal>);
static_assert(!kConverts<CudaOrdinal, GpuIndex> && !kConverts<LimitsIndex, GpuIndex>);
static_assert(!kConverts<CudaOrdinal, LimitsIndex> && !kConverts<GpuIndex, LimitsIndex>);
static_assert(!kConverts<int, CudaOrdinal> && !kConverts<int, GpuIndex> &&
              !kConverts<int, LimitsIndex>);
static_assert(!kConverts<CudaOrdinal, int> && !kConverts<GpuIndex, int> &&
              !kConverts<LimitsIndex, int>);
// Not even explicitly from one another (only from an int, at a boundary).
static_assert(!std::is_constructible_v<CudaOrdinal, LimitsIndex> &&
              !std::is_constructible_v<CudaOrdinal, GpuIndex>);
static_assert(!std::is_constructible_v<GpuIndex, CudaOrdinal> &&
              !std::is_constructible_v<GpuIndex, LimitsIndex>);
static_assert(!std::is_constructible_v<LimitsIndex, GpuIndex> &&
              !std::is_constructible_v<LimitsIndex, CudaOrdinal>);

// The shim's functions take exactly their own space.
template <typename T>
concept TakenByDeviceForOrdinal = requires(T t) {
  tessera::vgpu::device_for_ordinal(t);
};
static_assert(TakenByDeviceForOrdinal<CudaOrdinal>);
static_assert(!TakenByDeviceForOrdinal<LimitsIndex> && !TakenByDeviceForOrdinal<GpuIndex> &&
              !TakenByDeviceForOrdinal<int>);

template <typename T>
concept TakenByReserveBytes = requires(T t) {
  tessera::vgpu::reserve_bytes(t, 1ull);
};
static_assert(TakenByReserveBytes<GpuIndex>);
static_assert(!TakenByReserveBytes<LimitsIndex> && !TakenByReserveBytes<CudaOrdinal> &&
              !TakenByReserveBytes<int>);

template <typename T>
concept TakenByRegionReserve = requires(Region& region, T t) {
  region.reserve(t, 1ull);
};
static_assert(TakenByRegionReserve<LimitsIndex>);
static_assert(!TakenByRegionReserve<GpuIndex> && !TakenByRegionReserve<CudaOrdinal> &&
              !TakenByRegionReserve<int>);

template <typename T>
concept TakenByShareDevice = requires(T t) {
  tessera::vgpu::share_device(t, 0);
};
static_assert(TakenByShareDevice<GpuIndex> && !TakenByShareDevice<LimitsIndex> &&
              !TakenByShareDevice<CudaOrdinal>);
static_assert(std::is_same_v<decltype(tessera::vgpu::share_device(GpuIndex{0}, 0)), LimitsIndex>);
static_assert(
    std::is_same_v<decltype(tessera::vgpu::device_for_ordinal(CudaOrdinal{0})), GpuIndex>);

// Zero cost: an int, passed in a register.
static_assert(sizeof(GpuIndex) == sizeof(int) && std::is_trivially_copyable_v<GpuIndex>);
static_assert(sizeof(LimitsIndex) == sizeof(int) && std::is_trivially_copyable_v<LimitsIndex>);

TEST(IndexSpaces, TheMarkersAreNoGpuAndNoLimitsIndex) {
  EXPECT_FALSE(tessera::vgpu::kPassThrough.is_gpu());
  EXPECT_FALSE(tessera::vgpu::kBlocked.is_gpu());
  EXPECT_FALSE(tessera::vgpu::kPassThrough == tessera::vgpu::kBlocked);
  EXPECT_TRUE(GpuIndex{0}.is_gpu());
  EXPECT_FALSE(tessera::vgpu::kNotInShare.found());
  EXPECT_TRUE(LimitsIndex{0}.found());
  // A default GpuIndex or LimitsIndex names nothing (never silently GPU 0 or device 0).
  EXPECT_FALSE(GpuIndex{}.is_gpu());
  EXPECT_FALSE(LimitsIndex{}.found());
}

TEST(IndexSpaces, ARecordKeepsItsGpuIndex) {
  tessera::vgpu::Record record;
  EXPECT_FALSE(record.gpu().is_gpu());  // an empty record charges no GPU
  record.device = 3;
  EXPECT_EQ(record.gpu(), GpuIndex{3});
}

}  // namespace

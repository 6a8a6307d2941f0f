// Driver entry points the CUDA runtime and the NVIDIA libraries reach beyond the basics: host
// memory registration, pointer attributes, VMM handle retention, unified copies, occupancy and
// clusters, stream memory operations, 2-D copies, capture modes, graph kernel-node parameters and
// the JIT linker. Each scenario runs in a forked child (a CUDA process of its own) with a private
// state file; gtest assertions inside the child report there and turn its exit status non-zero.
#include <cuda.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "sim_test_support.h"

namespace simgpu::testing {
namespace {

constexpr size_t kMiB = 1ull << 20;
constexpr size_t kPage = 4096;

const char kPtx[] =
    ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry entry_kernel()\n{\n ret;\n}\n";
const char kPtx2[] =
    ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry other_kernel()\n{\n ret;\n}\n";

// Runs `body` in a child process; true when it ran to the end without a gtest failure.
void scenario(const std::function<void()>& body) {
  std::fflush(nullptr);  // nothing buffered here is written twice by the child
  Child child([&](FILE*) {
    body();
    std::fflush(nullptr);
    return ::testing::Test::HasFailure() ? 1 : 0;
  });
  EXPECT_EQ(child.wait_exit(), 0) << "the scenario failed in the child (messages above)";
}

// The primary context of device 0, current.
CUcontext primary() {
  CUcontext context = nullptr;
  EXPECT_EQ(init_primary(&context), CUDA_SUCCESS);
  return context;
}

size_t free_memory() {
  size_t free = 0, total = 0;
  EXPECT_EQ(cuMemGetInfo(&free, &total), CUDA_SUCCESS);
  return free;
}

CUfunction load_function(const char* ptx = kPtx, const char* name = "entry_kernel") {
  CUmodule module = nullptr;
  EXPECT_EQ(cuModuleLoadData(&module, ptx), CUDA_SUCCESS);
  CUfunction function = nullptr;
  EXPECT_EQ(cuModuleGetFunction(&function, module, name), CUDA_SUCCESS);
  return function;
}

// --- Host memory registration -------------------------------------------------------------------

TEST(SimRuntimeEntryPoints, HostRegistrationRegistersAndUnregistersRanges) {
  SimEnvironment env;
  scenario([] {
    void* raw = nullptr;
    ASSERT_EQ(posix_memalign(&raw, kPage, 8 * kPage), 0);
    auto* buffer = static_cast<char*>(raw);
    // Before cuInit.
    EXPECT_EQ(cuMemHostRegister(buffer, kPage, 0), CUDA_ERROR_NOT_INITIALIZED);
    primary();
    const size_t free_before = free_memory();

    // Pages 2-3 registered.
    ASSERT_EQ(cuMemHostRegister(buffer + 2 * kPage, 2 * kPage, CU_MEMHOSTREGISTER_PORTABLE),
              CUDA_SUCCESS);
    EXPECT_EQ(free_memory(), free_before) << "host memory is not device memory";
    // Starting inside the registered range, and starting before it but running into it.
    EXPECT_EQ(cuMemHostRegister(buffer + 3 * kPage, 2 * kPage, 0),
              CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    EXPECT_EQ(cuMemHostRegister(buffer + kPage, 2 * kPage, 0),
              CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    EXPECT_EQ(cuMemHostRegister(buffer, 8 * kPage, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    // Adjacent ranges do not overlap.
    EXPECT_EQ(cuMemHostRegister(buffer + 4 * kPage, kPage, 0), CUDA_SUCCESS);
    EXPECT_EQ(cuMemHostRegister(buffer + kPage, kPage, CU_MEMHOSTREGISTER_DEVICEMAP), CUDA_SUCCESS);
    // Bad arguments.
    EXPECT_EQ(cuMemHostRegister(buffer + 6 * kPage, kPage, 0x80), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(cuMemHostRegister(buffer + 6 * kPage, 0, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(cuMemHostRegister(nullptr, kPage, 0), CUDA_ERROR_INVALID_VALUE);

    // With unified addressing the device pointer is the host pointer, anywhere in the range.
    CUdeviceptr device = 0;
    ASSERT_EQ(cuMemHostGetDevicePointer(&device, buffer + 2 * kPage + 100, 0), CUDA_SUCCESS);
    EXPECT_EQ(device, reinterpret_cast<CUdeviceptr>(buffer + 2 * kPage + 100));
    EXPECT_EQ(cuMemHostGetDevicePointer(&device, buffer + 2 * kPage, 1), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(cuMemHostGetDevicePointer(&device, buffer + 7 * kPage, 0), CUDA_ERROR_INVALID_VALUE);

    // Flags: the registration's, plus DEVICEMAP (every page-locked range is mapped under UVA).
    unsigned flags = 0;
    ASSERT_EQ(cuMemHostGetFlags(&flags, buffer + 3 * kPage), CUDA_SUCCESS);
    EXPECT_EQ(flags, unsigned{CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP});
    ASSERT_EQ(cuMemHostGetFlags(&flags, buffer + 4 * kPage), CUDA_SUCCESS);
    EXPECT_EQ(flags, unsigned{CU_MEMHOSTALLOC_DEVICEMAP});
    EXPECT_EQ(cuMemHostGetFlags(&flags, buffer + 7 * kPage), CUDA_ERROR_INVALID_VALUE);
    void* allocated = nullptr;
    ASSERT_EQ(cuMemHostAlloc(&allocated, kPage, CU_MEMHOSTALLOC_PORTABLE), CUDA_SUCCESS);
    ASSERT_EQ(cuMemHostGetFlags(&flags, allocated), CUDA_SUCCESS);
    EXPECT_EQ(flags, unsigned{CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP});
    // A cuMemHostAlloc'd range is page-locked already.
    EXPECT_EQ(cuMemHostRegister(allocated, kPage, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);

    // Unregistering takes the base pointer of a registration.
    EXPECT_EQ(cuMemHostUnregister(buffer + 3 * kPage), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    EXPECT_EQ(cuMemHostUnregister(buffer + 7 * kPage), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    EXPECT_EQ(cuMemHostUnregister(allocated), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    EXPECT_EQ(cuMemHostUnregister(buffer + 2 * kPage), CUDA_SUCCESS);
    EXPECT_EQ(cuMemHostUnregister(buffer + 2 * kPage), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    EXPECT_EQ(cuMemHostGetDevicePointer(&device, buffer + 2 * kPage, 0), CUDA_ERROR_INVALID_VALUE);
    // Once unregistered the range can be registered again.
    EXPECT_EQ(cuMemHostRegister(buffer + 2 * kPage, 2 * kPage, 0), CUDA_SUCCESS);
    EXPECT_EQ(cuMemHostUnregister(buffer + 2 * kPage), CUDA_SUCCESS);
    EXPECT_EQ(cuMemHostUnregister(buffer + 4 * kPage), CUDA_SUCCESS);
    EXPECT_EQ(cuMemHostUnregister(buffer + kPage), CUDA_SUCCESS);
    EXPECT_EQ(cuMemFreeHost(allocated), CUDA_SUCCESS);
    EXPECT_EQ(free_memory(), free_before);

    // A large registration charges nothing either.
    std::vector<char> big(64 * kMiB);
    ASSERT_EQ(cuMemHostRegister(big.data(), big.size(), 0), CUDA_SUCCESS);
    EXPECT_EQ(free_memory(), free_before);
    EXPECT_EQ(cuMemHostUnregister(big.data()), CUDA_SUCCESS);
    std::free(raw);
  });
}

TEST(SimRuntimeEntryPoints, HostRegistrationNeedsAContext) {
  SimEnvironment env;
  scenario([] {
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    std::vector<char> buffer(kPage);
    EXPECT_EQ(cuMemHostRegister(buffer.data(), buffer.size(), 0), CUDA_ERROR_INVALID_CONTEXT);
  });
}

// --- Pointer attributes -------------------------------------------------------------------------

struct Attributes {
  unsigned memory_type = 99;
  CUcontext context = reinterpret_cast<CUcontext>(0x1);
  int ordinal = 99;
  CUdeviceptr range_start = 1;
  size_t range_size = 1;
  unsigned is_managed = 99;
};

// The six attributes of `ptr` through cuPointerGetAttributes.
CUresult get_attributes(CUdeviceptr ptr, Attributes& out) {
  CUpointer_attribute ids[] = {
      CU_POINTER_ATTRIBUTE_MEMORY_TYPE,    CU_POINTER_ATTRIBUTE_CONTEXT,
      CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
      CU_POINTER_ATTRIBUTE_RANGE_SIZE,     CU_POINTER_ATTRIBUTE_IS_MANAGED};
  void* data[] = {&out.memory_type, &out.context,    &out.ordinal,
                  &out.range_start, &out.range_size, &out.is_managed};
  return cuPointerGetAttributes(6, ids, data, ptr);
}

// Each attribute alone (cuPointerGetAttribute) agrees with the batch form.
void expect_single_attributes_match(CUdeviceptr ptr, const Attributes& expected) {
  unsigned memory_type = 0, is_managed = 0;
  CUcontext context = nullptr;
  int ordinal = -1;
  CUdeviceptr start = 0;
  size_t size = 0;
  EXPECT_EQ(cuPointerGetAttribute(&memory_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr),
            CUDA_SUCCESS);
  EXPECT_EQ(memory_type, expected.memory_type);
  EXPECT_EQ(cuPointerGetAttribute(&context, CU_POINTER_ATTRIBUTE_CONTEXT, ptr), CUDA_SUCCESS);
  EXPECT_EQ(context, expected.context);
  EXPECT_EQ(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr),
            CUDA_SUCCESS);
  EXPECT_EQ(ordinal, expected.ordinal);
  EXPECT_EQ(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, ptr),
            CUDA_SUCCESS);
  EXPECT_EQ(start, expected.range_start);
  EXPECT_EQ(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, ptr), CUDA_SUCCESS);
  EXPECT_EQ(size, expected.range_size);
  EXPECT_EQ(cuPointerGetAttribute(&is_managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, ptr), CUDA_SUCCESS);
  EXPECT_EQ(is_managed, expected.is_managed);
}

void expect_attributes(CUdeviceptr ptr, const Attributes& expected) {
  Attributes got;
  ASSERT_EQ(get_attributes(ptr, got), CUDA_SUCCESS);
  EXPECT_EQ(got.memory_type, expected.memory_type);
  EXPECT_EQ(got.context, expected.context);
  EXPECT_EQ(got.ordinal, expected.ordinal);
  EXPECT_EQ(got.range_start, expected.range_start);
  EXPECT_EQ(got.range_size, expected.range_size);
  EXPECT_EQ(got.is_managed, expected.is_managed);
  expect_single_attributes_match(ptr, expected);
}

CUmemAllocationProp device_prop() {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  return prop;
}

TEST(SimRuntimeEntryPoints, PointerAttributesOfEachKindOfMemory) {
  SimEnvironment env;
  scenario([] {
    const CUcontext context = primary();
    {
      SCOPED_TRACE("cuMemAlloc");
      CUdeviceptr device = 0;
      ASSERT_EQ(cuMemAlloc(&device, 3 * kMiB), CUDA_SUCCESS);
      expect_attributes(device + 12345, {CU_MEMORYTYPE_DEVICE, context, 0, device, 3 * kMiB, 0});
      EXPECT_EQ(cuMemFree(device), CUDA_SUCCESS);
    }
    {
      SCOPED_TRACE("cuMemAllocManaged");
      CUdeviceptr managed = 0;
      ASSERT_EQ(cuMemAllocManaged(&managed, kMiB, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
      expect_attributes(managed + 8, {CU_MEMORYTYPE_DEVICE, context, 0, managed, kMiB, 1});
      void* host = nullptr;
      EXPECT_EQ(cuPointerGetAttribute(&host, CU_POINTER_ATTRIBUTE_HOST_POINTER, managed + 8),
                CUDA_SUCCESS);
      EXPECT_EQ(host, reinterpret_cast<void*>(managed + 8));
      EXPECT_EQ(cuMemFree(managed), CUDA_SUCCESS);
    }
    {
      SCOPED_TRACE("cuMemHostAlloc");
      void* host = nullptr;
      ASSERT_EQ(cuMemHostAlloc(&host, 5000, 0), CUDA_SUCCESS);
      const auto ptr = reinterpret_cast<CUdeviceptr>(host);
      expect_attributes(ptr + 4999, {CU_MEMORYTYPE_HOST, context, 0, ptr, 5000, 0});
      EXPECT_EQ(cuMemFreeHost(host), CUDA_SUCCESS);
    }
    {
      SCOPED_TRACE("cuMemHostRegister");
      std::vector<char> buffer(2 * kPage);
      ASSERT_EQ(cuMemHostRegister(buffer.data(), buffer.size(), 0), CUDA_SUCCESS);
      const auto ptr = reinterpret_cast<CUdeviceptr>(buffer.data());
      expect_attributes(ptr + kPage, {CU_MEMORYTYPE_HOST, context, 0, ptr, 2 * kPage, 0});
      EXPECT_EQ(cuMemHostUnregister(buffer.data()), CUDA_SUCCESS);
    }
    {
      SCOPED_TRACE("VMM mapping");
      const size_t granularity = 2 * kMiB;
      const CUmemAllocationProp prop = device_prop();
      CUmemGenericAllocationHandle handle = 0;
      ASSERT_EQ(cuMemCreate(&handle, 2 * granularity, &prop, 0), CUDA_SUCCESS);
      CUdeviceptr base = 0;
      ASSERT_EQ(cuMemAddressReserve(&base, 2 * granularity, 0, 0, 0), CUDA_SUCCESS);
      ASSERT_EQ(cuMemMap(base, 2 * granularity, 0, handle, 0), CUDA_SUCCESS);
      // The simulator reports the current context for VMM memory (which belongs to none).
      expect_attributes(base + granularity + 64,
                        {CU_MEMORYTYPE_DEVICE, context, 0, base, 2 * granularity, 0});
      EXPECT_EQ(cuMemUnmap(base, 2 * granularity), CUDA_SUCCESS);
      EXPECT_EQ(cuMemRelease(handle), CUDA_SUCCESS);
      EXPECT_EQ(cuMemAddressFree(base, 2 * granularity), CUDA_SUCCESS);
    }
    {
      SCOPED_TRACE("malloc");
      std::vector<char> plain(256);
      const auto ptr = reinterpret_cast<CUdeviceptr>(plain.data());
      unsigned type = 99;
      EXPECT_EQ(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr),
                CUDA_ERROR_INVALID_VALUE);
      CUcontext owner = nullptr;
      EXPECT_EQ(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, ptr),
                CUDA_ERROR_INVALID_VALUE);
      // The batch form succeeds with empty values (device ordinal -2: on no device).
      Attributes got;
      ASSERT_EQ(get_attributes(ptr, got), CUDA_SUCCESS);
      EXPECT_EQ(got.memory_type, 0u);
      EXPECT_EQ(got.context, nullptr);
      EXPECT_EQ(got.ordinal, -2);
      EXPECT_EQ(got.range_start, 0u);
      EXPECT_EQ(got.range_size, 0u);
      EXPECT_EQ(got.is_managed, 0u);
    }
    // A freed allocation is no longer CUDA memory.
    CUdeviceptr gone = 0;
    ASSERT_EQ(cuMemAlloc(&gone, kMiB), CUDA_SUCCESS);
    ASSERT_EQ(cuMemFree(gone), CUDA_SUCCESS);
    unsigned type = 0;
    EXPECT_EQ(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, gone),
              CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(cuPointerGetAttribute(nullptr, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, gone),
              CUDA_ERROR_INVALID_VALUE);
  });
}

// cuda.h: RANGE_START_ADDR/RANGE_SIZE are "not necessarily the address of the mapped region, but
// the address of the mappable address range ptr references (e.g. from cuMemAddressReserve)";
// MAPPING_BASE_ADDR/MAPPING_SIZE and cuMemGetAddressRange give the mapped region.
TEST(SimRuntimeEntryPoints, PointerRangeOfAPartlyMappedReservationIsTheReservation) {
  SimEnvironment env;
  scenario([] {
    primary();
    const size_t granularity = 2 * kMiB;
    const CUmemAllocationProp prop = device_prop();
    CUmemGenericAllocationHandle handle = 0;
    ASSERT_EQ(cuMemCreate(&handle, granularity, &prop, 0), CUDA_SUCCESS);
    CUdeviceptr base = 0;
    ASSERT_EQ(cuMemAddressReserve(&base, 4 * granularity, 0, 0, 0), CUDA_SUCCESS);
    const CUdeviceptr mapped = base + granularity;
    ASSERT_EQ(cuMemMap(mapped, granularity, 0, handle, 0), CUDA_SUCCESS);
    CUdeviceptr mapping_base = 0;
    size_t mapping_size = 0;
    EXPECT_EQ(
        cuPointerGetAttribute(&mapping_base, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, mapped + 100),
        CUDA_SUCCESS);
    EXPECT_EQ(mapping_base, mapped);
    EXPECT_EQ(cuPointerGetAttribute(&mapping_size, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, mapped + 100),
              CUDA_SUCCESS);
    EXPECT_EQ(mapping_size, granularity);
    CUdeviceptr range_base = 0;
    size_t range_size = 0;
    EXPECT_EQ(cuMemGetAddressRange(&range_base, &range_size, mapped + 100), CUDA_SUCCESS);
    EXPECT_EQ(range_base, mapped);
    EXPECT_EQ(range_size, granularity);
    CUdeviceptr start = 0;
    size_t size = 0;
    EXPECT_EQ(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, mapped + 100),
              CUDA_SUCCESS);
    EXPECT_EQ(start, base);
    EXPECT_EQ(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, mapped + 100),
              CUDA_SUCCESS);
    EXPECT_EQ(size, 4 * granularity);
    EXPECT_EQ(cuMemUnmap(mapped, granularity), CUDA_SUCCESS);
    EXPECT_EQ(cuMemRelease(handle), CUDA_SUCCESS);
    EXPECT_EQ(cuMemAddressFree(base, 4 * granularity), CUDA_SUCCESS);
  });
}

// cuda.h: CU_POINTER_ATTRIBUTE_CONTEXT is "the CUcontext in which ptr was allocated or
// registered", whichever context is current when asked.
TEST(SimRuntimeEntryPoints, HostAllocationKeepsTheContextItWasAllocatedIn) {
  SimEnvironment env;
  scenario([] {
    const CUcontext context = primary();
    void* host = nullptr;
    ASSERT_EQ(cuMemHostAlloc(&host, kPage, 0), CUDA_SUCCESS);
    std::vector<char> buffer(kPage);
    ASSERT_EQ(cuMemHostRegister(buffer.data(), buffer.size(), 0), CUDA_SUCCESS);
    CUcontext other = nullptr;
    ASSERT_EQ(cuCtxCreate(&other, nullptr, 0, 0), CUDA_SUCCESS);  // now current
    CUcontext owner = nullptr;
    EXPECT_EQ(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT,
                                    reinterpret_cast<CUdeviceptr>(buffer.data())),
              CUDA_SUCCESS);
    EXPECT_EQ(owner, context) << "registered memory";
    EXPECT_EQ(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT,
                                    reinterpret_cast<CUdeviceptr>(host)),
              CUDA_SUCCESS);
    EXPECT_EQ(owner, context) << "cuMemHostAlloc'd memory";
    EXPECT_EQ(cuCtxDestroy(other), CUDA_SUCCESS);
    EXPECT_EQ(cuCtxSetCurrent(context), CUDA_SUCCESS);
    EXPECT_EQ(cuMemHostUnregister(buffer.data()), CUDA_SUCCESS);
    EXPECT_EQ(cuMemFreeHost(host), CUDA_SUCCESS);
  });
}

// --- VMM ----------------------------------------------------------------------------------------

TEST(SimRuntimeEntryPoints, RetainedAllocationHandleKeepsPhysicalMemory) {
  SimEnvironment env;
  scenario([] {
    primary();
    const size_t granularity = 2 * kMiB;
    const size_t size = 4 * granularity;
    const size_t free_before = free_memory();
    const CUmemAllocationProp prop = device_prop();
    CUmemGenericAllocationHandle handle = 0;
    ASSERT_EQ(cuMemCreate(&handle, size, &prop, 0), CUDA_SUCCESS);
    EXPECT_EQ(free_memory(), free_before - size);
    CUdeviceptr base = 0;
    ASSERT_EQ(cuMemAddressReserve(&base, size, 0, 0, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuMemMap(base, size, 0, handle, 0), CUDA_SUCCESS);

    // Any address inside the mapping gives back the same allocation.
    CUmemGenericAllocationHandle retained = 0;
    ASSERT_EQ(cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(base + size - 1)),
              CUDA_SUCCESS);
    EXPECT_EQ(retained, handle);
    CUmemAllocationProp got{};
    ASSERT_EQ(cuMemGetAllocationPropertiesFromHandle(&got, retained), CUDA_SUCCESS);
    EXPECT_EQ(got.location.type, CU_MEM_LOCATION_TYPE_DEVICE);
    EXPECT_EQ(got.location.id, 0);
    // Outside any mapping.
    CUmemGenericAllocationHandle none = 0;
    EXPECT_EQ(cuMemRetainAllocationHandle(&none, reinterpret_cast<void*>(base + size)),
              CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(cuMemRetainAllocationHandle(nullptr, reinterpret_cast<void*>(base)),
              CUDA_ERROR_INVALID_VALUE);

    // cuMemGetAddressRange on a mapped address: the mapping.
    CUdeviceptr range_base = 0;
    size_t range_size = 0;
    ASSERT_EQ(cuMemGetAddressRange(&range_base, &range_size, base + granularity + 7), CUDA_SUCCESS);
    EXPECT_EQ(range_base, base);
    EXPECT_EQ(range_size, size);
    EXPECT_EQ(cuMemGetAddressRange(&range_base, &range_size, base + size), CUDA_ERROR_NOT_FOUND);

    // Unmapped, and one of two handles released: still held.
    ASSERT_EQ(cuMemUnmap(base, size), CUDA_SUCCESS);
    EXPECT_EQ(free_memory(), free_before - size);
    ASSERT_EQ(cuMemRelease(handle), CUDA_SUCCESS);
    EXPECT_EQ(free_memory(), free_before - size) << "the retained handle still holds the memory";
    // The last release frees it.
    ASSERT_EQ(cuMemRelease(retained), CUDA_SUCCESS);
    EXPECT_EQ(free_memory(), free_before);
    EXPECT_EQ(cuMemRelease(retained), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(cuMemAddressFree(base, size), CUDA_SUCCESS);
  });
}

TEST(SimRuntimeEntryPoints, MappedMemoryOutlivesBothReleasesUntilUnmapped) {
  SimEnvironment env;
  scenario([] {
    primary();
    const size_t size = 2 * kMiB;
    const size_t free_before = free_memory();
    const CUmemAllocationProp prop = device_prop();
    CUmemGenericAllocationHandle handle = 0;
    ASSERT_EQ(cuMemCreate(&handle, size, &prop, 0), CUDA_SUCCESS);
    CUdeviceptr base = 0;
    ASSERT_EQ(cuMemAddressReserve(&base, size, 0, 0, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuMemMap(base, size, 0, handle, 0), CUDA_SUCCESS);
    CUmemGenericAllocationHandle retained = 0;
    ASSERT_EQ(cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(base)), CUDA_SUCCESS);
    ASSERT_EQ(cuMemRelease(handle), CUDA_SUCCESS);
    ASSERT_EQ(cuMemRelease(retained), CUDA_SUCCESS);
    EXPECT_EQ(free_memory(), free_before - size) << "still mapped";
    ASSERT_EQ(cuMemUnmap(base, size), CUDA_SUCCESS);
    EXPECT_EQ(free_memory(), free_before);
    EXPECT_EQ(cuMemAddressFree(base, size), CUDA_SUCCESS);
  });
}

// --- Unified copies -----------------------------------------------------------------------------

TEST(SimRuntimeEntryPoints, UnifiedCopiesBetweenMallocAndManagedMemory) {
  SimEnvironment env;
  scenario([] {
    primary();
    const size_t bytes = 4096;
    CUdeviceptr managed = 0;
    ASSERT_EQ(cuMemAllocManaged(&managed, bytes, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
    std::vector<unsigned char> source(bytes), back(bytes, 0);
    for (size_t i = 0; i < bytes; ++i) source[i] = static_cast<unsigned char>(i * 7 + 3);
    const auto src = reinterpret_cast<CUdeviceptr>(source.data());
    const auto dst = reinterpret_cast<CUdeviceptr>(back.data());

    ASSERT_EQ(cuMemcpy(managed, src, bytes), CUDA_SUCCESS);
    EXPECT_EQ(std::memcmp(reinterpret_cast<void*>(managed), source.data(), bytes), 0);
    ASSERT_EQ(cuMemcpy(dst, managed, bytes), CUDA_SUCCESS);
    EXPECT_EQ(back, source);

    // The async form, at an offset, both ways.
    std::vector<unsigned char> tail(100, 0xAB);
    ASSERT_EQ(
        cuMemcpyAsync(managed + 1000, reinterpret_cast<CUdeviceptr>(tail.data()), 100, nullptr),
        CUDA_SUCCESS);
    ASSERT_EQ(cuStreamSynchronize(nullptr), CUDA_SUCCESS);
    EXPECT_EQ(reinterpret_cast<unsigned char*>(managed)[999], source[999]);
    EXPECT_EQ(reinterpret_cast<unsigned char*>(managed)[1000], 0xAB);
    EXPECT_EQ(reinterpret_cast<unsigned char*>(managed)[1099], 0xAB);
    EXPECT_EQ(reinterpret_cast<unsigned char*>(managed)[1100], source[1100]);

    // Host to host through cuMemcpy.
    std::vector<unsigned char> copy(bytes, 0);
    ASSERT_EQ(cuMemcpy(reinterpret_cast<CUdeviceptr>(copy.data()), src, bytes), CUDA_SUCCESS);
    EXPECT_EQ(copy, source);

    // A device range running past its allocation is refused, in either direction, and nothing
    // is written.
    std::vector<unsigned char> guard(bytes, 0x5A);
    EXPECT_EQ(cuMemcpy(managed + bytes - 8, src, 64), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(reinterpret_cast<unsigned char*>(managed)[bytes - 8], source[bytes - 8]);
    EXPECT_EQ(cuMemcpy(reinterpret_cast<CUdeviceptr>(guard.data()), managed + bytes - 8, 64),
              CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(guard[0], 0x5A);
    CUdeviceptr device = 0;
    ASSERT_EQ(cuMemAlloc(&device, 2 * kMiB), CUDA_SUCCESS);
    EXPECT_EQ(cuMemcpy(device, src, bytes), CUDA_SUCCESS);
    EXPECT_EQ(cuMemcpy(device + 2 * kMiB - 16, src, 64), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(cuMemcpyAsync(device + 2 * kMiB - 16, src, 64, nullptr), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(cuMemcpy(0, src, 64), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(cuMemFree(device), CUDA_SUCCESS);
    EXPECT_EQ(cuMemFree(managed), CUDA_SUCCESS);
  });
}

// --- Occupancy and clusters ---------------------------------------------------------------------

TEST(SimRuntimeEntryPoints, AvailableDynamicSharedMemoryPerBlock) {
  SimEnvironment env;
  scenario([] {
    primary();
    const CUfunction function = load_function();
    size_t bytes = 0;
    // Hopper: 228 KiB per SM, 1 KiB of it reserved per block, at most 227 KiB for one block.
    ASSERT_EQ(cuOccupancyAvailableDynamicSMemPerBlock(&bytes, function, 1, 128), CUDA_SUCCESS);
    EXPECT_EQ(bytes, 232448u);
    ASSERT_EQ(cuOccupancyAvailableDynamicSMemPerBlock(&bytes, function, 2, 128), CUDA_SUCCESS);
    EXPECT_EQ(bytes, 233472u / 2 - 1024);
    ASSERT_EQ(cuOccupancyAvailableDynamicSMemPerBlock(&bytes, function, 32, 64), CUDA_SUCCESS);
    EXPECT_EQ(bytes, 233472u / 32 - 1024);
    // More blocks or threads than an SM holds: none.
    bytes = 1;
    ASSERT_EQ(cuOccupancyAvailableDynamicSMemPerBlock(&bytes, function, 33, 32), CUDA_SUCCESS);
    EXPECT_EQ(bytes, 0u);
    bytes = 1;
    ASSERT_EQ(cuOccupancyAvailableDynamicSMemPerBlock(&bytes, function, 32, 128), CUDA_SUCCESS);
    EXPECT_EQ(bytes, 0u);
    EXPECT_EQ(cuOccupancyAvailableDynamicSMemPerBlock(&bytes, function, 0, 128),
              CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(cuOccupancyAvailableDynamicSMemPerBlock(&bytes, function, 1, 2048),
              CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(
        cuOccupancyAvailableDynamicSMemPerBlock(&bytes, reinterpret_cast<CUfunction>(0x10), 1, 128),
        CUDA_ERROR_INVALID_HANDLE);
  });
}

CUlaunchConfig cluster_config(CUlaunchAttribute& attribute, unsigned cluster_x) {
  attribute = CUlaunchAttribute{};
  attribute.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attribute.value.clusterDim.x = cluster_x;
  attribute.value.clusterDim.y = 1;
  attribute.value.clusterDim.z = 1;
  CUlaunchConfig config{};
  config.gridDimX = 72;
  config.gridDimY = 1;
  config.gridDimZ = 1;
  config.blockDimX = 128;
  config.blockDimY = 1;
  config.blockDimZ = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return config;
}

TEST(SimRuntimeEntryPoints, MaxActiveClustersAndPotentialClusterSize) {
  SimEnvironment env;  // 132 SMs
  scenario([] {
    primary();
    const CUfunction function = load_function();
    CUlaunchAttribute attribute;
    // 128-thread blocks: 16 resident per SM (2048 threads), 2112 on the device.
    int clusters = 0;
    CUlaunchConfig config = cluster_config(attribute, 2);
    ASSERT_EQ(cuOccupancyMaxActiveClusters(&clusters, function, &config), CUDA_SUCCESS);
    EXPECT_EQ(clusters, 132 * 16 / 2);
    config = cluster_config(attribute, 8);
    ASSERT_EQ(cuOccupancyMaxActiveClusters(&clusters, function, &config), CUDA_SUCCESS);
    EXPECT_EQ(clusters, 132 * 16 / 8);
    config = cluster_config(attribute, 9);
    EXPECT_EQ(cuOccupancyMaxActiveClusters(&clusters, function, &config),
              CUDA_ERROR_INVALID_CLUSTER_SIZE);
    // Without a cluster attribute a cluster is one block.
    config = cluster_config(attribute, 2);
    config.numAttrs = 0;
    ASSERT_EQ(cuOccupancyMaxActiveClusters(&clusters, function, &config), CUDA_SUCCESS);
    EXPECT_EQ(clusters, 132 * 16);
    EXPECT_EQ(cuOccupancyMaxActiveClusters(&clusters, function, nullptr), CUDA_ERROR_INVALID_VALUE);
    config = cluster_config(attribute, 2);
    EXPECT_EQ(cuOccupancyMaxActiveClusters(&clusters, reinterpret_cast<CUfunction>(0x10), &config),
              CUDA_ERROR_INVALID_HANDLE);
    int size = 0;
    ASSERT_EQ(cuOccupancyMaxPotentialClusterSize(&size, function, &config), CUDA_SUCCESS);
    EXPECT_EQ(size, 8);  // the portable limit
  });
}

TEST(SimRuntimeEntryPoints, LibraryKernelWorksWhereAFunctionGoes) {
  SimEnvironment env;
  scenario([] {
    primary();
    CUlibrary library = nullptr;
    ASSERT_EQ(cuLibraryLoadData(&library, kPtx, nullptr, nullptr, 0, nullptr, nullptr, 0),
              CUDA_SUCCESS);
    CUkernel kernel = nullptr;
    ASSERT_EQ(cuLibraryGetKernel(&kernel, library, "entry_kernel"), CUDA_SUCCESS);
    const auto as_function = reinterpret_cast<CUfunction>(kernel);
    size_t bytes = 0;
    ASSERT_EQ(cuOccupancyAvailableDynamicSMemPerBlock(&bytes, as_function, 2, 128), CUDA_SUCCESS);
    EXPECT_EQ(bytes, 233472u / 2 - 1024);
    CUlaunchAttribute attribute;
    CUlaunchConfig config = cluster_config(attribute, 4);
    int clusters = 0;
    ASSERT_EQ(cuOccupancyMaxActiveClusters(&clusters, as_function, &config), CUDA_SUCCESS);
    EXPECT_EQ(clusters, 132 * 16 / 4);
    int blocks = 0;
    ASSERT_EQ(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, as_function, 256, 0),
              CUDA_SUCCESS);
    EXPECT_EQ(blocks, 8);
    EXPECT_EQ(cuFuncSetCacheConfig(as_function, CU_FUNC_CACHE_PREFER_SHARED), CUDA_SUCCESS);
    EXPECT_EQ(cuFuncSetCacheConfig(as_function, static_cast<CUfunc_cache>(7)),
              CUDA_ERROR_INVALID_VALUE);
    CUfunctionLoadingState state = CU_FUNCTION_LOADING_STATE_UNLOADED;
    ASSERT_EQ(cuFuncIsLoaded(&state, as_function), CUDA_SUCCESS);
    EXPECT_EQ(state, CU_FUNCTION_LOADING_STATE_LOADED);
    const char* name = nullptr;
    ASSERT_EQ(cuFuncGetName(&name, as_function), CUDA_SUCCESS);
    EXPECT_STREQ(name, "entry_kernel");
    // The kernel's function in this context belongs to a module; the same one cuKernelGetFunction
    // names.
    CUfunction function = nullptr;
    ASSERT_EQ(cuKernelGetFunction(&function, kernel), CUDA_SUCCESS);
    CUmodule via_kernel = nullptr, via_function = nullptr;
    ASSERT_EQ(cuFuncGetModule(&via_kernel, as_function), CUDA_SUCCESS);
    ASSERT_EQ(cuFuncGetModule(&via_function, function), CUDA_SUCCESS);
    EXPECT_NE(via_kernel, nullptr);
    EXPECT_EQ(via_kernel, via_function);
    EXPECT_EQ(cuFuncGetModule(nullptr, function), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(cuFuncGetModule(&via_kernel, reinterpret_cast<CUfunction>(0x10)),
              CUDA_ERROR_INVALID_HANDLE);
    EXPECT_EQ(cuFuncIsLoaded(&state, reinterpret_cast<CUfunction>(0x10)),
              CUDA_ERROR_INVALID_HANDLE);
    EXPECT_EQ(cuLibraryUnload(library), CUDA_SUCCESS);
  });
}

// --- Stream memory operations -------------------------------------------------------------------

TEST(SimRuntimeEntryPoints, StreamValueOperationsOnManagedMemory) {
  SimEnvironment env;
  scenario([] {
    primary();
    CUstream stream = nullptr;
    ASSERT_EQ(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    CUdeviceptr managed = 0;
    ASSERT_EQ(cuMemAllocManaged(&managed, 256, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
    std::memset(reinterpret_cast<void*>(managed), 0, 256);
    auto* words = reinterpret_cast<uint32_t*>(managed);

    ASSERT_EQ(cuStreamWriteValue32_v2(stream, managed + 4, 0xdeadbeefu, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamSynchronize(stream), CUDA_SUCCESS);
    EXPECT_EQ(words[1], 0xdeadbeefu);
    EXPECT_EQ(words[0], 0u);
    EXPECT_EQ(words[2], 0u);
    ASSERT_EQ(
        cuStreamWriteValue32_v2(stream, managed + 8, 7, CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER),
        CUDA_SUCCESS);
    EXPECT_EQ(words[2], 7u);
    ASSERT_EQ(cuStreamWriteValue64_v2(stream, managed + 16, 0x0123456789abcdefull, 0),
              CUDA_SUCCESS);
    EXPECT_EQ(*reinterpret_cast<uint64_t*>(managed + 16), 0x0123456789abcdefull);

    // Waits on valid memory, with each comparison.
    EXPECT_EQ(cuStreamWaitValue32_v2(stream, managed + 4, 0xdeadbeefu, CU_STREAM_WAIT_VALUE_EQ),
              CUDA_SUCCESS);
    EXPECT_EQ(cuStreamWaitValue32_v2(stream, managed + 8, 1, CU_STREAM_WAIT_VALUE_GEQ),
              CUDA_SUCCESS);
    EXPECT_EQ(cuStreamWaitValue32_v2(stream, managed + 8, 1,
                                     CU_STREAM_WAIT_VALUE_AND | CU_STREAM_WAIT_VALUE_FLUSH),
              CUDA_SUCCESS);
    EXPECT_EQ(cuStreamWaitValue64_v2(stream, managed + 16, 1, CU_STREAM_WAIT_VALUE_NOR),
              CUDA_SUCCESS);
    ASSERT_EQ(cuStreamSynchronize(stream), CUDA_SUCCESS);

    // Misaligned addresses.
    EXPECT_EQ(cuStreamWriteValue32_v2(stream, managed + 2, 1, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(cuStreamWaitValue32_v2(stream, managed + 1, 1, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(cuStreamWriteValue64_v2(stream, managed + 4, 1, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(words[0], 0u);
    // Bad flags.
    EXPECT_EQ(cuStreamWriteValue32_v2(stream, managed, 1, 0x4), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(cuStreamWaitValue32_v2(stream, managed, 1, 0x4), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(words[0], 0u);
    // Outside any allocation, and past the end of this one.
    std::vector<uint32_t> plain(4);
    EXPECT_EQ(cuStreamWriteValue32_v2(stream, reinterpret_cast<CUdeviceptr>(plain.data()), 1, 0),
              CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(cuStreamWriteValue64_v2(stream, managed + 256, 1, 0), CUDA_ERROR_INVALID_VALUE);
    // An unknown stream.
    EXPECT_EQ(cuStreamWriteValue32_v2(reinterpret_cast<CUstream>(0x1234), managed, 1, 0),
              CUDA_ERROR_INVALID_HANDLE);

    // Page-locked host memory is reachable too.
    void* pinned = nullptr;
    ASSERT_EQ(cuMemHostAlloc(&pinned, 64, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamWriteValue32_v2(stream, reinterpret_cast<CUdeviceptr>(pinned) + 4, 42, 0),
              CUDA_SUCCESS);
    EXPECT_EQ(static_cast<uint32_t*>(pinned)[1], 42u);

    // A batch: a write, then a wait for it.
    CUstreamBatchMemOpParams ops[2] = {};
    ops[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    ops[0].writeValue.address = managed + 32;
    ops[0].writeValue.value = 99;
    ops[0].writeValue.flags = 0;
    ops[1].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
    ops[1].waitValue.address = managed + 32;
    ops[1].waitValue.value = 99;
    ops[1].waitValue.flags = CU_STREAM_WAIT_VALUE_EQ;
    ASSERT_EQ(cuStreamBatchMemOp_v2(stream, 2, ops, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamSynchronize(stream), CUDA_SUCCESS);
    EXPECT_EQ(words[8], 99u);
    EXPECT_EQ(cuStreamBatchMemOp_v2(stream, 2, ops, 1), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(cuStreamBatchMemOp_v2(stream, 0, ops, 0), CUDA_ERROR_INVALID_VALUE);
    ops[1].waitValue.address = managed + 34;  // misaligned
    EXPECT_EQ(cuStreamBatchMemOp_v2(stream, 2, ops, 0), CUDA_ERROR_INVALID_VALUE);

    EXPECT_EQ(cuMemFreeHost(pinned), CUDA_SUCCESS);
    EXPECT_EQ(cuMemFree(managed), CUDA_SUCCESS);
    EXPECT_EQ(cuStreamDestroy(stream), CUDA_SUCCESS);
  });
}

// --- 2-D copies ---------------------------------------------------------------------------------

TEST(SimRuntimeEntryPoints, Copy2DFromHostIntoManagedMemoryWithPitches) {
  SimEnvironment env;
  scenario([] {
    primary();
    constexpr size_t kSrcPitch = 16, kDstPitch = 32, kWidth = 10, kHeight = 4;
    constexpr size_t kDstX = 2, kDstY = 1, kBytes = 256;
    unsigned char source[kSrcPitch * kHeight];
    for (size_t i = 0; i < sizeof source; ++i) source[i] = static_cast<unsigned char>(i + 1);
    CUdeviceptr managed = 0;
    ASSERT_EQ(cuMemAllocManaged(&managed, kBytes, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
    auto* target = reinterpret_cast<unsigned char*>(managed);
    std::memset(target, 0xEE, kBytes);

    CUDA_MEMCPY2D copy{};
    copy.srcMemoryType = CU_MEMORYTYPE_HOST;
    copy.srcHost = source;
    copy.srcPitch = kSrcPitch;
    copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    copy.dstDevice = managed;
    copy.dstPitch = kDstPitch;
    copy.dstXInBytes = kDstX;
    copy.dstY = kDstY;
    copy.WidthInBytes = kWidth;
    copy.Height = kHeight;
    ASSERT_EQ(cuMemcpy2D(&copy), CUDA_SUCCESS);
    for (size_t y = 0; y < kBytes / kDstPitch; ++y) {
      for (size_t x = 0; x < kDstPitch; ++x) {
        const bool inside = y >= kDstY && y < kDstY + kHeight && x >= kDstX && x < kDstX + kWidth;
        const unsigned char expected =
            inside ? source[(y - kDstY) * kSrcPitch + (x - kDstX)] : 0xEE;
        ASSERT_EQ(target[y * kDstPitch + x], expected) << "row " << y << " column " << x;
      }
    }

    // Back to the host, rows packed (pitch 0 is the width).
    unsigned char back[kWidth * kHeight] = {};
    CUDA_MEMCPY2D reverse{};
    reverse.srcMemoryType = CU_MEMORYTYPE_UNIFIED;
    reverse.srcDevice = managed;
    reverse.srcPitch = kDstPitch;
    reverse.srcXInBytes = kDstX;
    reverse.srcY = kDstY;
    reverse.dstMemoryType = CU_MEMORYTYPE_HOST;
    reverse.dstHost = back;
    reverse.WidthInBytes = kWidth;
    reverse.Height = kHeight;
    ASSERT_EQ(cuMemcpy2D(&reverse), CUDA_SUCCESS);
    for (size_t y = 0; y < kHeight; ++y) {
      EXPECT_EQ(std::memcmp(back + y * kWidth, source + y * kSrcPitch, kWidth), 0) << "row " << y;
    }

    // A device range past the allocation: rows 5-8 of 32 bytes end at 8 * 32 + 10 > 256.
    std::memset(target, 0xEE, kBytes);
    CUDA_MEMCPY2D past = copy;
    past.dstY = 5;
    EXPECT_EQ(cuMemcpy2D(&past), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(target[5 * kDstPitch + kDstX], 0xEE) << "nothing copied";
    // The last rows that fit.
    past.dstY = 4;
    past.dstXInBytes = kDstPitch - kWidth;
    EXPECT_EQ(cuMemcpy2D(&past), CUDA_SUCCESS);
    // A pitch narrower than a row.
    CUDA_MEMCPY2D narrow = copy;
    narrow.dstPitch = kWidth - 1;
    EXPECT_EQ(cuMemcpy2D(&narrow), CUDA_ERROR_INVALID_VALUE);
    CUDA_MEMCPY2D no_host = copy;
    no_host.srcHost = nullptr;
    EXPECT_EQ(cuMemcpy2D(&no_host), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(cuMemcpy2D(nullptr), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(cuMemFree(managed), CUDA_SUCCESS);
  });
}

// --- Capture mode -------------------------------------------------------------------------------

TEST(SimRuntimeEntryPoints, StreamCaptureModeIsPerThread) {
  SimEnvironment env;
  scenario([] {
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    ASSERT_EQ(cuThreadExchangeStreamCaptureMode(&mode), CUDA_SUCCESS);
    EXPECT_EQ(mode, CU_STREAM_CAPTURE_MODE_GLOBAL) << "the initial mode";

    CUstreamCaptureMode seen = CU_STREAM_CAPTURE_MODE_RELAXED;
    CUresult seen_result = CUDA_ERROR_UNKNOWN;
    CUstreamCaptureMode seen_again = CU_STREAM_CAPTURE_MODE_GLOBAL;
    std::thread other([&] {
      seen = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
      seen_result = cuThreadExchangeStreamCaptureMode(&seen);
      seen_again = CU_STREAM_CAPTURE_MODE_GLOBAL;
      cuThreadExchangeStreamCaptureMode(&seen_again);
    });
    other.join();
    EXPECT_EQ(seen_result, CUDA_SUCCESS);
    EXPECT_EQ(seen, CU_STREAM_CAPTURE_MODE_GLOBAL) << "a new thread starts in GLOBAL";
    EXPECT_EQ(seen_again, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);

    // This thread kept RELAXED.
    mode = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    ASSERT_EQ(cuThreadExchangeStreamCaptureMode(&mode), CUDA_SUCCESS);
    EXPECT_EQ(mode, CU_STREAM_CAPTURE_MODE_RELAXED);
    mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
    ASSERT_EQ(cuThreadExchangeStreamCaptureMode(&mode), CUDA_SUCCESS);
    EXPECT_EQ(mode, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);

    CUstreamCaptureMode bad = static_cast<CUstreamCaptureMode>(7);
    EXPECT_EQ(cuThreadExchangeStreamCaptureMode(&bad), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(cuThreadExchangeStreamCaptureMode(nullptr), CUDA_ERROR_INVALID_VALUE);
    mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
    ASSERT_EQ(cuThreadExchangeStreamCaptureMode(&mode), CUDA_SUCCESS);
    EXPECT_EQ(mode, CU_STREAM_CAPTURE_MODE_GLOBAL) << "a refused exchange changes nothing";
  });
}

// --- Graph kernel-node parameters ---------------------------------------------------------------

CUDA_KERNEL_NODE_PARAMS kernel_params(CUfunction function, unsigned grid_x, unsigned block_x,
                                      unsigned shared) {
  CUDA_KERNEL_NODE_PARAMS params{};
  params.func = function;
  params.gridDimX = grid_x;
  params.gridDimY = 2;
  params.gridDimZ = 1;
  params.blockDimX = block_x;
  params.blockDimY = 1;
  params.blockDimZ = 1;
  params.sharedMemBytes = shared;
  return params;
}

TEST(SimRuntimeEntryPoints, GraphKernelNodeParamsRoundTripAndUpdate) {
  SimEnvironment env;
  scenario([] {
    primary();
    const CUfunction function = load_function();
    const CUfunction other = load_function(kPtx2, "other_kernel");
    CUgraph graph = nullptr;
    ASSERT_EQ(cuGraphCreate(&graph, 0), CUDA_SUCCESS);
    CUgraphNode node = nullptr;
    const CUDA_KERNEL_NODE_PARAMS params = kernel_params(function, 4, 128, 256);
    ASSERT_EQ(cuGraphAddKernelNode(&node, graph, nullptr, 0, &params), CUDA_SUCCESS);

    CUDA_KERNEL_NODE_PARAMS got{};
    ASSERT_EQ(cuGraphKernelNodeGetParams(node, &got), CUDA_SUCCESS);
    EXPECT_EQ(got.func, function);
    EXPECT_EQ(got.gridDimX, 4u);
    EXPECT_EQ(got.gridDimY, 2u);
    EXPECT_EQ(got.gridDimZ, 1u);
    EXPECT_EQ(got.blockDimX, 128u);
    EXPECT_EQ(got.blockDimY, 1u);
    EXPECT_EQ(got.blockDimZ, 1u);
    EXPECT_EQ(got.sharedMemBytes, 256u);
    EXPECT_EQ(cuGraphKernelNodeGetParams(node, nullptr), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(cuGraphKernelNodeGetParams(reinterpret_cast<CUgraphNode>(0x10), &got),
              CUDA_ERROR_INVALID_VALUE);

    CUgraphExec exec = nullptr;
    ASSERT_EQ(cuGraphInstantiate(&exec, graph, 0), CUDA_SUCCESS);
    const CUDA_KERNEL_NODE_PARAMS update = kernel_params(other, 8, 256, 0);
    ASSERT_EQ(cuGraphExecKernelNodeSetParams(exec, node, &update), CUDA_SUCCESS);
    // The executable graph changed, the graph it came from did not.
    ASSERT_EQ(cuGraphKernelNodeGetParams(node, &got), CUDA_SUCCESS);
    EXPECT_EQ(got.func, function);
    EXPECT_EQ(got.gridDimX, 4u);
    EXPECT_EQ(got.blockDimX, 128u);
    EXPECT_EQ(got.sharedMemBytes, 256u);

    CUDA_KERNEL_NODE_PARAMS bad = kernel_params(function, 8, 0, 0);
    EXPECT_EQ(cuGraphExecKernelNodeSetParams(exec, node, &bad), CUDA_ERROR_INVALID_VALUE);
    bad = kernel_params(function, 0, 128, 0);
    EXPECT_EQ(cuGraphExecKernelNodeSetParams(exec, node, &bad), CUDA_ERROR_INVALID_VALUE);
    bad = kernel_params(function, 8, 2048, 0);
    EXPECT_EQ(cuGraphExecKernelNodeSetParams(exec, node, &bad), CUDA_ERROR_INVALID_VALUE);
    bad = kernel_params(reinterpret_cast<CUfunction>(0x10), 8, 128, 0);
    EXPECT_EQ(cuGraphExecKernelNodeSetParams(exec, node, &bad), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(cuGraphExecKernelNodeSetParams(exec, node, nullptr), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(cuGraphExecKernelNodeSetParams(reinterpret_cast<CUgraphExec>(0x10), node, &update),
              CUDA_ERROR_INVALID_VALUE);

    CUstream stream = nullptr;
    ASSERT_EQ(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    EXPECT_EQ(cuGraphLaunch(exec, stream), CUDA_SUCCESS);
    EXPECT_EQ(cuStreamSynchronize(stream), CUDA_SUCCESS);
    EXPECT_EQ(cuGraphExecDestroy(exec), CUDA_SUCCESS);
    EXPECT_EQ(cuGraphDestroy(graph), CUDA_SUCCESS);
    EXPECT_EQ(cuStreamDestroy(stream), CUDA_SUCCESS);
  });
}

// cuda.h (cuGraphExecKernelNodeSetParams): hNode is a "kernel node from the graph from which
// graphExec was instantiated"; a node of another graph is CUDA_ERROR_INVALID_VALUE.
TEST(SimRuntimeEntryPoints, ExecKernelNodeSetParamsRefusesANodeOfAnotherGraph) {
  SimEnvironment env;
  scenario([] {
    primary();
    const CUfunction function = load_function();
    CUgraph first = nullptr, second = nullptr;
    ASSERT_EQ(cuGraphCreate(&first, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuGraphCreate(&second, 0), CUDA_SUCCESS);
    const CUDA_KERNEL_NODE_PARAMS params = kernel_params(function, 4, 128, 0);
    CUgraphNode in_first = nullptr, in_second = nullptr;
    ASSERT_EQ(cuGraphAddKernelNode(&in_first, first, nullptr, 0, &params), CUDA_SUCCESS);
    ASSERT_EQ(cuGraphAddKernelNode(&in_second, second, nullptr, 0, &params), CUDA_SUCCESS);
    CUgraphExec exec = nullptr;
    ASSERT_EQ(cuGraphInstantiate(&exec, first, 0), CUDA_SUCCESS);
    const CUDA_KERNEL_NODE_PARAMS update = kernel_params(function, 8, 256, 0);
    EXPECT_EQ(cuGraphExecKernelNodeSetParams(exec, in_second, &update), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(cuGraphExecKernelNodeSetParams(exec, in_first, &update), CUDA_SUCCESS);
    EXPECT_EQ(cuGraphExecDestroy(exec), CUDA_SUCCESS);
    EXPECT_EQ(cuGraphDestroy(first), CUDA_SUCCESS);
    EXPECT_EQ(cuGraphDestroy(second), CUDA_SUCCESS);
  });
}

// --- Linker -------------------------------------------------------------------------------------

TEST(SimRuntimeEntryPoints, LinkedPtxLoadsAsAModuleWithItsFunctions) {
  SimEnvironment env;
  scenario([] {
    primary();
    CUlinkState link = nullptr;
    ASSERT_EQ(cuLinkCreate(0, nullptr, nullptr, &link), CUDA_SUCCESS);
    ASSERT_EQ(cuLinkAddData(link, CU_JIT_INPUT_PTX, const_cast<char*>(kPtx), sizeof kPtx - 1,
                            "entry.ptx", 0, nullptr, nullptr),
              CUDA_SUCCESS);
    // The second input from a file.
    char path[] = "/tmp/simgpu-link-XXXXXX";
    const int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, kPtx2, sizeof kPtx2 - 1), static_cast<ssize_t>(sizeof kPtx2 - 1));
    close(fd);
    EXPECT_EQ(cuLinkAddFile(link, CU_JIT_INPUT_PTX, path, 0, nullptr, nullptr), CUDA_SUCCESS);
    unlink(path);
    void* image = nullptr;
    size_t size = 0;
    ASSERT_EQ(cuLinkComplete(link, &image, &size), CUDA_SUCCESS);
    ASSERT_NE(image, nullptr);
    EXPECT_GT(size, 0u);
    CUmodule module = nullptr;
    ASSERT_EQ(cuModuleLoadDataEx(&module, image, 0, nullptr, nullptr), CUDA_SUCCESS);
    CUfunction entry = nullptr, other = nullptr, absent = nullptr;
    ASSERT_EQ(cuModuleGetFunction(&entry, module, "entry_kernel"), CUDA_SUCCESS);
    ASSERT_EQ(cuModuleGetFunction(&other, module, "other_kernel"), CUDA_SUCCESS);
    EXPECT_NE(entry, other);
    EXPECT_EQ(cuModuleGetFunction(&absent, module, "missing_kernel"), CUDA_ERROR_NOT_FOUND);
    CUmodule owner = nullptr;
    ASSERT_EQ(cuFuncGetModule(&owner, other), CUDA_SUCCESS);
    EXPECT_EQ(owner, module);
    // The image stays the linker's until cuLinkDestroy; the module does not need it after loading.
    EXPECT_EQ(cuLinkDestroy(link), CUDA_SUCCESS);
    EXPECT_EQ(cuLaunchKernel(entry, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr), CUDA_SUCCESS);
    EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
    EXPECT_EQ(cuModuleUnload(module), CUDA_SUCCESS);
  });
}

}  // namespace
}  // namespace simgpu::testing

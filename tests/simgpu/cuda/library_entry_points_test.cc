// Driver entry points the NVIDIA libraries (cuBLAS/cuBLASLt, cuDNN, NCCL) resolve: the JIT
// linker, tensor maps, stream capture info and stream identity, cache preferences, peer access.
#include <cuda.h>
#include <gtest/gtest.h>

#include <cstring>

#include "sim_test_support.h"

#undef cuStreamGetCaptureInfo
extern "C" CUresult cuStreamGetCaptureInfo_v2(CUstream, CUstreamCaptureStatus*, cuuint64_t*,
                                              CUgraph*, const CUgraphNode**, size_t*);
extern "C" CUresult cuStreamGetPriority_ptsz(CUstream, int*);
extern "C" CUresult cuStreamGetFlags_ptsz(CUstream, unsigned int*);
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // the shared-memory bank calls

namespace simgpu::testing {
namespace {

const char kPtx[] =
    ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry linked_kernel()\n{\n ret;\n}\n";
const char kPtx2[] =
    ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry second_kernel()\n{\n ret;\n}\n";

int run(const std::function<int(FILE*)>& body) {
  Child child(body);
  return child.wait_exit();
}

TEST(SimLibraryEntryPoints, LinkerOutputLoadsAsAModuleWithEveryKernel) {
  SimEnvironment env;
  EXPECT_EQ(run([](FILE*) {
              CUlinkState link = nullptr;
              if (cuLinkCreate(0, nullptr, nullptr, &link) != CUDA_ERROR_NOT_INITIALIZED) return 1;
              CUcontext context;
              if (CUresult r = init_primary(&context); r) return 2;
              if (cuLinkCreate(0, nullptr, nullptr, &link) != CUDA_SUCCESS) return 3;
              void* image = nullptr;
              size_t size = 0;
              if (cuLinkComplete(link, &image, &size) != CUDA_ERROR_INVALID_VALUE) return 4;
              if (cuLinkAddData(link, CU_JIT_INPUT_PTX, const_cast<char*>(kPtx), sizeof kPtx - 1,
                                "a", 0, nullptr, nullptr) != CUDA_SUCCESS)
                return 5;
              if (cuLinkAddData(link, CU_JIT_INPUT_PTX, const_cast<char*>(kPtx2), sizeof kPtx2 - 1,
                                "b", 0, nullptr, nullptr) != CUDA_SUCCESS)
                return 6;
              char junk[] = "not an image";
              if (cuLinkAddData(link, CU_JIT_INPUT_PTX, junk, sizeof junk, "c", 0, nullptr,
                                nullptr) == CUDA_SUCCESS)
                return 7;
              if (cuLinkAddData(link, CU_JIT_INPUT_NVVM, const_cast<char*>(kPtx), sizeof kPtx, "d",
                                0, nullptr, nullptr) != CUDA_ERROR_INVALID_VALUE)
                return 8;
              if (cuLinkComplete(link, &image, &size) != CUDA_SUCCESS || !image || !size) return 9;
              CUmodule module;
              if (cuModuleLoadData(&module, image) != CUDA_SUCCESS) return 10;
              CUfunction f;
              if (cuModuleGetFunction(&f, module, "linked_kernel") != CUDA_SUCCESS) return 11;
              if (cuModuleGetFunction(&f, module, "second_kernel") != CUDA_SUCCESS) return 12;
              if (cuModuleGetFunction(&f, module, "absent") != CUDA_ERROR_NOT_FOUND) return 13;
              if (cuLinkDestroy(link) != CUDA_SUCCESS) return 14;
              if (cuLinkDestroy(link) != CUDA_ERROR_INVALID_HANDLE) return 15;
              if (cuLinkAddFile(link, CU_JIT_INPUT_PTX, "/nonexistent", 0, nullptr, nullptr) !=
                  CUDA_ERROR_FILE_NOT_FOUND)
                return 16;
              return 0;
            }),
            0);
}

TEST(SimLibraryEntryPoints, TensorMapEncodeTiledChecksItsArguments) {
  SimEnvironment env;
  EXPECT_EQ(run([](FILE*) {
              alignas(64) CUtensorMap map;
              alignas(16) static float data[64 * 64];
              const cuuint64_t dims[2] = {64, 64};
              const cuuint64_t strides[1] = {64 * sizeof(float)};
              const cuuint32_t box[2] = {32, 32};
              const cuuint32_t elements[2] = {1, 1};
              auto encode = [&](CUtensorMap* m, void* address, const cuuint32_t* b) {
                return cuTensorMapEncodeTiled(
                    m, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, address, dims, strides, b, elements,
                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                    CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
              };
              if (encode(&map, data, box) != CUDA_SUCCESS) return 1;
              if (map.opaque[0] != reinterpret_cast<uintptr_t>(data)) return 2;
              if (encode(&map, reinterpret_cast<char*>(data) + 4, box) != CUDA_ERROR_INVALID_VALUE)
                return 3;
              const cuuint32_t big_box[2] = {512, 32};
              if (encode(&map, data, big_box) != CUDA_ERROR_INVALID_VALUE) return 4;
              const cuuint32_t odd_box[2] = {3, 32};  // 12 bytes: not a multiple of 16
              if (encode(&map, data, odd_box) != CUDA_ERROR_INVALID_VALUE) return 5;
              auto* unaligned = reinterpret_cast<CUtensorMap*>(reinterpret_cast<char*>(&map) + 8);
              if (encode(unaligned, data, box) != CUDA_ERROR_INVALID_VALUE) return 6;
              return 0;
            }),
            0);
}

TEST(SimLibraryEntryPoints, CaptureInfoStreamIdAndDevice) {
  SimEnvironment env;
  EXPECT_EQ(
      run([](FILE*) {
        CUcontext context;
        if (CUresult r = init_primary(&context); r) return 1;
        CUstream stream;
        if (cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) return 2;
        CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
        cuuint64_t id = 0;
        CUgraph graph = nullptr;
        const CUgraphNode* deps = nullptr;
        size_t count = 99;
        if (cuStreamGetCaptureInfo_v2(stream, &status, &id, &graph, &deps, &count) != CUDA_SUCCESS)
          return 3;
        if (status != CU_STREAM_CAPTURE_STATUS_NONE) return 4;
        if (cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL) != CUDA_SUCCESS) return 5;
        if (cuStreamGetCaptureInfo_v2(stream, &status, &id, &graph, &deps, &count) != CUDA_SUCCESS)
          return 6;
        if (status != CU_STREAM_CAPTURE_STATUS_ACTIVE || id == 0 || !graph || count != 0) return 7;
        CUgraph captured;
        if (cuStreamEndCapture(stream, &captured) != CUDA_SUCCESS || captured != graph) return 8;
        if (cuStreamGetCaptureInfo_v2(reinterpret_cast<CUstream>(0x1234), &status, &id, nullptr,
                                      nullptr, nullptr) != CUDA_ERROR_INVALID_HANDLE)
          return 9;
        unsigned long long a = 0, b = 0, a_again = 0;
        if (cuStreamGetId(stream, &a) != CUDA_SUCCESS) return 10;
        if (cuStreamGetId(nullptr, &b) != CUDA_SUCCESS) return 11;
        if (cuStreamGetId(stream, &a_again) != CUDA_SUCCESS) return 12;
        if (a == 0 || a == b || a != a_again) return 13;
        CUdevice device = -1;
        if (cuStreamGetDevice(stream, &device) != CUDA_SUCCESS || device != 0) return 14;
        int priority = 1;
        if (cuStreamGetPriority_ptsz(stream, &priority) != CUDA_SUCCESS || priority != 0) return 15;
        unsigned flags = 0;
        if (cuStreamGetFlags_ptsz(stream, &flags) != CUDA_SUCCESS ||
            flags != CU_STREAM_NON_BLOCKING)
          return 16;
        return 0;
      }),
      0);
}

TEST(SimLibraryEntryPoints, CacheConfigIsKeptPerContext) {
  SimEnvironment env;
  EXPECT_EQ(
      run([](FILE*) {
        if (cuInit(0) != CUDA_SUCCESS) return 1;
        CUfunc_cache config;
        if (cuCtxGetCacheConfig(&config) != CUDA_ERROR_INVALID_CONTEXT) return 2;
        CUcontext context;
        if (CUresult r = init_primary(&context); r) return 3;
        if (cuCtxGetCacheConfig(&config) != CUDA_SUCCESS || config != CU_FUNC_CACHE_PREFER_NONE)
          return 4;
        if (cuCtxSetCacheConfig(CU_FUNC_CACHE_PREFER_SHARED) != CUDA_SUCCESS) return 5;
        if (cuCtxGetCacheConfig(&config) != CUDA_SUCCESS || config != CU_FUNC_CACHE_PREFER_SHARED)
          return 6;
        if (cuCtxSetCacheConfig(static_cast<CUfunc_cache>(9)) != CUDA_ERROR_INVALID_VALUE) return 7;
        CUmodule module;
        if (cuModuleLoadData(&module, kPtx) != CUDA_SUCCESS) return 8;
        CUfunction f;
        if (cuModuleGetFunction(&f, module, "linked_kernel") != CUDA_SUCCESS) return 9;
        if (cuFuncSetCacheConfig(f, CU_FUNC_CACHE_PREFER_L1) != CUDA_SUCCESS) return 10;
        if (cuFuncSetCacheConfig(reinterpret_cast<CUfunction>(0x10), CU_FUNC_CACHE_PREFER_L1) !=
            CUDA_ERROR_INVALID_HANDLE)
          return 11;
        CUsharedconfig shared;
        if (cuCtxSetSharedMemConfig(CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE) != CUDA_SUCCESS)
          return 12;
        if (cuCtxGetSharedMemConfig(&shared) != CUDA_SUCCESS ||
            shared != CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE)
          return 13;
        if (cuCtxResetPersistingL2Cache() != CUDA_SUCCESS) return 14;
        return 0;
      }),
      0);
}

TEST(SimLibraryEntryPoints, PeerAccessBetweenTwoDevices) {
  SimEnvironment env(
      "name=NVIDIA H200,memory=16Gi,sms=132,cc=9.0;name=NVIDIA H200,memory=16Gi,sms=132,cc=9.0");
  EXPECT_EQ(run([](FILE*) {
              if (cuInit(0) != CUDA_SUCCESS) return 1;
              int can = -1;
              if (cuDeviceCanAccessPeer(&can, 0, 1) != CUDA_SUCCESS || can != 1) return 2;
              if (cuDeviceCanAccessPeer(&can, 0, 0) != CUDA_SUCCESS || can != 0) return 3;
              if (cuDeviceCanAccessPeer(&can, 0, 2) != CUDA_ERROR_INVALID_DEVICE) return 4;
              int value = -1;
              if (cuDeviceGetP2PAttribute(&value, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 0, 1) !=
                      CUDA_SUCCESS ||
                  value != 1)
                return 5;
              if (cuDeviceGetP2PAttribute(&value, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 0, 0) !=
                  CUDA_ERROR_INVALID_DEVICE)
                return 6;
              CUcontext c0, c1;
              if (cuDevicePrimaryCtxRetain(&c0, 0) != CUDA_SUCCESS) return 7;
              if (cuDevicePrimaryCtxRetain(&c1, 1) != CUDA_SUCCESS) return 8;
              if (cuCtxSetCurrent(c0) != CUDA_SUCCESS) return 9;
              if (cuCtxDisablePeerAccess(c1) != CUDA_ERROR_PEER_ACCESS_NOT_ENABLED) return 10;
              if (cuCtxEnablePeerAccess(c1, 0) != CUDA_SUCCESS) return 11;
              if (cuCtxEnablePeerAccess(c1, 0) != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) return 12;
              if (cuCtxEnablePeerAccess(c0, 0) != CUDA_ERROR_INVALID_DEVICE) return 13;
              if (cuCtxEnablePeerAccess(c1, 1) != CUDA_ERROR_INVALID_VALUE) return 14;
              if (cuCtxDisablePeerAccess(c1) != CUDA_SUCCESS) return 15;
              return 0;
            }),
            0);
}

}  // namespace
}  // namespace simgpu::testing

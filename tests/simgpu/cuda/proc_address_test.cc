// cuGetProcAddress on the simulated driver answers (name, version, flags) with the same ABI a real
// driver chooses: the version picks _v2/_v3..., the per-thread flag picks _ptsz/_ptds.
#include <cuda.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <ostream>
#include <string>

namespace {

void* driver_handle() {
  static void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  return handle;
}

struct Expectation {
  const char* name;
  int version;
  cuuint64_t flags;
  const char* symbol;  // nullptr: not found
  CUdriverProcAddressQueryResult status;
};

// Printed in test names' place of the raw bytes gtest would otherwise show.
void PrintTo(const Expectation& expectation, std::ostream* out) {
  *out << expectation.name << '@' << expectation.version << " flags " << expectation.flags;
}

class ProcAddressMatrix : public ::testing::TestWithParam<Expectation> {};

TEST_P(ProcAddressMatrix, ChoosesTheAbiTheRealDriverChooses) {
  const Expectation& expected = GetParam();
  ASSERT_NE(driver_handle(), nullptr);
  void* function = reinterpret_cast<void*>(0x1);
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  const CUresult result =
      cuGetProcAddress(expected.name, &function, expected.version, expected.flags, &status);
  EXPECT_EQ(status, expected.status);
  if (expected.symbol) {
    ASSERT_EQ(result, CUDA_SUCCESS);
    EXPECT_EQ(function, dlsym(driver_handle(), expected.symbol)) << expected.symbol;
  } else {
    EXPECT_EQ(result, CUDA_ERROR_NOT_FOUND);
    EXPECT_EQ(function, nullptr);
  }
}

constexpr cuuint64_t kPerThread = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
constexpr cuuint64_t kLegacy = CU_GET_PROC_ADDRESS_LEGACY_STREAM;
constexpr auto kOk = CU_GET_PROC_ADDRESS_SUCCESS;

INSTANTIATE_TEST_SUITE_P(
    Sim, ProcAddressMatrix,
    ::testing::Values(
        Expectation{"cuMemAlloc", 3020, 0, "cuMemAlloc_v2", kOk},
        Expectation{"cuMemAlloc", 13000, kPerThread, "cuMemAlloc_v2", kOk},
        Expectation{"cuMemAlloc", 2000, 0, "cuMemAlloc", kOk},
        Expectation{"cuCtxCreate", 3020, 0, "cuCtxCreate_v2", kOk},
        Expectation{"cuCtxCreate", 11040, 0, "cuCtxCreate_v3", kOk},
        Expectation{"cuCtxCreate", 12050, 0, "cuCtxCreate_v4", kOk},
        Expectation{"cuCtxCreate", 13000, 0, "cuCtxCreate_v4", kOk},
        Expectation{"cuLaunchKernel", 4000, 0, "cuLaunchKernel", kOk},
        Expectation{"cuLaunchKernel", 7000, kLegacy, "cuLaunchKernel", kOk},
        Expectation{"cuLaunchKernel", 7000, kPerThread, "cuLaunchKernel_ptsz", kOk},
        Expectation{"cuLaunchKernelEx", 11060, kPerThread, "cuLaunchKernelEx_ptsz", kOk},
        Expectation{"cuGraphLaunch", 12000, kPerThread, "cuGraphLaunch_ptsz", kOk},
        Expectation{"cuMemAllocAsync", 11020, kPerThread, "cuMemAllocAsync_ptsz", kOk},
        Expectation{"cuStreamBeginCapture", 10010, kPerThread, "cuStreamBeginCapture_v2_ptsz", kOk},
        Expectation{"cuStreamBeginCapture", 10000, kPerThread, "cuStreamBeginCapture_ptsz", kOk},
        Expectation{"cuGraphInstantiate", 12000, 0, "cuGraphInstantiateWithFlags", kOk},
        Expectation{"cuEventElapsedTime", 12080, 0, "cuEventElapsedTime_v2", kOk},
        Expectation{"cuGetProcAddress", 11030, 0, "cuGetProcAddress", kOk},
        Expectation{"cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2", kOk},
        Expectation{"cuMemGetInfo", 3020, 0, "cuMemGetInfo_v2", kOk},
        Expectation{"cuMemCreate", 10020, 0, "cuMemCreate", kOk},
        Expectation{"cuMemCreate", 10010, 0, nullptr, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT},
        Expectation{"cuNoSuchFunction", 13000, 0, nullptr, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND}),
    // Stable, readable test names (name, version, flags) instead of the struct's raw bytes.
    [](const ::testing::TestParamInfo<Expectation>& case_info) {
      return std::string(case_info.param.name) + "_" + std::to_string(case_info.param.version) +
             (case_info.param.flags == kPerThread ? "_per_thread"
              : case_info.param.flags == kLegacy  ? "_legacy"
                                                  : "");
    });

TEST(ProcAddress, RejectsBadArguments) {
  void* function = nullptr;
  EXPECT_EQ(cuGetProcAddress(nullptr, &function, 13000, 0, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGetProcAddress("cuMemAlloc", nullptr, 13000, 0, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGetProcAddress("cuMemAlloc", &function, 13000, 8, nullptr), CUDA_ERROR_INVALID_VALUE);
}

TEST(ProcAddress, ExportTablesAreNotSupported) {
  const void* table = reinterpret_cast<const void*>(0x1);
  CUuuid id{};
  EXPECT_EQ(cuGetExportTable(&table, &id), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(table, nullptr);
}

TEST(ProcAddress, ErrorNamesAndStrings) {
  const char* text = nullptr;
  ASSERT_EQ(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &text), CUDA_SUCCESS);
  EXPECT_STREQ(text, "CUDA_ERROR_OUT_OF_MEMORY");
  ASSERT_EQ(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &text), CUDA_SUCCESS);
  EXPECT_STREQ(text, "out of memory");
  EXPECT_EQ(cuGetErrorName(static_cast<CUresult>(123456), &text), CUDA_ERROR_INVALID_VALUE);
}

}  // namespace

// cuGetProcAddress on the simulated driver answers (name, version, flags) with the same ABI a real
// driver chooses: the version picks _v2/_v3..., the per-thread flag picks _ptsz/_ptds.
#include <cuda.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <initializer_list>
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

CUuuid uuid_of(std::initializer_list<unsigned> bytes) {
  CUuuid id{};
  size_t i = 0;
  for (unsigned byte : bytes) id.bytes[i++] = static_cast<char>(byte);
  return id;
}

TEST(ExportTables, AnUnknownTableIsAnErrorWithoutATable) {
  const void* table = reinterpret_cast<const void*>(0x1);
  CUuuid id{};
  EXPECT_EQ(cuGetExportTable(&table, &id), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(table, nullptr);
  EXPECT_EQ(cuGetExportTable(nullptr, &id), CUDA_ERROR_INVALID_VALUE);
}

TEST(ExportTables, TheCuda13BootstrapProbeIsRefused) {
  // CUDA 13's runtime asks f8cff951 first and takes any table there as another bootstrap.
  const void* table = reinterpret_cast<const void*>(0x1);
  const CUuuid probe = uuid_of({0xf8, 0xcf, 0xf9, 0x51, 0x21, 0x46, 0x8b, 0x4e, 0xb9, 0xe2, 0xfb,
                                0x46, 0x9e, 0x7c, 0x0d, 0xd9});
  EXPECT_EQ(cuGetExportTable(&table, &probe), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(table, nullptr);
}

TEST(ExportTables, TheRuntimeTablesAreServedWithTheirSizes) {
  struct Served {
    CUuuid id;
    size_t words;  // 0: the table has no size word
  };
  const Served served[] = {
      {uuid_of({0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd,
                0x9d, 0xf9}),
       13},
      {uuid_of({0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c,
                0x0a, 0x66}),
       7},
      {uuid_of({0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a,
                0xec, 0xdc}),
       4},
      {uuid_of({0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8,
                0x95, 0x93}),
       0},
      {uuid_of({0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43, 0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d,
                0xfa, 0x7e}),
       4},
      {uuid_of({0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66,
                0xe1, 0xf2}),
       3},
  };
  for (const Served& table : served) {
    const void* found = nullptr;
    ASSERT_EQ(cuGetExportTable(&found, &table.id), CUDA_SUCCESS);
    ASSERT_NE(found, nullptr);
    if (table.words) {
      EXPECT_EQ(*static_cast<const size_t*>(found), table.words * sizeof(void*));
    }
  }
}

TEST(ExportTables, ContextLocalStorageHoldsPerContextAndCallsBackWhenTheContextGoes) {
  // A simulated machine of this test's own (each test runs in a process of its own).
  char state[] = "/tmp/simgpu-export-tables-XXXXXX";
  const int fd = mkstemp(state);
  ASSERT_GE(fd, 0);
  close(fd);
  unlink(state);
  setenv("SIMGPU_STATE", state, 1);
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  const CUuuid id = uuid_of({0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3,
                             0x55, 0xd8, 0x95, 0x93});
  const void* found = nullptr;
  ASSERT_EQ(cuGetExportTable(&found, &id), CUDA_SUCCESS);
  using Callback = void (*)(CUcontext, void*, void*);
  auto* slots = static_cast<void* const*>(found);
  auto put = reinterpret_cast<CUresult (*)(CUcontext, void*, void*, Callback)>(slots[0]);
  auto erase = reinterpret_cast<CUresult (*)(CUcontext, void*)>(slots[1]);
  auto get = reinterpret_cast<CUresult (*)(void**, CUcontext, void*)>(slots[2]);

  CUcontext context = nullptr;
  ASSERT_EQ(cuCtxCreate(&context, nullptr, 0, 0), CUDA_SUCCESS);
  static int key;
  static int value;
  static int callbacks;
  static CUcontext called_for;
  callbacks = 0;
  void* read = nullptr;
  EXPECT_EQ(get(&read, context, &key), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_EQ(put(nullptr, &key, &value,
                [](CUcontext ctx, void*, void* stored) {
                  ++callbacks;
                  called_for = ctx;
                  EXPECT_EQ(stored, &value);
                }),
            CUDA_SUCCESS);  // NULL: the current context
  ASSERT_EQ(get(&read, context, &key), CUDA_SUCCESS);
  EXPECT_EQ(read, &value);
  ASSERT_EQ(erase(context, &key), CUDA_SUCCESS);
  EXPECT_EQ(get(&read, context, &key), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_EQ(put(context, &key, &value,
                [](CUcontext ctx, void*, void* stored) {
                  ++callbacks;
                  called_for = ctx;
                  EXPECT_EQ(stored, &value);
                }),
            CUDA_SUCCESS);
  EXPECT_EQ(callbacks, 0);
  ASSERT_EQ(cuCtxDestroy_v2(context), CUDA_SUCCESS);
  EXPECT_EQ(callbacks, 1);
  EXPECT_EQ(called_for, context);
  unlink(state);
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

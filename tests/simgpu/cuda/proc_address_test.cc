// cuGetProcAddress on the simulated driver answers (name, version, flags) with the same ABI a real
// driver chooses: the version picks _v2/_v3..., the per-thread flag picks _ptsz/_ptds.
#include <cuda.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <initializer_list>
#include <ostream>
#include <string>
#include <vector>

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

const CUuuid kToolsThreadLocal = uuid_of({0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82,
                                          0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc});
const CUuuid kToolsContext = uuid_of({0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48, 0x8c, 0xa6,
                                      0x41, 0xff, 0x73, 0x24, 0xc8, 0xf2});
const CUuuid kToolsModule = uuid_of({0x6e, 0x16, 0x3f, 0xbe, 0xb9, 0x58, 0x44, 0x4d, 0x83, 0x5c,
                                     0xe1, 0x82, 0xaf, 0xf1, 0x99, 0x1e});

void* const* slots_of(const CUuuid& id) {
  const void* found = nullptr;
  EXPECT_EQ(cuGetExportTable(&found, &id), CUDA_SUCCESS);
  return static_cast<void* const*>(found);
}

// A simulated machine of the calling test's own (each test runs in a process of its own).
class PrivateMachine {
 public:
  PrivateMachine() {
    const int fd = mkstemp(state_);
    EXPECT_GE(fd, 0);
    close(fd);
    unlink(state_);
    setenv("SIMGPU_STATE", state_, 1);
  }
  ~PrivateMachine() { unlink(state_); }

 private:
  char state_[40] = "/tmp/simgpu-export-tables-XXXXXX";
};

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
      {kToolsContext, 95},
      {kToolsModule, 8},
  };
  for (const Served& table : served) {
    const void* found = nullptr;
    ASSERT_EQ(cuGetExportTable(&found, &table.id), CUDA_SUCCESS);
    ASSERT_NE(found, nullptr);
    if (table.words) {
      EXPECT_EQ(*static_cast<const size_t*>(found), table.words * sizeof(void*));
    }
    // Every slot is served or answers an error: none is a null a caller would jump to.
    const size_t first = table.words ? 1 : 0;
    const size_t words = table.words ? table.words : 4;  // the storage table: four functions
    for (size_t i = first; i < words; ++i)
      EXPECT_NE(static_cast<void* const*>(found)[i], nullptr) << "slot " << i;
  }
  // A slot the simulator does not serve (the runtime interface's 3rd): CUDA_ERROR_NOT_SUPPORTED.
  const void* runtime = nullptr;
  ASSERT_EQ(cuGetExportTable(&runtime, &served[0].id), CUDA_SUCCESS);
  auto unserved = reinterpret_cast<CUresult (*)(uint64_t, uint64_t, uint64_t, uint64_t)>(
      static_cast<void* const*>(runtime)[3]);
  EXPECT_EQ(unserved(0, 0, 0, 0), CUDA_ERROR_NOT_SUPPORTED);
}

// What cuBLAS and cuBLASLt ask before a GEMM, and cuFFT when it starts: the thread's context, the
// context's device and id, a stream handle's object and that object's id.
TEST(ExportTables, TheToolsTablesAnswerForContextsAndStreams) {
  PrivateMachine machine;
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  auto current = reinterpret_cast<CUresult (*)(CUcontext*)>(slots_of(kToolsThreadLocal)[2]);
  void* const* context_slots = slots_of(kToolsContext);
  auto device_of = reinterpret_cast<CUresult (*)(CUcontext, CUdevice*)>(context_slots[3]);
  auto id_of = reinterpret_cast<CUresult (*)(CUcontext, unsigned long long*)>(context_slots[4]);
  auto stream_id =
      reinterpret_cast<CUresult (*)(CUcontext, void*, unsigned long long*)>(context_slots[39]);
  auto stream_object =
      reinterpret_cast<CUresult (*)(CUcontext, CUstream, void**)>(context_slots[51]);

  CUcontext found = reinterpret_cast<CUcontext>(0x1);
  ASSERT_EQ(current(&found), CUDA_SUCCESS);
  EXPECT_EQ(found, nullptr);  // none current yet

  CUcontext first = nullptr, second = nullptr;
  ASSERT_EQ(cuCtxCreate(&first, nullptr, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxCreate(&second, nullptr, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(current(&found), CUDA_SUCCESS);
  EXPECT_EQ(found, second);
  CUdevice device = -1;
  ASSERT_EQ(device_of(first, &device), CUDA_SUCCESS);
  EXPECT_EQ(device, 0);
  unsigned long long first_id = 0, second_id = 0, through_driver = 0;
  ASSERT_EQ(id_of(first, &first_id), CUDA_SUCCESS);
  ASSERT_EQ(id_of(second, &second_id), CUDA_SUCCESS);
  EXPECT_NE(first_id, 0u);
  EXPECT_NE(first_id, second_id);
  ASSERT_EQ(cuCtxGetId(first, &through_driver), CUDA_SUCCESS);
  EXPECT_EQ(through_driver, first_id);

  // The default handles name the context's default stream; a created stream is itself.
  CUstream stream = nullptr;
  ASSERT_EQ(cuStreamCreate(&stream, 0), CUDA_SUCCESS);
  void *legacy = nullptr, *per_thread = nullptr, *created = nullptr;
  ASSERT_EQ(stream_object(second, nullptr, &legacy), CUDA_SUCCESS);
  ASSERT_EQ(stream_object(second, CU_STREAM_PER_THREAD, &per_thread), CUDA_SUCCESS);
  ASSERT_EQ(stream_object(second, stream, &created), CUDA_SUCCESS);
  EXPECT_EQ(legacy, per_thread);
  EXPECT_NE(legacy, created);
  void* elsewhere = nullptr;
  EXPECT_EQ(stream_object(first, stream, &elsewhere), CUDA_ERROR_INVALID_HANDLE);
  unsigned long long created_id = 0, default_id = 0, driver_stream_id = 0;
  ASSERT_EQ(stream_id(second, created, &created_id), CUDA_SUCCESS);
  ASSERT_EQ(stream_id(second, legacy, &default_id), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamGetId(stream, &driver_stream_id), CUDA_SUCCESS);
  EXPECT_EQ(created_id, driver_stream_id);
  EXPECT_NE(created_id, default_id);

  // Every slot the simulator does not know answers an error instead of crashing its caller.
  auto unknown = reinterpret_cast<CUresult (*)(void*, void*, void*, void*)>(context_slots[10]);
  EXPECT_EQ(unknown(nullptr, nullptr, nullptr, nullptr), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(cuStreamDestroy(stream), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxDestroy(second), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxDestroy(first), CUDA_SUCCESS);
}

// cuFFT gets the one kernel of a module it loads through slot 7, without its name.
TEST(ExportTables, TheToolsModuleTableHandsEachFunctionOfAModule) {
  PrivateMachine machine;
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  CUcontext context = nullptr;
  ASSERT_EQ(cuCtxCreate(&context, nullptr, 0, 0), CUDA_SUCCESS);
  static const char kPtx[] =
      ".version 8.0\n.target sm_90\n.address_size 64\n"
      ".visible .entry first()\n{\nret;\n}\n.visible .entry second()\n{\nret;\n}\n";
  CUmodule module = nullptr;
  ASSERT_EQ(cuModuleLoadData(&module, kPtx), CUDA_SUCCESS);
  using Visitor = void (*)(void*, CUfunction, CUmodule);
  auto functions =
      reinterpret_cast<int (*)(CUcontext, CUmodule, Visitor, void*)>(slots_of(kToolsModule)[7]);
  std::vector<CUfunction> seen;
  EXPECT_EQ(functions(
                context, module,
                [](void* data, CUfunction function, CUmodule) {
                  static_cast<std::vector<CUfunction>*>(data)->push_back(function);
                },
                &seen),
            1);
  CUfunction first = nullptr, second = nullptr;
  ASSERT_EQ(cuModuleGetFunction(&first, module, "first"), CUDA_SUCCESS);
  ASSERT_EQ(cuModuleGetFunction(&second, module, "second"), CUDA_SUCCESS);
  EXPECT_EQ(seen, (std::vector<CUfunction>{first, second}));
  EXPECT_EQ(
      functions(
          context, reinterpret_cast<CUmodule>(&seen), [](void*, CUfunction, CUmodule) {}, nullptr),
      CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuModuleUnload(module), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxDestroy(context), CUDA_SUCCESS);
}

// Limits are the context's: a driver's defaults, what was set, and the query-only CIG ones
// (cuBLASLt refuses to start when CU_LIMIT_CIG_ENABLED cannot be read).
TEST(ContextLimits, AreTheContextsOwnWithADriversDefaults) {
  PrivateMachine machine;
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  size_t value = 1;
  EXPECT_EQ(cuCtxGetLimit(&value, CU_LIMIT_STACK_SIZE), CUDA_ERROR_INVALID_CONTEXT);
  CUcontext first = nullptr, second = nullptr;
  ASSERT_EQ(cuCtxCreate(&first, nullptr, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxGetLimit(&value, CU_LIMIT_CIG_ENABLED), CUDA_SUCCESS);
  EXPECT_EQ(value, 0u);
  ASSERT_EQ(cuCtxGetLimit(&value, CU_LIMIT_MALLOC_HEAP_SIZE), CUDA_SUCCESS);
  EXPECT_EQ(value, 8u << 20);
  ASSERT_EQ(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 4096), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxGetLimit(&value, CU_LIMIT_STACK_SIZE), CUDA_SUCCESS);
  EXPECT_EQ(value, 4096u);
  EXPECT_EQ(cuCtxSetLimit(CU_LIMIT_CIG_ENABLED, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuCtxSetLimit(CU_LIMIT_MAX_L2_FETCH_GRANULARITY, 129), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuCtxGetLimit(&value, CU_LIMIT_SHMEM_SIZE), CUDA_ERROR_UNSUPPORTED_LIMIT);
  EXPECT_EQ(cuCtxGetLimit(&value, CU_LIMIT_MAX), CUDA_ERROR_UNSUPPORTED_LIMIT);
  ASSERT_EQ(cuCtxCreate(&second, nullptr, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxGetLimit(&value, CU_LIMIT_STACK_SIZE), CUDA_SUCCESS);
  EXPECT_EQ(value, 1024u);  // the new context's own
  EXPECT_EQ(cuCtxDestroy(second), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxDestroy(first), CUDA_SUCCESS);
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

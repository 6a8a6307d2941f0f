#include "tessera/cuda_abi/cuda_abi.h"

#include <gtest/gtest.h>

#include <ostream>
#include <set>
#include <string>
#include <string_view>

namespace tessera::cuda_abi {
namespace {

constexpr cuuint64_t kDefault = CU_GET_PROC_ADDRESS_DEFAULT;
constexpr cuuint64_t kLegacy = CU_GET_PROC_ADDRESS_LEGACY_STREAM;
constexpr cuuint64_t kPerThread = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;

bool is_per_thread_symbol(std::string_view symbol) {
  return symbol.ends_with("_ptsz") || symbol.ends_with("_ptds");
}

struct Request {
  const char* name;
  int version;
  cuuint64_t flags;
  const char* expected_symbol;  // nullptr: not found
  CUdriverProcAddressQueryResult expected_status;
};

// Also names the test case in CTest: keep it free of spaces.
std::ostream& operator<<(std::ostream& out, const Request& request) {
  return out << (*request.name != '\0' ? request.name : "(empty)") << "_v" << request.version
             << "_flags" << request.flags;
}

class ResolveProcSymbol : public testing::TestWithParam<Request> {};

TEST_P(ResolveProcSymbol, AnswersWhatTheDriverAnswers) {
  const Request& request = GetParam();
  const ProcResolution resolution =
      resolve_proc_symbol(request.name, request.version, request.flags);
  EXPECT_EQ(resolution.status, request.expected_status);
  if (request.expected_symbol == nullptr) {
    EXPECT_EQ(resolution.symbol, nullptr);
  } else {
    ASSERT_NE(resolution.symbol, nullptr);
    EXPECT_STREQ(resolution.symbol, request.expected_symbol);
  }
}

constexpr auto kFound = CU_GET_PROC_ADDRESS_SUCCESS;
constexpr auto kTooOld = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
constexpr auto kUnknown = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;

INSTANTIATE_TEST_SUITE_P(
    Matrix, ResolveProcSymbol,
    testing::Values(
        // The ABI follows the caller's version: _v2 from 3.2 on.
        Request{"cuMemAlloc", 3020, kDefault, "cuMemAlloc_v2", kFound},
        Request{"cuMemAlloc", 2000, kDefault, "cuMemAlloc", kFound},
        Request{"cuMemAlloc", 13000, kLegacy, "cuMemAlloc_v2", kFound},
        Request{"cuMemAlloc", 1000, kDefault, nullptr, kTooOld},
        // Asked at 3020, cuCtxCreate must not answer the _v3/_v4 signature (a known shim crash).
        Request{"cuCtxCreate", 2000, kDefault, "cuCtxCreate", kFound},
        Request{"cuCtxCreate", 3020, kDefault, "cuCtxCreate_v2", kFound},
        Request{"cuCtxCreate", 11030, kDefault, "cuCtxCreate_v2", kFound},
        Request{"cuCtxCreate", 11040, kDefault, "cuCtxCreate_v3", kFound},
        Request{"cuCtxCreate", 12050, kDefault, "cuCtxCreate_v4", kFound},
        Request{"cuCtxCreate", 13000, kPerThread, "cuCtxCreate_v4", kFound},
        // Per-thread default stream forms, and the legacy fallback before they existed.
        Request{"cuLaunchKernel", 7000, kPerThread, "cuLaunchKernel_ptsz", kFound},
        Request{"cuLaunchKernel", 7000, kDefault, "cuLaunchKernel", kFound},
        Request{"cuLaunchKernel", 7000, kLegacy, "cuLaunchKernel", kFound},
        Request{"cuLaunchKernel", 4000, kPerThread, "cuLaunchKernel", kFound},
        Request{"cuLaunchKernel", 3020, kDefault, nullptr, kTooOld},
        Request{"cuMemcpy", 7000, kPerThread, "cuMemcpy_ptds", kFound},
        Request{"cuMemcpy", 7000, kDefault, "cuMemcpy", kFound},
        Request{"cuMemcpy2DAsync", 7000, kPerThread, "cuMemcpy2DAsync_v2_ptsz", kFound},
        Request{"cuMemcpy2DAsync", 3020, kPerThread, "cuMemcpy2DAsync_v2", kFound},
        Request{"cuMemcpy2DAsync", 2000, kDefault, "cuMemcpy2DAsync", kFound},
        Request{"cuStreamBeginCapture", 10000, kPerThread, "cuStreamBeginCapture_ptsz", kFound},
        Request{"cuStreamBeginCapture", 10010, kPerThread, "cuStreamBeginCapture_v2_ptsz", kFound},
        // cudart resolves the resolver itself; the 12.0 form reports a query result.
        Request{"cuGetProcAddress", 11030, kDefault, "cuGetProcAddress", kFound},
        Request{"cuGetProcAddress", 12000, kDefault, "cuGetProcAddress_v2", kFound},
        Request{"cuGetProcAddress", 11020, kDefault, nullptr, kTooOld},
        // cuda.h: #define cuGraphInstantiate cuGraphInstantiateWithFlags (from 12.0).
        Request{"cuGraphInstantiate", 10000, kDefault, "cuGraphInstantiate", kFound},
        Request{"cuGraphInstantiate", 11000, kDefault, "cuGraphInstantiate_v2", kFound},
        Request{"cuGraphInstantiate", 12000, kDefault, "cuGraphInstantiateWithFlags", kFound},
        // New ABIs that cuda.h does not #define the plain name to, but cuGetProcAddress hands out.
        Request{"cuStreamGetCtx", 12040, kPerThread, "cuStreamGetCtx_ptsz", kFound},
        Request{"cuStreamGetCtx", 12050, kPerThread, "cuStreamGetCtx_v2_ptsz", kFound},
        Request{"cuCtxGetDevice", 12090, kDefault, "cuCtxGetDevice", kFound},
        Request{"cuCtxGetDevice", 13000, kDefault, "cuCtxGetDevice_v2", kFound},
        Request{"cuEventElapsedTime", 12080, kDefault, "cuEventElapsedTime_v2", kFound},
        Request{"cuDevicePrimaryCtxRelease", 11000, kDefault, "cuDevicePrimaryCtxRelease_v2",
                kFound},
        Request{"cuProfilerStart", 4000, kDefault, "cuProfilerStart", kFound},
        // Unknown names, including versioned ones: the driver's table is keyed by base name.
        Request{"cuNoSuchFunction", 13000, kDefault, nullptr, kUnknown},
        Request{"cuMemAlloc_v2", 13000, kDefault, nullptr, kUnknown},
        Request{"", 13000, kDefault, nullptr, kUnknown},
        Request{"cuMemAllo", 13000, kDefault, nullptr, kUnknown}));

TEST(ResolveProcSymbolTable, EveryRowIsWhatItsOwnRequestResolvesTo) {
  for (const ProcEntry& entry : cuda_proc_table()) {
    const ProcResolution resolution =
        resolve_proc_symbol(entry.name, entry.version, entry.per_thread ? kPerThread : kDefault);
    ASSERT_EQ(resolution.status, CU_GET_PROC_ADDRESS_SUCCESS) << entry.name;
    EXPECT_STREQ(resolution.symbol, entry.symbol) << entry.name << " v" << entry.version;
  }
}

TEST(ResolveProcSymbolTable, PerThreadRequestsGetPerThreadSymbolsWhereTheyExist) {
  for (const ProcEntry& entry : cuda_proc_table()) {
    for (const int version : {entry.version, 13000, 99999}) {
      const ProcResolution threaded = resolve_proc_symbol(entry.name, version, kPerThread);
      const ProcResolution legacy = resolve_proc_symbol(entry.name, version, kLegacy);
      ASSERT_NE(threaded.symbol, nullptr);
      ASSERT_NE(legacy.symbol, nullptr);
      EXPECT_FALSE(is_per_thread_symbol(legacy.symbol)) << legacy.symbol;
      if (entry.per_thread) {
        EXPECT_TRUE(is_per_thread_symbol(threaded.symbol)) << entry.name << " v" << version;
        // Same ABI generation, only the stream semantics differ.
        EXPECT_TRUE(std::string_view(threaded.symbol).starts_with(legacy.symbol))
            << threaded.symbol << " vs " << legacy.symbol;
      }
    }
  }
}

TEST(ResolveProcSymbolTable, IsSortedByNameThenVersionAndCoversTheDriverApi) {
  const auto table = cuda_proc_table();
  ASSERT_GT(table.size(), 500u);  // CUDA 13 has about 640 rows
  for (size_t i = 1; i < table.size(); ++i) {
    const std::string_view previous(table[i - 1].name), current(table[i].name);
    ASSERT_TRUE(previous < current ||
                (previous == current && table[i - 1].version <= table[i].version))
        << previous << " / " << current;
  }
}

TEST(ProcSymbolsFor, ListsEveryAbiOfAName) {
  const ProcEntry* symbols[kMaxProcSymbolsPerName];
  const size_t count = proc_symbols_for("cuCtxCreate", symbols, kMaxProcSymbolsPerName);
  std::set<std::string> names;
  for (size_t i = 0; i < count; ++i) names.insert(symbols[i]->symbol);
  EXPECT_EQ(names, (std::set<std::string>{"cuCtxCreate", "cuCtxCreate_v2", "cuCtxCreate_v3",
                                          "cuCtxCreate_v4"}));

  const size_t copies = proc_symbols_for("cuMemcpy2DAsync", symbols, kMaxProcSymbolsPerName);
  names.clear();
  for (size_t i = 0; i < copies; ++i) names.insert(symbols[i]->symbol);
  EXPECT_EQ(names, (std::set<std::string>{"cuMemcpy2DAsync", "cuMemcpy2DAsync_v2",
                                          "cuMemcpy2DAsync_v2_ptsz"}));
}

TEST(ProcSymbolsFor, StopsAtCapacityAndKnowsNoUnknownName) {
  const ProcEntry* symbols[2] = {nullptr, nullptr};
  EXPECT_EQ(proc_symbols_for("cuCtxCreate", symbols, 2), 2u);
  EXPECT_STREQ(symbols[0]->symbol, "cuCtxCreate");
  EXPECT_EQ(proc_symbols_for("cuCtxCreate", symbols, 0), 0u);
  EXPECT_EQ(proc_symbols_for("cuNoSuchFunction", symbols, 2), 0u);
  EXPECT_TRUE(proc_entries_for("cuNoSuchFunction").empty());
}

TEST(CuResult, NamesEveryCodeAndDescribesItLikeTheDriver) {
  EXPECT_STREQ(cu_result_name(CUDA_SUCCESS), "CUDA_SUCCESS");
  EXPECT_STREQ(cu_result_string(CUDA_SUCCESS), "no error");
  EXPECT_STREQ(cu_result_name(CUDA_ERROR_OUT_OF_MEMORY), "CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_STREQ(cu_result_string(CUDA_ERROR_OUT_OF_MEMORY), "out of memory");
  EXPECT_STREQ(cu_result_string(CUDA_ERROR_INVALID_VALUE), "invalid argument");
  EXPECT_STREQ(cu_result_string(CUDA_ERROR_NOT_INITIALIZED), "initialization error");
  EXPECT_STREQ(cu_result_string(CUDA_ERROR_INVALID_CONTEXT), "invalid device context");
  EXPECT_STREQ(cu_result_name(CUDA_ERROR_UNKNOWN), "CUDA_ERROR_UNKNOWN");
  EXPECT_STREQ(cu_result_string(CUDA_ERROR_UNKNOWN), "unknown error");
  // Codes without a driver-style override get cuda.h's first sentence.
  EXPECT_STREQ(cu_result_name(CUDA_ERROR_ILLEGAL_ADDRESS), "CUDA_ERROR_ILLEGAL_ADDRESS");
  EXPECT_STREQ(cu_result_string(CUDA_ERROR_ILLEGAL_ADDRESS),
               "While executing a kernel, the device encountered a load or store instruction "
               "on an invalid memory address.");
  EXPECT_STREQ(cu_result_string(CUDA_ERROR_NOT_INITIALIZED), "initialization error");
  EXPECT_STREQ(cu_result_string(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED),
               "This error indicates that cuCtxDisablePeerAccess() is trying to disable peer "
               "access which has not been enabled yet via cuCtxEnablePeerAccess().");
}

TEST(ArrayFormat, ChannelBytesAsCudaDefinesThemAndZeroForAFormatNotListed) {
  static_assert(array_format_bytes(CU_AD_FORMAT_FLOAT) == 4);  // usable in constant expressions
  EXPECT_EQ(array_format_bytes(CU_AD_FORMAT_UNSIGNED_INT8), 1u);
  EXPECT_EQ(array_format_bytes(CU_AD_FORMAT_SIGNED_INT8), 1u);
  EXPECT_EQ(array_format_bytes(CU_AD_FORMAT_UNSIGNED_INT16), 2u);
  EXPECT_EQ(array_format_bytes(CU_AD_FORMAT_SIGNED_INT16), 2u);
  EXPECT_EQ(array_format_bytes(CU_AD_FORMAT_HALF), 2u);
  EXPECT_EQ(array_format_bytes(CU_AD_FORMAT_UNSIGNED_INT32), 4u);
  EXPECT_EQ(array_format_bytes(CU_AD_FORMAT_SIGNED_INT32), 4u);
  EXPECT_EQ(array_format_bytes(CU_AD_FORMAT_FLOAT), 4u);
  // Within the enum's value range, so the cast is well defined, but not an enumerator.
  EXPECT_EQ(array_format_bytes(static_cast<CUarray_format>(0x7f)), 0u);
}

TEST(CuResult, UnknownValuesHaveNoNameOrString) {
  // Within the enum's value range, so the cast is well defined, but not an enumerator.
  for (const int value : {42, 1000}) {
    const auto result = static_cast<CUresult>(value);
    EXPECT_EQ(cu_result_name(result), nullptr) << value;
    EXPECT_EQ(cu_result_string(result), nullptr) << value;
  }
}

}  // namespace
}  // namespace tessera::cuda_abi

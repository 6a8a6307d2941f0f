// The CUDA driver's ABI tables, generated at build time from the toolkit headers by
// gen_cuda_tables.py: which exported symbol cuGetProcAddress hands out for a (name, version,
// flags) request, and the names and descriptions of CUresult codes.
//
// Linked statically into the LD_PRELOAD shim, so everything here is constant data and pure
// functions: no exceptions, no allocation, no static constructors, safe before main.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace tessera::cuda_abi {

// One ABI of one driver entry point. Rows are sorted by (name, version, per_thread).
struct ProcEntry {
  const char* name;    // base name, as a caller passes it to cuGetProcAddress ("cuMemAlloc")
  int version;         // first CUDA version whose callers expect this ABI (3020 = CUDA 3.2)
  bool per_thread;     // the per-thread default stream form (_ptsz/_ptds)
  const char* symbol;  // the symbol libcuda exports for it ("cuMemAlloc_v2")
};

// Every row, sorted.
std::span<const ProcEntry> cuda_proc_table();

struct ProcResolution {
  const char* symbol;  // nullptr unless status is CU_GET_PROC_ADDRESS_SUCCESS
  CUdriverProcAddressQueryResult status;
};

// What the driver's cuGetProcAddress answers for `name` requested at `cuda_version`: the newest
// ABI introduced at or before that version. CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM in
// `flags` asks for the per-thread form and falls back to the legacy one where there is none;
// DEFAULT (0) and LEGACY_STREAM mean the legacy form. Names are base names: "cuMemAlloc_v2" is
// not found, as in the driver.
ProcResolution resolve_proc_symbol(std::string_view name, int cuda_version, cuuint64_t flags);

// All rows of one base name (empty if unknown), oldest first.
std::span<const ProcEntry> proc_entries_for(std::string_view name);

// Enough room for every ABI of any one name; checked against the generated table at compile time.
inline constexpr size_t kMaxProcSymbolsPerName = 8;

// All versioned symbols `name` may resolve to, for a shim that learns which ABI the real resolver
// returned by comparing its pointer with dlsym() of each. Writes at most `capacity` entries to
// `out` and returns how many it wrote; a capacity of kMaxProcSymbolsPerName always suffices.
size_t proc_symbols_for(std::string_view name, const ProcEntry** out, size_t capacity);

// "CUDA_ERROR_OUT_OF_MEMORY"; nullptr for a value cuda.h does not define.
const char* cu_result_name(CUresult result);

// A short description: the driver's own cuGetErrorString text for common codes ("out of
// memory"), otherwise the first sentence of cuda.h's documentation. nullptr if unknown.
const char* cu_result_string(CUresult result);

// The bytes of one channel of one element of a CUDA array of `format` (CUDA_ARRAY3D_DESCRIPTOR's
// Format), or 0 for a format this table does not list: each caller decides what an unknown one
// means (the shim charges the widest element, the simulator refuses the array).
constexpr uint64_t array_format_bytes(CUarray_format format) {
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
      return 4;
    default:
      return 0;
  }
}

}  // namespace tessera::cuda_abi

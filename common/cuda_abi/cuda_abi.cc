#include "tessera/cuda_abi/cuda_abi.h"

#include <algorithm>
#include <iterator>

namespace tessera::cuda_abi {
namespace {

// Constant-initialised: no constructor runs, so the shim may resolve symbols before main.
constexpr ProcEntry kProcTable[] = {
#define TESSERA_PROC_ENTRY(name, version, per_thread, symbol) \
  {name, version, (per_thread) != 0, symbol},
#include "cuda_proc_table.inc"
#undef TESSERA_PROC_ENTRY
};

constexpr bool row_before(const ProcEntry& a, const ProcEntry& b) {
  const std::string_view a_name(a.name), b_name(b.name);
  if (a_name != b_name) return a_name < b_name;
  if (a.version != b.version) return a.version < b.version;
  return a.per_thread < b.per_thread;
}

// Binary search and the oldest-first scan in resolve_proc_symbol rely on this order.
constexpr bool table_strictly_sorted() {
  for (size_t i = 1; i < std::size(kProcTable); ++i) {
    if (!row_before(kProcTable[i - 1], kProcTable[i])) return false;
  }
  return true;
}
static_assert(table_strictly_sorted(), "cuda_proc_table.inc must be sorted by name, version");

constexpr size_t most_rows_for_one_name() {
  size_t most = 0, run = 0;
  for (size_t i = 0; i < std::size(kProcTable); ++i) {
    const bool same_name =
        i > 0 && std::string_view(kProcTable[i].name) == std::string_view(kProcTable[i - 1].name);
    run = same_name ? run + 1 : 1;
    most = std::max(most, run);
  }
  return most;
}
static_assert(most_rows_for_one_name() <= kMaxProcSymbolsPerName,
              "raise kMaxProcSymbolsPerName: a name has more ABIs than it allows");

}  // namespace

std::span<const ProcEntry> cuda_proc_table() {
  return kProcTable;
}

std::span<const ProcEntry> proc_entries_for(std::string_view name) {
  const ProcEntry* const end = std::end(kProcTable);
  const ProcEntry* first = std::lower_bound(
      std::begin(kProcTable), end, name,
      [](const ProcEntry& entry, auto key) { return std::string_view(entry.name) < key; });
  const ProcEntry* last = first;
  while (last != end && std::string_view(last->name) == name) ++last;
  return {first, last};
}

ProcResolution resolve_proc_symbol(std::string_view name, int cuda_version, cuuint64_t flags) {
  const std::span<const ProcEntry> entries = proc_entries_for(name);
  if (entries.empty()) return {nullptr, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND};

  // The newest legacy and per-thread ABIs at or before the requested version.
  const ProcEntry* legacy = nullptr;
  const ProcEntry* per_thread = nullptr;
  for (const ProcEntry& entry : entries) {
    if (entry.version > cuda_version) break;  // rows are oldest first
    (entry.per_thread ? per_thread : legacy) = &entry;
  }
  if (legacy == nullptr) return {nullptr, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT};

  // The generator guarantees a per-thread row for every legacy ABI after the first per-thread
  // one, so per_thread is never an older ABI than legacy.
  const bool wants_per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  const ProcEntry* chosen = (wants_per_thread && per_thread != nullptr) ? per_thread : legacy;
  return {chosen->symbol, CU_GET_PROC_ADDRESS_SUCCESS};
}

size_t proc_symbols_for(std::string_view name, const ProcEntry** out, size_t capacity) {
  size_t written = 0;
  for (const ProcEntry& entry : proc_entries_for(name)) {
    if (written == capacity) break;
    out[written++] = &entry;
  }
  return written;
}

// A switch over every enumerator: -Wswitch (with -Werror) fails the build if the generated table
// misses one, and the compiler picks the lookup strategy.
const char* cu_result_name(CUresult result) {
  switch (result) {
#define TESSERA_CU_RESULT(code, description) \
  case code:                                 \
    return #code;
#include "cuda_result_table.inc"
#undef TESSERA_CU_RESULT
  }
  return nullptr;
}

const char* cu_result_string(CUresult result) {
  switch (result) {
#define TESSERA_CU_RESULT(code, description) \
  case code:                                 \
    return description;
#include "cuda_result_table.inc"
#undef TESSERA_CU_RESULT
  }
  return nullptr;
}

}  // namespace tessera::cuda_abi

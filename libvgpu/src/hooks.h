// Generated from hooks.def: the hook ids, the real entry points (resolved once, lazily, without
// locks) and the per-hook call counters.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>

#include "tessera/nvml_abi.h"

// cuda.h maps some names to their newest ABI; the shim defines every ABI under its own name.
#undef cuGetProcAddress
#undef cuGraphInstantiate

#define TESSERA_EXPORT extern "C" __attribute__((visibility("default")))

namespace tessera::vgpu {

enum class Library : uint8_t { kCuda, kNvml };

enum HookId : int {
#define TESSERA_HOOK(lib, kind, symbol, ret, params, args) kHook_##symbol,
#define TESSERA_REAL(lib, symbol, ret, params) kReal_##symbol,
#include "hooks.def"
  kEntryCount
};

// Function pointer types, one per entry: Fn_cuMemAlloc_v2 and so on.
#define TESSERA_HOOK(lib, kind, symbol, ret, params, args) using Fn_##symbol = ret(*) params;
#define TESSERA_REAL(lib, symbol, ret, params) using Fn_##symbol = ret(*) params;
#include "hooks.def"

struct EntryInfo {
  const char* name;
  Library library;
  bool hooked;
  void* wrapper;  // the shim's definition (hooked entries only)
};
extern const EntryInfo kEntries[kEntryCount];

// Per-entry resolved real pointers, and the calls counted where a thread has no counters of its
// own (call_counts_of_thread could not map them), one cache line each.
struct alignas(64) EntrySlot {
  std::atomic<void*> real{nullptr};
  std::atomic<uint64_t> calls{0};
};
extern EntrySlot g_entries[kEntryCount];

// Each thread counts its calls in a block of its own: a plain load, add and store, no locked
// instruction on any wrapper (only the owning thread writes; readers sum every block, relaxed).
// Blocks are never unmapped: a thread that exits hands its block, counts and all, to the next new
// thread, so the sums only grow.
struct CallCounts {
  std::atomic<uint64_t> calls[kEntryCount];
  std::atomic<CallCounts*> next;  // every block ever made, newest first
  std::atomic<bool> owned;
};
// This thread's block; null until its first counted call (initial-exec: one %fs-relative load,
// no __tls_get_addr; the shim is loaded at start-up by LD_PRELOAD or ld.so.preload).
extern __thread CallCounts* t_call_counts __attribute__((tls_model("initial-exec")));
// Takes a block for this thread (a free one, else a new mapping) and counts the call there, or in
// g_entries when no block can be had.
[[gnu::cold, gnu::noinline]] void count_first_call(HookId id);
// Every call of entry `id` in this process so far (all threads, living and gone).
uint64_t calls_of(HookId id);
// In a forked child: the parent's other threads do not exist here; their blocks become free.
void call_counts_after_fork();

inline void count_in(CallCounts* counts, HookId id) {
  std::atomic<uint64_t>& calls = counts->calls[id];
  calls.store(calls.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

// Resolves an entry point from its library (first use only; thread-safe, lock-free: racing
// threads store the same value). Null when the library is not there or lacks the symbol.
[[gnu::cold]] void* resolve_real_slow(HookId id);

inline void* real_entry(HookId id) {
  void* pointer = g_entries[id].real.load(std::memory_order_acquire);
  if (__builtin_expect(pointer != nullptr, 1)) return pointer;
  return resolve_real_slow(id);
}

inline void count_call(HookId id) {
  CallCounts* counts = t_call_counts;
  if (__builtin_expect(counts == nullptr, 0)) return count_first_call(id);
  count_in(counts, id);
}

// Typed accessors: real_cuMemAlloc_v2() returns Fn_cuMemAlloc_v2 (or null).
#define TESSERA_HOOK(lib, kind, symbol, ret, params, args)            \
  inline Fn_##symbol real_##symbol() {                                \
    return reinterpret_cast<Fn_##symbol>(real_entry(kHook_##symbol)); \
  }
#define TESSERA_REAL(lib, symbol, ret, params)                        \
  inline Fn_##symbol real_##symbol() {                                \
    return reinterpret_cast<Fn_##symbol>(real_entry(kReal_##symbol)); \
  }
#include "hooks.def"

// The hooked entry named `name` (exact symbol), or -1.
int find_hook(const char* name);

// dlsym may be called at any moment, also while a sanitizer or profiler that intercepts libc's
// string functions is still initialising (their interceptors are not usable yet): the lookup
// path compares names itself.
inline bool same_name(const char* a, const char* b) {
  while (*a && *a == *b) {
    ++a;
    ++b;
  }
  return *a == *b;
}

// The real dlsym (the next one after the shim's, by version); aborts if there is none. Also
// stored in tessera_real_dlsym for the dlsym trampoline's pass-through (interpose.cc).
using DlsymFn = void* (*)(void*, const char*);
DlsymFn real_dlsym();

// A library handle of libcuda.so.1 / libnvidia-ml.so.1 if loaded (never loads it).
void* loaded_library(Library library);

}  // namespace tessera::vgpu

// The wrappers themselves.
#define TESSERA_HOOK(lib, kind, symbol, ret, params, args) TESSERA_EXPORT ret symbol params;
#include "hooks.def"

// How calls reach the shim (docs/libvgpu.md, "Interception"):
//  * the exported wrappers interpose calls that programs link against;
//  * dlsym: lookups of a hooked name in libcuda's / libnvidia-ml's handle, RTLD_DEFAULT or
//    RTLD_NEXT get the wrapper; everything else goes to the real dlsym by a tail jump, so the real
//    dlsym sees the caller's return address and RTLD_NEXT keeps its meaning for the caller;
//  * cuGetProcAddress(_v2): the real resolver answers (name, version, flags); the shim finds
//    which versioned symbol that pointer is and hands out its wrapper for exactly that ABI.
#include "compute/gate.h"
#include "glibc_compat.h"
#include "hooks.h"
#include "log.h"
#include "tessera/cuda_abi/cuda_abi.h"

namespace tessera::vgpu {
namespace {

// The diagnostic entry handed out by dlsym(RTLD_DEFAULT, "tessera_vgpu_call_count"): how many
// times the wrapper `symbol` was called in this process (-1 if it is not hooked).
long long call_count(const char* symbol) {
  const int id = find_hook(symbol);
  return id < 0 ? -1 : static_cast<long long>(calls_of(static_cast<HookId>(id)));
}

// The wrapper for the real entry point `pointer` that the real resolver handed out for `name`, or
// `pointer` itself when the shim does not hook that ABI.
void* wrap_resolved(const char* name, void* pointer) {
  const cuda_abi::ProcEntry* candidates[cuda_abi::kMaxProcSymbolsPerName];
  const size_t count =
      cuda_abi::proc_symbols_for(name, candidates, cuda_abi::kMaxProcSymbolsPerName);
  for (size_t i = 0; i < count; ++i) {
    const int id = find_hook(candidates[i]->symbol);
    if (id >= 0 && real_entry(static_cast<HookId>(id)) == pointer) return kEntries[id].wrapper;
  }
  return pointer;
}

}  // namespace
}  // namespace tessera::vgpu

using namespace tessera::vgpu;

// Called by the dlsym trampoline: the pointer to hand out, or null to let the real dlsym answer.
extern "C" __attribute__((visibility("hidden"), used)) void* tessera_dlsym_intercept(
    void* handle, const char* name) {
  real_dlsym();  // the trampoline's pass-through needs it
  if (!name || !(name[0] == 'c' || name[0] == 'n' || name[0] == 't')) return nullptr;
  if (same_name(name, "tessera_vgpu_call_count")) {
    return handle == RTLD_DEFAULT ? reinterpret_cast<void*>(&call_count) : nullptr;
  }
  const int id = find_hook(name);
  if (id < 0) return nullptr;
  const Library library = kEntries[id].library;
  void* loaded = loaded_library(library);
  // Before the program loads the driver, a global lookup finds nothing, as without the shim; a
  // handle of another library that defines the name is not ours to redirect.
  if (!loaded || (handle != RTLD_DEFAULT && handle != RTLD_NEXT && handle != loaded)) {
    return nullptr;
  }
  // Only hand out a wrapper whose real entry point exists (else the caller sees "not found").
  if (!real_entry(static_cast<HookId>(id))) return nullptr;
  return kEntries[id].wrapper;
}

// dlsym itself: a trampoline that keeps the caller's return address for the pass-through.
#if defined(__x86_64__)
__asm__(
    ".text\n"
    ".globl dlsym\n"
    ".type dlsym, @function\n"
    "dlsym:\n"
    ".cfi_startproc\n"
    "  pushq %rdi\n"
    ".cfi_adjust_cfa_offset 8\n"
    "  pushq %rsi\n"
    ".cfi_adjust_cfa_offset 8\n"
    "  subq $8, %rsp\n"
    ".cfi_adjust_cfa_offset 8\n"
    "  call tessera_dlsym_intercept\n"
    "  addq $8, %rsp\n"
    ".cfi_adjust_cfa_offset -8\n"
    "  popq %rsi\n"
    ".cfi_adjust_cfa_offset -8\n"
    "  popq %rdi\n"
    ".cfi_adjust_cfa_offset -8\n"
    "  testq %rax, %rax\n"
    "  jz 1f\n"
    "  ret\n"
    "1:\n"
    "  jmpq *tessera_real_dlsym(%rip)\n"
    ".cfi_endproc\n"
    ".size dlsym, .-dlsym\n");
#elif defined(__aarch64__)
__asm__(
    ".text\n"
    ".globl dlsym\n"
    ".type dlsym, %function\n"
    "dlsym:\n"
    ".cfi_startproc\n"
    "  stp x29, x30, [sp, #-32]!\n"
    ".cfi_def_cfa_offset 32\n"
    ".cfi_offset 29, -32\n"
    ".cfi_offset 30, -24\n"
    "  mov x29, sp\n"
    "  stp x0, x1, [sp, #16]\n"
    "  bl tessera_dlsym_intercept\n"
    "  mov x2, x0\n"
    "  ldp x0, x1, [sp, #16]\n"
    "  ldp x29, x30, [sp], #32\n"
    ".cfi_def_cfa_offset 0\n"
    "  cbz x2, 1f\n"
    "  mov x0, x2\n"
    "  ret\n"
    "1:\n"
    "  adrp x16, tessera_real_dlsym\n"
    "  ldr x16, [x16, :lo12:tessera_real_dlsym]\n"
    "  br x16\n"
    ".cfi_endproc\n"
    ".size dlsym, .-dlsym\n");
#else
#error "libvgpu's dlsym trampoline supports x86_64 and aarch64"
#endif

// ---- the resolver -----------------------------------------------------------------------------

CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  count_call(kHook_cuGetProcAddress);
  auto real = real_cuGetProcAddress();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  const CUresult result = real(symbol, pfn, version, flags);
  if (result == CUDA_SUCCESS && symbol && pfn && *pfn) *pfn = wrap_resolved(symbol, *pfn);
  return result;
}

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* status) {
  count_call(kHook_cuGetProcAddress_v2);
  auto real = real_cuGetProcAddress_v2();
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  const CUresult result = real(symbol, pfn, version, flags, status);
  if (result == CUDA_SUCCESS && symbol && pfn && *pfn) *pfn = wrap_resolved(symbol, *pfn);
  return result;
}

// ---- counted pass-through wrappers (launches): a counter increment, the compute gate (one load of
// the share's "closed" word, docs/compute.md) and a jump ----

#define TESSERA_HOOK(lib, kind, symbol, ret, params, args) \
  TESSERA_HOOK_##kind(symbol, ret, params, args)
#define TESSERA_HOOK_CUSTOM(symbol, ret, params, args)
#define TESSERA_HOOK_COUNTED(symbol, ret, params, args)                                          \
  [[gnu::cold, gnu::noinline]] static ret symbol##_at_closed_gate params {                       \
    compute::TimedLaunch timed;                                                                  \
    if (!compute::wait_at_gate(&timed)) return CUDA_ERROR_NOT_PERMITTED;                         \
    auto real = real_##symbol();                                                                 \
    if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;                                      \
    if (timed.slot == nullptr) return real args;                                                 \
    return compute::run_timed(timed, compute::launch_stream args,                                \
                              compute::is_per_thread_entry(#symbol), [&] { return real args; }); \
  }                                                                                              \
  /* A thread's first call: takes its counters, then goes on as below. */                        \
  [[gnu::cold, gnu::noinline]] static ret symbol##_first_call params {                           \
    count_first_call(kHook_##symbol);                                                            \
    if (compute::gate_closed()) return symbol##_at_closed_gate args;                             \
    auto real = real_##symbol();                                                                 \
    if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;                                      \
    return real args;                                                                            \
  }                                                                                              \
  ret symbol params {                                                                            \
    CallCounts* counts = t_call_counts;                                                          \
    if (__builtin_expect(counts == nullptr, 0)) {                                                \
      return symbol##_first_call args; /* a tail call, as below */                               \
    }                                                                                            \
    count_in(counts, kHook_##symbol);                                                            \
    if (__builtin_expect(compute::gate_closed(), 0)) {                                           \
      return symbol##_at_closed_gate args; /* a tail call: no spills here */                     \
    }                                                                                            \
    auto real = real_##symbol();                                                                 \
    if (__builtin_expect(real == nullptr, 0)) return CUDA_ERROR_NOT_INITIALIZED;                 \
    return real args;                                                                            \
  }
#include "hooks.def"

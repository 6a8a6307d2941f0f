// The run-time lock-order check (spin_lock.h): SpinLock calls it in builds without NDEBUG.
#include <cstdio>
#include <cstdlib>

#include "os/system_calls.h"
#include "spin_lock.h"

namespace tessera::vgpu {
namespace {

// Bit r: this thread holds a lock of rank r (initial-exec TLS: no allocation, no __tls_get_addr).
__thread uint32_t t_held_ranks __attribute__((tls_model("initial-exec"))) = 0;

}  // namespace

void lock_order_acquire(LockRank rank) {
  const uint32_t bit = 1u << static_cast<unsigned>(rank);
  // Any lock held of this rank or above: taken out of order (or twice: a spin lock self-deadlocks).
  if ((t_held_ranks & ~(bit - 1)) != 0) {
    unsigned highest = 31 - static_cast<unsigned>(__builtin_clz(t_held_ranks));
    char line[160];
    const int length = std::snprintf(
        line, sizeof line,
        "libvgpu: lock order violated: taking a lock of rank %u while holding rank %u "
        "(libvgpu/src/spin_lock.h)\n",
        static_cast<unsigned>(rank), highest);
    if (length > 0) (void)!os::write(2, line, static_cast<size_t>(length));
    std::abort();
  }
  t_held_ranks |= bit;
}

void lock_order_release(LockRank rank) {
  t_held_ranks &= ~(1u << static_cast<unsigned>(rank));
}

}  // namespace tessera::vgpu

// The launch gate (docs/compute.md). Every launch wrapper calls gate_launch(): one relaxed load of
// the share's "closed" word (bit d = device d's gate is closed). With no compute setting the word
// is a process-local zero; with one it is the usage page's ComputeArea::closed_mask. Only when a
// bit is set does the launch take the slow path, which finds the launch's device and sleeps until
// its gate opens. A process given several shares with compute settings (docs/libvgpu.md) has one
// meter and one closed word per such share: the first is g_closed_word, the others are looked at
// only when g_more_closed_count is not 0 (one more relaxed load on the fast path otherwise).
#pragma once

#include <atomic>
#include <cstdint>

#include "compute/timed_launch.h"

namespace tessera::vgpu::compute {

extern std::atomic<std::atomic<uint64_t>*> g_closed_word;
extern std::atomic<int> g_more_closed_count;

// `timed`: told where the launch's GPU time goes when this process times launches on its device
// (timed_launch.h); left alone otherwise.
[[gnu::cold, gnu::noinline]] bool wait_at_gate(TimedLaunch* timed = nullptr);
[[gnu::noinline]] bool more_gates_closed();

// True when any gate of the shares is closed, or this process times its launches on some device
// (timed_launch.h): the wrapper then takes its slow path.
inline bool gate_closed() {
  if (g_closed_word.load(std::memory_order_relaxed)->load(std::memory_order_relaxed) != 0) {
    return true;
  }
  if (__builtin_expect(g_more_closed_count.load(std::memory_order_relaxed) == 0, 1)) return false;
  return more_gates_closed();
}

// False: the launch is refused (a share gives the device no GPU time); the wrapper returns
// CUDA_ERROR_NOT_PERMITTED instead of calling the driver.
inline bool gate_launch(TimedLaunch* timed = nullptr) {
  return !__builtin_expect(gate_closed(), 0) || wait_at_gate(timed);
}

// Starts a meter thread of this process for each share with a compute setting (called on the
// allocation/context paths after the shares are open; cheap once every share has its meter).
void maybe_start();
// In a forked child: the parent's meter thread does not exist here.
void reset_after_fork();

}  // namespace tessera::vgpu::compute

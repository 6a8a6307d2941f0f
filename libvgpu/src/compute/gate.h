// The launch gate (docs/compute.md). Every launch wrapper calls gate_launch(): one relaxed load of
// the share's "closed" word (bit d = device d's gate is closed). With no compute setting the word
// is a process-local zero; with one it is the usage page's ComputeArea::closed_mask. Only when a
// bit is set does the launch take the slow path, which finds the launch's device and sleeps until
// its gate opens.
#pragma once

#include <atomic>
#include <cstdint>

namespace tessera::vgpu::compute {

extern std::atomic<std::atomic<uint64_t>*> g_closed_word;

[[gnu::cold, gnu::noinline]] void wait_at_gate();

// True when any gate of the share is closed (the wrapper then takes its slow path).
inline bool gate_closed() {
  return g_closed_word.load(std::memory_order_relaxed)->load(std::memory_order_relaxed) != 0;
}

inline void gate_launch() {
  if (__builtin_expect(gate_closed(), 0)) wait_at_gate();
}

// Starts the meter thread of this process once the share has a compute setting (called on the
// allocation/context paths after the share region is open; cheap after the first time).
void maybe_start();
// In a forked child: the parent's meter thread does not exist here.
void reset_after_fork();

}  // namespace tessera::vgpu::compute

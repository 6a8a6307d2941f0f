// A span during which one of this process's timed launches was pending on its device
// (timed_launch.h collects them, pending_board.h publishes them); apart so that the board needs no
// CUDA header.
#pragma once

#include <cstdint>

namespace tessera::vgpu::compute {

// Queued behind nothing of its own, or running; CLOCK_MONOTONIC.
struct PendingSpan {
  int64_t start_ns;
  int64_t end_ns;
  int device;  // limits-page index
};

}  // namespace tessera::vgpu::compute

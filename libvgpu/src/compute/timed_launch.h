// Launches the shim times itself (docs/compute.md, "Where NVML cannot measure: MIG"). On a
// device whose NVML answers NVML_ERROR_NOT_SUPPORTED for per-process utilisation (every MIG
// device), nothing outside the process can tell the meter how much GPU time the share used, so
// each launch of a limited share there is timed where it is made: an event before and after it on
// its stream. The pairs of a thread wait in a small ring; each launch first collects the pairs
// that have completed (cuEventQuery, never waiting) and adds the time between their events to the
// process's slot (ProcessSlot::gpu_busy_ns), which the meter's OwnSource differences. A thread
// with kTimedInFlight launches not yet complete waits for the oldest: the time the shim has not
// yet seen is bounded. Nothing changes on devices NVML measures.
//
// Each collected launch is also placed in time: the span during which it was pending on its
// device (from its first event, when the work before it on its stream was done, to its second),
// in CLOCK_MONOTONIC, through a reference event the thread records on a stream of its own, which
// is always idle, so the reference completes when it is recorded (its host time is known). The
// spans of a share go into a small queue per share (merged where they touch), which the process's
// meter thread publishes on the device's pending board (pending_board.h): the shares of one
// instance charge each process its equal part of the time it was pending.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>

#include "compute/pending_span.h"
#include "tessera/share_region.h"

namespace tessera::vgpu::compute {

// Filled by wait_at_gate (gate.h) for a launch on a device this process times: where its GPU time
// is added. Null: the launch is not timed.
struct TimedLaunch {
  share::ProcessSlot* slot = nullptr;
  int share = -1;   // the share's position in the shim's regions
  int device = -1;  // the launch's device in that share's limits page
};

inline constexpr int kPendingQueue = 256;

// Moves up to `capacity` of share `share`'s collected spans into `out` (oldest first); returns how
// many. The meter thread calls it every period. A queue that filled up merged its newest spans
// into its last one (the process looks pending longer than it was: charged more, never less).
int take_pending(int share, PendingSpan* out, int capacity);
// In a forked child: the queues' locks and the thread's reference are the parent's.
void reset_pending_after_fork();

// The stream a launch entry point queues on (the argument lists of hooks.def).
inline CUstream launch_stream(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, CUstream stream, void**, void**) {
  return stream;
}
inline CUstream launch_stream(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, CUstream stream, void**) {
  return stream;
}
inline CUstream launch_stream(const CUlaunchConfig* config, CUfunction, void**, void**) {
  return config ? config->hStream : nullptr;
}
inline CUstream launch_stream(CUgraphExec, CUstream stream) {
  return stream;
}

inline constexpr int kTimedInFlight = 16;

// What timing one launch needs between its halves.
struct LaunchTimer {
  int entry = -1;  // the thread's ring entry holding the launch's events; -1: none
  CUstream stream = nullptr;
  int64_t began_ns = 0;    // for the host-clock fallback, and a span that cannot be placed
  bool capturing = false;  // queued into a graph being captured: nothing runs now, nothing timed
};

// Adds the time of the calling thread's completed launches, without waiting (the gate calls it
// while the thread waits, so the time of work that drains then is seen then, not at the thread's
// next launch).
void collect_timed();

// `per_thread`: the entry point is a _ptsz one (stream 0 is the thread's default stream).
void begin_timed(LaunchTimer& timer, const TimedLaunch& timed, CUstream stream, bool per_thread);
// Queues the launch's second event, or forgets the first when the launch failed.
void end_timed(LaunchTimer& timer, const TimedLaunch& timed, CUresult launched);

template <typename Call>
CUresult run_timed(const TimedLaunch& timed, CUstream stream, bool per_thread, Call call) {
  LaunchTimer timer;
  begin_timed(timer, timed, stream, per_thread);
  const CUresult result = call();
  end_timed(timer, timed, result);
  return result;
}

constexpr bool is_per_thread_entry(const char* name) {
  int length = 0;
  while (name[length]) ++length;
  return length > 5 && name[length - 5] == '_' && name[length - 4] == 'p' &&
         name[length - 3] == 't' && name[length - 2] == 's' && name[length - 1] == 'z';
}

}  // namespace tessera::vgpu::compute

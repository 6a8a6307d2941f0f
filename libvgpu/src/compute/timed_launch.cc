#include "compute/timed_launch.h"

#include "hooks.h"
#include "os/system_calls.h"

namespace tessera::vgpu::compute {
namespace {

// A launch's two events, reused by the thread's later launches in the same context.
struct Pending {
  CUevent start;
  CUevent end;
  CUcontext context;         // the events' context
  share::ProcessSlot* slot;  // where the launch's time goes
};

// The thread's launches whose time has not been collected yet: entries [oldest, oldest + count).
struct Ring {
  Pending entries[kTimedInFlight];
  int oldest;
  int count;
};

__thread Ring t_ring __attribute__((tls_model("initial-exec"))) = {};

int64_t monotonic_ns() {
  return os::monotonic_ns();
}

void charge(share::ProcessSlot* slot, int64_t busy_ns) {
  if (busy_ns > 0 && slot) {
    slot->gpu_busy_ns.fetch_add(static_cast<uint64_t>(busy_ns), std::memory_order_relaxed);
  }
}

// Adds the time of the oldest launches that have completed; with `wait_oldest`, waits for the
// oldest first (the ring is full).
void collect(Ring& ring, bool wait_oldest) {
  auto query = real_cuEventQuery();
  auto wait = real_cuEventSynchronize();
  auto elapsed = real_cuEventElapsedTime_v2();
  if (!query || !wait || !elapsed) return;
  while (ring.count > 0) {
    Pending& oldest = ring.entries[ring.oldest];
    const CUresult state = wait_oldest ? wait(oldest.end) : query(oldest.end);
    wait_oldest = false;
    if (state == CUDA_ERROR_NOT_READY) break;
    float milliseconds = 0;
    if (state == CUDA_SUCCESS && elapsed(&milliseconds, oldest.start, oldest.end) == CUDA_SUCCESS) {
      charge(oldest.slot, static_cast<int64_t>(static_cast<double>(milliseconds) * 1e6));
    }
    // Otherwise the events are gone with their context, or the launch failed: nothing ran to
    // charge.
    ring.oldest = (ring.oldest + 1) % kTimedInFlight;
    --ring.count;
  }
}

// The entry's events, made in the current context if they were made in another (or never).
// `fresh`: make new ones even in the same context (a context destroyed and another made at the same
// address took the old ones with it).
bool events_for(Pending& entry, bool fresh) {
  auto current = real_cuCtxGetCurrent();
  auto create = real_cuEventCreate();
  auto destroy = real_cuEventDestroy_v2();
  CUcontext context = nullptr;
  if (!current || !create || !destroy || current(&context) != CUDA_SUCCESS || !context) {
    return false;
  }
  if (entry.start && entry.context == context && !fresh) return true;
  if (entry.start) destroy(entry.start);
  if (entry.end) destroy(entry.end);
  entry.start = entry.end = nullptr;
  if (create(&entry.start, CU_EVENT_DEFAULT) != CUDA_SUCCESS ||
      create(&entry.end, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
    if (entry.start) destroy(entry.start);
    entry.start = entry.end = nullptr;
    return false;
  }
  entry.context = context;
  return true;
}

// The host-clock fallback: the wall time until the stream is idle, which is at least the launch's
// GPU time (a share is never charged less than it used).
void charge_by_host_clock(const LaunchTimer& timer, const TimedLaunch& timed) {
  if (auto synchronize = real_cuStreamSynchronize()) synchronize(timer.stream);
  charge(timed.slot, monotonic_ns() - timer.began_ns);
}

}  // namespace

void collect_timed() {
  if (t_ring.count > 0) collect(t_ring, false);
}

void begin_timed(LaunchTimer& timer, const TimedLaunch&, CUstream stream, bool per_thread) {
  timer.stream = stream == nullptr && per_thread ? CU_STREAM_PER_THREAD : stream;
  // A launch queued into a graph under capture runs when the graph does (that launch is timed);
  // an event recorded here would become a node of the program's graph.
  auto is_capturing = real_cuStreamIsCapturing();
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  if (!is_capturing || is_capturing(timer.stream, &status) != CUDA_SUCCESS ||
      status != CU_STREAM_CAPTURE_STATUS_NONE) {
    timer.capturing = true;
    return;
  }
  Ring& ring = t_ring;
  collect(ring, false);
  if (ring.count == kTimedInFlight) collect(ring, true);
  timer.began_ns = monotonic_ns();
  const int index = (ring.oldest + ring.count) % kTimedInFlight;
  Pending& entry = ring.entries[index];
  auto record = real_cuEventRecord();
  for (const bool fresh : {false, true}) {
    if (record && events_for(entry, fresh) && record(entry.start, timer.stream) == CUDA_SUCCESS) {
      timer.entry = index;
      break;
    }
  }
  // Otherwise (a stream of another context, no events): timed by the host clock (end_timed).
}

void end_timed(LaunchTimer& timer, const TimedLaunch& timed, CUresult launched) {
  if (timer.capturing || launched != CUDA_SUCCESS) return;
  if (timer.entry < 0) {
    charge_by_host_clock(timer, timed);
    return;
  }
  Ring& ring = t_ring;
  Pending& entry = ring.entries[timer.entry];
  auto record = real_cuEventRecord();
  if (!record || record(entry.end, timer.stream) != CUDA_SUCCESS) {
    charge_by_host_clock(timer, timed);
    return;
  }
  entry.slot = timed.slot;
  ++ring.count;  // the entry is the ring's next: begin_timed took (oldest + count)
}

}  // namespace tessera::vgpu::compute

#include "compute/timed_launch.h"

#include "hooks.h"
#include "os/system_calls.h"
#include "spin_lock.h"
#include "state.h"

namespace tessera::vgpu::compute {
namespace {

// A launch's two events, reused by the thread's later launches in the same context.
struct Pending {
  CUevent start;
  CUevent end;
  CUcontext context;         // the events' context
  share::ProcessSlot* slot;  // where the launch's time goes
  int64_t began_ns;          // host time just before the launch's first event
  int share;                 // TimedLaunch::share and ::device: where its pending span goes
  int device;
};

// The thread's launches whose time has not been collected yet: entries [oldest, oldest + count).
struct Ring {
  Pending entries[kTimedInFlight];
  int oldest;
  int count;
};

__thread Ring t_ring __attribute__((tls_model("initial-exec"))) = {};

// The thread's reference in time for one context: an event recorded on a stream of the shim's
// own that nothing else uses, so it is idle and the event completes when it is recorded; its host
// time is the midpoint of the record call. cuEventElapsedTime from it places the launches' events
// in CLOCK_MONOTONIC. Recorded again every kReferenceAge (float milliseconds lose precision far
// from the reference: 60 ns at one second).
struct Reference {
  CUevent event;
  CUstream stream;
  CUcontext context;  // null: none
  int64_t host_ns;
};
__thread Reference t_reference __attribute__((tls_model("initial-exec"))) = {};
constexpr int64_t kReferenceAge = 250'000'000;

// Per share, the spans collected but not yet published (the meter thread takes them):
// g_queued[share][0, count). The spans live apart from their locks so that they are zero-filled
// storage, not 48 KiB of initialised data in every process's shim; they are guarded by their
// queue's lock all the same.
struct PendingQueue {
  SpinLock lock{LockRank::kPendingSpans};
  int count TESSERA_GUARDED_BY(lock) = 0;
};
constinit PendingQueue g_pending[kMaxShares];
PendingSpan g_queued[kMaxShares][kPendingQueue];

void push_pending(int share, const PendingSpan& span) {
  if (share < 0 || share >= kMaxShares || span.device < 0 || span.end_ns <= span.start_ns) return;
  PendingQueue& queue = g_pending[share];
  PendingSpan* spans = g_queued[share];
  SpinGuard guard(queue.lock);
  // Spans that touch are one: a launch queued behind the previous one starts where it ended.
  for (int i = queue.count - 1; i >= 0; --i) {
    PendingSpan& last = spans[i];
    if (last.device != span.device) continue;
    const bool touching = span.start_ns <= last.end_ns && span.end_ns >= last.start_ns;
    if (touching || queue.count == kPendingQueue) {
      // Full: the newest span is merged into the last of its device (pending longer than it was).
      if (span.start_ns < last.start_ns) last.start_ns = span.start_ns;
      if (span.end_ns > last.end_ns) last.end_ns = span.end_ns;
      return;
    }
    break;
  }
  if (queue.count < kPendingQueue) spans[queue.count++] = span;
}

// Where the entry's launch was pending, in CLOCK_MONOTONIC. Without a reference in its context
// (or one not yet complete), from just before its launch to now: longer than it was pending.
PendingSpan place(const Pending& entry, int64_t now_ns) {
  PendingSpan span{entry.began_ns, now_ns, entry.device};
  auto elapsed = real_cuEventElapsedTime_v2();
  float from_reference_to_start = 0;
  float from_reference_to_end = 0;
  if (elapsed && t_reference.context && t_reference.context == entry.context &&
      elapsed(&from_reference_to_start, t_reference.event, entry.start) == CUDA_SUCCESS &&
      elapsed(&from_reference_to_end, t_reference.event, entry.end) == CUDA_SUCCESS) {
    span.start_ns = t_reference.host_ns +
                    static_cast<int64_t>(static_cast<double>(from_reference_to_start) * 1e6);
    span.end_ns = t_reference.host_ns +
                  static_cast<int64_t>(static_cast<double>(from_reference_to_end) * 1e6);
  }
  return span;
}

// Records the thread's reference in the current context when it has none there or it is old.
void refresh_reference(int64_t now_ns) {
  auto current = real_cuCtxGetCurrent();
  CUcontext context = nullptr;
  if (!current || current(&context) != CUDA_SUCCESS || !context) return;
  Reference& reference = t_reference;
  if (reference.context == context && now_ns - reference.host_ns < kReferenceAge) return;
  auto record = real_cuEventRecord();
  if (!record) return;
  if (reference.context != context) {
    auto create_event = real_cuEventCreate();
    auto destroy_event = real_cuEventDestroy_v2();
    auto create_stream = real_cuStreamCreate();
    auto destroy_stream = real_cuStreamDestroy_v2();
    if (!create_event || !destroy_event || !create_stream || !destroy_stream) return;
    // The old ones went with their context, or belong to one this thread no longer launches in.
    if (reference.event) destroy_event(reference.event);
    if (reference.stream) destroy_stream(reference.stream);
    reference = {};
    if (create_stream(&reference.stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
      reference.stream = nullptr;
      return;
    }
    if (create_event(&reference.event, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
      destroy_stream(reference.stream);
      reference = {};
      return;
    }
  }
  const int64_t before = os::monotonic_ns();
  if (record(reference.event, reference.stream) != CUDA_SUCCESS) {
    reference.context = nullptr;  // made again next time
    return;
  }
  const int64_t after = os::monotonic_ns();
  reference.context = context;
  reference.host_ns = before + (after - before) / 2;
}

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
      push_pending(oldest.share, place(oldest, monotonic_ns()));
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
  const int64_t now = monotonic_ns();
  charge(timed.slot, now - timer.began_ns);
  push_pending(timed.share, PendingSpan{timer.began_ns, now, timed.device});
}

}  // namespace

void collect_timed() {
  if (t_ring.count > 0) collect(t_ring, false);
}

int take_pending(int share, PendingSpan* out, int capacity) {
  if (share < 0 || share >= kMaxShares) return 0;
  PendingQueue& queue = g_pending[share];
  PendingSpan* spans = g_queued[share];
  SpinGuard guard(queue.lock);
  const int taken = queue.count < capacity ? queue.count : capacity;
  for (int i = 0; i < taken; ++i) out[i] = spans[i];
  for (int i = taken; i < queue.count; ++i) spans[i - taken] = spans[i];
  queue.count -= taken;
  return taken;
}

void reset_pending_after_fork() {
  for (PendingQueue& queue : g_pending) {
    queue.lock.reset_after_fork();
    SpinGuard guard(queue.lock);
    queue.count = 0;  // the parent's spans are the parent's to publish
  }
  t_reference = {};  // the child's contexts are not the parent's
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
  refresh_reference(timer.began_ns);
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
  entry.began_ns = timer.began_ns;
  entry.share = timed.share;
  entry.device = timed.device;
  ++ring.count;  // the entry is the ring's next: begin_timed took (oldest + count)
}

}  // namespace tessera::vgpu::compute

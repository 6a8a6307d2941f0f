// Pending spans: when each process's timed launches were pending on a device that NVML cannot
// measure per process (a MIG instance), and the equal split that charges each process its part
// of that time (docs/compute.md, "Shares that contend inside one instance"). One definition for
// the shim, which writes them, and for both readers: the shim's meter under `tessera run` (the
// user's pending board of the device, every share of the user on it) and the node agent (each
// share's own file in its share folder, read as untrusted input; the agent splits across shares).
//
// A file holds one page: a record per process (its owner word, its share's identity, until when
// it is kept) with a ring of its last spans, each stamped with its sequence number, so that a read
// racing a write skips the span being written instead of taking half of it. Written and read with
// pwrite/pread, never mapped (a file truncated under a mapping faults its reader).
//
// Layout rules as share_region.h: fixed-width types, static_asserts, the version bumped on any
// change.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace tessera::share {

inline constexpr uint32_t kPendingMagic = 0x50444e50;  // "PNDP" little-endian
inline constexpr uint32_t kPendingVersion = 1;
inline constexpr int kPendingRecords = 32;
inline constexpr int kPendingSpans = 128;
// A record is kept this long after its process's last publication: its spans stay visible to the
// windows that lag behind now, and a process that died frees it.
inline constexpr int64_t kPendingHold = 1'000'000'000;
// How far behind now a reader charges: the time a span takes to be collected, queued and
// published (the shim publishes every 5 ms).
inline constexpr int64_t kPendingLag = 25'000'000;
// The most a reader charges one share for late spans in one window. Beyond it nothing changes: the
// shim forgives debt beyond 2 s of GPU time (docs/compute.md, "Error bounds"), and a cumulative
// figure must never be pushed towards a wrap by a tenant's page.
inline constexpr int64_t kPendingLateCap = 4'000'000'000;
// In a share folder, the file of device <uuid>: "pending-<uuid>" (created by the share's first
// process that times launches there, as the usage page is).
inline constexpr char kPendingFilePrefix[] = "pending-";

struct PendingStored {
  int64_t start_ns;    // CLOCK_MONOTONIC
  uint32_t length_ns;  // a longer span is stored as several
  uint32_t sequence;   // the span's number + 1 (0: never written), modulo 2^32
};
static_assert(sizeof(PendingStored) == 16);

struct PendingRecord {
  uint64_t process;  // owner word (make_owner); 0: never claimed
  uint64_t share;    // the share's identity (its own file: any value)
  uint64_t kept_until_ns;
  uint64_t written;  // spans written so far: span k is at spans[k % kPendingSpans]
  uint64_t reserved[4];
  PendingStored spans[kPendingSpans];
};
static_assert(sizeof(PendingRecord) == 64 + 16 * kPendingSpans);
static_assert(offsetof(PendingRecord, written) == 24);
static_assert(offsetof(PendingRecord, spans) == 64);

struct PendingPage {
  uint32_t magic;    // kPendingMagic
  uint32_t version;  // kPendingVersion
  // Set (never cleared) by a process that found every record taken: its spans are not here, so a
  // reader must not take the page's spans for all the time its processes were pending.
  uint64_t overflowed;
  uint64_t reserved[6];
  PendingRecord records[kPendingRecords];
};
static_assert(offsetof(PendingPage, overflowed) == 8);
static_assert(offsetof(PendingPage, records) == 64);
static_assert(sizeof(PendingPage) == 64 + sizeof(PendingRecord) * kPendingRecords);

inline bool valid_pending_page(const PendingPage& page) {
  return page.magic == kPendingMagic && page.version == kPendingVersion;
}

// ---- the equal split ---------------------------------------------------------------------------

// A span of one process: `process` numbers the processes of one split, 0..processes-1.
struct ProcessSpan {
  int64_t start_ns;
  int64_t end_ns;
  int process;
};
struct SpanEdge {
  int64_t at_ns;
  int process;
  int delta;  // +1 the span starts, -1 it ends
};

// Over (from, to]: at each moment when n processes are pending, each is given 1/n of it (a
// time-sliced device runs one context at a time, in equal turns). Adds process p's part to
// parts[p]. Spans of one process that overlap count once. Scratch: `edges` room for 2 x count,
// `depth` and `mark` room for `processes`. Linear in the spans after the sort: a running integral
// of 1/n, differenced at each process's starts and ends.
inline void equal_parts(const ProcessSpan* spans, int count, int64_t from_ns, int64_t to_ns,
                        int processes, SpanEdge* edges, int* depth, int64_t* mark, int64_t* parts) {
  int edge_count = 0;
  for (int i = 0; i < count; ++i) {
    const int64_t start = std::max(spans[i].start_ns, from_ns);
    const int64_t end = std::min(spans[i].end_ns, to_ns);
    if (end <= start || spans[i].process < 0 || spans[i].process >= processes) continue;
    edges[edge_count++] = SpanEdge{start, spans[i].process, +1};
    edges[edge_count++] = SpanEdge{end, spans[i].process, -1};
  }
  std::sort(edges, edges + edge_count,
            [](const SpanEdge& a, const SpanEdge& b) { return a.at_ns < b.at_ns; });
  for (int p = 0; p < processes; ++p) depth[p] = 0;
  int pending = 0;
  int64_t each = 0;  // what one process pending throughout was given so far
  for (int e = 0; e < edge_count; ++e) {
    if (e > 0 && pending > 0) each += (edges[e].at_ns - edges[e - 1].at_ns) / pending;
    const SpanEdge& edge = edges[e];
    const bool was = depth[edge.process] > 0;
    depth[edge.process] += edge.delta;
    const bool is = depth[edge.process] > 0;
    if (was == is) continue;
    if (is) {
      mark[edge.process] = each;
      ++pending;
    } else {
      parts[edge.process] += each - mark[edge.process];
      --pending;
    }
  }
}

// Appends to `out` the spans of `record` that overlap (from, to], numbered `process`, and returns
// how many. `seen`: the record's `written` at the previous look (a record first seen now: its own
// `written`); spans counted since then that began before `from` were published after their window
// was charged: their part before `from` is added to `late_ns`, saturating (its split is gone:
// whoever reads charges it to the record's process in whole, more than it used, never less). A span
// whose sequence is not its number's is being written and is skipped. `room`: at most this many
// taken.
inline int take_spans(const PendingRecord& record, uint64_t seen, int64_t from_ns, int64_t to_ns,
                      int process, ProcessSpan* out, int room, int64_t* late_ns) {
  int taken = 0;
  const uint64_t oldest =
      record.written > static_cast<uint64_t>(kPendingSpans) ? record.written - kPendingSpans : 0;
  for (uint64_t k = oldest; k < record.written; ++k) {
    const PendingStored& stored = record.spans[k % kPendingSpans];
    if (stored.sequence != static_cast<uint32_t>(k + 1)) continue;
    const int64_t start = stored.start_ns;
    // A page is untrusted input for the agent: a start no clock gives is no span.
    if (start < 0 || start > std::numeric_limits<int64_t>::max() / 2) continue;
    const int64_t end = start + static_cast<int64_t>(stored.length_ns);
    if (k >= seen && start < from_ns) {
      // Saturating: the page may be a tenant's, and its spans any length.
      const int64_t late = std::min(end, from_ns) - start;
      *late_ns = late > std::numeric_limits<int64_t>::max() - *late_ns
                     ? std::numeric_limits<int64_t>::max()
                     : *late_ns + late;
    }
    if (end <= from_ns || start >= to_ns || taken == room) continue;
    out[taken++] = ProcessSpan{start, end, process};
  }
  return taken;
}

}  // namespace tessera::share

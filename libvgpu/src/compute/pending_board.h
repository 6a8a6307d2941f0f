// Where the shares of one device NVML cannot measure (a MIG instance) learn when each of their
// processes was pending there (docs/compute.md, "Shares that contend inside one instance").
//
// A timed launch's events span the time the device gave other processes meanwhile: a time-sliced
// device runs one context at a time, in turns. So each process publishes the spans during which
// its timed launches were pending (timed_launch.h: placed in CLOCK_MONOTONIC through a reference
// event), and each share's meter leader charges its processes, over a window lagged behind now by
// the collection delay, the integral over time of 1 / (the number of processes pending at that
// moment) over their own spans: time-slicing splits contended time equally.
//
// Under `tessera run` (no agent) the board is one file per device beside the priority board, in
// the user's private folder (priority_board.h open_user_board): `tessera-pending-<uuid>`, read and
// written with pread/pwrite (never mapped). One record per process: its owner word, its share's
// identity, until when it is kept, and a ring of its last spans, each with its sequence number
// (a span is taken only where its number is the one its place in the ring should hold, so a read
// racing a write skips the span being written instead of taking half of it).
#pragma once

#include <cstddef>
#include <cstdint>

#include "compute/pending_span.h"
#include "tessera/share_region.h"

namespace tessera::vgpu::compute {

class PendingBoard {
 public:
  // A span of one process (equal_split's input): `process` numbers the processes, 0..kRecords-1.
  struct ProcessSpan {
    int64_t start_ns;
    int64_t end_ns;
    int process;
    bool own;  // a process of the share being charged
  };
  struct Split {
    int64_t own_ns = 0;     // the share's processes' equal parts
    int64_t others_ns = 0;  // every other process's
  };
  struct Edge {
    int64_t at_ns;
    int process;
    int delta;  // +1 the span starts, -1 it ends
  };

  static constexpr int kRecords = 32;
  static constexpr int kSpans = 128;

  // Over (from, to]: at each moment when n processes are pending, each is given 1/n of it. Spans of
  // one process that overlap count once. `edges`: room for 2 x count.
  static Split equal_split(const ProcessSpan* spans, int count, int64_t from_ns, int64_t to_ns,
                           Edge* edges);

  // `share`: the share's identity (UserBoard::share_identity), `process`: this process's owner
  // word; neither 0.
  PendingBoard(const share::LimitsPage* limits, const char* dir, uint64_t share, uint64_t process)
      : limits_(limits), dir_(dir), share_(share ? share : 1), process_(process ? process : 1) {}

  // Whether the device's board can be used (opened on first use); false after a refusal.
  bool usable(int device);
  // Adds this process's new spans on `device` to its record (claimed at first, kept while the
  // process publishes, free for others kHold after its last publication).
  void publish(int device, const PendingSpan* spans, int count, int64_t now_ns);
  // The share's processes' equal parts of (from, to] and the others'. A span first seen now that
  // began before `from` (published late) is the share's in whole for the part before `from` (the
  // part's split is gone): more than it used, never less. False: the board cannot be used.
  bool charge(int device, int64_t from_ns, int64_t to_ns, Split* out);

  struct Stored {
    int64_t start_ns;
    uint32_t length_ns;
    uint32_t sequence;  // the span's number + 1 (0: never written), modulo 2^32
  };
  static_assert(sizeof(Stored) == 16);
  struct Record {
    uint64_t process;  // owner word; 0: never claimed
    uint64_t share;    // the share's identity
    uint64_t kept_until_ns;
    uint64_t written;  // spans written so far: span k is at spans[k % kSpans]
    uint64_t reserved[4];
    Stored spans[kSpans];
  };
  static_assert(sizeof(Record) == 64 + 16 * kSpans);
  struct Page {
    uint32_t magic;
    uint32_t version;
    uint64_t reserved[7];
    Record records[kRecords];
  };
  static_assert(sizeof(Page) == 64 + sizeof(Record) * kRecords);
  static constexpr uint32_t kMagic = 0x50444e50;  // "PNDP"
  static constexpr uint32_t kVersion = 1;
  // A record is kept this long after its process's last publication: its spans stay visible to
  // the windows that lag behind now, and a process that died frees it.
  static constexpr int64_t kHold = 1'000'000'000;

 private:
  int board_fd(int device);
  void refuse(int device, const char* why);
  // This process's record on the device: its own, or a free one claimed now; -1 if full.
  int claim(int fd, int device, int64_t now_ns);
  bool write_span(int fd, int record, uint64_t number, int64_t start_ns, uint32_t length_ns);

  const share::LimitsPage* limits_;
  const char* dir_;
  uint64_t share_;
  uint64_t process_;
  int fds_[share::kMaxDevices] = {};  // fd + 1 (0: not opened yet)
  bool failed_[share::kMaxDevices] = {};
  bool full_said_[share::kMaxDevices] = {};
  int mine_[share::kMaxDevices] = {};  // record + 1 (0: none claimed)
  // Per device and record, what charge() saw there last (whose, and how many spans written).
  uint64_t seen_process_[share::kMaxDevices][kRecords] = {};
  uint64_t seen_written_[share::kMaxDevices][kRecords] = {};
  // Scratch of charge(): the page, the spans in the window and their edges (static storage: the
  // shim allocates nothing, and the meter thread's stack is small).
  Page page_;
  ProcessSpan spans_[kRecords * kSpans];
  Edge edges_[2 * kRecords * kSpans];
};

}  // namespace tessera::vgpu::compute

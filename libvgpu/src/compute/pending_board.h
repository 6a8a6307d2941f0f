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
// Where the spans go (tessera/pending_spans.h has the page):
// - `tessera run` (no agent): one board per device beside the priority board, in the user's
//   private folder (priority_board.h open_user_board): `tessera-pending-<uuid>`, every share of
//   the user on the device. Each share's meter leader charges from it (charge()).
// - Under the agent: the share's own folder, `pending-<uuid>` (no file of one share is read by
//   another); the agent reads every share's file and publishes each share's part (split_mask in
//   the limits page). Processes only publish there.
#pragma once

#include <cstddef>
#include <cstdint>

#include "compute/pending_span.h"
#include "tessera/pending_spans.h"
#include "tessera/share_region.h"

namespace tessera::vgpu::compute {

class PendingBoard {
 public:
  enum class Where {
    kUserBoard,    // `dir`: the device folder (TESSERA_DEVICE_DIR)
    kShareFolder,  // `dir`: the share's folder
  };
  using ProcessSpan = share::ProcessSpan;
  using Edge = share::SpanEdge;
  using Page = share::PendingPage;
  using Record = share::PendingRecord;
  using Stored = share::PendingStored;
  struct Split {
    int64_t own_ns = 0;     // the share's processes' equal parts
    int64_t others_ns = 0;  // every other process's
  };

  static constexpr int kRecords = share::kPendingRecords;
  static constexpr int kSpans = share::kPendingSpans;
  static constexpr uint32_t kMagic = share::kPendingMagic;
  static constexpr uint32_t kVersion = share::kPendingVersion;
  static constexpr int64_t kHold = share::kPendingHold;

  // share::equal_parts summed: the parts of the processes whose bit is set in `own` (bit p:
  // process p) and the others'. `edges`: room for 2 x count.
  static Split equal_split(const ProcessSpan* spans, int count, uint32_t own, int64_t from_ns,
                           int64_t to_ns, Edge* edges);

  // `share`: the share's identity (UserBoard::share_identity), `process`: this process's owner
  // word; neither 0.
  PendingBoard(const share::LimitsPage* limits, const char* dir, uint64_t share, uint64_t process,
               Where where = Where::kUserBoard)
      : limits_(limits),
        dir_(dir),
        share_(share ? share : 1),
        process_(process ? process : 1),
        where_(where) {}

  // Whether the device's board can be used (opened on first use); false after a refusal.
  bool usable(int device);
  // Adds this process's new spans on `device` to its record (claimed at first, kept while the
  // process publishes, free for others kHold after its last publication).
  void publish(int device, const PendingSpan* spans, int count, int64_t now_ns);
  // The share's processes' equal parts of (from, to] and the others'. A span first seen now that
  // began before `from` (published late) is the share's in whole for the part before `from` (the
  // part's split is gone): more than it used, never less. False: the board cannot be used.
  bool charge(int device, int64_t from_ns, int64_t to_ns, Split* out);

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
  Where where_;
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

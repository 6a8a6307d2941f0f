// Where a share learns that a share of higher priority is busy on its device, and its part of the
// device's spare time (docs/compute.md, Priority and Classes). Two implementations of meter.h's
// PriorityBoard:
//
// - LimitsYield: the share's own limits page, which only the node agent writes (measure_source ==
//   kMeasureAgent): the agent measures every share and sets yield_mask and spare_percent. Nothing
//   else is opened.
// - UserBoard: `tessera run` shares without an agent. One small file per device in a folder only
//   this user can open (`<dir>/tessera-<uid>/tessera-device-<uuid>`, folder 0700, file 0600), read
//   and written with pread/pwrite (never mapped: a truncated board cannot SIGBUS anyone): one
//   "active until" per priority level, and one entry per active share with its request and limit.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "compute/meter.h"
#include "tessera/share_region.h"

namespace tessera::vgpu::compute {

// Opens `<dir>/tessera-<uid>/<name>`, creating it (fully initialised with the `size` bytes at
// `initial`, under a temporary name, then linked into place) when absent: a regular file of this
// user's, mode 0600, exactly `size` bytes, in a folder of this user's, mode 0700, neither a
// symlink. The fd (O_CLOEXEC), or -1 with `*why` saying what is wrong. The caller checks the
// content (magic, version).
int open_user_board(const char* dir, const char* name, const void* initial, size_t size,
                    const char** why);
// The board of one device: `<dir>/tessera-<uid>/<prefix><uuid>` opened as open_user_board does
// and its header (magic, version: the first two 32-bit words of every board) checked. The fd, or
// -1 with `*why` saying what is wrong.
int open_device_board(const char* dir, const char* prefix, const char* uuid, const void* initial,
                      size_t size, uint32_t magic, uint32_t version, const char** why);
// Gives a device's board up for this process: its fd (kept as fd + 1, 0: none) closed and
// `failed` set, so it is never opened again. The caller says why, once.
void give_up_user_board(int& fd_plus_one, bool& failed);

class LimitsYield final : public PriorityBoard {
 public:
  explicit LimitsYield(const share::LimitsPage* limits) : limits_(limits) {}
  // The agent sees the share's GPU time itself: nothing to announce.
  void announce(int, uint32_t, int64_t) override {}
  bool higher_active(int device, uint32_t, int64_t) override {
    return (limits_->yield_mask.load(std::memory_order_acquire) >> device) & 1u;
  }
  // What the agent published (kSpareUnknown until it has measured the device).
  uint32_t spare(int device, uint32_t, const Claim&, bool, int64_t, int64_t) override {
    return limits_->requests[device].spare_percent.load(std::memory_order_acquire);
  }

 private:
  const share::LimitsPage* limits_;
};

class UserBoard final : public PriorityBoard {
 public:
  // `dir`: TESSERA_DEVICE_DIR (default /dev/shm); the board lives in `<dir>/tessera-<uid>/`.
  // `identity`: the share's (share_identity below), never 0: its entry on the board.
  UserBoard(const share::LimitsPage* limits, const char* dir, uint64_t identity)
      : limits_(limits), dir_(dir), identity_(identity ? identity : 1) {}
  void announce(int device, uint32_t priority, int64_t until_ns) override;
  bool higher_active(int device, uint32_t priority, int64_t now_ns) override;
  // Keeps the share's entry (claimed at first, refreshed to `until_ns` while `active`; left to
  // expire otherwise) and returns its part of the spare among the live entries of its priority.
  // A board that cannot be used: the part as if the share were alone.
  uint32_t spare(int device, uint32_t priority, const Claim& own, bool active, int64_t now_ns,
                 int64_t until_ns) override;
  // The share's timed total is published in its entry (Entry::timed_us) at its next spare(); the
  // others' growth is read from their live entries, whatever their priority (time-slicing gives
  // every process its turn).
  bool others_timed(int device, uint64_t own_total_ns, int64_t now_ns, uint64_t* others_ns,
                    int* sharers) override;

  // A share's identity on the board: its folder's device and inode, mixed (every process of the
  // share finds the same); a share without a folder (standalone: the process is the share) uses
  // `owner`, the process's owner word.
  static uint64_t share_identity(const char* share_dir, uint64_t owner);

  // One share's entry: claimed by its meter leader while the share is active, free again (for any
  // share) once active_until_ns has passed, so the entry of a share that died expires.
  struct Entry {
    uint64_t identity;         // 0: never claimed
    uint64_t active_until_ns;  // CLOCK_MONOTONIC
    uint32_t request;          // percent
    uint32_t limit;            // percent
    uint32_t priority;         // share::kPriority*
    // What the share's timed launches spanned so far, microseconds modulo 2^32 (meter.h
    // PriorityBoard::others_timed); 0 where it times none. Was reserved (0) in version 3.
    uint32_t timed_us;
  };
  static_assert(sizeof(Entry) == 32);
  static constexpr int kEntries = 64;

  // The file's layout (2112 bytes).
  struct Page {
    uint32_t magic;
    uint32_t version;
    uint64_t reserved0;
    uint64_t active_until_ns[3];  // by rank: low, normal, high (CLOCK_MONOTONIC)
    uint64_t reserved1[3];
    Entry entries[kEntries];
  };
  static_assert(sizeof(Page) == 64 + 32 * kEntries);
  static constexpr uint32_t kMagic = 0x50444754;  // "TGDP"
  static constexpr uint32_t kVersion = 3;         // 2: per user, pread/pwrite; 3: share entries

 private:
  int board_fd(int device);
  // A board that stopped being one (truncated, replaced by garbage): one line, then unused.
  void refuse(int device, const char* why);
  const share::LimitsPage* limits_;
  const char* dir_;
  uint64_t identity_;
  int fds_[share::kMaxDevices] = {};  // fd + 1 (0: not opened yet)
  bool failed_[share::kMaxDevices] = {};
  bool full_said_[share::kMaxDevices] = {};
  uint32_t timed_us_[share::kMaxDevices] = {};  // the share's own, written at spare()
  // Per device and entry: whose timed total was seen there last, and what it was.
  uint64_t seen_identity_[share::kMaxDevices][kEntries] = {};
  uint32_t seen_timed_us_[share::kMaxDevices][kEntries] = {};
};

}  // namespace tessera::vgpu::compute

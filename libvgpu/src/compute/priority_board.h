// Where a share learns that a share of higher priority is busy on its device (docs/compute.md,
// Priority). Two implementations of meter.h's PriorityBoard:
//
// - LimitsYield: the share's own limits page, which only the node agent writes (measure_source ==
//   kMeasureAgent): the agent measures every share and sets yield_mask. Nothing else is opened.
// - UserBoard: `tessera run` shares without an agent. One small file per device in a folder only
//   this user can open (`<dir>/tessera-<uid>/tessera-device-<uuid>`, folder 0700, file 0600), read
//   and written with pread/pwrite (never mapped: a truncated board cannot SIGBUS anyone).
#pragma once

#include <atomic>
#include <cstdint>

#include "compute/meter.h"
#include "tessera/share_region.h"

namespace tessera::vgpu::compute {

class LimitsYield final : public PriorityBoard {
 public:
  explicit LimitsYield(const share::LimitsPage* limits) : limits_(limits) {}
  // The agent sees the share's GPU time itself: nothing to announce.
  void announce(int, uint32_t, int64_t) override {}
  bool higher_active(int device, uint32_t, int64_t) override {
    return (limits_->yield_mask.load(std::memory_order_acquire) >> device) & 1u;
  }

 private:
  const share::LimitsPage* limits_;
};

class UserBoard final : public PriorityBoard {
 public:
  // `dir`: TESSERA_DEVICE_DIR (default /dev/shm); the board lives in `<dir>/tessera-<uid>/`.
  UserBoard(const share::LimitsPage* limits, const char* dir) : limits_(limits), dir_(dir) {}
  void announce(int device, uint32_t priority, int64_t until_ns) override;
  bool higher_active(int device, uint32_t priority, int64_t now_ns) override;

  // The file's layout (64 bytes).
  struct Page {
    uint32_t magic;
    uint32_t version;
    uint64_t reserved0;
    uint64_t active_until_ns[3];  // by rank: low, normal, high (CLOCK_MONOTONIC)
    uint64_t reserved1[3];
  };
  static_assert(sizeof(Page) == 64);
  static constexpr uint32_t kMagic = 0x50444754;  // "TGDP"
  static constexpr uint32_t kVersion = 2;         // 2: per user, pread/pwrite

 private:
  int board_fd(int device);
  // A board that stopped being one (truncated, replaced by garbage): one line, then unused.
  void refuse(int device, const char* why);
  const share::LimitsPage* limits_;
  const char* dir_;
  int fds_[share::kMaxDevices] = {};  // fd + 1 (0: not opened yet)
  bool failed_[share::kMaxDevices] = {};
};

}  // namespace tessera::vgpu::compute

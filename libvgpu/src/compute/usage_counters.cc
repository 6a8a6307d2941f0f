#include "tessera/vgpu/usage_counters.h"

#include <atomic>

namespace tessera::vgpu::compute {
namespace {

// The sum of one counter over the share's live slots.
uint64_t sum_live_slots(const share::UsagePage& usage,
                        std::atomic<uint64_t> share::ProcessSlot::*counter) {
  uint32_t high = usage.slot_high_water.load(std::memory_order_acquire);
  if (high > share::kMaxSlots) high = share::kMaxSlots;
  uint64_t sum = 0;
  for (uint32_t i = 0; i < high; ++i) {
    if (usage.slots[i].owner.load(std::memory_order_relaxed) == 0) continue;
    sum += (usage.slots[i].*counter).load(std::memory_order_relaxed);
  }
  return sum;
}

}  // namespace

uint64_t share_launches(const share::UsagePage& usage) {
  return sum_live_slots(usage, &share::ProcessSlot::launches);
}

uint64_t share_throttled_ns(const share::UsagePage& usage) {
  return sum_live_slots(usage, &share::ProcessSlot::throttled_ns);
}

}  // namespace tessera::vgpu::compute

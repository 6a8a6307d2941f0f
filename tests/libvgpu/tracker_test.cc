// The handle table (libvgpu/src/tracker.cc): what is inserted is found and taken exactly once, a
// take leaves no tombstone (so alloc/free cycles of ever-new addresses never make it grow), and
// every entry stays reachable while others around it are taken.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "tracker.h"

namespace {

using tessera::vgpu::HandleKind;
using tessera::vgpu::Record;
using tessera::vgpu::Tracker;

Record pointer(uint64_t handle, uint64_t bytes, uint64_t context = 0) {
  Record record;
  record.handle = handle;
  record.kind = HandleKind::kDevicePointer;
  record.device = 0;
  record.bytes = bytes;
  record.context = context;
  return record;
}

TEST(Tracker, AllocFreeCyclesOfNewAddressesNeverGrowTheTable) {
  Tracker tracker;
  // A few long-lived handles, as a program keeps, then 200,000 alloc/free pairs that each get an
  // address never seen before (a bump allocator), as the simulator and real drivers hand out.
  for (uint64_t i = 0; i < 16; ++i)
    ASSERT_TRUE(tracker.insert(pointer(0x7000000000 + i * 4096, i)));
  const size_t capacity = tracker.capacity();
  ASSERT_GT(capacity, 0u);
  ASSERT_EQ(tracker.mappings(), 1u);
  for (uint64_t i = 0; i < 200000; ++i) {
    const uint64_t address = 0x100000000 + i * (2ull << 20);
    ASSERT_TRUE(tracker.insert(pointer(address, 2ull << 20)));
    Record taken;
    ASSERT_TRUE(tracker.take(HandleKind::kDevicePointer, address, &taken));
    ASSERT_EQ(taken.bytes, 2ull << 20);
  }
  // No new table: the one with tombstones mapped a fresh one about every 500 pairs.
  EXPECT_EQ(tracker.mappings(), 1u);
  EXPECT_EQ(tracker.capacity(), capacity);
  EXPECT_EQ(tracker.size(), 16u);
  for (uint64_t i = 0; i < 16; ++i) {
    Record found;
    ASSERT_TRUE(tracker.find(HandleKind::kDevicePointer, 0x7000000000 + i * 4096, &found));
    EXPECT_EQ(found.bytes, i);
  }
}

TEST(Tracker, EveryEntryStaysReachableWhileNeighboursAreTaken) {
  Tracker tracker;
  // Enough entries for long probe runs (and a growth on the way), taken in an order that breaks
  // runs in their middle; the rest must all still be found, each exactly once.
  constexpr uint64_t kCount = 3000;
  for (uint64_t i = 0; i < kCount; ++i) ASSERT_TRUE(tracker.insert(pointer(i * 512, i)));
  for (uint64_t i = 0; i < kCount; i += 3) {
    Record taken;
    ASSERT_TRUE(tracker.take(HandleKind::kDevicePointer, i * 512, &taken));
    EXPECT_EQ(taken.bytes, i);
    EXPECT_FALSE(tracker.take(HandleKind::kDevicePointer, i * 512, &taken));
  }
  for (uint64_t i = 0; i < kCount; ++i) {
    Record found;
    EXPECT_EQ(tracker.find(HandleKind::kDevicePointer, i * 512, &found), i % 3 != 0) << i;
  }
  EXPECT_EQ(tracker.size(), kCount - (kCount + 2) / 3);
  // A freed slot is used again: refilling what was taken does not grow the table.
  const size_t mappings = tracker.mappings();
  for (uint64_t i = 0; i < kCount; i += 3) ASSERT_TRUE(tracker.insert(pointer(i * 512, i)));
  EXPECT_EQ(tracker.mappings(), mappings);
  EXPECT_EQ(tracker.size(), kCount);
}

TEST(Tracker, TakeEitherPrefersTheFirstKindInOneLookup) {
  Tracker tracker;
  Record device = pointer(0x5000, 1);
  Record pool = pointer(0x5000, 2);
  pool.kind = HandleKind::kPoolPointer;
  ASSERT_TRUE(tracker.insert(device));
  ASSERT_TRUE(tracker.insert(pool));
  Record taken;
  ASSERT_TRUE(
      tracker.take_either(HandleKind::kPoolPointer, HandleKind::kDevicePointer, 0x5000, &taken));
  EXPECT_EQ(taken.kind, HandleKind::kPoolPointer);
  ASSERT_TRUE(
      tracker.take_either(HandleKind::kPoolPointer, HandleKind::kDevicePointer, 0x5000, &taken));
  EXPECT_EQ(taken.kind, HandleKind::kDevicePointer);
  EXPECT_FALSE(
      tracker.take_either(HandleKind::kPoolPointer, HandleKind::kDevicePointer, 0x5000, &taken));
  EXPECT_EQ(tracker.size(), 0u);
}

TEST(Tracker, TakeContextTakesEveryRecordOfTheContextOnly) {
  Tracker tracker;
  constexpr uint64_t kCount = 2000;
  for (uint64_t i = 0; i < kCount; ++i) {
    ASSERT_TRUE(tracker.insert(pointer(0x9000000 + i * 512, i, /*context=*/i % 2 ? 0xa : 0xb)));
  }
  std::vector<Record> out(64);
  uint64_t taken = 0;
  uint64_t bytes = 0;
  while (true) {
    const size_t got = tracker.take_context(0xa, out.data(), out.size());
    for (size_t i = 0; i < got; ++i) {
      EXPECT_EQ(out[i].context, 0xau);
      bytes += out[i].bytes;
    }
    taken += got;
    if (got < out.size()) break;
  }
  EXPECT_EQ(taken, kCount / 2);
  EXPECT_EQ(bytes, kCount / 2 * kCount / 2);  // the sum of the odd numbers below kCount
  EXPECT_EQ(tracker.size(), kCount / 2);
  for (uint64_t i = 0; i < kCount; ++i) {
    Record found;
    EXPECT_EQ(tracker.find(HandleKind::kDevicePointer, 0x9000000 + i * 512, &found), i % 2 == 0);
  }
}

}  // namespace

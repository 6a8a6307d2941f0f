// The snapshot diff (tessera/node_events/snapshot_events.h): which events two snapshots of a node
// make.
#include "tessera/node_events/snapshot_events.h"

#include <gtest/gtest.h>

namespace tessera::node_events {
namespace {

namespace v1 = tessera::node::v1;

v1::Share* add_share(v1::ListSharesResponse& node, const std::string& name,
                     const std::string& claim) {
  v1::Share* share = node.add_shares();
  share->set_name(name);
  share->set_namespace_("tenants");
  share->set_claim(claim);
  share->set_backend("quota");
  share->add_devices()->set_gpu_uuid("GPU-1");
  return share;
}

v1::Gpu* add_gpu(v1::ListSharesResponse& node, bool healthy, const std::string& reason = "") {
  v1::Gpu* gpu = node.add_gpus();
  gpu->set_uuid("GPU-1");
  gpu->set_healthy(healthy);
  gpu->set_health_reason(reason);
  return gpu;
}

TEST(SnapshotEvents, SharesPreparedAndUnprepared) {
  v1::ListSharesResponse before, after;
  add_share(before, "s-old", "old");
  add_share(after, "s-new", "new");
  after.set_sampled_unix_ms(1234);
  const auto events = snapshot_events(before, after);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind(), v1::Event::UNPREPARED);
  EXPECT_EQ(events[0].share(), "s-old");
  EXPECT_EQ(events[0].claim(), "old");
  EXPECT_EQ(events[1].kind(), v1::Event::PREPARED);
  EXPECT_EQ(events[1].share(), "s-new");
  EXPECT_EQ(events[1].namespace_(), "tenants");
  EXPECT_EQ(events[1].gpu_uuid(), "GPU-1");
  EXPECT_EQ(events[1].fields().at("backend"), "quota");
  EXPECT_EQ(events[1].message(), "share s-new of tenants/new prepared on GPU-1 (quota)");
  for (const auto& event : events) {
    EXPECT_EQ(event.unix_ms(), 1234);
    EXPECT_EQ(event.sequence(), 0u);  // the log numbers them
  }
}

TEST(SnapshotEvents, OneDeniedAndOneThrottledEventPerShareWithTheDelta) {
  v1::ListSharesResponse before, after;
  v1::Share* was = add_share(before, "s", "c");
  was->set_allocations_denied(2);
  was->set_throttled_seconds(1.0);
  v1::Share* now = add_share(after, "s", "c");
  now->set_allocations_denied(7);
  now->set_throttled_seconds(1.25);
  const auto events = snapshot_events(before, after);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind(), v1::Event::ALLOCATION_DENIED);
  EXPECT_EQ(events[0].fields().at("denied"), "5");
  EXPECT_EQ(events[0].fields().at("total"), "7");
  EXPECT_EQ(events[0].message(), "5 allocations of tenants/c denied (over its memory limit)");
  EXPECT_EQ(events[1].kind(), v1::Event::THROTTLED);
  EXPECT_EQ(events[1].fields().at("throttled_seconds"), "0.250");
  EXPECT_EQ(events[1].fields().at("total_seconds"), "1.250");
  // Nothing moved: nothing to say.
  EXPECT_TRUE(snapshot_events(after, after).empty());
}

TEST(SnapshotEvents, AShareThatCouldNotBeReadMakesNoCounterEvents) {
  v1::ListSharesResponse readable, unread, again, later;
  v1::Share* share = add_share(readable, "s", "c");
  share->set_allocations_denied(5);
  share->set_throttled_seconds(3.0);
  // Unknown figures are 0 in the message: not a counter that went down and up again.
  add_share(unread, "s", "c")->set_read_error("/shares/s/usage is truncated");
  share = add_share(again, "s", "c");
  share->set_allocations_denied(7);
  share->set_throttled_seconds(3.5);
  share = add_share(later, "s", "c");
  share->set_allocations_denied(8);
  share->set_throttled_seconds(3.5);
  EXPECT_TRUE(snapshot_events(readable, unread).empty());
  // Read again: its counters since it began are no change of the last pass.
  EXPECT_TRUE(snapshot_events(unread, again).empty());
  // From then on, as any share; and gone while unreadable is still gone.
  const auto events = snapshot_events(again, later);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind(), v1::Event::ALLOCATION_DENIED);
  EXPECT_EQ(events[0].fields().at("denied"), "1");
  const auto gone = snapshot_events(unread, v1::ListSharesResponse{});
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].kind(), v1::Event::UNPREPARED);
}

TEST(SnapshotEvents, ACounterThatWentDownCountsFromZero) {
  v1::ListSharesResponse before, after;
  add_share(before, "s", "c")->set_allocations_denied(9);
  add_share(after, "s", "c")->set_allocations_denied(1);
  const auto events = snapshot_events(before, after);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].fields().at("denied"), "1");
}

TEST(SnapshotEvents, ANewShareIsOnlyPreparedNotDenied) {
  v1::ListSharesResponse before, after;
  v1::Share* share = add_share(after, "s", "c");
  share->set_allocations_denied(3);
  share->set_throttled_seconds(2);
  const auto events = snapshot_events(before, after);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind(), v1::Event::PREPARED);
}

TEST(SnapshotEvents, HealthChangesOfAListedGpu) {
  v1::ListSharesResponse before, after, again;
  add_gpu(before, true);
  add_gpu(after, false, "xid-79: XID 79: GPU has fallen off the bus");
  const auto events = snapshot_events(before, after);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind(), v1::Event::HEALTH_CHANGED);
  EXPECT_EQ(events[0].gpu_uuid(), "GPU-1");
  EXPECT_EQ(events[0].fields().at("healthy"), "false");
  EXPECT_EQ(events[0].fields().at("was_healthy"), "true");
  EXPECT_EQ(events[0].fields().at("reason"), "xid-79: XID 79: GPU has fallen off the bus");
  // A GPU seen for the first time is no change; the same state again neither.
  EXPECT_TRUE(snapshot_events(v1::ListSharesResponse{}, after).empty());
  add_gpu(again, false, "xid-79: XID 79: GPU has fallen off the bus");
  EXPECT_TRUE(snapshot_events(after, again).empty());
}

TEST(SnapshotEvents, KindNames) {
  EXPECT_STREQ(event_kind_name(v1::Event::ALLOCATION_DENIED), "allocation_denied");
  EXPECT_STREQ(event_kind_name(v1::Event::EVENTS_MISSED), "events_missed");
  EXPECT_STREQ(event_kind_name(v1::Event::HEALTH_CHANGED), "health_changed");
}

}  // namespace
}  // namespace tessera::node_events

// The event log (api/event_log.h) on a simulated clock: numbering, stamps, cursors, a reader that
// falls behind, close; and the finding handler.
#include "api/event_log.h"

#include <chrono>
#include <thread>

#include <gtest/gtest.h>

namespace tessera::agent {
namespace {

namespace v1 = tessera::node::v1;
using std::chrono::milliseconds;

v1::Event event_of(v1::Event::Kind kind, const std::string& share = "s") {
  v1::Event event;
  event.set_kind(kind);
  event.set_share(share);
  return event;
}

TEST(EventLog, NumbersWithoutGapsAndStampsWithTheInjectedClock) {
  SimulatedClock clock;
  EventLog log(clock, 8);
  EventLog::Cursor cursor = log.cursor(false);
  EXPECT_EQ(log.publish(event_of(v1::Event::PREPARED)), 1u);
  clock.advance(std::chrono::milliseconds(1500));
  EXPECT_EQ(log.publish(event_of(v1::Event::UNPREPARED)), 2u);
  v1::Event stamped = event_of(v1::Event::THROTTLED);
  stamped.set_unix_ms(42);  // a stamp given (a snapshot's time) is kept
  EXPECT_EQ(log.publish(stamped), 3u);
  const auto events = log.read(cursor, milliseconds(0));
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].sequence(), 1u);
  EXPECT_EQ(events[2].sequence(), 3u);
  EXPECT_EQ(events[1].unix_ms() - events[0].unix_ms(), 1500);
  EXPECT_EQ(events[2].unix_ms(), 42);
  EXPECT_EQ(cursor.last, 3u);
  EXPECT_TRUE(log.read(cursor, milliseconds(0)).empty());
}

TEST(EventLog, ACursorStartsAfterTheLastOrBeforeTheOldestHeld) {
  SimulatedClock clock;
  EventLog log(clock, 3);
  for (int i = 0; i < 5; ++i) log.publish(event_of(v1::Event::PREPARED));
  EventLog::Cursor fresh = log.cursor(false);
  EXPECT_TRUE(log.read(fresh, milliseconds(0)).empty());
  EventLog::Cursor recent = log.cursor(true);
  const auto events = log.read(recent, milliseconds(0));
  ASSERT_EQ(events.size(), 3u);  // the log holds 3: sequences 3, 4, 5; no marker for a new reader
  EXPECT_EQ(events[0].sequence(), 3u);
  EXPECT_EQ(events[2].sequence(), 5u);
}

TEST(EventLog, AReaderThatFellBehindGetsOneMissedMarkerThenTheOldestHeld) {
  SimulatedClock clock;
  EventLog log(clock, 4);
  EventLog::Cursor slow = log.cursor(false);
  // Publishing never waits for the reader: ten events with nobody reading.
  for (int i = 0; i < 10; ++i) log.publish(event_of(v1::Event::THROTTLED));
  const auto events = log.read(slow, milliseconds(0));
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[0].kind(), v1::Event::EVENTS_MISSED);
  EXPECT_EQ(events[0].fields().at("missed"), "6");
  EXPECT_EQ(events[0].sequence(), 0u);
  EXPECT_EQ(events[1].sequence(), 7u);
  EXPECT_EQ(events[4].sequence(), 10u);
  // Caught up: the next event comes alone.
  log.publish(event_of(v1::Event::PREPARED));
  const auto next = log.read(slow, milliseconds(0));
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].sequence(), 11u);
}

TEST(EventLog, ReadBatchesAtMostMax) {
  SimulatedClock clock;
  EventLog log(clock, 16);
  EventLog::Cursor cursor = log.cursor(false);
  for (int i = 0; i < 5; ++i) log.publish(event_of(v1::Event::PREPARED));
  EXPECT_EQ(log.read(cursor, milliseconds(0), 2).size(), 2u);
  EXPECT_EQ(log.read(cursor, milliseconds(0), 10).size(), 3u);
}

TEST(EventLog, ReadWaitsForAnEventAndCloseWakesIt) {
  SimulatedClock clock;
  EventLog log(clock);
  EventLog::Cursor cursor = log.cursor(false);
  std::thread publisher([&] {
    std::this_thread::sleep_for(milliseconds(50));
    log.publish(event_of(v1::Event::PREPARED));
  });
  const auto events = log.read(cursor, milliseconds(10000));
  publisher.join();
  ASSERT_EQ(events.size(), 1u);
  std::thread closer([&] {
    std::this_thread::sleep_for(milliseconds(50));
    log.close();
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(log.read(cursor, milliseconds(10000)).empty());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  closer.join();
  EXPECT_TRUE(log.closed());
}

TEST(EventFindingHandler, AFindingBecomesAFindingEvent) {
  SimulatedClock clock;
  EventLog log(clock);
  EventLog::Cursor cursor = log.cursor(false);
  EventFindingHandler handler(log);
  Finding finding;
  finding.kind = FindingKind::kUnshimmedProcess;
  finding.host_pid = 4321;
  finding.share = "uid-1-gpu-0-a";
  finding.claim_namespace = "tenants";
  finding.claim_name = "alpha";
  finding.claim_uid = "uid-1";
  finding.pod = "tenants/trainer";
  finding.gpu_uuid = "GPU-1";
  finding.detail = "pid 4321 holds 2 GiB on GPU-1 and is in no usage page";
  FindingHandler& as_handler = handler;
  as_handler.handle(finding);
  const auto events = log.read(cursor, milliseconds(0));
  ASSERT_EQ(events.size(), 1u);
  const v1::Event& event = events[0];
  EXPECT_EQ(event.kind(), v1::Event::FINDING);
  EXPECT_EQ(event.sequence(), 1u);
  EXPECT_EQ(event.share(), "uid-1-gpu-0-a");
  EXPECT_EQ(event.namespace_(), "tenants");
  EXPECT_EQ(event.claim(), "alpha");
  EXPECT_EQ(event.pod(), "tenants/trainer");
  EXPECT_EQ(event.gpu_uuid(), "GPU-1");
  EXPECT_EQ(event.host_pid(), 4321);
  EXPECT_EQ(event.fields().at("finding"), "unshimmed_process");
  EXPECT_EQ(event.fields().at("claim_uid"), "uid-1");
  EXPECT_EQ(event.message(),
            "unshimmed_process: pid 4321 holds 2 GiB on GPU-1 and is in no usage page");
}

}  // namespace
}  // namespace tessera::agent

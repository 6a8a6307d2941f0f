// The agent's recent events for the local API's WatchEvents: a bounded ring of the last `capacity`
// events, numbered 1, 2, ... without gaps, and any number of readers, each with its own cursor.
// Publishing appends under one short lock and never waits for a reader: a reader that falls more
// than `capacity` events behind (a slow client of the stream) gets one EVENTS_MISSED event saying
// how many it lost, then goes on from the oldest event still held.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "clock/clock.h"
#include "model/finding.h"
#include "tessera/node/v1/node_api.pb.h"
#include "tessera/thread_annotations.h"

namespace tessera::agent {

class EventLog {
 public:
  // Events are stamped with the wall time at construction plus the time `clock` has moved since,
  // so that a test's SimulatedClock gives reproducible stamps. `clock` outlives the log.
  explicit EventLog(Clock& clock, std::size_t capacity = 1024);

  // Numbers and stamps `event` (its sequence and unix_ms are replaced; unix_ms only when 0), then
  // wakes the readers. Thread-safe. Returns the sequence given.
  std::uint64_t publish(tessera::node::v1::Event event) TESSERA_EXCLUDES(mutex_);

  // A reader's position: the sequence of the last event it got.
  struct Cursor {
    std::uint64_t last = 0;
  };
  // A cursor that starts after every event published so far (only new ones), or before the oldest
  // still held (the recent past first).
  Cursor cursor(bool include_recent) const TESSERA_EXCLUDES(mutex_);

  // The events after `cursor` (at most `max`), waiting up to `timeout` of real time for one when
  // there are none yet; advances the cursor. When events after the cursor were dropped, the batch
  // starts with one EVENTS_MISSED (no sequence of its own, fields["missed"] the count).
  // Empty on timeout, or at once after close().
  std::vector<tessera::node::v1::Event> read(Cursor& cursor, std::chrono::milliseconds timeout,
                                             std::size_t max = 256) TESSERA_EXCLUDES(mutex_);

  // Called with each event as published (numbered and stamped), on the publisher's thread after
  // the log's lock is released: it must not wait (the Kubernetes Events' queue, pod_events.h).
  // Null: none.
  using Observer = std::function<void(const tessera::node::v1::Event&)>;
  void set_observer(Observer observer) TESSERA_EXCLUDES(mutex_);

  // Wakes every reader and makes read() return at once from now on (the server is stopping).
  void close() TESSERA_EXCLUDES(mutex_);
  bool closed() const TESSERA_EXCLUDES(mutex_);

  std::uint64_t last_sequence() const TESSERA_EXCLUDES(mutex_);
  std::size_t capacity() const { return capacity_; }

 private:
  Clock& clock_;
  const std::size_t capacity_;
  const std::int64_t wall_at_start_ms_;
  const Clock::time_point clock_at_start_;
  mutable Mutex mutex_;
  std::condition_variable published_;
  // Sequences next_ - events_.size() .. next_ - 1.
  std::deque<tessera::node::v1::Event> events_ TESSERA_GUARDED_BY(mutex_);
  std::uint64_t next_ TESSERA_GUARDED_BY(mutex_) = 1;
  bool closed_ TESSERA_GUARDED_BY(mutex_) = false;
  std::shared_ptr<const Observer> observer_ TESSERA_GUARDED_BY(mutex_);
};

// A FindingHandler that turns each finding into a FINDING event (fields: finding, host_pid,
// claim_uid; pod_uid and reclaimed_for where set): what the agent attaches to its enforcement
// policy so findings reach the stream.
class EventFindingHandler final : public FindingHandler {
 public:
  explicit EventFindingHandler(EventLog& log) : log_(log) {}
  void handle(const Finding& finding) override;

 private:
  EventLog& log_;
};

// The FINDING event of `finding` (unnumbered).
tessera::node::v1::Event finding_event(const Finding& finding);

}  // namespace tessera::agent

// The latest observation of the node and the judgment of the latest checked one, for everything
// that reports on the node (/metrics, the local API's answers and its events diff): each takes
// what the last pass saw instead of reading the node again, so a scrape, a check and an API answer
// see the node at one moment.
//
// A reader gets a new observation instead (taken at once, judged by no one yet) when there is none,
// when the last is older than `max_age` by the agent's clock (the pass loop is off or stuck), or
// when the node's claims differ from the ones it saw (a claim prepared or unprepared since: it
// shows at once, not a pass later). That costs the checkpoint's read, not the node's.
#pragma once

#include <memory>

#include "clock/clock.h"
#include "observe/node_observation.h"
#include "observe/observer.h"
#include "tessera/thread_annotations.h"

namespace tessera::agent {

class ObservationBoard {
 public:
  // `observer` and `clock` outlive the board.
  ObservationBoard(Observer& observer, Clock& clock, Clock::duration max_age);
  ObservationBoard(const ObservationBoard&) = delete;
  ObservationBoard& operator=(const ObservationBoard&) = delete;

  // The pass loop's: a new observation and what the checks made of it (null: not checked).
  void publish(std::shared_ptr<const NodeObservation> observation,
               std::shared_ptr<const Judgment> judgment) TESSERA_EXCLUDES(mutex_);

  // The node as the last pass saw it, or a new observation (see above).
  ObservedNode current() TESSERA_EXCLUDES(mutex_);
  // The last one published or taken, without reading anything (null before the first).
  ObservedNode latest() const TESSERA_EXCLUDES(mutex_);

 private:
  Observer& observer_;
  Clock& clock_;
  const Clock::duration max_age_;
  mutable Mutex mutex_;
  std::shared_ptr<const NodeObservation> observation_ TESSERA_GUARDED_BY(mutex_);
  std::shared_ptr<const Judgment> judgment_ TESSERA_GUARDED_BY(mutex_);
};

}  // namespace tessera::agent

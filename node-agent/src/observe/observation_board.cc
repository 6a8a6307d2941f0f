#include "observe/observation_board.h"

namespace tessera::agent {

ObservationBoard::ObservationBoard(Observer& observer, Clock& clock, Clock::duration max_age)
    : observer_(observer), clock_(clock), max_age_(max_age) {}

void ObservationBoard::publish(std::shared_ptr<const NodeObservation> observation,
                               std::shared_ptr<const Judgment> judgment) {
  MutexLock lock(mutex_);
  // A reader's newer observation is not replaced by an older pass's (they run side by side).
  if (!observation_ || observation->at >= observation_->at) observation_ = std::move(observation);
  if (judgment) judgment_ = std::move(judgment);
}

ObservedNode ObservationBoard::latest() const {
  MutexLock lock(mutex_);
  return {observation_, judgment_};
}

ObservedNode ObservationBoard::current() {
  const Checkpoint claims = observer_.checkpoint();
  {
    MutexLock lock(mutex_);
    if (observation_ && clock_.now() - observation_->at <= max_age_ &&
        observation_->checkpoint == claims)
      return {observation_, judgment_};
  }
  std::shared_ptr<const NodeObservation> fresh = observer_.observe(&claims);
  MutexLock lock(mutex_);
  if (!observation_ || fresh->at >= observation_->at) observation_ = fresh;
  return {fresh, judgment_};
}

}  // namespace tessera::agent

#include "api/event_log.h"

#include <string>
#include <utility>

namespace tessera::agent {

namespace v1 = tessera::node::v1;

EventLog::EventLog(Clock& clock, std::size_t capacity)
    : clock_(clock),
      capacity_(capacity == 0 ? 1 : capacity),
      wall_at_start_ms_(std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count()),
      clock_at_start_(clock.now()) {}

std::uint64_t EventLog::publish(v1::Event event) {
  if (event.unix_ms() == 0) {
    const auto moved =
        std::chrono::duration_cast<std::chrono::milliseconds>(clock_.now() - clock_at_start_);
    event.set_unix_ms(wall_at_start_ms_ + moved.count());
  }
  std::uint64_t sequence = 0;
  std::shared_ptr<const Observer> observer;
  {
    MutexLock lock(mutex_);
    sequence = next_++;
    event.set_sequence(sequence);
    observer = observer_;
    if (observer) {
      events_.push_back(event);
    } else {
      events_.push_back(std::move(event));
    }
    if (events_.size() > capacity_) events_.pop_front();
  }
  published_.notify_all();
  if (observer) (*observer)(event);
  return sequence;
}

void EventLog::set_observer(Observer observer) {
  MutexLock lock(mutex_);
  observer_ = observer ? std::make_shared<const Observer>(std::move(observer)) : nullptr;
}

EventLog::Cursor EventLog::cursor(bool include_recent) const {
  MutexLock lock(mutex_);
  if (include_recent) return Cursor{next_ - 1 - events_.size()};
  return Cursor{next_ - 1};
}

std::vector<v1::Event> EventLog::read(Cursor& cursor, std::chrono::milliseconds timeout,
                                      std::size_t max) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  MutexLock lock(mutex_);
  while (!closed_ && next_ - 1 <= cursor.last && mutex_.wait_until(published_, deadline)) {
  }
  std::vector<v1::Event> batch;
  if (closed_ || next_ - 1 <= cursor.last) return batch;
  const std::uint64_t oldest = next_ - events_.size();
  if (cursor.last + 1 < oldest) {
    v1::Event missed;
    missed.set_kind(v1::Event::EVENTS_MISSED);
    missed.set_unix_ms(events_.front().unix_ms());
    const std::uint64_t count = oldest - cursor.last - 1;
    missed.set_message(std::to_string(count) +
                       " events were dropped before this stream read them (it fell behind the "
                       "agent's buffer of " +
                       std::to_string(capacity_) + ")");
    (*missed.mutable_fields())["missed"] = std::to_string(count);
    batch.push_back(std::move(missed));
    cursor.last = oldest - 1;
  }
  for (std::uint64_t s = cursor.last + 1; s < next_ && batch.size() < max; ++s) {
    batch.push_back(events_[s - oldest]);
    cursor.last = s;
  }
  return batch;
}

void EventLog::close() {
  {
    MutexLock lock(mutex_);
    closed_ = true;
  }
  published_.notify_all();
}

bool EventLog::closed() const {
  MutexLock lock(mutex_);
  return closed_;
}

std::uint64_t EventLog::last_sequence() const {
  MutexLock lock(mutex_);
  return next_ - 1;
}

v1::Event finding_event(const Finding& finding) {
  v1::Event event;
  event.set_kind(v1::Event::FINDING);
  event.set_share(finding.share);
  event.set_namespace_(finding.claim_namespace);
  event.set_claim(finding.claim_name);
  event.set_pod(finding.pod);
  event.set_gpu_uuid(finding.gpu_uuid);
  event.set_host_pid(finding.host_pid);
  const std::string kind(finding_kind_name(finding.kind));
  event.set_message(kind + (finding.detail.empty() ? "" : ": " + finding.detail));
  (*event.mutable_fields())["finding"] = kind;
  (*event.mutable_fields())["claim_uid"] = finding.claim_uid;
  if (finding.host_pid != 0)
    (*event.mutable_fields())["host_pid"] = std::to_string(finding.host_pid);
  if (!finding.pod_uid.empty()) (*event.mutable_fields())["pod_uid"] = finding.pod_uid;
  if (!finding.reclaimed_for.empty())
    (*event.mutable_fields())["reclaimed_for"] = finding.reclaimed_for;
  if (finding.kind == FindingKind::kUnaccountedProcess)
    (*event.mutable_fields())["bytes"] = std::to_string(finding.bytes);
  return event;
}

void EventFindingHandler::handle(const Finding& finding) {
  log_.publish(finding_event(finding));
}

}  // namespace tessera::agent

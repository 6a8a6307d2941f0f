#include "tessera/kube/event_recorder.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <ctime>

namespace tessera::kube {

using nlohmann::json;

json ObjectReference::to_json() const {
  json ref = json::object();
  if (!kind.empty()) ref["kind"] = kind;
  if (!namespace_name.empty()) ref["namespace"] = namespace_name;
  if (!name.empty()) ref["name"] = name;
  if (!uid.empty()) ref["uid"] = uid;
  if (!api_version.empty()) ref["apiVersion"] = api_version;
  if (!field_path.empty()) ref["fieldPath"] = field_path;
  return ref;
}

std::string events_path(const std::string& namespace_name) {
  return "/api/v1/namespaces/" + url_escape(namespace_name) + "/events";
}

std::string event_path(const std::string& namespace_name, const std::string& name) {
  return events_path(namespace_name) + "/" + url_escape(name);
}

std::string kube_time(WallTime at) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(at);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

namespace {

// The correlator's keys, as client-go joins them (no separator).
std::string object_key(const std::string& component, const std::string& host,
                       const ObjectReference& object) {
  return component + host + object.kind + object.namespace_name + object.name + object.uid +
         object.api_version;
}

// getEventKey: also the field path, type, reason and message.
std::string event_key(const std::string& component, const std::string& host,
                      const ObjectReference& object, const std::string& type,
                      const std::string& reason, const std::string& message) {
  return component + host + object.kind + object.namespace_name + object.name + object.field_path +
         object.uid + object.api_version + type + reason + message;
}

ObjectReference reference_of(const json& ref) {
  ObjectReference object;
  if (!ref.is_object()) return object;
  object.api_version = ref.value("apiVersion", "");
  object.kind = ref.value("kind", "");
  object.namespace_name = ref.value("namespace", "");
  object.name = ref.value("name", "");
  object.uid = ref.value("uid", "");
  object.field_path = ref.value("fieldPath", "");
  return object;
}

std::string string_at(const json& object, const char* name) {
  if (!object.is_object()) return "";
  const auto it = object.find(name);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

}  // namespace

// ---- The LRU caches (github.com/golang/groupcache/lru) ----------------------------------------

template <typename Value>
Value* EventCorrelator::Lru<Value>::get(const std::string& key) {
  const auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  order_.splice(order_.begin(), order_, it->second);
  return &it->second->second;
}

template <typename Value>
void EventCorrelator::Lru<Value>::put(const std::string& key, Value value) {
  if (Value* held = get(key)) {
    *held = std::move(value);
    return;
  }
  order_.emplace_front(key, std::move(value));
  index_[key] = order_.begin();
  if (capacity_ != 0 && order_.size() > capacity_) {
    index_.erase(order_.back().first);
    order_.pop_back();
  }
}

// ---- EventCorrelator
// -----------------------------------------------------------------------------

EventCorrelator::EventCorrelator(const EventRecorderOptions& options)
    : options_(options),
      spam_(options.cache_size),
      aggregates_(options.cache_size),
      observed_(options.cache_size) {}

WallTime EventCorrelator::now() const {
  return options_.now ? options_.now() : std::chrono::system_clock::now();
}

std::string EventCorrelator::unique_name(const std::string& object_name, WallTime at) {
  int64_t nanos =
      std::chrono::duration_cast<std::chrono::nanoseconds>(at.time_since_epoch()).count();
  if (nanos <= last_name_nanos_) nanos = last_name_nanos_ + 1;
  last_name_nanos_ = nanos;
  char hex[24];
  std::snprintf(hex, sizeof hex, "%" PRIx64, static_cast<uint64_t>(nanos));
  return object_name + "." + hex;
}

CorrelatedEvent EventCorrelator::correlate(const EventRecord& record) {
  const WallTime when = now();
  const std::string& component = options_.component;
  const std::string& host = options_.host;
  std::string message = record.message;
  std::string key =
      event_key(component, host, record.object, record.type, record.reason, record.message);

  // EventAggregate: by object, type and reason; the message is the local key.
  const std::string aggregate_key =
      object_key(component, host, record.object) + record.type + record.reason + component + host;
  Aggregate aggregate;
  if (const Aggregate* held = aggregates_.get(aggregate_key)) aggregate = *held;
  if (aggregate.local_keys.empty() || when - aggregate.last > options_.aggregate_interval)
    aggregate = Aggregate{};
  if (std::find(aggregate.local_keys.begin(), aggregate.local_keys.end(), record.message) ==
      aggregate.local_keys.end())
    aggregate.local_keys.push_back(record.message);
  aggregate.last = when;
  const bool combine = aggregate.local_keys.size() >= options_.aggregate_max_events;
  if (combine) aggregate.local_keys.erase(aggregate.local_keys.begin());  // client-go: PopAny
  aggregates_.put(aggregate_key, aggregate);
  WallTime first = record.at, last = record.at;
  if (combine) {
    message = "(combined from similar events): " + record.message;
    key = aggregate_key;
    first = last = when;
  }

  // eventObserve: an event seen before is its Event again, one more time.
  CorrelatedEvent out;
  const std::string& ns =
      record.object.namespace_name.empty() ? std::string("default") : record.object.namespace_name;
  json event = {{"apiVersion", "v1"},
                {"kind", "Event"},
                {"metadata", {{"namespace", ns}}},
                {"involvedObject", record.object.to_json()},
                {"reason", record.reason},
                {"message", message},
                {"source", {{"component", component}, {"host", host}}},
                {"firstTimestamp", kube_time(first)},
                {"lastTimestamp", kube_time(last)},
                {"count", 1},
                {"type", record.type},
                {"reportingComponent", component},
                {"reportingInstance", host}};
  Observed observed;
  if (const Observed* seen = observed_.get(key); seen != nullptr && seen->count > 0) {
    observed = *seen;
    observed.count += 1;
    event["metadata"]["name"] = observed.name;
    if (!observed.resource_version.empty())
      event["metadata"]["resourceVersion"] = observed.resource_version;
    event["firstTimestamp"] = observed.first_timestamp;
    event["count"] = observed.count;
    // CreateTwoWayMergePatch from the event with count 0, lastTimestamp 0 and no message.
    out.patch = {{"count", observed.count}, {"lastTimestamp", event["lastTimestamp"]}};
    if (!message.empty()) out.patch["message"] = message;
  } else {
    observed.count = 1;
    observed.name = unique_name(record.object.name, combine ? when : record.at);
    observed.first_timestamp = event["firstTimestamp"];
    event["metadata"]["name"] = observed.name;
  }
  observed_.put(key, observed);
  out.event = std::move(event);

  // EventSourceObjectSpamFilter: a token bucket per source and object, full at first.
  const std::string spam_key = object_key(component, host, record.object);
  Bucket bucket{static_cast<double>(options_.spam_burst), when};
  if (const Bucket* held = spam_.get(spam_key)) {
    bucket = *held;
    const double elapsed = std::chrono::duration<double>(when - bucket.last).count();
    if (elapsed > 0)
      bucket.tokens =
          std::min<double>(options_.spam_burst, bucket.tokens + elapsed * options_.spam_qps);
    bucket.last = std::max(bucket.last, when);
  }
  if (bucket.tokens >= 1) {
    bucket.tokens -= 1;
  } else {
    out.skip = true;
  }
  spam_.put(spam_key, bucket);
  return out;
}

void EventCorrelator::update_state(const json& stored) {
  if (!stored.is_object()) return;
  const json& meta = stored.contains("metadata") ? stored["metadata"] : json();
  const json& source = stored.contains("source") ? stored["source"] : json();
  const ObjectReference object =
      reference_of(stored.contains("involvedObject") ? stored["involvedObject"] : json());
  const std::string key = event_key(string_at(source, "component"), string_at(source, "host"),
                                    object, string_at(stored, "type"), string_at(stored, "reason"),
                                    string_at(stored, "message"));
  Observed observed;
  const auto count = stored.find("count");
  observed.count = count != stored.end() && count->is_number_integer() ? count->get<int64_t>() : 0;
  observed.first_timestamp = string_at(stored, "firstTimestamp");
  observed.name = string_at(meta, "name");
  observed.resource_version = string_at(meta, "resourceVersion");
  observed_.put(key, observed);
}

// ---- EventRecorder
// -------------------------------------------------------------------------------

EventRecorder::EventRecorder(KubeClient& client, EventRecorderOptions options)
    : client_(client), options_(std::move(options)), correlator_(options_) {
  writer_ = std::thread([this] { run(); });
}

EventRecorder::~EventRecorder() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  writer_.join();
}

bool EventRecorder::record(const ObjectReference& object, const std::string& type,
                           const std::string& reason, const std::string& message) {
  EventRecord event{object, type, reason, message,
                    options_.now ? options_.now() : std::chrono::system_clock::now()};
  {
    std::lock_guard lock(mutex_);
    if (stopping_ || queue_.size() >= options_.queue_capacity) {
      ++dropped_;
      return false;
    }
    queue_.push_back(std::move(event));
  }
  changed_.notify_all();
  return true;
}

void EventRecorder::flush() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return queue_.empty() && !busy_; });
}

uint64_t EventRecorder::dropped() const {
  std::lock_guard lock(mutex_);
  return dropped_;
}
uint64_t EventRecorder::rate_limited() const {
  std::lock_guard lock(mutex_);
  return rate_limited_;
}
uint64_t EventRecorder::written() const {
  std::lock_guard lock(mutex_);
  return written_;
}
uint64_t EventRecorder::failed() const {
  std::lock_guard lock(mutex_);
  return failed_;
}

void EventRecorder::run() {
  std::unique_lock lock(mutex_);
  while (true) {
    changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_) {  // what is queued is not worth holding a shutdown for
      dropped_ += queue_.size();
      queue_.clear();
      changed_.notify_all();
      return;
    }
    EventRecord next = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    write(next);
    lock.lock();
    busy_ = false;
    changed_.notify_all();
  }
}

// recordToSink's recordEvent: a PATCH for an event seen before (a create when the Event is gone),
// else a create; the server's answer updates the correlator. Not retried beyond the client's own
// retries: an Event is best-effort, and the queue must keep moving.
void EventRecorder::write(const EventRecord& record) {
  CorrelatedEvent correlated = correlator_.correlate(record);
  auto count = [&](uint64_t EventRecorder::*counter) {
    std::lock_guard lock(mutex_);
    ++(this->*counter);
  };
  if (correlated.skip) return count(&EventRecorder::rate_limited_);
  json& event = correlated.event;
  const std::string ns = event["metadata"]["namespace"];
  const std::string name = event["metadata"]["name"];
  Result<ApiResponse> answer = unavailable("not sent");
  bool create = correlated.patch.is_null();
  if (!create) {
    answer = client_.request("PATCH", event_path(ns, name), correlated.patch.dump());
    create = !answer.is_ok() && answer.status().code() == StatusCode::kNotFound;
  }
  if (create) {
    event["metadata"].erase("resourceVersion");
    answer = client_.request("POST", events_path(ns), event.dump());
  }
  if (!answer.is_ok()) {
    if (options_.log)
      options_.log("cannot record event " + record.reason + " about " + record.object.kind + " " +
                   ns + "/" + record.object.name + ": " + answer.status().message());
    return count(&EventRecorder::failed_);
  }
  const json stored = json::parse(answer->body, nullptr, false);
  if (stored.is_object()) correlator_.update_state(stored);
  count(&EventRecorder::written_);
}

}  // namespace tessera::kube

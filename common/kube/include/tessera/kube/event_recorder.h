// Kubernetes Events (core/v1, what `kubectl describe` shows) about any object, recorded as
// client-go's tools/record does it: record() only queues (bounded, never waits on the network),
// and one writer thread correlates each event and writes it through a KubeClient.
//
// The correlation is client-go's EventCorrelator (k8s.io/client-go/tools/record/events_cache.go),
// with its defaults:
// - Counting: an event equal to one written before (same source, object, type, reason and
//   message) is a PATCH of that Event - count + 1, lastTimestamp, message - not a new Event; when
//   the PATCH answers 404 (the Event expired, 1 h by default) it is created again.
// - Aggregation: more than `aggregate_max_events` - 1 events of one object, type and reason that
//   differ only by message within `aggregate_interval` become one Event whose message is
//   "(combined from similar events): <the latest message>", counted from then on.
// - Spam filter: a token bucket per source and object, `spam_burst` events, refilled at
//   `spam_qps` (25, one per 5 minutes): an event beyond it is dropped (counted in rate_limited()).
// Every cache holds at most `cache_size` keys, the least recently used dropped first.
//
// The Event is what client-go's recorder makes: name "<object name>.<hex unix nanoseconds>" (one
// nanosecond later than the last name given when the clock has not moved: an injected clock
// does not make two Events one name), the object's namespace ("default" for a cluster-scoped
// object), source.component and reportingComponent the component, source.host and
// reportingInstance the host, firstTimestamp = lastTimestamp = the time recorded, count 1.
// A write that fails is logged and counted (failed()); a full queue drops the event (dropped()).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/kube/kube_client.h"

namespace tessera::kube {

// core/v1 ObjectReference: what an Event is about.
struct ObjectReference {
  std::string api_version;     // "v1" for a Pod or a Node
  std::string kind;            // "Pod", "Node", "ResourceClaim"
  std::string namespace_name;  // "" for a cluster-scoped object
  std::string name;
  std::string uid;
  std::string field_path;
  nlohmann::json to_json() const;
};

inline constexpr char kEventTypeNormal[] = "Normal";
inline constexpr char kEventTypeWarning[] = "Warning";

using WallTime = std::chrono::system_clock::time_point;

struct EventRecorderOptions {
  std::string component;  // source.component, reportingComponent ("tessera-node-agent")
  std::string host;       // source.host, reportingInstance (the node's name)
  // Wall time of the events and of the correlator's windows; tests inject one. Null: the system's.
  std::function<WallTime()> now;
  std::size_t queue_capacity = 1000;
  std::size_t cache_size = 4096;
  int spam_burst = 25;
  double spam_qps = 1.0 / 300.0;
  std::size_t aggregate_max_events = 10;
  std::chrono::seconds aggregate_interval{600};
  // Where a failed write is said; null: nowhere (the counters still count it).
  std::function<void(const std::string&)> log;
};

// One Event as client-go's recorder makes it, before correlation.
struct EventRecord {
  ObjectReference object;
  std::string type;  // kEventTypeNormal or kEventTypeWarning
  std::string reason;
  std::string message;
  WallTime at;
};

// What the correlator decides about one event.
struct CorrelatedEvent {
  bool skip = false;     // dropped by the spam filter
  nlohmann::json event;  // the core/v1 Event to create (count 1) or, with a patch, to update
  nlohmann::json patch;  // null: create; else the strategic merge patch of `event`'s Event
};

// client-go's EventCorrelator (see above), pure: the clock is `options.now`, no I/O.
class EventCorrelator {
 public:
  explicit EventCorrelator(const EventRecorderOptions& options);
  CorrelatedEvent correlate(const EventRecord& record);
  // What the server answered for a write (its name, resourceVersion, count, firstTimestamp): the
  // next equal event patches that Event.
  void update_state(const nlohmann::json& stored);

 private:
  template <typename Value>
  class Lru {
   public:
    explicit Lru(std::size_t capacity) : capacity_(capacity) {}
    Value* get(const std::string& key);
    void put(const std::string& key, Value value);

   private:
    std::size_t capacity_;
    std::list<std::pair<std::string, Value>> order_;  // most recent first
    std::unordered_map<std::string, typename decltype(order_)::iterator> index_;
  };
  struct Bucket {
    double tokens = 0;
    WallTime last;
  };
  struct Aggregate {
    std::vector<std::string> local_keys;  // a set: each message once
    WallTime last;
  };
  struct Observed {
    int64_t count = 0;
    std::string first_timestamp;
    std::string name;
    std::string resource_version;
  };
  WallTime now() const;
  std::string unique_name(const std::string& object_name, WallTime at);

  EventRecorderOptions options_;
  Lru<Bucket> spam_;
  Lru<Aggregate> aggregates_;
  Lru<Observed> observed_;
  int64_t last_name_nanos_ = 0;
};

class EventRecorder {
 public:
  // `client` outlives the recorder. The writer thread starts here.
  EventRecorder(KubeClient& client, EventRecorderOptions options);
  ~EventRecorder();  // the write under way finishes; what is still queued is dropped
  EventRecorder(const EventRecorder&) = delete;
  EventRecorder& operator=(const EventRecorder&) = delete;

  // Queues an Event about `object` stamped now; never waits on the API server. False (and
  // dropped() + 1) when the queue is full.
  bool record(const ObjectReference& object, const std::string& type, const std::string& reason,
              const std::string& message);

  // Waits until everything queued so far is written or given up (tests, shutdown).
  void flush();

  uint64_t dropped() const;       // the queue was full
  uint64_t rate_limited() const;  // the spam filter refused them
  uint64_t written() const;       // created or patched
  uint64_t failed() const;        // the API server refused or could not be reached

 private:
  void run();
  void write(const EventRecord& record);

  KubeClient& client_;
  EventRecorderOptions options_;
  EventCorrelator correlator_;  // the writer thread's only
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<EventRecord> queue_;
  bool busy_ = false;
  bool stopping_ = false;
  uint64_t dropped_ = 0, rate_limited_ = 0, written_ = 0, failed_ = 0;
  std::thread writer_;
};

// "/api/v1/namespaces/<namespace>/events" and ".../<name>".
std::string events_path(const std::string& namespace_name);
std::string event_path(const std::string& namespace_name, const std::string& name);
// metav1.Time as JSON writes it: RFC 3339, UTC, whole seconds.
std::string kube_time(WallTime at);

}  // namespace tessera::kube

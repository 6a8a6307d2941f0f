#include "tessera/node_events/snapshot_events.h"

#include <cstdio>
#include <map>
#include <string>

namespace tessera::node_events {

namespace v1 = tessera::node::v1;

namespace {

std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", seconds);
  return text;
}

// "tenants/alpha" for a claim's share, "share run-1234" for a local one.
std::string share_label(const v1::Share& share) {
  if (!share.claim().empty()) return share.namespace_() + "/" + share.claim();
  return "share " + share.name();
}

// "share X of tenants/alpha", or "share X" for a local one.
std::string share_title(const v1::Share& share) {
  if (share.claim().empty()) return "share " + share.name();
  return "share " + share.name() + " of " + share.namespace_() + "/" + share.claim();
}

std::string devices_text(const v1::Share& share) {
  std::string text;
  for (const v1::ShareDevice& device : share.devices()) {
    if (!text.empty()) text += ", ";
    text += device.gpu_uuid();
  }
  return text;
}

v1::Event share_event(const v1::Share& share, v1::Event::Kind kind, int64_t unix_ms) {
  v1::Event event;
  event.set_kind(kind);
  event.set_unix_ms(unix_ms);
  describe_share(share, event);
  if (share.devices_size() == 1) event.set_gpu_uuid(share.devices(0).gpu_uuid());
  return event;
}

}  // namespace

void describe_share(const v1::Share& share, v1::Event& event) {
  event.set_share(share.name());
  event.set_namespace_(share.namespace_());
  event.set_claim(share.claim());
  event.set_pod(share.pod());
}

const char* event_kind_name(v1::Event::Kind kind) {
  switch (kind) {
    case v1::Event::PREPARED:
      return "prepared";
    case v1::Event::UNPREPARED:
      return "unprepared";
    case v1::Event::ALLOCATION_DENIED:
      return "allocation_denied";
    case v1::Event::THROTTLED:
      return "throttled";
    case v1::Event::FINDING:
      return "finding";
    case v1::Event::HEALTH_CHANGED:
      return "health_changed";
    case v1::Event::EVENTS_MISSED:
      return "events_missed";
    default:
      return "unknown";
  }
}

std::vector<v1::Event> snapshot_events(const v1::ListSharesResponse& before,
                                       const v1::ListSharesResponse& after) {
  std::vector<v1::Event> events;
  const int64_t now = after.sampled_unix_ms();

  std::map<std::string, const v1::Gpu*> gpus_before;
  for (const v1::Gpu& gpu : before.gpus()) gpus_before[gpu.uuid()] = &gpu;
  for (const v1::Gpu& gpu : after.gpus()) {
    const auto old = gpus_before.find(gpu.uuid());
    // A GPU newly listed is not a change of health; one whose health or reason moved is.
    if (old == gpus_before.end()) continue;
    if (old->second->healthy() == gpu.healthy() &&
        old->second->health_reason() == gpu.health_reason())
      continue;
    v1::Event event;
    event.set_kind(v1::Event::HEALTH_CHANGED);
    event.set_unix_ms(now);
    event.set_gpu_uuid(gpu.uuid());
    const char* state = gpu.healthy() ? "healthy" : "unhealthy";
    event.set_message("GPU " + std::to_string(gpu.index()) + " (" + gpu.uuid() + ") is " + state +
                      (gpu.health_reason().empty() ? "" : ": " + gpu.health_reason()));
    (*event.mutable_fields())["healthy"] = gpu.healthy() ? "true" : "false";
    (*event.mutable_fields())["reason"] = gpu.health_reason();
    (*event.mutable_fields())["was_healthy"] = old->second->healthy() ? "true" : "false";
    events.push_back(std::move(event));
  }

  std::map<std::string, const v1::Share*> shares_after;
  for (const v1::Share& share : after.shares()) shares_after[share.name()] = &share;
  std::map<std::string, const v1::Share*> shares_before;
  for (const v1::Share& share : before.shares()) {
    shares_before[share.name()] = &share;
    if (shares_after.count(share.name())) continue;
    v1::Event event = share_event(share, v1::Event::UNPREPARED, now);
    event.set_message(share_title(share) + " is gone");
    events.push_back(std::move(event));
  }

  for (const v1::Share& share : after.shares()) {
    const auto old = shares_before.find(share.name());
    if (old == shares_before.end()) {
      v1::Event event = share_event(share, v1::Event::PREPARED, now);
      event.set_message(share_title(share) + " prepared on " + devices_text(share) +
                        (share.backend().empty() ? "" : " (" + share.backend() + ")"));
      (*event.mutable_fields())["backend"] = share.backend();
      events.push_back(std::move(event));
      continue;
    }
    const v1::Share& was = *old->second;
    // A share whose folder could not be read (now, or the time before) has unknown counters, not
    // 0: a diff against them would report everything since the share began as new. What happens
    // while it cannot be read is counted from its next readable figures on.
    if (!share.read_error().empty() || !was.read_error().empty()) continue;
    const uint64_t denied = share.allocations_denied() >= was.allocations_denied()
                                ? share.allocations_denied() - was.allocations_denied()
                                : share.allocations_denied();
    if (denied > 0) {
      v1::Event event = share_event(share, v1::Event::ALLOCATION_DENIED, now);
      event.set_message(std::to_string(denied) + " allocation" + (denied == 1 ? "" : "s") + " of " +
                        share_label(share) + " denied (over its memory limit)");
      (*event.mutable_fields())["denied"] = std::to_string(denied);
      (*event.mutable_fields())["total"] = std::to_string(share.allocations_denied());
      events.push_back(std::move(event));
    }
    const double throttled = share.throttled_seconds() >= was.throttled_seconds()
                                 ? share.throttled_seconds() - was.throttled_seconds()
                                 : share.throttled_seconds();
    if (throttled > 0) {
      v1::Event event = share_event(share, v1::Event::THROTTLED, now);
      event.set_message("launches of " + share_label(share) + " waited " + seconds_text(throttled) +
                        " s at the compute gate");
      (*event.mutable_fields())["throttled_seconds"] = seconds_text(throttled);
      (*event.mutable_fields())["total_seconds"] = seconds_text(share.throttled_seconds());
      events.push_back(std::move(event));
    }
  }
  return events;
}

}  // namespace tessera::node_events

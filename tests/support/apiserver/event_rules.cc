#include "apiserver/event_rules.h"

#include <vector>

namespace tessera::agent::testing::apiserver {

using nlohmann::json;

namespace {

constexpr size_t kReportingInstanceLengthLimit = 128;
constexpr size_t kActionLengthLimit = 128;
constexpr size_t kReasonLengthLimit = 128;
constexpr size_t kNoteLengthLimit = 1024;

FieldError invalid(const std::string& path, const std::string& value, const std::string& detail) {
  return {"FieldValueInvalid", path, go_quote(value), detail};
}
FieldError required(const std::string& path) {
  return {"FieldValueRequired", path, std::nullopt, ""};
}

std::string text(const json& object, const char* name) {
  if (!object.is_object()) return "";
  const auto it = object.find(name);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

const json& member(const json& object, const char* name) {
  static const json null;
  if (!object.is_object()) return null;
  const auto it = object.find(name);
  return it == object.end() ? null : *it;
}

// A metav1.Time or MicroTime that is not the zero time: present and not null.
bool time_set(const json& event, const char* name) {
  const json& value = member(event, name);
  return !value.is_null() && !(value.is_string() && value.get<std::string>().empty());
}

std::string event_namespace(const json& event) {
  return text(member(event, "metadata"), "namespace");
}

ErrorList legacy_validate_event(const json& event) {
  ErrorList errors;
  const std::string ns = event_namespace(event);
  const std::string involved_ns = text(member(event, "involvedObject"), "namespace");
  if (!time_set(event, "eventTime")) {
    // Old-style events: the event's namespace and the object's agree.
    if (involved_ns.empty()) {
      if (!ns.empty() && ns != "default")
        errors.push_back(
            invalid("involvedObject.namespace", involved_ns, "does not match event.namespace"));
    } else if (ns != involved_ns) {
      errors.push_back(
          invalid("involvedObject.namespace", involved_ns, "does not match event.namespace"));
    }
  } else {
    if (involved_ns.empty() && ns != "default" && ns != "kube-system")
      errors.push_back(
          invalid("involvedObject.namespace", involved_ns, "does not match event.namespace"));
    const std::string controller = text(event, "reportingComponent");
    if (controller.empty()) errors.push_back(required("reportingController"));
    for (const std::string& message : is_label_key(controller))  // IsQualifiedName
      errors.push_back(invalid("reportingController", controller, message));
    const std::string instance = text(event, "reportingInstance");
    if (instance.empty()) errors.push_back(required("reportingInstance"));
    if (instance.size() > kReportingInstanceLengthLimit)
      errors.push_back(invalid("reportingInstance", "", "can have at most 128 characters"));
    const std::string action = text(event, "action");
    if (action.empty()) errors.push_back(required("action"));
    if (action.size() > kActionLengthLimit)
      errors.push_back(invalid("action", "", "can have at most 128 characters"));
    const std::string reason = text(event, "reason");
    if (reason.empty()) errors.push_back(required("reason"));
    if (reason.size() > kReasonLengthLimit)
      errors.push_back(invalid("reason", "", "can have at most 128 characters"));
    if (text(event, "message").size() > kNoteLengthLimit)
      errors.push_back(invalid("message", "", "can have at most 1024 characters"));
  }
  for (const std::string& message : is_dns1123_subdomain(ns))
    errors.push_back(invalid("namespace", ns, message));
  return errors;
}

ErrorList validate_series(const json& event) {
  ErrorList errors;
  const json& series = member(event, "series");
  if (series.is_null()) return errors;
  const json& count = member(series, "count");
  if (!count.is_number_integer() || count.get<int64_t>() < 2)
    errors.push_back(invalid("series.count", "", "should be at least 2"));
  if (!time_set(series, "lastObservedTime")) errors.push_back(required("series.lastObservedTime"));
  return errors;
}

bool legacy_only(const std::string& request_version) {
  return request_version == kCoreV1 || request_version == kEventsV1beta1;
}

void append(ErrorList& to, const ErrorList& from) {
  to.insert(to.end(), from.begin(), from.end());
}

// ValidateImmutableField: the new value printed (a string quoted, a number as is, an object as
// its JSON where Go prints %#v).
void immutable(ErrorList& errors, const json& event, const json& old, const char* name) {
  const json& now = member(event, name);
  if (now == member(old, name)) return;
  std::string printed = now.is_string() ? go_quote(now.get<std::string>()) : now.dump();
  errors.push_back({"FieldValueInvalid", name, printed, "field is immutable"});
}

}  // namespace

ErrorList validate_event_create(const json& event, const std::string& request_version) {
  ErrorList errors = legacy_validate_event(event);
  if (legacy_only(request_version)) return errors;
  const std::string name = text(member(event, "metadata"), "name");
  if (name.empty() && text(member(event, "metadata"), "generateName").empty())
    errors.push_back(
        {"FieldValueRequired", "metadata.name", std::nullopt, "name or generateName is required"});
  for (const std::string& message : is_dns1123_subdomain(name))
    if (!name.empty()) errors.push_back(invalid("metadata.name", name, message));
  append(errors, validate_series(event));
  if (!time_set(event, "eventTime")) errors.push_back(required("eventTime"));
  const std::string type = text(event, "type");
  if (type != "Normal" && type != "Warning")
    errors.push_back(invalid("type", "", "has invalid value: " + type));
  if (time_set(event, "firstTimestamp"))
    errors.push_back(invalid("firstTimestamp", "", "needs to be unset"));
  if (time_set(event, "lastTimestamp"))
    errors.push_back(invalid("lastTimestamp", "", "needs to be unset"));
  const json& count = member(event, "count");
  if (count.is_number() && count.get<int64_t>() != 0)
    errors.push_back(invalid("count", "", "needs to be unset"));
  const json& source = member(event, "source");
  if (!text(source, "component").empty() || !text(source, "host").empty())
    errors.push_back(invalid("source", "", "needs to be unset"));
  return errors;
}

ErrorList validate_event_update(const json& event, const json& old,
                                const std::string& request_version) {
  ErrorList errors = legacy_validate_event(event);
  if (legacy_only(request_version)) return errors;
  const json& meta = member(event, "metadata");
  const json& old_meta = member(old, "metadata");
  for (const char* field : {"name", "namespace", "uid", "creationTimestamp"})
    if (member(meta, field) != member(old_meta, field))
      errors.push_back(
          invalid(std::string("metadata.") + field, text(meta, field), "field is immutable"));
  if (member(event, "series") != member(old, "series")) append(errors, validate_series(event));
  for (const char* field : {"involvedObject", "reason", "message", "source", "firstTimestamp",
                            "lastTimestamp", "count", "reason", "type", "eventTime", "action",
                            "related", "reportingComponent", "reportingInstance"})
    immutable(errors, event, old, field);
  return errors;
}

ErrorList validate_event_meta(const json& event) {
  ErrorList errors;
  const json& meta = member(event, "metadata");
  const std::string name = text(meta, "name");
  if (name.empty()) {
    if (text(meta, "generateName").empty())
      errors.push_back({"FieldValueRequired", "metadata.name", std::nullopt,
                        "name or generateName is required"});
  } else if (name == "." || name == "..") {
    errors.push_back(invalid("metadata.name", name, "may not be '" + name + "'"));
  } else {
    for (const char* illegal : {"/", "%"})
      if (name.find(illegal) != std::string::npos)
        errors.push_back(
            invalid("metadata.name", name, std::string("may not contain '") + illegal + "'"));
  }
  const std::string ns = text(meta, "namespace");
  if (ns.empty()) {
    errors.push_back(required("metadata.namespace"));
  } else {
    for (const std::string& message : is_dns1123_label(ns))  // ValidateNamespaceName
      errors.push_back(invalid("metadata.namespace", ns, message));
  }
  return errors;
}

std::optional<Refusal> check_event_write(const json& event, const json* old,
                                         const std::string& request_namespace) {
  auto status = [](int code, const std::string& reason, const std::string& message) {
    return json{{"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", json::object()},
                {"status", "Failure"}, {"message", message}, {"reason", reason},
                {"code", code}};
  };
  if (!event.is_object() || !member(event, "metadata").is_object())
    return Refusal{400, status(400, "BadRequest", "the request body is not an Event")};
  const std::string ns = event_namespace(event);
  if (!ns.empty() && ns != request_namespace)
    return Refusal{400, status(400, "BadRequest",
                               "the namespace of the provided object does not match the "
                               "namespace sent on the request")};
  const std::string name = text(member(event, "metadata"), "name");
  auto refuse = [&](const ErrorList& errors) -> std::optional<Refusal> {
    if (errors.empty()) return std::nullopt;
    json causes = json::array();
    for (const FieldError& error : errors)
      causes.push_back({{"reason", error.type}, {"message", error.body()}, {"field", error.field}});
    json body =
        status(422, "Invalid", "Event " + go_quote(name) + " is invalid: " + aggregate(errors));
    body["details"] = {{"name", name}, {"kind", "Event"}, {"causes", causes}};
    return Refusal{422, body};
  };
  // The strategy's validation first, then the generic metadata's (BeforeCreate, BeforeUpdate).
  if (auto refused = refuse(old ? validate_event_update(event, *old, kCoreV1)
                                : validate_event_create(event, kCoreV1)))
    return refused;
  return refuse(validate_event_meta(event));
}

}  // namespace tessera::agent::testing::apiserver

#include "apiserver/event_rules.h"

namespace tessera::agent::testing::apiserver {
namespace {

using nlohmann::json;

// Go's %q for the plain ASCII these fields hold.
std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string text_at(const json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

json failure(int code, const std::string& reason, const std::string& message) {
  return {{"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", json::object()},
          {"status", "Failure"}, {"message", message}, {"reason", reason},
          {"code", code}};
}

// legacyValidateEvent (events.go).
ErrorList legacy_validate_event(const json& event) {
  ErrorList errors;
  const json& metadata = event.value("metadata", json::object());
  const std::string ns = text_at(metadata, "namespace");
  const json involved = event.value("involvedObject", json::object());
  const std::string involved_ns = text_at(involved, "namespace");
  const bool has_event_time = !text_at(event, "eventTime").empty();
  auto mismatch = [&] {
    errors.push_back({"FieldValueInvalid", "involvedObject.namespace", quoted(involved_ns),
                      "does not match event.namespace"});
  };
  if (!has_event_time) {
    if (involved_ns.empty() ? ns != "" && ns != "default" : ns != involved_ns) mismatch();
  } else {
    if (involved_ns.empty() && ns != "default" && ns != "kube-system") mismatch();
    const std::string controller = text_at(event, "reportingComponent");
    if (controller.empty()) errors.push_back({"FieldValueRequired", "reportingController", {}, ""});
    for (const std::string& message : is_label_key(controller))
      errors.push_back({"FieldValueInvalid", "reportingController", quoted(controller), message});
    auto limited = [&](const char* key, const char* field, size_t limit, bool required) {
      const std::string value = text_at(event, key);
      if (required && value.empty()) errors.push_back({"FieldValueRequired", field, {}, ""});
      if (value.size() > limit)
        errors.push_back({"FieldValueInvalid", field, "\"\"",
                          "can have at most " + std::to_string(limit) + " characters"});
    };
    limited("reportingInstance", "reportingInstance", 128, true);
    limited("action", "action", 128, true);
    limited("reason", "reason", 128, true);
    limited("message", "message", 1024, false);
  }
  for (const std::string& message : is_dns1123_subdomain(ns))
    errors.push_back({"FieldValueInvalid", "namespace", quoted(ns), message});
  return errors;
}

// ValidateObjectMetaAccessor with ValidatePathSegmentName, namespace required.
ErrorList validate_object_meta(const json& metadata) {
  ErrorList errors;
  const std::string name = text_at(metadata, "name");
  if (name.empty()) {
    errors.push_back(
        {"FieldValueRequired", "metadata.name", {}, "name or generateName is required"});
  } else if (name == "." || name == "..") {
    errors.push_back(
        {"FieldValueInvalid", "metadata.name", quoted(name), "may not be '" + name + "'"});
  } else {
    for (const char* part : {"/", "%"})
      if (name.find(part) != std::string::npos)
        errors.push_back({"FieldValueInvalid", "metadata.name", quoted(name),
                          std::string("may not contain '") + part + "'"});
  }
  if (text_at(metadata, "namespace").empty())
    errors.push_back({"FieldValueRequired", "metadata.namespace", {}, ""});
  return errors;
}

}  // namespace

std::optional<Refusal> check_event_create(json& event, const std::string& path_namespace) {
  if (!event.is_object() || !event.contains("metadata") || !event["metadata"].is_object())
    event["metadata"] = json::object();
  json& metadata = event["metadata"];
  const std::string given = text_at(metadata, "namespace");
  if (!given.empty() && given != path_namespace)
    return Refusal{400, failure(400, "BadRequest",
                                "the namespace of the provided object does not match the "
                                "namespace sent on the request")};
  metadata["namespace"] = path_namespace;
  if (text_at(metadata, "name").empty() && !text_at(metadata, "generateName").empty())
    metadata["name"] = text_at(metadata, "generateName") + "tst00";
  ErrorList errors = legacy_validate_event(event);
  if (errors.empty()) errors = validate_object_meta(metadata);
  if (errors.empty()) return std::nullopt;
  const std::string name = text_at(metadata, "name");
  json causes = json::array();
  for (const auto& error : errors)
    causes.push_back({{"reason", error.type}, {"message", error.body()}, {"field", error.field}});
  json body =
      failure(422, "Invalid", "Event " + quoted(name) + " is invalid: " + aggregate(errors));
  body["details"] = {{"name", name}, {"kind", "Event"}, {"causes", causes}};
  return Refusal{422, body};
}

}  // namespace tessera::agent::testing::apiserver

#include "apiserver/apiserver_rules.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdio>
#include <ctime>
#include <map>
#include <regex>
#include <set>

#include "tessera/quantity.h"

namespace tessera::agent::testing::apiserver {

using nlohmann::json;

// --- field.Error constructors (field/errors.go) ---------------------------------------------

std::string go_quote(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char hex[5];
          std::snprintf(hex, sizeof hex, "\\x%02x", c);
          out += hex;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

namespace {

std::string child(const std::string& path, const std::string& name) {
  return path.empty() ? name : path + "." + name;
}
std::string index(const std::string& path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}
std::string key(const std::string& path, const std::string& k) {
  return path + "[" + k + "]";
}

FieldError invalid(const std::string& path, const std::string& value, const std::string& detail) {
  return {"FieldValueInvalid", path, go_quote(value), detail};
}
FieldError invalid_number(const std::string& path, int64_t value, const std::string& detail) {
  return {"FieldValueInvalid", path, std::to_string(value), detail};
}
FieldError invalid_bool(const std::string& path, bool value, const std::string& detail) {
  return {"FieldValueInvalid", path, value ? "true" : "false", detail};
}
FieldError invalid_null(const std::string& path, const std::string& detail) {
  return {"FieldValueInvalid", path, "null", detail};
}
FieldError required(const std::string& path, const std::string& detail) {
  return {"FieldValueRequired", path, std::nullopt, detail};
}
FieldError forbidden(const std::string& path, const std::string& detail) {
  return {"FieldValueForbidden", path, std::nullopt, detail};
}
FieldError too_long(const std::string& path, int max_length) {
  return {"FieldValueTooLong", path, std::nullopt,
          "may not be more than " + std::to_string(max_length) + " bytes"};
}
FieldError too_many(const std::string& path, size_t actual, int max) {
  return {"FieldValueTooMany", path, std::to_string(actual),
          "must have at most " + std::to_string(max) + " items"};
}
FieldError duplicate(const std::string& path, const std::string& value) {
  return {"FieldValueDuplicate", path, go_quote(value), ""};
}
FieldError not_supported(const std::string& path, const std::string& value,
                         const std::vector<std::string>& supported) {
  std::string detail = "supported values: ";
  for (size_t i = 0; i < supported.size(); ++i) detail += (i ? ", " : "") + go_quote(supported[i]);
  return {"FieldValueNotSupported", path, go_quote(value), detail};
}

std::string type_text(const std::string& type) {
  static const std::map<std::string, std::string> text = {
      {"FieldValueNotFound", "Not found"},
      {"FieldValueRequired", "Required value"},
      {"FieldValueDuplicate", "Duplicate value"},
      {"FieldValueInvalid", "Invalid value"},
      {"FieldValueNotSupported", "Unsupported value"},
      {"FieldValueForbidden", "Forbidden"},
      {"FieldValueTooLong", "Too long"},
      {"FieldValueTooMany", "Too many"},
      {"InternalError", "Internal error"}};
  return text.at(type);
}

void append(ErrorList& to, const ErrorList& from) {
  to.insert(to.end(), from.begin(), from.end());
}

// --- name rules (util/validation, api/validate/content) -------------------------------------

const std::string kDns1123LabelFmt = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const std::string kDns1123SubdomainFmt = kDns1123LabelFmt + "(\\." + kDns1123LabelFmt + ")*";
const std::string kLabelKeyFmt = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const std::string kLabelValueFmt = "(" + kLabelKeyFmt + ")?";
const std::string kCIdentifierFmt = "[A-Za-z_][A-Za-z0-9_]*";

bool matches(const std::string& value, const std::string& format) {
  return std::regex_match(value, std::regex(format));
}

// util/validation MaxLenError (DNS names) and content.MaxLenError (label keys and values).
std::string max_len_characters(int length) {
  return "must be no more than " + std::to_string(length) + " characters";
}
std::string max_len_bytes(int length) {
  return "must be no more than " + std::to_string(length) + " bytes";
}

std::string regex_error(const std::string& message, const std::string& format,
                        const std::vector<std::string>& examples) {
  if (examples.empty()) return message + " (regex used for validation is '" + format + "')";
  std::string out = message + " (e.g. ";
  for (size_t i = 0; i < examples.size(); ++i)
    out += (i ? " or " : "") + ("'" + examples[i] + "', ");
  return out + "regex used for validation is '" + format + "')";
}

const std::string kDns1123LabelErrMsg =
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character";
const std::string kDns1123SubdomainErrMsg =
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character";
const std::string kLabelKeyErrMsg =
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character";
const std::string kLabelValueErrMsg =
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character";
const std::string kCIdentifierErrMsg =
    "a valid C identifier must start with alphabetic character or '_', followed by a string of "
    "alphanumeric characters or '_'";

// content.IsDNS1123Subdomain (the prefix of a label key): the same rule, content's length message.
std::vector<std::string> content_dns1123_subdomain(const std::string& value) {
  std::vector<std::string> errors;
  if (value.size() > 253) errors.push_back(max_len_bytes(253));
  if (!matches(value, kDns1123SubdomainFmt))
    errors.push_back(regex_error(kDns1123SubdomainErrMsg, kDns1123SubdomainFmt, {"example.com"}));
  return errors;
}

// --- quantities (api/resource) ----------------------------------------------------------------

// Go's ParseQuantity first checks this shape (ErrFormatWrong).
const char kQuantityFormatMessage[] =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

ErrorList validate_object_meta_name(const json& meta) {
  const std::string name = meta.value("name", "");
  if (name.empty()) return {required("metadata.name", "name or generateName is required")};
  ErrorList errors;
  for (const auto& message : is_dns1123_subdomain(name))
    errors.push_back(invalid("metadata.name", name, message));
  return errors;
}

// ValidateCSIDriverName (validateDriverName; also the domain of a qualified name).
ErrorList validate_driver_name(const std::string& name, const std::string& path) {
  ErrorList errors;
  if (name.empty()) errors.push_back(required(path, ""));
  if (name.size() > 63) errors.push_back(too_long(path, 63));
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const auto& message : is_dns1123_subdomain(lower))
    errors.push_back(invalid(path, name, message));
  return errors;
}

ErrorList validate_dns1123_label(const std::string& value, const std::string& path) {
  ErrorList errors;
  for (const auto& message : is_dns1123_label(value))
    errors.push_back(invalid(path, value, message));
  return errors;
}

ErrorList validate_dns1123_subdomain(const std::string& value, const std::string& path) {
  ErrorList errors;
  for (const auto& message : is_dns1123_subdomain(value))
    errors.push_back(invalid(path, value, message));
  return errors;
}

ErrorList validate_pool_name(const std::string& name, const std::string& path) {
  if (name.empty()) return {required(path, "")};
  ErrorList errors;
  if (name.size() > 253) errors.push_back(too_long(path, 253));
  size_t start = 0;
  while (true) {  // strings.Split(name, "/"): every part, empty ones too
    const size_t slash = name.find('/', start);
    append(errors, validate_dns1123_subdomain(name.substr(start, slash - start), path));
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return errors;
}

ErrorList validate_c_identifier(const std::string& id, const std::string& path) {
  ErrorList errors;
  if (id.size() > 32) errors.push_back(too_long(path, 32));
  for (const auto& message : is_c_identifier(id)) errors.push_back(invalid(path, id, message));
  return errors;
}

ErrorList validate_qualified_name(const std::string& name, const std::string& path) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t slash = name.find('/', start);
    parts.push_back(name.substr(start, slash - start));
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  ErrorList errors;
  if (parts.size() == 1) {
    append(errors, validate_c_identifier(parts[0], path));
  } else if (parts.size() == 2) {
    if (parts[0].empty())
      errors.push_back(invalid(path, "", "the domain must not be empty"));
    else
      append(errors, validate_driver_name(parts[0], path));
    if (parts[1].empty())
      errors.push_back(invalid(path, "", "the name must not be empty"));
    else
      append(errors, validate_c_identifier(parts[1], path));
  } else {
    errors.push_back(invalid(path, name, "must not contain more than one slash"));
  }
  return errors;
}

// validateMap's key path: keys longer than the limit are shortened in the middle.
std::string truncate_if_too_long(const std::string& text, size_t max_length) {
  if (max_length < 16) max_length = 16;
  if (text.size() <= max_length) return text;
  const std::string ellipsis = "...";
  const size_t remaining = max_length - ellipsis.size();
  return text.substr(0, (remaining + 1) / 2) + ellipsis + text.substr(text.size() - remaining / 2);
}
constexpr size_t kAttributeAndCapacityMaxKeyLength = 63 + 1 + 32;

const std::regex& semver() {
  static const std::string numeric = "(0|[1-9]\\d*)";
  static const std::string pre_release = "(0|[1-9]\\d*|\\d*[a-zA-Z-][0-9a-zA-Z-]*)";
  static const std::string build = "[0-9a-zA-Z-]+";
  static const std::regex re("^" + numeric + "\\." + numeric + "\\." + numeric + "(-" +
                             pre_release + "(\\." + pre_release + ")*)?" + "(\\+" + build + "(\\." +
                             build + ")*)?" + "$");
  return re;
}

ErrorList validate_string_value(const std::string& value, const std::string& path) {
  if (value.size() > 64) return {too_long(path, 64)};
  return {};
}

ErrorList validate_version_value(const std::string& value, const std::string& path) {
  ErrorList errors;
  if (!std::regex_match(value, semver()))
    errors.push_back(
        invalid(path, value, "must be a string compatible with semver.org spec 2.0.0"));
  if (value.size() > 64) errors.push_back(too_long(path, 64));
  return errors;
}

ErrorList validate_device_attribute(const json& attribute, const std::string& path) {
  ErrorList errors;
  int fields = 0;
  if (attribute.contains("bool")) ++fields;
  if (attribute.contains("int")) ++fields;
  if (attribute.contains("string")) {
    ++fields;
    append(errors,
           validate_string_value(attribute["string"].get<std::string>(), child(path, "string")));
  }
  if (attribute.contains("version")) {
    ++fields;
    append(errors,
           validate_version_value(attribute["version"].get<std::string>(), child(path, "version")));
  }
  for (const char* list : {"bools", "ints", "strings", "versions"}) {
    if (!attribute.contains(list)) continue;
    ++fields;
    const json& values = attribute[list];
    if (values.empty())
      errors.push_back(
          {"FieldValueInvalid", child(path, list), "[]", "must not be empty if specified"});
    for (size_t i = 0; i < values.size(); ++i) {
      if (std::string(list) == "strings")
        append(errors,
               validate_string_value(values[i].get<std::string>(), index(child(path, list), i)));
      if (std::string(list) == "versions")
        append(errors,
               validate_version_value(values[i].get<std::string>(), index(child(path, list), i)));
    }
  }
  if (fields == 0) errors.push_back(invalid(path, "", "exactly one value must be specified"));
  if (fields > 1)
    errors.push_back({"FieldValueInvalid", path, "resource.DeviceAttribute" + attribute.dump(),
                      "exactly one value must be specified"});
  return errors;
}

std::optional<Quantity> quantity_at(const json& object, const char* name) {
  if (!object.is_object() || !object.contains(name)) return std::nullopt;
  return parse_quantity(object[name]);
}

bool operator<(const Quantity& a, const Quantity& b) {
  return a.value < b.value;
}

// validateRequestPolicyRangeStep (integer path: DRAFractionalCapacityRange off).
ErrorList validate_range_step(const Quantity& value, const Quantity& min, const Quantity& step,
                              const std::string& path) {
  if ((value.value - min.value) % step.value != 0)
    return {invalid(
        path, value.str(),
        "value is not a multiple of a given step (" + step.str() + ") from (" + min.str() + ")")};
  return {};
}

ErrorList validate_request_policy_range(const Quantity& default_value, const Quantity& capacity,
                                        const json& range, const std::string& path) {
  ErrorList errors;
  const auto min = quantity_at(range, "min");
  if (!min) return {required(child(path, "min"), "required when validRange is defined")};
  if (capacity < *min)
    errors.push_back(invalid(child(path, "min"), min->str(),
                             "min is larger than capacity value: " + capacity.str()));
  if (default_value < *min)
    errors.push_back(invalid(child(path, "default"), default_value.str(),
                             "default is less than min: " + min->str()));
  const auto max = quantity_at(range, "max");
  if (max) {
    if (*max < *min)
      errors.push_back(
          invalid(child(path, "max"), min->str(), "min is larger than max: " + max->str()));
    if (capacity < *max)
      errors.push_back(invalid(child(path, "max"), max->str(),
                               "max is larger than capacity value: " + capacity.str()));
    if (*max < default_value)
      errors.push_back(invalid(child(path, "default"), default_value.str(),
                               "default is more than max: " + max->str()));
  }
  const auto step = quantity_at(range, "step");
  if (!step) return errors;
  if (step->value <= 0) {
    errors.push_back(invalid(child(path, "step"), step->str(), "must be greater than zero"));
    return errors;
  }
  Quantity added = *min;  // Quantity.Add keeps the receiver's format
  added.value += step->value;
  if (capacity < added)
    errors.push_back(
        invalid(child(path, "step"), step->str(),
                "one step " + added.str() + " is larger than capacity value: " + capacity.str()));
  // validateInt64Range: Value() is only meaningful in [0, MaxInt64].
  bool unsafe = false;
  for (const auto& [q, name] :
       {std::pair{std::optional(default_value), "default"}, std::pair{min, "min"},
        std::pair{max, "max"}, std::pair{step, "step"}}) {
    if (q && q->value < 0) {
      errors.push_back(invalid(child(path, name), q->str(), "must be greater than or equal to 0"));
      unsafe = true;
    }
  }
  if (unsafe) return errors;
  append(errors, validate_range_step(default_value, *min, *step, child(path, "step")));
  if (max) append(errors, validate_range_step(*max, *min, *step, child(path, "step")));
  return errors;
}

ErrorList validate_request_policy_valid_values(const Quantity& default_value,
                                               const Quantity& capacity, const json& values,
                                               const std::string& path) {
  ErrorList errors;
  std::vector<Quantity> options;
  for (const auto& value : values) options.push_back(*parse_quantity(value));
  for (size_t i = 0; i + 1 < options.size(); ++i)
    if (options[i + 1] < options[i])
      errors.push_back(invalid(index(path, i + 1), options[i + 1].str(),
                               "values must be sorted in ascending order"));
  bool found_default = false;
  if (options.size() > 10) {
    errors.push_back(too_many(path, options.size(), 10));  // validateSet short-circuits
  } else {
    std::set<int64_t> seen;
    for (size_t i = 0; i < options.size(); ++i) {
      if (capacity < options[i])
        errors.push_back(invalid(index(path, i), options[i].str(),
                                 "option is larger than capacity value: " + capacity.str()));
      if (options[i].value == default_value.value) found_default = true;
    }
    for (size_t i = 0; i < options.size(); ++i)  // quantityKeyInt: duplicates by integer value
      if (!seen.insert(options[i].value).second)
        errors.push_back(duplicate(index(path, i), std::to_string(options[i].value)));
  }
  if (!found_default)
    errors.push_back(invalid(path, default_value.str(),
                             "default value is not valid according to the requestPolicy"));
  return errors;
}

ErrorList validate_request_policy(const Quantity& capacity, const json& policy,
                                  const std::string& path) {
  const bool has_values = policy.contains("validValues") && !policy["validValues"].empty();
  const bool has_range = policy.contains("validRange") && !policy["validRange"].is_null();
  if (has_values && has_range)
    return {forbidden(path,
                      "exactly one policy can be specified, cannot specify \"validValues\" "
                      "and \"validRange\" at the same time")};
  const auto default_value = quantity_at(policy, "default");
  if (has_values) {
    if (!default_value)
      return {required(child(path, "default"), "required when validValues is defined")};
    return validate_request_policy_valid_values(*default_value, capacity, policy["validValues"],
                                                child(path, "validValues"));
  }
  if (has_range) {
    if (!default_value)
      return {required(child(path, "default"), "required when validRange is defined")};
    return validate_request_policy_range(*default_value, capacity, policy["validRange"],
                                         child(path, "validRange"));
  }
  return {};
}

ErrorList validate_device_taint(const json& taint, const std::string& path) {
  ErrorList errors;
  const std::string taint_key = taint.value("key", "");
  for (const auto& message : is_label_key(taint_key))
    errors.push_back(invalid(child(path, "key"), taint_key, message));
  const std::string value = taint.value("value", "");
  if (!value.empty())
    for (const auto& message : is_label_value(value))
      errors.push_back(invalid(child(path, "value"), value, message));
  const std::string effect = taint.value("effect", "");
  if (effect.empty())
    errors.push_back(required(child(path, "effect"), ""));
  else if (effect != "NoSchedule" && effect != "NoExecute" && effect != "None")
    errors.push_back(
        not_supported(child(path, "effect"), effect, {"NoExecute", "NoSchedule", "None"}));
  return errors;
}

// Semantic.DeepEqual of capacities: quantities compared by value.
json comparable(const json& node) {
  if (node.is_string()) {
    if (auto q = parse_quantity(node)) return q->value;
    return node;
  }
  if (node.is_object() || node.is_array()) {
    json copy = node;
    for (auto& item : copy) item = comparable(item);
    return copy;
  }
  return node;
}

const json* lookup_device(const json* old_spec, const std::string& name) {
  if (!old_spec || !old_spec->contains("devices")) return nullptr;
  for (const auto& device : (*old_spec)["devices"])
    if (device.value("name", "") == name) return &device;
  return nullptr;
}

// validateMap over counters (a CounterSet's or a DeviceCounterConsumption's): at most 32, the
// check short-circuiting; each key a DNS label, reported at the map's path (validateMap hands
// validateKey the map's path, not the key's); any value that parses is valid
// (validateDeviceCounter).
ErrorList validate_counters(const json& counters, const std::string& path) {
  if (counters.size() > 32) return {too_many(path, counters.size(), 32)};
  ErrorList errors;
  for (const auto& [name, counter] : counters.items())
    append(errors, validate_dns1123_label(name, path));
  return errors;
}

// validateCounterSet / validateDeviceCounterConsumption: a named (counterSet: referenced) set
// of counters, neither empty.
ErrorList validate_named_counters(const json& entry, const char* name_field,
                                  const std::string& path) {
  ErrorList errors;
  const std::string name = entry.value(name_field, "");
  if (name.empty())
    errors.push_back(required(child(path, name_field), ""));
  else
    append(errors, validate_dns1123_label(name, child(path, name_field)));
  const json counters = entry.value("counters", json::object());
  if (counters.empty())
    errors.push_back(required(child(path, "counters"), ""));
  else
    append(errors, validate_counters(counters, child(path, "counters")));
  return errors;
}

// validateSet of counter sets (at most 8 per slice) or of a device's counter consumptions (at
// most 2): the size check short-circuits; then each entry; then duplicates by name.
ErrorList validate_counter_list(const json& list, size_t max, const char* name_field,
                                const std::string& path) {
  if (list.size() > max) return {too_many(path, list.size(), static_cast<int>(max))};
  ErrorList errors;
  for (size_t i = 0; i < list.size(); ++i)
    append(errors, validate_named_counters(list[i], name_field, index(path, i)));
  std::set<std::string> names;
  for (size_t i = 0; i < list.size(); ++i)
    if (!names.insert(list[i].value(name_field, "")).second)
      errors.push_back(duplicate(index(path, i), list[i].value(name_field, "")));
  return errors;
}

ErrorList validate_device(const json& device, const json* old_device, const std::string& path,
                          bool per_device_node_selection) {
  ErrorList errors;
  const bool multiple = device.value("allowMultipleAllocations", false);
  append(errors, validate_dns1123_label(device.value("name", ""), child(path, "name")));
  const json attributes = device.value("attributes", json::object());
  const json capacity = device.value("capacity", json::object());
  const size_t total = attributes.size() + capacity.size();
  if (total > 32)
    errors.push_back(
        invalid_number(path, static_cast<int64_t>(total),
                       "the total number of attributes and capacities must not exceed 32"));
  for (const auto& [name, attribute] : attributes.items()) {
    append(errors, validate_qualified_name(name, child(path, "attributes")));
    append(errors,
           validate_device_attribute(
               attribute, key(child(path, "attributes"),
                              truncate_if_too_long(name, kAttributeAndCapacityMaxKeyLength))));
  }
  if (!old_device ||
      comparable(old_device->value("capacity", json::object())) != comparable(capacity)) {
    for (const auto& [name, entry] : capacity.items()) {
      append(errors, validate_qualified_name(name, child(path, "capacity")));
      const std::string entry_path = key(
          child(path, "capacity"), truncate_if_too_long(name, kAttributeAndCapacityMaxKeyLength));
      if (!entry.contains("requestPolicy") || entry["requestPolicy"].is_null()) continue;
      if (!multiple) {
        errors.push_back(
            forbidden(child(entry_path, "requestPolicy"), "allowMultipleAllocations must be true"));
        continue;
      }
      append(errors,
             validate_request_policy(*parse_quantity(entry["value"]), entry["requestPolicy"],
                                     child(entry_path, "requestPolicy")));
    }
  }
  const json taints = device.value("taints", json::array());
  if (!old_device || old_device->value("taints", json::array()) != taints) {
    if (taints.size() > 16) {
      errors.push_back(too_many(child(path, "taints"), taints.size(), 16));
    } else {
      for (size_t i = 0; i < taints.size(); ++i)
        append(errors, validate_device_taint(taints[i], index(child(path, "taints"), i)));
    }
  }
  append(errors, validate_counter_list(device.value("consumesCounters", json::array()), 2,
                                       "counterSet", child(path, "consumesCounters")));
  const bool any_node_selection =
      device.contains("nodeName") || device.contains("nodeSelector") || device.contains("allNodes");
  if (!per_device_node_selection && any_node_selection)
    errors.push_back(invalid_null(path,
                                  "`nodeName`, `nodeSelector` and `allNodes` can only be set if "
                                  "`perDeviceNodeSelection` is set to true in the ResourceSlice "
                                  "spec"));
  return errors;
}

bool uses_advanced_features(const json& devices) {
  for (const auto& device : devices) {
    if (!device.value("taints", json::array()).empty()) return true;
    if (!device.value("consumesCounters", json::array()).empty()) return true;
    const json attributes = device.value("attributes", json::object());
    for (const auto& [name, attribute] : attributes.items())
      for (const char* list : {"bools", "ints", "strings", "versions"})
        if (attribute.contains(list)) return true;
  }
  return false;
}

ErrorList validate_resource_slice_spec(const json& spec, const json* old_spec) {
  ErrorList errors;
  const std::string path = "spec";
  const std::string driver = spec.value("driver", "");
  append(errors, validate_driver_name(driver, child(path, "driver")));
  const json pool = spec.value("pool", json::object());
  append(errors, validate_pool_name(pool.value("name", ""), "spec.pool.name"));
  const int64_t slice_count = pool.value("resourceSliceCount", int64_t{0});
  if (slice_count <= 0)
    errors.push_back(
        invalid_number("spec.pool.resourceSliceCount", slice_count, "must be greater than zero"));
  const int64_t generation = pool.value("generation", int64_t{0});
  if (generation < 0)
    errors.push_back(invalid_number("spec.pool.generation", generation,
                                    "must be greater than or equal to zero"));
  if (old_spec) {  // ValidateImmutableField
    const json old_pool = old_spec->value("pool", json::object());
    if (pool.value("name", "") != old_pool.value("name", ""))
      errors.push_back(invalid("spec.pool.name", pool.value("name", ""), "field is immutable"));
    if (driver != old_spec->value("driver", ""))
      errors.push_back(invalid("spec.driver", driver, "field is immutable"));
    if (spec.value("nodeName", json()) != old_spec->value("nodeName", json()))
      errors.push_back(
          spec.contains("nodeName")
              ? invalid("spec.nodeName", spec["nodeName"].get<std::string>(), "field is immutable")
              : invalid_null("spec.nodeName", "field is immutable"));
  }

  std::vector<std::string> set_fields;
  if (spec.contains("nodeName") && !spec["nodeName"].is_null()) {
    const std::string node = spec["nodeName"].get<std::string>();
    if (!node.empty()) {
      set_fields.push_back("`nodeName`");
      for (const auto& message : is_dns1123_subdomain(node))  // ValidateNodeName
        errors.push_back(invalid("spec.nodeName", node, message));
    } else {
      errors.push_back(
          invalid("spec.nodeName", node, "must be either unset or set to a non-empty string"));
    }
  }
  if (spec.contains("nodeSelector") && !spec["nodeSelector"].is_null()) {
    set_fields.push_back("`nodeSelector`");
    if (spec["nodeSelector"].value("nodeSelectorTerms", json::array()).size() != 1)
      errors.push_back({"FieldValueInvalid", "spec.nodeSelector.nodeSelectorTerms",
                        spec["nodeSelector"].value("nodeSelectorTerms", json::array()).dump(),
                        "must have exactly one node selector term"});
  }
  for (const char* flag : {"allNodes", "perDeviceNodeSelection"}) {
    if (!spec.contains(flag) || spec[flag].is_null()) continue;
    if (spec[flag].get<bool>())
      set_fields.push_back(std::string("`") + flag + "`");
    else
      errors.push_back(
          invalid_bool(child(path, flag), false, "must be either unset or set to true"));
  }
  const std::string one_of =
      "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required";
  if (set_fields.empty()) {
    errors.push_back(required(path, one_of));
  } else if (set_fields.size() > 1) {
    std::string listed;
    for (size_t i = 0; i < set_fields.size(); ++i) listed += (i ? ", " : "") + set_fields[i];
    errors.push_back(invalid(path, "{" + listed + "}", one_of + ", but multiple fields are set"));
  }
  if (spec.contains("sharedCounters") && !spec["sharedCounters"].is_null() &&
      spec.contains("devices") && !spec["devices"].is_null())
    errors.push_back(invalid(path, "", "only one of `sharedCounters` or `devices` is allowed"));

  const json devices = spec.value("devices", json::array());
  const int max_devices = uses_advanced_features(devices) ? 64 : 128;
  const bool per_device = spec.value("perDeviceNodeSelection", false);
  if (devices.size() > static_cast<size_t>(max_devices)) {
    errors.push_back(too_many("spec.devices", devices.size(), max_devices));
  } else {
    std::set<std::string> names;
    for (size_t i = 0; i < devices.size(); ++i) {
      const std::string name = devices[i].value("name", "");
      append(errors, validate_device(devices[i], lookup_device(old_spec, name),
                                     index("spec.devices", i), per_device));
    }
    for (size_t i = 0; i < devices.size(); ++i)
      if (!names.insert(devices[i].value("name", "")).second)
        errors.push_back(duplicate(index("spec.devices", i), devices[i].value("name", "")));
  }
  append(errors, validate_counter_list(spec.value("sharedCounters", json::array()), 8, "name",
                                       "spec.sharedCounters"));
  return errors;
}

// Every quantity the slice carries: the places json decoding would refuse one.
std::optional<std::string> undecodable_quantity(const json& slice) {
  auto check = [](const json& value) -> std::optional<std::string> {
    if (parse_quantity(value)) return std::nullopt;
    const std::string text = value.is_string() ? value.get<std::string>() : value.dump();
    static const std::regex shape("^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$");
    if (!std::regex_match(text, shape)) return std::string(kQuantityFormatMessage);
    return "fake API server: the quantity " + go_quote(text) +
           " is not a whole number this port models";
  };
  const json spec = slice.value("spec", json::object());
  const auto check_counters = [&](const json& sets) -> std::optional<std::string> {
    for (const auto& set : sets) {
      const json counters = set.value("counters", json::object());
      for (const auto& [name, counter] : counters.items())
        if (counter.contains("value"))
          if (auto e = check(counter["value"])) return e;
    }
    return std::nullopt;
  };
  if (auto e = check_counters(spec.value("sharedCounters", json::array()))) return e;
  const json devices = spec.value("devices", json::array());
  for (const auto& device : devices) {
    if (auto e = check_counters(device.value("consumesCounters", json::array()))) return e;
    const json capacity = device.value("capacity", json::object());
    for (const auto& [name, entry] : capacity.items()) {
      if (!entry.contains("value")) return std::string("capacity ") + name + ": no value";
      if (auto e = check(entry["value"])) return e;
      const json policy = entry.value("requestPolicy", json::object());
      if (policy.is_null()) continue;
      if (policy.contains("default"))
        if (auto e = check(policy["default"])) return e;
      for (const auto& value : policy.value("validValues", json::array()))
        if (auto e = check(value)) return e;
      const json range = policy.value("validRange", json::object());
      if (range.is_object())
        for (const char* bound : {"min", "max", "step"})
          if (range.contains(bound))
            if (auto e = check(range[bound])) return e;
    }
  }
  return std::nullopt;
}

// A taint's timeAdded decodes as a metav1.Time: an RFC 3339 string (or null).
std::optional<std::string> undecodable_time(const json& slice) {
  static const std::regex rfc3339(
      R"(^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$)");
  const json devices = slice.value("spec", json::object()).value("devices", json::array());
  for (const auto& device : devices)
    for (const auto& taint : device.value("taints", json::array())) {
      if (!taint.contains("timeAdded") || taint["timeAdded"].is_null()) continue;
      const json& time = taint["timeAdded"];
      if (!time.is_string() || !std::regex_match(time.get<std::string>(), rfc3339))
        return "fake API server: timeAdded " + time.dump() + " is not an RFC 3339 time";
    }
  return std::nullopt;
}

json status(int code, const std::string& reason, const std::string& message) {
  return {{"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", json::object()},
          {"status", "Failure"}, {"message", message}, {"reason", reason},
          {"code", code}};
}

}  // namespace

std::string FieldError::body() const {
  std::string out = type_text(type);
  const bool prints_value = type != "FieldValueRequired" && type != "FieldValueForbidden" &&
                            type != "FieldValueTooLong" && type != "InternalError";
  if (prints_value && value) out += ": " + *value;
  if (!detail.empty()) out += ": " + detail;
  return out;
}

std::string FieldError::error() const {
  return field + ": " + body();
}

std::string aggregate(const ErrorList& errors) {
  std::vector<std::string> messages;
  std::set<std::string> seen;
  for (const auto& error : errors)
    if (seen.insert(error.error()).second) messages.push_back(error.error());
  if (messages.empty()) return "";
  if (messages.size() == 1) return messages[0];
  std::string out = "[";
  for (size_t i = 0; i < messages.size(); ++i) out += (i ? ", " : "") + messages[i];
  return out + "]";
}

std::string Quantity::str() const {
  // CanonicalizeBytes: BinarySI below 1024 prints as DecimalSI.
  const bool negative = value < 0;
  uint64_t amount = negative ? 0 - static_cast<uint64_t>(value) : static_cast<uint64_t>(value);
  std::string sign = negative ? "-" : "";
  if (format == QuantityFormat::kBinarySI && amount >= 1024) {
    static const char* suffixes[] = {"", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};
    int times = 0;
    while (amount >= 1024 && amount % 1024 == 0 && times < 6) {
      amount /= 1024;
      ++times;
    }
    return sign + std::to_string(amount) + suffixes[times];
  }
  int exponent = 0;
  while (amount >= 10 && amount % 10 == 0) {
    amount /= 10;
    ++exponent;
  }
  for (; exponent % 3 != 0; --exponent) amount *= 10;
  if (format == QuantityFormat::kDecimalExponent)
    return sign + std::to_string(amount) + (exponent ? "e" + std::to_string(exponent) : "");
  static const char* suffixes[] = {"", "k", "M", "G", "T", "P", "E"};
  return sign + std::to_string(amount) + suffixes[exponent / 3];
}

std::optional<Quantity> parse_quantity(const json& value) {
  std::string text;
  if (value.is_string())
    text = value.get<std::string>();
  else if (value.is_number_integer())
    text = value.dump();
  else
    return std::nullopt;
  Quantity q;
  bool negative = false;
  if (!text.empty() && (text[0] == '-' || text[0] == '+')) {
    negative = text[0] == '-';
    text = text.substr(1);
  }
  const size_t end = text.find_first_not_of("0123456789");
  const std::string digits = text.substr(0, end);
  const std::string suffix = end == std::string::npos ? "" : text.substr(end);
  if (digits.empty()) return std::nullopt;
  std::optional<uint64_t> magnitude;
  if (!suffix.empty() && (suffix[0] == 'e' || (suffix[0] == 'E' && suffix.size() > 1))) {
    const std::string exponent = suffix.substr(1);
    if (exponent.empty() || exponent.find_first_not_of("0123456789") != std::string::npos)
      return std::nullopt;
    magnitude = parse_byte_quantity(digits);
    for (int i = 0; magnitude && i < std::stoi(exponent); ++i)
      magnitude = *magnitude > UINT64_MAX / 10 ? std::nullopt : std::optional(*magnitude * 10);
    q.format = QuantityFormat::kDecimalExponent;
  } else {
    if (suffix.find_first_of("mun") != std::string::npos) return std::nullopt;  // sub-unit
    magnitude = parse_byte_quantity(digits + suffix);
    q.format = suffix.size() == 2 && suffix[1] == 'i' ? QuantityFormat::kBinarySI
                                                      : QuantityFormat::kDecimalSI;
  }
  if (!magnitude || *magnitude > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
  q.value = negative ? -static_cast<int64_t>(*magnitude) : static_cast<int64_t>(*magnitude);
  return q;
}

std::vector<std::string> is_dns1123_label(const std::string& value) {
  std::vector<std::string> errors;
  if (value.size() > 63) errors.push_back(max_len_characters(63));
  if (!matches(value, kDns1123LabelFmt)) {
    if (matches(value, kDns1123SubdomainFmt))
      errors.push_back("must not contain dots");
    else
      errors.push_back(regex_error(kDns1123LabelErrMsg, kDns1123LabelFmt, {"my-name", "123-abc"}));
  }
  return errors;
}

std::vector<std::string> is_dns1123_subdomain(const std::string& value) {
  std::vector<std::string> errors;
  if (value.size() > 253) errors.push_back(max_len_characters(253));
  if (!matches(value, kDns1123SubdomainFmt))
    errors.push_back(regex_error(kDns1123SubdomainErrMsg, kDns1123SubdomainFmt, {"example.com"}));
  return errors;
}

std::vector<std::string> is_label_key(const std::string& value) {
  std::vector<std::string> errors;
  std::string name;
  const size_t slash = value.find('/');
  if (slash == std::string::npos) {
    name = value;
  } else if (value.find('/', slash + 1) != std::string::npos) {
    return {"a valid label key " +
            regex_error(kLabelKeyErrMsg, kLabelKeyFmt, {"MyName", "my.name", "123-abc"}) +
            " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"};
  } else {
    const std::string prefix = value.substr(0, slash);
    name = value.substr(slash + 1);
    if (prefix.empty())
      errors.push_back("prefix part must be non-empty");
    else
      for (const auto& message : content_dns1123_subdomain(prefix))
        errors.push_back("prefix part " + message);
  }
  if (name.empty())
    errors.push_back("name part must be non-empty");
  else if (name.size() > 63)
    errors.push_back("name part " + max_len_bytes(63));
  if (!matches(name, kLabelKeyFmt))
    errors.push_back("name part " +
                     regex_error(kLabelKeyErrMsg, kLabelKeyFmt, {"MyName", "my.name", "123-abc"}));
  return errors;
}

std::vector<std::string> is_label_value(const std::string& value) {
  std::vector<std::string> errors;
  if (value.size() > 63) errors.push_back(max_len_bytes(63));
  if (!matches(value, kLabelValueFmt))
    errors.push_back(
        regex_error(kLabelValueErrMsg, kLabelValueFmt, {"MyValue", "my_value", "12345"}));
  return errors;
}

std::vector<std::string> is_c_identifier(const std::string& value) {
  if (!matches(value, kCIdentifierFmt))
    return {regex_error(kCIdentifierErrMsg, kCIdentifierFmt, {"my_name", "MY_NAME", "MyName"})};
  return {};
}

ErrorList validate_resource_slice(const json& slice) {
  ErrorList errors = validate_object_meta_name(slice.value("metadata", json::object()));
  append(errors, validate_resource_slice_spec(slice.value("spec", json::object()), nullptr));
  return errors;
}

ErrorList validate_resource_slice_update(const json& slice, const json& old) {
  const json old_spec = old.value("spec", json::object());
  return validate_resource_slice_spec(slice.value("spec", json::object()), &old_spec);
}

std::string rfc3339_utc(std::time_t when) {
  std::tm utc{};
  gmtime_r(&when, &utc);
  char text[sizeof "2006-01-02T15:04:05Z"];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

void default_resource_slice(json& slice, std::time_t now) {
  if (!slice.contains("spec") || !slice["spec"].contains("devices")) return;
  for (auto& device : slice["spec"]["devices"]) {
    if (!device.is_object() || !device.contains("taints") || !device["taints"].is_array()) continue;
    for (auto& taint : device["taints"])
      if (taint.is_object() && (!taint.contains("timeAdded") || taint["timeAdded"].is_null()))
        taint["timeAdded"] = rfc3339_utc(now);
  }
}

void drop_disabled_device_taints(json& slice, const json* old) {
  auto has_taints = [](const json& object) {
    if (!object.contains("spec") || !object["spec"].contains("devices")) return false;
    for (const auto& device : object["spec"]["devices"])
      if (device.is_object() && !device.value("taints", json::array()).empty()) return true;
    return false;
  };
  if (old && has_taints(*old)) return;  // draDeviceTaintsFeatureInUse(old)
  if (!slice.contains("spec") || !slice["spec"].contains("devices")) return;
  for (auto& device : slice["spec"]["devices"])
    if (device.is_object()) device.erase("taints");
}

std::optional<Refusal> check_resource_slice_write(const json& slice, const json* old) {
  const std::string name = slice.value("metadata", json::object()).value("name", "");
  auto message = undecodable_quantity(slice);
  if (!message) message = undecodable_time(slice);
  if (message)
    return Refusal{400, status(400, "BadRequest",
                               "ResourceSlice in version \"v1\" cannot be handled as a "
                               "ResourceSlice: " +
                                   *message)};
  const ErrorList errors =
      old ? validate_resource_slice_update(slice, *old) : validate_resource_slice(slice);
  if (errors.empty()) return std::nullopt;
  json causes = json::array();
  for (const auto& error : errors)
    causes.push_back({{"reason", error.type}, {"message", error.body()}, {"field", error.field}});
  json body = status(
      422, "Invalid",
      "ResourceSlice.resource.k8s.io " + go_quote(name) + " is invalid: " + aggregate(errors));
  body["details"] = {
      {"name", name}, {"group", "resource.k8s.io"}, {"kind", "ResourceSlice"}, {"causes", causes}};
  return Refusal{422, body};
}

}  // namespace tessera::agent::testing::apiserver

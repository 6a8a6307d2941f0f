#include "allocator/allocator.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <utility>
#include <variant>

#include "tessera/kube/quantity.h"

namespace tessera::testing::allocator {
namespace {

using nlohmann::json;

// ---- Quantities: resource.Quantity's Value() (rounded up to a whole number) and NewQuantity.

struct Quantity {
  int64_t value = 0;
  kube::QuantityFormat format = kube::QuantityFormat::kDecimalSI;
};

Result<Quantity> read_quantity(const json& node, const std::string& field) {
  std::string text;
  if (node.is_string())
    text = node.get<std::string>();
  else if (node.is_number_integer())
    text = node.dump();
  else
    return invalid_argument(field + ": " + node.dump() + ": not a quantity");
  const Result<kube::Quantity> parsed = kube::parse_quantity(text);
  if (!parsed.is_ok()) return invalid_argument(field + ": " + parsed.status().message());
  __int128 value = parsed->value.unscaled;
  int32_t exponent = parsed->value.exponent;
  constexpr __int128 kMax = std::numeric_limits<int64_t>::max();
  for (; exponent > 0; --exponent) {
    value *= 10;
    if (value > kMax || value < -kMax) break;
  }
  bool inexact = false;
  for (; exponent < 0; ++exponent) {
    inexact = inexact || value % 10 != 0;
    value /= 10;
  }
  if (inexact && value >= 0) ++value;  // Value() rounds up
  if (exponent > 0 || value > kMax || value < -kMax)
    return invalid_argument(field + ": " + text + ": beyond int64 (not representable)");
  return Quantity{static_cast<int64_t>(value), parsed->format};
}

std::string text_of(const Quantity& quantity) {
  kube::QuantityValue value{quantity.value, 0};
  while (value.unscaled != 0 && value.unscaled % 10 == 0) {
    value.unscaled /= 10;
    ++value.exponent;
  }
  return kube::canonical_text(kube::Quantity{value, quantity.format});
}

// ---- One device capacity: {value, requestPolicy {default, validRange {min, max, step},
// validValues}}.

struct Capacity {
  Quantity value;
  bool has_policy = false;
  std::optional<Quantity> fallback;  // requestPolicy.default
  std::optional<Quantity> min, max, step;
  bool has_range = false;
  std::vector<Quantity> valid_values;
};

Result<Capacity> read_capacity(const json& node, const std::string& field) {
  if (!node.is_object() || !node.contains("value"))
    return invalid_argument(field + ": expected {value, requestPolicy}");
  Capacity capacity;
  TESSERA_ASSIGN_OR_RETURN(capacity.value, read_quantity(node["value"], field + ".value"));
  if (!node.contains("requestPolicy")) return capacity;
  const json& policy = node["requestPolicy"];
  capacity.has_policy = true;
  const std::string at = field + ".requestPolicy";
  if (policy.contains("default")) {
    TESSERA_ASSIGN_OR_RETURN(Quantity q, read_quantity(policy["default"], at + ".default"));
    capacity.fallback = q;
  }
  if (policy.contains("validRange")) {
    capacity.has_range = true;
    const json& range = policy["validRange"];
    for (auto [name, slot] : {std::pair{"min", &capacity.min}, std::pair{"max", &capacity.max},
                              std::pair{"step", &capacity.step}}) {
      if (!range.contains(name)) continue;
      TESSERA_ASSIGN_OR_RETURN(Quantity q, read_quantity(range[name], at + ".validRange." + name));
      *slot = q;
    }
  }
  if (policy.contains("validValues")) {
    for (size_t i = 0; i < policy["validValues"].size(); ++i) {
      TESSERA_ASSIGN_OR_RETURN(
          Quantity q,
          read_quantity(policy["validValues"][i], at + ".validValues[" + std::to_string(i) + "]"));
      capacity.valid_values.push_back(q);
    }
  }
  return capacity;
}

// calculateConsumedQuantity with roundUpRange / roundUpValidValues.
Result<Quantity> consumed_by(const std::optional<Quantity>& request, const Capacity& capacity) {
  if (!request) return capacity.fallback ? *capacity.fallback : capacity.value;
  if (!capacity.has_policy) return *request;
  if (capacity.has_range && capacity.min) {
    if (request->value < capacity.min->value) return *capacity.min;
    if (!capacity.step) return *request;
    const int64_t step = capacity.step->value;
    const int64_t min = capacity.min->value;
    int64_t n = (request->value - min) / step;
    if ((request->value - min) % step != 0) ++n;
    if (min >= 0 && n > (std::numeric_limits<int64_t>::max() - min) / step)
      return invalid_argument("rounding request " + text_of(*request) +
                              " up to the next step passes MaxInt64");
    return Quantity{min + step * n, capacity.step->format};
  }
  if (!capacity.valid_values.empty()) {
    for (const Quantity& valid : capacity.valid_values)
      if (request->value <= valid.value) return valid;
  }
  return *request;
}

// violatesPolicy (a default compares by value here; Go compares the Quantity structs).
bool violates_policy(const Quantity& consumed, const Capacity& capacity) {
  if (!capacity.has_policy) return false;
  if (capacity.fallback && consumed.value == capacity.fallback->value) return false;
  if (capacity.has_range) {
    if (capacity.max && consumed.value > capacity.max->value) return true;
    if (capacity.step) {
      const int64_t min = capacity.min ? capacity.min->value : 0;
      if ((consumed.value - min) % capacity.step->value != 0) return true;
    }
    return false;
  }
  if (!capacity.valid_values.empty())
    return std::none_of(capacity.valid_values.begin(), capacity.valid_values.end(),
                        [&](const Quantity& v) { return v.value == consumed.value; });
  return false;
}

std::string qualified(const std::string& name, const std::string& driver) {
  return name.find('/') == std::string::npos ? driver + "/" + name : name;
}

// resolveCapacityName: the device's own key for a requested name, or "" when it has none.
std::string resolve_capacity_name(const std::string& requested, const std::string& driver,
                                  const json& capacity) {
  if (capacity.contains(requested)) return requested;
  const size_t slash = requested.find('/');
  if (slash != std::string::npos) {
    if (requested.substr(0, slash) != driver) return "";
    const std::string bare = requested.substr(slash + 1);
    return capacity.contains(bare) ? bare : "";
  }
  const std::string full = driver + "/" + requested;
  return capacity.contains(full) ? full : "";
}

// ---- CEL: the subset named in the header, evaluated as it is parsed.

struct Absent {
  bool operator==(const Absent&) const = default;
};
// A CEL runtime error (a missing key) is a value, as in cel-go: `false && <error>` is false and
// `true || <error>` is true (commutative, error-absorbing logic); anything else carries it on.
struct RuntimeError {
  std::string message;
  bool operator==(const RuntimeError&) const = default;
};
using Value = std::variant<Absent, bool, int64_t, std::string, RuntimeError>;

class Cel {
 public:
  Cel(const std::string& text, const std::string& driver, const json& device)
      : text_(text), driver_(driver), device_(device) {}

  Result<bool> evaluate() {
    TESSERA_ASSIGN_OR_RETURN(Value value, parse_or());
    skip_space();
    if (at_ < text_.size()) return unsupported("unexpected text at offset " + std::to_string(at_));
    if (const auto* error = std::get_if<RuntimeError>(&value))
      return invalid_argument(error->message);
    if (!std::holds_alternative<bool>(value)) return unsupported("the result is not a bool");
    return std::get<bool>(value);
  }

 private:
  Status unsupported(const std::string& why) const {
    return invalid_argument("CEL selector \"" + text_ + "\": " + why +
                            " (outside what this port of the scheduler evaluates)");
  }
  void skip_space() {
    while (at_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[at_]))) ++at_;
  }
  bool take(const std::string& token) {
    skip_space();
    if (text_.compare(at_, token.size(), token) != 0) return false;
    at_ += token.size();
    return true;
  }
  std::string identifier() {
    skip_space();
    const size_t start = at_;
    while (at_ < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[at_])) || text_[at_] == '_'))
      ++at_;
    return text_.substr(start, at_ - start);
  }
  Result<std::string> string_literal() {
    skip_space();
    if (at_ >= text_.size() || (text_[at_] != '"' && text_[at_] != '\''))
      return unsupported("expected a string literal at offset " + std::to_string(at_));
    const char quote = text_[at_++];
    std::string value;
    while (at_ < text_.size() && text_[at_] != quote) {
      if (text_[at_] == '\\') return unsupported("escapes in string literals");
      value += text_[at_++];
    }
    if (at_ >= text_.size()) return unsupported("unterminated string literal");
    ++at_;
    return value;
  }

  Result<Value> parse_or() {
    TESSERA_ASSIGN_OR_RETURN(Value left, parse_and());
    while (take("||")) {
      TESSERA_ASSIGN_OR_RETURN(Value right, parse_and());
      TESSERA_ASSIGN_OR_RETURN(left, logical(left, right, true, "||"));
    }
    return left;
  }
  Result<Value> parse_and() {
    TESSERA_ASSIGN_OR_RETURN(Value left, parse_unary());
    while (take("&&")) {
      TESSERA_ASSIGN_OR_RETURN(Value right, parse_unary());
      TESSERA_ASSIGN_OR_RETURN(left, logical(left, right, false, "&&"));
    }
    return left;
  }
  // && (`decisive` false) and || (true): either side equal to `decisive` decides, even beside an
  // error; otherwise an error on either side is the result.
  Result<Value> logical(const Value& left, const Value& right, bool decisive, const char* op) {
    for (const Value* side : {&left, &right})
      if (const bool* b = std::get_if<bool>(side); b && *b == decisive) return Value{decisive};
    for (const Value* side : {&left, &right})
      if (const RuntimeError* error = std::get_if<RuntimeError>(side)) return Value{*error};
    if (!std::holds_alternative<bool>(left) || !std::holds_alternative<bool>(right))
      return unsupported(std::string(op) + " of non-bool values");
    return Value{!decisive};
  }
  Result<Value> parse_unary() {
    skip_space();
    if (at_ < text_.size() && text_[at_] == '!' && text_.compare(at_, 2, "!=") != 0) {
      ++at_;
      TESSERA_ASSIGN_OR_RETURN(Value value, parse_unary());
      if (const RuntimeError* error = std::get_if<RuntimeError>(&value)) return Value{*error};
      if (!std::holds_alternative<bool>(value)) return unsupported("! of a non-bool value");
      return Value{!std::get<bool>(value)};
    }
    return parse_comparison();
  }
  // Two values of one type (checked by the caller), compared alternative by alternative: GCC 12
  // warns (maybe-uninitialized) on std::variant's own == for this variant at -O3.
  static bool equal(const Value& left, const Value& right) {
    if (const bool* a = std::get_if<bool>(&left)) return *a == std::get<bool>(right);
    if (const int64_t* a = std::get_if<int64_t>(&left)) return *a == std::get<int64_t>(right);
    return std::get<std::string>(left) == std::get<std::string>(right);
  }
  Result<Value> parse_comparison() {
    TESSERA_ASSIGN_OR_RETURN(Value left, parse_operand());
    for (const char* op : {"==", "!=", "<=", ">=", "<", ">"}) {
      if (!take(op)) continue;
      TESSERA_ASSIGN_OR_RETURN(Value right, parse_operand());
      if (const RuntimeError* error = std::get_if<RuntimeError>(&left)) return Value{*error};
      if (const RuntimeError* error = std::get_if<RuntimeError>(&right)) return Value{*error};
      if (left.index() != right.index() || std::holds_alternative<Absent>(left))
        return unsupported(std::string("operands of ") + op + " of different types");
      const std::string o = op;
      if (o == "==" || o == "!=") return Value{equal(left, right) == (o == "==")};
      if (!std::holds_alternative<int64_t>(left)) return unsupported("ordering of non-ints");
      const int64_t a = std::get<int64_t>(left), b = std::get<int64_t>(right);
      if (o == "<=") return Value{a <= b};
      if (o == ">=") return Value{a >= b};
      if (o == "<") return Value{a < b};
      return Value{a > b};
    }
    return left;
  }
  Result<Value> parse_operand() {
    skip_space();
    if (at_ >= text_.size()) return unsupported("unexpected end");
    const char c = text_[at_];
    if (c == '(') {
      ++at_;
      TESSERA_ASSIGN_OR_RETURN(Value inner, parse_or());
      if (!take(")")) return unsupported("missing )");
      return inner;
    }
    if (c == '"' || c == '\'') {
      TESSERA_ASSIGN_OR_RETURN(std::string literal, string_literal());
      return Value{literal};
    }
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '-') {
      const size_t start = at_++;
      while (at_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[at_]))) ++at_;
      return Value{static_cast<int64_t>(std::stoll(text_.substr(start, at_ - start)))};
    }
    const std::string word = identifier();
    if (word == "true") return Value{true};
    if (word == "false") return Value{false};
    if (word != "device") return unsupported("unknown name \"" + word + "\"");
    if (!take(".")) return unsupported("expected a field of device");
    const std::string field = identifier();
    if (field == "driver") return Value{driver_};
    if (field == "allowMultipleAllocations")
      return Value{device_.value("allowMultipleAllocations", false)};
    if (field != "attributes" && field != "capacity") return unsupported("device." + field);
    if (!take("[")) return unsupported("expected [\"<domain>\"] after device." + field);
    TESSERA_ASSIGN_OR_RETURN(std::string domain, string_literal());
    if (!take("]")) return unsupported("missing ]");
    std::string name;
    if (take("[")) {
      TESSERA_ASSIGN_OR_RETURN(name, string_literal());
      if (!take("]")) return unsupported("missing ]");
    } else if (take(".")) {
      name = identifier();
    } else {
      return unsupported("expected a name after device." + field + "[\"" + domain + "\"]");
    }
    // An unqualified name in the slice belongs to the driver's domain.
    const json& map = device_.contains(field) ? device_[field] : json::object();
    const json* entry = nullptr;
    if (map.contains(domain + "/" + name)) entry = &map[domain + "/" + name];
    if (!entry && domain == driver_ && map.contains(name)) entry = &map[name];
    const RuntimeError missing{"CEL selector \"" + text_ +
                               "\": runtime error: no such key: " + name};
    if (field == "attributes") {
      // CEL's string function: the MIG class's samples pick a profile family ("3g.").
      std::optional<std::string> prefix;
      if (take(".startsWith(")) {
        TESSERA_ASSIGN_OR_RETURN(prefix, string_literal());
        if (!take(")")) return unsupported("missing )");
      }
      if (!entry) return Value{missing};
      if (entry->contains("string")) {
        const std::string value = (*entry)["string"].get<std::string>();
        if (!prefix) return Value{value};
        return Value{value.rfind(*prefix, 0) == 0};
      }
      if (prefix) return unsupported("startsWith of attribute " + name + ", not a string");
      if (entry->contains("int")) return Value{(*entry)["int"].get<int64_t>()};
      if (entry->contains("bool")) return Value{(*entry)["bool"].get<bool>()};
      if (entry->contains("version")) return Value{(*entry)["version"].get<std::string>()};
      return unsupported("attribute " + name + " of an unknown type");
    }
    if (!take(".compareTo("))
      return unsupported("a capacity is used through .compareTo(quantity(...))");
    if (!take("quantity(")) return unsupported("compareTo takes quantity(\"...\")");
    TESSERA_ASSIGN_OR_RETURN(std::string text, string_literal());
    if (!take(")") || !take(")")) return unsupported("missing )");
    TESSERA_ASSIGN_OR_RETURN(Quantity other, read_quantity(json(text), "quantity"));
    if (!entry) return Value{missing};
    TESSERA_ASSIGN_OR_RETURN(Quantity capacity,
                             read_quantity(entry->value("value", json()), "capacity " + name));
    return Value{static_cast<int64_t>(capacity.value < other.value   ? -1
                                      : capacity.value > other.value ? 1
                                                                     : 0)};
  }

  const std::string& text_;
  const std::string& driver_;
  const json& device_;
  size_t at_ = 0;
};

// ---- The claim's requests (a request, or one subrequest of firstAvailable).

struct Request {
  std::string name;            // the request's, or "<request>/<subrequest>"
  std::string parent;          // the parent request's name for a subrequest
  const json* spec = nullptr;  // exactly, or the subrequest
  const json* device_class = nullptr;
  int64_t count = 1;
  bool all = false;
};

// counterSets of allocator_incubating.go: counter set name -> counter name -> value.
using CounterSets = std::map<std::string, std::map<std::string, int64_t>>;

struct Pool {
  std::string driver, name;
  std::vector<const json*> slices;        // device slices of the newest generation for the node
  std::vector<const json*> other_slices;  // the pool's other device slices (their devices
                                          // consume the pool's counters too)
  CounterSets counter_sets;               // from the slices that hold sharedCounters
  bool incomplete = false;
  bool invalid = false;
  std::string invalid_reason;
  std::string id() const { return driver + "/" + name; }
};

struct DeviceRef {
  std::string driver, pool, name;
  const json* device = nullptr;
  const json* slice = nullptr;
  const Pool* owner = nullptr;
  std::string key() const { return driver + "/" + pool + "/" + name; }
};

// A counter's value. Quantity.Cmp compares exactly; this port models whole numbers only (bytes,
// slices, multiprocessors) and refuses a fraction rather than rounding it.
Result<int64_t> read_counter(const json& counter, const std::string& field) {
  if (!counter.is_object()) return invalid_argument(field + ": expected {value}");
  if (!counter.contains("value")) return int64_t{0};  // Go's zero Quantity
  const json& node = counter["value"];
  TESSERA_ASSIGN_OR_RETURN(Quantity quantity, read_quantity(node, field + ".value"));
  const Result<kube::Quantity> parsed =
      kube::parse_quantity(node.is_string() ? node.get<std::string>() : node.dump());
  __int128 unscaled = parsed->value.unscaled;
  for (int32_t e = parsed->value.exponent; e < 0; ++e, unscaled /= 10)
    if (unscaled % 10 != 0)
      return invalid_argument(field + ".value: " + node.dump() +
                              ": a fractional counter (this port models whole numbers only)");
  return quantity.value;
}

// node[name] when it is a list (a map), else an empty one; a reference, never a temporary.
const json& list_at(const json& node, const char* name) {
  static const json kNone = json::array();
  return node.contains(name) && node[name].is_array() ? node[name] : kNone;
}
const json& map_at(const json& node, const char* name) {
  static const json kNone = json::object();
  return node.contains(name) && node[name].is_object() ? node[name] : kNone;
}

// The device's consumesCounters entries: {counterSet, counters {name: {value}}}.
const json& consumes_counters(const json& device) {
  return list_at(device, "consumesCounters");
}

bool has_shared_counters(const json& slice) {
  const json& spec = slice["spec"];
  return spec.contains("sharedCounters") && spec["sharedCounters"].is_array() &&
         !spec["sharedCounters"].empty();
}

bool tolerated(const json& taint, const json& tolerations) {
  for (const json& toleration : tolerations) {
    const std::string effect = toleration.value("effect", "");
    if (!effect.empty() && effect != taint.value("effect", "")) continue;
    const std::string key = toleration.value("key", "");
    if (toleration.value("operator", "Equal") == "Exists") {
      if (key.empty() || key == taint.value("key", "")) return true;
      continue;
    }
    if (key == taint.value("key", "") && toleration.value("value", "") == taint.value("value", ""))
      return true;
  }
  return false;
}

class Run {
 public:
  Run(const AllocatorInput& input, const json& claim) : input_(input), claim_(claim) {}

  Result<json> counters_left() {
    TESSERA_RETURN_IF_ERROR(gather_pools());
    TESSERA_RETURN_IF_ERROR(gather_allocated());
    json pools = json::object();
    for (const Pool& pool : pools_) {
      if (pool.incomplete)
        return failed_precondition("resource pool " + pool.id() + " is currently being updated");
      if (pool.invalid)
        return failed_precondition("resource pool " + pool.id() +
                                   " is currently invalid: " + pool.invalid_reason);
      if (pool.counter_sets.empty()) continue;
      TESSERA_ASSIGN_OR_RETURN(CounterSets left, committed_left(pool));
      pools[pool.id()] = left;
    }
    return pools;
  }

  Result<json> allocate() {
    TESSERA_RETURN_IF_ERROR(gather_pools());
    TESSERA_RETURN_IF_ERROR(gather_allocated());
    const json* requests = nullptr;
    if (claim_.contains("spec") && claim_["spec"].contains("devices"))
      requests = claim_["spec"]["devices"].contains("requests")
                     ? &claim_["spec"]["devices"]["requests"]
                     : nullptr;
    if (!requests || !requests->is_array() || requests->empty())
      return invalid_argument("spec.devices.requests: the claim asks for no device");
    for (size_t i = 0; i < requests->size(); ++i) {
      const json& request = (*requests)[i];
      const std::string name = request.value("name", "");
      std::vector<Request> alternatives;
      if (request.contains("exactly")) {
        TESSERA_ASSIGN_OR_RETURN(Request r, make_request(name, "", request["exactly"]));
        alternatives.push_back(r);
      } else if (request.contains("firstAvailable")) {
        for (const json& sub : request["firstAvailable"]) {
          TESSERA_ASSIGN_OR_RETURN(Request r,
                                   make_request(name + "/" + sub.value("name", ""), name, sub));
          alternatives.push_back(r);
        }
      } else {
        return invalid_argument("spec.devices.requests[" + std::to_string(i) +
                                "]: neither exactly nor firstAvailable");
      }
      requests_.push_back(std::move(alternatives));
    }
    TESSERA_ASSIGN_OR_RETURN(bool done, allocate_request(0));
    // Allocate: with no solution, an invalid pool is what gets reported (upstream only logs its
    // reason; it is in the message here so that a test sees why).
    if (!done) {
      for (const Pool& pool : pools_)
        if (pool.invalid)
          return failed_precondition(
              "cannot allocate all claims: invalid resource pools were encountered: resource "
              "pool " +
              pool.id() + ": " + pool.invalid_reason);
    }
    if (!done && !counter_refusal_.empty())
      return failed_precondition(
          "cannot allocate all claims: request \"" + failed_request_ +
          "\" found no device that fits (last counter refusal: " + counter_refusal_ + ")");
    if (!done)
      return failed_precondition("cannot allocate all claims: request \"" + failed_request_ +
                                 "\" found no device that fits");
    return result();
  }

 private:
  Result<Request> make_request(const std::string& name, const std::string& parent,
                               const json& spec) {
    Request r{name, parent, &spec};
    const std::string class_name = spec.value("deviceClassName", "");
    for (const json& device_class : input_.device_classes)
      if (device_class["metadata"].value("name", "") == class_name) r.device_class = &device_class;
    if (!r.device_class)
      return invalid_argument("request " + name + ": could not retrieve device class \"" +
                              class_name + "\"");
    const std::string mode = spec.value("allocationMode", "ExactCount");
    if (mode == "All") {
      r.all = true;
    } else if (mode == "ExactCount") {
      r.count = spec.value("count", int64_t{1});
    } else {
      return invalid_argument("request " + name + ": unsupported count mode " + mode);
    }
    return r;
  }

  // GatherPools and buildPool (pools_incubating.go): the newest generation of each pool; a
  // slice with sharedCounters is always relevant for the node, whatever its node selection; the
  // pool's slices are sorted by name (first fit follows the driver's naming); a pool whose
  // counter sets or counter references do not add up is invalid as a whole.
  Status gather_pools() {
    using PoolKey = std::pair<std::string, std::string>;
    std::map<PoolKey, int64_t> newest;
    for (const json& slice : input_.slices) {
      const json& spec = slice["spec"];
      const auto id = PoolKey{spec.value("driver", ""), spec["pool"].value("name", "")};
      newest[id] = std::max(newest[id], spec["pool"].value("generation", int64_t{0}));
    }
    std::map<PoolKey, std::vector<const json*>> relevant, irrelevant;
    std::map<PoolKey, int64_t> slice_counts;
    for (const json& slice : input_.slices) {
      const json& spec = slice["spec"];
      const auto id = PoolKey{spec.value("driver", ""), spec["pool"].value("name", "")};
      if (spec["pool"].value("generation", int64_t{0}) != newest[id]) continue;
      ++slice_counts[id];
      const std::string slice_name = slice["metadata"].value("name", "");
      bool targets = has_shared_counters(slice);
      if (!targets) {
        if (spec.contains("nodeSelector"))
          return invalid_argument("ResourceSlice " + slice_name +
                                  ": nodeSelector is not evaluated by this port");
        if (spec.value("perDeviceNodeSelection", false))
          return invalid_argument("ResourceSlice " + slice_name +
                                  ": perDeviceNodeSelection is not evaluated by this port");
        targets = spec.value("nodeName", "") == input_.node_name || spec.value("allNodes", false);
      }
      (targets ? relevant : irrelevant)[id].push_back(&slice);
    }
    const auto by_name = [](const json* a, const json* b) {
      return (*a)["metadata"].value("name", "") < (*b)["metadata"].value("name", "");
    };
    for (auto& [id, slices] : relevant) {
      Pool pool;
      pool.driver = id.first;
      pool.name = id.second;
      std::sort(slices.begin(), slices.end(), by_name);
      pool.incomplete = (*slices.front())["spec"]["pool"].value("resourceSliceCount", int64_t{1}) !=
                        slice_counts[id];
      if (!pool.incomplete) {
        std::vector<const json*> counter_slices;
        for (const json* slice : slices)
          (has_shared_counters(*slice) ? counter_slices : pool.slices).push_back(slice);
        std::vector<const json*>& others = irrelevant[id];
        std::sort(others.begin(), others.end(), by_name);
        for (const json* slice : others)
          if (!has_shared_counters(*slice)) pool.other_slices.push_back(slice);
        TESSERA_ASSIGN_OR_RETURN(std::string reason, validate_pool(pool, counter_slices, slices));
        pool.invalid = !reason.empty();
        pool.invalid_reason = reason;
      }
      pools_.push_back(std::move(pool));
    }
    return Status::ok();
  }

  // validateDeviceNames, getAndValidateCounterSets and validateDeviceCounterConsumption: the
  // first reason the pool is invalid, or "" when it is valid. Every relevant slice's devices are
  // checked against the counter sets (also those of a slice that holds sharedCounters, which
  // the allocator never allocates from), then those of the slices not targeting the node.
  Result<std::string> validate_pool(Pool& pool, const std::vector<const json*>& counter_slices,
                                    const std::vector<const json*>& relevant) {
    std::set<std::string> device_names;
    for (const json* slice : pool.slices)
      for (const json& device : list_at((*slice)["spec"], "devices"))
        if (!device_names.insert(device.value("name", "")).second)
          return "duplicate device name " + device.value("name", "");
    for (const json* slice : counter_slices) {
      const std::string slice_name = (*slice)["metadata"].value("name", "");
      for (const json& set : (*slice)["spec"]["sharedCounters"]) {
        const std::string set_name = set.value("name", "");
        if (pool.counter_sets.count(set_name)) return "duplicate counter set name " + set_name;
        auto& counters = pool.counter_sets[set_name];
        for (const auto& [name, counter] : map_at(set, "counters").items()) {
          TESSERA_ASSIGN_OR_RETURN(
              counters[name],
              read_counter(counter, "ResourceSlice " + slice_name + ": sharedCounters " + set_name +
                                        ": counter " + name));
        }
      }
    }
    for (const std::vector<const json*>* slices :
         {&relevant, static_cast<const std::vector<const json*>*>(&pool.other_slices)})
      for (const json* slice : *slices)
        for (const json& device : list_at((*slice)["spec"], "devices"))
          for (const json& consumption : consumes_counters(device)) {
            const std::string set_name = consumption.value("counterSet", "");
            auto set = pool.counter_sets.find(set_name);
            if (set == pool.counter_sets.end()) return "counter set " + set_name + " not found";
            for (const auto& [name, counter] : map_at(consumption, "counters").items()) {
              if (!set->second.count(name))
                return "counter " + name + " not found in counter set " + set_name;
              TESSERA_RETURN_IF_ERROR(read_counter(counter, "device " + device.value("name", "") +
                                                                ": consumesCounters " + set_name +
                                                                ": counter " + name)
                                          .status());
            }
          }
    return std::string();
  }

  Status gather_allocated() {
    for (const json& claim : input_.allocated_claims) {
      const json* results = nullptr;
      if (claim.contains("status") && claim["status"].contains("allocation"))
        results = &claim["status"]["allocation"]["devices"]["results"];
      if (!results) continue;
      for (const json& result : *results) {
        // foreachAllocatedDevice (the scheduler's allocateddevices.go): a result with admin
        // access is not allocated; one with a shareID is a share (AllocatedSharedDeviceIDs, and
        // its consumedCapacity into AggregatedCapacity); any other is the device's alone.
        if (result.value("adminAccess", false)) continue;
        const std::string driver = result.value("driver", "");
        const std::string key =
            driver + "/" + result.value("pool", "") + "/" + result.value("device", "");
        if (!result.contains("shareID")) {
          in_use_.insert(key);
          continue;
        }
        shared_devices_.insert(key);
        if (!result.contains("consumedCapacity") || result["consumedCapacity"].is_null()) continue;
        committed_capacity_.insert(key);
        for (const auto& [name, quantity] : result["consumedCapacity"].items()) {
          TESSERA_ASSIGN_OR_RETURN(Quantity q, read_quantity(quantity, "consumedCapacity." + name));
          allocated_[key][qualified(name, driver)] += q.value;
        }
      }
    }
    return Status::ok();
  }

  Result<bool> selectable(const Request& r, const DeviceRef& d) {
    for (const json* selectors : {&(*r.device_class)["spec"], r.spec}) {
      if (!selectors->contains("selectors")) continue;
      for (const json& selector : (*selectors)["selectors"]) {
        if (!selector.contains("cel"))
          return invalid_argument("request " + r.name + ": CEL expression empty");
        TESSERA_ASSIGN_OR_RETURN(bool match, device_matches(selector["cel"].value("expression", ""),
                                                            d.driver, *d.device));
        if (!match) return false;
      }
    }
    return true;
  }

  // cmpRequestOverCapacity: the consumed capacity of every device capacity, or nullopt when the
  // device cannot take the request.
  Result<std::optional<std::map<std::string, Quantity>>> fits(const Request& r,
                                                              const DeviceRef& d) {
    const json& capacity =
        d.device->contains("capacity") ? (*d.device)["capacity"] : json::object();
    std::map<std::string, Quantity> requested;  // device's key -> request
    if (r.spec->contains("capacity") && (*r.spec)["capacity"].contains("requests")) {
      for (const auto& [name, quantity] : (*r.spec)["capacity"]["requests"].items()) {
        const std::string key = resolve_capacity_name(name, d.driver, capacity);
        if (key.empty()) return std::optional<std::map<std::string, Quantity>>{};
        TESSERA_ASSIGN_OR_RETURN(requested[key],
                                 read_quantity(quantity, r.name + ".capacity.requests." + name));
      }
    }
    std::map<std::string, Quantity> consumed;
    for (const auto& [name, entry] : capacity.items()) {
      TESSERA_ASSIGN_OR_RETURN(Capacity c, read_capacity(entry, d.key() + ".capacity." + name));
      std::optional<Quantity> request;
      if (auto it = requested.find(name); it != requested.end()) request = it->second;
      TESSERA_ASSIGN_OR_RETURN(Quantity q, consumed_by(request, c));
      if (q.value < 0) return invalid_argument("capacity " + name + ": capacity value is negative");
      consumed[name] = q;
    }
    for (const auto& [name, entry] : capacity.items()) {
      TESSERA_ASSIGN_OR_RETURN(Capacity c, read_capacity(entry, d.key() + ".capacity." + name));
      if (violates_policy(consumed[name], c))
        return std::optional<std::map<std::string, Quantity>>{};
      const std::string full = qualified(name, d.driver);
      const int64_t total =
          allocated_[d.key()][full] + allocating_[d.key()][full] + consumed[name].value;
      if (total > c.value.value) return std::optional<std::map<std::string, Quantity>>{};
    }
    return std::optional{consumed};
  }

  // internal.IsDeviceAllocated (allocatedstate.go at v0.36.2, the FIX-SHARED rule): allocated
  // for itself, or shared by any committed share, or with committed consumed capacity.
  bool is_device_allocated(const std::string& key) const {
    return in_use_.count(key) || shared_devices_.count(key) || committed_capacity_.count(key);
  }

  // deviceCapacityInUse: a share of the device is committed or being allocated in this call.
  bool device_capacity_in_use(const std::string& key) const {
    return committed_capacity_.count(key) || allocating_capacity_.count(key);
  }

  // checkAvailableCounters. What the pool's counter sets have left once every allocated device
  // of the pool (targeting the node or not) has taken its consumesCounters, each device once
  // however many claims share it, is computed on first use. This call's devices add theirs to
  // consumed_counters_; the device fits when no counter of any set of the pool is then consumed
  // beyond what is left (left may be negative: none). Keyed by pool name alone, as upstream.
  Result<bool> counters_available(const DeviceRef& d) {
    const Pool& pool = *d.owner;
    auto available = available_counters_.find(pool.name);
    if (available == available_counters_.end()) {
      TESSERA_ASSIGN_OR_RETURN(CounterSets left, committed_left(pool));
      available = available_counters_.emplace(pool.name, std::move(left)).first;
    }
    TESSERA_RETURN_IF_ERROR(add_counters(d, +1));
    CounterSets& consumed = consumed_counters_[pool.name];
    for (const auto& [set_name, counters] : available->second)
      for (const auto& [name, left] : counters) {
        const auto set = consumed.find(set_name);
        const int64_t used = set == consumed.end()          ? 0
                             : set->second.count(name) == 0 ? 0
                                                            : set->second.at(name);
        if (left < used) {
          TESSERA_RETURN_IF_ERROR(add_counters(d, -1));
          counter_refusal_ = "device " + d.key() + " needs counter " + name + " of counter set " +
                             set_name + ", of which " + std::to_string(left) + " is left and " +
                             std::to_string(used) + " would be consumed";
          return false;
        }
      }
    return true;
  }

  // The pool's counter sets less what its allocated devices consume, each device once.
  Result<CounterSets> committed_left(const Pool& pool) const {
    CounterSets left = pool.counter_sets;
    for (const std::vector<const json*>* slices : {&pool.slices, &pool.other_slices})
      for (const json* slice : *slices)
        for (const json& device : list_at((*slice)["spec"], "devices")) {
          if (!is_device_allocated(pool.driver + "/" + pool.name + "/" + device.value("name", "")))
            continue;
          for (const json& consumption : consumes_counters(device)) {
            auto set = left.find(consumption.value("counterSet", ""));
            if (set == left.end()) continue;
            for (const auto& [name, counter] : map_at(consumption, "counters").items()) {
              auto entry = set->second.find(name);
              if (entry == set->second.end()) continue;
              TESSERA_ASSIGN_OR_RETURN(int64_t value, read_counter(counter, "counter " + name));
              entry->second -= value;
            }
          }
        }
    return left;
  }

  // The device's consumesCounters added to (+1) or taken from (-1, deallocateCountersForDevice)
  // what this call consumes.
  Status add_counters(const DeviceRef& d, int sign) {
    CounterSets& consumed = consumed_counters_[d.owner->name];
    for (const json& consumption : consumes_counters(*d.device))
      for (const auto& [name, counter] : map_at(consumption, "counters").items()) {
        TESSERA_ASSIGN_OR_RETURN(int64_t value, read_counter(counter, "counter " + name));
        consumed[consumption.value("counterSet", "")][name] += sign * value;
      }
    return Status::ok();
  }

  // One device for `r`: ok(true) when taken (state updated), ok(false) when it cannot be.
  // allocateOne's checks (in use, selectors, capacity), then allocateDevice's in its order: in
  // use, counters, taints, capacity.
  Result<bool> take_device(const Request& r, const DeviceRef& d) {
    const bool multi = d.device->value("allowMultipleAllocations", false);
    // deviceInUse: allocated for itself (a shared device too, when a result without shareID
    // holds it), or taken for itself in this call.
    if (in_use_.count(d.key()) || allocating_devices_.count(d.key())) return false;
    TESSERA_ASSIGN_OR_RETURN(bool match, selectable(r, d));
    if (!match) return false;
    // allocateDevice checks the capacity again after the taints; nothing between changes it.
    TESSERA_ASSIGN_OR_RETURN(auto consumed, fits(r, d));
    if (!consumed) return false;
    const bool counts = !consumes_counters(*d.device).empty();
    // A shared device consumes its counters once, with its first share (skipCounterCheck).
    if (counts && !(multi && device_capacity_in_use(d.key()))) {
      TESSERA_ASSIGN_OR_RETURN(bool available, counters_available(d));
      if (!available) return false;
    }
    // Upstream returns false below without taking back the counters it just added: a device
    // refused for a taint keeps its counters consumed for the rest of this call. Ported as is.
    if (d.device->contains("taints")) {
      const json tolerations = r.spec->value("tolerations", json::array());
      for (const json& taint : (*d.device)["taints"]) {
        const std::string effect = taint.value("effect", "");
        if ((effect == "NoSchedule" || effect == "NoExecute") && !tolerated(taint, tolerations))
          return false;
      }
    }
    json entry = {{"request", r.name}, {"driver", d.driver}, {"pool", d.pool}, {"device", d.name}};
    if (r.spec->contains("tolerations")) entry["tolerations"] = (*r.spec)["tolerations"];
    if (multi) {
      entry["shareID"] = input_.share_id ? input_.share_id() : random_share_id();
      allocating_capacity_.insert(d.key());
      json capacity = json::object();
      for (const auto& [name, q] : *consumed) {
        capacity[name] = text_of(q);
        allocating_[d.key()][qualified(name, d.driver)] += q.value;
      }
      if (!capacity.empty()) entry["consumedCapacity"] = capacity;
    } else {
      allocating_devices_.insert(d.key());
    }
    results_.push_back({entry, d, *consumed, multi});
    return true;
  }

  // The rollback of allocateDevice. A share gives back its capacity (the device's entry goes
  // once nothing of it is left) but not its counters; a device of its own gives back both.
  Status release_last() {
    const Taken& taken = results_.back();
    const std::string key = taken.device.key();
    if (taken.multi) {
      if (!taken.consumed.empty()) {
        for (const auto& [name, q] : taken.consumed)
          allocating_[key][qualified(name, taken.device.driver)] -= q.value;
        const auto& left = allocating_[key];
        if (std::all_of(left.begin(), left.end(), [](const auto& e) { return e.second == 0; }))
          allocating_capacity_.erase(key);
      }
    } else {
      allocating_devices_.erase(key);
      if (!consumes_counters(*taken.device.device).empty())
        TESSERA_RETURN_IF_ERROR(add_counters(taken.device, -1));
    }
    results_.pop_back();
    return Status::ok();
  }

  std::vector<DeviceRef> devices() const {
    std::vector<DeviceRef> all;
    for (const Pool& pool : pools_) {
      if (pool.incomplete || pool.invalid) continue;
      for (const json* slice : pool.slices) {
        const json& spec = (*slice)["spec"];
        if (!spec.contains("devices") || !spec["devices"].is_array()) continue;
        for (const json& device : spec["devices"])
          all.push_back({pool.driver, pool.name, device.value("name", ""), &device, slice, &pool});
      }
    }
    return all;
  }

  // allocateOne over the requests from `index` on.
  Result<bool> allocate_request(size_t index) {
    if (index == requests_.size()) return true;
    for (size_t alternative = 0; alternative < requests_[index].size(); ++alternative) {
      Request& r = requests_[index][alternative];
      if (r.all) {
        for (const Pool& pool : pools_) {
          if (pool.incomplete)
            return invalid_argument("request " + r.name +
                                    ": asks for all devices, but resource pool " + pool.id() +
                                    " is currently being updated");
          if (pool.invalid)
            return invalid_argument("request " + r.name +
                                    ": asks for all devices, but resource pool " + pool.id() +
                                    " is currently invalid (" + pool.invalid_reason + ")");
        }
        const size_t before = results_.size();
        bool any = false, ok = true;
        for (const DeviceRef& d : devices()) {
          TESSERA_ASSIGN_OR_RETURN(bool match, selectable(r, d));
          if (!match) continue;
          TESSERA_ASSIGN_OR_RETURN(auto consumed, fits(r, d));
          if (!consumed) continue;
          any = true;
          TESSERA_ASSIGN_OR_RETURN(bool taken, take_device(r, d));
          if (!taken) {
            ok = false;
            break;
          }
        }
        if (any && ok) {
          TESSERA_ASSIGN_OR_RETURN(bool done, allocate_request(index + 1));
          if (done) return true;
        }
        while (results_.size() > before) TESSERA_RETURN_IF_ERROR(release_last());
        failed_request_ = r.name;
        continue;
      }
      TESSERA_ASSIGN_OR_RETURN(bool done, allocate_device(index, r, 0, 0));
      if (done) return true;
    }
    return false;
  }

  Result<bool> allocate_device(size_t index, const Request& r, int64_t taken, size_t start) {
    if (taken == r.count) return allocate_request(index + 1);
    const std::vector<DeviceRef> all = devices();
    for (size_t i = start; i < all.size(); ++i) {
      TESSERA_ASSIGN_OR_RETURN(bool took, take_device(r, all[i]));
      if (!took) continue;
      TESSERA_ASSIGN_OR_RETURN(bool done, allocate_device(index, r, taken + 1, i + 1));
      if (done) return true;
      TESSERA_RETURN_IF_ERROR(release_last());
    }
    if (failed_request_.empty() || taken == 0) failed_request_ = r.name;
    return false;
  }

  json result() const {
    json results = json::array();
    for (const Taken& taken : results_) results.push_back(taken.entry);
    // Configs: each class's once (FromClass), then the claim's (FromClaim).
    json configs = json::array();
    std::map<std::string, std::pair<size_t, size_t>> class_configs;
    const json& claim_requests = claim_["spec"]["devices"]["requests"];
    std::vector<const Request*> chosen;
    for (size_t i = 0; i < requests_.size(); ++i) {
      const Request* picked = &requests_[i][0];
      for (const Taken& taken : results_)
        for (const Request& alternative : requests_[i])
          if (taken.entry["request"] == alternative.name) picked = &alternative;
      chosen.push_back(picked);
    }
    for (const Request* r : chosen) {
      const std::string class_name = (*r->device_class)["metadata"].value("name", "");
      if (auto it = class_configs.find(class_name); it != class_configs.end()) {
        for (size_t i = it->second.first; i < it->second.second; ++i)
          configs[i]["requests"].push_back(r->name);
        continue;
      }
      const size_t first = configs.size();
      for (const json& config : (*r->device_class)["spec"].value("config", json::array())) {
        json entry = config;
        entry["source"] = "FromClass";
        entry["requests"] = json::array({r->name});
        configs.push_back(entry);
      }
      class_configs[class_name] = {first, configs.size()};
    }
    const json claim_configs = claim_["spec"]["devices"].value("config", json::array());
    for (const json& config : claim_configs) {
      json entry = config;
      entry["source"] = "FromClaim";
      const json names = config.value("requests", json::array());
      if (names.empty()) {
        configs.push_back(entry);
        continue;
      }
      for (size_t i = 0; i < claim_requests.size(); ++i) {
        const auto named = [&](const std::string& n) {
          return std::find(names.begin(), names.end(), n) != names.end();
        };
        if (named(claim_requests[i].value("name", "")) ||
            (!chosen[i]->parent.empty() && named(chosen[i]->name)))
          configs.push_back(entry);
      }
    }
    for (json& config : configs)
      if (config.contains("requests") && config["requests"].size() == claim_requests.size())
        config.erase("requests");
    json allocation = {{"devices", {{"results", results}}}};
    if (!configs.empty()) allocation["devices"]["config"] = configs;
    for (const Taken& taken : results_) {
      if ((*taken.device.slice)["spec"].contains("nodeName")) {
        allocation["nodeSelector"] = {{"nodeSelectorTerms",
                                       {{{"matchFields",
                                          {{{"key", "metadata.name"},
                                            {"operator", "In"},
                                            {"values", {input_.node_name}}}}}}}}};
        break;
      }
    }
    return allocation;
  }

  struct Taken {
    json entry;
    DeviceRef device;
    std::map<std::string, Quantity> consumed;
    bool multi = false;
  };

  const AllocatorInput& input_;
  const json& claim_;
  std::vector<Pool> pools_;
  std::vector<std::vector<Request>> requests_;
  std::set<std::string> in_use_;                                      // allocated, not shareable
  std::map<std::string, std::map<std::string, int64_t>> allocated_;   // device -> capacity -> sum
  std::map<std::string, std::map<std::string, int64_t>> allocating_;  // this run's
  std::set<std::string> allocating_devices_;
  std::set<std::string> shared_devices_;       // AllocatedSharedDeviceIDs, by device
  std::set<std::string> committed_capacity_;   // devices with an AggregatedCapacity entry
  std::set<std::string> allocating_capacity_;  // devices with an allocatingCapacity entry
  std::map<std::string, CounterSets> available_counters_;  // pool name -> left once committed
  std::map<std::string, CounterSets> consumed_counters_;   // pool name -> this call's
  std::string counter_refusal_;  // why the last device refused for counters did not fit
  std::vector<Taken> results_;
  std::string failed_request_;
};

}  // namespace

std::string random_share_id() {
  static thread_local std::mt19937_64 random{std::random_device{}()};
  std::uniform_int_distribution<int> nibble(0, 15);
  std::string uid = "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx";
  for (char& c : uid) {
    if (c != 'x' && c != 'y') continue;
    const int value = c == 'x' ? nibble(random) : 8 + nibble(random) % 4;
    c = "0123456789abcdef"[value];
  }
  return uid;
}

Result<bool> device_matches(const std::string& expression, const std::string& driver,
                            const json& device) {
  return Cel(expression, driver, device).evaluate();
}

Result<std::string> consumed_quantity(const json* request, const json& capacity) {
  TESSERA_ASSIGN_OR_RETURN(Capacity c, read_capacity(capacity, "capacity"));
  std::optional<Quantity> requested;
  if (request) {
    TESSERA_ASSIGN_OR_RETURN(Quantity q, read_quantity(*request, "request"));
    requested = q;
  }
  TESSERA_ASSIGN_OR_RETURN(Quantity q, consumed_by(requested, c));
  return text_of(q);
}

Result<json> allocate(const AllocatorInput& input, const json& claim) {
  return Run(input, claim).allocate();
}

Result<json> counters_left(const AllocatorInput& input) {
  const json no_claim;
  return Run(input, no_claim).counters_left();
}

Result<json> allocated(const AllocatorInput& input, const json& claim) {
  TESSERA_ASSIGN_OR_RETURN(json allocation, allocate(input, claim));
  json result = claim;
  result["status"]["allocation"] = allocation;
  return result;
}

}  // namespace tessera::testing::allocator

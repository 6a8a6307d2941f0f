// Reading untrusted JSON (claims from the API server, admission requests) without exceptions:
// a member that is absent or of another type reads as absent. (A const json's operator[] on a
// missing key or an index past the end is undefined behaviour, and get<T>() on another type
// throws: neither is used on input.)
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace tessera {

// object[key] when `object` is an object that has it, else null.
inline const nlohmann::json* json_member(const nlohmann::json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  const auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

// object[key] when it is a string, else "".
inline std::string json_string(const nlohmann::json& object, const char* key) {
  const nlohmann::json* value = json_member(object, key);
  return value && value->is_string() ? value->get<std::string>() : std::string();
}

// The value at `pointer` ("/spec/pool/generation", a literal of ours) when every step is there
// (an object's member, an array's element), else null.
inline const nlohmann::json* json_at(const nlohmann::json& root, const char* pointer) {
  const nlohmann::json::json_pointer path(pointer);
  return root.contains(path) ? &root.at(path) : nullptr;
}

// The string at `pointer`, or null when it is absent or not a string.
inline const std::string* json_string_at(const nlohmann::json& root, const char* pointer) {
  const nlohmann::json* value = json_at(root, pointer);
  return value && value->is_string() ? &value->get_ref<const std::string&>() : nullptr;
}

// A value for an error message: its JSON text (cut at 80 characters), or "nothing" when absent.
inline std::string json_shown(const nlohmann::json* value) {
  if (!value) return "nothing";
  std::string text = value->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

}  // namespace tessera

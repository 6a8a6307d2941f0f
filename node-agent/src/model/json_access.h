// Reading untrusted JSON (claims from the API server, admission requests) without exceptions:
// a member that is absent or of another type reads as absent.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace tessera::agent {

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

}  // namespace tessera::agent

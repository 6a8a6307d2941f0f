// read_options() over a map instead of the process environment, for the option tests.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tessera/vgpu/options.h"

namespace tessera::vgpu::test {

inline std::map<std::string, std::string>* g_env = nullptr;

inline const char* fake_env(const char* name) {
  auto it = g_env->find(name);
  return it == g_env->end() ? nullptr : it->second.c_str();
}

// The options read from `env` (name -> value).
inline Options read(std::map<std::string, std::string> env) {
  g_env = &env;
  // The same variables as an environ-style array (NAME=VALUE, null-terminated).
  std::vector<std::string> entries;
  for (const auto& [name, value] : env) entries.push_back(name + "=" + value);
  std::vector<const char*> environment;
  for (const std::string& entry : entries) environment.push_back(entry.c_str());
  environment.push_back(nullptr);
  Options options;
  read_options(fake_env, &options, environment.data());
  g_env = nullptr;
  return options;
}

}  // namespace tessera::vgpu::test

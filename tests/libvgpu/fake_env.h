// read_options() over a map instead of the process environment, for the option tests.
#pragma once

#include <map>
#include <string>

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
  Options options;
  read_options(fake_env, &options);
  g_env = nullptr;
  return options;
}

}  // namespace tessera::vgpu::test

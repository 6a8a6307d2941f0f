// libnvidia-ml.so.1 (the real one, or the simulated one in tests) loaded with dlopen, so a program
// starts on a machine without a driver and says why. Never unloaded: NVML keeps process-wide state
// that outlives nvmlShutdown, and its users list GPUs again later. Used by tessera::list_gpus and
// the node agent's device monitor and GPU-time meter, each resolving the entry points it calls.
#pragma once

#include <dlfcn.h>

#include <string>

#include "tessera/status.h"

namespace tessera {

class NvmlLibrary {
 public:
  // Ok, or kUnavailable "cannot load <path> (is the NVIDIA driver installed?): <why>" (a driver
  // installed or upgraded later makes the next try succeed).
  Status open(const std::string& path = "libnvidia-ml.so.1") {
    handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_) return Status::ok();
    return unavailable("cannot load " + path + " (is the NVIDIA driver installed?): " + dlerror());
  }
  // Sets `out` to the entry point `symbol` (null when the library lacks it); true if found.
  template <typename Function>
  bool resolve(const char* symbol, Function& out) const {
    out = handle_ ? reinterpret_cast<Function>(dlsym(handle_, symbol)) : nullptr;
    return out != nullptr;
  }

 private:
  void* handle_ = nullptr;
};

}  // namespace tessera

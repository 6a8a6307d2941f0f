#include "share/shim_library.h"

#include "tessera/shared_library.h"

namespace tessera::agent {

Status check_shim_library(const std::string& path) {
  auto unusable = [](const std::string& what) {
    return failed_precondition("shim " + what +
                               ": no share is handed out without it (--shim-path)");
  };
  if (path.empty() || path[0] != '/')
    return unusable(path + " is not an absolute path (it is the same path in the container)");
  if (Status library = check_shared_library(path); !library.is_ok())
    return unusable(library.message());
  return Status::ok();
}

}  // namespace tessera::agent

#include "tessera/local_shares.h"

#include <unistd.h>

#include <cstdlib>

namespace tessera::share {

std::string local_share_root(const char* xdg_runtime_dir, unsigned uid) {
  if (xdg_runtime_dir != nullptr && xdg_runtime_dir[0] == '/') {
    return std::string(xdg_runtime_dir) + "/tessera/shares";
  }
  return "/tmp/tessera-" + std::to_string(uid) + "/shares";
}

std::string local_share_root() {
  return local_share_root(std::getenv("XDG_RUNTIME_DIR"), getuid());
}

}  // namespace tessera::share

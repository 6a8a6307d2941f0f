// Where `tessera run` keeps the shares it creates on one machine (no Kubernetes), so that other
// tools (`tessera shares`, `tessera top`, `tessera events` without an agent, and the next
// `tessera run`, which removes what a killed one left) find them. One folder per user, mode 0700,
// so no other user can read or write them:
//
//   $XDG_RUNTIME_DIR/tessera/shares/<share>/   when XDG_RUNTIME_DIR is set (an absolute path)
//   /tmp/tessera-<uid>/shares/<share>/         otherwise
//
// A share folder holds the share files (tessera/share_region.h: limits, usage) and `owner`, the
// creating `tessera run` process: "<pid> <start time>\n" (start time: field 22 of
// /proc/<pid>/stat), so a reader can tell a live share from one whose creator is gone.
#pragma once

#include <string>

namespace tessera::share {

inline constexpr const char* kLocalShareOwnerFile = "owner";

// The folder holding this user's local shares (not created here). `xdg_runtime_dir` is the value
// of XDG_RUNTIME_DIR (nullptr or empty or relative: not used); `uid` the user's id.
std::string local_share_root(const char* xdg_runtime_dir, unsigned uid);
// The same for the calling process (getenv("XDG_RUNTIME_DIR"), getuid()).
std::string local_share_root();

}  // namespace tessera::share

// The shim (libvgpu.so) must be a shared library this host's loader can load before the agent
// hands out a share: a container whose preload fails runs unenforced (ld.so only warns). Checked
// from the ELF header alone (tessera/shared_library.h, shared with `tessera run`); the agent never
// loads the shim itself.
#pragma once

#include <string>

#include "tessera/status.h"

namespace tessera::agent {

// Ok when `path` is a regular file with an ELF header of this host's class, byte order and
// machine and type ET_DYN; else kFailedPrecondition naming the path and what is wrong.
Status check_shim_library(const std::string& path);

}  // namespace tessera::agent

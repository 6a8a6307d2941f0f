// Whether a file is a shared library this process's loader can load, from its ELF header alone
// (the file is never loaded). LD_PRELOAD of anything else only makes ld.so warn, and the program
// then runs without the shim: the node agent checks its shim before every prepare, `tessera run`
// before it creates anything.
#pragma once

#include <string>

#include "tessera/status.h"

namespace tessera {

// Ok when `path` is a regular file with an ELF header of this process's class (64-bit), byte order
// and machine, of type ET_DYN and not a position-independent executable (DF_1_PIE); else
// kFailedPrecondition "<path> <what is wrong>".
Status check_shared_library(const std::string& path);

}  // namespace tessera

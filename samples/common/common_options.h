// The options every driver-API sample takes (the device, how entry points are resolved), without
// CLI11: only the command-line files (options.h, *_cli.cc) include CLI11, the costliest header of
// the samples, so the mains and the plans compile without it.
#pragma once

#include "resolve.h"

namespace tessera::samples {

struct CommonOptions {
  int device = 0;
  Resolve resolve = Resolve::kProcAddress;
};

}  // namespace tessera::samples

// How the driver-API samples find driver entry points (driver.h). A header of its own, without
// cuda.h, so code built for the per-thread default stream (where cuda.h renames entry points to
// their _ptsz forms) can share the options and report helpers.
#pragma once

#include <string_view>

namespace tessera::samples {

enum class Resolve { kProcAddress, kDlsym };

std::string_view resolve_name(Resolve resolve);

}  // namespace tessera::samples

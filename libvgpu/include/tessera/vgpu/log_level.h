// The shim's log levels (TESSERA_LOG_LEVEL): public because the option table parses them.
#pragma once

namespace tessera::vgpu {

enum class LogLevel : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

}  // namespace tessera::vgpu

// Logging for the shim: stderr only when asked (TESSERA_LOG_LEVEL, default error), never
// allocates (formats into a stack buffer and write(2)s it), calls nothing the shim intercepts so it
// cannot recurse, usable before initialisation, and each call site prints at most
// kMaxRepeats lines (then one "further messages suppressed" line).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "tessera/vgpu/log_level.h"
#include "tessera/vgpu/options.h"

namespace tessera::vgpu {

inline constexpr uint32_t kMaxRepeats = 8;
// A %s value whose escaped form reaches this many bytes is cut there, marked "...(N bytes)" (N: its
// full length); the rest of the line follows.
inline constexpr size_t kMaxValueBytes = 256;

void set_log_level(LogLevel level);
bool log_enabled(LogLevel level);

// printf-like, supporting only %s %d %u %ld %lu %lld %llu %zu %x %llx %%: no floating point, no
// width. Writes "tessera: <level>: <message>\n" to fd 2.
void log_message(LogLevel level, const char* format, ...) __attribute__((format(printf, 2, 3)));
// Formats into `out` (always NUL-terminated, truncated if needed); returns the length written.
// Every %s value is escaped (\n \r \t \\ and \xNN for other control characters) and cut after
// kMaxValueBytes ("...(N bytes)"), so a value can neither forge a line nor push out the reason that
// follows it.
size_t format_message(char* out, size_t capacity, const char* format, __builtin_va_list args);
size_t format_text(char* out, size_t capacity, const char* format, ...)
    __attribute__((format(printf, 3, 4)));
// Writes "tessera: <level>: <text>\n" to fd 2 with `text` as it is (a line format_message made
// already, whose values are escaped: not escaped twice).
void write_line(LogLevel level, const char* text);

// Per-call-site repeat cap.
bool log_site_allows(std::atomic<uint32_t>& counter, LogLevel level);

}  // namespace tessera::vgpu

#define TESSERA_LOG(level, ...)                                             \
  do {                                                                      \
    static std::atomic<uint32_t> tessera_log_site_count_{0};                \
    if (::tessera::vgpu::log_site_allows(tessera_log_site_count_, level)) { \
      ::tessera::vgpu::log_message(level, __VA_ARGS__);                     \
    }                                                                       \
  } while (0)
#define TESSERA_ERROR(...) TESSERA_LOG(::tessera::vgpu::LogLevel::kError, __VA_ARGS__)
#define TESSERA_WARN(...) TESSERA_LOG(::tessera::vgpu::LogLevel::kWarn, __VA_ARGS__)
#define TESSERA_INFO(...) TESSERA_LOG(::tessera::vgpu::LogLevel::kInfo, __VA_ARGS__)
#define TESSERA_DEBUG(...) TESSERA_LOG(::tessera::vgpu::LogLevel::kDebug, __VA_ARGS__)

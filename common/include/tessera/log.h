// Structured logs for the node agent, the webhook and the CLI (never the shim, which loads into
// tenants' processes and links nothing but libc): a message plus named fields, written through
// spdlog to stderr as one line each, either human text or one JSON object per line.
//
//   text: 2026-12-01T16:00:00.123Z info  prepared share claim=team-a/train share=c1-gpu0-0
//         tessera run: cannot run train.py: No such file or directory      (TextStyle::kCommand)
//   json: {"time":"2026-12-01T16:00:00.123Z","level":"info","logger":"tessera-node-agent",
//          "message":"prepared share","claim":"team-a/train","share":"c1-gpu0-0"}
//
// Values are data, never layout: control characters are escaped in text (so a tenant's value
// cannot forge a line) and JSON-encoded in json. A line that repeats (same level, message and
// fields) within the repeat window is counted instead of written; the next one written after the
// window carries `repeated=N`, so a flapping condition costs one line per window.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "tessera/status.h"

namespace tessera::log {

enum class Level : uint8_t { kTrace, kDebug, kInfo, kWarn, kError };
enum class Format : uint8_t { kText, kJson };
// How text lines look: a daemon's ("<time> <level> <message> k=v"), or a command's, as CLI tools
// print ("<logger>: <message> k=v", "<logger>: warning: <message>"; no time).
enum class TextStyle : uint8_t { kDaemon, kCommand };

struct Options {
  std::string logger;  // the program: "tessera-node-agent", "tessera"
  Level level = Level::kInfo;
  Format format = Format::kText;
  TextStyle text_style = TextStyle::kDaemon;  // json always has time, level and logger
  std::chrono::milliseconds repeat_window{10000};
  // Wall clock for timestamps and the repeat window (injected by tests).
  std::function<std::chrono::system_clock::time_point()> now;
  // Where lines go; empty = stderr through spdlog (tests capture lines here instead).
  std::function<void(std::string_view line)> sink;
};

// "text" or "json"; kInvalidArgument naming the flag and the value otherwise.
Result<Format> parse_format(std::string_view value, std::string_view flag = "--log-format");
// "trace", "debug", "info", "warn", "error".
Result<Level> parse_level(std::string_view value, std::string_view flag = "--log-level");
// The level for `-v` given `count` times on top of `base`: one step more detail per -v.
Level verbose(Level base, int count);
std::string_view level_name(Level level);

// Replaces the process's logging setup. Call once at start, before threads log.
void configure(Options options);
bool enabled(Level level);

struct Field {
  std::string_view key;
  std::string value;
  Field(std::string_view k, std::string v) : key(k), value(std::move(v)) {}
  Field(std::string_view k, std::string_view v) : key(k), value(v) {}
  Field(std::string_view k, const char* v) : key(k), value(v ? v : "") {}
  template <typename Number>
  requires std::is_arithmetic_v<Number> Field(std::string_view k, Number v)
      : key(k), value(std::to_string(v)) {}
};
using Fields = std::initializer_list<Field>;

void write(Level level, std::string_view message, Fields fields = {});
inline void trace(std::string_view message, Fields fields = {}) {
  write(Level::kTrace, message, fields);
}
inline void debug(std::string_view message, Fields fields = {}) {
  write(Level::kDebug, message, fields);
}
inline void info(std::string_view message, Fields fields = {}) {
  write(Level::kInfo, message, fields);
}
inline void warn(std::string_view message, Fields fields = {}) {
  write(Level::kWarn, message, fields);
}
inline void error(std::string_view message, Fields fields = {}) {
  write(Level::kError, message, fields);
}

// One line as configure()'s format would write it (exposed for tests and for tools that print a
// record themselves).
std::string format_line(const Options& options, std::chrono::system_clock::time_point time,
                        Level level, std::string_view message, Fields fields,
                        uint64_t repeated = 0);

// The text form of a value: as is when it is a plain word; else in double quotes with \" \\ \n
// \r \t and \xNN for other control bytes escaped.
std::string quote_text(std::string_view value);

}  // namespace tessera::log

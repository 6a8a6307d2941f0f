#include "tessera/log.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <ctime>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>

namespace tessera::log {
namespace {

// Keys remembered for the repeat limit; past this the oldest windows are forgotten (a key seen
// again then is written once more, which is the safe side).
constexpr size_t kMaxRepeatKeys = 1024;

struct RepeatState {
  std::chrono::system_clock::time_point window_start;
  uint64_t suppressed = 0;
};

struct Logger {
  std::mutex mutex;
  Options options;
  std::shared_ptr<spdlog::logger> stderr_logger;
  std::map<std::string, RepeatState> repeats;
};

Logger& logger() {
  static Logger* instance = [] {
    auto* created = new Logger;  // never destroyed: threads may log during exit
    created->options.logger = "tessera";
    return created;
  }();
  return *instance;
}

std::chrono::system_clock::time_point now_of(const Options& options) {
  return options.now ? options.now() : std::chrono::system_clock::now();
}

std::string rfc3339_millis(std::chrono::system_clock::time_point time) {
  const auto since_epoch = time.time_since_epoch();
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(since_epoch);
  const auto millis =
      std::chrono::duration_cast<std::chrono::milliseconds>(since_epoch - seconds).count();
  const std::time_t whole = seconds.count();
  std::tm utc{};
  gmtime_r(&whole, &utc);
  char text[40];
  const size_t length = std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &utc);
  char with_millis[48];
  std::snprintf(with_millis, sizeof with_millis, "%.*s.%03dZ", static_cast<int>(length), text,
                static_cast<int>(millis < 0 ? 0 : millis));
  return with_millis;
}

bool plain_word(std::string_view value) {
  if (value.empty()) return false;
  for (const char c : value) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte <= ' ' || byte == 0x7f || c == '"' || c == '\\' || c == '=') return false;
  }
  return true;
}

std::string repeat_key(Level level, std::string_view message, Fields fields) {
  std::string key(1, static_cast<char>('0' + static_cast<int>(level)));
  key.append(message);
  for (const Field& field : fields) {
    key.push_back('\0');
    key.append(field.key);
    key.push_back('\0');
    key.append(field.value);
  }
  return key;
}

}  // namespace

Result<Format> parse_format(std::string_view value, std::string_view flag) {
  if (value == "text") return Format::kText;
  if (value == "json") return Format::kJson;
  return invalid_argument(std::string(flag) + "=" + quote_text(value) + ": expected text or json");
}

Result<Level> parse_level(std::string_view value, std::string_view flag) {
  for (const Level level :
       {Level::kTrace, Level::kDebug, Level::kInfo, Level::kWarn, Level::kError}) {
    if (value == level_name(level)) return level;
  }
  return invalid_argument(std::string(flag) + "=" + quote_text(value) +
                          ": expected trace, debug, info, warn or error");
}

Level verbose(Level base, int count) {
  int level = static_cast<int>(base) - (count < 0 ? 0 : count);
  if (level < 0) level = 0;
  return static_cast<Level>(level);
}

std::string_view level_name(Level level) {
  switch (level) {
    case Level::kTrace:
      return "trace";
    case Level::kDebug:
      return "debug";
    case Level::kInfo:
      return "info";
    case Level::kWarn:
      return "warn";
    case Level::kError:
      return "error";
  }
  return "info";
}

std::string quote_text(std::string_view value) {
  if (plain_word(value)) return std::string(value);
  std::string quoted = "\"";
  for (const char c : value) {
    const auto byte = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        quoted += "\\\"";
        break;
      case '\\':
        quoted += "\\\\";
        break;
      case '\n':
        quoted += "\\n";
        break;
      case '\r':
        quoted += "\\r";
        break;
      case '\t':
        quoted += "\\t";
        break;
      default:
        if (byte < ' ' || byte == 0x7f) {
          char escaped[8];
          std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
          quoted += escaped;
        } else {
          quoted.push_back(c);
        }
    }
  }
  quoted.push_back('"');
  return quoted;
}

std::string format_line(const Options& options, std::chrono::system_clock::time_point time,
                        Level level, std::string_view message, Fields fields, uint64_t repeated) {
  if (options.format == Format::kJson) {
    nlohmann::ordered_json line;
    line["time"] = rfc3339_millis(time);
    line["level"] = level_name(level);
    line["logger"] = options.logger;
    line["message"] = message;
    for (const Field& field : fields) {
      const std::string key(field.key);
      // A field never replaces the record's own keys.
      line[line.contains(key) ? "field." + key : key] = field.value;
    }
    if (repeated > 0) line["repeated"] = repeated;
    // Invalid UTF-8 from a tenant's value is replaced, never a thrown exception.
    return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  std::string line;
  const std::string_view name = level_name(level);
  if (options.text_style == TextStyle::kDaemon) {
    line = rfc3339_millis(time);
    line.push_back(' ');
    line.append(name);
    line.append(6 - name.size(), ' ');
  } else {
    line = options.logger + ": ";
    if (level == Level::kWarn) line += "warning: ";
    if (level < Level::kInfo) line += std::string(name) + ": ";
  }
  // The message is ours, but may carry a value: escaped the same way, without the quotes.
  const std::string escaped = quote_text(message);
  line.append(plain_word(message) ? escaped : escaped.substr(1, escaped.size() - 2));
  for (const Field& field : fields) {
    line.push_back(' ');
    line.append(field.key);
    line.push_back('=');
    line.append(quote_text(field.value));
  }
  if (repeated > 0) line.append(" repeated=" + std::to_string(repeated));
  return line;
}

void configure(Options options) {
  Logger& state = logger();
  std::lock_guard lock(state.mutex);
  if (!options.sink && !state.stderr_logger) {
    auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    state.stderr_logger = std::make_shared<spdlog::logger>("tessera", sink);
    state.stderr_logger->set_pattern("%v");
    state.stderr_logger->set_level(spdlog::level::trace);
    state.stderr_logger->flush_on(spdlog::level::trace);
  }
  state.options = std::move(options);
  state.repeats.clear();
}

bool enabled(Level level) {
  Logger& state = logger();
  std::lock_guard lock(state.mutex);
  return level >= state.options.level;
}

void write(Level level, std::string_view message, Fields fields) {
  Logger& state = logger();
  std::lock_guard lock(state.mutex);
  const Options& options = state.options;
  if (level < options.level) return;
  const auto now = now_of(options);

  uint64_t repeated = 0;
  if (options.repeat_window.count() > 0) {
    std::string key = repeat_key(level, message, fields);
    auto found = state.repeats.find(key);
    if (found != state.repeats.end() && now - found->second.window_start < options.repeat_window) {
      ++found->second.suppressed;
      return;
    }
    if (found != state.repeats.end()) {
      repeated = found->second.suppressed;
      found->second = RepeatState{now, 0};
    } else {
      if (state.repeats.size() >= kMaxRepeatKeys) {
        for (auto it = state.repeats.begin(); it != state.repeats.end();) {
          it = now - it->second.window_start >= options.repeat_window ? state.repeats.erase(it)
                                                                      : std::next(it);
        }
        if (state.repeats.size() >= kMaxRepeatKeys) state.repeats.erase(state.repeats.begin());
      }
      state.repeats.emplace(std::move(key), RepeatState{now, 0});
    }
  }

  const std::string line = format_line(options, now, level, message, fields, repeated);
  if (options.sink) {
    options.sink(line);
  } else if (state.stderr_logger) {
    state.stderr_logger->log(spdlog::source_loc{}, spdlog::level::info,
                             spdlog::string_view_t(line.data(), line.size()));
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

}  // namespace tessera::log

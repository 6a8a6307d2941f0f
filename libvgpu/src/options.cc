#include "tessera/vgpu/options.h"

#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "log.h"
#include "os/system_calls.h"
#include "tessera/quantity.h"
#include "tessera/share_region.h"

namespace tessera::vgpu {
namespace {

constexpr OptionInfo kOptionTable[] = {
#define TESSERA_OPTION_ROW(id, name, def, unit, kind, description) \
  {name, def, unit, OptionKind::kind, description},
    TESSERA_VGPU_OPTIONS(TESSERA_OPTION_ROW)
#undef TESSERA_OPTION_ROW
};
static_assert(sizeof kOptionTable / sizeof kOptionTable[0] ==
              static_cast<size_t>(OptionId::kCount));

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

bool parse_decimal(std::string_view text, uint64_t* out) {
  if (text.empty() || text.size() > 20) return false;
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (value > (~0ull - digit) / 10) return false;
    value = value * 10 + digit;
  }
  *out = value;
  return true;
}

// A problem line. `standalone_only`: a problem of an environment limit, moot inside a share
// (where the limit is ignored).
void add_message(Options* options, bool standalone_only, const char* format, ...)
    __attribute__((format(printf, 3, 4)));
void add_message(Options* options, bool standalone_only, const char* format, ...) {
  if (options->message_count >= kMaxMessages) return;
  va_list args;
  va_start(args, format);
  format_message(options->messages[options->message_count], kMessageBytes, format, args);
  va_end(args);
  options->standalone_only[options->message_count] = standalone_only;
  ++options->message_count;
}

// The line printed inside a share for an accounting variable set in the environment.
void add_share_message(Options* options, const char* name, const char* value) {
  if (options->share_message_count >= kMaxMessages) return;
  char* line = options->share_messages[options->share_message_count++];
  format_text(line, kMessageBytes,
              "%s='%s' is ignored: inside a share every limit and charge comes from the share's "
              "limits page",
              name, value);
}

void write_all(int fd, const char* text) {
  size_t length = std::strlen(text);
  while (length > 0) {
    const ssize_t n = os::write(fd, text, length);
    if (n <= 0) return;
    text += n;
    length -= static_cast<size_t>(n);
  }
}

void write_format(int fd, const char* format, ...) __attribute__((format(printf, 2, 3)));
void write_format(int fd, const char* format, ...) {
  char line[512];
  va_list args;
  va_start(args, format);
  format_message(line, sizeof line, format, args);
  va_end(args);
  write_all(fd, line);
}

void format_limit(uint64_t bytes, char* out, size_t capacity) {
  if (bytes == kNoLimit) {
    std::snprintf(out, capacity, "none");
  } else {
    tessera::format_byte_quantity(bytes, out, capacity);
  }
}

}  // namespace

const OptionInfo& option_info(OptionId id) {
  return kOptionTable[static_cast<int>(id)];
}

bool parse_size(std::string_view text, bool hami_units, uint64_t* out) {
  if (hami_units && !text.empty()) {
    uint64_t multiplier = 0;
    switch (text.back()) {
      case 'k':
        multiplier = 1ull << 10;
        break;
      case 'm':
        multiplier = 1ull << 20;
        break;
      case 'g':
        multiplier = 1ull << 30;
        break;
      default:
        break;
    }
    if (multiplier != 0) {
      uint64_t number = 0;
      if (!parse_decimal(text.substr(0, text.size() - 1), &number)) return false;
      if (number > ~0ull / multiplier) return false;
      *out = number * multiplier;
      return true;
    }
  }
  const std::optional<uint64_t> bytes = tessera::parse_byte_quantity(text);
  if (!bytes) return false;
  *out = *bytes;
  return true;
}

namespace {

bool parse_percent(std::string_view text, uint64_t* out) {
  const std::optional<uint32_t> value = tessera::parse_percent(trim(text), 1, 100);
  if (!value) return false;
  *out = *value;
  return true;
}

bool parse_request_percent(std::string_view text, uint64_t* out) {
  const std::optional<uint32_t> value = tessera::parse_percent(trim(text), 0, 100);
  if (!value) return false;
  *out = *value;
  return true;
}

template <typename ParseValue>
bool parse_device_list(std::string_view text, ParseValue parse_value, MemoryLimitSpec* out);

}  // namespace

bool parse_memory_limit(std::string_view text, bool hami_units, MemoryLimitSpec* out) {
  return parse_device_list(
      text,
      [hami_units](std::string_view value, uint64_t* parsed) {
        return parse_size(value, hami_units, parsed);
      },
      out);
}

bool parse_percent_list(std::string_view text, MemoryLimitSpec* out) {
  return parse_device_list(text, parse_percent, out);
}

bool parse_request_percent_list(std::string_view text, MemoryLimitSpec* out) {
  return parse_device_list(text, parse_request_percent, out);
}

bool parse_priority(std::string_view text, uint32_t* out) {
  text = trim(text);
  if (text == "high") {
    *out = 1;
  } else if (text == "normal") {
    *out = 0;
  } else if (text == "low") {
    *out = 2;
  } else {
    return false;
  }
  return true;
}

namespace {

template <typename ParseValue>
bool parse_device_list(std::string_view text, ParseValue parse_value, MemoryLimitSpec* out) {
  MemoryLimitSpec spec;
  text = trim(text);
  if (text.empty()) return false;
  while (true) {
    const size_t comma = text.find(',');
    const std::string_view item = trim(text.substr(0, comma));
    if (item.empty()) return false;
    const size_t equals = item.find('=');
    if (equals == std::string_view::npos) {
      if (spec.has_all) return false;
      if (!parse_value(item, &spec.all)) return false;
      spec.has_all = true;
    } else {
      const std::string_view key = trim(item.substr(0, equals));
      const std::string_view value = trim(item.substr(equals + 1));
      if (spec.count >= kMaxLimitEntries) return false;
      LimitEntry entry{};
      entry.ordinal = -1;
      uint64_t ordinal = 0;
      if (parse_decimal(key, &ordinal)) {
        if (ordinal >= 1024) return false;
        entry.ordinal = static_cast<int>(ordinal);
      } else if ((key.starts_with("GPU-") || key.starts_with("MIG-")) && key.size() > 4 &&
                 key.size() < kMaxUuid) {
        for (char c : key) {
          const bool ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
                          (c >= 'A' && c <= 'Z') || c == '-' || c == '/';
          if (!ok) return false;
        }
        std::memcpy(entry.uuid, key.data(), key.size());
        entry.uuid[key.size()] = '\0';
      } else {
        return false;
      }
      if (!parse_value(value, &entry.bytes)) return false;
      for (int i = 0; i < spec.count; ++i) {
        const LimitEntry& other = spec.entries[i];
        if (entry.ordinal >= 0 ? other.ordinal == entry.ordinal
                               : std::strcmp(other.uuid, entry.uuid) == 0) {
          return false;  // the same device twice
        }
      }
      spec.entries[spec.count++] = entry;
    }
    if (comma == std::string_view::npos) break;
    text = text.substr(comma + 1);
  }
  *out = spec;
  return true;
}

}  // namespace

bool parse_log_level(std::string_view text, LogLevel* out) {
  text = trim(text);
  if (text == "error") {
    *out = LogLevel::kError;
  } else if (text == "warn" || text == "warning") {
    *out = LogLevel::kWarn;
  } else if (text == "info") {
    *out = LogLevel::kInfo;
  } else if (text == "debug") {
    *out = LogLevel::kDebug;
  } else {
    return false;
  }
  return true;
}

bool Options::any_compute() const {
  if (cores_set || burst_set || hami_cores_all_set || cores_blocked || priority != 0) return true;
  for (uint8_t state : hami_cores_state) {
    if (state != 0) return true;
  }
  return false;
}

bool Options::any_limit() const {
  if (tessera_set || hami_all_set || memory_blocked) return true;
  for (uint8_t state : hami_device_state) {
    if (state != 0) return true;
  }
  return false;
}

namespace {

// The option's value; nullptr when unset or empty (for settings, where empty means unset).
const char* env_value(GetEnv get_env, const char* name) {
  const char* value = get_env(name);
  return value && *value ? value : nullptr;
}

// The table's name of a per-ordinal option (CUDA_DEVICE_..._<i>) with <i> replaced by `ordinal`.
void ordinal_name(OptionId id, int ordinal, char* out, size_t capacity) {
  const std::string_view pattern = option_info(id).name;
  const size_t marker = pattern.find("<i>");
  std::snprintf(out, capacity, "%.*s%d", static_cast<int>(marker), pattern.data(), ordinal);
}

// The prefix of a per-ordinal option's name ("CUDA_DEVICE_MEMORY_LIMIT_").
std::string_view ordinal_prefix(OptionId id) {
  const std::string_view pattern = option_info(id).name;
  return pattern.substr(0, pattern.find("<i>"));
}

// HAMi's ordinal suffixes: 0..15, written without a leading zero.
bool valid_ordinal_suffix(std::string_view suffix) {
  if (suffix.size() == 1) return suffix[0] >= '0' && suffix[0] <= '9';
  return suffix.size() == 2 && suffix[0] == '1' && suffix[1] >= '0' && suffix[1] <= '5';
}

void copy_text(char* out, size_t capacity, const char* text) {
  std::snprintf(out, capacity, "%s", text);
}

// Why a value was refused: empty, or not of the expected form.
const char* why(const char* value) {
  return *value ? "is not" : "is empty, not";
}

void read_compute_options(GetEnv get_env, Options* options) {
  auto value_of = [&](OptionId id) { return env_value(get_env, option_info(id).name); };
  auto raw_of = [&](OptionId id) { return get_env(option_info(id).name); };
  if (const char* dir = value_of(OptionId::kDeviceDir)) {
    if (std::strlen(dir) < sizeof options->device_dir) {
      std::strcpy(options->device_dir, dir);
    } else {
      add_message(options, false, "TESSERA_DEVICE_DIR is longer than %zu bytes; using /dev/shm",
                  sizeof options->device_dir - 1);
    }
  }
  if (const char* priority = raw_of(OptionId::kPriority)) {
    if (!parse_priority(priority, &options->priority)) {
      add_message(options, true,
                  "TESSERA_PRIORITY='%s' %s a priority (high, normal, low); using low", priority,
                  why(priority));
      options->priority = 2;  // never more than was asked for
    }
  }
  if (const char* cores = raw_of(OptionId::kCoresLimit)) {
    options->cores_set = true;
    copy_text(options->cores_text, sizeof options->cores_text, cores);
    if (!parse_percent_list(cores, &options->cores)) {
      options->cores_invalid = true;
      add_message(options, true,
                  "TESSERA_CORES_LIMIT='%s' %s a cores limit (expected 1..100, or "
                  "0=30,GPU-<uuid>=50); every device is limited to 0%% of its time",
                  cores, why(cores));
    }
  }
  if (const char* burst = raw_of(OptionId::kCoresBurst)) {
    options->burst_set = true;
    copy_text(options->burst_text, sizeof options->burst_text, burst);
    if (!parse_percent_list(burst, &options->burst)) {
      options->burst_invalid = true;
      add_message(options, true,
                  "TESSERA_CORES_BURST='%s' %s a percent list (expected 1..100, or "
                  "0=30,GPU-<uuid>=50); every device is limited to 0%% of its time",
                  burst, why(burst));
    }
  }
  bool hami_ignored = false;
  auto hami_percent = [&](const char* name, const char* text, uint32_t* out) {
    const std::optional<uint32_t> value = tessera::parse_percent(trim(text), 0, 100);
    if (!value) {
      add_message(options, true,
                  "%s='%s' %s a percent (0..100); every device it names is limited to 0%% of its "
                  "time",
                  name, text, why(text));
      *out = 0;
      return;
    }
    *out = *value == 0 ? 100 : *value;  // HAMi: 0 = no limit
  };
  if (const char* limit = raw_of(OptionId::kHamiCoresLimit)) {
    if (options->cores_set) {
      hami_ignored = true;
    } else {
      options->hami_cores_all_set = true;
      hami_percent(option_info(OptionId::kHamiCoresLimit).name, limit, &options->hami_cores_all);
    }
  }
  for (int i = 0; i < kMaxLimitEntries; ++i) {
    char name[48];
    ordinal_name(OptionId::kHamiCoresLimitN, i, name, sizeof name);
    const char* limit = get_env(name);
    if (!limit) continue;
    if (options->cores_set) {
      hami_ignored = true;
      continue;
    }
    options->hami_cores_state[i] = 1;
    copy_text(options->hami_cores_text[i], sizeof options->hami_cores_text[i], limit);
    hami_percent(name, limit, &options->hami_cores[i]);
  }
  if (hami_ignored) {
    add_message(options, true,
                "TESSERA_CORES_LIMIT is set: the HAMi names CUDA_DEVICE_SM_LIMIT[_<i>] are "
                "ignored");
  }
}

// Every environment entry NAME=VALUE whose NAME starts with a per-ordinal option's prefix but
// whose suffix is no ordinal 0..15 (CUDA_DEVICE_MEMORY_LIMIT_00, _16, _x): the device meant cannot
// be known, so every device is blocked (unless TESSERA_* wins and the HAMi names are ignored).
void scan_ordinal_names(const char* const* environment, Options* options) {
  if (!environment) return;
  for (const char* const* entry = environment; *entry; ++entry) {
    const std::string_view text = *entry;
    const size_t equals = text.find('=');
    if (equals == std::string_view::npos) continue;
    const std::string_view name = text.substr(0, equals);
    const char* value = *entry + equals + 1;
    for (OptionId id : {OptionId::kHamiMemoryLimitN, OptionId::kHamiCoresLimitN}) {
      const std::string_view prefix = ordinal_prefix(id);
      if (!name.starts_with(prefix) || valid_ordinal_suffix(name.substr(prefix.size()))) continue;
      char printable[128];
      std::snprintf(printable, sizeof printable, "%.*s", static_cast<int>(name.size()),
                    name.data());
      add_share_message(options, printable, value);
      const bool memory = id == OptionId::kHamiMemoryLimitN;
      if (memory ? options->tessera_set : options->cores_set) {
        add_message(options, true, "%s is set: %s is ignored",
                    memory ? "TESSERA_MEMORY_LIMIT" : "TESSERA_CORES_LIMIT", printable);
        continue;
      }
      if (memory) {
        options->memory_blocked = true;
      } else {
        options->cores_blocked = true;
      }
      add_message(options, true,
                  "%s='%s' names no device (HAMi's ordinals are 0..15, without a leading zero); "
                  "which device was meant cannot be known, so every device is limited to 0%s",
                  printable, value, memory ? " bytes" : "% of its time");
    }
  }
}

uint64_t spec_value_for(const MemoryLimitSpec& spec, int ordinal, const char* uuid,
                        uint64_t otherwise) {
  for (int i = 0; i < spec.count; ++i) {
    if (spec.entries[i].ordinal < 0 && uuid &&
        share::same_device_uuid(spec.entries[i].uuid, uuid)) {
      return spec.entries[i].bytes;
    }
  }
  for (int i = 0; i < spec.count; ++i) {
    if (spec.entries[i].ordinal >= 0 && spec.entries[i].ordinal == ordinal) {
      return spec.entries[i].bytes;
    }
  }
  return spec.has_all ? spec.all : otherwise;
}

// The first entry of `spec` that names none of `devices`, or -1.
int unmatched_entry(const MemoryLimitSpec& spec, const VisibleDevice* devices, int count) {
  for (int i = 0; i < spec.count; ++i) {
    bool found = false;
    for (int d = 0; d < count && !found; ++d) {
      found =
          spec.entries[i].ordinal >= 0
              ? spec.entries[i].ordinal == devices[d].ordinal
              : devices[d].uuid && share::same_device_uuid(spec.entries[i].uuid, devices[d].uuid);
    }
    if (!found) return i;
  }
  return -1;
}

void entry_key(const LimitEntry& entry, char* out, size_t capacity) {
  if (entry.ordinal >= 0) {
    std::snprintf(out, capacity, "%d", entry.ordinal);
  } else {
    std::snprintf(out, capacity, "%s", entry.uuid);
  }
}

bool ordinal_visible(int ordinal, const VisibleDevice* devices, int count) {
  for (int d = 0; d < count; ++d) {
    if (devices[d].ordinal == ordinal) return true;
  }
  return false;
}

}  // namespace

uint32_t cores_limit_for(const Options& options, int ordinal, const char* uuid) {
  if (options.cores_blocked || options.burst_invalid) return 0;
  if (ordinal >= 0 && ordinal < 32 && (options.cores_blocked_mask >> ordinal & 1) != 0) return 0;
  if (options.cores_set) {
    if (options.cores_invalid) return 0;
    return static_cast<uint32_t>(spec_value_for(options.cores, ordinal, uuid, 100));
  }
  if (ordinal >= 0 && ordinal < kMaxLimitEntries && options.hami_cores_state[ordinal] != 0) {
    return options.hami_cores[ordinal];
  }
  return options.hami_cores_all_set ? options.hami_cores_all : 100;
}

uint32_t cores_burst_for(const Options& options, int ordinal, const char* uuid) {
  if (!options.burst_set || options.burst_invalid) return 0;
  return static_cast<uint32_t>(spec_value_for(options.burst, ordinal, uuid, 0));
}

void read_options(GetEnv get_env, Options* out, const char* const* environment) {
  Options options;
  auto value_of = [&](OptionId id) { return env_value(get_env, option_info(id).name); };
  auto raw_of = [&](OptionId id) { return get_env(option_info(id).name); };
  // Defaults come from the table, like the names.
  parse_log_level(option_info(OptionId::kLogLevel).default_value, &options.log_level);
  parse_size(option_info(OptionId::kContextOverhead).default_value, false,
             &options.context_overhead);
  if (uint64_t ms = 0; parse_decimal(option_info(OptionId::kReclaimWait).default_value, &ms))
    options.reclaim_wait_ms = static_cast<uint32_t>(ms);

  if (const char* level = value_of(OptionId::kLogLevel)) {
    if (!parse_log_level(level, &options.log_level)) {
      add_message(&options, false,
                  "TESSERA_LOG_LEVEL='%s' is not a log level (error, warn, info, debug); using "
                  "error",
                  level);
    }
  }
  // Inside a share every accounting variable of the environment is ignored, with one line each.
  for (int id = 0; id < static_cast<int>(OptionId::kCount); ++id) {
    const OptionInfo& info = option_info(static_cast<OptionId>(id));
    if (info.kind != OptionKind::kAccounting) continue;
    if (std::strstr(info.name, "<i>")) {
      for (int i = 0; i < kMaxLimitEntries; ++i) {
        char name[48];
        ordinal_name(static_cast<OptionId>(id), i, name, sizeof name);
        if (const char* value = get_env(name)) add_share_message(&options, name, value);
      }
    } else if (const char* value = get_env(info.name)) {
      add_share_message(&options, info.name, value);
    }
  }
  if (const char* overhead = raw_of(OptionId::kContextOverhead)) {
    uint64_t bytes = 0;
    if (parse_size(trim(overhead), false, &bytes)) {
      options.context_overhead = bytes;
      options.context_overhead_set = true;
    } else {
      add_message(&options, true,
                  "TESSERA_CONTEXT_OVERHEAD='%s' %s a byte size (e.g. 500Mi); counting the "
                  "default 500Mi per context",
                  overhead, why(overhead));
    }
  }
  if (const char* wait = raw_of(OptionId::kReclaimWait)) {
    uint64_t ms = 0;
    if (parse_decimal(trim(wait), &ms) && ms <= kMaxReclaimWaitMs) {
      options.reclaim_wait_ms = static_cast<uint32_t>(ms);
    } else {
      add_message(&options, false,
                  "TESSERA_RECLAIM_WAIT_MS='%s' is not a number of milliseconds from 0 to %u; "
                  "waiting the default %u ms for reclaim",
                  wait, kMaxReclaimWaitMs, options.reclaim_wait_ms);
    }
  }
  if (const char* dir = value_of(OptionId::kShareDir)) {
    if (std::strlen(dir) >= sizeof options.share_dir - 16) {
      add_message(&options, false,
                  "TESSERA_SHARE_DIR is longer than %zu bytes; no share can be opened, so every "
                  "device is limited to 0 bytes (allocations fail with CUDA_ERROR_OUT_OF_MEMORY)",
                  sizeof options.share_dir - 16);
      options.share_dir[0] = '/';  // a path that has no limits file: fails closed
      options.share_dir[1] = '\0';
    } else {
      std::strcpy(options.share_dir, dir);
    }
  }
  if (const char* limit = raw_of(OptionId::kMemoryLimit)) {
    options.tessera_set = true;
    copy_text(options.tessera_text, sizeof options.tessera_text, limit);
    if (!parse_memory_limit(limit, false, &options.tessera)) {
      options.tessera_invalid = true;
      add_message(&options, true,
                  "TESSERA_MEMORY_LIMIT='%s' %s a memory limit (expected 8Gi, 8G, 8192Mi, "
                  "bytes, or 0=8Gi,GPU-<uuid>=4Gi); every device is limited to 0 bytes: "
                  "allocations fail with CUDA_ERROR_OUT_OF_MEMORY",
                  limit, why(limit));
    }
  }
  bool hami_ignored = false;
  if (const char* limit = raw_of(OptionId::kHamiMemoryLimit); limit && options.tessera_set) {
    hami_ignored = true;
  } else if (limit) {
    options.hami_all_set = true;
    if (!parse_size(trim(limit), true, &options.hami_all)) {
      options.hami_all_invalid = true;
      add_message(&options, true,
                  "CUDA_DEVICE_MEMORY_LIMIT='%s' %s a memory limit (expected e.g. 8g, 8192m, "
                  "8Gi); devices without their own limit are limited to 0 bytes: allocations "
                  "fail with CUDA_ERROR_OUT_OF_MEMORY",
                  limit, why(limit));
    }
  }
  for (int i = 0; i < kMaxLimitEntries; ++i) {
    char name[48];
    ordinal_name(OptionId::kHamiMemoryLimitN, i, name, sizeof name);
    const char* limit = get_env(name);
    if (!limit) continue;
    if (options.tessera_set) {
      hami_ignored = true;
      continue;
    }
    copy_text(options.hami_device_text[i], sizeof options.hami_device_text[i], limit);
    if (parse_size(trim(limit), true, &options.hami_device[i])) {
      options.hami_device_state[i] = 1;
    } else {
      options.hami_device_state[i] = 2;
      add_message(&options, true,
                  "%s='%s' %s a memory limit (expected e.g. 8g, 8192m, 8Gi); device %d is "
                  "limited to 0 bytes: allocations fail with CUDA_ERROR_OUT_OF_MEMORY",
                  name, limit, why(limit), i);
    }
  }
  if (hami_ignored) {
    add_message(&options, true,
                "TESSERA_MEMORY_LIMIT is set: the HAMi names CUDA_DEVICE_MEMORY_LIMIT[_<i>] are "
                "ignored");
  }
  read_compute_options(get_env, &options);
  scan_ordinal_names(environment, &options);
  *out = options;
}

void check_visible_devices(Options* options, const VisibleDevice* devices, int count) {
  char key[kMaxUuid];
  struct Spec {
    const char* name;
    bool set;
    bool invalid;
    const MemoryLimitSpec* spec;
    const char* text;
    bool memory;
  };
  const Spec specs[] = {
      {"TESSERA_MEMORY_LIMIT", options->tessera_set, options->tessera_invalid, &options->tessera,
       options->tessera_text, true},
      {"TESSERA_CORES_LIMIT", options->cores_set, options->cores_invalid, &options->cores,
       options->cores_text, false},
      {"TESSERA_CORES_BURST", options->burst_set, options->burst_invalid, &options->burst,
       options->burst_text, false},
  };
  for (const Spec& spec : specs) {
    if (!spec.set || spec.invalid) continue;
    const int unmatched = unmatched_entry(*spec.spec, devices, count);
    if (unmatched < 0) continue;
    entry_key(spec.spec->entries[unmatched], key, sizeof key);
    (spec.memory ? options->memory_blocked : options->cores_blocked) = true;
    add_message(options, true,
                "%s='%s' names %s, which is not a device this process sees; which device was "
                "meant cannot be known, so every device is limited to 0%s",
                spec.name, spec.text, key, spec.memory ? " bytes" : "% of its time");
  }
  for (int i = 0; i < kMaxLimitEntries; ++i) {
    if (ordinal_visible(i, devices, count)) continue;
    char name[48];
    if (!options->tessera_set && options->hami_device_state[i] != 0 && !options->memory_blocked) {
      ordinal_name(OptionId::kHamiMemoryLimitN, i, name, sizeof name);
      options->memory_blocked = true;
      add_message(options, true,
                  "%s='%s' names device %d, which is not a device this process sees; which "
                  "device was meant cannot be known, so every device is limited to 0 bytes",
                  name, options->hami_device_text[i], i);
    }
    if (!options->cores_set && options->hami_cores_state[i] != 0 && !options->cores_blocked) {
      ordinal_name(OptionId::kHamiCoresLimitN, i, name, sizeof name);
      options->cores_blocked = true;
      add_message(options, true,
                  "%s='%s' names device %d, which is not a device this process sees; which "
                  "device was meant cannot be known, so every device is limited to 0%% of its "
                  "time",
                  name, options->hami_cores_text[i], i);
    }
  }
  // A burst below the device's cores limit (the burst must be at least the limit).
  char below[160] = {};
  size_t length = 0;
  uint32_t first_limit = 0;
  uint32_t first_burst = 0;
  for (int d = 0; d < count; ++d) {
    const uint32_t limit = cores_limit_for(*options, devices[d].ordinal, devices[d].uuid);
    const uint32_t burst = cores_burst_for(*options, devices[d].ordinal, devices[d].uuid);
    if (limit >= 100 || limit == 0 || burst == 0 || burst >= limit) continue;
    if (first_limit == 0) {
      first_limit = limit;
      first_burst = burst;
    }
    if (devices[d].ordinal >= 0 && devices[d].ordinal < 32) {
      options->cores_blocked_mask |= 1u << devices[d].ordinal;
    } else {
      options->cores_blocked = true;
    }
    if (length + 8 < sizeof below) {
      length += static_cast<size_t>(std::snprintf(below + length, sizeof below - length, "%s%d",
                                                  length ? "," : "", devices[d].ordinal));
    }
  }
  if (first_limit != 0) {
    add_message(options, true,
                "TESSERA_CORES_BURST='%s' is below the cores limit of device %s (%u%% < %u%%); a "
                "burst must be at least the limit, so those devices are limited to 0%% of their "
                "time",
                options->burst_text, below, first_burst, first_limit);
  }
}

uint64_t memory_limit_for(const Options& options, int ordinal, const char* uuid) {
  if (options.memory_blocked) return 0;
  if (options.tessera_set) {
    if (options.tessera_invalid) return 0;
    // A per-device list that does not name this device: no limit.
    return spec_value_for(options.tessera, ordinal, uuid, kNoLimit);
  }
  if (ordinal >= 0 && ordinal < kMaxLimitEntries && options.hami_device_state[ordinal] != 0) {
    return options.hami_device_state[ordinal] == 1 ? options.hami_device[ordinal] : 0;
  }
  if (options.hami_all_set) return options.hami_all_invalid ? 0 : options.hami_all;
  return kNoLimit;
}

void print_options(int fd, const Options* options) {
  write_all(fd, "libvgpu options (environment variables):\n");
  for (const OptionInfo& option : kOptionTable) {
    write_format(fd, "  %s\n      default: %s  unit: %s\n      %s\n", option.name,
                 *option.default_value ? option.default_value : "(unset)", option.unit,
                 option.description);
  }
  if (!options) return;
  char text[64];
  write_all(fd, "in effect:\n");
  write_format(fd, "  share dir: %s\n",
               options->share_dir[0] ? options->share_dir : "(standalone)");
  format_limit(options->context_overhead, text, sizeof text);
  write_format(fd, "  context overhead: %s\n", text);
  static constexpr const char* kLevels[] = {"error", "warn", "info", "debug"};
  write_format(fd, "  log level: %s\n", kLevels[static_cast<int>(options->log_level)]);
  write_format(fd, "  reclaim wait: %u ms\n", options->reclaim_wait_ms);
  // The lines are escaped already when formatted: written as they are.
  auto print_problems = [fd, options](bool in_share) {
    for (int i = 0; i < options->message_count; ++i) {
      if (in_share && options->standalone_only[i]) continue;
      write_all(fd, "  problem: ");
      write_all(fd, options->messages[i]);
      write_all(fd, "\n");
    }
    for (int i = 0; in_share && i < options->share_message_count; ++i) {
      write_all(fd, "  problem: ");
      write_all(fd, options->share_messages[i]);
      write_all(fd, "\n");
    }
  };
  if (options->share_dir[0]) {
    print_problems(true);
    return;
  }
  static constexpr const char* kPriorities[] = {"normal", "high", "low"};
  write_format(fd, "  priority: %s\n", kPriorities[options->priority % 3]);
  for (int ordinal = 0; ordinal < kMaxLimitEntries; ++ordinal) {
    const uint32_t cores = cores_limit_for(*options, ordinal, nullptr);
    const uint32_t burst = cores_burst_for(*options, ordinal, nullptr);
    if (cores != 100) {  // a burst only applies with a cores limit
      write_format(fd, "  device %d cores limit: %u%%, burst: %u%%\n", ordinal, cores, burst);
    }
  }
  if (options->memory_blocked) {
    write_all(fd, "  memory limit: 0 on every device (a limit names no device seen)\n");
  } else if (options->tessera_set) {
    const MemoryLimitSpec& spec = options->tessera;
    if (options->tessera_invalid) write_all(fd, "  memory limit: 0 on every device (invalid)\n");
    for (int i = 0; !options->tessera_invalid && i < spec.count; ++i) {
      format_limit(spec.entries[i].bytes, text, sizeof text);
      if (spec.entries[i].ordinal >= 0) {
        write_format(fd, "  device %d memory limit: %s\n", spec.entries[i].ordinal, text);
      } else {
        write_format(fd, "  %s memory limit: %s\n", spec.entries[i].uuid, text);
      }
    }
    format_limit(spec.has_all ? spec.all : kNoLimit, text, sizeof text);
    if (!options->tessera_invalid) write_format(fd, "  memory limit of other devices: %s\n", text);
  } else {
    for (int ordinal = 0; ordinal < kMaxLimitEntries; ++ordinal) {
      if (options->hami_device_state[ordinal] == 0) continue;
      format_limit(memory_limit_for(*options, ordinal, nullptr), text, sizeof text);
      write_format(fd, "  device %d memory limit: %s\n", ordinal, text);
    }
    format_limit(memory_limit_for(*options, -1, nullptr), text, sizeof text);  // no ordinal: all
    write_format(fd, "  memory limit of other devices: %s\n", text);
  }
  print_problems(false);
}

}  // namespace tessera::vgpu

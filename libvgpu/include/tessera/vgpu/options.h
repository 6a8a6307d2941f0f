// The shim's options: one table (environment variable, default, unit, description) from which the
// option ids, the listing (`tessera-vgpu-options --print`) and the reading are generated. Parsers
// are pure functions over string_views (unit-tested and fuzzed); read_options() takes the
// environment as a function so it can be tested without touching the process environment.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tessera/vgpu/log_level.h"

namespace tessera::vgpu {

//        id                name                          default   unit      description
#define TESSERA_VGPU_OPTIONS(X)                                                                  \
  X(kShareDir, "TESSERA_SHARE_DIR", "", "path",                                                  \
    "share directory (limits, usage) written by the node agent, or a ':'-separated list, used "  \
    "beside the shares under /var/run/tessera/shares; none: a private share from the limits "    \
    "below")                                                                                     \
  X(kMemoryLimit, "TESSERA_MEMORY_LIMIT", "", "bytes",                                           \
    "memory limit for every device (8Gi, 8G, 8192Mi, bytes) or per device: 0=8Gi,1=4Gi or "      \
    "GPU-<uuid>=8Gi; unset: no limit")                                                           \
  X(kContextOverhead, "TESSERA_CONTEXT_OVERHEAD", "500Mi", "bytes",                              \
    "device memory counted per CUDA context (a tiny process used about 520Mi on an H200)")       \
  X(kLogLevel, "TESSERA_LOG_LEVEL", "error", "level",                                            \
    "stderr logging: error, warn, info or debug")                                                \
  X(kHamiMemoryLimit, "CUDA_DEVICE_MEMORY_LIMIT", "", "bytes",                                   \
    "HAMi-core alias of TESSERA_MEMORY_LIMIT for every device; 8g/8192m/1024k are binary units") \
  X(kHamiMemoryLimitN, "CUDA_DEVICE_MEMORY_LIMIT_<i>", "", "bytes",                              \
    "HAMi-core alias: limit of device ordinal i (0..15); wins over CUDA_DEVICE_MEMORY_LIMIT")    \
  X(kCoresLimit, "TESSERA_CORES_LIMIT", "", "percent",                                           \
    "GPU time the share may use, percent (1..100) for every device or per device: 0=30,1=50 or " \
    "GPU-<uuid>=30; unset or 100: no limit")                                                     \
  X(kCoresBurst, "TESSERA_CORES_BURST", "", "percent",                                           \
    "percent the share may use while no other process uses the device (same syntax; at least "   \
    "the cores limit); unset: no bursting")                                                      \
  X(kPriority, "TESSERA_PRIORITY", "normal", "level",                                            \
    "high, normal or low: a share yields the device to active shares of higher priority")        \
  X(kDeviceDir, "TESSERA_DEVICE_DIR", "/dev/shm", "path",                                        \
    "where this user's priority boards (tessera-<uid>/tessera-device-<uuid>) live, no agent")    \
  X(kHamiCoresLimit, "CUDA_DEVICE_SM_LIMIT", "", "percent",                                      \
    "HAMi-core alias of TESSERA_CORES_LIMIT for every device (0 = no limit, as in HAMi)")        \
  X(kHamiCoresLimitN, "CUDA_DEVICE_SM_LIMIT_<i>", "", "percent",                                 \
    "HAMi-core alias: cores limit of device ordinal i (0..15); wins over CUDA_DEVICE_SM_LIMIT")

enum class OptionId : int {
#define TESSERA_OPTION_ID(id, name, def, unit, description) id,
  TESSERA_VGPU_OPTIONS(TESSERA_OPTION_ID)
#undef TESSERA_OPTION_ID
      kCount
};

struct OptionInfo {
  const char* name;
  const char* default_value;
  const char* unit;
  const char* description;
};
const OptionInfo& option_info(OptionId id);

inline constexpr uint64_t kNoLimit = ~0ull;
inline constexpr int kMaxLimitEntries = 16;
inline constexpr size_t kMaxUuid = 48;

// ---- pure parsers
// ---------------------------------------------------------------------------------

// A byte size. `hami_units`: also accept HAMi's lower-case k/m/g suffixes as binary units
// (1024-based), as HAMi-core does for CUDA_DEVICE_MEMORY_LIMIT; otherwise Kubernetes quantities
// only (tessera::parse_byte_quantity: Ki/Mi/Gi binary, k/K/M/G decimal, plain bytes).
bool parse_size(std::string_view text, bool hami_units, uint64_t* out);

struct LimitEntry {
  int ordinal;          // -1 when keyed by UUID
  char uuid[kMaxUuid];  // "GPU-..." when keyed by UUID
  uint64_t bytes;
};

// TESSERA_MEMORY_LIMIT: either one size for every device, or a comma-separated list of
// <ordinal>=<size> / GPU-<uuid>=<size>. Whitespace around items is allowed.
struct MemoryLimitSpec {
  bool has_all = false;
  uint64_t all = kNoLimit;
  int count = 0;
  LimitEntry entries[kMaxLimitEntries] = {};
};
bool parse_memory_limit(std::string_view text, bool hami_units, MemoryLimitSpec* out);

bool parse_log_level(std::string_view text, LogLevel* out);

// TESSERA_CORES_LIMIT / TESSERA_CORES_BURST: one percent (1..100) for every device, or a list of
// <ordinal>=<percent> / GPU-<uuid>=<percent> (LimitEntry::bytes holds the percent).
bool parse_percent_list(std::string_view text, MemoryLimitSpec* out);

// TESSERA_PRIORITY: high, normal, low (share::kPriority*).
bool parse_priority(std::string_view text, uint32_t* out);

// ---- reading the environment
// ------------------------------------------------------------------------

using GetEnv = const char* (*)(const char* name);

struct Options {
  char share_dir[1024] = {};  // TESSERA_SHARE_DIR: one folder or a ':'-separated list
  LogLevel log_level = LogLevel::kError;
  uint64_t context_overhead = 500ull << 20;

  // Memory limits from the environment, for a standalone share (ignored when a share dir is used).
  bool tessera_set = false;
  bool tessera_invalid = false;  // TESSERA_MEMORY_LIMIT could not be parsed: limit 0 everywhere
  MemoryLimitSpec tessera;
  bool hami_all_set = false;
  bool hami_all_invalid = false;
  uint64_t hami_all = kNoLimit;
  uint8_t hami_device_state[kMaxLimitEntries] = {};  // 0 unset, 1 set, 2 invalid
  uint64_t hami_device[kMaxLimitEntries] = {};

  // Compute limits from the environment, for a standalone share (percent; see cores_limit_for).
  bool cores_set = false;
  bool cores_invalid = false;  // TESSERA_CORES_LIMIT could not be parsed: 1% everywhere
  MemoryLimitSpec cores;
  bool burst_set = false;
  bool burst_invalid = false;  // TESSERA_CORES_BURST could not be parsed: no bursting
  MemoryLimitSpec burst;
  bool hami_cores_all_set = false;
  uint32_t hami_cores_all = 100;
  uint8_t hami_cores_state[kMaxLimitEntries] = {};  // 0 unset, 1 set
  uint32_t hami_cores[kMaxLimitEntries] = {};
  uint32_t priority = 0;  // share::kPriorityNormal
  char device_dir[200] = "/dev/shm";

  // Problems found while reading, as ready-to-print messages (the caller logs them).
  int message_count = 0;
  char messages[10][320] = {};

  // Any compute setting (a cores limit, a burst or a priority other than normal) in the
  // environment.
  bool any_compute() const;

  bool any_limit() const;
};

// Reads every option through `get_env` (getenv in the shim). Never fails: invalid values are
// reported in `messages` and replaced by their documented safe behaviour.
void read_options(GetEnv get_env, Options* out);

// The memory limit of a device (CUDA ordinal and "GPU-..." UUID) for a standalone share:
// TESSERA_MEMORY_LIMIT (by UUID, then ordinal, then the all-devices value) wins over the HAMi
// names (CUDA_DEVICE_MEMORY_LIMIT_<i>, then CUDA_DEVICE_MEMORY_LIMIT). An invalid value gives 0.
// kNoLimit when nothing applies.
uint64_t memory_limit_for(const Options& options, int ordinal, const char* uuid);

// The cores limit (percent, 1..100; 100 = none) of a device for a standalone share, with the same
// precedence as memory_limit_for. An invalid TESSERA_CORES_LIMIT gives 1 (never the whole GPU).
uint32_t cores_limit_for(const Options& options, int ordinal, const char* uuid);
// The burst (percent; 0 = none) of a device for a standalone share.
uint32_t cores_burst_for(const Options& options, int ordinal, const char* uuid);

// Writes the option table (and, when `options` is given, the values in effect) to `fd`.
void print_options(int fd, const Options* options);

}  // namespace tessera::vgpu

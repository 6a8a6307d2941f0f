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

// kind: kSetting (applies everywhere) or kAccounting (a limit or charge: taken from the limits page
// inside a share, where the environment's value is ignored with one line; from the environment
// without a share, where an empty or unreadable value fails closed: docs/libvgpu.md).
//        id                name                          default   unit      kind  description
#define TESSERA_VGPU_OPTIONS(X)                                                                  \
  X(kShareDir, "TESSERA_SHARE_DIR", "", "path", kSetting,                                        \
    "share directory (limits, usage) written by the node agent, or a ':'-separated list, used "  \
    "beside the shares under /var/run/tessera/shares; none: a private share from the limits "    \
    "below")                                                                                     \
  X(kMemoryLimit, "TESSERA_MEMORY_LIMIT", "", "bytes", kAccounting,                              \
    "memory limit for every device (8Gi, 8G, 8192Mi, bytes) or per device: 0=8Gi,1=4Gi or "      \
    "GPU-<uuid>=8Gi; unset: no limit; empty, unreadable or naming a device not seen: 0")         \
  X(kContextOverhead, "TESSERA_CONTEXT_OVERHEAD", "500Mi", "bytes", kAccounting,                 \
    "device memory counted per CUDA context without a share (inside one the limits page's "      \
    "measured figure, else 500Mi; a tiny process used about 520Mi on an H200)")                  \
  X(kLogLevel, "TESSERA_LOG_LEVEL", "error", "level", kSetting,                                  \
    "stderr logging: error, warn, info or debug")                                                \
  X(kHamiMemoryLimit, "CUDA_DEVICE_MEMORY_LIMIT", "", "bytes", kAccounting,                      \
    "HAMi-core alias of TESSERA_MEMORY_LIMIT for every device; 8g/8192m/1024k are binary units") \
  X(kHamiMemoryLimitN, "CUDA_DEVICE_MEMORY_LIMIT_<i>", "", "bytes", kAccounting,                 \
    "HAMi-core alias: limit of device ordinal i (0..15, no leading zero; another suffix blocks " \
    "every device); wins over CUDA_DEVICE_MEMORY_LIMIT")                                         \
  X(kCoresLimit, "TESSERA_CORES_LIMIT", "", "percent", kAccounting,                              \
    "GPU time the share may use, percent (1..100) for every device or per device: 0=30,1=50 or " \
    "GPU-<uuid>=30; unset or 100: no limit")                                                     \
  X(kCoresBurst, "TESSERA_CORES_BURST", "", "percent", kAccounting,                              \
    "percent the share may use while no other process uses the device (same syntax; at least "   \
    "the cores limit, else the device gets 0); unset: no bursting")                              \
  X(kPriority, "TESSERA_PRIORITY", "normal", "level", kAccounting,                               \
    "high, normal or low: a share yields the device to active shares of higher priority")        \
  X(kDeviceDir, "TESSERA_DEVICE_DIR", "/dev/shm", "path", kSetting,                              \
    "where this user's priority boards (tessera-<uid>/tessera-device-<uuid>) live, no agent")    \
  X(kHamiCoresLimit, "CUDA_DEVICE_SM_LIMIT", "", "percent", kAccounting,                         \
    "HAMi-core alias of TESSERA_CORES_LIMIT for every device (0 = no limit, as in HAMi)")        \
  X(kHamiCoresLimitN, "CUDA_DEVICE_SM_LIMIT_<i>", "", "percent", kAccounting,                    \
    "HAMi-core alias: cores limit of device ordinal i (0..15, no leading zero; another suffix "  \
    "gives every device 0); wins over CUDA_DEVICE_SM_LIMIT")                                     \
  X(kReclaimWait, "TESSERA_RECLAIM_WAIT_MS", "5000", "ms", kSetting,                             \
    "how long an allocation the driver refuses waits while the agent evicts borrowers, when "    \
    "the agent's share is within its memory request on the device (0..600000; 0: no wait)")

enum class OptionKind : int { kSetting, kAccounting };

enum class OptionId : int {
#define TESSERA_OPTION_ID(id, name, def, unit, kind, description) id,
  TESSERA_VGPU_OPTIONS(TESSERA_OPTION_ID)
#undef TESSERA_OPTION_ID
      kCount
};

struct OptionInfo {
  const char* name;
  const char* default_value;
  const char* unit;
  OptionKind kind;
  const char* description;
};
const OptionInfo& option_info(OptionId id);

inline constexpr uint64_t kNoLimit = ~0ull;
inline constexpr int kMaxLimitEntries = 16;
inline constexpr size_t kMaxUuid = 48;
inline constexpr uint32_t kMaxReclaimWaitMs = 600000;  // TESSERA_RECLAIM_WAIT_MS at most

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
// The same syntax with 0 allowed (`tessera run --cores 0`: a best-effort request).
bool parse_request_percent_list(std::string_view text, MemoryLimitSpec* out);

// TESSERA_PRIORITY: high, normal, low (share::kPriority*).
bool parse_priority(std::string_view text, uint32_t* out);

// ---- reading the environment
// ------------------------------------------------------------------------

using GetEnv = const char* (*)(const char* name);

inline constexpr int kMaxMessages = 24;
inline constexpr size_t kMessageBytes = 1024;  // a value (cut at 256 bytes, escaped) and why

struct Options {
  char share_dir[1024] = {};  // TESSERA_SHARE_DIR: one folder or a ':'-separated list
  LogLevel log_level = LogLevel::kError;
  uint64_t context_overhead = 500ull << 20;  // the charge per context without a share
  bool context_overhead_set = false;         // TESSERA_CONTEXT_OVERHEAD was given (and valid)

  // Memory limits from the environment, for a standalone share (ignored when a share dir is used).
  bool tessera_set = false;
  bool tessera_invalid = false;  // TESSERA_MEMORY_LIMIT empty or unreadable: limit 0 everywhere
  MemoryLimitSpec tessera;
  char tessera_text[1024] = {};  // the value as given (for messages)
  bool hami_all_set = false;
  bool hami_all_invalid = false;
  uint64_t hami_all = kNoLimit;
  uint8_t hami_device_state[kMaxLimitEntries] = {};  // 0 unset, 1 set, 2 invalid
  uint64_t hami_device[kMaxLimitEntries] = {};
  char hami_device_text[kMaxLimitEntries][64] = {};  // the values as given (for messages)
  // A CUDA_DEVICE_MEMORY_LIMIT_<suffix> whose suffix is no ordinal 0..15, or a device list entry
  // (or HAMi ordinal) that names no device the process sees (check_visible_devices): which device
  // was meant cannot be known, so every device gets 0 bytes.
  bool memory_blocked = false;

  // Compute limits from the environment, for a standalone share (percent; see cores_limit_for).
  bool cores_set = false;
  bool cores_invalid = false;  // TESSERA_CORES_LIMIT empty or unreadable: 0% everywhere
  MemoryLimitSpec cores;
  char cores_text[1024] = {};
  bool burst_set = false;
  bool burst_invalid = false;  // TESSERA_CORES_BURST empty or unreadable: 0% everywhere
  MemoryLimitSpec burst;
  char burst_text[1024] = {};
  bool hami_cores_all_set = false;
  uint32_t hami_cores_all = 100;
  uint8_t hami_cores_state[kMaxLimitEntries] = {};  // 0 unset, 1 set
  uint32_t hami_cores[kMaxLimitEntries] = {};
  char hami_cores_text[kMaxLimitEntries][64] = {};
  bool cores_blocked = false;       // like memory_blocked, for the cores variables: 0% everywhere
  uint32_t cores_blocked_mask = 0;  // ordinals whose burst is below their cores limit: 0%
  uint32_t priority = 0;            // share::kPriorityNormal
  char device_dir[200] = "/dev/shm";
  // TESSERA_RECLAIM_WAIT_MS: the bound on an allocation's wait for reclaim (docs/libvgpu.md).
  uint32_t reclaim_wait_ms = 5000;

  // Problems found while reading, as ready-to-print lines (the caller logs them): `messages` apply
  // everywhere, except those marked standalone_only (an environment limit's problem: moot inside
  // a share). `share_messages`: one line per accounting variable set in the environment, printed
  // inside a share, where it is ignored.
  int message_count = 0;
  bool standalone_only[kMaxMessages] = {};
  char messages[kMaxMessages][kMessageBytes] = {};
  int share_message_count = 0;
  char share_messages[kMaxMessages][kMessageBytes] = {};

  // Any compute setting (a cores limit, a burst or a priority other than normal) in the
  // environment.
  bool any_compute() const;

  bool any_limit() const;
};

// Reads every option through `get_env` (getenv in the shim). Never fails: invalid values are
// reported in `messages` and replaced by their documented safe behaviour. `environment` (environ
// in the shim; may be null) is scanned for CUDA_DEVICE_MEMORY_LIMIT_* / CUDA_DEVICE_SM_LIMIT_*
// names whose suffix is no valid ordinal, which a lookup by name cannot find.
void read_options(GetEnv get_env, Options* out, const char* const* environment = nullptr);

// A device the process sees (standalone share): CUDA ordinal and "GPU-..." UUID.
struct VisibleDevice {
  int ordinal;
  const char* uuid;
};
// Checks the environment limits against the devices the process sees: an entry of
// TESSERA_MEMORY_LIMIT / TESSERA_CORES_LIMIT / TESSERA_CORES_BURST (UUID or ordinal) or a HAMi
// ordinal that matches none of them blocks every device (memory 0, or cores 0 for the cores
// variables); a device whose burst is below its cores limit gets cores 0. Adds one message per
// problem (from index message_count on: the caller logs the new ones).
void check_visible_devices(Options* options, const VisibleDevice* devices, int count);

// The memory limit of a device (CUDA ordinal and "GPU-..." UUID) for a standalone share:
// TESSERA_MEMORY_LIMIT (by UUID, then ordinal, then the all-devices value) wins over the HAMi
// names (CUDA_DEVICE_MEMORY_LIMIT_<i>, then CUDA_DEVICE_MEMORY_LIMIT). An invalid value gives 0.
// kNoLimit when nothing applies.
uint64_t memory_limit_for(const Options& options, int ordinal, const char* uuid);

// The cores limit (percent, 0..100; 100 = none) of a device for a standalone share, with the same
// precedence as memory_limit_for. An invalid or unmatched cores variable gives 0 (never the
// whole GPU).
uint32_t cores_limit_for(const Options& options, int ordinal, const char* uuid);
// The burst (percent; 0 = none) of a device for a standalone share.
uint32_t cores_burst_for(const Options& options, int ordinal, const char* uuid);

// Writes the option table (and, when `options` is given, the values in effect) to `fd`.
void print_options(int fd, const Options* options);

}  // namespace tessera::vgpu

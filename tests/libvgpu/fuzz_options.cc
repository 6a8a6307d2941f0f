// libFuzzer target for the shim's option parsers (run for a bounded time as a CTest). Every input
// is fed to each parser and to read_options() as the value of every variable; the properties
// checked: no crash or sanitizer report, parsed sizes round-trip through the formatter, per-device
// lists stay within their bounds, and an invalid limit never yields "no limit".
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "tessera/quantity.h"
#include "tessera/vgpu/options.h"

namespace {

std::string g_value;
const char* every_variable(const char*) {
  return g_value.c_str();
}

void check(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::vgpu;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  uint64_t bytes = 0;
  if (parse_size(text, false, &bytes)) {
    char formatted[64];
    tessera::format_byte_quantity(bytes, formatted, sizeof formatted);
    uint64_t again = 0;
    check(parse_size(formatted, false, &again) && again == bytes);
  }
  parse_size(text, true, &bytes);
  for (bool hami : {false, true}) {
    MemoryLimitSpec spec;
    if (parse_memory_limit(text, hami, &spec)) {
      check(spec.count >= 0 && spec.count <= kMaxLimitEntries);
      check(spec.has_all || spec.count > 0);
      for (int i = 0; i < spec.count; ++i) {
        check(spec.entries[i].ordinal >= 0 || std::strlen(spec.entries[i].uuid) < kMaxUuid);
      }
    }
  }
  LogLevel level = LogLevel::kError;
  parse_log_level(text, &level);
  MemoryLimitSpec percents;
  if (parse_percent_list(text, &percents)) {
    check(!percents.has_all || (percents.all >= 1 && percents.all <= 100));
    for (int i = 0; i < percents.count; ++i) {
      check(percents.entries[i].bytes >= 1 && percents.entries[i].bytes <= 100);
    }
  }

  g_value.assign(text.data(), text.size());
  Options options;
  read_options(every_variable, &options);
  check(options.message_count >= 0 &&
        options.message_count <=
            static_cast<int>(sizeof options.messages / sizeof options.messages[0]));
  check(options.share_message_count >= 0 && options.share_message_count <= kMaxMessages);
  const uint64_t limit = memory_limit_for(options, 0, g_value.c_str());
  if (options.tessera_invalid) check(limit == 0);
  if (options.memory_blocked) check(limit == 0);
  // Compute limits fail closed too: never more than 100, 0 when unreadable (compute/meter.cc
  // floors a 0 in the limits page at 1%).
  const uint32_t cores = cores_limit_for(options, 0, g_value.c_str());
  check(cores <= 100);
  if (options.cores_invalid || options.burst_invalid || options.cores_blocked) check(cores == 0);
  check(cores_burst_for(options, 0, g_value.c_str()) <= 100);
  return 0;
}

// The shim's option parsers and log formatter: pure functions, tested directly.
#include <gtest/gtest.h>

#include <cstdarg>
#include <cstring>
#include <map>
#include <string>

#include "fake_env.h"
#include "log.h"
#include "tessera/vgpu/options.h"

namespace {

using tessera::vgpu::check_visible_devices;
using tessera::vgpu::cores_burst_for;
using tessera::vgpu::cores_limit_for;
using tessera::vgpu::format_message;
using tessera::vgpu::kMaxValueBytes;
using tessera::vgpu::kNoLimit;
using tessera::vgpu::LogLevel;
using tessera::vgpu::memory_limit_for;
using tessera::vgpu::MemoryLimitSpec;
using tessera::vgpu::Options;
using tessera::vgpu::parse_log_level;
using tessera::vgpu::parse_memory_limit;
using tessera::vgpu::parse_size;
using tessera::vgpu::VisibleDevice;

constexpr uint64_t kMi = 1ull << 20;
constexpr uint64_t kGi = 1ull << 30;

using tessera::vgpu::test::read;

TEST(ParseSize, KubernetesQuantities) {
  uint64_t bytes = 0;
  ASSERT_TRUE(parse_size("8Gi", false, &bytes));
  EXPECT_EQ(bytes, 8 * kGi);
  ASSERT_TRUE(parse_size("8G", false, &bytes));
  EXPECT_EQ(bytes, 8'000'000'000u);
  ASSERT_TRUE(parse_size("8192Mi", false, &bytes));
  EXPECT_EQ(bytes, 8 * kGi);
  ASSERT_TRUE(parse_size("1073741824", false, &bytes));
  EXPECT_EQ(bytes, kGi);
  ASSERT_TRUE(parse_size("0", false, &bytes));
  EXPECT_EQ(bytes, 0u);
  EXPECT_FALSE(parse_size("8g", false, &bytes)) << "HAMi suffixes only for HAMi names";
  EXPECT_FALSE(parse_size("", false, &bytes));
  EXPECT_FALSE(parse_size("-1Gi", false, &bytes));
  EXPECT_FALSE(parse_size("8 Gi", false, &bytes));
  EXPECT_FALSE(parse_size("99999999999999999999999", false, &bytes));
}

TEST(ParseSize, HamiLowerCaseSuffixesAreBinary) {
  uint64_t bytes = 0;
  ASSERT_TRUE(parse_size("8g", true, &bytes));
  EXPECT_EQ(bytes, 8 * kGi);
  ASSERT_TRUE(parse_size("8192m", true, &bytes));
  EXPECT_EQ(bytes, 8 * kGi);
  ASSERT_TRUE(parse_size("1024k", true, &bytes));
  EXPECT_EQ(bytes, kMi);
  ASSERT_TRUE(parse_size("8Gi", true, &bytes));
  EXPECT_EQ(bytes, 8 * kGi);
  ASSERT_TRUE(parse_size("8G", true, &bytes));  // upper case stays a Kubernetes (decimal) unit
  EXPECT_EQ(bytes, 8'000'000'000u);
  EXPECT_FALSE(parse_size("g", true, &bytes));
  EXPECT_FALSE(parse_size("1.5g", true, &bytes));
  EXPECT_FALSE(parse_size("99999999999999g", true, &bytes));
}

TEST(ParseMemoryLimit, OneValueOrPerDevice) {
  MemoryLimitSpec spec;
  ASSERT_TRUE(parse_memory_limit("8Gi", false, &spec));
  EXPECT_TRUE(spec.has_all);
  EXPECT_EQ(spec.all, 8 * kGi);
  EXPECT_EQ(spec.count, 0);

  ASSERT_TRUE(parse_memory_limit("0=8Gi, 1=4Gi", false, &spec));
  EXPECT_FALSE(spec.has_all);
  ASSERT_EQ(spec.count, 2);
  EXPECT_EQ(spec.entries[1].ordinal, 1);
  EXPECT_EQ(spec.entries[1].bytes, 4 * kGi);

  ASSERT_TRUE(parse_memory_limit("GPU-5e1a0000-7e55-4e2a-9000-000000000000=2Gi,1Gi", false, &spec));
  EXPECT_TRUE(spec.has_all);
  EXPECT_EQ(spec.all, kGi);
  EXPECT_STREQ(spec.entries[0].uuid, "GPU-5e1a0000-7e55-4e2a-9000-000000000000");
  EXPECT_EQ(spec.entries[0].ordinal, -1);

  for (const char* bad : {"", ",", "0=8Gi,", "0=8Gi,0=4Gi", "x=8Gi", "0=", "=8Gi", "8Gi,8Gi",
                          "GPU-=8Gi", "0=8Gx", "GPU-a b=1Gi", "5000=1Gi"}) {
    EXPECT_FALSE(parse_memory_limit(bad, false, &spec)) << bad;
  }
}

TEST(ParseLogLevel, KnownNames) {
  LogLevel level = LogLevel::kError;
  ASSERT_TRUE(parse_log_level("debug", &level));
  EXPECT_EQ(level, LogLevel::kDebug);
  ASSERT_TRUE(parse_log_level("warn", &level));
  EXPECT_EQ(level, LogLevel::kWarn);
  EXPECT_FALSE(parse_log_level("verbose", &level));
}

TEST(ReadOptions, DefaultsWhenNothingIsSet) {
  const Options options = read({});
  EXPECT_FALSE(options.any_limit());
  EXPECT_EQ(options.share_dir[0], '\0');
  EXPECT_EQ(options.context_overhead, 500 * kMi);
  EXPECT_EQ(options.log_level, LogLevel::kError);
  EXPECT_EQ(options.message_count, 0);
  EXPECT_EQ(memory_limit_for(options, 0, "GPU-x"), kNoLimit);
}

TEST(ReadOptions, PrecedenceUuidThenOrdinalThenAllThenHami) {
  Options options = read(
      {{"TESSERA_MEMORY_LIMIT", "GPU-aaa=1Gi,1=2Gi,3Gi"}, {"CUDA_DEVICE_MEMORY_LIMIT", "bad"}});
  ASSERT_EQ(options.message_count, 1) << "the HAMi names are ignored, with one message";
  EXPECT_NE(std::strstr(options.messages[0], "ignored"), nullptr);
  EXPECT_EQ(memory_limit_for(options, 1, "GPU-aaa"), kGi);
  EXPECT_EQ(memory_limit_for(options, 1, "GPU-bbb"), 2 * kGi);
  EXPECT_EQ(memory_limit_for(options, 0, "GPU-bbb"), 3 * kGi);
  options = read({{"TESSERA_MEMORY_LIMIT", "1=2Gi"}});
  EXPECT_EQ(memory_limit_for(options, 0, "GPU-bbb"), kNoLimit) << "devices not listed: no limit";
  options = read({{"CUDA_DEVICE_MEMORY_LIMIT", "9g"}, {"CUDA_DEVICE_MEMORY_LIMIT_1", "2048m"}});
  EXPECT_EQ(memory_limit_for(options, 1, "GPU-x"), 2 * kGi);
  EXPECT_EQ(memory_limit_for(options, 0, "GPU-x"), 9 * kGi);
}

TEST(ReadOptions, InvalidLimitsFailClosedWithOneMessageEach) {
  Options options = read({{"TESSERA_MEMORY_LIMIT", "lots"}});
  EXPECT_TRUE(options.tessera_invalid);
  EXPECT_EQ(memory_limit_for(options, 0, "GPU-x"), 0u);
  ASSERT_EQ(options.message_count, 1);
  EXPECT_NE(std::strstr(options.messages[0], "TESSERA_MEMORY_LIMIT='lots'"), nullptr);
  EXPECT_NE(std::strstr(options.messages[0], "CUDA_ERROR_OUT_OF_MEMORY"), nullptr);

  options = read({{"CUDA_DEVICE_MEMORY_LIMIT_2", "2q"}, {"CUDA_DEVICE_MEMORY_LIMIT", "4g"}});
  EXPECT_EQ(memory_limit_for(options, 2, nullptr), 0u);
  EXPECT_EQ(memory_limit_for(options, 0, nullptr), 4 * kGi);
  ASSERT_EQ(options.message_count, 1);
  EXPECT_NE(std::strstr(options.messages[0], "CUDA_DEVICE_MEMORY_LIMIT_2='2q'"), nullptr);
}

TEST(ReadOptions, OtherInvalidValuesKeepTheirDefaults) {
  const Options options =
      read({{"TESSERA_LOG_LEVEL", "loud"}, {"TESSERA_CONTEXT_OVERHEAD", "big"}});
  EXPECT_EQ(options.log_level, LogLevel::kError);
  EXPECT_EQ(options.context_overhead, 500 * kMi);
  EXPECT_EQ(options.message_count, 2);
}

TEST(ReadOptions, ShareDirWinsOverEnvironmentLimits) {
  const Options options =
      read({{"TESSERA_SHARE_DIR", "/var/lib/tessera/shares/a"}, {"TESSERA_MEMORY_LIMIT", "8Gi"}});
  EXPECT_STREQ(options.share_dir, "/var/lib/tessera/shares/a");
  EXPECT_EQ(options.message_count, 0);
  ASSERT_EQ(options.share_message_count, 1) << "one line inside a share, naming the variable";
  EXPECT_NE(std::strstr(options.share_messages[0], "TESSERA_MEMORY_LIMIT='8Gi' is ignored"),
            nullptr);
}

// Counts the lines printed without a share that contain `text`.
int lines_with(const Options& options, const char* text) {
  int count = 0;
  for (int i = 0; i < options.message_count; ++i)
    count += std::strstr(options.messages[i], text) != nullptr;
  return count;
}

TEST(ReadOptions, EmptyLimitsFailClosed) {
  Options options = read({{"TESSERA_MEMORY_LIMIT", ""}});
  EXPECT_EQ(memory_limit_for(options, 0, "GPU-x"), 0u) << "an empty limit is no 'unset'";
  ASSERT_EQ(options.message_count, 1);
  EXPECT_NE(std::strstr(options.messages[0], "TESSERA_MEMORY_LIMIT='' is empty"), nullptr);

  options = read({{"CUDA_DEVICE_MEMORY_LIMIT", ""}});
  EXPECT_EQ(memory_limit_for(options, 0, nullptr), 0u);
  EXPECT_EQ(options.message_count, 1);
  options = read({{"CUDA_DEVICE_MEMORY_LIMIT_1", ""}});
  EXPECT_EQ(memory_limit_for(options, 1, nullptr), 0u);
  EXPECT_EQ(options.message_count, 1);
  for (const char* name : {"TESSERA_CORES_LIMIT", "TESSERA_CORES_BURST", "CUDA_DEVICE_SM_LIMIT",
                           "CUDA_DEVICE_SM_LIMIT_0"}) {
    options = read({{name, ""}});
    EXPECT_EQ(cores_limit_for(options, 0, nullptr), 0u) << name;
    EXPECT_EQ(lines_with(options, (std::string(name) + "=''").c_str()), 1) << name;
    EXPECT_EQ(options.message_count, 1) << name;
  }
}

TEST(ReadOptions, UnparseableLimitsFailClosedWithOneLineNamingVariableAndValue) {
  for (const char* value : {"8Gx", "-1", "abc", "1.5.2Gi", "0x10"}) {
    for (const char* name :
         {"TESSERA_MEMORY_LIMIT", "CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_MEMORY_LIMIT_0"}) {
      const Options options = read({{name, value}});
      EXPECT_EQ(memory_limit_for(options, 0, "GPU-x"), 0u) << name << "=" << value;
      ASSERT_EQ(options.message_count, 1) << name << "=" << value;
      EXPECT_NE(std::strstr(options.messages[0], (std::string(name) + "='" + value + "'").c_str()),
                nullptr)
          << options.messages[0];
      EXPECT_TRUE(options.standalone_only[0]);
    }
    for (const char* name : {"TESSERA_CORES_LIMIT", "TESSERA_CORES_BURST", "CUDA_DEVICE_SM_LIMIT",
                             "CUDA_DEVICE_SM_LIMIT_0"}) {
      const Options options = read({{name, value}});
      EXPECT_EQ(cores_limit_for(options, 0, "GPU-x"), 0u) << name << "=" << value;
      ASSERT_EQ(options.message_count, 1) << name << "=" << value;
      EXPECT_NE(std::strstr(options.messages[0], (std::string(name) + "='" + value + "'").c_str()),
                nullptr)
          << options.messages[0];
    }
  }
}

TEST(ReadOptions, HamiNamesWithoutAValidOrdinalBlockEveryDevice) {
  for (const char* name :
       {"CUDA_DEVICE_MEMORY_LIMIT_00", "CUDA_DEVICE_MEMORY_LIMIT_16", "CUDA_DEVICE_MEMORY_LIMIT_01",
        "CUDA_DEVICE_MEMORY_LIMIT_x", "CUDA_DEVICE_MEMORY_LIMIT_"}) {
    const Options options = read({{name, "1Gi"}, {"CUDA_DEVICE_MEMORY_LIMIT", "4g"}});
    for (int ordinal : {0, 1, 15}) {
      EXPECT_EQ(memory_limit_for(options, ordinal, "GPU-x"), 0u) << name << " device " << ordinal;
    }
    ASSERT_EQ(options.message_count, 1) << name;
    EXPECT_NE(std::strstr(options.messages[0], (std::string(name) + "='1Gi'").c_str()), nullptr)
        << options.messages[0];
  }
  for (const char* name : {"CUDA_DEVICE_SM_LIMIT_00", "CUDA_DEVICE_SM_LIMIT_16"}) {
    const Options options = read({{name, "30"}});
    EXPECT_EQ(cores_limit_for(options, 0, nullptr), 0u) << name;
    EXPECT_EQ(cores_limit_for(options, 3, nullptr), 0u) << name;
    EXPECT_EQ(options.message_count, 1) << name;
  }
  // The valid names still work, and TESSERA_MEMORY_LIMIT still makes every HAMi name moot.
  Options options = read({{"CUDA_DEVICE_MEMORY_LIMIT_15", "1g"}});
  EXPECT_EQ(memory_limit_for(options, 15, nullptr), kGi);
  EXPECT_EQ(options.message_count, 0);
  options = read({{"CUDA_DEVICE_MEMORY_LIMIT_00", "1g"}, {"TESSERA_MEMORY_LIMIT", "2Gi"}});
  EXPECT_EQ(memory_limit_for(options, 0, nullptr), 2 * kGi);
  EXPECT_EQ(lines_with(options, "ignored"), 1);
}

const VisibleDevice kTwoDevices[] = {{0, "GPU-aaa"}, {1, "GPU-bbb"}};

TEST(CheckVisibleDevices, AnEntryNamingNoDeviceSeenBlocksEveryDevice) {
  for (const char* value : {"GPU-ccc=4Gi", "GPU-aaa=1Gi,GPU-ccc=4Gi", "2=4Gi", "0=1Gi,7=2Gi"}) {
    Options options = read({{"TESSERA_MEMORY_LIMIT", value}});
    EXPECT_EQ(options.message_count, 0) << "nothing is wrong before the devices are known";
    check_visible_devices(&options, kTwoDevices, 2);
    EXPECT_EQ(memory_limit_for(options, 0, "GPU-aaa"), 0u) << value;
    EXPECT_EQ(memory_limit_for(options, 1, "GPU-bbb"), 0u) << value;
    ASSERT_EQ(options.message_count, 1) << value;
    EXPECT_NE(std::strstr(options.messages[0],
                          (std::string("TESSERA_MEMORY_LIMIT='") + value + "'").c_str()),
              nullptr)
        << options.messages[0];
    EXPECT_NE(std::strstr(options.messages[0], "not a device this process sees"), nullptr);
  }
  Options options = read({{"TESSERA_MEMORY_LIMIT", "GPU-bbb=4Gi,0=1Gi"}});
  check_visible_devices(&options, kTwoDevices, 2);
  EXPECT_EQ(options.message_count, 0);
  EXPECT_EQ(memory_limit_for(options, 0, "GPU-aaa"), kGi);
  EXPECT_EQ(memory_limit_for(options, 1, "GPU-bbb"), 4 * kGi);

  options = read({{"CUDA_DEVICE_MEMORY_LIMIT_3", "1g"}, {"CUDA_DEVICE_MEMORY_LIMIT_0", "2g"}});
  check_visible_devices(&options, kTwoDevices, 2);
  EXPECT_EQ(memory_limit_for(options, 0, "GPU-aaa"), 0u);
  EXPECT_EQ(memory_limit_for(options, 1, "GPU-bbb"), 0u);
  EXPECT_EQ(lines_with(options, "CUDA_DEVICE_MEMORY_LIMIT_3"), 1);

  for (const char* name : {"TESSERA_CORES_LIMIT", "TESSERA_CORES_BURST"}) {
    options = read({{name, "GPU-ccc=40"}});
    check_visible_devices(&options, kTwoDevices, 2);
    EXPECT_EQ(cores_limit_for(options, 0, "GPU-aaa"), 0u) << name;
    EXPECT_EQ(cores_limit_for(options, 1, "GPU-bbb"), 0u) << name;
    EXPECT_EQ(options.message_count, 1) << name;
  }
  options = read({{"CUDA_DEVICE_SM_LIMIT_4", "40"}});
  check_visible_devices(&options, kTwoDevices, 2);
  EXPECT_EQ(cores_limit_for(options, 0, "GPU-aaa"), 0u);
  EXPECT_EQ(options.message_count, 1);
}

TEST(CheckVisibleDevices, BurstBelowTheCoresLimitGivesThatDevice0) {
  Options options = read({{"TESSERA_CORES_LIMIT", "0=50,1=30"}, {"TESSERA_CORES_BURST", "40"}});
  check_visible_devices(&options, kTwoDevices, 2);
  EXPECT_EQ(cores_limit_for(options, 0, "GPU-aaa"), 0u) << "burst 40 < limit 50";
  EXPECT_EQ(cores_limit_for(options, 1, "GPU-bbb"), 30u) << "burst 40 >= limit 30: fine";
  ASSERT_EQ(options.message_count, 1);
  EXPECT_NE(std::strstr(options.messages[0], "TESSERA_CORES_BURST='40' is below"), nullptr)
      << options.messages[0];
  options = read({{"CUDA_DEVICE_SM_LIMIT", "60"}, {"TESSERA_CORES_BURST", "GPU-bbb=20"}});
  check_visible_devices(&options, kTwoDevices, 2);
  EXPECT_EQ(cores_limit_for(options, 0, "GPU-aaa"), 60u);
  EXPECT_EQ(cores_limit_for(options, 1, "GPU-bbb"), 0u);
  EXPECT_EQ(options.message_count, 1);
  options = read({{"TESSERA_CORES_LIMIT", "30"}, {"TESSERA_CORES_BURST", "30"}});
  check_visible_devices(&options, kTwoDevices, 2);
  EXPECT_EQ(cores_limit_for(options, 0, "GPU-aaa"), 30u) << "a burst equal to the limit is fine";
  EXPECT_EQ(options.message_count, 0);
}

TEST(ReadOptions, InsideAShareEveryAccountingVariableIsNamedOnceAndItsProblemsAreMoot) {
  const Options options = read({{"TESSERA_SHARE_DIR", "/var/lib/tessera/shares/a"},
                                {"TESSERA_MEMORY_LIMIT", "lots"},
                                {"CUDA_DEVICE_MEMORY_LIMIT_00", "1Gi"},
                                {"CUDA_DEVICE_MEMORY_LIMIT_3", "1Gi"},
                                {"TESSERA_CONTEXT_OVERHEAD", "1Mi"},
                                {"TESSERA_PRIORITY", "high"},
                                {"TESSERA_LOG_LEVEL", "loud"}});
  ASSERT_EQ(options.share_message_count, 5);
  for (const char* named :
       {"TESSERA_MEMORY_LIMIT='lots' is ignored", "CUDA_DEVICE_MEMORY_LIMIT_00='1Gi' is ignored",
        "CUDA_DEVICE_MEMORY_LIMIT_3='1Gi' is ignored", "TESSERA_CONTEXT_OVERHEAD='1Mi' is ignored",
        "TESSERA_PRIORITY='high' is ignored"}) {
    int found = 0;
    for (int i = 0; i < options.share_message_count; ++i) {
      found += std::strstr(options.share_messages[i], named) != nullptr;
    }
    EXPECT_EQ(found, 1) << named;
  }
  // What would be printed inside the share: the log level's problem only.
  int printed = 0;
  for (int i = 0; i < options.message_count; ++i) printed += !options.standalone_only[i];
  EXPECT_EQ(printed, 1);
  EXPECT_EQ(options.context_overhead, kMi) << "still honoured without a share";
  EXPECT_TRUE(options.context_overhead_set);
}

std::string format(const char* text, ...) {
  char buffer[64];
  va_list args;
  va_start(args, text);
  format_message(buffer, sizeof buffer, text, args);
  va_end(args);
  return buffer;
}

TEST(FormatMessage, SupportedConversionsAndTruncation) {
  EXPECT_EQ(format("%s=%d %u %llu %zu %x %%", "a", -5, 7u, 1ull << 40, size_t{3}, 255u),
            "a=-5 7 1099511627776 3 ff %");
  EXPECT_EQ(format("%s", nullptr), "(null)");
  EXPECT_EQ(format("%s", std::string(100, 'x').c_str()), std::string(63, 'x'));
}

std::string format_long(const char* text, ...) {
  char buffer[1024];
  va_list args;
  va_start(args, text);
  format_message(buffer, sizeof buffer, text, args);
  va_end(args);
  return buffer;
}

TEST(FormatMessage, ValuesCannotForgeALine) {
  EXPECT_EQ(format_long("X='%s' is bad", "8Gi\ntessera: error: all fine"),
            "X='8Gi\\ntessera: error: all fine' is bad");
  EXPECT_EQ(format_long("%s", "a\rb\tc\\d\x01\x1b[2J\x7f"), "a\\rb\\tc\\\\d\\x01\\x1b[2J\\x7f");
  EXPECT_EQ(format_long("%s", "caf\xc3\xa9"), "caf\xc3\xa9") << "UTF-8 is kept";
}

TEST(FormatMessage, LongValuesAreCutAndTheReasonKept) {
  const std::string value(5000, 'v');
  const std::string line = format_long("X='%s' is not a limit; every device gets 0", value.c_str());
  EXPECT_EQ(line,
            "X='" + std::string(256, 'v') + "...(5000 bytes)' is not a limit; every device gets 0");
  // An escaped value stays within the line too.
  const std::string newlines(1000, '\n');
  const std::string escaped = format_long("%s; why", newlines.c_str());
  EXPECT_EQ(escaped.find('\n'), std::string::npos);
  EXPECT_EQ(escaped, [] {
    std::string expected;
    for (int i = 0; i < 128; ++i) expected += "\\n";
    return expected + "...(1000 bytes); why";
  }());
  // The longest a value can take in a line still leaves room for the reason.
  const std::string controls(300, '\x01');
  const std::string line2 = format_long("X='%s' is bad: every device gets 0", controls.c_str());
  EXPECT_NE(line2.find("...(300 bytes)' is bad: every device gets 0"), std::string::npos) << line2;
  EXPECT_LE(line2.size(), 3 + kMaxValueBytes + 3 + 14 + 29);  // at most one escape past the cut
}

}  // namespace

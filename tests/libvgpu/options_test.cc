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

using tessera::vgpu::format_message;
using tessera::vgpu::kNoLimit;
using tessera::vgpu::LogLevel;
using tessera::vgpu::memory_limit_for;
using tessera::vgpu::MemoryLimitSpec;
using tessera::vgpu::Options;
using tessera::vgpu::parse_log_level;
using tessera::vgpu::parse_memory_limit;
using tessera::vgpu::parse_size;

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
  ASSERT_EQ(options.message_count, 1);
  EXPECT_NE(std::strstr(options.messages[0], "ignored"), nullptr);
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

}  // namespace

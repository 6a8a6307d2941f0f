// The compute options of the shim (docs/compute.md): TESSERA_CORES_LIMIT, TESSERA_CORES_BURST,
// TESSERA_PRIORITY and HAMi's CUDA_DEVICE_SM_LIMIT[_<i>].
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>

#include "fake_env.h"
#include "tessera/share_region.h"
#include "tessera/vgpu/options.h"

namespace tessera::vgpu {
namespace {

using test::read;

TEST(ParsePercentList, OneValueOrPerDevice) {
  MemoryLimitSpec spec;
  ASSERT_TRUE(parse_percent_list("30", &spec));
  EXPECT_TRUE(spec.has_all);
  EXPECT_EQ(spec.all, 30u);
  ASSERT_TRUE(parse_percent_list(" 0=30, GPU-abc=50 ,100", &spec));
  EXPECT_EQ(spec.count, 2);
  EXPECT_EQ(spec.entries[0].ordinal, 0);
  EXPECT_EQ(spec.entries[0].bytes, 30u);
  EXPECT_STREQ(spec.entries[1].uuid, "GPU-abc");
  EXPECT_EQ(spec.entries[1].bytes, 50u);
  EXPECT_EQ(spec.all, 100u);
  for (const char* bad : {"", "0", "101", "30%", "-5", "1=0", "0=30,0=40", "x=30", "30,40"}) {
    EXPECT_FALSE(parse_percent_list(bad, &spec)) << bad;
  }
}

TEST(ParsePriority, ThreeLevels) {
  uint32_t priority = 99;
  ASSERT_TRUE(parse_priority("high", &priority));
  EXPECT_EQ(priority, share::kPriorityHigh);
  ASSERT_TRUE(parse_priority(" low ", &priority));
  EXPECT_EQ(priority, share::kPriorityLow);
  ASSERT_TRUE(parse_priority("normal", &priority));
  EXPECT_EQ(priority, share::kPriorityNormal);
  EXPECT_FALSE(parse_priority("urgent", &priority));
}

TEST(ReadComputeOptions, NothingSetMeansNoLimit) {
  const Options options = read({});
  EXPECT_FALSE(options.any_compute());
  EXPECT_EQ(cores_limit_for(options, 0, "GPU-x"), 100u);
  EXPECT_EQ(cores_burst_for(options, 0, "GPU-x"), 0u);
  EXPECT_EQ(options.priority, share::kPriorityNormal);
  EXPECT_STREQ(options.device_dir, "/dev/shm");
}

TEST(ReadComputeOptions, PrecedenceUuidThenOrdinalThenAllThenHami) {
  Options options = read({{"TESSERA_CORES_LIMIT", "GPU-aaa=10,1=20,30"},
                          {"TESSERA_CORES_BURST", "90"},
                          {"CUDA_DEVICE_SM_LIMIT", "50"}});
  EXPECT_TRUE(options.any_compute());
  EXPECT_EQ(cores_limit_for(options, 1, "GPU-aaa"), 10u);
  EXPECT_EQ(cores_limit_for(options, 1, "GPU-bbb"), 20u);
  EXPECT_EQ(cores_limit_for(options, 0, "GPU-bbb"), 30u);
  EXPECT_EQ(cores_burst_for(options, 0, "GPU-bbb"), 90u);
  ASSERT_EQ(options.message_count, 1) << "the HAMi name is ignored, with one message";
  EXPECT_NE(std::strstr(options.messages[0], "CUDA_DEVICE_SM_LIMIT"), nullptr);

  options = read({{"TESSERA_CORES_LIMIT", "1=20"}});
  EXPECT_EQ(cores_limit_for(options, 0, "GPU-x"), 100u) << "devices not listed: no limit";

  options = read({{"CUDA_DEVICE_SM_LIMIT", "40"}, {"CUDA_DEVICE_SM_LIMIT_1", "25"}});
  EXPECT_EQ(cores_limit_for(options, 0, nullptr), 40u);
  EXPECT_EQ(cores_limit_for(options, 1, nullptr), 25u);
  options = read({{"CUDA_DEVICE_SM_LIMIT", "0"}});
  EXPECT_EQ(cores_limit_for(options, 0, nullptr), 100u) << "HAMi: 0 means no limit";
}

TEST(ReadComputeOptions, InvalidValuesNeverGrantMore) {
  Options options = read({{"TESSERA_CORES_LIMIT", "most"}});
  EXPECT_EQ(cores_limit_for(options, 0, "GPU-x"), 0u);
  ASSERT_EQ(options.message_count, 1);
  EXPECT_NE(std::strstr(options.messages[0], "TESSERA_CORES_LIMIT='most'"), nullptr);

  options = read({{"CUDA_DEVICE_SM_LIMIT_0", "lots"}});
  EXPECT_EQ(cores_limit_for(options, 0, nullptr), 0u);
  EXPECT_EQ(options.message_count, 1);

  options = read({{"TESSERA_CORES_BURST", "all"}, {"TESSERA_CORES_LIMIT", "30"}});
  EXPECT_EQ(cores_burst_for(options, 0, nullptr), 0u) << "an unreadable burst does not burst";
  EXPECT_EQ(cores_limit_for(options, 0, nullptr), 0u) << "and it fails closed: 0% everywhere";
  EXPECT_EQ(options.message_count, 1);

  options = read({{"TESSERA_PRIORITY", "urgent"}});
  EXPECT_EQ(options.priority, share::kPriorityLow) << "an unreadable priority is the lowest";
  EXPECT_EQ(options.message_count, 1);
}

TEST(ReadComputeOptions, ShareDirWinsOverEnvironmentCompute) {
  const Options options =
      read({{"TESSERA_SHARE_DIR", "/var/lib/tessera/shares/a"}, {"TESSERA_CORES_LIMIT", "30"}});
  EXPECT_EQ(options.message_count, 0);
  ASSERT_EQ(options.share_message_count, 1);
  EXPECT_NE(std::strstr(options.share_messages[0], "TESSERA_CORES_LIMIT='30' is ignored"), nullptr);
}

}  // namespace
}  // namespace tessera::vgpu

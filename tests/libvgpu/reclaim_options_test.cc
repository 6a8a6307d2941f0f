// TESSERA_RECLAIM_WAIT_MS (docs/libvgpu.md, "Reclaim"): how long an allocation the driver refuses
// waits while the agent reclaims borrowed memory. A setting, read inside a share too.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>

#include "fake_env.h"
#include "tessera/vgpu/options.h"

namespace {

using tessera::vgpu::kMaxReclaimWaitMs;
using tessera::vgpu::option_info;
using tessera::vgpu::OptionId;
using tessera::vgpu::OptionKind;
using tessera::vgpu::Options;
using tessera::vgpu::test::read;

TEST(ReclaimWaitOption, DefaultsToTheTablesValue) {
  const Options options = read({});
  EXPECT_EQ(options.reclaim_wait_ms, 5000u);
  EXPECT_STREQ(option_info(OptionId::kReclaimWait).default_value, "5000");
  EXPECT_EQ(option_info(OptionId::kReclaimWait).kind, OptionKind::kSetting);
  EXPECT_EQ(options.message_count, 0);
}

TEST(ReclaimWaitOption, TakesMillisecondsFromZeroToTheCeiling) {
  EXPECT_EQ(read({{"TESSERA_RECLAIM_WAIT_MS", "0"}}).reclaim_wait_ms, 0u);
  EXPECT_EQ(read({{"TESSERA_RECLAIM_WAIT_MS", " 1500 "}}).reclaim_wait_ms, 1500u);
  EXPECT_EQ(read({{"TESSERA_RECLAIM_WAIT_MS", "600000"}}).reclaim_wait_ms, kMaxReclaimWaitMs);
  // Inside a share too: a setting, not an accounting value the limits page sets.
  const Options in_share = read(
      {{"TESSERA_SHARE_DIR", "/var/run/tessera/shares/x"}, {"TESSERA_RECLAIM_WAIT_MS", "250"}});
  EXPECT_EQ(in_share.reclaim_wait_ms, 250u);
  EXPECT_EQ(in_share.share_message_count, 0);
}

TEST(ReclaimWaitOption, AnUnreadableValueKeepsTheDefaultWithOneLine) {
  for (const char* bad : {"", "-1", "5s", "600001", "99999999999999999999999"}) {
    const Options options = read({{"TESSERA_RECLAIM_WAIT_MS", bad}});
    EXPECT_EQ(options.reclaim_wait_ms, 5000u) << bad;
    ASSERT_EQ(options.message_count, 1) << bad;
    EXPECT_NE(std::strstr(options.messages[0], "TESSERA_RECLAIM_WAIT_MS"), nullptr);
    EXPECT_NE(std::strstr(options.messages[0], "waiting the default 5000 ms"), nullptr)
        << options.messages[0];
  }
}

}  // namespace

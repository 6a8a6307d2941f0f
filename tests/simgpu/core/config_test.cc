#include "config.h"

#include <gtest/gtest.h>

namespace simgpu {
namespace {

TEST(SimConfig, ParsesDevices) {
  ConfigError error;
  auto devices =
      parse_devices("name=NVIDIA H200,memory=143771Mi,sms=132,cc=9.0;name=Small,memory=8Gi", error);
  ASSERT_TRUE(devices) << error.message;
  ASSERT_EQ(devices->size(), 2u);
  EXPECT_EQ((*devices)[0].memory_bytes, 143771ull << 20);
  EXPECT_EQ((*devices)[0].sms, 132u);
  EXPECT_EQ((*devices)[1].name, "Small");
  EXPECT_EQ((*devices)[1].memory_bytes, 8ull << 30);
  EXPECT_EQ((*devices)[1].sms, 132u);  // defaults kept
}

TEST(SimConfig, DeviceErrorsNameTheFieldAndValue) {
  ConfigError error;
  EXPECT_FALSE(parse_devices("memory=lots", error));
  EXPECT_NE(error.message.find("memory 'lots'"), std::string::npos) << error.message;
  EXPECT_FALSE(parse_devices("sms=0", error));
  EXPECT_NE(error.message.find("sms '0'"), std::string::npos) << error.message;
  EXPECT_FALSE(parse_devices("colour=blue", error));
  EXPECT_NE(error.message.find("unknown field 'colour'"), std::string::npos) << error.message;
  EXPECT_FALSE(parse_devices("cc=nine", error));
  EXPECT_FALSE(parse_devices("", error));
  EXPECT_FALSE(parse_devices("a;a;a;a;a;a;a;a;a", error));
}

TEST(SimConfig, ParsesKernelTimes) {
  ConfigError error;
  uint64_t default_ns = 10'000;
  auto times = parse_kernel_times("burn_fma=141,tiny=0.5,default=20", default_ns, error);
  ASSERT_TRUE(times) << error.message;
  EXPECT_EQ(times->at("burn_fma"), 141'000u);
  EXPECT_EQ(times->at("tiny"), 500u);
  EXPECT_EQ(default_ns, 20'000u);
  EXPECT_FALSE(parse_kernel_times("burn_fma=fast", default_ns, error));
  EXPECT_NE(error.message.find("'fast'"), std::string::npos);
  EXPECT_FALSE(parse_kernel_times("=3", default_ns, error));
  EXPECT_FALSE(parse_kernel_times("k=0", default_ns, error));
}

TEST(SimConfig, DeviceIdentityIsStablePerIndex) {
  EXPECT_EQ(device_uuid(0), device_uuid(0));
  EXPECT_NE(device_uuid(0), device_uuid(1));
  EXPECT_EQ(device_uuid(1).size(), 40u);
  EXPECT_EQ(device_pci_bus_id(0), "00000000:19:00.0");
}

}  // namespace
}  // namespace simgpu

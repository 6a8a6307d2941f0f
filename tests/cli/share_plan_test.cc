#include "share_plan.h"

#include <gtest/gtest.h>

namespace tessera::cli {
namespace {

const std::vector<Gpu> kGpus = {{0, "GPU-aaaa", "NVIDIA H200", 150ull << 30},
                                {1, "GPU-bbbb", "NVIDIA H200", 150ull << 30}};

TEST(PlanShare, OneSizeLimitsEveryGpu) {
  std::vector<share::DeviceLimit> limits;
  std::string error;
  ASSERT_TRUE(plan_share(kGpus, "8Gi", limits, error)) << error;
  ASSERT_EQ(limits.size(), 2u);
  EXPECT_EQ(limits[0].uuid, "GPU-aaaa");
  EXPECT_EQ(limits[0].memory_limit, 8ull << 30);
  EXPECT_EQ(limits[1].memory_limit, 8ull << 30);
  EXPECT_EQ(limits[1].cores_limit, 100u);
}

TEST(PlanShare, PerGpuByIndexAndUuid) {
  std::vector<share::DeviceLimit> limits;
  std::string error;
  ASSERT_TRUE(plan_share(kGpus, "0=4Gi,GPU-bbbb=2Gi", limits, error)) << error;
  EXPECT_EQ(limits[0].memory_limit, 4ull << 30);
  EXPECT_EQ(limits[1].memory_limit, 2ull << 30);
  ASSERT_TRUE(plan_share(kGpus, "1=1Gi", limits, error)) << error;
  EXPECT_EQ(limits[0].memory_limit, share::kUnlimited);  // not named: unlimited
  EXPECT_EQ(limits[1].memory_limit, 1ull << 30);
}

TEST(PlanShare, NoSpecMeansNoLimit) {
  std::vector<share::DeviceLimit> limits;
  std::string error;
  ASSERT_TRUE(plan_share(kGpus, "", limits, error)) << error;
  EXPECT_EQ(limits[0].memory_limit, share::kUnlimited);
}

TEST(PlanShare, ErrorsNameTheBadItem) {
  std::vector<share::DeviceLimit> limits;
  std::string error;
  EXPECT_FALSE(plan_share(kGpus, "lots", limits, error));
  EXPECT_NE(error.find("'lots'"), std::string::npos) << error;
  EXPECT_FALSE(plan_share(kGpus, "7=1Gi", limits, error));
  EXPECT_NE(error.find("GPU 7"), std::string::npos) << error;
  EXPECT_FALSE(plan_share(kGpus, "GPU-cccc=1Gi", limits, error));
  EXPECT_NE(error.find("GPU-cccc"), std::string::npos) << error;
}

}  // namespace
}  // namespace tessera::cli

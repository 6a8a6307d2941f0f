#include "share_plan.h"

#include <gtest/gtest.h>

namespace tessera::cli {
namespace {

GpuInfo h200(unsigned index, const char* uuid) {
  GpuInfo gpu;
  gpu.index = index;
  gpu.minor = index;
  gpu.uuid = uuid;
  gpu.product_name = "NVIDIA H200";
  gpu.memory_bytes = 150ull << 30;
  return gpu;
}

const std::vector<GpuInfo> kGpus = {h200(0, "GPU-aaaa"), h200(1, "GPU-bbbb")};

// Unpacks a plan into the limits (on success) or the message (on failure); a failed plan is always
// an invalid argument.
bool planned(const Result<std::vector<share_folder::DeviceLimit>>& plan,
             std::vector<share_folder::DeviceLimit>& limits, std::string& error) {
  if (!plan.is_ok()) {
    EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument) << plan.status().message();
    error = plan.status().message();
    return false;
  }
  limits = plan.value();
  error.clear();
  return true;
}

TEST(PlanShare, OneSizeLimitsEveryGpu) {
  std::vector<share_folder::DeviceLimit> limits;
  std::string error;
  ASSERT_TRUE(planned(plan_share(kGpus, "8Gi"), limits, error)) << error;
  ASSERT_EQ(limits.size(), 2u);
  EXPECT_EQ(limits[0].uuid, "GPU-aaaa");
  EXPECT_EQ(limits[0].memory_limit, 8ull << 30);
  EXPECT_EQ(limits[1].memory_limit, 8ull << 30);
  EXPECT_EQ(limits[1].cores_request, 100u);
}

TEST(PlanShare, PerGpuByIndexAndUuid) {
  std::vector<share_folder::DeviceLimit> limits;
  std::string error;
  ASSERT_TRUE(planned(plan_share(kGpus, "0=4Gi,GPU-bbbb=2Gi"), limits, error)) << error;
  EXPECT_EQ(limits[0].memory_limit, 4ull << 30);
  EXPECT_EQ(limits[1].memory_limit, 2ull << 30);
  ASSERT_TRUE(planned(plan_share(kGpus, "1=1Gi"), limits, error)) << error;
  EXPECT_EQ(limits[0].memory_limit, share::kUnlimited);  // not named: unlimited
  EXPECT_EQ(limits[1].memory_limit, 1ull << 30);
}

TEST(PlanShare, NoSpecMeansNoLimit) {
  std::vector<share_folder::DeviceLimit> limits;
  std::string error;
  ASSERT_TRUE(planned(plan_share(kGpus, ""), limits, error)) << error;
  EXPECT_EQ(limits[0].memory_limit, share::kUnlimited);
}

TEST(PlanShare, ErrorsNameTheBadItem) {
  std::vector<share_folder::DeviceLimit> limits;
  std::string error;
  EXPECT_FALSE(planned(plan_share(kGpus, "lots"), limits, error));
  EXPECT_NE(error.find("'lots'"), std::string::npos) << error;
  EXPECT_FALSE(planned(plan_share(kGpus, "7=1Gi"), limits, error));
  EXPECT_NE(error.find("GPU 7"), std::string::npos) << error;
  EXPECT_FALSE(planned(plan_share(kGpus, "GPU-cccc=1Gi"), limits, error));
  EXPECT_NE(error.find("GPU-cccc"), std::string::npos) << error;
}

}  // namespace
}  // namespace tessera::cli

namespace tessera::cli {
namespace {

TEST(PlanShareCompute, CoresAndBurstForEveryGpuOrPerGpu) {
  std::vector<share_folder::DeviceLimit> limits;
  std::string error;
  ASSERT_TRUE(planned(plan_share(kGpus, "", "30", ""), limits, error)) << error;
  EXPECT_EQ(limits[0].cores_request, 30u);
  EXPECT_EQ(limits[1].cores_request, 30u);
  EXPECT_EQ(limits[0].cores_limit, 0u);
  ASSERT_TRUE(planned(plan_share(kGpus, "8Gi", "0=30,GPU-bbbb=70", "1=100"), limits, error))
      << error;
  EXPECT_EQ(limits[0].memory_limit, 8ull << 30);
  EXPECT_EQ(limits[0].cores_request, 30u);
  EXPECT_EQ(limits[1].cores_request, 70u);
  EXPECT_EQ(limits[0].cores_limit, 0u);
  EXPECT_EQ(limits[1].cores_limit, 100u);
  ASSERT_TRUE(planned(plan_share(kGpus, "", "1=50", ""), limits, error)) << error;
  EXPECT_EQ(limits[0].cores_request, 100u) << "not named: not limited";
}

TEST(PlanShareCompute, ErrorsNameTheOption) {
  std::vector<share_folder::DeviceLimit> limits;
  std::string error;
  EXPECT_FALSE(planned(plan_share(kGpus, "", "150", ""), limits, error));
  EXPECT_NE(error.find("--cores '150'"), std::string::npos) << error;
  EXPECT_FALSE(planned(plan_share(kGpus, "", "5=30", ""), limits, error));
  EXPECT_NE(error.find("--cores names GPU 5"), std::string::npos) << error;
  EXPECT_FALSE(planned(plan_share(kGpus, "", "50", "40"), limits, error));
  EXPECT_NE(error.find("below its cores limit"), std::string::npos) << error;
}

}  // namespace
}  // namespace tessera::cli

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

// The memory request alone: one size for every GPU, also the limit.
Result<std::vector<share_folder::DeviceLimit>> memory(std::string_view spec) {
  return plan_share(kGpus, ShareAsk{spec, "", "", ""});
}

TEST(PlanShare, OneSizeRequestsEveryGpuAndIsItsLimit) {
  std::vector<share_folder::DeviceLimit> limits;
  std::string error;
  ASSERT_TRUE(planned(memory("8Gi"), limits, error)) << error;
  ASSERT_EQ(limits.size(), 2u);
  EXPECT_EQ(limits[0].uuid, "GPU-aaaa");
  EXPECT_EQ(limits[0].memory_request, 8ull << 30);
  EXPECT_EQ(limits[0].memory_limit, 8ull << 30);
  EXPECT_EQ(limits[1].memory_limit, 8ull << 30);
  EXPECT_EQ(limits[1].cores_request, 100u);
  EXPECT_EQ(limits[1].cores_limit, 100u);
}

TEST(PlanShare, PerGpuByIndexAndUuid) {
  std::vector<share_folder::DeviceLimit> limits;
  std::string error;
  ASSERT_TRUE(planned(memory("0=4Gi,GPU-bbbb=2Gi"), limits, error)) << error;
  EXPECT_EQ(limits[0].memory_limit, 4ull << 30);
  EXPECT_EQ(limits[1].memory_limit, 2ull << 30);
  ASSERT_TRUE(planned(memory("1=1Gi"), limits, error)) << error;
  EXPECT_EQ(limits[0].memory_limit, share::kUnlimited);  // not named: unlimited
  EXPECT_EQ(limits[1].memory_limit, 1ull << 30);
}

TEST(PlanShare, NoSpecMeansNoLimit) {
  std::vector<share_folder::DeviceLimit> limits;
  std::string error;
  ASSERT_TRUE(planned(memory(""), limits, error)) << error;
  EXPECT_EQ(limits[0].memory_limit, share::kUnlimited);
  EXPECT_EQ(limits[0].memory_request, share::kUnlimited);
}

TEST(PlanShare, ALimitAboveTheRequestIsBorrowable) {
  std::vector<share_folder::DeviceLimit> limits;
  std::string error;
  ASSERT_TRUE(planned(plan_share(kGpus, ShareAsk{"2Gi", "0=8Gi", "", ""}), limits, error)) << error;
  EXPECT_EQ(limits[0].memory_request, 2ull << 30);
  EXPECT_EQ(limits[0].memory_limit, 8ull << 30);
  EXPECT_EQ(limits[1].memory_limit, 2ull << 30) << "not named: the request";
  // A limit alone guarantees all of it.
  ASSERT_TRUE(planned(plan_share(kGpus, ShareAsk{"", "4Gi", "", ""}), limits, error)) << error;
  EXPECT_EQ(limits[0].memory_request, 4ull << 30);
  EXPECT_EQ(limits[0].memory_limit, 4ull << 30);
}

TEST(PlanShare, ErrorsNameTheBadItem) {
  std::vector<share_folder::DeviceLimit> limits;
  std::string error;
  EXPECT_FALSE(planned(memory("lots"), limits, error));
  EXPECT_NE(error.find("--memory 'lots'"), std::string::npos) << error;
  EXPECT_FALSE(planned(memory("7=1Gi"), limits, error));
  EXPECT_NE(error.find("GPU 7"), std::string::npos) << error;
  EXPECT_FALSE(planned(memory("GPU-cccc=1Gi"), limits, error));
  EXPECT_NE(error.find("GPU-cccc"), std::string::npos) << error;
  EXPECT_FALSE(planned(memory("-1Gi"), limits, error));
  EXPECT_NE(error.find("--memory '-1Gi'"), std::string::npos) << error;
}

TEST(PlanShare, ALimitBelowItsRequestOrAboveTheGpuIsRefused) {
  std::vector<share_folder::DeviceLimit> limits;
  std::string error;
  EXPECT_FALSE(planned(plan_share(kGpus, ShareAsk{"4Gi", "2Gi", "", ""}), limits, error));
  EXPECT_NE(error.find("--memory-limit 2Gi of GPU 0 (GPU-aaaa) is below its --memory request 4Gi"),
            std::string::npos)
      << error;
  EXPECT_FALSE(planned(plan_share(kGpus, ShareAsk{"", "200Gi", "", ""}), limits, error));
  EXPECT_NE(error.find("--memory-limit 200Gi of GPU 0 (GPU-aaaa) is above the GPU's memory 150Gi"),
            std::string::npos)
      << error;
  EXPECT_FALSE(planned(plan_share(kGpus, ShareAsk{"151Gi", "", "", ""}), limits, error));
  EXPECT_NE(error.find("--memory 151Gi"), std::string::npos) << error;
  EXPECT_FALSE(planned(plan_share(kGpus, ShareAsk{"", "x", "", ""}), limits, error));
  EXPECT_NE(error.find("--memory-limit 'x'"), std::string::npos) << error;
}

}  // namespace
}  // namespace tessera::cli

namespace tessera::cli {
namespace {

TEST(PlanShareCompute, CoresRequestsForEveryGpuOrPerGpu) {
  std::vector<share_folder::DeviceLimit> limits;
  std::string error;
  ASSERT_TRUE(planned(plan_share(kGpus, ShareAsk{"", "", "30", ""}), limits, error)) << error;
  EXPECT_EQ(limits[0].cores_request, 30u);
  EXPECT_EQ(limits[1].cores_request, 30u);
  EXPECT_EQ(limits[0].cores_limit, 30u) << "the limit defaults to the request";
  ASSERT_TRUE(
      planned(plan_share(kGpus, ShareAsk{"8Gi", "", "0=30,GPU-bbbb=70", "1=100"}), limits, error))
      << error;
  EXPECT_EQ(limits[0].memory_limit, 8ull << 30);
  EXPECT_EQ(limits[0].cores_request, 30u);
  EXPECT_EQ(limits[1].cores_request, 70u);
  EXPECT_EQ(limits[0].cores_limit, 30u);
  EXPECT_EQ(limits[1].cores_limit, 100u);
  ASSERT_TRUE(planned(plan_share(kGpus, ShareAsk{"", "", "1=50", ""}), limits, error)) << error;
  EXPECT_EQ(limits[0].cores_request, 100u) << "not named: not limited";
  EXPECT_EQ(limits[0].cores_limit, 100u);
}

// On a GPU in MIG mode its MIG devices are in the share too (list_mig_devices): one percent for
// every device reaches them, an index names only the whole GPU, a MIG UUID the instance.
TEST(PlanShareCompute, AMigDeviceIsNamedByItsUuidNotItsParentsIndex) {
  GpuInfo instance = h200(0, "MIG-cccc");
  instance.parent_uuid = "GPU-aaaa";
  instance.memory_bytes = 71ull << 30;
  const std::vector<GpuInfo> gpus = {h200(0, "GPU-aaaa"), instance};
  std::vector<share_folder::DeviceLimit> limits;
  std::string error;
  ASSERT_TRUE(planned(plan_share(gpus, ShareAsk{"", "", "30", ""}), limits, error)) << error;
  ASSERT_EQ(limits.size(), 2u);
  EXPECT_EQ(limits[1].uuid, "MIG-cccc");
  EXPECT_EQ(limits[1].cores_request, 30u);
  ASSERT_TRUE(planned(plan_share(gpus, ShareAsk{"", "", "0=50", ""}), limits, error)) << error;
  EXPECT_EQ(limits[0].cores_request, 50u);
  EXPECT_EQ(limits[1].cores_request, 100u) << "an index is the whole GPU's";
  ASSERT_TRUE(planned(plan_share(gpus, ShareAsk{"", "", "MIG-cccc=40", ""}), limits, error))
      << error;
  EXPECT_EQ(limits[0].cores_request, 100u);
  EXPECT_EQ(limits[1].cores_request, 40u);
}

TEST(PlanShareCompute, CoresZeroIsBestEffortUpToTheWholeGpuOrItsLimit) {
  std::vector<share_folder::DeviceLimit> limits;
  std::string error;
  ASSERT_TRUE(planned(plan_share(kGpus, ShareAsk{"", "", "0", ""}), limits, error)) << error;
  EXPECT_EQ(limits[0].cores_request, 0u);
  EXPECT_EQ(limits[0].cores_limit, 100u);
  ASSERT_TRUE(planned(plan_share(kGpus, ShareAsk{"", "", "0", "50"}), limits, error)) << error;
  EXPECT_EQ(limits[0].cores_request, 0u);
  EXPECT_EQ(limits[0].cores_limit, 50u);
  // A limit alone is also the request (Kubernetes defaults a request to its limit).
  ASSERT_TRUE(planned(plan_share(kGpus, ShareAsk{"", "", "", "40"}), limits, error)) << error;
  EXPECT_EQ(limits[0].cores_request, 40u);
  EXPECT_EQ(limits[0].cores_limit, 40u);
}

TEST(PlanShareCompute, ErrorsNameTheOption) {
  std::vector<share_folder::DeviceLimit> limits;
  std::string error;
  EXPECT_FALSE(planned(plan_share(kGpus, ShareAsk{"", "", "150", ""}), limits, error));
  EXPECT_NE(error.find("--cores '150'"), std::string::npos) << error;
  EXPECT_FALSE(planned(plan_share(kGpus, ShareAsk{"", "", "-5", ""}), limits, error));
  EXPECT_NE(error.find("--cores '-5'"), std::string::npos) << error;
  EXPECT_FALSE(planned(plan_share(kGpus, ShareAsk{"", "", "5=30", ""}), limits, error));
  EXPECT_NE(error.find("--cores names GPU 5"), std::string::npos) << error;
  EXPECT_FALSE(planned(plan_share(kGpus, ShareAsk{"", "", "50", "40"}), limits, error));
  EXPECT_NE(error.find("--cores-limit 40 of GPU 0 (GPU-aaaa) is below its --cores request 50"),
            std::string::npos)
      << error;
  EXPECT_FALSE(planned(plan_share(kGpus, ShareAsk{"", "", "", "0"}), limits, error));
  EXPECT_NE(error.find("--cores-limit '0' is not a percent (1..100)"), std::string::npos) << error;
}

}  // namespace
}  // namespace tessera::cli

#include "backends/time_slice_backend.h"

#include <gtest/gtest.h>

#include "backend_doubles.h"

namespace tessera::agent {
namespace {

using testing::RecordingDoubles;

constexpr char kGpu0[] = "GPU-00000000-0000-0000-0000-000000000000";

class TimeSliceBackendTest : public ::testing::Test {
 protected:
  TimeSliceBackendTest() {
    options_.nvidia_smi = RecordingDoubles::nvidia_smi();
    options_.root = (doubles_.dir() / "timeslice").string();
  }
  RecordingDoubles doubles_;
  TimeSliceOptions options_;
};

TEST_F(TimeSliceBackendTest, AppliesTheIntervalAndRestoresDefault) {
  TimeSliceBackend backend(options_);
  ASSERT_EQ(backend.apply(kGpu0, vgpu_config::TimeSlice::kLong).message(), "");
  EXPECT_EQ(doubles_.calls(), std::string("nvidia-smi -i ") + kGpu0 +
                                  " -c DEFAULT\n"
                                  "nvidia-smi compute-policy -i " +
                                  kGpu0 + " --set-timeslice 3\n");
  EXPECT_EQ(doubles_.gpu_setting(kGpu0, "timeslice"), "3");
  EXPECT_EQ(doubles_.gpu_setting(kGpu0, "compute-mode"), "DEFAULT");
  EXPECT_EQ(backend.recorded(kGpu0), vgpu_config::TimeSlice::kLong);
  EXPECT_EQ(backend.recorded_uuids(), std::vector<std::string>{kGpu0});

  ASSERT_EQ(backend.restore(kGpu0).message(), "");
  EXPECT_EQ(doubles_.gpu_setting(kGpu0, "timeslice"), "0");
  EXPECT_FALSE(backend.recorded(kGpu0).has_value());
  EXPECT_TRUE(backend.recorded_uuids().empty());
}

TEST_F(TimeSliceBackendTest, EveryIntervalHasItsPolicyValue) {
  EXPECT_EQ(TimeSliceBackend::policy_value(vgpu_config::TimeSlice::kDefault), 0);
  EXPECT_EQ(TimeSliceBackend::policy_value(vgpu_config::TimeSlice::kShort), 1);
  EXPECT_EQ(TimeSliceBackend::policy_value(vgpu_config::TimeSlice::kMedium), 2);
  EXPECT_EQ(TimeSliceBackend::policy_value(vgpu_config::TimeSlice::kLong), 3);
}

TEST_F(TimeSliceBackendTest, AFailingNvidiaSmiIsReportedAndNothingRecorded) {
  TimeSliceBackend backend(options_);
  doubles_.fail_nvidia_smi();
  const Status applied = backend.apply(kGpu0, vgpu_config::TimeSlice::kShort);
  EXPECT_EQ(applied.code(), StatusCode::kInternal);
  EXPECT_EQ(applied.message(),
            std::string("time slice on ") + kGpu0 + ": " + RecordingDoubles::nvidia_smi() + " -i " +
                kGpu0 +
                " -c DEFAULT: exit 4: Unable to set the compute policy: Insufficient Permissions");
  EXPECT_FALSE(backend.recorded(kGpu0).has_value());
}

}  // namespace
}  // namespace tessera::agent

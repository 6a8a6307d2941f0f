// The agent's NVML source of per-process figures (usage/gpu_processes.h) on MIG instances of the
// simulated GPU: a MIG UUID gives that instance's memory; its per-process utilisation is NVML's
// NOT_SUPPORTED, kept as kFailedPrecondition (no fault); an empty UUID (a dynamic share's instance
// not made yet) asks NVML nothing and says so without "no GPU".
#include "usage/gpu_processes.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include <gtest/gtest.h>

#include "sim_mig.h"

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;

class GpuProcessesOnMig : public ::testing::Test {
 protected:
  void SetUp() override {
    state_ = (fs::temp_directory_path() /
              ("gpu-processes-mig-" + std::to_string(getpid()) + "-" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".state"))
                 .string();
    fs::remove(state_);
    setenv("SIMGPU_STATE", state_.c_str(), 1);
    setenv("SIMGPU_DEVICES", "name=NVIDIA H100 80GB HBM3,memory=81559Mi,sms=132,cc=9.0,mig=on", 1);
  }
  void TearDown() override { fs::remove(state_); }

  static std::string create_instance(const std::string& profile) {
    return simgpu::testing::create_mig_instance(SIMGPU_CTL, profile);
  }

  std::string state_;
};

TEST_F(GpuProcessesOnMig, AnInstanceIsAskedOnItsOwnHandle) {
  const std::string uuid = create_instance("3g.40gb");
  ASSERT_EQ(uuid.rfind("MIG-", 0), 0u) << uuid;
  Result<std::unique_ptr<GpuProcessSource>> source = nvml_process_source();
  ASSERT_TRUE(source.is_ok()) << source.status().message();
  GpuProcessSource& gpus = **source;

  Result<std::vector<GpuProcessMemory>> memory = gpus.memory(uuid);
  ASSERT_TRUE(memory.is_ok()) << memory.status().message();
  EXPECT_TRUE(memory->empty());
  // The instance's memory, not the GPU's (mig-facts.md §2.4), and no utilisation figure.
  Result<GpuFigures> figures = gpus.figures(uuid);
  ASSERT_TRUE(figures.is_ok()) << figures.status().message();
  EXPECT_GT(figures->memory_total_bytes, 0u);
  EXPECT_LT(figures->memory_total_bytes, 81559ull << 20);
  EXPECT_FALSE(figures->utilization_percent.has_value());

  ASSERT_TRUE(gpus.busy(uuid).is_ok());  // the first call opens the window
  Result<std::vector<GpuProcessBusy>> busy = gpus.busy(uuid);
  ASSERT_FALSE(busy.is_ok());
  EXPECT_EQ(busy.status().code(), StatusCode::kFailedPrecondition) << busy.status().message();

  Result<std::vector<GpuProcessMemory>> none = gpus.memory("");
  ASSERT_FALSE(none.is_ok());
  EXPECT_EQ(none.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(none.status().message().find("no GPU"), std::string::npos) << none.status().message();
}

}  // namespace
}  // namespace tessera::agent

// LayoutTrackingMigDriver (mig/mig_layout.h): every call that can change a GPU's MIG layout counts
// as a change, a failed one too; reads (inspect, the compute pids) change nothing, and each inspect
// is counted.
#include "mig/mig_layout.h"

#include <gtest/gtest.h>

#include "mig/fake_mig_driver.h"

namespace tessera::agent {
namespace {

TEST(LayoutTrackingMigDriver, CountsLayoutChangesAndInspections) {
  testing::FakeMigDriver nvml;
  const GpuInfo gpu = testing::h200();
  nvml.gpus[gpu.uuid] = {};
  LayoutTrackingMigDriver driver(nvml);
  EXPECT_EQ(driver.layout_changes(), 0u);

  ASSERT_TRUE(driver.inspect(gpu).is_ok());
  ASSERT_TRUE(driver.compute_pids(gpu.uuid).is_ok());
  EXPECT_EQ(driver.inspections(), 1u);
  EXPECT_EQ(driver.layout_changes(), 0u) << "reads change nothing";

  ASSERT_EQ(driver.set_mig_mode(gpu.uuid, true).message(), "");
  EXPECT_EQ(driver.layout_changes(), 1u);
  const Result<unsigned> gi = driver.create_gpu_instance(gpu.uuid, 9, MigPlacement{0, 4});
  ASSERT_TRUE(gi.is_ok()) << gi.status().message();
  EXPECT_EQ(driver.layout_changes(), 2u);
  const Result<CreatedComputeInstance> ci = driver.create_compute_instance(gpu.uuid, *gi);
  ASSERT_TRUE(ci.is_ok()) << ci.status().message();
  EXPECT_EQ(driver.layout_changes(), 3u);
  // A failed creation (the placement is taken) counts too: a failed call may have done part.
  EXPECT_FALSE(driver.create_gpu_instance(gpu.uuid, 9, MigPlacement{0, 4}).is_ok());
  EXPECT_EQ(driver.layout_changes(), 4u);
  ASSERT_EQ(driver.destroy_compute_instance(gpu.uuid, *gi, ci->ci_id).message(), "");
  ASSERT_EQ(driver.destroy_gpu_instance(gpu.uuid, *gi).message(), "");
  EXPECT_EQ(driver.layout_changes(), 6u);
  driver.note_layout_change();  // a device event
  EXPECT_EQ(driver.layout_changes(), 7u);
  // What the wrapper passes on is the inner driver's.
  EXPECT_EQ(nvml.creations, 1);
  EXPECT_EQ(nvml.mode_changes, 1);
  const Result<MigGpu> state = driver.inspect(gpu);
  ASSERT_TRUE(state.is_ok());
  EXPECT_TRUE(state->enabled);
  EXPECT_TRUE(state->instances.empty());
  EXPECT_EQ(driver.inspections(), 2u);
}

}  // namespace
}  // namespace tessera::agent

#include "config.h"
#include "mig_profiles.h"

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

TEST(SimConfig, ParsesTheComputeModeNvmlReports) {
  ConfigError error;
  auto devices =
      parse_devices("name=A;name=B,mode=exclusive_process;name=C,mode=prohibited", error);
  ASSERT_TRUE(devices) << error.message;
  EXPECT_EQ((*devices)[0].compute_mode, 0u);  // NVML_COMPUTEMODE_DEFAULT
  EXPECT_EQ((*devices)[1].compute_mode, 3u);  // NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
  EXPECT_EQ((*devices)[2].compute_mode, 2u);  // NVML_COMPUTEMODE_PROHIBITED
  EXPECT_FALSE(parse_devices("mode=exclusive", error));
  EXPECT_EQ(error.message,
            "SIMGPU_DEVICES: mode 'exclusive' must be default, exclusive_thread, prohibited or "
            "exclusive_process");
}

TEST(SimConfig, ParsesMigAndNamesBadValues) {
  ConfigError error;
  auto devices = parse_devices(
      "name=NVIDIA H200,memory=143771Mi,mig=capable;name=NVIDIA H100 80GB HBM3,memory=81559Mi,"
      "mig=on;name=NVIDIA L4",
      error);
  ASSERT_TRUE(devices) << error.message;
  EXPECT_EQ((*devices)[0].mig, MigSetting::kCapable);
  EXPECT_EQ((*devices)[1].mig, MigSetting::kOn);
  EXPECT_EQ((*devices)[2].mig, MigSetting::kNone);
  EXPECT_FALSE(parse_devices("name=NVIDIA H200,mig=yes", error));
  EXPECT_EQ(error.message,
            "SIMGPU_DEVICES: mig 'yes' must be capable (MIG mode off at start) or on");
  EXPECT_FALSE(parse_devices("name=NVIDIA L4,mig=capable", error));
  EXPECT_EQ(error.message,
            "SIMGPU_DEVICES: mig for name 'NVIDIA L4': the simulator has MIG profiles only for "
            "H200 141GB, H100 80GB, A100 80GB, A100 40GB");
  EXPECT_FALSE(parse_devices("name=NVIDIA H200,memory=16Gi,mig=on", error));
  EXPECT_EQ(error.message,
            "SIMGPU_DEVICES: memory of MIG device 'NVIDIA H200' is 16384Mi, less than its H200 "
            "141GB profiles need (143104Mi)");
}

// The tables are chosen by product name, and each profile's placements fit the 8 memory slices.
TEST(SimConfig, MigTablesByName) {
  ASSERT_NE(mig_model_for("NVIDIA A100-SXM4-80GB"), nullptr);
  EXPECT_STREQ(mig_model_for("NVIDIA A100-SXM4-80GB")->model, "A100 80GB");
  EXPECT_STREQ(mig_model_for("NVIDIA A100-PCIE-40GB")->model, "A100 40GB");
  EXPECT_STREQ(mig_model_for("NVIDIA H100 80GB HBM3")->model, "H100 80GB");
  EXPECT_STREQ(mig_model_for("NVIDIA H200")->model, "H200 141GB");
  EXPECT_EQ(mig_model_for("NVIDIA L40S"), nullptr);
  for (const MigModel& model : mig_models()) {
    for (const MigGpuInstanceProfile& profile : model.profiles) {
      SCOPED_TRACE(std::string(model.model) + " " + profile.name);
      EXPECT_GE(profile.placement_count, 1u);
      for (uint32_t p = 0; p < profile.placement_count; ++p)
        EXPECT_LE(profile.placement_starts[p] + profile.memory_slices, 8u);
      EXPECT_LE(profile.compute_slices, 7u);
    }
  }
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

TEST(SimConfig, DriverVersionsAndTheirCudaVersion) {
  ConfigError error;
  EXPECT_EQ(parse_driver_version("615.40.01", error), "615.40.01") << error.message;
  EXPECT_EQ(parse_driver_version("620.10", error), "620.10") << error.message;
  EXPECT_EQ(driver_branch("615.40.01"), 615);
  EXPECT_EQ(driver_branch("580.159.04"), 580);
  // R615 brings CUDA 13.4 and the memory partitions; anything older stays at CUDA 13.0.
  EXPECT_EQ(cuda_version_of_branch(615), 13040);
  EXPECT_EQ(cuda_version_of_branch(700), 13040);
  EXPECT_EQ(cuda_version_of_branch(614), 13000);
  EXPECT_EQ(cuda_version_of_branch(driver_branch("580.159.04")), 13000);
  for (const char* bad : {"615", "615.", "r615.40", "615.40.01.7", "0.1", "615.40.x", "", "12345.1",
                          "615.40.01-beta"}) {
    EXPECT_FALSE(parse_driver_version(bad, error)) << bad;
    EXPECT_NE(error.message.find("SIMGPU_DRIVER_VERSION"), std::string::npos) << error.message;
    EXPECT_EQ(driver_branch(bad), 0) << bad;
  }
}

}  // namespace
}  // namespace simgpu

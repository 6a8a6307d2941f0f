// The claim's CDI spec (share/cdi.h) against golden files, the lowest cdiVersion of a spec, the
// driver's discovery (share/driver_edits.h: a fake driver root, the NVIDIA Container Toolkit's
// spec) and the shim check (share/shim_library.h).
//
// Golden files: tests/node-agent/share/golden/*.json, with the test's temporary folder written
// as @ROOT@. After an intended change, regenerate them with TESSERA_UPDATE_GOLDEN=1 and review
// the diff.
#include "share/cdi.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "share/driver_edits.h"
#include "share/fake_driver.h"
#include "share/shim_library.h"

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::fake_container_driver;
using testing::make_fake_driver_root;
using testing::write_fake_shim;
using testing::write_text;

constexpr char kUuid0[] = "GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c";
constexpr char kUuid1[] = "GPU-9e1a7c3b-5d2f-4e8a-b6c1-0f2d3e4a5b6c";
constexpr char kClaimUid[] = "0b6f2c1e-4a5d-4e7f-9a8b-1c2d3e4f5a6b";

std::string read(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

ShareSpec quota_share() {
  ShareSpec share;
  share.claim_uid = kClaimUid;
  share.pool = "node-a";
  share.device = "gpu-0";
  share.share_id = "s-a";
  share.request_names = {"gpu"};
  share.uuid = kUuid0;
  share.minor = 0;
  share.memory_bytes = 8ull << 30;
  share.cores = 30;
  return share;
}

ShareSpec mps_share() {
  ShareSpec share = quota_share();
  share.share_id = "s-m";
  share.device = "gpu-1";
  share.uuid = kUuid1;
  share.minor = 1;
  share.config.strategy = vgpu_config::SharingStrategy::kMps;
  return share;
}

class CdiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::temp_directory_path() /
            ("agent-cdi-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(base_);
    fs::create_directories(base_);
    paths_.host_shares_dir = (base_ / "state/shares").string();
    paths_.container_shares_dir = "/var/run/tessera/shares";
    paths_.shim_path = "/usr/local/tessera/lib/libvgpu.so";
    paths_.host_mps_dir = (base_ / "state/mps").string();
    paths_.container_mps_dir = "/var/run/tessera/mps";
    paths_.host_preload_file = (base_ / "state/ld.so.preload").string();
  }
  void TearDown() override { fs::remove_all(base_); }

  // The spec equals golden/<name> once the temporary folder is written as @ROOT@.
  void expect_golden(const std::string& spec, const std::string& name) {
    const std::string portable = replace_all(spec, base_.string(), "@ROOT@");
    const fs::path golden = fs::path(CDI_GOLDEN_DIR) / name;
    if (const char* update = std::getenv("TESSERA_UPDATE_GOLDEN"); update && *update == '1') {
      std::ofstream(golden) << portable;
      return;
    }
    ASSERT_TRUE(fs::exists(golden)) << golden << " missing; TESSERA_UPDATE_GOLDEN=1 writes it";
    EXPECT_EQ(portable, read(golden)) << "differs from " << golden;
  }

  fs::path base_;
  CdiPaths paths_;
};

// --- the lowest cdiVersion --------------------------------------------------------------------

TEST(MinimumCdiVersion, EarliestForPlainContent) {
  EXPECT_EQ(minimum_cdi_version(json::object()), "0.3.0");
  EXPECT_EQ(minimum_cdi_version(
                json{{"kind", "vendor.com/gpu"},
                     {"devices",
                      {{{"name", "gpu0"},
                        {"containerEdits",
                         {{"env", {"A=1"}},
                          {"deviceNodes", {{{"path", "/dev/x"}}}},
                          {"mounts", {{{"hostPath", "/a"}, {"containerPath", "/a"}}}}}}}}}}),
            "0.3.0");
}

TEST(MinimumCdiVersion, MountTypeNeeds040) {
  const json spec = {
      {"kind", "vendor.com/gpu"},
      {"containerEdits",
       {{"mounts", {{{"hostPath", "/a"}, {"containerPath", "/a"}, {"type", "bind"}}}}}},
      {"devices", {{{"name", "gpu0"}}}}};
  EXPECT_EQ(minimum_cdi_version(spec), "0.4.0");
}

TEST(MinimumCdiVersion, DigitLeadingNameOrNodeHostPathNeeds050) {
  EXPECT_EQ(minimum_cdi_version({{"kind", "vendor.com/gpu"}, {"devices", {{{"name", "0"}}}}}),
            "0.5.0");
  EXPECT_EQ(minimum_cdi_version(
                {{"kind", "vendor.com/gpu"},
                 {"devices",
                  {{{"name", "gpu0"},
                    {"containerEdits",
                     {{"deviceNodes", {{{"path", "/dev/x"}, {"hostPath", "/root/dev/x"}}}}}}}}}}),
            "0.5.0");
  EXPECT_EQ(
      minimum_cdi_version({{"kind", "vendor.com/gpu"},
                           {"containerEdits",
                            {{"deviceNodes", {{{"path", "/dev/x"}, {"hostPath", "/root/dev/x"}}}}}},
                           {"devices", {{{"name", "gpu0"}}}}}),
      "0.5.0");
}

TEST(MinimumCdiVersion, AnnotationsOrADottedClassNeed060) {
  EXPECT_EQ(minimum_cdi_version({{"kind", "vendor.com/gpu"},
                                 {"annotations", {{"a", "b"}}},
                                 {"devices", {{{"name", "gpu0"}}}}}),
            "0.6.0");
  EXPECT_EQ(minimum_cdi_version({{"kind", "vendor.com/gpu"},
                                 {"devices", {{{"name", "gpu0"}, {"annotations", {{"a", "b"}}}}}}}),
            "0.6.0");
  EXPECT_EQ(
      minimum_cdi_version({{"kind", "vendor.com/gpu.shared"}, {"devices", {{{"name", "a"}}}}}),
      "0.6.0");
  // Empty annotations and dots in the vendor are nothing new.
  EXPECT_EQ(minimum_cdi_version({{"kind", "k8s.vgpu.tessera.dev/claim"},
                                 {"annotations", json::object()},
                                 {"devices", {{{"name", "a"}}}}}),
            "0.3.0");
}

TEST(MinimumCdiVersion, IntelRdtOrAdditionalGidsNeed070) {
  EXPECT_EQ(minimum_cdi_version({{"kind", "vendor.com/gpu"},
                                 {"containerEdits", {{"additionalGids", {44}}}},
                                 {"devices", {{{"name", "a"}}}}}),
            "0.7.0");
  EXPECT_EQ(minimum_cdi_version(
                {{"kind", "vendor.com/gpu"},
                 {"devices",
                  {{{"name", "a"}, {"containerEdits", {{"intelRdt", {{"closID", "gold"}}}}}}}}}),
            "0.7.0");
}

TEST(MinimumCdiVersion, RdtSchemataMonitoringOrNetDevicesNeed110) {
  EXPECT_EQ(minimum_cdi_version({{"kind", "vendor.com/gpu"},
                                 {"containerEdits", {{"intelRdt", {{"schemata", {"L3:0=ff"}}}}}},
                                 {"devices", {{{"name", "a"}}}}}),
            "1.1.0");
  EXPECT_EQ(minimum_cdi_version({{"kind", "vendor.com/gpu"},
                                 {"containerEdits", {{"intelRdt", {{"enableMonitoring", true}}}}},
                                 {"devices", {{{"name", "a"}}}}}),
            "1.1.0");
  EXPECT_EQ(minimum_cdi_version(
                {{"kind", "vendor.com/gpu"},
                 {"devices",
                  {{{"name", "a"},
                    {"containerEdits", {{"netDevices", {{{"hostInterfaceName", "eth1"}}}}}}}}}}),
            "1.1.0");
  // The highest need wins: a digit name and netDevices.
  EXPECT_EQ(minimum_cdi_version({{"kind", "vendor.com/gpu"},
                                 {"containerEdits", {{"netDevices", {{{"name", "x"}}}}}},
                                 {"devices", {{{"name", "0"}}}}}),
            "1.1.0");
}

TEST(MinimumCdiVersion, MembersOfAnotherTypeAreReadAsAbsentNotThrown) {
  EXPECT_EQ(minimum_cdi_version(json::array()), "0.3.0");
  EXPECT_EQ(minimum_cdi_version({{"kind", 7}, {"devices", "gpu0"}}), "0.3.0");
  EXPECT_EQ(minimum_cdi_version({{"kind", "vendor.com/gpu"},
                                 {"containerEdits", {{"intelRdt", {{"enableMonitoring", "yes"}}}}},
                                 {"devices", json::array({"a", 1, {{"name", 0}}})}}),
            "0.7.0");  // intelRdt set: 0.7.0; a monitoring flag that is no boolean is not set
  EXPECT_EQ(minimum_cdi_version(
                {{"containerEdits", "edits"}, {"devices", json::array({{{"containerEdits", 3}}})}}),
            "0.3.0");
}

// --- the spec, golden ---------------------------------------------------------------------------

TEST_F(CdiTest, DriverRootSpecWithLdSoPreloadMatchesGolden) {
  const ContainerDriver driver = fake_container_driver(base_ / "driver");
  const std::string text = build_cdi_spec({quota_share(), mps_share()}, paths_, driver);
  expect_golden(text, "driver_root_ld_so_preload.json");

  const json spec = json::parse(text);
  EXPECT_EQ(spec["cdiVersion"], "0.5.0");  // podman 4.3 (Debian 12) applies it; not 0.6.0
  EXPECT_EQ(spec["cdiVersion"], minimum_cdi_version(spec));
  // The default loading sets neither LD_PRELOAD nor LD_LIBRARY_PATH: the image's stay.
  for (const json* edits : {&spec["containerEdits"], &spec["devices"][0]["containerEdits"],
                            &spec["devices"][1]["containerEdits"]})
    for (const auto& entry : edits->value("env", json::array())) {
      EXPECT_NE(entry.get<std::string>().rfind("LD_PRELOAD=", 0), 0u) << entry;
      EXPECT_NE(entry.get<std::string>().rfind("LD_LIBRARY_PATH=", 0), 0u) << entry;
    }
  const json preload = {{"hostPath", paths_.host_preload_file},
                        {"containerPath", "/etc/ld.so.preload"},
                        {"options", {"bind", "ro", "nosuid", "nodev", "noexec"}}};
  const json& mounts = spec["containerEdits"]["mounts"];
  EXPECT_NE(std::find(mounts.begin(), mounts.end(), preload), mounts.end()) << mounts.dump(2);
}

TEST_F(CdiTest, ToolkitSpecWithLdPreloadMatchesGoldenAndAddsNoDriverEdits) {
  write_text(base_ / "etc-cdi/nvidia.yaml", read(fs::path(CDI_GOLDEN_DIR) / "nvidia.yaml"));
  DriverOptions options;
  options.toolkit_spec_dirs = {(base_ / "etc-cdi").string(), (base_ / "missing").string()};
  options.driver_root = (base_ / "no-driver-here").string();
  const Result<ContainerDriver> driver = discover_container_driver(options);
  ASSERT_EQ(driver.status().message(), "");
  ASSERT_TRUE(driver->uses_toolkit());
  paths_.shim_loading = ShimLoading::kLdPreloadEnv;
  const std::string text = build_cdi_spec({quota_share()}, paths_, *driver);
  expect_golden(text, "toolkit_ld_preload.json");

  const json spec = json::parse(text);
  EXPECT_EQ(spec["cdiVersion"], "0.5.0");
  EXPECT_EQ(spec["containerEdits"]["env"], json::array({"LD_PRELOAD=" + paths_.shim_path}));
  EXPECT_FALSE(spec["containerEdits"].contains("deviceNodes"));
  EXPECT_FALSE(spec["devices"][0]["containerEdits"].contains("deviceNodes"));
  ASSERT_EQ(spec["containerEdits"]["mounts"].size(), 1u);  // the shim alone
  const Result<std::vector<std::string>> ids = cdi_device_ids(quota_share(), *driver);
  ASSERT_EQ(ids.status().message(), "");
  EXPECT_EQ(*ids, (std::vector<std::string>{
                      std::string("k8s.vgpu.tessera.dev/claim=") + kClaimUid + "-gpu-0-s-a",
                      std::string("nvidia.com/gpu=") + kUuid0}));
}

TEST_F(CdiTest, DriverRootDeviceIdsAreOursAloneAndNoDriverIsAnError) {
  const ContainerDriver driver = fake_container_driver(base_ / "driver");
  const Result<std::vector<std::string>> ids = cdi_device_ids(quota_share(), driver);
  ASSERT_EQ(ids.status().message(), "");
  EXPECT_EQ(ids->size(), 1u);
  const Result<std::vector<std::string>> none = cdi_device_ids(quota_share(), ContainerDriver{});
  EXPECT_EQ(none.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(none.status().message().find("no NVIDIA driver for containers"), std::string::npos)
      << none.status().message();
}

TEST(PreloadFile, HoldsTheShimPathAndANewline) {
  EXPECT_EQ(preload_file_contents("/usr/local/tessera/lib/libvgpu.so"),
            "/usr/local/tessera/lib/libvgpu.so\n");
  EXPECT_EQ(parse_shim_loading("ld.so.preload"), ShimLoading::kLdSoPreload);
  EXPECT_EQ(parse_shim_loading("LD_PRELOAD"), ShimLoading::kLdPreloadEnv);
  EXPECT_EQ(parse_shim_loading("ld_preload"), std::nullopt);
}

// --- the driver root ----------------------------------------------------------------------------

TEST_F(CdiTest, DriverRootDiscoveryMountsLibrariesUnderTheirSonamesBinariesAndNodes) {
  const fs::path root = base_ / "driver";
  const ContainerDriver driver = fake_container_driver(root);
  const std::string lib = root.string() + testing::kFakeLibDir;
  const std::string in = testing::kFakeLibDir;
  const std::string v = testing::kFakeDriverVersion;
  EXPECT_EQ(driver.driver_version, v);
  EXPECT_EQ(driver.host_dev_dir, root.string() + "/dev");
  const std::vector<std::string> ro = {"ro", "nosuid", "nodev", "bind"};
  const std::vector<CdiMount> expected = {
      {lib + "/libcuda.so." + v, in + "/libcuda.so." + v, ro},
      {lib + "/libcuda.so." + v, in + "/libcuda.so.1", ro},
      {lib + "/libcudadebugger.so." + v, in + "/libcudadebugger.so." + v, ro},
      {lib + "/libcudadebugger.so." + v, in + "/libcudadebugger.so.1", ro},  // absolute link
      {lib + "/libnvidia-ml.so." + v, in + "/libnvidia-ml.so." + v, ro},
      {lib + "/libnvidia-ml.so." + v, in + "/libnvidia-ml.so.1", ro},
      {lib + "/libnvidia-ptxjitcompiler.so." + v, in + "/libnvidia-ptxjitcompiler.so." + v, ro},
      {lib + "/libnvidia-ptxjitcompiler.so." + v, in + "/libnvidia-ptxjitcompiler.so.1", ro},
      {lib + "/libnvidia-nvvm.so." + v, in + "/libnvidia-nvvm.so." + v, ro},
      {lib + "/libnvidia-nvvm.so." + v, in + "/libnvidia-nvvm.so.4", ro},
      {lib + "/libnvidia-gpucomp.so." + v, in + "/libnvidia-gpucomp.so." + v, ro},  // no soname
      {root.string() + "/usr/bin/nvidia-smi", "/usr/bin/nvidia-smi", ro},
      {root.string() + "/usr/bin/nvidia-cuda-mps-control", "/usr/bin/nvidia-cuda-mps-control", ro},
      {root.string() + "/usr/bin/nvidia-cuda-mps-server", "/usr/bin/nvidia-cuda-mps-server", ro},
  };
  EXPECT_EQ(driver.mounts, expected);
  // Only nodes that exist; nvidia-uvm-tools is not in this root.
  const std::vector<CdiDeviceNode> nodes = {{"/dev/nvidiactl", root.string() + "/dev/nvidiactl"},
                                            {"/dev/nvidia-uvm", root.string() + "/dev/nvidia-uvm"}};
  EXPECT_EQ(driver.device_nodes, nodes);
}

TEST_F(CdiTest, ASimulatorRootWithOnlySonameFilesIsADriver) {
  // simgpu/ builds libcuda.so.1 and libnvidia-ml.so.1 as the files themselves.
  const fs::path root = base_ / "sim";
  write_text(root / "usr/lib/x86_64-linux-gnu/libcuda.so.1", "sim cuda");
  write_text(root / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", "sim nvml");
  const Result<ContainerDriver> driver = discover_driver_root(root.string());
  ASSERT_EQ(driver.status().message(), "");
  EXPECT_EQ(driver->driver_version, "");
  const std::string lib = root.string() + "/usr/lib/x86_64-linux-gnu";
  const std::vector<std::string> ro = {"ro", "nosuid", "nodev", "bind"};
  EXPECT_EQ(driver->mounts,
            (std::vector<CdiMount>{
                {lib + "/libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", ro},
                {lib + "/libnvidia-ml.so.1", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", ro}}));
  // No nodes under this root: the host's /dev, named without a hostPath.
  EXPECT_EQ(driver->host_dev_dir, "/dev");
}

TEST_F(CdiTest, ARootWithoutLibcudaIsAnErrorNamingWhereItLooked) {
  const fs::path root = base_ / "empty";
  write_text(root / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", "nvml only");
  const Result<ContainerDriver> driver = discover_driver_root(root.string());
  EXPECT_EQ(driver.status().code(), StatusCode::kNotFound);
  EXPECT_NE(driver.status().message().find(root.string() + "/usr/lib/x86_64-linux-gnu"),
            std::string::npos)
      << driver.status().message();
  EXPECT_NE(driver.status().message().find("libcuda"), std::string::npos);

  // A dangling libcuda.so.1 is no driver either.
  fs::create_symlink("libcuda.so.999.1", root / "usr/lib/x86_64-linux-gnu/libcuda.so.1");
  EXPECT_FALSE(discover_driver_root(root.string()).is_ok());

  const Result<ContainerDriver> missing = discover_driver_root((base_ / "nowhere").string());
  EXPECT_NE(missing.status().message().find((base_ / "nowhere").string()), std::string::npos);
  EXPECT_NE(missing.status().message().find("--driver-root"), std::string::npos);
}

// --- the toolkit's spec
// ---------------------------------------------------------------------------

TEST_F(CdiTest, ToolkitDevicesAreFoundByUuidThenByTheirNode) {
  write_text(base_ / "cdi/nvidia.yaml", read(fs::path(CDI_GOLDEN_DIR) / "nvidia.yaml"));
  // Another vendor's spec and ours are skipped; a JSON toolkit spec naming devices by index only.
  write_text(base_ / "cdi/other.json",
             R"({"cdiVersion":"0.5.0","kind":"vendor.com/fpga","devices":[]})");
  write_text(base_ / "run-cdi/nvidia.json",
             R"({"cdiVersion":"0.5.0","kind":"nvidia.com/gpu","devices":[
                  {"name":"gpu3","containerEdits":{"deviceNodes":[{"path":"/dev/nvidia3"}]}},
                  {"name":"3:0","containerEdits":{"deviceNodes":[{"path":"/dev/nvidia3"},
                    {"path":"/dev/nvidia-caps/nvidia-cap21"}]}},
                  {"name":"all","containerEdits":{"deviceNodes":[{"path":"/dev/nvidia3"}]}}]})");
  const Result<std::optional<ContainerDriver>> read =
      read_toolkit_specs({(base_ / "cdi").string(), (base_ / "run-cdi").string()});
  ASSERT_EQ(read.status().message(), "");
  ASSERT_TRUE(read->has_value());
  const ContainerDriver& driver = **read;
  EXPECT_EQ(driver.toolkit_spec,
            (base_ / "cdi/nvidia.yaml").string() + ", " + (base_ / "run-cdi/nvidia.json").string());
  EXPECT_EQ(*toolkit_device_id(driver, kUuid1, 1), std::string("nvidia.com/gpu=") + kUuid1);
  // By UUID even when the minor would name another device.
  EXPECT_EQ(*toolkit_device_id(driver, kUuid0, 7), std::string("nvidia.com/gpu=") + kUuid0);
  // A GPU the spec names by index only: the device of its node (never "all", never a MIG device).
  EXPECT_EQ(*toolkit_device_id(driver, "GPU-33333333-3333-3333-3333-333333333333", 3),
            "nvidia.com/gpu=gpu3");
  const Result<std::string> unknown =
      toolkit_device_id(driver, "GPU-55555555-5555-5555-5555-555555555555", 5);
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_NE(unknown.status().message().find((base_ / "cdi/nvidia.yaml").string()),
            std::string::npos)
      << unknown.status().message();
  EXPECT_NE(unknown.status().message().find("GPU-55555555"), std::string::npos);
}

TEST_F(CdiTest, ModesChooseTheToolkitOrTheDriverRoot) {
  make_fake_driver_root(base_ / "driver");
  DriverOptions options;
  options.toolkit_spec_dirs = {(base_ / "cdi").string()};
  options.driver_root = (base_ / "driver").string();
  // auto, no toolkit spec: the driver root.
  Result<ContainerDriver> chosen = discover_container_driver(options);
  ASSERT_EQ(chosen.status().message(), "");
  EXPECT_TRUE(chosen->uses_driver_root());
  EXPECT_FALSE(chosen->uses_toolkit());
  // toolkit, none there: an error naming the folders.
  options.mode = DriverMode::kToolkit;
  chosen = discover_container_driver(options);
  EXPECT_EQ(chosen.status().code(), StatusCode::kNotFound);
  EXPECT_NE(chosen.status().message().find((base_ / "cdi").string()), std::string::npos);
  // With the toolkit's spec, auto and toolkit take it; driver-root ignores it.
  write_text(base_ / "cdi/nvidia.yaml", read(fs::path(CDI_GOLDEN_DIR) / "nvidia.yaml"));
  for (const DriverMode mode : {DriverMode::kAuto, DriverMode::kToolkit}) {
    options.mode = mode;
    chosen = discover_container_driver(options);
    ASSERT_EQ(chosen.status().message(), "");
    EXPECT_TRUE(chosen->uses_toolkit()) << to_string(mode);
    EXPECT_FALSE(chosen->uses_driver_root());
  }
  options.mode = DriverMode::kDriverRoot;
  chosen = discover_container_driver(options);
  ASSERT_EQ(chosen.status().message(), "");
  EXPECT_TRUE(chosen->uses_driver_root());
  // auto with neither: one error naming both.
  options.mode = DriverMode::kAuto;
  options.toolkit_spec_dirs = {(base_ / "none").string()};
  options.driver_root = (base_ / "none").string();
  chosen = discover_container_driver(options);
  EXPECT_FALSE(chosen.is_ok());
  EXPECT_NE(chosen.status().message().find("NVIDIA Container Toolkit"), std::string::npos);
  EXPECT_NE(chosen.status().message().find("driver root " + (base_ / "none").string()),
            std::string::npos)
      << chosen.status().message();
  EXPECT_EQ(parse_driver_mode("driver-root"), DriverMode::kDriverRoot);
  EXPECT_EQ(parse_driver_mode("root"), std::nullopt);
}

TEST_F(CdiTest, AnUnparsableToolkitSpecIsAnErrorNamingIt) {
  write_text(base_ / "cdi/nvidia.yaml", "kind: nvidia.com/gpu\ndevices: [ {name: \"0\"\n");
  const Result<std::optional<ContainerDriver>> read =
      read_toolkit_specs({(base_ / "cdi").string()});
  EXPECT_EQ(read.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(read.status().message().find((base_ / "cdi/nvidia.yaml").string()), std::string::npos)
      << read.status().message();
}

TEST_F(CdiTest, ToolkitSpecEntriesOfAnotherTypeAreSkippedNotRead) {
  // Each device but the last is malformed somewhere a reader would step through: skipped.
  write_text(base_ / "cdi/nvidia.yaml", R"(kind: nvidia.com/gpu
devices:
  - just-a-string
  - name: {a: map}
  - name: gpu0
  - name: gpu1
    containerEdits: a-scalar
  - name: gpu2
    containerEdits: [a, sequence]
  - name: gpu3
    containerEdits: {deviceNodes: {path: /dev/nvidia3}}
  - name: gpu4
    containerEdits: {deviceNodes: [a-scalar, {path: [/dev/nvidia4]}, {other: /dev/nvidia4}]}
  - name: gpu5
    containerEdits: {deviceNodes: [{path: /dev/nvidia5}]}
)");
  const Result<std::optional<ContainerDriver>> read =
      read_toolkit_specs({(base_ / "cdi").string()});
  ASSERT_EQ(read.status().message(), "");
  ASSERT_TRUE(read->has_value());
  EXPECT_TRUE((*read)->toolkit_by_uuid.empty());
  EXPECT_EQ((*read)->toolkit_by_minor,
            (std::map<unsigned, std::string>{{5, "nvidia.com/gpu=gpu5"}}));

  // Nothing readable: no toolkit spec (not an error), whatever the shape of kind and devices.
  for (const char* text :
       {"kind: [nvidia.com/gpu]\ndevices: []\n", "kind: nvidia.com/gpu\ndevices: {name: gpu0}\n",
        "kind: nvidia.com/gpu\ndevices: nvidia.com/gpu\n", "- kind: nvidia.com/gpu\n",
        "nvidia.com/gpu\n", "kind: nvidia.com/gpu\ndevices: [{name: gpu0}]\n"}) {
    write_text(base_ / "cdi/nvidia.yaml", text);
    const Result<std::optional<ContainerDriver>> none =
        read_toolkit_specs({(base_ / "cdi").string()});
    EXPECT_EQ(none.status().message(), "") << text;
    EXPECT_TRUE(none.is_ok() && !none->has_value()) << text;
  }
}

// --- the shim -----------------------------------------------------------------------------------

TEST_F(CdiTest, TheShimMustBeALoadableSharedLibrary) {
  EXPECT_EQ(check_shim_library(write_fake_shim(base_ / "libvgpu.so")).message(), "");

  auto refused = [](const std::string& path, const std::string& why) {
    const Status status = check_shim_library(path);
    EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition) << path;
    EXPECT_NE(status.message().find(path), std::string::npos) << status.message();
    EXPECT_NE(status.message().find(why), std::string::npos) << status.message();
  };
  refused((base_ / "missing.so").string(), "cannot be opened: No such file or directory");
  write_text(base_ / "text.so", "this is not a library\n");
  refused((base_ / "text.so").string(), "no ELF header");
  write_text(base_ / "short.so",
             "\x7f"
             "EL");
  refused((base_ / "short.so").string(), "no ELF header");
  write_text(base_ / "lib32.so", testing::elf_header(ELFCLASS32));
  refused((base_ / "lib32.so").string(), "32-bit");
  write_text(base_ / "exec", testing::elf_header(ELFCLASS64, ET_EXEC));
  refused((base_ / "exec").string(), "not a shared library");
  write_text(base_ / "object.o", testing::elf_header(ELFCLASS64, ET_REL));
  refused((base_ / "object.o").string(), "an object file");
  write_text(base_ / "arm.so", testing::elf_header(ELFCLASS64, ET_DYN, EM_AARCH64));
  refused((base_ / "arm.so").string(), "ELF machine 183");
  fs::create_directories(base_ / "dir.so");
  refused((base_ / "dir.so").string(), "not a regular file");
  refused("relative/libvgpu.so", "not an absolute path");
}

TEST_F(CdiTest, ARealSharedLibraryPasses) {
  // libc of this process: a real ET_DYN of this host (found through /proc/self/maps).
  std::ifstream maps("/proc/self/maps");
  std::string line, libc;
  while (std::getline(maps, line))
    if (const size_t at = line.find('/');
        at != std::string::npos && line.find("libc.so") != std::string::npos) {
      libc = line.substr(at);
      break;
    }
  ASSERT_FALSE(libc.empty());
  EXPECT_EQ(check_shim_library(libc).message(), "");
}

}  // namespace
}  // namespace tessera::agent

// MIG in the simulated libnvidia-ml.so.1 and its shared state: mode, profiles by index and
// placements by ID, GPU and compute instances with their misuse errors, MIG device handles and
// UUIDs, memory and processes per instance (tenants in other processes), one timeline per MIG
// device, and the capability files under SIMGPU_PROC_ROOT. Each scenario runs in a forked child
// with a state file of its own; tenants are further children bound to a MIG device, as the
// simulated libcuda.so.1 binds a process that CUDA_VISIBLE_DEVICES gives a MIG UUID.
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "simulator.h"
#include "tessera/nvml_abi.h"

namespace {

constexpr char kMigH200[] =
    "name=NVIDIA H200,memory=143771Mi,sms=132,cc=9.0,mig=capable;"
    "name=NVIDIA L4,memory=23034Mi,sms=58,cc=8.9";
constexpr char kMigOnH200[] = "name=NVIDIA H200,memory=143771Mi,sms=132,cc=9.0,mig=on";
constexpr char kMigA100[] = "name=NVIDIA A100-SXM4-40GB,memory=40537Mi,sms=108,cc=8.0,mig=capable";
constexpr uint64_t kMiB = 1ull << 20;
constexpr unsigned kProfile1g = 19, kProfile1gMe = 20, kProfile2g = 14, kProfile3g = 9,
                   kProfile4g = 5, kProfile7g = 0;

struct Scenario {
  std::string devices;
  std::string driver_version;  // SIMGPU_DRIVER_VERSION, default when empty
  std::string proc_root;       // SIMGPU_PROC_ROOT, none when empty
};

void run_scenario(const Scenario& scenario, const std::function<void()>& body) {
  char directory[] = "/tmp/simgpu-mig-test-XXXXXX";
  ASSERT_NE(mkdtemp(directory), nullptr);
  const std::string state_path = std::string(directory) + "/state";
  std::fflush(nullptr);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setenv("SIMGPU_STATE", state_path.c_str(), 1);
    setenv("SIMGPU_DEVICES", scenario.devices.c_str(), 1);
    unsetenv("SIMGPU_UNHEALTHY");
    unsetenv("SIMGPU_FAIL_ALLOC_AT");
    if (scenario.driver_version.empty()) {
      unsetenv("SIMGPU_DRIVER_VERSION");
    } else {
      setenv("SIMGPU_DRIVER_VERSION", scenario.driver_version.c_str(), 1);
    }
    if (scenario.proc_root.empty()) {
      unsetenv("SIMGPU_PROC_ROOT");
    } else {
      setenv("SIMGPU_PROC_ROOT", scenario.proc_root.c_str(), 1);
    }
    ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
    body();
    std::fflush(nullptr);
    _exit(::testing::Test::HasFailure() ? 1 : 0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  std::filesystem::remove_all(directory);
  ASSERT_TRUE(WIFEXITED(status)) << "scenario process died, status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the scenario failed (its messages are above)";
}

// A tenant in another process: binds itself to a MIG device (by UUID) of device 0, makes a
// context there, runs `setup`, then holds everything until stopped.
class Tenant {
 public:
  Tenant(const std::string& mig_uuid, const std::function<bool()>& setup) {
    int ready[2];
    int release[2];
    if (pipe(ready) != 0 || pipe(release) != 0) return;
    std::fflush(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      // Only its own pipe ends: another tenant's release end held here would keep it alive.
      for (int fd = 3; fd < 1024; ++fd) {
        if (fd != ready[1] && fd != release[0]) close(fd);
      }
      simgpu::Simulator* sim = simgpu::Simulator::get();
      bool ok = sim != nullptr;
      if (ok && !mig_uuid.empty()) {
        const auto ref = sim->find_mig_device(mig_uuid);
        ok = ref.has_value();
        if (ok) {
          const simgpu::MigState state = sim->mig_state(ref->device);
          ok = sim->bind_mig_device(
              ref->device,
              state.gpu_instances[ref->gpu_instance].compute[ref->compute_instance].serial);
        }
      }
      ok = ok && sim->context_created(0) && setup();
      const char byte = ok ? 1 : 0;
      if (write(ready[1], &byte, 1) != 1) _exit(1);
      char ignored;
      while (read(release[0], &ignored, 1) > 0) {
      }
      _exit(0);
    }
    close(ready[1]);
    close(release[0]);
    release_fd_ = release[1];
    char byte = 0;
    if (pid_ > 0) ready_ = read(ready[0], &byte, 1) == 1 && byte == 1;
    close(ready[0]);
  }
  ~Tenant() { stop(); }
  Tenant(const Tenant&) = delete;
  Tenant& operator=(const Tenant&) = delete;

  void stop() {
    if (release_fd_ >= 0) close(release_fd_);
    release_fd_ = -1;
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  bool ready() const { return ready_; }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int release_fd_ = -1;
  bool ready_ = false;
};

// The calling process's simulator (a tenant's own, not its parent's).
simgpu::Simulator* self() {
  return simgpu::Simulator::get();
}

nvmlDevice_t gpu(unsigned index) {
  nvmlDevice_t device = nullptr;
  EXPECT_EQ(nvmlDeviceGetHandleByIndex_v2(index, &device), NVML_SUCCESS);
  return device;
}

nvmlGpuInstance_t create_gi(nvmlDevice_t device, unsigned profile_id, unsigned start,
                            unsigned size) {
  nvmlGpuInstancePlacement_t placement{start, size};
  nvmlGpuInstance_t instance = nullptr;
  EXPECT_EQ(nvmlDeviceCreateGpuInstanceWithPlacement(device, profile_id, &placement, &instance),
            NVML_SUCCESS)
      << "profile " << profile_id << " at " << start;
  return instance;
}

// A compute instance and its MIG device.
struct MigDevice {
  nvmlComputeInstance_t compute = nullptr;
  nvmlDevice_t device = nullptr;
  std::string uuid;
};

MigDevice create_ci(nvmlGpuInstance_t instance, unsigned profile_id) {
  MigDevice mig;
  EXPECT_EQ(nvmlGpuInstanceCreateComputeInstance(instance, profile_id, &mig.compute), NVML_SUCCESS);
  nvmlComputeInstanceInfo_t info{};
  EXPECT_EQ(nvmlComputeInstanceGetInfo_v2(mig.compute, &info), NVML_SUCCESS);
  mig.device = info.device;
  char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
  EXPECT_EQ(nvmlDeviceGetUUID(mig.device, uuid, sizeof uuid), NVML_SUCCESS);
  mig.uuid = uuid;
  return mig;
}

void enable_mig(nvmlDevice_t device) {
  nvmlReturn_t activation = NVML_ERROR_UNKNOWN;
  ASSERT_EQ(nvmlDeviceSetMigMode(device, NVML_DEVICE_MIG_ENABLE, &activation), NVML_SUCCESS);
  ASSERT_EQ(activation, NVML_SUCCESS);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(SimMig, ModeAndProfilesByIndexWithMigOff) {
  run_scenario({kMigH200, "", ""}, [] {
    nvmlDevice_t h200 = gpu(0);
    unsigned current = 9, pending = 9;
    ASSERT_EQ(nvmlDeviceGetMigMode(h200, &current, &pending), NVML_SUCCESS);
    EXPECT_EQ(current, unsigned{NVML_DEVICE_MIG_DISABLE});
    EXPECT_EQ(pending, unsigned{NVML_DEVICE_MIG_DISABLE});

    // Profiles and placements answer with MIG mode off (as NVIDIA's DRA driver needs on Hopper).
    nvmlGpuInstanceProfileInfo_t v1{};
    ASSERT_EQ(nvmlDeviceGetGpuInstanceProfileInfo(h200, NVML_GPU_INSTANCE_PROFILE_3_SLICE, &v1),
              NVML_SUCCESS);
    EXPECT_EQ(v1.id, kProfile3g);
    EXPECT_EQ(v1.instanceCount, 2u);
    EXPECT_EQ(v1.multiprocessorCount, 60u);
    EXPECT_EQ(v1.memorySizeMB, 71168u);
    EXPECT_EQ(v1.sliceCount, 3u);
    nvmlGpuInstanceProfileInfo_v3_t v3{};
    v3.version = nvmlGpuInstanceProfileInfo_v3;
    ASSERT_EQ(nvmlDeviceGetGpuInstanceProfileInfoV(
                  h200, NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2,
                  reinterpret_cast<nvmlGpuInstanceProfileInfo_v2_t*>(&v3)),
              NVML_SUCCESS);
    EXPECT_EQ(v3.id, 15u);
    EXPECT_STREQ(v3.name, "MIG 1g.35gb");
    EXPECT_EQ(v3.multiprocessorCount, 26u);
    nvmlGpuInstanceProfileInfo_v2_t v2{};
    v2.version = nvmlGpuInstanceProfileInfo_v2;
    ASSERT_EQ(nvmlDeviceGetGpuInstanceProfileInfoByIdV(h200, kProfile7g, &v2), NVML_SUCCESS);
    EXPECT_EQ(v2.memorySizeMB, 143104u);
    EXPECT_STREQ(v2.name, "MIG 7g.141gb");
    // Index vs ID: 9 is the 1_SLICE_REV2 index, not the 3g profile ID.
    ASSERT_EQ(nvmlDeviceGetGpuInstanceProfileInfo(h200, 9, &v1), NVML_SUCCESS);
    EXPECT_EQ(v1.id, 15u);

    // Misuse: a profile the GPU lacks, an index past the last, a wrong struct version.
    EXPECT_EQ(nvmlDeviceGetGpuInstanceProfileInfo(h200, NVML_GPU_INSTANCE_PROFILE_8_SLICE, &v1),
              NVML_ERROR_NOT_SUPPORTED);
    EXPECT_EQ(nvmlDeviceGetGpuInstanceProfileInfo(h200, NVML_GPU_INSTANCE_PROFILE_COUNT, &v1),
              NVML_ERROR_INVALID_ARGUMENT);
    v2.version = 7;
    EXPECT_EQ(nvmlDeviceGetGpuInstanceProfileInfoV(h200, 0, &v2),
              NVML_ERROR_ARGUMENT_VERSION_MISMATCH);

    unsigned count = 0;
    ASSERT_EQ(nvmlDeviceGetGpuInstancePossiblePlacements_v2(h200, kProfile1g, nullptr, &count),
              NVML_SUCCESS);
    EXPECT_EQ(count, 7u);
    nvmlGpuInstancePlacement_t placements[8] = {};
    ASSERT_EQ(nvmlDeviceGetGpuInstancePossiblePlacements_v2(h200, kProfile3g, placements, &count),
              NVML_SUCCESS);
    ASSERT_EQ(count, 2u);
    EXPECT_EQ(placements[0].start, 0u);
    EXPECT_EQ(placements[1].start, 4u);
    EXPECT_EQ(placements[1].size, 4u);
    EXPECT_EQ(nvmlDeviceGetGpuInstancePossiblePlacements_v2(h200, 3, placements, &count),
              NVML_ERROR_NOT_SUPPORTED);  // not a profile ID here

    // MIG off: no instances, no MIG devices.
    nvmlGpuInstance_t instance = nullptr;
    EXPECT_EQ(nvmlDeviceCreateGpuInstance(h200, kProfile1g, &instance), NVML_ERROR_NOT_SUPPORTED);
    EXPECT_EQ(nvmlDeviceGetGpuInstanceById(h200, 0, &instance), NVML_ERROR_NOT_SUPPORTED);
    unsigned max = 9;
    ASSERT_EQ(nvmlDeviceGetMaxMigDeviceCount(h200, &max), NVML_SUCCESS);
    EXPECT_EQ(max, 0u);

    // A GPU without MIG.
    nvmlDevice_t l4 = gpu(1);
    EXPECT_EQ(nvmlDeviceGetMigMode(l4, &current, &pending), NVML_ERROR_NOT_SUPPORTED);
    EXPECT_EQ(nvmlDeviceGetGpuInstanceProfileInfo(l4, 0, &v1), NVML_ERROR_NOT_SUPPORTED);
    nvmlReturn_t activation = NVML_SUCCESS;
    EXPECT_EQ(nvmlDeviceSetMigMode(l4, NVML_DEVICE_MIG_ENABLE, &activation),
              NVML_ERROR_NOT_SUPPORTED);
    EXPECT_EQ(nvmlDeviceSetMigMode(h200, 7, &activation), NVML_ERROR_INVALID_ARGUMENT);

    // Hopper: on at once.
    enable_mig(h200);
    ASSERT_EQ(nvmlDeviceGetMigMode(h200, &current, &pending), NVML_SUCCESS);
    EXPECT_EQ(current, unsigned{NVML_DEVICE_MIG_ENABLE});
    EXPECT_EQ(pending, unsigned{NVML_DEVICE_MIG_ENABLE});
    ASSERT_EQ(nvmlDeviceGetMaxMigDeviceCount(h200, &max), NVML_SUCCESS);
    EXPECT_EQ(max, 7u);
  });
}

TEST(SimMig, GpuInstancesTakePlacementsAndRefuseOverlaps) {
  run_scenario({kMigOnH200, "", ""}, [] {
    nvmlDevice_t h200 = gpu(0);
    nvmlGpuInstance_t three = create_gi(h200, kProfile3g, 4, 4);
    nvmlGpuInstanceInfo_t info{};
    ASSERT_EQ(nvmlGpuInstanceGetInfo(three, &info), NVML_SUCCESS);
    EXPECT_EQ(info.device, h200);
    EXPECT_EQ(info.id, 2u);  // the second half
    EXPECT_EQ(info.profileId, kProfile3g);
    EXPECT_EQ(info.placement.start, 4u);
    EXPECT_EQ(info.placement.size, 4u);
    // A 4g at 0 beside a 3g at 4 (possible since R510).
    create_gi(h200, kProfile4g, 0, 4);

    nvmlGpuInstance_t refused = nullptr;
    nvmlGpuInstancePlacement_t at0{0, 1};
    EXPECT_EQ(nvmlDeviceCreateGpuInstanceWithPlacement(h200, kProfile1g, &at0, &refused),
              NVML_ERROR_INSUFFICIENT_RESOURCES);  // overlaps the 4g
    nvmlGpuInstancePlacement_t odd{1, 4};
    EXPECT_EQ(nvmlDeviceCreateGpuInstanceWithPlacement(h200, kProfile3g, &odd, &refused),
              NVML_ERROR_INVALID_ARGUMENT);  // not a placement of 3g
    nvmlGpuInstancePlacement_t wrong_size{0, 2};
    EXPECT_EQ(nvmlDeviceCreateGpuInstanceWithPlacement(h200, kProfile3g, &wrong_size, &refused),
              NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(nvmlDeviceCreateGpuInstance(h200, 99, &refused), NVML_ERROR_INVALID_ARGUMENT);
    // Possible placements are all the legal ones, occupied or not.
    unsigned count = 0;
    ASSERT_EQ(nvmlDeviceGetGpuInstancePossiblePlacements_v2(h200, kProfile1g, nullptr, &count),
              NVML_SUCCESS);
    EXPECT_EQ(count, 7u);
    unsigned remaining = 9;
    ASSERT_EQ(nvmlDeviceGetGpuInstanceRemainingCapacity(h200, kProfile1g, &remaining),
              NVML_SUCCESS);
    EXPECT_EQ(remaining, 0u);

    nvmlGpuInstance_t listed[8] = {};
    count = 8;
    ASSERT_EQ(nvmlDeviceGetGpuInstances(h200, kProfile3g, listed, &count), NVML_SUCCESS);
    ASSERT_EQ(count, 1u);
    EXPECT_EQ(listed[0], three);
    nvmlGpuInstance_t by_id = nullptr;
    ASSERT_EQ(nvmlDeviceGetGpuInstanceById(h200, 2, &by_id), NVML_SUCCESS);
    EXPECT_EQ(by_id, three);
    EXPECT_EQ(nvmlDeviceGetGpuInstanceById(h200, 7, &by_id), NVML_ERROR_NOT_FOUND);

    // Destroyed: its ID is gone, its handle stale.
    ASSERT_EQ(nvmlGpuInstanceDestroy(three), NVML_SUCCESS);
    EXPECT_EQ(nvmlDeviceGetGpuInstanceById(h200, 2, &by_id), NVML_ERROR_NOT_FOUND);
    EXPECT_EQ(nvmlGpuInstanceDestroy(three), NVML_ERROR_NOT_FOUND);
    EXPECT_EQ(nvmlGpuInstanceGetInfo(three, &info), NVML_ERROR_NOT_FOUND);
  });
}

TEST(SimMig, AutomaticPlacementAndUsedUpProfiles) {
  run_scenario({kMigOnH200, "", ""}, [] {
    nvmlDevice_t h200 = gpu(0);
    // The guide's known issue: 1g, 1g, 2g and then 3g fails with automatic placement.
    nvmlGpuInstance_t instance = nullptr;
    ASSERT_EQ(nvmlDeviceCreateGpuInstance(h200, kProfile1g, &instance), NVML_SUCCESS);
    nvmlGpuInstanceInfo_t info{};
    ASSERT_EQ(nvmlGpuInstanceGetInfo(instance, &info), NVML_SUCCESS);
    EXPECT_EQ(info.placement.start, 6u);
    ASSERT_EQ(nvmlDeviceCreateGpuInstance(h200, kProfile1g, &instance), NVML_SUCCESS);
    ASSERT_EQ(nvmlDeviceCreateGpuInstance(h200, kProfile2g, &instance), NVML_SUCCESS);
    EXPECT_EQ(nvmlDeviceCreateGpuInstance(h200, kProfile3g, &instance),
              NVML_ERROR_INSUFFICIENT_RESOURCES);
    // One +me instance at most.
    ASSERT_EQ(nvmlDeviceCreateGpuInstance(h200, kProfile1gMe, &instance), NVML_SUCCESS);
    EXPECT_EQ(nvmlDeviceCreateGpuInstance(h200, kProfile1gMe, &instance),
              NVML_ERROR_INSUFFICIENT_RESOURCES);
  });
}

TEST(SimMig, ComputeInstancesAreMigDevices) {
  run_scenario({kMigOnH200, "", ""}, [] {
    nvmlDevice_t h200 = gpu(0);
    nvmlGpuInstance_t three = create_gi(h200, kProfile3g, 0, 4);
    nvmlComputeInstanceProfileInfo_t ci_profile{};
    ASSERT_EQ(nvmlGpuInstanceGetComputeInstanceProfileInfo(
                  three, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
                  NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &ci_profile),
              NVML_SUCCESS);
    EXPECT_EQ(ci_profile.instanceCount, 3u);
    EXPECT_EQ(ci_profile.multiprocessorCount, 20u);
    EXPECT_EQ(nvmlGpuInstanceGetComputeInstanceProfileInfo(
                  three, NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE,
                  NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &ci_profile),
              NVML_ERROR_NOT_SUPPORTED);
    EXPECT_EQ(nvmlGpuInstanceGetComputeInstanceProfileInfo(
                  three, NVML_COMPUTE_INSTANCE_PROFILE_COUNT,
                  NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &ci_profile),
              NVML_ERROR_INVALID_ARGUMENT);

    MigDevice whole = create_ci(three, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE);
    EXPECT_EQ(whole.uuid.rfind("MIG-", 0), 0u) << whole.uuid;
    unsigned is_mig = 9;
    ASSERT_EQ(nvmlDeviceIsMigDeviceHandle(whole.device, &is_mig), NVML_SUCCESS);
    EXPECT_EQ(is_mig, 1u);
    ASSERT_EQ(nvmlDeviceIsMigDeviceHandle(h200, &is_mig), NVML_SUCCESS);
    EXPECT_EQ(is_mig, 0u);
    nvmlDevice_t by_uuid = nullptr;
    ASSERT_EQ(nvmlDeviceGetHandleByUUID(whole.uuid.c_str(), &by_uuid), NVML_SUCCESS);
    EXPECT_EQ(by_uuid, whole.device);
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
    ASSERT_EQ(nvmlDeviceGetName(whole.device, name, sizeof name), NVML_SUCCESS);
    EXPECT_STREQ(name, "NVIDIA H200 MIG 3g.71gb");
    nvmlDevice_t parent = nullptr;
    ASSERT_EQ(nvmlDeviceGetDeviceHandleFromMigDeviceHandle(whole.device, &parent), NVML_SUCCESS);
    EXPECT_EQ(parent, h200);
    unsigned id = 99;
    ASSERT_EQ(nvmlDeviceGetGpuInstanceId(whole.device, &id), NVML_SUCCESS);
    EXPECT_EQ(id, 1u);
    ASSERT_EQ(nvmlDeviceGetComputeInstanceId(whole.device, &id), NVML_SUCCESS);
    EXPECT_EQ(id, 0u);
    EXPECT_EQ(nvmlDeviceGetGpuInstanceId(h200, &id), NVML_ERROR_NOT_SUPPORTED);
    nvmlDeviceAttributes_t attributes{};
    ASSERT_EQ(nvmlDeviceGetAttributes_v2(whole.device, &attributes), NVML_SUCCESS);
    EXPECT_EQ(attributes.multiprocessorCount, 60u);
    EXPECT_EQ(attributes.memorySizeMB, 71168u);
    EXPECT_EQ(attributes.gpuInstanceSliceCount, 3u);
    EXPECT_EQ(nvmlDeviceGetAttributes_v2(h200, &attributes), NVML_ERROR_NOT_SUPPORTED);
    nvmlMemory_t memory{};
    ASSERT_EQ(nvmlDeviceGetMemoryInfo(whole.device, &memory), NVML_SUCCESS);
    EXPECT_EQ(memory.total, 71168 * kMiB);
    EXPECT_EQ(memory.used, 0u);
    nvmlDevice_t by_index = nullptr;
    ASSERT_EQ(nvmlDeviceGetMigDeviceHandleByIndex(h200, 0, &by_index), NVML_SUCCESS);
    EXPECT_EQ(by_index, whole.device);
    EXPECT_EQ(nvmlDeviceGetMigDeviceHandleByIndex(h200, 1, &by_index), NVML_ERROR_NOT_FOUND);
    // The whole 3g holds all its compute slices: no second CI.
    nvmlComputeInstance_t refused = nullptr;
    EXPECT_EQ(nvmlGpuInstanceCreateComputeInstance(three, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
                                                   &refused),
              NVML_ERROR_INSUFFICIENT_RESOURCES);
    // A GI with a CI cannot go.
    EXPECT_EQ(nvmlGpuInstanceDestroy(three), NVML_ERROR_IN_USE);
    nvmlReturn_t activation = NVML_SUCCESS;
    ASSERT_EQ(nvmlDeviceSetMigMode(h200, NVML_DEVICE_MIG_DISABLE, &activation), NVML_SUCCESS);
    EXPECT_EQ(activation, NVML_ERROR_IN_USE);

    // Re-created at the same place: same IDs, a new UUID; the old UUID is gone.
    ASSERT_EQ(nvmlComputeInstanceDestroy(whole.compute), NVML_SUCCESS);
    EXPECT_EQ(nvmlComputeInstanceDestroy(whole.compute), NVML_ERROR_NOT_FOUND);
    EXPECT_EQ(nvmlDeviceGetName(whole.device, name, sizeof name), NVML_ERROR_INVALID_ARGUMENT);
    MigDevice again = create_ci(three, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE);
    EXPECT_NE(again.uuid, whole.uuid);
    EXPECT_EQ(nvmlDeviceGetHandleByUUID(whole.uuid.c_str(), &by_uuid), NVML_ERROR_NOT_FOUND);
    nvmlComputeInstance_t found = nullptr;
    EXPECT_EQ(nvmlGpuInstanceGetComputeInstanceById(three, 5, &found), NVML_ERROR_NOT_FOUND);
    ASSERT_EQ(nvmlComputeInstanceDestroy(again.compute), NVML_SUCCESS);

    // Smaller CIs share the GI's memory and split its SMs.
    MigDevice one = create_ci(three, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE);
    MigDevice two = create_ci(three, NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE);
    ASSERT_EQ(nvmlDeviceGetName(one.device, name, sizeof name), NVML_SUCCESS);
    EXPECT_STREQ(name, "NVIDIA H200 MIG 1c.3g.71gb");
    ASSERT_EQ(nvmlDeviceGetAttributes_v2(two.device, &attributes), NVML_SUCCESS);
    EXPECT_EQ(attributes.multiprocessorCount, 40u);
    EXPECT_EQ(attributes.computeInstanceSliceCount, 2u);
    ASSERT_EQ(nvmlDeviceGetMemoryInfo(two.device, &memory), NVML_SUCCESS);
    EXPECT_EQ(memory.total, 71168 * kMiB);
    nvmlComputeInstance_t listed[8] = {};
    unsigned count = 8;
    ASSERT_EQ(nvmlGpuInstanceGetComputeInstances(three, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
                                                 listed, &count),
              NVML_SUCCESS);
    ASSERT_EQ(count, 1u);
    EXPECT_EQ(listed[0], one.compute);
    ASSERT_EQ(nvmlComputeInstanceDestroy(one.compute), NVML_SUCCESS);
    ASSERT_EQ(nvmlComputeInstanceDestroy(two.compute), NVML_SUCCESS);
    ASSERT_EQ(nvmlGpuInstanceDestroy(three), NVML_SUCCESS);
    ASSERT_EQ(nvmlDeviceSetMigMode(h200, NVML_DEVICE_MIG_DISABLE, &activation), NVML_SUCCESS);
    EXPECT_EQ(activation, NVML_SUCCESS);
  });
}

TEST(SimMig, ProcessesAndMemoryArePerInstance) {
  run_scenario({kMigOnH200, "615.40.01", ""}, [] {
    nvmlDevice_t h200 = gpu(0);
    MigDevice a =
        create_ci(create_gi(h200, kProfile1g, 0, 1), NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE);
    MigDevice b =
        create_ci(create_gi(h200, kProfile2g, 2, 2), NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE);
    simgpu::Simulator* sim = simgpu::Simulator::get();
    ASSERT_NE(sim, nullptr);
    // Two processes, one on each instance; the first fills most of its instance's 16 GiB.
    Tenant on_a(a.uuid,
                [] { return self()->reserve(0, 15000 * kMiB) == simgpu::AllocResult::kOk; });
    ASSERT_TRUE(on_a.ready());
    Tenant on_b(b.uuid, [] {
      // More than instance A has left is fine here: instance B has its own 32 GiB.
      return self()->reserve(0, 2000 * kMiB) == simgpu::AllocResult::kOk &&
             self()->reserve(0, 31500 * kMiB) == simgpu::AllocResult::kOutOfMemory;
    });
    ASSERT_TRUE(on_b.ready());
    Tenant too_big(a.uuid, [] {
      return self()->reserve(0, 2000 * kMiB) == simgpu::AllocResult::kOutOfMemory;
    });
    ASSERT_TRUE(too_big.ready()) << "instance A's memory should be exhausted";
    too_big.stop();

    nvmlMemory_t memory{};
    ASSERT_EQ(nvmlDeviceGetMemoryInfo(a.device, &memory), NVML_SUCCESS);
    EXPECT_EQ(memory.total, 16384 * kMiB);
    EXPECT_EQ(memory.used, 15000 * kMiB);
    ASSERT_EQ(nvmlDeviceGetMemoryInfo(b.device, &memory), NVML_SUCCESS);
    EXPECT_EQ(memory.used, 2000 * kMiB);
    ASSERT_EQ(nvmlDeviceGetMemoryInfo(h200, &memory), NVML_SUCCESS);
    EXPECT_EQ(memory.used, 17000 * kMiB);  // the parent: all instances

    nvmlProcessInfo_t processes[8] = {};
    unsigned count = 8;
    ASSERT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(a.device, &count, processes), NVML_SUCCESS);
    ASSERT_EQ(count, 1u);
    EXPECT_EQ(processes[0].pid, static_cast<unsigned>(on_a.pid()));
    EXPECT_EQ(processes[0].usedGpuMemory, 15000 * kMiB);
    EXPECT_EQ(processes[0].gpuInstanceId, 7u);
    EXPECT_EQ(processes[0].computeInstanceId, 0u);
    count = 8;
    ASSERT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(h200, &count, processes), NVML_SUCCESS);
    ASSERT_EQ(count, 2u);
    for (unsigned i = 0; i < count; ++i) {
      const bool is_b = processes[i].pid == static_cast<unsigned>(on_b.pid());
      EXPECT_EQ(processes[i].gpuInstanceId, is_b ? 4u : 7u);
      EXPECT_EQ(processes[i].computeInstanceId, 0u);
    }

    // Busy instances cannot go, nor can MIG mode.
    EXPECT_EQ(nvmlComputeInstanceDestroy(a.compute), NVML_ERROR_IN_USE);
    nvmlReturn_t activation = NVML_SUCCESS;
    ASSERT_EQ(nvmlDeviceSetMigMode(h200, NVML_DEVICE_MIG_DISABLE, &activation), NVML_SUCCESS);
    EXPECT_EQ(activation, NVML_ERROR_IN_USE);

    // What NVML does not offer on a MIG-enabled GPU or a MIG handle.
    nvmlUtilization_t utilization{};
    EXPECT_EQ(nvmlDeviceGetUtilizationRates(h200, &utilization), NVML_ERROR_NOT_SUPPORTED);
    EXPECT_EQ(nvmlDeviceGetUtilizationRates(a.device, &utilization), NVML_ERROR_NOT_SUPPORTED);
    nvmlProcessUtilizationSample_t samples[4];
    unsigned samples_count = 4;
    EXPECT_EQ(nvmlDeviceGetProcessUtilization(h200, samples, &samples_count, 0),
              NVML_ERROR_NOT_SUPPORTED);
    nvmlComputeMode_t mode{};
    EXPECT_EQ(nvmlDeviceGetComputeMode(h200, &mode), NVML_ERROR_NOT_SUPPORTED);
    EXPECT_EQ(nvmlDeviceGetComputeMode(a.device, &mode), NVML_SUCCESS);
    nvmlSetMemoryLimits_v1_t limits{"/sys/fs/cgroup", 0, 1ull << 30};
    EXPECT_EQ(nvmlDeviceSetMemoryLimits_v1(a.device, &limits), NVML_ERROR_NOT_SUPPORTED);
    unsigned long long events = 0;
    EXPECT_EQ(nvmlDeviceGetSupportedEventTypes(a.device, &events), NVML_ERROR_NOT_SUPPORTED);

    // Gone processes free the instance.
    on_a.stop();
    sim->reclaim_dead_processes();
    ASSERT_EQ(nvmlDeviceGetMemoryInfo(a.device, &memory), NVML_SUCCESS);
    EXPECT_EQ(memory.used, 0u);
    EXPECT_EQ(nvmlComputeInstanceDestroy(a.compute), NVML_SUCCESS);
  });
}

// Each MIG device has SMs of its own: a process's work there advances at wall-clock speed while
// another instance is busy; two processes on one whole GPU share it.
TEST(SimMig, InstancesRunSideBySide) {
  auto progress_beside_a_busy_neighbour = [](bool mig) {
    run_scenario({kMigOnH200, "", ""}, [&] {
      nvmlDevice_t h200 = gpu(0);
      std::string mine, theirs;
      if (mig) {
        mine = create_ci(create_gi(h200, kProfile3g, 0, 4), 2).uuid;
        theirs = create_ci(create_gi(h200, kProfile3g, 4, 4), 2).uuid;
      } else {
        nvmlReturn_t activation = NVML_SUCCESS;
        ASSERT_EQ(nvmlDeviceSetMigMode(h200, NVML_DEVICE_MIG_DISABLE, &activation), NVML_SUCCESS);
        ASSERT_EQ(activation, NVML_SUCCESS);
      }
      simgpu::Simulator* sim = simgpu::Simulator::get();
      constexpr uint64_t kLongNs = 60'000'000'000;  // never finishes during the test
      Tenant neighbour(theirs, [] { return self()->submit(0, kLongNs) > 0; });
      ASSERT_TRUE(neighbour.ready());
      if (mig) {
        const auto ref = sim->find_mig_device(mine);
        ASSERT_TRUE(ref.has_value());
        const uint64_t serial = sim->mig_state(0)
                                    .gpu_instances[ref->gpu_instance]
                                    .compute[ref->compute_instance]
                                    .serial;
        ASSERT_TRUE(sim->bind_mig_device(0, serial));
      }
      ASSERT_TRUE(sim->context_created(0));
      const uint64_t start = simgpu::now_ns();
      sim->submit(0, kLongNs);
      timespec pause{0, 300'000'000};
      nanosleep(&pause, nullptr);
      const uint64_t done = sim->done(0);
      const double share =
          static_cast<double>(done) / static_cast<double>(simgpu::now_ns() - start);
      sim->context_destroyed(0);
      EXPECT_EQ(mig ? share > 0.9 : share < 0.7, true) << "share of wall time: " << share;
    });
  };
  progress_beside_a_busy_neighbour(true);
  progress_beside_a_busy_neighbour(false);
}

TEST(SimMig, AmpereKeepsARefusedModePending) {
  run_scenario({kMigA100, "", ""}, [] {
    nvmlDevice_t a100 = gpu(0);
    simgpu::Simulator* sim = simgpu::Simulator::get();
    Tenant busy("", [] { return self()->reserve(0, 1ull << 30) == simgpu::AllocResult::kOk; });
    ASSERT_TRUE(busy.ready());
    nvmlReturn_t activation = NVML_SUCCESS;
    ASSERT_EQ(nvmlDeviceSetMigMode(a100, NVML_DEVICE_MIG_ENABLE, &activation), NVML_SUCCESS);
    EXPECT_EQ(activation, NVML_ERROR_IN_USE);
    unsigned current = 9, pending = 9;
    ASSERT_EQ(nvmlDeviceGetMigMode(a100, &current, &pending), NVML_SUCCESS);
    EXPECT_EQ(current, 0u);
    EXPECT_EQ(pending, 1u);  // "pending enable"
    busy.stop();
    sim->reclaim_dead_processes();
    enable_mig(a100);
    nvmlGpuInstanceProfileInfo_t info{};
    ASSERT_EQ(nvmlDeviceGetGpuInstanceProfileInfo(a100, NVML_GPU_INSTANCE_PROFILE_1_SLICE, &info),
              NVML_SUCCESS);
    EXPECT_EQ(info.memorySizeMB, 4864u);
    EXPECT_EQ(info.multiprocessorCount, 14u);
  });
}

TEST(SimMig, CapabilityFilesNameTheDeviceNodes) {
  char root_template[] = "/tmp/simgpu-mig-proc-XXXXXX";
  ASSERT_NE(mkdtemp(root_template), nullptr);
  const std::string root = root_template;
  run_scenario({kMigOnH200, "", root}, [&] {
    nvmlDevice_t h200 = gpu(0);
    EXPECT_NE(read_file(root + "/devices").find("\n237 nvidia-caps\n"), std::string::npos);
    nvmlGpuInstance_t instance = create_gi(h200, kProfile2g, 2, 2);  // GI 4
    MigDevice one = create_ci(instance, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE);
    MigDevice two = create_ci(instance, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE);
    const std::string gi = root + "/driver/nvidia/capabilities/gpu0/mig/gi4";
    // gi access = 3 + 135 x minor + 9 x GI; ci access = that + 1 + CI.
    EXPECT_EQ(read_file(gi + "/access"),
              "DeviceFileMinor: 39\nDeviceFileMode: 292\nDeviceFileModify: 1\n");
    EXPECT_EQ(read_file(gi + "/ci1/access").rfind("DeviceFileMinor: 41\n", 0), 0u);
    ASSERT_EQ(nvmlComputeInstanceDestroy(two.compute), NVML_SUCCESS);
    EXPECT_FALSE(std::filesystem::exists(gi + "/ci1"));
    EXPECT_TRUE(std::filesystem::exists(gi + "/ci0/access"));
    ASSERT_EQ(nvmlComputeInstanceDestroy(one.compute), NVML_SUCCESS);
    ASSERT_EQ(nvmlGpuInstanceDestroy(instance), NVML_SUCCESS);
    EXPECT_FALSE(std::filesystem::exists(gi));
  });
  std::filesystem::remove_all(root);
}

}  // namespace

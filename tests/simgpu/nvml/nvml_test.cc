// The simulated libnvidia-ml.so.1, used the way programs use NVML: this test links against the
// library and calls the C ABI. Other tenants are real processes that reserve memory and run work
// through the simulator, and NVML must see them.
//
// The simulator (and NVML's initialisation) is per process, so every scenario runs in a forked
// child with a fresh state file; failures inside it are reported by gtest in the child and turn
// its exit status non-zero.
#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/config.h"
#include "core/simulator.h"
#include "tessera/nvml_abi.h"

namespace {

constexpr char kTwoHoppers[] =
    "name=NVIDIA H200,memory=143771Mi,sms=132,cc=9.0;"
    "name=NVIDIA H100,memory=81559Mi,sms=132,cc=9.0";
constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kMsNs = 1'000'000;

uint64_t wall_clock_us() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000 + static_cast<uint64_t>(ts.tv_nsec) / 1'000;
}

struct ScenarioOptions {
  std::string devices = kTwoHoppers;
  std::string unhealthy;  // SIMGPU_UNHEALTHY
};

// Runs `body` in a child process whose simulator state is a new file of its own.
void run_scenario(const ScenarioOptions& options, const std::function<void()>& body) {
  char directory[] = "/tmp/simgpu-nvml-test-XXXXXX";
  ASSERT_NE(mkdtemp(directory), nullptr);
  const std::string state_path = std::string(directory) + "/state";
  std::fflush(nullptr);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setenv("SIMGPU_STATE", state_path.c_str(), 1);
    setenv("SIMGPU_DEVICES", options.devices.c_str(), 1);
    if (options.unhealthy.empty()) {
      unsetenv("SIMGPU_UNHEALTHY");
    } else {
      setenv("SIMGPU_UNHEALTHY", options.unhealthy.c_str(), 1);
    }
    unsetenv("SIMGPU_FAIL_ALLOC_AT");
    body();
    std::fflush(nullptr);
    _exit(::testing::Test::HasFailure() ? 1 : 0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  unlink(state_path.c_str());
  rmdir(directory);
  ASSERT_TRUE(WIFEXITED(status)) << "scenario process died, status " << status;
  const int exit_code = WEXITSTATUS(status);
  EXPECT_EQ(exit_code, 0) << "the scenario failed (its messages are above)";
}

// Another tenant: a process that sets something up through the simulator (reserves memory, runs
// work), reports a value to the test, and holds what it set up until the Worker is destroyed.
class Worker {
 public:
  // `setup` returns false on failure; `report` is passed back through report().
  explicit Worker(const std::function<bool(uint64_t& report)>& setup) {
    int ready[2];
    int release[2];
    if (pipe(ready) != 0 || pipe(release) != 0) return;
    std::fflush(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      close(ready[0]);
      close(release[1]);
      uint64_t value = 0;
      if (!setup(value)) _exit(1);
      if (write(ready[1], &value, sizeof value) != sizeof value) _exit(1);
      char byte;
      // Returns at EOF: when the Worker is destroyed, or the test process dies.
      while (read(release[0], &byte, 1) > 0) {
      }
      _exit(0);
    }
    close(ready[1]);
    close(release[0]);
    release_fd_ = release[1];
    if (pid_ > 0) ready_ = read(ready[0], &report_, sizeof report_) == sizeof report_;
    close(ready[0]);
  }

  ~Worker() { stop(); }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Ends the process (what it held is left for the simulator to reclaim) and reaps it.
  void stop() {
    if (release_fd_ >= 0) close(release_fd_);
    release_fd_ = -1;
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  bool ready() const { return ready_; }
  pid_t pid() const { return pid_; }
  uint64_t report() const { return report_; }

 private:
  pid_t pid_ = -1;
  int release_fd_ = -1;
  bool ready_ = false;
  uint64_t report_ = 0;
};

bool reserve_on(int device, uint64_t bytes) {
  simgpu::Simulator* sim = simgpu::Simulator::get();
  return sim != nullptr && sim->reserve(device, bytes) == simgpu::AllocResult::kOk;
}

nvmlDevice_t device_handle(unsigned int index) {
  nvmlDevice_t device = nullptr;
  EXPECT_EQ(nvmlDeviceGetHandleByIndex_v2(index, &device), NVML_SUCCESS);
  return device;
}

TEST(SimNvml, EnumeratesConfiguredDevicesWithTheirAttributes) {
  run_scenario({}, [] {
    ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
    unsigned int count = 0;
    ASSERT_EQ(nvmlDeviceGetCount_v2(&count), NVML_SUCCESS);
    EXPECT_EQ(count, 2u);

    char driver[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
    ASSERT_EQ(nvmlSystemGetDriverVersion(driver, sizeof driver), NVML_SUCCESS);
    EXPECT_STREQ(driver, "580.159.04");
    int cuda_version = 0;
    ASSERT_EQ(nvmlSystemGetCudaDriverVersion(&cuda_version), NVML_SUCCESS);
    EXPECT_EQ(cuda_version, 13000);
    ASSERT_EQ(nvmlSystemGetCudaDriverVersion_v2(&cuda_version), NVML_SUCCESS);
    EXPECT_EQ(NVML_CUDA_DRIVER_VERSION_MAJOR(cuda_version), 13);

    const char* expected_names[] = {"NVIDIA H200", "NVIDIA H100"};
    const unsigned long long expected_total[] = {143771ull << 20, 81559ull << 20};
    for (unsigned int i = 0; i < count; ++i) {
      SCOPED_TRACE("device " + std::to_string(i));
      nvmlDevice_t device = device_handle(i);
      unsigned int index = 99;
      ASSERT_EQ(nvmlDeviceGetIndex(device, &index), NVML_SUCCESS);
      EXPECT_EQ(index, i);

      char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
      ASSERT_EQ(nvmlDeviceGetName(device, name, sizeof name), NVML_SUCCESS);
      EXPECT_STREQ(name, expected_names[i]);

      char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
      ASSERT_EQ(nvmlDeviceGetUUID(device, uuid, sizeof uuid), NVML_SUCCESS);
      EXPECT_EQ(uuid, simgpu::device_uuid(static_cast<int>(i)));
      nvmlDevice_t by_uuid = nullptr;
      ASSERT_EQ(nvmlDeviceGetHandleByUUID(uuid, &by_uuid), NVML_SUCCESS);
      EXPECT_EQ(by_uuid, device);

      nvmlPciInfo_t pci{};
      ASSERT_EQ(nvmlDeviceGetPciInfo_v3(device, &pci), NVML_SUCCESS);
      EXPECT_EQ(pci.busId, simgpu::device_pci_bus_id(static_cast<int>(i)));
      EXPECT_EQ(pci.bus, 0x19u + 0x10u * i);
      EXPECT_EQ(pci.pciDeviceId & 0xFFFF, 0x10DEu);  // NVIDIA's vendor id
      nvmlDevice_t by_bus_id = nullptr;
      ASSERT_EQ(nvmlDeviceGetHandleByPciBusId_v2(pci.busId, &by_bus_id), NVML_SUCCESS);
      EXPECT_EQ(by_bus_id, device);
      by_bus_id = nullptr;
      ASSERT_EQ(nvmlDeviceGetHandleByPciBusId_v2(pci.busIdLegacy, &by_bus_id), NVML_SUCCESS);
      EXPECT_EQ(by_bus_id, device);

      unsigned int minor = 99;
      ASSERT_EQ(nvmlDeviceGetMinorNumber(device, &minor), NVML_SUCCESS);
      EXPECT_EQ(minor, i);
      int major_cc = 0;
      int minor_cc = -1;
      ASSERT_EQ(nvmlDeviceGetCudaComputeCapability(device, &major_cc, &minor_cc), NVML_SUCCESS);
      EXPECT_EQ(major_cc, 9);
      EXPECT_EQ(minor_cc, 0);
      nvmlDeviceArchitecture_t architecture = 0;
      ASSERT_EQ(nvmlDeviceGetArchitecture(device, &architecture), NVML_SUCCESS);
      EXPECT_EQ(architecture, static_cast<nvmlDeviceArchitecture_t>(NVML_DEVICE_ARCH_HOPPER));
      nvmlBrandType_t brand = NVML_BRAND_UNKNOWN;
      ASSERT_EQ(nvmlDeviceGetBrand(device, &brand), NVML_SUCCESS);
      EXPECT_EQ(brand, NVML_BRAND_NVIDIA);
      unsigned int cores = 0;
      ASSERT_EQ(nvmlDeviceGetNumGpuCores(device, &cores), NVML_SUCCESS);
      EXPECT_EQ(cores, 132u * 128u);

      nvmlMemory_t memory{};
      ASSERT_EQ(nvmlDeviceGetMemoryInfo(device, &memory), NVML_SUCCESS);
      EXPECT_EQ(memory.total, expected_total[i]);
    }

    // Programs built against older headers reach the legacy names.
    unsigned int legacy_count = 0;
    ASSERT_EQ(nvmlDeviceGetCount(&legacy_count), NVML_SUCCESS);
    EXPECT_EQ(legacy_count, count);
    nvmlDevice_t legacy_handle = nullptr;
    ASSERT_EQ(nvmlDeviceGetHandleByIndex(1, &legacy_handle), NVML_SUCCESS);
    EXPECT_EQ(legacy_handle, device_handle(1));
    EXPECT_EQ(nvmlShutdown(), NVML_SUCCESS);
  });
}

TEST(SimNvml, RejectsCallsBeforeInitAndBadArguments) {
  run_scenario({}, [] {
    unsigned int count = 0;
    nvmlDevice_t device = nullptr;
    EXPECT_EQ(nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED);
    EXPECT_EQ(nvmlDeviceGetHandleByIndex_v2(0, &device), NVML_ERROR_UNINITIALIZED);
    EXPECT_EQ(nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
    int cuda_version = 0;  // documented to need no init
    EXPECT_EQ(nvmlSystemGetCudaDriverVersion(&cuda_version), NVML_SUCCESS);

    // Init is reference counted: two inits need two shutdowns.
    ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
    ASSERT_EQ(nvmlInitWithFlags(NVML_INIT_FLAG_NO_GPUS), NVML_SUCCESS);
    ASSERT_EQ(nvmlShutdown(), NVML_SUCCESS);
    ASSERT_EQ(nvmlDeviceGetCount_v2(&count), NVML_SUCCESS);

    EXPECT_EQ(nvmlDeviceGetCount_v2(nullptr), NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(nvmlDeviceGetHandleByIndex_v2(0, nullptr), NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(nvmlDeviceGetHandleByIndex_v2(2, &device), NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(nvmlDeviceGetHandleByUUID(nullptr, &device), NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000", &device),
              NVML_ERROR_NOT_FOUND);
    EXPECT_EQ(nvmlDeviceGetHandleByPciBusId_v2("not a bus id", &device),
              NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(nvmlDeviceGetHandleByPciBusId_v2("00000000:99:00.0", &device), NVML_ERROR_NOT_FOUND);
    EXPECT_EQ(nvmlSystemGetDriverVersion(nullptr, 80), NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(nvmlSystemGetCudaDriverVersion(nullptr), NVML_ERROR_INVALID_ARGUMENT);

    // A pointer that is not a handle NVML gave out.
    nvmlDevice_t forged = reinterpret_cast<nvmlDevice_t>(&count);
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    EXPECT_EQ(nvmlDeviceGetName(forged, name, sizeof name), NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(nvmlDeviceGetName(nullptr, name, sizeof name), NVML_ERROR_INVALID_ARGUMENT);

    device = device_handle(0);
    EXPECT_EQ(nvmlDeviceGetName(device, nullptr, sizeof name), NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(nvmlDeviceGetName(device, name, 5), NVML_ERROR_INSUFFICIENT_SIZE);
    char driver[4];
    EXPECT_EQ(nvmlSystemGetDriverVersion(driver, sizeof driver), NVML_ERROR_INSUFFICIENT_SIZE);
    EXPECT_EQ(nvmlDeviceGetMemoryInfo(device, nullptr), NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(nvmlDeviceGetMemoryInfo_v2(device, nullptr), NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(nvmlDeviceGetUtilizationRates(device, nullptr), NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(device, nullptr, nullptr),
              NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(nvmlDeviceGetProcessUtilization(device, nullptr, nullptr, 0),
              NVML_ERROR_INVALID_ARGUMENT);
    int major_cc = 0;
    EXPECT_EQ(nvmlDeviceGetCudaComputeCapability(device, &major_cc, nullptr),
              NVML_ERROR_INVALID_ARGUMENT);

    // The v2 memory struct must say which layout the caller has.
    nvmlMemory_v2_t memory{};
    memory.version = 1;
    EXPECT_EQ(nvmlDeviceGetMemoryInfo_v2(device, &memory), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    memory.version = nvmlMemory_v2;
    EXPECT_EQ(nvmlDeviceGetMemoryInfo_v2(device, &memory), NVML_SUCCESS);

    ASSERT_EQ(nvmlShutdown(), NVML_SUCCESS);
    EXPECT_EQ(nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED);
    EXPECT_EQ(nvmlDeviceGetName(device, name, sizeof name), NVML_ERROR_UNINITIALIZED);
  });
}

TEST(SimNvml, ErrorStringNamesEveryCode) {
  const nvmlReturn_t codes[] = {
      NVML_SUCCESS,
      NVML_ERROR_UNINITIALIZED,
      NVML_ERROR_INVALID_ARGUMENT,
      NVML_ERROR_NOT_SUPPORTED,
      NVML_ERROR_NO_PERMISSION,
      NVML_ERROR_ALREADY_INITIALIZED,
      NVML_ERROR_NOT_FOUND,
      NVML_ERROR_INSUFFICIENT_SIZE,
      NVML_ERROR_INSUFFICIENT_POWER,
      NVML_ERROR_DRIVER_NOT_LOADED,
      NVML_ERROR_TIMEOUT,
      NVML_ERROR_IRQ_ISSUE,
      NVML_ERROR_LIBRARY_NOT_FOUND,
      NVML_ERROR_FUNCTION_NOT_FOUND,
      NVML_ERROR_CORRUPTED_INFOROM,
      NVML_ERROR_GPU_IS_LOST,
      NVML_ERROR_RESET_REQUIRED,
      NVML_ERROR_OPERATING_SYSTEM,
      NVML_ERROR_LIB_RM_VERSION_MISMATCH,
      NVML_ERROR_IN_USE,
      NVML_ERROR_MEMORY,
      NVML_ERROR_NO_DATA,
      NVML_ERROR_VGPU_ECC_NOT_SUPPORTED,
      NVML_ERROR_INSUFFICIENT_RESOURCES,
      NVML_ERROR_FREQ_NOT_SUPPORTED,
      NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
      NVML_ERROR_DEPRECATED,
      NVML_ERROR_NOT_READY,
      NVML_ERROR_GPU_NOT_FOUND,
      NVML_ERROR_INVALID_STATE,
      NVML_ERROR_RESET_TYPE_NOT_SUPPORTED,
  };
  const std::string unknown = nvmlErrorString(NVML_ERROR_UNKNOWN);
  EXPECT_EQ(unknown, "Unknown Error");
  EXPECT_EQ(nvmlErrorString(static_cast<nvmlReturn_t>(12345)), unknown);
  std::set<std::string> distinct;
  for (nvmlReturn_t code : codes) {
    const char* text = nvmlErrorString(code);
    ASSERT_NE(text, nullptr) << code;
    EXPECT_NE(text, unknown) << code;
    distinct.insert(text);
  }
  EXPECT_EQ(distinct.size(), std::size(codes));
}

TEST(SimNvml, MemoryInfoCountsWhatOtherProcessesReserve) {
  run_scenario({}, [] {
    ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
    nvmlDevice_t h200 = device_handle(0);
    nvmlDevice_t h100 = device_handle(1);
    nvmlMemory_t before{};
    ASSERT_EQ(nvmlDeviceGetMemoryInfo(h200, &before), NVML_SUCCESS);
    EXPECT_EQ(before.used, 0u);
    EXPECT_EQ(before.free, before.total);

    Worker tenant([](uint64_t&) { return reserve_on(0, 3 * kGiB); });
    ASSERT_TRUE(tenant.ready());
    nvmlMemory_t during{};
    ASSERT_EQ(nvmlDeviceGetMemoryInfo(h200, &during), NVML_SUCCESS);
    EXPECT_EQ(during.total, before.total);
    EXPECT_EQ(during.used, 3 * kGiB);
    EXPECT_EQ(during.free, during.total - 3 * kGiB);
    nvmlMemory_v2_t during_v2{};
    during_v2.version = nvmlMemory_v2;
    ASSERT_EQ(nvmlDeviceGetMemoryInfo_v2(h200, &during_v2), NVML_SUCCESS);
    EXPECT_EQ(during_v2.total, during.total);
    EXPECT_EQ(during_v2.reserved, 0u);
    EXPECT_EQ(during_v2.used, 3 * kGiB);
    EXPECT_EQ(during_v2.free, during.free);
    nvmlMemory_t other_device{};
    ASSERT_EQ(nvmlDeviceGetMemoryInfo(h100, &other_device), NVML_SUCCESS);
    EXPECT_EQ(other_device.used, 0u);

    // A process that ends without freeing (killed) gives its memory back, as on a real GPU.
    tenant.stop();
    nvmlMemory_t after{};
    ASSERT_EQ(nvmlDeviceGetMemoryInfo(h200, &after), NVML_SUCCESS);
    EXPECT_EQ(after.used, 0u);
    EXPECT_EQ(after.free, after.total);
  });
}

TEST(SimNvml, ListsProcessesHoldingMemoryOrAContext) {
  run_scenario({}, [] {
    ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
    nvmlDevice_t h200 = device_handle(0);
    unsigned int count = 0;
    ASSERT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(h200, &count, nullptr), NVML_SUCCESS);
    EXPECT_EQ(count, 0u) << "nobody holds anything yet";

    Worker with_memory([](uint64_t&) { return reserve_on(0, 1 * kGiB); });
    Worker with_context([](uint64_t&) {
      simgpu::Simulator* sim = simgpu::Simulator::get();
      if (sim == nullptr) return false;
      sim->context_created(0);
      return true;
    });
    ASSERT_TRUE(with_memory.ready());
    ASSERT_TRUE(with_context.ready());

    // Count query, then a buffer too small, then one large enough.
    count = 0;
    ASSERT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(h200, &count, nullptr),
              NVML_ERROR_INSUFFICIENT_SIZE);
    EXPECT_EQ(count, 2u);
    nvmlProcessInfo_t infos[4] = {};
    count = 1;
    ASSERT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(h200, &count, infos),
              NVML_ERROR_INSUFFICIENT_SIZE);
    EXPECT_EQ(count, 2u);
    count = 4;
    ASSERT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(h200, &count, infos), NVML_SUCCESS);
    ASSERT_EQ(count, 2u);
    for (unsigned int i = 0; i < count; ++i) {
      if (infos[i].pid == static_cast<unsigned int>(with_memory.pid())) {
        EXPECT_EQ(infos[i].usedGpuMemory, 1 * kGiB);
      } else {
        EXPECT_EQ(infos[i].pid, static_cast<unsigned int>(with_context.pid()));
        EXPECT_EQ(infos[i].usedGpuMemory, 0u);
      }
      EXPECT_EQ(infos[i].gpuInstanceId, 0xFFFFFFFFu) << "no MIG";
      EXPECT_EQ(infos[i].computeInstanceId, 0xFFFFFFFFu);
    }

    // The older entry points write the layouts their callers were built with.
    nvmlProcessInfo_v2_t infos_v2[2] = {};
    count = 2;
    ASSERT_EQ(nvmlDeviceGetComputeRunningProcesses_v2(h200, &count, infos_v2), NVML_SUCCESS);
    EXPECT_EQ(count, 2u);
    struct {
      nvmlProcessInfo_v1_t infos[2];
      uint64_t guard;
    } legacy = {{}, 0x5A5A5A5A5A5A5A5Aull};
    count = 2;
    ASSERT_EQ(nvmlDeviceGetComputeRunningProcesses(h200, &count, legacy.infos), NVML_SUCCESS);
    EXPECT_EQ(count, 2u);
    EXPECT_EQ(legacy.guard, 0x5A5A5A5A5A5A5A5Aull) << "v1 entries are 16 bytes";
    std::set<unsigned int> legacy_pids = {legacy.infos[0].pid, legacy.infos[1].pid};
    EXPECT_EQ(legacy_pids, (std::set<unsigned int>{static_cast<unsigned int>(with_memory.pid()),
                                                   static_cast<unsigned int>(with_context.pid())}));

    count = 4;
    ASSERT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(device_handle(1), &count, infos),
              NVML_SUCCESS);
    EXPECT_EQ(count, 0u) << "the other device is not used";
  });
}

TEST(SimNvml, UtilisationFollowsSubmittedWork) {
  run_scenario({}, [] {
    ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
    nvmlDevice_t h200 = device_handle(0);
    nvmlDevice_t h100 = device_handle(1);

    // An idle tenant with a context has no utilisation sample; a busy one runs 200 ms of work.
    Worker idle([](uint64_t&) {
      simgpu::Simulator* sim = simgpu::Simulator::get();
      if (sim == nullptr) return false;
      sim->context_created(0);
      return true;
    });
    constexpr uint64_t kWorkNs = 200 * kMsNs;
    Worker busy([](uint64_t& started_us) {
      simgpu::Simulator* sim = simgpu::Simulator::get();
      if (sim == nullptr) return false;
      sim->context_created(0);
      started_us = wall_clock_us();
      sim->wait_for(0, sim->submit(0, kWorkNs));
      return true;
    });
    ASSERT_TRUE(idle.ready());
    ASSERT_TRUE(busy.ready());
    const unsigned long long last_seen = busy.report() - 1;

    unsigned int count = 0;
    ASSERT_EQ(nvmlDeviceGetProcessUtilization(h200, nullptr, &count, last_seen),
              NVML_ERROR_INSUFFICIENT_SIZE);
    EXPECT_EQ(count, 1u);
    nvmlProcessUtilizationSample_t samples[4] = {};
    count = 4;
    ASSERT_EQ(nvmlDeviceGetProcessUtilization(h200, samples, &count, last_seen), NVML_SUCCESS);
    ASSERT_EQ(count, 1u);
    EXPECT_EQ(samples[0].pid, static_cast<unsigned int>(busy.pid()));
    // The window runs from last_seen to the sample's timestamp; the work filled 200 ms of it.
    ASSERT_GT(samples[0].timeStamp, last_seen);
    const double window_us = static_cast<double>(samples[0].timeStamp - last_seen);
    const double expected_percent = 100.0 * (kWorkNs / 1000.0) / window_us;
    // The window ends at this query, so its length (and the percent) follows how soon the query
    // came after the work: the figure is judged against the window itself, never a fixed share.
    EXPECT_NEAR(samples[0].smUtil, expected_percent, 2.0) << "window " << window_us << " us";
    EXPECT_EQ(samples[0].memUtil, 0u);

    // Nothing ran since that sample.
    count = 4;
    EXPECT_EQ(nvmlDeviceGetProcessUtilization(h200, samples, &count, samples[0].timeStamp),
              NVML_ERROR_NOT_FOUND);
    EXPECT_EQ(count, 0u);
    count = 4;
    EXPECT_EQ(nvmlDeviceGetProcessUtilization(h100, samples, &count, 0), NVML_ERROR_NOT_FOUND);

    // The device ran 200 ms of work; the last second holds all of it unless this query comes late
    // (a loaded machine), so what it still holds is computed from the query's own time.
    const auto percent_in_last_second = [&](uint64_t now_us) {
      const double work_from = static_cast<double>(busy.report());
      const double work_to = work_from + kWorkNs / 1000.0;
      const double now = static_cast<double>(now_us);
      const double held = std::min(work_to, now) - std::max(work_from, now - 1e6);
      return 100.0 * std::max(0.0, held) / 1e6;
    };
    nvmlUtilization_t rates{};
    const uint64_t asked_us = wall_clock_us();
    ASSERT_EQ(nvmlDeviceGetUtilizationRates(h200, &rates), NVML_SUCCESS);
    const uint64_t answered_us = wall_clock_us();
    EXPECT_LE(rates.gpu, percent_in_last_second(asked_us) + 2.0);
    EXPECT_GE(rates.gpu, percent_in_last_second(answered_us) - 2.0);
    ASSERT_EQ(nvmlDeviceGetUtilizationRates(h100, &rates), NVML_SUCCESS);
    EXPECT_EQ(rates.gpu, 0u);
  });
}

TEST(SimNvml, UnhealthyDeviceRaisesXidEventOnce) {
  run_scenario({}, [] {
    ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
    nvmlDevice_t h200 = device_handle(0);
    nvmlDevice_t h100 = device_handle(1);
    unsigned long long supported = 0;
    ASSERT_EQ(nvmlDeviceGetSupportedEventTypes(h100, &supported), NVML_SUCCESS);
    ASSERT_NE(supported & nvmlEventTypeXidCriticalError, 0u);

    nvmlEventSet_t set = nullptr;
    ASSERT_EQ(nvmlEventSetCreate(&set), NVML_SUCCESS);
    EXPECT_EQ(nvmlDeviceRegisterEvents(h200, nvmlEventTypeGpuRecoveryAction, set),
              NVML_ERROR_NOT_SUPPORTED);
    ASSERT_EQ(nvmlDeviceRegisterEvents(h200, nvmlEventTypeXidCriticalError, set), NVML_SUCCESS);
    ASSERT_EQ(nvmlDeviceRegisterEvents(h100, nvmlEventTypeXidCriticalError, set), NVML_SUCCESS);
    nvmlEventData_t event{};
    EXPECT_EQ(nvmlEventSetWait_v2(set, &event, 0), NVML_ERROR_TIMEOUT) << "all healthy";

    // Another process (a fault-injection tool) marks the H100 unhealthy.
    Worker injector([](uint64_t&) {
      simgpu::Simulator* sim = simgpu::Simulator::get();
      if (sim == nullptr) return false;
      sim->set_healthy(1, false);
      return true;
    });
    ASSERT_TRUE(injector.ready());
    ASSERT_EQ(nvmlEventSetWait_v2(set, &event, 5000), NVML_SUCCESS);
    EXPECT_EQ(event.device, h100);
    EXPECT_EQ(event.eventType, static_cast<unsigned long long>(nvmlEventTypeXidCriticalError));
    EXPECT_EQ(event.eventData, 79u) << "XID 79: fallen off the bus";
    EXPECT_EQ(event.gpuInstanceId, 0xFFFFFFFFu);
    EXPECT_EQ(nvmlEventSetWait_v2(set, &event, 20), NVML_ERROR_TIMEOUT) << "one fault, one event";

    // The lost device is still enumerable (health checkers must name it) but cannot be read.
    nvmlDevice_t again = nullptr;
    ASSERT_EQ(nvmlDeviceGetHandleByIndex_v2(1, &again), NVML_SUCCESS);
    EXPECT_EQ(again, h100);
    nvmlMemory_t memory{};
    EXPECT_EQ(nvmlDeviceGetMemoryInfo(h100, &memory), NVML_ERROR_GPU_IS_LOST);
    EXPECT_EQ(nvmlDeviceGetMemoryInfo(h200, &memory), NVML_SUCCESS);
    EXPECT_EQ(nvmlEventSetFree(set), NVML_SUCCESS);
  });
}

TEST(SimNvml, DeviceUnhealthyBeforeRegistrationReportsPendingEvent) {
  run_scenario({.unhealthy = "0"}, [] {
    ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
    nvmlEventSet_t set = nullptr;
    ASSERT_EQ(nvmlEventSetCreate(&set), NVML_SUCCESS);
    ASSERT_EQ(nvmlDeviceRegisterEvents(device_handle(0), nvmlEventTypeXidCriticalError, set),
              NVML_SUCCESS);
    // The legacy wait fills only the v1 fields.
    nvmlEventData_t event{};
    event.gpuInstanceId = 7;
    ASSERT_EQ(nvmlEventSetWait(set, &event, 0), NVML_SUCCESS);
    EXPECT_EQ(event.device, device_handle(0));
    EXPECT_EQ(event.eventData, 79u);
    EXPECT_EQ(event.gpuInstanceId, 7u);
    EXPECT_EQ(nvmlEventSetWait(set, &event, 0), NVML_ERROR_TIMEOUT);
    EXPECT_EQ(nvmlEventSetFree(set), NVML_SUCCESS);
  });
}

// What a program that dlopens the library finds: every NVML entry point, and nothing else.
TEST(SimNvml, LibraryExportsOnlyNvmlSymbols) {
  void* library = dlopen(SIMGPU_NVML_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(library, nullptr) << dlerror();
  for (const char* name : {"nvmlInit",
                           "nvmlInit_v2",
                           "nvmlInitWithFlags",
                           "nvmlShutdown",
                           "nvmlErrorString",
                           "nvmlSystemGetDriverVersion",
                           "nvmlSystemGetCudaDriverVersion",
                           "nvmlSystemGetCudaDriverVersion_v2",
                           "nvmlDeviceGetCount",
                           "nvmlDeviceGetCount_v2",
                           "nvmlDeviceGetHandleByIndex",
                           "nvmlDeviceGetHandleByIndex_v2",
                           "nvmlDeviceGetHandleByUUID",
                           "nvmlDeviceGetHandleByPciBusId",
                           "nvmlDeviceGetHandleByPciBusId_v2",
                           "nvmlDeviceGetIndex",
                           "nvmlDeviceGetName",
                           "nvmlDeviceGetUUID",
                           "nvmlDeviceGetMinorNumber",
                           "nvmlDeviceGetPciInfo_v3",
                           "nvmlDeviceGetBrand",
                           "nvmlDeviceGetArchitecture",
                           "nvmlDeviceGetCudaComputeCapability",
                           "nvmlDeviceGetNumGpuCores",
                           "nvmlDeviceGetMemoryInfo",
                           "nvmlDeviceGetMemoryInfo_v2",
                           "nvmlDeviceGetComputeRunningProcesses",
                           "nvmlDeviceGetComputeRunningProcesses_v2",
                           "nvmlDeviceGetComputeRunningProcesses_v3",
                           "nvmlDeviceGetProcessUtilization",
                           "nvmlDeviceGetUtilizationRates",
                           "nvmlEventSetCreate",
                           "nvmlDeviceRegisterEvents",
                           "nvmlDeviceGetSupportedEventTypes",
                           "nvmlEventSetWait",
                           "nvmlEventSetWait_v2",
                           "nvmlEventSetFree"}) {
    EXPECT_NE(dlsym(library, name), nullptr) << name;
  }
  dlclose(library);

  const std::string command = "nm -D --defined-only " SIMGPU_NVML_LIBRARY " 2>/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::vector<std::string> symbols;
  char line[512];
  while (std::fgets(line, sizeof line, pipe) != nullptr) {
    char type = 0;
    char symbol[400];
    // "<address> <type> <name>"
    if (std::sscanf(line, "%*s %c %399s", &type, symbol) == 2) symbols.emplace_back(symbol);
  }
  if (pclose(pipe) != 0 && symbols.empty()) GTEST_SKIP() << "nm is not available";
  ASSERT_FALSE(symbols.empty());
  for (const std::string& symbol : symbols) {
    EXPECT_EQ(symbol.rfind("nvml", 0), 0u) << "exported: " << symbol;
  }
}

// Every simulated GPU reaches every other for each capability; an index past the known ones (and
// a missing result) is an argument error.
TEST(SimNvml, P2PStatusIsOkBetweenSimulatedDevices) {
  run_scenario({}, [] {
    ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
    nvmlDevice_t first = device_handle(0);
    nvmlDevice_t second = device_handle(1);
    ASSERT_NE(first, second);
    for (nvmlGpuP2PCapsIndex_t index :
         {NVML_P2P_CAPS_INDEX_READ, NVML_P2P_CAPS_INDEX_WRITE, NVML_P2P_CAPS_INDEX_NVLINK,
          NVML_P2P_CAPS_INDEX_ATOMICS, NVML_P2P_CAPS_INDEX_PCI}) {
      SCOPED_TRACE("index " + std::to_string(index));
      nvmlGpuP2PStatus_t status = NVML_P2P_STATUS_UNKNOWN;
      ASSERT_EQ(nvmlDeviceGetP2PStatus(first, second, index, &status), NVML_SUCCESS);
      EXPECT_EQ(status, NVML_P2P_STATUS_OK);
      status = NVML_P2P_STATUS_UNKNOWN;
      ASSERT_EQ(nvmlDeviceGetP2PStatus(second, first, index, &status), NVML_SUCCESS);
      EXPECT_EQ(status, NVML_P2P_STATUS_OK);
    }
    nvmlGpuP2PStatus_t status = NVML_P2P_STATUS_UNKNOWN;
    EXPECT_EQ(nvmlDeviceGetP2PStatus(first, second, NVML_P2P_CAPS_INDEX_UNKNOWN, &status),
              NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(status, NVML_P2P_STATUS_UNKNOWN);  // untouched on failure
    EXPECT_EQ(
        nvmlDeviceGetP2PStatus(first, second, static_cast<nvmlGpuP2PCapsIndex_t>(-1), &status),
        NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(nvmlDeviceGetP2PStatus(first, second, NVML_P2P_CAPS_INDEX_READ, nullptr),
              NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(nvmlDeviceGetP2PStatus(first, nullptr, NVML_P2P_CAPS_INDEX_READ, &status),
              NVML_ERROR_INVALID_ARGUMENT);
    ASSERT_EQ(nvmlShutdown(), NVML_SUCCESS);
  });
}

}  // namespace

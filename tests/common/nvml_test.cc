// tessera/nvml.h against the simulated libnvidia-ml.so.1 (through LD_LIBRARY_PATH, as ctest sets
// it) and a partial stand-in (NVML_PARTIAL_LIBRARY): loading, missing entry points, the init
// session's reference, the named errors of a lost GPU, the list protocol, and several threads.
#include "tessera/nvml.h"

#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace tessera::nvml {
namespace {

constexpr char kMissingLibrary[] = "libtessera-test-no-such-nvml.so.1";

// A simulator state of this process's own (ctest runs tests in parallel, and the lost-GPU test
// faults a device), with two GPUs; set before any test starts NVML.
struct SimulatorState {
  std::string path = "/tmp/tessera-nvml-test-" + std::to_string(getpid()) + ".state";
  SimulatorState() {
    std::remove(path.c_str());  // a file an earlier process of this pid left (another layout)
    setenv("SIMGPU_STATE", path.c_str(), 1);
    setenv("SIMGPU_DEVICES",
           "name=NVIDIA H200,memory=16Gi,sms=132,cc=9.0;name=NVIDIA H100,memory=8Gi,sms=132,cc=9.0",
           1);
    unsetenv("SIMGPU_UNHEALTHY");
  }
  ~SimulatorState() { unlink(path.c_str()); }
};
const SimulatorState simulator_state;

void simgpu_ctl(const std::string& args) {
  ASSERT_EQ(std::system((std::string(SIMGPU_CTL) + " " + args).c_str()), 0) << args;
}

nvmlDevice_t fake_device(std::uintptr_t value) {
  return reinterpret_cast<nvmlDevice_t>(value);
}

TEST(NvmlLibrary, MissingLibraryIsACannotLoadError) {
  for (int attempt = 0; attempt < 2; ++attempt) {  // not remembered: tried again each time
    const Result<Session> session = Session::open(kMissingLibrary);
    ASSERT_FALSE(session.is_ok());
    EXPECT_EQ(session.status().code(), StatusCode::kUnavailable);
    EXPECT_EQ(session.status().message().rfind(std::string("cannot load ") + kMissingLibrary +
                                                   " (is the NVIDIA driver installed?): ",
                                               0),
              0u)
        << session.status().message();
  }
}

TEST(NvmlLibrary, LoadedOncePerPath) {
  const Result<const Library*> first = Library::load();
  ASSERT_TRUE(first.is_ok()) << first.status().message();
  const Result<const Library*> again = Library::load();
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(*first, *again);
  EXPECT_EQ((*first)->path(), kDefaultLibrary);
  EXPECT_TRUE((*first)->require(kEventEntryPoints).is_ok());
}

TEST(NvmlLibrary, MissingEntryPointIsNamed) {
  const std::string partial = NVML_PARTIAL_LIBRARY;
  const Result<Session> refused = Session::open(
      partial, {EntryPoint::nvmlDeviceGetCount_v2, EntryPoint::nvmlDeviceGetHandleByUUID});
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused.status().message(), partial + " has no nvmlDeviceGetHandleByUUID");

  // Not required: the library still loads, and only the call that needs it fails.
  const Result<Session> session = Session::open(partial);
  ASSERT_TRUE(session.is_ok()) << session.status().message();
  EXPECT_FALSE(session->library().has(EntryPoint::nvmlDeviceGetHandleByUUID));
  EXPECT_TRUE(session->library().has(EntryPoint::nvmlDeviceGetCount_v2));
  const Result<nvmlDevice_t> device = session->device_by_uuid("GPU-0");
  EXPECT_EQ(device.status(), failed_precondition(partial + " has no nvmlDeviceGetHandleByUUID"));
  EXPECT_EQ(session->create_event_set().status(),
            failed_precondition(partial + " has no nvmlEventSetFree"));
  EXPECT_EQ(session->library().require(kEventEntryPoints).code(), StatusCode::kFailedPrecondition);
}

TEST(NvmlLibrary, NotSupportedIsAFailedPrecondition) {
  const Result<Session> session = Session::open(NVML_PARTIAL_LIBRARY);
  ASSERT_TRUE(session.is_ok()) << session.status().message();
  EXPECT_EQ(session->device_count().status(),
            failed_precondition("nvmlDeviceGetCount_v2: Not Supported"));
}

// The codes a MIG caller acts on, and a v2-only driver's profile info read in the v3 layout.
TEST(NvmlLibrary, MigErrorsCarryTheCodesCallersActOn) {
  const std::string partial = NVML_PARTIAL_LIBRARY;
  const Result<Session> session = Session::open(partial);
  ASSERT_TRUE(session.is_ok()) << session.status().message();
  const nvmlDevice_t device = fake_device(1);

  const Result<nvmlGpuInstanceProfileInfo_v3_t> info =
      session->gpu_instance_profile_info(device, NVML_GPU_INSTANCE_PROFILE_1_SLICE);
  ASSERT_TRUE(info.is_ok()) << info.status().message();
  EXPECT_EQ(info->version, nvmlGpuInstanceProfileInfo_v3);
  EXPECT_EQ(info->id, 19u);
  EXPECT_EQ(info->instanceCount, 7u);
  EXPECT_EQ(info->multiprocessorCount, 14u);
  EXPECT_EQ(info->memorySizeMB, 4864u);
  EXPECT_STREQ(info->name, "MIG 1g.5gb");
  EXPECT_EQ(info->capabilities, unsigned{NVML_GPU_INSTANCE_PROFILE_CAPS_P2P});

  EXPECT_EQ(session->gpu_instance_profile_info(device, NVML_GPU_INSTANCE_PROFILE_2_SLICE).status(),
            invalid_argument("nvmlDeviceGetGpuInstanceProfileInfoV: Invalid Argument"));
  EXPECT_EQ(session->gpu_instance_by_id(device, 7).status(),
            not_found("nvmlDeviceGetGpuInstanceById: Not Found"));
  EXPECT_EQ(session->create_gpu_instance_with_placement(device, 19, {0, 1}).status(),
            already_exists("nvmlDeviceCreateGpuInstanceWithPlacement: Insufficient Resources"));
  EXPECT_EQ(session->set_mig_mode(device, NVML_DEVICE_MIG_ENABLE),
            unavailable("nvmlDeviceSetMigMode (activation): In use by another client"));
  EXPECT_EQ(session->mig_mode(device).status(),
            failed_precondition(partial + " has no nvmlDeviceGetMigMode"));
  EXPECT_EQ(session->mig_devices(device).status(),
            failed_precondition(partial + " has no nvmlDeviceGetMaxMigDeviceCount"));
  EXPECT_FALSE(session->library().require(kMigEntryPoints).is_ok());
}

TEST(NvmlLibrary, ProcessListsGrowUntilTheyFit) {
  const Result<Session> session = Session::open(NVML_PARTIAL_LIBRARY);
  ASSERT_TRUE(session.is_ok()) << session.status().message();
  const Result<std::vector<nvmlProcessInfo_t>> listed = session->compute_processes(fake_device(1));
  ASSERT_TRUE(listed.is_ok()) << listed.status().message();
  ASSERT_EQ(listed->size(), 100u);  // more than the first buffer holds
  EXPECT_EQ(listed->front().pid, 1000u);
  EXPECT_EQ(listed->back().pid, 1099u);
  // A list that outgrows every buffer gives up after a few tries, saying so.
  EXPECT_EQ(session->compute_processes(fake_device(2)).status(),
            unavailable("nvmlDeviceGetComputeRunningProcesses_v3: the list kept growing"));
  // No samples since the timestamp (NVML_ERROR_NOT_FOUND): none, not an error.
  const Result<std::vector<nvmlProcessUtilizationSample_t>> samples =
      session->process_utilization(fake_device(1), 1);
  ASSERT_TRUE(samples.is_ok()) << samples.status().message();
  EXPECT_TRUE(samples->empty());
}

// nvmlDeviceGetCount_v2 called directly: NVML_ERROR_UNINITIALIZED once no session holds NVML.
nvmlReturn_t raw_device_count() {
  void* library = dlopen(kDefaultLibrary, RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) return NVML_ERROR_LIBRARY_NOT_FOUND;
  const auto count =
      reinterpret_cast<decltype(&nvmlDeviceGetCount_v2)>(dlsym(library, "nvmlDeviceGetCount_v2"));
  unsigned n = 0;
  const nvmlReturn_t result = count ? count(&n) : NVML_ERROR_FUNCTION_NOT_FOUND;
  dlclose(library);  // the binding's own reference keeps it loaded
  return result;
}

TEST(NvmlSession, OwnsOneInitReference) {
  EXPECT_EQ(raw_device_count(), NVML_ERROR_UNINITIALIZED);
  {
    Result<Session> first = Session::open();
    ASSERT_TRUE(first.is_ok()) << first.status().message();
    EXPECT_EQ(raw_device_count(), NVML_SUCCESS);
    Session moved = std::move(first).value();  // the reference moves; the old owner has none
    {
      Result<Session> second = Session::open();
      ASSERT_TRUE(second.is_ok());
    }  // the second session's shutdown leaves the first's reference
    EXPECT_EQ(raw_device_count(), NVML_SUCCESS);
    Result<unsigned> count = moved.device_count();
    ASSERT_TRUE(count.is_ok()) << count.status().message();
    EXPECT_EQ(*count, 2u);
  }
  EXPECT_EQ(raw_device_count(), NVML_ERROR_UNINITIALIZED);
}

TEST(NvmlSession, DescribesTheGpus) {
  const Result<Session> session = Session::open();
  ASSERT_TRUE(session.is_ok()) << session.status().message();
  const Result<std::string> version = session->driver_version();
  ASSERT_TRUE(version.is_ok());
  EXPECT_FALSE(version->empty());
  const Result<nvmlDevice_t> device = session->device_by_index(0);
  ASSERT_TRUE(device.is_ok());
  const Result<std::string> uuid = session->uuid(*device);
  ASSERT_TRUE(uuid.is_ok());
  EXPECT_EQ(uuid->rfind("GPU-", 0), 0u);
  const Result<nvmlDevice_t> by_uuid = session->device_by_uuid(*uuid);
  ASSERT_TRUE(by_uuid.is_ok());
  EXPECT_EQ(*by_uuid, *device);
  EXPECT_EQ(session->name(*device).value(), "NVIDIA H200");
  EXPECT_EQ(session->memory(*device)->total, 16ull << 30);
  EXPECT_EQ(session->compute_capability(*device)->major, 9);
  EXPECT_TRUE(session->pci_info(*device).is_ok());
  EXPECT_TRUE(session->minor_number(*device).is_ok());
  EXPECT_TRUE(session->compute_processes(*device).is_ok());
  const Result<nvmlDevice_t> unknown = session->device_by_uuid("GPU-not-on-this-node");
  ASSERT_FALSE(unknown.is_ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(unknown.status().message().rfind("nvmlDeviceGetHandleByUUID: ", 0), 0u)
      << unknown.status().message();
}

TEST(NvmlSession, LostGpuGivesTheNamedError) {
  const Result<Session> session = Session::open();
  ASSERT_TRUE(session.is_ok()) << session.status().message();
  const Result<nvmlDevice_t> lost = session->device_by_index(0);
  const Result<nvmlDevice_t> healthy = session->device_by_index(1);
  ASSERT_TRUE(lost.is_ok() && healthy.is_ok());
  Result<EventSet> set = session->create_event_set();
  ASSERT_TRUE(set.is_ok()) << set.status().message();
  ASSERT_TRUE(session->register_events(*lost, nvmlEventTypeXidCriticalError, *set).is_ok());
  EXPECT_FALSE(session->wait_event(*set, 0).value().has_value());  // nothing yet: timeout

  simgpu_ctl("health 0 unhealthy");
  EXPECT_EQ(session->memory(*lost).status(), unavailable("nvmlDeviceGetMemoryInfo: GPU is lost"));
  EXPECT_EQ(session->utilization(*lost).status(),
            unavailable("nvmlDeviceGetUtilizationRates: GPU is lost"));
  EXPECT_EQ(session->compute_processes(*lost).status(),
            unavailable("nvmlDeviceGetComputeRunningProcesses_v3: GPU is lost"));
  EXPECT_EQ(session->process_utilization(*lost, 1).status(),
            unavailable("nvmlDeviceGetProcessUtilization: GPU is lost"));
  const Result<std::optional<nvmlEventData_t>> event = session->wait_event(*set, 0);
  ASSERT_TRUE(event.is_ok()) << event.status().message();
  ASSERT_TRUE(event->has_value());
  EXPECT_EQ((*event)->device, *lost);
  EXPECT_EQ((*event)->eventData, 79u);  // fallen off the bus
  // The other GPU still answers, and the lost one still has its identity.
  EXPECT_TRUE(session->memory(*healthy).is_ok());
  EXPECT_TRUE(session->uuid(*lost).is_ok());
  simgpu_ctl("health 0 healthy");
  EXPECT_TRUE(session->memory(*lost).is_ok());
}

// The agent's threads (device monitor, meter, checker, scrapes) each with a session of their own
// or one shared, calling at once; the library is loaded and resolved once for all of them.
TEST(NvmlSession, SeveralThreadsAtOnce) {
  constexpr int kThreads = 8;
  constexpr int kRounds = 200;
  const Result<Session> shared = Session::open();
  ASSERT_TRUE(shared.is_ok()) << shared.status().message();
  std::atomic<int> failures{0};
  std::vector<const Library*> loaded(kThreads, nullptr);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Result<Session> own = Session::open();
      if (!own.is_ok()) {
        ++failures;
        return;
      }
      loaded[t] = &own->library();
      const Session& session = t % 2 == 0 ? *own : *shared;
      for (int round = 0; round < kRounds; ++round) {
        const Result<nvmlDevice_t> device = session.device_by_index(round % 2);
        const Result<std::string> uuid = device.is_ok() ? session.uuid(*device) : device.status();
        const Result<nvmlDevice_t> again =
            uuid.is_ok() ? session.device_by_uuid(*uuid) : uuid.status();
        if (!again.is_ok() || *again != *device || !session.memory(*again).is_ok() ||
            !session.compute_processes(*again).is_ok() ||
            !session.process_utilization(*again, 1).is_ok())
          ++failures;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  for (const Library* library : loaded) EXPECT_EQ(library, &shared->library());
}

}  // namespace
}  // namespace tessera::nvml

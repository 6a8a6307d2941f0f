// CUDA on MIG devices of the simulated GPU (simgpu/cuda/driver.cc): CUDA_VISIBLE_DEVICES with MIG
// UUIDs mixed with GPUs, what a MIG device reports (name, memory, SMs, UUID), allocations that
// stop at the GPU instance's memory (shared by its compute instances), kernels that take a MIG
// device's own SMs and time, and NVML listing each process on its instance.
//
// Instances are made in NVML children through tessera/nvml.h (the binding the node agent uses),
// CUDA runs in CUDA children: no process uses two copies of the simulator.
#include <cuda.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "sim_test_support.h"
#include "tessera/nvml.h"

namespace simgpu::testing {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr char kMachine[] =
    "name=NVIDIA H200,memory=143771Mi,sms=132,cc=9.0,mig=on;"
    "name=NVIDIA H100 80GB HBM3,memory=81559Mi,sms=132,cc=9.0";

constexpr const char* kPtx = R"(
.version 8.0
.target sm_90
.address_size 64
.visible .entry busy_kernel()
{
  ret;
}
)";

// A GPU instance of `profile_id` at `start` on GPU 0 with compute instances of the given CI
// profile indices; prints each MIG UUID on a line of its own.
int make_instances(FILE* output, unsigned profile_id, unsigned start,
                   const std::vector<unsigned>& compute_profiles) {
  auto session = tessera::nvml::Session::open(SIMGPU_NVML_LIBRARY);
  if (!session.is_ok()) return 2;
  auto gpu = session->device_by_index(0);
  if (!gpu.is_ok()) return 3;
  auto placements = session->gpu_instance_possible_placements(*gpu, profile_id);
  if (!placements.is_ok() || placements->empty()) return 4;
  auto instance = session->create_gpu_instance_with_placement(*gpu, profile_id,
                                                              {start, placements->front().size});
  if (!instance.is_ok()) return 5;
  for (unsigned profile : compute_profiles) {
    auto compute = session->create_compute_instance(*instance, profile);
    if (!compute.is_ok()) return 6;
    auto info = session->compute_instance_info(*compute);
    if (!info.is_ok()) return 7;
    auto uuid = session->uuid(info->device);
    if (!uuid.is_ok()) return 8;
    std::fprintf(output, "%s\n", uuid->c_str());
  }
  return 0;
}

std::vector<std::string> create(unsigned profile_id, unsigned start,
                                const std::vector<unsigned>& compute_profiles) {
  Child child([&](FILE* out) { return make_instances(out, profile_id, start, compute_profiles); });
  std::vector<std::string> uuids;
  for (size_t i = 0; i < compute_profiles.size(); ++i) uuids.push_back(child.read_line());
  EXPECT_EQ(child.wait_exit(), 0);
  return uuids;
}

// The 16 bytes of "MIG-xxxxxxxx-..." as CUuuid carries them.
std::string uuid_text(const CUuuid& uuid) {
  std::string text = "MIG-";
  char hex[3];
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) text += '-';
    std::snprintf(hex, sizeof hex, "%02x", static_cast<unsigned char>(uuid.bytes[i]));
    text += hex;
  }
  return text;
}

class SimMigCuda : public ::testing::Test {
 protected:
  SimEnvironment environment_{kMachine};
  void SetUp() override { setenv("SIMGPU_KERNEL_US", "busy_kernel=1000", 1); }
  void TearDown() override { unsetenv("CUDA_VISIBLE_DEVICES"); }
};

TEST_F(SimMigCuda, AMigDeviceLooksLikeItsInstance) {
  const std::vector<std::string> uuids = create(19, 0, {NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE});
  ASSERT_EQ(uuids.size(), 1u);
  setenv("CUDA_VISIBLE_DEVICES", uuids[0].c_str(), 1);
  Child child([&](FILE* out) {
    if (cuInit(0) != CUDA_SUCCESS) return 2;
    int count = 0;
    if (cuDeviceGetCount(&count) != CUDA_SUCCESS || count != 1) return 3;
    char name[128];
    if (cuDeviceGetName(name, sizeof name, 0) != CUDA_SUCCESS) return 4;
    size_t total = 0;
    if (cuDeviceTotalMem(&total, 0) != CUDA_SUCCESS) return 5;
    int sms = 0;
    if (cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0) != CUDA_SUCCESS)
      return 6;
    CUuuid uuid{};
    if (cuDeviceGetUuid_v2(&uuid, 0) != CUDA_SUCCESS) return 7;
    CUuuid legacy{};
    if (cuDeviceGetUuid(&legacy, 0) != CUDA_SUCCESS) return 8;
    std::fprintf(out, "%s|%zu|%d|%s|%s\n", name, total / kMiB, sms, uuid_text(uuid).c_str(),
                 uuid_text(legacy).c_str());
    return 0;
  });
  EXPECT_EQ(child.read_line(), "NVIDIA H200 MIG 1g.18gb|16384|16|" + uuids[0] + "|" + uuids[0]);
  EXPECT_EQ(child.wait_exit(), 0);
}

TEST_F(SimMigCuda, VisibleDevicesMixMigDevicesAndGpus) {
  const std::vector<std::string> first = create(9, 4, {NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE});
  const std::vector<std::string> second = create(14, 0, {NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE});
  auto names = [](const char* visible) {
    if (visible == nullptr) {
      unsetenv("CUDA_VISIBLE_DEVICES");
    } else {
      setenv("CUDA_VISIBLE_DEVICES", visible, 1);
    }
    Child child([](FILE* out) {
      const CUresult init = cuInit(0);
      if (init != CUDA_SUCCESS) {
        std::fprintf(out, "cuInit %d\n", static_cast<int>(init));
        return 0;
      }
      int count = 0;
      if (cuDeviceGetCount(&count) != CUDA_SUCCESS) return 2;
      std::string line;
      for (int i = 0; i < count; ++i) {
        char name[128];
        if (cuDeviceGetName(name, sizeof name, i) != CUDA_SUCCESS) return 3;
        line += (i ? "," : "") + std::string(name);
      }
      std::fprintf(out, "%s\n", line.c_str());
      return 0;
    });
    const std::string line = child.read_line();
    EXPECT_EQ(child.wait_exit(), 0);
    return line;
  };
  // A MIG device, then a GPU by index.
  EXPECT_EQ(names((second[0] + ",1").c_str()), "NVIDIA H200 MIG 2g.35gb,NVIDIA H100 80GB HBM3");
  // A GPU by UUID, then a MIG device.
  EXPECT_EQ(names(("GPU-5e1a0000-7e55-4e2a-9000-000000000001," + first[0]).c_str()),
            "NVIDIA H100 80GB HBM3,NVIDIA H200 MIG 3g.71gb");
  // A MIG-enabled GPU named as a whole is no CUDA device.
  EXPECT_EQ(names("0"), "cuInit 100");  // CUDA_ERROR_NO_DEVICE
  // Unset: the MIG-enabled GPU's first MIG device (by index), then the other GPU.
  EXPECT_EQ(names(nullptr), "NVIDIA H200 MIG 3g.71gb,NVIDIA H100 80GB HBM3");
  // An unknown MIG UUID ends the list, as an unknown GPU does.
  EXPECT_EQ(names("1,MIG-00000000-0000-4000-8000-000000000000,0"), "NVIDIA H100 80GB HBM3");
}

TEST_F(SimMigCuda, AllocationsStopAtTheGpuInstancesMemory) {
  // Two compute instances of one 2g.35gb GPU instance (33024 MiB) share its memory.
  const std::vector<std::string> uuids =
      create(14, 2, {NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE});
  ASSERT_EQ(uuids.size(), 2u);
  int release[2];
  ASSERT_EQ(pipe(release), 0);
  setenv("CUDA_VISIBLE_DEVICES", uuids[0].c_str(), 1);
  Child holder([&](FILE* out) {
    close(release[1]);
    CUcontext context;
    if (init_primary(&context) != CUDA_SUCCESS) return 2;
    CUdeviceptr big = 0;
    if (cuMemAlloc(&big, 20000 * kMiB) != CUDA_SUCCESS) return 3;
    size_t free_bytes = 0, total = 0;
    if (cuMemGetInfo(&free_bytes, &total) != CUDA_SUCCESS) return 4;
    std::fprintf(out, "%zu %zu\n", free_bytes / kMiB, total / kMiB);
    char byte;
    while (read(release[0], &byte, 1) < 0) {
    }
    return 0;
  });
  close(release[0]);
  // 33024 - 20000 - 500 (its context).
  EXPECT_EQ(holder.read_line(), "12524 33024");

  setenv("CUDA_VISIBLE_DEVICES", uuids[1].c_str(), 1);
  Child neighbour([&](FILE* out) {
    CUcontext context;
    if (init_primary(&context) != CUDA_SUCCESS) return 2;
    CUdeviceptr ptr = 0;
    const CUresult too_much = cuMemAlloc(&ptr, 12100 * kMiB);  // 12524 - 500 left
    const CUresult fits = cuMemAlloc(&ptr, 11000 * kMiB);
    std::fprintf(out, "%d %d\n", static_cast<int>(too_much), static_cast<int>(fits));
    return 0;
  });
  EXPECT_EQ(neighbour.read_line(), "2 0");  // CUDA_ERROR_OUT_OF_MEMORY, then success
  EXPECT_EQ(neighbour.wait_exit(), 0);
  ASSERT_EQ(write(release[1], "x", 1), 1);
  close(release[1]);
  EXPECT_EQ(holder.wait_exit(), 0);
}

// Simulated time of `waves` waves of 1 ms on this process's device 0, from a start event to an
// end event, after waiting at `barrier` until every tenant is ready.
int time_waves(FILE* out, unsigned blocks, unsigned launches, std::atomic<int>* barrier,
               int tenants) {
  CUcontext context;
  if (init_primary(&context) != CUDA_SUCCESS) return 2;
  CUmodule module;
  CUfunction function;
  if (cuModuleLoadData(&module, kPtx) != CUDA_SUCCESS) return 3;
  if (cuModuleGetFunction(&function, module, "busy_kernel") != CUDA_SUCCESS) return 4;
  CUevent start, end;
  if (cuEventCreate(&start, CU_EVENT_DEFAULT) || cuEventCreate(&end, CU_EVENT_DEFAULT)) return 5;
  barrier->fetch_add(1);
  while (barrier->load() < tenants) usleep(100);
  if (cuEventRecord(start, nullptr) != CUDA_SUCCESS) return 6;
  for (unsigned i = 0; i < launches; ++i) {
    if (cuLaunchKernel(function, blocks, 1, 1, 256, 1, 1, 0, nullptr, nullptr, nullptr)) return 7;
  }
  if (cuEventRecord(end, nullptr) || cuEventSynchronize(end)) return 8;
  float ms = 0;
  if (cuEventElapsedTime(&ms, start, end) != CUDA_SUCCESS) return 9;
  std::fprintf(out, "%.0f\n", ms);
  return 0;
}

std::atomic<int>* shared_counter() {
  void* memory = mmap(nullptr, sizeof(std::atomic<int>), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  return new (memory) std::atomic<int>(0);
}

TEST_F(SimMigCuda, KernelsTakeTheInstancesSmsAndTimeOfTheirOwn) {
  const std::string a = create(19, 0, {NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE})[0];
  const std::string b = create(19, 1, {NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE})[0];
  // A 1g.18gb has 16 SMs: 16 x 8 blocks of 256 threads are one 1 ms wave, 132 x 8 are nine.
  setenv("CUDA_VISIBLE_DEVICES", a.c_str(), 1);
  std::atomic<int>* solo_barrier = shared_counter();
  Child solo([&](FILE* out) { return time_waves(out, 132 * 8, 10, solo_barrier, 1); });
  EXPECT_EQ(solo.read_line(), "90");
  EXPECT_EQ(solo.wait_exit(), 0);

  // Two processes on two instances, 300 waves each at once: each takes 300 ms of its own.
  std::atomic<int>* barrier = shared_counter();
  Child on_a([&](FILE* out) { return time_waves(out, 16 * 8, 300, barrier, 2); });
  setenv("CUDA_VISIBLE_DEVICES", b.c_str(), 1);
  Child on_b([&](FILE* out) { return time_waves(out, 16 * 8, 300, barrier, 2); });
  const int ms_a = std::stoi(on_a.read_line());
  const int ms_b = std::stoi(on_b.read_line());
  EXPECT_EQ(on_a.wait_exit(), 0);
  EXPECT_EQ(on_b.wait_exit(), 0);
  std::printf("FIGURE 300 x 1 ms waves on two MIG devices at once: %d ms and %d ms\n", ms_a, ms_b);
  EXPECT_LE(ms_a, 310);
  EXPECT_LE(ms_b, 310);

  // The baseline: the same two on one whole GPU (the H100, MIG off) share it.
  setenv("CUDA_VISIBLE_DEVICES", "1", 1);
  std::atomic<int>* whole_barrier = shared_counter();
  Child c([&](FILE* out) { return time_waves(out, 132 * 8, 300, whole_barrier, 2); });
  Child d([&](FILE* out) { return time_waves(out, 132 * 8, 300, whole_barrier, 2); });
  const int ms_c = std::stoi(c.read_line());
  const int ms_d = std::stoi(d.read_line());
  EXPECT_EQ(c.wait_exit(), 0);
  EXPECT_EQ(d.wait_exit(), 0);
  std::printf("FIGURE the same on one whole GPU: %d ms and %d ms\n", ms_c, ms_d);
  EXPECT_GE(std::max(ms_c, ms_d), 500);
  for (auto* counter : {solo_barrier, barrier, whole_barrier}) munmap(counter, sizeof *counter);
}

TEST_F(SimMigCuda, NvmlListsEachProcessOnItsInstance) {
  const std::string a = create(19, 0, {NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE})[0];
  const std::string b = create(15, 2, {NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE})[0];
  int release[2];
  ASSERT_EQ(pipe(release), 0);
  auto tenant = [&](const std::string& uuid, uint64_t mib) {
    setenv("CUDA_VISIBLE_DEVICES", uuid.c_str(), 1);
    return std::make_unique<Child>([&release, mib](FILE* out) {
      close(release[1]);
      CUcontext context;
      CUdeviceptr ptr = 0;
      if (init_primary(&context) != CUDA_SUCCESS || cuMemAlloc(&ptr, mib * kMiB) != CUDA_SUCCESS)
        return 2;
      std::fprintf(out, "ready\n");
      char byte;
      while (read(release[0], &byte, 1) < 0) {
      }
      return 0;
    });
  };
  auto on_a = tenant(a, 1000);
  auto on_b = tenant(b, 3000);
  close(release[0]);
  ASSERT_EQ(on_a->read_line(), "ready");
  ASSERT_EQ(on_b->read_line(), "ready");

  Child nvml([&](FILE* out) {
    auto session = tessera::nvml::Session::open(SIMGPU_NVML_LIBRARY);
    if (!session.is_ok()) return 2;
    for (const std::string& uuid : {a, b}) {
      auto device = session->device_by_uuid(uuid);
      if (!device.is_ok()) return 3;
      auto processes = session->compute_processes(*device);
      if (!processes.is_ok() || processes->size() != 1) return 4;
      auto memory = session->memory(*device);
      if (!memory.is_ok()) return 5;
      std::fprintf(out, "%u %llu %u %u %llu\n", (*processes)[0].pid,
                   (*processes)[0].usedGpuMemory / kMiB, (*processes)[0].gpuInstanceId,
                   (*processes)[0].computeInstanceId, memory->used / kMiB);
    }
    auto parent = session->device_by_index(0);
    if (!parent.is_ok()) return 6;
    auto all = session->compute_processes(*parent);
    if (!all.is_ok()) return 7;
    std::fprintf(out, "%zu\n", all->size());
    // Busy: neither its compute instance nor MIG mode can go.
    auto mig = session->device_by_uuid(a);
    auto gi = session->gpu_instance_by_id(*parent, 7);
    if (!gi.is_ok()) return 8;
    auto ci = session->compute_instance_by_id(*gi, 0);
    if (!ci.is_ok()) return 9;
    const tessera::Status destroy = session->destroy_compute_instance(*ci);
    const tessera::Status mode = session->set_mig_mode(*parent, NVML_DEVICE_MIG_DISABLE);
    std::fprintf(out, "%s|%s\n", destroy.message().c_str(), mode.message().c_str());
    return 0;
  });
  // 1g at 0 is GI 7; 1g.35gb (REV2) at 2 is GI 4; memory includes the 500 MiB contexts.
  EXPECT_EQ(nvml.read_line(), std::to_string(on_a->pid()) + " 1500 7 0 1500");
  EXPECT_EQ(nvml.read_line(), std::to_string(on_b->pid()) + " 3500 4 0 3500");
  EXPECT_EQ(nvml.read_line(), "2");
  EXPECT_EQ(nvml.read_line(),
            "nvmlComputeInstanceDestroy: In use by another client|nvmlDeviceSetMigMode "
            "(activation): In use by another client");
  EXPECT_EQ(nvml.wait_exit(), 0);
  close(release[1]);
  EXPECT_EQ(on_a->wait_exit(), 0);
  EXPECT_EQ(on_b->wait_exit(), 0);
}

// tessera/nvml.h's MIG calls end to end, as the node agent makes them (NVIDIA's DRA driver's
// order: mode, profile by index, placements, GI at a placement, CI, MIG device by its UUID).
TEST_F(SimMigCuda, SessionCallsWalkTheMigApi) {
  Child child([](FILE* out) {
    using tessera::StatusCode;
    auto session = tessera::nvml::Session::open(SIMGPU_NVML_LIBRARY);
    if (!session.is_ok() || !session->library().require(tessera::nvml::kMigEntryPoints).is_ok())
      return 2;
    auto gpu = session->device_by_index(0);
    auto other = session->device_by_index(1);
    if (!gpu.is_ok() || !other.is_ok()) return 3;
    auto mode = session->mig_mode(*gpu);
    if (!mode.is_ok() || mode->current != NVML_DEVICE_MIG_ENABLE) return 4;
    if (session->mig_mode(*other).status().code() != StatusCode::kFailedPrecondition) return 5;
    auto profile = session->gpu_instance_profile_info(*gpu, NVML_GPU_INSTANCE_PROFILE_2_SLICE);
    if (!profile.is_ok() || profile->id != 14 || std::string(profile->name) != "MIG 2g.35gb")
      return 6;
    if (session->gpu_instance_profile_info(*gpu, NVML_GPU_INSTANCE_PROFILE_COUNT).status().code() !=
        StatusCode::kInvalidArgument)
      return 7;
    auto placements = session->gpu_instance_possible_placements(*gpu, profile->id);
    if (!placements.is_ok() || placements->size() != 3) return 8;
    auto instance =
        session->create_gpu_instance_with_placement(*gpu, profile->id, (*placements)[1]);
    if (!instance.is_ok()) return 9;
    if (session->create_gpu_instance_with_placement(*gpu, profile->id, (*placements)[1])
            .status()
            .code() != StatusCode::kAlreadyExists)
      return 10;
    auto listed = session->gpu_instances(*gpu, profile->id);
    if (!listed.is_ok() || listed->size() != 1 || (*listed)[0] != *instance) return 11;
    auto info = session->gpu_instance_info(*instance);
    if (!info.is_ok() || info->id != 4 || info->placement.start != 2) return 12;
    auto ci_profile =
        session->compute_instance_profile_info(*instance, NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE);
    if (!ci_profile.is_ok() || ci_profile->multiprocessorCount != 32) return 13;
    auto compute = session->create_compute_instance(*instance, ci_profile->id);
    if (!compute.is_ok()) return 14;
    auto computes = session->compute_instances(*instance, ci_profile->id);
    if (!computes.is_ok() || computes->size() != 1) return 15;
    auto ci_info = session->compute_instance_info(*compute);
    if (!ci_info.is_ok()) return 16;
    auto devices = session->mig_devices(*gpu);
    if (!devices.is_ok() || devices->size() != 1 || (*devices)[0] != ci_info->device) return 17;
    auto max = session->max_mig_device_count(*gpu);
    if (!max.is_ok() || *max != 7) return 18;
    if (session->mig_device_by_index(*gpu, 3).status().code() != StatusCode::kNotFound) return 19;
    auto is_mig = session->is_mig_device(ci_info->device);
    if (!is_mig.is_ok() || !*is_mig) return 20;
    auto parent = session->device_from_mig_handle(ci_info->device);
    if (!parent.is_ok() || *parent != *gpu) return 21;
    auto gi_id = session->gpu_instance_id(ci_info->device);
    auto ci_id = session->compute_instance_id(ci_info->device);
    if (!gi_id.is_ok() || *gi_id != 4 || !ci_id.is_ok() || *ci_id != 0) return 22;
    auto attributes = session->attributes(ci_info->device);
    if (!attributes.is_ok() || attributes->memorySizeMB != 33024) return 23;
    if (session->attributes(*gpu).status().code() != StatusCode::kFailedPrecondition) return 24;
    auto by_id = session->gpu_instance_by_id(*gpu, 4);
    if (!by_id.is_ok()) return 25;
    auto ci_by_id = session->compute_instance_by_id(*by_id, 0);
    if (!ci_by_id.is_ok()) return 26;
    if (session->destroy_gpu_instance(*by_id).code() != StatusCode::kUnavailable) return 27;
    if (!session->destroy_compute_instance(*ci_by_id).is_ok()) return 28;
    if (!session->destroy_gpu_instance(*by_id).is_ok()) return 29;
    if (session->gpu_instance_by_id(*gpu, 4).status().code() != StatusCode::kNotFound) return 30;
    if (!session->set_mig_mode(*gpu, NVML_DEVICE_MIG_DISABLE).is_ok()) return 31;
    if (session->create_gpu_instance(*gpu, 19).status().code() != StatusCode::kFailedPrecondition)
      return 32;
    std::fprintf(out, "done\n");
    return 0;
  });
  EXPECT_EQ(child.read_line(), "done");
  EXPECT_EQ(child.wait_exit(), 0) << "the exit code names the step that failed";
}

// simgpu-ctl's MIG commands (through NVML, as nvidia-smi mig works): what tests and people use.
std::string ctl(const std::string& arguments, int& exit_code) {
  std::string output;
  FILE* pipe = popen((std::string(SIMGPU_CTL) + " " + arguments + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return output;
  char buffer[512];
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) output += buffer;
  const int status = pclose(pipe);
  exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return output;
}

TEST_F(SimMigCuda, CtlManagesInstancesThroughNvml) {
  int code = -1;
  std::string out = ctl("mig create 0 3g.71gb --placement 4", code);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("\"name\": \"NVIDIA H200 MIG 3g.71gb\""), std::string::npos) << out;
  EXPECT_NE(out.find("\"gpu_instance\": 2"), std::string::npos) << out;
  out = ctl("mig create 0 2g.35gb --placement 4", code);
  EXPECT_EQ(code, 1);
  EXPECT_EQ(out,
            "simgpu-ctl: nvmlDeviceCreateGpuInstanceWithPlacement: Ran out of critical resources, "
            "other than memory\n");
  out = ctl("mig create 0 5g.99gb", code);
  EXPECT_EQ(code, 1);
  EXPECT_NE(out.find("profile '5g.99gb' is not one of 1g.18gb (19), "), std::string::npos) << out;
  out = ctl("mig list 0", code);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("\"profile\": \"3g.71gb\""), std::string::npos) << out;
  EXPECT_NE(out.find("\"uuid\": \"MIG-"), std::string::npos) << out;
  out = ctl("mig mode 0 off", code);
  EXPECT_EQ(code, 1);
  EXPECT_EQ(out, "simgpu-ctl: nvmlDeviceSetMigMode (activation): In use by another client\n");
  out = ctl("mig destroy 0 2", code);
  EXPECT_EQ(code, 0) << out;
  out = ctl("mig destroy 0 2", code);
  EXPECT_EQ(out, "simgpu-ctl: nvmlDeviceGetGpuInstanceById: Not Found\n");
  out = ctl("mig mode 0 off", code);
  EXPECT_EQ(code, 0) << out;
  out = ctl("mig list 1", code);
  EXPECT_NE(out.find("\"mig\": \"unsupported\""), std::string::npos) << out;
}

}  // namespace
}  // namespace simgpu::testing

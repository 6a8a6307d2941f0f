// The simulated R615 driver's per-cgroup memory partitions (simgpu/nvml/memory_limits.cc, the wall
// in Simulator::reserve): limits set through tessera/nvml.h, the binding the node agent uses, and
// allocations made by processes moved into cgroups of a cgroup2 hierarchy this test mounts.
//
// Every scenario runs in forked children: NVML children use only the simulated libnvidia-ml.so.1
// (dlopened by the binding), CUDA children only the simulated libcuda.so.1, so no process uses two
// copies of the simulator. Mounting cgroup2 needs root (CAP_SYS_ADMIN); without it the tests skip.
#include <cuda.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "sim_test_support.h"
#include "tessera/nvml.h"
#include "tessera/unique_fd.h"

namespace simgpu::testing {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kDevice = 16 * kGiB;
constexpr uint64_t kOverhead = 500 * kMiB;
constexpr char kR615[] = "615.40.01";

// Child exit codes: 0 ok, else a number naming the step that failed.
int run(const std::function<int(FILE*)>& body) {
  Child child(body);
  return child.wait_exit();
}

// Moves this process into the cgroup `directory` (a cgroup2 directory), as a container runtime
// moves a container's first process.
bool join_cgroup(const std::string& directory) {
  const std::string procs = directory + "/cgroup.procs";
  tessera::UniqueFd fd(open(procs.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return false;
  const std::string pid = std::to_string(getpid());
  return write(fd.get(), pid.data(), pid.size()) == static_cast<ssize_t>(pid.size());
}

// An NVML session on the simulated library and its first device, in the calling (child) process.
struct Nvml {
  tessera::nvml::Session session;
  nvmlDevice_t device;
};

std::optional<Nvml> open_nvml() {
  auto session = tessera::nvml::Session::open(SIMGPU_NVML_LIBRARY);
  if (!session.is_ok()) return std::nullopt;
  auto device = session->device_by_index(0);
  if (!device.is_ok()) return std::nullopt;
  return Nvml{std::move(*session), *device};
}

// A process that holds device memory in a cgroup until released: it joins `cgroup` (when not
// empty), makes its primary context current, allocates `bytes` (if any), says "ready <result>" and
// waits for a byte on the release pipe (not for its end: a Holder forked later holds a copy).
class Holder {
 public:
  Holder(const std::string& cgroup, uint64_t bytes) {
    if (pipe(release_) != 0) std::abort();
    const int read_end = release_[0];
    const int write_end = release_[1];
    child_ = std::make_unique<Child>([=](FILE* output) {
      close(write_end);
      if (!cgroup.empty() && !join_cgroup(cgroup)) return 90;
      CUcontext context;
      CUresult result = init_primary(&context);
      CUdeviceptr ptr = 0;
      if (result == CUDA_SUCCESS && bytes > 0) result = cuMemAlloc(&ptr, bytes);
      std::fprintf(output, "ready %d\n", static_cast<int>(result));
      char byte;
      while (read(read_end, &byte, 1) < 0 && errno == EINTR) {
      }
      return 0;
    });
    close(read_end);
    const std::string line = child_->read_line();
    result_ = line.starts_with("ready ") ? std::stoi(line.substr(6)) : -1;
  }
  ~Holder() { release(); }

  int result() const { return result_; }
  pid_t pid() const { return child_->pid(); }
  int release() {
    if (release_[1] >= 0) {
      if (write(release_[1], "x", 1) != 1) child_->kill_now();
      close(release_[1]);
    }
    release_[1] = -1;
    return child_ ? child_->wait_exit() : -1;
  }

 private:
  int release_[2] = {-1, -1};
  int result_ = -1;
  std::unique_ptr<Child> child_;
};

// A cgroup2 hierarchy mounted at a fresh directory for the test, with a cgroup of the test's own
// under it; SIMGPU_DRIVER_VERSION=615.40.01 and a fresh simulated machine (16 GiB, 500 MiB per
// context).
class SimMemoryPartitions : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "mounting cgroup2 needs root; running as uid " << geteuid();
    char directory[] = "/tmp/simgpu-cgroup2-XXXXXX";
    ASSERT_NE(mkdtemp(directory), nullptr) << std::strerror(errno);
    mount_point_ = directory;
    if (mount("none", mount_point_.c_str(), "cgroup2", 0, nullptr) != 0) {
      const int error = errno;
      rmdir(mount_point_.c_str());
      mount_point_.clear();
      GTEST_SKIP() << "cannot mount cgroup2 at " << directory << " (mount -t cgroup2 needs "
                   << "CAP_SYS_ADMIN in the initial namespaces): " << std::strerror(error);
    }
    mounted_ = true;
    base_ = make_cgroup("simgpu-partitions-" + std::to_string(getpid()) + "-" +
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    setenv("SIMGPU_DRIVER_VERSION", kR615, 1);
  }

  void TearDown() override {
    unsetenv("SIMGPU_DRIVER_VERSION");
    for (auto it = cgroups_.rbegin(); it != cgroups_.rend(); ++it) {
      EXPECT_EQ(rmdir(it->c_str()), 0) << *it << ": " << std::strerror(errno);
    }
    if (mounted_) umount2(mount_point_.c_str(), MNT_DETACH);
    if (!mount_point_.empty()) rmdir(mount_point_.c_str());
  }

  // Creates `relative` under the mount (under the test's cgroup when `relative` does not start
  // with the base) and returns its full path.
  std::string make_cgroup(const std::string& name) {
    const std::string path = (base_.empty() ? mount_point_ : base_) + "/" + name;
    EXPECT_EQ(mkdir(path.c_str(), 0755), 0) << path << ": " << std::strerror(errno);
    cgroups_.push_back(path);
    return path;
  }

  SimEnvironment env_;
  std::string mount_point_;
  bool mounted_ = false;
  std::string base_;
  std::vector<std::string> cgroups_;  // created, in order
};

// An NVML child's step: returns 0 or the failing step's number, printing why.
int set_limits(const std::string& cgroup, uint64_t soft, uint64_t hard) {
  return run([&](FILE*) {
    auto nvml = open_nvml();
    if (!nvml) return 1;
    const tessera::Status status =
        nvml->session.set_memory_limits(nvml->device, cgroup, soft, hard);
    if (!status.is_ok()) std::fprintf(stderr, "set: %s\n", status.message().c_str());
    return status.is_ok() ? 0 : 2;
  });
}

// The getter as an NVML child sees it, as one line: "ok <soft> <hard> <used>" or "error <code>".
std::string get_limits(const std::string& cgroup) {
  Child child([&](FILE* output) {
    auto nvml = open_nvml();
    if (!nvml) return 1;
    const auto limits = nvml->session.memory_limits(nvml->device, cgroup);
    if (limits.is_ok()) {
      std::fprintf(output, "ok %llu %llu %llu\n", limits->soft_limit, limits->hard_limit,
                   limits->current_used);
    } else {
      std::fprintf(output, "error %s\n",
                   std::string(tessera::status_code_name(limits.status().code())).c_str());
    }
    return 0;
  });
  std::string line = child.read_line();
  EXPECT_EQ(child.wait_exit(), 0);
  return line;
}

std::string limits_line(uint64_t soft, uint64_t hard, uint64_t used) {
  return "ok " + std::to_string(soft) + " " + std::to_string(hard) + " " + std::to_string(used);
}

TEST_F(SimMemoryPartitions, HardLimitRefusesAllocationsAndMemGetInfoShowsIt) {
  const std::string tenant = make_cgroup("tenant");
  ASSERT_EQ(set_limits(tenant, 1 * kGiB, 2 * kGiB), 0);
  EXPECT_EQ(get_limits(tenant), limits_line(1 * kGiB, 2 * kGiB, 0));

  // Inside: the context (500 MiB) and 1 GiB fit under 2 GiB, a second GiB does not; exactly the
  // rest does, and then not one more byte.
  EXPECT_EQ(run([&](FILE*) {
              if (!join_cgroup(tenant)) return 90;
              CUcontext context;
              if (CUresult r = init_primary(&context); r) return 1;
              size_t free_bytes = 0, total = 0;
              if (cuMemGetInfo(&free_bytes, &total) != CUDA_SUCCESS) return 2;
              if (total != 2 * kGiB) return 3;
              if (free_bytes != 2 * kGiB - kOverhead) return 4;
              // The legacy 32-bit entry point (cuda.h maps the name to cuMemGetInfo_v2).
              using MemGetInfoV1 = CUresult (*)(unsigned int*, unsigned int*);
              const auto v1 = reinterpret_cast<MemGetInfoV1>(dlsym(RTLD_DEFAULT, "cuMemGetInfo"));
              unsigned int free32 = 0, total32 = 0;
              if (v1 == nullptr || v1(&free32, &total32) != CUDA_SUCCESS) return 5;
              if (total32 != 2 * kGiB || free32 != 2 * kGiB - kOverhead) return 6;
              CUdeviceptr first = 0, second = 0, rest = 0, extra = 0;
              if (cuMemAlloc(&first, kGiB) != CUDA_SUCCESS) return 7;
              if (cuMemAlloc(&second, kGiB) != CUDA_ERROR_OUT_OF_MEMORY) return 8;
              if (cuMemAlloc(&rest, kGiB - kOverhead) != CUDA_SUCCESS) return 9;
              if (cuMemAlloc(&extra, 512) != CUDA_ERROR_OUT_OF_MEMORY) return 10;
              // The other allocation paths meet the same wall.
              if (cuMemAllocAsync(&extra, 2 * kMiB, nullptr) != CUDA_ERROR_OUT_OF_MEMORY) return 12;
              CUmemGenericAllocationHandle handle = 0;
              CUmemAllocationProp prop{};
              prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
              prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
              prop.location.id = 0;
              if (cuMemCreate(&handle, 2 * kMiB, &prop, 0) != CUDA_ERROR_OUT_OF_MEMORY) return 13;
              if (cuMemGetInfo(&free_bytes, &total) != CUDA_SUCCESS) return 14;
              if (total != 2 * kGiB || free_bytes != 0) return 15;
              if (cuMemFree(first) != CUDA_SUCCESS) return 16;
              if (cuMemGetInfo(&free_bytes, &total) != CUDA_SUCCESS || free_bytes != kGiB)
                return 17;
              return 0;
            }),
            0);

  // Outside the cgroup the whole device is there: the wall is the cgroup's, not the machine's.
  EXPECT_EQ(run([](FILE*) {
              CUcontext context;
              if (CUresult r = init_primary(&context); r) return 1;
              size_t free_bytes = 0, total = 0;
              if (cuMemGetInfo(&free_bytes, &total) != CUDA_SUCCESS || total != kDevice) return 2;
              CUdeviceptr ptr = 0;
              return cuMemAlloc(&ptr, 4 * kGiB) == CUDA_SUCCESS ? 0 : 3;
            }),
            0);
}

TEST_F(SimMemoryPartitions, CurrentUsedCountsContextsAndNvmlInsideSeesThePartition) {
  const std::string tenant = make_cgroup("tenant");
  ASSERT_EQ(set_limits(tenant, 2 * kGiB, 3 * kGiB), 0);
  Holder inside(tenant, kGiB);
  ASSERT_EQ(inside.result(), CUDA_SUCCESS);
  Holder outside("", 4 * kGiB);  // in the root cgroup: not the tenant's
  ASSERT_EQ(outside.result(), CUDA_SUCCESS);

  EXPECT_EQ(get_limits(tenant), limits_line(2 * kGiB, 3 * kGiB, kOverhead + kGiB));

  // nvmlDeviceGetMemoryInfo_v2 called from inside the partition reports the partition.
  EXPECT_EQ(run([&](FILE*) {
              if (!join_cgroup(tenant)) return 90;
              void* library = dlopen(SIMGPU_NVML_LIBRARY, RTLD_NOW | RTLD_LOCAL);
              if (library == nullptr) return 1;
              auto init = reinterpret_cast<decltype(&nvmlInit_v2)>(dlsym(library, "nvmlInit_v2"));
              auto handle = reinterpret_cast<decltype(&nvmlDeviceGetHandleByIndex_v2)>(
                  dlsym(library, "nvmlDeviceGetHandleByIndex_v2"));
              auto info = reinterpret_cast<decltype(&nvmlDeviceGetMemoryInfo_v2)>(
                  dlsym(library, "nvmlDeviceGetMemoryInfo_v2"));
              if (!init || !handle || !info || init() != NVML_SUCCESS) return 2;
              nvmlDevice_t device = nullptr;
              if (handle(0, &device) != NVML_SUCCESS) return 3;
              nvmlMemory_v2_t memory{};
              memory.version = nvmlMemory_v2;
              if (info(device, &memory) != NVML_SUCCESS) return 4;
              if (memory.total != 3 * kGiB) return 5;
              if (memory.used != kOverhead + kGiB) return 6;
              if (memory.free != 3 * kGiB - kOverhead - kGiB) return 7;
              return 0;
            }),
            0);
  EXPECT_EQ(inside.release(), 0);
  // A process that ends gives its memory back to the partition.
  EXPECT_EQ(get_limits(tenant), limits_line(2 * kGiB, 3 * kGiB, 0));
}

TEST_F(SimMemoryPartitions, ContextCreationAloneCanCrossTheWall) {
  const std::string tenant = make_cgroup("tenant");
  ASSERT_EQ(set_limits(tenant, 0, 256 * kMiB), 0);
  EXPECT_EQ(run([&](FILE*) {
              if (!join_cgroup(tenant)) return 90;
              if (cuInit(0) != CUDA_SUCCESS) return 1;
              CUcontext context = nullptr;
              if (cuDevicePrimaryCtxRetain(&context, 0) != CUDA_ERROR_OUT_OF_MEMORY) return 2;
              CUctxCreateParams params{};
              if (cuCtxCreate_v4(&context, &params, 0, 0) != CUDA_ERROR_OUT_OF_MEMORY) return 3;
              return 0;
            }),
            0);
  // Raised above the context's size, the same process gets its context.
  ASSERT_EQ(set_limits(tenant, 0, kOverhead + 2 * kMiB), 0);
  EXPECT_EQ(run([&](FILE*) {
              if (!join_cgroup(tenant)) return 90;
              CUcontext context;
              if (init_primary(&context) != CUDA_SUCCESS) return 1;
              CUdeviceptr ptr = 0;
              if (cuMemAlloc(&ptr, 2 * kMiB) != CUDA_SUCCESS) return 2;
              return cuMemAlloc(&ptr, 512) == CUDA_ERROR_OUT_OF_MEMORY ? 0 : 3;
            }),
            0);
}

TEST_F(SimMemoryPartitions, NearestLimitedAncestorGovernsAndLimitsDoNotNest) {
  const std::string team = make_cgroup("team");
  const std::string job = make_cgroup("team/job");      // no limit: governed by team
  const std::string small = make_cgroup("team/small");  // a limit of its own
  const std::string other = make_cgroup("other");       // nobody above it has one
  ASSERT_EQ(set_limits(team, kGiB, 3 * kGiB), 0);
  ASSERT_EQ(set_limits(small, 0, kGiB), 0);

  Holder in_job(job, 2 * kGiB);  // 500 MiB + 2 GiB under team's 3 GiB
  ASSERT_EQ(in_job.result(), CUDA_SUCCESS);
  // A second process of the team meets the same wall: 3072 MiB less two contexts and 2 GiB
  // leaves it 24 MiB.
  EXPECT_EQ(run([&](FILE*) {
              if (!join_cgroup(job)) return 90;
              CUcontext context;
              if (init_primary(&context) != CUDA_SUCCESS) return 1;
              size_t free_bytes = 0, total = 0;
              if (cuMemGetInfo(&free_bytes, &total) != CUDA_SUCCESS) return 2;
              if (total != 3 * kGiB || free_bytes != 24 * kMiB) return 3;
              CUdeviceptr ptr = 0;
              if (cuMemAlloc(&ptr, 26 * kMiB) != CUDA_ERROR_OUT_OF_MEMORY) return 4;
              if (cuMemAlloc(&ptr, 24 * kMiB) != CUDA_SUCCESS) return 5;
              return cuMemAlloc(&ptr, 512) == CUDA_ERROR_OUT_OF_MEMORY ? 0 : 6;
            }),
            0);
  // small's own 1 GiB governs its processes, not team's (and team's usage does not stop them).
  Holder in_small(small, kGiB - kOverhead);
  EXPECT_EQ(in_small.result(), CUDA_SUCCESS);

  EXPECT_EQ(get_limits(team), limits_line(kGiB, 3 * kGiB, kOverhead + 2 * kGiB));
  EXPECT_EQ(get_limits(small), limits_line(0, kGiB, kGiB));
  // A cgroup without a limit of its own: NOT_FOUND when an ancestor has one; on the misc backend
  // NOT_SUPPORTED (a failed precondition) when none has.
  EXPECT_EQ(get_limits(job), "error NOT_FOUND");
  EXPECT_EQ(get_limits(other), "error FAILED_PRECONDITION");
}

TEST_F(SimMemoryPartitions, SoftZeroHardMaxClears) {
  const std::string tenant = make_cgroup("tenant");
  ASSERT_EQ(set_limits(tenant, 0, kGiB), 0);
  auto allocate_two_gib = [&](FILE*) {
    if (!join_cgroup(tenant)) return 90;
    CUcontext context;
    if (init_primary(&context) != CUDA_SUCCESS) return 1;
    CUdeviceptr ptr = 0;
    return static_cast<int>(cuMemAlloc(&ptr, 2 * kGiB));
  };
  EXPECT_EQ(run(allocate_two_gib), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(run([&](FILE*) {
              auto nvml = open_nvml();
              if (!nvml) return 1;
              return nvml->session.clear_memory_limits(nvml->device, tenant).is_ok() ? 0 : 2;
            }),
            0);
  EXPECT_EQ(get_limits(tenant), "error FAILED_PRECONDITION");
  EXPECT_EQ(run(allocate_two_gib), CUDA_SUCCESS);
}

TEST_F(SimMemoryPartitions, OnlyRootSetsAndAnyoneReads) {
  const std::string tenant = make_cgroup("tenant");
  ASSERT_EQ(set_limits(tenant, kGiB, 2 * kGiB), 0);
  // The state file is root's (0600): the child maps it before it drops its privileges.
  EXPECT_EQ(run([&](FILE*) {
              auto nvml = open_nvml();
              if (!nvml) return 1;
              if (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0)
                return 2;
              const tessera::Status refused =
                  nvml->session.set_memory_limits(nvml->device, tenant, 0, 8 * kGiB);
              if (refused.code() != tessera::StatusCode::kUnavailable ||
                  refused.message().find("Insufficient Permissions") == std::string::npos) {
                std::fprintf(stderr, "non-root set: %s\n", refused.message().c_str());
                return 3;
              }
              const auto limits = nvml->session.memory_limits(nvml->device, tenant);
              if (!limits.is_ok() || limits->hard_limit != 2 * kGiB) return 4;
              return 0;
            }),
            0);
  EXPECT_EQ(get_limits(tenant), limits_line(kGiB, 2 * kGiB, 0));
}

TEST_F(SimMemoryPartitions, CgroupIsTheSameWhereverTheHierarchyIsMounted) {
  const std::string tenant = make_cgroup("tenant");
  ASSERT_EQ(set_limits(tenant, 0, kGiB), 0);
  char second[] = "/tmp/simgpu-cgroup2-again-XXXXXX";
  ASSERT_NE(mkdtemp(second), nullptr);
  ASSERT_EQ(mount("none", second, "cgroup2", 0, nullptr), 0) << std::strerror(errno);
  const std::string relative = tenant.substr(mount_point_.size());
  EXPECT_EQ(get_limits(std::string(second) + relative), limits_line(0, kGiB, 0));
  // A process that joins through the second mount meets the limit set through the first.
  EXPECT_EQ(run([&](FILE*) {
              if (!join_cgroup(std::string(second) + relative)) return 90;
              CUcontext context;
              if (init_primary(&context) != CUDA_SUCCESS) return 1;
              CUdeviceptr ptr = 0;
              return static_cast<int>(cuMemAlloc(&ptr, kGiB));
            }),
            CUDA_ERROR_OUT_OF_MEMORY);
  umount2(second, MNT_DETACH);
  rmdir(second);
}

TEST_F(SimMemoryPartitions, BadNamespacesAndLimitsAreInvalidArguments) {
  const std::string tenant = make_cgroup("tenant");
  EXPECT_EQ(run([&](FILE*) {
              auto nvml = open_nvml();
              if (!nvml) return 1;
              auto code = [&](const std::string& cgroup, uint64_t soft, uint64_t hard) {
                const tessera::Status status =
                    nvml->session.set_memory_limits(nvml->device, cgroup, soft, hard);
                return status.is_ok() ? std::string("ok") : status.message();
              };
              const std::string invalid = "nvmlDeviceSetMemoryLimits_v1: Invalid Argument";
              if (code("/tmp", 0, kGiB) != invalid) return 2;  // not under a cgroup2 mount
              if (code(tenant + "/absent", 0, kGiB) != invalid) return 3;
              if (code(mount_point_, 0, kGiB) != invalid) return 4;   // the root cgroup
              if (code(tenant, 2 * kGiB, kGiB) != invalid) return 5;  // soft above hard
              if (code(tenant, 0, 0) != invalid) return 6;
              // "max": limits above the device are held to its capacity.
              if (code(tenant + "/../tenant", kDevice * 2, UINT64_MAX - 1) != "ok") return 7;
              const auto limits = nvml->session.memory_limits(nvml->device, tenant);
              if (!limits.is_ok() || limits->soft_limit != kDevice || limits->hard_limit != kDevice)
                return 8;
              return 0;
            }),
            0);
}

TEST_F(SimMemoryPartitions, SimgpuCtlStatusListsThePartitions) {
  const std::string tenant = make_cgroup("tenant");
  ASSERT_EQ(set_limits(tenant, kGiB, 2 * kGiB), 0);
  Holder inside(tenant, kGiB);
  ASSERT_EQ(inside.result(), CUDA_SUCCESS);
  FILE* pipe = popen(SIMGPU_CTL " status", "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, n);
  ASSERT_EQ(pclose(pipe), 0);
  const std::string cgroup = tenant.substr(mount_point_.size());
  EXPECT_NE(output.find("\"driver_version\": \"615.40.01\""), std::string::npos) << output;
  EXPECT_NE(output.find("\"cgroup\": \"" + cgroup + "\""), std::string::npos) << output;
  EXPECT_NE(output.find("\"hard_limit_bytes\": " + std::to_string(2 * kGiB)), std::string::npos)
      << output;
  EXPECT_NE(output.find("\"used_bytes\": " + std::to_string(kOverhead + kGiB)), std::string::npos)
      << output;
}

// Without SIMGPU_DRIVER_VERSION the simulated driver is today's (580, CUDA 13.0): the entry points
// exist in the library (one library cannot drop symbols per configuration) but answer
// NVML_ERROR_FUNCTION_NOT_FOUND, what a binding reports for an older libnvidia-ml without them.
TEST(SimDriverVersion, DefaultDriverRefusesTheSetterAndR615ReportsItsVersions) {
  {
    SimEnvironment env;
    unsetenv("SIMGPU_DRIVER_VERSION");
    EXPECT_EQ(run([](FILE*) {
                auto nvml = open_nvml();
                if (!nvml) return 1;
                const auto version = nvml->session.driver_version();
                if (!version.is_ok() || *version != "580.159.04") return 2;
                const tessera::Status set =
                    nvml->session.set_memory_limits(nvml->device, "/sys/fs/cgroup/x", 0, kGiB);
                if (set.code() != tessera::StatusCode::kFailedPrecondition ||
                    set.message() != "nvmlDeviceSetMemoryLimits_v1: Function Not Found") {
                  std::fprintf(stderr, "%s\n", set.message().c_str());
                  return 3;
                }
                const auto get = nvml->session.memory_limits(nvml->device, "/sys/fs/cgroup/x");
                if (get.status().code() != tessera::StatusCode::kFailedPrecondition) return 4;
                return 0;
              }),
              0);
    EXPECT_EQ(run([](FILE*) {
                int version = 0;
                return cuDriverGetVersion(&version) == CUDA_SUCCESS && version == 13000 ? 0 : 1;
              }),
              0);
  }
  {
    SimEnvironment env;
    setenv("SIMGPU_DRIVER_VERSION", kR615, 1);
    EXPECT_EQ(
        run([](FILE*) {
          auto nvml = open_nvml();
          if (!nvml) return 1;
          const auto version = nvml->session.driver_version();
          if (!version.is_ok() || *version != kR615) return 2;
          if (!nvml->session.library().require(tessera::nvml::kMemoryLimitEntryPoints).is_ok())
            return 3;
          return 0;
        }),
        0);
    // The machine's driver is fixed when its state is created: a process started without the
    // variable (env -i) still sees R615.
    unsetenv("SIMGPU_DRIVER_VERSION");
    EXPECT_EQ(run([](FILE*) {
                int version = 0;
                if (cuDriverGetVersion(&version) != CUDA_SUCCESS || version != 13040) return 1;
                CUcontext context;
                return init_primary(&context) == CUDA_SUCCESS ? 0 : 2;
              }),
              0);
  }
}

}  // namespace
}  // namespace simgpu::testing

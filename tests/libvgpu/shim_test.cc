// libvgpu under real use: vgpu_probe runs against the simulated driver with LD_PRELOAD=libvgpu.so
// and the tests check what the program sees (results, memory views) and what the share and the
// simulated device hold.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "shim_test_support.h"
#include "sim_test_support.h"

namespace {

using tessera::vgpu::testing::Env;
using tessera::vgpu::testing::Probe;
using tessera::vgpu::testing::ProbeRun;
using tessera::vgpu::testing::run_probe;
using tessera::vgpu::testing::ShareDir;
using tessera::vgpu::testing::sim_uuid;
using tessera::vgpu::testing::words;

constexpr uint64_t kMi = 1ull << 20;
constexpr uint64_t kGi = 1ull << 30;
constexpr uint64_t kContext = 500 * kMi;

std::string mi(uint64_t bytes) {
  return std::to_string(bytes / kMi) + "Mi";
}

// Physical memory in use on the simulated device, read without the shim.
uint64_t device_used(int index = 0) {
  ProbeRun run = run_probe({}, {"nvml:" + std::to_string(index)}, /*with_shim=*/false);
  if (run.lines.size() != 1) return ~0ull;
  const auto w = words(run.lines[0]);  // nvml r1 total free used ...
  return std::stoull(w.at(4));
}

class ShimTest : public ::testing::Test {
 protected:
  simgpu::testing::SimEnvironment sim_{"name=NVIDIA H200,memory=16Gi,sms=132,cc=9.0"};
};

TEST_F(ShimTest, DlsymHandsOutWrappersAndPassesOtherNamesThrough) {
  ProbeRun run = run_probe({}, {"init", "dlsym"});
  ASSERT_EQ(run.status, 0) << run.err;
  ASSERT_EQ(run.lines.size(), 2u);
  EXPECT_EQ(run.lines[1], "dlsym ok");
}

TEST_F(ShimTest, DriverLoadedLateIsResolvedLazilyThroughTheResolver) {
  ProbeRun run = run_probe({{"TESSERA_MEMORY_LIMIT", "2Gi"}}, {}, true, LAZY_PROBE);
  EXPECT_EQ(run.status, 0) << run.err;
  ASSERT_FALSE(run.lines.empty()) << run.err;
  EXPECT_EQ(run.lines.back(), "lazy ok");
  EXPECT_EQ(run.lines.at(0), "lazy total " + std::to_string(2 * kGi) + " free " +
                                 std::to_string(2 * kGi - kContext));
}

TEST_F(ShimTest, GetProcAddressMatrixReturnsTheWrapperForTheChosenAbiAndCountsCalls) {
  ProbeRun run = run_probe({{"TESSERA_MEMORY_LIMIT", "8Gi"}}, {"init", "procmatrix"});
  ASSERT_EQ(run.status, 0) << run.err;
  ASSERT_EQ(run.lines.size(), 2u) << run.err;
  const auto w = words(run.lines[1]);
  ASSERT_EQ(w.at(0), "procmatrix");
  EXPECT_GT(std::stoi(w.at(1)), 100);  // requests checked
  EXPECT_EQ(w.at(2), "0") << run.err;  // failures
}

TEST_F(ShimTest, WithoutLimitsEverythingPassesThrough) {
  ProbeRun run = run_probe({}, {"init", "alloc:mem:8Gi", "info", "total", "count:cuMemAlloc_v2"});
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.lines[1], "alloc mem CUDA_SUCCESS");
  const auto info = words(run.lines[2]);
  EXPECT_EQ(std::stoull(info.at(3)), 16 * kGi);  // the physical total
  EXPECT_EQ(run.lines[4], "count cuMemAlloc_v2 1");
  EXPECT_TRUE(run.err.empty()) << run.err;  // silent by default
}

// Every allocation API against a limit: under, exactly at, over; freeing restores headroom.
struct ApiCase {
  const char* api;
  std::string half;  // allocation arguments charging exactly 512Mi
  std::string tiny;  // the smallest allocation the API makes
};

void PrintTo(const ApiCase& api_case, std::ostream* out) {
  *out << api_case.api;
}

class AllocationLimit : public ShimTest, public ::testing::WithParamInterface<ApiCase> {};

TEST_P(AllocationLimit, UnderAtAndOverTheLimit) {
  const ApiCase& c = GetParam();
  const std::string api = c.api;
  // The primary context (500Mi) + two 512Mi allocations fill the limit exactly.
  const uint64_t limit = kContext + 1024 * kMi;
  ShareDir share({{sim_uuid(0), limit}});
  Probe probe({{"TESSERA_SHARE_DIR", share.path()}},
              {"init", "alloc:" + api + ":" + c.half, "alloc:" + api + ":" + c.half,
               "alloc:" + api + ":" + c.tiny, "ready", "hold"});
  EXPECT_EQ(probe.read_line(), "init CUDA_SUCCESS");
  EXPECT_EQ(probe.read_line(), "alloc " + api + " CUDA_SUCCESS");              // under
  EXPECT_EQ(probe.read_line(), "alloc " + api + " CUDA_SUCCESS");              // exactly at
  EXPECT_EQ(probe.read_line(), "alloc " + api + " CUDA_ERROR_OUT_OF_MEMORY");  // over
  EXPECT_EQ(probe.read_line(), "ready");
  EXPECT_EQ(share.used(), limit);
  EXPECT_LE(device_used(), limit);
  probe.kill_now();
  probe.wait_exit();

  ProbeRun run = run_probe({{"TESSERA_SHARE_DIR", share.path()}},
                           {"init", "alloc:" + api + ":" + c.half, "alloc:" + api + ":" + c.half,
                            "free", "sync", "alloc:" + api + ":" + c.half, "freeall", "sync",
                            "alloc:" + api + ":" + c.half, "alloc:" + api + ":" + c.half});
  ASSERT_EQ(run.status, 0) << run.err;
  ASSERT_EQ(run.lines.size(), 10u) << run.err;
  EXPECT_EQ(run.lines[0], "init CUDA_SUCCESS");
  EXPECT_EQ(run.lines[5], "alloc " + api + " CUDA_SUCCESS") << "freeing restores headroom";
  EXPECT_EQ(run.lines[6], "freeall CUDA_SUCCESS");
  EXPECT_EQ(run.lines[8], "alloc " + api + " CUDA_SUCCESS");
  EXPECT_EQ(run.lines[9], "alloc " + api + " CUDA_SUCCESS");
  EXPECT_EQ(share.used(), kContext + 1024 * kMi) << "counted until the process is gone";
  EXPECT_EQ(share.reclaim(), 1);
  EXPECT_EQ(share.used(), 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Apis, AllocationLimit,
    ::testing::Values(ApiCase{"mem", "512Mi", "1"}, ApiCase{"managed", "512Mi", "1"},
                      ApiCase{"pitch", "1Mi:512", "1:1"}, ApiCase{"async", "512Mi", "1"},
                      ApiCase{"pool", "512Mi", "1"}, ApiCase{"vmm", "512Mi", "2Mi"},
                      ApiCase{"array", "32768:16384", "1:1"},
                      ApiCase{"array3d", "1024:1024:512", "1:1:1"}),
    [](const ::testing::TestParamInfo<ApiCase>& case_info) {
      return std::string(case_info.param.api);
    });

TEST_F(ShimTest, FillingNeverExceedsTheLimitWithRealSizes) {
  // Odd sizes: the charge follows the driver's rounding, so the driver never holds more.
  const uint64_t limit = kContext + 1000 * kMi + 12345;
  for (const char* args : {"fill:mem:3Mi", "fill:mem:700Ki", "fill:mem:100001",
                           "fill:pitch:1000:999", "fill:vmm:6Mi", "fill:async:3Mi"}) {
    ShareDir share({{sim_uuid(0), limit}});
    Probe probe({{"TESSERA_SHARE_DIR", share.path()}}, {"init", args, "ready", "hold"});
    EXPECT_EQ(probe.read_line(), "init CUDA_SUCCESS");
    const auto fill = words(probe.read_line().value_or(""));
    ASSERT_EQ(fill.size(), 5u) << args;
    EXPECT_EQ(fill[4], "CUDA_ERROR_OUT_OF_MEMORY") << args;
    EXPECT_EQ(probe.read_line(), "ready");
    EXPECT_LE(share.used(), limit) << args;
    EXPECT_GT(share.used() + 8 * kMi, limit) << args << ": the share should be nearly full";
    EXPECT_LE(device_used(), limit) << args;
  }
}

TEST_F(ShimTest, DestroyedPoolsGiveMemoryBackAsTheirAllocationsAreFreed) {
  const uint64_t limit = kContext + 1024 * kMi;
  ShareDir share({{sim_uuid(0), limit}});
  ProbeRun run =
      run_probe({{"TESSERA_SHARE_DIR", share.path()}},
                {"init", "alloc:pool:256Mi", "alloc:pool:256Mi", "free", "pooldestroy", "info",
                 "free", "info", "alloc:pool:1Gi", "free", "sync", "alloc:mem:1Gi"});
  ASSERT_EQ(run.status, 0) << run.err;
  ASSERT_EQ(run.lines.size(), 12u) << run.err;
  EXPECT_EQ(run.lines[4], "pooldestroy CUDA_SUCCESS");
  // The freed 256Mi went back with the pool's idle memory; the outstanding 256Mi is still held.
  EXPECT_EQ(std::stoull(words(run.lines[5]).at(2)), limit - kContext - 256 * kMi);
  EXPECT_EQ(run.lines[6], "free CUDA_SUCCESS");
  EXPECT_EQ(std::stoull(words(run.lines[7]).at(2)), limit - kContext);
  EXPECT_EQ(run.lines[8], "alloc pool CUDA_SUCCESS") << "a new pool gets the whole share";
  EXPECT_EQ(run.lines[11], "alloc mem CUDA_SUCCESS") << "and gives it back when trimmed";
}

TEST_F(ShimTest, APoolTrimmedOutOfSightIsSettledBeforeAnotherPoolIsRefused) {
  // Destroying a context synchronises it, and the simulated driver trims the device's pools then:
  // the default pool gives its 1 GiB back without a call the shim settles pools after. The
  // created pool's first allocation finds the share full of that stale charge; before refusing,
  // the shim settles the other pools (its own pool lock already held) and the allocation fits.
  const uint64_t limit = 2 * kContext + 1024 * kMi;
  ShareDir share({{sim_uuid(0), limit}});
  ProbeRun run = run_probe(
      {{"TESSERA_SHARE_DIR", share.path()}},
      {"init", "ctx:2:0", "alloc:async:1Gi", "free", "destroy", "init", "alloc:pool:1Gi", "info"});
  ASSERT_EQ(run.status, 0) << run.err;
  ASSERT_EQ(run.lines.size(), 8u) << run.err;
  EXPECT_EQ(run.lines[2], "alloc async CUDA_SUCCESS");
  EXPECT_EQ(run.lines[4], "destroy CUDA_SUCCESS");
  EXPECT_EQ(run.lines[6], "alloc pool CUDA_SUCCESS") << "the default pool's release was not seen";
  EXPECT_EQ(std::stoull(words(run.lines[7]).at(2)), limit - kContext - 1024 * kMi);
}

TEST_F(ShimTest, PoolsReleasedAtEachSynchronisationLeaveTheShare) {
  // After cuCtxSynchronize the share's usage page (what the other processes of the share see, not
  // only this process's view) shows what the driver released from both pools.
  const uint64_t limit = kContext + 1024 * kMi;
  ShareDir share({{sim_uuid(0), limit}});
  const std::string go = share.path() + "/go";
  Probe probe({{"TESSERA_SHARE_DIR", share.path()}},
              {"init", "alloc:async:512Mi", "alloc:pool:256Mi", "ready", "waitfile:" + go, "free",
               "free", "sync", "ready", "hold"});
  EXPECT_EQ(probe.read_line(), "init CUDA_SUCCESS");
  EXPECT_EQ(probe.read_line(), "alloc async CUDA_SUCCESS");
  EXPECT_EQ(probe.read_line(), "alloc pool CUDA_SUCCESS");
  EXPECT_EQ(probe.read_line(), "ready");
  EXPECT_EQ(share.used(), kContext + 768 * kMi);
  FILE* file = std::fopen(go.c_str(), "w");
  ASSERT_NE(file, nullptr);
  std::fclose(file);
  EXPECT_EQ(probe.read_line(), "free CUDA_SUCCESS");
  EXPECT_EQ(probe.read_line(), "free CUDA_SUCCESS");
  EXPECT_EQ(probe.read_line(), "sync CUDA_SUCCESS");
  EXPECT_EQ(probe.read_line(), "ready");
  EXPECT_EQ(share.used(), kContext) << "both pools trimmed at the synchronisation, still charged";
  probe.kill_now();
  probe.wait_exit();
  unlink(go.c_str());
}

TEST_F(ShimTest, ThreadsOfOneProcessAllocateFromOnePoolConcurrently) {
  // The pool lock is not held across the driver's allocation: the threads' claims keep the
  // pool's charge exact (room for twice what the threads hold at once: a claim whose allocation
  // the driver made but the shim has not settled yet counts twice for that moment).
  const uint64_t limit = kContext + 8 * 2 * 16 * kMi;
  ShareDir share({{sim_uuid(0), limit}});
  ProbeRun run = run_probe(
      {{"TESSERA_SHARE_DIR", share.path()}},
      {"init", "mt:8:2000:16Mi:async", "sync", "info", "alloc:mem:" + mi(limit - kContext)});
  ASSERT_EQ(run.status, 0) << run.err;
  ASSERT_EQ(run.lines.size(), 5u) << run.err;
  EXPECT_EQ(run.lines[1], "mt 0");
  EXPECT_EQ(std::stoull(words(run.lines[3]).at(2)), limit - kContext) << "everything came back";
  EXPECT_EQ(run.lines[4], "alloc mem CUDA_SUCCESS");
}

// Graph memory: allocation nodes (added, or captured from cuMemAllocAsync) are charged when an
// executable graph is first launched, through the device's graph pool, for every instantiation
// entry point and through cuGetProcAddress.
struct GraphCase {
  const char* name;
  const char* kind;  // vgpu_probe graph kinds: node, capture
  const char* inst;  // instantiation: flags, params, legacy, v2, proc
  const char* launch;
};

void PrintTo(const GraphCase& graph_case, std::ostream* out) {
  *out << graph_case.name;
}

class GraphMemoryLimit : public ShimTest, public ::testing::WithParamInterface<GraphCase> {};

TEST_P(GraphMemoryLimit, UnderAtAndOverTheLimitAndTrimGivesItBack) {
  const GraphCase& c = GetParam();
  const std::string graph = std::string("graph:") + c.kind + ":";
  const std::string inst = std::string(":") + c.inst;
  const std::string launched = "graph " + std::string(c.kind) + " CUDA_SUCCESS";
  const uint64_t limit = kContext + 1024 * kMi;
  ShareDir share({{sim_uuid(0), limit}});
  Probe probe({{"TESSERA_SHARE_DIR", share.path()}},
              {"init", graph + "512Mi" + inst, c.launch, graph + "512Mi" + inst, c.launch,
               graph + "1" + inst, c.launch, "gattr", "ready", "hold"});
  EXPECT_EQ(probe.read_line(), "init CUDA_SUCCESS");
  EXPECT_EQ(probe.read_line(), launched);
  EXPECT_EQ(probe.read_line(), "glaunch CUDA_SUCCESS");  // under
  EXPECT_EQ(probe.read_line(), launched);
  EXPECT_EQ(probe.read_line(), "glaunch CUDA_SUCCESS");              // exactly at
  EXPECT_EQ(probe.read_line(), launched);                            // instantiating takes nothing
  EXPECT_EQ(probe.read_line(), "glaunch CUDA_ERROR_OUT_OF_MEMORY");  // over
  EXPECT_EQ(probe.read_line(),
            "gattr " + std::to_string(1024 * kMi) + " " + std::to_string(1024 * kMi));
  EXPECT_EQ(probe.read_line(), "ready");
  EXPECT_EQ(share.used(), limit);
  EXPECT_LE(device_used(), limit);
  probe.kill_now();
  probe.wait_exit();
  EXPECT_EQ(share.reclaim(), 1);

  // A destroyed executable leaves its memory in the graph pool (still charged, reused by the next
  // launch without growth); cuDeviceGraphMemTrim gives it back to the share.
  ProbeRun run = run_probe(
      {{"TESSERA_SHARE_DIR", share.path()}},
      {"init", graph + "512Mi" + inst, c.launch, graph + "512Mi" + inst, c.launch, "gdestroy",
       graph + "512Mi" + inst, c.launch, "gdestroy", "gdestroy", "alloc:mem:512Mi", "gtrim",
       "gattr", "alloc:mem:512Mi", "alloc:mem:512Mi", "alloc:mem:1"});
  ASSERT_EQ(run.status, 0) << run.err;
  const std::vector<std::string> expected = {"init CUDA_SUCCESS",
                                             launched,
                                             "glaunch CUDA_SUCCESS",
                                             launched,
                                             "glaunch CUDA_SUCCESS",
                                             "gdestroy CUDA_SUCCESS",
                                             launched,
                                             "glaunch CUDA_SUCCESS",  // reuses the idle 512Mi
                                             "gdestroy CUDA_SUCCESS",
                                             "gdestroy CUDA_SUCCESS",
                                             "alloc mem CUDA_ERROR_OUT_OF_MEMORY",  // pool holds it
                                             "gtrim CUDA_SUCCESS",
                                             "gattr 0 0",
                                             "alloc mem CUDA_SUCCESS",
                                             "alloc mem CUDA_SUCCESS",
                                             "alloc mem CUDA_ERROR_OUT_OF_MEMORY"};
  EXPECT_EQ(run.lines, expected) << run.err;
}

INSTANTIATE_TEST_SUITE_P(Graphs, GraphMemoryLimit,
                         ::testing::Values(GraphCase{"node", "node", "flags", "glaunch"},
                                           GraphCase{"node_params", "node", "params", "glaunch"},
                                           GraphCase{"node_legacy", "node", "legacy", "glaunch"},
                                           GraphCase{"node_v2", "node", "v2", "glaunch"},
                                           GraphCase{"node_proc", "node", "proc", "glaunch:proc"},
                                           GraphCase{"capture", "capture", "flags", "glaunch"}),
                         [](const ::testing::TestParamInfo<GraphCase>& case_info) {
                           return std::string(case_info.param.name);
                         });

TEST_F(ShimTest, GraphUploadReservesLikeALaunchAndTrimThroughTheResolverGivesItBack) {
  const uint64_t limit = kContext + 1024 * kMi;
  ShareDir share({{sim_uuid(0), limit}});
  ProbeRun run =
      run_probe({{"TESSERA_SHARE_DIR", share.path()}},
                {"init", "graph:node:1Gi", "gupload", "glaunch", "graph:node:2Mi", "gupload",
                 "glaunch", "gdestroy", "gdestroy", "gtrim:proc", "gattr", "alloc:mem:1Gi"});
  ASSERT_EQ(run.status, 0) << run.err;
  const std::vector<std::string> expected = {"init CUDA_SUCCESS",
                                             "graph node CUDA_SUCCESS",
                                             "gupload CUDA_SUCCESS",
                                             "glaunch CUDA_SUCCESS",  // already mapped
                                             "graph node CUDA_SUCCESS",
                                             "gupload CUDA_ERROR_OUT_OF_MEMORY",
                                             "glaunch CUDA_ERROR_OUT_OF_MEMORY",
                                             "gdestroy CUDA_SUCCESS",
                                             "gdestroy CUDA_SUCCESS",
                                             "gtrim CUDA_SUCCESS",
                                             "gattr 0 0",
                                             "alloc mem CUDA_SUCCESS"};
  EXPECT_EQ(run.lines, expected) << run.err;
}

TEST_F(ShimTest, CapturedAllocationsTakeNothingUntilTheGraphIsLaunched) {
  const uint64_t limit = kContext + 1024 * kMi;
  ShareDir share({{sim_uuid(0), limit}});
  Probe probe(
      {{"TESSERA_SHARE_DIR", share.path()}},
      {"init", "graph:capture:4Gi", "alloc:async:1Gi", "glaunch", "gattr", "ready", "hold"});
  EXPECT_EQ(probe.read_line(), "init CUDA_SUCCESS");
  // Capturing an allocation larger than the share reserves nothing (not even in the pool)...
  EXPECT_EQ(probe.read_line(), "graph capture CUDA_SUCCESS");
  EXPECT_EQ(probe.read_line(), "alloc async CUDA_SUCCESS");  // the whole share is still free
  // ...and launching it fails without reaching the driver.
  EXPECT_EQ(probe.read_line(), "glaunch CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_EQ(probe.read_line(), "gattr 0 0");
  EXPECT_EQ(probe.read_line(), "ready");
  EXPECT_EQ(share.used(), limit);
  EXPECT_LE(device_used(), limit);
}

TEST_F(ShimTest, GraphsWithoutAllocationNodesAreUnaffected) {
  const uint64_t limit = kContext + 1024 * kMi;
  ShareDir share({{sim_uuid(0), limit}});
  ProbeRun run = run_probe({{"TESSERA_SHARE_DIR", share.path()}},
                           {"init", "alloc:mem:1Gi", "graph:none:0", "glaunch", "gupload",
                            "glaunch:proc", "gdestroy", "gtrim", "count:cuGraphLaunch", "gattr"});
  ASSERT_EQ(run.status, 0) << run.err;
  const std::vector<std::string> expected = {
      "init CUDA_SUCCESS",    "alloc mem CUDA_SUCCESS", "graph none CUDA_SUCCESS",
      "glaunch CUDA_SUCCESS",  // with the share full
      "gupload CUDA_SUCCESS", "glaunch CUDA_SUCCESS",   "gdestroy CUDA_SUCCESS",
      "gtrim CUDA_SUCCESS",   "count cuGraphLaunch 2",  "gattr 0 0"};
  EXPECT_EQ(run.lines, expected) << run.err;
  EXPECT_EQ(share.used(), limit);
}

TEST_F(ShimTest, ContextsAreCountedAndDestroyingOneGivesItBack) {
  ShareDir share({{sim_uuid(0), 3 * kContext}});
  ProbeRun run = run_probe({{"TESSERA_SHARE_DIR", share.path()}},
                           {"init", "ctx:2:0", "ctx:3:0", "destroy", "ctx:4:0", "alloc:mem:1",
                            "destroy", "alloc:mem:1", "release", "ctx:2:0", "ctx:3:0", "ctx:4:0"});
  ASSERT_EQ(run.status, 0) << run.err;
  // Limit: 3 contexts. Primary + ctx + ctx fill it; a destroyed context frees room for another;
  // after a 512-byte allocation the share holds 2 contexts + 512 B, so after releasing the
  // primary exactly one more context fits.
  const std::vector<std::string> expected = {"init CUDA_SUCCESS",
                                             "ctx CUDA_SUCCESS",
                                             "ctx CUDA_SUCCESS",
                                             "destroy CUDA_SUCCESS",
                                             "ctx CUDA_SUCCESS",
                                             "alloc mem CUDA_ERROR_OUT_OF_MEMORY",
                                             "destroy CUDA_SUCCESS",
                                             "alloc mem CUDA_SUCCESS",
                                             "release CUDA_SUCCESS",
                                             "ctx CUDA_SUCCESS",
                                             "ctx CUDA_ERROR_OUT_OF_MEMORY",
                                             "ctx CUDA_ERROR_OUT_OF_MEMORY"};
  EXPECT_EQ(run.lines, expected);
}

TEST_F(ShimTest, MemoryViewsShowTheShare) {
  const uint64_t limit = 2 * kGi;
  ShareDir share({{sim_uuid(0), limit}});
  Probe probe({{"TESSERA_SHARE_DIR", share.path()}},
              {"init", "info", "alloc:mem:1Gi", "info", "infonull", "total", "nvml", "ready",
               "sleepms:300", "info", "nvml", "total"});
  EXPECT_EQ(probe.read_line(), "init CUDA_SUCCESS");
  auto info = words(probe.read_line().value_or(""));
  EXPECT_EQ(info.at(1), "CUDA_SUCCESS");
  EXPECT_EQ(std::stoull(info.at(2)), limit - kContext);
  EXPECT_EQ(std::stoull(info.at(3)), limit);
  EXPECT_EQ(probe.read_line(), "alloc mem CUDA_SUCCESS");
  info = words(probe.read_line().value_or(""));
  EXPECT_EQ(std::stoull(info.at(2)), limit - kContext - kGi);
  EXPECT_EQ(probe.read_line(), "infonull CUDA_ERROR_INVALID_VALUE CUDA_ERROR_INVALID_VALUE");
  EXPECT_EQ(probe.read_line(), "total CUDA_SUCCESS " + std::to_string(limit));
  auto nvml =
      words(probe.read_line().value_or(""));  // nvml r1 total free used r2 total free used reserved
  EXPECT_EQ(nvml.at(1), "0");
  EXPECT_EQ(std::stoull(nvml.at(2)), limit);
  EXPECT_EQ(std::stoull(nvml.at(3)), limit - kContext - kGi);
  EXPECT_EQ(std::stoull(nvml.at(4)), kContext + kGi);
  EXPECT_EQ(nvml.at(5), "0");
  EXPECT_EQ(std::stoull(nvml.at(6)), limit);
  EXPECT_EQ(std::stoull(nvml.at(7)), limit - kContext - kGi);
  EXPECT_EQ(probe.read_line(), "ready");
  // The agent lowers the limit below what the share holds: free is 0, never an underflow.
  share.set_limit(0, 100 * kMi);
  info = words(probe.read_line().value_or(""));
  EXPECT_EQ(std::stoull(info.at(2)), 0u);
  EXPECT_EQ(std::stoull(info.at(3)), 100 * kMi);
  nvml = words(probe.read_line().value_or(""));
  EXPECT_EQ(std::stoull(nvml.at(2)), 100 * kMi);
  EXPECT_EQ(std::stoull(nvml.at(3)), 0u);
  EXPECT_EQ(std::stoull(nvml.at(4)), 100 * kMi);
  EXPECT_EQ(std::stoull(nvml.at(7)), 0u);
  EXPECT_EQ(probe.read_line(), "total CUDA_SUCCESS " + std::to_string(100 * kMi));
  EXPECT_EQ(probe.wait_exit(), 0);
}

TEST_F(ShimTest, FreeViewNeverExceedsPhysicalFree) {
  // Another tenant (no shim) holds 14Gi + its context of the 16Gi device; the share's limit is
  // 8Gi, but only 16Gi - 14Gi - 2 contexts are really free.
  Probe other({}, {"init", "alloc:mem:14Gi", "ready", "hold"}, /*with_shim=*/false);
  EXPECT_EQ(other.read_line(), "init CUDA_SUCCESS");
  EXPECT_EQ(other.read_line(), "alloc mem CUDA_SUCCESS");
  EXPECT_EQ(other.read_line(), "ready");
  ProbeRun run = run_probe({{"TESSERA_MEMORY_LIMIT", "8Gi"}}, {"init", "info"});
  ASSERT_EQ(run.lines.size(), 2u) << run.err;
  const auto info = words(run.lines[1]);
  EXPECT_EQ(std::stoull(info.at(3)), 8 * kGi);
  EXPECT_EQ(std::stoull(info.at(2)), 16 * kGi - 14 * kGi - 2 * kContext);
}

TEST_F(ShimTest, StandaloneLimitsFromTheEnvironment) {
  ProbeRun run = run_probe({{"TESSERA_MEMORY_LIMIT", "0=1524Mi"}},
                           {"init", "alloc:mem:1Gi", "alloc:mem:1", "total"});
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.lines[1], "alloc mem CUDA_SUCCESS");
  EXPECT_EQ(run.lines[2], "alloc mem CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_EQ(run.lines[3], "total CUDA_SUCCESS " + std::to_string(1524 * kMi));

  run = run_probe({{"CUDA_DEVICE_MEMORY_LIMIT", "1524m"}}, {"init", "total"});
  EXPECT_EQ(run.lines.at(1), "total CUDA_SUCCESS " + std::to_string(1524 * kMi));
  run = run_probe({{"CUDA_DEVICE_MEMORY_LIMIT", "9g"}, {"CUDA_DEVICE_MEMORY_LIMIT_0", "2g"}},
                  {"init", "total"});
  EXPECT_EQ(run.lines.at(1), "total CUDA_SUCCESS " + std::to_string(2 * kGi));
  run = run_probe({{"TESSERA_MEMORY_LIMIT", sim_uuid(0) + "=3Gi"}}, {"init", "total"});
  EXPECT_EQ(run.lines.at(1), "total CUDA_SUCCESS " + std::to_string(3 * kGi));
}

TEST_F(ShimTest, InvalidLimitRefusesTheDeviceAndSaysWhy) {
  ProbeRun run = run_probe({{"TESSERA_MEMORY_LIMIT", "8 GB"}}, {"init", "alloc:mem:1"});
  ASSERT_EQ(run.status, 0);
  EXPECT_EQ(run.lines.at(0), "init CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_NE(run.err.find("TESSERA_MEMORY_LIMIT='8 GB'"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("limited to 0 bytes"), std::string::npos) << run.err;
  // A share directory without a valid limits page fails closed the same way.
  run = run_probe({{"TESSERA_SHARE_DIR", "/nonexistent/share"}}, {"init"});
  EXPECT_EQ(run.lines.at(0), "init CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_NE(run.err.find("/nonexistent/share/limits"), std::string::npos) << run.err;
}

// Inputs that used to fail open (the whole GPU, or a device left unlimited without a word): each
// is now one stderr line naming the variable and its value, and every device it may concern is
// limited to 0 bytes (so the context cannot even be charged).
TEST_F(ShimTest, EmptyUnreadableOrUnmatchedLimitsFailClosedWithOneLine) {
  const std::string unknown = "GPU-5e1a0000-7e55-4e2a-9000-0000000000ff";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"TESSERA_MEMORY_LIMIT", ""},           {"TESSERA_MEMORY_LIMIT", unknown + "=4Gi"},
      {"TESSERA_MEMORY_LIMIT", "1=4Gi"},  // one GPU: ordinal 1 is nothing this process sees
      {"TESSERA_MEMORY_LIMIT", "8Gx"},        {"TESSERA_MEMORY_LIMIT", "-1"},
      {"CUDA_DEVICE_MEMORY_LIMIT", "abc"},    {"CUDA_DEVICE_MEMORY_LIMIT_00", "1Gi"},
      {"CUDA_DEVICE_MEMORY_LIMIT_16", "1Gi"}, {"CUDA_DEVICE_MEMORY_LIMIT_3", "1Gi"},
  };
  for (const auto& [name, value] : cases) {
    ProbeRun run = run_probe({{name, value}}, {"init", "alloc:mem:1"});
    ASSERT_EQ(run.status, 0) << name << "=" << value << ": " << run.err;
    EXPECT_EQ(run.lines.at(0), "init CUDA_ERROR_OUT_OF_MEMORY") << name << "=" << value;
    EXPECT_NE(run.lines.at(1), "alloc mem CUDA_SUCCESS") << name << "=" << value;
    EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
    EXPECT_NE(run.err.find(name + "='" + value + "'"), std::string::npos) << run.err;
    EXPECT_NE(run.err.find("limited to 0 bytes"), std::string::npos) << run.err;
  }
  // A value that would forge a second line is escaped into the one line.
  ProbeRun run = run_probe({{"TESSERA_MEMORY_LIMIT", "8Gi\ntessera: info: limit 80Gi"}}, {"init"});
  EXPECT_EQ(run.lines.at(0), "init CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
  EXPECT_NE(run.err.find("TESSERA_MEMORY_LIMIT='8Gi\\ntessera: info: limit 80Gi'"),
            std::string::npos)
      << run.err;
}

// Without a share TESSERA_CONTEXT_OVERHEAD still sets the charge per context.
TEST_F(ShimTest, WithoutAShareTheContextOverheadComesFromTheEnvironment) {
  ProbeRun run = run_probe({{"TESSERA_MEMORY_LIMIT", "1Gi"}, {"TESSERA_CONTEXT_OVERHEAD", "100Mi"}},
                           {"init", "info"});
  ASSERT_EQ(run.lines.size(), 2u) << run.err;
  EXPECT_EQ(std::stoull(words(run.lines[1]).at(2)), kGi - 100 * kMi);
  EXPECT_EQ(run.err, "");
}

TEST_F(ShimTest, UnknownPointersGoToTheDriverUnchanged) {
  ProbeRun with = run_probe({{"TESSERA_MEMORY_LIMIT", "8Gi"}}, {"init", "freebad"});
  ProbeRun without = run_probe({}, {"init", "freebad"}, /*with_shim=*/false);
  ASSERT_EQ(with.lines.size(), 2u) << with.err;
  ASSERT_EQ(without.lines.size(), 2u) << without.err;
  EXPECT_EQ(with.lines[1], without.lines[1]);
  EXPECT_NE(with.lines[1], "freebad CUDA_SUCCESS");
}

TEST_F(ShimTest, SixteenProcessesRacingNeverExceedTheLimit) {
  simgpu::testing::SimEnvironment big("name=NVIDIA H200,memory=64Gi,sms=132,cc=9.0");
  const uint64_t limit = 16 * kGi;
  const uint64_t chunk = 64 * kMi;
  ShareDir share({{sim_uuid(0), limit}});
  // All 16 create their contexts first, then fill at the same moment.
  const std::string go = share.path() + "/go";
  std::vector<std::unique_ptr<Probe>> racers;
  for (int i = 0; i < 16; ++i) {
    racers.push_back(std::make_unique<Probe>(
        Env{{"TESSERA_SHARE_DIR", share.path()}},
        std::vector<std::string>{"init", "waitfile:" + go, "fill:mem:" + mi(chunk), "ready",
                                 "hold"}));
  }
  for (auto& racer : racers) EXPECT_EQ(racer->read_line(), "init CUDA_SUCCESS");
  {
    FILE* file = std::fopen(go.c_str(), "w");
    ASSERT_NE(file, nullptr);
    std::fclose(file);
  }
  uint64_t held = 0;
  for (auto& racer : racers) {
    const auto fill = words(racer->read_line().value_or(""));
    ASSERT_EQ(fill.size(), 5u);
    EXPECT_EQ(fill[4], "CUDA_ERROR_OUT_OF_MEMORY");
    held += std::stoull(fill[3]) + kContext;
    EXPECT_EQ(racer->read_line(), "ready");
  }
  unlink(go.c_str());
  EXPECT_LE(held, limit);
  EXPECT_EQ(share.used(), held);
  EXPECT_GT(held + 16 * chunk, limit) << "racers gave up far below the limit";
  EXPECT_LE(device_used(), limit);
}

TEST_F(ShimTest, ThreadsOfOneProcessAllocateAndFreeConcurrently) {
  const uint64_t limit = kContext + 8 * 2 * 16 * kMi;
  ShareDir share({{sim_uuid(0), limit}});
  ProbeRun run = run_probe({{"TESSERA_SHARE_DIR", share.path()}},
                           {"init", "mt:8:2000:16Mi", "info", "alloc:mem:" + mi(limit - kContext)});
  ASSERT_EQ(run.status, 0) << run.err;
  ASSERT_EQ(run.lines.size(), 4u) << run.err;
  EXPECT_EQ(run.lines[1], "mt 0");
  EXPECT_EQ(std::stoull(words(run.lines[2]).at(2)), limit - kContext) << "everything came back";
  EXPECT_EQ(run.lines[3], "alloc mem CUDA_SUCCESS");
}

TEST_F(ShimTest, TwoSharesOnOneDeviceEachKeepTheirOwnLimit) {
  ShareDir a({{sim_uuid(0), 2 * kGi}});
  ShareDir b({{sim_uuid(0), 3 * kGi}});
  Probe pa({{"TESSERA_SHARE_DIR", a.path()}}, {"init", "fill:mem:64Mi", "ready", "hold"});
  Probe pb({{"TESSERA_SHARE_DIR", b.path()}}, {"init", "fill:mem:64Mi", "ready", "hold"});
  Probe pb2({{"TESSERA_SHARE_DIR", b.path()}}, {"init", "info", "ready", "hold"});
  for (Probe* p : {&pa, &pb}) {
    EXPECT_EQ(p->read_line(), "init CUDA_SUCCESS");
    EXPECT_TRUE(p->read_line().has_value());
    EXPECT_EQ(p->read_line(), "ready");
  }
  EXPECT_TRUE(pb2.read_line().has_value());
  EXPECT_TRUE(pb2.read_line().has_value());
  EXPECT_EQ(pb2.read_line(), "ready");
  EXPECT_LE(a.used(), 2 * kGi);
  EXPECT_GT(a.used(), 2 * kGi - 64 * kMi);
  EXPECT_LE(b.used(), 3 * kGi);
  EXPECT_GT(b.used(), 3 * kGi - 64 * kMi - kContext);
  EXPECT_LE(device_used(), 5 * kGi);
}

TEST_F(ShimTest, KilledProcessesNeverHangAndTheirUsageIsReclaimed) {
  const uint64_t limit = 4 * kGi;
  ShareDir share({{sim_uuid(0), limit}});
  const char* iterations_env = std::getenv("TESSERA_KILL_ITERATIONS");
  const int iterations = iterations_env ? std::atoi(iterations_env) : 1000;
  unsigned seed = 12345;
  for (int i = 0; i < iterations; ++i) {
    Probe victim({{"TESSERA_SHARE_DIR", share.path()}}, {"init", "churn:mem:64Mi"});
    ASSERT_EQ(victim.read_line(), "init CUDA_SUCCESS") << "iteration " << i;
    ASSERT_EQ(victim.read_line(), "churning") << "iteration " << i;
    seed = seed * 1103515245 + 12345;
    usleep((seed >> 8) % 3000);
    victim.kill_now();
    const int status = victim.wait_exit(10000);
    ASSERT_FALSE(victim.timed_out()) << "iteration " << i;
    EXPECT_EQ(status, 128 + SIGKILL);
  }
  // A new process that needs the whole share reclaims every dead slot.
  ProbeRun run = run_probe({{"TESSERA_SHARE_DIR", share.path()}},
                           {"init", "alloc:mem:" + mi(limit - kContext)});
  ASSERT_EQ(run.lines.size(), 2u) << run.err;
  EXPECT_EQ(run.lines[1], "alloc mem CUDA_SUCCESS");
  EXPECT_EQ(share.reclaim(), 1);
  EXPECT_EQ(share.used(), 0u);
}

}  // namespace

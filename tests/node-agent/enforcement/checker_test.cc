#include "enforcement/checker.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <set>

#include <gtest/gtest.h>

#include "enforcement/fake_node.h"
#include "tessera/share_folder/snapshot.h"

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;
using testing::FakeProc;

constexpr char kGpu[] = "GPU-11111111-2222-3333-4444-555555555555";
constexpr char kPodA[] = "aaaaaaaa-0000-0000-0000-000000000001";
constexpr char kPodB[] = "bbbbbbbb-0000-0000-0000-000000000002";
constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kMiB = 1ull << 20;

// Two shares of one GPU, 4 GiB each, one per pod; fake /proc and NVML.
struct Node {
  fs::path base;
  FakeProc proc;
  testing::FakeGpus gpus;
  testing::RecordingHandler handler;
  SimulatedClock clock;
  std::vector<CheckedShare> shares;
  std::unique_ptr<OutOfBandChecker> checker;

  explicit Node(const std::string& name, CheckerOptions options = {})
      : base(testing::fresh_folder(name)), proc(base / "proc") {
    for (const auto& [share_name, pod] : {std::pair{"a", kPodA}, std::pair{"b", kPodB}}) {
      CheckedShare share;
      share.name = share_name;
      share.folder = (base / "shares" / share_name).string();
      share.uuid = kGpu;
      share.memory_limit = 4 * kGiB;
      share.cores = 30;
      share.cores_limit = 50;
      share.claim_namespace = "tenants";
      share.claim_name = std::string("claim-") + share_name;
      share.claim_uid = std::string("uid-") + share_name;
      share.pods = {{std::string("pod-") + share_name, pod}};
      testing::make_share_folder(share.folder, kGpu, 4 * kGiB);
      shares.push_back(share);
    }
    options.proc_root = proc.root().string();
    checker = std::make_unique<OutOfBandChecker>(
        options, [this] { return shares; }, gpus, handler, clock);
  }
  ~Node() { fs::remove_all(base); }
  fs::path folder(const std::string& share) const { return base / "shares" / share; }
  // A shimmed process of `share` (pod cgroup, a slot holding `slot_bytes`), NVML: `used`.
  void shimmed(const std::string& share, int pid, uint32_t slot, uint64_t slot_bytes,
               uint64_t used) {
    proc.add(pid, 1000 + pid, testing::pod_cgroup_file(share == "a" ? kPodA : kPodB));
    testing::write_slot(folder(share), slot, FakeProc::owner(pid, 1000 + pid), slot_bytes);
    gpus.processes[kGpu].push_back({pid, used});
  }
  std::vector<Finding> of(FindingKind kind) const {
    std::vector<Finding> out;
    for (const Finding& f : handler.findings)
      if (f.kind == kind) out.push_back(f);
    return out;
  }
};

TEST(OutOfBandChecker, AnHonestNodeHasNoFindings) {
  Node node("checker-honest");
  node.shimmed("a", 100, 0, 2 * kGiB, 2 * kGiB + 100 * kMiB);  // within the margin
  node.shimmed("b", 200, 0, 3 * kGiB, 3 * kGiB);
  EXPECT_TRUE(node.checker->check_once().empty());
  EXPECT_TRUE(node.checker->check_once().empty());
  EXPECT_EQ(node.checker->stats().passes, 2u);
  EXPECT_EQ(node.checker->stats().repairs, 0u);
}

// Shares of a MIG instance are checked on the instance: its own list (the MIG handle's) holds their
// processes, with a stranger in the instance reported there. The parent GPU's own handle lists
// every instance's processes (with their GPU instance ids): none of them is a stranger on the GPU;
// a process in no instance still is.
TEST(OutOfBandChecker, MigSharesAreCheckedOnTheirInstanceNotOnTheParentGpu) {
  constexpr char kInstance[] = "MIG-66666666-7777-8888-9999-000000000000";
  CheckerOptions options;
  options.node_gpus = [] { return std::vector<std::string>{kGpu}; };
  Node node("checker-mig", options);
  for (CheckedShare& share : node.shares) {
    share.uuid = kInstance;
    fs::remove_all(share.folder);  // its limits page named the GPU: made again for the instance
    testing::make_share_folder(share.folder, kInstance, 4 * kGiB);
  }
  node.shimmed("a", 100, 0, 2 * kGiB, 2 * kGiB);
  node.shimmed("b", 200, 0, kGiB, kGiB);
  node.proc.add(300, 1300);  // a host process in the instance, in no share
  node.proc.add(400, 1400);  // a host process on the GPU outside every instance
  node.gpus.processes[kInstance] = {{100, 2 * kGiB, 1u}, {200, kGiB, 1u}, {300, kGiB, 1u}};
  node.gpus.processes[kGpu] = {
      {100, 2 * kGiB, 1u}, {200, kGiB, 1u}, {300, kGiB, 1u}, {400, kGiB}, {500, kGiB, 2u}};
  node.gpus.busy_unsupported = {kInstance, kGpu};
  node.checker->check_once();
  const auto strangers = node.of(FindingKind::kUnaccountedProcess);
  ASSERT_EQ(strangers.size(), 2u);
  std::set<std::pair<int, std::string>> seen;
  for (const Finding& f : strangers) seen.insert({f.host_pid, f.gpu_uuid});
  EXPECT_EQ(seen, (std::set<std::pair<int, std::string>>{{300, kInstance}, {400, kGpu}}));
  EXPECT_TRUE(node.of(FindingKind::kOverMemoryLimit).empty());
  EXPECT_EQ(node.checker->stats().last_problem, "") << "NOT_SUPPORTED utilisation is no problem";
}

TEST(OutOfBandChecker, AZeroedSlotIsReportedRepairedAndItsProcessNamed) {
  Node node("checker-zeroed");
  node.shimmed("a", 100, 0, 0, 7680 * kMiB);  // allocated 7.5 GiB, then zeroed its slot
  node.shimmed("b", 200, 0, kGiB, kGiB);
  node.checker->check_once();
  const auto over = node.of(FindingKind::kOverMemoryLimit);
  ASSERT_EQ(over.size(), 1u);
  EXPECT_EQ(over[0].host_pid, 100);
  EXPECT_EQ(over[0].host_pid_start_time, 1100u);
  EXPECT_EQ(over[0].share, "a");
  EXPECT_EQ(over[0].claim_name, "claim-a");
  EXPECT_EQ(over[0].pod, "tenants/pod-a");
  EXPECT_EQ(over[0].detail,
            "the share holds 7680 MiB (NVML) of its 4096 MiB; this process holds 7680 MiB, its "
            "slot says 0 MiB");
  const auto lies = node.of(FindingKind::kUsageDisagrees);
  ASSERT_EQ(lies.size(), 1u);
  EXPECT_EQ(lies[0].host_pid, 100);
  // Repaired: the slot holds NVML's figure, so the shim refuses the next allocation.
  EXPECT_EQ(testing::copy_page(node.folder("a")).bytes[0], 7680 * kMiB);
  // Share b's process is named in no finding.
  for (const Finding& f : node.handler.findings) EXPECT_NE(f.host_pid, 200);
  // Once per episode: the next pass repeats nothing (the slot agrees now; still over the limit).
  node.handler.findings.clear();
  node.checker->check_once();
  EXPECT_TRUE(node.handler.findings.empty());
  // It frees down to the limit, then goes over again: a new episode.
  node.gpus.processes[kGpu][0].used_bytes = 3 * kGiB;
  testing::write_slot(node.folder("a"), 0, FakeProc::owner(100, 1100), 3 * kGiB);
  node.checker->check_once();
  EXPECT_TRUE(node.handler.findings.empty());
  node.gpus.processes[kGpu][0].used_bytes = 5 * kGiB;
  node.checker->check_once();
  EXPECT_EQ(node.of(FindingKind::kOverMemoryLimit).size(), 1u);
}

TEST(OutOfBandChecker, AnUnshimmedProcessOfTheSharesPodIsFoundOthersAreNot) {
  Node node("checker-unshimmed");
  node.shimmed("a", 100, 0, kGiB, kGiB);
  // Pod a's process without the shim: no slot, 5 GiB.
  node.proc.add(101, 2000, testing::pod_cgroup_file(kPodA));
  node.gpus.processes[kGpu].push_back({101, 5 * kGiB});
  // A host process of no pod on the same GPU (not a share's): no finding of a share's, only
  // unaccounted_process.
  node.proc.add(300, 3000);
  node.gpus.processes[kGpu].push_back({300, 8 * kGiB});
  node.checker->check_once();
  const auto unshimmed = node.of(FindingKind::kUnshimmedProcess);
  ASSERT_EQ(unshimmed.size(), 1u);
  EXPECT_EQ(unshimmed[0].host_pid, 101);
  EXPECT_EQ(unshimmed[0].share, "a");
  const auto over = node.of(FindingKind::kOverMemoryLimit);
  ASSERT_EQ(over.size(), 1u);  // 6 GiB of 4: the unshimmed process is the offender
  EXPECT_EQ(over[0].host_pid, 101);
  for (const Finding& f : node.handler.findings) {
    if (f.kind != FindingKind::kUnaccountedProcess) {
      EXPECT_NE(f.host_pid, 300);
    }
    EXPECT_NE(f.share, "b");
  }
  const auto unaccounted = node.of(FindingKind::kUnaccountedProcess);
  ASSERT_EQ(unaccounted.size(), 1u);
  EXPECT_EQ(unaccounted[0].host_pid, 300);
  // The handler's proof: pod a's processes are share a's, not share b's; a wrong start time is
  // no proof.
  EXPECT_TRUE(node.checker->belongs(101, 2000, "a"));
  EXPECT_TRUE(node.checker->belongs(100, 1100, "a"));
  EXPECT_FALSE(node.checker->belongs(101, 2000, "b"));
  EXPECT_FALSE(node.checker->belongs(101, 2001, "a"));
  EXPECT_FALSE(node.checker->belongs(300, 3000, "a"));
  EXPECT_FALSE(node.checker->belongs(101, 2000, "no-such-share"));
}

TEST(OutOfBandChecker, AScribbledPageIsRepairedAndNoLongerBlocksTheShare) {
  Node node("checker-scribbled");
  node.shimmed("a", 100, 0, kGiB, kGiB);
  node.shimmed("b", 200, 0, kGiB, kGiB);
  // Share a's tenant fills its page: 510 fake owners with huge byte counts, a free slot with
  // bytes, a forged copy of share b's process's owner word, the mark reset.
  for (uint32_t i = 1; i < 511; ++i)
    testing::write_slot(node.folder("a"), i, 0x1234500 + i, ~0ull >> 2);
  testing::write_slot(node.folder("a"), 511, FakeProc::owner(200, 1200), 64 * kGiB);
  {
    share::UsagePage* page = nullptr;
    ASSERT_EQ(share::map_usage_page((node.folder("a") / "usage").c_str(), true, page), 0);
    page->slots[300].owner.store(0);  // free, bytes left
    page->slot_high_water.store(0);
    share::unmap_usage_page(page);
  }
  node.checker->check_once();
  const auto corrupt = node.of(FindingKind::kCorruptUsagePage);
  ASSERT_EQ(corrupt.size(), 1u);
  EXPECT_EQ(corrupt[0].share, "a");
  EXPECT_NE(corrupt[0].detail.find("1 free slots hold bytes"), std::string::npos)
      << corrupt[0].detail;
  EXPECT_NE(corrupt[0].detail.find("1 slots name live processes of other pods"), std::string::npos);
  EXPECT_NE(corrupt[0].detail.find("slot_high_water is 0"), std::string::npos);
  const testing::PageCopy page = testing::copy_page(node.folder("a"));
  EXPECT_EQ(page.high_water, 1u);  // only the honest process's slot 0 is left
  uint64_t sum = 0;
  for (uint32_t i = 0; i < page.high_water; ++i) sum += page.bytes[i];
  EXPECT_EQ(sum, kGiB);
  for (uint32_t i = 1; i < share::kMaxSlots; ++i) ASSERT_EQ(page.owners[i], 0u) << i;
  // Share b's page was never touched.
  EXPECT_EQ(testing::copy_page(node.folder("b")).bytes[0], kGiB);
  EXPECT_EQ(node.checker->stats().slots_cleared, 511u);
}

// The compute area as the shim's meter writes it, and as a tenant can (the page is its own).
void write_compute(const fs::path& folder, uint32_t device, uint64_t busy_ns, uint64_t closed_ns,
                   std::optional<int64_t> tokens_ns = std::nullopt, bool open_gate = false) {
  share::UsagePage* page = nullptr;
  ASSERT_EQ(share::map_usage_page((folder / "usage").c_str(), true, page), 0);
  page->compute.devices[device].busy_ns.store(busy_ns);
  page->compute.devices[device].closed_ns.store(closed_ns);
  if (tokens_ns) page->compute.devices[device].tokens_ns.store(*tokens_ns);
  if (open_gate) page->compute.closed_mask.store(0);
  share::unmap_usage_page(page);
}

// Device 0 of <folder>/usage's compute area: its counters, bucket and gate.
share_folder::ComputeDeviceCopy compute_of(const fs::path& folder) {
  return share_folder::read_usage_page((folder / "usage").string()).compute[0];
}

// The compute area is audited like the slots: its cumulative counters only grow, and never by
// more than the time between two passes (the interval of slack for the shim's own period). A lie
// is repaired as the slots are: the counters go back to the last sound reading, and the gates of
// the share's limited devices close with no credit (at most the debt last read), so scribbling
// the area never reopens a gate or wipes a debt.
TEST(OutOfBandChecker, AComputeAreaWhoseCountersGoBackOrOutrunTimeIsRepairedAndNeverOpened) {
  Node node("checker-compute");
  // Share a's limits page limits its cores (30 %): its gate is closed by a repair.
  share_folder::DeviceLimit limited;
  limited.uuid = kGpu;
  limited.memory_limit = 4 * kGiB;
  limited.cores_request = 30;
  ASSERT_EQ(share_folder::write_limits(node.folder("a").string(), {limited}).message(), "");
  node.shimmed("a", 100, 0, kGiB, kGiB);
  node.shimmed("b", 200, 0, kGiB, kGiB);
  constexpr uint64_t kSecond = 1'000'000'000;
  constexpr int64_t kDebt = -5'000'000;  // the share owes 5 ms of GPU time
  ASSERT_NO_FATAL_FAILURE(write_compute(node.folder("a"), 0, 5 * kSecond, kSecond));
  ASSERT_NO_FATAL_FAILURE(write_compute(node.folder("b"), 0, 5 * kSecond, kSecond));
  EXPECT_TRUE(node.checker->check_once().empty()) << "the first reading is the reference";
  // An honest second: both grow by what the time allows (a late write of the shim's included).
  node.clock.advance(std::chrono::seconds(1));
  ASSERT_NO_FATAL_FAILURE(
      write_compute(node.folder("a"), 0, 6 * kSecond, kSecond + kSecond / 2, kDebt));
  ASSERT_NO_FATAL_FAILURE(write_compute(node.folder("b"), 0, 6 * kSecond + kSecond, kSecond));
  EXPECT_TRUE(node.checker->check_once().empty());
  // Share a's tenant winds its GPU time back, fills its bucket and opens its gate; share b's
  // claims 10 s of gate-closed time in 1 s.
  node.clock.advance(std::chrono::seconds(1));
  ASSERT_NO_FATAL_FAILURE(
      write_compute(node.folder("a"), 0, kSecond, 2 * kSecond, 20'000'000, /*open_gate=*/true));
  ASSERT_NO_FATAL_FAILURE(write_compute(node.folder("b"), 0, 7 * kSecond, 11 * kSecond));
  node.checker->check_once();
  const auto corrupt = node.of(FindingKind::kCorruptUsagePage);
  ASSERT_EQ(corrupt.size(), 2u);
  for (const Finding& f : corrupt) {
    if (f.share == "a") {
      EXPECT_EQ(f.detail,
                "compute area device 0 busy_ns went back from 6000000000 to 1000000000: repaired "
                "(counters put back, limited gates closed)");
    } else {
      EXPECT_EQ(f.detail,
                "compute area device 0 closed_ns grew by 10000000000 in 1000000000 ns: repaired "
                "(counters put back, limited gates closed)");
    }
  }
  EXPECT_EQ(node.checker->stats().repairs, 2u);
  const share_folder::ComputeDeviceCopy a = compute_of(node.folder("a"));
  EXPECT_EQ(a.busy_ns, 6 * kSecond);  // the last sound reading
  EXPECT_EQ(a.closed_ns, 2 * kSecond) << "a counter that did not lie is left";
  EXPECT_TRUE(a.closed) << "the gate the tenant opened is closed again";
  EXPECT_EQ(a.tokens_ns, kDebt) << "the credit it gave itself is gone, its debt kept";
  const share_folder::ComputeDeviceCopy b = compute_of(node.folder("b"));
  EXPECT_EQ(b.closed_ns, kSecond);
  EXPECT_EQ(b.busy_ns, 7 * kSecond);
  EXPECT_FALSE(b.closed) << "share b's cores are not limited: its gate is the meter's alone";
  // Each sighting once: counting on from the repaired values is honest again.
  node.handler.findings.clear();
  node.clock.advance(std::chrono::seconds(1));
  ASSERT_NO_FATAL_FAILURE(
      write_compute(node.folder("a"), 0, 6 * kSecond + kSecond / 2, 2 * kSecond + kSecond / 2));
  EXPECT_TRUE(node.checker->check_once().empty());
  // A tenant that cuts its page loses the compute area with it: the page is extended, its
  // counters put back and its gate closed with the debt last read.
  node.clock.advance(std::chrono::seconds(1));
  ASSERT_NO_FATAL_FAILURE(write_compute(node.folder("a"), 0, 7 * kSecond, 3 * kSecond, kDebt * 2));
  EXPECT_TRUE(node.checker->check_once().empty());
  ASSERT_EQ(truncate((node.folder("a") / "usage").c_str(), 32), 0);  // its header cut
  node.checker->check_once();
  ASSERT_EQ(node.of(FindingKind::kCorruptUsagePage).size(), 1u);
  const share_folder::ComputeDeviceCopy cut = compute_of(node.folder("a"));
  EXPECT_EQ(cut.busy_ns, 7 * kSecond);
  EXPECT_EQ(cut.closed_ns, 3 * kSecond);
  EXPECT_TRUE(cut.closed);
  EXPECT_EQ(cut.tokens_ns, kDebt * 2);
  node.handler.findings.clear();
  node.clock.advance(std::chrono::seconds(1));
  EXPECT_TRUE(node.checker->check_once().empty()) << "the repaired page is the reference";
}

TEST(OutOfBandChecker, TruncatedGarbageAndMissingPagesNeitherCrashNorStopTheOthers) {
  Node node("checker-truncated");
  node.shimmed("a", 100, 0, kGiB, kGiB);
  node.shimmed("b", 200, 0, 0, 6 * kGiB);  // share b lies: still caught beside a's broken page
  ASSERT_EQ(truncate((node.folder("a") / "usage").c_str(), 7), 0);
  node.checker->check_once();
  EXPECT_EQ(node.of(FindingKind::kCorruptUsagePage).size(), 1u);
  EXPECT_EQ(node.of(FindingKind::kOverMemoryLimit).size(), 1u);
  EXPECT_EQ(share_folder::read_usage_page((node.folder("a") / "usage").string()).problem,
            share_folder::UsageProblem::kNone);
  // Garbage: random bytes over the whole page, then a FIFO in its place.
  {
    std::ofstream garbage(node.folder("a") / "usage", std::ios::binary | std::ios::trunc);
    for (size_t i = 0; i < sizeof(share::UsagePage); ++i) garbage.put(static_cast<char>(i * 131));
  }
  node.checker->check_once();
  EXPECT_EQ(share_folder::read_usage_page((node.folder("a") / "usage").string()).problem,
            share_folder::UsageProblem::kNone);
  fs::remove(node.folder("a") / "usage");
  ASSERT_EQ(mkfifo((node.folder("a") / "usage").c_str(), 0666), 0);
  node.checker->check_once();
  EXPECT_EQ(share_folder::read_usage_page((node.folder("a") / "usage").string()).problem,
            share_folder::UsageProblem::kNone);
  // A lost GPU: the pass goes on for the others and says why.
  node.gpus.lost.insert(kGpu);
  node.checker->check_once();
  EXPECT_NE(node.checker->stats().last_problem.find("is lost"), std::string::npos);
}

TEST(OutOfBandChecker, GracesDelayMemoryAndCoresFindings) {
  CheckerOptions options;
  options.memory_grace = std::chrono::seconds(2);
  options.cores_grace = std::chrono::seconds(5);
  Node node("checker-grace", options);
  node.shimmed("a", 100, 0, 5 * kGiB, 5 * kGiB);  // over its limit (an honest slot: a bug)
  node.shimmed("b", 200, 0, kGiB, kGiB);
  node.gpus.utilization[kGpu] = {{100, 20}, {200, 70}};  // b: 70 % > burst 50 + 10
  node.checker->check_once();
  EXPECT_TRUE(node.handler.findings.empty());
  node.clock.advance(std::chrono::seconds(2));
  node.checker->check_once();
  const auto over = node.of(FindingKind::kOverMemoryLimit);
  ASSERT_EQ(over.size(), 1u);
  EXPECT_EQ(over[0].host_pid, 100);  // nobody lies: the share's biggest holder
  EXPECT_NE(over[0].detail.find("no slot lies, this process holds the most (5120 MiB)"),
            std::string::npos)
      << over[0].detail;
  EXPECT_TRUE(node.of(FindingKind::kOverCoresLimit).empty());
  node.clock.advance(std::chrono::seconds(3));
  node.checker->check_once();
  const auto cores = node.of(FindingKind::kOverCoresLimit);
  ASSERT_EQ(cores.size(), 1u);
  EXPECT_EQ(cores[0].share, "b");
  EXPECT_EQ(cores[0].host_pid, 200);
  // Back under the burst: the episode ends; over again, the grace starts again.
  node.gpus.utilization[kGpu] = {{200, 40}};
  node.checker->check_once();
  node.gpus.utilization[kGpu] = {{200, 90}};
  node.checker->check_once();
  EXPECT_EQ(node.of(FindingKind::kOverCoresLimit).size(), 1u);
}

// CheckerOptions::claim_pods as the share manager answers it: the pods the API server has for
// each claim (by claim UID), saved into the node's shares as into the checkpoint; an error while
// `failing`. Counts the asks.
struct ApiPods {
  std::map<std::string, std::vector<PodRef>> reserved;
  bool failing = false;
  int asked = 0;
  std::vector<CheckedShare>* saved = nullptr;  // the node's shares (its "checkpoint")
  CheckerOptions options() {
    CheckerOptions options;
    options.claim_pods = [this](const std::string& uid) -> Result<std::vector<PodRef>> {
      ++asked;
      if (failing) return unavailable("cannot get ResourceClaim tenants/claim-a: HTTP 503");
      const auto it = reserved.find(uid);
      if (it == reserved.end()) return not_found("claim " + uid + " is not prepared");
      if (saved)
        for (CheckedShare& share : *saved)
          if (share.claim_uid == uid) share.pods = it->second;
      return it->second;
    };
    return options;
  }
};

constexpr char kPodC[] = "cccccccc-0000-0000-0000-000000000003";

// A process of pod C (a live one, of C's cgroup) with a slot in share a's page.
void slot_of_pod_c(Node& node, int pid, uint32_t slot, uint64_t bytes) {
  node.proc.add(pid, 1000 + pid, testing::pod_cgroup_file(kPodC));
  testing::write_slot(node.folder("a"), slot, FakeProc::owner(pid, 1000 + pid), bytes);
  node.gpus.processes[kGpu].push_back({pid, bytes});
}

TEST(OutOfBandChecker, APodThatJoinedTheSharedClaimKeepsItsSlot) {
  ApiPods api;
  api.reserved["uid-a"] = {{"pod-a", kPodA}, {"pod-c", kPodC}};  // C joined after the prepare
  Node node("checker-joined", api.options());
  api.saved = &node.shares;
  node.shimmed("a", 100, 0, kGiB, kGiB);
  slot_of_pod_c(node, 300, 1, 2 * kGiB);
  EXPECT_TRUE(node.checker->check_once().empty());
  EXPECT_EQ(api.asked, 1);
  const testing::PageCopy page = testing::copy_page(node.folder("a"));
  EXPECT_EQ(page.owners[1], FakeProc::owner(300, 1300));
  EXPECT_EQ(page.bytes[1], 2 * kGiB);
  EXPECT_EQ(node.checker->stats().slots_cleared, 0u);
  EXPECT_TRUE(node.checker->belongs(300, 1300, "a"));
  // Its pods saved, the claim is not asked again; C's process is the share's like A's: over the
  // limit together, C's lie is found.
  node.clock.advance(std::chrono::seconds(10));
  node.gpus.processes[kGpu].back().used_bytes = 4 * kGiB;
  node.checker->check_once();
  EXPECT_EQ(api.asked, 1);
  const auto lies = node.of(FindingKind::kUsageDisagrees);
  ASSERT_EQ(lies.size(), 1u);
  EXPECT_EQ(lies[0].host_pid, 300);
  EXPECT_EQ(lies[0].pod, "tenants/pod-a,pod-c");
  EXPECT_TRUE(node.of(FindingKind::kCorruptUsagePage).empty());
}

// The reconcile loop reads claims from the API server's watch cache, which may lag: a pod the claim
// was found to have, dropped again by such a read, is asked about afresh before its slot is
// touched.
TEST(OutOfBandChecker, AStaleCheckpointNeverClearsAPodTheClaimWasFoundToHave) {
  ApiPods api;
  api.reserved["uid-a"] = {{"pod-a", kPodA}, {"pod-c", kPodC}};
  Node node("checker-stale", api.options());
  api.saved = &node.shares;
  node.shimmed("a", 100, 0, kGiB, kGiB);
  slot_of_pod_c(node, 300, 1, kGiB);
  EXPECT_TRUE(node.checker->check_once().empty());
  EXPECT_EQ(api.asked, 1);
  node.shares[0].pods = {{"pod-a", kPodA}};  // a stale read saved
  for (int second = 1; second <= 6; ++second) {
    node.clock.advance(std::chrono::seconds(1));
    EXPECT_TRUE(node.checker->check_once().empty()) << second;
    EXPECT_EQ(testing::copy_page(node.folder("a")).owners[1], FakeProc::owner(300, 1300));
  }
  EXPECT_EQ(api.asked, 2);  // at 5 s
  EXPECT_EQ(node.shares[0].pods.size(), 2u);
}

TEST(OutOfBandChecker, ASlotOfAPodTheClaimIsNotReservedForIsStillRepaired) {
  ApiPods api;
  api.reserved["uid-a"] = {{"pod-a", kPodA}};
  Node node("checker-foreign-asked", api.options());
  api.saved = &node.shares;
  node.shimmed("a", 100, 0, kGiB, kGiB);
  node.shimmed("b", 200, 0, kGiB, kGiB);
  // Share a's tenant forges share b's process's owner word, and pod C's.
  testing::write_slot(node.folder("a"), 1, FakeProc::owner(200, 1200), 64 * kGiB);
  slot_of_pod_c(node, 300, 2, 0);
  node.checker->check_once();
  EXPECT_EQ(api.asked, 1);  // one ask of claim a answers for both pods
  const auto corrupt = node.of(FindingKind::kCorruptUsagePage);
  ASSERT_EQ(corrupt.size(), 1u);
  EXPECT_EQ(corrupt[0].share, "a");
  EXPECT_NE(corrupt[0].detail.find("2 slots name live processes of other pods"), std::string::npos)
      << corrupt[0].detail;
  const testing::PageCopy page = testing::copy_page(node.folder("a"));
  EXPECT_EQ(page.owners[1], 0u);
  EXPECT_EQ(page.owners[2], 0u);
  EXPECT_EQ(page.owners[0], FakeProc::owner(100, 1100));  // the share's own process keeps its slot
  // Forged again at once: the answer stands (a pod is reserved before it runs), no new ask.
  node.clock.advance(std::chrono::seconds(1));
  testing::write_slot(node.folder("a"), 2, FakeProc::owner(300, 1300), kGiB);
  node.checker->check_once();
  EXPECT_EQ(api.asked, 1);
  EXPECT_EQ(node.of(FindingKind::kCorruptUsagePage).size(), 2u);
  EXPECT_EQ(testing::copy_page(node.folder("a")).owners[2], 0u);
}

TEST(OutOfBandChecker, AnUnansweredPodIsLeftAloneAndTheClaimAskedAtMostOncePerInterval) {
  ApiPods api;
  api.reserved["uid-a"] = {{"pod-a", kPodA}};
  api.failing = true;
  Node node("checker-rate", api.options());
  api.saved = &node.shares;
  node.shimmed("a", 100, 0, kGiB, kGiB);
  slot_of_pod_c(node, 300, 1, kGiB);
  // The API server fails for 12 s, a pass a second: claim a asked at 0, 5 and 10 s only, and the
  // slot neither reported nor cleared meanwhile.
  for (int second = 0; second <= 12; ++second) {
    node.checker->check_once();
    node.clock.advance(std::chrono::seconds(1));
  }
  EXPECT_EQ(api.asked, 3);
  EXPECT_EQ(node.checker->stats().claim_pods_asked, 3u);
  EXPECT_TRUE(node.handler.findings.empty());
  EXPECT_EQ(testing::copy_page(node.folder("a")).owners[1], FakeProc::owner(300, 1300));
  EXPECT_EQ(node.checker->stats().slots_cleared, 0u);
  // Answered (at 15 s): C is not the claim's; its slot goes.
  api.failing = false;
  for (int second = 13; second <= 15; ++second) {
    node.checker->check_once();
    node.clock.advance(std::chrono::seconds(1));
  }
  EXPECT_EQ(api.asked, 4);
  ASSERT_EQ(node.of(FindingKind::kCorruptUsagePage).size(), 1u);
  EXPECT_EQ(testing::copy_page(node.folder("a")).owners[1], 0u);
}

TEST(OutOfBandChecker, AnUnshimmedProcessOfAPodThatJoinedTheClaimIsFound) {
  ApiPods api;
  api.reserved["uid-a"] = {{"pod-a", kPodA}, {"pod-c", kPodC}};
  api.reserved["uid-b"] = {{"pod-b", kPodB}};
  Node node("checker-joined-unshimmed", api.options());
  api.saved = &node.shares;
  node.shimmed("a", 100, 0, kGiB, kGiB);
  node.shimmed("b", 200, 0, kGiB, kGiB);
  node.proc.add(301, 2301, testing::pod_cgroup_file(kPodC));  // C's process without the shim
  node.gpus.processes[kGpu].push_back({301, 5 * kGiB});
  node.checker->check_once();
  const auto unshimmed = node.of(FindingKind::kUnshimmedProcess);
  ASSERT_EQ(unshimmed.size(), 1u);
  EXPECT_EQ(unshimmed[0].host_pid, 301);
  EXPECT_EQ(unshimmed[0].share, "a");
  EXPECT_EQ(api.asked, 1);  // claim a named C: claim b is not asked about a pod a share names
  // Processes of pods the checkpoint names ask nothing.
  node.clock.advance(std::chrono::seconds(10));
  node.checker->check_once();
  EXPECT_EQ(api.asked, 1);
}

// Processes of no share of a GPU: a host process, a pod with no claim there (asked about once per
// claim of the GPU: it might have joined one), a process on a GPU no share names. Each is one
// unaccounted_process finding an episode, with its pid, pod and bytes, summed per GPU; the shares'
// own processes never count.
TEST(OutOfBandChecker, ProcessesOfNoShareAreUnaccountedPerGpu) {
  constexpr char kOtherGpu[] = "GPU-99999999-2222-3333-4444-555555555555";
  ApiPods api;
  api.reserved["uid-a"] = {{"pod-a", kPodA}};
  api.reserved["uid-b"] = {{"pod-b", kPodB}};
  CheckerOptions options = api.options();
  options.node_gpus = [&] { return std::vector<std::string>{kGpu, kOtherGpu}; };
  Node node("checker-unaccounted", options);
  api.saved = &node.shares;
  node.shimmed("a", 100, 0, kGiB, kGiB);
  node.shimmed("b", 200, 0, 3 * kGiB, 3 * kGiB);
  node.proc.add(300, 3000);  // a host process
  node.gpus.processes[kGpu].push_back({300, 2 * kGiB});
  node.proc.add(400, 4000, testing::pod_cgroup_file(kPodC));  // a pod without a claim here
  node.gpus.processes[kGpu].push_back({400, kGiB});
  node.proc.add(500, 5000);
  node.gpus.processes[kOtherGpu].push_back({500, 3 * kGiB});
  node.checker->check_once();
  const auto found = node.of(FindingKind::kUnaccountedProcess);
  ASSERT_EQ(found.size(), 3u);
  EXPECT_EQ(node.handler.findings.size(), 3u);  // nothing of the shares': within their limits
  std::map<int, Finding> by_pid;
  for (const Finding& f : found) by_pid[f.host_pid] = f;
  EXPECT_EQ(by_pid[300].gpu_uuid, kGpu);
  EXPECT_EQ(by_pid[300].bytes, 2 * kGiB);
  EXPECT_EQ(by_pid[300].pod_uid, "");
  EXPECT_EQ(by_pid[300].host_pid_start_time, 3000u);
  EXPECT_NE(by_pid[300].detail.find("a host process"), std::string::npos) << by_pid[300].detail;
  EXPECT_EQ(by_pid[400].pod_uid, kPodC);
  EXPECT_EQ(by_pid[400].share, "");
  EXPECT_EQ(by_pid[400].bytes, kGiB);
  EXPECT_EQ(by_pid[500].gpu_uuid, kOtherGpu);
  EXPECT_EQ(api.asked, 2);  // claims a and b, once: neither has pod C
  std::map<std::string, uint64_t> memory = node.checker->unaccounted_memory();
  EXPECT_EQ(memory[kGpu], 3 * kGiB);
  EXPECT_EQ(memory[kOtherGpu], 3 * kGiB);
  // Once an episode; the figure follows NVML, and a process gone leaves the sum.
  node.clock.advance(std::chrono::seconds(10));
  ASSERT_EQ(node.gpus.processes[kGpu][2].pid, 300);
  node.gpus.processes[kGpu][2].used_bytes = 4 * kGiB;
  node.checker->check_once();
  EXPECT_EQ(node.of(FindingKind::kUnaccountedProcess).size(), 3u);
  EXPECT_EQ(node.checker->unaccounted_memory()[kGpu], 5 * kGiB);
  node.proc.remove(400);
  node.gpus.processes[kGpu].pop_back();
  node.checker->check_once();
  EXPECT_EQ(node.checker->unaccounted_memory()[kGpu], 4 * kGiB);
  // A GPU NVML does not answer for has no figure (not 0).
  node.gpus.lost.insert(kOtherGpu);
  node.checker->check_once();
  EXPECT_EQ(node.checker->unaccounted_memory().count(kOtherGpu), 0u);
}

// A wiped page (zeroed, cut or replaced) does not make its processes nobody's: one that was in the
// page at an earlier pass (same owner word: pid and start time) stays the share's while it is on a
// GPU, neither unaccounted nor unshimmed; the page itself is corrupt_usage_page.
TEST(OutOfBandChecker, AWipedPageLeavesItsProcessesTheSharesNotUnaccounted) {
  CheckerOptions options;
  options.node_gpus = [] { return std::vector<std::string>{kGpu}; };
  Node node("checker-wiped", options);
  // Share a's process is a host process (no pod: tessera run, a test), known by its slot only;
  // share b's is of b's pod.
  node.proc.add(100, 1100);
  testing::write_slot(node.folder("a"), 0, FakeProc::owner(100, 1100), kGiB);
  node.gpus.processes[kGpu].push_back({100, kGiB});
  node.shimmed("b", 200, 0, kGiB, kGiB);
  node.proc.add(300, 3000);  // a host process in no page: unaccounted throughout
  node.gpus.processes[kGpu].push_back({300, 2 * kGiB});
  node.checker->check_once();
  ASSERT_EQ(node.of(FindingKind::kUnaccountedProcess).size(), 1u);
  EXPECT_EQ(node.handler.findings.size(), 1u);
  node.handler.findings.clear();
  // Both pages wiped: zeroed whole (a bad header), then cut, then a FIFO in a's place.
  auto zero = [&](const std::string& share) {
    std::ofstream page(node.folder(share) / "usage", std::ios::binary | std::ios::trunc);
    const std::string zeros(sizeof(share::UsagePage), '\0');
    page.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
  };
  zero("a");
  zero("b");
  for (int wipe = 0; wipe < 3; ++wipe) {
    node.checker->check_once();
    for (const Finding& f : node.handler.findings) {
      EXPECT_NE(f.kind, FindingKind::kUnaccountedProcess) << f.host_pid << ": " << f.detail;
      EXPECT_NE(f.kind, FindingKind::kUnshimmedProcess) << f.host_pid << ": " << f.detail;
    }
    EXPECT_GE(node.of(FindingKind::kCorruptUsagePage).size(), 1u) << "wipe " << wipe;
    EXPECT_EQ(node.checker->unaccounted_memory()[kGpu], 2 * kGiB) << "wipe " << wipe;
    EXPECT_TRUE(node.checker->belongs(100, 1100, "a")) << "wipe " << wipe;
    EXPECT_FALSE(node.checker->belongs(100, 1100, "b"));
    EXPECT_FALSE(node.checker->belongs(100, 1101, "a")) << "another start time is another process";
    node.handler.findings.clear();
    if (wipe == 0) {
      ASSERT_EQ(truncate((node.folder("a") / "usage").c_str(), 100), 0);
    } else if (wipe == 1) {
      fs::remove(node.folder("a") / "usage");
      ASSERT_EQ(mkfifo((node.folder("a") / "usage").c_str(), 0666), 0);
    }
  }
  // A process that left the GPU is forgotten: back on it without a slot, it is nobody's.
  node.gpus.processes[kGpu].erase(node.gpus.processes[kGpu].begin());
  node.checker->check_once();
  node.gpus.processes[kGpu].push_back({100, kGiB});
  node.handler.findings.clear();
  node.checker->check_once();
  const auto unaccounted = node.of(FindingKind::kUnaccountedProcess);
  ASSERT_EQ(unaccounted.size(), 1u);
  EXPECT_EQ(unaccounted[0].host_pid, 100);
}

// An MPS share's control daemon and the MPS server it spawned (its child) hold memory on the
// share's GPU for its clients: they are that share's infrastructure (mps_server_memory()), not
// unaccounted; a child of the daemon on another GPU, or any process once the daemon is gone, is
// judged as every other process.
TEST(OutOfBandChecker, AnMpsSharesDaemonAndServerAreItsInfrastructureNotUnaccounted) {
  constexpr char kOtherGpu[] = "GPU-99999999-2222-3333-4444-555555555555";
  std::vector<MpsDaemon> daemons{{"a", kGpu, 600}};
  CheckerOptions options;
  options.node_gpus = [&] { return std::vector<std::string>{kGpu, kOtherGpu}; };
  options.mps_daemons = [&] { return daemons; };
  Node node("checker-mps", options);
  node.shimmed("a", 100, 0, kGiB, kGiB);  // an MPS client, shimmed as every process of a share
  node.proc.add(600, 6000);               // nvidia-cuda-mps-control -d
  node.gpus.processes[kGpu].push_back({600, 0});
  node.proc.add(601, 6010, "0::/\n", 4026531836, 0, /*parent=*/600);  // nvidia-cuda-mps-server
  node.gpus.processes[kGpu].push_back({601, 40 * kMiB});
  node.proc.add(602, 6020, "0::/\n", 4026531836, 0, /*parent=*/600);  // on a GPU it does not serve
  node.gpus.processes[kOtherGpu].push_back({602, 30 * kMiB});
  node.proc.add(603, 6030);  // a host process
  node.gpus.processes[kGpu].push_back({603, kGiB});
  node.checker->check_once();
  std::set<int> unaccounted;
  for (const Finding& f : node.of(FindingKind::kUnaccountedProcess)) unaccounted.insert(f.host_pid);
  EXPECT_EQ(unaccounted, (std::set<int>{602, 603}));
  EXPECT_EQ(node.handler.findings.size(), 2u);
  EXPECT_EQ(node.checker->unaccounted_memory()[kGpu], kGiB);
  EXPECT_EQ(node.checker->unaccounted_memory()[kOtherGpu], 30 * kMiB);
  const std::map<std::string, uint64_t> mps = node.checker->mps_server_memory();
  EXPECT_EQ(mps, (std::map<std::string, uint64_t>{{kGpu, 40 * kMiB}}));
  // The daemon gone (the share unprepared), a server left behind is nobody's.
  daemons.clear();
  node.handler.findings.clear();
  node.checker->check_once();
  const auto left = node.of(FindingKind::kUnaccountedProcess);
  ASSERT_EQ(left.size(), 2u);  // the daemon (0 bytes) and its server; 602 and 603 reported before
  EXPECT_EQ(node.checker->unaccounted_memory()[kGpu], kGiB + 40 * kMiB);
  EXPECT_TRUE(node.checker->mps_server_memory().empty());
}

TEST(OutOfBandChecker, CheckedSharesComeFromCompletedClaimsWithTheirPods) {
  Checkpoint checkpoint;
  ShareSpec spec;
  spec.claim_uid = "uid-1";
  spec.device = "gpu-0";
  spec.share_id = "s";
  spec.uuid = kGpu;
  spec.memory_bytes = 4 * kGiB;
  spec.cores = 30;
  spec.config.cores_limit = 60;
  spec.config.memory_limit = 6 * kGiB;  // above the 4 GiB request: 2 GiB may be borrowed
  checkpoint["uid-1"] = {"tenants", "pair", ClaimState::kPrepareCompleted, {spec}, {{"p", "u"}}};
  checkpoint["uid-2"] = {"tenants", "half", ClaimState::kPrepareStarted, {spec}, {}};
  const std::vector<CheckedShare> shares = checked_shares(checkpoint, "/state/shares");
  ASSERT_EQ(shares.size(), 1u);
  EXPECT_EQ(shares[0].name, "uid-1-gpu-0-s");
  EXPECT_EQ(shares[0].folder, "/state/shares/uid-1-gpu-0-s");
  EXPECT_EQ(shares[0].memory_limit, 6 * kGiB) << "the limit, not the request, is the wall";
  EXPECT_EQ(shares[0].memory_request, 4 * kGiB) << "above it, reclaim may evict";
  EXPECT_EQ(shares[0].cores_limit, 60u);
  ASSERT_EQ(shares[0].pods.size(), 1u);
  EXPECT_EQ(shares[0].pods[0].uid, "u");
}

}  // namespace
}  // namespace tessera::agent

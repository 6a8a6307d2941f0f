// Reclaim (docs/node-agent.md, "Reclaim"): the pure choice of victims (plan_reclaim), the checker
// reading reclaim requests from usage pages as untrusted input on a fake /proc and NVML, and the
// enforcement handler killing a reclaim eviction whatever the share's policy.
#include "enforcement/reclaim.h"

#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "enforcement/checker.h"
#include "enforcement/enforcement_handler.h"
#include "enforcement/fake_node.h"
#include "tessera/share_region.h"

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;
using testing::FakeProc;

constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kMargin = 256 * kMiB;
constexpr char kGpu[] = "GPU-11111111-2222-3333-4444-555555555555";

std::vector<int> victim_pids(const ReclaimPlan& plan) {
  std::vector<int> pids;
  for (const ReclaimVictim& victim : plan.victims) pids.push_back(victim.process.pid);
  return pids;
}

// The issue's GPU of 12 GiB: A (request 6 GiB) holds its 500 MiB context and asks for 5.5 GiB
// more; B (request 2 GiB, limit 8 GiB) holds 8 GiB in two processes, the older 2 GiB and the
// newer 6 GiB; 3.5 GiB free.
std::vector<ReclaimShare> issue_shares() {
  return {{"a", 6 * kGiB, 512 * kMiB, {{100, 3000, 512 * kMiB}}},
          {"b", 2 * kGiB, 8 * kGiB, {{200, 1000, 2 * kGiB}, {201, 2000, 6 * kGiB}}}};
}

TEST(PlanReclaim, TheNewestBorrowingProcessGivesBackWhatTheRequesterIsShort) {
  const ReclaimPlan plan = plan_reclaim({"a", 5632 * kMiB}, 3584 * kMiB, issue_shares(), kMargin);
  EXPECT_EQ(victim_pids(plan), std::vector<int>{201});
  ASSERT_EQ(plan.victims.size(), 1u);
  EXPECT_EQ(plan.victims[0].share, "b");
  EXPECT_EQ(plan.shortage, 2 * kGiB);
  EXPECT_EQ(plan.freed, 6 * kGiB);
  EXPECT_EQ(plan.reason,
            "the GPU lacks 2048 MiB of the 5632 MiB asked; evicting 1 borrowing process(es), "
            "newest first, frees 6144 MiB");
}

TEST(PlanReclaim, NeverMoreThanTheShortageNeeds) {
  // B borrows 7 GiB in three processes; the GPU lacks 1.5 GiB: the two newest (1 GiB each) do,
  // the oldest stays.
  const std::vector<ReclaimShare> shares = {
      {"a", 6 * kGiB, 0, {}},
      {"b", 2 * kGiB, 9 * kGiB, {{200, 1000, 7 * kGiB}, {201, 2000, kGiB}, {202, 3000, kGiB}}}};
  const ReclaimPlan plan = plan_reclaim({"a", 2 * kGiB}, 512 * kMiB, shares, kMargin);
  EXPECT_EQ(victim_pids(plan), (std::vector<int>{202, 201}));
  EXPECT_EQ(plan.freed, 2 * kGiB);
}

TEST(PlanReclaim, AShareWithinItsRequestIsNeverEvictedEvenWithTheNewestProcess) {
  std::vector<ReclaimShare> shares = issue_shares();
  // C holds exactly its request, with the newest process of the GPU.
  shares.push_back({"c", 4 * kGiB, 4 * kGiB, {{300, 9000, 4 * kGiB}}});
  const ReclaimPlan plan = plan_reclaim({"a", 5632 * kMiB}, 3584 * kMiB, shares, kMargin);
  EXPECT_EQ(victim_pids(plan), std::vector<int>{201});
  // Nor the requester's own processes, whatever their age.
  for (const ReclaimVictim& victim : plan.victims) EXPECT_NE(victim.share, "a");
}

TEST(PlanReclaim, ABorrowerBackWithinItsRequestIsLeftAlone) {
  // B borrows 1 GiB: its newest (2 GiB) takes it back to 1 GiB of its 2 GiB request, so its
  // older one stays; D's newest follows, though it is older than B's older one.
  const std::vector<ReclaimShare> shares = {
      {"a", 8 * kGiB, 0, {}},
      {"b", 2 * kGiB, 3 * kGiB, {{200, 5000, kGiB}, {201, 6000, 2 * kGiB}}},
      {"d", kGiB, 4 * kGiB, {{400, 1000, kGiB}, {401, 2000, 3 * kGiB}}}};
  const ReclaimPlan plan = plan_reclaim({"a", 4 * kGiB}, kGiB, shares, kMargin);
  EXPECT_EQ(victim_pids(plan), (std::vector<int>{201, 401}));
}

TEST(PlanReclaim, NobodyForARequesterAboveItsRequest) {
  // B asks (its page is its own to write): it holds 8 GiB of its 2 GiB request.
  const ReclaimPlan plan = plan_reclaim({"b", kGiB}, 0, issue_shares(), kMargin);
  EXPECT_TRUE(plan.victims.empty());
  EXPECT_EQ(plan.reason,
            "the share is not within its request: it holds 8192 MiB and asks for 1024 MiB more, "
            "its request is 2048 MiB");
  // A asking for more than its request leaves it: nobody either.
  EXPECT_TRUE(plan_reclaim({"a", 6 * kGiB}, 0, issue_shares(), kMargin).victims.empty());
}

TEST(PlanReclaim, NobodyWhenTheGpuHasTheMemory) {
  const ReclaimPlan plan = plan_reclaim({"a", 2 * kGiB}, 3584 * kMiB, issue_shares(), kMargin);
  EXPECT_TRUE(plan.victims.empty());
  EXPECT_EQ(plan.shortage, 0u);
}

TEST(PlanReclaim, NobodyWhenTheBorrowersCannotCoverTheShortage) {
  // Only 1 GiB is borrowed (B holds 3 GiB of 2): evicting it would not give A its 4 GiB.
  const std::vector<ReclaimShare> shares = {{"a", 6 * kGiB, 0, {}},
                                            {"b", 2 * kGiB, 3 * kGiB, {{201, 2000, 3 * kGiB}}}};
  const ReclaimPlan plan = plan_reclaim({"a", 4 * kGiB}, 0, shares, kMargin);
  EXPECT_TRUE(plan.victims.empty());
  EXPECT_EQ(plan.shortage, 4 * kGiB);
}

TEST(PlanReclaim, NobodyForAShareNotOnTheGpuOrAnEmptyRequest) {
  EXPECT_TRUE(plan_reclaim({"z", kGiB}, 0, issue_shares(), kMargin).victims.empty());
  EXPECT_TRUE(plan_reclaim({"a", 0}, 0, issue_shares(), kMargin).victims.empty());
}

// ---- The checker with reclaim requests in the pages ---------------------------------------------

// Shares of one fake GPU (12 GiB): a (request = limit 6 GiB), b (request 2 GiB, limit 8 GiB),
// c (request = limit 4 GiB); shimmed processes found through their pages' owner words.
struct ReclaimNode {
  fs::path base;
  FakeProc proc;
  testing::FakeGpus gpus;
  testing::RecordingHandler handler;
  SimulatedClock clock;
  std::vector<CheckedShare> shares;
  std::unique_ptr<OutOfBandChecker> checker;

  explicit ReclaimNode(const std::string& name, CheckerOptions options = {})
      : base(testing::fresh_folder(name)), proc(base / "proc") {
    struct Spec {
      const char* name;
      uint64_t request, limit;
    };
    for (const Spec& spec : {Spec{"a", 6 * kGiB, 6 * kGiB}, Spec{"b", 2 * kGiB, 8 * kGiB},
                             Spec{"c", 4 * kGiB, 4 * kGiB}}) {
      CheckedShare share;
      share.name = spec.name;
      share.folder = (base / "shares" / spec.name).string();
      share.uuid = kGpu;
      share.memory_limit = spec.limit;
      if (spec.request < spec.limit) share.memory_request = spec.request;
      share.claim_namespace = "tenants";
      share.claim_name = std::string("claim-") + spec.name;
      share.claim_uid = std::string("uid-") + spec.name;
      testing::make_share_folder(share.folder, kGpu, spec.limit);
      shares.push_back(share);
    }
    gpus.free[kGpu] = 3584 * kMiB;
    options.proc_root = proc.root().string();
    checker = std::make_unique<OutOfBandChecker>(
        options, [this] { return shares; }, gpus, handler, clock);
  }
  ~ReclaimNode() { fs::remove_all(base); }
  fs::path folder(const std::string& share) const { return base / "shares" / share; }
  // A shimmed process of `share` holding `bytes` (NVML); its slot says `reserved` more (an
  // allocation reserved that the driver has not given yet).
  void shimmed(const std::string& share, int pid, uint32_t slot, uint64_t bytes,
               uint64_t reserved = 0) {
    proc.add(pid, 1000 + pid);
    testing::write_slot(folder(share), slot, FakeProc::owner(pid, 1000 + pid), bytes + reserved);
    gpus.processes[kGpu].push_back({pid, bytes});
  }
  // The issue's node: a's process 100 (its context, and the 5.5 GiB it waits for reserved in its
  // slot), b's older 200 (2 GiB) and newer 201 (6 GiB).
  void issue() {
    shimmed("a", 100, 0, 512 * kMiB, 5632 * kMiB);
    shimmed("b", 200, 0, 2 * kGiB);
    shimmed("b", 201, 1, 6 * kGiB);
  }
  // What a shim writes while it waits (UsagePage::reclaim_*).
  void ask(const std::string& share, uint64_t owner, uint64_t bytes, uint32_t device = 0) {
    share::UsagePage* page = nullptr;
    ASSERT_EQ(share::map_usage_page((folder(share) / "usage").c_str(), true, page), 0);
    page->reclaim_owner.store(owner);
    page->reclaim_device.store(device);
    page->reclaim_at_ns.store(123456789);
    page->reclaim_bytes.store(bytes);
    share::unmap_usage_page(page);
  }
  std::vector<Finding> evictions() const {
    std::vector<Finding> out;
    for (const Finding& f : handler.findings)
      if (f.kind == FindingKind::kReclaimEviction) out.push_back(f);
    return out;
  }
};

TEST(OutOfBandChecker, AReclaimRequestWithinTheRequestEvictsTheNewestBorrowerOnce) {
  ReclaimNode node("reclaim-issue");
  node.issue();
  node.ask("a", FakeProc::owner(100, 1100), 5632 * kMiB);
  node.checker->check_once();
  const std::vector<Finding> evicted = node.evictions();
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0].host_pid, 201);
  EXPECT_EQ(evicted[0].host_pid_start_time, 1201u);
  EXPECT_EQ(evicted[0].share, "b");
  EXPECT_EQ(evicted[0].reclaimed_for, "a");  // the requester: its pods get a GpuReclaim Event
  EXPECT_EQ(evicted[0].gpu_uuid, kGpu);
  EXPECT_EQ(evicted[0].detail,
            "share a (claim tenants/claim-a) is within its memory request (holds 512 MiB of "
            "6144 MiB) and asked for 5632 MiB; the GPU lacks 2048 MiB of the 5632 MiB asked; "
            "evicting 1 borrowing process(es), newest first, frees 6144 MiB; this process's "
            "share holds 8192 MiB, above its request of 2048 MiB, and this process 6144 MiB");
  EXPECT_EQ(node.checker->stats().reclaim_requests, 1u);
  EXPECT_EQ(node.checker->stats().reclaim_evictions, 1u);
  // The waiting process's slot says 5.5 GiB more than NVML: its reservation in flight, not a lie
  // (no usage_disagrees, the slot is not "repaired" down).
  EXPECT_EQ(node.handler.findings.size(), 1u);
  EXPECT_EQ(testing::copy_page(node.folder("a")).bytes[0], 6144 * kMiB);
  // The request is still up (the shim waits) and NVML still lists the victim: its bytes are on
  // their way back, nobody else goes.
  node.handler.findings.clear();
  node.checker->check_once();
  EXPECT_TRUE(node.evictions().empty());
  // Gone: the GPU has the memory, the request is met.
  std::erase_if(node.gpus.processes[kGpu], [](const auto& p) { return p.pid == 201; });
  node.proc.remove(201);
  node.gpus.free[kGpu] = 9728 * kMiB;
  node.checker->check_once();
  EXPECT_TRUE(node.evictions().empty());
  EXPECT_EQ(node.checker->stats().reclaim_requests, 1u);  // the same request, read again
}

TEST(OutOfBandChecker, AForgedReclaimRequestEvictsNobody) {
  ReclaimNode node("reclaim-forged");
  node.issue();
  // b asks, above its request.
  node.ask("b", FakeProc::owner(201, 1201), kGiB);
  node.checker->check_once();
  EXPECT_TRUE(node.evictions().empty());
  EXPECT_EQ(node.checker->stats().last_reclaim,
            "b: the share is not within its request: it holds 8192 MiB and asks for 1024 MiB "
            "more, its request is 2048 MiB");
  // a asks for what the GPU has free.
  node.ask("b", 0, 0);
  node.ask("a", FakeProc::owner(100, 1100), 3 * kGiB);
  node.checker->check_once();
  EXPECT_TRUE(node.evictions().empty());
  EXPECT_EQ(node.checker->stats().last_reclaim,
            "a: the GPU has 3584 MiB free, the request asks for 3072 MiB");
  // a asks more than its request leaves it.
  node.ask("a", FakeProc::owner(100, 1100), 6 * kGiB);
  node.checker->check_once();
  EXPECT_TRUE(node.evictions().empty());
  // a's page names an owner that is no process of a (b's newer process), or nobody living.
  node.ask("a", FakeProc::owner(201, 1201), 5632 * kMiB);
  node.checker->check_once();
  node.ask("a", FakeProc::owner(777, 1777), 5632 * kMiB);
  node.checker->check_once();
  EXPECT_TRUE(node.evictions().empty());
  EXPECT_EQ(node.checker->stats().last_reclaim,
            "a: its owner word names no process of the share on the GPU");
  // A request for another device of the page (a names one GPU).
  node.ask("a", FakeProc::owner(100, 1100), 5632 * kMiB, 3);
  node.checker->check_once();
  EXPECT_TRUE(node.evictions().empty());
  // NVML does not tell the free memory: nobody.
  node.gpus.free.clear();
  node.ask("a", FakeProc::owner(100, 1100), 5632 * kMiB);
  node.checker->check_once();
  EXPECT_TRUE(node.evictions().empty());
}

TEST(OutOfBandChecker, AShareWithinItsRequestIsNeverEvictedByReclaim) {
  ReclaimNode node("reclaim-within");
  // b borrows only 1 GiB (3 GiB of 2) in one process; c holds its whole request in the newest
  // process of the GPU; the GPU lacks 2 GiB for a: evicting b's process alone would not do, and
  // c's is never a victim, so nobody goes.
  node.shimmed("a", 100, 0, 512 * kMiB);
  node.shimmed("b", 201, 0, 3 * kGiB);
  node.shimmed("c", 300, 0, 4 * kGiB);
  node.gpus.free[kGpu] = 3584 * kMiB - 2 * kGiB;
  node.ask("a", FakeProc::owner(100, 1100), 5632 * kMiB);
  node.checker->check_once();
  EXPECT_TRUE(node.evictions().empty());
  // With b borrowing 6 GiB in its newest process, b's goes and c's stays.
  node.shimmed("b", 202, 1, 6 * kGiB);
  node.checker->check_once();
  const std::vector<Finding> evicted = node.evictions();
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0].host_pid, 202);
}

TEST(OutOfBandChecker, ANewReclaimRequestRunsAPassBeforeTheInterval) {
  CheckerOptions options;
  options.interval = std::chrono::seconds(1);
  options.reclaim_watch = std::chrono::milliseconds(100);
  ReclaimNode node("reclaim-watch", options);
  node.issue();
  ASSERT_EQ(node.checker->start().message(), "");
  ASSERT_TRUE(node.checker->wait_for_loop_passes(1));  // the pass at once
  EXPECT_TRUE(node.evictions().empty());
  node.ask("a", FakeProc::owner(100, 1100), 5632 * kMiB);
  // 100 ms of the checker's clock: the watch reads the request and asks for a pass, 900 ms
  // before the interval's.
  node.clock.advance(std::chrono::milliseconds(100));
  ASSERT_TRUE(node.checker->wait_for_loop_passes(2));
  node.checker->stop();
  const std::vector<Finding> evicted = node.evictions();
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0].host_pid, 201);
}

// ---- The handler: a reclaim eviction is killed whatever the policy ---------------------------

TEST(EnforcementHandler, AReclaimEvictionIsKilledWhateverThePolicyAndCountedPerGpu) {
  std::vector<int> signalled;
  std::vector<std::string> lines;
  EnforcementHandlerOptions options;
  options.default_policy = vgpu_config::EnforcementPolicy::kReport;
  options.belongs = [](int, uint64_t, const std::string&) { return true; };
  options.send_kill = [&](int pid) {
    signalled.push_back(pid);
    return 0;
  };
  options.log = [&](const std::string& line) { lines.push_back(line); };
  EnforcementHandler handler(options);
  Finding finding;
  finding.kind = FindingKind::kReclaimEviction;
  finding.host_pid = 4242;
  finding.host_pid_start_time = 77;
  finding.share = "b";
  finding.claim_namespace = "tenants";
  finding.claim_name = "claim-b";
  finding.claim_uid = "uid-b";
  finding.gpu_uuid = kGpu;
  finding.detail = "evicted";
  handler.handle(finding);
  EXPECT_EQ(signalled, std::vector<int>{4242});
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0],
            std::string("finding reclaim_eviction: pid 4242, share b, claim tenants/claim-b "
                        "(uid-b), pod -, gpu ") +
                kGpu + ": evicted; reclaim: killed (SIGKILL)");
  EXPECT_EQ(handler.reclaim_evictions().at(kGpu), 1u);
  EXPECT_EQ(handler.counters().count(FindingKind::kReclaimEviction), 1u);
  // Not proven to be the share's: not killed, not counted as an eviction.
  options.belongs = [](int, uint64_t, const std::string&) { return false; };
  EnforcementHandler doubtful(options);
  doubtful.handle(finding);
  EXPECT_EQ(signalled.size(), 1u);
  EXPECT_TRUE(doubtful.reclaim_evictions().empty());
}

}  // namespace
}  // namespace tessera::agent

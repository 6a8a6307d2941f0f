// The compute controller and meter under simulated time (docs/compute.md). A fluid model of a
// time-sliced GPU runs tenants whose launching threads obey their share's gate; each share's
// meter measures through a fake NVML (busy time rounded to whole percents of each window, as
// nvmlDeviceGetProcessUtilization reports it) and runs the real controller on real share pages.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compute/controller.h"
#include "compute/meter.h"
#include "compute/priority_board.h"

namespace tessera::vgpu::compute {
namespace {

constexpr int64_t kUs = 1000;

TEST(ComputeController, StartsFromTheSavedBalanceThenClosesOnDebtAndReopensAtTheRate) {
  Config config;
  config.request_percent = 25;
  config.cap_ns = 4 * kMillisecond;
  State state;
  state.tokens_ns = 9 * kMillisecond;  // saved by a previous leader: kept within the cap
  Decision d = step(config, state, Sample{0, 0, 0, false});
  EXPECT_TRUE(d.open);
  EXPECT_EQ(state.tokens_ns, 4 * kMillisecond);
  // 10 ms pass, the share used all of it: +2.5 ms refill, -10 ms: 4 + 2.5 - 10 = -3.5 ms.
  d = step(config, state, Sample{10 * kMillisecond, 10 * kMillisecond, 0, false});
  EXPECT_FALSE(d.open);
  EXPECT_EQ(state.tokens_ns, -3500 * kUs);
  // At 25% the debt takes 14 ms to refill.
  EXPECT_EQ(d.reopen_at_ns, 24 * kMillisecond);
  d = step(config, state, Sample{24 * kMillisecond, 0, 0, false});
  EXPECT_FALSE(d.open);  // exactly zero: still closed
  d = step(config, state, Sample{25 * kMillisecond, 0, 0, false});
  EXPECT_TRUE(d.open);
}

TEST(ComputeController, CapAndDebtAreBounded) {
  Config config;
  config.request_percent = 50;
  config.cap_ns = 10 * kMillisecond;
  config.max_debt_ns = 100 * kMillisecond;
  State state;
  Decision first = step(config, state, Sample{0, 0, 0, false});
  EXPECT_FALSE(first.open);  // a new share starts with an empty bucket: it opens as it refills
  step(config, state, Sample{kSecond, 0, 0, false});  // idle for a second
  EXPECT_EQ(state.tokens_ns, 10 * kMillisecond);
  step(config, state, Sample{kSecond + kMillisecond, 5 * kSecond, 0, false});  // a glitch
  EXPECT_EQ(state.tokens_ns, -100 * kMillisecond);
}

TEST(ComputeController, SpareRaisesTheRateUpToTheLimitAndHigherPriorityStopsIt) {
  Config config;
  config.request_percent = 30;
  config.limit_percent = 60;
  State state;
  step(config, state, Sample{0, 0, 0, false});
  // No spare known (an agent that has not measured yet): the request.
  Decision d = step(config, state, Sample{5 * kMillisecond, 0, 0, false});
  EXPECT_EQ(d.rate_percent, 30u);
  d = step(config, state, Sample{10 * kMillisecond, 0, 0, false, 10});
  EXPECT_EQ(d.rate_percent, 40u);
  d = step(config, state, Sample{15 * kMillisecond, 0, 0, false, 70});
  EXPECT_EQ(d.rate_percent, 60u);  // at most the limit
  d = step(config, state, Sample{20 * kMillisecond, 0, 0, false, 0});
  EXPECT_EQ(d.rate_percent, 30u);  // never below the request
  d = step(config, state, Sample{25 * kMillisecond, 0, 0, true, 70});
  EXPECT_EQ(d.rate_percent, 0u);
  EXPECT_FALSE(d.open);
  EXPECT_TRUE(d.yielding);
  // Others' time is a flag for the counters; it does not change the rate.
  d = step(config, state, Sample{30 * kMillisecond, 0, 5 * kMillisecond, false, 70});
  EXPECT_TRUE(d.others_active);
  EXPECT_EQ(d.rate_percent, 60u);
}

TEST(ComputeController, BestEffortRunsOnlyOnSpareTime) {
  Config config;
  config.request_percent = 0;
  config.limit_percent = 100;
  State state;
  step(config, state, Sample{0, 0, 0, false, 0});
  Decision d = step(config, state, Sample{5 * kMillisecond, 0, 0, false, 0});
  EXPECT_EQ(d.rate_percent, 0u);  // nothing spare: closed, not bumped to 1 %
  EXPECT_FALSE(d.open);
  d = step(config, state, Sample{10 * kMillisecond, 0, 0, false, kSpareUnknown});
  EXPECT_EQ(d.rate_percent, 0u);  // nothing known: the request, 0
  d = step(config, state, Sample{15 * kMillisecond, 0, 0, false, 40});
  EXPECT_EQ(d.rate_percent, 40u);
  d = step(config, state, Sample{20 * kMillisecond, 0, 0, false, 100});
  EXPECT_EQ(d.rate_percent, 100u);
  EXPECT_TRUE(d.open);
}

// The spare: 100 less the requests of the active shares (the share itself included), split
// equally among those whose limit is above their request, water-filled.
TEST(ComputeController, SparePartsSplitWhatTheRequestsLeave) {
  const Claim best_effort{0, 100};
  const Claim guaranteed60{60, 60};
  const Claim burstable{30, 60};
  EXPECT_EQ(spare_part(best_effort, nullptr, 0), 100u);       // alone: everything
  EXPECT_EQ(spare_part(burstable, nullptr, 0), 30u);          // alone: up to its limit
  EXPECT_EQ(spare_part(guaranteed60, nullptr, 0), 0u);        // wants nothing more
  EXPECT_EQ(spare_part(best_effort, &guaranteed60, 1), 40u);  // beside a guaranteed 60
  EXPECT_EQ(spare_part(guaranteed60, &best_effort, 1), 0u);
  // Burstable 30/60 and best-effort: 70 spare, 35 each, the burstable capped at 30: 40 left.
  EXPECT_EQ(spare_part(best_effort, &burstable, 1), 40u);
  EXPECT_EQ(spare_part(burstable, &best_effort, 1), 30u);
  // Two best-effort shares beside a guaranteed 60: 20 each.
  const Claim two[] = {guaranteed60, best_effort};
  EXPECT_EQ(spare_part(best_effort, two, 2), 20u);
  // Requests adding up to 100 or more: nothing spare; a share never gets less than its request
  // (current_rate), whatever the spare.
  const Claim full[] = {Claim{70, 70}, Claim{40, 100}};
  EXPECT_EQ(spare_part(best_effort, full, 2), 0u);
  EXPECT_EQ(spare_part(burstable, full, 2), 0u);
  // A limit below the request means the request; values above 100 are 100.
  EXPECT_EQ(spare_part(Claim{50, 10}, nullptr, 0), 0u);
  EXPECT_EQ(spare_part(Claim{0, 250}, nullptr, 0), 100u);
  // Three unequal headrooms: 90 spare among 5, 20 and 100: 5, then 20, then the rest, 65.
  const Claim three[] = {Claim{5, 10}, Claim{5, 25}};
  EXPECT_EQ(spare_part(best_effort, three, 2), 65u);
  EXPECT_EQ(spare_part(Claim{5, 25}, std::vector<Claim>{Claim{5, 10}, best_effort}.data(), 2), 20u);
  // Whole percents, rounded down: 100 among three best-effort shares is 33 each.
  const Claim pair[] = {best_effort, best_effort};
  EXPECT_EQ(spare_part(best_effort, pair, 2), 33u);
}

// ---- the simulated GPU ----------------------------------------------------------------------

struct Pages {
  Pages() {
    limits.reset(new share::LimitsPage());
    usage.reset(new share::UsagePage());
    share::init_limits_page(*limits);
    share::init_usage_page(*usage);
    std::snprintf(limits->devices[0].uuid, share::kUuidBytes, "GPU-sim");
    limits->device_count.store(1);
  }
  std::unique_ptr<share::LimitsPage> limits;
  std::unique_ptr<share::UsagePage> usage;
};

struct Tenant;

// Fake NVML: what each share used since its meter's last look, rounded to whole percents of
// the window like nvmlDeviceGetProcessUtilization's smUtil.
class FakeSource final : public BusySource {
 public:
  explicit FakeSource(Tenant* tenant, std::vector<std::unique_ptr<Tenant>>* all)
      : tenant_(tenant), all_(all) {}
  bool measure(int, int64_t now_ns, Busy* out) override;
  void reset() override { last_ns_ = -1; }

 private:
  Tenant* tenant_;
  std::vector<std::unique_ptr<Tenant>>* all_;
  int64_t last_ns_ = -1;
  std::vector<int64_t> seen_;
};

// The board's state for the in-memory mode: priority levels and one claim per active share.
struct MemoryBoardState {
  int64_t until[3] = {0, 0, 0};
  struct Entry {
    int64_t until_ns = 0;
    Claim claim;
    uint32_t priority = 0;
  };
  std::map<uint64_t, Entry> entries;  // by share identity
};

// One share's view of it (as each share has its own UserBoard on one file).
class MemoryBoard final : public PriorityBoard {
 public:
  MemoryBoard(MemoryBoardState* state, uint64_t identity) : state_(state), identity_(identity) {}
  void announce(int, uint32_t priority, int64_t until_ns) override {
    int64_t& slot = state_->until[priority_rank(priority)];
    if (until_ns > slot) slot = until_ns;
  }
  bool higher_active(int, uint32_t priority, int64_t now_ns) override {
    for (int rank = priority_rank(priority) + 1; rank < 3; ++rank) {
      if (state_->until[rank] > now_ns) return true;
    }
    return false;
  }
  uint32_t spare(int, uint32_t priority, const Claim& own, bool active, int64_t now_ns,
                 int64_t until_ns) override {
    if (active) state_->entries[identity_] = {until_ns, own, priority};
    std::vector<Claim> others;
    for (const auto& [identity, entry] : state_->entries) {
      if (identity != identity_ && entry.until_ns > now_ns &&
          priority_rank(entry.priority) == priority_rank(priority))
        others.push_back(entry.claim);
    }
    return spare_part(own, others.data(), others.size());
  }

 private:
  MemoryBoardState* state_;
  uint64_t identity_;
};

bool always_alive(uint64_t, void*) {
  return true;
}

struct Tenant {
  Pages pages;
  std::unique_ptr<MemoryBoard> memory_board;  // this share's view of the in-memory board
  std::unique_ptr<UserBoard> user_board;      // or of the per-user board file
  std::unique_ptr<LimitsYield> agent_yield;   // or of the agent's yield_mask and spare
  int64_t agent_seen_busy_ns = 0;             // the simulated agent's last look
  int64_t agent_active_until_ns = 0;
  std::vector<std::unique_ptr<FakeSource>> sources;
  std::vector<std::unique_ptr<Meter>> meters;  // one per process of the share
  std::vector<bool> meter_alive;
  int64_t kernel_ns = 50 * kUs;
  int queue_kernels = 16;  // the launcher keeps this many kernels queued while the gate is open
  int64_t queue_ns = 0;
  int64_t busy_ns = 0;
  int64_t started_ns = 0;
  int64_t stopped_ns = INT64_MAX;
  int64_t next_tick_ns = 0;
  int64_t launches = 0;
  bool wants(int64_t now) const { return now >= started_ns && now < stopped_ns; }
};

bool FakeSource::measure(int, int64_t now_ns, Busy* out) {
  if (seen_.size() != all_->size()) seen_.assign(all_->size(), 0);
  if (last_ns_ < 0) {
    last_ns_ = now_ns;
    for (size_t i = 0; i < all_->size(); ++i) seen_[i] = (*all_)[i]->busy_ns;
    return false;
  }
  const int64_t window = now_ns - last_ns_;
  *out = Busy{};
  for (size_t i = 0; i < all_->size(); ++i) {
    const int64_t used = (*all_)[i]->busy_ns - seen_[i];
    seen_[i] = (*all_)[i]->busy_ns;
    // smUtil: whole percent of the window, rounded to nearest.
    const int64_t percent = window > 0 ? (used * 100 + window / 2) / window : 0;
    const int64_t reported = percent * window / 100;
    ((*all_)[i].get() == tenant_ ? out->share_ns : out->others_ns) += reported;
  }
  last_ns_ = now_ns;
  return true;
}

// Where the shares' priority signal comes from: an in-memory board, the per-user board file
// (`tessera run` without an agent), or the agent's yield_mask in each limits page.
enum class BoardMode { kMemory, kUserFile, kAgent };

class SimulatedGpu {
 public:
  explicit SimulatedGpu(BoardMode mode = BoardMode::kMemory) : mode_(mode) {
    if (mode_ == BoardMode::kUserFile) {
      board_dir_ = (std::filesystem::temp_directory_path() /
                    ("compute-board-sim-" + std::to_string(getpid())))
                       .string();
      std::filesystem::remove_all(board_dir_);
      std::filesystem::create_directories(board_dir_);
    }
  }
  ~SimulatedGpu() {
    tenants_.clear();
    if (!board_dir_.empty()) std::filesystem::remove_all(board_dir_);
  }
  SimulatedGpu(const SimulatedGpu&) = delete;
  SimulatedGpu& operator=(const SimulatedGpu&) = delete;

  Tenant& add(uint32_t request, uint32_t limit = 0, uint32_t priority = share::kPriorityNormal,
              int processes = 1) {
    tenants_.push_back(std::make_unique<Tenant>());
    Tenant& t = *tenants_.back();
    t.pages.limits->devices[0].cores_request.store(request);
    t.pages.limits->devices[0].cores_limit.store(limit);
    t.pages.limits->priority.store(priority);
    const uint64_t identity = tenants_.size();
    t.memory_board = std::make_unique<MemoryBoard>(&board_, identity);
    PriorityBoard* board = t.memory_board.get();
    if (mode_ == BoardMode::kUserFile) {
      t.user_board =
          std::make_unique<UserBoard>(t.pages.limits.get(), board_dir_.c_str(), identity);
      board = t.user_board.get();
    } else if (mode_ == BoardMode::kAgent) {
      t.pages.limits->measure_source.store(share::kMeasureAgent);
      t.agent_yield = std::make_unique<LimitsYield>(t.pages.limits.get());
      board = t.agent_yield.get();
    }
    for (int p = 0; p < processes; ++p) {
      t.sources.push_back(std::make_unique<FakeSource>(&t, &tenants_));
      t.meters.push_back(
          std::make_unique<Meter>(t.pages.limits.get(), t.pages.usage.get(), t.sources.back().get(),
                                  board, static_cast<uint64_t>(p + 1), always_alive, nullptr));
      t.meter_alive.push_back(true);
    }
    // Meters start at different phases, as processes do.
    t.next_tick_ns = static_cast<int64_t>(tenants_.size()) * 1300 * kUs;
    return t;
  }

  // Runs until `end_ns` in steps of `dt`; round robin is modelled as an equal split of each step
  // between the tenants that have work queued.
  void run_until(int64_t end_ns, int64_t dt = 10 * kUs) {
    for (; now_ < end_ns; now_ += dt) {
      if (mode_ == BoardMode::kAgent && now_ % (20 * kMillisecond) == 0) agent_pass();
      for (auto& tenant : tenants_) {
        Tenant& t = *tenant;
        while (t.next_tick_ns <= now_) {
          for (size_t p = 0; p < t.meters.size(); ++p) {
            if (!t.meter_alive[p]) continue;
            Meter& meter = *t.meters[p];
            if (meter.lead(t.next_tick_ns)) meter.tick(t.next_tick_ns);
          }
          t.next_tick_ns += 5 * kMillisecond;
        }
        const bool open = (t.pages.usage->compute.closed_mask.load() & 1) == 0;
        if (t.wants(now_) && open) {
          while (t.queue_ns < t.queue_kernels * t.kernel_ns) {
            t.queue_ns += t.kernel_ns;
            ++t.launches;
          }
        }
        t.pages.usage->slots[0].launches.store(static_cast<uint64_t>(t.launches));
        t.pages.usage->slot_high_water.store(1);
        t.pages.usage->slots[0].owner.store(1);
      }
      int active = 0;
      for (auto& t : tenants_) active += t->queue_ns > 0 ? 1 : 0;
      if (active == 0) continue;
      const int64_t each = dt / active;
      for (auto& t : tenants_) {
        if (t->queue_ns <= 0) continue;
        const int64_t ran = std::min(each, t->queue_ns);
        t->queue_ns -= ran;
        t->busy_ns += ran;
      }
    }
  }

  int64_t now() const { return now_; }
  std::vector<std::unique_ptr<Tenant>>& tenants() { return tenants_; }

 private:
  // The node agent's part (GpuTimeMeter, every 20 ms): a share that used the GPU since the last
  // pass is active for 100 ms; a share yields while a share of higher priority is active; each
  // share's part of the spare among the active shares of its priority.
  void agent_pass() {
    for (auto& t : tenants_) {
      if (t->busy_ns != t->agent_seen_busy_ns) t->agent_active_until_ns = now_ + 100 * kMillisecond;
      t->agent_seen_busy_ns = t->busy_ns;
    }
    auto claim = [](const Tenant& t) {
      return Claim{t.pages.limits->devices[0].cores_request.load(),
                   t.pages.limits->devices[0].cores_limit.load()};
    };
    for (auto& t : tenants_) {
      const int rank = priority_rank(t->pages.limits->priority.load());
      bool yield = false;
      std::vector<Claim> others;
      for (auto& other : tenants_) {
        if (other == t || other->agent_active_until_ns <= now_) continue;
        const int other_rank = priority_rank(other->pages.limits->priority.load());
        yield = yield || other_rank > rank;
        if (other_rank == rank) others.push_back(claim(*other));
      }
      t->pages.limits->yield_mask.store(yield ? 1 : 0);
      t->pages.limits->requests[0].spare_percent.store(
          spare_part(claim(*t), others.data(), others.size()));
    }
  }

  BoardMode mode_;
  std::string board_dir_;
  std::vector<std::unique_ptr<Tenant>> tenants_;
  MemoryBoardState board_;
  int64_t now_ = 0;
};

// Busy share (percent of wall time) of each tenant over [from, to).
std::vector<double> shares_between(SimulatedGpu& gpu, int64_t from, int64_t to) {
  gpu.run_until(from);
  std::vector<int64_t> before;
  for (auto& t : gpu.tenants()) before.push_back(t->busy_ns);
  gpu.run_until(to);
  std::vector<double> shares;
  for (size_t i = 0; i < gpu.tenants().size(); ++i) {
    shares.push_back(100.0 * static_cast<double>(gpu.tenants()[i]->busy_ns - before[i]) /
                     static_cast<double>(to - from));
  }
  return shares;
}

struct Scenario {
  std::vector<uint32_t> quotas;
  int64_t kernel_ns;
  int processes;
};

class SimulatedShares : public ::testing::TestWithParam<Scenario> {};

TEST_P(SimulatedShares, EachShareGetsItsQuotaWithinOnePoint) {
  const Scenario& scenario = GetParam();
  SimulatedGpu gpu;
  for (uint32_t quota : scenario.quotas) {
    Tenant& t = gpu.add(quota, 0, share::kPriorityNormal, scenario.processes);
    t.kernel_ns = scenario.kernel_ns;
    t.queue_kernels = scenario.kernel_ns >= kMillisecond ? 2 : 16;
  }
  const std::vector<double> shares = shares_between(gpu, 1 * kSecond, 11 * kSecond);
  for (size_t i = 0; i < shares.size(); ++i) {
    EXPECT_NEAR(shares[i], scenario.quotas[i], 1.0) << "tenant " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Quotas, SimulatedShares,
                         ::testing::Values(Scenario{{10}, 50 * kUs, 1}, Scenario{{30}, 50 * kUs, 1},
                                           Scenario{{50}, 50 * kUs, 1}, Scenario{{90}, 50 * kUs, 1},
                                           Scenario{{30}, 5 * kMillisecond, 1},
                                           Scenario{{30, 70}, 50 * kUs, 1},
                                           Scenario{{30, 70}, 5 * kMillisecond, 1},
                                           Scenario{{10, 20, 30, 40}, 50 * kUs, 1},
                                           Scenario{{10, 20, 30, 40}, 5 * kMillisecond, 1},
                                           Scenario{{30, 70}, 50 * kUs, 3}));

TEST(SimulatedShares, BurstableUsesSpareTimeAndFallsBackToItsRequest) {
  SimulatedGpu gpu;
  Tenant& bursting = gpu.add(30, 100);
  Tenant& other = gpu.add(70);
  other.started_ns = 5 * kSecond;
  std::vector<double> alone = shares_between(gpu, 1 * kSecond, 5 * kSecond);
  EXPECT_GT(alone[0], 90.0);
  // From one second after the other tenant started, the bursting one is back at its request.
  std::vector<double> shared = shares_between(gpu, 6 * kSecond, 9 * kSecond);
  EXPECT_NEAR(shared[0], 30.0, 3.0);
  EXPECT_NEAR(shared[1], 70.0, 3.0);
  (void)bursting;
}

// ---- classes (docs/compute.md, Classes), through each source of the spare ----------------------

class ClassModes : public ::testing::TestWithParam<BoardMode> {};

// A guaranteed 60 beside a best-effort share, both burning: 60 and the rest. The best-effort share
// starts first and has the GPU; the guaranteed one takes its 60 back within a second.
TEST_P(ClassModes, GuaranteedSixtyBesideBestEffort) {
  SimulatedGpu gpu(GetParam());
  gpu.add(0, 100);
  Tenant& guaranteed = gpu.add(60, 60);
  guaranteed.started_ns = 2 * kSecond;
  const std::vector<double> alone = shares_between(gpu, 500 * kMillisecond, 2 * kSecond);
  EXPECT_GT(alone[0], 98.0);
  const std::vector<double> both = shares_between(gpu, 3 * kSecond, 9 * kSecond);
  EXPECT_NEAR(both[1], 60.0, 1.0);
  EXPECT_NEAR(both[0], 40.0, 1.5);
}

TEST_P(ClassModes, BestEffortAloneHasTheGpu) {
  SimulatedGpu gpu(GetParam());
  gpu.add(0, 100);
  const std::vector<double> alone = shares_between(gpu, 1 * kSecond, 5 * kSecond);
  EXPECT_GT(alone[0], 99.0);
}

TEST_P(ClassModes, BurstableAloneReachesItsLimit) {
  SimulatedGpu gpu(GetParam());
  gpu.add(30, 60);
  const std::vector<double> alone = shares_between(gpu, 1 * kSecond, 6 * kSecond);
  EXPECT_NEAR(alone[0], 60.0, 1.0);
}

// Burstable 30/60 beside best-effort: 70 spare, the burstable capped at +30, the rest (40) to the
// best-effort share. When the burstable stops, the best-effort share has the whole GPU again.
TEST_P(ClassModes, BurstableAndBestEffortSplitTheSpare) {
  SimulatedGpu gpu(GetParam());
  Tenant& burstable = gpu.add(30, 60);
  gpu.add(0, 100);
  burstable.stopped_ns = 6 * kSecond;
  const std::vector<double> both = shares_between(gpu, 1 * kSecond, 6 * kSecond);
  EXPECT_NEAR(both[0], 60.0, 1.5);
  EXPECT_NEAR(both[1], 40.0, 1.5);
  const std::vector<double> after = shares_between(gpu, 6500 * kMillisecond, 8 * kSecond);
  EXPECT_GT(after[1], 98.0);
}

// Two guaranteed shares that fill the GPU leave nothing: a best-effort share beside them gets
// (almost) nothing, and never takes time from them.
TEST_P(ClassModes, BestEffortNeverTakesFromSharesWithinTheirRequests) {
  SimulatedGpu gpu(GetParam());
  gpu.add(0, 100);
  gpu.add(30, 30);
  gpu.add(70, 70);
  const std::vector<double> shares = shares_between(gpu, 1 * kSecond, 6 * kSecond);
  EXPECT_LT(shares[0], 1.0);
  EXPECT_NEAR(shares[1], 30.0, 1.0);
  EXPECT_NEAR(shares[2], 70.0, 1.0);
}

INSTANTIATE_TEST_SUITE_P(SimulatedShares, ClassModes,
                         ::testing::Values(BoardMode::kMemory, BoardMode::kUserFile,
                                           BoardMode::kAgent),
                         [](const ::testing::TestParamInfo<BoardMode>& mode) {
                           return mode.param == BoardMode::kMemory ? std::string("MemoryBoard")
                                  : mode.param == BoardMode::kUserFile
                                      ? std::string("UserBoardFile")
                                      : std::string("AgentSpare");
                         });

class PriorityModes : public ::testing::TestWithParam<BoardMode> {};

TEST_P(PriorityModes, LowerPriorityYieldsWhileHigherIsActive) {
  SimulatedGpu gpu(GetParam());
  Tenant& high = gpu.add(100, 0, share::kPriorityHigh);
  Tenant& low = gpu.add(100, 0, share::kPriorityLow);
  high.started_ns = 1 * kSecond;
  high.stopped_ns = 4 * kSecond;
  std::vector<double> before = shares_between(gpu, 200 * kMillisecond, 1 * kSecond);
  EXPECT_GT(before[1], 98.0);  // alone, the low share has the GPU
  std::vector<double> during = shares_between(gpu, 1100 * kMillisecond, 4 * kSecond);
  EXPECT_GT(during[0], 99.0);
  EXPECT_LT(during[1], 1.0);
  std::vector<double> after = shares_between(gpu, 4200 * kMillisecond, 5 * kSecond);
  EXPECT_GT(after[1], 98.0);
  (void)high;
  (void)low;
}

INSTANTIATE_TEST_SUITE_P(SimulatedShares, PriorityModes,
                         ::testing::Values(BoardMode::kMemory, BoardMode::kUserFile,
                                           BoardMode::kAgent),
                         [](const ::testing::TestParamInfo<BoardMode>& mode) {
                           return mode.param == BoardMode::kMemory ? std::string("MemoryBoard")
                                  : mode.param == BoardMode::kUserFile
                                      ? std::string("UserBoardFile")
                                      : std::string("AgentYieldMask");
                         });

TEST(SimulatedShares, AnotherProcessTakesTheLeadWhenTheLeaderStops) {
  SimulatedGpu gpu;
  Tenant& t = gpu.add(30, 0, share::kPriorityNormal, 2);
  gpu.run_until(1 * kSecond);
  const uint64_t first = t.pages.usage->compute.meter_owner.load();
  ASSERT_NE(first, 0u);
  t.meter_alive[first - 1] = false;  // the leader's process dies
  gpu.run_until(2 * kSecond);
  const uint64_t second = t.pages.usage->compute.meter_owner.load();
  EXPECT_NE(second, first);
  EXPECT_EQ(t.pages.usage->compute.meter_terms.load(), 2u);
  const std::vector<double> shares = shares_between(gpu, 2 * kSecond, 6 * kSecond);
  EXPECT_NEAR(shares[0], 30.0, 1.0);
}

TEST(AgentSource, DifferencesCumulativeFiguresAndSurvivesRestarts) {
  Pages pages;
  AgentSource source(pages.limits.get());
  Busy busy;
  EXPECT_FALSE(source.measure(0, 0, &busy));  // nothing published
  auto& m = pages.limits->measured[0];
  m.share_busy_ns.store(100);
  m.others_busy_ns.store(50);
  m.sampled_at_ns.store(1000);
  EXPECT_FALSE(source.measure(0, 0, &busy));  // primes
  m.share_busy_ns.store(400);
  m.others_busy_ns.store(80);
  m.sampled_at_ns.store(2000);
  ASSERT_TRUE(source.measure(0, 0, &busy));
  EXPECT_EQ(busy.share_ns, 300);
  EXPECT_EQ(busy.others_ns, 30);
  ASSERT_TRUE(source.measure(0, 0, &busy));  // nothing new: zero
  EXPECT_EQ(busy.share_ns, 0);
  m.share_busy_ns.store(10);  // the agent restarted: counters went back
  m.sampled_at_ns.store(3000);
  EXPECT_FALSE(source.measure(0, 0, &busy));
  m.share_busy_ns.store(25);
  m.sampled_at_ns.store(4000);
  ASSERT_TRUE(source.measure(0, 0, &busy));
  EXPECT_EQ(busy.share_ns, 15);
  // Read between the agent's store of the sums and its store of the time: nothing yet, and the
  // window is counted in full once its time appears (not lost).
  m.share_busy_ns.store(125);
  ASSERT_TRUE(source.measure(0, 0, &busy));
  EXPECT_EQ(busy.share_ns, 0);
  m.sampled_at_ns.store(5000);
  ASSERT_TRUE(source.measure(0, 0, &busy));
  EXPECT_EQ(busy.share_ns, 100);
}

// A fixed source for the devices OwnSource does not time.
class FixedSource final : public BusySource {
 public:
  bool measure(int, int64_t, Busy* out) override {
    *out = Busy{7, 3};
    return true;
  }
  void reset() override { ++resets; }
  int resets = 0;
};

TEST(OwnSource, DifferencesTheSlotsOnTimedDevicesAndAsksTheOtherSourceElsewhere) {
  Pages pages;
  FixedSource nvml;
  std::atomic<uint64_t> timed{0b01};  // device 0 timed by the processes, device 1 by NVML
  OwnSource source(pages.usage.get(), &nvml, &timed);
  share::UsagePage& usage = *pages.usage;
  usage.slot_high_water.store(2);
  usage.slots[0].generation.store(1);
  usage.slots[0].gpu_busy_ns.store(500);  // before the first look: not this leader's window
  Busy busy;
  EXPECT_FALSE(source.measure(0, 10, &busy));  // primes
  ASSERT_TRUE(source.measure(1, 10, &busy));   // the other source, untouched
  EXPECT_EQ(busy.share_ns, 7);
  usage.slots[0].gpu_busy_ns.store(800);
  usage.slots[1].generation.store(1);  // a process claimed the second slot and ran 40 ns
  usage.slots[1].gpu_busy_ns.store(40);
  ASSERT_TRUE(source.measure(0, 20, &busy));
  EXPECT_EQ(busy.share_ns, 300 + 40);
  EXPECT_EQ(busy.others_ns, 0);               // unknown on a timed device
  ASSERT_TRUE(source.measure(0, 20, &busy));  // the same tick again: the same window
  EXPECT_EQ(busy.share_ns, 340);
  // The first slot was released and claimed again (zeroed at the claim): all of it is new.
  usage.slots[0].generation.store(2);
  usage.slots[0].gpu_busy_ns.store(25);
  ASSERT_TRUE(source.measure(0, 30, &busy));
  EXPECT_EQ(busy.share_ns, 25);
  ASSERT_TRUE(source.measure(0, 40, &busy));  // nothing ran
  EXPECT_EQ(busy.share_ns, 0);
  // A new leader starts its own windows: the first look primes again, the other source resets.
  source.reset();
  EXPECT_EQ(nvml.resets, 1);
  usage.slots[0].gpu_busy_ns.store(100);
  EXPECT_FALSE(source.measure(0, 50, &busy));
  usage.slots[0].gpu_busy_ns.store(130);
  ASSERT_TRUE(source.measure(0, 60, &busy));
  EXPECT_EQ(busy.share_ns, 30);
}

TEST(OwnSource, AProcessOnOneTimedDeviceIsChargedThereOnly) {
  Pages pages;
  std::atomic<uint64_t> timed{0b11};  // two timed devices (two MIG instances in one share)
  OwnSource source(pages.usage.get(), nullptr, &timed);
  share::UsagePage& usage = *pages.usage;
  usage.slot_high_water.store(2);
  usage.slots[0].generation.store(1);
  usage.slots[0].contexts.store(share::pack_contexts(1, 1, 500ull << 20));  // on device 1
  usage.slots[1].generation.store(1);  // says nothing about its contexts: charged on both
  Busy busy;
  EXPECT_FALSE(source.measure(0, 10, &busy));
  usage.slots[0].gpu_busy_ns.store(100);
  usage.slots[1].gpu_busy_ns.store(7);
  ASSERT_TRUE(source.measure(0, 20, &busy));
  EXPECT_EQ(busy.share_ns, 7);
  ASSERT_TRUE(source.measure(1, 20, &busy));
  EXPECT_EQ(busy.share_ns, 107);
  // Contexts on both devices: the slot cannot say which, each timed device is charged all of it.
  usage.slots[0].contexts.store(share::kContextsUnmeasurable << 4);
  usage.slots[0].gpu_busy_ns.store(150);
  ASSERT_TRUE(source.measure(0, 30, &busy));
  EXPECT_EQ(busy.share_ns, 50);
  ASSERT_TRUE(source.measure(1, 30, &busy));
  EXPECT_EQ(busy.share_ns, 50);
}

}  // namespace
}  // namespace tessera::vgpu::compute

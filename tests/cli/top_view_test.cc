// `tessera top`: the renderer (fits its size, bars proportional, sorted, truncated with "+N more")
// and the loops, driven by a fake screen and a fake clock.
#include "views/top_view.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <deque>

#include "node_fixture.h"

namespace tessera::cli {
namespace {

using namespace tessera::cli::testing;
namespace v1 = tessera::node::v1;

class TopRender : public ::testing::Test {
 protected:
  void SetUp() override { setenv("TZ", "UTC", 1), tzset(); }
};

// The share lines of a screen, in order: those after the share header.
std::vector<std::string> share_lines(const std::vector<std::string>& screen) {
  const auto header = std::find_if(screen.begin(), screen.end(), [](const std::string& line) {
    return line.rfind("SHARE ", 0) == 0;
  });
  EXPECT_NE(header, screen.end());
  return {header == screen.end() ? screen.end() : header + 1, screen.end()};
}

// The number of '#' in the first bar of `line`, and the bar's inside width.
std::pair<int, int> bar_of(const std::string& line) {
  const size_t open = line.find('[');
  const size_t close = line.find(']', open);
  if (open == std::string::npos || close == std::string::npos) return {-1, -1};
  const std::string inside = line.substr(open + 1, close - open - 1);
  return {static_cast<int>(std::count(inside.begin(), inside.end(), '#')),
          static_cast<int>(inside.size())};
}

void expect_fits(const std::vector<std::string>& screen, const TopLayout& size) {
  EXPECT_LE(static_cast<int>(screen.size()), size.height);
  for (const std::string& line : screen) {
    EXPECT_LE(static_cast<int>(line.size()), size.width) << "'" << line << "'";
    for (char c : line) EXPECT_TRUE(c >= ' ' && c <= '~') << "not printable ASCII: " << line;
  }
}

v1::ListSharesResponse two_shares(double alpha_seconds = 0, double beta_seconds = 0,
                                  double alpha_throttled = 0) {
  v1::ListSharesResponse node;
  add_gpu(node, "GPU-aaaa", 6 * kGiB, 16 * kGiB, 45);
  add_share(node, "alpha", "GPU-aaaa", 3 * kGiB, 4 * kGiB, 30, alpha_seconds, alpha_throttled,
            {"compute-burn", "compute-burn"});
  add_share(node, "beta", "GPU-aaaa", 1 * kGiB, 8 * kGiB, 60, beta_seconds, 0, {"memory-fill"});
  return node;
}

TEST_F(TopRender, At80x24ItShowsHeaderGpusAndShares) {
  const Snapshot before = snapshot_of(two_shares(10.0, 20.0, 1.0), kSampledAt - 1000);
  const Snapshot now = snapshot_of(two_shares(10.3, 20.6, 1.25));
  const TopLayout size{80, 24, TopSort::kMemory};
  const std::vector<std::string> screen = render_top(now, &before, size);
  expect_fits(screen, size);
  ASSERT_GE(screen.size(), 9u);
  EXPECT_EQ(screen[0].rfind("tessera top - gpu-node-1 - 22:13:20", 0), 0u) << screen[0];
  EXPECT_NE(screen[0].find("source: local"), std::string::npos);
  EXPECT_EQ(screen[1].rfind("1 GPU, 2 shares, 3 processes", 0), 0u) << screen[1];
  EXPECT_EQ(screen[3].rfind("GPU NAME", 0), 0u);
  EXPECT_EQ(screen[4].rfind("0   NVIDIA H200", 0), 0u) << screen[4];
  EXPECT_NE(screen[4].find("6Gi/16Gi"), std::string::npos);
  EXPECT_NE(screen[4].find(" 45% "), std::string::npos);
  const std::vector<std::string> shares = share_lines(screen);
  ASSERT_EQ(shares.size(), 2u);
  EXPECT_EQ(shares[0].rfind("alpha ", 0), 0u);
  EXPECT_NE(shares[0].find(" 3Gi/4Gi "), std::string::npos) << shares[0];
  EXPECT_NE(shares[0].find(" 30/30% "), std::string::npos) << shares[0];  // 0.3 s in 1 s
  EXPECT_NE(shares[0].find(" 25% "), std::string::npos) << shares[0];     // throttled
  EXPECT_NE(shares[0].find(" 2 compute-burn"), std::string::npos) << shares[0];
  EXPECT_EQ(shares[1].rfind("beta ", 0), 0u);
  EXPECT_NE(shares[1].find(" 1Gi/8Gi "), std::string::npos) << shares[1];
  EXPECT_NE(shares[1].find(" 60/60% "), std::string::npos) << shares[1];
  EXPECT_NE(shares[1].find(" 1 memory-fill"), std::string::npos) << shares[1];
}

// A GPU in MIG mode: its line (no utilisation: NVML has none in MIG mode), a line per instance
// under it (GI id, profile, its memory, the shares inside it; '!' when unhealthy), and each share
// inside an instance on "<gpu>/gi<id>" with its bar over its own limit.
TEST_F(TopRender, MigInstancesAreListedUnderTheirGpuAndSharesNameTheirInstance) {
  v1::ListSharesResponse node;
  v1::Gpu& gpu = add_gpu(node, "GPU-aaaa", 20 * kGiB, 141 * kGiB, 0);
  add_mig_instance(gpu, 1, "3g.71gb", 6 * kGiB, 71168 * kMiB);
  v1::MigInstance& sick = add_mig_instance(gpu, 12, "1g.18gb", 0, 16 * kGiB);
  sick.set_healthy(false);
  sick.set_health_reason("xid-94: contained ECC error");
  add_gpu(node, "GPU-bbbb", 0, 141 * kGiB, 45);
  add_share(node, "in-3g", node.gpus(0).mig_instances(0).uuid(), 4 * kGiB, 8 * kGiB, 30);
  add_share(node, "whole", "GPU-bbbb", 2 * kGiB, 8 * kGiB, 10);
  const TopLayout size{80, 24, TopSort::kMemory};
  const std::vector<std::string> screen = render_top(snapshot_of(node), nullptr, size);
  expect_fits(screen, size);
  ASSERT_GE(screen.size(), 12u);
  EXPECT_EQ(screen[1].rfind("2 GPUs, 2 shares", 0), 0u) << screen[1];
  EXPECT_EQ(screen[4].rfind("0   NVIDIA H200", 0), 0u) << screen[4];
  EXPECT_NE(screen[4].find(" 20Gi/141Gi    - "), std::string::npos) << screen[4];
  EXPECT_EQ(screen[5].rfind("     gi1 3g.71gb", 0), 0u) << screen[5];
  EXPECT_NE(screen[5].find("   6Gi/70Gi    -      1       -"), std::string::npos) << screen[5];
  EXPECT_EQ(bar_of(screen[5]).first, std::lround(bar_of(screen[5]).second * 6.0 / 69.5))
      << "6 GiB of 69.5: " << screen[5];
  EXPECT_EQ(screen[6].rfind("    !gi12 1g.18gb", 0), 0u) << screen[6];
  EXPECT_NE(screen[6].find(" 0/16Gi    -      0       -"), std::string::npos) << screen[6];
  EXPECT_EQ(screen[7].rfind("1   NVIDIA H200", 0), 0u) << screen[7];
  EXPECT_NE(screen[7].find(" 45% "), std::string::npos) << screen[7];
  const std::vector<std::string> shares = share_lines(screen);
  ASSERT_EQ(shares.size(), 2u);
  EXPECT_EQ(shares[0].rfind("in-3g          0/gi1 [", 0), 0u) << shares[0];
  EXPECT_EQ(bar_of(shares[0]).first * 2, bar_of(shares[0]).second) << "4 of 8 GiB: " << shares[0];
  EXPECT_EQ(shares[1].rfind("whole          1     [", 0), 0u) << shares[1];
  // Cut to a small screen, whole GPUs (with their instances) are shown and the rest counted.
  const TopLayout small{80, 10, TopSort::kMemory};
  const std::vector<std::string> cut = render_top(snapshot_of(node), nullptr, small);
  expect_fits(cut, small);
  EXPECT_NE(std::find(cut.begin(), cut.end(), "+2 more GPUs"), cut.end())
      << "one row for GPUs: the first GPU and its instances need three";
}

// OUTSIDE: the memory processes of no share hold on the GPU (the agent's checks), "-" when the
// snapshot does not know it (the local mode, checks off).
TEST_F(TopRender, TheGpuLineShowsTheMemoryOutsideEveryShareWhereKnown) {
  v1::ListSharesResponse node;
  add_gpu(node, "GPU-aaaa", 6 * kGiB, 16 * kGiB, 0).set_unaccounted_memory_bytes(2 * kGiB);
  add_gpu(node, "GPU-bbbb", 0, 16 * kGiB, 0);
  const TopLayout size{80, 24, TopSort::kMemory};
  const std::vector<std::string> screen = render_top(snapshot_of(node), nullptr, size);
  expect_fits(screen, size);
  ASSERT_GE(screen.size(), 6u);
  EXPECT_NE(screen[3].find(" SHARES OUTSIDE"), std::string::npos) << screen[3];
  EXPECT_EQ(screen[4].substr(screen[4].size() - 8), "     2Gi") << screen[4];
  EXPECT_EQ(screen[5].substr(screen[5].size() - 8), "       -") << screen[5];
}

TEST_F(TopRender, BarsAreProportionalToUsedOverLimit) {
  v1::ListSharesResponse node;
  add_gpu(node, "GPU-aaaa", 4 * kGiB, 16 * kGiB, 0);
  add_share(node, "empty", "GPU-aaaa", 0, 4 * kGiB, 100);
  add_share(node, "quarter", "GPU-aaaa", 1 * kGiB, 4 * kGiB, 100);
  add_share(node, "half", "GPU-aaaa", 2 * kGiB, 4 * kGiB, 100);
  add_share(node, "full", "GPU-aaaa", 4 * kGiB, 4 * kGiB, 100);
  add_share(node, "unlimited", "GPU-aaaa", 8 * kGiB, 0, 100);  // against the GPU's 16Gi
  for (int width : {80, 120, 200}) {
    const TopLayout size{width, 24, TopSort::kName};
    const std::vector<std::string> screen = render_top(snapshot_of(node), nullptr, size);
    expect_fits(screen, size);
    const std::vector<std::string> shares = share_lines(screen);
    ASSERT_EQ(shares.size(), 5u);
    const auto [empty, inside] = bar_of(shares[0]);
    EXPECT_EQ(empty, 0);
    EXPECT_GE(inside, 14);
    EXPECT_EQ(bar_of(shares[1]).first, inside);                         // full
    EXPECT_EQ(bar_of(shares[2]).first, (inside + 1) / 2);               // half
    EXPECT_EQ(bar_of(shares[3]).first, (inside * 1 + 2) / 4);           // quarter, rounded
    EXPECT_EQ(bar_of(shares[4]).first, (inside + 1) / 2) << shares[4];  // unlimited: 8 of 16Gi
    EXPECT_NE(shares[4].find(" 8Gi/- "), std::string::npos) << shares[4];
    // The GPU's bar: 4 of 16Gi.
    const auto [gpu_filled, gpu_inside] = bar_of(screen[4]);
    EXPECT_EQ(gpu_filled, (gpu_inside + 2) / 4);
  }
}

TEST_F(TopRender, SortsByTheKeyAskedFor) {
  const Snapshot before = snapshot_of(two_shares(10.0, 20.0, 0), kSampledAt - 1000);
  v1::ListSharesResponse node = two_shares(10.3, 20.6, 0.9);
  add_share(node, "gamma", "GPU-aaaa", 2 * kGiB, 4 * kGiB, 10);
  const Snapshot now = snapshot_of(node);
  auto order = [&](TopSort sort) {
    std::string names;
    for (const std::string& line : share_lines(render_top(now, &before, {80, 24, sort})))
      names += line.substr(0, line.find(' ')) + " ";
    return names;
  };
  EXPECT_EQ(order(TopSort::kMemory), "alpha gamma beta ");     // 3, 2, 1 Gi
  EXPECT_EQ(order(TopSort::kCores), "beta alpha gamma ");      // 60, 30, gamma has no rate: 0
  EXPECT_EQ(order(TopSort::kThrottled), "alpha beta gamma ");  // 90%, then ties by name
  EXPECT_EQ(order(TopSort::kName), "alpha beta gamma ");
}

TEST_F(TopRender, ManySharesAreCutWithACountOfTheRest) {
  v1::ListSharesResponse node;
  add_gpu(node, "GPU-aaaa", 0, 141 * kGiB, 0);
  add_gpu(node, "GPU-bbbb", 0, 141 * kGiB, 0);
  for (int i = 0; i < 40; ++i)
    add_share(node, std::string("share-") + std::to_string(100 + i),
              i % 2 ? "GPU-aaaa" : "GPU-bbbb", static_cast<uint64_t>(i) * kMiB, 4 * kGiB, 100);
  const TopLayout size{80, 24, TopSort::kMemory};
  const std::vector<std::string> screen = render_top(snapshot_of(node), nullptr, size);
  expect_fits(screen, size);
  EXPECT_EQ(screen.size(), 24u);
  // 24 lines: 6 fixed, 2 GPUs, 15 shares and the count of the 25 others.
  const std::vector<std::string> shares = share_lines(screen);
  ASSERT_EQ(shares.size(), 16u);
  EXPECT_EQ(shares[0].rfind("share-139 ", 0), 0u);  // the largest first
  EXPECT_EQ(shares.back().rfind("+25 more shares (sorted by memory", 0), 0u) << shares.back();
  // Taller, all of them; no height (plain output), all of them too.
  EXPECT_EQ(share_lines(render_top(snapshot_of(node), nullptr, {80, 60, TopSort::kMemory})).size(),
            40u);
  EXPECT_EQ(share_lines(render_top(snapshot_of(node), nullptr, {80, 0, TopSort::kMemory})).size(),
            40u);
}

TEST_F(TopRender, ManyGpusLeaveRoomForShares) {
  v1::ListSharesResponse node;
  for (int g = 0; g < 16; ++g)
    add_gpu(node, std::string("GPU-") + std::to_string(g), 0, 141 * kGiB, 0);
  for (int i = 0; i < 10; ++i)
    add_share(node, std::string("s") + std::to_string(i), "GPU-3", kGiB, 4 * kGiB, 50);
  const TopLayout size{80, 24, TopSort::kName};
  const std::vector<std::string> screen = render_top(snapshot_of(node), nullptr, size);
  expect_fits(screen, size);
  EXPECT_NE(std::find(screen.begin(), screen.end(), "+11 more GPUs"), screen.end());
  const std::vector<std::string> shares = share_lines(screen);
  ASSERT_EQ(shares.size(), 10u);  // 6 GPU lines leave 12 for the 10 shares
  EXPECT_EQ(shares[0].rfind("s0 ", 0), 0u);
}

TEST_F(TopRender, LongNamesUnknownGpusAndProblemsStayInsideTheWidth) {
  v1::ListSharesResponse node;
  add_share(node, "tessera-run-0123456789abcdef", "GPU-without-nvml", 5 * kGiB, 0, 100, 0, 0,
            {"a-process-with-a-long-name", "python3", "python3", "torchrun"});
  add_share(node, "broken", "GPU-without-nvml", 0, kGiB, 100)
      .set_read_error(
          "usage page is truncated (1000 of 99520 bytes): "
          "/tmp/a/folder/deep/down/where/paths/go/broken/usage");
  Snapshot now = snapshot_of(node);
  const TopLayout size{80, 24, TopSort::kMemory};
  const std::vector<std::string> screen = render_top(now, nullptr, size);
  expect_fits(screen, size);
  const std::vector<std::string> shares = share_lines(screen);
  ASSERT_EQ(shares.size(), 3u);
  EXPECT_EQ(shares[0].rfind("tessera~abcdef ? ", 0), 0u) << shares[0];
  EXPECT_NE(shares[0].find(" 5Gi/- "), std::string::npos);
  EXPECT_NE(shares[0].find(" -/100% "), std::string::npos) << shares[0];  // no rate yet
  EXPECT_NE(shares[0].find(" 4 a-process-wit"), std::string::npos) << shares[0];
  EXPECT_EQ(shares[1].rfind("broken ", 0), 0u) << shares[1];
  EXPECT_EQ(shares[2].rfind("! broken: usage page is truncated (1000 of 99520 bytes): /tmp/a/", 0),
            0u);
  EXPECT_EQ(shares[2].size(), 80u);
}

TEST_F(TopRender, AShareThatCouldNotBeReadShowsUnknownFiguresAndIsCounted) {
  v1::ListSharesResponse before_node = two_shares(10.0, 20.0, 1.0);
  v1::ListSharesResponse node = two_shares(10.5, 20.5, 1.5);
  for (v1::ListSharesResponse* each : {&before_node, &node}) {
    v1::Share& broken = add_share(*each, "broken", "GPU-aaaa", 0, 2 * kGiB, 40);
    broken.set_source("agent");
  }
  node.mutable_shares(2)->set_read_error("/var/lib/tessera/shares/broken/usage is a symlink");
  // The agent's source and the local reader fill the one field: a second one is counted.
  v1::Share& limits_gone = add_share(node, "gone", "GPU-aaaa", 0, kGiB, 10);
  limits_gone.clear_devices();
  limits_gone.set_read_error("limits page is truncated (4 of 4096 bytes): /x/gone/limits");
  const Snapshot before = snapshot_of(before_node, kSampledAt - 1000);
  const Snapshot now = snapshot_of(node);
  const TopLayout size{80, 24, TopSort::kMemory};
  const std::vector<std::string> screen = render_top(now, &before, size);
  expect_fits(screen, size);
  const std::vector<std::string> shares = share_lines(screen);
  ASSERT_EQ(shares.size(), 5u) << ::testing::PrintToString(screen);
  EXPECT_EQ(shares[0].rfind("alpha ", 0), 0u);
  EXPECT_NE(shares[0].find(" 50/30% "), std::string::npos) << shares[0];  // a rate: readable
  EXPECT_EQ(shares[2].rfind("broken ", 0), 0u) << shares[2];
  // Limits known, usage unknown: "?" for memory used, cores used, throttled and processes, and
  // a bar with no fill (never an empty one that reads as 0).
  EXPECT_NE(shares[2].find(" ?/2Gi "), std::string::npos) << shares[2];
  EXPECT_NE(shares[2].find(" ?/40% "), std::string::npos) << shares[2];
  EXPECT_NE(shares[2].find("    ? ?"), std::string::npos) << shares[2];
  EXPECT_EQ(shares[2].back(), '?') << shares[2];
  EXPECT_EQ(bar_of(shares[2]).first, 0);
  EXPECT_EQ(shares[2].find("[...."), std::string::npos) << shares[2];
  EXPECT_NE(shares[2].find("[       ?      ]"), std::string::npos) << shares[2];
  EXPECT_EQ(shares[3].rfind("gone ", 0), 0u) << shares[3];
  EXPECT_EQ(shares[3].back(), '?') << shares[3];
  EXPECT_EQ(shares[4],  // cut at the width
            "! 2 shares not read whole; broken: /var/lib/tessera/shares/broken/usage is a sym");
  // Read again, it is shown as any other share, and the line is gone.
  node.mutable_shares(2)->clear_read_error();
  node.mutable_shares()->RemoveLast();
  const std::vector<std::string> healed = share_lines(render_top(snapshot_of(node), &before, size));
  ASSERT_EQ(healed.size(), 3u);
  EXPECT_NE(healed[2].find(" 0/2Gi "), std::string::npos) << healed[2];
}

TEST_F(TopRender, ProcessesShowTheCommandsThatFitWhole) {
  v1::ListSharesResponse node;
  add_gpu(node, "GPU-aaaa", 0, 16 * kGiB, 0);
  add_share(node, "a", "GPU-aaaa", 3, kGiB, 100, 0, 0, {"python3", "torchrun", "python3", "sh"});
  add_share(node, "b", "GPU-aaaa", 2, kGiB, 100, 0, 0, {"python3", "sh"});
  add_share(node, "c", "GPU-aaaa", 1, kGiB, 100);
  const std::vector<std::string> shares =
      share_lines(render_top(snapshot_of(node), nullptr, {80, 24, TopSort::kMemory}));
  ASSERT_EQ(shares.size(), 3u);
  auto processes = [](const std::string& line) { return line.substr(65); };
  EXPECT_EQ(processes(shares[0]), "4 python3+");
  EXPECT_EQ(processes(shares[1]), "2 python3,sh");
  EXPECT_EQ(processes(shares[2]), "0");
}

TEST_F(TopRender, TinyTerminalsGetWhatFits) {
  v1::ListSharesResponse node = two_shares();
  for (int g = 0; g < 4; ++g) add_gpu(node, std::string("GPU-") + std::to_string(g), 0, kGiB, 0);
  for (const TopLayout size : {TopLayout{40, 10, TopSort::kMemory}, TopLayout{20, 5},
                               TopLayout{1, 1}, TopLayout{80, 7}, TopLayout{300, 200}}) {
    const std::vector<std::string> screen = render_top(snapshot_of(node), nullptr, size);
    expect_fits(screen, size);
    EXPECT_FALSE(screen.empty());
    expect_fits(render_top_error(internal_error("x"), size), size);
  }
}

TEST_F(TopRender, AnEmptyNodeSaysSo) {
  const TopLayout size{80, 24, TopSort::kMemory};
  const std::vector<std::string> screen = render_top(snapshot_of({}), nullptr, size);
  expect_fits(screen, size);
  EXPECT_NE(std::find(screen.begin(), screen.end(),
                      "No shares (`tessera run --memory 4Gi -- <command>` starts one)"),
            screen.end());
  const std::vector<std::string> error =
      render_top_error(unavailable("the node agent is restarting"), size);
  expect_fits(error, size);
  EXPECT_EQ(error[2], "cannot read the node: the node agent is restarting");
}

// A terminal that replays keys and records what was drawn; its clock moves only as it waits.
class FakeScreen : public TopScreen {
 public:
  explicit FakeScreen(std::deque<std::pair<int64_t, int>> keys) : keys_(std::move(keys)) {}
  TopLayout size() override { return layout_; }
  int wait_key(int64_t timeout_ms) override {
    waits.push_back(timeout_ms);
    if (!keys_.empty() && keys_.front().first <= timeout_ms) {
      auto [after, key] = keys_.front();
      keys_.pop_front();
      now_ms += after;
      if (key == kResized) layout_ = {100, 30, TopSort::kMemory};
      return key;
    }
    if (keys_.empty()) return kStop;  // nothing left to replay: the test is over
    keys_.front().first -= timeout_ms;
    now_ms += timeout_ms;
    return 0;
  }
  void draw(const std::vector<std::string>& lines) override { frames.push_back(lines); }
  // Stopped for 5 s, as a shell's job between ^Z and fg.
  void suspend() override {
    suspended_after_frames.push_back(frames.size());
    now_ms += 5000;
  }

  int64_t now_ms = 0;
  std::vector<size_t> suspended_after_frames;  // frames drawn before each suspend
  std::vector<int64_t> waits;
  std::vector<std::vector<std::string>> frames;

 private:
  std::deque<std::pair<int64_t, int>> keys_;  // (ms after the previous one, key)
  TopLayout layout_{80, 24, TopSort::kMemory};
};

TEST_F(TopRender, TheScreenLoopRefreshesEachIntervalSortsOnKeysAndQuitsOnQ) {
  int taken = 0;
  const SnapshotSource source = [&]() -> Result<Snapshot> {
    ++taken;
    return snapshot_of(two_shares(taken * 0.5, taken * 0.1), kSampledAt + taken * 1000);
  };
  // Two refreshes pass, then 'c' (sort by cores) at 300 ms into the third, a resize, and 'q'.
  FakeScreen screen({{2300, 'c'}, {100, TopScreen::kResized}, {100, 'q'}});
  TopLoopOptions options;
  options.monotonic_ms = [&] { return screen.now_ms; };
  run_top_screen(source, screen, options);
  EXPECT_EQ(taken, 3);                  // at 0, 1000 and 2000 ms
  ASSERT_EQ(screen.frames.size(), 5u);  // 3 refreshes, the sort and the resize
  EXPECT_EQ(screen.waits[0], 1000);
  EXPECT_EQ(screen.waits[3], 700);  // after 'c': what is left of the interval
  EXPECT_NE(screen.frames[3][1].find("sort: cores"), std::string::npos) << screen.frames[3][1];
  EXPECT_EQ(share_lines(screen.frames[3])[0].rfind("alpha ", 0), 0u);  // 50% before 10%
  EXPECT_EQ(screen.frames[4][0].size(), 100u);                         // redrawn at the new width
  // From the second frame on, rates: alpha used 0.5 s of each second.
  EXPECT_NE(share_lines(screen.frames[1])[0].find(" 50/30% "), std::string::npos)
      << share_lines(screen.frames[1])[0];
}

TEST_F(TopRender, TheScreenLoopSuspendsOnCtrlZAndDrawsAFreshSnapshotWhenBack) {
  int taken = 0;
  const SnapshotSource source = [&]() -> Result<Snapshot> {
    ++taken;
    return snapshot_of(two_shares(), kSampledAt + taken * 1000);
  };
  // ^Z 400 ms into the first interval, back after 5 s, then 'q'.
  FakeScreen screen({{400, TopScreen::kSuspend}, {100, 'q'}});
  TopLoopOptions options;
  options.monotonic_ms = [&] { return screen.now_ms; };
  run_top_screen(source, screen, options);
  ASSERT_EQ(screen.suspended_after_frames, std::vector<size_t>{1});
  // Drawn again at once when continued, from a snapshot taken then (the old one is 5 s stale).
  ASSERT_EQ(screen.frames.size(), 2u);
  EXPECT_EQ(taken, 2);
  EXPECT_EQ(screen.waits[1], 1000);
  EXPECT_EQ(screen.frames[1][0].rfind("tessera top - gpu-node-1", 0), 0u);
}

TEST_F(TopRender, TheScreenLoopShowsASourceErrorAndRetries) {
  int taken = 0;
  const SnapshotSource source = [&]() -> Result<Snapshot> {
    if (++taken == 1) return unavailable("no agent yet");
    return snapshot_of(two_shares());
  };
  FakeScreen screen({{1500, 'q'}});
  TopLoopOptions options;
  options.monotonic_ms = [&] { return screen.now_ms; };
  run_top_screen(source, screen, options);
  ASSERT_EQ(screen.frames.size(), 2u);
  EXPECT_EQ(screen.frames[0][2], "cannot read the node: no agent yet");
  EXPECT_EQ(screen.frames[1][0].rfind("tessera top - gpu-node-1", 0), 0u);
}

TEST_F(TopRender, PlainOutputPrintsEachSnapshotWholeAtTheInterval) {
  v1::ListSharesResponse node;
  add_gpu(node, "GPU-aaaa", 0, 141 * kGiB, 0);
  for (int i = 0; i < 30; ++i)
    add_share(node, std::string("s") + std::to_string(i), "GPU-aaaa", kGiB, kGiB, 10);
  int taken = 0;
  int64_t clock = 0;
  const SnapshotSource source = [&]() -> Result<Snapshot> {
    ++taken;
    clock += 200;  // each snapshot takes 200 ms
    return snapshot_of(node, kSampledAt + taken * 1000);
  };
  std::vector<std::string> written;
  std::vector<int64_t> slept;
  TopLoopOptions options;
  options.monotonic_ms = [&] { return clock; };
  const Status done = run_top_plain(
      source, 3, 80, options, [&](const std::string& text) { written.push_back(text); },
      [&](int64_t ms) {
        slept.push_back(ms);
        clock += ms;
      });
  ASSERT_TRUE(done.is_ok());
  ASSERT_EQ(written.size(), 3u);
  EXPECT_EQ(taken, 4);  // one more, an interval before the first print, for rates
  EXPECT_EQ(slept, (std::vector<int64_t>{800, 800, 800}));  // none after the last
  for (const std::string& text : written) {
    EXPECT_EQ(text.find('\x1b'), std::string::npos);     // no terminal sequences
    EXPECT_NE(text.find("\ns29 "), std::string::npos);   // every share: no height limit
    EXPECT_NE(text.find(" 0/10% "), std::string::npos);  // a rate, from the first print on
    EXPECT_EQ(text.find(" \n"), std::string::npos);      // no trailing blanks
    EXPECT_EQ(text.substr(text.size() - 2), "\n\n");
  }

  const SnapshotSource failing = []() -> Result<Snapshot> { return internal_error("boom"); };
  EXPECT_EQ(run_top_plain(
                failing, 1, 80, options, [](const std::string&) {}, [](int64_t) {})
                .message(),
            "boom");
}

}  // namespace
}  // namespace tessera::cli

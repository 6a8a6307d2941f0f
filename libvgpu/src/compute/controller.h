// The compute controller (docs/compute.md): a token bucket in GPU time, refilled at the share's
// rate x wall time and debited by the GPU time the share was measured to use. Pure: time and
// measurements come in as arguments, so it is unit-tested with simulated time
// (tests/libvgpu/compute_controller_test.cc).
#pragma once

#include <cstdint>

namespace tessera::vgpu::compute {

inline constexpr int64_t kMillisecond = 1'000'000;
inline constexpr int64_t kSecond = 1'000'000'000;

struct Config {
  uint32_t quota_percent = 100;  // 1..100
  uint32_t burst_percent = 0;    // the rate while no other process uses the device; <= quota: off
  uint32_t priority = 0;         // share::kPriority*
  // Most GPU time a share can save up while it is idle (bounds its burst after idling).
  int64_t cap_ns = 20 * kMillisecond;
  // Most debt the bucket keeps (GPU time used beyond the rate, e.g. queued work that ran while
  // the gate was closed); beyond it the debt is forgiven, so a measurement glitch cannot close a
  // share for long.
  int64_t max_debt_ns = 2 * kSecond;
  // Others count as active when they used at least this share of a window, and stay so this long.
  uint32_t others_threshold_percent = 2;
  int64_t others_hold_ns = 300 * kMillisecond;
};

// One measurement: GPU time used over (previous sample, now].
struct Sample {
  int64_t now_ns = 0;
  int64_t share_busy_ns = 0;   // the share's processes
  int64_t others_busy_ns = 0;  // every other process on the device
  bool higher_priority_active = false;
};

struct State {
  int64_t tokens_ns = 0;
  int64_t last_ns = -1;  // -1: no sample yet
  int64_t others_seen_ns = -1;
};

struct Decision {
  bool open = true;
  int64_t reopen_at_ns = 0;  // when closed: the earliest time the bucket is back to zero
  uint32_t rate_percent = 100;
  bool others_active = false;
  bool yielding = false;
};

// The rate the share may use now: 0 while a higher-priority share is active, the burst while no
// other process used the device recently, the quota otherwise.
uint32_t current_rate(const Config& config, const State& state, const Sample& sample,
                      bool* others_active);

// Advances the bucket to sample.now_ns and decides the gate.
Decision step(const Config& config, State& state, const Sample& sample);

}  // namespace tessera::vgpu::compute

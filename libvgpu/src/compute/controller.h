// The compute controller (docs/compute.md): a token bucket in GPU time, refilled at the share's
// rate x wall time and debited by the GPU time the share was measured to use. Pure: time and
// measurements come in as arguments, so it is unit-tested with simulated time
// (tests/libvgpu/compute_controller_test.cc).
#pragma once

#include <cstddef>
#include <cstdint>

#include "tessera/share_region.h"

namespace tessera::vgpu::compute {

inline constexpr int64_t kMillisecond = 1'000'000;
inline constexpr int64_t kSecond = 1'000'000'000;
inline constexpr uint32_t kSpareUnknown = share::kSpareUnknown;

struct Config {
  // Percent of the device's time the share is guaranteed, 0..100 (0 = best-effort).
  uint32_t request_percent = 100;
  // Percent it may reach, 0..100; below the request it means the request (no bursting).
  uint32_t limit_percent = 0;
  uint32_t priority = 0;  // share::kPriority*
  // Most GPU time a share can save up while it is idle (bounds its burst after idling).
  int64_t cap_ns = 20 * kMillisecond;
  // Most debt the bucket keeps (GPU time used beyond the rate, e.g. queued work that ran while
  // the gate was closed); beyond it the debt is forgiven, so a measurement glitch cannot close a
  // share for long.
  int64_t max_debt_ns = 2 * kSecond;
  // Others count as active (a flag in the usage page, for the counters: it does not change the
  // rate) when they used at least this share of a window, and stay so this long.
  uint32_t others_threshold_percent = 2;
  int64_t others_hold_ns = 300 * kMillisecond;
};

// One measurement: GPU time used over (previous sample, now].
struct Sample {
  int64_t now_ns = 0;
  int64_t share_busy_ns = 0;   // the share's processes
  int64_t others_busy_ns = 0;  // every other process on the device
  bool higher_priority_active = false;
  // The share's part of the device's spare time (spare_part below), percent above its request;
  // kSpareUnknown: none known (the rate is the request).
  uint32_t spare_percent = kSpareUnknown;
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

// What a share claims on a device: its request and its limit, in percent (a limit below the
// request means the request).
struct Claim {
  uint32_t request = 0;
  uint32_t limit = 0;
};

// The share's part of the device's spare time, in percent above its own request (docs/compute.md,
// Classes). `others`: the other active shares of its priority on the device. Every active share
// reserves its request, the share itself included whether active or not; the spare is 100 minus
// those requests (0 when they add up to 100 or more), split equally among the shares whose limit is
// above their request, water-filled: a share that its limit caps below an equal part leaves the
// rest to the others. Whole percents, rounded down.
uint32_t spare_part(const Claim& own, const Claim* others, size_t count);

// The rate the share may use now: 0 while a higher-priority share is active; otherwise its request
// plus its part of the spare, at most its limit (never below its request).
uint32_t current_rate(const Config& config, const Sample& sample);

// Advances the bucket to sample.now_ns and decides the gate.
Decision step(const Config& config, State& state, const Sample& sample);

}  // namespace tessera::vgpu::compute

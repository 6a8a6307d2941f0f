// The share's meter (docs/compute.md): one process of the share leads (elected by CAS on the
// usage page's meter_owner, kept by a heartbeat, taken over when the leader dies or stalls); the
// leader measures the share's GPU time every period, runs the controller per device and opens or
// closes the gates that every launch of the share reads. Time, the measurement and the device-wide
// priority signal are injected, so all of it runs under simulated time in the unit tests.
#pragma once

#include <atomic>
#include <cstdint>

#include "compute/controller.h"
#include "tessera/pending_spans.h"
#include "tessera/share_region.h"

namespace tessera::vgpu::compute {

class PendingBoard;  // pending_board.h

struct Busy {
  int64_t share_ns = 0;   // GPU time of the share's processes since the previous measurement
  int64_t others_ns = 0;  // GPU time of every other process meanwhile
};

// Where the share's GPU time comes from. measure() returns the time used since its previous call
// for that device; false when there is no measurement yet (the first call primes it) or none can
// be made. NVML per-process utilisation on one machine (nvml_source.cc); the node agent's figures
// in the limits page inside Kubernetes (AgentSource below).
class BusySource {
 public:
  virtual bool measure(int device, int64_t now_ns, Busy* out) = 0;
  // Forget the previous measurement (a new leader starts its own windows).
  virtual void reset() = 0;
  // Forget the previous measurement of one device (its next one primes again).
  virtual void forget(int) {}
  // True when the share's GPU time on the device is what its own launches' events spanned
  // (OwnSource): time the device gave other processes meanwhile is in it.
  virtual bool timed(int) const { return false; }

 protected:
  ~BusySource() = default;  // never deleted through the interface (the shim allocates nothing)
};

// The device-wide signals between shares (priority_board.h: the agent's yield_mask and
// spare_percent in the limits page, or a per-user file per device for `tessera run` shares without
// an agent). Priority: shares announce that they are active at their priority, and lower ones look
// for an active higher one. Classes: each share learns its part of the device's spare time.
class PriorityBoard {
 public:
  virtual void announce(int device, uint32_t priority, int64_t until_ns) = 0;
  virtual bool higher_active(int device, uint32_t priority, int64_t now_ns) = 0;
  // The share's part of the device's spare time now, percent above its request (controller.h
  // spare_part), or kSpareUnknown. `active`: the share launched or used the GPU in the last
  // period; while it is, its claim is kept on the board until `until_ns`, so that the others
  // leave its request to it.
  virtual uint32_t spare(int device, uint32_t priority, const Claim& own, bool active,
                         int64_t now_ns, int64_t until_ns) = 0;
  // Shares that time their own launches on a device (OwnSource) publish what their launches
  // spanned so far (`own_total_ns`) and learn what the other active shares' spans grew by since
  // the previous call (`others_ns`) and how many grew (`sharers`). False where nothing is known.
  virtual bool others_timed(int, uint64_t, int64_t, uint64_t*, int*) { return false; }

 protected:
  ~PriorityBoard() = default;
};

// Rank of a priority: low 0 < normal 1 < high 2.
inline int priority_rank(uint32_t priority) {
  return priority == share::kPriorityHigh ? 2 : priority == share::kPriorityLow ? 0 : 1;
}

// Reads the agent-published cumulative figures of the limits page (measure_source ==
// kMeasureAgent).
class AgentSource final : public BusySource {
 public:
  explicit AgentSource(const share::LimitsPage* limits) : limits_(limits) {}
  bool measure(int device, int64_t now_ns, Busy* out) override;
  void reset() override;
  void forget(int device) override;

 private:
  const share::LimitsPage* limits_;
  uint64_t last_share_[share::kMaxDevices] = {};
  uint64_t last_others_[share::kMaxDevices] = {};
  uint64_t last_at_[share::kMaxDevices] = {};
};

// The GPU time the share's processes timed themselves (timed_launch.h) on the devices whose bit
// is set in `timed_mask`. Every other device is measured by `inner`.
//
// Exact, where the device's pending board can be used (`pending`, pending_board.h: `tessera run`
// shares): the share's processes' equal parts of the time they were pending, over windows that end
// `lag_ns` before now (the time a span takes to be collected, queued and published); "others" are
// the other processes' parts.
//
// Exact too where the agent splits the device (bit d of the limits page's split_mask: the shares'
// pending files under the agent) and its figures are fresh (`measured[d].sampled_at_ns` at most
// kAgentStale old: the agent publishes every 20 ms): then `inner`, the agent's figures, measures
// it. An agent that stopped publishing leaves the share on its own spans, never unmeasured.
//
// Otherwise what the launches spanned: the growth of the slots' gpu_busy_ns (a slot claimed again
// counts from 0). A slot's time goes to the timed device its process's contexts are on
// (ProcessSlot::contexts); a process with contexts on several devices (or none said) is charged
// its whole timed time on each timed device (more than it used, never less). "Others" are unknown
// there (0), and timed() says the spans include them (Meter::apportion_timed).
class OwnSource final : public BusySource {
 public:
  static constexpr int64_t kPendingLag = share::kPendingLag;

  static constexpr int64_t kAgentStale = 250 * kMillisecond;

  // `agent_limits`: the share's limits page when the agent measures it (its split_mask and
  // measured[]), else nullptr.
  OwnSource(share::UsagePage* usage, BusySource* inner, const std::atomic<uint64_t>* timed_mask,
            PendingBoard* pending = nullptr, int64_t lag_ns = kPendingLag,
            const share::LimitsPage* agent_limits = nullptr)
      : usage_(usage),
        inner_(inner),
        timed_mask_(timed_mask),
        pending_(pending),
        lag_ns_(lag_ns),
        agent_limits_(agent_limits) {
    for (int64_t& charged_to : charged_to_) charged_to = kNotCharged;
  }
  bool measure(int device, int64_t now_ns, Busy* out) override;
  void reset() override;
  // The device is timed and its last measurement is what the launches spanned (not exact).
  bool timed(int device) const override {
    return ((timed_mask_->load(std::memory_order_acquire) >> device) & 1u) != 0 && !exact_[device];
  }

 private:
  share::UsagePage* usage_;
  BusySource* inner_;
  const std::atomic<uint64_t>* timed_mask_;
  PendingBoard* pending_;
  int64_t lag_ns_;
  const share::LimitsPage* agent_limits_;
  bool split_[share::kMaxDevices] = {};  // the last measurement came from the agent's split
  bool primed_ = false;
  bool window_valid_ = false;  // the look at collected_at_ns_ had a previous one to difference
  int64_t collected_at_ns_ = -1;
  uint64_t window_ns_[share::kMaxDevices] = {};  // per device, the growth found at collected_at_ns_
  uint64_t last_generation_[share::kMaxSlots] = {};
  uint64_t last_busy_[share::kMaxSlots] = {};
  bool exact_[share::kMaxDevices] = {};  // the last measurement came from the board
  static constexpr int64_t kNotCharged = INT64_MIN;
  // The end of the last window charged.
  int64_t charged_to_[share::kMaxDevices];
};

struct MeterTiming {
  int64_t period_ns = 5 * kMillisecond;            // the leader's control period
  int64_t follower_period_ns = 20 * kMillisecond;  // how often the others check the leader
  int64_t leader_timeout_ns = 250 * kMillisecond;  // a heartbeat this old: take over
  int64_t announce_hold_ns = 100 * kMillisecond;   // an announcement lasts this long
};

class Meter {
 public:
  using AliveFn = bool (*)(uint64_t owner, void* context);

  Meter(const share::LimitsPage* limits, share::UsagePage* usage, BusySource* source,
        PriorityBoard* board, uint64_t my_owner, AliveFn alive, void* alive_context)
      : limits_(limits),
        usage_(usage),
        source_(source),
        board_(board),
        my_owner_(my_owner),
        alive_(alive),
        alive_context_(alive_context) {}

  MeterTiming& timing() { return timing_; }
  Config& base_config() { return base_config_; }

  // True when this process leads (now, or after taking over); refreshes the heartbeat.
  bool lead(int64_t now_ns);
  // The leader's control step: measure, decide, publish. Returns when to run next.
  int64_t tick(int64_t now_ns);
  // Gives up the lead (a process that exits cleanly).
  void resign();

  // Whether any device of the share has a compute setting (limit, burst or priority), or the agent
  // asks the share to time its launches somewhere (time_launches_mask).
  static bool share_has_compute(const share::LimitsPage& limits);
  // Bit d set: the share gives device d no GPU time at all (cores 0, what a limit that failed
  // closed leaves). Its gate stays closed and launches on it are refused (gate.cc), never slowed
  // to a rate.
  static uint64_t no_time_mask(const share::LimitsPage& limits);
  // Request and limit both 0: the device gives the share no time at all.
  static bool no_time(const share::DeviceLimits& device);
  // The share's part of what its timed launches spanned over a window (docs/compute.md, "Shares
  // that contend inside one instance"): `span_ns` its own, `others_ns` the other `sharers`' spans
  // over the window. Spans that add up to more than the window overlapped by at least the excess,
  // and a time-sliced device gave each of the overlapping shares an equal part of it: each is
  // charged its span less an equal part of the excess, never below span / (sharers + 1).
  static int64_t apportion_timed(int64_t span_ns, uint64_t others_ns, int sharers,
                                 int64_t window_ns);
  Config config_for(int device) const;

 private:
  const share::LimitsPage* limits_;
  share::UsagePage* usage_;
  BusySource* source_;
  PriorityBoard* board_;
  uint64_t my_owner_;
  AliveFn alive_;
  void* alive_context_;
  MeterTiming timing_;
  Config base_config_;
  bool leading_ = false;
  bool primed_[share::kMaxDevices] = {};
  uint64_t timed_total_ns_[share::kMaxDevices] = {};  // what timed launches spanned, published
  uint64_t last_launches_ = 0;
};

}  // namespace tessera::vgpu::compute

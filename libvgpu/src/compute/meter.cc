#include "compute/meter.h"

#include "compute/pending_board.h"

#include "tessera/vgpu/usage_counters.h"

namespace tessera::vgpu::compute {

using share::ComputeDevice;

bool AgentSource::measure(int device, int64_t, Busy* out) {
  const share::LimitsPage::Measured& m = limits_->measured[device];
  const uint64_t at = m.sampled_at_ns.load(std::memory_order_acquire);
  const uint64_t busy = m.share_busy_ns.load(std::memory_order_acquire);
  const uint64_t others = m.others_busy_ns.load(std::memory_order_acquire);
  if (at == 0) return false;
  const bool primed = last_at_[device] != 0;
  if (primed && at == last_at_[device]) {
    // Nothing new published since the last look. The sums may already be the next window's (the
    // agent stores them before the time): keep the last ones, or that window would be lost.
    *out = Busy{};
    return true;
  }
  // Cumulative counters that went backwards (an agent restart): start again from here.
  const bool sane = busy >= last_share_[device] && others >= last_others_[device];
  if (primed && sane) {
    out->share_ns = static_cast<int64_t>(busy - last_share_[device]);
    out->others_ns = static_cast<int64_t>(others - last_others_[device]);
  }
  last_at_[device] = at;
  last_share_[device] = busy;
  last_others_[device] = others;
  return primed && sane;
}

void AgentSource::reset() {
  for (uint32_t d = 0; d < share::kMaxDevices; ++d) last_at_[d] = 0;
}

void AgentSource::forget(int device) {
  last_at_[device] = 0;
}

bool OwnSource::measure(int device, int64_t now_ns, Busy* out) {
  const uint64_t bit = 1ull << device;
  if ((timed_mask_->load(std::memory_order_acquire) & bit) == 0) {
    return inner_ ? inner_->measure(device, now_ns, out) : false;
  }
  if (now_ns != collected_at_ns_) {
    // One look at the slots per tick, shared by every timed device of the share.
    uint32_t high = usage_->slot_high_water.load(std::memory_order_acquire);
    if (high > share::kMaxSlots) high = share::kMaxSlots;
    const uint64_t timed = timed_mask_->load(std::memory_order_acquire);
    for (uint64_t& window : window_ns_) window = 0;
    for (uint32_t s = 0; s < high; ++s) {
      const share::ProcessSlot& slot = usage_->slots[s];
      const uint64_t generation = slot.generation.load(std::memory_order_acquire);
      const uint64_t busy = slot.gpu_busy_ns.load(std::memory_order_relaxed);
      // A slot claimed again since the last look was zeroed at its claim: all of it is new.
      const uint64_t since = generation == last_generation_[s] ? last_busy_[s] : 0;
      last_generation_[s] = generation;
      last_busy_[s] = busy;
      if (busy <= since) continue;
      // A process whose contexts are on one timed device of the share launched there only (the
      // slot's contexts word); otherwise every timed device is charged all of it.
      const uint32_t contexts = slot.contexts.load(std::memory_order_relaxed);
      const uint32_t count = share::contexts_count(contexts);
      const uint32_t on = share::contexts_device(contexts);
      const bool one_device = count > 0 && count != share::kContextsUnmeasurable &&
                              on < share::kMaxDevices && ((timed >> on) & 1u) != 0;
      for (uint32_t d = 0; d < share::kMaxDevices; ++d) {
        if (((timed >> d) & 1u) != 0 && (!one_device || d == on)) window_ns_[d] += busy - since;
      }
    }
    // The first look only records where the slots stand.
    window_valid_ = primed_;
    primed_ = true;
    collected_at_ns_ = now_ns;
  }
  bool by_agent = false;
  if (agent_limits_ && inner_ &&
      (agent_limits_->split_mask.load(std::memory_order_acquire) & bit) != 0) {
    const int64_t sampled = static_cast<int64_t>(
        agent_limits_->measured[device].sampled_at_ns.load(std::memory_order_acquire));
    by_agent = sampled > 0 && now_ns - sampled <= kAgentStale;
  }
  if (by_agent != split_[device]) {
    // The agent's figures start or stop counting this device: whichever source measures it next
    // starts a window of its own (none charges the time since the other's last look twice).
    split_[device] = by_agent;
    if (by_agent) inner_->forget(device);
  }
  if (by_agent) {
    exact_[device] = true;
    return inner_->measure(device, now_ns, out);
  }
  if (pending_ && pending_->usable(device)) {
    exact_[device] = true;
    const int64_t to = now_ns - lag_ns_;
    if (charged_to_[device] == kNotCharged) {
      charged_to_[device] = to;  // the first window starts here
      return false;
    }
    if (to <= charged_to_[device]) {
      *out = Busy{};
      return true;
    }
    PendingBoard::Split split;
    if (pending_->charge(device, charged_to_[device], to, &split)) {
      charged_to_[device] = to;
      *out = Busy{split.own_ns, split.others_ns};
      return true;
    }
    // The board was refused just now: what the launches spanned, from here on.
  }
  exact_[device] = false;
  if (!window_valid_) return false;
  *out = Busy{static_cast<int64_t>(window_ns_[device]), 0};
  return true;
}

void OwnSource::reset() {
  primed_ = false;
  for (int64_t& charged_to : charged_to_) charged_to = kNotCharged;
  window_valid_ = false;
  collected_at_ns_ = -1;
  if (inner_) inner_->reset();
}

int64_t Meter::apportion_timed(int64_t span_ns, uint64_t others_ns, int sharers,
                               int64_t window_ns) {
  if (span_ns <= 0 || sharers <= 0 || window_ns <= 0) return span_ns;
  const int64_t others = others_ns > static_cast<uint64_t>(INT64_MAX / 4)
                             ? INT64_MAX / 4
                             : static_cast<int64_t>(others_ns);
  const int64_t excess = span_ns + others - window_ns;
  if (excess <= 0) return span_ns;  // no overlap need have happened: all of it is the share's
  const int64_t floor = span_ns / (sharers + 1);
  const int64_t charged = span_ns - excess / (sharers + 1);
  return charged > floor ? charged : floor;
}

bool Meter::no_time(const share::DeviceLimits& device) {
  return share::effective_cores_limit(device.cores_request.load(std::memory_order_acquire),
                                      device.cores_limit.load(std::memory_order_acquire)) == 0;
}

bool Meter::share_has_compute(const share::LimitsPage& limits) {
  if (limits.priority.load(std::memory_order_acquire) != share::kPriorityNormal) return true;
  // Asked by the agent to time its launches on a device (a limited share beside it): the meter
  // thread publishes them, though nothing of this share is limited.
  if (limits.time_launches_mask.load(std::memory_order_acquire) != 0) return true;
  uint32_t count = limits.device_count.load(std::memory_order_acquire);
  if (count > share::kMaxDevices) count = share::kMaxDevices;
  for (uint32_t d = 0; d < count; ++d) {
    const uint32_t cores = limits.devices[d].cores_request.load(std::memory_order_acquire);
    if (cores < 100) return true;
  }
  return false;
}

uint64_t Meter::no_time_mask(const share::LimitsPage& limits) {
  uint32_t count = limits.device_count.load(std::memory_order_acquire);
  if (count > share::kMaxDevices) count = share::kMaxDevices;
  uint64_t mask = 0;
  for (uint32_t d = 0; d < count; ++d) {
    if (no_time(limits.devices[d])) mask |= 1ull << d;
  }
  return mask;
}

Config Meter::config_for(int device) const {
  Config config = base_config_;
  const share::DeviceLimits& entry = limits_->devices[device];
  const uint32_t request = entry.cores_request.load(std::memory_order_acquire);
  config.request_percent = request > 100 ? 100 : request;
  const uint32_t limit = share::effective_cores_limit(
      config.request_percent, entry.cores_limit.load(std::memory_order_acquire));
  config.limit_percent = limit > 100 ? 100 : limit;
  config.priority = limits_->priority.load(std::memory_order_acquire);
  return config;
}

bool Meter::lead(int64_t now_ns) {
  share::ComputeArea& area = usage_->compute;
  uint64_t owner = area.meter_owner.load(std::memory_order_acquire);
  if (owner == my_owner_) {
    area.meter_heartbeat_ns.store(static_cast<uint64_t>(now_ns), std::memory_order_release);
    return leading_ = true;
  }
  if (leading_) {
    // Someone took over (we stalled past the timeout): follow from now on.
    leading_ = false;
  }
  const int64_t heartbeat =
      static_cast<int64_t>(area.meter_heartbeat_ns.load(std::memory_order_acquire));
  const int64_t age = now_ns - heartbeat;
  if (owner != 0) {
    // A fresh heartbeat: the leader is there (no /proc look). A stale one: take over. In
    // between: take over at once only if the leader's process is gone.
    if (age < 4 * timing_.period_ns) return false;
    if (age <= timing_.leader_timeout_ns && alive_(owner, alive_context_)) return false;
  }
  if (!area.meter_owner.compare_exchange_strong(owner, my_owner_, std::memory_order_acq_rel)) {
    return false;
  }
  area.meter_heartbeat_ns.store(static_cast<uint64_t>(now_ns), std::memory_order_release);
  area.meter_terms.fetch_add(1, std::memory_order_acq_rel);
  // A new leader measures from now: the time since the last leader's tick is neither refilled
  // nor debited (its windows are gone).
  source_->reset();
  for (bool& primed : primed_) primed = false;
  uint32_t count = limits_->device_count.load(std::memory_order_acquire);
  if (count > share::kMaxDevices) count = share::kMaxDevices;
  for (uint32_t d = 0; d < count; ++d) {
    area.devices[d].last_tick_ns.store(static_cast<uint64_t>(now_ns), std::memory_order_release);
  }
  return leading_ = true;
}

void Meter::resign() {
  uint64_t expected = my_owner_;
  usage_->compute.meter_owner.compare_exchange_strong(expected, 0, std::memory_order_acq_rel);
  leading_ = false;
}

int64_t Meter::tick(int64_t now_ns) {
  share::ComputeArea& area = usage_->compute;
  uint32_t count = limits_->device_count.load(std::memory_order_acquire);
  if (count > share::kMaxDevices) count = share::kMaxDevices;
  const uint64_t launches = share_launches(*usage_);
  const bool launched = launches != last_launches_;
  last_launches_ = launches;
  for (uint32_t d = 0; d < count; ++d) {
    ComputeDevice& device = area.devices[d];
    const Config config = config_for(static_cast<int>(d));
    const uint64_t bit = 1ull << d;
    if (no_time(limits_->devices[d])) {
      // No GPU time at all: closed for good, its launches are refused at the gate.
      area.closed_mask.fetch_or(bit, std::memory_order_acq_rel);
      device.rate_percent.store(0, std::memory_order_relaxed);
      device.last_tick_ns.store(static_cast<uint64_t>(now_ns), std::memory_order_release);
      continue;
    }
    const bool limited = config.request_percent < 100 || config.priority != share::kPriorityNormal;
    Busy busy;
    const bool measured = source_->measure(static_cast<int>(d), now_ns, &busy);
    if (!measured) {
      // No window yet (first look of this leader): nothing to decide on.
      device.last_tick_ns.store(static_cast<uint64_t>(now_ns), std::memory_order_release);
      continue;
    }
    if (source_->timed(static_cast<int>(d)) && busy.share_ns >= 0) {
      // Spans of launches timed by the share itself include the other shares' time on the
      // device: the board says how much they spanned meanwhile.
      timed_total_ns_[d] += static_cast<uint64_t>(busy.share_ns);
      uint64_t others = 0;
      int sharers = 0;
      const int64_t last =
          static_cast<int64_t>(device.last_tick_ns.load(std::memory_order_acquire));
      if (board_ &&
          board_->others_timed(static_cast<int>(d), timed_total_ns_[d], now_ns, &others,
                               &sharers) &&
          primed_[d] && last > 0 && now_ns > last) {
        busy.share_ns = apportion_timed(busy.share_ns, others, sharers, now_ns - last);
      }
    }
    device.busy_ns.fetch_add(static_cast<uint64_t>(busy.share_ns), std::memory_order_relaxed);
    device.others_busy_ns.fetch_add(static_cast<uint64_t>(busy.others_ns),
                                    std::memory_order_relaxed);
    if (!limited) {
      area.closed_mask.fetch_and(~bit, std::memory_order_acq_rel);
      device.rate_percent.store(100, std::memory_order_relaxed);
      device.last_tick_ns.store(static_cast<uint64_t>(now_ns), std::memory_order_release);
      continue;
    }
    // Announce before deciding, so that two shares of different priority see each other.
    const bool active = busy.share_ns > 0 || launched;
    const int64_t until = now_ns + timing_.announce_hold_ns;
    if (board_ && config.priority != share::kPriorityLow && active) {
      board_->announce(static_cast<int>(d), config.priority, until);
    }
    Sample sample;
    sample.now_ns = now_ns;
    sample.share_busy_ns = busy.share_ns;
    sample.others_busy_ns = busy.others_ns;
    sample.higher_priority_active =
        board_ && board_->higher_active(static_cast<int>(d), config.priority, now_ns);
    // The share's part of the spare time (classes); without a board, as if it were alone.
    const Claim claim{config.request_percent, config.limit_percent};
    sample.spare_percent =
        board_ ? board_->spare(static_cast<int>(d), config.priority, claim, active, now_ns, until)
               : spare_part(claim, nullptr, 0);
    State state;
    state.tokens_ns = device.tokens_ns.load(std::memory_order_acquire);
    state.last_ns = static_cast<int64_t>(device.last_tick_ns.load(std::memory_order_acquire));
    const uint64_t seen = device.others_seen_ns.load(std::memory_order_acquire);
    state.others_seen_ns = seen == 0 ? -1 : static_cast<int64_t>(seen);
    if (!primed_[d]) {
      // This leader's first window: the bucket continues from the page's balance.
      state.last_ns = -1;
      primed_[d] = true;
    }
    const bool was_closed = (area.closed_mask.load(std::memory_order_acquire) & bit) != 0;
    const int64_t previous = state.last_ns;
    const Decision decision = step(config, state, sample);
    if (was_closed && previous >= 0 && now_ns > previous) {
      device.closed_ns.fetch_add(static_cast<uint64_t>(now_ns - previous),
                                 std::memory_order_relaxed);
    }
    device.tokens_ns.store(state.tokens_ns, std::memory_order_release);
    device.last_tick_ns.store(static_cast<uint64_t>(state.last_ns), std::memory_order_release);
    device.others_seen_ns.store(
        state.others_seen_ns < 0 ? 0 : static_cast<uint64_t>(state.others_seen_ns),
        std::memory_order_release);
    device.rate_percent.store(decision.rate_percent, std::memory_order_relaxed);
    device.flags.store((decision.others_active ? share::kComputeOthersActive : 0) |
                           (decision.yielding ? share::kComputeYielding : 0),
                       std::memory_order_relaxed);
    if (decision.open) {
      area.closed_mask.fetch_and(~bit, std::memory_order_acq_rel);
    } else {
      // A rate of 0 (yielding, or best-effort with no spare time) is looked at again next
      // period: waiting launches re-check every 2 ms instead of every 100 us.
      int64_t reopen = decision.reopen_at_ns > now_ns ? decision.reopen_at_ns : now_ns;
      if (decision.rate_percent == 0) reopen = now_ns + timing_.period_ns;
      device.reopen_at_ns.store(static_cast<uint64_t>(reopen), std::memory_order_release);
      area.closed_mask.fetch_or(bit, std::memory_order_acq_rel);
    }
  }
  return now_ns + timing_.period_ns;
}

}  // namespace tessera::vgpu::compute

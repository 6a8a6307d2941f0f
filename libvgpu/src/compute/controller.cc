#include "compute/controller.h"

namespace tessera::vgpu::compute {

uint32_t current_rate(const Config& config, const State& state, const Sample& sample,
                      bool* others_active) {
  *others_active =
      state.others_seen_ns >= 0 && sample.now_ns - state.others_seen_ns < config.others_hold_ns;
  if (sample.higher_priority_active) return 0;
  uint32_t quota = config.quota_percent == 0 ? 1 : config.quota_percent;
  if (quota > 100) quota = 100;
  if (config.burst_percent > quota && !*others_active) {
    return config.burst_percent > 100 ? 100 : config.burst_percent;
  }
  return quota;
}

Decision step(const Config& config, State& state, const Sample& sample) {
  Decision decision;
  if (state.last_ns < 0) {
    // First sample: nothing to refill or debit yet. The bucket keeps what it held (a new share
    // starts empty, a new leader continues the old one's balance), within the cap.
    state.last_ns = sample.now_ns;
    if (state.tokens_ns > config.cap_ns) state.tokens_ns = config.cap_ns;
  }
  const int64_t elapsed = sample.now_ns > state.last_ns ? sample.now_ns - state.last_ns : 0;
  // Others' activity in this window counts from now on (so the refill below already uses it).
  if (elapsed > 0 && sample.others_busy_ns * 100 >=
                         static_cast<int64_t>(config.others_threshold_percent) * elapsed) {
    state.others_seen_ns = sample.now_ns;
  }
  const uint32_t rate = current_rate(config, state, sample, &decision.others_active);
  decision.rate_percent = rate;
  decision.yielding = sample.higher_priority_active;
  int64_t tokens = state.tokens_ns + elapsed * static_cast<int64_t>(rate) / 100 -
                   (sample.share_busy_ns > 0 ? sample.share_busy_ns : 0);
  if (tokens > config.cap_ns) tokens = config.cap_ns;
  if (tokens < -config.max_debt_ns) tokens = -config.max_debt_ns;
  state.tokens_ns = tokens;
  state.last_ns = sample.now_ns > state.last_ns ? sample.now_ns : state.last_ns;

  if (rate == 0) {
    decision.open = false;
    decision.reopen_at_ns = sample.now_ns;  // re-examined at the next tick
  } else if (rate >= 100) {
    decision.open = true;  // 100%: nothing to limit (the bucket still tracks the debt)
  } else if (tokens > 0) {
    decision.open = true;
  } else {
    decision.open = false;
    decision.reopen_at_ns = sample.now_ns + (-tokens) * 100 / static_cast<int64_t>(rate);
  }
  return decision;
}

}  // namespace tessera::vgpu::compute

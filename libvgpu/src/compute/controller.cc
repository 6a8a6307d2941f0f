#include "compute/controller.h"

namespace tessera::vgpu::compute {
namespace {

uint32_t clamp_percent(uint32_t percent) {
  return percent > 100 ? 100 : percent;
}

// How much more than its request a claim may use: its limit (at least the request) less the
// request, within the device.
uint32_t headroom(const Claim& claim) {
  const uint32_t request = clamp_percent(claim.request);
  const uint32_t limit = clamp_percent(share::effective_cores_limit(request, claim.limit));
  return limit - request;
}

}  // namespace

uint32_t spare_part(const Claim& own, const Claim* others, size_t count) {
  const uint32_t own_headroom = headroom(own);
  if (own_headroom == 0) return 0;
  uint64_t reserved = clamp_percent(own.request);
  for (size_t i = 0; i < count; ++i) reserved += clamp_percent(others[i].request);
  if (reserved >= 100) return 0;
  const uint64_t spare = 100 - reserved;
  // Water-filling without sorting (count is small): the shares whose headroom is at most the
  // current equal part are settled at their headroom; the part of the others only grows as they
  // settle, so at most count + 1 rounds.
  uint64_t settled_below = 0;  // headrooms <= this are settled
  uint64_t level = 0;
  while (true) {
    uint64_t left = spare;
    uint64_t wanting = 0;
    auto add = [&](uint32_t h) {
      if (h == 0) return;
      if (h <= settled_below) {
        left -= h < left ? h : left;
      } else {
        ++wanting;
      }
    };
    add(own_headroom);
    for (size_t i = 0; i < count; ++i) add(headroom(others[i]));
    if (wanting == 0) {
      level = 100;  // every share wanting more is settled at its headroom
      break;
    }
    level = left / wanting;
    bool settles = own_headroom > settled_below && own_headroom <= level;
    for (size_t i = 0; i < count && !settles; ++i) {
      const uint32_t h = headroom(others[i]);
      settles = h > settled_below && h <= level;
    }
    if (!settles) break;
    settled_below = level;
  }
  return static_cast<uint32_t>(own_headroom < level ? own_headroom : level);
}

uint32_t current_rate(const Config& config, const Sample& sample) {
  if (sample.higher_priority_active) return 0;
  const uint32_t request = clamp_percent(config.request_percent);
  const uint32_t limit = clamp_percent(share::effective_cores_limit(request, config.limit_percent));
  const uint32_t extra = sample.spare_percent == kSpareUnknown ? 0 : sample.spare_percent;
  return extra >= limit - request ? limit : request + extra;
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
  if (elapsed > 0 && sample.others_busy_ns * 100 >=
                         static_cast<int64_t>(config.others_threshold_percent) * elapsed) {
    state.others_seen_ns = sample.now_ns;
  }
  decision.others_active =
      state.others_seen_ns >= 0 && sample.now_ns - state.others_seen_ns < config.others_hold_ns;
  const uint32_t rate = current_rate(config, sample);
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

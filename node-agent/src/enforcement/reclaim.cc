#include "enforcement/reclaim.h"

#include <algorithm>
#include <map>

namespace tessera::agent {
namespace {

std::string mib(uint64_t bytes) {
  return std::to_string(bytes >> 20) + " MiB";
}

uint64_t saturating_add(uint64_t a, uint64_t b) {
  return a + b < a ? ~0ull : a + b;
}

}  // namespace

ReclaimPlan plan_reclaim(const ReclaimAsk& ask, uint64_t free_bytes,
                         const std::vector<ReclaimShare>& shares, uint64_t margin) {
  ReclaimPlan plan;
  const auto requester = std::find_if(shares.begin(), shares.end(),
                                      [&](const ReclaimShare& s) { return s.name == ask.share; });
  if (requester == shares.end()) {
    plan.reason = "the share holds nothing on the GPU by NVML's figures";
    return plan;
  }
  if (ask.bytes == 0) {
    plan.reason = "the request asks for nothing";
    return plan;
  }
  // Within its request with what it asks, by the agent's figure (NVML), not the tenant's word.
  if (saturating_add(requester->used, ask.bytes) > saturating_add(requester->request, margin)) {
    plan.reason = "the share is not within its request: it holds " + mib(requester->used) +
                  " and asks for " + mib(ask.bytes) + " more, its request is " +
                  mib(requester->request);
    return plan;
  }
  if (free_bytes >= ask.bytes) {
    plan.reason =
        "the GPU has " + mib(free_bytes) + " free, the request asks for " + mib(ask.bytes);
    return plan;
  }
  plan.shortage = ask.bytes - free_bytes;
  // The borrowers' processes, newest first.
  struct Candidate {
    const ReclaimShare* share;
    ReclaimProcess process;
  };
  std::vector<Candidate> candidates;
  std::map<const ReclaimShare*, uint64_t> holds;  // what each borrower holds as victims go
  uint64_t borrowed = 0;
  for (const ReclaimShare& share : shares) {
    if (&share == &*requester || share.used <= share.request) continue;
    holds[&share] = share.used;
    borrowed = saturating_add(borrowed, share.used - share.request);
    for (const ReclaimProcess& process : share.processes)
      if (process.used > 0) candidates.push_back({&share, process});
  }
  if (candidates.empty()) {
    plan.reason = "no share of the GPU holds more than its request";
    return plan;
  }
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    if (a.process.start_time != b.process.start_time)
      return a.process.start_time > b.process.start_time;
    return a.process.pid > b.process.pid;
  });
  std::vector<ReclaimVictim> victims;
  uint64_t freed = 0;
  for (const Candidate& candidate : candidates) {
    if (freed >= plan.shortage) break;
    uint64_t& held = holds[candidate.share];
    if (held <= candidate.share->request) continue;  // within its request now: not a borrower
    victims.push_back({candidate.share->name, candidate.process});
    held = held > candidate.process.used ? held - candidate.process.used : 0;
    freed = saturating_add(freed, candidate.process.used);
  }
  if (freed < plan.shortage) {
    plan.reason = "evicting every borrower's process the rule allows would free " + mib(freed) +
                  " of the " + mib(plan.shortage) + " the GPU lacks (borrowed: " + mib(borrowed) +
                  "): nobody is evicted in vain";
    return plan;
  }
  plan.victims = std::move(victims);
  plan.freed = freed;
  plan.reason = "the GPU lacks " + mib(plan.shortage) + " of the " + mib(ask.bytes) +
                " asked; evicting " + std::to_string(plan.victims.size()) +
                " borrowing process(es), newest first, frees " + mib(freed);
  return plan;
}

}  // namespace tessera::agent

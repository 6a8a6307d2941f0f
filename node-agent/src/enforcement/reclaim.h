// Reclaim, the pure part (docs/node-agent.md, "Reclaim"): which processes give memory back when a
// share within its memory request cannot get memory on a GPU because borrowers hold it. A
// borrower is a share whose processes hold more than its request (as NVML counts them); its bytes
// above the request were lent, not promised. The checker (checker.cc) gathers the figures, asks
// plan_reclaim, and hands each victim on as a reclaim_eviction finding (killed by the enforcement
// handler after its proof that the pid is still that share's process).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::agent {

struct ReclaimProcess {
  int pid = 0;
  uint64_t start_time = 0;  // /proc/<pid>/stat field 22: the order of eviction (newest first)
  uint64_t used = 0;        // NVML's figure
};

// A share on the GPU as the agent counts it.
struct ReclaimShare {
  std::string name;
  uint64_t request = 0;  // guaranteed bytes on this GPU (its whole limit when it sets no request)
  uint64_t used = 0;     // what its processes hold (NVML)
  std::vector<ReclaimProcess> processes;
};

// A reclaim request, from the share's usage page (untrusted: only `share` is known for sure, as
// the page is that share's; the bytes are the tenant's word).
struct ReclaimAsk {
  std::string share;
  uint64_t bytes = 0;
};

struct ReclaimVictim {
  std::string share;
  ReclaimProcess process;
};

struct ReclaimPlan {
  std::vector<ReclaimVictim> victims;  // empty: nobody is evicted
  uint64_t shortage = 0;               // what the GPU lacks for the request (0: nothing)
  uint64_t freed = 0;                  // what the victims hold
  std::string reason;                  // one sentence: why these, or why nobody
};

// The victims for `ask` on a GPU with `free_bytes` free (NVML, plus what evictions under way will
// give back), its shares `shares`. Nobody when the requester is not one of them, is above its
// request with the bytes asked (by the agent's figure, `margin` allowed for a context the shim
// charges differently), when the GPU has the bytes free, or when the borrowers together cannot
// cover the shortage (an eviction in vain). Otherwise the processes of borrowing shares, newest
// first (by start time, then pid), each only while its share still holds more than its request,
// until what they hold covers the shortage: never the requester's, never a process of a share
// within its request, never more than the shortage needs.
ReclaimPlan plan_reclaim(const ReclaimAsk& ask, uint64_t free_bytes,
                         const std::vector<ReclaimShare>& shares, uint64_t margin);

}  // namespace tessera::agent

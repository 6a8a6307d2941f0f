// The measured context cost (docs/libvgpu.md, "The context cost"). The shim charges each CUDA
// context a fixed cost unless told better, but what a context really takes differs by GPU, driver
// and the libraries a process loads (about 520 MiB per process on an H200). The agent compares
// each process's memory as NVML sees it (nvmlDeviceGetComputeRunningProcesses: trusted, the
// driver's figure) with what its slot in the share's usage page says it reserved for allocations
// (untrusted: a tenant can write anything there), and publishes the per-context cost per share and
// GPU in the share's limits page (LimitsPage::Measured::context_overhead). The shim then charges
// that, so the share's total as NVML sees it stays within its limit.
//
// Against a hostile tenant: a share's figure comes only from that share's own processes (a slot in
// its own page, owned by a live host process, on a GPU of its page), so a liar moves only its own
// share's figure; a process found in two shares' pages on one GPU is not measured (its charge may
// be split between them, and a forged copy must not speak for another share); each figure is
// clamped to [kMinContextCost, kMaxContextCost] and is the maximum over the share's processes of
// the last kContextCostPasses passes that measured any: a rise is published at once (the safe
// direction), a fall only once every recent pass agrees.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "clock/clock.h"
#include "usage/gpu_processes.h"
#include "usage/problems.h"

namespace tessera::agent {

inline constexpr uint64_t kMinContextCost = 64ull << 20;
inline constexpr uint64_t kMaxContextCost = 4ull << 30;
inline constexpr size_t kContextCostPasses = 5;

// One process of a share on one GPU, as one pass sees it.
struct ContextSample {
  uint64_t nvml_used_bytes = 0;  // NVML's usedGpuMemory of the host process on the GPU
  uint64_t slot_bytes = 0;       // its slot's bytes on that limits-page device (untrusted)
  uint32_t contexts_word = 0;    // its slot's ProcessSlot::contexts (untrusted)
  uint32_t device = 0;           // the limits-page device the sample is about
};

// The cost of one context of this process: (NVML's figure - what the slot reserved for
// allocations) / contexts, where the allocations are the slot's bytes minus contexts x the charge
// per context the slot states; clamped to [kMinContextCost, kMaxContextCost], rounded up to whole
// MiB. nullopt when the slot names no contexts on this device, says it cannot be measured, or
// does not add up (less than its own context charge, or more allocations than NVML sees).
std::optional<uint64_t> context_cost_of(const ContextSample& sample);

// The figure published for one share and GPU: the maximum over the last kContextCostPasses passes
// that measured any of the share's processes, of the largest cost of each pass.
class ContextCostWindow {
 public:
  // One pass's costs (context_cost_of of the share's processes). None: nothing measured, the
  // window keeps what it had.
  void add_pass(const std::vector<uint64_t>& costs);
  // Bytes per context; 0 = never measured.
  uint64_t published() const;

 private:
  std::deque<uint64_t> passes_;
};

struct ContextOverheadOptions {
  std::string shares_dir;  // "<state>/shares": one folder per share, each with limits and usage
  std::chrono::milliseconds period{1000};  // one measurement per period (the caller's passes)
  std::string nvml_library = "libnvidia-ml.so.1";
  std::string proc_root = "/proc";  // the host's: the agent runs with hostPID: true
};

struct ContextOverheadStats {
  uint64_t passes = 0;        // measurements made
  uint64_t samples = 0;       // processes measured (per share and GPU)
  uint64_t publications = 0;  // limits-page figures changed
};

// Measures and publishes the context cost of every share under shares_dir. Not thread-safe: one
// caller (the GPU-time meter's pass) drives it.
class ContextOverheadMeter {
 public:
  explicit ContextOverheadMeter(ContextOverheadOptions options);
  ~ContextOverheadMeter();
  ContextOverheadMeter(const ContextOverheadMeter&) = delete;
  ContextOverheadMeter& operator=(const ContextOverheadMeter&) = delete;

  // Measures once `period` has passed since the last measurement (at once the first time).
  // Returns the problems of the last measurement (none: empty), NVML's (a folder that is no usable
  // share is skipped, and never stops the others).
  Problems maybe_measure(Clock::time_point now);
  // Measures now.
  Problems measure();

  ContextOverheadStats stats() const { return stats_; }
  // The figure this meter holds for a share folder and limits-page device (0 = none yet).
  uint64_t published(const std::string& share_dir, uint32_t device) const;

 private:
  ContextOverheadOptions options_;
  std::unique_ptr<GpuProcessSource> nvml_;            // loaded at the first measurement
  std::map<std::string, ContextCostWindow> windows_;  // "<dir>#<device>"
  std::optional<Clock::time_point> last_;
  Problems last_problems_;
  ContextOverheadStats stats_;
};

}  // namespace tessera::agent

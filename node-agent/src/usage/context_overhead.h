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
// be split between them, and a forged copy must not speak for another share). Evidence comes only
// from a process whose slot agrees with NVML (its bytes within the checker's memory margin of
// NVML's figure, the rule of usage_disagrees); one that holds more than its slot says plus the
// margin (the over_memory_limit liar's rule) loses every sample it gave and is not heard again
// while it is on a GPU (the checker repairs its slot, which would then agree).
// Each figure is per process: the maximum of its last kContextCostPasses samples, so a fall waits
// for every recent pass of that process to agree and a rise is published at once; a share's figure
// is the maximum over its processes that are still on the GPU and in its page, clamped to
// [kMinContextCost, context_cost_cap(margin)] (what an honest process charged the shim's default
// can show), and 0 (the shim's default) once none is left: no figure outlives the processes that
// gave it, and one found in the limits page at start (an earlier run's) is replaced at the first
// measurement.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tessera/share_folder/snapshot.h"
#include "usage/gpu_processes.h"
#include "usage/problems.h"

namespace tessera::agent {

inline constexpr uint64_t kMinContextCost = 64ull << 20;
inline constexpr uint64_t kMaxContextCost = 4ull << 30;
inline constexpr size_t kContextCostPasses = 5;
// What the shim charges a context until the agent publishes a figure (libvgpu/src/region.h,
// kDefaultContextCharge).
inline constexpr uint64_t kShimDefaultContextCharge = 500ull << 20;
inline constexpr uint64_t kDefaultMemoryMargin = 256ull << 20;  // CheckerOptions::memory_margin

// The most a figure may be: a process whose slot agrees with NVML within `margin` can show at most
// that much over the charge it was given, and the first charge is the shim's default. Whole MiB,
// within [kMinContextCost, kMaxContextCost].
uint64_t context_cost_cap(uint64_t margin);

// True when a slot's bytes on a device (all the process's slots there) agree with NVML's figure
// for the process: within `margin` either way.
bool slot_agrees(uint64_t slot_bytes, uint64_t nvml_used_bytes, uint64_t margin);

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

// The figure published for one share and GPU, per process (owner word): the maximum of each
// process's last kContextCostPasses samples; the share's is the maximum over its processes.
class ContextCostWindow {
 public:
  // One pass: the costs measured (owner -> context_cost_of), and the owners still present (on the
  // GPU and in the share's page) that gave none this time (they keep their samples). Every other
  // process is forgotten: it is gone.
  void add_pass(const std::map<uint64_t, uint64_t>& costs, const std::set<uint64_t>& present);
  // Drops what `owner` gave (found lying).
  void forget(uint64_t owner);
  // Bytes per context, clamped to [kMinContextCost, cap]; 0 = no process measured.
  uint64_t published(uint64_t cap) const;
  bool empty() const { return processes_.empty(); }

 private:
  std::map<uint64_t, std::deque<uint64_t>> processes_;
};

struct ContextOverheadOptions {
  uint64_t memory_margin = kDefaultMemoryMargin;  // the checker's: wider is a lie
};

// What one measurement reads, once per pass (the agent's NodeObservation, observe/): each share
// folder's two pages, NVML's processes per GPU, and the host processes' owner words. The meter
// reads nothing itself; it maps a folder's limits page only to publish its figure.
struct ContextCostInputs {
  struct Folder {
    std::string dir;
    share_folder::LimitsPageCopy limits;
    share_folder::UsagePageCopy usage;
  };
  std::vector<Folder> folders;
  // Per GPU UUID: its processes as NVML listed them; absent: NVML did not answer (the figures on
  // that GPU stay as they are, and `problems` says why).
  std::map<std::string, std::vector<GpuProcessMemory>> processes;
  std::map<int, uint64_t> owners;  // host pid -> owner word, of every live host process
  Problems problems;               // what could not be read (NVML's answers)
};

struct ContextOverheadStats {
  uint64_t passes = 0;        // measurements made
  uint64_t samples = 0;       // processes measured (per share and GPU)
  uint64_t publications = 0;  // limits-page figures changed
  uint64_t disagreed = 0;     // processes found with a slot NVML contradicts (samples dropped)
};

// Measures and publishes the context cost of every share folder a pass read. Not thread-safe: one
// caller (the agent's check pass, after the check) drives it.
class ContextOverheadMeter {
 public:
  explicit ContextOverheadMeter(ContextOverheadOptions options);
  ~ContextOverheadMeter();
  ContextOverheadMeter(const ContextOverheadMeter&) = delete;
  ContextOverheadMeter& operator=(const ContextOverheadMeter&) = delete;

  // One measurement of `inputs`. Returns its problems (none: empty): the inputs' and a figure that
  // could not be published (a folder that is no usable share is skipped, and never stops the
  // others).
  Problems measure(const ContextCostInputs& inputs);

  ContextOverheadStats stats() const { return stats_; }
  // The figure this meter holds for a share folder and limits-page device (0 = none yet).
  uint64_t published(const std::string& share_dir, uint32_t device) const;
  // True while the process with this owner word is not heard (its slot disagreed with NVML).
  bool distrusts(uint64_t owner) const { return distrusted_.count(owner) != 0; }

 private:
  ContextOverheadOptions options_;
  std::map<std::string, ContextCostWindow> windows_;  // "<dir>#<device>"
  std::set<uint64_t> distrusted_;                     // owner words, until they leave the GPUs
  ContextOverheadStats stats_;
};

}  // namespace tessera::agent

// The agent side of the compute quota's measurement seam (docs/compute.md, "The agent's GPU-time
// meter"). Inside Kubernetes a share's processes run in containers: the pids the shim knows are
// not NVML's host pids, so the shim cannot tell its own GPU time. GpuTimeMeter queries NVML's
// per-process utilisation per GPU on the host, attributes each host pid to the shares whose usage
// page holds a live slot owned by that process (owner word: innermost pid, pid namespace, start
// time), and publishes cumulative `measured[]` figures into the limits page of every share whose
// `measure_source` is kMeasureAgent. The shim's AgentSource differences them. It also owns
// priority: from the same samples it sets each such share's `yield_mask` (bit d: a share of higher
// priority was busy on the share's device d within `priority_hold`), so no share reads a file
// another share writes. And it owns the compute classes: each such share's
// `requests[d].spare_percent`, its part of the device's spare time (spare_part below), from the
// requests and limits of the shares active on the device.
//
// Where NVML has no per-process utilisation (a MIG instance, a GPU in MIG mode: NVML answers
// NOT_SUPPORTED), the shims of the shares there time their own launches into their slots'
// `gpu_busy_ns` (libvgpu/src/compute/timed_launch.h). For such a device the meter differences
// those slots instead (bounded, per slot monotonic: the usage page is the tenants' file), so each
// MIG instance is a device of its own for spare_percent and yield_mask. The slots say what each
// share's launches spanned, which includes the time the instance gave the other shares meanwhile
// (it time-slices); so where the shares' processes publish when they were pending (each share's
// `pending-<uuid>` file, tessera/pending_spans.h), the meter charges every share its processes'
// equal parts of that time across all the shares of the instance (share::equal_parts), over a
// window `share::kPendingLag` behind now, and sets the device's bit in the share's `split_mask`:
// the shim then charges that figure instead of its own spans (docs/compute.md, "Under the agent").
// A share with no compute setting on such a device is asked to time its launches there too
// (`time_launches_mask`) while a limited share is beside it, so that the split sees its turns.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "clock/clock.h"
#include "clock/periodic_loop.h"
#include "tessera/pending_spans.h"
#include "tessera/status.h"
#include "tessera/thread_annotations.h"
#include "usage/problems.h"
#include "usage/share_processes.h"

namespace tessera::agent {

// What a share claims on a GPU, in percent (a limit below the request means the request).
struct CoresClaim {
  uint32_t request = 0;
  uint32_t limit = 0;
};

// A share's part of a GPU's spare time, percent above its request (docs/compute.md, Classes): 100
// less the requests of `own` and of `others` (the other shares of its priority active on the GPU),
// split equally among those whose limit is above their request, water-filled (a share its limit
// caps below an equal part leaves the rest to the others); whole percents, rounded down. The same
// rule as the shim's compute::spare_part (libvgpu/src/compute/controller.h), which `tessera run`
// shares apply among themselves.
uint32_t spare_part(const CoresClaim& own, const std::vector<CoresClaim>& others);

struct GpuTimeMeterOptions {
  std::string shares_dir;  // "<state>/shares": one folder per share, each with limits and usage
  std::chrono::milliseconds period{20};  // one NVML query per GPU and one publication per share
  // Full rescan of share folders, usage-page owners and host pids. A process NVML reports that the
  // last scan did not know triggers a re-read of the usage pages at once (once per process).
  std::chrono::milliseconds pid_refresh{500};
  // A share that used its GPU counts as active on it this long (the shim's announcement hold).
  std::chrono::milliseconds priority_hold{100};
  std::string nvml_library = "libnvidia-ml.so.1";
  std::string proc_root = "/proc";  // the host's: the agent runs with hostPID: true
};

// What the meter did so far (for logs, metrics and tests).
struct GpuTimeMeterStats {
  uint64_t passes = 0;           // passes run (the meter's loop or sample_once())
  uint64_t windows = 0;          // NVML windows measured (per GPU, not counting priming)
  uint64_t publications = 0;     // measured[] updates (per share and device)
  uint64_t nvml_errors = 0;      // queries that failed (GPU lost, ...): nothing published
  uint64_t usage_rereads = 0;    // usage pages re-read because an unknown process appeared
  uint64_t unattributed_ns = 0;  // GPU time of processes in no agent-measured share
  uint64_t yield_changes = 0;    // yield_mask stores that changed a share's mask
  uint64_t spare_changes = 0;    // spare_percent stores that changed a share's figure
  uint64_t timed_windows = 0;    // windows measured from the shims' timed slots (per device)
  // Slot figures not taken as they were: a slot whose gpu_busy_ns went down (not counted), or a
  // share's growth over the window's wall time (cut to it).
  uint64_t slot_figures_refused = 0;
  uint64_t split_windows = 0;          // windows of a timed device charged by the equal split
  uint64_t pending_refused = 0;        // pending files not taken (a symlink, truncated, full, ...)
  uint64_t time_launches_changes = 0;  // time_launches_mask bits set or cleared
  size_t shares = 0;                   // valid limits pages found in the last scan
  size_t agent_shares = 0;             // of them, measure_source == kMeasureAgent
  size_t gpus = 0;                     // GPUs queried
  size_t timed_gpus = 0;               // of them, devices NVML cannot measure (the shims' slots)
  std::string last_error;              // the most recent problem ("" = none)
};

class GpuTimeMeter {
 public:
  // `clock` paces the loop and the rescans (tests pass a SimulatedClock); it outlives the meter.
  // The figures themselves are stamped with the real clocks NVML and the shim read.
  explicit GpuTimeMeter(GpuTimeMeterOptions options, Clock& clock = real_clock());
  ~GpuTimeMeter();  // stops the loop; shuts NVML down
  GpuTimeMeter(const GpuTimeMeter&) = delete;
  GpuTimeMeter& operator=(const GpuTimeMeter&) = delete;

  // Loads and initialises NVML, then runs a pass at once and one every period on a PeriodicLoop.
  // Returns what went wrong (NVML missing or failing: unavailable; already running): the agent
  // then runs without the meter.
  Status start();
  // Stops the loop (waiting only for a pass in progress). Idempotent.
  void stop();

  // One pass: rescan if due, one NVML query per GPU that an agent-measured share names, publish.
  // Loads NVML on first use. Returns ok or the problems of this pass, "; "-separated (the pass
  // still publishes what it could: a bad share folder never stops the others).
  Status sample_once() TESSERA_EXCLUDES(mutex_);

  GpuTimeMeterStats stats() const TESSERA_EXCLUDES(mutex_);

  // Passes the loop completed since start() (0 when stopped), and a bounded wait for a count of
  // them: tests advance their clock by the period and wait for the pass instead of sleeping.
  uint64_t loop_passes() const;
  bool wait_for_loop_passes(uint64_t count,
                            std::chrono::milliseconds timeout = std::chrono::seconds(10)) const;

 private:
  struct Nvml;
  struct Share;
  struct Gpu;

  Status load_nvml() TESSERA_REQUIRES(mutex_);  // kUnavailable when NVML cannot be used
  Problems pass() TESSERA_REQUIRES(mutex_);
  void rescan(Problems& problems) TESSERA_REQUIRES(mutex_);
  void read_owners(Share& share) TESSERA_REQUIRES(mutex_);
  std::optional<uint64_t> owner_of(int host_pid) TESSERA_REQUIRES(mutex_);
  void loop_pass() TESSERA_EXCLUDES(mutex_);
  // yield_mask and spare_percent of every agent-measured share, from the shares' activity.
  void publish_classes(Clock::time_point now) TESSERA_REQUIRES(mutex_);
  // Finds the GPU's handle and whether NVML measures it; false (noted) when it cannot be used.
  bool resolve(Gpu& gpu, Problems& problems) TESSERA_REQUIRES(mutex_);
  // One window of a GPU NVML measures: its processes' samples, attributed by owner word.
  void measure_by_nvml(Gpu& gpu, Clock::time_point now, bool& reread, Problems& problems)
      TESSERA_REQUIRES(mutex_);
  // The growth of the share's slots since the last pass, per device of its page whose bit is set
  // in `timed` (the devices NVML cannot measure).
  void read_timed_slots(Share& share, uint64_t timed, uint64_t now_ns) TESSERA_REQUIRES(mutex_);
  // One window of a GPU whose shims time their launches: each share's equal part of the time its
  // processes were pending where its pending file can be taken, else its slot growth.
  void measure_by_slots(Gpu& gpu, Clock::time_point now, Problems& problems)
      TESSERA_REQUIRES(mutex_);

  GpuTimeMeterOptions options_;
  Clock& clock_;
  mutable Mutex mutex_;  // one pass at a time
  std::unique_ptr<Nvml> nvml_ TESSERA_GUARDED_BY(mutex_);
  std::vector<std::unique_ptr<Share>> shares_ TESSERA_GUARDED_BY(mutex_);
  std::vector<std::unique_ptr<Gpu>> gpus_ TESSERA_GUARDED_BY(mutex_);
  // Host pid -> owner word, per rescan.
  std::map<int, std::optional<uint64_t>> owner_cache_ TESSERA_GUARDED_BY(mutex_);
  // Owner words in no share's page (usage pages re-read since).
  std::set<uint64_t> strangers_ TESSERA_GUARDED_BY(mutex_);
  Clock::time_point next_rescan_ TESSERA_GUARDED_BY(mutex_){};
  Problems rescan_problems_ TESSERA_GUARDED_BY(mutex_);  // what the last rescan found wrong
  // Scratch of measure_by_slots: a pending file as read, the window's spans and the split's.
  std::unique_ptr<share::PendingPage> pending_page_ TESSERA_GUARDED_BY(mutex_);
  std::vector<share::ProcessSpan> spans_ TESSERA_GUARDED_BY(mutex_);
  std::vector<share::SpanEdge> edges_ TESSERA_GUARDED_BY(mutex_);
  GpuTimeMeterStats stats_ TESSERA_GUARDED_BY(mutex_);

  std::string last_loop_problem_;       // the loop's thread only: one log line per change
  std::unique_ptr<PeriodicLoop> loop_;  // last: its passes use everything above
};

}  // namespace tessera::agent

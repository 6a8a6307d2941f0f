// The launch gate's slow path and the meter thread of each process (docs/compute.md).
#include "compute/gate.h"

#include <pthread.h>
#include <signal.h>

#include <new>

#include "glibc_compat.h"

#include "compute/meter.h"
#include "compute/nvml_source.h"
#include "compute/pending_board.h"
#include "compute/priority_board.h"
#include "hooks.h"
#include "log.h"
#include "os/system_calls.h"
#include "state.h"

namespace tessera::vgpu::compute {

namespace {
constinit std::atomic<uint64_t> g_always_open{0};
constinit std::atomic<bool> g_started{false};  // every open share has its meter
// shares_generation() + 1 when the shares without a meter were last found without a compute
// setting (0: never looked): until the agent changes a limits page there is nothing to recheck.
constinit std::atomic<uint64_t> g_checked_generation{0};
constinit std::atomic<uint32_t> g_started_shares{0};  // bit r: share r's meter was started
constinit std::atomic<bool> g_checking{false};
constinit std::atomic<bool> g_exiting{false};
constinit std::atomic<Meter*> g_meters[kMaxShares] = {};
constinit std::atomic<std::atomic<uint64_t>*> g_more_closed[kMaxShares] = {};
// Per share: bit d = this process times its launches on limits-page device d (timed_launch.h).
constinit std::atomic<uint64_t> g_timed_masks[kMaxShares] = {};
// Set once any share times launches: every launch then takes the slow path (more_gates_closed).
constinit std::atomic<bool> g_timing{false};

int64_t monotonic_ns() {
  return os::monotonic_ns();
}

void sleep_until(int64_t deadline_ns) {
  os::sleep_until_monotonic_ns(deadline_ns);
}

// Launches of this process, from the wrappers' call counters (no extra work on the launch path).
uint64_t own_launches() {
  static constexpr HookId kLaunches[] = {kHook_cuLaunchKernel,
                                         kHook_cuLaunchKernel_ptsz,
                                         kHook_cuLaunchKernelEx,
                                         kHook_cuLaunchKernelEx_ptsz,
                                         kHook_cuLaunchCooperativeKernel,
                                         kHook_cuLaunchCooperativeKernel_ptsz,
                                         kHook_cuGraphLaunch,
                                         kHook_cuGraphLaunch_ptsz};
  uint64_t sum = 0;
  for (HookId id : kLaunches) sum += calls_of(id);
  return sum;
}

// Whether the share limits device d now (a cores request below 100, or a priority), or the agent
// asks it to time its launches there (time_launches_mask: a limited share is beside it): its
// launches there are then timed where NVML cannot measure them.
bool device_has_compute(const share::LimitsPage& limits, int device) {
  return share::device_limited(limits, static_cast<uint32_t>(device)) ||
         ((limits.time_launches_mask.load(std::memory_order_acquire) >> device) & 1u) != 0;
}

// Whether this process should run a meter for the share: a compute setting, or (under the agent)
// a MIG device, where the agent may ask the share to time its launches at any time
// (time_launches_mask) and only a running meter thread notices: a launch that finds its gates open
// looks at nothing else.
bool wants_meter(const share::LimitsPage& limits) {
  if (Meter::share_has_compute(limits)) return true;
  if (limits.measure_source.load(std::memory_order_acquire) != share::kMeasureAgent) return false;
  uint32_t count = limits.device_count.load(std::memory_order_acquire);
  if (count > share::kMaxDevices) count = share::kMaxDevices;
  for (uint32_t d = 0; d < count; ++d) {
    const char* uuid = limits.devices[d].uuid;
    if (uuid[0] == 'M' && uuid[1] == 'I' && uuid[2] == 'G' && uuid[3] == '-') return true;
  }
  return false;
}

// Every launch takes the slow path (more_gates_closed) once a share of this process times launches
// on some device: from the first timed device that has a compute setting or is asked to be timed.
// Latched: never cleared.
void start_timing_if_wanted(int r) {
  if (g_timing.load(std::memory_order_acquire)) return;
  const uint64_t timed = g_timed_masks[r].load(std::memory_order_acquire);
  if (timed == 0) return;
  const share::LimitsPage& limits = *shim().regions[r].limits_page();
  bool wanted = false;
  for (uint64_t left = timed; left != 0 && !wanted; left &= left - 1)
    wanted = device_has_compute(limits, __builtin_ctzll(left));
  if (wanted && !g_timing.exchange(true, std::memory_order_acq_rel))
    g_more_closed_count.fetch_add(1, std::memory_order_acq_rel);  // every launch: the slow path
}

bool owner_alive(uint64_t owner, void* context) {
  return static_cast<Region*>(context)->owner_alive(owner);
}

struct MeterThread {
  NvmlSource* nvml = nullptr;
  AgentSource* agent = nullptr;
  OwnSource* own = nullptr;
  LimitsYield* agent_yield = nullptr;
  UserBoard* user_board = nullptr;
  // Where the timed devices' pending spans go: the user's board (`tessera run`), or the share's
  // folder, for the agent (pending_board.h).
  PendingBoard* pending_board = nullptr;
  Meter* meter = nullptr;
  Region* region = nullptr;
  int share = -1;                // the region's position
  PendingSpan* taken = nullptr;  // room for kPendingQueue spans (publish_pending)
};

// Publishes the spans this process's timed launches of the share were pending (every process of
// the share, leader or not: the leader charges each process its part of the time it was pending).
void publish_pending(MeterThread& parts, int64_t now_ns) {
  if (!parts.pending_board) return;
  const int count = take_pending(parts.share, parts.taken, kPendingQueue);
  // Per device, in the order taken (publish() takes one device's spans at a time).
  uint64_t devices = 0;
  for (int i = 0; i < count; ++i) devices |= 1ull << parts.taken[i].device;
  while (devices != 0) {
    const int device = __builtin_ctzll(devices);
    devices &= devices - 1;
    PendingSpan of_device[kPendingQueue];  // 6 KiB of the thread's 256
    int n = 0;
    for (int i = 0; i < count; ++i) {
      if (parts.taken[i].device == device) of_device[n++] = parts.taken[i];
    }
    parts.pending_board->publish(device, of_device, n, now_ns);
  }
}

void* meter_main(void* argument) {
  auto* parts = static_cast<MeterThread*>(argument);
  Meter& meter = *parts->meter;
  while (true) {
    const int64_t now = monotonic_ns();
    if (share::ProcessSlot* slot = parts->region->own_slot()) {
      slot->launches.store(own_launches(), std::memory_order_relaxed);
    }
    int64_t next = now + meter.timing().follower_period_ns;
    // The agent may have asked the share to time its launches since the last look.
    start_timing_if_wanted(parts->share);
    // Where launches are timed, every process publishes its pending spans every period.
    const bool timing = g_timed_masks[parts->share].load(std::memory_order_acquire) != 0;
    if (timing) {
      publish_pending(*parts, now);
      next = now + meter.timing().period_ns;
    }
    if (!g_exiting.load(std::memory_order_acquire) && meter.lead(now)) next = meter.tick(now);
    sleep_until(next);
  }
  return nullptr;
}

// The meter of share `r` (shim().regions[r]).
void start_thread(int r) {
  Shim& s = shim();
  Region& region = s.regions[r];
  const share::LimitsPage* limits = region.limits_page();
  share::UsagePage* usage = region.usage_page();
  share::ProcessSlot* slot = region.own_slot();
  if (!slot) {
    TESSERA_ERROR("no process slot: this process cannot take part in the share's compute meter");
    return;
  }
  // Static storage, built in place (the shim allocates nothing: no operator new from the static
  // libstdc++). A forked child builds its own again over the parent's copies.
  alignas(NvmlSource) static unsigned char nvml_storages[kMaxShares][sizeof(NvmlSource)];
  alignas(AgentSource) static unsigned char agent_storages[kMaxShares][sizeof(AgentSource)];
  alignas(LimitsYield) static unsigned char yield_storages[kMaxShares][sizeof(LimitsYield)];
  alignas(UserBoard) static unsigned char board_storages[kMaxShares][sizeof(UserBoard)];
  alignas(OwnSource) static unsigned char own_storages[kMaxShares][sizeof(OwnSource)];
  alignas(PendingBoard) static unsigned char pending_storages[kMaxShares][sizeof(PendingBoard)];
  alignas(Meter) static unsigned char meter_storages[kMaxShares][sizeof(Meter)];
  static MeterThread all_parts[kMaxShares];
  static PendingSpan taken_spans[kMaxShares][kPendingQueue];  // zero-filled storage
  MeterThread& parts = all_parts[r];
  unsigned char* nvml_storage = nvml_storages[r];
  unsigned char* agent_storage = agent_storages[r];
  unsigned char* yield_storage = yield_storages[r];
  unsigned char* board_storage = board_storages[r];
  unsigned char* meter_storage = meter_storages[r];
  unsigned char* own_storage = own_storages[r];
  parts.region = &region;
  parts.share = r;
  parts.taken = taken_spans[r];
  BusySource* source = nullptr;
  PriorityBoard* board = nullptr;
  if (limits->measure_source.load(std::memory_order_acquire) == share::kMeasureAgent) {
    parts.agent = new (agent_storage) AgentSource(limits);
    source = parts.agent;
    // The agent measures every share and publishes yield_mask: no file shared with other shares
    // is opened, created or mapped.
    if (!parts.agent_yield) parts.agent_yield = new (yield_storage) LimitsYield(limits);
    board = parts.agent_yield;
  } else {
    if (!parts.nvml) {
      parts.nvml = new (nvml_storage) NvmlSource(limits, usage);
      if (!parts.nvml->open()) {
        TESSERA_ERROR(
            "NVML is not usable: the share's GPU time cannot be measured, so its compute limit "
            "is not enforced by this process");
      }
    } else {
      parts.nvml->reset();
    }
    source = parts.nvml;
    // One machine without an agent: this user's board (priority_board.h).
    if (!parts.user_board)
      parts.user_board = new (board_storage) UserBoard(
          limits, s.options.device_dir, UserBoard::share_identity(region.dir(), region.owner()));
    board = parts.user_board;
  }
  // Devices whose NVML has no per-process utilisation (MIG): the share's processes time their own
  // launches there, whatever measures the other devices (the agent cannot measure them either).
  if (!parts.nvml) {
    parts.nvml = new (nvml_storage) NvmlSource(limits, usage);
    if (!parts.nvml->open()) {
      TESSERA_INFO("NVML is not usable: devices it cannot measure are not recognised");
    }
  }
  parts.nvml->set_timed_mask(&g_timed_masks[r]);
  // Every device of the share is asked, limited now or not: the agent may limit it later, and a
  // launch is timed only while its device has a compute setting (wait_at_gate).
  uint64_t timed = 0;
  uint32_t count = limits->device_count.load(std::memory_order_acquire);
  if (count > share::kMaxDevices) count = share::kMaxDevices;
  for (uint32_t d = 0; d < count; ++d) {
    if (!parts.nvml->utilization_unsupported(static_cast<int>(d))) continue;
    timed |= 1ull << d;
    TESSERA_INFO(
        "device %s: NVML has no per-process utilisation (a MIG instance): while the share has a "
        "compute setting there, its launches are timed by the shim",
        limits->devices[d].uuid);
  }
  g_timed_masks[r].store(timed, std::memory_order_release);
  // `tessera run` shares of one instance see each other's pending spans on the user's board
  // folder, and each share's leader charges from it; under the agent the shares are in other
  // containers: each process publishes into its share's folder, the agent splits across the
  // shares and says so in split_mask (pending_board.h).
  if (timed != 0 && !parts.pending_board) {
    if (parts.user_board) {
      parts.pending_board = new (pending_storages[r])
          PendingBoard(limits, s.options.device_dir,
                       UserBoard::share_identity(region.dir(), region.owner()), region.owner());
    } else if (region.dir()[0]) {
      parts.pending_board = new (pending_storages[r])
          PendingBoard(limits, region.dir(), 1, region.owner(), PendingBoard::Where::kShareFolder);
    }
  }
  parts.own = new (own_storage)
      OwnSource(usage, source, &g_timed_masks[r], parts.user_board ? parts.pending_board : nullptr,
                OwnSource::kPendingLag, parts.agent ? limits : nullptr);
  source = parts.own;
  parts.meter =
      new (meter_storage) Meter(limits, usage, source, board, region.owner(), owner_alive, &region);
  g_meters[r].store(parts.meter, std::memory_order_release);
  // Devices the share gives no GPU time are closed before any launch can pass (the meter keeps
  // them closed; wait_at_gate refuses their launches).
  if (const uint64_t none = Meter::no_time_mask(*limits); none != 0)
    usage->compute.closed_mask.fetch_or(none, std::memory_order_acq_rel);
  start_timing_if_wanted(r);
  // The first share with a meter has the fast path's word; the others are looked at after it.
  std::atomic<uint64_t>* closed = &usage->compute.closed_mask;
  std::atomic<uint64_t>* expected = &g_always_open;
  if (!g_closed_word.compare_exchange_strong(expected, closed, std::memory_order_acq_rel) &&
      expected != closed) {
    g_more_closed[r].store(closed, std::memory_order_release);
    g_more_closed_count.fetch_add(1, std::memory_order_acq_rel);
  }

  sigset_t all;
  sigset_t previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);  // the application's signals are not ours
  pthread_t thread;
  pthread_attr_t attributes;
  pthread_attr_init(&attributes);
  pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attributes, 256 * 1024);
  const int failed = pthread_create(&thread, &attributes, meter_main, &parts);
  pthread_attr_destroy(&attributes);
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (failed) {
    TESSERA_ERROR("cannot start the compute meter thread (error %d)", failed);
    return;
  }
  TESSERA_INFO("compute meter of share %s started",
               region.dir()[0] ? region.dir() : "(standalone)");
}

// A leader that exits cleanly hands the lead over at once (the others would otherwise wait for
// its heartbeat to go stale).
__attribute__((destructor)) void resign_at_exit() {
  g_exiting.store(true, std::memory_order_release);
  for (int r = 0; r < kMaxShares; ++r) {
    Meter* meter = g_meters[r].load(std::memory_order_acquire);
    if (!meter) continue;
    meter->resign();
    // The last launches since the thread's last publication.
    if (share::ProcessSlot* slot = shim().regions[r].own_slot()) {
      slot->launches.store(own_launches(), std::memory_order_relaxed);
    }
  }
}

}  // namespace

constinit std::atomic<std::atomic<uint64_t>*> g_closed_word{&g_always_open};
constinit std::atomic<int> g_more_closed_count{0};

bool more_gates_closed() {
  if (g_timing.load(std::memory_order_relaxed)) return true;
  for (const auto& word : g_more_closed) {
    const std::atomic<uint64_t>* closed = word.load(std::memory_order_relaxed);
    if (closed && closed->load(std::memory_order_relaxed) != 0) return true;
  }
  return false;
}

void maybe_start() {
  if (__builtin_expect(g_started.load(std::memory_order_acquire), 1)) return;
  Shim& s = shim();
  if (s.region_state.load(std::memory_order_acquire) != 2) return;
  // The usual case on the allocation path: no share (still) without a meter has a compute
  // setting, and no limits page changed since that was last seen (latched by generation).
  const uint64_t generation = shares_generation() + 1;
  if (g_checked_generation.load(std::memory_order_acquire) == generation) return;
  uint32_t started = g_started_shares.load(std::memory_order_acquire);
  bool wanted = false;
  for (int r = 0; r < s.region_count && !wanted; ++r) {
    wanted = (started & (1u << r)) == 0 && wants_meter(*s.regions[r].limits_page());
  }
  if (!wanted) {
    g_checked_generation.store(generation, std::memory_order_release);
    return;
  }
  if (g_checking.exchange(true, std::memory_order_acq_rel)) return;
  started = g_started_shares.load(std::memory_order_acquire);
  bool all = true;
  for (int r = 0; r < s.region_count; ++r) {
    if (started & (1u << r)) continue;
    if (!wants_meter(*s.regions[r].limits_page())) {
      all = false;  // the agent may give it a compute setting later
      continue;
    }
    start_thread(r);
    started |= 1u << r;
  }
  g_started_shares.store(started, std::memory_order_release);
  if (all) g_started.store(true, std::memory_order_release);
  g_checked_generation.store(generation, std::memory_order_release);
  g_checking.store(false, std::memory_order_release);
}

void reset_after_fork() {
  g_started.store(false, std::memory_order_relaxed);
  g_checked_generation.store(0, std::memory_order_relaxed);
  g_started_shares.store(0, std::memory_order_relaxed);
  g_checking.store(false, std::memory_order_relaxed);
  reset_pending_after_fork();
  // Until the child's own meters start it keeps obeying the shares' gates (same pages).
}

bool wait_at_gate(TimedLaunch* timed) {
  Shim& s = shim();
  if (s.region_state.load(std::memory_order_acquire) != 2) return true;
  maybe_start();
  CudaOrdinal ordinal;
  const GpuIndex index = current_device(&ordinal, nullptr);
  if (!index.is_gpu()) return true;
  // Every share of this GPU that has a meter gates its launches (docs/libvgpu.md, "Compute").
  const uint32_t started = g_started_shares.load(std::memory_order_acquire);
  const int64_t began = monotonic_ns();
  int64_t now = began;
  Region* waited = nullptr;
  for (int r = 0; r < s.region_count; ++r) {
    if ((started & (1u << r)) == 0) continue;
    const LimitsIndex limits_index = share_device(index, r);
    if (!limits_index.found() || limits_index.value >= static_cast<int>(share::kMaxDevices))
      continue;
    const int device = limits_index.value;
    share::ComputeArea& area = s.regions[r].usage_page()->compute;
    const uint64_t bit = 1ull << device;
    if (timed && (g_timed_masks[r].load(std::memory_order_acquire) & bit) != 0 &&
        device_has_compute(*s.regions[r].limits_page(), device)) {
      timed->slot = s.regions[r].own_slot();
      timed->share = r;
      timed->device = device;
    }
    if ((area.closed_mask.load(std::memory_order_acquire) & bit) != 0 &&
        Meter::no_time(s.regions[r].limits_page()->devices[device])) {
      static std::atomic<bool> said{false};
      if (!said.exchange(true, std::memory_order_relaxed)) {
        TESSERA_ERROR("share %s gives this GPU no GPU time (cores 0): launches are refused",
                      s.regions[r].dir()[0] ? s.regions[r].dir() : "(standalone)");
      }
      return false;
    }
    while ((area.closed_mask.load(std::memory_order_acquire) & bit) != 0) {
      waited = &s.regions[r];
      const int64_t reopen =
          static_cast<int64_t>(area.devices[device].reopen_at_ns.load(std::memory_order_acquire));
      // Sleep until the expected reopening, re-checking at least every 2 ms (the meter may open
      // the gate earlier: a burst, a higher-priority share going quiet) and never spinning.
      int64_t wake = reopen;
      if (wake > now + 2 * kMillisecond) wake = now + 2 * kMillisecond;
      if (wake < now + 100'000) wake = now + 100'000;
      sleep_until(wake);
      if (g_timing.load(std::memory_order_relaxed)) collect_timed();
      now = monotonic_ns();
      // A gate left closed by a leader that died stays closed only until this process's own
      // meter takes the lead over (MeterTiming::leader_timeout_ns).
    }
  }
  if (!waited) return true;
  if (share::ProcessSlot* slot = waited->own_slot()) {
    slot->throttled_ns.fetch_add(static_cast<uint64_t>(now - began), std::memory_order_relaxed);
  }
  return true;
}

}  // namespace tessera::vgpu::compute

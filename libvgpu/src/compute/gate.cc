// The launch gate's slow path and the meter thread of each process (docs/compute.md).
#include "compute/gate.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>

#include <new>

#include "glibc_compat.h"

#include "compute/meter.h"
#include "compute/nvml_source.h"
#include "hooks.h"
#include "log.h"
#include "state.h"

namespace tessera::vgpu::compute {

namespace {
constinit std::atomic<uint64_t> g_always_open{0};
constinit std::atomic<bool> g_started{false};
constinit std::atomic<bool> g_checking{false};
constinit std::atomic<bool> g_exiting{false};
constinit std::atomic<Meter*> g_meter{nullptr};

int64_t monotonic_ns() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<int64_t>(now.tv_sec) * kSecond + now.tv_nsec;
}

void sleep_until(int64_t deadline_ns) {
  timespec until{};
  until.tv_sec = deadline_ns / kSecond;
  until.tv_nsec = deadline_ns % kSecond;
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, nullptr) == EINTR) {
  }
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
  for (HookId id : kLaunches) sum += g_entries[id].calls.load(std::memory_order_relaxed);
  return sum;
}

bool owner_alive(uint64_t owner, void* context) {
  return static_cast<Region*>(context)->owner_alive(owner);
}

struct MeterThread {
  NvmlSource* nvml = nullptr;
  AgentSource* agent = nullptr;
  FileBoard* board = nullptr;
  Meter* meter = nullptr;
};

void* meter_main(void* argument) {
  auto* parts = static_cast<MeterThread*>(argument);
  Shim& s = shim();
  Meter& meter = *parts->meter;
  while (true) {
    const int64_t now = monotonic_ns();
    if (share::ProcessSlot* slot = s.region.own_slot()) {
      slot->launches.store(own_launches(), std::memory_order_relaxed);
    }
    int64_t next = now + meter.timing().follower_period_ns;
    if (!g_exiting.load(std::memory_order_acquire) && meter.lead(now)) next = meter.tick(now);
    sleep_until(next);
  }
  return nullptr;
}

void start_thread() {
  Shim& s = shim();
  const share::LimitsPage* limits = s.region.limits_page();
  share::UsagePage* usage = s.region.usage_page();
  share::ProcessSlot* slot = s.region.own_slot();
  if (!slot) {
    TESSERA_ERROR("no process slot: this process cannot take part in the share's compute meter");
    return;
  }
  // Static storage, built in place (the shim allocates nothing: no operator new from the static
  // libstdc++). A forked child builds its own again over the parent's copies.
  alignas(NvmlSource) static unsigned char nvml_storage[sizeof(NvmlSource)];
  alignas(AgentSource) static unsigned char agent_storage[sizeof(AgentSource)];
  alignas(FileBoard) static unsigned char board_storage[sizeof(FileBoard)];
  alignas(Meter) static unsigned char meter_storage[sizeof(Meter)];
  static MeterThread parts;
  BusySource* source = nullptr;
  if (limits->measure_source.load(std::memory_order_acquire) == share::kMeasureAgent) {
    parts.agent = new (agent_storage) AgentSource(limits);
    source = parts.agent;
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
  }
  if (!parts.board) parts.board = new (board_storage) FileBoard(limits, s.options.device_dir);
  parts.meter = new (meter_storage)
      Meter(limits, usage, source, parts.board, s.region.owner(), owner_alive, &s.region);
  g_meter.store(parts.meter, std::memory_order_release);
  g_closed_word.store(&usage->compute.closed_mask, std::memory_order_release);

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
  TESSERA_INFO("compute meter started");
}

// A leader that exits cleanly hands the lead over at once (the others would otherwise wait for
// its heartbeat to go stale).
__attribute__((destructor)) void resign_at_exit() {
  g_exiting.store(true, std::memory_order_release);
  Meter* meter = g_meter.load(std::memory_order_acquire);
  if (!meter) return;
  meter->resign();
  // The last launches since the thread's last publication.
  if (share::ProcessSlot* slot = shim().region.own_slot()) {
    slot->launches.store(own_launches(), std::memory_order_relaxed);
  }
}

}  // namespace

constinit std::atomic<std::atomic<uint64_t>*> g_closed_word{&g_always_open};

void maybe_start() {
  if (__builtin_expect(g_started.load(std::memory_order_acquire), 1)) return;
  Shim& s = shim();
  if (!s.region.is_open() || !Meter::share_has_compute(*s.region.limits_page())) return;
  if (g_checking.exchange(true, std::memory_order_acq_rel)) return;
  if (!g_started.load(std::memory_order_acquire)) {
    start_thread();
    g_started.store(true, std::memory_order_release);
  }
  g_checking.store(false, std::memory_order_release);
}

void reset_after_fork() {
  g_started.store(false, std::memory_order_relaxed);
  g_checking.store(false, std::memory_order_relaxed);
  // Until the child's own meter starts it keeps obeying the share's gates (same page).
}

void wait_at_gate() {
  Shim& s = shim();
  if (!s.region.is_open()) return;
  maybe_start();
  share::ComputeArea& area = s.region.usage_page()->compute;
  CUdevice ordinal = 0;
  const int index = current_device(&ordinal, nullptr);
  if (index < 0 || index >= static_cast<int>(share::kMaxDevices)) return;
  const uint64_t bit = 1ull << index;
  const int64_t began = monotonic_ns();
  int64_t now = began;
  while ((area.closed_mask.load(std::memory_order_acquire) & bit) != 0) {
    const int64_t reopen =
        static_cast<int64_t>(area.devices[index].reopen_at_ns.load(std::memory_order_acquire));
    // Sleep until the expected reopening, re-checking at least every 2 ms (the meter may open
    // the gate earlier: a burst, a higher-priority share going quiet) and never spinning.
    int64_t wake = reopen;
    if (wake > now + 2 * kMillisecond) wake = now + 2 * kMillisecond;
    if (wake < now + 100'000) wake = now + 100'000;
    sleep_until(wake);
    now = monotonic_ns();
    // A gate left closed by a leader that died stays closed only until this process's own meter
    // takes the lead over (MeterTiming::leader_timeout_ns).
  }
  if (share::ProcessSlot* slot = s.region.own_slot()) {
    slot->throttled_ns.fetch_add(static_cast<uint64_t>(now - began), std::memory_order_relaxed);
  }
}

}  // namespace tessera::vgpu::compute

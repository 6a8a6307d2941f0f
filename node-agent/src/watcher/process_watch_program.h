// The process watcher's BPF program (process_watch.bpf.c) loaded into the kernel: the generated
// skeleton and its ring buffer, owned here (RAII), and a poll thread that hands each event to a
// sink. load() says why it cannot load (not root, no BTF, a verifier refusal, EPERM, or a build
// without libbpf) and the agent then runs on its periodic checks alone.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tessera/status.h"
#include "watcher/process_watch_events.h"
#include "watcher/process_watcher.h"

namespace tessera::agent {

// Whether this build has the BPF program (clang, bpftool and libbpf were found at configure time).
bool process_watch_built();

class ProcessWatchProgram final : public KernelFilter {
 public:
  using EventSink = std::function<void(const tessera_watch_event&)>;

  struct Options {
    std::string btf_path = "/sys/kernel/btf/vmlinux";  // the kernel BTF CO-RE relocates against
    std::vector<uint32_t> device_majors{195};          // nvidia_device_majors(/proc/devices)
  };

  // Opens, loads and attaches the program (the exit hook, and the open hook lsm/file_open or,
  // where that is refused, tp_btf/sys_exit). kUnavailable with the reason when the kernel or the
  // build cannot run it.
  static Result<std::unique_ptr<ProcessWatchProgram>> load(Options options);
  ~ProcessWatchProgram() override;
  ProcessWatchProgram(const ProcessWatchProgram&) = delete;
  ProcessWatchProgram& operator=(const ProcessWatchProgram&) = delete;

  // The ring buffer's epoll fd, readable when events wait (for a loop that polls itself).
  int poll_fd() const;
  // Hands what the ring buffer holds to `sink`, waiting up to `timeout` for the first event. The
  // number of events, or why polling failed.
  Result<int> poll(const EventSink& sink, std::chrono::milliseconds timeout);

  // Polls on a thread of its own until stop() (or the destructor), `sink` called on that thread.
  Status start(EventSink sink);
  void stop();

  // KernelFilter: the maps the program filters with.
  Status set_watched_cgroups(const std::set<uint64_t>& cgroup_ids) override;
  Status set_report_all_exits(bool report_all) override;
  // Adds a character device major to those whose opens are reported.
  Status watch_device_major(uint32_t major);

  // Which open hook is attached ("lsm/file_open" or "tp_btf/sys_exit").
  const std::string& open_hook() const { return open_hook_; }

 private:
  struct Handles;
  explicit ProcessWatchProgram(std::unique_ptr<Handles> handles, std::string open_hook);

  std::unique_ptr<Handles> handles_;
  std::string open_hook_;
  std::set<uint64_t> watched_cgroups_;  // what the map holds
  std::atomic<bool> stopping_{false};
  std::thread poller_;
};

}  // namespace tessera::agent

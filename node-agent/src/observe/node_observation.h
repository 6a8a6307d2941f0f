// The node as one pass sees it (docs/node-agent.md, "One observation per pass"): a copy of the
// checkpoint and of the published GPUs and their health, each prepared share folder's two pages
// read once, each GPU's processes and figures from one NVML session, and every host process from
// one walk of /proc. Built by the Observer (observer.h), immutable once built and shared
// (std::shared_ptr<const NodeObservation>): the out-of-band checks judge it, and /metrics, the
// local API's answers and its events diff are functions of it and of that judgment, so they all
// show the node at one moment and a new reader adds no read.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "clock/clock.h"
#include "devices/device_health.h"
#include "model/finding.h"
#include "model/node_device.h"
#include "model/share_spec.h"
#include "observe/process_map.h"
#include "share/checkpoint.h"
#include "tessera/share_folder/snapshot.h"
#include "usage/context_overhead.h"
#include "usage/gpu_processes.h"
#include "usage/problems.h"

namespace tessera::agent {

// One prepared share as the checks need it.
struct CheckedShare {
  std::string name;    // ShareSpec::name()
  std::string folder;  // its folder's path (shared by a claim's shares of several GPUs)
  std::string uuid;
  std::optional<uint64_t>
      memory_limit;  // bytes (the share's limit, not its request); none: the GPU
  // Bytes guaranteed (its request, at most the limit); none: the whole limit. Above it the share
  // borrows, and reclaim may evict its processes.
  std::optional<uint64_t> memory_request;
  std::optional<uint32_t> cores;        // the cores request, percent; none: no compute limit
  std::optional<uint32_t> cores_limit;  // percent it may reach
  std::string claim_namespace, claim_name, claim_uid;
  std::vector<PodRef> pods;
};

// The PrepareCompleted shares of `checkpoint`, folders under `shares_dir`.
std::vector<CheckedShare> checked_shares(const Checkpoint& checkpoint,
                                         const std::string& shares_dir);

// A GPU as one pass saw it through the one NVML session.
struct ObservedGpu {
  bool listed = false;                   // NVML answered for its processes (`memory`)
  std::vector<GpuProcessMemory> memory;  // per process (a GPU's: those in no MIG instance)
  size_t in_mig_instances = 0;           // processes its own handle listed in MIG instances
  bool busy_listed = false;              // NVML answered for their utilisation (`busy`)
  std::map<int, unsigned> busy;          // pid -> SM percent since the previous pass
  Result<uint64_t> free_bytes = unavailable("not observed");  // for reclaim
  std::optional<GpuFigures> figures;  // memory used and total, utilisation; none: not known
};

struct NodeObservation {
  Clock::time_point at{};            // the agent's clock when the pass began
  std::int64_t unix_ms = 0;          // the wall time then (the local API's sampled_unix_ms)
  std::string shares_dir;            // "<state>/shares"
  std::string proc_root;             // the /proc that was walked
  Checkpoint checkpoint;             // the node's claims (checkpoint.json), copied
  std::vector<CheckedShare> shares;  // its PrepareCompleted shares, as the checks need them
  std::vector<NodeDevice> devices;   // the published GPUs
  DeviceHealthSnapshot health;
  // Each share folder of `shares`, both pages read once (by folder path).
  std::map<std::string, share_folder::ShareFolderSnapshot> folders;
  // Each GPU of `shares` and `devices`, by UUID; absent when there is no NVML session.
  std::map<std::string, ObservedGpu> gpus;
  // Every live host process (the one walk of proc_root), and its owner word -> host pid.
  std::map<int, ProcessFacts> processes;
  std::map<uint64_t, int> owners;
  uint64_t process_reads = 0;  // processes read in full since the observer began (new pids)
  Problems problems;           // what could not be observed (NVML's answers)

  const ObservedGpu* gpu(const std::string& uuid) const;
  const ProcessFacts* process(int host_pid) const;
  // The folder's pages, or null when the pass did not read it (no prepared share there).
  const share_folder::ShareFolderSnapshot* folder(const std::string& path) const;
};

// The context-cost meter's inputs (usage/context_overhead.h) from an observation: its folders'
// pages, NVML's processes per GPU it listed, the owner words of its walk of /proc.
ContextCostInputs context_cost_inputs(const NodeObservation& observation);

// What the out-of-band checks made of one observation: it travels beside the observation, so
// /metrics and the local API show the checks' figures without reaching into the checks.
struct Judgment {
  std::vector<Finding> findings;  // handed to the finding policy in this pass
  // Per GPU: the memory of processes of no share of it; a GPU NVML did not answer for is absent.
  std::map<std::string, uint64_t> unaccounted_memory;
  // Per GPU: the memory of the MPS shares' daemons and servers there.
  std::map<std::string, uint64_t> mps_server_memory;
};

// One observation and the judgment of the latest checked one (null: no check has run).
struct ObservedNode {
  std::shared_ptr<const NodeObservation> observation;
  std::shared_ptr<const Judgment> judgment;
};

}  // namespace tessera::agent

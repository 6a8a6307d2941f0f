// Coexistence with NVIDIA's other allocators (docs/coexistence.md). On a node where NVIDIA's device
// plugin (the GPU Operator) or another DRA driver (NVIDIA's gpu.nvidia.com) also hands out the
// GPUs, a GPU published by both is given away twice. Before each publish the agent reads the Node
// and this node's ResourceSlices and withholds (does not publish) every GPU that another allocator
// also hands out:
// - device-plugin: the Node's status.capacity or status.allocatable has NVIDIA's extended
//   resources (nvidia.com/gpu, nvidia.com/gpu.shared, nvidia.com/mig-*). The count does not say
//   which GPUs the plugin has, so every managed GPU is withheld, unless --gpus split the node:
//   then the plugin's count must fit the GPUs this agent leaves to it (node GPUs - managed GPUs).
// - other-dra-driver: a ResourceSlice of this node from another driver lists a device whose
//   `uuid` or `parentUUID` attribute (unqualified or of any domain) is the GPU's UUID.
// - compute-mode: NVML reports a compute mode other than DEFAULT. Tessera itself only ever sets
//   DEFAULT (TimeSlicing claims, nvidia-smi -c DEFAULT), so another mode was set by someone else
//   (an exclusive mode for an MPS daemon, PROHIBITED to fence the GPU), and shares cannot run.
// A GPU withheld is published again at the first publish after the other allocator is gone
// (the reconcile loop republishes every --reconcile-interval). WithheldGpus reports each change
// once: a log line, an Event on the Node and the tessera_gpu_withheld gauge.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/gpu_info.h"
#include "tessera/kube/kube_client.h"
#include "tessera/status.h"

namespace tessera::agent {

// The metric's `reason` label and the words of the log line and the Event.
inline constexpr char kWithheldByDevicePlugin[] = "device-plugin";
inline constexpr char kWithheldByOtherDraDriver[] = "other-dra-driver";
inline constexpr char kWithheldByComputeMode[] = "compute-mode";

struct WithheldGpu {
  std::string device;  // "gpu-<minor>", the name it would be published under
  std::string uuid;
  std::string reason;  // kWithheldByDevicePlugin, kWithheldByOtherDraDriver, kWithheldByComputeMode
  std::string detail;  // who else hands it out: "the Node's status.capacity has nvidia.com/gpu=4"
  bool operator==(const WithheldGpu&) const = default;
};

// --gpus / GPUS: which of the node's GPUs this agent manages, by NVML index ("0") or UUID
// ("GPU-..."), as NVIDIA_VISIBLE_DEVICES names them; empty: all of them.
class GpuSelection {
 public:
  // The flag's value parsed: comma-separated entries, each a decimal index or a UUID starting
  // "GPU-" (MIG-... is refused: Tessera publishes whole GPUs). kInvalidArgument naming the entry.
  static Result<GpuSelection> parse(const std::string& text);
  bool all() const { return indices_.empty() && uuids_.empty(); }
  bool selects(const GpuInfo& gpu) const;
  std::vector<GpuInfo> filter(const std::vector<GpuInfo>& gpus) const;
  // Entries that name none of `gpus` (said in a warn line: a GPU gone or a typo).
  std::vector<std::string> unmatched(const std::vector<GpuInfo>& gpus) const;

 private:
  std::set<unsigned> indices_;
  std::set<std::string> uuids_;
};

// NVIDIA's device plugin's extended resources on the Node: name -> the larger of its capacity and
// allocatable count (kubelet keeps a stopped plugin's capacity for a while, with allocatable 0).
// Only names with a count above zero.
std::map<std::string, int64_t> device_plugin_resources(const nlohmann::json& node);

// The GPUs of `managed` another allocator also hands out (pure). `node_gpu_count`: every GPU NVML
// lists on the node; `split`: --gpus names a subset. `slices`: the items of a ResourceSlice list
// (this node's, any driver; other nodes' and `driver`'s own are skipped). `compute_modes`: by
// UUID, the mode of each GPU NVML reports in a mode other than DEFAULT ("EXCLUSIVE_PROCESS").
std::vector<WithheldGpu> find_withheld(
    const std::vector<GpuInfo>& managed, size_t node_gpu_count, bool split,
    const nlohmann::json& node, const nlohmann::json& slices, const std::string& driver,
    const std::map<std::string, std::string>& compute_modes = {});

// NVML's name of a compute mode without its prefix ("EXCLUSIVE_PROCESS"), "" for DEFAULT.
std::string compute_mode_name(int mode);

// The GPUs' compute modes from NVML (libnvidia-ml.so.1, opened at the first read): by UUID, those
// not in DEFAULT. A GPU whose mode cannot be read is left out (said once in a warn line): the
// other checks still hold for it.
class NvmlComputeModes {
 public:
  explicit NvmlComputeModes(std::string library = "libnvidia-ml.so.1")
      : library_(std::move(library)) {}
  std::map<std::string, std::string> read(const std::vector<GpuInfo>& gpus);

 private:
  std::string library_;
  std::string last_error_;
};

// Reads the Node and this node's ResourceSlices and answers find_withheld. An error names the
// request (the publish that asked fails and is retried: a GPU is not published unchecked).
class CoexistenceCheck {
 public:
  // `compute_modes` null: compute modes are not checked.
  CoexistenceCheck(kube::KubeClient& kube, std::string node_name, std::string driver,
                   NvmlComputeModes* compute_modes = nullptr)
      : kube_(kube),
        node_name_(std::move(node_name)),
        driver_(std::move(driver)),
        compute_modes_(compute_modes) {}
  Result<std::vector<WithheldGpu>> check(const std::vector<GpuInfo>& managed, size_t node_gpu_count,
                                         bool split);

 private:
  kube::KubeClient& kube_;
  std::string node_name_;
  std::string driver_;
  NvmlComputeModes* compute_modes_;
};

// A core/v1 Event about this Node, as kubelet writes its own: namespace "default",
// involvedObject {kind Node, name, uid = the node name}, source {component, host}, count 1.
class NodeEventWriter {
 public:
  NodeEventWriter(kube::KubeClient& kube, std::string node_name,
                  std::string component = "tessera-node-agent")
      : kube_(kube), node_name_(std::move(node_name)), component_(std::move(component)) {}
  // The Event's body (pure; `unix_ns` names it and stamps it).
  nlohmann::json build(std::string_view type, std::string_view reason, std::string_view message,
                       int64_t unix_ns) const;
  // POSTs it: ok or the API's error.
  Status post(std::string_view type, std::string_view reason, std::string_view message);

 private:
  kube::KubeClient& kube_;
  std::string node_name_;
  std::string component_;
};

// Event reasons (CamelCase, as kubelet's).
inline constexpr char kGpuWithheldReason[] = "GpuWithheld";
inline constexpr char kGpuPublishedReason[] = "GpuPublished";

// The GPUs withheld now, and the reports of each change: a GPU newly withheld (or withheld for
// another reason) gets a warn line and a Warning Event GpuWithheld; one published again an info
// line and a Normal Event GpuPublished. An Event that cannot be written is tried again at the
// next update (logged once per failure message).
class WithheldGpus {
 public:
  explicit WithheldGpus(NodeEventWriter* events) : events_(events) {}
  void update(const std::vector<WithheldGpu>& now);
  std::vector<WithheldGpu> current() const;

 private:
  NodeEventWriter* events_;
  mutable std::mutex mutex_;                   // guards current_
  std::vector<WithheldGpu> current_;           // as of the last update
  std::map<std::string, WithheldGpu> logged_;  // by UUID: what the log last said withheld
  std::map<std::string, WithheldGpu> told_;    // by UUID: what the Events last said withheld
  std::string last_event_error_;
};

}  // namespace tessera::agent

#include "agent/node_agent.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>

#include "api/event_log.h"
#include "api/node_api_server.h"
#include "api/node_snapshot.h"
#include "api/pod_events.h"
#include "backends/mps_backend.h"
#include "backends/time_slice_backend.h"
#include "devices/device_monitor.h"
#include "devices/resource_slices.h"
#include "enforcement/checker.h"
#include "enforcement/enforcement_handler.h"
#include "metrics/collector.h"
#include "metrics/metrics_server.h"
#include "mig/nvml_mig_driver.h"
#include "observe/observation_board.h"
#include "observe/observer.h"
#include "share/checkpoint_view.h"
#include "share/partition_hook.h"
#include "share/share_manager.h"
#include "share/shim_library.h"
#include "tessera/cgroup/driver_partition.h"
#include "tessera/json_access.h"
#include "tessera/kube/event_recorder.h"
#include "tessera/kube/http_kube_client.h"
#include "tessera/log.h"
#include "usage/context_overhead.h"
#include "usage/gpu_time_meter.h"
#include "watcher/process_watch_program.h"
#include "watcher/process_watcher.h"
#include "watcher/share_folder_resolver.h"

namespace tessera::agent {

namespace {
std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    if (comma > start) items.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return items;
}

// TESSERA_TEST_KILL_AT (agent_config.h): the hook that kills this process with SIGKILL at the named
// crash point, as the OOM killer or a node's power loss would (no destructor, no flush); none
// when empty; kInvalidArgument naming the variable and its value for anything else.
Result<std::function<void(MigCreated)>> test_kill_point(const std::string& value) {
  if (value.empty()) return std::function<void(MigCreated)>();
  std::optional<MigCreated> point;
  if (value == "after-gpu-instance") point = MigCreated::kGpuInstance;
  if (value == "after-compute-instance") point = MigCreated::kComputeInstance;
  if (!point)
    return invalid_argument("TESSERA_TEST_KILL_AT \"" + value +
                            "\": expected after-gpu-instance or after-compute-instance (a test "
                            "hook; unset it outside tests)");
  log::warn("test hook armed: this agent kills itself at a MIG crash point",
            {{"TESSERA_TEST_KILL_AT", value}});
  return std::function<void(MigCreated)>([point = *point, value](MigCreated created) {
    if (created != point) return;
    log::warn("test hook: killed by SIGKILL", {{"TESSERA_TEST_KILL_AT", value}});
    kill(getpid(), SIGKILL);
  });
}

void log_report(const char* when, const ReconcileReport& report) {
  if (report.clean()) return;
  log::warn(
      "reconcile found differences",
      {{"pass", when}, {"differences", report.items.size()}, {"not_repaired", report.failures()}});
  for (const auto& item : report.items) {
    if (item.repaired()) {
      log::info("reconcile repaired",
                {{"subject", item.subject}, {"problem", item.problem}, {"action", item.action}});
    } else {
      log::error("reconcile could not repair",
                 {{"subject", item.subject}, {"problem", item.problem}, {"error", item.error}});
    }
  }
}
}  // namespace

Status apply_container_flags(const AgentConfig& config, ShareManagerOptions& options,
                             bool announce) {
  const std::optional<ShimLoading> loading = parse_shim_loading(config.shim_loading);
  if (!loading)
    return invalid_argument("--shim-loading \"" + config.shim_loading +
                            "\": must be ld.so.preload or LD_PRELOAD");
  const std::optional<DriverMode> mode = parse_driver_mode(config.driver_mode);
  if (!mode)
    return invalid_argument("--driver-mode \"" + config.driver_mode +
                            "\": must be auto, toolkit or driver-root");
  DriverOptions driver;
  driver.mode = *mode;
  driver.toolkit_spec_dirs = split_list(config.toolkit_spec_dirs);
  driver.driver_root = config.driver_root;
  TESSERA_ASSIGN_OR_RETURN(ContainerDriver found, discover_container_driver(driver),
                           with_context("cannot give containers the NVIDIA driver"));
  options.shim_path = config.shim_path;
  options.shim_loading = *loading;
  options.container_driver = std::move(found);
  if (announce) {
    log::info("containers get the driver and the shim",
              {{"driver", describe(options.container_driver)},
               {"shim", options.shim_path},
               {"shim_loading", to_string(options.shim_loading)}});
    // Prepare refuses claims until it is fixed; said now so it is seen before the first claim.
    if (const Status shim = check_shim_library(options.shim_path); !shim.is_ok())
      log::error("the shim cannot be loaded: claims will be refused",
                 {{"shim", options.shim_path}, {"error", shim.message()}});
  }
  return Status::ok();
}

NodeAgent::NodeAgent(AgentConfig config, Clock& clock)
    : config_(std::move(config)), clock_(clock) {}

NodeAgent::~NodeAgent() {
  stop();
  if (lock_fd_ >= 0) close(lock_fd_);
}

Status NodeAgent::lock_state_dir() {
  std::error_code ec;
  std::filesystem::create_directories(config_.state_dir, ec);
  if (ec) return internal_error("cannot create " + config_.state_dir + ": " + ec.message());
  const std::string path = config_.state_dir + "/agent.lock";
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return internal_error("cannot open " + path + ": " + std::strerror(errno));
  // With a pod UID (per-pod kubelet sockets) the old and the new agent of a rolling update share
  // the folder, their prepares kept apart by the share manager's file locks (share_manager.h):
  // a shared lock, which only an agent without one (fixed socket names) refuses, and is refused by.
  const int mode = config_.pod_uid.empty() ? LOCK_EX : LOCK_SH;
  if (flock(fd, mode | LOCK_NB) != 0) {
    char holder[32] = {};
    (void)!pread(fd, holder, sizeof holder - 1, 0);
    close(fd);
    return failed_precondition("another tessera-node-agent (pid " +
                               std::string(holder[0] ? holder : "unknown") + ") is using " +
                               config_.state_dir + " (" + path +
                               " is locked); one agent per state folder");
  }
  // The pid is for the message above only; the lock is what counts.
  const std::string pid = std::to_string(getpid());
  if (ftruncate(fd, 0) == 0) (void)!pwrite(fd, pid.data(), pid.size(), 0);
  lock_fd_ = fd;
  return Status::ok();
}

ClaimPreparer& NodeAgent::preparer() {
  return *preparer_;
}

Status NodeAgent::start() {
  if (config_.node_name.empty()) return invalid_argument("--node-name (NODE_NAME) is required");
  if (Status locked = lock_state_dir(); !locked.is_ok()) return locked;
  TESSERA_ASSIGN_OR_RETURN(kube::KubeConnection connection,
                           config_.kubeconfig.empty()
                               ? kube::in_cluster_connection()
                               : kube::kubeconfig_connection(config_.kubeconfig));
  kube_ = std::make_unique<kube::HttpKubeClient>(connection);
  slices_ = std::make_unique<SlicePublisher>(
      *kube_, SliceIdentity{vgpu_config::kDriverName, config_.node_name, ""});
  TESSERA_ASSIGN_OR_RETURN(GpuSelection selection, GpuSelection::parse(config_.gpus));
  gpu_selection_ = std::make_unique<GpuSelection>(std::move(selection));
  compute_modes_ = std::make_unique<NvmlComputeModes>();
  coexistence_ = std::make_unique<CoexistenceCheck>(*kube_, config_.node_name,
                                                    vgpu_config::kDriverName, compute_modes_.get());
  node_events_ = std::make_unique<NodeEventWriter>(*kube_, config_.node_name);
  withheld_ = std::make_unique<WithheldGpus>(node_events_.get());

  MpsOptions mps;
  mps.control = config_.mps_control;
  mps.root = config_.state_dir + "/mps";
  mps.daemon_cgroup = config_.mps_daemon_cgroup;
  mps_ = std::make_unique<MpsBackend>(mps);
  TimeSliceOptions slices;
  slices.nvidia_smi = config_.nvidia_smi;
  slices.root = config_.state_dir + "/timeslice";
  time_slice_ = std::make_unique<TimeSliceBackend>(slices);

  ShareManagerOptions options;
  TESSERA_RETURN_IF_ERROR(apply_container_flags(config_, options, /*announce=*/true));
  const std::optional<MigStrategy> mig_strategy = parse_mig_strategy(config_.mig_strategy);
  const std::optional<SliceShape> slice_shape = parse_slice_shape(config_.resource_slice_shape);
  if (!mig_strategy)
    return invalid_argument("--mig-strategy \"" + config_.mig_strategy +
                            "\": expected none, static or dynamic");
  if (!slice_shape)
    return invalid_argument("--resource-slice-shape \"" + config_.resource_slice_shape +
                            "\": expected auto, combined or split");
  TESSERA_ASSIGN_OR_RETURN(const std::function<void(MigCreated)> kill_point,
                           test_kill_point(config_.test_kill_at));
  mig_strategy_ = *mig_strategy;
  slice_shape_ = *slice_shape;
  if (mig_strategy_ != MigStrategy::kNone) {
    mig_nvml_ = std::make_unique<NvmlMigDriver>();
    mig_driver_ = std::make_unique<LayoutTrackingMigDriver>(*mig_nvml_);
  }
  if (mig_strategy_ == MigStrategy::kDynamic) {
    MigInstancesOptions instances;
    instances.root = config_.state_dir;
    instances.allow_mode_change = config_.allow_mig_mode_change;
    instances.after_create = kill_point;
    mig_instances_ =
        std::make_unique<MigInstances>(instances, *mig_driver_, std::vector<GpuInfo>{});
    options.mig_instances = mig_instances_.get();
  }
  options.proc_root = config_.proc_root;
  detect_partitions(options);
  options.root = config_.state_dir;
  options.cdi_dir = config_.cdi_dir;
  options.node_name = config_.node_name;
  TESSERA_ASSIGN_OR_RETURN(vgpu_config::TenantBounds bounds, tenant_bounds(config_));
  options.tenant_bounds = bounds;
  options.mps = mps_.get();
  options.time_slice = time_slice_.get();
  // Containers' pids are not NVML's: the agent measures every share's GPU time (the meter below).
  options.measure_source = share::kMeasureAgent;
  shares_ = std::make_unique<ShareManager>(options, *kube_, std::vector<NodeDevice>{});
  shared_checkpoint_ = std::make_unique<CheckpointView>(config_.state_dir + "/checkpoint.json");
  preparer_ = std::make_unique<InstrumentedPreparer>(*shares_, requests_, clock_);
  ReconcileReport report;
  TESSERA_RETURN_IF_ERROR(shares_->start(&report));
  log_report("start", report);

  DeviceMonitorOptions monitoring;
  monitoring.pool = config_.node_name;
  monitoring.inventory_interval = std::chrono::seconds(config_.device_poll_interval_s);
  // Health per published device: with MIG, an XID NVML blames on one instance marks that
  // instance's device only. A MIG view NVML cannot give now leaves the GPUs whole.
  monitoring.published = [this](const std::vector<GpuInfo>& gpus) {
    Result<std::optional<MigPublication>> mig = mig_publication(gpu_selection_->filter(gpus));
    return node_devices(gpus, mig.is_ok() && mig->has_value() ? &**mig : nullptr);
  };
  monitor_ = std::make_unique<DeviceMonitor>(
      monitoring, health_, [this](const std::vector<GpuInfo>& gpus) { return on_devices(gpus); },
      clock_);
  if (Status monitoring_started = monitor_->start(); !monitoring_started.is_ok())
    return monitoring_started;

  GpuTimeMeterOptions metering;
  metering.shares_dir = config_.state_dir + "/shares";
  meter_ = std::make_unique<GpuTimeMeter>(metering, clock_);
  if (Status metering_started = meter_->start(); !metering_started.is_ok())
    log::error("GPU-time meter not running, so compute limits (cores) are not enforced",
               {{"error", metering_started.message()}});

  // Before anything that reports into it (the findings' policy, the API server).
  events_ = std::make_unique<EventLog>(clock_);
  event_findings_ = std::make_unique<EventFindingHandler>(*events_);
  kube::EventRecorderOptions recording;
  recording.component = kEventComponent;
  recording.host = config_.node_name;
  recording.log = [](const std::string& line) { log::warn("kubernetes event", {{"error", line}}); };
  // The agent's clock (tests run a simulated one), from the wall time at start.
  recording.now = [this, wall = std::chrono::system_clock::now(), at = clock_.now()] {
    return wall +
           std::chrono::duration_cast<std::chrono::system_clock::duration>(clock_.now() - at);
  };
  kube_events_ = std::make_unique<kube::EventRecorder>(*kube_, recording);
  pod_events_ = std::make_unique<PodEvents>(*kube_events_, [this](const std::string& share) {
    return share_event_objects(shares_->checkpoint(), share);
  });
  events_->set_observer([this](const node::v1::Event& event) { pod_events_->observe(event); });
  start_observation();
  TESSERA_RETURN_IF_ERROR(start_enforcement());
  if (!checker_ && gpu_processes_) {
    // No checks, still a pass a second: the context cost, and what the reports show.
    TESSERA_ASSIGN_OR_RETURN(
        observe_loop_,
        PeriodicLoop::start(
            clock_, std::chrono::seconds(1), [this] { after_pass(observer_->observe(), nullptr); },
            PeriodicLoop::FirstTick::kAtOnce),
        with_context("cannot start the observation loop"));
  }
  TESSERA_RETURN_IF_ERROR(start_partition_check());
  TESSERA_RETURN_IF_ERROR(start_process_watch());

  if (config_.reconcile_interval_s > 0) {
    TESSERA_ASSIGN_OR_RETURN(
        reconciler_,
        PeriodicLoop::start(clock_, std::chrono::seconds(config_.reconcile_interval_s),
                            [this] { reconcile_pass(); }),
        with_context("cannot start the reconcile loop"));
  }
  {
    MutexLock lock(liveness_mutex_);
    started_ = true;
    monitor_moved_at_ = reconcile_moved_at_ = clock_.now();
  }
  TESSERA_RETURN_IF_ERROR(start_api());
  if (!config_.metrics_address.empty()) {
    MetricsServerOptions serving;
    serving.address = config_.metrics_address;
    serving.metrics = [this] { return scrape_metrics(); };
    serving.healthy = [this] { return liveness(); };
    metrics_ = std::make_unique<MetricsServer>(serving);
    TESSERA_RETURN_IF_ERROR(metrics_->start());
  }
  return Status::ok();
}

Status NodeAgent::start_api() {
  if (config_.api_socket == "off") return Status::ok();
  NodeApiServerOptions serving;
  serving.socket =
      config_.api_socket.empty() ? config_.state_dir + "/api.sock" : config_.api_socket;
  serving.pod_uid = config_.pod_uid;
  TESSERA_ASSIGN_OR_RETURN(mode_t mode, parse_socket_mode(config_.api_socket_mode));
  serving.mode = mode;
  serving.group = config_.api_socket_group;
  // A state folder too deep for a unix socket address: without the API when it was not asked for
  // by name (it serves tools; kubelet's sockets are what the node needs), else the flag is wrong.
  if (Status fits = check_socket_paths(serving); !fits.is_ok()) {
    if (!config_.api_socket.empty()) return fits.with_context("--api-socket");
    log::warn("local API off: its socket path is too long; give --api-socket a shorter path",
              {{"reason", fits.message()}});
    return Status::ok();
  }
  // The node as the last pass observed it, stamped with that pass's time.
  serving.snapshot = [this](std::int64_t) {
    NodeSnapshotSources sources;
    sources.node_name = config_.node_name;
    sources.partition_capability = &partition_capability_;
    if (partition_check_) sources.partitions = [this] { return partition_check_->views(); };
    sources.default_policy = findings_->default_policy();
    return node_snapshot(board_->current(), sources);
  };
  api_ = std::make_unique<NodeApiServer>(serving, *events_, clock_);
  return api_->start();
}

std::string NodeAgent::api_socket() const {
  return api_ ? api_->socket().native() : "";
}

std::string NodeAgent::scrape_metrics() const {
  MetricsSources sources;
  sources.node_name = config_.node_name;
  sources.observed = [this] { return board_->current(); };
  sources.requests = &requests_;
  if (findings_)
    sources.findings = [this](FindingKind kind) { return findings_->counters().count(kind); };
  if (findings_) sources.reclaim_evictions = [this] { return findings_->reclaim_evictions(); };
  if (kube_events_)
    sources.kube_events_dropped = [this] {
      return kube_events_->dropped() + kube_events_->failed();
    };
  sources.partition_capability = &partition_capability_;
  if (partition_check_) sources.partitions = [this] { return partition_check_->views(); };
  sources.withheld = [this] { return withheld_gpus(); };
  return collect_metrics(sources);
}

Checkpoint NodeAgent::node_checkpoint() const {
  Result<Checkpoint> disk = shared_checkpoint_->read();
  if (disk.is_ok()) return std::move(disk).value();
  log::warn("cannot read the checkpoint file: showing this agent's own copy",
            {{"error", disk.status().message()}});
  return shares_->checkpoint();
}

int NodeAgent::metrics_port() const {
  return metrics_ ? metrics_->port() : 0;
}

Status NodeAgent::liveness() {
  MutexLock lock(liveness_mutex_);
  if (!started_) return unavailable("the agent has not started");
  if (stopped_) return unavailable("the agent is stopping");
  const Clock::time_point now = clock_.now();
  // A loop is stuck when it has not moved for many of its intervals (a slow pass, an NVML call
  // or an API request, takes seconds, not minutes).
  const auto monitor_limit = std::chrono::seconds(60);
  if (const std::uint64_t turns = monitor_->turns(); turns != monitor_turns_seen_) {
    monitor_turns_seen_ = turns;
    monitor_moved_at_ = now;
  } else if (now - monitor_moved_at_ > monitor_limit) {
    return unavailable("the device monitor has not turned for 60 s");
  }
  if (reconciler_) {
    const auto reconcile_limit = std::chrono::seconds(3 * config_.reconcile_interval_s + 300);
    if (const std::uint64_t passes = reconciler_->ticks(); passes != reconcile_passes_seen_) {
      reconcile_passes_seen_ = passes;
      reconcile_moved_at_ = now;
    } else if (now - reconcile_moved_at_ > reconcile_limit) {
      return unavailable("the reconcile loop has not passed for " +
                         std::to_string(reconcile_limit.count()) + " s");
    }
  }
  return Status::ok();
}

Status NodeAgent::on_devices(const std::vector<GpuInfo>& gpus) {
  // Claims are checked against the new list at once; the API learns it next (a failed publish is
  // retried by the monitor, and the scheduler keeps using the old slices meanwhile).
  const std::vector<GpuInfo> managed = gpu_selection_->filter(gpus);
  // A new GPU list or a device's health changed: the MIG view is read again.
  if (mig_driver_) mig_driver_->note_layout_change();
  if (mig_instances_) mig_instances_->set_gpus(managed);
  TESSERA_ASSIGN_OR_RETURN(const std::optional<MigPublication> mig, mig_publication(managed));
  shares_->set_devices(node_devices(managed, mig ? &*mig : nullptr));
  return publish(gpus);
}

Result<std::optional<MigPublication>> NodeAgent::mig_publication(const std::vector<GpuInfo>& gpus) {
  if (mig_strategy_ == MigStrategy::kNone || !mig_driver_) return std::optional<MigPublication>();
  std::lock_guard lock(mig_mutex_);  // the monitor's thread and the reconcile loop both ask
  // Read before the view: a change during the reads leaves a view that is read again next time.
  const uint64_t layout = mig_driver_->layout_changes();
  std::vector<std::string> uuids;
  for (const GpuInfo& gpu : gpus) uuids.push_back(gpu.uuid);
  if (mig_view_ && mig_view_->layout == layout && mig_view_->gpus == uuids)
    return std::optional<MigPublication>(mig_view_->publication);
  MigPublication publication;
  publication.strategy = mig_strategy_;
  if (mig_strategy_ == MigStrategy::kDynamic && slice_shape_ == SliceShape::kAuto) {
    // The counter sets' place changed incompatibly in 1.35 (mig-facts.md §4.2): asked once.
    TESSERA_ASSIGN_OR_RETURN(const kube::ApiResponse version, kube_->request("GET", "/version"),
                             with_context("cannot read the API server's version"));
    const nlohmann::json body = nlohmann::json::parse(version.body, nullptr, false);
    const std::string* git = json_string_at(body, "/gitVersion");
    if (!git) return unavailable("GET /version: gitVersion: expected a string");
    TESSERA_ASSIGN_OR_RETURN(slice_shape_, slice_shape_for_version(*git));
    log::info("ResourceSlice shape for dynamic MIG",
              {{"kubernetes", *git}, {"shape", to_string(slice_shape_)}});
  }
  publication.shape = slice_shape_ == SliceShape::kAuto ? SliceShape::kSplit : slice_shape_;
  for (const GpuInfo& gpu : gpus) {
    Result<MigGpu> state = mig_driver_->inspect(gpu);
    if (!state.is_ok())
      return state.status().with_context("reading the MIG state of GPU " + gpu.uuid);
    publication.gpus.push_back(*state);
  }
  // Tessera's instances, those a crash left before their record named them included (otherwise
  // their own device would be withheld as overlapping a stranger's instance, and their claim's
  // retried prepare refused).
  if (mig_instances_)
    for (const MigRecord& record : mig_instances_->records())
      for (const MigGpu& state : publication.gpus)
        if (const MigInstance* instance =
                state.uuid == record.parent_uuid ? created_instance(record, state) : nullptr)
          publication.tessera_instances.insert({record.parent_uuid, instance->gi_id});
  mig_view_ = MigView{std::move(uuids), layout, publication};
  return std::optional<MigPublication>(std::move(publication));
}

std::vector<WithheldGpu> NodeAgent::withheld_gpus() const {
  return withheld_ ? withheld_->current() : std::vector<WithheldGpu>{};
}

Status NodeAgent::publish(const std::vector<GpuInfo>& all_gpus) {
  MutexLock lock(slices_mutex_);
  std::string unmatched;
  for (const std::string& entry : gpu_selection_->unmatched(all_gpus))
    unmatched += (unmatched.empty() ? "" : ",") + entry;
  if (unmatched != last_unmatched_gpus_ && !unmatched.empty())
    log::warn("--gpus names GPUs this node does not have", {{"gpus", unmatched}});
  last_unmatched_gpus_ = unmatched;
  // Only the GPUs no other allocator hands out (checked at every publish: a device plugin may
  // start, or go, at any time).
  const std::vector<GpuInfo> managed = gpu_selection_->filter(all_gpus);
  Result<std::vector<WithheldGpu>> withheld =
      coexistence_->check(managed, all_gpus.size(), !gpu_selection_->all());
  if (!withheld.is_ok())
    return unavailable("cannot publish ResourceSlices: " + withheld.status().message());
  withheld_->update(*withheld);
  std::vector<GpuInfo> gpus;
  for (const GpuInfo& gpu : managed)
    if (std::none_of(withheld->begin(), withheld->end(),
                     [&](const WithheldGpu& w) { return w.uuid == gpu.uuid; }))
      gpus.push_back(gpu);
  // The board is current: the monitor reports a fault before it delivers (taints follow health).
  Result<std::optional<MigPublication>> mig = mig_publication(gpus);
  if (!mig.is_ok()) return unavailable("cannot publish ResourceSlices: " + mig.status().message());
  if (const Status published =
          slices_->publish(gpus, health_.snapshot().devices, *mig ? &**mig : nullptr);
      !published.is_ok())
    return unavailable("cannot publish ResourceSlices: " + published.message());
  if (slices_->writes() > 0)
    log::info("published ResourceSlices", {{"gpus", gpus.size()},
                                           {"writes", slices_->writes()},
                                           {"pool_generation", slices_->generation()}});
  if (slices_->writes() > 0 && slices_->taints_dropped())
    log::warn(
        "the API server dropped the unhealthy GPUs' device taints (is its DRADeviceTaints feature "
        "gate off? It is before Kubernetes 1.36): the scheduler is not told; kubelet still gets "
        "their health");
  return Status::ok();
}

Status NodeAgent::start_enforcement() {
  TESSERA_ASSIGN_OR_RETURN(
      vgpu_config::EnforcementPolicy fallback,
      vgpu_config::decode_enforcement_policy(nlohmann::json(config_.enforcement_default),
                                             "--enforcement-default"));
  EnforcementHandlerOptions handling;
  handling.default_policy = fallback;
  handling.share_policy =
      [this](const std::string& name) -> std::optional<vgpu_config::EnforcementPolicy> {
    for (const auto& [uid, entry] : shares_->checkpoint())
      for (const ShareSpec& share : entry.shares)
        if (share.name() == name) return share.config.enforcement;
    return std::nullopt;
  };
  handling.belongs = [this](int pid, uint64_t start_time, const std::string& share) {
    return checker_ && checker_->belongs(pid, start_time, share);
  };
  handling.then = event_findings_.get();  // on the local API's event stream too
  findings_ = std::make_unique<EnforcementHandler>(handling);
  if (config_.check_interval_s <= 0) return Status::ok();
  if (!gpu_processes_) {
    log::error(
        "out-of-band checks not running (memory limits hold only for processes that load the "
        "shim)",
        {{"error", gpu_processes_error_}});
    return Status::ok();
  }
  CheckerOptions checking;
  auto millis = [](double seconds) {
    return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  };
  checking.interval = millis(config_.check_interval_s);
  checking.proc_root = observer_->options().proc_root;
  checking.memory_grace = millis(config_.memory_grace_s);
  checking.cores_grace = millis(config_.cores_grace_s);
  // A pod that joined a shared claim after its prepare (kubelet prepares for the first pod only).
  checking.claim_pods = [this](const std::string& claim_uid) {
    return shares_->refresh_claim_pods(claim_uid);
  };
  // The MPS shares' daemons: they and the servers they spawn are those shares', not unaccounted.
  checking.mps_daemons = [this] {
    std::vector<MpsDaemon> daemons;
    for (const auto& [uid, entry] : node_checkpoint()) {
      if (entry.state != ClaimState::kPrepareCompleted) continue;
      for (const ShareSpec& share : entry.shares)
        if (share.strategy() == vgpu_config::SharingStrategy::kMps)
          if (const int pid = mps_->daemon_pid(share.name()); pid > 0)
            daemons.push_back({share.name(), share.uuid, pid});
    }
    return daemons;
  };
  // Each pass judges the observer's observation of the node (the claims on disk: during a rolling
  // update the other agent's shares are no one's otherwise); both go on the board.
  checking.judged = [this](std::shared_ptr<const NodeObservation> observation,
                           std::shared_ptr<const Judgment> judgment) {
    after_pass(std::move(observation), std::move(judgment));
  };
  checker_ = std::make_unique<OutOfBandChecker>(
      checking, [this] { return observer_->observe(); }, *findings_, clock_);
  return checker_->start();
}

void NodeAgent::start_observation() {
  // One NVML session for the checks and every report (the GPU-time meter and the device monitor
  // keep theirs: docs/node-agent.md, "One observation per pass").
  Result<std::unique_ptr<GpuProcessSource>> source = nvml_process_source();
  if (source.is_ok()) {
    gpu_processes_ = std::move(source).value();
  } else {
    gpu_processes_error_ = source.status().message();
    log::warn("no NVML figures: the node is observed without its GPUs",
              {{"error", gpu_processes_error_}});
  }
  ObserverOptions observing;
  observing.shares_dir = config_.state_dir + "/shares";
  observing.checkpoint = [this] { return node_checkpoint(); };
  observing.devices = [this] { return shares_->devices(); };
  observing.health = [this] { return health_.snapshot(); };
  // The agent's clock (tests run a simulated one), from the wall time at start.
  observing.unix_ms = [this, wall = std::chrono::system_clock::now(), at = clock_.now()] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               (wall +
                std::chrono::duration_cast<std::chrono::system_clock::duration>(clock_.now() - at))
                   .time_since_epoch())
        .count();
  };
  observer_ = std::make_unique<Observer>(std::move(observing), gpu_processes_.get(), clock_);
  context_costs_ = std::make_unique<ContextOverheadMeter>(ContextOverheadOptions{});
  // With the checks on, their loop observes once per --check-interval and a reader takes that
  // pass's observation; without them each reader observes.
  const auto max_age =
      !gpu_processes_ ? std::chrono::milliseconds(0)
      : config_.check_interval_s > 0
          ? std::chrono::milliseconds(static_cast<int64_t>(2000 * config_.check_interval_s))
          : std::chrono::milliseconds(2000);
  board_ = std::make_unique<ObservationBoard>(*observer_, clock_, max_age);
}

void NodeAgent::after_pass(std::shared_ptr<const NodeObservation> observation,
                           std::shared_ptr<const Judgment> judgment) {
  // After the check (a liar it just found gives no evidence): the context cost of the same
  // observation (usage/context_overhead.h), one log line per change of what went wrong.
  const std::string problems =
      join_problems(context_costs_->measure(context_cost_inputs(*observation)));
  if (problems != last_context_problem_) {
    if (problems.empty()) {
      log::info("context cost measured again");
    } else {
      log::warn("context cost not measured", {{"problems", problems}});
    }
    last_context_problem_ = problems;
  }
  board_->publish(std::move(observation), std::move(judgment));
}

void NodeAgent::detect_partitions(ShareManagerOptions& options) {
  const std::string hook =
      config_.cdi_hook_path.empty()
          ? std::filesystem::path(config_.shim_path).parent_path().string() + "/" + kCdiHookName
          : config_.cdi_hook_path;
  std::string why_not;
  std::vector<std::string> uuids;
  if (config_.driver_partitions == "off") why_not = "turned off (--driver-partitions off)";
  if (why_not.empty()) {
    Result<nvml::Session> session = nvml::Session::open();
    if (!session.is_ok()) {
      why_not = session.status().message();
    } else {
      partition_session_ = std::move(session).value();
      Result<unsigned> count = partition_session_->device_count();
      for (unsigned i = 0; count.is_ok() && i < *count; ++i)
        if (Result<nvmlDevice_t> device = partition_session_->device_by_index(i); device.is_ok())
          if (Result<std::string> uuid = partition_session_->uuid(*device); uuid.is_ok())
            uuids.push_back(*uuid);
    }
  }
  if (why_not.empty() && access(hook.c_str(), X_OK) != 0)
    why_not = "the CDI hook " + hook + " is not installed (" + std::strerror(errno) + ")";
  partition_capability_ = why_not.empty() ? detect_partition_capability(*partition_session_, uuids)
                                          : no_partition_capability(uuids, why_not);
  if (!why_not.empty()) partition_session_.reset();
  for (const auto& [uuid, support] : partition_capability_.gpus)
    log::info(support.supported ? "the driver holds the memory of shares on this GPU (partitions)"
                                : "the shim alone holds the memory of shares on this GPU",
              {{"gpu", uuid},
               {"driver", partition_capability_.driver_version},
               {"reason", support.reason}});
  if (uuids.empty() && !why_not.empty())
    log::info("the shim alone holds the memory of shares", {{"reason", why_not}});
  if (!partition_capability_.any()) return;
  const std::vector<std::string> supported = partition_capability_.supported();
  options.partition_hook = PartitionHookConfig{
      hook, config_.state_dir + "/partitions", {supported.begin(), supported.end()}};
  options.clear_partition = [this](const PartitionRecord& record) {
    return cgroup::clear_partitions(*partition_session_, record.cgroup, {record.gpu});
  };
}

Status NodeAgent::start_partition_check() {
  if (!partition_capability_.any() || config_.check_interval_s <= 0 || !findings_)
    return Status::ok();
  PartitionCheckOptions checking;
  checking.record_dir = config_.state_dir + "/partitions";
  checking.shares_dir = config_.state_dir + "/shares";
  for (const std::string& uuid : partition_capability_.supported()) checking.gpus.insert(uuid);
  partition_check_ = std::make_unique<PartitionCheck>(
      checking, [this] { return node_checkpoint(); }, *partition_session_, *findings_);
  TESSERA_ASSIGN_OR_RETURN(
      partition_loop_,
      PeriodicLoop::start(
          clock_, std::chrono::milliseconds(static_cast<int64_t>(config_.check_interval_s * 1000)),
          [this] { (void)partition_check_->check_once(); }),
      with_context("cannot start the partition check"));
  return Status::ok();
}

void NodeAgent::reconcile_pass() {
  log_report("periodic", shares_->reconcile());
  shares_->reconcile_mig();           // dynamic MIG instances no share uses any more
  shares_->refresh_all_claim_pods();  // shared claims' later pods (it logs what changed)
  // The API side too: a slice deleted or edited by someone else is put back (no writes when the
  // API already matches). The MIG view is read afresh: instances an admin made or destroyed
  // outside Tessera are seen here.
  if (mig_driver_) mig_driver_->note_layout_change();
  if (Status published = publish(monitor_->devices()); !published.is_ok())
    log::error("reconcile could not publish ResourceSlices",
               {{"pass", "periodic"}, {"error", published.message()}});
}

std::uint64_t NodeAgent::reconcile_passes() const {
  return reconciler_ ? reconciler_->ticks() : 0;
}

bool NodeAgent::wait_for_reconcile_passes(std::uint64_t count,
                                          std::chrono::milliseconds timeout) const {
  return reconciler_ && reconciler_->wait_for_ticks(count, timeout);
}

bool NodeAgent::wait_for_device_turns(std::uint64_t count,
                                      std::chrono::milliseconds timeout) const {
  return monitor_ && monitor_->wait_for_turns(count, timeout);
}

Status NodeAgent::start_process_watch() {
  if (config_.process_watch == "off") return Status::ok();
  ProcessWatchProgram::Options options;
  std::ifstream devices("/proc/devices");
  options.device_majors = nvidia_device_majors(
      std::string(std::istreambuf_iterator<char>(devices), std::istreambuf_iterator<char>()));
  Result<std::unique_ptr<ProcessWatchProgram>> loaded = ProcessWatchProgram::load(options);
  if (!loaded.is_ok()) {
    if (config_.process_watch == "on")
      return loaded.status().with_context("--process-watch on: the process watcher cannot load");
    log::warn("process watcher off, relying on the periodic checks",
              {{"reason", loaded.status().message()}});
    return Status::ok();
  }
  watch_program_ = std::move(loaded).value();
  ShareFolderResolver::Options resolver_options{config_.state_dir + "/shares"};
  warn_if_cgroup_v1_only(resolver_options.cgroup_roots);
  watch_resolver_ = std::make_unique<ShareFolderResolver>(std::move(resolver_options));
  // Its findings go through the same policy as the periodic checks' (log, count, kill).
  watcher_ =
      std::make_unique<ProcessWatcher>(*watch_resolver_, *findings_, clock_, watch_program_.get());
  // Shares and their processes' cgroups come and go: re-read them every second.
  auto refresh = [this] {
    watch_resolver_->refresh();
    if (Status refreshed = watcher_->refresh_shares(); !refreshed.is_ok())
      log::error("process watcher cannot refresh its shares", {{"error", refreshed.message()}});
  };
  refresh();
  TESSERA_RETURN_IF_ERROR(
      watch_program_->start([this](const tessera_watch_event& event) { watcher_->handle(event); }));
  TESSERA_ASSIGN_OR_RETURN(watch_refresher_,
                           PeriodicLoop::start(clock_, std::chrono::seconds(1), refresh),
                           with_context("cannot start the process watcher"));
  log::info("process watcher on", {{"exits", "tp_btf/sched_process_exit"},
                                   {"device_opens", watch_program_->open_hook()}});
  return Status::ok();
}

void NodeAgent::stop() {
  {
    MutexLock lock(liveness_mutex_);
    stopped_ = started_;
  }
  watch_refresher_.reset();
  if (watch_program_) watch_program_->stop();
  if (metrics_) metrics_->stop();  // no scrape runs past here
  if (api_) api_->stop();          // no call nor pass runs past here
  reconciler_.reset();             // joins: no pass runs past here
  observe_loop_.reset();           // joins: no observation pass runs past here
  partition_loop_.reset();         // joins: no partition check runs past here
  if (checker_) checker_->stop();
  if (meter_) meter_->stop();
  if (monitor_) monitor_->stop();
  if (events_) events_->set_observer(nullptr);  // the recorder goes before the log
}

}  // namespace tessera::agent

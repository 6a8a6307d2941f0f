#include "agent/node_agent.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "backends/mps_backend.h"
#include "backends/time_slice_backend.h"
#include "devices/device_monitor.h"
#include "devices/resource_slices.h"
#include "kube/http_kube_client.h"
#include "share/share_manager.h"
#include "usage/gpu_time_meter.h"

namespace tessera::agent {

namespace {
void log_report(const char* when, const ReconcileReport& report) {
  if (report.clean()) return;
  std::cerr << "tessera-node-agent: reconcile (" << when << "): " << report.items.size()
            << " differences, " << report.failures() << " not repaired\n"
            << report.to_text();
}
}  // namespace

NodeAgent::NodeAgent(AgentConfig config) : config_(std::move(config)) {}

NodeAgent::~NodeAgent() {
  stop();
  if (lock_fd_ >= 0) close(lock_fd_);
}

std::string NodeAgent::lock_state_dir() {
  std::error_code ec;
  std::filesystem::create_directories(config_.state_dir, ec);
  if (ec) return "cannot create " + config_.state_dir + ": " + ec.message();
  const std::string path = config_.state_dir + "/agent.lock";
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return "cannot open " + path + ": " + std::strerror(errno);
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char holder[32] = {};
    (void)!pread(fd, holder, sizeof holder - 1, 0);
    close(fd);
    return "another tessera-node-agent (pid " + std::string(holder[0] ? holder : "unknown") +
           ") is using " + config_.state_dir + " (" + path +
           " is locked); one agent per state folder";
  }
  // The pid is for the message above only; the lock is what counts.
  const std::string pid = std::to_string(getpid());
  if (ftruncate(fd, 0) == 0) (void)!pwrite(fd, pid.data(), pid.size(), 0);
  lock_fd_ = fd;
  return "";
}

ClaimPreparer& NodeAgent::preparer() {
  return *shares_;
}

std::string NodeAgent::start() {
  if (config_.node_name.empty()) return "--node-name (NODE_NAME) is required";
  if (auto e = lock_state_dir(); !e.empty()) return e;
  Result<KubeConnection> connection = config_.kubeconfig.empty()
                                          ? in_cluster_connection()
                                          : kubeconfig_connection(config_.kubeconfig);
  if (!connection.is_ok()) return connection.status().message();
  kube_ = std::make_unique<HttpKubeClient>(*connection);
  slices_ =
      std::make_unique<SlicePublisher>(*kube_, SliceIdentity{kDriverName, config_.node_name, ""});

  MpsOptions mps;
  mps.control = config_.mps_control;
  mps.root = config_.state_dir + "/mps";
  mps_ = std::make_unique<MpsBackend>(mps);
  TimeSliceOptions slices;
  slices.nvidia_smi = config_.nvidia_smi;
  slices.root = config_.state_dir + "/timeslice";
  time_slice_ = std::make_unique<TimeSliceBackend>(slices);

  ShareManagerOptions options;
  options.root = config_.state_dir;
  options.cdi_dir = config_.cdi_dir;
  options.node_name = config_.node_name;
  options.mps = mps_.get();
  options.time_slice = time_slice_.get();
  // Containers' pids are not NVML's: the agent measures every share's GPU time (the meter below).
  options.measure_source = share::kMeasureAgent;
  shares_ = std::make_unique<ShareManager>(options, *kube_, std::vector<NodeDevice>{});
  ReconcileReport report;
  if (auto e = shares_->start(&report); !e.empty()) return e;
  log_report("start", report);

  DeviceMonitorOptions monitoring;
  monitoring.pool = config_.node_name;
  monitoring.inventory_interval = std::chrono::seconds(config_.device_poll_interval_s);
  monitor_ = std::make_unique<DeviceMonitor>(
      monitoring, health_, [this](const std::vector<GpuInfo>& gpus) { return on_devices(gpus); });
  if (auto e = monitor_->start(); !e.empty()) return e;

  GpuTimeMeterOptions metering;
  metering.shares_dir = config_.state_dir + "/shares";
  meter_ = std::make_unique<GpuTimeMeter>(metering);
  if (auto e = meter_->start(); !e.empty())
    std::cerr << "tessera-node-agent: GPU-time meter not running, so compute limits (cores) are "
                 "not enforced: "
              << e << '\n';

  if (config_.reconcile_interval_s > 0) reconciler_ = std::thread([this] { reconcile_loop(); });
  return "";
}

std::string NodeAgent::on_devices(const std::vector<GpuInfo>& gpus) {
  // Claims are checked against the new list at once; the API learns it next (a failed publish is
  // retried by the monitor, and the scheduler keeps using the old slices meanwhile).
  shares_->set_devices(node_devices(gpus));
  return publish(gpus);
}

std::string NodeAgent::publish(const std::vector<GpuInfo>& gpus) {
  std::lock_guard lock(slices_mutex_);
  if (auto e = slices_->publish(gpus); !e.empty()) return "cannot publish ResourceSlices: " + e;
  if (slices_->writes() > 0)
    std::cerr << "tessera-node-agent: published " << gpus.size() << " GPUs in " << slices_->writes()
              << " ResourceSlice writes (pool generation " << slices_->generation() << ")\n";
  return "";
}

void NodeAgent::reconcile_loop() {
  std::unique_lock lock(loop_mutex_);
  while (!loop_wake_.wait_for(lock, std::chrono::seconds(config_.reconcile_interval_s),
                              [this] { return stopping_; })) {
    lock.unlock();
    log_report("periodic", shares_->reconcile());
    // The API side too: a slice deleted or edited by someone else is put back (no writes when
    // the API already matches).
    if (auto e = publish(monitor_->devices()); !e.empty())
      std::cerr << "tessera-node-agent: reconcile (periodic): " << e << '\n';
    lock.lock();
  }
}

void NodeAgent::stop() {
  {
    std::lock_guard lock(loop_mutex_);
    stopping_ = true;
  }
  loop_wake_.notify_all();
  if (reconciler_.joinable()) reconciler_.join();
  if (meter_) meter_->stop();
  if (monitor_) monitor_->stop();
}

}  // namespace tessera::agent

#include "devices/device_monitor.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <future>
#include <mutex>
#include <optional>

#include <gtest/gtest.h>

#include "apiserver/fake_api_server.h"
#include "clock/clock.h"
#include "devices/resource_slices.h"
#include "tessera/kube/http_kube_client.h"

namespace tessera::agent {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using testing::FakeApiServer;

constexpr char kTwoGpus[] =
    "name=NVIDIA H200,memory=143771Mi,sms=132,cc=9.0;"
    "name=NVIDIA H100,memory=81559Mi,sms=132,cc=9.0";
constexpr milliseconds kBound{5000};  // every wait for the monitor ends by then

// Runs `body` in a child process with a simulator state file of its own: the simulated NVML
// opens its state once per process, so a test that faults a device cannot leak into the next.
void in_simulator(const std::function<void()>& body) {
  char directory[] = "/tmp/agent-devmon-test-XXXXXX";
  ASSERT_NE(mkdtemp(directory), nullptr);
  const std::string state = std::string(directory) + "/state";
  std::fflush(nullptr);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setenv("SIMGPU_STATE", state.c_str(), 1);
    setenv("SIMGPU_DEVICES", kTwoGpus, 1);
    unsetenv("SIMGPU_UNHEALTHY");
    body();
    std::fflush(nullptr);
    _exit(::testing::Test::HasFailure() ? 1 : 0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  std::filesystem::remove_all(directory);
  ASSERT_TRUE(WIFEXITED(status)) << "the scenario process died, status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the scenario failed (its messages are above)";
}

// The simulator's GPUs as listed at the start, the last one missing while `drop` is set (a GPU
// gone, then back after a reset).
struct Inventory {
  std::vector<GpuInfo> all;
  std::atomic<bool> drop{false};
  std::function<std::string(std::vector<GpuInfo>&)> source() {
    return [this](std::vector<GpuInfo>& gpus) {
      gpus = all;
      if (drop) gpus.pop_back();
      return std::string();
    };
  }
};

// Fault injection from another process, as an operator would (SIMGPU_STATE is inherited).
void simgpu_ctl(const std::string& args) {
  ASSERT_EQ(std::system((std::string(SIMGPU_CTL) + " " + args).c_str()), 0) << args;
}

// on_devices: records every call (failed ones too) and answers with `reply`.
struct Recorder {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::vector<GpuInfo>> calls;
  std::function<Status(const std::vector<GpuInfo>&)> reply = [](const auto&) {
    return Status::ok();
  };

  DeviceMonitor::DevicesCallback callback() {
    return [this](const std::vector<GpuInfo>& gpus) {
      Status error = reply(gpus);
      {
        std::lock_guard lock(mutex);
        calls.push_back(gpus);
      }
      changed.notify_all();
      return error;
    };
  }
  bool wait_for(size_t n) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, kBound, [&] { return calls.size() >= n; });
  }
  size_t count() {
    std::lock_guard lock(mutex);
    return calls.size();
  }
  std::vector<GpuInfo> call(size_t i) {
    std::lock_guard lock(mutex);
    return i < calls.size() ? calls[i] : std::vector<GpuInfo>{};
  }
};

std::optional<DeviceHealthState> state_of(const DeviceHealthBoard& board, const std::string& name) {
  for (const DeviceHealthReport& report : board.snapshot().devices)
    if (report.device_name == name) return report.state;
  return std::nullopt;
}

// Waits (bounded) until `name` has `state` on the board; nullopt: until it is gone.
bool wait_for_state(const DeviceHealthBoard& board, const std::string& name,
                    std::optional<DeviceHealthState> state) {
  const auto deadline = std::chrono::steady_clock::now() + kBound;
  for (;;) {
    const std::uint64_t seen = board.snapshot().generation;
    if (state_of(board, name) == state) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    board.wait_for_change(seen, milliseconds(50));
  }
}

// On simulated time: every turn lists the GPUs again (the inventory is due at each one).
DeviceMonitorOptions fast_options() {
  DeviceMonitorOptions options;
  options.pool = "node-a";
  options.inventory_interval = milliseconds(20);
  options.poll_interval = milliseconds(20);
  return options;
}

// Moves the simulated time on by `turns` poll intervals, one at a time, each time until the
// monitor has finished that turn: what the turns did (or did not do) is then settled, no guess.
void run_turns(SimulatedClock& clock, const DeviceMonitor& monitor, int turns = 1,
               milliseconds interval = fast_options().poll_interval) {
  for (int i = 0; i < turns; ++i) {
    const std::uint64_t done = monitor.turns();
    clock.advance(interval);
    ASSERT_TRUE(monitor.wait_for_turns(done + 1)) << "turn " << done + 1 << " did not run";
  }
}

std::vector<std::string> device_names(const json& slice) {
  std::vector<std::string> names;
  for (const json& device : slice["spec"]["devices"]) names.push_back(device["name"]);
  return names;
}

TEST(DeviceMonitor, StartPublishesTheSimulatedGpusAllHealthy) {
  in_simulator([] {
    SimulatedClock clock;
    DeviceHealthBoard board;
    Recorder recorder;
    DeviceMonitor monitor(fast_options(), board, recorder.callback(), clock);
    const std::int64_t before = std::time(nullptr);
    ASSERT_EQ(monitor.start().message(), "");
    ASSERT_EQ(recorder.count(), 1u);
    const std::vector<GpuInfo> gpus = recorder.call(0);
    ASSERT_EQ(gpus.size(), 2u);
    EXPECT_EQ(gpus[0].product_name, "NVIDIA H200");
    EXPECT_EQ(gpus[1].product_name, "NVIDIA H100");
    EXPECT_EQ(monitor.devices(), gpus);
    EXPECT_TRUE(monitor.events_supported());

    const DeviceHealthSnapshot snapshot = board.snapshot();
    ASSERT_EQ(snapshot.devices.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      const DeviceHealthReport& report = snapshot.devices[i];
      EXPECT_EQ(report.pool_name, "node-a");
      EXPECT_EQ(report.device_name, "gpu-" + std::to_string(gpus[i].minor));
      EXPECT_EQ(report.state, DeviceHealthState::kHealthy);
      EXPECT_GE(report.last_updated_unix_s, before);
      EXPECT_LE(report.last_updated_unix_s, std::time(nullptr));
    }
    EXPECT_EQ(snapshot.devices[0].device_name, "gpu-0");
    EXPECT_EQ(snapshot.devices[1].device_name, "gpu-1");

    // Many inventory turns with the same GPUs: nothing is published again.
    run_turns(clock, monitor, 15);
    EXPECT_EQ(recorder.count(), 1u);
    EXPECT_EQ(board.snapshot().devices.size(), 2u);
  });
}

TEST(DeviceMonitor, XidEventMarksThatDeviceUnhealthy) {
  in_simulator([] {
    SimulatedClock clock;
    DeviceHealthBoard board;
    Recorder recorder;
    DeviceMonitor monitor(fast_options(), board, recorder.callback(), clock);
    ASSERT_EQ(monitor.start().message(), "");
    simgpu_ctl("health 1 unhealthy");  // the simulator raises XID 79 (fallen off the bus)
    run_turns(clock, monitor);         // the turn that collects it
    ASSERT_TRUE(wait_for_state(board, "gpu-1", DeviceHealthState::kUnhealthy));
    EXPECT_EQ(state_of(board, "gpu-0"), DeviceHealthState::kHealthy);
    // The report says which XID and why (kubelet's message); the same GPUs are delivered again
    // so that the agent republishes the slices with the device's taint.
    for (const DeviceHealthReport& report : board.snapshot().devices) {
      if (report.device_name != "gpu-1") continue;
      EXPECT_EQ(report.xid, 79u);
      EXPECT_EQ(report.message, "XID 79: GPU has fallen off the bus");
    }
    ASSERT_TRUE(recorder.wait_for(2));
    EXPECT_EQ(recorder.call(1), recorder.call(0));

    // The lost GPU makes later listings fail (its memory cannot be read): the monitor keeps
    // both devices, their health, and publishes nothing new.
    run_turns(clock, monitor, 15);
    EXPECT_EQ(state_of(board, "gpu-1"), DeviceHealthState::kUnhealthy);
    EXPECT_EQ(state_of(board, "gpu-0"), DeviceHealthState::kHealthy);
    EXPECT_EQ(monitor.devices().size(), 2u);
    EXPECT_EQ(recorder.count(), 2u);
  });
}

// GPU 0 published as two MIG instances (static MIG: no whole-GPU device), GPU 1 whole: the
// simulator's XID 79 on GPU 0 comes without a GPU-instance id (the whole GPU fell off the bus), so
// both instances turn Unhealthy and GPU 1 stays Healthy; events are watched on GPU 0 itself.
TEST(DeviceMonitor, AGpuWideXidMarksEveryMigInstanceOfThatGpuOnly) {
  in_simulator([] {
    SimulatedClock clock;
    DeviceHealthBoard board;
    Recorder recorder;
    DeviceMonitorOptions options = fast_options();
    options.published = [](const std::vector<GpuInfo>& gpus) {
      std::vector<NodeDevice> devices;
      for (const NodeDevice& whole : node_devices(gpus)) {
        if (whole.minor != 0) {
          devices.push_back(whole);
          continue;
        }
        for (unsigned gi : {1u, 2u}) {
          NodeDevice instance{"gpu-0-mig-gi" + std::to_string(gi), "MIG-" + std::to_string(gi), 0,
                              whole.memory_bytes / 2, whole.product_name};
          instance.mig = MigDeviceRef{};
          instance.mig->parent_uuid = whole.uuid;
          instance.mig->profile = "3g.71gb";
          instance.mig->gi_id = gi;
          instance.mig->ci_id = 0;
          devices.push_back(instance);
        }
      }
      return devices;
    };
    DeviceMonitor monitor(options, board, recorder.callback(), clock);
    ASSERT_EQ(monitor.start().message(), "");
    EXPECT_TRUE(monitor.events_supported()) << "GPU 0 is watched through its own handle";
    EXPECT_EQ(state_of(board, "gpu-0-mig-gi1"), DeviceHealthState::kHealthy);
    EXPECT_EQ(state_of(board, "gpu-0"), std::nullopt) << "not a published device";
    simgpu_ctl("health 0 unhealthy");
    run_turns(clock, monitor);
    ASSERT_TRUE(wait_for_state(board, "gpu-0-mig-gi1", DeviceHealthState::kUnhealthy));
    ASSERT_TRUE(wait_for_state(board, "gpu-0-mig-gi2", DeviceHealthState::kUnhealthy));
    EXPECT_EQ(state_of(board, "gpu-1"), DeviceHealthState::kHealthy);
    for (const DeviceHealthReport& report : board.snapshot().devices) {
      if (report.device_name.rfind("gpu-0-mig-", 0) == 0) {
        EXPECT_EQ(report.xid, 79u);
      }
    }
  });
}

// A static-MIG GPU (two instances, no whole-GPU device) and a whole GPU, as node_devices lists
// them.
std::vector<NodeDevice> mig_and_whole() {
  auto instance = [](const std::string& name, const std::string& uuid, unsigned gi) {
    NodeDevice device{name, uuid, 0, 71168ull << 20, "NVIDIA H200"};
    MigDeviceRef mig;
    mig.parent_uuid = "GPU-a";
    mig.profile = "3g.71gb";
    mig.placement = {gi == 1 ? 4u : 0u, 4};
    mig.multiprocessors = 60;
    mig.gi_id = gi;
    mig.ci_id = 0;
    device.mig = mig;
    return device;
  };
  return {instance("gpu-0-mig-gi1", "MIG-1", 1), instance("gpu-0-mig-gi2", "MIG-2", 2),
          NodeDevice{"gpu-1", "GPU-b", 1, 141ull << 30, "NVIDIA H200"}};
}

std::vector<std::string> names_of(const std::vector<NodeDevice>& devices) {
  std::vector<std::string> names;
  for (const NodeDevice& device : devices) names.push_back(device.name);
  return names;
}

// An event NVML attributes to GPU instance 2 hits that instance's device only; one without a GI
// id hits every device of the GPU; a GI the agent does not publish hits nothing.
TEST(DeviceMonitor, AnEventOnAMigInstanceHitsThatInstanceOnly) {
  const std::vector<NodeDevice> devices = mig_and_whole();
  EXPECT_EQ(names_of(devices_hit_by(devices, "GPU-a", 2)),
            std::vector<std::string>{"gpu-0-mig-gi2"});
  EXPECT_EQ(names_of(devices_hit_by(devices, "GPU-a", kNoGpuInstance)),
            (std::vector<std::string>{"gpu-0-mig-gi1", "gpu-0-mig-gi2"}));
  EXPECT_TRUE(devices_hit_by(devices, "GPU-a", 7).empty());
  EXPECT_EQ(names_of(devices_hit_by(devices, "GPU-b", kNoGpuInstance)),
            std::vector<std::string>{"gpu-1"});
  // A GI id on a GPU without instances matches no device either (nothing to blame).
  EXPECT_TRUE(devices_hit_by(devices, "GPU-b", 2).empty());
  EXPECT_TRUE(devices_hit_by(devices, "GPU-c", kNoGpuInstance).empty());
}

// Events are registered on physical GPUs: a static-MIG GPU once (named after its minor), never
// its instances' handles.
TEST(DeviceMonitor, EventsAreWatchedOnEachPhysicalGpuOnce) {
  const std::vector<NodeDevice> gpus = physical_gpus(mig_and_whole());
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0].name, "gpu-0");
  EXPECT_EQ(gpus[0].uuid, "GPU-a");
  EXPECT_FALSE(gpus[0].mig.has_value());
  EXPECT_EQ(gpus[1].name, "gpu-1");
  // With the whole GPU published too (dynamic MIG), its own device stands for it.
  std::vector<NodeDevice> with_whole = mig_and_whole();
  with_whole.push_back({"gpu-0", "GPU-a", 0, 141ull << 30, "NVIDIA H200"});
  EXPECT_EQ(names_of(physical_gpus(with_whole)), (std::vector<std::string>{"gpu-0", "gpu-1"}));
}

TEST(DeviceMonitor, XidsAreDescribedForPeople) {
  EXPECT_EQ(describe_xid(79), "XID 79: GPU has fallen off the bus");
  EXPECT_EQ(describe_xid(48), "XID 48: double-bit ECC error");
  EXPECT_EQ(describe_xid(95), "XID 95: uncontained ECC error");
  EXPECT_EQ(describe_xid(1234), "XID 1234");
}

TEST(DeviceMonitor, ApplicationXidsLeaveTheDeviceHealthy) {
  for (unsigned long long xid : {13, 31, 43, 45, 68, 109})
    EXPECT_FALSE(xid_marks_unhealthy(xid)) << "XID " << xid;
  for (unsigned long long xid : {48, 63, 64, 74, 79, 92, 94, 95, 119, 0})
    EXPECT_TRUE(xid_marks_unhealthy(xid)) << "XID " << xid;
}

TEST(DeviceMonitor, DeviceGoneAndBackRepublishesSlicesAndHealth) {
  in_simulator([] {
    Inventory inventory;
    Result<std::vector<GpuInfo>> listed = list_gpus();
    ASSERT_EQ(listed.status().message(), "");
    inventory.all = *listed;
    ASSERT_EQ(inventory.all.size(), 2u);
    const auto& all = inventory.all;
    auto& drop = inventory.drop;
    DeviceMonitorOptions options = fast_options();
    options.list = inventory.source();

    FakeApiServer server;
    const kube::KubeConnection connection = server.connection();
    kube::RetryPolicy retry;
    retry.initial_backoff = milliseconds(1);
    kube::HttpKubeClient kube(connection, retry);
    SlicePublisher publisher(kube, {"vgpu.tessera.dev", "node-a", ""});
    DeviceHealthBoard board;
    Recorder recorder;
    // What the agent does: the slices follow the GPUs and the board's health (taints).
    recorder.reply = [&](const std::vector<GpuInfo>& gpus) {
      const Status published = publisher.publish(gpus, board.snapshot().devices);
      return published.is_ok() ? Status::ok() : unavailable(published.message());
    };

    SimulatedClock clock;
    DeviceMonitor monitor(options, board, recorder.callback(), clock);
    ASSERT_EQ(monitor.start().message(), "");
    auto writes = server.take_writes();
    ASSERT_EQ(writes.size(), 1u);
    EXPECT_EQ(writes[0].method, "POST");
    EXPECT_EQ(device_names(writes[0].body), (std::vector<std::string>{"gpu-0", "gpu-1"}));
    EXPECT_EQ(writes[0].body["spec"]["pool"]["generation"], 1);
    EXPECT_FALSE(writes[0].body["spec"]["devices"][1].contains("taints"));

    // gpu-1 faults: XID 79 on the simulated GPU. The slice is republished (next generation) with
    // the device's taint, which the (ported) kube-apiserver validation accepts and stamps.
    simgpu_ctl("health 1 unhealthy");
    run_turns(clock, monitor);
    ASSERT_TRUE(wait_for_state(board, "gpu-1", DeviceHealthState::kUnhealthy));
    ASSERT_TRUE(recorder.wait_for(2));
    EXPECT_EQ(recorder.call(1), all);
    writes = server.take_writes();
    ASSERT_EQ(writes.size(), 1u);
    EXPECT_EQ(writes[0].method, "PUT");
    EXPECT_EQ(writes[0].body["spec"]["pool"]["generation"], 2);
    EXPECT_FALSE(writes[0].body["spec"]["devices"][0].contains("taints"));
    EXPECT_EQ(writes[0].body["spec"]["devices"][1]["taints"],
              json::array({{{"key", "vgpu.tessera.dev/unhealthy"},
                            {"value", "xid-79"},
                            {"effect", "NoSchedule"}}}));
    const json stored = server.stored_slices().begin()->second;
    EXPECT_TRUE(stored.at(json::json_pointer("/spec/devices/1/taints/0/timeAdded")).is_string());

    // Then it leaves the inventory (taken out for a reset).
    drop = true;
    run_turns(clock, monitor);
    ASSERT_TRUE(recorder.wait_for(3));
    EXPECT_EQ(recorder.call(2), std::vector<GpuInfo>{all[0]});
    writes = server.take_writes();
    ASSERT_EQ(writes.size(), 1u);
    EXPECT_EQ(writes[0].method, "PUT");
    EXPECT_EQ(writes[0].path, "/apis/resource.k8s.io/v1/resourceslices/node-a-vgpu.tessera.dev-0");
    EXPECT_EQ(writes[0].body["spec"]["pool"],
              json({{"name", "node-a"}, {"generation", 3}, {"resourceSliceCount", 1}}));
    ASSERT_EQ(writes[0].body["spec"]["devices"].size(), 1u);
    EXPECT_EQ(writes[0].body["spec"]["devices"][0], build_device(all[0]));
    EXPECT_EQ(state_of(board, "gpu-1"), std::nullopt);
    EXPECT_EQ(state_of(board, "gpu-0"), DeviceHealthState::kHealthy);
    EXPECT_EQ(board.snapshot().devices.size(), 1u);

    // Reset and back: Healthy again, republished at the next generation without the taint.
    simgpu_ctl("health 1 healthy");
    drop = false;
    run_turns(clock, monitor);
    ASSERT_TRUE(recorder.wait_for(4));
    EXPECT_EQ(recorder.call(3), all);
    writes = server.take_writes();
    ASSERT_EQ(writes.size(), 1u);
    EXPECT_EQ(writes[0].method, "PUT");
    EXPECT_EQ(writes[0].body["spec"]["pool"]["generation"], 4);
    EXPECT_EQ(device_names(writes[0].body), (std::vector<std::string>{"gpu-0", "gpu-1"}));
    EXPECT_EQ(writes[0].body["spec"]["devices"][1], build_device(all[1]));
    EXPECT_FALSE(writes[0].body["spec"]["devices"][1].contains("taints"));
    EXPECT_EQ(state_of(board, "gpu-1"), DeviceHealthState::kHealthy);
    EXPECT_EQ(state_of(board, "gpu-0"), DeviceHealthState::kHealthy);
    EXPECT_EQ(server.stored_slices().size(), 1u);
    monitor.stop();
    EXPECT_EQ(recorder.count(), 4u);
  });
}

// Events come only for registered devices: one that joins the inventory later must be watched.
TEST(DeviceMonitor, DeviceAddedLaterIsWatchedForXids) {
  in_simulator([] {
    std::vector<GpuInfo> all;
    Result<std::vector<GpuInfo>> listed = list_gpus();
    ASSERT_EQ(listed.status().message(), "");
    all = *listed;
    ASSERT_EQ(all.size(), 2u);
    std::atomic<bool> both{false};
    DeviceMonitorOptions options = fast_options();
    options.list = [&](std::vector<GpuInfo>& gpus) {
      gpus = all;
      if (!both) gpus.pop_back();
      return std::string();
    };
    SimulatedClock clock;
    DeviceHealthBoard board;
    Recorder recorder;
    DeviceMonitor monitor(options, board, recorder.callback(), clock);
    ASSERT_EQ(monitor.start().message(), "");
    EXPECT_EQ(state_of(board, "gpu-1"), std::nullopt);
    both = true;
    run_turns(clock, monitor);
    ASSERT_TRUE(recorder.wait_for(2));
    EXPECT_EQ(state_of(board, "gpu-1"), DeviceHealthState::kHealthy);
    simgpu_ctl("health 1 unhealthy");
    run_turns(clock, monitor);
    EXPECT_TRUE(wait_for_state(board, "gpu-1", DeviceHealthState::kUnhealthy));
    EXPECT_EQ(state_of(board, "gpu-0"), DeviceHealthState::kHealthy);
  });
}

TEST(DeviceMonitor, FailedPublishIsRetriedUntilDelivered) {
  in_simulator([] {
    Inventory inventory;
    Result<std::vector<GpuInfo>> listed = list_gpus();
    ASSERT_EQ(listed.status().message(), "");
    inventory.all = *listed;
    ASSERT_EQ(inventory.all.size(), 2u);
    const auto& all = inventory.all;
    auto& drop = inventory.drop;
    DeviceMonitorOptions options = fast_options();
    options.list = inventory.source();
    std::atomic<int> attempts{0};
    Recorder recorder;
    recorder.reply = [&](const std::vector<GpuInfo>&) {
      const int n = ++attempts;
      return n == 1 || n == 3 ? unavailable("POST /apis/...: HTTP 503: the API is down")
                              : Status::ok();
    };
    SimulatedClock clock;
    DeviceHealthBoard board;
    DeviceMonitor monitor(options, board, recorder.callback(), clock);
    // The API is down at start: start() still succeeds; the next turn delivers.
    ASSERT_EQ(monitor.start().message(), "");
    EXPECT_EQ(recorder.count(), 1u);
    run_turns(clock, monitor);
    ASSERT_TRUE(recorder.wait_for(2));
    EXPECT_EQ(recorder.call(1), all);
    // A change whose first delivery fails is not lost: the turn after retries it.
    drop = true;
    run_turns(clock, monitor, 2);
    ASSERT_TRUE(recorder.wait_for(4));
    EXPECT_EQ(recorder.call(2), std::vector<GpuInfo>{all[0]});
    EXPECT_EQ(recorder.call(3), std::vector<GpuInfo>{all[0]});
    // Delivered: no more calls.
    run_turns(clock, monitor, 10);
    EXPECT_EQ(recorder.count(), 4u);
  });
}

TEST(DeviceMonitor, StopReturnsPromptly) {
  in_simulator([] {
    SimulatedClock clock;
    DeviceHealthBoard board;
    Recorder recorder;
    DeviceMonitorOptions options;
    options.pool = "node-a";
    options.poll_interval = milliseconds(300);  // inventory_interval stays 30 s
    DeviceMonitor monitor(options, board, recorder.callback(), clock);
    ASSERT_EQ(monitor.start().message(), "");
    ASSERT_TRUE(monitor.events_supported());
    run_turns(clock, monitor, 1, options.poll_interval);  // stopped between turns, not before one
    // Simulated time stands still: only stop()'s wake can end the loop's wait for the next turn.
    // Bounded (liveness: it takes milliseconds), so that a stop that does not wake it fails here.
    auto stopping = std::async(std::launch::async, [&monitor] { monitor.stop(); });
    const bool stopped = stopping.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
    EXPECT_TRUE(stopped) << "stop() waited for the next turn";
    if (!stopped) clock.advance(options.poll_interval);  // the turn it waits for: the test ends
    stopping.get();
    monitor.stop();  // twice is fine
    // A monitor destroyed without stop() stops too.
    {
      DeviceMonitor other(options, board, recorder.callback(), clock);
      ASSERT_EQ(other.start().message(), "");
    }
  });
}

// The inventory has its own interval: turns in between only collect events.
TEST(DeviceMonitor, ListsAgainOnlyEveryInventoryInterval) {
  in_simulator([] {
    Result<std::vector<GpuInfo>> listed = list_gpus();
    ASSERT_EQ(listed.status().message(), "");
    const std::vector<GpuInfo> all = std::move(listed).value();
    std::atomic<int> listings{0};
    DeviceMonitorOptions options;
    options.pool = "node-a";
    options.poll_interval = std::chrono::seconds(1);
    options.inventory_interval = std::chrono::seconds(30);
    options.list = [&](std::vector<GpuInfo>& gpus) {
      ++listings;
      gpus = all;
      return std::string();
    };
    SimulatedClock clock;
    DeviceHealthBoard board;
    Recorder recorder;
    DeviceMonitor monitor(options, board, recorder.callback(), clock);
    ASSERT_EQ(monitor.start().message(), "");
    EXPECT_EQ(listings, 1);
    run_turns(clock, monitor, 29, options.poll_interval);
    EXPECT_EQ(listings, 1);
    run_turns(clock, monitor, 1, options.poll_interval);
    EXPECT_EQ(listings, 2);
    run_turns(clock, monitor, 30, options.poll_interval);
    EXPECT_EQ(listings, 3);
    EXPECT_EQ(recorder.count(), 1u);  // the same GPUs each time
  });
}

TEST(DeviceMonitor, StartFailsWithoutNvml) {
  DeviceHealthBoard board;
  Recorder recorder;
  DeviceMonitorOptions options;
  options.pool = "node-a";
  options.nvml_library = "libtessera-test-no-such-nvml.so.1";
  bool listed = false;
  options.list = [&](std::vector<GpuInfo>&) {
    listed = true;
    return std::string();
  };
  DeviceMonitor monitor(options, board, recorder.callback());
  const Status started = monitor.start();
  EXPECT_EQ(started.code(), StatusCode::kUnavailable);
  const std::string error = started.message();
  EXPECT_EQ(error.rfind("cannot load libtessera-test-no-such-nvml.so.1 (is the NVIDIA driver "
                        "installed?)",
                        0),
            0u)
      << error;
  EXPECT_FALSE(listed);
  EXPECT_EQ(recorder.count(), 0u);
  EXPECT_TRUE(board.snapshot().devices.empty());
  monitor.stop();
}

TEST(DeviceMonitor, StartReportsAFailedListing) {
  in_simulator([] {
    DeviceHealthBoard board;
    Recorder recorder;
    DeviceMonitorOptions options = fast_options();
    options.list = [](std::vector<GpuInfo>&) { return std::string("nvmlInit_v2 failed: boom"); };
    DeviceMonitor monitor(options, board, recorder.callback());
    EXPECT_EQ(monitor.start().message(), "cannot list the GPUs: nvmlInit_v2 failed: boom");
    EXPECT_EQ(recorder.count(), 0u);
    EXPECT_TRUE(board.snapshot().devices.empty());
  });
}

// A library without the event API (an older driver): the monitor starts, polls the inventory
// only, and reports the listed GPUs Healthy.
TEST(DeviceMonitor, StartsWithoutTheEventApiAndPollsOnly) {
  DeviceHealthBoard board;
  Recorder recorder;
  DeviceMonitorOptions options = fast_options();
  options.nvml_library = NVML_PARTIAL_LIBRARY;
  GpuInfo gpu;
  gpu.uuid = "GPU-without-events";
  gpu.product_name = "NVIDIA H200";
  options.list = [&gpu](std::vector<GpuInfo>& gpus) {
    gpus = {gpu};
    return std::string();
  };
  DeviceMonitor monitor(options, board, recorder.callback());
  ASSERT_EQ(monitor.start().message(), "");
  EXPECT_FALSE(monitor.events_supported());
  ASSERT_TRUE(recorder.wait_for(1));
  EXPECT_EQ(recorder.call(0), std::vector<GpuInfo>{gpu});
  EXPECT_EQ(state_of(board, "gpu-0"), DeviceHealthState::kHealthy);
  monitor.stop();
}

}  // namespace
}  // namespace tessera::agent

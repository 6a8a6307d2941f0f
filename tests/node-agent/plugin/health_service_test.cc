// The DRA health service: kubelet's NodeWatchResources stream over the DRA socket, fed by a
// DeviceHealthBoard.
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "devices/device_health.h"
#include "health_service.h"
#include "plugin_server.h"
#include "test_support.h"

namespace tessera::agent::testing {
namespace {

DeviceHealthReport report(const std::string& device, DeviceHealthState state, std::int64_t t) {
  return DeviceHealthReport{"node-a", device, state, t, 0};
}

TEST(DeviceHealthBoard, KeepsOneEntryPerDeviceAndBumpsTheGeneration) {
  DeviceHealthBoard board;
  const std::uint64_t g0 = board.snapshot().generation;
  board.set(report("gpu-0", DeviceHealthState::kHealthy, 10));
  board.set(report("gpu-1", DeviceHealthState::kHealthy, 10));
  board.set(report("gpu-0", DeviceHealthState::kUnhealthy, 11));
  DeviceHealthSnapshot s = board.snapshot();
  EXPECT_EQ(s.generation, g0 + 3);
  ASSERT_EQ(s.devices.size(), 2u);
  EXPECT_EQ(s.devices[0].device_name, "gpu-0");
  EXPECT_EQ(s.devices[0].state, DeviceHealthState::kUnhealthy);
  EXPECT_EQ(s.devices[0].last_updated_unix_s, 11);
  board.remove("node-a", "gpu-9");  // unknown: no change
  EXPECT_EQ(board.snapshot().generation, s.generation);
  board.remove("node-a", "gpu-0");
  EXPECT_EQ(board.snapshot().devices.size(), 1u);
  EXPECT_FALSE(board.wait_for_change(board.snapshot().generation, std::chrono::milliseconds(1)));
  EXPECT_TRUE(board.wait_for_change(s.generation, std::chrono::milliseconds(1)));
}

TEST(HealthService, ResponseCarriesEveryDevice) {
  DeviceHealthSnapshot snapshot{1,
                                {report("gpu-0", DeviceHealthState::kHealthy, 5),
                                 report("gpu-1", DeviceHealthState::kUnhealthy, 6),
                                 report("gpu-2", DeviceHealthState::kUnknown, 7)}};
  snapshot.devices[1].health_check_timeout_seconds = 30;
  v1alpha1::NodeWatchResourcesResponse r = to_watch_response(snapshot);
  ASSERT_EQ(r.devices_size(), 3);
  EXPECT_EQ(r.devices(0).device().pool_name(), "node-a");
  EXPECT_EQ(r.devices(0).device().device_name(), "gpu-0");
  EXPECT_EQ(r.devices(0).health(), v1alpha1::HEALTHY);
  EXPECT_EQ(r.devices(1).health(), v1alpha1::UNHEALTHY);
  EXPECT_EQ(r.devices(1).last_updated_time(), 6);
  EXPECT_EQ(r.devices(1).health_check_timeout_seconds(), 30);
  EXPECT_EQ(r.devices(2).health(), v1alpha1::UNKNOWN);
}

class HealthOverSocket : public ::testing::Test {
 protected:
  void SetUp() override {
    PluginServerOptions options;
    options.registry_dir = dir_.path() / "registry";
    options.plugins_dir = dir_.path() / "plugins";
    options.log = [](std::string_view) {};
    board_.set(report("gpu-0", DeviceHealthState::kHealthy, 100));
    board_.set(report("gpu-1", DeviceHealthState::kHealthy, 100));
    server_ = std::make_unique<PluginServer>(options, preparer_, &board_);
    ASSERT_EQ(server_->start().message(), "");
    kubelet_ = std::make_unique<KubeletSimulator>(server_->registration_socket());
    kubelet_->connect();
  }

  TempDir dir_;
  RecordingPreparer preparer_;
  DeviceHealthBoard board_;
  std::unique_ptr<PluginServer> server_;
  std::unique_ptr<KubeletSimulator> kubelet_;
};

TEST_F(HealthOverSocket, GetInfoAdvertisesTheHealthService) {
  pluginregistration::PluginInfo info;
  ASSERT_TRUE(kubelet_->get_info(&info).ok());
  ASSERT_EQ(info.supported_versions_size(), 3);
  EXPECT_EQ(info.supported_versions(0), "v1.DRAPlugin");
  EXPECT_EQ(info.supported_versions(1), "v1beta1.DRAPlugin");
  EXPECT_EQ(info.supported_versions(2), "v1alpha1.DRAResourceHealth");
}

TEST_F(HealthOverSocket, StreamsTheFullListAtOnceAndOnEveryChange) {
  grpc::ClientContext context;
  set_deadline(context);
  auto reader =
      kubelet_->health().NodeWatchResources(&context, v1alpha1::NodeWatchResourcesRequest{});
  v1alpha1::NodeWatchResourcesResponse message;
  ASSERT_TRUE(reader->Read(&message));
  ASSERT_EQ(message.devices_size(), 2);
  EXPECT_EQ(message.devices(0).health(), v1alpha1::HEALTHY);
  EXPECT_EQ(message.devices(1).health(), v1alpha1::HEALTHY);

  board_.set(report("gpu-1", DeviceHealthState::kUnhealthy, 101));
  ASSERT_TRUE(reader->Read(&message));
  ASSERT_EQ(message.devices_size(), 2);  // the full list again, not only the change
  EXPECT_EQ(message.devices(0).device().device_name(), "gpu-0");
  EXPECT_EQ(message.devices(0).health(), v1alpha1::HEALTHY);
  EXPECT_EQ(message.devices(1).device().device_name(), "gpu-1");
  EXPECT_EQ(message.devices(1).health(), v1alpha1::UNHEALTHY);
  EXPECT_EQ(message.devices(1).last_updated_time(), 101);

  context.TryCancel();
  while (reader->Read(&message)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

TEST_F(HealthOverSocket, StopEndsOpenStreams) {
  grpc::ClientContext context;
  set_deadline(context);
  auto reader =
      kubelet_->health().NodeWatchResources(&context, v1alpha1::NodeWatchResourcesRequest{});
  v1alpha1::NodeWatchResourcesResponse message;
  ASSERT_TRUE(reader->Read(&message));
  const auto begin = std::chrono::steady_clock::now();
  server_->stop();  // returns only once the stream's handler has returned
  EXPECT_LT(std::chrono::steady_clock::now() - begin, std::chrono::seconds(5));
  while (reader->Read(&message)) {
  }
  EXPECT_TRUE(reader->Finish().ok());
}

}  // namespace
}  // namespace tessera::agent::testing

// The DRA health service: kubelet's NodeWatchResources stream over the DRA socket, in both
// versions (v1alpha1 for kubelet 1.34 to 1.39, v1 for 1.37 and later), fed by a DeviceHealthBoard.
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "devices/device_health.h"
#include "plugin/health_service.h"
#include "plugin/plugin_server.h"
#include "plugin/test_support.h"

namespace tessera::agent::testing {
namespace {

DeviceHealthReport report(const std::string& device, DeviceHealthState state, std::int64_t t) {
  DeviceHealthReport r;
  r.pool_name = "node-a";
  r.device_name = device;
  r.state = state;
  r.last_updated_unix_s = t;
  return r;
}

DeviceHealthReport xid_report(const std::string& device, std::int64_t t) {
  DeviceHealthReport r = report(device, DeviceHealthState::kUnhealthy, t);
  r.message = "XID 79: GPU has fallen off the bus";
  r.xid = 79;
  return r;
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
  EXPECT_EQ(r.devices(0).message(), "");
}

TEST(HealthService, BothVersionsCarryTheReasonAsMessage) {
  DeviceHealthSnapshot snapshot{
      1, {report("gpu-0", DeviceHealthState::kHealthy, 5), xid_report("gpu-1", 6)}};
  snapshot.devices[1].health_check_timeout_seconds = 30;
  const v1alpha1::NodeWatchResourcesResponse alpha = to_watch_response(snapshot);
  const v1::NodeWatchResourcesResponse stable = to_watch_response_v1(snapshot);
  ASSERT_EQ(alpha.devices_size(), 2);
  ASSERT_EQ(stable.devices_size(), 2);
  EXPECT_EQ(alpha.devices(1).message(), "XID 79: GPU has fallen off the bus");
  EXPECT_EQ(stable.devices(1).message(), "XID 79: GPU has fallen off the bus");
  EXPECT_EQ(stable.devices(1).health(), v1::UNHEALTHY);
  EXPECT_EQ(stable.devices(0).health(), v1::HEALTHY);
  EXPECT_EQ(stable.devices(1).device().pool_name(), "node-a");
  EXPECT_EQ(stable.devices(1).device().device_name(), "gpu-1");
  EXPECT_EQ(stable.devices(1).last_updated_time(), 6);
  EXPECT_EQ(stable.devices(1).health_check_timeout_seconds(), 30);
  // The two versions are one wire format: v1's bytes read as v1alpha1 give the same message.
  v1alpha1::NodeWatchResourcesResponse decoded;
  ASSERT_TRUE(decoded.ParseFromString(stable.SerializeAsString()));
  EXPECT_EQ(decoded.SerializeAsString(), alpha.SerializeAsString());
}

TEST(HealthService, MessageIsCutToWhatKubeletKeeps) {
  DeviceHealthSnapshot snapshot{1, {xid_report("gpu-0", 5)}};
  snapshot.devices[0].message = std::string(3000, 'x');
  EXPECT_EQ(to_watch_response(snapshot).devices(0).message().size(), kHealthMessageMaxLength);
  EXPECT_EQ(to_watch_response_v1(snapshot).devices(0).message().size(), kHealthMessageMaxLength);
}

TEST(HealthService, NamesEveryVersionKubeletPicksFrom) {
  EXPECT_EQ(HealthService::service_names(),
            (std::vector<std::string>{"v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"}));
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

TEST_F(HealthOverSocket, GetInfoAdvertisesEveryHealthVersion) {
  pluginregistration::PluginInfo info;
  ASSERT_TRUE(kubelet_->get_info(&info).ok());
  ASSERT_EQ(info.supported_versions_size(), 4);
  EXPECT_EQ(info.supported_versions(0), "v1.DRAPlugin");
  EXPECT_EQ(info.supported_versions(1), "v1beta1.DRAPlugin");
  // kubelet 1.37+ takes v1 when both are listed; 1.34 to 1.36 know v1alpha1 only.
  EXPECT_EQ(info.supported_versions(2), "v1.DRAResourceHealth");
  EXPECT_EQ(info.supported_versions(3), "v1alpha1.DRAResourceHealth");
}

// A kubelet 1.37+ client: the v1 service on the same DRA socket, fed by the same board.
TEST_F(HealthOverSocket, V1ClientGetsTheStreamWithMessages) {
  auto stub = v1::DRAResourceHealth::NewStub(dial(server_->dra_socket()));
  grpc::ClientContext context;
  set_deadline(context);
  auto reader = stub->NodeWatchResources(&context, v1::NodeWatchResourcesRequest{});
  v1::NodeWatchResourcesResponse message;
  ASSERT_TRUE(reader->Read(&message));
  ASSERT_EQ(message.devices_size(), 2);
  EXPECT_EQ(message.devices(0).health(), v1::HEALTHY);
  EXPECT_EQ(message.devices(1).health(), v1::HEALTHY);
  EXPECT_EQ(message.devices(1).message(), "");

  board_.set(xid_report("gpu-1", 101));
  ASSERT_TRUE(reader->Read(&message));
  ASSERT_EQ(message.devices_size(), 2);
  EXPECT_EQ(message.devices(0).health(), v1::HEALTHY);
  EXPECT_EQ(message.devices(1).device().device_name(), "gpu-1");
  EXPECT_EQ(message.devices(1).health(), v1::UNHEALTHY);
  EXPECT_EQ(message.devices(1).last_updated_time(), 101);
  EXPECT_EQ(message.devices(1).message(), "XID 79: GPU has fallen off the bus");

  context.TryCancel();
  while (reader->Read(&message)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

// Two kubelet versions at once (an upgrade): each stream gets every change.
TEST_F(HealthOverSocket, V1AndV1Alpha1StreamsRunSideBySide) {
  auto stub_v1 = v1::DRAResourceHealth::NewStub(dial(server_->dra_socket()));
  grpc::ClientContext context_v1, context_alpha;
  set_deadline(context_v1);
  set_deadline(context_alpha);
  auto reader_v1 = stub_v1->NodeWatchResources(&context_v1, v1::NodeWatchResourcesRequest{});
  auto reader_alpha =
      kubelet_->health().NodeWatchResources(&context_alpha, v1alpha1::NodeWatchResourcesRequest{});
  v1::NodeWatchResourcesResponse message_v1;
  v1alpha1::NodeWatchResourcesResponse message_alpha;
  ASSERT_TRUE(reader_v1->Read(&message_v1));
  ASSERT_TRUE(reader_alpha->Read(&message_alpha));
  board_.set(xid_report("gpu-0", 102));
  ASSERT_TRUE(reader_v1->Read(&message_v1));
  ASSERT_TRUE(reader_alpha->Read(&message_alpha));
  EXPECT_EQ(message_v1.devices(0).health(), v1::UNHEALTHY);
  EXPECT_EQ(message_alpha.devices(0).health(), v1alpha1::UNHEALTHY);
  EXPECT_EQ(message_alpha.devices(0).message(), "XID 79: GPU has fallen off the bus");
  const auto begin = std::chrono::steady_clock::now();
  server_->stop();  // ends both
  EXPECT_LT(std::chrono::steady_clock::now() - begin, std::chrono::seconds(5));
  while (reader_v1->Read(&message_v1)) {
  }
  while (reader_alpha->Read(&message_alpha)) {
  }
  // Both streams ended with the server, not by a deadline or a cancel. The handlers return OK,
  // but the connection closes right behind their trailers: on a loaded machine the client can hit
  // the closed socket first and report UNAVAILABLE ("Broken pipe", seen about once in 300 runs
  // beside three busy loops). kubelet opens a new stream either way.
  for (const grpc::Status& finished : {reader_v1->Finish(), reader_alpha->Finish()})
    EXPECT_TRUE(finished.ok() || finished.error_code() == grpc::StatusCode::UNAVAILABLE)
        << finished.error_code() << " " << finished.error_message();
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

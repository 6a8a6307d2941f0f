// The kubelet plugin end to end: a simulated kubelet drives registration and both DRA versions
// over the real unix sockets against a recording ClaimPreparer.
#include <chrono>
#include <fstream>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "plugin/plugin_server.h"
#include "plugin/test_support.h"

namespace tessera::agent::testing {
namespace {

using ::testing::Test;

PreparedDevice device(const std::string& uid, const std::string& name, const std::string& share) {
  std::string cdi =
      "k8s.vgpu.tessera.dev/claim=" + uid + "-" + name + (share.empty() ? "" : "-" + share);
  return PreparedDevice{{"gpu"}, "node-a", name, {cdi}, share};
}

class PluginTest : public Test {
 protected:
  PluginServerOptions options() {
    PluginServerOptions o;
    o.registry_dir = dir_.path() / "plugins_registry";
    o.plugins_dir = dir_.path() / "plugins";
    o.log = [this](std::string_view line) {
      std::lock_guard lock(log_mutex_);
      log_.emplace_back(line);
    };
    return o;
  }

  void start(const DeviceHealthProvider* health = nullptr) {
    server_ = std::make_unique<PluginServer>(options(), preparer_, health);
    ASSERT_EQ(server_->start().message(), "");
    kubelet_ = std::make_unique<KubeletSimulator>(server_->registration_socket());
    kubelet_->connect();
  }

  std::vector<std::string> log() {
    std::lock_guard lock(log_mutex_);
    return log_;
  }

  TempDir dir_;
  RecordingPreparer preparer_;
  std::unique_ptr<PluginServer> server_;
  std::unique_ptr<KubeletSimulator> kubelet_;
  std::mutex log_mutex_;
  std::vector<std::string> log_;
};

TEST_F(PluginTest, SocketsLiveWhereKubeletLooks) {
  start();
  EXPECT_EQ(server_->registration_socket(),
            dir_.path() / "plugins_registry" / "vgpu.tessera.dev-reg.sock");
  EXPECT_EQ(server_->dra_socket(), dir_.path() / "plugins" / "vgpu.tessera.dev" / "dra.sock");
  EXPECT_TRUE(fs::is_socket(server_->registration_socket()));
  EXPECT_TRUE(fs::is_socket(server_->dra_socket()));
}

// A rolling update: the old and the new agent pod serve side by side under kubelet's per-pod
// names, each registration naming its own DRA socket; stopping the old one removes only its own.
TEST_F(PluginTest, PerPodSocketsOfTwoAgentsLiveSideBySideAndEachRemovesOnlyItsOwn) {
  const std::string old_uid = "11111111-2222-4333-8444-555555555555";
  const std::string new_uid = "66666666-7777-4888-9999-aaaaaaaaaaaa";
  PluginServerOptions old_options = options(), new_options = options();
  old_options.pod_uid = old_uid;
  new_options.pod_uid = new_uid;
  PluginServer old_server(old_options, preparer_), new_server(new_options, preparer_);
  ASSERT_EQ(old_server.start().message(), "");
  ASSERT_EQ(new_server.start().message(), "");
  EXPECT_EQ(old_server.registration_socket(),
            dir_.path() / "plugins_registry" / ("vgpu.tessera.dev-" + old_uid + "-reg.sock"));
  EXPECT_EQ(old_server.dra_socket(),
            dir_.path() / "plugins" / "vgpu.tessera.dev" / ("dra-" + old_uid + ".sock"));
  EXPECT_EQ(new_server.registration_socket(),
            dir_.path() / "plugins_registry" / ("vgpu.tessera.dev-" + new_uid + "-reg.sock"));
  EXPECT_EQ(new_server.dra_socket(),
            dir_.path() / "plugins" / "vgpu.tessera.dev" / ("dra-" + new_uid + ".sock"));
  for (PluginServer* server : {&old_server, &new_server}) {
    KubeletSimulator kubelet(server->registration_socket());
    pluginregistration::PluginInfo info;
    ASSERT_TRUE(kubelet.get_info(&info).ok());
    EXPECT_EQ(info.name(), "vgpu.tessera.dev");
    EXPECT_EQ(info.endpoint(), server->dra_socket().native());  // kubelet keeps one per endpoint
    kubelet.connect();
    dra1::NodeUnprepareResourcesResponse response;
    EXPECT_TRUE(kubelet.unprepare_v1({"uid-a"}, &response).ok());
  }
  old_server.stop();
  EXPECT_FALSE(fs::exists(old_server.registration_socket()));
  EXPECT_FALSE(fs::exists(old_server.dra_socket()));
  EXPECT_TRUE(fs::is_socket(new_server.registration_socket()));
  EXPECT_TRUE(fs::is_socket(new_server.dra_socket()));
  KubeletSimulator kubelet(new_server.registration_socket());
  kubelet.connect();
  dra1::NodeUnprepareResourcesResponse response;
  EXPECT_TRUE(kubelet.unprepare_v1({"uid-b"}, &response).ok());
}

TEST_F(PluginTest, GetInfoDescribesTheDraPlugin) {
  start();
  pluginregistration::PluginInfo info;
  ASSERT_TRUE(kubelet_->get_info(&info).ok());
  EXPECT_EQ(info.type(), "DRAPlugin");
  EXPECT_EQ(info.name(), "vgpu.tessera.dev");
  EXPECT_EQ(info.endpoint(), server_->dra_socket().native());
  EXPECT_TRUE(fs::path(info.endpoint()).is_absolute());
  EXPECT_EQ(
      std::vector<std::string>(info.supported_versions().begin(), info.supported_versions().end()),
      (std::vector<std::string>{"v1.DRAPlugin", "v1beta1.DRAPlugin"}));
}

TEST_F(PluginTest, EndpointIsAbsoluteEvenForRelativeRoots) {
  PluginServerOptions o = options();
  o.plugins_dir = fs::relative(o.plugins_dir);
  PluginServer server(o, preparer_);
  EXPECT_TRUE(server.dra_socket().is_absolute());
  EXPECT_EQ(server.dra_socket(), dir_.path() / "plugins" / "vgpu.tessera.dev" / "dra.sock");
}

TEST_F(PluginTest, RegistrationStatusIsRecordedAndAFailureLogged) {
  start();
  EXPECT_EQ(server_->registration_state().notifications, 0);
  ASSERT_TRUE(kubelet_->notify(false, "version mismatch").ok());
  RegistrationState state = server_->registration_state();
  EXPECT_EQ(state.notifications, 1);
  EXPECT_FALSE(state.registered);
  EXPECT_EQ(state.error, "version mismatch");
  std::vector<std::string> lines = log();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("failed to register"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("version mismatch"), std::string::npos) << lines[0];

  ASSERT_TRUE(kubelet_->notify(true, "").ok());
  state = server_->registration_state();
  EXPECT_EQ(state.notifications, 2);
  EXPECT_TRUE(state.registered);
  EXPECT_EQ(state.error, "");
}

TEST_F(PluginTest, V1BatchWithAFailingClaimAnswersEveryClaim) {
  preparer_.script_prepare("uid-a", {{device("uid-a", "gpu-0", "s1")}, ""});
  preparer_.script_prepare("uid-b", {{device("uid-b", "gpu-0", "s2")}, "memory exceeds the GPU"});
  preparer_.script_prepare("uid-c", {{device("uid-c", "gpu-1", "s3")}, ""});
  start();
  dra1::NodePrepareResourcesResponse response;
  ASSERT_TRUE(kubelet_->prepare_v1({"uid-a", "uid-b", "uid-c"}, &response).ok());
  ASSERT_EQ(response.claims_size(), 3);
  const auto& a = response.claims().at("uid-a");
  const auto& b = response.claims().at("uid-b");
  const auto& c = response.claims().at("uid-c");
  EXPECT_EQ(a.error(), "");
  ASSERT_EQ(a.devices_size(), 1);
  EXPECT_EQ(a.devices(0).device_name(), "gpu-0");
  EXPECT_EQ(a.devices(0).pool_name(), "node-a");
  EXPECT_EQ(a.devices(0).request_names(0), "gpu");
  EXPECT_EQ(a.devices(0).cdi_device_ids(0), "k8s.vgpu.tessera.dev/claim=uid-a-gpu-0-s1");
  EXPECT_EQ(b.error(), "memory exceeds the GPU");
  EXPECT_EQ(b.devices_size(), 0);  // a failed claim lists no devices
  EXPECT_EQ(c.error(), "");
  ASSERT_EQ(c.devices_size(), 1);
  EXPECT_EQ(c.devices(0).device_name(), "gpu-1");

  // One call per claim, in request order, with the claim's identity passed through.
  std::vector<PreparerCall> calls = preparer_.calls();
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[0].claim.uid, "uid-a");
  EXPECT_EQ(calls[1].claim.uid, "uid-b");
  EXPECT_EQ(calls[2].claim.uid, "uid-c");
  EXPECT_EQ(calls[1].claim.namespace_name, "ns-uid-b");
  EXPECT_EQ(calls[1].claim.name, "claim-uid-b");
  for (const PreparerCall& call : calls) EXPECT_TRUE(call.prepare);
}

TEST_F(PluginTest, V1beta1BatchWithAFailingClaimAnswersEveryClaim) {
  preparer_.script_prepare("uid-a", {{device("uid-a", "gpu-0", "")}, ""});
  start();
  dra1b1::NodePrepareResourcesResponse response;
  ASSERT_TRUE(kubelet_->prepare_v1beta1({"uid-a", "uid-missing"}, &response).ok());
  ASSERT_EQ(response.claims_size(), 2);
  EXPECT_EQ(response.claims().at("uid-a").error(), "");
  EXPECT_EQ(response.claims().at("uid-a").devices_size(), 1);
  EXPECT_EQ(response.claims().at("uid-missing").error(), "no such claim uid-missing");
  EXPECT_EQ(preparer_.calls().size(), 2u);
}

TEST_F(PluginTest, ShareIdIsReturnedByV1Only) {
  preparer_.script_prepare(
      "uid-a", {{device("uid-a", "gpu-0", "share-7"), device("uid-a", "gpu-1", "")}, ""});
  start();
  dra1::NodePrepareResourcesResponse v1;
  ASSERT_TRUE(kubelet_->prepare_v1({"uid-a"}, &v1).ok());
  const auto& devices = v1.claims().at("uid-a").devices();
  ASSERT_EQ(devices.size(), 2);
  ASSERT_TRUE(devices[0].has_share_id());
  EXPECT_EQ(devices[0].share_id(), "share-7");
  EXPECT_FALSE(devices[1].has_share_id());  // a whole device: the field is absent, not ""

  dra1b1::NodePrepareResourcesResponse v1beta1;
  ASSERT_TRUE(kubelet_->prepare_v1beta1({"uid-a"}, &v1beta1).ok());
  ASSERT_EQ(v1beta1.claims().at("uid-a").devices_size(), 2);
  // Read the v1beta1 bytes as v1: field 5 is not on the wire.
  dra1::NodePrepareResourcesResponse as_v1;
  ASSERT_TRUE(as_v1.ParseFromString(v1beta1.SerializeAsString()));
  EXPECT_FALSE(as_v1.claims().at("uid-a").devices(0).has_share_id());
  EXPECT_EQ(as_v1.claims().at("uid-a").devices(0).device_name(), "gpu-0");
}

TEST_F(PluginTest, TwoSharesOfOneDeviceInOneClaimStayDistinct) {
  preparer_.script_prepare(
      "uid-a", {{device("uid-a", "gpu-0", "share-1"), device("uid-a", "gpu-0", "share-2")}, ""});
  start();
  dra1::NodePrepareResourcesResponse response;
  ASSERT_TRUE(kubelet_->prepare_v1({"uid-a"}, &response).ok());
  const auto& devices = response.claims().at("uid-a").devices();
  ASSERT_EQ(devices.size(), 2);
  EXPECT_EQ(devices[0].device_name(), "gpu-0");
  EXPECT_EQ(devices[1].device_name(), "gpu-0");
  EXPECT_EQ(devices[0].share_id(), "share-1");
  EXPECT_EQ(devices[1].share_id(), "share-2");
  EXPECT_EQ(devices[0].cdi_device_ids(0), "k8s.vgpu.tessera.dev/claim=uid-a-gpu-0-share-1");
  EXPECT_EQ(devices[1].cdi_device_ids(0), "k8s.vgpu.tessera.dev/claim=uid-a-gpu-0-share-2");
}

TEST_F(PluginTest, UnprepareAnswersEveryClaimInBothVersions) {
  preparer_.script_unprepare_error("uid-b", "checkpoint unreadable");
  start();
  dra1::NodeUnprepareResourcesResponse v1;
  ASSERT_TRUE(kubelet_->unprepare_v1({"uid-a", "uid-b"}, &v1).ok());
  ASSERT_EQ(v1.claims_size(), 2);
  EXPECT_EQ(v1.claims().at("uid-a").error(), "");
  EXPECT_EQ(v1.claims().at("uid-b").error(), "checkpoint unreadable");

  dra1b1::NodeUnprepareResourcesResponse v1beta1;
  ASSERT_TRUE(kubelet_->unprepare_v1beta1({"uid-b", "uid-c"}, &v1beta1).ok());
  ASSERT_EQ(v1beta1.claims_size(), 2);
  EXPECT_EQ(v1beta1.claims().at("uid-b").error(), "checkpoint unreadable");
  EXPECT_EQ(v1beta1.claims().at("uid-c").error(), "");

  std::vector<PreparerCall> calls = preparer_.calls();
  ASSERT_EQ(calls.size(), 4u);
  for (const PreparerCall& call : calls) EXPECT_FALSE(call.prepare);
  EXPECT_EQ(calls[0].claim.uid, "uid-a");
  EXPECT_EQ(calls[3].claim.uid, "uid-c");
  EXPECT_EQ(calls[3].claim.namespace_name, "ns-uid-c");
}

// The kubelet edge: whatever the code of a claim's failure, kubelet sees the message as that
// claim's error (it retries every failed claim) and the batch itself stays OK.
TEST_F(PluginTest, EveryFailureCodeBecomesTheClaimErrorKubeletSees) {
  const std::vector<std::pair<StatusCode, std::string>> failures = {
      {StatusCode::kNotFound,
       "cannot get ResourceClaim ns/claim: GET /apis/resource.k8s.io/v1/namespaces/ns/"
       "resourceclaims/claim: HTTP 404: not found"},
      {StatusCode::kFailedPrecondition,
       "claim was replaced: metadata.uid is x, kubelet asked for y"},
      {StatusCode::kInvalidArgument,
       "compute.burst: invalid value 200 (an integer percent 0..100)"},
      {StatusCode::kAlreadyExists, "sharing.timeSlice Short conflicts with claim z"},
      {StatusCode::kUnavailable, "GET /api: HTTP 503: busy (after 5 tries)"},
      {StatusCode::kInternal, "cannot create /var/lib/tessera/shares/x: No space left on device"}};
  std::vector<std::string> uids;
  for (size_t i = 0; i < failures.size(); ++i) {
    uids.push_back("uid-" + std::to_string(i));
    preparer_.script_prepare(uids.back(), {{}, failures[i].second, failures[i].first});
  }
  preparer_.script_prepare("uid-ok", {{device("uid-ok", "gpu-0", "s1")}, ""});
  uids.push_back("uid-ok");
  start();
  dra1::NodePrepareResourcesResponse v1;
  ASSERT_TRUE(kubelet_->prepare_v1(uids, &v1).ok());
  dra1b1::NodePrepareResourcesResponse v1beta1;
  ASSERT_TRUE(kubelet_->prepare_v1beta1(uids, &v1beta1).ok());
  for (size_t i = 0; i < failures.size(); ++i) {
    const std::string code(status_code_name(failures[i].first));
    EXPECT_EQ(v1.claims().at(uids[i]).error(), failures[i].second) << code;
    EXPECT_EQ(v1.claims().at(uids[i]).devices_size(), 0) << code;
    EXPECT_EQ(v1beta1.claims().at(uids[i]).error(), failures[i].second) << code;
  }
  EXPECT_EQ(v1.claims().at("uid-ok").error(), "");
  EXPECT_EQ(v1.claims().at("uid-ok").devices_size(), 1);
}

// An empty error means success to kubelet: a failure without a message must not read as one.
TEST_F(PluginTest, AFailureWithoutAMessageStillFailsTheClaim) {
  preparer_.script_prepare_status("uid-a", Status(StatusCode::kUnavailable, ""));
  preparer_.script_unprepare_error("uid-b", "");
  start();
  dra1::NodePrepareResourcesResponse prepared;
  ASSERT_TRUE(kubelet_->prepare_v1({"uid-a"}, &prepared).ok());
  EXPECT_EQ(prepared.claims().at("uid-a").error(), "UNAVAILABLE");
  dra1::NodeUnprepareResourcesResponse unprepared;
  ASSERT_TRUE(kubelet_->unprepare_v1({"uid-b"}, &unprepared).ok());
  EXPECT_EQ(unprepared.claims().at("uid-b").error(), "INTERNAL");
}

// Unprepare is idempotent for kubelet: a claim the preparer does not know (kNotFound) has nothing
// left on the node, which is success; any other failure keeps its text.
TEST_F(PluginTest, UnprepareOfAClaimNotFoundHereSucceeds) {
  preparer_.script_unprepare_error("uid-gone", "claim uid-gone is not prepared on this node",
                                   StatusCode::kNotFound);
  preparer_.script_unprepare_error(
      "uid-busy",
      "claim uid-busy still has running processes in share s (host pids 7): kept until "
      "they exit",
      StatusCode::kFailedPrecondition);
  start();
  dra1::NodeUnprepareResourcesResponse v1;
  ASSERT_TRUE(kubelet_->unprepare_v1({"uid-gone", "uid-busy"}, &v1).ok());
  EXPECT_EQ(v1.claims().at("uid-gone").error(), "");
  EXPECT_EQ(v1.claims().at("uid-busy").error(),
            "claim uid-busy still has running processes in share s (host pids 7): kept until they "
            "exit");
  dra1b1::NodeUnprepareResourcesResponse v1beta1;
  ASSERT_TRUE(kubelet_->unprepare_v1beta1({"uid-gone"}, &v1beta1).ok());
  EXPECT_EQ(v1beta1.claims().at("uid-gone").error(), "");
}

TEST_F(PluginTest, ClaimWithoutUidOrRepeatedUidIsAnsweredOnce) {
  preparer_.script_prepare("uid-a", {{device("uid-a", "gpu-0", "s")}, ""});
  start();
  dra1::NodePrepareResourcesResponse response;
  ASSERT_TRUE(kubelet_->prepare_v1({"uid-a", "", "uid-a"}, &response).ok());
  ASSERT_EQ(response.claims_size(), 2);
  EXPECT_EQ(response.claims().at("").error(), "claim has no uid");
  EXPECT_EQ(response.claims().at("uid-a").devices_size(), 1);
  EXPECT_EQ(preparer_.calls().size(), 1u);
}

TEST_F(PluginTest, APreparerThatThrowsFailsOnlyItsClaim) {
  preparer_.script_prepare("uid-a", {{device("uid-a", "gpu-0", "s")}, ""});
  preparer_.throw_on("uid-x");
  start();
  dra1::NodePrepareResourcesResponse response;
  ASSERT_TRUE(kubelet_->prepare_v1({"uid-x", "uid-a"}, &response).ok());
  EXPECT_NE(response.claims().at("uid-x").error().find("boom"), std::string::npos);
  EXPECT_EQ(response.claims().at("uid-a").error(), "");
  EXPECT_EQ(response.claims().at("uid-a").devices_size(), 1);
}

TEST_F(PluginTest, DifferentBatchesRunConcurrently) {
  preparer_.script_prepare("slow", {{device("slow", "gpu-0", "s1")}, ""});
  preparer_.script_prepare("fast", {{device("fast", "gpu-0", "s2")}, ""});
  preparer_.hold("slow");
  start();
  auto slow = std::async(std::launch::async, [&] {
    KubeletSimulator other(server_->registration_socket());
    other.connect();
    dra1::NodePrepareResourcesResponse response;
    grpc::Status status = other.prepare_v1({"slow"}, &response);
    return status.ok() && response.claims().at("slow").error().empty();
  });
  ASSERT_TRUE(preparer_.wait_started("slow", std::chrono::seconds(10)));
  // The slow batch is still inside prepare: another batch is served meanwhile.
  dra1::NodePrepareResourcesResponse response;
  ASSERT_TRUE(kubelet_->prepare_v1({"fast"}, &response).ok());
  EXPECT_EQ(response.claims().at("fast").error(), "");
  EXPECT_EQ(slow.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  preparer_.release();
  EXPECT_TRUE(slow.get());
}

// Waits (bounded) until `n` calls wait for a claim lock.
bool wait_for_waiters(const PluginServer& server, int n) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (server.claim_locks().waiting() != n) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::yield();
  }
  return true;
}

TEST_F(PluginTest, ARetriedBatchWaitsForTheFirstAttemptOfItsClaim) {
  // Kubelet's 45 s ran out on the first attempt, which is still inside prepare; kubelet retries.
  preparer_.script_prepare("slow", {{device("slow", "gpu-0", "s1")}, ""});
  preparer_.hold("slow");
  start();
  auto attempt = [&] {
    KubeletSimulator other(server_->registration_socket());
    other.connect();
    dra1::NodePrepareResourcesResponse response;
    return other.prepare_v1({"slow"}, &response).ok() &&
           response.claims().at("slow").error().empty();
  };
  auto first = std::async(std::launch::async, attempt);
  ASSERT_TRUE(preparer_.wait_started("slow", std::chrono::seconds(10)));
  auto retry = std::async(std::launch::async, attempt);
  ASSERT_TRUE(wait_for_waiters(*server_, 1));
  EXPECT_EQ(preparer_.calls().size(), 1u);  // the retry has not reached the preparer
  // Unprepare of the same claim (through the other version) waits too.
  auto unprepare = std::async(std::launch::async, [&] {
    KubeletSimulator other(server_->registration_socket());
    other.connect();
    dra1b1::NodeUnprepareResourcesResponse response;
    return other.unprepare_v1beta1({"slow"}, &response).ok();
  });
  ASSERT_TRUE(wait_for_waiters(*server_, 2));
  EXPECT_EQ(preparer_.calls().size(), 1u);
  preparer_.release();
  EXPECT_TRUE(first.get());
  EXPECT_TRUE(retry.get());
  EXPECT_TRUE(unprepare.get());
  EXPECT_EQ(preparer_.calls().size(), 3u);
  EXPECT_EQ(server_->claim_locks().waiting(), 0);
}

TEST_F(PluginTest, StaleSocketsAreReplaced) {
  PluginServerOptions o = options();
  PluginServer probe(o, preparer_);
  make_stale_socket(probe.registration_socket());
  make_stale_socket(probe.dra_socket());
  ASSERT_TRUE(fs::is_socket(probe.registration_socket()));
  start();
  pluginregistration::PluginInfo info;
  EXPECT_TRUE(kubelet_->get_info(&info).ok());
  dra1::NodeUnprepareResourcesResponse response;
  EXPECT_TRUE(kubelet_->unprepare_v1({"uid-a"}, &response).ok());
}

TEST_F(PluginTest, AFileThatIsNotASocketIsNeverReplaced) {
  PluginServer server(options(), preparer_);
  fs::create_directories(server.registration_socket().parent_path());
  { std::ofstream(server.registration_socket()) << "precious"; }
  const Status error = server.start();
  EXPECT_EQ(error.code(), StatusCode::kAlreadyExists);
  EXPECT_NE(error.message().find("not a socket"), std::string::npos) << error.message();
  EXPECT_TRUE(fs::is_regular_file(server.registration_socket()));
  EXPECT_FALSE(fs::exists(server.dra_socket()));  // nothing left serving
}

TEST_F(PluginTest, TooLongSocketPathIsAnError) {
  PluginServerOptions o = options();
  o.plugins_dir = dir_.path() / std::string(120, 'x');
  PluginServer server(o, preparer_);
  const Status error = server.start();
  EXPECT_EQ(error.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(error.message().find("longer than"), std::string::npos) << error.message();
}

TEST_F(PluginTest, StopRemovesSocketsAndARestartServesAgain) {
  preparer_.script_prepare("uid-a", {{device("uid-a", "gpu-0", "s1")}, ""});
  start();
  const fs::path reg = server_->registration_socket();
  const fs::path dra = server_->dra_socket();
  server_->stop();
  EXPECT_FALSE(fs::exists(reg));
  EXPECT_FALSE(fs::exists(dra));
  server_->stop();  // idempotent

  // A new agent process on the same paths (the DaemonSet pod restarted).
  server_ = std::make_unique<PluginServer>(options(), preparer_);
  ASSERT_EQ(server_->start().message(), "");
  KubeletSimulator kubelet(reg);
  kubelet.connect();
  dra1::NodePrepareResourcesResponse response;
  ASSERT_TRUE(kubelet.prepare_v1({"uid-a"}, &response).ok());
  EXPECT_EQ(response.claims().at("uid-a").devices(0).share_id(), "s1");

  // And the same object can start again after stop.
  server_->stop();
  ASSERT_EQ(server_->start().message(), "");
  KubeletSimulator again(reg);
  again.connect();
  ASSERT_TRUE(again.prepare_v1({"uid-a"}, &response).ok());
}

TEST_F(PluginTest, StartTwiceIsAnError) {
  start();
  const Status again = server_->start();
  EXPECT_EQ(again.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(again.message(), "plugin server already started");
}

}  // namespace
}  // namespace tessera::agent::testing

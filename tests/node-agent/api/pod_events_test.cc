// Kills, evictions and refusals as Kubernetes Events on the share's pods (api/pod_events.h): the
// findings go through the real EnforcementHandler (its kill stubbed) and the event log, whose
// observer records them through kube::EventRecorder into kube-apiserver's stand-in, where they
// are read back as `kubectl describe pod` lists them.
#include "api/pod_events.h"

#include <gtest/gtest.h>

#include "api/event_log.h"
#include "apiserver/fake_api_server.h"
#include "enforcement/enforcement_handler.h"
#include "tessera/kube/http_kube_client.h"

namespace tessera::agent {
namespace {

namespace v1 = tessera::node::v1;
using nlohmann::json;
using std::chrono::seconds;

constexpr char kShare[] = "train-uid-gpu-0-s-a";

Checkpoint one_claim(std::vector<PodRef> pods) {
  ShareSpec spec;
  spec.claim_uid = "train-uid";
  spec.device = "gpu-0";
  spec.share_id = "s-a";
  ClaimEntry entry;
  entry.namespace_name = "tenants";
  entry.name = "train";
  entry.state = ClaimState::kPrepareCompleted;
  entry.shares = {spec};
  entry.pods = std::move(pods);
  return {{"train-uid", entry}};
}

Finding finding(FindingKind kind, int pid) {
  Finding f;
  f.kind = kind;
  f.host_pid = pid;
  f.host_pid_start_time = 1000 + static_cast<uint64_t>(pid);
  f.share = kShare;
  f.claim_namespace = "tenants";
  f.claim_name = "train";
  f.claim_uid = "train-uid";
  f.pod = "tenants/pod-train";
  f.gpu_uuid = "GPU-1";
  f.detail = "holds 9000 MiB, above its limit of 8192 MiB";
  return f;
}

class PodEventsTest : public ::testing::Test {
 protected:
  PodEventsTest() : client_(server_.connection()) {
    checkpoint_ = one_claim({{"pod-train", "pod-uid-1"}});
    kube::EventRecorderOptions options;
    options.component = kEventComponent;
    options.host = "node-a";
    options.now = [this] { return wall_; };
    recorder_ = std::make_unique<kube::EventRecorder>(client_, options);
    pod_events_ = std::make_unique<PodEvents>(*recorder_, [this](const std::string& share) {
      return share_event_objects(checkpoint_, share);
    });
    log_.set_observer([this](const v1::Event& event) { pod_events_->observe(event); });
    EnforcementHandlerOptions handling;
    handling.share_policy = [this](const std::string&) { return policy_; };
    handling.belongs = [](int, uint64_t, const std::string&) { return true; };
    handling.send_kill = [](int) { return 0; };
    handling.log = [](const std::string&) {};
    handling.then = &to_log_;
    handler_ = std::make_unique<EnforcementHandler>(handling);
  }

  // The pod's Events as `kubectl describe pod` lists them (by the pod's name, namespace, uid).
  std::vector<json> pod_events() {
    recorder_->flush();
    kube::HttpKubeClient reader(server_.connection());
    const Result<kube::ApiResponse> listed =
        reader.request("GET", "/api/v1/namespaces/tenants/events?fieldSelector=" +
                                  kube::field_selector({{"involvedObject.name", "pod-train"},
                                                        {"involvedObject.namespace", "tenants"},
                                                        {"involvedObject.uid", "pod-uid-1"}}));
    EXPECT_TRUE(listed.is_ok()) << listed.status().message();
    return listed.is_ok() ? json::parse(listed->body)["items"].get<std::vector<json>>()
                          : std::vector<json>{};
  }

  testing::FakeApiServer server_;
  kube::HttpKubeClient client_;
  kube::WallTime wall_ = kube::WallTime(seconds(1796562000));
  Checkpoint checkpoint_;
  std::unique_ptr<kube::EventRecorder> recorder_;
  std::unique_ptr<PodEvents> pod_events_;
  SimulatedClock clock_;
  EventLog log_{clock_};
  EventFindingHandler to_log_{log_};
  std::optional<vgpu_config::EnforcementPolicy> policy_ = vgpu_config::EnforcementPolicy::kKill;
  std::unique_ptr<EnforcementHandler> handler_;
};

TEST_F(PodEventsTest, AKillIsAWarningOnThePodAndRepeatsAreCounted) {
  handler_->handle(finding(FindingKind::kOverMemoryLimit, 42));
  std::vector<json> events = pod_events();
  ASSERT_EQ(events.size(), 1u);
  json event = events[0];
  EXPECT_EQ(event["reason"], "GpuQuotaKill");
  EXPECT_EQ(event["type"], "Warning");
  EXPECT_EQ(event["involvedObject"]["kind"], "Pod");
  EXPECT_EQ(event["involvedObject"]["uid"], "pod-uid-1");
  EXPECT_EQ(event["source"]["component"], "tessera-node-agent");
  EXPECT_EQ(event["reportingInstance"], "node-a");
  EXPECT_EQ(event["count"], 1);
  EXPECT_EQ(event["message"],
            "Process 42 of the share train-uid-gpu-0-s-a on GPU GPU-1 killed: over_memory_limit: "
            "holds 9000 MiB, above its limit of 8192 MiB; policy kill: killed (SIGKILL)");

  // The same process's finding again, once it was killed: not signalled again, so no Event.
  handler_->handle(finding(FindingKind::kOverMemoryLimit, 42));
  EXPECT_EQ(pod_events().at(0)["count"], 1);
  // The same words again (a pid reused after the first process died): the Event counts up.
  handler_->handle([] {
    Finding again = finding(FindingKind::kOverMemoryLimit, 42);
    again.host_pid_start_time = 5000;
    return again;
  }());
  events = pod_events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["count"], 2);
}

TEST_F(PodEventsTest, OnlyWhatWasDoneBecomesAnEvent) {
  policy_ = vgpu_config::EnforcementPolicy::kReport;  // reported, not killed
  handler_->handle(finding(FindingKind::kOverMemoryLimit, 7));
  handler_->handle(finding(FindingKind::kUsageDisagrees, 8));  // never killed
  EXPECT_TRUE(pod_events().empty());
  // A reclaim eviction is killed whatever the policy: a Warning on the borrower's pod, and a
  // Normal GpuReclaim on the pod of the share it was evicted for.
  ShareSpec asking;
  asking.claim_uid = "infer-uid";
  asking.device = "gpu-0";
  asking.share_id = "s-b";
  checkpoint_["infer-uid"] = {
      "tenants", "infer", ClaimState::kPrepareCompleted, {asking}, {{"pod-infer", "pod-uid-2"}}};
  Finding eviction = finding(FindingKind::kReclaimEviction, 9);
  eviction.reclaimed_for = asking.name();
  handler_->handle(eviction);
  const std::vector<json> events = pod_events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["reason"], "GpuEvicted");
  EXPECT_EQ(events[0]["type"], "Warning");
  EXPECT_NE(events[0]["message"].get<std::string>().find("Process 9 of the share"),
            std::string::npos);
  const std::vector<json> all = server_.stored_events("tenants");
  ASSERT_EQ(all.size(), 2u);
  const json& reclaim = all[0]["reason"] == "GpuReclaim" ? all[0] : all[1];
  EXPECT_EQ(reclaim["reason"], "GpuReclaim");
  EXPECT_EQ(reclaim["type"], "Normal");
  EXPECT_EQ(reclaim["involvedObject"]["name"], "pod-infer");
  EXPECT_EQ(reclaim["involvedObject"]["uid"], "pod-uid-2");
  EXPECT_EQ(reclaim["message"],
            "GPU memory reclaimed for the share infer-uid-gpu-0-s-b on GPU GPU-1: process 9 of the "
            "share train-uid-gpu-0-s-a, which held memory above its request, evicted");
}

TEST_F(PodEventsTest, RefusalsCountUpOneEventAndTheRateLimitHolds) {
  v1::Event denied;
  denied.set_kind(v1::Event::ALLOCATION_DENIED);
  denied.set_share(kShare);
  denied.set_namespace_("tenants");
  denied.set_claim("train");
  denied.set_gpu_uuid("GPU-1");
  (*denied.mutable_fields())["denied"] = "1";
  for (int pass = 0; pass < 3; ++pass) {
    log_.publish(denied);
    recorder_->flush();
    wall_ += seconds(1);
  }
  std::vector<json> events = pod_events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["reason"], "GpuMemoryRefused");
  EXPECT_EQ(events[0]["count"], 3);
  EXPECT_EQ(events[0]["message"],
            "GPU memory allocation refused: it would take the share train-uid-gpu-0-s-a on GPU "
            "GPU-1 past its memory limit");
  EXPECT_EQ(events[0]["firstTimestamp"], "2026-12-06T13:00:00Z");
  EXPECT_EQ(events[0]["lastTimestamp"], "2026-12-06T13:00:02Z");
  // 30 passes more at one instant: the pod's bucket (25) is spent after 22 more; the count the
  // server holds is the last one let through.
  for (int pass = 0; pass < 30; ++pass) log_.publish(denied);
  events = pod_events();
  EXPECT_EQ(events.at(0)["count"], 25);
  EXPECT_EQ(recorder_->rate_limited(), 8u);
  // Five minutes later one more goes through, and it carries every refusal seen meanwhile.
  wall_ += seconds(300);
  log_.publish(denied);
  EXPECT_EQ(pod_events().at(0)["count"], 34);
}

TEST(ShareEventObjects, ThePodsOfTheClaimElseTheClaim) {
  const std::vector<kube::ObjectReference> pods =
      share_event_objects(one_claim({{"a", "uid-a"}, {"b", "uid-b"}}), kShare);
  ASSERT_EQ(pods.size(), 2u);
  EXPECT_EQ(pods[1].to_json(), (json{{"apiVersion", "v1"},
                                     {"kind", "Pod"},
                                     {"namespace", "tenants"},
                                     {"name", "b"},
                                     {"uid", "uid-b"}}));
  const std::vector<kube::ObjectReference> claim = share_event_objects(one_claim({}), kShare);
  ASSERT_EQ(claim.size(), 1u);
  EXPECT_EQ(claim[0].to_json(), (json{{"apiVersion", "resource.k8s.io/v1"},
                                      {"kind", "ResourceClaim"},
                                      {"namespace", "tenants"},
                                      {"name", "train"},
                                      {"uid", "train-uid"}}));
  EXPECT_TRUE(share_event_objects(one_claim({}), "another-share").empty());
}

}  // namespace
}  // namespace tessera::agent

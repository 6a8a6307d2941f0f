// kube::EventRecorder against kube-apiserver's stand-in (its Event rules, apiserver/event_rules.h):
// Events as client-go's recorder writes them, counted by PATCH on repeats, aggregated past ten
// messages, rate limited per object by the token bucket, the clock injected throughout.
#include "tessera/kube/event_recorder.h"

#include <gtest/gtest.h>

#include "apiserver/fake_api_server.h"
#include "tessera/kube/http_kube_client.h"

namespace tessera::agent {
namespace {

using nlohmann::json;
using std::chrono::seconds;
using testing::FakeApiServer;

// 2026-12-06T13:00:00Z, moved only by the test.
struct TestClock {
  kube::WallTime now = kube::WallTime(seconds(1796562000));
};

kube::ObjectReference pod(const std::string& name = "train") {
  return {"v1", "Pod", "tenants", name, name + "-uid", ""};
}

class EventRecorderTest : public ::testing::Test {
 protected:
  EventRecorderTest() : client_(server_.connection(), one_try()) {}
  static kube::RetryPolicy one_try() {
    kube::RetryPolicy retry;
    retry.attempts = 1;
    return retry;
  }
  std::unique_ptr<kube::EventRecorder> recorder() {
    kube::EventRecorderOptions options;
    options.component = "tessera-node-agent";
    options.host = "node-a";
    options.now = [this] { return clock_.now; };
    options.log = [this](const std::string& line) { logged_.push_back(line); };
    return std::make_unique<kube::EventRecorder>(client_, options);
  }
  // The pod's Events as the server stores them, by reason.
  std::vector<json> events(const std::string& reason) {
    std::vector<json> out;
    for (const json& event : server_.stored_events("tenants"))
      if (event.value("reason", "") == reason) out.push_back(event);
    return out;
  }

  FakeApiServer server_;
  kube::HttpKubeClient client_;
  TestClock clock_;
  std::vector<std::string> logged_;
};

TEST_F(EventRecorderTest, AnEventIsWrittenAsClientGoWritesIt) {
  auto recording = recorder();
  ASSERT_TRUE(
      recording->record(pod(), kube::kEventTypeWarning, "GpuQuotaKill", "Process 42 killed"));
  recording->flush();
  const std::vector<json> stored = events("GpuQuotaKill");
  ASSERT_EQ(stored.size(), 1u);
  const json& event = stored[0];
  EXPECT_EQ(event["metadata"]["namespace"], "tenants");
  // "<object name>.<hex unix nanoseconds>"
  EXPECT_EQ(event["metadata"]["name"], "train.18eeab9ed2f72000");
  EXPECT_EQ(event["involvedObject"], (json{{"apiVersion", "v1"},
                                           {"kind", "Pod"},
                                           {"namespace", "tenants"},
                                           {"name", "train"},
                                           {"uid", "train-uid"}}));
  EXPECT_EQ(event["type"], "Warning");
  EXPECT_EQ(event["message"], "Process 42 killed");
  EXPECT_EQ(event["count"], 1);
  EXPECT_EQ(event["firstTimestamp"], "2026-12-06T13:00:00Z");
  EXPECT_EQ(event["lastTimestamp"], "2026-12-06T13:00:00Z");
  EXPECT_EQ(event["source"], (json{{"component", "tessera-node-agent"}, {"host", "node-a"}}));
  EXPECT_EQ(event["reportingComponent"], "tessera-node-agent");
  EXPECT_EQ(event["reportingInstance"], "node-a");
  EXPECT_EQ(recording->written(), 1u);
  EXPECT_EQ(recording->failed(), 0u);
}

TEST_F(EventRecorderTest, RepeatsCountUpOneEventByPatch) {
  auto recording = recorder();
  for (int i = 0; i < 3; ++i) {
    recording->record(pod(), kube::kEventTypeWarning, "GpuMemoryRefused", "refused");
    recording->flush();
    clock_.now += seconds(30);
  }
  const std::vector<json> stored = events("GpuMemoryRefused");
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0]["count"], 3);
  EXPECT_EQ(stored[0]["firstTimestamp"], "2026-12-06T13:00:00Z");
  EXPECT_EQ(stored[0]["lastTimestamp"], "2026-12-06T13:01:00Z");
  std::vector<std::string> methods;
  for (const testing::RecordedWrite& write : server_.take_writes()) methods.push_back(write.method);
  EXPECT_EQ(methods, (std::vector<std::string>{"POST", "PATCH", "PATCH"}));
  // Another object, or another message, is another Event.
  recording->record(pod("other"), kube::kEventTypeWarning, "GpuMemoryRefused", "refused");
  recording->record(pod(), kube::kEventTypeWarning, "GpuMemoryRefused", "refused again");
  recording->flush();
  EXPECT_EQ(events("GpuMemoryRefused").size(), 3u);
}

TEST_F(EventRecorderTest, AnEventGoneFromTheServerIsCreatedAgain) {
  auto recording = recorder();
  recording->record(pod(), kube::kEventTypeWarning, "GpuEvicted", "evicted");
  recording->flush();
  const std::string name = events("GpuEvicted").at(0)["metadata"]["name"];
  server_.delete_event("tenants", name);  // the Event's TTL ran out
  clock_.now += seconds(5);
  recording->record(pod(), kube::kEventTypeWarning, "GpuEvicted", "evicted");
  recording->flush();
  const std::vector<json> stored = events("GpuEvicted");
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0]["metadata"]["name"], name);  // client-go keeps the name it had
  EXPECT_EQ(stored[0]["count"], 2);
  EXPECT_EQ(recording->failed(), 0u);
}

TEST_F(EventRecorderTest, TheSpamFilterAllowsABurstOf25ThenOneEveryFiveMinutes) {
  auto recording = recorder();
  // 30 distinct kills of one pod at one instant: 25 pass the bucket.
  for (int i = 0; i < 30; ++i)
    recording->record(pod(), kube::kEventTypeWarning, "GpuQuotaKill",
                      "Process " + std::to_string(i) + " killed");
  recording->flush();
  EXPECT_EQ(recording->rate_limited(), 5u);
  EXPECT_EQ(recording->written(), 25u);
  // Another pod has a bucket of its own.
  recording->record(pod("other"), kube::kEventTypeWarning, "GpuQuotaKill", "Process 1 killed");
  recording->flush();
  EXPECT_EQ(recording->written(), 26u);
  // 4 minutes later the bucket has no whole token yet; at 5 minutes it has one.
  clock_.now += seconds(240);
  recording->record(pod(), kube::kEventTypeWarning, "GpuQuotaKill", "Process 99 killed");
  recording->flush();
  EXPECT_EQ(recording->rate_limited(), 6u);
  clock_.now += seconds(61);
  recording->record(pod(), kube::kEventTypeWarning, "GpuQuotaKill", "Process 100 killed");
  recording->record(pod(), kube::kEventTypeWarning, "GpuQuotaKill", "Process 101 killed");
  recording->flush();
  EXPECT_EQ(recording->written(), 27u);
  EXPECT_EQ(recording->rate_limited(), 7u);
}

TEST_F(EventRecorderTest, TenMessagesOfOneReasonAreCombined) {
  auto recording = recorder();
  for (int i = 0; i < 12; ++i)
    recording->record(pod(), kube::kEventTypeWarning, "GpuQuotaKill",
                      "Process " + std::to_string(i) + " killed");
  recording->flush();
  // Nine Events of their own; from the tenth on, one combined Event counted up.
  const std::vector<json> stored = events("GpuQuotaKill");
  ASSERT_EQ(stored.size(), 10u);
  int combined = 0;
  for (const json& event : stored) {
    const std::string message = event["message"];
    if (message.starts_with("(combined from similar events): ")) {
      ++combined;
      EXPECT_EQ(message, "(combined from similar events): Process 11 killed");
      EXPECT_EQ(event["count"], 3);
    } else {
      EXPECT_EQ(event["count"], 1);
    }
  }
  EXPECT_EQ(combined, 1);
  // Ten minutes without one: the aggregation starts afresh.
  clock_.now += seconds(601);
  recording->record(pod(), kube::kEventTypeWarning, "GpuQuotaKill", "Process 12 killed");
  recording->flush();
  EXPECT_EQ(events("GpuQuotaKill").size(), 11u);
}

TEST_F(EventRecorderTest, AFullQueueDropsAndAFailedWriteIsLoggedNeverWaitedOn) {
  kube::EventRecorderOptions options;
  options.component = "tessera-node-agent";
  options.host = "node-a";
  options.now = [this] { return clock_.now; };
  options.queue_capacity = 0;  // nothing fits
  kube::EventRecorder full(client_, options);
  EXPECT_FALSE(full.record(pod(), kube::kEventTypeWarning, "GpuQuotaKill", "x"));
  EXPECT_EQ(full.dropped(), 1u);

  auto recording = recorder();
  server_.fail_next(1);  // 503, and the client tries once
  recording->record(pod(), kube::kEventTypeWarning, "GpuQuotaKill", "Process 1 killed");
  recording->flush();
  EXPECT_EQ(recording->failed(), 1u);
  ASSERT_EQ(logged_.size(), 1u);
  EXPECT_NE(logged_[0].find("cannot record event GpuQuotaKill about Pod tenants/train"),
            std::string::npos)
      << logged_[0];
  // A namespace kube-apiserver refuses (not a DNS subdomain): its 422, counted as failed.
  recording->record({"v1", "Pod", "Bad_NS", "train", "u", ""}, "Warning", "GpuQuotaKill", "y");
  recording->flush();
  EXPECT_EQ(recording->failed(), 2u);
  ASSERT_EQ(logged_.size(), 2u);
  EXPECT_NE(logged_[1].find("namespace: Invalid value: \"Bad_NS\""), std::string::npos)
      << logged_[1];
  // A cluster-scoped object's Event goes to "default".
  recording->record({"v1", "Node", "", "node-a", "node-uid", ""}, "Warning", "GpuUnhealthy", "z");
  recording->flush();
  EXPECT_EQ(recording->written(), 1u);
  EXPECT_EQ(server_.stored_events("default").size(), 1u);
}

}  // namespace
}  // namespace tessera::agent

// The HTTPS server end to end on loopback: routes, TLS floor, templates created (and not on
// dryRun), certificate rotation under load with no failed request, graceful shutdown with a
// request in flight, and SIGTERM on the real binary.
#include "server/webhook_server.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "fake_kube.h"
#include "review_fixture.h"
#include "test_certificates.h"

extern char** environ;

namespace tessera::webhook {
namespace {

using nlohmann::json;
using testing::FakeKube;
using testing::golden;
using testing::patch_of;
using testing::TestPki;

constexpr char kTemplates[] = "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaimtemplates";

std::string temp_dir() {
  std::string pattern = std::filesystem::temp_directory_path() / "webhook-test-XXXXXX";
  return mkdtemp(pattern.data());
}

// A port nothing listens on: bound here to port 0, read, closed, then given to the binary.
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
}

class WebhookServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = temp_dir();
    cert_file_ = dir_ + "/tls.crt";
    key_file_ = dir_ + "/tls.key";
    ca_file_ = dir_ + "/ca.crt";
    const TestPki::Leaf leaf = pki_.leaf(100);
    testing::write_file(cert_file_, leaf.cert_pem);
    testing::write_file(key_file_, leaf.key_pem);
    testing::write_file(ca_file_, pki_.ca_pem());
    options_.listen = "127.0.0.1:0";
    options_.tls_cert_file = cert_file_;
    options_.tls_private_key_file = key_file_;
    options_.certificate_check_interval = std::chrono::milliseconds(0);
    options_.shutdown_delay = std::chrono::milliseconds(0);
  }
  void TearDown() override {
    stop();
    std::filesystem::remove_all(dir_);
  }

  void start() {
    server_ = std::make_unique<WebhookServer>(options_, api_, clock());
    ASSERT_TRUE(server_->start().is_ok());
    serving_ = std::thread([this] { server_->serve(); });
  }
  void stop() {
    if (server_) server_->stop();
    if (serving_.joinable()) serving_.join();
  }

  // The steady clock, moved on by `clock_ahead_` (a cache's TTL passes without waiting).
  SteadyClock clock() {
    return [this] { return std::chrono::steady_clock::now() + clock_ahead_.load(); };
  }

  std::unique_ptr<httplib::SSLClient> client(int port = 0) const {
    auto client = std::make_unique<httplib::SSLClient>("127.0.0.1", port ? port : server_->port());
    client->set_ca_cert_path(ca_file_.c_str());
    client->enable_server_certificate_verification(true);
    client->set_read_timeout(std::chrono::seconds(10));
    return client;
  }

  json post(const std::string& path, const json& review, int port = 0) const {
    auto answer = client(port)->Post(path.c_str(), review.dump(), "application/json");
    EXPECT_TRUE(answer) << httplib::to_string(answer.error());
    if (!answer) return {};
    EXPECT_EQ(answer->status, 200) << answer->body;
    EXPECT_EQ(answer->get_header_value("Content-Type"), "application/json");
    return json::parse(answer->body);
  }

  std::string dir_, cert_file_, key_file_, ca_file_;
  TestPki pki_;
  WebhookOptions options_;
  FakeKube api_;
  std::atomic<std::chrono::seconds> clock_ahead_{std::chrono::seconds(0)};
  std::unique_ptr<WebhookServer> server_;
  std::thread serving_;
};

TEST_F(WebhookServerTest, MutateCreatesTheTemplateAndAnswersWithThePatch) {
  start();
  const json request = golden("pod_shorthand.json");
  const json answer = post("/mutate", request);
  EXPECT_EQ(answer["response"]["uid"], request["request"]["uid"]);
  EXPECT_EQ(answer["response"]["allowed"], true);
  const json pod = request["request"]["object"].patch(patch_of(answer));
  EXPECT_EQ(pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"],
            "tessera-vgpu-1-m8gi-c30");
  EXPECT_TRUE(api_.has(std::string(kTemplates) + "/tessera-vgpu-1-m8gi-c30"));
  EXPECT_EQ(server_->metrics().requests(Endpoint::kMutate, Outcome::kPatched), 1u);
}

TEST_F(WebhookServerTest, DryRunCreatesNothing) {
  start();
  const json request = golden("pod_dry_run.json");
  const json answer = post("/mutate", request);
  EXPECT_EQ(answer["response"]["allowed"], true);
  EXPECT_FALSE(patch_of(answer).empty());
  EXPECT_TRUE(api_.requests().empty());
}

TEST_F(WebhookServerTest, ATemplateThatCannotBeCreatedRefusesThePodSayingWhy) {
  start();
  api_.unreachable = true;
  const json answer = post("/mutate", golden("pod_shorthand.json"));
  EXPECT_EQ(answer["response"]["allowed"], false);
  EXPECT_FALSE(answer["response"].contains("patch"));
  EXPECT_EQ(answer["response"]["status"]["code"], 500);
  EXPECT_NE(answer["response"]["status"]["message"].get<std::string>().find(
                "could not create the ResourceClaimTemplate"),
            std::string::npos);
  EXPECT_EQ(server_->metrics().requests(Endpoint::kMutate, Outcome::kFailed), 1u);
}

// kube-apiserver returns a template as it stores it, not as it was sent (server metadata,
// spec.metadata {}, canonical quantities): a pod whose template exists is admitted after a
// restart, by a second replica and once the cache's TTL has passed.
TEST_F(WebhookServerTest, AfterARestartPodsWhoseTemplatesExistAreAdmitted) {
  api_.writes_back = true;
  start();
  const json request = golden("pod_shorthand.json");
  ASSERT_EQ(post("/mutate", request)["response"]["allowed"], true);
  stop();
  start();  // an empty cache
  const json answer = post("/mutate", request);
  EXPECT_EQ(answer["response"]["allowed"], true) << answer.dump();
  EXPECT_FALSE(patch_of(answer).empty());
  EXPECT_EQ(server_->metrics().requests(Endpoint::kMutate, Outcome::kPatched), 1u);
}

TEST_F(WebhookServerTest, ASecondReplicaAdmitsPodsWhoseTemplatesExist) {
  api_.writes_back = true;
  start();
  WebhookServer second(options_, api_, clock());
  ASSERT_TRUE(second.start().is_ok());
  std::thread serving_second([&] { second.serve(); });
  const json request = golden("pod_shorthand.json");
  const json first_answer = post("/mutate", request);
  const json second_answer = post("/mutate", request, second.port());
  second.stop();
  serving_second.join();
  EXPECT_EQ(first_answer["response"]["allowed"], true) << first_answer.dump();
  EXPECT_EQ(second_answer["response"]["allowed"], true) << second_answer.dump();
  EXPECT_EQ(patch_of(second_answer), patch_of(first_answer));
}

TEST_F(WebhookServerTest, OnceTheCacheExpiresPodsWhoseTemplatesExistAreAdmitted) {
  api_.writes_back = true;
  start();
  const json request = golden("pod_shorthand.json");
  ASSERT_EQ(post("/mutate", request)["response"]["allowed"], true);
  clock_ahead_ = options_.cache_ttl + std::chrono::seconds(1);
  const size_t before = api_.request_count();
  const json answer = post("/mutate", request);
  EXPECT_EQ(answer["response"]["allowed"], true) << answer.dump();
  EXPECT_GT(api_.request_count(), before);  // asked the API again: the 409 and the GET
}

TEST_F(WebhookServerTest, HamiNamesAreServedOnTheirOwnPath) {
  start();
  const json request = golden("pod_hami.json");
  EXPECT_TRUE(patch_of(post("/mutate", request)).empty());
  EXPECT_FALSE(patch_of(post("/mutate/hami", request)).empty());
}

TEST_F(WebhookServerTest, ValidateRefusesABadVgpuConfig) {
  start();
  json request = golden("claim_vgpu_config.json");
  EXPECT_EQ(post("/validate", request)["response"]["allowed"], true);
  request["request"]["object"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]["compute"]
         ["burst"] = 101;
  const json answer = post("/validate", request);
  EXPECT_EQ(answer["response"]["allowed"], false);
  EXPECT_EQ(answer["response"]["status"]["message"],
            "spec.devices.config[0].opaque.parameters.compute.burst: invalid value 101 (an "
            "integer percent 0..100; compute.limit is its new name)");
}

// The class's bounds are read from the API server: a claim that weakens the class's kill is
// refused, naming the bound.
TEST_F(WebhookServerTest, ValidateRefusesAClaimPastItsDeviceClassesBounds) {
  api_.put("/apis/resource.k8s.io/v1/deviceclasses/vgpu.tessera.dev",
           {{"apiVersion", "resource.k8s.io/v1"},
            {"kind", "DeviceClass"},
            {"metadata", {{"name", "vgpu.tessera.dev"}}},
            {"spec",
             {{"config", json::array({{{"opaque",
                                        {{"driver", "vgpu.tessera.dev"},
                                         {"parameters",
                                          {{"apiVersion", "vgpu.tessera.dev/v1alpha1"},
                                           {"kind", "VgpuConfig"},
                                           {"enforcement", "kill"}}}}}}})}}}});
  start();
  json request = golden("claim_vgpu_config.json");
  EXPECT_EQ(post("/validate", request)["response"]["allowed"], true);
  request["request"]["object"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]
         ["enforcement"] = "report";
  const json answer = post("/validate", request);
  EXPECT_EQ(answer["response"]["allowed"], false);
  EXPECT_EQ(answer["response"]["status"]["message"],
            "spec.devices.requests[0] (gpu): enforcement report is weaker than enforcement kill, "
            "the floor of DeviceClass vgpu.tessera.dev (a claim may not weaken it)");
}

TEST_F(WebhookServerTest, WhatIsNotAReviewIsHttp400AndTooLargeIs413) {
  start();
  auto bad = client()->Post("/mutate", "{\"not\": \"a review\"}", "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(bad->body, "apiVersion \"\" is not admission.k8s.io/v1\n");
  auto huge = client()->Post("/mutate", std::string(5 * 1024 * 1024, ' '), "application/json");
  ASSERT_TRUE(huge);
  EXPECT_EQ(huge->status, 413);
  EXPECT_EQ(server_->metrics().requests(Endpoint::kMutate, Outcome::kInvalid), 1u);
}

TEST_F(WebhookServerTest, HealthReadinessAndMetrics) {
  start();
  auto c = client();
  EXPECT_EQ(c->Get("/healthz")->status, 200);
  EXPECT_EQ(c->Get("/readyz")->status, 200);
  post("/mutate", golden("pod_no_gpu.json"));
  auto metrics = c->Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->get_header_value("Content-Type"), "text/plain; version=0.0.4");
  EXPECT_NE(metrics->body.find(
                "tessera_webhook_requests_total{endpoint=\"mutate\",result=\"allowed\"} 1\n"),
            std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("tessera_webhook_ready 1\n"), std::string::npos);
  EXPECT_EQ(c->Post("/healthz", "", "text/plain")->status, 404);
}

TEST_F(WebhookServerTest, OnlyTls12AndUpIsSpoken) {
  start();
  EXPECT_EQ(testing::handshake_serial(server_->port(), pki_.ca_pem()), "64");  // serial 100
  EXPECT_EQ(testing::handshake_serial(server_->port(), pki_.ca_pem(), TLS1_1_VERSION),
            std::nullopt);
  EXPECT_EQ(testing::handshake_serial(server_->port(), pki_.ca_pem(), TLS1_2_VERSION), "64");
  httplib::Client plain("127.0.0.1", server_->port());
  plain.set_read_timeout(std::chrono::seconds(2));
  auto answer = plain.Get("/healthz");
  EXPECT_FALSE(answer && answer->status == 200);
}

// A fixed amount of work, not a count in a fixed time: 4 clients post 11 steps of 6 requests each
// (a new client every 3, as kube-apiserver's connection pool makes new connections). Rotation k
// comes once a client has posted the first half of step k, and no client posts the second half of
// step k before the server presents certificate k: every rotation falls among the requests, on
// connections opened before it and after it, whatever the machine's speed.
TEST_F(WebhookServerTest, CertificateRotationUnderLoadFailsNoRequest) {
  start();
  const json request = golden("pod_shorthand.json");
  const std::string body = request.dump();
  constexpr int kClients = 4, kRotations = 10, kRequestsPerConnection = 3;
  constexpr int kRequests = kClients * (kRotations + 1) * 2 * kRequestsPerConnection;
  std::atomic<int> ok{0}, failed{0};
  std::atomic<int> half_posted{0};  // the highest step whose first half a client has posted
  std::atomic<int> rotated{0};      // the rotations the server has been seen to present
  std::mutex errors_mutex;
  std::vector<std::string> errors;
  auto post_some = [&] {
    auto c = client();
    for (int i = 0; i < kRequestsPerConnection; ++i) {
      auto answer = c->Post("/mutate", body, "application/json");
      const bool good = answer && answer->status == 200 &&
                        json::parse(answer->body)["response"]["allowed"] == true;
      (good ? ok : failed)++;
      if (!good) {
        std::lock_guard lock(errors_mutex);
        errors.push_back(answer ? std::to_string(answer->status) + " " + answer->body
                                : httplib::to_string(answer.error()));
      }
    }
  };
  std::vector<std::thread> clients;
  for (int t = 0; t < kClients; ++t) {
    clients.emplace_back([&] {
      for (int step = 0; step <= kRotations; ++step) {
        post_some();
        int seen = half_posted.load();
        while (seen < step && !half_posted.compare_exchange_weak(seen, step)) {
        }
        half_posted.notify_all();
        for (int done = rotated.load(); done < step; done = rotated.load()) rotated.wait(done);
        post_some();
      }
    });
  }
  std::vector<int> answered_at_rotation;  // requests answered when each rotation was served
  std::vector<std::string> unserved;
  for (int k = 1; k <= kRotations; ++k) {
    for (int seen = half_posted.load(); seen < k; seen = half_posted.load()) half_posted.wait(seen);
    const long serial = 100 + k;
    pki_.rotate(cert_file_, key_file_, serial);
    // The server takes the new pair at its next handshake; a handshake racing the two renames may
    // take a half-written pair and refuse it, so a later one is looked at (liveness: 30 s).
    char hex[16];
    std::snprintf(hex, sizeof hex, "%lX", serial);
    bool served = false;
    for (const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
         !served && std::chrono::steady_clock::now() < deadline;) {
      served = testing::handshake_serial(server_->port(), pki_.ca_pem()) == hex;
      if (!served) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!served) unserved.push_back(hex);
    answered_at_rotation.push_back(ok + failed);
    rotated = k;
    rotated.notify_all();
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(failed, 0);
  for (const auto& error : errors) ADD_FAILURE() << error;
  EXPECT_EQ(ok, kRequests);
  EXPECT_TRUE(unserved.empty()) << "certificates never presented: "
                                << ::testing::PrintToString(unserved);
  // Each rotation came after some requests were answered and before all of them were.
  for (int k = 0; k < kRotations; ++k) {
    EXPECT_GT(answered_at_rotation[k], 0) << "rotation " << k + 1;
    EXPECT_LT(answered_at_rotation[k], kRequests) << "rotation " << k + 1;
  }
  EXPECT_EQ(testing::handshake_serial(server_->port(), pki_.ca_pem()), "6E");  // serial 110
  // Each presented pair was loaded once at least.
  EXPECT_GE(server_->certificates().reloads(), static_cast<size_t>(kRotations));
}

TEST_F(WebhookServerTest, AHalfWrittenRotationKeepsTheOldPairUntilTheKeyFollows) {
  start();
  const TestPki::Leaf next = pki_.leaf(200);
  testing::write_file(cert_file_, next.cert_pem);  // the new certificate, the old key
  EXPECT_EQ(testing::handshake_serial(server_->port(), pki_.ca_pem()), "64");
  EXPECT_GE(server_->certificates().reload_failures(), 1u);
  testing::write_file(key_file_, next.key_pem);
  EXPECT_EQ(testing::handshake_serial(server_->port(), pki_.ca_pem()), "C8");
}

TEST_F(WebhookServerTest, StopFinishesTheRequestInFlight) {
  start();
  api_.delay = std::chrono::milliseconds(500);  // template creation is slow
  json answer;
  std::thread in_flight([&] { answer = post("/mutate", golden("pod_shorthand.json")); });
  while (api_.request_count() == 0 && api_.delay.count() > 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  stop();  // returns when serve() has returned: the request finished first
  in_flight.join();
  EXPECT_EQ(answer["response"]["allowed"], true);
  EXPECT_FALSE(patch_of(answer).empty());
}

TEST(WebhookBinary, SigtermTurnsNotReadyThenExitsZero) {
  const std::string dir = temp_dir();
  TestPki pki;
  const TestPki::Leaf leaf = pki.leaf(7);
  testing::write_file(dir + "/tls.crt", leaf.cert_pem);
  testing::write_file(dir + "/tls.key", leaf.key_pem);
  testing::write_file(dir + "/kubeconfig", R"(apiVersion: v1
kind: Config
current-context: test
clusters:
- name: test
  cluster:
    server: https://127.0.0.1:1
    certificate-authority: ca.crt
contexts:
- name: test
  context: {cluster: test, user: test}
users:
- name: test
  user: {token: t}
)");
  testing::write_file(dir + "/ca.crt", pki.ca_pem());
  const int port = free_port();
  const std::string listen = "127.0.0.1:" + std::to_string(port);
  const std::string cert = dir + "/tls.crt", key = dir + "/tls.key", kube = dir + "/kubeconfig";
  std::vector<const char*> argv = {TESSERA_WEBHOOK_BIN,   "--listen",     listen.c_str(),
                                   "--tls-cert-file",     cert.c_str(),   "--tls-private-key-file",
                                   key.c_str(),           "--kubeconfig", kube.c_str(),
                                   "--shutdown-delay-ms", "1500",         nullptr};
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, argv[0], nullptr, nullptr, const_cast<char**>(argv.data()), environ),
            0);
  httplib::SSLClient c("127.0.0.1", port);
  c.set_ca_cert_path((dir + "/ca.crt").c_str());
  c.enable_server_certificate_verification(true);
  bool up = false;
  for (int i = 0; i < 200 && !up; ++i) {
    auto answer = c.Get("/readyz");
    up = answer && answer->status == 200;
    if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  ASSERT_TRUE(up);
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  bool not_ready = false;
  for (int i = 0; i < 40 && !not_ready; ++i) {
    auto answer = c.Get("/readyz");
    not_ready = answer && answer->status == 503;
    if (!not_ready) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  EXPECT_TRUE(not_ready);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera::webhook

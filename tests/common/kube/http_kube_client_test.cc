#include "tessera/kube/http_kube_client.h"

#include <openssl/evp.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "apiserver/claim_fixture.h"
#include "apiserver/fake_api_server.h"

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;
using testing::FakeApiServer;

kube::RetryPolicy fast_retries(int attempts = 4) {
  kube::RetryPolicy retry;
  retry.attempts = attempts;
  retry.initial_backoff = std::chrono::milliseconds(1);
  retry.max_backoff = std::chrono::milliseconds(4);
  retry.timeout = std::chrono::seconds(10);
  return retry;
}

std::string base64(const std::string& text) {
  std::string out(4 * ((text.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(text.data()),
                                static_cast<int>(text.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

TEST(HttpKubeClient, GetsAResourceClaimOverVerifiedTls) {
  FakeApiServer server;
  const auto claim =
      testing::written_claim("train", "uid-1", {{"gpu", "gpu-0", "s1", "8Gi", "30"}});
  server.add_claim("tenants", "train", claim.dump());
  kube::HttpKubeClient client(server.connection(), fast_retries());
  const Result<kube::ApiResponse> r =
      client.request("GET", kube::resource_claim_path("tenants", "train"));
  ASSERT_EQ(r.status().message(), "");
  EXPECT_EQ(r->status, 200);
  // The object as the API server stores it: the claim's uid, spec and status, the server's
  // resourceVersion and managedFields.
  const nlohmann::json answered = nlohmann::json::parse(r->body);
  EXPECT_EQ(answered["metadata"]["uid"], claim["metadata"]["uid"]);
  EXPECT_EQ(answered["spec"], claim["spec"]);
  EXPECT_EQ(answered["status"], claim["status"]);
}

// kube-apiserver takes a PATCH only in a patch media type (415 for application/json): a JSON array
// goes as a JSON Patch, an object as a merge patch.
TEST(HttpKubeClient, APatchIsSentInThePatchMediaTypeItsBodyIs) {
  FakeApiServer server;
  server.add_webhook_configuration(
      "mutatingwebhookconfigurations",
      {{"apiVersion", "admissionregistration.k8s.io/v1"},
       {"kind", "MutatingWebhookConfiguration"},
       {"metadata", {{"name", "hooks"}}},
       {"webhooks", {{{"name", "a.example.com"}, {"clientConfig", {{"url", "https://a"}}}}}}});
  kube::HttpKubeClient client(server.connection(), fast_retries(1));
  const std::string path =
      "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/hooks";
  const Result<kube::ApiResponse> json_patch = client.request(
      "PATCH", path, R"([{"op":"add","path":"/webhooks/0/clientConfig/caBundle","value":"Y2E="}])");
  ASSERT_EQ(json_patch.status().message(), "");
  const Result<kube::ApiResponse> merge_patch =
      client.request("PATCH", path, R"({"metadata":{"labels":{"team":"gpu"}}})");
  ASSERT_EQ(merge_patch.status().message(), "");
  const nlohmann::json stored =
      server.webhook_configuration("mutatingwebhookconfigurations", "hooks");
  EXPECT_EQ(stored["webhooks"][0]["clientConfig"]["caBundle"], "Y2E=");
  EXPECT_EQ(stored["metadata"]["labels"]["team"], "gpu");
}

// Every value in a path or query is escaped (libcurl), so a name cannot add a segment, a query or
// another selector term.
TEST(KubePaths, ValuesInPathsAndQueriesAreEscaped) {
  EXPECT_EQ(kube::url_escape("gpu-node.zone_a~1"), "gpu-node.zone_a~1");
  EXPECT_EQ(kube::url_escape("a b/c?d=e&f#g%"), "a%20b%2Fc%3Fd%3De%26f%23g%25");
  EXPECT_EQ(kube::resource_claim_path("tenants", "train"),
            "/apis/resource.k8s.io/v1/namespaces/tenants/resourceclaims/train");
  EXPECT_EQ(kube::resource_claim_path("ns/../x", "c?watch=1"),
            "/apis/resource.k8s.io/v1/namespaces/ns%2F..%2Fx/resourceclaims/c%3Fwatch%3D1");
  EXPECT_EQ(kube::node_path("node a"), "/api/v1/nodes/node%20a");
  EXPECT_EQ(kube::resource_slice_path("s/1"), "/apis/resource.k8s.io/v1/resourceslices/s%2F1");
  EXPECT_EQ(
      kube::field_selector({{"spec.nodeName", "node-a"}, {"spec.driver", "vgpu.tessera.dev"}}),
      "spec.nodeName%3Dnode-a%2Cspec.driver%3Dvgpu.tessera.dev");
  // fields.EscapeValue first (a backslash before each backslash, comma and equals sign), then
  // percent-encoding: the value stays one value of one term.
  EXPECT_EQ(kube::field_selector({{"spec.nodeName", "a,spec.driver=x\\"}}),
            "spec.nodeName%3Da%5C%2Cspec.driver%5C%3Dx%5C%5C");
}

TEST(HttpKubeClient, AnEscapedNameReachesTheServerAsItIs) {
  FakeApiServer server;
  const auto claim =
      testing::written_claim("my claim", "uid-1", {{"gpu", "gpu-0", "s1", "8Gi", "30"}});
  server.add_claim("tenants", "my claim", claim.dump());
  kube::HttpKubeClient client(server.connection(), fast_retries());
  const Result<kube::ApiResponse> r =
      client.request("GET", kube::resource_claim_path("tenants", "my claim"));
  ASSERT_EQ(r.status().message(), "");
  // The object as the API server stores it: the claim's uid, spec and status, the server's
  // resourceVersion and managedFields.
  const nlohmann::json answered = nlohmann::json::parse(r->body);
  EXPECT_EQ(answered["metadata"]["uid"], claim["metadata"]["uid"]);
  EXPECT_EQ(answered["spec"], claim["spec"]);
  EXPECT_EQ(answered["status"], claim["status"]);
  const Result<kube::ApiResponse> other =
      client.request("GET", kube::resource_claim_path("tenants/x", "my claim"));
  EXPECT_EQ(other.status().code(), StatusCode::kNotFound) << other.status().message();  // 404
}

TEST(HttpKubeClient, ErrorsCarryTheStatusAndTheApiMessage) {
  FakeApiServer server;
  kube::HttpKubeClient client(server.connection(), fast_retries());
  const Result<kube::ApiResponse> r =
      client.request("GET", kube::resource_claim_path("tenants", "gone"));
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);  // HTTP 404
  EXPECT_EQ(r.status().message(),
            "GET /apis/resource.k8s.io/v1/namespaces/tenants/resourceclaims/gone: HTTP 404: "
            "resourceclaims.resource.k8s.io \"gone\" not found");
  EXPECT_EQ(client.tries(), 1);  // 404 is not retried

  kube::KubeConnection wrong_token = server.connection();
  wrong_token.token = "nope";
  kube::HttpKubeClient unauthorised(wrong_token, fast_retries());
  const Status refused = unauthorised.request("GET", "/api/v1/nodes/node-a").status();
  EXPECT_EQ(refused.message(), "GET /api/v1/nodes/node-a: HTTP 401: Unauthorized");
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);  // fix the credentials
}

TEST(HttpKubeClient, RetriesOn503WithBackoff) {
  FakeApiServer server;
  server.add_claim("tenants", "train", "{}");
  server.fail_next(2);
  kube::HttpKubeClient client(server.connection(), fast_retries(4));
  const Result<kube::ApiResponse> r =
      client.request("GET", kube::resource_claim_path("tenants", "train"));
  EXPECT_EQ(r.status().message(), "");
  EXPECT_EQ(client.tries(), 3);

  server.fail_next(10);
  kube::HttpKubeClient giving_up(server.connection(), fast_retries(3));
  const Result<kube::ApiResponse> failed =
      giving_up.request("GET", kube::resource_claim_path("tenants", "train"));
  EXPECT_EQ(failed.status().code(), StatusCode::kUnavailable);  // HTTP 503
  EXPECT_EQ(failed.status().message(),
            "GET /apis/resource.k8s.io/v1/namespaces/tenants/resourceclaims/train: HTTP 503: the "
            "server is currently unable to handle the request (after 3 tries)");
  EXPECT_EQ(giving_up.tries(), 3);
}

TEST(HttpKubeClient, RetriesConnectionErrors) {
  int port = 0;
  {
    FakeApiServer gone;  // a port nothing listens on any more
    port = std::stoi(gone.url().substr(gone.url().rfind(':') + 1));
  }
  kube::KubeConnection c;
  c.server = "https://127.0.0.1:" + std::to_string(port);
  c.ca_pem = "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n";
  kube::HttpKubeClient client(c, fast_retries(3));
  const Result<kube::ApiResponse> r = client.request("GET", "/api/v1/nodes/x");
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);  // no answer at all
  EXPECT_NE(r.status().message().find("GET /api/v1/nodes/x: "), std::string::npos);
  EXPECT_EQ(client.tries(), 3);
}

TEST(HttpKubeClient, RefusesAServerItsCaDoesNotVouchFor) {
  FakeApiServer server;
  FakeApiServer other;  // another self-signed CA
  kube::KubeConnection c = server.connection();
  c.ca_pem = other.ca_pem();
  kube::HttpKubeClient client(c, fast_retries(1));
  const Result<kube::ApiResponse> r = client.request("GET", "/api/v1/nodes/node-a");
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("SSL"), std::string::npos) << r.status().message();
  EXPECT_EQ(server.requests(), 0);
}

TEST(KubeClient, HttpStatusesMapToWhatTheCallerCanDo) {
  EXPECT_EQ(kube::code_for_http_status(404), StatusCode::kNotFound);
  EXPECT_EQ(kube::code_for_http_status(409), StatusCode::kAlreadyExists);
  for (long retry : {0L, 429L, 500L, 503L, 504L})
    EXPECT_EQ(kube::code_for_http_status(retry), StatusCode::kUnavailable) << retry;
  EXPECT_EQ(kube::code_for_http_status(400), StatusCode::kInvalidArgument);
  EXPECT_EQ(kube::code_for_http_status(422), StatusCode::kInvalidArgument);
  for (long refused : {401L, 403L, 410L, 412L})
    EXPECT_EQ(kube::code_for_http_status(refused), StatusCode::kFailedPrecondition) << refused;
  EXPECT_EQ(kube::code_for_http_status(302), StatusCode::kInternal);
}

TEST(KubeConnection, ReadsAKubeconfig) {
  FakeApiServer server;
  const fs::path dir = fs::temp_directory_path() / ("agent-kubeconfig-" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "ca.crt") << server.ca_pem();
  std::ofstream(dir / "config") << "apiVersion: v1\nkind: Config\ncurrent-context: test\n"
                                   "contexts:\n- name: other\n  context: {cluster: x, user: x}\n"
                                   "- name: test\n  context:\n    cluster: fake\n    user: agent\n"
                                   "clusters:\n- name: fake\n  cluster:\n    server: "
                                << server.url()
                                << "\n    certificate-authority-data: " << base64(server.ca_pem())
                                << "\nusers:\n- name: agent\n  user:\n    token: test-token\n";
  Result<kube::KubeConnection> read = kube::kubeconfig_connection((dir / "config").string());
  ASSERT_EQ(read.status().message(), "");
  kube::KubeConnection c = *read;
  EXPECT_EQ(c.server, server.url());
  EXPECT_EQ(c.ca_pem, server.ca_pem());
  EXPECT_EQ(c.token, "test-token");
  kube::HttpKubeClient client(c, fast_retries());
  EXPECT_EQ(client.request("GET", "/api/v1/nodes/node-a").status().message(), "");

  // The CA as a file relative to the kubeconfig; insecure-skip-tls-verify refused.
  std::ofstream(dir / "config2")
      << "current-context: t\ncontexts:\n- name: t\n  context: {cluster: c, user: u}\n"
         "clusters:\n- name: c\n  cluster: {server: 'https://h:6443', certificate-authority: "
         "ca.crt}\n"
         "users:\n- name: u\n  user: {token: abc}\n";
  read = kube::kubeconfig_connection((dir / "config2").string());
  ASSERT_EQ(read.status().message(), "");
  EXPECT_EQ(read->ca_pem, server.ca_pem());
  std::ofstream(dir / "config3")
      << "current-context: t\ncontexts:\n- name: t\n  context: {cluster: c, user: u}\n"
         "clusters:\n- name: c\n  cluster: {server: 'https://h:6443', insecure-skip-tls-verify: "
         "true}\n";
  read = kube::kubeconfig_connection((dir / "config3").string());
  EXPECT_EQ(read.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(read.status().message(),
            (dir / "config3").string() +
                ": insecure-skip-tls-verify is not supported (TLS is always verified)");
  fs::remove_all(dir);
}

TEST(KubeConnection, InClusterFromTheServiceAccount) {
  const fs::path dir = fs::temp_directory_path() / ("agent-sa-" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "ca.crt") << "CA";
  std::ofstream(dir / "token") << "sa-token\n";
  setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
  setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  const Result<kube::KubeConnection> c = kube::in_cluster_connection(dir.string());
  ASSERT_EQ(c.status().message(), "");
  EXPECT_EQ(c->server, "https://10.96.0.1:443");
  EXPECT_EQ(c->ca_pem, "CA");
  EXPECT_EQ(c->token_file, (dir / "token").string());
  fs::remove(dir / "token");
  EXPECT_EQ(kube::in_cluster_connection(dir.string()).status().code(), StatusCode::kNotFound);
  unsetenv("KUBERNETES_SERVICE_HOST");
  const Status outside = kube::in_cluster_connection(dir.string()).status();
  EXPECT_EQ(outside.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(outside.message(),
            "not in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tessera::agent

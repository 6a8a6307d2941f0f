#include "kube/http_kube_client.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "claim_fixture.h"
#include "fake_api_server.h"

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;
using testing::FakeApiServer;

RetryPolicy fast_retries(int attempts = 4) {
  RetryPolicy retry;
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
  const auto claim = testing::make_claim("train", "uid-1", {{"gpu", "gpu-0", "s1", "8Gi", "30"}});
  server.add_claim("tenants", "train", claim.dump());
  HttpKubeClient client(server.connection(), fast_retries());
  const ApiResponse r = client.request("GET", resource_claim_path("tenants", "train"));
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(nlohmann::json::parse(r.body), claim);
}

// Every value in a path or query is escaped (libcurl), so a name cannot add a segment, a query or
// another selector term.
TEST(KubePaths, ValuesInPathsAndQueriesAreEscaped) {
  EXPECT_EQ(url_escape("gpu-node.zone_a~1"), "gpu-node.zone_a~1");
  EXPECT_EQ(url_escape("a b/c?d=e&f#g%"), "a%20b%2Fc%3Fd%3De%26f%23g%25");
  EXPECT_EQ(resource_claim_path("tenants", "train"),
            "/apis/resource.k8s.io/v1/namespaces/tenants/resourceclaims/train");
  EXPECT_EQ(resource_claim_path("ns/../x", "c?watch=1"),
            "/apis/resource.k8s.io/v1/namespaces/ns%2F..%2Fx/resourceclaims/c%3Fwatch%3D1");
  EXPECT_EQ(node_path("node a"), "/api/v1/nodes/node%20a");
  EXPECT_EQ(resource_slice_path("s/1"), "/apis/resource.k8s.io/v1/resourceslices/s%2F1");
  EXPECT_EQ(field_selector({{"spec.nodeName", "node-a"}, {"spec.driver", "vgpu.tessera.dev"}}),
            "spec.nodeName%3Dnode-a%2Cspec.driver%3Dvgpu.tessera.dev");
  // fields.EscapeValue first (a backslash before each backslash, comma and equals sign), then
  // percent-encoding: the value stays one value of one term.
  EXPECT_EQ(field_selector({{"spec.nodeName", "a,spec.driver=x\\"}}),
            "spec.nodeName%3Da%5C%2Cspec.driver%5C%3Dx%5C%5C");
}

TEST(HttpKubeClient, AnEscapedNameReachesTheServerAsItIs) {
  FakeApiServer server;
  const auto claim =
      testing::make_claim("my claim", "uid-1", {{"gpu", "gpu-0", "s1", "8Gi", "30"}});
  server.add_claim("tenants", "my claim", claim.dump());
  HttpKubeClient client(server.connection(), fast_retries());
  const ApiResponse r = client.request("GET", resource_claim_path("tenants", "my claim"));
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(nlohmann::json::parse(r.body), claim);
  const ApiResponse other = client.request("GET", resource_claim_path("tenants/x", "my claim"));
  EXPECT_EQ(other.status, 404) << other.error;
}

TEST(HttpKubeClient, ErrorsCarryTheStatusAndTheApiMessage) {
  FakeApiServer server;
  HttpKubeClient client(server.connection(), fast_retries());
  const ApiResponse r = client.request("GET", resource_claim_path("tenants", "gone"));
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.error,
            "GET /apis/resource.k8s.io/v1/namespaces/tenants/resourceclaims/gone: HTTP 404: "
            "resourceclaims.resource.k8s.io \"gone\" not found");
  EXPECT_EQ(client.tries(), 1);  // 404 is not retried

  KubeConnection wrong_token = server.connection();
  wrong_token.token = "nope";
  HttpKubeClient unauthorised(wrong_token, fast_retries());
  EXPECT_EQ(unauthorised.request("GET", "/api/v1/nodes/node-a").error,
            "GET /api/v1/nodes/node-a: HTTP 401: Unauthorized");
}

TEST(HttpKubeClient, RetriesOn503WithBackoff) {
  FakeApiServer server;
  server.add_claim("tenants", "train", "{}");
  server.fail_next(2);
  HttpKubeClient client(server.connection(), fast_retries(4));
  const ApiResponse r = client.request("GET", resource_claim_path("tenants", "train"));
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(client.tries(), 3);

  server.fail_next(10);
  HttpKubeClient giving_up(server.connection(), fast_retries(3));
  const ApiResponse failed = giving_up.request("GET", resource_claim_path("tenants", "train"));
  EXPECT_EQ(failed.status, 503);
  EXPECT_EQ(failed.error,
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
  KubeConnection c;
  c.server = "https://127.0.0.1:" + std::to_string(port);
  c.ca_pem = "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n";
  HttpKubeClient client(c, fast_retries(3));
  const ApiResponse r = client.request("GET", "/api/v1/nodes/x");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.error.find("GET /api/v1/nodes/x: "), std::string::npos);
  EXPECT_EQ(client.tries(), 3);
}

TEST(HttpKubeClient, RefusesAServerItsCaDoesNotVouchFor) {
  FakeApiServer server;
  FakeApiServer other;  // another self-signed CA
  KubeConnection c = server.connection();
  c.ca_pem = other.ca_pem();
  HttpKubeClient client(c, fast_retries(1));
  const ApiResponse r = client.request("GET", "/api/v1/nodes/node-a");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.error.find("SSL"), std::string::npos) << r.error;
  EXPECT_EQ(server.requests(), 0);
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
  KubeConnection c;
  ASSERT_EQ(kubeconfig_connection((dir / "config").string(), c), "");
  EXPECT_EQ(c.server, server.url());
  EXPECT_EQ(c.ca_pem, server.ca_pem());
  EXPECT_EQ(c.token, "test-token");
  HttpKubeClient client(c, fast_retries());
  EXPECT_EQ(client.request("GET", "/api/v1/nodes/node-a").error, "");

  // The CA as a file relative to the kubeconfig; insecure-skip-tls-verify refused.
  std::ofstream(dir / "config2")
      << "current-context: t\ncontexts:\n- name: t\n  context: {cluster: c, user: u}\n"
         "clusters:\n- name: c\n  cluster: {server: 'https://h:6443', certificate-authority: "
         "ca.crt}\n"
         "users:\n- name: u\n  user: {token: abc}\n";
  ASSERT_EQ(kubeconfig_connection((dir / "config2").string(), c), "");
  EXPECT_EQ(c.ca_pem, server.ca_pem());
  std::ofstream(dir / "config3")
      << "current-context: t\ncontexts:\n- name: t\n  context: {cluster: c, user: u}\n"
         "clusters:\n- name: c\n  cluster: {server: 'https://h:6443', insecure-skip-tls-verify: "
         "true}\n";
  EXPECT_EQ(kubeconfig_connection((dir / "config3").string(), c),
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
  KubeConnection c;
  ASSERT_EQ(in_cluster_connection(c, dir.string()), "");
  EXPECT_EQ(c.server, "https://10.96.0.1:443");
  EXPECT_EQ(c.ca_pem, "CA");
  EXPECT_EQ(c.token_file, (dir / "token").string());
  unsetenv("KUBERNETES_SERVICE_HOST");
  EXPECT_EQ(in_cluster_connection(c, dir.string()),
            "not in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tessera::agent

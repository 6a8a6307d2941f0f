// `tessera shares --cluster`, the binary against kube-apiserver's stand-in
// (tests/support/apiserver: TLS with its own CA, a bearer token, claims stored through the
// server's write-back, LIST with limit/continue as the server pages it): which node holds each
// share, from a kubeconfig, in every output format; -n lists one namespace's collection; a server
// that refuses the token is a failure (1), a bad flag a usage error (2).
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "apiserver/claim_fixture.h"
#include "apiserver/fake_api_server.h"
#include "exit_codes.h"
#include "run_tessera.h"
#include "views/shares_view.h"

namespace tessera::cli {
namespace {

namespace fs = std::filesystem;
using agent::testing::FakeApiServer;
using agent::testing::written_claim;
using nlohmann::json;
using testing::Ran;
using testing::run_tessera;

class ClusterView : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("cli-cluster-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    kubeconfig_ = write_kubeconfig("kubeconfig", server_.token());
    // Claims as created and then allocated by kube-scheduler (the server's write-back).
    server_.add_claim(
        "tenants", "train",
        written_claim("train", "uid-train",
                      {{"gpu", "gpu-0", "s-0", "8Gi", "30"}, {"gpu", "gpu-1", "s-1", "8Gi", "30"}},
                      json::array(), "node-a")
            .dump());
    server_.add_claim("tenants", "infer",
                      written_claim("infer", "uid-infer", {{"gpu", "gpu-0", "s-2", "4Gi", "20"}},
                                    json::array(), "node-b")
                          .dump());
    json batch = written_claim("batch", "uid-batch", {{"gpu", "gpu-3", "", "2Gi", ""}},
                               json::array(), "node-c");
    batch["metadata"]["namespace"] = "research";
    server_.add_claim("research", "batch", batch.dump());
    json nic =
        written_claim("nic", "uid-nic", {{"nic", "eth-0", "", "", ""}}, json::array(), "node-b");
    nic["status"]["allocation"]["devices"]["results"][0]["driver"] = "nic.example.com";
    server_.add_claim("tenants", "nic", nic.dump());
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write_kubeconfig(const std::string& name, const std::string& token) {
    const fs::path ca = dir_ / "ca.pem";
    std::ofstream(ca) << server_.ca_pem();
    const fs::path path = dir_ / name;
    std::ofstream(path)
        << "apiVersion: v1\nkind: Config\ncurrent-context: test\n"
        << "clusters:\n- name: test\n  cluster:\n    server: " << server_.url()
        << "\n    certificate-authority: " << ca.string() << "\n"
        << "users:\n- name: test\n  user:\n    token: " << token << "\n"
        << "contexts:\n- name: test\n  context:\n    cluster: test\n    user: test\n";
    return path.string();
  }
  Ran shares(std::vector<std::string> args) {
    args.insert(args.begin(), {"shares", "--cluster"});
    return run_tessera(args, {{"KUBECONFIG", kubeconfig_}});
  }

  fs::path dir_;
  FakeApiServer server_;
  std::string kubeconfig_;
};

TEST_F(ClusterView, ListsEveryNodesSharesOfTesserasDriverFromTheKubeconfig) {
  const Ran ran = shares({"-o", "json"});
  ASSERT_EQ(ran.exit_code, kExitOk) << ran.err;
  const json document = json::parse(ran.out);
  ASSERT_EQ(document["shares"].size(), 4u) << ran.out;
  // In the server's order: research/batch, then tenants' infer and train (nic is another driver's).
  EXPECT_EQ(document["shares"][0]["claim"], "batch");
  EXPECT_EQ(document["shares"][0]["node"], "node-c");
  EXPECT_EQ(document["shares"][1]["claim"], "infer");
  EXPECT_EQ(document["shares"][1]["node"], "node-b");
  EXPECT_EQ(document["shares"][1]["memory"], "4Gi");
  EXPECT_EQ(document["shares"][1]["cores"], "20");
  EXPECT_EQ(document["shares"][1]["reserved_for"][0]["name"], "pod-infer");
  EXPECT_EQ(document["shares"][3]["device"], "gpu-1");
  EXPECT_EQ(document["shares"][3]["node"], "node-a");
  // The creation time the server stored.
  EXPECT_EQ(document["shares"][3]["created"], "2026-11-30T00:00:00Z");
  EXPECT_EQ(server_.claim_list_requests.size(), 1u);
  EXPECT_EQ(server_.claim_list_requests[0], "/apis/resource.k8s.io/v1/resourceclaims?limit=500");

  const Ran yaml = shares({"-o", "yaml"});
  ASSERT_EQ(yaml.exit_code, kExitOk) << yaml.err;
  EXPECT_EQ(json::parse(yaml_to_json(yaml.out).value().dump()), document);

  const Ran table = shares({});
  ASSERT_EQ(table.exit_code, kExitOk) << table.err;
  EXPECT_EQ(table.out.substr(0, table.out.find('\n')),
            "NAMESPACE   CLAIM   NODE     DEVICE   MEMORY   CORES   PODS        AGE");
  EXPECT_NE(table.out.find("tenants     infer   node-b   gpu-0    4Gi      20      pod-infer"),
            std::string::npos)
      << table.out;
  const Ran wide = shares({"-o", "wide"});
  ASSERT_EQ(wide.exit_code, kExitOk) << wide.err;
  EXPECT_NE(wide.out.find("SHARE-ID   CLAIM-UID"), std::string::npos) << wide.out;
  EXPECT_NE(wide.out.find("s-2        uid-infer"), std::string::npos) << wide.out;
}

TEST_F(ClusterView, ReadsPageByPageWithTheServersContinueToken) {
  const Ran whole = shares({"-o", "json"});
  server_.claim_list_requests.clear();
  const Ran paged = shares({"-o", "json", "--chunk-size", "1"});
  ASSERT_EQ(paged.exit_code, kExitOk) << paged.err;
  EXPECT_EQ(json::parse(paged.out), json::parse(whole.out));
  // Four claims, one a page: four requests, each after the first with the token of the one before.
  ASSERT_EQ(server_.claim_list_requests.size(), 4u);
  EXPECT_EQ(server_.claim_list_requests[0], "/apis/resource.k8s.io/v1/resourceclaims?limit=1");
  for (size_t i = 1; i < 4; ++i)
    EXPECT_EQ(server_.claim_list_requests[i].rfind(
                  "/apis/resource.k8s.io/v1/resourceclaims?limit=1&continue=", 0),
              0u)
        << server_.claim_list_requests[i];
}

TEST_F(ClusterView, OneNamespaceIsThatNamespacesCollection) {
  const Ran ran = shares({"-n", "research", "-o", "json"});
  ASSERT_EQ(ran.exit_code, kExitOk) << ran.err;
  const json document = json::parse(ran.out);
  ASSERT_EQ(document["shares"].size(), 1u);
  EXPECT_EQ(document["shares"][0]["claim"], "batch");
  ASSERT_EQ(server_.claim_list_requests.size(), 1u);
  EXPECT_EQ(server_.claim_list_requests[0],
            "/apis/resource.k8s.io/v1/namespaces/research/resourceclaims?limit=500");
  const Ran none = shares({"-n", "empty"});
  EXPECT_EQ(none.exit_code, kExitOk);
  EXPECT_EQ(none.out, "");
  EXPECT_EQ(none.err, "No shares found in namespace empty.\n");
}

TEST_F(ClusterView, ATokenTheServerRefusesIsAFailureAndABadFlagAUsageError) {
  const std::string wrong = write_kubeconfig("wrong", "not-the-token");
  const Ran refused = run_tessera({"shares", "--cluster", "--kubeconfig", wrong});
  EXPECT_EQ(refused.exit_code, kExitFailed);
  EXPECT_NE(refused.err.find("tessera shares: listing ResourceClaims: "), std::string::npos)
      << refused.err;
  EXPECT_NE(refused.err.find("401"), std::string::npos) << refused.err;
  EXPECT_EQ(refused.out, "");
  EXPECT_EQ(shares({"--chunk-size", "-1"}).exit_code, kExitUsage);
  EXPECT_EQ(shares({"-o", "xml"}).exit_code, kExitUsage);
  EXPECT_EQ(shares({"--share-root", "/tmp"}).exit_code, kExitUsage);
}

}  // namespace
}  // namespace tessera::cli

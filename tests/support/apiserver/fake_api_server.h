// A local HTTPS Kubernetes API server for the node agent's tests: cpp-httplib with a self-signed
// certificate made here with OpenSSL (SAN IP:127.0.0.1), listening on 127.0.0.1 port 0. It serves
// ResourceClaims and Nodes as the API server returns them, stores ResourceSlices (with
// resourceVersion) after kube-apiserver's own validation (kube/apiserver_rules.h: a refused
// create or update is answered 422 with the API server's Status, an undecodable one 400),
// records every write, checks the bearer token, and can fail the next N requests with 503. A
// device taint written without timeAdded gets the server's time, as kube-apiserver's defaulting
// does (set_time() fixes that time for a test); with device_taints_gate off it drops them, as a
// server without DRADeviceTaints does. Every answer is what kube-apiserver stores after its
// write-back (apiserver/write_back.h): canonical quantities, defaults, the server's uid,
// resourceVersion, generation, creationTimestamp and managedFields; a claim added is stored as
// created and then given its status by a status update.
#pragma once

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include <atomic>
#include <ctime>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "apiserver/apiserver_rules.h"
#include "apiserver/write_back.h"
#include "tessera/kube/http_kube_client.h"

namespace tessera::agent::testing {

namespace apiserver_testing = ::tessera::testing::apiserver;

struct RecordedWrite {
  std::string method;
  std::string path;
  nlohmann::json body;
};

class FakeApiServer {
 public:
  explicit FakeApiServer(std::string token = "test-token") : token_(std::move(token)) {
    key_ = EVP_EC_gen("P-256");
    cert_ = X509_new();
    X509_set_version(cert_, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(cert_), 1);
    X509_gmtime_adj(X509_getm_notBefore(cert_), -60);
    X509_gmtime_adj(X509_getm_notAfter(cert_), 3600);
    X509_set_pubkey(cert_, key_);
    X509_NAME* subject = X509_get_subject_name(cert_);
    X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>("fake-apiserver"), -1, -1, 0);
    X509_set_issuer_name(cert_, subject);
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, cert_, cert_, nullptr, nullptr, 0);
    for (auto [nid, value] : {std::pair{NID_basic_constraints, "critical,CA:TRUE"},
                              std::pair{NID_key_usage, "critical,digitalSignature,keyCertSign"},
                              std::pair{NID_subject_alt_name, "IP:127.0.0.1,DNS:localhost"}}) {
      X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
      X509_add_ext(cert_, ext, -1);
      X509_EXTENSION_free(ext);
    }
    X509_sign(cert_, key_, EVP_sha256());
    BIO* bio = BIO_new(BIO_s_mem());
    PEM_write_bio_X509(bio, cert_);
    char* data = nullptr;
    const long length = BIO_get_mem_data(bio, &data);
    ca_pem_.assign(data, static_cast<size_t>(length));
    BIO_free(bio);

    server_ = std::make_unique<httplib::SSLServer>(cert_, key_);
    server_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard lock(mutex_);
      ++requests_;
      if (fail_next_ > 0) {
        --fail_next_;
        status(res, 503, "the server is currently unable to handle the request");
        return httplib::Server::HandlerResponse::Handled;
      }
      if (req.get_header_value("Authorization") != "Bearer " + token_) {
        status(res, 401, "Unauthorized");
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    // A GET as kube-apiserver answers it: resourceVersion "" (a consistent read, counted in
    // claim_gets) or "0" (any version, from the watch cache; claim_cache_gets), another number
    // (not older than it: the stored one here), anything else 400; a missing claim 404 with the
    // NotFound Status naming it.
    server_->Get(
        R"(/apis/resource\.k8s\.io/v1/namespaces/([^/]+)/resourceclaims/([^/]+))",
        [this](const httplib::Request& req, httplib::Response& res) {
          std::lock_guard lock(mutex_);
          const std::string key = req.matches[1].str() + "/" + req.matches[2].str();
          const std::string version = req.get_param_value("resourceVersion");
          if (!version.empty() && version.find_first_not_of("0123456789") != std::string::npos)
            return status(res, 400, "invalid resource version \"" + version + "\"", "BadRequest");
          ++(version == "0" ? claim_cache_gets_ : claim_gets_)[key];
          const auto it = claims_.find(key);
          if (it == claims_.end())
            return status(
                res, 404,
                "resourceclaims.resource.k8s.io \"" + req.matches[2].str() + "\" not found",
                "NotFound",
                {{"name", req.matches[2].str()},
                 {"group", "resource.k8s.io"},
                 {"kind", "resourceclaims"}});
          res.set_content(it->second, "application/json");
        });
    server_->Get(
        R"(/api/v1/nodes/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
          std::lock_guard lock(mutex_);
          if (req.matches[1].str() != node_name)
            return status(res, 404, "nodes \"" + req.matches[1].str() + "\" not found");
          if (node_body) return res.set_content(*node_body, "application/json");
          res.set_content(nlohmann::json{{"apiVersion", "v1"},
                                         {"kind", "Node"},
                                         {"metadata", {{"name", node_name}, {"uid", node_uid}}}}
                              .dump(),
                          "application/json");
        });
    server_->Get("/apis/resource.k8s.io/v1/resourceslices",
                 [this](const httplib::Request& req, httplib::Response& res) {
                   std::lock_guard lock(mutex_);
                   last_list_query = req.get_param_value("fieldSelector");
                   nlohmann::json items = nlohmann::json::array();
                   for (const auto& [name, slice] : slices) items.push_back(slice);
                   res.set_content(nlohmann::json{{"apiVersion", "resource.k8s.io/v1"},
                                                  {"kind", "ResourceSliceList"},
                                                  {"items", items}}
                                       .dump(),
                                   "application/json");
                 });
    server_->Post("/apis/resource.k8s.io/v1/resourceslices", [this](const httplib::Request& req,
                                                                    httplib::Response& res) {
      std::lock_guard lock(mutex_);
      auto body = nlohmann::json::parse(req.body);
      writes.push_back({"POST", req.path, body});
      apiserver::default_resource_slice(body, now());
      if (!device_taints_gate) apiserver::drop_disabled_device_taints(body, nullptr);
      const std::string name = body["metadata"]["name"];
      if (auto refused = apiserver::check_resource_slice_write(body, nullptr))
        return refuse(res, *refused);
      if (slices.count(name)) return status(res, 409, "already exists");
      apiserver_testing::ServerFields fields;
      fields.uid = "slice-uid-" + name;
      fields.resource_version = std::to_string(++version_);
      fields.timestamp = apiserver_testing::rfc3339(now());
      Result<nlohmann::json> stored = apiserver_testing::write_back(body, nullptr, fields);
      if (!stored.is_ok()) return status(res, 422, stored.status().message());
      body = *stored;
      slices[name] = body;
      res.status = 201;
      res.set_content(body.dump(), "application/json");
    });
    server_->Put(
        R"(/apis/resource\.k8s\.io/v1/resourceslices/([^/]+))",
        [this](const httplib::Request& req, httplib::Response& res) {
          std::lock_guard lock(mutex_);
          auto body = nlohmann::json::parse(req.body);
          writes.push_back({"PUT", req.path, body});
          apiserver::default_resource_slice(body, now());
          const auto it = slices.find(req.matches[1].str());
          if (it == slices.end()) return status(res, 404, "not found");
          if (body["metadata"]["resourceVersion"] != it->second["metadata"]["resourceVersion"])
            return status(res, 409, "the object has been modified");
          if (!device_taints_gate) apiserver::drop_disabled_device_taints(body, &it->second);
          if (auto refused = apiserver::check_resource_slice_write(body, &it->second))
            return refuse(res, *refused);
          apiserver_testing::ServerFields fields;
          fields.resource_version = std::to_string(++version_);
          fields.timestamp = apiserver_testing::rfc3339(now());
          Result<nlohmann::json> stored = apiserver_testing::write_back(body, &it->second, fields);
          if (!stored.is_ok()) return status(res, 422, stored.status().message());
          body = *stored;
          it->second = body;
          res.set_content(body.dump(), "application/json");
        });
    server_->Delete(R"(/apis/resource\.k8s\.io/v1/resourceslices/([^/]+))",
                    [this](const httplib::Request& req, httplib::Response& res) {
                      std::lock_guard lock(mutex_);
                      writes.push_back({"DELETE", req.path, nullptr});
                      if (!slices.erase(req.matches[1].str())) return status(res, 404, "not found");
                      res.set_content(R"({"kind":"Status","status":"Success"})",
                                      "application/json");
                    });
    server_->set_tcp_nodelay(true);  // as the API server: no 40 ms delayed-ACK stalls
    port_ = server_->bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_->listen_after_bind(); });
    // stop() only stops a server that is running: wait for the accept loop before returning.
    while (!server_->is_running()) std::this_thread::yield();
  }

  ~FakeApiServer() {
    server_->stop();
    thread_.join();
    server_.reset();
    X509_free(cert_);
    EVP_PKEY_free(key_);
  }

  std::string url() const { return "https://127.0.0.1:" + std::to_string(port_); }
  const std::string& ca_pem() const { return ca_pem_; }
  const std::string& token() const { return token_; }
  // How a client reaches this server: its URL, CA and token.
  kube::KubeConnection connection() const {
    kube::KubeConnection c;
    c.server = url();
    c.ca_pem = ca_pem_;
    c.token = token_;
    return c;
  }
  // A claim as the API server holds it once created and given its status (the scheduler's
  // allocation, status.reservedFor) by a status update. A body that is not a ResourceClaim is
  // served as given (tests of what the agent does with a garbled answer).
  void add_claim(const std::string& ns, const std::string& name, const std::string& json) {
    std::lock_guard lock(mutex_);
    claims_[ns + "/" + name] = json;
    const nlohmann::json claim = nlohmann::json::parse(json, nullptr, false);
    if (!claim.is_object() || claim.value("kind", "") != "ResourceClaim" ||
        !claim.contains("metadata") || !claim["metadata"].is_object())
      return;
    apiserver_testing::ServerFields fields;
    fields.uid = claim["metadata"].value("uid", "");
    fields.resource_version = std::to_string(++version_);
    fields.timestamp = claim["metadata"].value("creationTimestamp", "");
    Result<nlohmann::json> created = apiserver_testing::write_back(claim, nullptr, fields);
    if (!created.is_ok()) return;
    Result<nlohmann::json> stored =
        apiserver_testing::write_back_status(claim, *created, std::to_string(++version_));
    if (stored.is_ok()) claims_[ns + "/" + name] = stored->dump();
  }
  // The claim deleted (a GET answers 404 from now on).
  void delete_claim(const std::string& ns, const std::string& name) {
    std::lock_guard lock(mutex_);
    claims_.erase(ns + "/" + name);
  }
  // What the scheduler's status update does when another pod shares the claim: status.reservedFor
  // replaced (pods: {name, uid} each), the resourceVersion bumped. False when there is no claim.
  bool set_reserved_pods(const std::string& ns, const std::string& name,
                         const std::vector<std::pair<std::string, std::string>>& pods) {
    std::lock_guard lock(mutex_);
    const auto it = claims_.find(ns + "/" + name);
    if (it == claims_.end()) return false;
    nlohmann::json claim = nlohmann::json::parse(it->second);
    nlohmann::json reserved = nlohmann::json::array();
    for (const auto& [pod, uid] : pods)
      reserved.push_back({{"resource", "pods"}, {"name", pod}, {"uid", uid}});
    claim["status"]["reservedFor"] = reserved;
    claim["metadata"]["resourceVersion"] = std::to_string(++version_);
    it->second = claim.dump();
    return true;
  }
  void fail_next(int n) {
    std::lock_guard lock(mutex_);
    fail_next_ = n;
  }
  int requests() {
    std::lock_guard lock(mutex_);
    return requests_;
  }
  // Consistent GETs of one ResourceClaim so far (a prepare does one; an answer from the
  // checkpoint none; the agent's periodic re-reads are claim_cache_gets).
  int claim_gets(const std::string& ns, const std::string& name) {
    std::lock_guard lock(mutex_);
    const auto it = claim_gets_.find(ns + "/" + name);
    return it == claim_gets_.end() ? 0 : it->second;
  }
  // GETs of it with resourceVersion=0 (served from the watch cache: the agent's periodic reads).
  int claim_cache_gets(const std::string& ns, const std::string& name) {
    std::lock_guard lock(mutex_);
    const auto it = claim_cache_gets_.find(ns + "/" + name);
    return it == claim_cache_gets_.end() ? 0 : it->second;
  }
  std::vector<RecordedWrite> take_writes() {
    std::lock_guard lock(mutex_);
    return std::exchange(writes, {});
  }
  std::map<std::string, nlohmann::json> stored_slices() {
    std::lock_guard lock(mutex_);
    return slices;
  }
  // The time the server stamps on a taint without timeAdded (0: the real time).
  void set_time(std::time_t when) { time_.store(when); }
  // What someone else's `kubectl delete resourceslice` does (not recorded as the agent's write).
  void delete_slices() {
    std::lock_guard lock(mutex_);
    slices.clear();
  }

  // kube-apiserver's DRADeviceTaints gate (on by default from 1.36, off before): off, the taints
  // of a write are dropped unless the stored slice already has some.
  std::atomic<bool> device_taints_gate{true};
  std::string node_name = "node-a";
  std::string node_uid = "3d7c0b8e-node-uid";
  std::optional<std::string> node_body;          // set: the Node GET answers this instead
  std::map<std::string, nlohmann::json> slices;  // guarded by mutex_ while serving
  std::vector<RecordedWrite> writes;
  std::string last_list_query;

 private:
  static void status(httplib::Response& res, int code, const std::string& message,
                     const std::string& reason = "",
                     const nlohmann::json& details = nlohmann::json()) {
    res.status = code;
    nlohmann::json body = {
        {"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", nlohmann::json::object()},
        {"status", "Failure"}, {"message", message}, {"code", code}};
    if (!reason.empty()) body["reason"] = reason;
    if (!details.is_null()) body["details"] = details;
    res.set_content(body.dump(), "application/json");
  }

  std::time_t now() const {
    const std::time_t fixed = time_.load();
    return fixed != 0 ? fixed : std::time(nullptr);
  }

  static void refuse(httplib::Response& res, const apiserver::Refusal& refusal) {
    res.status = refusal.code;
    res.set_content(refusal.status.dump(), "application/json");
  }

  std::string token_;
  EVP_PKEY* key_ = nullptr;
  X509* cert_ = nullptr;
  std::string ca_pem_;
  std::unique_ptr<httplib::SSLServer> server_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mutex_;
  std::map<std::string, std::string> claims_;
  int fail_next_ = 0;
  int requests_ = 0;
  std::map<std::string, int> claim_gets_;        // "<namespace>/<name>" -> GETs
  std::map<std::string, int> claim_cache_gets_;  // the same, resourceVersion=0
  uint64_t version_ = 100;
  std::atomic<std::time_t> time_{0};
};

}  // namespace tessera::agent::testing

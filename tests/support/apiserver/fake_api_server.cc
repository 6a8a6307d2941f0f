// The fake API server (fake_api_server.h): cpp-httplib and OpenSSL are compiled here only.
#include "apiserver/fake_api_server.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include <httplib.h>

#include "apiserver/apiserver_rules.h"
#include "apiserver/event_rules.h"
#include "apiserver/write_back.h"

namespace tessera::agent::testing {

namespace write_back = ::tessera::testing::apiserver;
using nlohmann::json;

namespace {

void answer_status(httplib::Response& res, int code, const std::string& message,
                   const std::string& reason = "", const json& details = json()) {
  res.status = code;
  json body = {{"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", json::object()},
               {"status", "Failure"}, {"message", message}, {"code", code}};
  if (!reason.empty()) body["reason"] = reason;
  if (!details.is_null()) body["details"] = details;
  res.set_content(body.dump(), "application/json");
}

void refuse(httplib::Response& res, const apiserver::Refusal& refusal) {
  res.status = refusal.code;
  res.set_content(refusal.status.dump(), "application/json");
}

// The request's body as JSON; nullopt (answered 400, as kube-apiserver answers a body it cannot
// decode) when it is not.
std::optional<json> decoded_body(const httplib::Request& req, httplib::Response& res) {
  json body = json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    answer_status(res, 400, "the request body is not a JSON object", "BadRequest");
    return std::nullopt;
  }
  return body;
}

}  // namespace

struct FakeApiServer::Impl {
  explicit Impl(FakeApiServer& owner, std::string token_value)
      : self(owner), token(std::move(token_value)) {}

  // The parts of the server every handler shares; guarded by `mutex`, as are the owner's slices,
  // writes and last_list_query while serving.
  FakeApiServer& self;
  std::string token;
  EVP_PKEY* private_key = nullptr;
  X509* certificate = nullptr;
  std::string ca_pem;
  std::unique_ptr<httplib::SSLServer> server;
  std::thread thread;
  int port = 0;
  std::mutex mutex;
  std::map<std::string, std::string> claims;
  int fail_next = 0;
  int requests = 0;
  std::map<std::string, int> claim_gets;        // "<namespace>/<name>" -> GETs
  std::map<std::string, int> claim_cache_gets;  // the same, resourceVersion=0
  uint64_t last_version = 100;
  std::atomic<std::time_t> time{0};
  // The Node's registration: its resourceVersion and creationTimestamp.
  std::string node_version;
  std::string node_created;

  std::time_t now() const {
    const std::time_t fixed = time.load();
    return fixed != 0 ? fixed : std::time(nullptr);
  }

  // The objects of serve_secrets and serve_webhook_configurations: "<ns>/<name>" and
  // "<resource>/<name>".
  std::map<std::string, json> secrets;
  std::map<std::string, json> webhook_configurations;
  // hold_secret_reads: its own lock, so that held reads do not block the server.
  std::mutex hold_mutex;
  std::condition_variable hold_released;
  int hold_waiting = 0;
  int hold_count = 0;

  void make_certificate();
  void serve_claims();
  void serve_secrets();
  void serve_webhook_configurations();
  void hold_if_asked();
  void serve_claim_lists();
  void serve_node();
  void serve_slices();
  void serve_events();
  std::map<std::string, json> events;  // "<namespace>/<name>"
};

void FakeApiServer::Impl::make_certificate() {
  private_key = EVP_EC_gen("P-256");
  certificate = X509_new();
  X509_set_version(certificate, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(certificate), 1);
  X509_gmtime_adj(X509_getm_notBefore(certificate), -60);
  X509_gmtime_adj(X509_getm_notAfter(certificate), 3600);
  X509_set_pubkey(certificate, private_key);
  X509_NAME* subject = X509_get_subject_name(certificate);
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("fake-apiserver"), -1, -1, 0);
  X509_set_issuer_name(certificate, subject);
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, certificate, certificate, nullptr, nullptr, 0);
  for (auto [nid, value] : {std::pair{NID_basic_constraints, "critical,CA:TRUE"},
                            std::pair{NID_key_usage, "critical,digitalSignature,keyCertSign"},
                            std::pair{NID_subject_alt_name, "IP:127.0.0.1,DNS:localhost"}}) {
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
    X509_add_ext(certificate, ext, -1);
    X509_EXTENSION_free(ext);
  }
  X509_sign(certificate, private_key, EVP_sha256());
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(bio, certificate);
  char* data = nullptr;
  const long length = BIO_get_mem_data(bio, &data);
  ca_pem.assign(data, static_cast<size_t>(length));
  BIO_free(bio);
}

// A GET as kube-apiserver answers it: resourceVersion "" (a consistent read, counted in
// claim_gets) or "0" (any version, from the watch cache; claim_cache_gets), another number
// (not older than it: the stored one here), anything else 400; a missing claim 404 with the
// NotFound Status naming it.
void FakeApiServer::Impl::serve_claims() {
  server->Get(
      R"(/apis/resource\.k8s\.io/v1/namespaces/([^/]+)/resourceclaims/([^/]+))",
      [this](const httplib::Request& req, httplib::Response& res) {
        std::lock_guard lock(mutex);
        const std::string key = req.matches[1].str() + "/" + req.matches[2].str();
        const std::string version = req.get_param_value("resourceVersion");
        if (!version.empty() && version.find_first_not_of("0123456789") != std::string::npos)
          return answer_status(res, 400, "invalid resource version \"" + version + "\"",
                               "BadRequest");
        ++(version == "0" ? claim_cache_gets : claim_gets)[key];
        const auto it = claims.find(key);
        if (it == claims.end())
          return answer_status(
              res, 404, "resourceclaims.resource.k8s.io \"" + req.matches[2].str() + "\" not found",
              "NotFound",
              {{"name", req.matches[2].str()},
               {"group", "resource.k8s.io"},
               {"kind", "resourceclaims"}});
        res.set_content(it->second, "application/json");
      });
}

namespace {

// base64url without padding (Go's base64.RawURLEncoding), as the API server writes a continue
// token; and back, "" when `text` is not that.
std::string raw_url_base64(const std::string& bytes) {
  static const char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  unsigned value = 0;
  int bits = 0;
  for (const unsigned char byte : bytes) {
    value = (value << 8) | byte;
    bits += 8;
    while (bits >= 6) out += kAlphabet[(value >> (bits -= 6)) & 63];
  }
  if (bits > 0) out += kAlphabet[(value << (6 - bits)) & 63];
  return out;
}
std::optional<std::string> from_raw_url_base64(const std::string& text) {
  std::string out;
  unsigned value = 0;
  int bits = 0;
  for (const char c : text) {
    const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    const char* found = c ? std::strchr(alphabet, c) : nullptr;
    if (!found) return std::nullopt;
    value = (value << 6) | static_cast<unsigned>(found - alphabet);
    bits += 6;
    if (bits >= 8) out += static_cast<char>((value >> (bits -= 8)) & 0xff);
  }
  return out;
}

}  // namespace

// LIST of ResourceClaims, of one namespace or of all, as kube-apiserver answers it: a
// ResourceClaimList whose items are the stored claims without kind and apiVersion, in the order of
// their storage keys (namespace, then name); with limit=N at most N items and, when more remain,
// metadata.continue (the server's token: base64url of {"v","rv","start"}) and remainingItemCount.
// A continue token that is not one is 400, as is a limit that is not a number. (The real server
// pins later pages to the first page's resourceVersion; here they read the current claims.)
void FakeApiServer::Impl::serve_claim_lists() {
  const auto list = [this](const std::string& namespace_name, const httplib::Request& req,
                           httplib::Response& res) {
    std::lock_guard lock(mutex);
    self.claim_list_requests.push_back(req.target);
    const std::string limit_text = req.get_param_value("limit");
    int64_t limit = 0;
    if (!limit_text.empty()) {
      if (limit_text.find_first_not_of("0123456789") != std::string::npos || limit_text.size() > 18)
        return answer_status(res, 400, "limit: Invalid value: \"" + limit_text + "\"",
                             "BadRequest");
      limit = std::stoll(limit_text);
    }
    std::string start;  // the first key to list (namespace/name), from the continue token
    if (const std::string given = req.get_param_value("continue"); !given.empty()) {
      const std::optional<std::string> decoded = from_raw_url_base64(given);
      const json parsed = decoded ? json::parse(*decoded, nullptr, false) : json();
      if (!parsed.is_object() || parsed.value("v", "") != "meta.k8s.io/v1" ||
          !parsed.contains("start") || !parsed["start"].is_string())
        return answer_status(res, 400,
                             "continue key is not valid: incorrect encoded start "
                             "resourceVersion (version meta.k8s.io/v1)",
                             "BadRequest");
      start = parsed["start"].get<std::string>();
    }
    json items = json::array();
    std::string next;
    int64_t remaining = 0;
    for (const auto& [key, text] : claims) {
      if (!namespace_name.empty() &&
          key.compare(0, namespace_name.size() + 1, namespace_name + "/") != 0)
        continue;
      if (!start.empty() && key < start) continue;
      if (limit > 0 && static_cast<int64_t>(items.size()) == limit) {
        if (next.empty()) next = key;
        ++remaining;
        continue;
      }
      json item = json::parse(text, nullptr, false);
      if (item.is_discarded()) continue;  // only a test's garbled GET body: never listed
      if (item.is_object()) {
        item.erase("kind");
        item.erase("apiVersion");
      }
      items.push_back(std::move(item));
    }
    json metadata = {{"resourceVersion", std::to_string(last_version)}};
    if (!next.empty()) {
      metadata["continue"] = raw_url_base64(
          json{{"v", "meta.k8s.io/v1"}, {"rv", last_version}, {"start", next}}.dump());
      metadata["remainingItemCount"] = remaining;
    }
    res.set_content(json{{"kind", "ResourceClaimList"},
                         {"apiVersion", "resource.k8s.io/v1"},
                         {"metadata", metadata},
                         {"items", items}}
                        .dump(),
                    "application/json");
  };
  server->Get("/apis/resource.k8s.io/v1/resourceclaims",
              [list](const httplib::Request& req, httplib::Response& res) { list("", req, res); });
  server->Get(R"(/apis/resource\.k8s\.io/v1/namespaces/([^/]+)/resourceclaims)",
              [list](const httplib::Request& req, httplib::Response& res) {
                list(req.matches[1].str(), req, res);
              });
}

// The Node as kubelet registered it (a create: its status allowed), stored by the write-back.
void FakeApiServer::Impl::serve_node() {
  server->Get(R"(/api/v1/nodes/([^/]+))", [this](const httplib::Request& req,
                                                 httplib::Response& res) {
    std::lock_guard lock(mutex);
    if (req.matches[1].str() != self.node_name)
      return answer_status(res, 404, "nodes \"" + req.matches[1].str() + "\" not found");
    if (self.node_body) return res.set_content(*self.node_body, "application/json");
    json node = {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", self.node_name}}}};
    if (!self.node_status.is_null()) node["status"] = self.node_status;
    write_back::ServerFields fields;
    fields.uid = self.node_uid;
    fields.resource_version = node_version;
    fields.timestamp = node_created;
    fields.manager = "kubelet";
    const Result<json> stored = write_back::write_back(node, nullptr, fields);
    // kube-apiserver would have refused this registration: the test's Node is wrong.
    if (!stored.is_ok())
      return answer_status(res, 500, "the test's Node: " + stored.status().message());
    res.set_content(stored->dump(), "application/json");
  });
}

void FakeApiServer::Impl::serve_slices() {
  server->Get("/apis/resource.k8s.io/v1/resourceslices", [this](const httplib::Request& req,
                                                                httplib::Response& res) {
    std::lock_guard lock(mutex);
    self.last_list_query = req.get_param_value("fieldSelector");
    json items = json::array();
    for (const auto& [name, slice] : self.slices) items.push_back(slice);
    res.set_content(
        json{{"apiVersion", "resource.k8s.io/v1"}, {"kind", "ResourceSliceList"}, {"items", items}}
            .dump(),
        "application/json");
  });
  server->Post("/apis/resource.k8s.io/v1/resourceslices",
               [this](const httplib::Request& req, httplib::Response& res) {
                 std::lock_guard lock(mutex);
                 std::optional<json> decoded = decoded_body(req, res);
                 if (!decoded) return;
                 json body = std::move(*decoded);
                 self.writes.push_back({"POST", req.path, body});
                 apiserver::default_resource_slice(body, now());
                 if (!self.device_taints_gate)
                   apiserver::drop_disabled_device_taints(body, nullptr);
                 if (auto refused = apiserver::check_resource_slice_write(body, nullptr))
                   return refuse(res, *refused);
                 const std::string name = body["metadata"]["name"];
                 if (self.slices.count(name)) return answer_status(res, 409, "already exists");
                 write_back::ServerFields fields;
                 fields.uid = "slice-uid-" + name;
                 fields.resource_version = std::to_string(++last_version);
                 fields.timestamp = write_back::rfc3339(now());
                 Result<json> stored = write_back::write_back(body, nullptr, fields);
                 if (!stored.is_ok()) return answer_status(res, 422, stored.status().message());
                 self.slices[name] = *stored;
                 res.status = 201;
                 res.set_content(stored->dump(), "application/json");
               });
  server->Put(R"(/apis/resource\.k8s\.io/v1/resourceslices/([^/]+))",
              [this](const httplib::Request& req, httplib::Response& res) {
                std::lock_guard lock(mutex);
                std::optional<json> decoded = decoded_body(req, res);
                if (!decoded) return;
                json body = std::move(*decoded);
                self.writes.push_back({"PUT", req.path, body});
                apiserver::default_resource_slice(body, now());
                const std::string name = req.matches[1].str();
                const auto it = self.slices.find(name);
                if (it == self.slices.end()) return answer_status(res, 404, "not found");
                // No resourceVersion: unconditional (the strategy allows it); a stale one: 409.
                const Status current = write_back::check_resource_version(
                    body, it->second, name, "resourceslices.resource.k8s.io");
                if (!current.is_ok())
                  return answer_status(
                      res, 409, current.message(), "Conflict",
                      {{"name", name}, {"group", "resource.k8s.io"}, {"kind", "resourceslices"}});
                if (!self.device_taints_gate)
                  apiserver::drop_disabled_device_taints(body, &it->second);
                if (auto refused = apiserver::check_resource_slice_write(body, &it->second))
                  return refuse(res, *refused);
                write_back::ServerFields fields;
                fields.resource_version = std::to_string(++last_version);
                fields.timestamp = write_back::rfc3339(now());
                Result<json> stored = write_back::write_back(body, &it->second, fields);
                if (!stored.is_ok()) return answer_status(res, 422, stored.status().message());
                it->second = *stored;
                res.set_content(stored->dump(), "application/json");
              });
  server->Delete(R"(/apis/resource\.k8s\.io/v1/resourceslices/([^/]+))",
                 [this](const httplib::Request& req, httplib::Response& res) {
                   std::lock_guard lock(mutex);
                   self.writes.push_back({"DELETE", req.path, nullptr});
                   if (!self.slices.erase(req.matches[1].str()))
                     return answer_status(res, 404, "not found");
                   res.set_content(R"({"kind":"Status","status":"Success"})", "application/json");
                 });
}

void FakeApiServer::Impl::hold_if_asked() {
  std::unique_lock lock(hold_mutex);
  if (hold_count == 0) return;
  if (++hold_waiting == hold_count) {
    hold_count = 0;
    hold_waiting = 0;
    hold_released.notify_all();
    return;
  }
  hold_released.wait(lock, [this] { return hold_count == 0; });
}

namespace {

// ValidateSecret's rules for what Tessera writes: data keys and base64 values (a value that is
// not base64 does not decode: 400), a kubernetes.io/tls Secret's two keys (422).
std::optional<std::pair<int, std::string>> secret_refusal(json& secret, const json* stored) {
  const std::string name = secret["metadata"].value("name", "");
  if (!secret.contains("type") || secret["type"] == "") secret["type"] = "Opaque";
  if (secret.contains("stringData")) {
    if (!secret["stringData"].is_object()) return std::pair{400, "stringData: not an object"};
    for (const auto& [key, value] : secret["stringData"].items()) {
      if (!value.is_string()) return std::pair{400, "stringData." + key + ": not a string"};
      const std::string text = value.get<std::string>();
      std::string encoded(4 * ((text.size() + 2) / 3), '\0');
      EVP_EncodeBlock(reinterpret_cast<unsigned char*>(encoded.data()),
                      reinterpret_cast<const unsigned char*>(text.data()),
                      static_cast<int>(text.size()));
      secret["data"][key] = encoded;
    }
    secret.erase("stringData");
  }
  if (secret.contains("data")) {
    if (!secret["data"].is_object()) return std::pair{400, "data: not an object"};
    for (const auto& [key, value] : secret["data"].items()) {
      const std::string text = value.is_string() ? value.get<std::string>() : "";
      std::string decoded(text.size(), '\0');
      if (!value.is_string() || text.size() % 4 != 0 ||
          EVP_DecodeBlock(reinterpret_cast<unsigned char*>(decoded.data()),
                          reinterpret_cast<const unsigned char*>(text.data()),
                          static_cast<int>(text.size())) < 0)
        return std::pair{400, "illegal base64 data in data[" + key + "]"};
    }
  }
  const std::string invalid = "Secret \"" + name + "\" is invalid: ";
  if (stored && (*stored)["type"] != secret["type"])
    return std::pair{
        422, invalid + "type: Invalid value: " + secret["type"].dump() + ": field is immutable"};
  if (secret["type"] == "kubernetes.io/tls")
    for (const char* key : {"tls.crt", "tls.key"})
      if (!secret.contains("data") || !secret["data"].contains(key))
        return std::pair{422, invalid + "data[" + key + "]: Required value"};
  return std::nullopt;
}

// A field selector (fields.ParseSelector, "=" and "==" terms, "," between them) matched against an
// Event's JSON: "involvedObject.name=x,reason=y". The value's backslash escapes are undone.
bool selected(const json& event, const std::string& selector) {
  size_t start = 0;
  while (start < selector.size()) {
    size_t end = start;
    std::string term;
    for (; end < selector.size() && selector[end] != ','; ++end) {
      if (selector[end] == '\\' && end + 1 < selector.size()) term += selector[end++];
      term += selector[end];
    }
    const size_t eq = term.find('=');
    if (eq == std::string::npos) return false;
    const std::string field = term.substr(0, eq);
    std::string value = term.substr(term[eq + 1] == '=' ? eq + 2 : eq + 1);
    std::string unescaped;
    for (size_t i = 0; i < value.size(); ++i) unescaped += value[i] == '\\' ? value[++i] : value[i];
    const json* at = &event;
    size_t from = 0;
    while (at && from <= field.size()) {
      const size_t dot = field.find('.', from);
      const std::string part = field.substr(from, dot == std::string::npos ? dot : dot - from);
      at = at->is_object() && at->contains(part) ? &(*at)[part] : nullptr;
      if (dot == std::string::npos) break;
      from = dot + 1;
    }
    const std::string actual = at && at->is_string() ? at->get<std::string>() : "";
    if (actual != unescaped) return false;
    start = end + 1;
  }
  return true;
}

// A JSON merge patch (RFC 7386). For the fields an Event's PATCH carries (count, lastTimestamp,
// message, series) a strategic merge patch means the same: none is a list with a merge key.
json merged(json target, const json& patch) {
  target.merge_patch(patch);
  return target;
}

}  // namespace

void FakeApiServer::Impl::serve_secrets() {
  const std::string one = R"(/api/v1/namespaces/([^/]+)/secrets/([^/]+))";
  auto not_found = [](httplib::Response& res, const std::string& name) {
    answer_status(res, 404, "secrets \"" + name + "\" not found", "NotFound",
                  {{"name", name}, {"kind", "secrets"}});
  };
  server->Get(one, [this, not_found](const httplib::Request& req, httplib::Response& res) {
    hold_if_asked();
    std::lock_guard lock(mutex);
    const auto it = secrets.find(req.matches[1].str() + "/" + req.matches[2].str());
    if (it == secrets.end()) return not_found(res, req.matches[2].str());
    res.set_content(it->second.dump(), "application/json");
  });
  server->Post(R"(/api/v1/namespaces/([^/]+)/secrets)", [this](const httplib::Request& req,
                                                               httplib::Response& res) {
    std::lock_guard lock(mutex);
    std::optional<json> decoded = decoded_body(req, res);
    if (!decoded) return;
    json body = std::move(*decoded);
    self.writes.push_back({"POST", req.path, body});
    const std::string ns = req.matches[1].str();
    if (!body["metadata"].is_object() || body["metadata"].value("name", "") == "")
      return answer_status(res, 422, "Secret \"\" is invalid: metadata.name: Required value",
                           "Invalid");
    if (body["metadata"].value("namespace", ns) != ns)
      return answer_status(res, 400,
                           "the namespace of the provided object does not match the namespace "
                           "sent on the request",
                           "BadRequest");
    body["metadata"]["namespace"] = ns;
    const std::string name = body["metadata"]["name"];
    if (auto refused = secret_refusal(body, nullptr))
      return answer_status(res, refused->first, refused->second,
                           refused->first == 422 ? "Invalid" : "BadRequest");
    if (secrets.count(ns + "/" + name))
      return answer_status(res, 409, "secrets \"" + name + "\" already exists", "AlreadyExists",
                           {{"name", name}, {"kind", "secrets"}});
    write_back::ServerFields fields;
    fields.uid = "secret-uid-" + std::to_string(last_version + 1);
    fields.resource_version = std::to_string(++last_version);
    fields.timestamp = write_back::rfc3339(now());
    Result<json> stored = write_back::write_back(body, nullptr, fields);
    if (!stored.is_ok()) return answer_status(res, 422, stored.status().message(), "Invalid");
    secrets[ns + "/" + name] = *stored;
    res.status = 201;
    res.set_content(stored->dump(), "application/json");
  });
  server->Put(one, [this, not_found](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard lock(mutex);
    std::optional<json> decoded = decoded_body(req, res);
    if (!decoded) return;
    json body = std::move(*decoded);
    self.writes.push_back({"PUT", req.path, body});
    const std::string ns = req.matches[1].str();
    const std::string name = req.matches[2].str();
    const auto it = secrets.find(ns + "/" + name);
    if (it == secrets.end()) return not_found(res, name);
    if (!body["metadata"].is_object() || body["metadata"].value("name", "") != name)
      return answer_status(
          res, 400,
          "the name of the object (" +
              (body["metadata"].is_object() ? body["metadata"].value("name", "") : std::string()) +
              ") does not match the name on the URL (" + name + ")",
          "BadRequest");
    const Status current = write_back::check_resource_version(body, it->second, name, "secrets");
    if (!current.is_ok())
      return answer_status(res, 409, current.message(), "Conflict",
                           {{"name", name}, {"kind", "secrets"}});
    if (auto refused = secret_refusal(body, &it->second))
      return answer_status(res, refused->first, refused->second,
                           refused->first == 422 ? "Invalid" : "BadRequest");
    write_back::ServerFields fields;
    fields.resource_version = std::to_string(++last_version);
    fields.timestamp = write_back::rfc3339(now());
    Result<json> stored = write_back::write_back(body, &it->second, fields);
    if (!stored.is_ok()) return answer_status(res, 422, stored.status().message(), "Invalid");
    it->second = *stored;
    res.set_content(stored->dump(), "application/json");
  });
}

void FakeApiServer::Impl::serve_webhook_configurations() {
  const std::string one =
      R"(/apis/admissionregistration\.k8s\.io/v1/(mutatingwebhookconfigurations|validatingwebhookconfigurations)/([^/]+))";
  auto not_found = [](httplib::Response& res, const std::string& resource,
                      const std::string& name) {
    answer_status(res, 404, resource + ".admissionregistration.k8s.io \"" + name + "\" not found",
                  "NotFound",
                  {{"name", name}, {"group", "admissionregistration.k8s.io"}, {"kind", resource}});
  };
  server->Get(one, [this, not_found](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard lock(mutex);
    const auto it = webhook_configurations.find(req.matches[1].str() + "/" + req.matches[2].str());
    if (it == webhook_configurations.end())
      return not_found(res, req.matches[1].str(), req.matches[2].str());
    res.set_content(it->second.dump(), "application/json");
  });
  server->Patch(one, [this, not_found](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard lock(mutex);
    const std::string resource = req.matches[1].str();
    const std::string name = req.matches[2].str();
    const std::string type = req.get_header_value("Content-Type");
    json patch = json::parse(req.body, nullptr, false);
    self.writes.push_back({"PATCH", req.path, patch});
    if (type != "application/json-patch+json" && type != "application/merge-patch+json")
      return answer_status(res, 415,
                           "the body of the request was in an unknown format - accepted media "
                           "types include: application/json-patch+json, "
                           "application/merge-patch+json, application/apply-patch+yaml",
                           "UnsupportedMediaType");
    const auto it = webhook_configurations.find(resource + "/" + name);
    if (it == webhook_configurations.end()) return not_found(res, resource, name);
    const bool json_patch = type == "application/json-patch+json";
    if (patch.is_discarded() || (json_patch ? !patch.is_array() : !patch.is_object()))
      return answer_status(res, 400, "the patch does not decode", "BadRequest");
    json patched;
    try {
      patched = json_patch ? it->second.patch(patch) : it->second;
      if (!json_patch) patched.merge_patch(patch);
    } catch (const json::exception& e) {
      return answer_status(res, 422, e.what());
    }
    // caBundle is []byte: base64 in JSON, or the body does not decode.
    for (const json& webhook : patched.value("webhooks", json::array())) {
      const json client = webhook.value("clientConfig", json::object());
      if (!client.contains("caBundle")) continue;
      const std::string text =
          client["caBundle"].is_string() ? client["caBundle"].get<std::string>() : std::string("?");
      std::string decoded(text.size(), '\0');
      if (text.size() % 4 != 0 ||
          EVP_DecodeBlock(reinterpret_cast<unsigned char*>(decoded.data()),
                          reinterpret_cast<const unsigned char*>(text.data()),
                          static_cast<int>(text.size())) < 0)
        return answer_status(res, 400, "illegal base64 data in clientConfig.caBundle",
                             "BadRequest");
    }
    const Status current = write_back::check_resource_version(
        patched, it->second, name, resource + ".admissionregistration.k8s.io");
    if (!current.is_ok()) return answer_status(res, 409, current.message(), "Conflict");
    write_back::ServerFields fields;
    fields.resource_version = std::to_string(++last_version);
    fields.timestamp = write_back::rfc3339(now());
    Result<json> stored = write_back::write_back(patched, &it->second, fields);
    if (!stored.is_ok()) return answer_status(res, 422, stored.status().message(), "Invalid");
    it->second = *stored;
    res.set_content(stored->dump(), "application/json");
  });
}

// core/v1 Events as kube-apiserver serves them: create (the body's namespace defaulted to the
// request's), PATCH (merge and strategic merge patches; other media types 415), GET and LIST
// with a field selector (as `kubectl describe` lists a pod's Events). Each write passes the
// Event rules (event_rules.h) and is stored with the server's uid, resourceVersion and
// creationTimestamp.
void FakeApiServer::Impl::serve_events() {
  server->Post(R"(/api/v1/namespaces/([^/]+)/events)",
               [this](const httplib::Request& req, httplib::Response& res) {
                 std::lock_guard lock(mutex);
                 std::optional<json> decoded = decoded_body(req, res);
                 if (!decoded) return;
                 json body = std::move(*decoded);
                 self.writes.push_back({"POST", req.path, body});
                 const std::string ns = req.matches[1].str();
                 if (!body.contains("metadata") || !body["metadata"].is_object())
                   body["metadata"] = json::object();
                 if (body["metadata"].value("namespace", "").empty())
                   body["metadata"]["namespace"] = ns;
                 if (auto refused = apiserver::check_event_write(body, nullptr, ns))
                   return refuse(res, *refused);
                 const std::string name = body["metadata"]["name"];
                 if (events.count(ns + "/" + name))
                   return answer_status(res, 409, "events \"" + name + "\" already exists",
                                        "AlreadyExists", {{"name", name}, {"kind", "events"}});
                 write_back::ServerFields fields;
                 fields.uid = "event-uid-" + std::to_string(last_version + 1);
                 fields.resource_version = std::to_string(++last_version);
                 fields.timestamp = write_back::rfc3339(now());
                 body["metadata"].erase("creationTimestamp");  // the server's, on create
                 Result<json> stored = write_back::write_back(body, nullptr, fields);
                 if (!stored.is_ok()) return answer_status(res, 422, stored.status().message());
                 events[ns + "/" + name] = *stored;
                 res.status = 201;
                 res.set_content(stored->dump(), "application/json");
               });
  server->Patch(R"(/api/v1/namespaces/([^/]+)/events/([^/]+))", [this](const httplib::Request& req,
                                                                       httplib::Response& res) {
    std::lock_guard lock(mutex);
    const std::string type = req.get_header_value("Content-Type");
    if (type != "application/merge-patch+json" && type != "application/strategic-merge-patch+json")
      return answer_status(res, 415,
                           "the body of the request was in an unknown format - accepted media "
                           "types include: application/json-patch+json, "
                           "application/merge-patch+json, application/apply-patch+yaml, "
                           "application/strategic-merge-patch+json",
                           "UnsupportedMediaType");
    std::optional<json> decoded = decoded_body(req, res);
    if (!decoded) return;
    self.writes.push_back({"PATCH", req.path, *decoded});
    const std::string ns = req.matches[1].str(), name = req.matches[2].str();
    const auto it = events.find(ns + "/" + name);
    if (it == events.end())
      return answer_status(res, 404, "events \"" + name + "\" not found", "NotFound",
                           {{"name", name}, {"kind", "events"}});
    json patched = merged(it->second, *decoded);
    const Status current = write_back::check_resource_version(patched, it->second, name, "events");
    if (!current.is_ok())
      return answer_status(res, 409, current.message(), "Conflict",
                           {{"name", name}, {"kind", "events"}});
    if (auto refused = apiserver::check_event_write(patched, &it->second, ns))
      return refuse(res, *refused);
    write_back::ServerFields fields;
    fields.resource_version = std::to_string(++last_version);
    fields.timestamp = write_back::rfc3339(now());
    Result<json> stored = write_back::write_back(patched, &it->second, fields);
    if (!stored.is_ok()) return answer_status(res, 422, stored.status().message());
    it->second = *stored;
    res.set_content(stored->dump(), "application/json");
  });
  server->Get(R"(/api/v1/namespaces/([^/]+)/events/([^/]+))", [this](const httplib::Request& req,
                                                                     httplib::Response& res) {
    std::lock_guard lock(mutex);
    const auto it = events.find(req.matches[1].str() + "/" + req.matches[2].str());
    if (it == events.end())
      return answer_status(res, 404, "events \"" + req.matches[2].str() + "\" not found",
                           "NotFound", {{"name", req.matches[2].str()}, {"kind", "events"}});
    res.set_content(it->second.dump(), "application/json");
  });
  server->Get(R"(/api/v1/namespaces/([^/]+)/events)", [this](const httplib::Request& req,
                                                             httplib::Response& res) {
    std::lock_guard lock(mutex);
    const std::string ns = req.matches[1].str();
    const std::string selector = req.get_param_value("fieldSelector");
    json items = json::array();
    for (const auto& [key, event] : events)
      if (key.starts_with(ns + "/") && selected(event, selector)) items.push_back(event);
    res.set_content(json{{"apiVersion", "v1"},
                         {"kind", "EventList"},
                         {"metadata", {{"resourceVersion", std::to_string(last_version)}}},
                         {"items", items}}
                        .dump(),
                    "application/json");
  });
}

FakeApiServer::FakeApiServer(std::string token)
    : impl_(std::make_unique<Impl>(*this, std::move(token))) {
  Impl& impl = *impl_;
  impl.make_certificate();
  impl.node_version = std::to_string(++impl.last_version);
  impl.node_created = write_back::rfc3339(impl.now());
  impl.server = std::make_unique<httplib::SSLServer>(impl.certificate, impl.private_key);
  impl.server->set_pre_routing_handler(
      [&impl](const httplib::Request& req, httplib::Response& res) {
        std::lock_guard lock(impl.mutex);
        ++impl.requests;
        if (impl.fail_next > 0) {
          --impl.fail_next;
          answer_status(res, 503, "the server is currently unable to handle the request");
          // The request's body is not read before routing: the connection must not be reused,
          // or the next request on it starts with that body (and is answered 400).
          res.set_header("Connection", "close");
          return httplib::Server::HandlerResponse::Handled;
        }
        if (req.get_header_value("Authorization") != "Bearer " + impl.token) {
          answer_status(res, 401, "Unauthorized");
          return httplib::Server::HandlerResponse::Handled;
        }
        return httplib::Server::HandlerResponse::Unhandled;
      });
  impl.serve_claims();
  impl.serve_claim_lists();
  impl.serve_node();
  impl.serve_slices();
  impl.serve_secrets();
  impl.serve_webhook_configurations();
  impl.serve_events();
  impl.server->set_tcp_nodelay(true);  // as the API server: no 40 ms delayed-ACK stalls
  impl.port = impl.server->bind_to_any_port("127.0.0.1");
  impl.thread = std::thread([&impl] { impl.server->listen_after_bind(); });
  // stop() only stops a server that is running: wait for the accept loop before returning.
  while (!impl.server->is_running()) std::this_thread::yield();
}

FakeApiServer::~FakeApiServer() {
  impl_->server->stop();
  impl_->thread.join();
  impl_->server.reset();
  X509_free(impl_->certificate);
  EVP_PKEY_free(impl_->private_key);
}

std::string FakeApiServer::url() const {
  return "https://127.0.0.1:" + std::to_string(impl_->port);
}
const std::string& FakeApiServer::ca_pem() const {
  return impl_->ca_pem;
}
const std::string& FakeApiServer::token() const {
  return impl_->token;
}

kube::KubeConnection FakeApiServer::connection() const {
  kube::KubeConnection c;
  c.server = url();
  c.ca_pem = impl_->ca_pem;
  c.token = impl_->token;
  return c;
}

void FakeApiServer::add_claim(const std::string& ns, const std::string& name,
                              const std::string& text) {
  std::lock_guard lock(impl_->mutex);
  impl_->claims[ns + "/" + name] = text;
  const json claim = json::parse(text, nullptr, false);
  if (!claim.is_object() || claim.value("kind", "") != "ResourceClaim" ||
      !claim.contains("metadata") || !claim["metadata"].is_object())
    return;
  write_back::ServerFields fields;
  fields.uid = claim["metadata"].value("uid", "");
  fields.resource_version = std::to_string(++impl_->last_version);
  fields.timestamp = claim["metadata"].value("creationTimestamp", "");
  Result<json> created = write_back::write_back(claim, nullptr, fields);
  if (!created.is_ok()) return;
  Result<json> stored =
      write_back::write_back_status(claim, *created, std::to_string(++impl_->last_version),
                                    {"kube-scheduler", write_back::rfc3339(impl_->now())});
  if (stored.is_ok()) impl_->claims[ns + "/" + name] = stored->dump();
}

void FakeApiServer::delete_claim(const std::string& ns, const std::string& name) {
  std::lock_guard lock(impl_->mutex);
  impl_->claims.erase(ns + "/" + name);
}

bool FakeApiServer::set_reserved_pods(
    const std::string& ns, const std::string& name,
    const std::vector<std::pair<std::string, std::string>>& pods) {
  std::lock_guard lock(impl_->mutex);
  const auto it = impl_->claims.find(ns + "/" + name);
  if (it == impl_->claims.end()) return false;
  const json stored = json::parse(it->second, nullptr, false);
  if (!stored.is_object() || stored.value("kind", "") != "ResourceClaim" ||
      !stored.contains("metadata") || !stored["metadata"].is_object())
    return false;
  json reserved = json::array();
  for (const auto& [pod, uid] : pods)
    reserved.push_back({{"resource", "pods"}, {"name", pod}, {"uid", uid}});
  json posted = stored;
  posted["status"]["reservedFor"] = reserved;
  const Result<json> updated =
      write_back::write_back_status(posted, stored, std::to_string(++impl_->last_version),
                                    {"kube-scheduler", write_back::rfc3339(impl_->now())});
  if (!updated.is_ok()) return false;
  it->second = updated->dump();
  return true;
}

void FakeApiServer::add_webhook_configuration(const std::string& resource, const json& object) {
  std::lock_guard lock(impl_->mutex);
  write_back::ServerFields fields;
  fields.uid = "webhook-configuration-uid-" + std::to_string(impl_->last_version + 1);
  fields.resource_version = std::to_string(++impl_->last_version);
  fields.timestamp = write_back::rfc3339(impl_->now());
  fields.manager = "helm";
  Result<json> stored = write_back::write_back(object, nullptr, fields);
  if (stored.is_ok())
    impl_->webhook_configurations[resource + "/" + object["metadata"].value("name", "")] = *stored;
}

json FakeApiServer::webhook_configuration(const std::string& resource, const std::string& name) {
  std::lock_guard lock(impl_->mutex);
  const auto it = impl_->webhook_configurations.find(resource + "/" + name);
  return it == impl_->webhook_configurations.end() ? json() : it->second;
}

json FakeApiServer::secret(const std::string& ns, const std::string& name) {
  std::lock_guard lock(impl_->mutex);
  const auto it = impl_->secrets.find(ns + "/" + name);
  return it == impl_->secrets.end() ? json() : it->second;
}

void FakeApiServer::put_secret(const std::string& ns, const json& object) {
  std::lock_guard lock(impl_->mutex);
  json body = object;
  write_back::ServerFields fields;
  fields.uid = "secret-uid-" + std::to_string(impl_->last_version + 1);
  fields.resource_version = std::to_string(++impl_->last_version);
  fields.timestamp = write_back::rfc3339(impl_->now());
  const std::string key = ns + "/" + body["metadata"].value("name", "");
  const auto it = impl_->secrets.find(key);
  Result<json> stored =
      write_back::write_back(body, it == impl_->secrets.end() ? nullptr : &it->second, fields);
  if (stored.is_ok()) impl_->secrets[key] = *stored;
}

void FakeApiServer::hold_secret_reads(int count) {
  std::lock_guard lock(impl_->hold_mutex);
  impl_->hold_count = count;
  impl_->hold_waiting = 0;
}

void FakeApiServer::fail_next(int n) {
  std::lock_guard lock(impl_->mutex);
  impl_->fail_next = n;
}

int FakeApiServer::requests() {
  std::lock_guard lock(impl_->mutex);
  return impl_->requests;
}

int FakeApiServer::claim_gets(const std::string& ns, const std::string& name) {
  std::lock_guard lock(impl_->mutex);
  const auto it = impl_->claim_gets.find(ns + "/" + name);
  return it == impl_->claim_gets.end() ? 0 : it->second;
}

int FakeApiServer::claim_cache_gets(const std::string& ns, const std::string& name) {
  std::lock_guard lock(impl_->mutex);
  const auto it = impl_->claim_cache_gets.find(ns + "/" + name);
  return it == impl_->claim_cache_gets.end() ? 0 : it->second;
}

std::vector<RecordedWrite> FakeApiServer::take_writes() {
  std::lock_guard lock(impl_->mutex);
  return std::exchange(writes, {});
}

std::map<std::string, json> FakeApiServer::stored_slices() {
  std::lock_guard lock(impl_->mutex);
  return slices;
}

void FakeApiServer::set_time(std::time_t when) {
  impl_->time.store(when);
}

std::vector<json> FakeApiServer::stored_events(const std::string& ns) {
  std::lock_guard lock(impl_->mutex);
  std::vector<json> out;
  for (const auto& [key, event] : impl_->events)
    if (key.starts_with(ns + "/")) out.push_back(event);
  return out;
}

void FakeApiServer::delete_event(const std::string& ns, const std::string& name) {
  std::lock_guard lock(impl_->mutex);
  impl_->events.erase(ns + "/" + name);
}

void FakeApiServer::delete_slices() {
  std::lock_guard lock(impl_->mutex);
  slices.clear();
}

}  // namespace tessera::agent::testing

namespace tessera::agent::testing {

std::string FakeApiServer::add_slice(const json& slice) {
  std::lock_guard lock(impl_->mutex);
  json body = slice;
  apiserver::default_resource_slice(body, impl_->now());
  if (auto refused = apiserver::check_resource_slice_write(body, nullptr))
    return refused->status.value("message", "refused");
  const std::string name = body["metadata"]["name"];
  if (slices.count(name)) return "already exists";
  write_back::ServerFields fields;
  fields.uid = "slice-uid-" + name;
  fields.resource_version = std::to_string(++impl_->last_version);
  fields.timestamp = write_back::rfc3339(impl_->now());
  Result<json> stored = write_back::write_back(body, nullptr, fields);
  if (!stored.is_ok()) return stored.status().message();
  slices[name] = *stored;
  return "";
}

bool FakeApiServer::remove_slice(const std::string& name) {
  std::lock_guard lock(impl_->mutex);
  return slices.erase(name) > 0;
}

void FakeApiServer::set_node_status(const json& status) {
  std::lock_guard lock(impl_->mutex);
  node_status = status;
}

std::vector<json> FakeApiServer::stored_events() {
  std::lock_guard lock(impl_->mutex);
  std::vector<json> out;
  for (const auto& [key, event] : impl_->events) out.push_back(event);
  return out;
}

}  // namespace tessera::agent::testing

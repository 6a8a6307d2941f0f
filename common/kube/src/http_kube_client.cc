#include "tessera/kube/http_kube_client.h"

#include <curl/curl.h>
#include <openssl/evp.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

namespace tessera::kube {
namespace {

bool read_file(const std::string& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::stringstream text;
  text << in.rdbuf();
  out = text.str();
  return true;
}

bool base64_decode(const std::string& text, std::string& out) {
  std::string clean;
  for (char c : text)
    if (c != '\n' && c != '\r' && c != ' ') clean += c;
  if (clean.size() % 4 != 0) return false;
  std::string decoded(clean.size() / 4 * 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(decoded.data()),
                                reinterpret_cast<const unsigned char*>(clean.data()),
                                static_cast<int>(clean.size()));
  if (n < 0) return false;
  size_t length = static_cast<size_t>(n);
  if (!clean.empty() && clean.back() == '=') --length;
  if (clean.size() > 1 && clean[clean.size() - 2] == '=') --length;
  decoded.resize(length);
  out = decoded;
  return true;
}

size_t collect(char* data, size_t size, size_t count, void* target) {
  static_cast<std::string*>(target)->append(data, size * count);
  return size * count;
}

struct GlobalCurl {
  GlobalCurl() { curl_global_init(CURL_GLOBAL_DEFAULT); }
};

// The API's Status.message when the body is one, else the body's start.
std::string api_message(const std::string& body) {
  const auto json = nlohmann::json::parse(body, nullptr, false);
  if (json.is_object() && json.contains("message") && json["message"].is_string())
    return json["message"].get<std::string>();
  return body.substr(0, 200);
}

}  // namespace

std::string url_escape(const std::string& text) {
  static GlobalCurl global;
  // Since libcurl 7.82 the handle argument is unused: no easy handle needed.
  char* escaped = curl_easy_escape(nullptr, text.data(), static_cast<int>(text.size()));
  if (!escaped) return "";
  std::string out = escaped;
  curl_free(escaped);
  return out;
}

Result<KubeConnection> in_cluster_connection(const std::string& service_account_dir) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (!host || !*host || !port || !*port)
    return failed_precondition(
        "not in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set");
  KubeConnection out;
  const std::string h = host;
  out.server = "https://" + (h.find(':') != std::string::npos ? "[" + h + "]" : h) + ":" + port;
  if (!read_file(service_account_dir + "/ca.crt", out.ca_pem))
    return not_found("cannot read " + service_account_dir + "/ca.crt");
  out.token_file = service_account_dir + "/token";
  if (!read_file(out.token_file, out.token)) return not_found("cannot read " + out.token_file);
  return out;
}

Result<KubeConnection> kubeconfig_connection(const std::string& path) {
  KubeConnection out;
  try {
    const YAML::Node config = YAML::LoadFile(path);
    const std::string base =
        path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
    auto resolve = [&](const std::string& file) {
      return file.empty() || file[0] == '/' ? file : base + "/" + file;
    };
    const std::string current = config["current-context"].as<std::string>("");
    if (current.empty()) return invalid_argument(path + ": no current-context");
    auto find = [&](const char* list, const std::string& name) -> YAML::Node {
      for (const auto& item : config[list])
        if (item["name"].as<std::string>("") == name) return item;
      return YAML::Node();
    };
    const YAML::Node context = find("contexts", current)["context"];
    if (!context) return invalid_argument(path + ": context " + current + " not found");
    const YAML::Node cluster = find("clusters", context["cluster"].as<std::string>(""))["cluster"];
    if (!cluster) return invalid_argument(path + ": cluster of context " + current + " not found");
    const YAML::Node user = find("users", context["user"].as<std::string>(""))["user"];
    out.server = cluster["server"].as<std::string>("");
    if (out.server.rfind("https://", 0) != 0)
      return invalid_argument(path + ": server must be https://, got " + out.server);
    if (cluster["insecure-skip-tls-verify"].as<bool>(false))
      return invalid_argument(
          path + ": insecure-skip-tls-verify is not supported (TLS is always verified)");
    // A PEM as kubeconfig gives it: base64 in `<key>-data`, else the file `<key>`, else none
    // (pem unchanged).
    auto read_pem = [&](const YAML::Node& node, const std::string& key, std::string& pem) {
      if (auto data = node[key + "-data"].as<std::string>(""); !data.empty())
        return base64_decode(data, pem)
                   ? Status::ok()
                   : invalid_argument(path + ": " + key + "-data is not base64");
      if (auto file = node[key].as<std::string>(""); !file.empty())
        return read_file(resolve(file), pem)
                   ? Status::ok()
                   : invalid_argument(path + ": cannot read " + resolve(file));
      return Status::ok();
    };
    if (cluster["certificate-authority-data"].as<std::string>("").empty() &&
        cluster["certificate-authority"].as<std::string>("").empty())
      return invalid_argument(path + ": the cluster has no certificate-authority(-data)");
    TESSERA_RETURN_IF_ERROR(read_pem(cluster, "certificate-authority", out.ca_pem));
    if (user) {
      out.token = user["token"].as<std::string>("");
      if (auto file = user["tokenFile"].as<std::string>(""); !file.empty())
        out.token_file = resolve(file);
      TESSERA_RETURN_IF_ERROR(read_pem(user, "client-certificate", out.client_cert_pem));
      TESSERA_RETURN_IF_ERROR(read_pem(user, "client-key", out.client_key_pem));
    }
  } catch (const std::exception& e) {
    return invalid_argument(path + ": " + e.what());
  }
  return out;
}

HttpKubeClient::HttpKubeClient(KubeConnection connection, RetryPolicy retry)
    : connection_(std::move(connection)), retry_(retry) {
  static GlobalCurl global;
  curl_ = curl_easy_init();
}

HttpKubeClient::~HttpKubeClient() {
  if (curl_) curl_easy_cleanup(static_cast<CURL*>(curl_));
}

Result<ApiResponse> HttpKubeClient::once(const std::string& method, const std::string& path,
                                         const std::string& body) {
  ApiResponse response;
  CURL* curl = static_cast<CURL*>(curl_);
  if (!curl) return internal_error("curl_easy_init failed");
  curl_easy_reset(curl);
  const std::string url = connection_.server + path;
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(retry_.timeout.count() * 1000));
  curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 1L);
  curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 2L);
  curl_blob ca{const_cast<char*>(connection_.ca_pem.data()), connection_.ca_pem.size(),
               CURL_BLOB_COPY};
  curl_easy_setopt(curl, CURLOPT_CAINFO_BLOB, &ca);
  curl_blob cert{const_cast<char*>(connection_.client_cert_pem.data()),
                 connection_.client_cert_pem.size(), CURL_BLOB_COPY};
  curl_blob key{const_cast<char*>(connection_.client_key_pem.data()),
                connection_.client_key_pem.size(), CURL_BLOB_COPY};
  if (!connection_.client_cert_pem.empty()) {
    curl_easy_setopt(curl, CURLOPT_SSLCERTTYPE, "PEM");
    curl_easy_setopt(curl, CURLOPT_SSLCERT_BLOB, &cert);
    curl_easy_setopt(curl, CURLOPT_SSLKEYTYPE, "PEM");
    curl_easy_setopt(curl, CURLOPT_SSLKEY_BLOB, &key);
  }
  std::string token = connection_.token;
  if (!connection_.token_file.empty()) read_file(connection_.token_file, token);
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  curl_slist* headers = nullptr;
  headers = curl_slist_append(headers, "Accept: application/json");
  // A PATCH is a strategic merge patch (what client-go sends for Events); kube-apiserver answers
  // 415 to a PATCH sent as application/json.
  if (!body.empty())
    headers = curl_slist_append(
        headers, method == "PATCH" ? "Content-Type: application/strategic-merge-patch+json"
                                   : "Content-Type: application/json");
  const std::string authorization = "Authorization: Bearer " + token;
  if (!token.empty()) headers = curl_slist_append(headers, authorization.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  if (!body.empty()) {
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  }
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, collect);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &response.body);
  const CURLcode code = curl_easy_perform(curl);
  curl_slist_free_all(headers);
  ++tries_;
  if (code != CURLE_OK) return unavailable(method + " " + path + ": " + curl_easy_strerror(code));
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.status);
  if (response.status < 200 || response.status >= 300)
    return Status(code_for_http_status(response.status), method + " " + path + ": HTTP " +
                                                             std::to_string(response.status) +
                                                             ": " + api_message(response.body));
  return response;
}

Result<ApiResponse> HttpKubeClient::request(const std::string& method, const std::string& path,
                                            const std::string& body) {
  std::lock_guard lock(mutex_);
  auto backoff = retry_.initial_backoff;
  Result<ApiResponse> response = internal_error("no try made");
  for (int attempt = 1; attempt <= std::max(1, retry_.attempts); ++attempt) {
    response = once(method, path, body);
    // kUnavailable: no answer, 429 or 5xx; retrying may help.
    const bool retryable = response.status().code() == StatusCode::kUnavailable;
    if (response.is_ok() || !retryable) return response;
    if (attempt < retry_.attempts) {
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, retry_.max_backoff);
    }
  }
  if (retry_.attempts > 1)
    return Status(response.status().code(), response.status().message() + " (after " +
                                                std::to_string(retry_.attempts) + " tries)");
  return response;
}

}  // namespace tessera::kube

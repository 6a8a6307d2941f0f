#include "server/serving_certificate.h"

#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>

#include <ctime>
#include <memory>
#include <optional>
#include <utility>

#include "core/base64.h"
#include "tessera/log.h"

namespace tessera::webhook {
namespace {

using nlohmann::json;
using std::chrono::system_clock;

struct BioDeleter {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
struct StoreDeleter {
  void operator()(X509_STORE* store) const { X509_STORE_free(store); }
};
struct StoreContextDeleter {
  void operator()(X509_STORE_CTX* context) const { X509_STORE_CTX_free(context); }
};
using X509Ptr = std::unique_ptr<X509, X509Deleter>;
using KeyPtr = std::unique_ptr<EVP_PKEY, KeyDeleter>;

std::string openssl_error() {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return "no detail from OpenSSL";
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  return text;
}

std::time_t to_time_t(system_clock::time_point when) {
  return system_clock::to_time_t(when);
}

// An ASN1_TIME as seconds since the epoch; nullopt when it does not parse.
std::optional<std::time_t> seconds_of(const ASN1_TIME* time) {
  std::tm parts{};
  if (ASN1_TIME_to_tm(time, &parts) != 1) return std::nullopt;
  return timegm(&parts);
}

std::string pem_of(X509* cert) {
  std::unique_ptr<BIO, BioDeleter> bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_X509(bio.get(), cert);
  char* data = nullptr;
  const long length = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(length));
}

std::string pem_of(EVP_PKEY* key) {
  std::unique_ptr<BIO, BioDeleter> bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  const long length = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(length));
}

// Every certificate in `pem` (none when it holds none).
std::vector<X509Ptr> certificates_of(const std::string& pem) {
  std::vector<X509Ptr> out;
  std::unique_ptr<BIO, BioDeleter> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr))
    out.emplace_back(cert);
  ERR_clear_error();  // the loop ends on "no start line"
  return out;
}

Status add_extension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX context;
  X509V3_set_ctx_nodb(&context);
  X509V3_set_ctx(&context, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* extension = X509V3_EXT_conf_nid(nullptr, &context, nid, value);
  if (!extension)
    return internal_error(std::string("X509 extension ") + value + ": " + openssl_error());
  const int added = X509_add_ext(cert, extension, -1);
  X509_EXTENSION_free(extension);
  return added == 1 ? Status::ok() : internal_error("X509_add_ext: " + openssl_error());
}

// A certificate for `key`, named `common_name`, valid over [not_before, not_after], with a random
// 127-bit serial; signed by `issuer_key` (itself when `issuer` is null).
Result<X509Ptr> new_certificate(EVP_PKEY* key, const std::string& common_name,
                                std::time_t not_before, std::time_t not_after, X509* issuer,
                                EVP_PKEY* issuer_key,
                                const std::vector<std::pair<int, std::string>>& extensions) {
  X509Ptr cert(X509_new());
  if (!cert) return internal_error("X509_new: " + openssl_error());
  X509_set_version(cert.get(), 2);
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof(serial)) != 1) return internal_error("RAND_bytes failed");
  serial[0] &= 0x7f;  // positive
  BIGNUM* number = BN_bin2bn(serial, sizeof(serial), nullptr);
  BN_to_ASN1_INTEGER(number, X509_get_serialNumber(cert.get()));
  BN_free(number);
  ASN1_TIME_set(X509_getm_notBefore(cert.get()), not_before);
  ASN1_TIME_set(X509_getm_notAfter(cert.get()), not_after);
  X509_set_pubkey(cert.get(), key);
  X509_NAME* subject = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1,
                             0);
  X509_set_issuer_name(cert.get(), issuer ? X509_get_subject_name(issuer) : subject);
  for (const auto& [nid, value] : extensions)
    TESSERA_RETURN_IF_ERROR(
        add_extension(cert.get(), issuer ? issuer : cert.get(), nid, value.c_str()));
  if (X509_sign(cert.get(), issuer_key, EVP_sha256()) <= 0)
    return internal_error("X509_sign: " + openssl_error());
  return cert;
}

Result<std::string> base64_decode(const std::string& text, const std::string& field) {
  if (text.size() % 4 != 0)
    return invalid_argument(field + ": not base64 (length " + std::to_string(text.size()) + ")");
  std::string out(text.size() / 4 * 3, '\0');
  const int length = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                     reinterpret_cast<const unsigned char*>(text.data()),
                                     static_cast<int>(text.size()));
  if (length < 0) return invalid_argument(field + ": not base64");
  size_t padding = 0;
  for (size_t i = text.size(); i > 0 && text[i - 1] == '=' && padding < 2; --i) ++padding;
  out.resize(static_cast<size_t>(length) - padding);
  return out;
}

// The Secret's three PEMs; an error names the missing or undecodable key.
Result<CertificatePems> pems_of_secret(const json& secret) {
  const json data = secret.value("data", json::object());
  if (!data.is_object()) return invalid_argument("data: not an object");
  CertificatePems pems;
  for (auto [key, target] : {std::pair{"ca.crt", &pems.ca}, std::pair{"tls.crt", &pems.cert},
                             std::pair{"tls.key", &pems.key}}) {
    if (!data.contains(key) || !data[key].is_string())
      return invalid_argument(std::string("data.") + key + ": missing");
    TESSERA_ASSIGN_OR_RETURN(std::string decoded, base64_decode(data[key].get<std::string>(), key));
    *target = std::move(decoded);
  }
  return pems;
}

std::string secret_name_of(const ServingCertificateSettings& settings) {
  return settings.secret_namespace + "/" + settings.secret_name;
}

std::string secrets_path(const ServingCertificateSettings& settings) {
  return "/api/v1/namespaces/" + kube::url_escape(settings.secret_namespace) + "/secrets";
}

std::string secret_path(const ServingCertificateSettings& settings) {
  return "/api/v1/namespaces/" + kube::url_escape(settings.secret_namespace) + "/secrets/" +
         kube::url_escape(settings.secret_name);
}

}  // namespace

std::string merged_ca_bundle(const std::string& ours, const std::string& current,
                             system_clock::time_point now) {
  std::string out;
  std::vector<X509Ptr> kept = certificates_of(ours);
  for (const X509Ptr& ca : kept) out += pem_of(ca.get());
  const std::time_t at = to_time_t(now);
  for (X509Ptr& ca : certificates_of(current)) {
    const std::optional<std::time_t> end = seconds_of(X509_get0_notAfter(ca.get()));
    if (!end || *end <= at) continue;
    bool known = false;
    for (const X509Ptr& other : kept) known = known || X509_cmp(ca.get(), other.get()) == 0;
    if (known) continue;
    out += pem_of(ca.get());
    kept.push_back(std::move(ca));
  }
  return out;
}

std::vector<std::string> service_dns_names(const std::string& service, const std::string& ns) {
  return {service, service + "." + ns, service + "." + ns + ".svc",
          service + "." + ns + ".svc.cluster.local"};
}

Result<CertificatePems> generate_serving_certificate(const std::vector<std::string>& dns_names,
                                                     std::chrono::seconds validity,
                                                     system_clock::time_point now,
                                                     const std::string& previous_ca) {
  if (dns_names.empty()) return invalid_argument("no DNS name to certify");
  if (validity < std::chrono::hours(1))
    return invalid_argument("certificate validity " + std::to_string(validity.count()) +
                            " s: at least an hour");
  const std::time_t not_before = to_time_t(now - std::chrono::hours(1));
  const std::time_t not_after = to_time_t(now + validity);
  KeyPtr ca_key(EVP_EC_gen("P-256"));
  KeyPtr leaf_key(EVP_EC_gen("P-256"));
  if (!ca_key || !leaf_key) return internal_error("EVP_EC_gen: " + openssl_error());
  // The CA's name carries its start time: a renewed CA and the one it follows differ by name,
  // as well as by key identifier, when both are in ca.crt.
  const std::string ca_name = dns_names.front() + "-ca@" + std::to_string(to_time_t(now));
  TESSERA_ASSIGN_OR_RETURN(
      X509Ptr ca,
      new_certificate(ca_key.get(), ca_name, not_before, not_after, nullptr, ca_key.get(),
                      {{NID_basic_constraints, "critical,CA:TRUE,pathlen:0"},
                       {NID_key_usage, "critical,keyCertSign,cRLSign"},
                       {NID_subject_key_identifier, "hash"}}));
  std::string alt_names;
  for (const std::string& name : dns_names)
    alt_names += (alt_names.empty() ? "DNS:" : ",DNS:") + name;
  const std::string common_name = dns_names.size() > 2 ? dns_names[2] : dns_names.front();
  TESSERA_ASSIGN_OR_RETURN(
      X509Ptr leaf,
      new_certificate(leaf_key.get(), common_name, not_before, not_after, ca.get(), ca_key.get(),
                      {{NID_basic_constraints, "critical,CA:FALSE"},
                       {NID_key_usage, "critical,digitalSignature"},
                       {NID_ext_key_usage, "serverAuth"},
                       {NID_subject_alt_name, alt_names},
                       {NID_authority_key_identifier, "keyid:always"}}));
  CertificatePems out;
  out.ca = pem_of(ca.get());
  out.cert = pem_of(leaf.get());
  out.key = pem_of(leaf_key.get());
  // The CAs before it, while valid: a replica that has not yet taken the new pair is trusted.
  const std::time_t at = to_time_t(now);
  for (X509Ptr& previous : certificates_of(previous_ca)) {
    const std::optional<std::time_t> end = seconds_of(X509_get0_notAfter(previous.get()));
    if (end && *end > at) out.ca += pem_of(previous.get());
  }
  return out;
}

std::string unusable_reason(const CertificatePems& pems, const std::vector<std::string>& dns_names,
                            system_clock::time_point now) {
  Result<std::shared_ptr<const CertifiedKey>> pair =
      parse_certified_key(pems.cert, pems.key, "the Secret's");
  if (!pair.is_ok()) return pair.status().message();
  X509* leaf = (*pair)->leaf.get();
  for (const std::string& name : dns_names)
    if (X509_check_host(leaf, name.c_str(), name.size(), X509_CHECK_FLAG_NO_WILDCARDS, nullptr) !=
        1)
      return "tls.crt does not name " + name;
  const std::vector<X509Ptr> cas = certificates_of(pems.ca);
  if (cas.empty()) return "ca.crt holds no certificate";
  std::unique_ptr<X509_STORE, StoreDeleter> store(X509_STORE_new());
  for (const X509Ptr& ca : cas) X509_STORE_add_cert(store.get(), ca.get());
  std::unique_ptr<X509_STORE_CTX, StoreContextDeleter> context(X509_STORE_CTX_new());
  X509_STORE_CTX_init(context.get(), store.get(), leaf, nullptr);
  X509_VERIFY_PARAM_set_time(X509_STORE_CTX_get0_param(context.get()), to_time_t(now));
  X509_STORE_CTX_set_purpose(context.get(), X509_PURPOSE_SSL_SERVER);
  const int verified = X509_verify_cert(context.get());
  const int error = X509_STORE_CTX_get_error(context.get());
  ERR_clear_error();
  if (verified != 1)
    return std::string("tls.crt does not verify against ca.crt: ") +
           X509_verify_cert_error_string(error);
  const std::optional<std::time_t> start = seconds_of(X509_get0_notBefore(leaf));
  const std::optional<std::time_t> end = seconds_of(X509_get0_notAfter(leaf));
  if (!start || !end) return "tls.crt: unreadable validity";
  // Renewed with a third of its lifetime left: time for every replica to take the new one.
  const std::time_t renew_at = *end - (*end - *start) / 3;
  if (to_time_t(now) >= renew_at)
    return "tls.crt expires at " + std::to_string(*end) + ", renewed from " +
           std::to_string(renew_at);
  return "";
}

ServingCertificate::ServingCertificate(kube::KubeClient& api, ServingCertificateSettings settings,
                                       CertificateReloader& reloader, WallClock clock)
    : api_(api),
      settings_(std::move(settings)),
      dns_names_(service_dns_names(settings_.service_name, settings_.secret_namespace)),
      reloader_(reloader),
      clock_(std::move(clock)) {}

Result<json> ServingCertificate::read_secret() {
  TESSERA_ASSIGN_OR_RETURN(kube::ApiResponse response, api_.request("GET", secret_path(settings_)));
  json secret = json::parse(response.body, nullptr, false);
  if (!secret.is_object() || !secret.contains("metadata"))
    return internal_error("GET " + secret_path(settings_) + ": not a Secret");
  return secret;
}

Result<json> ServingCertificate::write_secret(const json* existing, const CertificatePems& pems) {
  // An update keeps what is there (type, labels, annotations) and replaces the data; the
  // resourceVersion read makes it conditional.
  json secret = existing
                    ? *existing
                    : json{{"apiVersion", "v1"},
                           {"kind", "Secret"},
                           {"type", "kubernetes.io/tls"},
                           {"metadata",
                            {{"name", settings_.secret_name},
                             {"namespace", settings_.secret_namespace},
                             {"labels", {{"app.kubernetes.io/managed-by", "tessera-webhook"}}}}}};
  if (existing) {
    json& metadata = secret["metadata"];
    metadata.erase("managedFields");
  }
  secret.erase("stringData");
  secret["data"] = {{"ca.crt", base64_encode(pems.ca)},
                    {"tls.crt", base64_encode(pems.cert)},
                    {"tls.key", base64_encode(pems.key)}};
  TESSERA_ASSIGN_OR_RETURN(kube::ApiResponse response,
                           existing ? api_.request("PUT", secret_path(settings_), secret.dump())
                                    : api_.request("POST", secrets_path(settings_), secret.dump()));
  json stored = json::parse(response.body, nullptr, false);
  if (!stored.is_object())
    return internal_error((existing ? "PUT " : "POST ") + secret_name_of(settings_) +
                          ": the answer is not a Secret");
  return stored;
}

Status ServingCertificate::patch_ca_bundle(bool mutating, const std::string& name,
                                           const std::string& ca_pem,
                                           system_clock::time_point now) {
  const std::string path =
      (mutating ? "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/"
                : "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/") +
      kube::url_escape(name);
  TESSERA_ASSIGN_OR_RETURN(kube::ApiResponse response, api_.request("GET", path));
  const json configuration = json::parse(response.body, nullptr, false);
  if (!configuration.is_object()) return internal_error("GET " + path + ": not an object");
  const json webhooks = configuration.value("webhooks", json::array());
  json patch = json::array();
  for (size_t i = 0; webhooks.is_array() && i < webhooks.size(); ++i) {
    const json& webhook = webhooks[i];
    if (!webhook.is_object() || !webhook.contains("clientConfig")) continue;
    const json& client = webhook["clientConfig"];
    // Only the webhooks that call this Service.
    const json service = client.value("service", json::object());
    if (!service.is_object() || service.value("name", "") != settings_.service_name ||
        service.value("namespace", "") != settings_.secret_namespace)
      continue;
    const std::string current = client.value("caBundle", "");
    Result<std::string> current_pem = base64_decode(current, "caBundle");
    const std::string wanted =
        base64_encode(merged_ca_bundle(ca_pem, current_pem.is_ok() ? *current_pem : "", now));
    if (current == wanted) continue;
    const std::string at = "/webhooks/" + std::to_string(i);
    // The index is the one read: a configuration changed since (a helm upgrade) fails the test
    // (422) and the next round reads it again.
    patch.push_back({{"op", "test"}, {"path", at + "/name"}, {"value", webhook.value("name", "")}});
    patch.push_back({{"op", "add"}, {"path", at + "/clientConfig/caBundle"}, {"value", wanted}});
  }
  if (patch.empty()) return Status::ok();
  TESSERA_ASSIGN_OR_RETURN(kube::ApiResponse patched, api_.request("PATCH", path, patch.dump()));
  std::lock_guard lock(mutex_);
  ++counts_.patched;
  return Status::ok();
}

Status ServingCertificate::reconcile() {
  const system_clock::time_point now = clock_();
  const std::string where = "Secret " + secret_name_of(settings_);
  Result<json> secret = read_secret();
  if (!secret.is_ok() && secret.status().code() != StatusCode::kNotFound)
    return secret.status().with_context(where);
  const json* existing = secret.is_ok() ? &*secret : nullptr;
  Result<CertificatePems> pems =
      existing ? pems_of_secret(*existing) : Result<CertificatePems>(not_found("no Secret"));
  const std::string reason =
      pems.is_ok() ? unusable_reason(*pems, dns_names_, now) : pems.status().message();
  if (!reason.empty()) {
    log::info("making a new serving certificate",
              {{"secret", secret_name_of(settings_)}, {"reason", reason}});
    TESSERA_ASSIGN_OR_RETURN(CertificatePems fresh,
                             generate_serving_certificate(dns_names_, settings_.validity, now,
                                                          pems.is_ok() ? pems->ca : std::string()),
                             with_context(where));
    Result<json> written = write_secret(existing, fresh);
    if (written.is_ok()) {
      std::lock_guard lock(mutex_);
      ++(existing ? counts_.renewed : counts_.created);
      secret = std::move(written);
    } else if (written.status().code() == StatusCode::kAlreadyExists) {
      // Another replica wrote first (create: AlreadyExists; update: Conflict): take its pair.
      secret = read_secret();
      if (!secret.is_ok()) return secret.status().with_context(where);
      std::lock_guard lock(mutex_);
      ++counts_.adopted;
    } else {
      return written.status().with_context(where);
    }
    pems = pems_of_secret(*secret);
    if (!pems.is_ok()) return pems.status().with_context(where);
    if (std::string winner = unusable_reason(*pems, dns_names_, now); !winner.empty())
      return failed_precondition(where + " after another writer: " + winner);
  }
  const std::string version = (*secret)["metadata"].value("resourceVersion", "");

  // The configurations first: a new CA is trusted before a handshake offers what it signed.
  Status patched = Status::ok();
  for (auto [mutating, name] : {std::pair{true, settings_.mutating_configuration},
                                std::pair{false, settings_.validating_configuration}}) {
    if (name.empty()) continue;
    if (Status status = patch_ca_bundle(mutating, name, pems->ca, now); !status.is_ok()) {
      log::error("cannot set the caBundle",
                 {{"configuration", (mutating ? "mutatingwebhookconfigurations/"
                                              : "validatingwebhookconfigurations/") +
                                        name},
                  {"error", status.message()}});
      if (patched.is_ok()) patched = status;
    }
  }

  bool changed = false;
  {
    std::lock_guard lock(mutex_);
    changed = served_cert_ != pems->cert;
  }
  if (changed) {
    TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<const CertifiedKey> pair,
                             parse_certified_key(pems->cert, pems->key, where));
    reloader_.set(pair);
    log::info("serving certificate", {{"secret", secret_name_of(settings_)},
                                      {"resource_version", version},
                                      {"serial", pair->serial_hex}});
    std::lock_guard lock(mutex_);
    served_cert_ = pems->cert;
    ++counts_.served;
  }
  {
    std::lock_guard lock(mutex_);
    served_version_ = version;
  }
  return patched;
}

ServingCertificate::Counts ServingCertificate::counts() const {
  std::lock_guard lock(mutex_);
  return counts_;
}

std::string ServingCertificate::served_version() const {
  std::lock_guard lock(mutex_);
  return served_version_;
}

}  // namespace tessera::webhook

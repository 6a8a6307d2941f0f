#include "server/certificate_reloader.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <sys/stat.h>

#include <cstdio>
#include <utility>

namespace tessera::webhook {
namespace {

struct BioDeleter {
  void operator()(BIO* bio) const { BIO_free(bio); }
};

std::string openssl_error() {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return "no detail from OpenSSL";
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  return text;
}

// OpenSSL's error queue is per thread, and this runs inside a handshake on a server thread: an
// error left behind (a mismatched key during a rotation) would make that thread's next SSL_read
// or SSL_write look failed (SSL_get_error reads the queue), and drop a good connection.
struct ClearOpensslErrors {
  ~ClearOpensslErrors() { ERR_clear_error(); }
};

std::string file_fingerprint(const std::string& path) {
  struct stat info {};
  if (stat(path.c_str(), &info) != 0) return path + ":missing";
  return std::to_string(info.st_ino) + ":" + std::to_string(info.st_size) + ":" +
         std::to_string(info.st_mtim.tv_sec) + "." + std::to_string(info.st_mtim.tv_nsec);
}

}  // namespace

namespace {

// The pair from two BIOs (files or memory); `cert_name` and `key_name` name them in errors.
Result<std::shared_ptr<const CertifiedKey>> read_certified_key(BIO* certs, BIO* key,
                                                               const std::string& cert_name,
                                                               const std::string& key_name) {
  auto out = std::make_shared<CertifiedKey>();
  out->leaf.reset(PEM_read_bio_X509(certs, nullptr, nullptr, nullptr));
  if (!out->leaf) return invalid_argument(cert_name + ": no PEM certificate: " + openssl_error());
  out->chain.reset(sk_X509_new_null());
  while (X509* next = PEM_read_bio_X509(certs, nullptr, nullptr, nullptr))
    sk_X509_push(out->chain.get(), next);
  ERR_clear_error();  // the loop ends on "no start line"
  out->key.reset(PEM_read_bio_PrivateKey(key, nullptr, nullptr, nullptr));
  if (!out->key) return invalid_argument(key_name + ": no PEM private key: " + openssl_error());
  if (X509_check_private_key(out->leaf.get(), out->key.get()) != 1)
    return invalid_argument(key_name + " is not the key of the certificate in " + cert_name);
  const ASN1_INTEGER* serial = X509_get0_serialNumber(out->leaf.get());
  BIGNUM* number = ASN1_INTEGER_to_BN(serial, nullptr);
  if (char* hex = number ? BN_bn2hex(number) : nullptr) {
    out->serial_hex = hex;
    OPENSSL_free(hex);
  }
  BN_free(number);
  return std::shared_ptr<const CertifiedKey>(std::move(out));
}

}  // namespace

Result<std::shared_ptr<const CertifiedKey>> load_certified_key(const std::string& cert_file,
                                                               const std::string& key_file) {
  const ClearOpensslErrors clear_on_return;
  std::unique_ptr<BIO, BioDeleter> certs(BIO_new_file(cert_file.c_str(), "r"));
  if (!certs) return not_found("cannot open " + cert_file + ": " + openssl_error());
  std::unique_ptr<BIO, BioDeleter> key(BIO_new_file(key_file.c_str(), "r"));
  if (!key) return not_found("cannot open " + key_file + ": " + openssl_error());
  return read_certified_key(certs.get(), key.get(), cert_file, key_file);
}

Result<std::shared_ptr<const CertifiedKey>> parse_certified_key(const std::string& cert_pem,
                                                                const std::string& key_pem,
                                                                const std::string& where) {
  const ClearOpensslErrors clear_on_return;
  std::unique_ptr<BIO, BioDeleter> certs(
      BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size())));
  std::unique_ptr<BIO, BioDeleter> key(
      BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())));
  if (!certs || !key) return internal_error("BIO_new_mem_buf: " + openssl_error());
  return read_certified_key(certs.get(), key.get(), where + " tls.crt", where + " tls.key");
}

CertificateReloader::CertificateReloader(std::string cert_file, std::string key_file,
                                         std::chrono::milliseconds check_interval, Clock clock)
    : cert_file_(std::move(cert_file)),
      key_file_(std::move(key_file)),
      check_interval_(check_interval),
      clock_(std::move(clock)) {}

std::string CertificateReloader::fingerprint() const {
  return file_fingerprint(cert_file_) + "|" + file_fingerprint(key_file_);
}

Status CertificateReloader::load() {
  if (cert_file_.empty()) {
    std::lock_guard lock(mutex_);
    if (current_) return Status::ok();
    return failed_precondition("no serving certificate yet (none given by set())");
  }
  const std::string seen = fingerprint();
  auto loaded = load_certified_key(cert_file_, key_file_);
  std::lock_guard lock(mutex_);
  seen_ = seen;
  next_check_ = clock_() + check_interval_;
  if (!loaded.is_ok()) {
    last_error_ = loaded.status().message();
    return loaded.status();
  }
  current_ = std::move(loaded).value();
  return Status::ok();
}

void CertificateReloader::set(std::shared_ptr<const CertifiedKey> pair) {
  std::lock_guard lock(mutex_);
  if (current_) ++reloads_;
  current_ = std::move(pair);
  last_error_.clear();
}

void CertificateReloader::maybe_reload() {
  if (cert_file_.empty()) return;
  {
    std::lock_guard lock(mutex_);
    const auto now = clock_();
    if (now < next_check_) return;
    next_check_ = now + check_interval_;
  }
  const std::string seen = fingerprint();
  {
    std::lock_guard lock(mutex_);
    if (seen == seen_) return;
  }
  auto loaded = load_certified_key(cert_file_, key_file_);
  std::lock_guard lock(mutex_);
  seen_ = seen;
  if (!loaded.is_ok()) {
    ++failures_;
    last_error_ = loaded.status().message();
    return;
  }
  current_ = std::move(loaded).value();
  ++reloads_;
  last_error_.clear();
}

std::shared_ptr<const CertifiedKey> CertificateReloader::current() const {
  std::lock_guard lock(mutex_);
  return current_;
}

int CertificateReloader::certificate_callback(SSL* ssl, void* self) {
  const ClearOpensslErrors clear_on_return;
  auto* reloader = static_cast<CertificateReloader*>(self);
  reloader->maybe_reload();
  const std::shared_ptr<const CertifiedKey> pair = reloader->current();
  if (!pair) return 0;  // fails the handshake
  // The SSL object takes its own references: the pair may be replaced right after.
  return SSL_use_cert_and_key(ssl, pair->leaf.get(), pair->key.get(), pair->chain.get(),
                              /*override=*/1) == 1
             ? 1
             : 0;
}

void CertificateReloader::install(SSL_CTX& ctx) {
  SSL_CTX_set_min_proto_version(&ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(&ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_cert_cb(&ctx, &CertificateReloader::certificate_callback, this);
}

size_t CertificateReloader::reloads() const {
  std::lock_guard lock(mutex_);
  return reloads_;
}
size_t CertificateReloader::reload_failures() const {
  std::lock_guard lock(mutex_);
  return failures_;
}
std::string CertificateReloader::last_error() const {
  std::lock_guard lock(mutex_);
  return last_error_;
}

}  // namespace tessera::webhook

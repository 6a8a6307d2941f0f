// The serving certificate and key, reloaded when their files change (cert-manager rotates the
// Secret; the kubelet swaps the mounted files). Each TLS handshake takes the pair current at that
// moment through OpenSSL's certificate callback, so a rotation needs no restart and no listener
// swap, and connections already open keep theirs. A new pair is taken only when both files parse
// and the key matches the certificate: a half-written rotation (new certificate, old key) keeps
// the old pair until the key follows.
//
// Without files (--tls-secret-name: the webhook manages its own certificate, serving_certificate.h)
// the pair is handed over with set(), and the next handshake takes it.
#pragma once

#include <openssl/ssl.h>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "tessera/status.h"

namespace tessera::webhook {

struct X509Deleter {
  void operator()(X509* cert) const { X509_free(cert); }
};
struct KeyDeleter {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
struct ChainDeleter {
  void operator()(STACK_OF(X509) * chain) const { sk_X509_pop_free(chain, X509_free); }
};

// A certificate (leaf first, then its chain) and its private key.
struct CertifiedKey {
  std::unique_ptr<X509, X509Deleter> leaf;
  std::unique_ptr<STACK_OF(X509), ChainDeleter> chain;
  std::unique_ptr<EVP_PKEY, KeyDeleter> key;
  std::string serial_hex;  // for logs and tests
};

Result<std::shared_ptr<const CertifiedKey>> load_certified_key(const std::string& cert_file,
                                                               const std::string& key_file);
// The same from PEM text (`where` names its source in errors).
Result<std::shared_ptr<const CertifiedKey>> parse_certified_key(const std::string& cert_pem,
                                                                const std::string& key_pem,
                                                                const std::string& where);

class CertificateReloader {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  // `check_interval`: how often a handshake may look at the files (a stat of each). Empty file
  // names: no files, the pair comes from set().
  CertificateReloader(std::string cert_file, std::string key_file,
                      std::chrono::milliseconds check_interval, Clock clock);

  // Loads the pair the first time; the server does not start without one (without files: ok
  // once set() gave one).
  Status load();
  // Serves `pair` from the next handshake on (counted as a reload when it replaces another).
  void set(std::shared_ptr<const CertifiedKey> pair);
  // Reloads when the files changed since the last look and the interval passed.
  void maybe_reload();
  std::shared_ptr<const CertifiedKey> current() const;

  // Sets TLS 1.2 as the floor and the per-handshake certificate callback on `ctx`.
  void install(SSL_CTX& ctx);

  size_t reloads() const;
  size_t reload_failures() const;
  std::string last_error() const;

 private:
  static int certificate_callback(SSL* ssl, void* self);
  std::string fingerprint() const;  // of both files: inode, size, mtime

  const std::string cert_file_;
  const std::string key_file_;
  const std::chrono::milliseconds check_interval_;
  const Clock clock_;
  mutable std::mutex mutex_;
  std::shared_ptr<const CertifiedKey> current_;
  std::string seen_;  // the fingerprint last looked at (loaded or refused)
  std::chrono::steady_clock::time_point next_check_{};
  size_t reloads_ = 0;
  size_t failures_ = 0;
  std::string last_error_;
};

}  // namespace tessera::webhook

// A test CA and serving certificates made here with OpenSSL (EC P-256, SAN IP:127.0.0.1 and
// localhost), written to PEM files the way a Secret volume holds them, and a raw TLS client that
// reports the serial of the certificate the server presented.
#pragma once

#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>

namespace tessera::webhook::testing {

struct PkeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
struct X509Free {
  void operator()(X509* cert) const { X509_free(cert); }
};
struct BioFree {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
struct SslCtxFree {
  void operator()(SSL_CTX* ctx) const { SSL_CTX_free(ctx); }
};
struct SslFree {
  void operator()(SSL* ssl) const { SSL_free(ssl); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;
using Cert = std::unique_ptr<X509, X509Free>;

inline std::string to_pem(X509* cert) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_X509(bio.get(), cert);
  char* data = nullptr;
  const long length = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(length));
}

inline std::string to_pem(EVP_PKEY* key) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  const long length = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(length));
}

inline void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

class TestPki {
 public:
  TestPki() : ca_key_(EVP_EC_gen("P-256")) {
    ca_ = sign(ca_key_.get(), "tessera-test-ca", 1, /*ca=*/true);
    ca_pem_ = to_pem(ca_.get());
  }
  const std::string& ca_pem() const { return ca_pem_; }

  struct Leaf {
    std::string cert_pem;  // the leaf, then the CA (a chain, as cert-manager writes tls.crt)
    std::string key_pem;
  };
  Leaf leaf(long serial) const {
    Pkey key(EVP_EC_gen("P-256"));
    Cert cert = sign(key.get(), "tessera-webhook.tessera.svc", serial, /*ca=*/false);
    return {to_pem(cert.get()) + ca_pem_, to_pem(key.get())};
  }
  // Replaces both files by rename (each atomically, one after the other), as the kubelet's
  // symlink swap does for a Secret volume.
  void rotate(const std::string& cert_file, const std::string& key_file, long serial) const {
    const Leaf next = leaf(serial);
    write_file(cert_file + ".tmp", next.cert_pem);
    write_file(key_file + ".tmp", next.key_pem);
    std::filesystem::rename(cert_file + ".tmp", cert_file);
    std::filesystem::rename(key_file + ".tmp", key_file);
  }

 private:
  Cert sign(EVP_PKEY* key, const char* name, long serial, bool ca) const {
    Cert cert(X509_new());
    X509_set_version(cert.get(), 2);
    ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), serial);
    X509_gmtime_adj(X509_getm_notBefore(cert.get()), -60);
    X509_gmtime_adj(X509_getm_notAfter(cert.get()), 3600);
    X509_set_pubkey(cert.get(), key);
    X509_NAME* subject = X509_get_subject_name(cert.get());
    X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>(name), -1, -1, 0);
    X509_set_issuer_name(cert.get(), ca ? subject : X509_get_subject_name(ca_.get()));
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, ca ? cert.get() : ca_.get(), cert.get(), nullptr, nullptr, 0);
    const std::pair<int, const char*> extensions[] = {
        {NID_basic_constraints, ca ? "critical,CA:TRUE" : "critical,CA:FALSE"},
        {NID_key_usage, ca ? "critical,keyCertSign" : "critical,digitalSignature"},
        {NID_subject_alt_name, "IP:127.0.0.1,DNS:localhost"}};
    for (auto [nid, value] : extensions) {
      X509_EXTENSION* extension = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
      X509_add_ext(cert.get(), extension, -1);
      X509_EXTENSION_free(extension);
    }
    X509_sign(cert.get(), ca ? key : ca_key_.get(), EVP_sha256());
    return cert;
  }

  Pkey ca_key_;
  Cert ca_;
  std::string ca_pem_;
};

// One TLS handshake with 127.0.0.1:port, verifying against `ca_pem` (every CA in it) and the
// name `host`, at most `max_version`, at `verify_time` (0: now). Returns the presented
// certificate's serial (hex), or nullopt when the handshake failed.
inline std::optional<std::string> handshake_serial(int port, const std::string& ca_pem,
                                                   int max_version = 0,
                                                   const std::string& host = "127.0.0.1",
                                                   time_t verify_time = 0) {
  std::unique_ptr<SSL_CTX, SslCtxFree> ctx(SSL_CTX_new(TLS_client_method()));
  if (max_version) {
    SSL_CTX_set_min_proto_version(ctx.get(), 0);
    SSL_CTX_set_max_proto_version(ctx.get(), max_version);
    SSL_CTX_set_security_level(ctx.get(), 0);  // the client would speak TLS 1.1 if allowed
    SSL_CTX_set_cipher_list(ctx.get(), "DEFAULT:@SECLEVEL=0");
  }
  std::unique_ptr<BIO, BioFree> bio(
      BIO_new_mem_buf(ca_pem.data(), static_cast<int>(ca_pem.size())));
  while (X509* ca = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx.get()), ca);
    X509_free(ca);
  }
  ERR_clear_error();
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  if (verify_time != 0) X509_VERIFY_PARAM_set_time(SSL_CTX_get0_param(ctx.get()), verify_time);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::optional<std::string> serial;
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) {
    std::unique_ptr<SSL, SslFree> ssl(SSL_new(ctx.get()));
    SSL_set_fd(ssl.get(), fd);
    SSL_set1_host(ssl.get(), host.c_str());
    if (SSL_connect(ssl.get()) == 1) {
      if (X509* peer = SSL_get1_peer_certificate(ssl.get())) {
        BIGNUM* number = ASN1_INTEGER_to_BN(X509_get0_serialNumber(peer), nullptr);
        char* hex = BN_bn2hex(number);
        serial = hex;
        OPENSSL_free(hex);
        BN_free(number);
        X509_free(peer);
      }
      SSL_shutdown(ssl.get());
    }
  }
  ERR_clear_error();
  close(fd);
  return serial;
}

}  // namespace tessera::webhook::testing

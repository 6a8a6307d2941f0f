// Loading, reloading on change (on the injected clock's interval), refusing a mismatched pair.
#include "server/certificate_reloader.h"

#include <gtest/gtest.h>

#include "fake_kube.h"
#include "test_certificates.h"

namespace tessera::webhook {
namespace {

using testing::ManualClock;
using testing::TestPki;

class CertificateReloaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = std::filesystem::temp_directory_path() / "webhook-certs-XXXXXX";
    dir_ = mkdtemp(pattern.data());
    cert_ = dir_ + "/tls.crt";
    key_ = dir_ + "/tls.key";
    pki_.rotate(cert_, key_, 1);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_, cert_, key_;
  TestPki pki_;
  ManualClock clock_;
};

TEST_F(CertificateReloaderTest, LoadsTheLeafAndItsChain) {
  CertificateReloader reloader(cert_, key_, std::chrono::seconds(1), clock_.function());
  ASSERT_TRUE(reloader.load().is_ok());
  ASSERT_TRUE(reloader.current());
  EXPECT_EQ(reloader.current()->serial_hex, "01");
  EXPECT_EQ(sk_X509_num(reloader.current()->chain.get()), 1);  // the CA after the leaf
}

TEST_F(CertificateReloaderTest, ReloadsAChangeOncePerInterval) {
  CertificateReloader reloader(cert_, key_, std::chrono::seconds(1), clock_.function());
  ASSERT_TRUE(reloader.load().is_ok());
  pki_.rotate(cert_, key_, 2);
  reloader.maybe_reload();  // within the interval: not looked at
  EXPECT_EQ(reloader.current()->serial_hex, "01");
  clock_.now += std::chrono::seconds(1);
  reloader.maybe_reload();
  EXPECT_EQ(reloader.current()->serial_hex, "02");
  EXPECT_EQ(reloader.reloads(), 1u);
  clock_.now += std::chrono::seconds(1);
  reloader.maybe_reload();  // unchanged files: nothing parsed again
  EXPECT_EQ(reloader.reloads(), 1u);
}

TEST_F(CertificateReloaderTest, AMismatchedOrBrokenPairKeepsTheOldOne) {
  CertificateReloader reloader(cert_, key_, std::chrono::seconds(0), clock_.function());
  ASSERT_TRUE(reloader.load().is_ok());
  const TestPki::Leaf next = pki_.leaf(3);
  testing::write_file(cert_, next.cert_pem);
  reloader.maybe_reload();
  EXPECT_EQ(reloader.current()->serial_hex, "01");
  EXPECT_EQ(reloader.reload_failures(), 1u);
  EXPECT_NE(reloader.last_error().find("is not the key of the certificate"), std::string::npos);
  testing::write_file(key_, "-----BEGIN PRIVATE KEY-----\ntruncated");
  reloader.maybe_reload();
  EXPECT_EQ(reloader.current()->serial_hex, "01");
  EXPECT_NE(reloader.last_error().find("no PEM private key"), std::string::npos);
  testing::write_file(key_, next.key_pem);
  reloader.maybe_reload();
  EXPECT_EQ(reloader.current()->serial_hex, "03");
  EXPECT_EQ(reloader.last_error(), "");
}

TEST_F(CertificateReloaderTest, NoFilesNoStart) {
  CertificateReloader reloader(dir_ + "/missing.crt", key_, std::chrono::seconds(1),
                               clock_.function());
  Status status = reloader.load();
  EXPECT_EQ(status.code(), StatusCode::kNotFound);
  EXPECT_FALSE(reloader.current());
}

}  // namespace
}  // namespace tessera::webhook

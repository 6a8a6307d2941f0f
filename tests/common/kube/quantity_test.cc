// Quantities as kube-apiserver writes them back (k8s.io/apimachinery/pkg/api/resource/quantity.go
// and the cases of its quantity_test.go), compared by value, and the bytes the webhook sends.
#include "tessera/kube/quantity.h"

#include <gtest/gtest.h>

namespace tessera::kube {
namespace {

std::string canonical(const std::string& text) {
  const Result<std::string> out = canonical_quantity(text);
  return out.is_ok() ? *out : "error: " + out.status().message();
}

TEST(KubeQuantity, CanonicalFormIsTheOneKubeApiserverStores) {
  // Decimal: trailing zeros become a suffix, the exponent a multiple of 3; above E an exponent.
  // Binary: the largest 1024^k that divides it; below 1024 or not whole, decimal. Finer than 1n
  // rounds up. "1E3" is kept as written: the fast path's canonical check ignores the letter case.
  const std::pair<const char*, const char*> cases[] = {
      {"5000000000", "5G"}, {"1000", "1k"},         {"1500m", "1500m"},     {"0", "0"},
      {"3000Mi", "3000Mi"}, {"100", "100"},         {"8Gi", "8Gi"},         {"8192Mi", "8Gi"},
      {"3072Mi", "3Gi"},    {"1024Ki", "1Mi"},      {"1Ki", "1Ki"},         {"1536", "1536"},
      {"1.5Gi", "1536Mi"},  {"0.5Ki", "512"},       {"1.5", "1500m"},       {"1500k", "1500k"},
      {"1500000", "1500k"}, {"10000", "10k"},       {"0.1", "100m"},        {".5", "500m"},
      {"1.5G", "1500M"},    {"1e3", "1e3"},         {"1E3", "1E3"},         {"1e4", "10e3"},
      {"1000E", "1e21"},    {"0.0000000001", "1n"}, {"-5000000000", "-5G"}, {"00", "0"},
      {"0Gi", "0"},
  };
  for (const auto& [text, expected] : cases) EXPECT_EQ(canonical(text), expected) << text;
}

// A plain number is decimal (the suffix "" is DecimalSI), so it keeps its digits: kube-apiserver
// writes 1024 back as "1024" and 8589934592 as "8589934592", not "1Ki" or "8Gi".
TEST(KubeQuantity, APlainNumberStaysDecimalEvenWhenAPowerOf1024) {
  EXPECT_EQ(canonical("1024"), "1024");
  EXPECT_EQ(canonical("8589934592"), "8589934592");
}

TEST(KubeQuantity, BadTextIsAnErrorNamingIt) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "quantity \"\": empty"},
      {"Gi", "quantity \"Gi\": no number"},
      {"8K",
       "quantity \"8K\": unknown suffix \"K\" (expected Ki Mi Gi Ti Pi Ei, n u m k M G T P E or an "
       "exponent)"},
      {"8 Gi",
       "quantity \"8 Gi\": unknown suffix \" Gi\" (expected Ki Mi Gi Ti Pi Ei, n u m k M G "
       "T P E or an exponent)"},
      {"1e",
       "quantity \"1e\": unknown suffix \"e\" (expected Ki Mi Gi Ti Pi Ei, n u m k M G T P "
       "E or an exponent)"},
      {"123456789012345678901234567890123456789",
       "quantity "
       "\"123456789012345678901234567890123456789\": "
       "too many digits"},
  };
  for (const auto& [text, message] : cases) {
    const Result<std::string> out = canonical_quantity(text);
    ASSERT_FALSE(out.is_ok()) << text;
    EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(out.status().message(), message);
  }
}

TEST(KubeQuantity, ValuesCompareEqualWhateverTheFormat) {
  const auto value = [](const char* text) { return parse_quantity(text)->value; };
  EXPECT_EQ(value("8Gi"), value("8589934592"));
  EXPECT_EQ(value("8Gi"), value("8192Mi"));
  EXPECT_EQ(value("5G"), value("5000000000"));
  EXPECT_EQ(value("1500m"), value("1.5"));
  EXPECT_EQ(value("1k"), value("1e3"));
  EXPECT_EQ(value("0"), value("0Mi"));
  EXPECT_NE(value("8Gi"), value("8G"));
  EXPECT_NE(value("1"), value("-1"));
}

TEST(KubeQuantity, BytesGoOutInCanonicalForm) {
  const std::pair<uint64_t, const char*> cases[] = {
      {8ull << 30, "8Gi"},      {3000ull << 20, "3000Mi"}, {1024, "1Ki"},      {1024000, "1000Ki"},
      {5000000000, "5G"},       {1500000, "1500k"},        {1536 + 1, "1537"}, {1000, "1k"},
      {123456789, "123456789"},
  };
  for (const auto& [bytes, expected] : cases) {
    EXPECT_EQ(canonical_bytes(bytes), expected) << bytes;
    // What goes out comes back unchanged.
    EXPECT_EQ(canonical(canonical_bytes(bytes)), canonical_bytes(bytes)) << bytes;
  }
}

}  // namespace
}  // namespace tessera::kube

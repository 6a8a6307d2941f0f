// Helpers for the webhook's tests: the golden AdmissionReview requests (tests/webhook/golden,
// shaped as kube-apiserver sends them), the patch decoded from an answer, and a ClaimLookup double.
#pragma once

#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>

#include <nlohmann/json.hpp>

#include "core/pod_mutation.h"

namespace tessera::webhook::testing {

inline nlohmann::json golden(const std::string& name) {
  std::ifstream in(std::string(WEBHOOK_GOLDEN_DIR) + "/" + name);
  EXPECT_TRUE(in) << name;
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str());
}

inline std::string base64_decode(const std::string& text) {
  std::string out(text.size() / 4 * 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(text.data()),
                                static_cast<int>(text.size()));
  EXPECT_GE(n, 0) << text;
  size_t length = static_cast<size_t>(n < 0 ? 0 : n);
  if (!text.empty() && text.back() == '=') --length;
  if (text.size() > 1 && text[text.size() - 2] == '=') --length;
  out.resize(length);
  return out;
}

// The RFC 6902 patch of an answer (an empty array when it has none).
inline nlohmann::json patch_of(const nlohmann::json& review) {
  const auto& response = review.at("response");
  if (!response.contains("patch")) return nlohmann::json::array();
  EXPECT_EQ(response.at("patchType"), "JSONPatch");
  return nlohmann::json::parse(base64_decode(response.at("patch").get<std::string>()));
}

class FakeClaimLookup : public ClaimLookup {
 public:
  // Unknown names are an error (the API unreachable), to exercise the failure mode.
  std::map<std::tuple<std::string, ClaimSource, std::string>, bool> answers;
  int calls = 0;
  Result<bool> is_tessera(const std::string& namespace_name, ClaimSource source,
                          const std::string& name) override {
    ++calls;
    const auto it = answers.find({namespace_name, source, name});
    if (it == answers.end()) return unavailable("GET " + name + ": connection refused");
    return it->second;
  }
};

}  // namespace tessera::webhook::testing

// libFuzzer target over the webhook's request path: any body POSTed to /mutate or /validate. No
// input may crash, hang or trip a sanitizer; every answer echoes the request's uid, and every
// patch applies to the pod it was made for (RFC 6902, by nlohmann::json::patch).
#include <openssl/evp.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/claim_validation.h"
#include "core/pod_mutation.h"

namespace {

using namespace tessera;
using namespace tessera::webhook;

// Answers by the name's first letter: Tessera, not Tessera, or the API unreachable.
class ByNameLookup : public ClaimLookup {
 public:
  Result<bool> is_tessera(const std::string&, ClaimSource, const std::string& name) override {
    if (name.empty() || name[0] < 'h') return true;
    if (name[0] < 'p') return false;
    return unavailable("unreachable");
  }
};

std::string base64_decode(const std::string& text) {
  std::string out(text.size() / 4 * 3 + 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(text.data()),
                                static_cast<int>(text.size()));
  if (n < 0) std::abort();  // the webhook's own base64
  size_t length = static_cast<size_t>(n);
  if (!text.empty() && text.back() == '=') --length;
  if (text.size() > 1 && text[text.size() - 2] == '=') --length;
  out.resize(length);
  return out;
}

void check_answer(const nlohmann::json& answer, const std::string& body) {
  const nlohmann::json review = nlohmann::json::parse(body, nullptr, false);
  if (answer["response"]["uid"] != review["request"]["uid"]) std::abort();
  if (!answer["response"]["allowed"].is_boolean()) std::abort();
  answer.dump();  // must serialise
  if (!answer["response"].contains("patch")) return;
  const auto patch = nlohmann::json::parse(base64_decode(answer["response"]["patch"]));
  const nlohmann::json patched = review["request"]["object"].patch(patch);  // throws if not
  if (!patched.is_object()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  ByNameLookup claims;
  for (bool hami : {false, true}) {
    MutateConfig config;
    config.hami_names = hami;
    config.policy.privileged = hami ? PolicyAction::kDeny : PolicyAction::kWarn;
    Result<MutateResult> mutated = mutate(body, config, claims);
    if (mutated.is_ok()) check_answer(mutated->review, body);
  }
  Result<nlohmann::json> validated = validate(body);
  if (validated.is_ok()) check_answer(*validated, body);
  return 0;
}

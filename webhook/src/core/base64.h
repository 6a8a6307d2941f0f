// Standard base64 (RFC 4648, with padding) over OpenSSL's encoder: AdmissionResponse.patch is
// a []byte, which Kubernetes' JSON carries as base64.
#pragma once

#include <string>
#include <string_view>

namespace tessera::webhook {

std::string base64_encode(std::string_view bytes);

}  // namespace tessera::webhook

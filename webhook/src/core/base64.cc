#include "core/base64.h"

#include <openssl/evp.h>

namespace tessera::webhook {

std::string base64_encode(std::string_view bytes) {
  // EVP_EncodeBlock writes 4 characters per 3 bytes (rounded up) plus a NUL, without newlines.
  std::string encoded((bytes.size() + 2) / 3 * 4 + 1, '\0');
  const int length = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(encoded.data()),
                                     reinterpret_cast<const unsigned char*>(bytes.data()),
                                     static_cast<int>(bytes.size()));
  encoded.resize(static_cast<size_t>(length));
  return encoded;
}

}  // namespace tessera::webhook

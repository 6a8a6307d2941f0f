#include "integrity_hash.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace simgpu::driver {
namespace {

// RFC 1319, section 3.2: the permutation of 0..255 built from the digits of pi.
constexpr uint8_t kPiSubstitution[256] = {
    41,  46,  67,  201, 162, 216, 124, 1,   61,  54,  84,  161, 236, 240, 6,   19,  98,  167, 5,
    243, 192, 199, 115, 140, 152, 147, 43,  217, 188, 76,  130, 202, 30,  155, 87,  60,  253, 212,
    224, 22,  103, 66,  111, 24,  138, 23,  229, 18,  190, 78,  196, 214, 218, 158, 222, 73,  160,
    251, 245, 142, 187, 47,  238, 122, 169, 104, 121, 145, 21,  178, 7,   63,  148, 194, 16,  137,
    11,  34,  95,  33,  128, 127, 93,  154, 90,  144, 50,  39,  53,  62,  204, 231, 191, 247, 151,
    3,   255, 25,  48,  179, 72,  165, 181, 209, 215, 94,  146, 42,  172, 86,  170, 198, 79,  184,
    56,  210, 150, 164, 125, 182, 118, 252, 107, 226, 156, 116, 4,   241, 69,  157, 112, 89,  100,
    113, 135, 32,  134, 91,  207, 101, 230, 45,  168, 2,   27,  96,  37,  173, 174, 176, 185, 246,
    28,  70,  97,  105, 52,  64,  126, 15,  85,  71,  163, 35,  221, 81,  175, 58,  195, 92,  249,
    206, 186, 197, 234, 38,  44,  83,  13,  110, 133, 40,  132, 9,   211, 223, 205, 244, 65,  129,
    77,  82,  106, 220, 55,  200, 108, 193, 171, 250, 36,  225, 123, 8,   12,  189, 177, 74,  120,
    136, 149, 139, 227, 99,  232, 109, 233, 203, 213, 254, 59,  0,   29,  57,  242, 239, 183, 14,
    102, 88,  208, 228, 166, 119, 114, 248, 235, 117, 75,  10,  49,  68,  80,  180, 143, 237, 31,
    26,  219, 153, 141, 51,  159, 17,  131, 20,
};

constexpr size_t kBlock = 16;

class Md2 {
 public:
  void update(std::span<const uint8_t> bytes) {
    for (uint8_t byte : bytes) {
      block_[filled_++] = byte;
      if (filled_ == kBlock) {
        compress(block_);
        filled_ = 0;
      }
    }
  }

  Md2Digest finish() {
    const uint8_t pad = static_cast<uint8_t>(kBlock - filled_);
    uint8_t padding[kBlock];
    std::memset(padding, pad, sizeof padding);
    update(std::span<const uint8_t>(padding, pad));
    const std::array<uint8_t, kBlock> checksum = checksum_;
    update(checksum);
    Md2Digest digest;
    std::memcpy(digest.data(), state_, kBlock);
    return digest;
  }

 private:
  void compress(const uint8_t* block) {
    uint8_t x[3 * kBlock];
    for (size_t j = 0; j < kBlock; ++j) {
      x[j] = state_[j];
      x[kBlock + j] = block[j];
      x[2 * kBlock + j] = static_cast<uint8_t>(state_[j] ^ block[j]);
    }
    uint8_t t = 0;
    for (unsigned round = 0; round < 18; ++round) {
      for (uint8_t& byte : x) t = byte ^= kPiSubstitution[t];
      t = static_cast<uint8_t>(t + round);
    }
    std::memcpy(state_, x, kBlock);
    // The checksum covers the padded message; finish() copies it before hashing it in, so the
    // checksum's own block changing it afterwards does not matter.
    for (size_t j = 0; j < kBlock; ++j) last_ = checksum_[j] ^= kPiSubstitution[block[j] ^ last_];
  }

  uint8_t state_[kBlock] = {};
  uint8_t block_[kBlock] = {};
  size_t filled_ = 0;
  std::array<uint8_t, kBlock> checksum_ = {};
  uint8_t last_ = 0;
};

// The HMAC key of the check, and the fixed answers for versions ending in 0 and 1: from vosen/ZLUDA
// dark_api/src/lib.rs (MIT or Apache-2.0), function integrity_check; Wine's encryption.c agrees.
constexpr uint8_t kIntegrityKey[16] = {0x14, 0x6A, 0xDD, 0xAE, 0x53, 0xA9, 0xA7, 0x52,
                                       0xAA, 0x08, 0x41, 0x36, 0x0B, 0xF5, 0x5A, 0x9F};
constexpr std::array<uint64_t, 2> kAnswerForVersionEnding0 = {0x3341181C03CB675Cull,
                                                              0x8ED383AA1F4CD1E8ull};
constexpr std::array<uint64_t, 2> kAnswerForVersionEnding1 = {0x1841181C03CB675Cull,
                                                              0x8ED383AA1F4CD1E8ull};

template <typename T>
void append(std::vector<uint8_t>& out, const T& value) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(&value);
  out.insert(out.end(), bytes, bytes + sizeof value);
}

}  // namespace

Md2Digest md2(std::span<const uint8_t> message) {
  Md2 hash;
  hash.update(message);
  return hash.finish();
}

Md2Digest hmac_md2(std::span<const uint8_t> key, std::span<const uint8_t> message) {
  uint8_t inner_pad[kBlock] = {};
  uint8_t outer_pad[kBlock] = {};
  std::memcpy(inner_pad, key.data(), std::min(key.size(), kBlock));
  std::memcpy(outer_pad, key.data(), std::min(key.size(), kBlock));
  for (size_t i = 0; i < kBlock; ++i) {
    inner_pad[i] ^= 0x36;
    outer_pad[i] ^= 0x5c;
  }
  Md2 inner;
  inner.update(inner_pad);
  inner.update(message);
  const Md2Digest inner_digest = inner.finish();
  Md2 outer;
  outer.update(outer_pad);
  outer.update(inner_digest);
  return outer.finish();
}

std::array<uint64_t, 2> integrity_answer(const IntegrityInputs& inputs) {
  switch (inputs.runtime_version % 10) {
    case 0:
      return kAnswerForVersionEnding0;
    case 1:
      return kAnswerForVersionEnding1;
    default:
      break;
  }
  // The record, laid out as the runtime's C struct on x86-64: four 32-bit words, three pointers,
  // the time; then per device its UUID and three 32-bit PCI ids.
  std::vector<uint8_t> message;
  append(message, inputs.driver_version);
  append(message, inputs.runtime_version);
  append(message, inputs.process_id);
  append(message, inputs.thread_id);
  append(message, reinterpret_cast<uint64_t>(inputs.runtime_table));
  append(message, reinterpret_cast<uint64_t>(inputs.integrity_table));
  append(message, reinterpret_cast<uint64_t>(inputs.check_function));
  append(message, inputs.unix_seconds);
  for (const IntegrityDevice& device : inputs.devices) {
    message.insert(message.end(), device.uuid, device.uuid + sizeof device.uuid);
    append(message, device.pci_domain);
    append(message, device.pci_bus);
    append(message, device.pci_device);
  }
  const Md2Digest digest = hmac_md2(kIntegrityKey, message);
  std::array<uint64_t, 2> answer;
  std::memcpy(answer.data(), digest.data(), sizeof answer);
  return answer;
}

}  // namespace simgpu::driver

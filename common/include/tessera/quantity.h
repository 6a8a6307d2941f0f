// Kubernetes-style quantities for byte sizes: "8Gi", "8G", "8192Mi", "1073741824", "1.5Gi".
// Used by the shim (limits from the environment), the node agent (claim capacities) and the
// simulated GPU (device memory). Pure and allocation-free so the shim may call it before main.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tessera {

// Parses a non-negative byte quantity. Accepts a decimal number (optionally with a fraction)
// followed by an optional suffix: binary Ki Mi Gi Ti Pi Ei, decimal k K M G T P E. The result must
// be a whole number of bytes that fits in 64 bits. Returns std::nullopt for anything else
// (empty, negative, unknown suffix, overflow, fractional bytes, surrounding garbage).
std::optional<uint64_t> parse_byte_quantity(std::string_view text);

// A whole percent from `min` to `max` (at most 100) written as decimal digits: "30", "100". No
// sign, fraction, suffix or white space. The one percent syntax of a share's cores everywhere: the
// shim's TESSERA_CORES_LIMIT (1..100) and HAMi's CUDA_DEVICE_SM_LIMIT (0..100), the capacity
// `cores` kube-scheduler allocates (0..100), the webhook's shorthand requests.
std::optional<uint32_t> parse_percent(std::string_view text, uint32_t min, uint32_t max);

// Formats bytes the way people read them: exact binary units when they divide evenly
// ("8Gi", "512Mi"), otherwise plain bytes.
// Writes at most `capacity` bytes including the terminating NUL; returns the length written.
size_t format_byte_quantity(uint64_t bytes, char* out, size_t capacity);

// The same as a string, for messages ("memory.limit 2Gi is below ..."). Not for the shim's hot or
// early paths, which must not allocate.
inline std::string byte_quantity_text(uint64_t bytes) {
  char text[32];
  format_byte_quantity(bytes, text, sizeof text);
  return text;
}

}  // namespace tessera

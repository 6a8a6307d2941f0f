// Kubernetes-style quantities for byte sizes: "8Gi", "8G", "8192Mi", "1073741824", "1.5Gi".
// Used by the shim (limits from the environment), the node agent (claim capacities) and the
// simulated GPU (device memory). Pure and allocation-free so the shim may call it before main.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace tessera {

// Parses a non-negative byte quantity. Accepts a decimal number (optionally with a fraction)
// followed by an optional suffix: binary Ki Mi Gi Ti Pi Ei, decimal k K M G T P E. The result must
// be a whole number of bytes that fits in 64 bits. Returns std::nullopt for anything else
// (empty, negative, unknown suffix, overflow, fractional bytes, surrounding garbage).
std::optional<uint64_t> parse_byte_quantity(std::string_view text);

// Formats bytes the way people read them: exact binary units when they divide evenly
// ("8Gi", "512Mi"), otherwise plain bytes.
// Writes at most `capacity` bytes including the terminating NUL; returns the length written.
size_t format_byte_quantity(uint64_t bytes, char* out, size_t capacity);

}  // namespace tessera

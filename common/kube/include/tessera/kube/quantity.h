// Kubernetes quantities (resource.Quantity) as kube-apiserver reads and writes them: parsed to an
// exact value, and written back in the canonical form it stores. The webhook compares an existing
// ResourceClaimTemplate's capacities by value, and sends its own in canonical form so what it
// reads back is what it sent.
//
// The rules, from k8s.io/apimachinery/pkg/api/resource/quantity.go (ParseQuantity,
// CanonicalizeBytes, AsCanonicalBytes, AsCanonicalBase1024Bytes):
// - Syntax: [+-] digits [. digits] suffix; the suffix is binary (Ki Mi Gi Ti Pi Ei), decimal
//   (n u m "" k M G T P E) or an exponent (e3, E-2). A plain number is decimal ("" is a decimal
//   suffix), so "8589934592" stays "8589934592" and "1024" stays "1024".
// - A value finer than 1n is rounded up (away from zero) to 1n.
// - The format is the suffix's kind. Binary: the number as a whole number times the largest
//   1024^k (k <= 6) that divides it ("3000Mi", "8Gi"); a binary value above -1024 and below 1024,
//   or not whole, is written as decimal instead ("0.5Ki" -> "512").
// - Decimal: trailing zeros removed, then the exponent lowered to a multiple of 3 and written as
//   its suffix ("5000000000" -> "5G", "1.5" -> "1500m", "1000" -> "1k"); above E (10^18) as an
//   exponent ("1000E" -> "1e21"). Exponent form: the same mantissa with "e<n>" ("1e3").
// - Zero is "0".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "tessera/status.h"

namespace tessera::kube {

// The exact value unscaled * 10^exponent, unscaled without trailing zeros (zero: 0, 0): two texts
// mean the same quantity when their values are equal ("8Gi" and "8589934592").
struct QuantityValue {
  __int128 unscaled = 0;
  int32_t exponent = 0;
  bool operator==(const QuantityValue&) const = default;
};

enum class QuantityFormat { kDecimalSI, kBinarySI, kDecimalExponent };

struct Quantity {
  QuantityValue value;
  QuantityFormat format = QuantityFormat::kDecimalSI;
};

// Parses `text` as ParseQuantity does; kInvalidArgument names the text and what is wrong. Values
// beyond 38 significant digits are refused (no capacity of ours comes near).
Result<Quantity> parse_quantity(std::string_view text);

// The text kube-apiserver stores for `quantity`.
std::string canonical_text(const Quantity& quantity);

// parse_quantity then canonical_text.
Result<std::string> canonical_quantity(std::string_view text);

// Bytes as the webhook sends them, already canonical: a whole multiple of 1024 in binary units
// ("8Gi", "1000Ki"), otherwise decimal ("5G", "1500k", "1536").
std::string canonical_bytes(uint64_t bytes);

}  // namespace tessera::kube

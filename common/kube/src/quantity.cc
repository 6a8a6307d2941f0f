#include "tessera/kube/quantity.h"

#include <algorithm>
#include <array>
#include <cstdlib>

#include "tessera/quantity.h"

namespace tessera::kube {
namespace {

using Int128 = __int128;

constexpr Int128 kInt128Max = (static_cast<Int128>(INT64_MAX) << 64) | UINT64_MAX;
constexpr int kMaxDigits = 38;          // every 38-digit number fits in 128 bits
constexpr int32_t kNanoExponent = -9;   // ParseQuantity rounds finer values up to 1n
constexpr int32_t kMaxExponent = 1000;  // far beyond any capacity; keeps the arithmetic in int32

struct Suffix {
  std::string_view text;
  QuantityFormat format;
  int32_t exponent;  // base 10, or base 2 for binary
};

constexpr std::array kSuffixes = {
    Suffix{"Ki", QuantityFormat::kBinarySI, 10}, Suffix{"Mi", QuantityFormat::kBinarySI, 20},
    Suffix{"Gi", QuantityFormat::kBinarySI, 30}, Suffix{"Ti", QuantityFormat::kBinarySI, 40},
    Suffix{"Pi", QuantityFormat::kBinarySI, 50}, Suffix{"Ei", QuantityFormat::kBinarySI, 60},
    Suffix{"n", QuantityFormat::kDecimalSI, -9}, Suffix{"u", QuantityFormat::kDecimalSI, -6},
    Suffix{"m", QuantityFormat::kDecimalSI, -3}, Suffix{"", QuantityFormat::kDecimalSI, 0},
    Suffix{"k", QuantityFormat::kDecimalSI, 3},  Suffix{"M", QuantityFormat::kDecimalSI, 6},
    Suffix{"G", QuantityFormat::kDecimalSI, 9},  Suffix{"T", QuantityFormat::kDecimalSI, 12},
    Suffix{"P", QuantityFormat::kDecimalSI, 15}, Suffix{"E", QuantityFormat::kDecimalSI, 18},
};

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

std::string digits_of(Int128 magnitude) {
  if (magnitude == 0) return "0";
  std::string out;
  while (magnitude > 0) {
    out.push_back(static_cast<char>('0' + static_cast<int>(magnitude % 10)));
    magnitude /= 10;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

Int128 abs128(Int128 value) {
  return value < 0 ? -value : value;
}

void strip_trailing_zeros(QuantityValue& value) {
  if (value.unscaled == 0) {
    value.exponent = 0;
    return;
  }
  while (value.unscaled % 10 == 0) {
    value.unscaled /= 10;
    ++value.exponent;
  }
}

Status bad(std::string_view text, const std::string& why) {
  return invalid_argument("quantity \"" + std::string(text) + "\": " + why);
}

// The decimal form: mantissa and an exponent lowered to a multiple of 3 (AsCanonicalBytes), the
// exponent's suffix where there is one (constructBytes), else "e<n>".
std::string decimal_text(const QuantityValue& value, QuantityFormat format) {
  if (value.unscaled == 0) return "0";
  const int32_t remainder = ((value.exponent % 3) + 3) % 3;
  const int32_t exponent = value.exponent - remainder;
  std::string out = value.unscaled < 0 ? "-" : "";
  out += digits_of(abs128(value.unscaled));
  out.append(static_cast<size_t>(remainder), '0');
  if (format == QuantityFormat::kDecimalSI) {
    for (const Suffix& suffix : kSuffixes) {
      if (suffix.format == QuantityFormat::kDecimalSI && suffix.exponent == exponent) {
        out += suffix.text;
        return out;
      }
    }
  }
  if (exponent != 0) {
    out += 'e';
    out += std::to_string(exponent);
  }
  return out;
}

// ParseQuantity keeps the text as written when its int64 fast path finds it already canonical
// (the `s: str` returns): the value fits in int64 at a scale of at least 1n, and for decimal the
// scale is a multiple of 3 with no "000" at the end, for binary the number is not a multiple of 8.
bool kept_as_written(std::string_view num, std::string_view denom, const Suffix& suffix) {
  if (suffix.format == QuantityFormat::kBinarySI) {
    if (!denom.empty()) return false;
    const int precision = 15 - static_cast<int>(num.size()) -
                          static_cast<int>(static_cast<float>(suffix.exponent) * 3 / 10) - 1;
    if (precision < 0) return false;
    const uint64_t number = std::strtoull(std::string(num).c_str(), nullptr, 10);
    return (number & 0x07) != 0;
  }
  if (num.size() + denom.size() > 18) return false;
  const int32_t scale = suffix.exponent - static_cast<int32_t>(denom.size());
  if (scale < kNanoExponent) return false;
  const std::string shifted = std::string(num) + std::string(denom);
  const bool ends_in_000 = shifted.size() >= 3 && shifted.ends_with("000");
  return scale % 3 == 0 && !ends_in_000 && shifted[0] != '0';
}

struct Parsed {
  Quantity quantity;
  bool kept_as_written = false;
};

Result<Parsed> parse(std::string_view text) {
  if (text.empty()) return bad(text, "empty");
  size_t pos = 0;
  bool negative = false;
  if (text[pos] == '+' || text[pos] == '-') negative = text[pos++] == '-';
  const size_t num_start = pos;
  while (pos < text.size() && is_digit(text[pos])) ++pos;
  std::string_view num = text.substr(num_start, pos - num_start);
  std::string_view denom;
  if (pos < text.size() && text[pos] == '.') {
    const size_t denom_start = ++pos;
    while (pos < text.size() && is_digit(text[pos])) ++pos;
    denom = text.substr(denom_start, pos - denom_start);
  }
  if (num.empty() && denom.empty()) return bad(text, "no number");
  const std::string_view suffix_text = text.substr(pos);

  Suffix suffix{"", QuantityFormat::kDecimalSI, 0};
  bool known = false;
  for (const Suffix& candidate : kSuffixes) {
    if (candidate.text == suffix_text) {
      suffix = candidate;
      known = true;
      break;
    }
  }
  if (!known && suffix_text.size() > 1 && (suffix_text[0] == 'e' || suffix_text[0] == 'E')) {
    std::string_view exponent_text = suffix_text.substr(1);
    bool exponent_negative = false;
    if (exponent_text[0] == '+' || exponent_text[0] == '-') {
      exponent_negative = exponent_text[0] == '-';
      exponent_text.remove_prefix(1);
    }
    int32_t exponent = 0;
    bool digits = !exponent_text.empty();
    for (char c : exponent_text) {
      if (!is_digit(c) || exponent > kMaxExponent) {
        digits = false;
        break;
      }
      exponent = exponent * 10 + (c - '0');
    }
    if (digits && exponent <= kMaxExponent) {
      suffix = {suffix_text, QuantityFormat::kDecimalExponent,
                exponent_negative ? -exponent : exponent};
      known = true;
    }
  }
  if (!known)
    return bad(text, "unknown suffix \"" + std::string(suffix_text) +
                         "\" (expected Ki Mi Gi Ti Pi Ei, n u m k M G T P E or an exponent)");

  while (!num.empty() && num[0] == '0') num.remove_prefix(1);
  std::string digits = std::string(num) + std::string(denom);
  const size_t first = digits.find_first_not_of('0');
  digits = first == std::string::npos ? "" : digits.substr(first);
  if (digits.size() > static_cast<size_t>(kMaxDigits)) return bad(text, "too many digits");

  QuantityValue value;
  for (char c : digits) value.unscaled = value.unscaled * 10 + (c - '0');
  value.exponent = -static_cast<int32_t>(denom.size());
  if (suffix.format == QuantityFormat::kBinarySI) {
    if (value.unscaled > (kInt128Max >> suffix.exponent)) return bad(text, "too large");
    value.unscaled <<= suffix.exponent;
  } else {
    value.exponent += suffix.exponent;
  }
  // Round up (away from zero) to 1n: a request for a little gets a little, never nothing.
  if (value.unscaled != 0 && value.exponent < kNanoExponent) {
    const int32_t drop = kNanoExponent - value.exponent;
    Int128 divisor = 1;
    bool beyond = false;  // the divisor exceeds the value: the quotient rounds up to 1
    for (int32_t i = 0; i < drop && !beyond; ++i) {
      if (divisor > value.unscaled / 10)
        beyond = true;
      else
        divisor *= 10;
    }
    value.unscaled = beyond ? 1 : (value.unscaled + divisor - 1) / divisor;
    value.exponent = kNanoExponent;
  }
  if (negative) value.unscaled = -value.unscaled;
  strip_trailing_zeros(value);
  Parsed parsed;
  parsed.quantity = {value, suffix.format};
  parsed.kept_as_written = text == "0" || kept_as_written(num.empty() ? "0" : num, denom, suffix);
  return parsed;
}

}  // namespace

Result<Quantity> parse_quantity(std::string_view text) {
  TESSERA_ASSIGN_OR_RETURN(Parsed parsed, parse(text));
  return parsed.quantity;
}

std::string canonical_text(const Quantity& quantity) {
  const QuantityValue& value = quantity.value;
  if (value.unscaled == 0) return "0";
  if (quantity.format != QuantityFormat::kBinarySI) return decimal_text(value, quantity.format);
  // Binary only for a whole number of at least 1024 in magnitude; anything else as decimal.
  if (value.exponent < 0) return decimal_text(value, QuantityFormat::kDecimalSI);
  Int128 whole = abs128(value.unscaled);
  for (int32_t i = 0; i < value.exponent; ++i) {
    if (whole > kInt128Max / 10) return decimal_text(value, QuantityFormat::kDecimalSI);
    whole *= 10;
  }
  if (whole < 1024) return decimal_text(value, QuantityFormat::kDecimalSI);
  static constexpr std::array<const char*, 7> kBinarySuffixes = {"",   "Ki", "Mi", "Gi",
                                                                 "Ti", "Pi", "Ei"};
  size_t power = 0;
  while (power + 1 < kBinarySuffixes.size() && whole % 1024 == 0) {
    whole /= 1024;
    ++power;
  }
  std::string out = value.unscaled < 0 ? "-" : "";
  out += digits_of(whole);
  out += kBinarySuffixes[power];
  return out;
}

Result<std::string> canonical_quantity(std::string_view text) {
  TESSERA_ASSIGN_OR_RETURN(Parsed parsed, parse(text));
  if (parsed.kept_as_written) return std::string(text);
  return canonical_text(parsed.quantity);
}

std::string canonical_bytes(uint64_t bytes) {
  if (bytes != 0 && bytes % 1024 == 0) {
    char text[32];
    format_byte_quantity(bytes, text, sizeof(text));
    return text;
  }
  QuantityValue value{static_cast<Int128>(bytes), 0};
  strip_trailing_zeros(value);
  return decimal_text(value, QuantityFormat::kDecimalSI);
}

}  // namespace tessera::kube

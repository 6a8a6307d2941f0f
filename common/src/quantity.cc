#include "tessera/quantity.h"

#include <cstdio>

namespace tessera {
namespace {

struct Suffix {
  std::string_view text;
  uint64_t multiplier;
};

constexpr Suffix kSuffixes[] = {
    {"Ki", 1ull << 10},
    {"Mi", 1ull << 20},
    {"Gi", 1ull << 30},
    {"Ti", 1ull << 40},
    {"Pi", 1ull << 50},
    {"Ei", 1ull << 60},
    {"k", 1000ull},
    {"K", 1000ull},
    {"M", 1000'000ull},
    {"G", 1000'000'000ull},
    {"T", 1000'000'000'000ull},
    {"P", 1000'000'000'000'000ull},
    {"E", 1000'000'000'000'000'000ull},
};

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

}  // namespace

std::optional<uint64_t> parse_byte_quantity(std::string_view text) {
  size_t pos = 0;
  uint64_t whole = 0;
  size_t whole_digits = 0;
  while (pos < text.size() && is_digit(text[pos])) {
    const uint64_t digit = static_cast<uint64_t>(text[pos] - '0');
    if (whole > (UINT64_MAX - digit) / 10) return std::nullopt;
    whole = whole * 10 + digit;
    ++pos;
    ++whole_digits;
  }
  // Fraction kept as numerator / denominator, at most 18 digits so it fits in 64 bits.
  uint64_t frac_num = 0;
  uint64_t frac_den = 1;
  size_t frac_digits = 0;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    while (pos < text.size() && is_digit(text[pos])) {
      if (frac_digits == 18) return std::nullopt;
      frac_num = frac_num * 10 + static_cast<uint64_t>(text[pos] - '0');
      frac_den *= 10;
      ++pos;
      ++frac_digits;
    }
    if (frac_digits == 0) return std::nullopt;
  }
  if (whole_digits == 0) return std::nullopt;

  uint64_t multiplier = 1;
  const std::string_view rest = text.substr(pos);
  if (!rest.empty()) {
    bool matched = false;
    for (const Suffix& suffix : kSuffixes) {
      if (rest == suffix.text) {
        multiplier = suffix.multiplier;
        matched = true;
        break;
      }
    }
    if (!matched) return std::nullopt;
  }

  if (whole != 0 && multiplier > UINT64_MAX / whole) return std::nullopt;
  uint64_t bytes = whole * multiplier;
  if (frac_num != 0) {
    // frac_num / frac_den * multiplier must be a whole number of bytes.
    // Use 128-bit arithmetic: frac_num < 10^18 and multiplier <= 2^60.
    const unsigned __int128 scaled = static_cast<unsigned __int128>(frac_num) * multiplier;
    if (scaled % frac_den != 0) return std::nullopt;
    const unsigned __int128 extra = scaled / frac_den;
    if (extra > UINT64_MAX - bytes) return std::nullopt;
    bytes += static_cast<uint64_t>(extra);
  }
  return bytes;
}

size_t format_byte_quantity(uint64_t bytes, char* out, size_t capacity) {
  static constexpr struct {
    const char* suffix;
    int shift;
  } kUnits[] = {{"Ei", 60}, {"Pi", 50}, {"Ti", 40}, {"Gi", 30}, {"Mi", 20}, {"Ki", 10}};
  if (capacity == 0) return 0;
  int written = -1;
  if (bytes != 0) {
    for (const auto& unit : kUnits) {
      const uint64_t mask = (1ull << unit.shift) - 1;
      if ((bytes & mask) == 0) {
        written = std::snprintf(out, capacity, "%llu%s",
                                static_cast<unsigned long long>(bytes >> unit.shift), unit.suffix);
        break;
      }
    }
  }
  if (written < 0) {
    written = std::snprintf(out, capacity, "%llu", static_cast<unsigned long long>(bytes));
  }
  const size_t length = static_cast<size_t>(written);
  return length < capacity ? length : capacity - 1;
}

std::optional<uint32_t> parse_percent(std::string_view text, uint32_t min, uint32_t max) {
  // Three digits hold 100; a longer text (leading zeros included) is no percent.
  if (text.empty() || text.size() > 3) return std::nullopt;
  uint32_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<uint32_t>(c - '0');
  }
  if (value < min || value > max || value > 100) return std::nullopt;
  return value;
}

}  // namespace tessera

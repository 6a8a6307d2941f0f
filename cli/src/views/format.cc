#include "views/format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace tessera::cli {

std::string format_bytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 6) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  if (unit == 0) {
    std::snprintf(text, sizeof text, "%llu", static_cast<unsigned long long>(bytes));
  } else if (value < 10.0 && std::round(value * 10.0) != std::round(value) * 10.0) {
    std::snprintf(text, sizeof text, "%.1f%s", value, kUnits[unit]);
  } else {
    std::snprintf(text, sizeof text, "%.0f%s", value, kUnits[unit]);
  }
  return text;
}

std::string format_age(int64_t milliseconds) {
  if (milliseconds < 0) return "<unknown>";
  const int64_t s = milliseconds / 1000;
  const int64_t m = s / 60;
  const int64_t h = m / 60;
  const int64_t d = h / 24;
  auto two = [](int64_t a, const char* ua, int64_t b, const char* ub) {
    std::string text = std::to_string(a);
    text += ua;
    if (b) {
      text += std::to_string(b);
      text += ub;
    }
    return text;
  };
  if (s < 120) return std::to_string(s) + "s";
  if (m < 10) return two(m, "m", s % 60, "s");
  if (h < 3) return std::to_string(m) + "m";
  if (h < 8) return two(h, "h", m % 60, "m");
  if (d < 2) return std::to_string(h) + "h";
  if (d < 8) return two(d, "d", h % 24, "h");
  return std::to_string(d) + "d";
}

std::string format_bar(double fraction, int width) {
  width = std::max(width, 2);
  const int inside = width - 2;
  if (!(fraction > 0)) fraction = 0;  // also NaN
  fraction = std::min(fraction, 1.0);
  const int filled = static_cast<int>(std::lround(fraction * inside));
  std::string bar(static_cast<size_t>(width), '.');
  bar.front() = '[';
  bar.back() = ']';
  std::fill_n(bar.begin() + 1, filled, '#');
  return bar;
}

std::string fit(const std::string& text, int width) {
  if (width <= 0) return "";
  if (static_cast<int>(text.size()) <= width) return text;
  if (width < 4) return text.substr(0, static_cast<size_t>(width));
  const int tail = (width - 1) / 2;
  const int head = width - 1 - tail;
  std::string out = text.substr(0, static_cast<size_t>(head));
  out += '~';
  out.append(text, text.size() - static_cast<size_t>(tail), std::string::npos);
  return out;
}

std::string pad_right(const std::string& text, int width) {
  std::string out = fit(text, width);
  out.resize(static_cast<size_t>(std::max(width, 0)), ' ');
  return out;
}

std::string pad_left(const std::string& text, int width) {
  std::string out = fit(text, width);
  if (static_cast<int>(out.size()) < width)
    out.insert(0, static_cast<size_t>(width) - out.size(), ' ');
  return out;
}

}  // namespace tessera::cli

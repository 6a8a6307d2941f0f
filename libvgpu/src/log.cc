#include "log.h"

#include <cstdarg>
#include <cstddef>

#include "os/system_calls.h"

namespace tessera::vgpu {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kError)};

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kError:
      return "error";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kDebug:
      return "debug";
  }
  return "?";
}

struct Writer {
  char* out;
  size_t capacity;  // including the NUL
  size_t length = 0;
  void put(char c) {
    if (length + 1 < capacity) out[length++] = c;
  }
  void put(const char* text) {
    if (!text) text = "(null)";
    while (*text) put(*text++);
  }
  // A value copied into a line (a %s argument): control characters and the backslash escaped, so
  // no value can end the line or forge another; cut once its escaped form reaches kMaxValueBytes,
  // saying how long it was, so the reason that follows always fits.
  void put_value(const char* text) {
    if (!text) {
      put("(null)");
      return;
    }
    static constexpr char kHex[] = "0123456789abcdef";
    size_t i = 0;
    size_t written = 0;
    for (; text[i] && written < kMaxValueBytes; ++i) {
      const auto c = static_cast<unsigned char>(text[i]);
      char escaped[4] = {'\\', 0, 0, 0};
      size_t size = 2;
      switch (c) {
        case '\n':
          escaped[1] = 'n';
          break;
        case '\r':
          escaped[1] = 'r';
          break;
        case '\t':
          escaped[1] = 't';
          break;
        case '\\':
          escaped[1] = '\\';
          break;
        default:
          if (c < 0x20 || c == 0x7f) {
            escaped[1] = 'x';
            escaped[2] = kHex[c >> 4];
            escaped[3] = kHex[c & 15];
            size = 4;
          } else {
            escaped[0] = static_cast<char>(c);
            size = 1;
          }
      }
      for (size_t k = 0; k < size; ++k) put(escaped[k]);
      written += size;
    }
    if (text[i]) {
      while (text[i]) ++i;
      put("...(");
      put_unsigned(i, 10);
      put(" bytes)");
    }
  }
  void put_unsigned(unsigned long long value, unsigned base) {
    char digits[24];
    int n = 0;
    do {
      const unsigned digit = static_cast<unsigned>(value % base);
      digits[n++] = static_cast<char>(digit < 10 ? '0' + digit : 'a' + digit - 10);
      value /= base;
    } while (value != 0);
    while (n > 0) put(digits[--n]);
  }
  void put_signed(long long value) {
    if (value < 0) {
      put('-');
      put_unsigned(0ull - static_cast<unsigned long long>(value), 10);
    } else {
      put_unsigned(static_cast<unsigned long long>(value), 10);
    }
  }
};

}  // namespace

void set_log_level(LogLevel level) {
  g_level.store(static_cast<int>(level), std::memory_order_relaxed);
}

bool log_enabled(LogLevel level) {
  return static_cast<int>(level) <= g_level.load(std::memory_order_relaxed);
}

bool log_site_allows(std::atomic<uint32_t>& counter, LogLevel level) {
  if (!log_enabled(level)) return false;
  const uint32_t seen = counter.fetch_add(1, std::memory_order_relaxed);
  if (seen < kMaxRepeats) return true;
  if (seen == kMaxRepeats) {
    static constexpr char kSuppressed[] = "tessera: further messages from this site suppressed\n";
    [[maybe_unused]] ssize_t ignored = os::write(2, kSuppressed, sizeof kSuppressed - 1);
  }
  return false;
}

size_t format_message(char* out, size_t capacity, const char* format, va_list args) {
  if (capacity == 0) return 0;
  Writer w{out, capacity};
  for (const char* p = format; *p; ++p) {
    if (*p != '%') {
      w.put(*p);
      continue;
    }
    ++p;
    int longs = 0;
    bool size_t_arg = false;
    while (*p == 'l') {
      ++longs;
      ++p;
    }
    if (*p == 'z') {
      size_t_arg = true;
      ++p;
    }
    switch (*p) {
      case 's':
        w.put_value(va_arg(args, const char*));
        break;
      case 'd':
        if (longs >= 2) {
          w.put_signed(va_arg(args, long long));
        } else if (longs == 1) {
          w.put_signed(va_arg(args, long));
        } else {
          w.put_signed(va_arg(args, int));
        }
        break;
      case 'u':
      case 'x': {
        const unsigned base = *p == 'x' ? 16 : 10;
        if (size_t_arg) {
          w.put_unsigned(va_arg(args, size_t), base);
        } else if (longs >= 2) {
          w.put_unsigned(va_arg(args, unsigned long long), base);
        } else if (longs == 1) {
          w.put_unsigned(va_arg(args, unsigned long), base);
        } else {
          w.put_unsigned(va_arg(args, unsigned), base);
        }
        break;
      }
      case '%':
        w.put('%');
        break;
      case '\0':
        --p;  // a trailing '%': stop at the terminator
        break;
      default:
        w.put('%');
        w.put(*p);
        break;
    }
  }
  out[w.length] = '\0';
  return w.length;
}

size_t format_text(char* out, size_t capacity, const char* format, ...) {
  va_list args;
  va_start(args, format);
  const size_t length = format_message(out, capacity, format, args);
  va_end(args);
  return length;
}

void write_line(LogLevel level, const char* text) {
  char buffer[kMessageBytes + 32];
  Writer line{buffer, sizeof buffer - 1};
  line.put("tessera: ");
  line.put(level_name(level));
  line.put(": ");
  line.put(text);
  size_t length = line.length;
  buffer[length++] = '\n';
  size_t written = 0;
  while (written < length) {
    const ssize_t n = os::write(2, buffer + written, length - written);
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
}

void log_message(LogLevel level, const char* format, ...) {
  char buffer[kMessageBytes];
  Writer prefix{buffer, sizeof buffer};
  prefix.put("tessera: ");
  prefix.put(level_name(level));
  prefix.put(": ");
  va_list args;
  va_start(args, format);
  size_t length = prefix.length + format_message(buffer + prefix.length,
                                                 sizeof buffer - prefix.length - 1, format, args);
  va_end(args);
  buffer[length++] = '\n';
  size_t written = 0;
  while (written < length) {
    const ssize_t n = os::write(2, buffer + written, length - written);
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
}

}  // namespace tessera::vgpu

#include "usage/share_processes.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "tessera/share_region.h"

namespace tessera::agent {
namespace {

// Reads a small /proc file whole (at most `limit` bytes). False when it cannot be opened.
bool read_small_file(const std::string& path, std::string& out, size_t limit = 16384) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  out.clear();
  char buffer[4096];
  while (out.size() < limit) {
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return true;
}

uint64_t digits_of(const char* text) {
  uint64_t value = 0;
  for (const char* p = text; *p; ++p)
    if (*p >= '0' && *p <= '9') value = value * 10 + static_cast<uint64_t>(*p - '0');
  return value;
}

}  // namespace

// Opens a file a tenant may have replaced: never follows a final symlink, never blocks on a FIFO,
// and only a regular file of at least `size` bytes is accepted.
Result<int> open_regular(const std::string& path, int flags, size_t size) {
  const int fd = open(path.c_str(), flags | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0 && (errno == ENOENT || errno == ENOTDIR))
    return not_found("cannot open " + path + ": " + std::strerror(errno));
  if (fd < 0 && errno == ELOOP) return failed_precondition(path + " is a symlink");
  if (fd < 0) return internal_error("cannot open " + path + ": " + std::strerror(errno));
  struct stat info {};
  if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode) || static_cast<size_t>(info.st_size) < size) {
    close(fd);
    return failed_precondition(path + " is not a regular file of at least " + std::to_string(size) +
                               " bytes");
  }
  return fd;
}

std::vector<uint64_t> usage_page_owners(const std::string& path) {
  std::vector<uint64_t> owners;
  constexpr size_t kHeader = offsetof(share::UsagePage, slots);
  const Result<int> opened = open_regular(path, O_RDONLY, kHeader);
  if (!opened.is_ok()) return owners;
  const int fd = *opened;
  std::vector<unsigned char> buffer(sizeof(share::UsagePage), 0);
  unsigned char* bytes = buffer.data();
  const auto* page = reinterpret_cast<const share::UsagePage*>(bytes);
  if (pread(fd, bytes, kHeader, 0) == static_cast<ssize_t>(kHeader) &&
      share::valid_usage_page(*page)) {
    uint32_t high = page->slot_high_water.load(std::memory_order_relaxed);
    if (high > share::kMaxSlots) high = share::kMaxSlots;
    const ssize_t got = pread(fd, bytes + kHeader, high * sizeof(share::ProcessSlot), kHeader);
    const uint32_t whole =
        got > 0 ? static_cast<uint32_t>(static_cast<size_t>(got) / sizeof(share::ProcessSlot)) : 0;
    for (uint32_t i = 0; i < whole && i < high; ++i) {
      const uint64_t owner = page->slots[i].owner.load(std::memory_order_relaxed);
      // Free, or being reclaimed by another process of the share (its owner is dead).
      if (owner == 0 || (owner & share::kOwnerReclaiming) != 0) continue;
      owners.push_back(owner);
    }
  }
  close(fd);
  std::sort(owners.begin(), owners.end());
  owners.erase(std::unique(owners.begin(), owners.end()), owners.end());
  return owners;
}

std::optional<uint64_t> process_owner(const std::string& proc_root, int host_pid) {
  if (host_pid <= 0) return std::nullopt;
  const std::string base = proc_root + "/" + std::to_string(host_pid);
  char link_text[64] = {};
  if (readlink((base + "/ns/pid").c_str(), link_text, sizeof link_text - 1) <= 0)
    return std::nullopt;
  const uint64_t pid_namespace = digits_of(link_text);

  std::string status;
  if (!read_small_file(base + "/status", status)) return std::nullopt;
  uint64_t inner_pid = 0;
  bool zombie = false;
  size_t start = 0;
  while (start < status.size()) {
    size_t end = status.find('\n', start);
    if (end == std::string::npos) end = status.size();
    const std::string_view line(status.data() + start, end - start);
    if (line.rfind("State:", 0) == 0) zombie = line.find('Z') != std::string_view::npos;
    if (line.rfind("NSpid:", 0) == 0) {
      // The last number: the pid in the process's own (innermost) namespace.
      uint64_t value = 0;
      bool in_number = false;
      for (const char c : line.substr(6)) {
        if (c >= '0' && c <= '9') {
          value = (in_number ? value * 10 : 0) + static_cast<uint64_t>(c - '0');
          in_number = true;
        } else if (in_number) {
          inner_pid = value;
          in_number = false;
        }
      }
      if (in_number) inner_pid = value;
    }
    start = end + 1;
  }
  if (zombie || inner_pid == 0 || inner_pid > 0x3fffff) return std::nullopt;

  std::string stat;
  if (!read_small_file(base + "/stat", stat)) return std::nullopt;
  const size_t close_paren = stat.rfind(')');
  if (close_paren == std::string::npos) return std::nullopt;
  // Fields after the command: 3 (state) ... 22 (start time).
  const char* p = stat.c_str() + close_paren + 1;
  for (int field = 3; field < 22; ++field) {
    while (*p == ' ') ++p;
    while (*p && *p != ' ') ++p;
    if (!*p) return std::nullopt;
  }
  while (*p == ' ') ++p;
  if (*p < '0' || *p > '9') return std::nullopt;
  uint64_t start_time = 0;
  while (*p >= '0' && *p <= '9') start_time = start_time * 10 + static_cast<uint64_t>(*p++ - '0');
  return share::make_owner(static_cast<uint32_t>(inner_pid), pid_namespace, start_time);
}

std::map<uint64_t, int> live_process_owners(const std::string& proc_root) {
  std::map<uint64_t, int> owners;
  DIR* proc = opendir(proc_root.c_str());
  if (!proc) return owners;
  while (const dirent* entry = readdir(proc)) {
    char* end = nullptr;
    const long host_pid = std::strtol(entry->d_name, &end, 10);
    if (!end || *end || host_pid <= 0 || host_pid > 0x7fffffff) continue;
    if (const auto owner = process_owner(proc_root, static_cast<int>(host_pid)))
      owners[*owner] = static_cast<int>(host_pid);
  }
  closedir(proc);
  return owners;
}

}  // namespace tessera::agent

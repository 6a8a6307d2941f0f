#include "observe/process_map.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>

#include "tessera/share_contract.h"
#include "tessera/share_region.h"

namespace tessera::agent {
namespace {

bool is_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// "<8>-<4>-<4>-<4>-<12>" hexadecimal, with `dash` as the separator.
bool uuid_shaped(std::string_view text, char dash) {
  if (text.size() != 36) return false;
  for (size_t i = 0; i < text.size(); ++i) {
    const bool separator = i == 8 || i == 13 || i == 18 || i == 23;
    if (separator ? text[i] != dash : !is_hex(text[i])) return false;
  }
  return true;
}

// The pod UID one path component names: "pod<uid>" (cgroupfs) or "kubepods-<qos>-pod<uid with
// _>.slice" / "kubepods-pod<uid>.slice" (systemd).
std::optional<std::string> pod_of_component(std::string_view component) {
  if (component.starts_with("pod") && uuid_shaped(component.substr(3), '-'))
    return std::string(component.substr(3));
  if (component.starts_with("kubepods") && component.ends_with(".slice")) {
    const size_t at = component.rfind("-pod");
    if (at == std::string_view::npos) return std::nullopt;
    std::string_view uid = component.substr(at + 4, component.size() - at - 4 - 6);
    if (!uuid_shaped(uid, '_')) return std::nullopt;
    std::string text(uid);
    for (char& c : text)
      if (c == '_') c = '-';
    return text;
  }
  return std::nullopt;
}

// Reads a small proc file whole (up to 64 KiB); "" when it cannot be read.
std::string read_small(const std::string& path) {
  std::string text;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return text;
  char buffer[4096];
  ssize_t got;
  while ((got = read(fd, buffer, sizeof buffer)) > 0 && text.size() < 65536)
    text.append(buffer, static_cast<size_t>(got));
  close(fd);
  return text;
}

}  // namespace

std::optional<std::string> pod_uid_of_cgroup_path(std::string_view path) {
  while (!path.empty()) {
    const size_t slash = path.find('/');
    const std::string_view component = path.substr(0, slash);
    if (auto uid = pod_of_component(component)) return uid;
    if (slash == std::string_view::npos) break;
    path.remove_prefix(slash + 1);
  }
  return std::nullopt;
}

std::optional<std::string> pod_uid_of_cgroup_file(std::string_view text) {
  while (!text.empty()) {
    const size_t newline = text.find('\n');
    std::string_view line = text.substr(0, newline);
    // "hierarchy-ID:controller-list:cgroup-path"; the path may itself hold ':'.
    const size_t first = line.find(':');
    const size_t second = first == std::string_view::npos ? first : line.find(':', first + 1);
    if (second != std::string_view::npos)
      if (auto uid = pod_uid_of_cgroup_path(line.substr(second + 1))) return uid;
    if (newline == std::string_view::npos) break;
    text.remove_prefix(newline + 1);
  }
  return std::nullopt;
}

const ProcessFacts* ProcessMap::lookup(int host_pid) {
  if (host_pid <= 0) return nullptr;
  Entry& entry = processes_[host_pid];
  if (entry.checked_pass == pass_) return entry.alive ? &entry.facts : nullptr;
  entry.checked_pass = pass_;
  uint64_t start_time = 0;
  if (share::read_process_start_time(proc_root_, host_pid, start_time) != 0) {
    entry.alive = false;
    return nullptr;
  }
  if (entry.alive && entry.facts.start_time == start_time) return &entry.facts;
  // New, or the pid was reused: everything again.
  ++full_reads_;
  entry.facts = ProcessFacts{};
  share::ProcessIdentity identity;
  if (share::read_process_identity(proc_root_, host_pid, identity) != 0) {
    entry.alive = false;
    return nullptr;
  }
  entry.facts.start_time = identity.start_time;
  entry.facts.owner = identity.owner();
  const std::string cgroups = read_small(proc_root_ + "/" + std::to_string(host_pid) + "/cgroup");
  // One pod per distinct cgroup file text: a pod's processes share it, so it is parsed once.
  auto cached = pods_by_cgroup_.find(cgroups);
  if (cached == pods_by_cgroup_.end()) {
    if (pods_by_cgroup_.size() > 65536) pods_by_cgroup_.clear();
    cached = pods_by_cgroup_.emplace(cgroups, pod_uid_of_cgroup_file(cgroups)).first;
  }
  entry.facts.pod_uid = cached->second;
  entry.alive = true;
  return &entry.facts;
}

void ProcessMap::end_pass() {
  std::erase_if(processes_, [this](const auto& item) { return item.second.checked_pass != pass_; });
}

std::optional<int> parent_pid(const std::string& proc_root, int host_pid) {
  // "pid (comm) state ppid ...": the command may hold spaces and parentheses, the last ')' ends it.
  const std::string stat = read_small(proc_root + "/" + std::to_string(host_pid) + "/stat");
  const size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 4 >= stat.size()) return std::nullopt;
  const char* field = stat.c_str() + close + 4;  // past ") S "
  char* end = nullptr;
  const long parent = std::strtol(field, &end, 10);
  if (end == field || parent <= 0) return std::nullopt;
  return static_cast<int>(parent);
}

const std::map<uint64_t, int>& ProcessMap::live_owners() {
  walk();
  return live_owners_;
}

const std::map<int, ProcessFacts>& ProcessMap::walk() {
  if (walked_pass_ == pass_) return walked_;
  walked_pass_ = pass_;
  walked_.clear();
  live_owners_.clear();
  DIR* proc = opendir(proc_root_.c_str());
  if (!proc) return walked_;
  while (const dirent* entry = readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(entry->d_name, &end, 10);
    if (!end || *end || pid <= 0 || pid > 0x7fffffff) continue;
    const ProcessFacts* facts = lookup(static_cast<int>(pid));
    if (!facts) continue;
    walked_.emplace(static_cast<int>(pid), *facts);
    if (facts->owner) live_owners_[*facts->owner] = static_cast<int>(pid);
  }
  closedir(proc);
  return walked_;
}

}  // namespace tessera::agent

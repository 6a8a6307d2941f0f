#include "cgroup.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <iterator>

#include "tessera/file_io.h"

namespace simgpu {
namespace {

std::vector<std::string_view> split_fields(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t start = 0;
  while (start < line.size()) {
    const size_t end = line.find(' ', start);
    const size_t stop = end == std::string_view::npos ? line.size() : end;
    if (stop > start) fields.push_back(line.substr(start, stop - start));
    start = stop + 1;
  }
  return fields;
}

// mountinfo escapes space, tab, newline and backslash as \ooo (octal).
std::string decode_octal_escapes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 3 < text.size()) {
      const std::string_view digits = text.substr(i + 1, 3);
      bool octal = true;
      int value = 0;
      for (char c : digits) {
        if (c < '0' || c > '7') octal = false;
        value = value * 8 + (c - '0');
      }
      if (octal) {
        out.push_back(static_cast<char>(value));
        i += 3;
        continue;
      }
    }
    out.push_back(text[i]);
  }
  return out;
}

std::string join_cgroup(std::string_view root, std::string_view rest) {
  // rest is "" or starts with '/'
  if (root == "/" || root.empty()) return rest.empty() ? "/" : std::string(rest);
  return std::string(root) + std::string(rest);
}

}  // namespace

std::optional<std::string> parse_proc_cgroup(std::string_view text) {
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    const std::string_view line =
        text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    if (line.starts_with("0::")) return std::string(line.substr(3));
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return std::nullopt;
}

std::vector<Cgroup2Mount> parse_cgroup2_mounts(std::string_view mountinfo) {
  std::vector<Cgroup2Mount> mounts;
  size_t start = 0;
  while (start < mountinfo.size()) {
    const size_t end = mountinfo.find('\n', start);
    const std::string_view line = mountinfo.substr(
        start, end == std::string_view::npos ? std::string_view::npos : end - start);
    start = end == std::string_view::npos ? mountinfo.size() : end + 1;
    const std::vector<std::string_view> fields = split_fields(line);
    // id parent major:minor root mount-point options [optional...] - type source super-options
    size_t separator = 6;
    while (separator < fields.size() && fields[separator] != "-") ++separator;
    if (fields.size() < 6 || separator + 1 >= fields.size()) continue;
    if (fields[separator + 1] != "cgroup2") continue;
    mounts.push_back({decode_octal_escapes(fields[4]), decode_octal_escapes(fields[3])});
  }
  return mounts;
}

std::optional<std::string> normalise_absolute_path(std::string_view path) {
  if (!path.starts_with('/')) return std::nullopt;
  std::vector<std::string_view> parts;
  size_t start = 1;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    const std::string_view part = path.substr(start, end - start);
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
    } else if (!part.empty() && part != ".") {
      parts.push_back(part);
    }
    start = end + 1;
  }
  std::string out;
  for (std::string_view part : parts) {
    out.push_back('/');
    out.append(part);
  }
  return out.empty() ? std::string("/") : out;
}

bool is_same_or_ancestor(std::string_view ancestor, std::string_view path) {
  if (ancestor == "/") return path.starts_with('/');
  if (!path.starts_with(ancestor)) return false;
  return path.size() == ancestor.size() || path[ancestor.size()] == '/';
}

std::optional<std::string> cgroup_of_directory(std::string_view directory,
                                               const std::vector<Cgroup2Mount>& mounts) {
  const Cgroup2Mount* best = nullptr;
  for (const Cgroup2Mount& mount : mounts) {
    if (!is_same_or_ancestor(mount.mount_point, directory)) continue;
    if (best == nullptr || mount.mount_point.size() > best->mount_point.size()) best = &mount;
  }
  if (best == nullptr) return std::nullopt;
  const std::string_view rest =
      best->mount_point == "/" ? directory : directory.substr(best->mount_point.size());
  return normalise_absolute_path(join_cgroup(best->root, rest == "/" ? "" : rest));
}

std::optional<std::string> read_process_cgroup(int pid) {
  char path[64];
  if (pid == 0) {
    std::snprintf(path, sizeof path, "/proc/self/cgroup");
  } else {
    std::snprintf(path, sizeof path, "/proc/%d/cgroup", pid);
  }
  // One line per v1 hierarchy and the v2 line, each a path of at most PATH_MAX.
  char text[8192];
  const tessera::ReadResult read = tessera::read_small_file(path, text, sizeof text);
  if (!read.ok()) return std::nullopt;
  return parse_proc_cgroup(std::string_view(text, read.length));
}

CgroupLookup lookup_cgroup_directory(const char* directory) {
  CgroupLookup result;
  std::ifstream file("/proc/self/mountinfo");
  const std::string mountinfo((std::istreambuf_iterator<char>(file)),
                              std::istreambuf_iterator<char>());
  const std::vector<Cgroup2Mount> mounts = parse_cgroup2_mounts(mountinfo);
  if (mounts.empty()) {
    result.error = CgroupLookupError::kNoHierarchy;
    return result;
  }
  char canonical[PATH_MAX];
  struct stat info {};
  if (directory == nullptr || ::realpath(directory, canonical) == nullptr ||
      ::stat(canonical, &info) != 0 || !S_ISDIR(info.st_mode)) {
    result.error = CgroupLookupError::kNotADirectory;
    return result;
  }
  result.cgroup = cgroup_of_directory(canonical, mounts);
  if (!result.cgroup) result.error = CgroupLookupError::kOutsideMounts;
  return result;
}

}  // namespace simgpu

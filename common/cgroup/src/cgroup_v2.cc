#include "tessera/cgroup/cgroup_v2.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "tessera/unique_fd.h"

namespace tessera::cgroup {
namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape(const std::string& field) {
  std::string out;
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size() && field[i + 1] >= '0' && field[i + 1] <= '3' &&
        field[i + 2] >= '0' && field[i + 2] <= '7' && field[i + 3] >= '0' && field[i + 3] <= '7') {
      out += static_cast<char>((field[i + 1] - '0') * 64 + (field[i + 2] - '0') * 8 +
                               (field[i + 3] - '0'));
      i += 3;
    } else {
      out += field[i];
    }
  }
  return out;
}

Result<std::string> read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return not_found("cannot read " + path + ": " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

bool is_directory(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

}  // namespace

Result<std::vector<Mount>> parse_cgroup2_mounts(const std::string& mountinfo) {
  std::vector<Mount> mounts;
  std::istringstream lines(mountinfo);
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    if (line.empty()) continue;
    std::istringstream fields(line);
    std::vector<std::string> words;
    for (std::string word; fields >> word;) words.push_back(word);
    // id parent major:minor root mount-point options [optional...] - type source super-options
    size_t separator = 6;
    while (separator < words.size() && words[separator] != "-") ++separator;
    if (words.size() < 5 || separator + 1 >= words.size())
      return invalid_argument("mountinfo line " + std::to_string(number) +
                              " is not a mount: " + line);
    if (words[separator + 1] != "cgroup2") continue;
    mounts.push_back({unescape(words[3]), unescape(words[4])});
  }
  return mounts;
}

Result<std::vector<Mount>> cgroup2_mounts(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(std::string text, read_text(path));
  return parse_cgroup2_mounts(text);
}

Result<std::string> parse_process_cgroup(const std::string& cgroup_file) {
  std::istringstream lines(cgroup_file);
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("0::")) continue;
    std::string path = line.substr(3);
    if (path.empty() || path[0] != '/')
      return invalid_argument("cgroup v2 path " + path + " is not absolute");
    // A cgroup removed under the process reads "/path (deleted)".
    if (path.ends_with(" (deleted)")) return not_found("cgroup v2 path " + path + " was removed");
    return path;
  }
  return not_found("no cgroup v2 (0::) line: the unified hierarchy is not in use");
}

Result<std::string> process_cgroup(pid_t pid, const std::string& proc_root) {
  const std::string path = proc_root + "/" + std::to_string(pid) + "/cgroup";
  TESSERA_ASSIGN_OR_RETURN(std::string text, read_text(path));
  TESSERA_ASSIGN_OR_RETURN(std::string cgroup, parse_process_cgroup(text), with_context(path));
  return cgroup;
}

Result<std::string> directory_of(const std::vector<Mount>& mounts, const std::string& path) {
  for (const Mount& mount : mounts) {
    const std::string& root = mount.root;
    std::string rest;
    if (root == "/") {
      rest = path == "/" ? "" : path;
    } else if (path == root) {
      rest = "";
    } else if (path.starts_with(root) && path[root.size()] == '/') {
      rest = path.substr(root.size());
    } else {
      continue;
    }
    // Built by append: GCC 12 misreads `directory = "/"` after a concatenation (-Wrestrict).
    std::string directory;
    if (mount.mount_point != "/") directory.append(mount.mount_point);
    directory.append(rest);
    if (directory.empty()) directory.push_back('/');
    if (is_directory(directory)) return directory;
  }
  return not_found("cgroup " + path + " is under no cgroup2 mount of this process (" +
                   std::to_string(mounts.size()) + " mounts)");
}

Result<std::string> own_cgroup_directory(const std::vector<Mount>& mounts,
                                         const std::string& proc_root) {
  TESSERA_ASSIGN_OR_RETURN(std::string own, process_cgroup(getpid(), proc_root));
  return directory_of(mounts, own);
}

Result<OwnedCgroup> OwnedCgroup::create(const std::string& parent_directory,
                                        const std::string& name) {
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
    return invalid_argument("cgroup name " + name + " is not one path component");
  const std::string directory = parent_directory + "/" + name;
  if (::mkdir(directory.c_str(), 0755) != 0)
    return internal_error("cannot create cgroup " + directory + ": " + std::strerror(errno));
  return OwnedCgroup(directory);
}

OwnedCgroup& OwnedCgroup::operator=(OwnedCgroup&& other) noexcept {
  if (this != &other) {
    (void)remove();
    directory_ = std::move(other.directory_);
    other.directory_.clear();
  }
  return *this;
}

Status OwnedCgroup::add(pid_t pid) const {
  const std::string procs = directory_ + "/cgroup.procs";
  UniqueFd fd(::open(procs.c_str(), O_WRONLY | O_CLOEXEC));
  const std::string text = std::to_string(pid);
  if (!fd || ::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()))
    return internal_error("cannot move process " + text + " into " + procs + ": " +
                          std::strerror(errno));
  return Status::ok();
}

Status OwnedCgroup::remove() {
  if (directory_.empty()) return Status::ok();
  // Kept on failure (members left): a later remove() tries again.
  if (::rmdir(directory_.c_str()) != 0 && errno != ENOENT)
    return internal_error("cannot remove cgroup " + directory_ + ": " + std::strerror(errno));
  directory_.clear();
  return Status::ok();
}

}  // namespace tessera::cgroup

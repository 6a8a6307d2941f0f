#include "podman.h"

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

namespace tessera::agent::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr char kProbeImage[] = "localhost/tessera-probe:1";

std::string last_line(const std::string& text) {
  std::string trimmed = text;
  while (!trimmed.empty() && trimmed.back() == '\n') trimmed.pop_back();
  const size_t newline = trimmed.rfind('\n');
  return newline == std::string::npos ? trimmed : trimmed.substr(newline + 1);
}

// The shared libraries the dynamic loader would map for `file`, the loader itself included.
Result<std::vector<std::string>> shared_libraries(const std::string& file) {
  Result<CommandResult> ldd = run_command(Command({"ldd", file}));
  if (!ldd.is_ok()) return ldd.status();
  if (!ldd->ok()) return internal_error("ldd " + file + ": " + last_line(ldd->output));
  std::vector<std::string> libraries;
  static const std::regex kPath(R"((?:=>\s+)?(/[^\s]+)\s+\(0x)");
  std::istringstream lines(ldd->output);
  for (std::string line; std::getline(lines, line);) {
    std::smatch match;
    if (std::regex_search(line, match, kPath)) libraries.push_back(match[1]);
  }
  return libraries;
}

Status copy_into(const fs::path& rootfs, const std::string& from, const std::string& to) {
  const fs::path target = rootfs / fs::path(to).relative_path();
  std::error_code error;
  fs::create_directories(target.parent_path(), error);
  // The file itself, not a symlink to it: the image must hold the bytes.
  fs::copy_file(fs::canonical(from, error), target, fs::copy_options::overwrite_existing, error);
  if (error) return internal_error("copying " + from + " into the image: " + error.message());
  return Status::ok();
}

}  // namespace

Result<Podman> Podman::start(const fs::path& base) {
  std::error_code error;
  fs::create_directories(base, error);
  if (error) return internal_error("creating " + base.string() + ": " + error.message());
  std::ofstream(base / "containers.conf") << "[containers]\ndefault_ulimits = []\n";
  Podman podman(base);
  Result<CommandResult> version = podman.podman({"--version"});
  if (!version.is_ok())
    return failed_precondition("podman cannot run: " + version.status().message());
  if (!version->ok()) return failed_precondition("podman --version: " + last_line(version->output));
  const std::string true_path = fs::exists("/usr/bin/true") ? "/usr/bin/true" : "/bin/true";
  if (Status imported = podman.import_image(kProbeImage, {{true_path, "/usr/bin/true"}}, {});
      !imported.is_ok())
    return failed_precondition("podman cannot import an image: " + imported.message());
  const ContainerRun probe = podman.run({}, kProbeImage, {"/usr/bin/true"});
  if (probe.exit_code != 0)
    return failed_precondition("podman cannot start a container: " + last_line(probe.output));
  return podman;
}

Status Podman::import_image(const std::string& tag,
                            const std::vector<std::pair<std::string, std::string>>& files,
                            const std::vector<std::string>& env,
                            const std::vector<std::string>& libraries_of) const {
  std::string name = tag.substr(tag.rfind('/') + 1);
  name = name.substr(0, name.find(':'));
  const fs::path rootfs = base_ / "images" / name;
  std::error_code error;
  fs::remove_all(rootfs, error);
  std::set<std::string> libraries;
  for (const auto& [from, to] : files) {
    TESSERA_RETURN_IF_ERROR(copy_into(rootfs, from, to));
    Result<std::vector<std::string>> needed = shared_libraries(from);
    if (!needed.is_ok()) return needed.status();
    libraries.insert(needed->begin(), needed->end());
  }
  for (const auto& file : libraries_of) {
    Result<std::vector<std::string>> needed = shared_libraries(file);
    if (!needed.is_ok()) return needed.status();
    libraries.insert(needed->begin(), needed->end());
  }
  for (const auto& library : libraries)
    TESSERA_RETURN_IF_ERROR(copy_into(rootfs, library, library));
  const std::string tar = (base_ / "images" / (rootfs.filename().string() + ".tar")).string();
  TESSERA_RETURN_IF_ERROR(run_checked(Command({"tar", "-C", rootfs.string(), "-cf", tar, "."})));
  std::vector<std::string> args = {"import"};
  for (const auto& entry : env) {
    args.push_back("--change");
    args.push_back("ENV " + entry);
  }
  args.push_back(tar);
  args.push_back(tag);
  Result<CommandResult> imported = podman(args);
  if (!imported.is_ok()) return imported.status();
  if (!imported->ok()) return internal_error("podman import: " + last_line(imported->output));
  return Status::ok();
}

ContainerRun Podman::run(const std::vector<std::string>& args, const std::string& image,
                         const std::vector<std::string>& command) const {
  std::vector<std::string> argv = {"run", "--rm", "--network", "none"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back(image);
  argv.insert(argv.end(), command.begin(), command.end());
  Result<CommandResult> ran = podman(argv);
  if (!ran.is_ok()) return {-1, ran.status().message()};
  if (ran->timed_out) return {-1, ran->output + "\n(podman run did not finish in time)"};
  return {ran->exit_code, ran->output};
}

void Podman::remove_storage() const {
  // vfs storage: plain folders, no mounts left behind once the (--rm) containers are gone.
  std::error_code error;
  fs::remove_all(base_, error);
}

std::vector<std::string> Podman::podman_argv() const {
  return {"podman",
          "--root",
          (base_ / "storage").string(),
          "--runroot",
          (base_ / "run").string(),
          "--runtime",
          "runc",
          "--storage-driver",
          "vfs",
          "--cgroup-manager",
          "cgroupfs",
          "--events-backend",
          "file"};
}

std::vector<std::string> Podman::podman_env() const {
  return {"CONTAINERS_CONF=" + (base_ / "containers.conf").string()};
}

Result<CommandResult> Podman::podman(const std::vector<std::string>& args) const {
  std::vector<std::string> argv = podman_argv();
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(Command(argv, podman_env(), "", 120s));
}

}  // namespace tessera::agent::testing

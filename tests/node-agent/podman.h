// A real container runtime for the node agent's tests: Debian's podman with runc, in a private
// storage folder, applying the CDI specs the agent writes. Nothing here is a double: the runtime
// resolves the devices kubelet would hand it, applies their edits and starts the container.
//
// Podman reads CDI specs only from /etc/cdi and /var/run/cdi in the version Debian 12 ships (4.3:
// no `cdi_spec_dirs`), so the tests write their specs to /var/run/cdi under names no one else uses
// and remove them. This kind of machine refuses to raise RLIMIT_NOFILE/NPROC, which podman does by
// default: its containers.conf sets `default_ulimits = []`. crun refuses the hybrid cgroup layout
// here, hence `--runtime runc`. Storage is `vfs` (plain folders: the images are a few MiB, and
// nothing stays mounted for the test to clean up).
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "backends/command_runner.h"
#include "tessera/status.h"

namespace tessera::agent::testing {

struct ContainerRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr, interleaved
};

class Podman {
 public:
  // A podman whose storage, run state and configuration live under `base` (created), once it has
  // started one container there; else why not (kFailedPrecondition, with podman's last line).
  static Result<Podman> start(const std::filesystem::path& base);

  // Imports a minimal image: each of `files` ({host path, path in the image}) with the shared
  // libraries ldd names for it (at their host paths), the libraries of `libraries_of` (not the
  // files themselves: what a base image provides for them), `env` as the image's own ENV.
  Status import_image(const std::string& tag,
                      const std::vector<std::pair<std::string, std::string>>& files,
                      const std::vector<std::string>& env,
                      const std::vector<std::string>& libraries_of = {}) const;

  // podman run --rm --network none <args...> <image> <command...>
  ContainerRun run(const std::vector<std::string>& args, const std::string& image,
                   const std::vector<std::string>& command) const;

  void remove_storage() const;

 private:
  explicit Podman(std::filesystem::path base) : base_(std::move(base)) {}
  std::vector<std::string> podman_argv() const;
  std::vector<std::string> podman_env() const;
  Result<CommandResult> podman(const std::vector<std::string>& args) const;

  std::filesystem::path base_;
};

}  // namespace tessera::agent::testing

// `tessera run`'s wall outside the command's processes: on an R615 driver (CUDA 13.4), run as
// root, with a cgroup v2 hierarchy mounted anywhere (found from /proc/self/mountinfo), the command
// runs in a cgroup of its own whose driver partition is the share's memory: soft = the request
// (--memory), hard = the limit (--memory-limit). A process the shim never loads into (a child
// started with `env -i`, a static binary) is then refused by the driver itself. Elsewhere the shim
// alone holds the share, and the wall says why (docs/resource-model.md, docs/cli.md). MIG devices
// (and GPUs in MIG mode) are never partitioned: the driver refuses MIG handles.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "tessera/cgroup/cgroup_v2.h"
#include "tessera/cgroup/driver_partition.h"
#include "tessera/nvml.h"
#include "tessera/share_folder/limits_writer.h"
#include "tessera/status.h"

namespace tessera::cli {

class DriverWall {
 public:
  // The wall for `limits` (the GPUs with a memory limit): none, with the reason, where this machine
  // has none to offer (not root, a driver before R615, no cgroup v2, no memory limit); an error
  // where it has one and it cannot be set (fail closed: nothing is run, nothing is left set).
  static Result<DriverWall> prepare(const std::vector<share_folder::DeviceLimit>& limits,
                                    const std::string& mountinfo = "/proc/self/mountinfo");

  // A moved-from wall holds nothing, so it releases nothing.
  DriverWall(DriverWall&& other) noexcept;
  DriverWall& operator=(DriverWall&& other) noexcept;
  DriverWall(const DriverWall&) = delete;
  DriverWall& operator=(const DriverWall&) = delete;
  ~DriverWall() { (void)release(); }

  bool active() const { return cgroup_.has_value(); }
  // Why there is no wall ("" when there is one).
  const std::string& why_not() const { return why_not_; }
  // The cgroup directory the limits are on.
  std::string directory() const { return cgroup_ ? cgroup_->directory() : std::string(); }
  // One line for --verbose and the logs: which layer holds the share's memory.
  std::string describe() const;

  // Moves `pid` into the walled cgroup (before it runs anything).
  Status add(pid_t pid) const;
  // Clears the partitions (soft limit first zeroed) and removes the cgroup; the first error.
  Status release();

 private:
  DriverWall() = default;
  std::string why_not_;
  // Devices with a memory limit the partitions cannot take (MIG): the shim alone holds them.
  std::vector<std::string> shim_only_;
  std::optional<nvml::Session> session_;
  std::optional<cgroup::OwnedCgroup> cgroup_;
  std::vector<cgroup::PartitionLimits> limits_;
};

}  // namespace tessera::cli

// The node's view of its shares as the local API lists it (ListSharesResponse), the parts that
// come from the share folders: one builder for the node agent's local API (api/node_snapshot.cc)
// and the CLI's local mode (cli/src/views/local_node.cc), so both answer alike. The folders are
// read with the one reader (snapshot.h); what does not come from them (a share's name, claim,
// pods, and for the agent its devices and limits from the checkpoint) the caller sets.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tessera/node/v1/node_api.pb.h"
#include "tessera/share_folder/snapshot.h"

namespace tessera::share_folder {

// A share's process as the caller's side of the pid namespaces sees it.
struct HostProcess {
  int pid = 0;          // 0: not known here (a container's process without a host pid)
  std::string command;  // /proc/<pid>/comm, "" when unknown
};

struct ShareViewOptions {
  // The limits page says what the share is (a `tessera run` share): its devices, their limits and
  // its priority come from the page. Off: the caller set the share's devices (the agent, from its
  // checkpoint), and the page's figures go to the devices whose UUID it names.
  bool devices_from_limits_page = false;
  // Launches, gate waits and refusals are counted per process, not per device. kShare: on the
  // share and on each of its devices (the agent's answer); kFirstDevice: on its first device only,
  // so that sums over devices stay right (the CLI's).
  enum class Counters { kShare, kFirstDevice } counters = Counters::kShare;
  // The host side of an owned slot's process; nullopt: the process is gone, not listed. Null: every
  // process is listed without a host pid.
  std::function<std::optional<HostProcess>(const SlotCopy& slot)> host_process;
};

// Fills `share` from `folder`: its read_error (the first problem of the folder, naming the page);
// the limits page's context cost per device; when the folder is readable, per device the memory
// its slots hold and its GPU time, the share's counters, and one Process per owned slot (pid,
// host pid and command, bytes per share device, launches, GPU time). A folder that cannot be read
// whole gets no usage figures: unknown, not 0.
void fill_share_from_folder(const ShareFolderSnapshot& folder, const ShareViewOptions& options,
                            tessera::node::v1::Share& share);

// "high", "normal" or "low" for a limits page's priority.
std::string priority_name(uint32_t priority);

// /proc/<pid>/comm without its line end; "" when unreadable (the process is gone) or pid <= 0.
std::string process_command(const std::string& proc_root, int pid);

}  // namespace tessera::share_folder

// The node as `tessera shares` and `tessera top` show it when no agent answers: the `tessera run`
// shares of this machine, read from their share folders (tessera/local_shares.h), and the GPUs as
// NVML sees them. The answer has the agent's shape (ListSharesResponse), so both commands render
// one model whichever side produced it. Share folders are written by the shares' processes: their
// pages are read as untrusted input (pread into a buffer, never mapped; a short or garbled page
// is a problem of that share, never a crash).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tessera/node/v1/node_api.pb.h"
#include "tessera/status.h"

namespace tessera::cli {

struct LocalNodeOptions {
  // The folder holding one folder per share; empty: share::local_share_root().
  std::string share_root;
  // Read these share folders instead of scanning share_root (`tessera run --share-dir` keeps its
  // share wherever it was told).
  std::vector<std::string> share_folders;
  // Also list shares whose `owner` names a `tessera run` that is gone (the next one removes them).
  bool include_stale = false;
  std::string proc_root = "/proc";
  // The NVML library to ask for the GPUs; empty: do not ask (GPUs come from the shares' UUIDs).
  std::string nvml_library = "libnvidia-ml.so.1";
  // Wall clock (ms since the epoch) for sampled_unix_ms; default: the system clock.
  std::function<int64_t()> now_unix_ms;
};

// The local node: every share folder (sorted by name) with its limits, usage and live processes,
// and the GPUs (NVML's when libnvidia-ml loads, else one entry per UUID the shares name). Fails
// only when the share root exists but cannot be listed; a share that cannot be read whole is
// listed with what could be read (its limits) and its read_error saying why (names the file and
// what is wrong with it), its usage figures left unknown.
Result<node::v1::ListSharesResponse> read_local_node(const LocalNodeOptions& options);

// Rates between two snapshots of the same node, per share device (key: share_device_key).
struct DeviceRates {
  double cores_used_percent = 0;  // GPU time over the interval, percent of the GPU
  double throttled_percent = 0;   // launch waits at the gate over the interval, percent (<= 100)
};
std::string share_device_key(const std::string& share, const std::string& gpu_uuid);
// Rates of every share device of `now` that `before` also has, over the interval between their
// sampled_unix_ms; empty when that interval is not positive. Counters that went backwards (a
// share re-created under the same name) give 0, never a negative rate; a share that could not be
// read (read_error) in either snapshot has no rates.
std::map<std::string, DeviceRates> rates_between(const node::v1::ListSharesResponse& before,
                                                 const node::v1::ListSharesResponse& now);
// Sets cores_used_percent of every share device of `now` from rates_between(before, now).
void apply_rates(const node::v1::ListSharesResponse& before, node::v1::ListSharesResponse& now);

}  // namespace tessera::cli

// The agent's checkpoint: every claim it has started to prepare, and its shares, so unprepare
// works when the claim is gone and a restart converges. Written through a temporary file, fsync
// and rename (then the folder fsync'ed): a crash leaves the old or the new file, never a mix.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "files/atomic_file.h"  // read_file, write_file_atomically: the checkpoint's I/O
#include "model/share_spec.h"
#include "tessera/status.h"

namespace tessera::agent {

enum class ClaimState { kPrepareStarted, kPrepareCompleted };

struct ClaimEntry {
  std::string namespace_name;
  std::string name;
  ClaimState state = ClaimState::kPrepareStarted;
  std::vector<ShareSpec> shares;
  // The pods the claim is reserved for (status.reservedFor) as last read: at prepare, then again
  // by ShareManager::refresh_claim_pods (kubelet prepares a shared claim for its first pod only).
  // The metrics' pod label and the out-of-band checks' cgroup mapping. Empty in checkpoints
  // written before.
  std::vector<PodRef> pods;
  // When the prepare completed, wall-clock milliseconds since the epoch (the local API's
  // Share.prepared_unix_ms, `tessera shares`' AGE). nullopt: unknown (checkpoints written before).
  std::optional<int64_t> prepared_unix_ms = std::nullopt;
  bool operator==(const ClaimEntry&) const = default;
};

using Checkpoint = std::map<std::string, ClaimEntry>;  // by claim UID

std::string checkpoint_to_json(const Checkpoint& checkpoint);
// The checkpoint, or (kInternal: the file is corrupt) why the text is not one this version reads.
Result<Checkpoint> checkpoint_from_json(const std::string& text);

}  // namespace tessera::agent

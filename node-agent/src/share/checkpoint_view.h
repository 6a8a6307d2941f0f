// checkpoint.json as it is on disk, for the readers that must show the node as it is while two
// agents of a rolling update share the state folder (the scrape, the local API, the out-of-band
// checks): the share manager's in-memory checkpoint learns the other agent's claims only when it
// takes the state lock (a prepare of its own, a reconcile pass), which can be a minute late.
// Every write renames a new file into place, so a whole-file read is one consistent checkpoint,
// and no lock is needed; the file is parsed again only when it changed (device, inode, size,
// mtime, ctime of the open file), so a scrape of an unchanged node costs one open and an fstat.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include "share/checkpoint.h"

namespace tessera::agent {

class CheckpointView {
 public:
  explicit CheckpointView(std::string path) : path_(std::move(path)) {}

  // The checkpoint on disk now (absent: empty), or kInternal naming the file when it cannot be
  // read or parsed. Thread-safe.
  Result<Checkpoint> read();

  // How often the file was parsed (tests: an unchanged file is not parsed again).
  uint64_t parses() const;

 private:
  struct Signature {
    uint64_t device = 0, inode = 0, size = 0;
    int64_t mtime_ns = 0, ctime_ns = 0;
    bool operator==(const Signature&) const = default;
  };
  const std::string path_;
  mutable std::mutex mutex_;
  std::optional<Signature> signature_;  // of what cached_ was parsed from
  Checkpoint cached_;
  uint64_t parses_ = 0;
};

}  // namespace tessera::agent

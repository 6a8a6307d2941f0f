// Whole-file I/O for the agent's state (the checkpoint, CDI specs, the time-slice records): a
// crash while writing leaves the old or the new file, never a mix.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tessera/status.h"

namespace tessera::agent {

// The whole file, or nullopt when it cannot be opened.
std::optional<std::string> read_file(const std::string& path);

// Atomic file replacement (tessera::write_file_atomically): a temporary file in the same folder
// written, fsync'ed, renamed over <path>, the folder fsync'ed. A kInternal error names the file and
// the errno.
Status write_file_atomically(const std::string& path, const std::string& contents,
                             unsigned mode = 0644);

// The pid in `file_name` when it is a temporary of write_file_atomically for a file whose name
// starts with `target_prefix` (".<target>.tmp.<pid>.<n>"), else 0.
int temporary_writer(const std::string& file_name, const std::string& target_prefix);

// Removes from `dir` the temporaries of write_file_atomically for files whose name starts with
// `target_prefix` that another process left (one that died while writing: its pid is in the
// name). This process's own and those of any live process (another agent beside this one during
// a rolling update) are never touched, so a write in flight keeps its file. Returns the names
// removed.
std::vector<std::string> remove_stale_temporaries(const std::string& dir,
                                                  const std::string& target_prefix);

}  // namespace tessera::agent

// Whole-file I/O for the agent's state (the checkpoint, CDI specs, the time-slice records): a
// crash while writing leaves the old or the new file, never a mix.
#pragma once

#include <optional>
#include <string>

namespace tessera::agent {

// The whole file, or nullopt when it cannot be opened.
std::optional<std::string> read_file(const std::string& path);

// Atomic file replacement (tessera::write_file_atomically): a temporary file in the same folder
// written, fsync'ed, renamed over <path>, the folder fsync'ed. "" or what went wrong.
std::string write_file_atomically(const std::string& path, const std::string& contents,
                                  unsigned mode = 0644);

}  // namespace tessera::agent

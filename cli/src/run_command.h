// `tessera run`: runs a command under a GPU share on this machine, without Kubernetes. It creates a
// share directory (limits page) the way the node agent does for a claim, preloads libvgpu into
// the command, forwards signals to it and returns its exit status. Every input is checked before
// anything is created: a bad value or a shim that is not a loadable library is an error (125),
// never a command that runs unconfined. The command dies with tessera (PR_SET_PDEATHSIG), and the
// next run removes the share folders a killed tessera left (tessera/local_shares.h).
#pragma once

#include <string>
#include <vector>

#include "exit_codes.h"
#include "tessera/status.h"

namespace tessera::cli {

struct RunOptions {
  // Requests (what the share is guaranteed) and limits (what it may reach): docs/resource-model.md.
  std::string memory;        // --memory, TESSERA_MEMORY_LIMIT syntax: the request
  std::string memory_limit;  // --memory-limit, the same syntax; default: the request
  std::string cores;         // --cores, percent of GPU time 0..100: the request (0: best-effort)
  std::string cores_limit;   // --cores-limit (alias --cores-burst), the same syntax
  std::string priority;      // --priority: high, normal, low (empty: normal)
  bool verbose = false;      // --verbose: print the share's usage when the command ends
  std::string devices;       // --device: CUDA_VISIBLE_DEVICES for the command
  std::string share_dir;  // --share-dir: keep the share here (kept afterwards); default: temporary
  std::string libvgpu;    // --libvgpu: path of libvgpu.so; default: found next to this program
  std::vector<std::string> command;
};

// The exit status section of `tessera run --help` (tests/cli/check_run_safety.py checks each).
inline constexpr const char* kRunExitStatusHelp =
    "Exit status:\n"
    "  N      the command's own exit status\n"
    "  125    tessera itself failed: a bad flag or value, no GPU, a shim that is not a loadable\n"
    "         library, a share that cannot be created (nothing was run)\n"
    "  126    the command was found but cannot be run (not executable)\n"
    "  127    the command was not found\n"
    "  128+N  the command was killed by signal N\n";

// A CLI11 check for --memory, --memory-limit, --cores and --cores-limit: an empty value is an
// error, never "unlimited".
std::string refuse_empty_value(const std::string& value);

// The command's exit status (128 + signal when it was killed), or why tessera itself could not
// start it (main.cc prints the message and exits kRunFailed).
Result<int> run(const RunOptions& options);

// The folder holding this user's local shares (share::local_share_root()), created 0700 where
// missing; an error when it, or a folder of it tessera creates, is a symlink, not a directory,
// another user's or open to others.
Result<std::string> prepare_local_share_root(const std::string& root);

// Removes the share folders under `root` whose `owner` process is gone (pid and start time), and
// folders without an owner file older than a minute; one stderr line each. Returns how many.
size_t remove_stale_shares(const std::string& root);

// Where libvgpu.so is when not given: $TESSERA_LIBVGPU, then <prefix>/lib/libvgpu.so for an
// installed <prefix>/bin/tessera, then the build tree's <build>/libvgpu/libvgpu.so.
Result<std::string> find_libvgpu(const std::string& executable_dir);

}  // namespace tessera::cli

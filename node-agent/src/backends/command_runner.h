// Runs the external programs the hardware backends drive (nvidia-cuda-mps-control, nvidia-smi):
// argv without a shell, extra environment, optional stdin, bounded time. Paths come from the
// agent's flags, so tests put recording doubles in their place.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "tessera/status.h"

namespace tessera::agent {

struct Command {
  explicit Command(std::vector<std::string> argv_, std::vector<std::string> env_ = {},
                   std::string input_ = {},
                   std::chrono::milliseconds timeout_ = std::chrono::milliseconds(10000))
      : argv(std::move(argv_)), env(std::move(env_)), input(std::move(input_)), timeout(timeout_) {}

  std::vector<std::string> argv;  // argv[0]: a path, or a name looked up in PATH
  std::vector<std::string> env;   // "NAME=value", added to (or replacing in) the agent's own
  std::string input;              // written to stdin, which is then closed
  std::chrono::milliseconds timeout;
  // Non-empty: stdout and stderr are appended to this file instead of captured (for programs
  // that leave a daemon behind, which would otherwise hold the capture pipe open).
  std::string output_file;
  // Non-empty: the program runs in a private mount namespace with this folder bind-mounted over
  // /dev/shm (an MPS daemon and its clients must share /dev/shm, and no other share may).
  std::string private_dev_shm;
  // The program starts a new session (setsid): it and what it leaves behind are in no process
  // group of the agent's, so a signal to the agent's group never reaches them.
  bool new_session = false;
  // Non-empty: a cgroup v2 folder the program is moved into before it runs (its children stay
  // there), after joining the cgroup namespace of pid 1 (the host's, with hostPID) when it differs
  // from the agent's: a folder outside the agent container's cgroup, which the container runtime
  // kills whole when it stops the container.
  std::string cgroup;
};

// A program that ran (it may have failed: exit_code, timed_out).
struct CommandResult {
  bool timed_out = false;
  int exit_code = -1;  // the exit status, or 128 + signal
  std::string output;  // stdout and stderr, interleaved (empty with output_file)
  bool ok() const { return !timed_out && exit_code == 0; }
};

// The finished program, or why it could not run at all: kFailedPrecondition when the program
// cannot be executed (missing, not executable) or given a private /dev/shm (no CAP_SYS_ADMIN),
// kInvalidArgument for an empty argv, kInternal when a pipe or fork failed.
Result<CommandResult> run_command(const Command& command);

// "nvidia-smi -i GPU-1 -c DEFAULT" (for error messages and logs).
std::string describe(const Command& command);
// Ok when the program ran and exited 0; else "<describe>: exit 3: <last output line>" (kInternal),
// "<describe>: did not finish within N ms" (kUnavailable) or "<describe>: <why it could not run>"
// (run_command's code).
Status command_status(const Command& command, const Result<CommandResult>& result);
// run_command, then command_status: for a program whose output does not matter.
Status run_checked(const Command& command);

// Moves process `pid` into the cgroup v2 folder `cgroup` as Command::cgroup moves a program (from a
// child that joins pid 1's cgroup namespace): kFailedPrecondition naming the cgroup when it cannot.
Status move_to_cgroup(int pid, const std::string& cgroup);

}  // namespace tessera::agent

// The exit statuses of every `tessera` command, in one place (docs/cli.md#exit-status has the
// table; tests/cli/exit_status_test.cc checks each command against it). The viewing commands follow
// kubectl and most Unix tools; `tessera run` follows `podman run` and `docker run`, whose own
// status is the command's.
#pragma once

namespace tessera::cli {

inline constexpr int kExitOk = 0;  // done; a live view or --follow ended as asked (q, ^C, SIGTERM)
inline constexpr int kExitFailed = 1;  // the command failed: one line on stderr says why
inline constexpr int kExitUsage = 2;   // a bad flag, value or command name (CLI11's parse errors)

// `tessera run` only: its own failures and the command's fate (run_command.h).
inline constexpr int kRunFailed = 125;           // tessera failed, a bad flag too; nothing ran
inline constexpr int kCommandNotRunnable = 126;  // found but cannot be run
inline constexpr int kCommandNotFound = 127;     // not found
inline constexpr int kKilledBySignalBase = 128;  // 128+N: the command was killed by signal N

}  // namespace tessera::cli

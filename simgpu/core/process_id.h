// This process's id without a system call per use. glibc (since 2.25) no longer caches getpid(),
// so each call is a syscall, and a real driver makes none per entry point: a simulator that asked
// the kernel on every call would inflate every overhead measured on it.
#pragma once

#include <cstdint>

namespace simgpu {

// The id is read once when the library loads and refreshed in the child by a pthread_atfork
// handler, so a process forked with fork() sees its own id. A child made without fork()'s handlers
// (a raw clone(2), _Fork(), vfork()) must exec before it calls the simulator, as POSIX requires.
int current_pid();

// Start time of a process in clock ticks since boot (field 22 of /proc/<pid>/stat), or 0 when the
// process does not exist or is a zombie: a killed child nobody has reaped yet holds no GPU memory.
uint64_t process_start_time(int pid);
// The process `pid` started at `start_time` is still running (not a reused pid, not a zombie).
bool process_alive(int pid, uint64_t start_time);

}  // namespace simgpu

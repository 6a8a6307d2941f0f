// This process's id without a system call per use. glibc (since 2.25) no longer caches getpid(),
// so each call is a syscall, and a real driver makes none per entry point: a simulator that asked
// the kernel on every call would inflate every overhead measured on it.
#pragma once

namespace simgpu {

// The id is read once when the library loads and refreshed in the child by a pthread_atfork
// handler, so a process forked with fork() sees its own id. A child made without fork()'s handlers
// (a raw clone(2), _Fork(), vfork()) must exec before it calls the simulator, as POSIX requires.
int current_pid();

}  // namespace simgpu

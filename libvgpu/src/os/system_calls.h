// The shim's OS seam: every libc function and system call libvgpu makes directly goes through
// here (the dl* and pthread functions pinned in glibc_compat.h aside), so what the shim asks of
// the OS, and which glibc symbols that binds, is in one file. Each function is a thin wrapper:
// noexcept, allocation-free and async-signal/fork safe wherever the call it wraps is, and it
// leaves errno as the call set it (callers read it). tests/layout/os_seam.py fails if a libvgpu
// source outside src/os/ makes one of these calls itself.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

namespace tessera::vgpu::os {

// Clocks, in nanoseconds. The coarse monotonic clock costs no syscall and lags by a tick.
int64_t monotonic_ns() noexcept;
int64_t monotonic_coarse_ns() noexcept;
int64_t realtime_ns() noexcept;
// Sleeps until the monotonic clock reaches `deadline_ns`, or for `duration_ns`; through EINTR.
void sleep_until_monotonic_ns(int64_t deadline_ns) noexcept;
void sleep_ns(int64_t duration_ns) noexcept;
void yield() noexcept;  // sched_yield

// Memory mappings: null on failure, with errno set. Anonymous mappings are zero-filled.
void* map_shared_anonymous(size_t bytes) noexcept;   // read-write, shared with forked children
void* map_private_anonymous(size_t bytes) noexcept;  // read-write, this process only
const void* map_file_read_only(int fd, size_t bytes) noexcept;  // MAP_SHARED, from offset 0
void unmap(const void* address, size_t bytes) noexcept;

// Files and folders: the calls of the same name, results and errno as they give them.
int open(const char* path, int flags) noexcept;
int open_at(int dir_fd, const char* path, int flags, mode_t mode = 0) noexcept;
int close(int fd) noexcept;
ssize_t write(int fd, const void* data, size_t bytes) noexcept;
ssize_t read_at(int fd, void* data, size_t bytes, off_t offset) noexcept;          // pread
ssize_t write_at(int fd, const void* data, size_t bytes, off_t offset) noexcept;   // pwrite
int make_dir(const char* path, mode_t mode) noexcept;                              // mkdir
int change_mode(int fd, mode_t mode) noexcept;                                     // fchmod
int link_at(int from_dir, const char* from, int to_dir, const char* to) noexcept;  // linkat
int unlink_at(int dir_fd, const char* path) noexcept;                              // unlinkat
// fstat, and fstatat without following a final symlink (dir_fd may be AT_FDCWD).
int stat_fd(int fd, struct stat* status) noexcept;
int stat_at(int dir_fd, const char* path, struct stat* status) noexcept;
// getdents64: the bytes of linux_dirent64 records read into `buffer`, 0 at the end, -1 on error.
long read_dir_entries(int dir_fd, void* buffer, size_t bytes) noexcept;
// Whether the file system of `fd` is mounted read-only (false when that cannot be told).
bool on_read_only_mount(int fd) noexcept;

// The process.
const char* environment_variable(const char* name) noexcept;  // getenv
const char* const* environment_entries() noexcept;            // environ: NAME=VALUE, null-ended
int process_id() noexcept;                                    // getpid
unsigned effective_user_id() noexcept;                        // geteuid
// Runs `reset` in the child after every fork (__register_atfork with the image's __dso_handle).
void on_fork_child(void (*reset)()) noexcept;

}  // namespace tessera::vgpu::os

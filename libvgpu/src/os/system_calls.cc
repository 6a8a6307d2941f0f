#include "os/system_calls.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>

extern char** environ;
extern "C" int __register_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void),
                                 void* dso_handle);
extern "C" void* __dso_handle;

namespace tessera::vgpu::os {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

int64_t read_clock(clockid_t clock) {
  timespec now{};
  clock_gettime(clock, &now);
  return static_cast<int64_t>(now.tv_sec) * kSecond + now.tv_nsec;
}

timespec to_timespec(int64_t ns) {
  timespec value{};
  value.tv_sec = ns / kSecond;
  value.tv_nsec = ns % kSecond;
  return value;
}

}  // namespace

int64_t monotonic_ns() noexcept {
  return read_clock(CLOCK_MONOTONIC);
}

int64_t monotonic_coarse_ns() noexcept {
  return read_clock(CLOCK_MONOTONIC_COARSE);
}

int64_t realtime_ns() noexcept {
  return read_clock(CLOCK_REALTIME);
}

void sleep_until_monotonic_ns(int64_t deadline_ns) noexcept {
  const timespec until = to_timespec(deadline_ns);
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, nullptr) == EINTR) {
  }
}

void sleep_ns(int64_t duration_ns) noexcept {
  timespec pause = to_timespec(duration_ns);
  while (nanosleep(&pause, &pause) != 0 && errno == EINTR) {
  }
}

void yield() noexcept {
  sched_yield();
}

void* map_shared_anonymous(size_t bytes) noexcept {
  void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  return memory == MAP_FAILED ? nullptr : memory;
}

void* map_private_anonymous(size_t bytes) noexcept {
  void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return memory == MAP_FAILED ? nullptr : memory;
}

const void* map_file_read_only(int fd, size_t bytes) noexcept {
  void* memory = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  return memory == MAP_FAILED ? nullptr : memory;
}

void unmap(const void* address, size_t bytes) noexcept {
  munmap(const_cast<void*>(address), bytes);
}

int open(const char* path, int flags) noexcept {
  return ::open(path, flags);
}

int open_at(int dir_fd, const char* path, int flags, mode_t mode) noexcept {
  return ::openat(dir_fd, path, flags, mode);
}

int close(int fd) noexcept {
  return ::close(fd);
}

ssize_t write(int fd, const void* data, size_t bytes) noexcept {
  return ::write(fd, data, bytes);
}

ssize_t read_at(int fd, void* data, size_t bytes, off_t offset) noexcept {
  return ::pread(fd, data, bytes, offset);
}

ssize_t write_at(int fd, const void* data, size_t bytes, off_t offset) noexcept {
  return ::pwrite(fd, data, bytes, offset);
}

int make_dir(const char* path, mode_t mode) noexcept {
  return ::mkdir(path, mode);
}

int change_mode(int fd, mode_t mode) noexcept {
  return ::fchmod(fd, mode);
}

int link_at(int from_dir, const char* from, int to_dir, const char* to) noexcept {
  return ::linkat(from_dir, from, to_dir, to, 0);
}

int unlink_at(int dir_fd, const char* path) noexcept {
  return ::unlinkat(dir_fd, path, 0);
}

// fstat/fstatat through syscall(2): glibc 2.33 gave them symbols of their own (GLIBC_2.33), and
// the shim must load with glibc 2.17 (common/src/file_io.cc does the same).
int stat_fd(int fd, struct stat* status) noexcept {
  return static_cast<int>(syscall(SYS_fstat, fd, status));
}

int stat_at(int dir_fd, const char* path, struct stat* status) noexcept {
  return static_cast<int>(syscall(SYS_newfstatat, dir_fd, path, status, AT_SYMLINK_NOFOLLOW));
}

// getdents64 through syscall(2): glibc has no wrapper for it before 2.30.
long read_dir_entries(int dir_fd, void* buffer, size_t bytes) noexcept {
  return syscall(SYS_getdents64, dir_fd, buffer, bytes);
}

bool on_read_only_mount(int fd) noexcept {
  struct statvfs status {};
  return fstatvfs(fd, &status) == 0 && (status.f_flag & ST_RDONLY) != 0;
}

const char* environment_variable(const char* name) noexcept {
  return std::getenv(name);
}

const char* const* environment_entries() noexcept {
  return environ;
}

int process_id() noexcept {
  return static_cast<int>(::getpid());
}

unsigned effective_user_id() noexcept {
  return static_cast<unsigned>(::geteuid());
}

void on_fork_child(void (*reset)()) noexcept {
  __register_atfork(nullptr, nullptr, reset, &__dso_handle);
}

}  // namespace tessera::vgpu::os

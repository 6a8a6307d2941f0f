// The share folder's file contract (the layout itself is tessera/share_region.h), one
// implementation for the shim, the node agent and the CLI: who a process is (its owner word, from
// /proc) and how the usage page is created and opened. Errors are errno values (0 = success), no
// exceptions, no std::string: the shim links this statically without libstdc++ at run time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tessera/share_region.h"
#include "tessera/unique_fd.h"

namespace tessera::share {

// ---- owner words
// ---------------------------------------------------------------------------------

// Pass as the pid to name the calling process (<proc_root>/self). Any other pid below 1 names no
// process (ESRCH).
inline constexpr int kSelfPid = -1;

// What the owner word of a usage-page slot packs (make_owner), as read from /proc.
struct ProcessIdentity {
  uint32_t pid = 0;            // in the process's own (innermost) pid namespace
  uint64_t pid_namespace = 0;  // inode of <proc_root>/<pid>/ns/pid
  uint64_t start_time = 0;     // <proc_root>/<pid>/stat field 22 (clock ticks since boot)
  uint64_t owner() const { return make_owner(pid, pid_namespace, start_time); }
};

// The identity of process `pid` as numbered in `proc_root` (kSelfPid: the caller). Both sides pack
// it the same way: the shim for itself (its slot), the agent for host processes (matching slots to
// host pids). The pid is the last number of the NSpid line of status (the "Pid:" line on kernels
// before 4.1, which have no NSpid). 0, or ESRCH for a process that is gone or a zombie (it holds
// no GPU memory any more), or the errno of what could not be read (reading ns/pid of another
// user's process needs ptrace access: EACCES).
int read_process_identity(std::string_view proc_root, int pid, ProcessIdentity& out);

// Field 22 of <proc_root>/<pid>/stat. 0, ESRCH (gone or a zombie), or an errno. With the caller's
// own namespace this tells whether an owner word of the caller's pid namespace is still alive
// without ns/pid, which a process of another uid in the same share cannot read.
int read_process_start_time(std::string_view proc_root, int pid, uint64_t& start_time);

// The inode of <proc_root>/<pid>/ns/pid (kSelfPid: the caller's). 0 or an errno.
int read_pid_namespace(std::string_view proc_root, int pid, uint64_t& pid_namespace);

// <dir>/mps: an empty file the node agent writes into the folder of a share served by an MPS
// control daemon. libvgpu reads it to refuse a process given two MPS shares (one MPS client talks
// to one control daemon: CUDA_MPS_PIPE_DIRECTORY is one path). Absent on every other share.
inline constexpr char kMpsMarkerFile[] = "mps";

// ---- the usage page
// ------------------------------------------------------------------------------

// Mode of the usage page: 0666, exactly (fchmod'ed, whatever the umask). The processes of one
// share may run as different uids (containers of one pod with their own runAsUser), and Kubernetes
// gives them no common group on a CDI-mounted host folder, so 0660 would lock out all but the
// creator's group and that process's share would run with a 0-byte limit. World-writable costs
// nothing here: the share folder is mounted only into that share's containers (no other share can
// reach the file), the page holds only the share's own bookkeeping, and the agent reads it as
// untrusted input (ARCHITECTURE.md, "Trust"). Limits never live in it.
inline constexpr unsigned kUsagePageMode = 0666;

// Step one of creating <dir>/usage: a complete, initialised page under a fresh temporary name in
// `dir` (".usage.<pid>.<n>.tmp", created exclusively, never through a symlink, size and header
// written and fsync'ed so that the name published next never shows a half page, even after a power
// loss). Writes the temporary path to `temporary` (capacity bytes). 0 or an errno.
int prepare_usage_page(const char* dir, char* temporary, size_t capacity);

// Step two: link(2) the temporary page to `usage_path`, then remove the temporary name. link never
// replaces a usage page another process published meanwhile (rename would): that one wins, and
// this is a success too. 0 or an errno.
int publish_usage_page(const char* temporary, const char* usage_path);

// Both steps: creates <dir>/usage unless it exists. 0 also when it existed or another process
// created it first. A process killed in between leaves only a dot-named temporary file, which no
// reader opens.
int create_usage_page(const char* dir);

// Maps the usage page at `path` (MAP_SHARED; writable: PROT_READ | PROT_WRITE, else read-only).
// Never through a symlink, never blocking on a FIFO, only a regular file at least
// sizeof(UsagePage) long with a valid header (EPROTO otherwise). Unmap with unmap_usage_page.
int map_usage_page(const char* path, bool writable, UsagePage*& out);
void unmap_usage_page(const UsagePage* page);

// map_usage_page of <dir>/usage, writable, creating the page first when it is absent.
int open_or_create_usage_page(const char* dir, UsagePage*& out);

// ---- the pending file of a device (tessera/pending_spans.h)
// --------------------------------------------------------------------------

// <dir>/pending-<uuid> opened read-write into `out`, created first when absent as the usage page
// is (a whole page under a temporary name, linked into place; kUsagePageMode, for the same
// reasons). Never through a symlink, never blocking on a FIFO, only a regular file at least a
// PendingPage long with its magic and version (EPROTO otherwise). 0 or an errno (EINVAL: a uuid
// that is no file name).
int open_or_create_pending_file(const char* dir, const char* uuid, UniqueFd& out);

}  // namespace tessera::share

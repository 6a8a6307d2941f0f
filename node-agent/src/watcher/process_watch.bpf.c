// The process watcher's kernel side (docs/node-agent.md, "Process watcher (eBPF)"). CO-RE against
// the running kernel's BTF; every hook attaches through BTF (no tracefs, no kprobes):
//
//   tp_btf/sched_process_exit  the last thread of a process exits (signal->live reached 0): the
//                              process's usage slots can be reclaimed at once.
//   lsm/file_open              a file is opened (where the BPF LSM and trampolines are available),
//   or tp_btf/sys_exit         else the return of open/openat/openat2: a character device whose
//                              major is watched (the nvidia majors) is reported, whatever its path,
//                              so a node made with mknod anywhere counts as well.
//
// User space loads one of the two open hooks (set_autoload). Filtering happens here so the ring
// buffer carries only what user space acts on: exits of processes in watched cgroups (or that
// opened a watched device), opens of watched majors.
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "process_watch_events.h"

char LICENSE[] SEC("license") = "GPL";

#define S_IFMT 00170000
#define S_IFCHR 0020000
#define MINORBITS 20
#define MINORMASK ((1U << MINORBITS) - 1)

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 256 * 1024);
} events SEC(".maps");

// v2 cgroup ids of the shares' cgroups (pods or containers); a task in one or below is watched.
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, TESSERA_WATCH_MAX_CGROUPS);
  __type(key, __u64);
  __type(value, __u8);
} watched_cgroups SEC(".maps");

// Character device majors whose opens are reported (195 = /dev/nvidia*, nvidia-uvm's dynamic one).
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, TESSERA_WATCH_MAX_MAJORS);
  __type(key, __u32);
  __type(value, __u8);
} device_majors SEC(".maps");

// Processes (host tgid) that opened a watched device: their exit is reported wherever they run.
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, TESSERA_WATCH_MAX_GPU_OPENERS);
  __type(key, __u32);
  __type(value, __u8);
} device_openers SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct tessera_watch_settings);
} settings SEC(".maps");

// The watched cgroup the current task is in (its own v2 cgroup or an ancestor), or 0.
static __always_inline __u64 watched_cgroup(void) {
  for (int level = TESSERA_WATCH_MAX_CGROUP_LEVELS - 1; level >= 0; --level) {
    const __u64 id = bpf_get_current_ancestor_cgroup_id(level);
    if (id != 0 && bpf_map_lookup_elem(&watched_cgroups, &id)) return id;
  }
  return 0;
}

// Who the process is, as the shim packs its owner word: the innermost pid of its thread group,
// that pid namespace's inode, the group leader's start time.
static __always_inline void fill_identity(struct tessera_watch_event *event,
                                          struct task_struct *task) {
  const __u64 pid_tgid = bpf_get_current_pid_tgid();
  event->host_pid = (__u32)pid_tgid;
  event->host_tgid = (__u32)(pid_tgid >> 32);
  event->cgroup_id = bpf_get_current_cgroup_id();
  event->timestamp_ns = bpf_ktime_get_ns();
  bpf_get_current_comm(event->comm, sizeof(event->comm));
  struct pid *tgid_pid = BPF_CORE_READ(task, signal, pids[PIDTYPE_TGID]);
  if (tgid_pid) {
    const unsigned int level = BPF_CORE_READ(tgid_pid, level);
    struct upid innermost = {};
    bpf_core_read(&innermost, sizeof(innermost), &tgid_pid->numbers[level]);
    event->namespace_tgid = (__u32)innermost.nr;
    if (innermost.ns) event->pid_namespace = BPF_CORE_READ(innermost.ns, ns.inum);
  }
  event->start_boottime_ns = BPF_CORE_READ(task, group_leader, start_boottime);
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(process_exit, struct task_struct *task) {
  // Only the last thread's exit ends the process (do_exit decrements signal->live before this
  // tracepoint).
  if (BPF_CORE_READ(task, signal, live.counter) != 0) return 0;
  const __u32 tgid = (__u32)(bpf_get_current_pid_tgid() >> 32);
  const __u32 zero = 0;
  const struct tessera_watch_settings *config = bpf_map_lookup_elem(&settings, &zero);
  const int opened_device = bpf_map_delete_elem(&device_openers, &tgid) == 0;
  const __u64 watched = watched_cgroup();
  if (!watched && !opened_device && !(config && config->report_all_exits)) return 0;

  struct tessera_watch_event *event = bpf_ringbuf_reserve(&events, sizeof(*event), 0);
  if (!event) return 0;
  __builtin_memset(event, 0, sizeof(*event));
  event->kind = TESSERA_WATCH_EXIT;
  event->watched_cgroup_id = watched;
  event->exit_code = BPF_CORE_READ(task, exit_code);
  fill_identity(event, task);
  bpf_ringbuf_submit(event, 0);
  return 0;
}

// Reports `file` if it is a character device of a watched major.
static __always_inline void report_open(struct file *file) {
  if (!file) return;
  struct inode *inode = BPF_CORE_READ(file, f_inode);
  if (!inode) return;
  if ((BPF_CORE_READ(inode, i_mode) & S_IFMT) != S_IFCHR) return;
  const __u32 rdev = BPF_CORE_READ(inode, i_rdev);
  const __u32 major = rdev >> MINORBITS;
  if (!bpf_map_lookup_elem(&device_majors, &major)) return;

  const __u32 tgid = (__u32)(bpf_get_current_pid_tgid() >> 32);
  const __u8 one = 1;
  bpf_map_update_elem(&device_openers, &tgid, &one, BPF_ANY);

  struct tessera_watch_event *event = bpf_ringbuf_reserve(&events, sizeof(*event), 0);
  if (!event) return;
  __builtin_memset(event, 0, sizeof(*event));
  event->kind = TESSERA_WATCH_DEVICE_OPEN;
  event->device_major = major;
  event->device_minor = rdev & MINORMASK;
  event->watched_cgroup_id = watched_cgroup();
  fill_identity(event, bpf_get_current_task_btf());
  bpf_ringbuf_submit(event, 0);
}

// The open hook where the BPF LSM is enabled (lsm= lists "bpf") and trampolines attach: sees
// every open, whatever system call or io_uring request made it.
SEC("lsm/file_open")
int BPF_PROG(file_open, struct file *file, int ret) {
  if (ret == 0) report_open(file);
  return ret;  // never changes the decision
}

#if defined(__TARGET_ARCH_x86)
#define SYSCALL_NUMBER(regs) BPF_CORE_READ(regs, orig_ax)
#define NR_OPEN 2
#define NR_OPENAT 257
#elif defined(__TARGET_ARCH_arm64)
#define SYSCALL_NUMBER(regs) BPF_CORE_READ(regs, syscallno)
#define NR_OPEN -1
#define NR_OPENAT 56
#endif
#define NR_OPENAT2 437

// The open hook where trampolines are refused (fentry/lsm fail with EPERM on some kernels): the
// return of open/openat/openat2, the new descriptor looked up in the task's file table. A raw
// tracepoint needs no tracefs; it runs on every system call's return and leaves at the first
// comparison for all but these three.
SEC("tp_btf/sys_exit")
int BPF_PROG(open_return, struct pt_regs *regs, long ret) {
  if (ret < 0) return 0;
  const long number = SYSCALL_NUMBER(regs);
  if (number != NR_OPENAT && number != NR_OPEN && number != NR_OPENAT2) return 0;
  struct task_struct *task = bpf_get_current_task_btf();
  struct fdtable *table = BPF_CORE_READ(task, files, fdt);
  if (!table) return 0;
  const unsigned int max_fds = BPF_CORE_READ(table, max_fds);
  if ((unsigned long)ret >= max_fds) return 0;
  struct file **fds = BPF_CORE_READ(table, fd);
  struct file *file = 0;
  bpf_core_read(&file, sizeof(file), &fds[ret]);
  report_open(file);
  return 0;
}

/* What the process watcher's BPF program (process_watch.bpf.c) sends to user space through its
 * ring buffer, and the values user space writes into its maps. Plain C with fixed-width kernel
 * types: one definition for both sides, the BPF side compiled against vmlinux.h. */
#ifndef TESSERA_PROCESS_WATCH_EVENTS_H
#define TESSERA_PROCESS_WATCH_EVENTS_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#define TESSERA_WATCH_COMM_BYTES 16
/* Cgroup levels the exit filter walks up from a task's v2 cgroup (pod cgroups sit a few levels
 * below the root; the container's own cgroup one or two levels further). */
#define TESSERA_WATCH_MAX_CGROUP_LEVELS 16
#define TESSERA_WATCH_MAX_CGROUPS 4096
#define TESSERA_WATCH_MAX_MAJORS 8
#define TESSERA_WATCH_MAX_GPU_OPENERS 16384

enum tessera_watch_event_kind {
  TESSERA_WATCH_EXIT = 1,        /* the last thread of a process exited */
  TESSERA_WATCH_DEVICE_OPEN = 2, /* a process opened a character device of a watched major */
};

struct tessera_watch_event {
  __u32 kind;           /* enum tessera_watch_event_kind */
  __u32 host_pid;       /* the thread, as the host (initial pid namespace) numbers it */
  __u32 host_tgid;      /* its process, as the host numbers it */
  __u32 namespace_tgid; /* the process in its own innermost pid namespace (the owner word's pid) */
  __u64 pid_namespace;  /* inode number of that pid namespace (/proc/<pid>/ns/pid) */
  __u64 start_boottime_ns; /* the process's start, ns since boot (/proc/<pid>/stat field 22 in
                            * clock ticks is this divided by NSEC_PER_SEC / USER_HZ) */
  __u64 cgroup_id;         /* the task's v2 cgroup (bpf_get_current_cgroup_id) */
  __u64 watched_cgroup_id; /* the watched cgroup it is in (itself or an ancestor), 0 = none */
  __u64 timestamp_ns;      /* CLOCK_MONOTONIC when the kernel saw it (bpf_ktime_get_ns) */
  __u32 device_major;      /* TESSERA_WATCH_DEVICE_OPEN: the device opened */
  __u32 device_minor;
  __s32 exit_code; /* TESSERA_WATCH_EXIT: the exit code as wait(2) would see it */
  __u32 reserved0;
  char comm[TESSERA_WATCH_COMM_BYTES];
};

/* The one entry of the `settings` array map. */
struct tessera_watch_settings {
  /* Report every process exit, not only those in watched cgroups or of processes that opened a
   * watched device: for shares whose cgroup is not known (a cgroup v1-only container). */
  __u32 report_all_exits;
  __u32 reserved0;
};

#endif /* TESSERA_PROCESS_WATCH_EVENTS_H */

#!/usr/bin/env python3
"""Compute quotas on the simulated GPU, end to end (docs/compute.md): tenants run samples/compute-burn
under `tessera run --cores ...` (libvgpu preloaded) and this harness measures what each got. Every
scenario first measures the unlimited baseline in the same run, prints its figures as one
"FIGURE ..." line per measurement, and fails when a figure is outside its tolerance.

  compute_accuracy.py --tessera T --burn B [--probe P] --lib-dir D SCENARIO [--seconds S]

Scenarios: single (cores 10/30/50/90 alone, judged by what the share was given, not by how fast
this machine let it ask), shares (30/70, 50 us kernels),
shares-long (30/70, 5 ms kernels), four (10/20/30/40), four-long (the same, 5 ms kernels),
processes (30/70, two processes per share),
burst (request 30, limit 100, then a 70% tenant arrives), classes (a guaranteed 60 beside a
best-effort share, both burning), best-effort (--cores 0 alone), burstable (request 30, limit 60,
alone), takeover (the meter's leader process is
killed: another process of the share leads), priority (a high share's p99 latency
while a low share saturates), path-<launch> (cores 30 through one of compute-burn's launch paths),
probe-<entry point> (cores 30 through one entry point, with compute_probe), unmeasured (cores 30
and 50 alone where NVML has no per-process utilisation: launches timed by the shim),
unmeasured-shares (30/70 there, judged as `shares`), unmeasured-instances (30/70 inside one
instance of a simulated MIG GPU, an unlimited burn in another; needs --simgpu-ctl).

GPU time of a tenant = kernels x kernel time / wall time: the simulator's kernel time is exact
(waves x SIMGPU_KERNEL_US), so this is an independent measurement, not the shim's own figure.
"""

import argparse
import ctypes
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import threading
import time

SHORT_US = 50     # one wave of burn_fma (--blocks-per-sm 8 = one wave on 132 SMs)
LONG_US = 5000
SINGLE_US = 5000  # `single`: one kernel in flight, long enough that launching is a small part
FAILURES = []


def figure(name, value, expected=None, tolerance=None):
    line = f"FIGURE {name} = {value:.2f}"
    if expected is not None:
        ok = abs(value - expected) <= tolerance
        line += f" (expected {expected} +/- {tolerance}: {'ok' if ok else 'FAIL'})"
        if not ok:
            FAILURES.append(line)
    print(line, flush=True)


class Harness:
    def __init__(self, args, work):
        self.args = args
        self.work = work
        self.env = dict(os.environ)
        for name in list(self.env):
            if name.startswith("TESSERA_") or name.startswith("CUDA_DEVICE_"):
                del self.env[name]
        self.env.update({
            "LD_LIBRARY_PATH": args.lib_dir,
            "SIMGPU_STATE": os.path.join(work, "simgpu.state"),
            "SIMGPU_DEVICES": "name=NVIDIA H200,memory=143771Mi,sms=132,cc=9.0",
            "TESSERA_DEVICE_DIR": work,
        })
        self.count = 0

    def kernel(self, kernel_us):
        self.env["SIMGPU_KERNEL_US"] = f"burn_fma={kernel_us},burn_fma_coop={kernel_us}"
        self.kernel_us = kernel_us

    def burn_command(self, seconds, launch="kernel", sync_every=None):
        if sync_every is None:
            sync_every = 64 if self.kernel_us < 1000 else 4
        return [self.args.burn, "--seconds", str(seconds), "--blocks-per-sm", "8",
                "--sync-every", str(sync_every), "--launch", launch]

    def start(self, share_args, processes=1, seconds=3.0, launch="kernel", sync_every=None,
              delay=0.0, env=None):
        """One share (tessera run with share_args, or unconfined when None) of `processes` burns;
        `env`: variables this share's processes get beside the harness's."""
        burn = " ".join(self.burn_command(seconds, launch, sync_every))
        script = f"sleep {delay}; " if delay else ""
        script += " & ".join([burn] * processes) + " & wait"
        command = ["sh", "-c", script]
        if share_args is not None:
            self.count += 1
            command = [self.args.tessera, "run", "--share-dir",
                       os.path.join(self.work, f"share{self.count}"), *share_args, "--", *command]
        return subprocess.Popen(command, env=dict(self.env, **(env or {})),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def finish(self, process, timeout=120):
        out, err = process.communicate(timeout=timeout)
        process.summary = err
        if process.returncode != 0:
            print(err)
            raise SystemExit(f"FAIL: a tenant exited with {process.returncode}")
        return [json.loads(line) for line in out.splitlines() if line.startswith("{")]

    def busy_percent(self, reports):
        """GPU time of the share's processes, percent of wall time."""
        return sum(100.0 * r["kernels"] * self.kernel_us * 1e-6 / r["seconds"] for r in reports)

    def baseline(self, seconds, launch="kernel", sync_every=None):
        reports = self.finish(self.start(None, seconds=seconds, launch=launch,
                                         sync_every=sync_every))
        figure(f"unlimited_{launch}_kernels_per_s", reports[0]["kernels_per_s"])
        return reports[0]


def quota_figures(h, name, report, base, cores):
    """A quota caps the share's GPU time as a percent of wall time. Where this machine cannot drive
    the GPU that hard even unlimited (launches are CPU-bound on a loaded machine), the share is
    owed what it reached alone: the ratio to the unlimited rate alone would call 90% of a GPU that
    the baseline drove to 93% "97%" (it is printed, not judged)."""
    figure(f"{name}_percent_of_unlimited", 100.0 * report["kernels_per_s"] / base["kernels_per_s"])
    reachable = h.busy_percent([base])
    figure(f"{name}_gpu_percent", h.busy_percent([report]), round(min(cores, reachable), 2), 3)


def single(h, seconds):
    """Cores 10/30/50/90 alone, judged by what the share was given, not by how fast this machine
    let it ask (a loaded machine stretches the tenant's own launches; no verdict depends on that).
    One kernel in flight (--sync-every 1), so the wall time splits into three parts that do not
    overlap: on the GPU (G, kernels x kernel time), held at the compute gate (W, the shim's
    `throttled_ns`), and the tenant's own CPU time (launching, and waiting for a CPU). Then:
      cap:   G <= q T + 3 points of T          (the share never gets more than its quota)
      floor: G >= q (G + W) - 3 points of T    (it is held only once it has had its quota of the
                                                time it wanted; a tenant that could not ask for
                                                more is not owed more)
    The bucket gives a share exactly q T less what it leaves unused at the cap (C = 20 ms) while
    its gate is open, so a correct limiter meets both on any machine (docs/compute.md)."""
    h.kernel(SINGLE_US)
    base = h.baseline(seconds, sync_every=1)
    figure("unlimited_gpu_percent", h.busy_percent([base]))
    for cores in (10, 30, 50, 90):
        held = given_quota(h, f"cores{cores}", base, cores, seconds)
        if cores == 10 and held is not None and held <= 0:
            # A tenant that asks for 10 times its quota on any machine that runs it at all.
            FAILURES.append("cores 10: never held at the gate")


def given_quota(h, name, base, cores, seconds, launch="kernel", limit=None):
    """One share of `cores` (and `limit`) alone, one kernel in flight, judged as `single` says at
    the rate it is owed alone, its limit. Returns the time it was held at the gate (s), None
    without a usage summary. Launches are counted exactly on
    compute-burn's driver paths; a CUDA runtime build launches more than it times (the runtime's
    graph path launches once outside the timed loop), so there every kernel must be counted."""
    share_args = ["--cores", str(cores)] + (["--cores-limit", str(limit)] if limit else [])
    process = h.start(share_args + ["--verbose"], seconds=seconds, launch=launch, sync_every=1)
    r = h.finish(process)[0]
    figure(f"{name}_percent_of_unlimited", 100.0 * r["kernels_per_s"] / base["kernels_per_s"])
    exact = "runtime" not in os.path.basename(h.args.burn)
    held = check_summary(h, process.summary, r, cores, limit, require_held=False,
                         exact_launches=exact)
    if held is None:
        return None
    gpu = r["kernels"] * h.kernel_us * 1e-6
    wall = r["seconds"]
    q = (limit or cores) / 100.0
    figure(f"{name}_gpu_percent", 100.0 * gpu / wall)
    figure(f"{name}_held_percent", 100.0 * held / wall)
    judge_at_most(f"{name}_gpu_minus_quota_points", 100.0 * (gpu - q * wall) / wall, 3)
    judge_at_most(f"{name}_owed_minus_gpu_points", 100.0 * (q * (gpu + held) - gpu) / wall, 3)
    return held


def judge_at_most(name, value, most):
    line = f"FIGURE {name} = {value:.2f}"
    ok = value <= most
    line += f" (expected <= {most}: {'ok' if ok else 'FAIL'})"
    if not ok:
        FAILURES.append(line)
    print(line, flush=True)


def check_summary(h, stderr, report, cores, limit=None, require_held=True, exact_launches=True):
    """`tessera run --verbose`: the shim's own counters agree with what the burn measured. Returns
    the time the launching threads were held at the gate (s), None without a summary."""
    launches = re.search(r"summary: [0-9.]+ s, ([0-9]+) launches, launching threads waited "
                         r"([0-9.]+) s", stderr)
    used = re.search(rf"cores request {cores}%, limit {limit or cores}%; GPU time used ([0-9.]+) s",
                     stderr)
    if not launches or not used:
        FAILURES.append(f"cores {cores}: no usage summary in: {stderr!r}")
        return None
    kernels = report["kernels"] + 1  # and the warm-up kernel
    if exact_launches:
        figure(f"cores{cores}_summary_launches", int(launches.group(1)), kernels, 0)
    else:
        judge_at_most(f"cores{cores}_kernels_beyond_summary_launches",
                      kernels - int(launches.group(1)), 0)
    gpu_s = kernels * h.kernel_us * 1e-6
    # 5 %, and the two windows the meter does not debit (the first after the share starts and the
    # one after its last period), each up to one kernel: 2 x 50 us is nothing, 2 x 5 ms is not.
    figure(f"cores{cores}_summary_gpu_time_vs_kernels_percent",
           100.0 * float(used.group(1)) / gpu_s, 100,
           round(5 + 100.0 * 2 * h.kernel_us * 1e-6 / gpu_s, 2))
    if (limit or cores) < 90 and float(launches.group(2)) <= 0 and require_held:
        FAILURES.append(f"cores {cores}: no throttled time counted")
    return float(launches.group(2))


def shares(h, seconds, quotas, kernel_us, processes=1):
    h.kernel(kernel_us)
    base = h.baseline(min(seconds, 2.0))
    figure("unlimited_gpu_percent", h.busy_percent([base]))
    reachable = h.busy_percent([base])
    tenants = [h.start(["--cores", str(q)], processes=processes, seconds=seconds) for q in quotas]
    results = [h.finish(t) for t in tenants]
    judge_shares([f"share{q}" for q in quotas], quotas,
                 [h.busy_percent(reports) for reports in results], reachable)


class Sample(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("timeStamp", ctypes.c_ulonglong),
                ("smUtil", ctypes.c_uint), ("memUtil", ctypes.c_uint),
                ("encUtil", ctypes.c_uint), ("decUtil", ctypes.c_uint)]


class Sampler:
    """Per-process GPU time every `period` s from the simulator's NVML (the engine's exact history),
    attributed to shares through the pids in their usage pages: a time series per share."""

    def __init__(self, h, period=0.1):
        os.environ["SIMGPU_STATE"] = h.env["SIMGPU_STATE"]
        self.nvml = ctypes.CDLL(os.path.join(h.args.lib_dir, "libnvidia-ml.so.1"))
        assert self.nvml.nvmlInit_v2() == 0
        self.device = ctypes.c_void_p()
        assert self.nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(self.device)) == 0
        self.period = period
        self.series = []  # (seconds since start, {pid: percent})
        self.stop = False
        self.began = time.monotonic()
        self.thread = threading.Thread(target=self.run)
        self.thread.start()

    def run(self):
        samples = (Sample * 256)()
        last = int(time.time() * 1e6)
        while not self.stop:
            time.sleep(self.period)
            count = ctypes.c_uint(256)
            result = self.nvml.nvmlDeviceGetProcessUtilization(
                self.device, samples, ctypes.byref(count), ctypes.c_ulonglong(last))
            now = int(time.time() * 1e6)
            used = {}
            if result == 0:
                for i in range(count.value):
                    used[samples[i].pid] = samples[i].smUtil
                now = max(samples[i].timeStamp for i in range(count.value))
            last = now
            self.series.append((time.monotonic() - self.began, used))

    def finish(self):
        self.stop = True
        self.thread.join()


def share_pids(share_dir):
    """The pids in a share's usage page (tessera/share_region.h: slots of 192 bytes from 64)."""
    pids = set()
    with open(os.path.join(share_dir, "usage"), "rb") as page:
        data = page.read(64 + 192 * 512)
    high = struct.unpack_from("<I", data, 16)[0]
    for i in range(min(high, 512)):
        owner, = struct.unpack_from("<Q", data, 64 + 192 * i)
        pid, = struct.unpack_from("<I", data, 64 + 192 * i + 24)
        if owner:
            pids.add(pid)
    return pids


def burst(h, seconds):
    h.kernel(SHORT_US)
    base = h.baseline(2.0)
    unlimited = h.busy_percent([base])
    sampler = Sampler(h)
    arrival = 1.5
    bursting = h.start(["--cores", "30", "--cores-limit", "100"], seconds=arrival + seconds)
    bursting_dir = os.path.join(h.work, f"share{h.count}")
    other = h.start(["--cores", "70"], seconds=seconds, delay=arrival)
    other_dir = os.path.join(h.work, f"share{h.count}")
    pids = {}
    while bursting.poll() is None and not pids:
        time.sleep(0.05)
        try:
            pids = share_pids(bursting_dir)
        except OSError:
            pass
    h.finish(bursting)
    h.finish(other)
    sampler.finish()
    others = share_pids(other_dir)
    alone = [sum(v for p, v in used.items() if p in pids)
             for t, used in sampler.series if 0.5 <= t < arrival]
    figure("burst_alone_percent_of_unlimited", 100.0 * sum(alone) / len(alone) / unlimited)
    if 100.0 * sum(alone) / len(alone) / unlimited <= 90:
        FAILURES.append("bursting alone is not above 90% of unlimited")
    # When the other tenant's first process shows up, and how long until the bursting share is
    # back to its quota (three 100 ms windows in a row at most 33%).
    start = next(t for t, used in sampler.series if any(p in others for p in used))
    figure("burst_other_arrived_s", start)
    windows = [(t, sum(v for p, v in used.items() if p in pids)) for t, used in sampler.series
               if t > start]
    settle = None
    for i in range(len(windows) - 2):
        if all(v <= 33 for _, v in windows[i:i + 3]):
            settle = windows[i][0] - start
            break
    figure("burst_back_to_quota_after_s", settle if settle is not None else 99, 0.5, 0.5)
    later = [v for t, v in windows if start + 1.0 <= t < start + seconds - 0.2]
    figure("burst_with_other_gpu_percent", sum(later) / len(later), 30, 3)


def wait_for_pids(processes_and_dirs):
    """The pids of each share once every one has some (while its tenant runs)."""
    found = [set() for _ in processes_and_dirs]
    while not all(found) and all(p.poll() is None for p, _ in processes_and_dirs):
        time.sleep(0.05)
        for i, (_, share_dir) in enumerate(processes_and_dirs):
            try:
                found[i] = found[i] or share_pids(share_dir)
            except OSError:
                pass
    return found


def classes(h, seconds):
    """A guaranteed 60 (request = limit = 60) beside a best-effort share (--cores 0), both burning:
    the guaranteed share gets its 60 and the best-effort one the rest. The best-effort share starts
    first (and has the GPU alone); the guaranteed one arrives and takes its request back."""
    h.kernel(SHORT_US)
    base = h.baseline(min(seconds, 2.0))
    reachable = h.busy_percent([base])
    figure("unlimited_gpu_percent", reachable)
    sampler = Sampler(h)
    arrival = 1.0
    best = h.start(["--cores", "0", "--verbose"], seconds=arrival + seconds + 0.5)
    best_dir = os.path.join(h.work, f"share{h.count}")
    guaranteed = h.start(["--cores", "60", "--verbose"], seconds=seconds, delay=arrival)
    guaranteed_dir = os.path.join(h.work, f"share{h.count}")
    best_pids, guaranteed_pids = wait_for_pids([(best, best_dir), (guaranteed, guaranteed_dir)])
    g_report = h.finish(guaranteed)[0]
    check_summary(h, guaranteed.summary, g_report, 60)
    h.finish(best)
    if "cores request 0%, limit 100%" not in best.summary:
        FAILURES.append(f"best-effort summary: {best.summary!r}")
    sampler.finish()
    # The guaranteed share's whole run is beside the burning best-effort share.
    g_percent = h.busy_percent([g_report])
    figure("guaranteed60_gpu_percent", g_percent, round(min(60, reachable), 2), 3)
    series = [(t, sum(v for p, v in used.items() if p in best_pids),
               sum(v for p, v in used.items() if p in guaranteed_pids))
              for t, used in sampler.series]
    alone = [b for t, b, g in series if 0.4 <= t < arrival - 0.1 and b > 0]
    if alone:
        figure("best_effort_alone_first_percent_of_unlimited",
               100.0 * sum(alone) / len(alone) / reachable)
    start = next(t for t, b, g in series if g > 0)
    during = [(b, g) for t, b, g in series if start + 0.5 <= t < start + seconds - 0.3]
    best_during = sum(b for b, _ in during) / len(during)
    figure("guaranteed60_nvml_percent", sum(g for _, g in during) / len(during))
    # The rest: what the unlimited run reached, less the guaranteed share's 60 (as `shares` owes).
    rest = round(max(0.0, min(40.0, reachable - g_percent)), 2)
    line = f"FIGURE best_effort_beside_guaranteed60_gpu_percent = {best_during:.2f}"
    ok = rest - 3 <= best_during <= 40 + 3
    line += f" (expected {rest - 3:.2f} to 43: {'ok' if ok else 'FAIL'})"
    if not ok:
        FAILURES.append(line)
    print(line, flush=True)


def best_effort(h, seconds):
    """A best-effort share (--cores 0) alone: owed the whole GPU, so held at the gate for at most
    3 points of its wall time (judged as `single`, at a rate of 100)."""
    h.kernel(SINGLE_US)
    base = h.baseline(seconds, sync_every=1)
    figure("unlimited_gpu_percent", h.busy_percent([base]))
    given_quota(h, "best_effort_alone", base, 0, seconds, limit=100)


def burstable(h, seconds):
    """Request 30, limit 60, alone: the spare time takes it to its limit, 60 (judged as
    `single`)."""
    h.kernel(SINGLE_US)
    base = h.baseline(seconds, sync_every=1)
    figure("unlimited_gpu_percent", h.busy_percent([base]))
    given_quota(h, "request30_limit60", base, 30, seconds, limit=60)


def meter_leader(share_dir):
    """The pid of the share's meter leader (UsagePage::compute.meter_owner, tessera/share_region.h)."""
    with open(os.path.join(share_dir, "usage"), "rb") as page:
        data = page.read(64 + 192 * 512 + 128)
    owner, = struct.unpack_from("<Q", data, 64 + 192 * 512 + 64)
    return owner & 0x3fffff


def takeover(h, seconds):
    """Two processes in a 30% share; the meter's leader is SIGKILLed after a second: the other
    process takes the lead over and the share stays at its quota."""
    h.kernel(SHORT_US)
    sampler = Sampler(h)
    share = h.start(["--cores", "30"], processes=2, seconds=seconds + 1.0)
    share_dir = os.path.join(h.work, f"share{h.count}")
    time.sleep(1.0)
    leader = meter_leader(share_dir)
    pids = share_pids(share_dir)
    if leader not in pids:
        raise SystemExit(f"FAIL: the leader {leader} is not one of the share's pids {pids}")
    os.kill(leader, 9)
    killed_at = time.monotonic() - sampler.began
    time.sleep(0.7)
    new_leader = meter_leader(share_dir)  # while the survivor runs (it resigns when it exits)
    share.communicate(timeout=120)
    sampler.finish()
    survivors = pids - {leader}
    figure("takeover_new_leader_is_survivor", 1.0 if new_leader in survivors else 0.0, 1.0, 0)
    later = [sum(v for p, v in used.items() if p in survivors) for t, used in sampler.series
             if killed_at + 0.5 <= t < killed_at + seconds - 0.2]
    figure("takeover_gpu_percent_after_kill", sum(later) / len(later), 30, 3)


def priority(h, seconds):
    h.kernel(SHORT_US)
    # The control: without priorities the same two shares time-slice, and the p99 latency of the
    # first suffers (so the check below can tell the difference).
    low = h.start([], seconds=seconds + 1.5)
    plain = h.start([], seconds=seconds, sync_every=1, delay=0.5)
    plain_report = h.finish(plain)[0]
    h.finish(low)
    figure("normal_with_normal_p99_us", plain_report["latency_us_p99"])
    solo = h.finish(h.start(["--priority", "high"], seconds=seconds, sync_every=1))[0]
    figure("high_solo_p99_us", solo["latency_us_p99"])
    low = h.start(["--priority", "low"], seconds=seconds + 1.5)
    high = h.start(["--priority", "high"], seconds=seconds, sync_every=1, delay=0.5)
    with_low = h.finish(high)[0]
    h.finish(low)
    figure("high_with_low_p99_us", with_low["latency_us_p99"])
    ratio = with_low["latency_us_p99"] / solo["latency_us_p99"]
    figure("high_p99_ratio_to_solo", ratio, 1.0, 0.2)
    if plain_report["latency_us_p99"] < 1.5 * solo["latency_us_p99"]:
        FAILURES.append("the control did not degrade: this scenario cannot show priority")


def path(h, seconds, launch):
    """Cores 30 through one of compute-burn's launch paths, judged as `single`."""
    h.kernel(SINGLE_US)
    base = h.baseline(seconds, launch, sync_every=1)
    figure(f"unlimited_{launch}_gpu_percent", h.busy_percent([base]))
    given_quota(h, f"{launch}_cores30", base, 30, seconds, launch)


def probe_path(h, seconds, entry):
    """Cores 30 through one entry point compute-burn does not reach (compute_probe)."""
    h.kernel(SHORT_US)
    command = [h.args.probe, entry, str(seconds)]

    def run(share_args):
        if share_args is not None:
            h.count += 1
            full = [h.args.tessera, "run", "--share-dir",
                    os.path.join(h.work, f"share{h.count}"), *share_args, "--", *command]
        else:
            full = command
        return h.finish(subprocess.Popen(full, env=h.env, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True))[0]

    base = run(None)
    figure(f"unlimited_{entry}_kernels_per_s", base["kernels_per_s"])
    limited = run(["--cores", "30"])
    # Judged as the burn paths are: the share's GPU time against 30 % of wall time (or what this
    # machine reached unlimited), not the ratio of two launch rates a loaded machine moves.
    quota_figures(h, f"{entry}_cores30", limited, base, 30)


def no_time(h, seconds):
    """A cores value that fails closed gives the device no GPU time: every launch entry point is
    refused (CUDA_ERROR_NOT_PERMITTED, 800), never slowed to a rate; a valid value still runs."""
    h.kernel(SHORT_US)
    entries = ["cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz",
               "cuLaunchCooperativeKernel", "cuGraphLaunch", "cuGraphLaunch_ptsz"]
    for value in ["", "abc", "150"]:
        for entry in entries:
            env = dict(h.env, LD_PRELOAD=h.args.libvgpu, TESSERA_CORES_LIMIT=value)
            run = subprocess.run([h.args.probe, entry, str(seconds)], env=env, text=True,
                                 capture_output=True, timeout=60)
            shown = f"TESSERA_CORES_LIMIT='{value}' {entry}"
            if run.returncode == 0 or "failed: 800" not in run.stderr:
                FAILURES.append(f"{shown}: exit {run.returncode}, stderr {run.stderr.strip()!r}")
            if f"TESSERA_CORES_LIMIT='{value}'" not in run.stderr:
                FAILURES.append(f"{shown}: no line naming the variable: {run.stderr.strip()!r}")
        figure(f"cores_{value or 'empty'}_entry_points_refused", len(entries))
    env = dict(h.env, LD_PRELOAD=h.args.libvgpu, TESSERA_CORES_LIMIT="30")
    control = subprocess.run([h.args.probe, "cuLaunchKernel", str(seconds)], env=env, text=True,
                             capture_output=True, timeout=60)
    if control.returncode != 0:
        FAILURES.append(f"the control (cores 30) failed: {control.stderr.strip()!r}")


def unmeasured(h, seconds):
    """NVML answers NOT_SUPPORTED for per-process utilisation (SIMGPU_NVML_UTILIZATION=unsupported,
    as every MIG device does): the shim times its launches itself. Alone on the device the quota
    holds as on a measured GPU, and the GPU time the shim counted is the kernels' time (the
    accounting is judged against kernels x kernel time). Timed launches cost the launching thread
    more CPU, so what this machine can reach is measured with timing on: a share at cores 99 (timed,
    effectively unlimited) is the baseline the quotas are judged against."""
    h.kernel(SHORT_US)
    h.env["SIMGPU_NVML_UTILIZATION"] = "unsupported"
    h.env["TESSERA_LOG_LEVEL"] = "info"  # the line that says the launches are timed
    base = h.baseline(seconds)
    figure("unlimited_gpu_percent", h.busy_percent([base]))
    timed_base = h.finish(h.start(["--cores", "99"], seconds=seconds))[0]
    figure("timed_cores99_gpu_percent", h.busy_percent([timed_base]))
    # 30 and 50: timed launches cost CPU, and on a loaded 2-core machine a timed share reaches
    # about 60-70%: a higher quota would judge the machine, not the meter.
    for cores in (30, 50):
        process = h.start(["--cores", str(cores), "--verbose"], seconds=seconds)
        r = h.finish(process)[0]
        quota_figures(h, f"unmeasured_cores{cores}", r, timed_base, cores)
        check_summary(h, process.summary, r, cores)
        if "timed by the shim" not in process.summary:
            FAILURES.append(f"cores {cores}: the shim did not say it times the launches: "
                            f"{process.summary!r}")


def judge_shares(names, quotas, busy, reachable):
    """Each share owed its quota, or where quotas add up to more than this machine drove the GPU
    alone (launches are CPU-bound on a loaded machine), what was left of that beyond the others;
    never above its quota. +/-3 points either way (the `shares` verdict)."""
    for name, quota, value in zip(names, quotas, busy):
        others = sum(busy) - value
        owed = round(min(quota, max(0.0, reachable - others)), 2)
        line = f"FIGURE {name}_gpu_percent = {value:.2f}"
        ok = owed - 3 <= value <= quota + 3
        line += f" (expected {owed - 3:.2f} to {quota + 3}: {'ok' if ok else 'FAIL'})"
        if not ok:
            FAILURES.append(line)
        print(line, flush=True)


def charged_vs_kernels(h, name, reports, tenant):
    """The GPU time the share's meter charged it (`tessera run --verbose`) against its kernels x
    kernel time: printed, not judged (the quota verdict is on the kernels)."""
    # One line per device of the share (on a MIG GPU the parent too, where nothing ran).
    used = re.findall(r"GPU time used ([0-9.]+) s", tenant.summary)
    if not used:
        FAILURES.append(f"{name}: no usage summary in {tenant.summary!r}")
        return
    kernels = sum(r["kernels"] for r in reports) + len(reports)  # and the warm-up kernels
    figure(f"{name}_charged_vs_kernels_percent",
           100.0 * sum(float(u) for u in used) / (kernels * h.kernel_us * 1e-6))


def timed_shares(h, seconds, quotas, env=None, burn_env=None):
    """Shares `quotas` on one device NVML cannot measure (`env` picks it), each timing its own
    launches, judged as `shares` is against what a timed cores-99 share reached there alone (timed
    launches cost the launching thread CPU). With `burn_env`, an unlimited burn runs on another
    device meanwhile. Returns the burn's GPU-time percent (None without one)."""
    h.kernel(SHORT_US)
    timed_base = h.finish(h.start(["--cores", "99"], seconds=min(seconds, 2.0), env=env))[0]
    reachable = h.busy_percent([timed_base])
    figure("timed_cores99_gpu_percent", reachable)
    burn = h.start(None, seconds=seconds + 1.0, env=burn_env) if burn_env is not None else None
    tenants = [h.start(["--cores", str(q), "--verbose"], seconds=seconds, env=env)
               for q in quotas]
    results = [h.finish(t) for t in tenants]
    burn_percent = h.busy_percent(h.finish(burn)) if burn is not None else None
    names = [f"unmeasured_share{q}" for q in quotas]
    judge_shares(names, quotas, [h.busy_percent(r) for r in results], reachable)
    for name, reports, tenant in zip(names, results, tenants):
        charged_vs_kernels(h, name, reports, tenant)
        if "timed by the shim" not in tenant.summary:
            FAILURES.append(f"{name}: the shim did not say it times the launches")
    return burn_percent


def unmeasured_shares(h, seconds):
    """Two shares on one device NVML cannot measure (SIMGPU_NVML_UTILIZATION=unsupported, as inside
    a MIG instance), 30 and 70, each timing its own launches. Each process publishes the spans its
    launches were pending on the device's pending board, and each share is charged its equal part
    of the time at each moment: held as on a whole GPU."""
    h.env["SIMGPU_NVML_UTILIZATION"] = "unsupported"
    h.env["TESSERA_LOG_LEVEL"] = "info"  # the line that says the launches are timed
    timed_shares(h, seconds, [30, 70])


def mig_instances(h, count, profile):
    """A simulated H200 in MIG mode with `count` instances of `profile` made through the simulated
    NVML (simgpu-ctl, as nvidia-smi mig does): their MIG UUIDs."""
    h.env["SIMGPU_DEVICES"] = "name=NVIDIA H200,memory=143771Mi,sms=132,cc=9.0,mig=on"
    uuids = []
    for _ in range(count):
        made = subprocess.run([h.args.simgpu_ctl, "mig", "create", "0", profile], env=h.env,
                              capture_output=True, text=True, check=True)
        uuids.append(re.search(r'"(MIG-[0-9a-f-]+)"', made.stdout).group(1))
    return uuids


def unmeasured_instances(h, seconds):
    """A MIG GPU of the simulator with two 3g instances (each with SMs of its own: a kernel on one
    takes no time from the other). Shares 30 and 70 in the first (CUDA_VISIBLE_DEVICES=MIG-<uuid>;
    NVML has no utilisation on a MIG GPU, so their launches are timed), an unlimited burn in the
    second: the shares are held as on a whole GPU, and the burn does not slow them (it is on
    another device: their spans, board and meters never see it)."""
    h.env["TESSERA_LOG_LEVEL"] = "info"
    first, second = mig_instances(h, 2, "3g.71gb")
    burn = timed_shares(h, seconds, [30, 70], env={"CUDA_VISIBLE_DEVICES": first},
                        burn_env={"CUDA_VISIBLE_DEVICES": second})
    figure("other_instance_unlimited_gpu_percent", burn)
    if burn < 50:
        FAILURES.append(f"the burn on the other instance reached only {burn:.1f}%: not saturating")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tessera", required=True)
    parser.add_argument("--burn", required=True)
    parser.add_argument("--probe", help="compute_probe, for the probe-<entry point> scenarios")
    parser.add_argument("--lib-dir", required=True)
    parser.add_argument("--libvgpu", help="libvgpu.so, for the no-time scenario")
    parser.add_argument("--simgpu-ctl", help="simgpu-ctl, for the unmeasured-instances scenario")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("scenario")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tessera-compute-") as work:
        h = Harness(args, work)
        s = args.seconds
        if args.scenario == "single":
            single(h, s)
        elif args.scenario == "shares":
            shares(h, s, [30, 70], SHORT_US)
        elif args.scenario == "shares-long":
            shares(h, s, [30, 70], LONG_US)
        elif args.scenario == "four":
            shares(h, s, [10, 20, 30, 40], SHORT_US)
        elif args.scenario == "four-long":
            shares(h, s, [10, 20, 30, 40], LONG_US)
        elif args.scenario == "processes":
            shares(h, s, [30, 70], SHORT_US, processes=2)
        elif args.scenario == "burst":
            burst(h, s)
        elif args.scenario == "classes":
            classes(h, s)
        elif args.scenario == "best-effort":
            best_effort(h, s)
        elif args.scenario == "burstable":
            burstable(h, s)
        elif args.scenario == "priority":
            priority(h, s)
        elif args.scenario == "takeover":
            takeover(h, s)
        elif args.scenario == "unmeasured":
            unmeasured(h, s)
        elif args.scenario == "unmeasured-shares":
            unmeasured_shares(h, s)
        elif args.scenario == "unmeasured-instances":
            unmeasured_instances(h, s)
        elif args.scenario == "no-time":
            no_time(h, s)
        elif args.scenario.startswith("probe-"):
            probe_path(h, s, args.scenario[len("probe-"):])
        elif args.scenario.startswith("path-"):
            path(h, s, args.scenario[len("path-"):])
        else:
            raise SystemExit(f"unknown scenario {args.scenario}")
    if FAILURES:
        print("FAIL:\n  " + "\n  ".join(FAILURES))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

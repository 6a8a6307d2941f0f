"""What the runtime and library checkers (check_runtime.py, check_ipc.py,
../libraries/check_libraries.py) share: the simulated machine they run on, the failure they
report, and how a probe's one-line JSON report is read."""

import json
import os
import subprocess
import sys

GIB = 1 << 30
MIB = 1 << 20
DEVICE = "name=NVIDIA H200,memory=16Gi,sms=132,cc=9.0"
DEVICE_MEMORY = 16 * GIB
CONTEXT_OVERHEAD = 500 * MIB  # the simulator's default (SIMGPU_CONTEXT_OVERHEAD)
QUOTA = 4 * GIB  # what the checks' shares get


class CheckFailed(Exception):
    pass


def expect(condition, message):
    if not condition:
        raise CheckFailed(message)


def parse_report(line, what):
    try:
        return json.loads(line)
    except json.JSONDecodeError:
        raise CheckFailed(f"{what}: not a JSON report: {line!r}")


def simulator_env(work, lib_dir, cuda_lib_dir, devices=1):
    """A private simulated machine: the simulator's libcuda first, the toolkit's folder for the
    shared runtime and the libraries, a state file and a runtime folder of the run's own."""
    env = dict(os.environ)
    env.update({
        "LD_LIBRARY_PATH": f"{lib_dir}:{cuda_lib_dir}",
        "SIMGPU_STATE": os.path.join(work, "simgpu.state"),
        "SIMGPU_DEVICES": ";".join([DEVICE] * devices),
        "XDG_RUNTIME_DIR": work,
    })
    for name in ("SIMGPU_CONTEXT_OVERHEAD", "TESSERA_MEMORY_LIMIT", "LD_PRELOAD",
                 "LIBRARY_PROBE_HOLD", "NCCL_DEBUG"):
        env.pop(name, None)
    return env


def run_probe(command, env, what, timeout=120):
    """Runs a probe; returns (exit status, its last JSON line, parsed), printing that line."""
    completed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    lines = [line for line in completed.stdout.splitlines() if line.startswith("{")]
    if completed.returncode != 0 or not lines:
        sys.stderr.write(completed.stderr[-4000:])
    expect(lines, f"{what}: no report (exit status {completed.returncode})")
    print(f"{what}: {lines[-1]}", flush=True)
    return completed.returncode, parse_report(lines[-1], what)


def main_of(body):
    """Runs a checker's body: "ok" or "FAIL: reason" and exit status 1."""
    try:
        body()
    except CheckFailed as failure:
        print(f"FAIL: {failure}")
        sys.exit(1)
    print("ok")

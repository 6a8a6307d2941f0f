#!/usr/bin/env python3
"""CUDA IPC through the runtime API (ipc_probe) on the simulated GPU, bare and under one
`tessera run --memory 4Gi --share-dir D` share for both processes: the exporter's allocation is
counted once. The opener's cudaMemGetInfo does not drop when it opens the handle, what it can
still cudaMalloc is the GPU (or the quota) less the exporter's allocation and both contexts, and
the handle opens once per process (refcounted), never in its own exporter.

  check_ipc.py --probe P --tessera T --libvgpu L --lib-dir D --cuda-lib-dir C
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

GIB = 1 << 30
MIB = 1 << 20
DEVICE_MEMORY = 16 * GIB
CONTEXT_OVERHEAD = 500 * MIB  # the simulator's default (SIMGPU_CONTEXT_OVERHEAD)
QUOTA = 4 * GIB
EXPORTED = 2 * GIB
CHUNK = 64 * MIB


class CheckFailed(Exception):
    pass


def expect(condition, message):
    if not condition:
        raise CheckFailed(message)


def run(command, env, what):
    completed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    sys.stderr.write(completed.stderr)
    lines = completed.stdout.splitlines()
    expect(lines, f"{what}: no report (exit status {completed.returncode})")
    print(f"{what}: {lines[-1]}", flush=True)
    try:
        report = json.loads(lines[-1])
    except json.JSONDecodeError:
        raise CheckFailed(f"{what}: not a JSON report: {lines[-1]!r}")
    expect(completed.returncode == 0, f"{what}: exited {completed.returncode}")
    expect("error" not in report, f"{what}: the exporter failed: {report.get('error')}")
    return report


def check(report, limit, what):
    opener = report["opener"]
    expect(isinstance(opener, dict), f"{what}: no report from the opener")
    expect("error" not in opener, f"{what}: the opener failed: {opener.get('error')}")
    expect(report["opener_status"] == 0, f"{what}: the opener exited {report['opener_status']}")
    expect(report["total"] == limit and opener["total"] == limit,
           f"{what}: cudaMemGetInfo totals {report['total']}, {opener['total']} != {limit}")
    expect(report["free"] == limit - EXPORTED - CONTEXT_OVERHEAD,
           f"{what}: exporter's free {report['free']} after its {EXPORTED}-byte cudaMalloc")
    both = limit - EXPORTED - 2 * CONTEXT_OVERHEAD
    expect(opener["free_before"] == both,
           f"{what}: opener's free {opener['free_before']} != {both} (allocation + two contexts)")
    expect(opener["free_after"] == opener["free_before"],
           f"{what}: opening the handle moved the opener's free from {opener['free_before']} to "
           f"{opener['free_after']}: the memory was charged twice")
    expect(opener["same_pointer"], f"{what}: the second open mapped the handle again")
    expect(opener["memset"] == "cudaSuccess", f"{what}: cudaMemset on the mapping: {opener['memset']}")
    expect(opener["event_synchronize"] == "cudaSuccess",
           f"{what}: cudaEventSynchronize on the opened event: {opener['event_synchronize']}")
    expect(opener["refusal"] == "cudaErrorMemoryAllocation",
           f"{what}: the opener's fill stopped with {opener['refusal']}")
    expect(both - CHUNK < opener["obtained"] <= both,
           f"{what}: the opener obtained {opener['obtained']} bytes beside the mapping, expected "
           f"within one chunk below {both}: the two processes together must fit once")
    expect(opener["close"] == "cudaSuccess" and opener["close_again"] == "cudaSuccess",
           f"{what}: closing both opens: {opener['close']}, {opener['close_again']}")
    expect(opener["close_extra"] != "cudaSuccess", f"{what}: a third close succeeded")
    expect(report["open_own"] != "cudaSuccess", f"{what}: the exporter opened its own handle")
    expect(report["free_status"] == "cudaSuccess", f"{what}: cudaFree: {report['free_status']}")


def main():
    parser = argparse.ArgumentParser()
    for name in ("--probe", "--tessera", "--libvgpu", "--lib-dir", "--cuda-lib-dir"):
        parser.add_argument(name, required=True)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="tessera-ipc-") as work:
        env = dict(os.environ)
        env.update({
            "LD_LIBRARY_PATH": f"{args.lib_dir}:{args.cuda_lib_dir}",
            "SIMGPU_STATE": os.path.join(work, "simgpu.state"),
            "SIMGPU_DEVICES": "name=NVIDIA H200,memory=16Gi,sms=132,cc=9.0",
            "XDG_RUNTIME_DIR": work,
        })
        for name in ("SIMGPU_CONTEXT_OVERHEAD", "TESSERA_MEMORY_LIMIT", "LD_PRELOAD"):
            env.pop(name, None)
        probe = [args.probe, str(EXPORTED), str(CHUNK)]

        check(run(probe, env, "bare"), DEVICE_MEMORY, "bare")
        # Both processes in one 4 GiB share (the opener inherits the exporter's environment).
        share = [args.tessera, "run", "--memory", "4Gi", "--share-dir", os.path.join(work, "share"),
                 "--libvgpu", args.libvgpu, "--"]
        check(run(share + probe, env, "share"), QUOTA, "share")
    print("ok")


if __name__ == "__main__":
    try:
        main()
    except CheckFailed as failure:
        print(f"FAIL: {failure}")
        sys.exit(1)

#!/usr/bin/env python3
"""A CUDA runtime-API program (runtime_probe, one of its nvcc builds) on the simulated GPU, bare
and under `tessera run` shares: the runtime reports the share as the GPU, cudaMalloc obtains the
quota less the context cost and then fails with cudaErrorMemoryAllocation, and two processes of
one share hold the quota together.

  check_runtime.py --probe P --tessera T --libvgpu L --lib-dir D --cuda-lib-dir C
"""

import argparse
import subprocess
import tempfile

from probe_checks import (CONTEXT_OVERHEAD, DEVICE_MEMORY, GIB, MIB, QUOTA, expect, main_of,
                          parse_report, run_probe, simulator_env)

CHUNK = 64 * MIB


def report_of(line, what):
    report = parse_report(line, what)
    print(f"{what}: {line.strip()}", flush=True)
    expect("error" not in report, f"{what}: the runtime failed: {report.get('error')}")
    return report


def run(command, env, what):
    status, report = run_probe(command, env, what)
    expect("error" not in report, f"{what}: the runtime failed: {report.get('error')}")
    return status, report


def check_fill(report, limit, what, total=None):
    # The whole of what the process may have, less one chunk at most: chunks are all the same size.
    usable = limit - CONTEXT_OVERHEAD
    expect(report["refusal"] == "cudaErrorMemoryAllocation",
           f"{what}: cudaMalloc stopped with {report['refusal']}, not cudaErrorMemoryAllocation")
    expect(report["launch"] == "cudaSuccess", f"{what}: a launch after the refusal: {report['launch']}")
    expect(usable - CHUNK < report["obtained"] <= usable,
           f"{what}: obtained {report['obtained']} bytes, expected within one {CHUNK}-byte chunk "
           f"below {usable} ({limit} less the context)")
    total = limit if total is None else total
    expect(report["total"] == total, f"{what}: cudaMemGetInfo total {report['total']} != {total}")


def main():
    parser = argparse.ArgumentParser()
    for name in ("--probe", "--tessera", "--libvgpu", "--lib-dir", "--cuda-lib-dir"):
        parser.add_argument(name, required=True)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="tessera-runtime-") as work:
        env = simulator_env(work, args.lib_dir, args.cuda_lib_dir)
        under_share = [args.tessera, "run", "--memory", "4Gi", "--cores", "30",
                       "--libvgpu", args.libvgpu, "--"]

        # Bare: the whole simulated H200.
        _, bare = run([args.probe, "query"], env, "bare query")
        expect(bare["device_count"] == 1, f"bare: {bare['device_count']} devices")
        expect(bare["total_global_mem"] == DEVICE_MEMORY, f"bare: totalGlobalMem {bare['total_global_mem']}")
        expect(bare["free"] == DEVICE_MEMORY - CONTEXT_OVERHEAD, f"bare: free {bare['free']}")
        status, fill = run([args.probe, "fill", str(CHUNK)], env, "bare fill")
        expect(status == 0, f"bare fill exited {status}")
        check_fill(fill, DEVICE_MEMORY, "bare fill")

        # A 4 GiB / 30 % share: the runtime's GPU is the share.
        _, shared = run(under_share + [args.probe, "query"], env, "share query")
        expect(shared["device_count"] == 1, f"share: {shared['device_count']} devices")
        expect(shared["total_global_mem"] == QUOTA,
               f"share: totalGlobalMem {shared['total_global_mem']}, not the 4 GiB quota")
        expect(shared["total"] == QUOTA, f"share: cudaMemGetInfo total {shared['total']}")
        expect(shared["free"] == QUOTA - CONTEXT_OVERHEAD,
               f"share: cudaMemGetInfo free {shared['free']}, not the quota less the context")
        status, fill = run(under_share + [args.probe, "fill", str(CHUNK)], env, "share fill")
        expect(status == 0, f"share fill exited {status}")
        check_fill(fill, QUOTA, "share fill")

        # Two processes of one share: the second gets what the first left, both contexts counted.
        share_dir = f"{work}/share"
        keep = [args.tessera, "run", "--memory", "4Gi", "--share-dir", share_dir,
                "--libvgpu", args.libvgpu, "--"]
        first = subprocess.Popen(keep + [args.probe, "fill", str(CHUNK), str(2 * GIB), "hold"], env=env,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            held = report_of(first.stdout.readline(), "first process")
            expect(held["obtained"] == 2 * GIB, f"first process obtained {held['obtained']}")
            status, second = run(keep + [args.probe, "fill", str(CHUNK)], env, "second process")
            expect(status == 0, f"second process exited {status}")
            # What is left: the quota less the first's 2 GiB and both contexts.
            check_fill(second, QUOTA - 2 * GIB - CONTEXT_OVERHEAD, "second process",
                       total=QUOTA)
        finally:
            first.stdin.close()
            first.wait(timeout=30)
        expect(first.returncode == 0, f"first process exited {first.returncode}")


if __name__ == "__main__":
    main_of(main)

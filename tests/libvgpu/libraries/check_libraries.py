#!/usr/bin/env python3
"""NVIDIA's libraries (library_probe, built by nvcc against cuBLAS, cuBLASLt, cuFFT, cuRAND, cuDNN
and NCCL) on the simulated
GPU: bare, under a 4 GiB / 30 % `tessera run` share, and under a share too small for them.

  check_libraries.py --probe P --tessera T --libvgpu L --lib-dir D --cuda-lib-dir C --simgpu-ctl S
                     LIBRARY [RANKS]

Bare and in the share each library runs from its handle to its destruction. In the share, while
the probe holds its peak, the simulator's own view of the process (simgpu-ctl status: what the
device holds for it, the context included) is within the quota, and more than a context (the
library's memory is counted there). In a share with room for the context and little else, the
library stops with a status of its own or the runtime's out-of-memory error: no crash, no hang.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "runtime"))
from probe_checks import (CONTEXT_OVERHEAD, QUOTA, expect, main_of, parse_report,  # noqa: E402
                          run_probe, simulator_env)


def run(command, env, what):
    status, report = run_probe(command, env, what)
    expect(status == 0, f"{what}: exit status {status}")
    return report


def failed_steps(report):
    return [s for s in report["steps"] if s["status"] != 0]


def main():
    parser = argparse.ArgumentParser()
    for name in ("--probe", "--tessera", "--libvgpu", "--lib-dir", "--cuda-lib-dir", "--simgpu-ctl"):
        parser.add_argument(name, required=True)
    parser.add_argument("library")
    parser.add_argument("ranks", nargs="?", default="1")
    args = parser.parse_args()
    probe = [args.probe, args.library] + ([args.ranks] if args.library == "nccl" else [])

    with tempfile.TemporaryDirectory(prefix="tessera-libraries-") as work:
        env = simulator_env(work, args.lib_dir, args.cuda_lib_dir, devices=int(args.ranks))
        share = [args.tessera, "run", "--memory", "4Gi", "--cores", "30",
                 "--libvgpu", args.libvgpu, "--"]

        bare = run(probe, env, "bare")
        expect(bare["complete"], f"bare: failed at {failed_steps(bare)}")

        shared = run(share + probe, env, "share")
        expect(shared["complete"], f"share: failed at {failed_steps(shared)}")
        expect(shared["total"] == QUOTA, f"share: cudaMemGetInfo total {shared['total']}")
        expect(shared["peak_used"] <= QUOTA, f"share: used {shared['peak_used']} > quota")

        # The simulator's view at the peak.
        held_env = dict(env, LIBRARY_PROBE_HOLD="1")
        holder = subprocess.Popen(share + probe, env=held_env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        try:
            line = holder.stdout.readline()
            expect(parse_report(line, "holding").get("holding"),
                   f"the probe did not hold: {line!r}")
            status = json.loads(subprocess.run([args.simgpu_ctl, "status"], env=env, check=True,
                                               capture_output=True, text=True).stdout)
            held = [sum(p["memory_bytes"] for p in d["processes"]) for d in status["devices"]]
            print(f"simulator: held per device {held}", flush=True)
            for index, used in enumerate(held):
                expect(used <= QUOTA, f"device {index}: the simulator holds {used} > {QUOTA}")
            expect(max(held) > CONTEXT_OVERHEAD,
                   f"the simulator holds {held}: no more than a context, the library's memory "
                   "was not seen")
        finally:
            holder.stdin.close()
            holder.wait(timeout=60)
        expect(holder.returncode == 0, f"held run exited {holder.returncode}")

        # Room for the context and 10 MiB: the library (or the tenant's buffer) is refused cleanly.
        small = run([args.tessera, "run", "--memory", "510Mi", "--libvgpu", args.libvgpu, "--"] +
                    probe, env, "small share")
        failures = failed_steps(small)
        expect(not small["complete"] and failures, "small share: the library ran to its end")
        oom_names = ("cudaErrorMemoryAllocation", "CURAND_STATUS_ALLOCATION_FAILED",
                     "CUBLAS_STATUS_ALLOC_FAILED", "CUBLAS_STATUS_NOT_INITIALIZED",
                     "CUDNN_STATUS_ALLOC_FAILED", "CUFFT_ALLOC_FAILED", "unhandled cuda error")
        if args.library == "cufft":
            # cuFFT 12 answers a plan whose work area cuMemAlloc_v2 refuses (out of memory) with
            # CUFFT_INTERNAL_ERROR, not CUFFT_ALLOC_FAILED (traced on the simulator; the same
            # status PyTorch users report from cuFFT on a full GPU).
            oom_names += ("CUFFT_INTERNAL_ERROR",)
        expect(any(any(name in f["text"] for name in oom_names) for f in failures),
               f"small share: failures are not out-of-memory statuses: {failures}")


if __name__ == "__main__":
    main_of(main)

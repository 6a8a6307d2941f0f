#!/usr/bin/env python3
"""CUDA IPC through the runtime API (ipc_probe) on the simulated GPU, bare and under one
`tessera run --memory 4Gi --share-dir D` share for both processes: the exporter's allocation is
counted once. The opener's cudaMemGetInfo does not drop when it opens the handle, what it can
still cudaMalloc is the GPU (or the quota) less the exporter's allocation and both contexts, and
the handle opens once per process (refcounted), never in its own exporter.

  check_ipc.py --probe P --tessera T --libvgpu L --lib-dir D --cuda-lib-dir C
"""

import argparse
import os
import tempfile

from probe_checks import (CONTEXT_OVERHEAD, DEVICE_MEMORY, GIB, MIB, QUOTA, expect, main_of,
                          run_probe, simulator_env)

EXPORTED = 2 * GIB
CHUNK = 64 * MIB


def run(command, env, what):
    status, report = run_probe(command, env, what, timeout=60)
    expect(status == 0, f"{what}: exited {status}")
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
        env = simulator_env(work, args.lib_dir, args.cuda_lib_dir)
        probe = [args.probe, str(EXPORTED), str(CHUNK)]

        check(run(probe, env, "bare"), DEVICE_MEMORY, "bare")
        # Both processes in one 4 GiB share (the opener inherits the exporter's environment).
        share = [args.tessera, "run", "--memory", "4Gi", "--share-dir", os.path.join(work, "share"),
                 "--libvgpu", args.libvgpu, "--"]
        check(run(share + probe, env, "share"), QUOTA, "share")


if __name__ == "__main__":
    main_of(main)

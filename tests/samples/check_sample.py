#!/usr/bin/env python3
"""Runs one sample on the simulated GPU and checks its JSON report.

The simulated libcuda.so.1 is reached through LD_LIBRARY_PATH, as the real one would be, with a
fresh state file per run so tests never see each other's processes. The device is a small H200
(16 GiB) so fills are quick; the burn kernel's wave takes 141 us, as on a real H200.

  check_sample.py memory-fill  --binary B --lib-dir D --api alloc [-- more sample args]
  check_sample.py compute-burn --binary B --lib-dir D --launch kernel [-- more sample args]
  check_sample.py fails        --binary B --lib-dir D --stderr TEXT -- sample args

The runtime-API samples (memory-fill-runtime, compute-burn-runtime) get the same checks, given
--sample (the report's name), --oom (the runtime's name for the refusal) and --default-stream
(the build the report must name); --host-memory checks that a fill took no device memory.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

DEVICE_NAME = "NVIDIA H200"
DEVICE_MEMORY = 16 << 30
DEVICE_SMS = 132
CONTEXT_OVERHEAD = 500 << 20  # the simulator's default (SIMGPU_CONTEXT_OVERHEAD)
FINEST_CHUNK = 2 << 20
BURN_WAVE_US = 141
WAVES = 8  # 64 blocks per SM of 256 threads, 8 of them resident per SM
# The cooperative kernel runs one co-resident wave whose blocks each do WAVES blocks of work; the
# simulator times kernels by name and grid, so it is told that wave takes WAVES times as long.
KERNEL_US = f"burn_fma={BURN_WAVE_US},burn_fma_coop={BURN_WAVE_US * WAVES}"


class CheckFailed(Exception):
    pass


def expect(condition, message):
    if not condition:
        raise CheckFailed(message)


def run_sample(binary, lib_dir, sample_args, timeout):
    with tempfile.TemporaryDirectory(prefix="tessera-sample-") as state_dir:
        env = dict(os.environ)
        env.update({
            "LD_LIBRARY_PATH": lib_dir,
            "SIMGPU_STATE": os.path.join(state_dir, "simgpu.state"),
            "SIMGPU_DEVICES": f"name={DEVICE_NAME},memory=16Gi,sms={DEVICE_SMS},cc=9.0",
            "SIMGPU_KERNEL_US": KERNEL_US,
        })
        env.pop("SIMGPU_CONTEXT_OVERHEAD", None)
        command = [binary] + sample_args
        print("running:", " ".join(command), flush=True)
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)


def parse_report(completed, sample, default_stream=None):
    sys.stderr.write(completed.stderr)
    expect(completed.returncode == 0, f"exit status {completed.returncode}")
    lines = completed.stdout.splitlines()
    expect(len(lines) == 1, f"expected one line on stdout, got {len(lines)}: {completed.stdout!r}")
    print("report:", lines[0])
    report = json.loads(lines[0])
    expect(report.get("sample") == sample, f"sample is {report.get('sample')!r}")
    expect(report.get("device") == DEVICE_NAME, f"device is {report.get('device')!r}")
    expect(isinstance(report.get("driver_version"), int) and report["driver_version"] >= 12000,
           f"driver_version is {report.get('driver_version')!r}")
    if default_stream is not None:
        expect(report.get("default_stream") == default_stream,
               f"default_stream is {report.get('default_stream')!r}, expected {default_stream!r}")
    return report


def require_keys(report, keys):
    missing = [key for key in keys if key not in report]
    expect(not missing, f"missing keys: {missing}")


def check_memory_fill(args, extra):
    sample_args = ["--api", args.api] + extra
    report = parse_report(run_sample(args.binary, args.lib_dir, sample_args, 60),
                          args.sample or "memory-fill", args.default_stream)
    require_keys(report, ["api", "chunk_bytes", "max_bytes", "chunks", "bytes_obtained",
                          "stop_reason", "mem_get_info_free", "mem_get_info_total",
                          "mem_get_info_free_after_release"])
    expect(report["api"] == args.api, f"api is {report['api']!r}")
    expect(report["mem_get_info_total"] == DEVICE_MEMORY,
           f"mem_get_info_total {report['mem_get_info_total']} != {DEVICE_MEMORY}")
    obtained = report["bytes_obtained"]
    usable = DEVICE_MEMORY - CONTEXT_OVERHEAD
    if args.expect_bytes is not None:
        expect(obtained == args.expect_bytes, f"bytes_obtained {obtained} != {args.expect_bytes}")
        expect(report["stop_reason"] == "max_reached", f"stop_reason {report['stop_reason']!r}")
        if args.host_memory:
            # Host memory: the device's free memory did not move while it was held.
            expect(report["mem_get_info_free"] == usable,
                   f"mem_get_info_free {report['mem_get_info_free']} != {usable} while holding "
                   f"{obtained} bytes of host memory")
    else:
        # Everything but the context overhead, to within the finest chunk.
        expect(usable - FINEST_CHUNK < obtained <= usable,
               f"bytes_obtained {obtained}, expected {usable} (16Gi less the context's 500Mi)")
        expect(report["stop_reason"] == args.oom,
               f"stop_reason {report['stop_reason']!r}")
        expect(report["mem_get_info_free"] < FINEST_CHUNK,
               f"mem_get_info_free {report['mem_get_info_free']} after filling the device")
    if args.expect_chunks is not None:
        expect(report["chunks"] == args.expect_chunks,
               f"chunks {report['chunks']} != {args.expect_chunks}")
    # Every free went through (the sample checks each call) and the memory is back.
    expect(report["mem_get_info_free_after_release"] == usable,
           f"mem_get_info_free_after_release {report['mem_get_info_free_after_release']} != "
           f"{usable}")


def check_compute_burn(args, extra):
    sample_args = ["--launch", args.launch, "--seconds", "1"] + extra
    report = parse_report(run_sample(args.binary, args.lib_dir, sample_args, 60),
                          args.sample or "compute-burn", args.default_stream)
    require_keys(report, ["launch", "kernels", "seconds", "kernels_per_s", "blocks",
                          "threads_per_block", "latency_us_p50", "latency_us_p99", "latency_samples",
                          "latency_us_total"])
    expect(report["launch"] == args.launch, f"launch is {report['launch']!r}")
    expect(report["threads_per_block"] == 256, f"threads_per_block {report['threads_per_block']}")
    expect(report["waves"] == WAVES, f"waves {report['waves']} != {WAVES}")
    expect(report["seconds"] >= 1.0, f"seconds {report['seconds']} < 1")
    kernel_us = WAVES * BURN_WAVE_US
    device_rate = 1e6 / kernel_us
    rate = report["kernels_per_s"]
    # The device runs at most its rate; how close the sample comes depends on how fast this
    # machine launches (the host's gaps between batches), so the rate is printed, not judged
    # from below. A launch path that skipped its kernels would exceed it.
    print(f"FIGURE kernels_per_s {rate:.1f} (the device's rate: {device_rate:.1f})")
    expect(rate <= device_rate * 1.10,
           f"kernels_per_s {rate:.1f}, more than the device's {device_rate:.1f} +10%")
    expect(math.isclose(report["kernels"] / report["seconds"], rate, rel_tol=1e-6),
           "kernels_per_s is not kernels / seconds")
    # Alone on the device every timed kernel takes its own duration. Timed on the device's
    # timeline (the events bracket the kernel behind its queued batch), not the host's.
    for key in ("latency_us_p50", "latency_us_p99"):
        expect(math.isclose(report[key], kernel_us, rel_tol=0.10),
               f"{key} {report[key]:.1f}, expected {kernel_us} +-10%")
    timed = report["latency_samples"] * kernel_us
    expect(math.isclose(report["latency_us_total"], timed, rel_tol=0.10),
           f"latency_us_total {report['latency_us_total']:.1f}, expected {timed} +-10%")


def check_fails(args, extra):
    completed = run_sample(args.binary, args.lib_dir, extra, 60)
    sys.stderr.write(completed.stderr)
    expect(completed.returncode != 0, "the sample succeeded")
    expect(completed.stdout == "", f"stdout is not empty: {completed.stdout!r}")
    expect(args.stderr in completed.stderr, f"stderr does not mention {args.stderr!r}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, allow_abbrev=False,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("check", choices=["memory-fill", "compute-burn", "fails"])
    parser.add_argument("--binary", required=True)
    parser.add_argument("--lib-dir", required=True, help="folder holding the simulated libcuda.so.1")
    parser.add_argument("--api", default="alloc")
    parser.add_argument("--launch", default="kernel")
    parser.add_argument("--expect-bytes", type=int, help="memory-fill: stop at exactly this much")
    parser.add_argument("--expect-chunks", type=int)
    parser.add_argument("--stderr", default="", help="fails: text stderr must contain")
    parser.add_argument("--sample", help="the report's sample name (default: the check's)")
    parser.add_argument("--oom", default="CUDA_ERROR_OUT_OF_MEMORY",
                        help="memory-fill: the stop reason of a fill the device refused")
    parser.add_argument("--default-stream", choices=["legacy", "per-thread"],
                        help="the default stream the report must name (runtime samples)")
    parser.add_argument("--host-memory", action="store_true",
                        help="memory-fill with --expect-bytes: the device's free memory must not "
                             "drop while the memory is held")
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    args, extra = parser.parse_args(argv[:split]), argv[split + 1:]
    if not os.path.exists(os.path.join(args.lib_dir, "libcuda.so.1")):
        print(f"no simulated driver at {args.lib_dir}/libcuda.so.1", file=sys.stderr)
        return 1
    checks = {"memory-fill": check_memory_fill, "compute-burn": check_compute_burn,
              "fails": check_fails}
    try:
        checks[args.check](args, extra)
    except CheckFailed as failure:
        print(f"FAILED: {failure}", file=sys.stderr)
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""`tessera run` end to end on the simulated GPU: the command's CUDA processes together get at most
the quota, the share directory is removed afterwards, exit codes pass through, and bad input gets a
clear error before anything runs.

  check_run.py --tessera T --memory-fill M --lib-dir D
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

GIB = 1 << 30
MIB = 1 << 20
CONTEXT_OVERHEAD = 500 * MIB


def fail(message):
    print(f"FAIL: {message}")
    sys.exit(1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tessera", required=True)
    parser.add_argument("--memory-fill", required=True)
    parser.add_argument("--lib-dir", required=True)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="tessera-run-test-") as work:
        env = dict(os.environ)
        env.update({
            "LD_LIBRARY_PATH": args.lib_dir,
            "SIMGPU_STATE": os.path.join(work, "simgpu.state"),
            "SIMGPU_DEVICES": "name=NVIDIA H200,memory=16Gi,sms=132,cc=9.0;"
                              "name=NVIDIA H200,memory=16Gi,sms=132,cc=9.0",
        })
        env.pop("TESSERA_MEMORY_LIMIT", None)
        # This user's local share root (tessera/local_shares.h), private to the test.
        xdg = os.path.join(work, "xdg")
        os.mkdir(xdg, 0o700)
        env["XDG_RUNTIME_DIR"] = xdg
        share_root = os.path.join(xdg, "tessera", "shares")

        def temporary_shares():
            return os.listdir(share_root) if os.path.isdir(share_root) else []

        def run(*command, **kwargs):
            return subprocess.run([args.tessera, "run", *command], env=env, capture_output=True,
                                  text=True, timeout=60, **kwargs)

        # Every allocation API of one process stops at the quota (context overhead included).
        for api in ["alloc", "pitch", "async", "pool", "vmm", "array"]:
            done = run("--memory", "4Gi", "--", args.memory_fill, "--api", api, "--chunk", "1Gi")
            if done.returncode != 0:
                fail(f"{api}: exit {done.returncode}: {done.stderr}")
            report = json.loads(done.stdout.splitlines()[0])
            if report["bytes_obtained"] != 4 * GIB - CONTEXT_OVERHEAD:
                fail(f"{api}: obtained {report['bytes_obtained']}, expected 4Gi - 500Mi")
            if report["stop_reason"] != "CUDA_ERROR_OUT_OF_MEMORY":
                fail(f"{api}: stopped with {report['stop_reason']}")
            if report["mem_get_info_total"] != 4 * GIB:
                fail(f"{api}: cuMemGetInfo total {report['mem_get_info_total']}, expected 4Gi")

        # Several processes of one command share one quota: two fills at once obtain 4Gi together.
        # Both begin filling together, after both contexts exist: 5 s, over ten times what the two
        # start-ups take on a loaded machine (a context made late would find the memory taken).
        start = time.time() + 5.0
        fill = f"{args.memory_fill} --chunk 256Mi --hold-seconds 1 --start-at {start:.3f}"
        script = f"{fill} & {fill}; wait"
        done = run("--memory", "4Gi", "--", "sh", "-c", script)
        if done.returncode != 0:
            fail(f"two processes: exit {done.returncode}: {done.stderr}")
        reports = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        together = sum(r["bytes_obtained"] for r in reports)
        if len(reports) != 2 or together != 4 * GIB - 2 * CONTEXT_OVERHEAD:
            fail(f"two processes obtained {together} together, expected 4Gi - 2 x 500Mi")

        # Per-GPU limits by index; the other GPU is unlimited.
        done = run("--memory", "1=2Gi", "--", args.memory_fill, "--device", "1", "--chunk", "1Gi")
        report = json.loads(done.stdout.splitlines()[0])
        if report["bytes_obtained"] != 2 * GIB - CONTEXT_OVERHEAD:
            fail(f"--memory 1=2Gi: obtained {report['bytes_obtained']} on GPU 1")

        # The temporary share directory is gone afterwards; a named one is kept.
        leftovers = temporary_shares()
        share = os.path.join(work, "share")
        done = run("--memory", "1Gi", "--share-dir", share, "--", "true")
        if done.returncode != 0 or not os.path.exists(os.path.join(share, "limits")):
            fail(f"--share-dir: exit {done.returncode}, limits file missing: {done.stderr}")

        # Exit codes pass through; tessera's own failures are 125, a missing command 127.
        if run("--", "sh", "-c", "exit 7").returncode != 7:
            fail("exit code 7 did not pass through")
        done = run("--memory", "lots", "--", "true")
        if done.returncode != 125 or "--memory 'lots'" not in done.stderr:
            fail(f"bad --memory: exit {done.returncode}, stderr {done.stderr!r}")
        done = run("--memory", "5=1Gi", "--", "true")
        if done.returncode != 125 or "GPU 5" not in done.stderr:
            fail(f"unknown GPU: exit {done.returncode}, stderr {done.stderr!r}")
        # Compute settings (docs/compute.md) are checked before anything runs too.
        for bad, expected in [(["--cores", "101"], "--cores '101'"),
                              (["--cores", "30", "--cores-limit", "20"],
                               "is below its --cores request 30"),
                              (["--cores", "30", "--cores-burst", "20"],
                               "is below its --cores request 30"),
                              (["--memory", "4Gi", "--memory-limit", "2Gi"],
                               "--memory-limit 2Gi of GPU 0"),
                              (["--priority", "urgent"], "--priority 'urgent'")]:
            done = run(*bad, "--", "true")
            if done.returncode != 125 or expected not in done.stderr:
                fail(f"{bad}: exit {done.returncode}, stderr {done.stderr!r}")
        if run("--", "/no/such/program").returncode != 127:
            fail("a missing command did not exit 127")
        after = temporary_shares()
        if sorted(after) != sorted(leftovers):
            fail(f"temporary share directories left behind: {set(after) - set(leftovers)}")
    print("PASS")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""`tessera run` on a simulated R615 driver (SIMGPU_DRIVER_VERSION=615.40.01): run as root with a
cgroup v2 hierarchy mounted (this machine mounts cgroup v1; the test mounts cgroup2 itself, which
tessera finds in /proc/self/mountinfo), the command runs in a cgroup of its own whose driver
partition is the share: a child started with `env -i` (no shim, no share folder) is refused by
the driver at the hard limit, and cuMemGetInfo inside shows the limit. The same run on the default
simulated driver shows why the wall matters: that child escapes the share and takes the GPU.

On a simulated R615 GPU in MIG mode the driver refuses partitions on MIG handles: the run goes
ahead with the instance's memory held by the shim alone, and says so.

  check_run_driver_wall.py --tessera T --memory-fill M --lib-dir D --simgpu-ctl C

Exits 77 (skipped) when not root or when cgroup2 cannot be mounted here.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

GIB = 1 << 30
MIB = 1 << 20
CONTEXT = 500 * MIB
SKIP = 77


def fail(message):
    print(f"FAIL: {message}")
    sys.exit(1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tessera", required=True)
    parser.add_argument("--memory-fill", required=True)
    parser.add_argument("--lib-dir", required=True)
    parser.add_argument("--simgpu-ctl", required=True)
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("SKIP: only root may set the driver's memory limits")
        return SKIP

    with tempfile.TemporaryDirectory(prefix="tessera-wall-test-") as work:
        mount_point = os.path.join(work, "cgroup2")
        os.mkdir(mount_point)
        mounted = subprocess.run(["mount", "-t", "cgroup2", "none", mount_point],
                                 capture_output=True, text=True)
        if mounted.returncode != 0:
            print(f"SKIP: cannot mount cgroup2 here: {mounted.stderr.strip()}")
            return SKIP
        try:
            return run_checks(args, work, mount_point)
        finally:
            subprocess.run(["umount", mount_point], check=False)

    return 0


def run_checks(args, work, mount_point):
    def environment(driver_version):
        env = dict(os.environ)
        env.update({
            "LD_LIBRARY_PATH": args.lib_dir,
            "SIMGPU_STATE": os.path.join(work, f"simgpu-{driver_version or 'default'}.state"),
            "SIMGPU_DEVICES": "name=NVIDIA H200,memory=16Gi,sms=132,cc=9.0",
        })
        env.pop("SIMGPU_DRIVER_VERSION", None)
        if driver_version:
            env["SIMGPU_DRIVER_VERSION"] = driver_version
        xdg = os.path.join(work, f"xdg-{driver_version or 'default'}")
        os.makedirs(xdg, 0o700, exist_ok=True)
        env["XDG_RUNTIME_DIR"] = xdg
        return env

    def escaped_child(driver_version):
        """tessera run --memory 2Gi of a shell that starts memory-fill under `env -i`: the child
        keeps only what the simulated GPU needs (its libraries and state), not LD_PRELOAD nor
        TESSERA_SHARE_DIR: no shim."""
        env = environment(driver_version)
        keep = " ".join(f"{name}={env[name]}" for name in
                        ["LD_LIBRARY_PATH", "SIMGPU_STATE", "SIMGPU_DEVICES"] +
                        (["SIMGPU_DRIVER_VERSION"] if driver_version else []))
        child = f"env -i {keep} {args.memory_fill} --api alloc --chunk 256Mi"
        done = subprocess.run([args.tessera, "run", "--verbose", "--memory", "2Gi", "--", "sh",
                               "-c", child], env=env, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            fail(f"driver {driver_version or 'default'}: exit {done.returncode}: {done.stderr}")
        report = json.loads(done.stdout.splitlines()[0])
        return report, done.stderr

    # R615: the driver refuses the unshimmed child at the share's hard limit, contexts included.
    report, stderr = escaped_child("615.40.01")
    print("R615:", json.dumps(report), stderr, sep="\n")
    # The cgroup is the one tessera found for itself in mountinfo: through the mount this test
    # made, or another mount of the same hierarchy (/sys/fs/cgroup/unified on a hybrid machine).
    if "memory held by the driver's partition on " not in stderr:
        fail(f"R615: tessera run did not put the command in a cgroup of its own:\n{stderr}")
    if report["mem_get_info_total"] != 2 * GIB:
        fail(f"R615: cuMemGetInfo total inside the partition is {report['mem_get_info_total']}, "
             "expected 2Gi")
    if report["stop_reason"] != "CUDA_ERROR_OUT_OF_MEMORY":
        fail(f"R615: the child stopped with {report['stop_reason']}")
    # The driver counts the child's context (the simulated one costs 500 MiB) against the wall too.
    if report["bytes_obtained"] > 2 * GIB - CONTEXT:
        fail(f"R615: the unshimmed child obtained {report['bytes_obtained']} bytes: past 2Gi with "
             "its context")
    if report["bytes_obtained"] < GIB:
        fail(f"R615: the child obtained only {report['bytes_obtained']} bytes of its 2Gi")
    leftovers = [name for name in os.listdir(mount_point) if name.startswith("tessera-run-")]
    walled = re.search(r"memory held by the driver's partition on (\S+) ", stderr).group(1)
    if os.path.exists(walled):
        leftovers.append(walled)
    if leftovers:
        fail(f"R615: tessera run left its cgroups behind: {leftovers}")

    # The default simulated driver (580): no partitions. The same child escapes the share and
    # fills the GPU: without the driver's wall, only the agent's out-of-band check (a second
    # later, under the kill policy) would stop it.
    report, stderr = escaped_child(None)
    print("default driver:", json.dumps(report), stderr, sep="\n")
    if "memory held by the shim only" not in stderr:
        fail(f"default driver: expected the shim-only layer to be said: {stderr}")
    if report["bytes_obtained"] <= 8 * GIB:
        fail(f"default driver: the unshimmed child obtained only {report['bytes_obtained']} bytes;"
             " it was expected to escape the 2Gi share")
    print(f"the unshimmed child: held to the partition on R615, "
          f"{report['bytes_obtained'] // MIB} MiB without it")

    # R615 on a GPU in MIG mode: no partition is asked for (the driver refuses MIG handles); the
    # shim holds the instance's share, and the run says which layer holds what.
    env = environment("615.40.01")
    env["SIMGPU_STATE"] = os.path.join(work, "simgpu-mig.state")
    env["SIMGPU_DEVICES"] = "name=NVIDIA H100 80GB HBM3,memory=81559Mi,sms=132,cc=9.0,mig=on"
    made = subprocess.run([args.simgpu_ctl, "mig", "create", "0", "3g.40gb"], env=env,
                          capture_output=True, text=True)
    if made.returncode != 0:
        fail(f"MIG: simgpu-ctl mig create: {made.stderr}")
    instance = re.search(r'"(MIG-[0-9a-f-]+)"', made.stdout).group(1)
    env["CUDA_VISIBLE_DEVICES"] = instance
    done = subprocess.run([args.tessera, "run", "--verbose", "--memory", "2Gi", "--",
                           args.memory_fill, "--api", "alloc", "--chunk", "256Mi"],
                          env=env, capture_output=True, text=True, timeout=60)
    print("R615, MIG:", done.stdout, done.stderr, sep="\n")
    if done.returncode != 0:
        fail(f"MIG: tessera run failed where the shim alone can hold the share: {done.stderr}")
    if "do not support MIG devices" not in done.stderr or instance not in done.stderr:
        fail(f"MIG: the run did not say the instance is held by the shim only: {done.stderr}")
    report = json.loads(done.stdout.splitlines()[0])
    if report["bytes_obtained"] > 2 * GIB or report["stop_reason"] != "CUDA_ERROR_OUT_OF_MEMORY":
        fail(f"MIG: the shim did not hold the share at 2Gi: {report}")
    if [name for name in os.listdir(mount_point) if name.startswith("tessera-run-")]:
        fail("MIG: tessera run made a cgroup it did not need")
    return 0


if __name__ == "__main__":
    sys.exit(main())

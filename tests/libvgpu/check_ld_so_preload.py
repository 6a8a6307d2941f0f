#!/usr/bin/env python3
"""libvgpu loaded through /etc/ld.so.preload instead of LD_PRELOAD (how a node can confine every
process without touching pod specs). The file is written inside a private mount namespace, on an
overlay of /etc, so nothing outside this test ever sees it. Needs root (CI runs as root); exits 77
(skipped) where mount namespaces or overlayfs are not available.

  check_ld_so_preload.py --probe vgpu_probe --shim libvgpu.so --lib-dir <simulator lib dir>
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

SKIP = 77
MIB = 1 << 20


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--probe", required=True)
    parser.add_argument("--shim", required=True)
    parser.add_argument("--lib-dir", required=True)
    args = parser.parse_args()
    if os.geteuid() != 0 or not shutil.which("unshare"):
        print("SKIPPED: needs root and unshare(1) for a private mount namespace")
        return SKIP

    with tempfile.TemporaryDirectory(prefix="tessera-preload-") as work:
        upper, scratch = os.path.join(work, "upper"), os.path.join(work, "work")
        os.makedirs(upper)
        os.makedirs(scratch)
        env = dict(os.environ)
        env.pop("LD_PRELOAD", None)
        env.update({
            "LD_LIBRARY_PATH": args.lib_dir,
            "SIMGPU_STATE": os.path.join(work, "simgpu.state"),
            "SIMGPU_DEVICES": "name=NVIDIA H200,memory=16Gi,sms=132,cc=9.0",
            "TESSERA_MEMORY_LIMIT": "2Gi",
        })
        script = (f"mount -t overlay overlay -o lowerdir=/etc,upperdir={upper},workdir={scratch} "
                  f"/etc || exit {SKIP}; echo {args.shim} > /etc/ld.so.preload && "
                  f"exec {args.probe} init fill:mem:64Mi count:cuMemAlloc_v2")
        done = subprocess.run(["unshare", "--mount", "sh", "-c", script], env=env,
                              capture_output=True, text=True, timeout=60)
        if done.returncode == SKIP or "unshare failed" in done.stderr:
            print(f"SKIPPED: no private mount namespace or overlayfs here: {done.stderr.strip()}")
            return SKIP
        print(done.stdout, done.stderr, sep="")
        if done.returncode != 0:
            print(f"FAIL: probe exited {done.returncode}")
            return 1
        fill = next(line.split() for line in done.stdout.splitlines() if line.startswith("fill"))
        obtained = int(fill[3])
        # 2 GiB less the 500 MiB the shim counts for the primary context, in 64 MiB chunks.
        expected = (2048 - 500) // 64 * 64 * MIB
        if obtained != expected or fill[4] != "CUDA_ERROR_OUT_OF_MEMORY":
            print(f"FAIL: obtained {obtained} ({fill[4]}), expected {expected} and OUT_OF_MEMORY")
            return 1
        counted = next(line.split() for line in done.stdout.splitlines() if line.startswith("count"))
        if int(counted[-1]) <= 0:
            print("FAIL: the shim counted no cuMemAlloc_v2 call: it was not loaded")
            return 1
    print("PASS: libvgpu enforced the limit when loaded through /etc/ld.so.preload")
    return 0


if __name__ == "__main__":
    sys.exit(main())

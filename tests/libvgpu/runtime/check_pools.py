#!/usr/bin/env python3
"""Stream-ordered pools through the CUDA runtime (pool_probe) on the simulated GPU, bare and under
`tessera run --memory 4Gi` shares: cudaMallocAsync fills the share from the default pool,
cudaFreeAsync gives it back to the pool, and once the pool releases it to the device (at a stream,
event or device synchronisation with the release threshold at 0, or at cudaMemPoolTrimTo) the
share's charge follows: cudaMemGetInfo shows it free and a pool made with cudaMemPoolCreate fills
the share again. The same in two processes of one share: the second fills a pool of its own beside
the first, which released its default pool.

  check_pools.py --probe P --tessera T --libvgpu L --lib-dir D --cuda-lib-dir C
"""

import argparse
import os
import subprocess
import tempfile

from probe_checks import (CONTEXT_OVERHEAD, DEVICE_MEMORY, MIB, QUOTA, expect, main_of,
                          parse_report, run_probe, simulator_env)

CHUNK = 256 * MIB


def run(command, env, what):
    status, report = run_probe(command, env, what, timeout=90)
    expect(status == 0, f"{what}: exited {status}")
    expect("error" not in report, f"{what}: the runtime failed: {report.get('error')}")
    return report


def filled(obtained, room, what):
    """A fill in equal chunks: within one chunk below the room."""
    expect(room - CHUNK < obtained <= room,
           f"{what}: obtained {obtained} bytes, expected within one {CHUNK}-byte chunk below {room}")


def check_default_pool(report, limit, what):
    usable = limit - CONTEXT_OVERHEAD
    release = report["release"]
    expect(report["total"] == limit, f"{what}: cudaMemGetInfo total {report['total']} != {limit}")
    expect(report["free_before"] == usable, f"{what}: free {report['free_before']} before the fill")
    expect(report["default_refusal"] == "cudaErrorMemoryAllocation",
           f"{what}: cudaMallocAsync stopped with {report['default_refusal']}")
    obtained = report["default_obtained"]
    filled(obtained, usable, f"{what}: cudaMallocAsync")
    reserved_after_sync = obtained if release == "trim" else 0
    expect(report["synchronize"] == "cudaSuccess", f"{what}: synchronize: {report['synchronize']}")
    expect(report["reserved_synchronized"] == reserved_after_sync,
           f"{what}: the pool reserves {report['reserved_synchronized']} after the {release} "
           f"synchronisation, not {reserved_after_sync} (release threshold "
           f"{'UINT64_MAX' if release == 'trim' else 0})")
    expect(report["trim"] == "cudaSuccess", f"{what}: cudaMemPoolTrimTo: {report['trim']}")
    expect(report["reserved_released"] == 0, f"{what}: the pool reserves {report['reserved_released']}")
    if "free_full" not in report:
        return  # a holding process: the second one checks what the share was left
    held = usable - obtained
    expect(report["free_full"] == held, f"{what}: free {report['free_full']} when full, not {held}")
    expect(report["free_freed"] == held,
           f"{what}: free {report['free_freed']} after cudaFreeAsync: the pool still holds the "
           f"memory until it is released, so {held}")
    # With a release threshold of UINT64_MAX the synchronisation keeps the memory in the pool and
    # the share keeps it charged; the trim gives it back.
    after_sync = held if release == "trim" else usable
    expect(report["free_synchronized"] == after_sync,
           f"{what}: cudaMemGetInfo says {report['free_synchronized']} free after the {release} "
           f"synchronisation, not {after_sync}")
    expect(report["free_released"] == usable,
           f"{what}: free {report['free_released']} once released, not {usable}")


def check_created_pool(report, room, limit, what):
    expect(report["created_free_before"] == room,
           f"{what}: free {report['created_free_before']} before the created pool's fill, not {room}")
    expect(report["created_refusal"] == "cudaErrorMemoryAllocation",
           f"{what}: cudaMallocFromPoolAsync stopped with {report['created_refusal']}")
    filled(report["created_obtained"], room, f"{what}: cudaMallocFromPoolAsync on a created pool")
    expect(report["created_synchronize"] == "cudaSuccess" and report["created_destroy"] == "cudaSuccess",
           f"{what}: {report['created_synchronize']}, {report['created_destroy']}")
    expect(report["free_end"] == room, f"{what}: free {report['free_end']} at the end, not {room}")
    expect(report["total"] == limit, f"{what}: cudaMemGetInfo total {report['total']} != {limit}")


def main():
    parser = argparse.ArgumentParser()
    for name in ("--probe", "--tessera", "--libvgpu", "--lib-dir", "--cuda-lib-dir"):
        parser.add_argument(name, required=True)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="tessera-pools-") as work:
        env = simulator_env(work, args.lib_dir, args.cuda_lib_dir)
        chunk = str(CHUNK)

        # Bare: the simulated driver releases the pool at the synchronisation.
        bare = run([args.probe, "stream", chunk], env, "bare")
        check_default_pool(bare, DEVICE_MEMORY, "bare")
        check_created_pool(bare, DEVICE_MEMORY - CONTEXT_OVERHEAD, DEVICE_MEMORY, "bare")

        # A 4 GiB share, each way the default pool can give its memory back.
        share = [args.tessera, "run", "--memory", "4Gi", "--libvgpu", args.libvgpu, "--"]
        for release in ("stream", "event", "device", "trim"):
            what = f"share, {release}"
            report = run(share + [args.probe, release, chunk], env, what)
            check_default_pool(report, QUOTA, what)
            check_created_pool(report, QUOTA - CONTEXT_OVERHEAD, QUOTA, what)

        # Two processes of one share: the first released its default pool and holds on (its
        # context stays charged) without asking cudaMemGetInfo, so only its synchronisation or
        # trim settled its charge; the second's own pool gets the rest of the share.
        for release in ("stream", "event", "device", "trim"):
            share_dir = os.path.join(work, f"share-{release}")
            keep = [args.tessera, "run", "--memory", "4Gi", "--share-dir", share_dir,
                    "--libvgpu", args.libvgpu, "--"]
            first = subprocess.Popen(keep + [args.probe, release, chunk, "hold"], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            what = f"two processes, {release}"
            try:
                line = first.stdout.readline()
                print(f"{what}, first: {line.strip()}", flush=True)
                held = parse_report(line, f"{what}, first")
                expect("error" not in held, f"{what}, first: {held.get('error')}")
                check_default_pool(held, QUOTA, f"{what}, first")
                second = run(keep + [args.probe, "created", chunk], env, f"{what}, second")
                check_created_pool(second, QUOTA - 2 * CONTEXT_OVERHEAD, QUOTA, f"{what}, second")
            finally:
                first.stdin.close()
                first.wait(timeout=30)
            expect(first.returncode == 0, f"{what}: the first process exited {first.returncode}")


if __name__ == "__main__":
    main_of(main)

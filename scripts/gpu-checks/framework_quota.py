#!/usr/bin/env python3
"""PyTorch and CuPy under a Tessera memory quota (run by memory-quota.sh on a GPU machine).

For each framework setting it runs a child under `tessera run --memory LIMIT` that reports, as one
JSON line: what the framework says the GPU's memory is, whether staying under the quota works,
and what going past it raises. The parent adds `ok` from those facts; nothing is assumed.
"""

import argparse
import importlib.util
import json
import subprocess
import sys

GIB = 1 << 30

TORCH_PROBE = r"""
import json, torch
free, total = torch.cuda.mem_get_info()
report = {"framework": "torch", "mem_get_info_total": total, "mem_get_info_free": free}
held = []
try:
    held.append(torch.empty(LIMIT // 2, dtype=torch.uint8, device="cuda"))
    torch.cuda.synchronize()
    report["under_quota"] = "ok"
except Exception as error:
    report["under_quota"] = type(error).__name__ + ": " + str(error)[:200]
try:
    while True:
        held.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
        torch.cuda.synchronize()
except torch.cuda.OutOfMemoryError as error:
    report["over_quota"] = "OutOfMemoryError"
except Exception as error:
    report["over_quota"] = type(error).__name__ + ": " + str(error)[:200]
report["bytes_held_at_refusal"] = sum(t.numel() for t in held)
report["reserved_by_allocator"] = torch.cuda.memory_reserved()
print(json.dumps(report))
"""

CUPY_PROBE = r"""
import json, cupy
free, total = cupy.cuda.runtime.memGetInfo()
report = {"framework": "cupy", "mem_get_info_total": total, "mem_get_info_free": free}
held = []
try:
    held.append(cupy.empty(LIMIT // 2, dtype=cupy.uint8))
    report["under_quota"] = "ok"
except Exception as error:
    report["under_quota"] = type(error).__name__ + ": " + str(error)[:200]
try:
    while True:
        held.append(cupy.empty(256 << 20, dtype=cupy.uint8))
except cupy.cuda.memory.OutOfMemoryError:
    report["over_quota"] = "OutOfMemoryError"
except Exception as error:
    report["over_quota"] = type(error).__name__ + ": " + str(error)[:200]
report["bytes_held_at_refusal"] = sum(a.nbytes for a in held)
print(json.dumps(report))
"""

SETTINGS = [
    ("torch", "default", {}, TORCH_PROBE),
    ("torch", "expandable_segments", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
     TORCH_PROBE),
    ("torch", "cudaMallocAsync", {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"},
     TORCH_PROBE),
    ("cupy", "default pool", {}, CUPY_PROBE),
]


def parse_limit(text):
    units = {"Gi": GIB, "Mi": 1 << 20}
    for suffix, scale in units.items():
        if text.endswith(suffix):
            return int(text[: -len(suffix)]) * scale
    return int(text)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tessera", required=True)
    parser.add_argument("--limit", default="8Gi")
    args = parser.parse_args()
    limit = parse_limit(args.limit)
    import os
    failures = 0
    for framework, setting, env_extra, probe in SETTINGS:
        if importlib.util.find_spec(framework) is None:
            # Not a pass: the line says the check did not run, and the run fails below.
            print(json.dumps({"framework": framework, "setting": setting, "ok": False,
                              "error": f"{framework} is not installed"}), flush=True)
            failures += 1
            continue
        env = dict(os.environ, **env_extra)
        code = probe.replace("LIMIT", str(limit))
        done = subprocess.run([args.tessera, "run", "--memory", args.limit, "--", sys.executable,
                               "-c", code], env=env, capture_output=True, text=True, timeout=600)
        line = next((l for l in done.stdout.splitlines() if l.startswith("{")), None)
        report = json.loads(line) if line else {"framework": framework, "error": done.stderr[-500:]}
        report["setting"] = setting
        report["exit"] = done.returncode
        report["ok"] = bool(line) and report.get("mem_get_info_total") == limit and \
            report.get("under_quota") == "ok" and report.get("over_quota") == "OutOfMemoryError" \
            and report.get("bytes_held_at_refusal", limit + 1) <= limit
        failures += not report["ok"]
        print(json.dumps(report), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

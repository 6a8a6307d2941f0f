#!/usr/bin/env python3
"""Checks memory-fill reports taken under a Tessera memory quota (used by memory-quota.sh).

Each JSON line must show the quota as the GPU's memory (cuMemGetInfo total == limit), a fill that
stopped with CUDA_ERROR_OUT_OF_MEMORY, and bytes obtained at most the limit less the context the
shim charges, and no more than --slack below it (the last chunks halve down to 2 MiB). Prints one
line per report and exits 1 naming every failed expectation, 2 when there is nothing to check.
"""

import argparse
import json
import sys

UNITS = {"Gi": 1 << 30, "Mi": 1 << 20, "Ki": 1 << 10}


def quantity(text):
    for suffix, scale in UNITS.items():
        if text.endswith(suffix):
            return int(text[: -len(suffix)]) * scale
    return int(text)


def failures_of(report, limit, context, slack):
    failed = []
    ceiling = limit - context
    if report.get("mem_get_info_total") != limit:
        failed.append(f"cuMemGetInfo total {report.get('mem_get_info_total')} != limit {limit}")
    if report.get("stop_reason") != "CUDA_ERROR_OUT_OF_MEMORY":
        failed.append(f"stopped with {report.get('stop_reason')}, not CUDA_ERROR_OUT_OF_MEMORY")
    obtained = report.get("bytes_obtained")
    if not isinstance(obtained, int):
        failed.append("no bytes_obtained")
    elif obtained > ceiling:
        failed.append(f"obtained {obtained} bytes, over the quota's {ceiling}")
    elif obtained < ceiling - slack:
        failed.append(f"obtained {obtained} bytes, more than {slack} below the quota's {ceiling}")
    return failed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", help="a file of memory-fill JSON lines")
    parser.add_argument("--limit", required=True, help="the quota, e.g. 8Gi")
    parser.add_argument("--context", default="500Mi", help="what the shim charges per context")
    parser.add_argument("--slack", default="64Mi", help="how far below the quota a fill may stop")
    parser.add_argument("--expect", type=int, required=True, help="how many reports must be there")
    args = parser.parse_args()
    limit, context, slack = quantity(args.limit), quantity(args.context), quantity(args.slack)

    with open(args.reports, encoding="utf-8") as lines:
        reports = [json.loads(line) for line in lines if line.startswith("{")]
    if not reports:
        print(f"check-fill: no report in {args.reports}", file=sys.stderr)
        return 2
    failed_any = len(reports) != args.expect
    if failed_any:
        print(f"check-fill: {len(reports)} reports in {args.reports}, expected {args.expect}")
    for report in reports:
        name = f"{report.get('api')}" + (f" ({report['resolve']})" if "resolve" in report else "")
        failed = failures_of(report, limit, context, slack)
        failed_any |= bool(failed)
        print(f"check-fill: {name}: " + ("ok" if not failed else "FAILED: " + "; ".join(failed)))
    return 1 if failed_any else 0


if __name__ == "__main__":
    sys.exit(main())

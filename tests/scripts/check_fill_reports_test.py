#!/usr/bin/env python3
"""The memory-fill verdicts of scripts/gpu-checks/check_fill_reports.py, one expectation each."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

CHECKS = os.environ.get("TESSERA_GPU_CHECKS",
                        os.path.join(os.path.dirname(__file__), "../../scripts/gpu-checks"))
sys.path.insert(0, CHECKS)
import check_fill_reports  # noqa: E402

GIB, MIB = 1 << 30, 1 << 20
LIMIT, CONTEXT, SLACK = 8 * GIB, 500 * MIB, 64 * MIB


def report(**changes):
    good = {"api": "alloc", "resolve": "proc-address", "mem_get_info_total": LIMIT,
            "stop_reason": "CUDA_ERROR_OUT_OF_MEMORY", "bytes_obtained": LIMIT - CONTEXT}
    good.update(changes)
    return good


class FailuresOf(unittest.TestCase):
    def failures(self, **changes):
        return check_fill_reports.failures_of(report(**changes), LIMIT, CONTEXT, SLACK)

    def test_a_fill_that_stops_exactly_at_the_quota_passes(self):
        self.assertEqual(self.failures(), [])
        self.assertEqual(self.failures(bytes_obtained=LIMIT - CONTEXT - SLACK), [])

    def test_one_byte_over_the_quota_fails(self):
        self.assertEqual(self.failures(bytes_obtained=LIMIT - CONTEXT + 1),
                         [f"obtained {LIMIT - CONTEXT + 1} bytes, over the quota's {LIMIT - CONTEXT}"])

    def test_stopping_far_below_the_quota_fails(self):
        [failure] = self.failures(bytes_obtained=GIB)
        self.assertIn("below the quota's", failure)

    def test_the_whole_gpu_shown_as_total_fails(self):
        [failure] = self.failures(mem_get_info_total=150 * GIB)
        self.assertEqual(failure, f"cuMemGetInfo total {150 * GIB} != limit {LIMIT}")

    def test_another_stop_reason_fails(self):
        [failure] = self.failures(stop_reason="max_reached")
        self.assertIn("max_reached", failure)

    def test_a_report_without_bytes_fails(self):
        self.assertIn("no bytes_obtained", self.failures(bytes_obtained=None))


class Main(unittest.TestCase):
    def run_checker(self, reports, expect):
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as file:
            file.write("".join(json.dumps(r) + "\n" for r in reports))
        try:
            return subprocess.run([sys.executable, os.path.join(CHECKS, "check_fill_reports.py"),
                                   file.name, "--limit", "8Gi", "--expect", str(expect)],
                                  capture_output=True, text=True, check=False)
        finally:
            os.unlink(file.name)

    def test_all_good_exits_zero(self):
        done = self.run_checker([report(), report(api="vmm")], expect=2)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertIn("check-fill: vmm (proc-address): ok", done.stdout)

    def test_one_bad_report_exits_one_and_names_it(self):
        done = self.run_checker([report(), report(api="pool", bytes_obtained=LIMIT)], expect=2)
        self.assertEqual(done.returncode, 1)
        self.assertIn("check-fill: pool (proc-address): FAILED: obtained", done.stdout)

    def test_a_missing_report_exits_one(self):
        done = self.run_checker([report()], expect=2)
        self.assertEqual(done.returncode, 1)
        self.assertIn("1 reports", done.stdout)

    def test_no_report_at_all_exits_two(self):
        done = self.run_checker([], expect=8)
        self.assertEqual(done.returncode, 2)


if __name__ == "__main__":
    unittest.main()

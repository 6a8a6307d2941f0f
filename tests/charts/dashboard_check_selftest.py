#!/usr/bin/env python3
"""The dashboard check must fail on a dashboard that is wrong, so its pass on the real one means
something. Usage: dashboard_check_selftest.py CHECKER METRIC_TABLE_TOOL DASHBOARD.json

Each case alters one thing in a copy of the real dashboard (the altered text must be there, so a
case cannot pass by changing nothing) and expects the checker to exit non-zero and name what is
wrong; the unaltered copy must pass.
"""
import json
import os
import subprocess
import sys
import tempfile


def first_panel(dashboard, title):
    return next(p for p in dashboard["panels"] if p.get("title") == title)


def drop_title(text):
    dashboard = json.loads(text)
    del first_panel(dashboard, "GPU shares")["title"]
    return json.dumps(dashboard)


def drop_targets(text):
    dashboard = json.loads(text)
    first_panel(dashboard, "GPU utilisation")["targets"] = []
    return json.dumps(dashboard)


def overlap_panels(text):
    dashboard = json.loads(text)
    first_panel(dashboard, "GPU shares")["gridPos"]["x"] = 6
    return json.dumps(dashboard)


def reuse_panel_id(text):
    dashboard = json.loads(text)
    first_panel(dashboard, "GPU shares")["id"] = first_panel(dashboard, "GPU health")["id"]
    return json.dumps(dashboard)


def drop_panel(title):
    def alter(text):
        dashboard = json.loads(text)
        first_panel(dashboard, title)  # there must be one to drop
        dashboard["panels"] = [p for p in dashboard["panels"] if p.get("title") != title]
        return json.dumps(dashboard)

    return alter


def drop_datasource_variable(text):
    dashboard = json.loads(text)
    variables = dashboard["templating"]["list"]
    dashboard["templating"]["list"] = [v for v in variables if v["type"] != "datasource"]
    return json.dumps(dashboard)


def replace_once(old, new, count=1):
    """Replaces the first `old` in the dashboard's strings (as the JSON text escapes them)."""

    def alter(text):
        old_in_json, new_in_json = json.dumps(old)[1:-1], json.dumps(new)[1:-1]
        if text.count(old_in_json) < count:
            raise AssertionError(f"the dashboard has no {old!r} to alter")
        return text.replace(old_in_json, new_in_json, count)

    return alter


# (what is wrong, how to make it so, what the checker's output must name)
CASES = [
    ("a ratio drawn as percent (0..100)",
     replace_once("percentunit", "percent"), "with unit 'percent'"),
    ("a misspelt metric",
     replace_once("tessera_share_memory_used_bytes{", "tessera_share_memory_use_bytes{"),
     "tessera_share_memory_use_bytes"),
    ("a misspelt metric in a rate",
     replace_once("rate(tessera_share_throttled_seconds_total{",
                  "rate(tessera_share_throttle_seconds_total{"),
     "tessera_share_throttle_seconds_total"),
    ("a label the metric does not carry in a selector",
     replace_once('tessera_gpu_healthy{node=~', 'tessera_gpu_healthy{hostname=~'), "hostname"),
    ("a share label on a GPU metric",
     replace_once('tessera_gpu_shares{node=~"$node"}',
                  'tessera_gpu_shares{node=~"$node", claim=~"$claim"}'),
     "tessera_gpu_shares has no label claim"),
    ("a by label the request counter does not carry",
     replace_once("sum by (result) (rate(tessera_prepare_requests_total",
                  "sum by (node) (rate(tessera_prepare_requests_total"),
     "node"),
    ("le on a histogram's _count",
     replace_once("tessera_unprepare_duration_seconds_bucket",
                  "tessera_unprepare_duration_seconds_count"),
     "has no label le"),
    ("a histogram by its bare name",
     replace_once("tessera_prepare_duration_seconds_bucket", "tessera_prepare_duration_seconds"),
     "no metric tessera_prepare_duration_seconds"),
    ("an unknown function", replace_once("histogram_quantile(", "histogram_quantil("),
     "histogram_quantil"),
    ("a legend label no metric has", replace_once("prepare {{result}}", "prepare {{status}}"),
     "status"),
    ("a variable's label the metric does not carry",
     # A variable's query is written twice (definition and query): both altered.
     replace_once('namespace=~"$namespace"}, claim)', 'namespace=~"$namespace"}, claims)', 2),
     "the metric has no label claims"),
    ("a variable on a metric that does not exist",
     replace_once("label_values(tessera_gpu_shares,", "label_values(tessera_gpus_shares,", 2),
     "no metric tessera_gpus_shares"),
    ("a variable whose shown definition differs from its query",
     replace_once("label_values(tessera_gpu_shares, node)", "label_values(tessera_gpu_healthy, node)"),
     "is not the query"),
    ("a PromQL syntax error",
     replace_once("(rate(tessera_share_gpu_time_seconds_total",
                  "(* rate(tessera_share_gpu_time_seconds_total"),
     "promtool: "),
    ("a share metric summed over both agents of a node",
     replace_once("max by (namespace, claim, share, uuid, node) (tessera_share_memory_used_bytes",
                  "sum by (namespace, claim, share, uuid, node) (tessera_share_memory_used_bytes"),
     "tessera_share_memory_used_bytes comes from both agents"),
    ("a GPU metric drawn bare (once per agent)",
     replace_once('max by (uuid, device, node) (tessera_gpu_shares{node=~"$node"})',
                  'tessera_gpu_shares{node=~"$node"}'),
     "not the bare series"),
    ("a share counter's rate merged with without (...)",
     replace_once("max by (namespace, claim, share, uuid, node) (rate(tessera_share_launches_total",
                  "max without (instance) (rate(tessera_share_launches_total"),
     "tessera_share_launches_total comes from both agents"),
    ("no panel for the memory outside every share", drop_panel("GPU memory outside every share"),
     "no panel shows tessera_gpu_unaccounted_memory_bytes"),
    ("a panel without a title", drop_title, "no title"),
    ("a panel without a target", drop_targets, "no target"),
    ("overlapping panels", overlap_panels, "overlaps panel"),
    ("two panels with one id", reuse_panel_id, "is used more than once"),
    ("no datasource variable", drop_datasource_variable, "no Prometheus datasource variable"),
    ("JSON that does not parse", lambda text: text[: len(text) // 2], "line "),
]


def run_checker(checker, tool, path):
    result = subprocess.run([sys.executable, checker, "--metric-table-tool", tool,
                             "--promtool", "promtool", path],
                            capture_output=True, text=True)
    return result.returncode, result.stdout + result.stderr


def main():
    checker, tool, dashboard_path = sys.argv[1:4]
    with open(dashboard_path, encoding="utf-8") as file:
        original = file.read()
    failures = []
    with tempfile.TemporaryDirectory() as folder:
        copy = os.path.join(folder, "dashboard.json")
        with open(copy, "w", encoding="utf-8") as file:
            file.write(original)
        code, output = run_checker(checker, tool, copy)
        if code != 0:
            failures.append(f"the unaltered dashboard fails:\n{output}")
        for what, alter, expected in CASES:
            with open(copy, "w", encoding="utf-8") as file:
                file.write(alter(original))
            code, output = run_checker(checker, tool, copy)
            if code == 0:
                failures.append(f"{what}: the check passed")
            elif expected not in output:
                failures.append(f"{what}: the check failed without naming {expected!r}:\n{output}")
            else:
                print(f"caught {what}: {output.strip().splitlines()[0]}")
    for failure in failures:
        print(failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Checks a Grafana dashboard against the metrics the node agent exports.

Usage: dashboard_check.py --metric-table-tool PATH [--promtool promtool] DASHBOARD.json

The table comes from the agent's own metric table (agent_print_metric_table prints
node-agent/src/metrics/metric_table.h: name, type, labels), never from the header's text. The check
fails (exit 1, one line a problem) when the JSON does not parse, a panel has no title or no target,
a target has no expression or a datasource other than ${datasource}, or a query (a panel's `expr`
or a variable's label_values) names a metric the endpoint does not export, a label in a selector, a
`by (...)`/`without (...)`/`on (...)` clause or a legend that its metrics do not carry, or a
function PromQL does not have, or a panel draws a `_ratio` metric (0..1) in a unit other than
Grafana's percentunit. A histogram is queried as NAME_bucket (which adds `le`), NAME_sum or
NAME_count, never by its bare name. With --promtool, Prometheus's own parser also reads every
expression (`promtool check rules` on them as recording rules), so a syntax error fails too.

Two agents run on a node during a rolling update, and Prometheus scrapes both: the series of the
node's state (every metric with a `node` label: shares, GPUs, findings) come from both, alike but
for the target's labels (instance, the agent's pod). So a panel must take them through
max/min/avg by (...) (the innermost aggregation around the metric), never bare nor summed, or it
would draw or count every share twice. And every metric the agent exports is on a panel, unless
NOT_ON_DASHBOARD says why not.
"""
import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile

# PromQL's functions and aggregation operators (prometheus/promql/parser/functions.go, lex.go).
FUNCTIONS = {
    "abs", "absent", "absent_over_time", "acos", "acosh", "asin", "asinh", "atan", "atanh",
    "avg_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min", "cos", "cosh",
    "count_over_time", "days_in_month", "day_of_month", "day_of_week", "day_of_year", "deg",
    "delta", "deriv", "exp", "floor", "histogram_avg", "histogram_count", "histogram_fraction",
    "histogram_quantile", "histogram_stddev", "histogram_stdvar", "histogram_sum", "holt_winters",
    "hour", "idelta", "increase", "irate", "label_join", "label_replace", "last_over_time", "ln",
    "log10", "log2", "mad_over_time", "max_over_time", "min_over_time", "minute", "month", "pi",
    "predict_linear", "present_over_time", "quantile_over_time", "rad", "rate", "resets", "round",
    "scalar", "sgn", "sin", "sinh", "sort", "sort_by_label", "sort_by_label_desc", "sort_desc",
    "sqrt", "stddev_over_time", "stdvar_over_time", "sum_over_time", "tan", "tanh", "time",
    "timestamp", "vector", "year", "start", "end",  # the last two after @
}
AGGREGATORS = {
    "sum", "avg", "count", "min", "max", "group", "stddev", "stdvar", "topk", "bottomk",
    "count_values", "quantile", "limitk", "limit_ratio",
}
LABEL_LIST_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
OTHER_KEYWORDS = {"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan"}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
# Aggregations that keep one agent's figure of a series both agents export alike.
DEDUPLICATING = {"max", "min", "avg"}
# Metrics no panel shows, and why.
NOT_ON_DASHBOARD = {
    "tessera_share_usage_readable": "an alert's input (0: the share's usage page is unreadable "
                                    "and its usage series are left out); tessera shares shows it",
    # The driver's partitions (docs/driver-partitions.md): per-node facts and a cross-check of the
    # shim's count, read in the local API (Gpu.driver_partitions, ShareDevice.memory_layer and
    # driver_memory_used_bytes) and alerted on through tessera_findings_total; no panel yet.
    "tessera_gpu_driver_partitions": "whether the GPU's driver holds partitions: a node fact",
    # docs/coexistence.md: a GPU another allocator hands out; the Node's GpuWithheld Event says why.
    "tessera_gpu_withheld": "a GPU left to another allocator: a node fact, with a Node Event",
    # docs/resource-model.md, "MIG": labels to join a MIG instance's tessera_gpu_* series to its
    # GPU and profile (group_left), not a figure; tessera top lists the instances.
    "tessera_mig_instance_info": "a join table for the MIG instances' device series",
    "tessera_share_driver_partition": "which layer holds the share: in the local API",
    "tessera_share_driver_memory_used_bytes": "the driver's count beside the shim's: a "
                                              "layers_disagree finding when they part",
    # docs/resource-model.md: the class is a label to join on (group_left(class)), not a figure.
    "tessera_share_qos_class": "the share's QoS class as a label, for joins; tessera shares "
                               "shows it",
    # docs/node-agent.md, "Kubernetes Events": the Events are read with kubectl describe pod.
    "tessera_kube_events_dropped_total": "an alert's input: Kubernetes Events the agent could "
                                         "not write",
}

TOKEN = re.compile(
    r"""(?P<space>\s+)
      | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
      | (?P<variable>\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*)
      | (?P<number>(?:0x[0-9a-fA-F]+|[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)(?:[smhdwy]|ms)*)
      | (?P<ident>[A-Za-z_][A-Za-z0-9_:]*)
      | (?P<match>=~|!~|!=|==|>=|<=)
      | (?P<punct>[-+*/%^=<>(){}\[\],@:])""",
    re.VERBOSE,
)


class Table:
    def __init__(self, lines):
        self.metrics = {}  # name -> (type, set of labels)
        for line in lines:
            if not line.strip():
                continue
            name, kind, labels = line.split("\t")
            self.metrics[name] = (kind, set() if labels == "-" else set(labels.split(",")))

    def resolve(self, name):
        """The labels a series name carries, or None when the endpoint exports no such series."""
        if name in self.metrics:
            kind, labels = self.metrics[name]
            return None if kind == "histogram" else labels
        for suffix in HISTOGRAM_SUFFIXES:
            base = name[: -len(suffix)]
            if name.endswith(suffix) and self.metrics.get(base, ("",))[0] == "histogram":
                labels = set(self.metrics[base][1])
                return labels | {"le"} if suffix == "_bucket" else labels
        return None


def tokenize(expr):
    tokens, position = [], 0
    while position < len(expr):
        match = TOKEN.match(expr, position)
        if not match:
            raise ValueError(f"cannot read {expr[position:]!r}")
        position = match.end()
        if match.lastgroup != "space":
            tokens.append((match.lastgroup, match.group()))
    return tokens


def closing(tokens, start):
    """Index of the bracket that closes the one at tokens[start]."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    opener, depth = tokens[start][1], 0
    for index in range(start, len(tokens)):
        if tokens[index][1] == opener:
            depth += 1
        elif tokens[index][1] == pairs[opener]:
            depth -= 1
            if depth == 0:
                return index
    raise ValueError("unbalanced brackets")


def aggregation_scopes(tokens):
    """Each aggregation: (operator, by/without or None, first and last token of its argument)."""
    scopes = []
    for index, (kind, text) in enumerate(tokens):
        if kind != "ident" or text not in AGGREGATORS:
            continue
        after, keyword = index + 1, None
        if after < len(tokens) and tokens[after][1] in ("by", "without"):
            keyword = tokens[after][1]
            after = closing(tokens, after + 1) + 1
        if after >= len(tokens) or tokens[after][1] != "(":
            continue
        end = closing(tokens, after)
        if keyword is None and end + 1 < len(tokens) and tokens[end + 1][1] in ("by", "without"):
            keyword = tokens[end + 1][1]
        scopes.append((text, keyword, after, end))
    return scopes


def check_expr(expr, table, where, node_wide_rule=False):
    """Problems with one PromQL expression, and the labels of the metrics it names. With
    node_wide_rule, a metric with a `node` label must be inside max/min/avg by (...)."""
    problems, metric_positions = [], []
    try:
        tokens = tokenize(expr)
        label_clauses = []  # (keyword, labels, index of the keyword)
        index = 0
        while index < len(tokens):
            kind, text = tokens[index]
            following = tokens[index + 1][1] if index + 1 < len(tokens) else ""
            if text == "{":  # a selector that names no metric: nothing to check its labels on
                problems.append(f"{where}: a selector without a metric name")
                index = closing(tokens, index) + 1
                continue
            if kind != "ident":
                index += 1
                continue
            if text in LABEL_LIST_KEYWORDS and following == "(":
                end = closing(tokens, index + 1)
                labels = [t for k, t in tokens[index + 2 : end] if k == "ident"]
                label_clauses.append((text, labels, index))
                index = end + 1
                continue
            if following == "(":
                if text not in FUNCTIONS and text not in AGGREGATORS:
                    problems.append(f"{where}: unknown function {text}")
                index += 1
                continue
            if text in AGGREGATORS and following in LABEL_LIST_KEYWORDS:
                index += 1
                continue
            if text in OTHER_KEYWORDS:
                index += 1
                continue
            labels = table.resolve(text)
            if labels is None:
                problems.append(f"{where}: the agent exports no metric {text}")
                labels = set()
            metric_positions.append((index, text, labels))
            if following == "{":
                end = closing(tokens, index + 1)
                selector = tokens[index + 2 : end]
                for position, (k, name) in enumerate(selector):
                    next_text = selector[position + 1][1] if position + 1 < len(selector) else ""
                    if k == "ident" and next_text in ("=", "=~", "!=", "!~") and name not in labels:
                        problems.append(f"{where}: {text} has no label {name}")
                index = end + 1
                continue
            index += 1
        for keyword, labels, at in label_clauses:
            scope = aggregation_scope(tokens, at) if keyword in ("by", "without") else None
            metrics = [m for m in metric_positions if scope is None or scope[0] <= m[0] <= scope[1]]
            for label in labels:
                if keyword in ("group_left", "group_right"):
                    carriers = [m for m in metrics if label in m[2]]
                    missing = [] if carriers else metrics
                else:
                    missing = [m for m in metrics if label not in m[2]]
                for _, name, _ in missing:
                    problems.append(f"{where}: {keyword} ({label}): {name} has no label {label}")
        if node_wide_rule:
            scopes = aggregation_scopes(tokens)
            for position, name, labels in metric_positions:
                if "node" not in labels:
                    continue
                around = [s for s in scopes if s[2] < position <= s[3]]
                innermost = min(around, key=lambda s: s[3] - s[2]) if around else None
                if not innermost or innermost[0] not in DEDUPLICATING or innermost[1] != "by":
                    problems.append(
                        f"{where}: {name} comes from both agents of a node during a rolling "
                        f"update: take max/min/avg by (...) of it, not "
                        + (f"{innermost[0]} {innermost[1] or ''}".strip() if innermost
                           else "the bare series"))
    except ValueError as error:
        problems.append(f"{where}: {error} in {expr!r}")
    return problems, [m[2] for m in metric_positions]


def aggregation_scope(tokens, keyword_index):
    """The token range an aggregation's by/without applies to: `sum by (l) (E)` or `sum (E) by (l)`."""
    after_labels = closing(tokens, keyword_index + 1) + 1
    if keyword_index > 0 and tokens[keyword_index - 1][1] in AGGREGATORS:
        if after_labels < len(tokens) and tokens[after_labels][1] == "(":
            return after_labels, closing(tokens, after_labels)
    if keyword_index > 0 and tokens[keyword_index - 1][1] == ")":
        depth = 0
        for start in range(keyword_index - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(tokens[start][1], 0)
            if depth == 0:
                return start, keyword_index - 1
    raise ValueError("by/without outside an aggregation")


def check_dashboard(dashboard, table):
    """Problems found, and every PromQL expression checked (for the syntax check)."""
    problems, expressions = [], []
    shown = set()  # the identifiers of every panel's queries
    panels = []
    for panel in dashboard.get("panels", []):
        panels.append(panel)
        panels.extend(panel.get("panels", []))  # a collapsed row holds its panels
    ids = [panel.get("id") for panel in panels]
    for duplicate in sorted({i for i in ids if ids.count(i) > 1}, key=str):
        problems.append(f"panel id {duplicate} is used more than once")
    problems += layout_problems([p for p in dashboard.get("panels", []) if "gridPos" in p])
    for panel in panels:
        if panel.get("type") == "row":
            if not panel.get("title"):
                problems.append(f"row {panel.get('id')}: no title")
            continue
        title = panel.get("title")
        where = f"panel {title!r}" if title else f"panel {panel.get('id')}"
        if not title:
            problems.append(f"{where}: no title")
        targets = panel.get("targets") or []
        if not targets:
            problems.append(f"{where}: no target")
        for target in targets:
            target_where = f"{where} target {target.get('refId')}"
            if target.get("datasource", {}).get("uid") != "${datasource}":
                problems.append(f"{target_where}: datasource is not ${{datasource}}")
            expr = target.get("expr", "")
            if not expr.strip():
                problems.append(f"{target_where}: no expr")
                continue
            expr_problems, label_sets = check_expr(expr, table, target_where, node_wide_rule=True)
            problems += expr_problems
            expressions.append((target_where, expr))
            shown.update(re.findall(r"[A-Za-z_][A-Za-z0-9_:]*", expr))
            for label in re.findall(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}",
                                    target.get("legendFormat", "")):
                if not any(label in labels for labels in label_sets):
                    problems.append(f"{target_where}: legend names {label}, which no metric has")
        # Ratios are 0..1 (Prometheus's convention): Grafana's unit for them is percentunit;
        # `percent` would draw a full GPU as 1 %.
        ratios = sorted({name for target in targets
                         for name in re.findall(r"[A-Za-z_][A-Za-z0-9_:]*_ratio\b",
                                                target.get("expr", ""))
                         if name in table.metrics})
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit")
        if ratios and unit != "percentunit":
            problems.append(f"{where}: draws {', '.join(ratios)} (0..1) with unit {unit!r}, not "
                            f"'percentunit'")
    variables = dashboard.get("templating", {}).get("list", [])
    if not any(v.get("name") == "datasource" and v.get("type") == "datasource"
               and v.get("query") == "prometheus" for v in variables):
        problems.append("no Prometheus datasource variable named datasource")
    for variable in variables:
        if variable.get("type") != "query":
            continue
        query = variable.get("query")
        query = query.get("query", "") if isinstance(query, dict) else query or ""
        where = f"variable {variable.get('name')}"
        if variable.get("definition", query) != query:  # Grafana shows the one, runs the other
            problems.append(f"{where}: definition {variable['definition']!r} is not the query")
        match = re.fullmatch(r"\s*label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*", query)
        if not match:
            problems.append(f"{where}: not label_values(METRIC, LABEL): {query!r}")
            continue
        expr_problems, label_sets = check_expr(match.group(1), table, where)
        problems += expr_problems
        expressions.append((where, match.group(1)))
        if not label_sets or any(match.group(2) not in labels for labels in label_sets):
            problems.append(f"{where}: the metric has no label {match.group(2)}")
    if not expressions:
        problems.append("no query to check")
    for name, (kind, _) in sorted(table.metrics.items()):
        names = {name + suffix for suffix in HISTOGRAM_SUFFIXES} if kind == "histogram" else {name}
        if not names & shown and name not in NOT_ON_DASHBOARD:
            problems.append(f"no panel shows {name} (add one, or say why in NOT_ON_DASHBOARD)")
    return problems, expressions


def layout_problems(panels):
    """Panels on Grafana's 24-column grid must not leave it or overlap (Grafana would move them)."""
    problems, cells = [], {}
    for panel in panels:
        grid = panel["gridPos"]
        name = panel.get("title") or panel.get("id")
        if grid["x"] < 0 or grid["w"] <= 0 or grid["x"] + grid["w"] > 24 or grid["h"] <= 0:
            problems.append(f"panel {name!r}: gridPos {grid} leaves the 24-column grid")
            continue
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                if (x, y) in cells:
                    problems.append(f"panel {name!r} overlaps panel {cells[(x, y)]!r}")
                    break
                cells[(x, y)] = name
            else:
                continue
            break
    return problems


def promtool_problems(promtool, expressions):
    """PromQL syntax, by Prometheus's own parser: every expression as a recording rule, with the
    dashboard's variables as Grafana would fill them ($__rate_interval a duration, the others
    regexes, as they only appear in =~ matchers)."""
    rules = []
    for number, (_, expr) in enumerate(expressions):
        filled = re.sub(r"\$\{?__(rate_)?interval\}?", "5m", expr)
        filled = re.sub(r"\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*", ".*", filled)
        rules.append({"record": f"dashboard_query_{number}", "expr": filled})
    with tempfile.NamedTemporaryFile("w", suffix=".yml", encoding="utf-8") as file:
        json.dump({"groups": [{"name": "dashboard", "rules": rules}]}, file)  # JSON is YAML
        file.flush()
        result = subprocess.run([promtool, "check", "rules", file.name], capture_output=True,
                                text=True)
    if result.returncode == 0:
        return []
    output = result.stdout + result.stderr
    named = [f"{where}: promtool: {line.strip()}" for number, (where, _) in enumerate(expressions)
             for line in output.splitlines() if f"dashboard_query_{number}\"" in line
             or f"dashboard_query_{number}:" in line]
    return named or [f"promtool check rules failed: {output.strip()}"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--metric-table-tool", required=True)
    parser.add_argument("--promtool", help="also check the PromQL syntax with promtool")
    parser.add_argument("dashboard")
    arguments = parser.parse_args()
    printed = subprocess.run([arguments.metric_table_tool], check=True, capture_output=True,
                             text=True).stdout
    table = Table(printed.splitlines())
    if not table.metrics:
        print("the metric table tool printed no metric", file=sys.stderr)
        return 1
    try:
        with open(arguments.dashboard, encoding="utf-8") as file:
            dashboard = json.load(file)
    except (OSError, json.JSONDecodeError) as error:
        print(f"{arguments.dashboard}: {error}", file=sys.stderr)
        return 1
    problems, expressions = check_dashboard(dashboard, table)
    if arguments.promtool:
        promtool = shutil.which(arguments.promtool)
        if not promtool:
            problems.append(f"no {arguments.promtool} (scripts/install-deps.sh installs it)")
        else:
            problems += promtool_problems(promtool, expressions)
    for problem in problems:
        print(f"{arguments.dashboard}: {problem}", file=sys.stderr)
    if problems:
        return 1
    print(f"{arguments.dashboard}: {len(expressions)} queries, every metric and label exported "
          f"({len(table.metrics)} metrics in the table)"
          + (", PromQL syntax checked by promtool" if arguments.promtool else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())

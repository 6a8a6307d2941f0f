#!/usr/bin/env python3
"""Validates Kubernetes manifests against the API of one Kubernetes release, without a cluster.

    validate_manifests.py --kube-version 1.34 [--tools DIR] FILE...   ('-' reads stdin)

Every object (multi-document YAML; Lists are expanded) must be a kind that release serves under
its apiVersion, and match that kind's schema: no unknown field at any depth, every value of the
API's type, every required field present. For 1.36, each object is also validated with
kubernetes-models (its enums, too). Objects of the CRD groups below are validated with the CRD
projects' own schemas. Exit status 0 when all objects pass, 1 with one line per problem.

Where the schemas come from (scripts/install-helm.sh installs them into --tools, default
$TESSERA_CHART_TOOLS or /opt/tessera/chart-tools):
- Kubernetes 1.34 and 1.36: @kubernetes/client-node 1.4.0 and 2.0.1, which the Kubernetes
  project generates from the API server's OpenAPI spec (v1.34.0 and release-1.36). The served
  kinds are read from the API classes its index exports (every create call: path -> body
  model; alpha and beta versions are listed whether or not a cluster enables them), each model's fields
  and types from its attributeTypeMap, required fields from its type declarations. Nothing here
  is written by hand, except one documented relaxation: resource.Quantity is a string in the
  generated types but the API also takes a JSON number, so numbers are accepted in the Quantity
  fields listed in QUANTITY_FIELDS.
- Kubernetes 1.36, a second time: kubernetes-models 5.1.0, validators compiled from Kubernetes
  v1.36.0's OpenAPI spec with its enums (failurePolicy, sideEffects, operators, ...), which the
  generated client does not carry. It does not refuse unknown fields; the first check does.
  There is no kubernetes-models release for 1.34 (4.5 is 1.33.0, 5.0 is 1.36.0), so 1.34 has
  the first check only.
- monitoring.coreos.com (ServiceMonitor) and cert-manager.io (Issuer, Certificate):
  @kubernetes-models/prometheus-operator and cert-manager, validators compiled from those
  projects' CRD schemas.
Both compiled kinds run in validate_models.mjs under node.
"""
import argparse
import functools
import json
import os
import re
import subprocess
import sys

import yaml

SUPPORTED = {"1.34": "k8s-1.34", "1.36": "k8s-1.36"}
CRD_GROUPS = {"monitoring.coreos.com", "cert-manager.io"}
COMPILED_CORE = {"1.36"}  # releases that kubernetes-models was compiled for

# (model, property) whose values are resource.Quantity (string or number in the API's JSON).
QUANTITY_FIELDS = {
    ("V1ResourceRequirements", "limits"), ("V1ResourceRequirements", "requests"),
    ("V1VolumeResourceRequirements", "limits"), ("V1VolumeResourceRequirements", "requests"),
    ("V1EmptyDirVolumeSource", "sizeLimit"), ("V1PodSpec", "overhead"),
    ("V1ResourceQuotaSpec", "hard"), ("V1LimitRangeItem", "default"),
    ("V1LimitRangeItem", "defaultRequest"), ("V1LimitRangeItem", "max"),
    ("V1LimitRangeItem", "min"), ("V1LimitRangeItem", "maxLimitRequestRatio"),
    ("V1CapacityRequirements", "requests"), ("V1DeviceCapacity", "value"),
    ("V1CapacityRequestPolicy", "default"), ("V1CapacityRequestPolicyRange", "min"),
    ("V1CapacityRequestPolicyRange", "max"), ("V1CapacityRequestPolicyRange", "step"),
    ("V1CapacityRequestPolicy", "validValues"), ("V1Counter", "value"),
}

MAP_RE = re.compile(r"^\{ \[key: string\]: (.+); \}$")
ARRAY_RE = re.compile(r"^Array<(.+)>$")
ATTRIBUTES_RE = re.compile(r"\.attributeTypeMap = (\[.*?\]);", re.S)
FIELD_RE = re.compile(r"^\s+'([^']+)'(\??):", re.M)
VERSION_PREFIX_RE = re.compile(r"^(?:[A-Z][a-z]+)*?V\d+(?:alpha\d+|beta\d+)?(?=[A-Z])")


class Api:
    """One release's kinds and models, read from the generated client."""

    def __init__(self, root):
        self.models_dir = os.path.join(root, "dist", "gen", "models")
        apis_dir = os.path.join(root, "dist", "gen", "apis")
        if not os.path.isdir(self.models_dir) or not os.path.isdir(apis_dir):
            raise SystemExit(f"validate_manifests: no generated client under {root} "
                             "(run scripts/install-helm.sh)")
        self.kinds = {}  # (apiVersion, kind) -> model
        # The package's dist also holds API classes of older releases that its index no longer
        # exports (resource.k8s.io/v1alpha2 in both): only the exported ones are this release's.
        index = open(os.path.join(root, "dist", "gen", "index.js"), encoding="utf-8").read()
        for name in sorted(set(re.findall(r" as (\w+Api)\b", index))):
            path = os.path.join(apis_dir, name + ".js")
            if os.path.exists(path):
                self._read_api(open(path, encoding="utf-8").read())

    def _read_api(self, text):
        # Each method sets localVarPath; a create of a collection serializes its body's model.
        for segment in text.split("const localVarPath = '")[1:]:
            path = segment.split("'", 1)[0]
            body = re.search(r'ObjectSerializer\.serialize\(body, "(\w+)"', segment)
            match = re.match(r"^/(?:api/(v1)|apis/([^/]+)/([^/]+))(?:/namespaces/\{namespace\})?/([a-z0-9]+)$", path)
            if not body or not match or "method: 'POST'" not in segment and "HttpMethod.POST" not in segment:
                continue
            api_version = match.group(1) or f"{match.group(2)}/{match.group(3)}"
            model = body.group(1)
            prefix = VERSION_PREFIX_RE.match(model)
            if prefix:
                self.kinds.setdefault((api_version, model[prefix.end():]), model)

    @functools.lru_cache(maxsize=None)
    def model(self, name):
        """{property: (type, format)}, required properties; None when there is no such model."""
        js = os.path.join(self.models_dir, name + ".js")
        if not os.path.exists(js):
            return None
        attributes = ATTRIBUTES_RE.search(open(js, encoding="utf-8").read())
        fields = {a["baseName"]: (a["type"], a["format"]) for a in json.loads(attributes.group(1))} \
            if attributes else {}
        declaration = open(os.path.join(self.models_dir, name + ".d.ts"), encoding="utf-8").read()
        declaration = declaration.split("static readonly discriminator", 1)[0]
        names = {m.group(1): m.group(2) == "" for m in FIELD_RE.finditer(declaration)}
        required = {field for field, is_required in names.items() if is_required and field in fields}
        return fields, required


def is_quantity_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class Validator:
    def __init__(self, api):
        self.api = api
        self.errors = []
        for model, field in sorted(QUANTITY_FIELDS):  # the relaxation must name real fields
            if field not in (api.model(model) or ({}, set()))[0]:
                raise SystemExit(f"validate_manifests: QUANTITY_FIELDS names {model}.{field}, "
                                 "which this release does not have")

    def check_value(self, where, value, type_name, fmt, quantity=False):
        if value is None:
            return  # null is "unset" in the API's JSON decoding
        if type_name in ("any", "object"):
            return
        if m := ARRAY_RE.match(type_name):
            if not isinstance(value, list):
                return self.error(where, f"expected a list, found {kind_of(value)}")
            for i, item in enumerate(value):
                self.check_value(f"{where}[{i}]", item, m.group(1), fmt, quantity)
            return
        if m := MAP_RE.match(type_name):
            if not isinstance(value, dict):
                return self.error(where, f"expected a map, found {kind_of(value)}")
            for key, item in value.items():
                self.check_value(f"{where}.{key}", item, m.group(1), fmt, quantity)
            return
        if type_name == "string" or type_name == "Date":
            if isinstance(value, str) or (quantity and is_quantity_number(value)):
                return
            return self.error(where, f"expected a string, found {kind_of(value)} {value!r}")
        if type_name == "number":
            if fmt in ("int32", "int64"):
                if isinstance(value, int) and not isinstance(value, bool):
                    return
                return self.error(where, f"expected an integer, found {kind_of(value)} {value!r}")
            if is_quantity_number(value):
                return
            return self.error(where, f"expected a number, found {kind_of(value)} {value!r}")
        if type_name == "boolean":
            if isinstance(value, bool):
                return
            return self.error(where, f"expected a boolean, found {kind_of(value)} {value!r}")
        if type_name == "IntOrString":
            if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
                return
            return self.error(where, f"expected an integer or a string, found {kind_of(value)}")
        self.check_object(where, value, type_name)

    def check_object(self, where, value, model_name):
        model = self.api.model(model_name)
        if model is None:
            return self.error(where, f"the schema names an unknown type {model_name}")
        fields, required = model
        if not isinstance(value, dict):
            return self.error(where, f"expected an object ({model_name}), found {kind_of(value)}")
        for key, item in value.items():
            if key not in fields:
                known = ", ".join(sorted(fields))
                self.error(f"{where}.{key}", f"unknown field (a {model_name} has: {known})")
                continue
            type_name, fmt = fields[key]
            self.check_value(f"{where}.{key}", item, type_name, fmt,
                             (model_name, key) in QUANTITY_FIELDS)
        for key in sorted(required - set(value)):
            self.error(f"{where}.{key}", "required field is missing")

    def error(self, where, message):
        self.errors.append(f"{self.current}: {where}: {message}")

    def check_document(self, label, document, kube_version):
        api_version, kind = document.get("apiVersion"), document.get("kind")
        name = (document.get("metadata") or {}).get("name", "?")
        self.current = f"{label}: {kind} {name}"
        if not isinstance(api_version, str) or not isinstance(kind, str):
            return self.error("", "apiVersion and kind are required")
        model = self.api.kinds.get((api_version, kind))
        if model is None:
            return self.error("", f"Kubernetes {kube_version} serves no kind {kind} in {api_version}")
        self.check_object(kind, document, model)


def kind_of(value):
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "a list", dict: "a map"}.get(type(value), type(value).__name__)


def documents(path):
    text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
    for index, document in enumerate(yaml.safe_load_all(text)):
        if document is None:
            continue
        if isinstance(document, dict) and document.get("kind", "").endswith("List") \
                and isinstance(document.get("items"), list):
            for item_index, item in enumerate(document["items"]):
                yield f"{path}#{index}.items[{item_index}]", item
        else:
            yield f"{path}#{index}", document


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kube-version", required=True, choices=sorted(SUPPORTED))
    parser.add_argument("--tools", default=os.environ.get("TESSERA_CHART_TOOLS",
                                                          "/opt/tessera/chart-tools"))
    parser.add_argument("--node", default="node", help="node, for the CRD validators")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()

    validator = Validator(Api(os.path.join(args.tools, SUPPORTED[args.kube_version])))
    compiled = []  # objects for validate_models.mjs
    count = 0
    for path in args.files:
        for label, document in documents(path):
            count += 1
            if not isinstance(document, dict):
                validator.errors.append(f"{label}: not an object")
                continue
            group = str(document.get("apiVersion", "")).split("/")[0]
            if group in CRD_GROUPS:
                compiled.append({"label": label, "object": document})
                continue
            before = len(validator.errors)
            validator.check_document(label, document, args.kube_version)
            # Only a kind that release serves has a compiled model to try.
            if args.kube_version in COMPILED_CORE and (len(validator.errors) == before or
                                                       "serves no kind" not in validator.errors[-1]):
                compiled.append({"label": label, "object": document})
    if compiled:
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "validate_models.mjs")
        result = subprocess.run([args.node, script, os.path.join(args.tools, "models")],
                                input=json.dumps(compiled), capture_output=True, text=True)
        if result.returncode not in (0, 1):
            raise SystemExit(f"validate_manifests: {script} failed: {result.stderr.strip()}")
        validator.errors += [line for line in result.stdout.splitlines() if line]
    for line in validator.errors:
        print(line)
    status = "FAILED" if validator.errors else "ok"
    print(f"validate_manifests: Kubernetes {args.kube_version}: {count} objects, "
          f"{len(validator.errors)} problems: {status}", file=sys.stderr)
    return 1 if validator.errors else 0


if __name__ == "__main__":
    sys.exit(main())

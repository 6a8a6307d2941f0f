#!/usr/bin/env python3
"""Checks samples/k8s/ against what the cluster would do with it, without a cluster.

  consistent      every manifest parses, one object per document, names and references resolve
                  (pods -> claims and templates in the same folder), the DeviceClass names are the
                  chart's, every folder has a README saying what to run.
  rules           the capacity-fit checker below, on the node agent's own slice: each rule of DRA
                  consumable capacity (KEP-5075) gives what the scheduler gives.
  fit             the two-tenant sample's claims fit one GPU of every size the agent is tested
                  with, as the agent publishes it (tessera-node-agent --print-resource-slices on the
                  simulated GPU), and a third tenant's does not; every other sample fits alone.
  chart           the chart (charts/tessera, rendered with helm as scripts/kind-demo.sh installs
                  it, for 1.34 and 1.36) makes every DeviceClass the samples name, the MPS preset
                  carries VgpuConfig MPS, and the default class has the extended resource name;
                  skipped (77) where the chart or helm is missing.
  webhook         the shorthand and HAMi-style pods sent through the real tessera-webhook (over
                  TLS, with a fake API server that records the templates it creates): the patch
                  gives each the template its README names, and that template fits too.
  resource-quota  resource-quota/'s pods in order: each claim they get (the shorthand pod's
                  through the real webhook) counted as kube-apiserver's claim evaluator counts it
                  and admitted by the quota plugin's rule against the sample's ResourceQuota; the
                  outcomes and the refusal's message are the README's.
  kueue           kueue/'s Kueue Configuration (README block), queues and Jobs: each Job charged
                  as Kueue's capacity quota charges it on the agent's devices for seven GPU
                  sizes, admitted in order against the ClusterQueue, as the README says.

Capacity rules (docs/node-agent.md "ResourceSlices", k8s-dra-facts.md "Consumable capacity";
calculateConsumedCapacity / roundUpRange / violatesPolicy in k8s.io/dynamic-resource-allocation):
a request that names no amount of a capacity consumes its requestPolicy.default (the whole value
where there is no policy); validRange rounds up to min + k*step (below min: min), above max the
device is not eligible; validValues takes the smallest value >= the request; a request for a
capacity the device does not have makes it ineligible; the shares of a device with
allowMultipleAllocations sum to at most each capacity's value.
"""
import argparse
import base64
import json
import math
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from fractions import Fraction
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import jsonpatch
import yaml

# The names the chart creates (charts/tessera): the default class, the MPS preset, the MIG class,
# the extended resource name the default class is given for the extended-resource sample.
DEVICE_CLASSES = {"vgpu.tessera.dev", "mps.vgpu.tessera.dev", "mig.vgpu.tessera.dev"}
EXTENDED_RESOURCE = "vgpu.tessera.dev/gpu"
# The image the samples run: the name scripts/build-images.sh gives, with its default tag, the
# chart's appVersion (also the chart's default image tag).
CHART_YAML = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "charts",
                          "tessera", "Chart.yaml")
with open(CHART_YAML, encoding="utf-8") as chart_file:
    APP_VERSION = re.search(r'^appVersion:\s*"?([^"\s]+)"?\s*$', chart_file.read(), re.M).group(1)
SAMPLE_IMAGE = f"localhost/tessera-node-agent:{APP_VERSION}"
NAMESPACED = {"ResourceClaimTemplate", "ResourceClaim", "Pod", "Deployment", "Job",
              "ResourceQuota", "LocalQueue"}
KNOWN_KINDS = {("v1", "Namespace"), ("v1", "Pod"), ("apps/v1", "Deployment"),
               ("batch/v1", "Job"), ("v1", "ResourceQuota"),
               ("resource.k8s.io/v1", "ResourceClaimTemplate"),
               ("resource.k8s.io/v1", "ResourceClaim"),
               ("kueue.x-k8s.io/v1beta2", "ResourceFlavor"),
               ("kueue.x-k8s.io/v1beta2", "ClusterQueue"),
               ("kueue.x-k8s.io/v1beta2", "LocalQueue")}
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
# GPU sizes as NVML reports them, as tests/support/apiserver/validate_printed_slices.sh prints them.
GPUS = [
    "name=NVIDIA H200,memory=143771Mi,sms=132,cc=9.0",
    "name=NVIDIA H100 80GB HBM3,memory=81559Mi,sms=132,cc=9.0",
    "name=NVIDIA A100-SXM4-80GB,memory=81920Mi,sms=108,cc=8.0",
    "name=NVIDIA A100-SXM4-40GB,memory=40960Mi,sms=108,cc=8.0",
    "name=NVIDIA L40S,memory=46068Mi,sms=142,cc=8.9",
    "name=NVIDIA L4,memory=23034Mi,sms=58,cc=8.9",
    "name=Tesla T4,memory=15360Mi,sms=40,cc=7.5",
]

failures = []


def fail(message):
    failures.append(message)
    print("FAILED: " + message)


# --- quantities -------------------------------------------------------------------------------

SUFFIXES = {"": 1, "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000),
            "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
            "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
QUANTITY = re.compile(r"^([+-]?[0-9]+(?:\.[0-9]*)?|[+-]?\.[0-9]+)(?:([eE][+-]?[0-9]+)|([a-zA-Z]*))$")


def quantity(text):
    """A Kubernetes resource.Quantity as an exact number; ValueError for anything else."""
    match = QUANTITY.match(str(text).strip())
    if not match or (match.group(3) or "") not in SUFFIXES:
        raise ValueError(f"not a quantity: {text!r}")
    value = Fraction(match.group(1))
    if match.group(2):
        value *= Fraction(10) ** int(match.group(2)[1:])
    return value * SUFFIXES[match.group(3) or ""]


def canonical(text):
    """What the API server stores for a plain integer quantity: 3000 -> 3k (decimal SI)."""
    if not re.fullmatch(r"[0-9]+", str(text)):
        return str(text)
    number, suffix = int(text), ""
    for next_suffix in ("k", "M", "G", "T", "P", "E"):
        if number == 0 or number % 1000:
            break
        number, suffix = number // 1000, next_suffix
    return f"{number}{suffix}"


def mib(value):
    return f"{float(value) / 2**20:.0f}Mi" if value >= 2**20 else str(value)


# --- the agent's slices -----------------------------------------------------------------------

def printed_slices(agent, simgpu_lib, gpus, work):
    """The ResourceSlices tessera-node-agent would publish for a simulated node with `gpus`."""
    env = dict(os.environ, SIMGPU_DEVICES=gpus, LD_LIBRARY_PATH=simgpu_lib,
               SIMGPU_STATE=str(Path(work) / f"simgpu-{abs(hash(gpus))}.state"))
    out = subprocess.run([agent, "--print-resource-slices", "--node-name", "sample-node"],
                         env=env, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"{agent} --print-resource-slices: {out.stderr.strip()}")
    decoder, text, slices, at = json.JSONDecoder(), out.stdout, [], 0
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at == len(text):
            return slices
        value, at = decoder.raw_decode(text, at)
        slices.append(value)


def devices_of(slices):
    return [device for s in slices for device in s["spec"].get("devices", [])]


# --- consumable capacity ----------------------------------------------------------------------

def consumed(capacity, requested):
    """What one share consumes of `capacity` for `requested` (a number or None), or None when
    the device is not eligible for that request."""
    value = quantity(capacity["value"])
    policy = capacity.get("requestPolicy")
    if requested is None:
        return quantity(policy["default"]) if policy and "default" in policy else value
    if not policy:
        return requested
    if "validRange" in policy:
        valid = policy["validRange"]
        low = quantity(valid["min"])
        amount = max(requested, low)
        if "step" in valid:
            step = quantity(valid["step"])
            amount = low + math.ceil((amount - low) / step) * step
        if "max" in valid and amount > quantity(valid["max"]):
            return None
        return amount
    if "validValues" in policy:
        fitting = [v for v in map(quantity, policy["validValues"]) if v >= requested]
        return min(fitting) if fitting else None
    return requested


class Device:
    def __init__(self, published):
        self.name = published["name"]
        self.capacity = published.get("capacity", {})
        self.multiple = published.get("allowMultipleAllocations", False)
        self.used = {name: Fraction(0) for name in self.capacity}
        self.shares = 0

    def take(self, requests):
        """Allocates one share for `requests` ({capacity: number}) if it fits; else why not."""
        if self.shares and not self.multiple:
            return f"{self.name} is already allocated and allows one allocation"
        unknown = set(requests) - set(self.capacity)
        if unknown:
            return f"{self.name} has no capacity {sorted(unknown)}"
        amounts = {}
        for name, capacity in self.capacity.items():
            amount = consumed(capacity, requests.get(name))
            if amount is None:
                return f"{self.name}: {name} {mib(requests[name])} is outside its requestPolicy"
            total = quantity(capacity["value"])
            if self.used[name] + amount > total:
                return (f"{self.name}: {name} {mib(self.used[name])} in use + {mib(amount)} > "
                        f"{mib(total)}")
            amounts[name] = amount
        for name, amount in amounts.items():
            self.used[name] += amount
        self.shares += 1
        return None


def allocate(devices, claims):
    """First-fit of every share of `claims` ([(label, {capacity: number}), ...]) onto `devices`;
    returns the reasons of the first share that fits nowhere, or None."""
    for label, requests in claims:
        reasons = []
        for device in devices:
            reason = device.take(requests)
            if reason is None:
                break
            reasons.append(reason)
        else:
            return f"{label} fits on no device: " + "; ".join(reasons)
    return None


# --- the samples ------------------------------------------------------------------------------

def documents(path):
    with open(path) as file:
        return [doc for doc in yaml.safe_load_all(file) if doc is not None]


def folder_objects(folder, recursive=False):
    files = sorted(folder.rglob("*.yaml") if recursive else folder.glob("*.yaml"))
    return [(f, doc) for f in files for doc in documents(f)]


def claim_shares(spec, label):
    """The shares a ResourceClaim spec asks for: [(label, {capacity: number})] per device."""
    shares = []
    for request in spec.get("devices", {}).get("requests", []):
        exactly = request.get("exactly")
        if exactly is None:
            raise ValueError(f"{label}: request {request.get('name')} is not `exactly`")
        if exactly.get("deviceClassName") not in DEVICE_CLASSES:
            raise ValueError(f"{label}: deviceClassName {exactly.get('deviceClassName')!r} is "
                             f"not one of the chart's {sorted(DEVICE_CLASSES)}")
        if exactly.get("allocationMode", "ExactCount") != "ExactCount":
            raise ValueError(f"{label}: allocationMode {exactly['allocationMode']} (a sample "
                             "asks for a count of shares)")
        wanted = exactly.get("capacity", {}).get("requests", {})
        requests = {name: quantity(value) for name, value in wanted.items()}
        for i in range(int(exactly.get("count", 1))):
            shares.append((f"{label}/{request['name']}[{i}]", requests))
    return shares


def pod_shares(folder_docs, pod, label, created_templates=None):
    """The shares a pod's claims ask for: from templates and claims of its folder, templates the
    webhook created, or its extended resource (the scheduler's claim: one share, no amounts)."""
    templates = {d["metadata"]["name"]: d["spec"]["spec"] for _, d in folder_docs
                 if d["kind"] == "ResourceClaimTemplate"}
    templates.update(created_templates or {})
    claims = {d["metadata"]["name"]: d["spec"] for _, d in folder_docs
              if d["kind"] == "ResourceClaim"}
    shares = []
    spec = pod["spec"]
    for entry in spec.get("resourceClaims", []):
        if "resourceClaimTemplateName" in entry:
            shares += claim_shares(templates[entry["resourceClaimTemplateName"]], label)
        else:
            shares += claim_shares(claims[entry["resourceClaimName"]], label)
    for container in spec.get("containers", []):
        count = container.get("resources", {}).get("limits", {}).get(EXTENDED_RESOURCE)
        for i in range(int(count or 0)):
            shares.append((f"{label}/{EXTENDED_RESOURCE}[{i}]", {}))
    return shares


def check_consistent(samples):
    folders = sorted(p for p in samples.iterdir() if p.is_dir())
    for path in sorted(samples.rglob("*.yaml")):
        with open(path) as file:
            raw = file.read()
        for doc in yaml.safe_load_all(raw):
            if doc is None:
                continue
            where = f"{path.relative_to(samples)}"
            if not isinstance(doc, dict) or isinstance(doc.get("items"), list):
                fail(f"{where}: each document must be one object (no List)")
                continue
            kind = (doc.get("apiVersion"), doc.get("kind"))
            if kind not in KNOWN_KINDS:
                fail(f"{where}: unexpected {kind}")
            name = doc.get("metadata", {}).get("name", "")
            if not DNS_LABEL.match(name):
                fail(f"{where}: metadata.name {name!r} is not a DNS label")
            if doc.get("kind") in NAMESPACED and not doc["metadata"].get("namespace"):
                fail(f"{where}: {name} has no metadata.namespace")
    for folder in folders:
        readme = folder / "README.md"
        if not readme.is_file():
            fail(f"{folder.name}/ has no README.md")
        elif "kubectl apply" not in readme.read_text():
            fail(f"{folder.name}/README.md does not say what to apply")
        docs = folder_objects(folder, recursive=True)
        names = {(d["kind"], d["metadata"]["name"]) for _, d in docs}
        for path, doc in docs:
            if doc["kind"] not in ("Pod", "Job"):
                continue
            spec = doc["spec"] if doc["kind"] == "Pod" else doc["spec"]["template"]["spec"]
            for entry in spec.get("resourceClaims", []):
                ref = entry.get("resourceClaimTemplateName") or entry.get("resourceClaimName")
                kind = ("ResourceClaimTemplate" if "resourceClaimTemplateName" in entry
                        else "ResourceClaim")
                if (kind, ref) not in names:
                    fail(f"{path.relative_to(samples)}: pod {doc['metadata']['name']} names "
                         f"{kind} {ref}, which its folder does not hold")
            pod_claims = {e["name"] for e in spec.get("resourceClaims", [])}
            for container in spec["containers"]:
                if container.get("image") != SAMPLE_IMAGE:
                    fail(f"{path.relative_to(samples)}: container {container['name']} runs "
                         f"{container.get('image')}, not {SAMPLE_IMAGE}")
                for claim in container.get("resources", {}).get("claims", []):
                    if claim["name"] not in pod_claims:
                        fail(f"{path.relative_to(samples)}: container {container['name']} "
                             f"claims {claim['name']}, not in spec.resourceClaims")
        for _, doc in docs:
            if doc["kind"] in ("ResourceClaimTemplate", "ResourceClaim"):
                spec = doc["spec"]["spec"] if doc["kind"] == "ResourceClaimTemplate" else doc["spec"]
                try:
                    claim_shares(spec, doc["metadata"]["name"])
                except (ValueError, KeyError) as error:
                    fail(f"{folder.name}: {error}")
    print(f"consistent: {len(list(samples.rglob('*.yaml')))} manifests in {len(folders)} folders")


def check_rules(agent, simgpu_lib, work):
    devices = devices_of(printed_slices(agent, simgpu_lib, GPUS[0], work))
    memory, cores = devices[0]["capacity"]["memory"], devices[0]["capacity"]["cores"]
    total = quantity(memory["value"])
    cases = [  # (capacity, request, what the scheduler consumes, why)
        (memory, None, total, "no amount: the default, the whole memory"),
        (memory, quantity("8Gi"), quantity("8Gi"), "8Gi: on the 1Mi grid"),
        (memory, quantity("8Gi") + 1, quantity("8Gi") + quantity("1Mi"), "rounded up one step"),
        (memory, quantity("100Mi"), quantity("256Mi"), "below min: min"),
        (memory, total, total, "the whole memory, named"),
        (memory, total + 1, None, "above max: not eligible"),
        (cores, None, 0, "no cores: the default, 0 (best-effort)"),
        (cores, Fraction(0), 0, "0 cores: best-effort, on the grid"),
        (cores, Fraction(30), 30, "30 cores"),
        (cores, Fraction(101), None, "101 cores: not eligible"),
    ]
    for capacity, request, expected, why in cases:
        got = consumed(capacity, request)
        if got != expected:
            fail(f"rules: {why}: consumed {got}, expected {expected}")
    one, gib = Device(devices[0]), quantity("1Gi")
    if one.take({"memory": gib, "cores": Fraction(100)}) is not None:
        fail("rules: one share of 1Gi and 100 cores does not fit an empty device")
    elif one.take({"memory": gib, "cores": Fraction(1)}) is None:
        fail("rules: a second share fitted next to one holding all 100 cores")
    if Device(devices[0]).take({"cores": Fraction(1)}) is not None or \
            Device(devices[0]).take({"memory": total}) is not None:
        fail("rules: a share that names one capacity does not fit an empty device")
    only_cores = Device(devices[0])
    only_cores.take({"cores": Fraction(1)})
    if only_cores.take({"memory": gib, "cores": Fraction(1)}) is None:
        fail("rules: a share naming no memory left memory for another (it takes the default)")
    print(f"rules: {len(cases)} consumption cases on the agent's H200 device, and a full device "
          "refuses another share")


def check_fit(samples, agent, simgpu_lib, work):
    slices = {gpus: printed_slices(agent, simgpu_lib, gpus, work) for gpus in GPUS}
    tenants = folder_objects(samples / "two-tenants")
    third = folder_objects(samples / "two-tenants" / "third")
    tenant_shares = [s for _, d in tenants if d["kind"] == "Pod"
                     for s in pod_shares(tenants, d, d["metadata"]["name"])]
    third_shares = [s for _, d in third if d["kind"] == "Pod"
                    for s in pod_shares(third, d, d["metadata"]["name"])]
    if len(tenant_shares) != 2 or len(third_shares) != 1:
        fail(f"fit: expected 2 tenants' shares and 1 third, found {len(tenant_shares)} and "
             f"{len(third_shares)}")
    for gpus, published in slices.items():
        name = gpus.split(",")[0][5:]
        device = devices_of(published)
        if len(device) != 1 or not device[0].get("allowMultipleAllocations"):
            fail(f"fit: {name}: expected one device with allowMultipleAllocations")
            continue
        gpu = [Device(device[0])]
        reason = allocate(gpu, tenant_shares)
        if reason:
            fail(f"fit: {name}: the two tenants do not fit: {reason}")
            continue
        used = ", ".join(f"{k} {mib(v)}/{mib(quantity(gpu[0].capacity[k]['value']))}"
                         for k, v in gpu[0].used.items())
        reason = allocate(gpu, third_shares)
        if reason is None:
            fail(f"fit: {name}: a third tenant fitted beside the two ({used})")
            continue
        print(f"fit: {name}: tenant-a + tenant-b fit ({used}); tenant-c does not: {reason}")
    for folder in ("one-share", "mps-share", "extended-resource"):
        docs = folder_objects(samples / folder)
        shares = [s for _, d in docs if d["kind"] == "Pod"
                  for s in pod_shares(docs, d, f"{folder}/{d['metadata']['name']}")]
        if not shares:
            fail(f"fit: {folder}: no share found")
        for gpus, published in slices.items():
            reason = allocate([Device(d) for d in devices_of(published)], shares)
            if reason:
                fail(f"fit: {folder} on {gpus.split(',')[0][5:]}: {reason}")
        print(f"fit: {folder}: {len(shares)} share(s) fit alone on each of the {len(GPUS)} GPUs")


# --- the chart --------------------------------------------------------------------------------

# The settings scripts/kind-demo.sh installs the chart with (besides the images).
CHART_SETTINGS = [f"deviceClasses.default.extendedResourceName={EXTENDED_RESOURCE}"]


def find_helm():
    tools = os.environ.get("TESSERA_CHART_TOOLS", "/opt/tessera/chart-tools")
    for helm in (os.path.join(tools, "bin", "helm"), shutil.which("helm")):
        if helm and os.access(helm, os.X_OK):
            return helm
    return None


def check_chart(samples, chart):
    if not (chart / "Chart.yaml").is_file():
        print(f"SKIPPED: no chart at {chart} (charts/tessera)")
        return 77
    helm = find_helm()
    if helm is None:
        print("SKIPPED: helm not found ($TESSERA_CHART_TOOLS/bin, /opt/tessera/chart-tools/bin or "
              "PATH; scripts/install-helm.sh installs it)")
        return 77
    wanted = set()
    for path in sorted(samples.rglob("*.yaml")):
        for doc in documents(path):
            spec = doc.get("spec", {})
            spec = spec.get("spec", spec) if doc["kind"] == "ResourceClaimTemplate" else spec
            for request in spec.get("devices", {}).get("requests", []) \
                    if doc["kind"] in ("ResourceClaim", "ResourceClaimTemplate") else []:
                wanted.add(request["exactly"]["deviceClassName"])
    for kube, extra in (("1.34.0", ["deviceClasses.extendedResourceGateEnabled=true"]),
                        ("1.36.0", [])):
        args = [helm, "template", "tessera", str(chart), "--namespace", "tessera-system",
                "--kube-version", kube]
        for setting in CHART_SETTINGS + extra:
            args += ["--set", setting]
        out = subprocess.run(args, capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            fail(f"chart: helm template for {kube}: {out.stderr.strip()}")
            continue
        failed_before = len(failures)
        classes = {d["metadata"]["name"]: d["spec"] for d in yaml.safe_load_all(out.stdout)
                   if d and d.get("kind") == "DeviceClass"}
        missing = wanted - set(classes)
        if missing:
            fail(f"chart ({kube}): the samples name DeviceClasses the chart does not make: "
                 f"{sorted(missing)} (it makes {sorted(classes)})")
        mps = classes.get("mps.vgpu.tessera.dev", {})
        strategies = [c.get("opaque", {}).get("parameters", {}).get("sharing", {}).get("strategy")
                      for c in mps.get("config", [])]
        if "MPS" not in strategies:
            fail(f"chart ({kube}): mps.vgpu.tessera.dev carries no VgpuConfig with MPS: {mps}")
        names = {spec.get("extendedResourceName") for spec in classes.values()}
        if EXTENDED_RESOURCE not in names:
            fail(f"chart ({kube}): no DeviceClass has extendedResourceName {EXTENDED_RESOURCE}")
        if len(failures) == failed_before:
            print(f"chart ({kube}): DeviceClasses {sorted(classes)}; the samples' {sorted(wanted)} "
                  f"are there, the MPS preset is MPS, {EXTENDED_RESOURCE} is the default class's")
    return 0


# --- the webhook ------------------------------------------------------------------------------

class FakeApi(BaseHTTPRequestHandler):
    """ResourceClaimTemplates only: POST stores (409 when present), GET answers them."""
    templates = {}
    path_pattern = re.compile(
        r"^/apis/resource\.k8s\.io/v1/namespaces/([^/]+)/resourceclaimtemplates(?:/([^/?]+))?")

    def log_message(self, *args):
        pass

    def answer(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def status(self, code, reason, message):
        self.answer(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                           "reason": reason, "message": message, "code": code})

    def do_POST(self):
        match = self.path_pattern.match(self.path)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if not match or match.group(2):
            return self.status(404, "NotFound", self.path)
        key = (match.group(1), body["metadata"]["name"])
        if key in self.templates:
            return self.status(409, "AlreadyExists", f"{key[1]} already exists")
        self.templates[key] = body
        self.answer(201, body)

    def do_GET(self):
        match = self.path_pattern.match(self.path)
        key = (match.group(1), match.group(2)) if match else None
        if key in self.templates:
            return self.answer(200, self.templates[key])
        self.status(404, "NotFound", self.path)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def admission_review(pod, namespace, uid):
    pod = json.loads(json.dumps(pod))
    for container in pod["spec"]["containers"]:
        resources = container.setdefault("resources", {})
        # As the API server stores the pod: quantities canonical, requests defaulted to limits.
        limits = {k: canonical(v) for k, v in resources.get("limits", {}).items()}
        resources["limits"] = limits
        resources.setdefault("requests", dict(limits))
    gvk = {"group": "", "version": "v1", "kind": "Pod"}
    gvr = {"group": "", "version": "v1", "resource": "pods"}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": uid, "kind": gvk, "resource": gvr, "requestKind": gvk,
                        "requestResource": gvr, "name": pod["metadata"]["name"],
                        "namespace": namespace, "operation": "CREATE",
                        "userInfo": {"username": "kubernetes-admin"}, "object": pod,
                        "oldObject": None, "dryRun": False,
                        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}}}


class RunningWebhook:
    """The real tessera-webhook over TLS on loopback, its API server the FakeApi above (which
    records the templates it creates)."""

    def __init__(self, webhook, work):
        work = Path(work)
        cert, key = work / "tls.crt", work / "tls.key"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        self.api = ThreadingHTTPServer(("127.0.0.1", 0), FakeApi)
        self.api.socket = context.wrap_socket(self.api.socket, server_side=True)
        threading.Thread(target=self.api.serve_forever, daemon=True).start()
        kubeconfig = work / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "samples",
            "clusters": [{"name": "fake", "cluster": {
                "server": f"https://127.0.0.1:{self.api.server_address[1]}",
                "certificate-authority": str(cert)}}],
            "users": [{"name": "test", "user": {"token": "sample-test"}}],
            "contexts": [{"name": "samples", "context": {"cluster": "fake", "user": "test"}}]}))
        self.port = free_port()
        self.server = subprocess.Popen(
            [webhook, "--listen", f"127.0.0.1:{self.port}", "--tls-cert-file", str(cert),
             "--tls-private-key-file", str(key), "--kubeconfig", str(kubeconfig),
             "--shutdown-delay-ms", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.client = ssl.create_default_context(cafile=str(cert))

    def __enter__(self):
        try:
            for _ in range(100):
                try:
                    urllib.request.urlopen(f"https://127.0.0.1:{self.port}/readyz",
                                           context=self.client, timeout=1)
                    return self
                except (urllib.error.URLError, ConnectionError, OSError):
                    if self.server.poll() is not None:
                        raise RuntimeError("tessera-webhook exited: " + self.server.stdout.read())
                    time.sleep(0.1)
            raise RuntimeError("tessera-webhook did not become ready")
        except BaseException:
            self.__exit__(None, None, None)
            raise

    def __exit__(self, *exc):
        self.server.terminate()
        self.server.wait(timeout=10)
        self.api.shutdown()

    def review(self, endpoint, review):
        """The webhook's AdmissionReview response for `review`."""
        request = urllib.request.Request(
            f"https://127.0.0.1:{self.port}{endpoint}", data=json.dumps(review).encode(),
            headers={"Content-Type": "application/json"})
        return json.load(urllib.request.urlopen(request, context=self.client,
                                                timeout=10))["response"]

    def mutated(self, pod, endpoint="/mutate"):
        """`pod` as the API server stores it after the webhook's patch; None when refused."""
        namespace = pod["metadata"]["namespace"]
        review = admission_review(pod, namespace, f"sample-{pod['metadata']['name']}")
        response = self.review(endpoint, review)
        if not response.get("allowed"):
            return None
        if "patch" not in response:
            return review["request"]["object"]
        return jsonpatch.apply_patch(review["request"]["object"],
                                     json.loads(base64.b64decode(response["patch"])))


def check_webhook(samples, webhook, agent, simgpu_lib, work):
    with RunningWebhook(webhook, work) as running:
        port, client = running.port, running.client
        h200 = printed_slices(agent, simgpu_lib, GPUS[0], work)
        for folder, endpoint, template in (("shorthand", "/mutate", "tessera-vgpu-1-m8gi-c30"),
                                           ("hami", "/mutate/hami", "tessera-vgpu-1-m3000mi-c30")):
            docs = folder_objects(samples / folder)
            pod = next(d for _, d in docs if d["kind"] == "Pod")
            namespace = pod["metadata"]["namespace"]
            review = admission_review(pod, namespace, f"sample-{folder}")
            request = urllib.request.Request(
                f"https://127.0.0.1:{port}{endpoint}", data=json.dumps(review).encode(),
                headers={"Content-Type": "application/json"})
            answer = json.load(urllib.request.urlopen(request, context=client, timeout=10))
            response = answer["response"]
            if not response.get("allowed") or "patch" not in response:
                fail(f"webhook: {folder}: not patched: {json.dumps(response)}")
                continue
            patch = json.loads(base64.b64decode(response["patch"]))
            mutated = jsonpatch.apply_patch(review["request"]["object"], patch)
            container = mutated["spec"]["containers"][0]
            left = [k for lst in ("limits", "requests")
                    for k in container.get("resources", {}).get(lst, {})
                    if k.startswith(("tessera.dev/", "nvidia.com/"))]
            claims = mutated["spec"].get("resourceClaims", [])
            names = [c.get("resourceClaimTemplateName") for c in claims]
            if left or names != [template]:
                fail(f"webhook: {folder}: keys left {left}, templates {names}, expected "
                     f"[{template}]")
                continue
            if [c["name"] for c in container["resources"].get("claims", [])] != \
                    [claims[0]["name"]]:
                fail(f"webhook: {folder}: the container does not claim {claims[0]['name']}")
            created = FakeApi.templates.get((namespace, template))
            if created is None:
                fail(f"webhook: {folder}: {template} was not created in {namespace}")
                continue
            readme = (samples / folder / "README.md").read_text()
            if template not in readme:
                fail(f"webhook: {folder}/README.md does not name {template}")
            shares = pod_shares(docs, mutated, folder, {template: created["spec"]["spec"]})
            requests = created["spec"]["spec"]["devices"]["requests"][0]["exactly"]
            reason = allocate([Device(d) for d in devices_of(h200)], shares)
            if reason:
                fail(f"webhook: {folder}: the created template does not fit an H200: {reason}")
            print(f"webhook: {folder}: {endpoint} patched the pod to claim {template} "
                  f"(created: {json.dumps(requests.get('capacity', {}))}, count "
                  f"{requests['count']}); it fits an H200")
        # HAMi names outside an opted-in namespace (/mutate) are NVIDIA's device plugin's.
        pod = next(d for _, d in folder_objects(samples / "hami") if d["kind"] == "Pod")
        review = admission_review(pod, "default", "sample-hami-not-opted-in")
        request = urllib.request.Request(
            f"https://127.0.0.1:{port}/mutate", data=json.dumps(review).encode(),
            headers={"Content-Type": "application/json"})
        response = json.load(urllib.request.urlopen(request, context=client, timeout=10))
        response = response["response"]
        if not response.get("allowed") or "patch" in response:
            fail(f"webhook: hami on /mutate was changed or refused: {json.dumps(response)}")
        else:
            print("webhook: hami on /mutate (a namespace without the label): allowed unchanged")


# --- quotas -----------------------------------------------------------------------------------

# kube-apiserver's quota names for claims (pkg/quota/v1/evaluator/core/resource_claims.go):
# ClaimObjectCountName, and V1ResourceByDeviceClass's suffix corev1.ResourceClaimsPerClass.
CLAIM_COUNT = "count/resourceclaims.resource.k8s.io"
PER_CLASS = ".deviceclass.resource.k8s.io/devices"
ALLOCATION_RESULTS_MAX_SIZE = 32  # resourceapi.AllocationResultsMaxSize: what "All" counts


def request_devices(exactly):
    """Devices a request (or subrequest) counts, with the API's defaults applied (the evaluator
    sees the stored claim): ExactCount of `count` (default 1), All as the most a claim can get."""
    mode = exactly.get("allocationMode", "ExactCount")
    if mode == "ExactCount":
        return int(exactly.get("count", 1))
    if mode == "All":
        return ALLOCATION_RESULTS_MAX_SIZE
    return 0  # an unknown mode counts nothing, as in the evaluator


def claim_quota_usage(spec):
    """claimEvaluator.Usage for a ResourceClaim spec: the claim itself, and per device class the
    devices its requests may get (a firstAvailable request: its largest alternative per class)."""
    usage = {CLAIM_COUNT: 1}
    for request in spec.get("devices", {}).get("requests", []):
        if request.get("firstAvailable"):
            most = {}
            for sub in request["firstAvailable"]:
                name = sub["deviceClassName"] + PER_CLASS
                most[name] = max(most.get(name, 0), request_devices(sub))
            for name, count in most.items():
                usage[name] = usage.get(name, 0) + count
        elif "exactly" in request:
            name = request["exactly"]["deviceClassName"] + PER_CLASS
            usage[name] = usage.get(name, 0) + request_devices(request["exactly"])
    return usage


def quota_admit(quota_name, hard, used, usage):
    """The quota plugin's check for one object (checkQuotas): the usage masked to what the quota
    names, zeros removed; refused when used + requested exceeds hard for any of those. Returns
    the refusal's message, or None and adds the usage to `used`."""
    requested = {k: v for k, v in usage.items() if k in hard and v != 0}
    new = {k: used.get(k, 0) + v for k, v in requested.items()}
    exceeded = sorted(k for k, v in new.items() if v > hard[k])
    if exceeded:
        show = lambda values: ",".join(f"{k}={values.get(k, 0)}" for k in exceeded)
        return (f"exceeded quota: {quota_name}, requested: {show(requested)}, used: {show(used)}, "
                f"limited: {show(hard)}")
    used.update(new)
    return None


def one_line(text):
    return " ".join(text.split())


def check_resource_quota(samples, webhook, work):
    folder = samples / "resource-quota"
    docs = folder_objects(folder)
    quota = next(d for _, d in docs if d["kind"] == "ResourceQuota")
    hard = {k: quantity(v) for k, v in quota["spec"]["hard"].items()}
    namespace = quota["metadata"]["namespace"]
    templates = {d["metadata"]["name"]: d["spec"]["spec"] for _, d in docs
                 if d["kind"] == "ResourceClaimTemplate"}
    claims = {d["metadata"]["name"]: d["spec"] for _, d in docs if d["kind"] == "ResourceClaim"}
    readme = one_line((folder / "README.md").read_text())
    pods = [d for _, d in docs if d["kind"] == "Pod"]  # in file order: pod-a, pod-b, pod-c
    outcomes = []
    used = {}
    with RunningWebhook(webhook, work) as running:
        for pod in pods:
            name = pod["metadata"]["name"]
            if pod["metadata"]["namespace"] != namespace:
                fail(f"quota: {name} is not in the quota's namespace {namespace}")
            mutated = running.mutated(pod)
            if mutated is None:
                fail(f"quota: the webhook refused {name}")
                continue
            keys = [k for c in mutated["spec"]["containers"]
                    for lst in ("limits", "requests")
                    for k in c.get("resources", {}).get(lst, {}) if k.startswith("tessera.dev/")]
            if keys:
                fail(f"quota: {name} still has {keys} after the webhook: a quota would see them")
            refused = None
            for entry in mutated["spec"].get("resourceClaims", []):
                if "resourceClaimTemplateName" in entry:
                    template = entry["resourceClaimTemplateName"]
                    spec = templates.get(template)
                    if spec is None:  # made by the webhook
                        created = FakeApi.templates.get((namespace, template))
                        spec = created["spec"]["spec"] if created else None
                    if spec is None:
                        fail(f"quota: {name}: template {template} is neither in the folder nor "
                             "created by the webhook")
                        continue
                    what = f"its claim from {template}"
                else:
                    spec, what = claims[entry["resourceClaimName"]], entry["resourceClaimName"]
                usage = claim_quota_usage(spec)
                refused = quota_admit(quota["metadata"]["name"], hard, used, usage)
                print(f"quota: {name}: {what} counts "
                      f"{json.dumps({k: int(v) for k, v in usage.items()})}: "
                      f"{'refused: ' + refused if refused else 'admitted'}")
            outcomes.append((name, refused))
    got = [(n, "refused" if r else "admitted") for n, r in outcomes]
    if got != [("quota-a", "admitted"), ("quota-b", "admitted"), ("quota-c", "refused")]:
        fail(f"quota: outcomes {got}; the README says quota-a and quota-b admitted, quota-c "
             "refused")
    for name, refused in outcomes:
        if refused and one_line(refused) not in readme:
            fail(f"quota: resource-quota/README.md does not quote the refusal of {name}: {refused}")
    print(f"quota: used {json.dumps({k: int(v) for k, v in used.items()})} of "
          f"{json.dumps({k: int(v) for k, v in hard.items()})}")


# Kueue's capacity-based DRA quota (KueueDRAIntegrationConsumableCapacity, pkg/dra in
# kubernetes-sigs/kueue: determineCapacityForPodSet, computeCapacityCharge, chargeForDevice,
# roundToPolicy): per ExactDeviceRequest of a mapped class, the explicit capacity request, else
# the device's requestPolicy.default, else its value; rounded to validValues (the smallest >=)
# or validRange (at least min, then min + k*step; above max the device is skipped); the largest
# over the matching devices, times count.

def kueue_round(base, policy):
    if not policy:
        return base
    if policy.get("validValues"):
        fitting = [v for v in map(quantity, policy["validValues"]) if v >= base]
        return min(fitting) if fitting else None
    valid = policy.get("validRange")
    if not valid:
        return base
    value = base
    if "min" in valid:
        value = max(value, quantity(valid["min"]))
        if "step" in valid and quantity(valid["step"]) > 0:
            low, step = quantity(valid["min"]), quantity(valid["step"])
            if (value - low) % step:
                value = low + (math.floor((value - low) / step) + 1) * step
    if "max" in valid and value > quantity(valid["max"]):
        return None
    return value


def kueue_charge(exactly, capacity_name, devices):
    """Kueue's charge for one ExactDeviceRequest, or a reason it cannot be admitted."""
    count = int(exactly.get("count", 1))
    if len(devices) < count:
        return None, f"insufficient matching devices: {len(devices)} match but {count} requested"
    explicit = exactly.get("capacity", {}).get("requests", {}).get(capacity_name)
    charges = []
    for device in devices:
        capacity = device.get("capacity", {}).get(capacity_name)
        if capacity is None:
            continue
        policy = capacity.get("requestPolicy")
        if explicit is not None:
            base = quantity(explicit)
        elif policy and "default" in policy:
            base = quantity(policy["default"])
        else:
            base = quantity(capacity["value"])
        rounded = kueue_round(base, policy)
        if rounded is not None:
            charges.append(rounded)
    if not charges:
        return None, f"no matching device can take {capacity_name} {explicit}"
    return max(charges) * count, None


def gib(value):
    return f"{int(value) // 2**30}Gi" if value % 2**30 == 0 else str(value)


def check_kueue(samples, agent, simgpu_lib, work):
    folder = samples / "kueue"
    readme = (folder / "README.md").read_text()
    marker = "<!-- kueue-configuration -->\n```yaml\n"
    if marker not in readme:
        fail("kueue: README.md has no Kueue Configuration block after its marker")
        return
    config = yaml.safe_load(readme.split(marker, 1)[1].split("\n```", 1)[0])
    if config.get("apiVersion") != "config.kueue.x-k8s.io/v1beta2" or \
            config.get("kind") != "Configuration":
        fail(f"kueue: the block is not a config.kueue.x-k8s.io/v1beta2 Configuration: {config}")
    if config.get("featureGates", {}).get("KueueDRAIntegrationConsumableCapacity") is not True:
        fail("kueue: the Configuration does not turn KueueDRAIntegrationConsumableCapacity on")
    slices = [s for gpus in GPUS for s in printed_slices(agent, simgpu_lib, gpus, work)]
    cluster = devices_of(slices)
    driver = slices[0]["spec"]["driver"]
    mappings = config.get("resources", {}).get("deviceClassMappings", [])
    by_class = {}
    for mapping in mappings:
        sources = mapping.get("sources", [])
        if len(sources) != 1 or "capacity" not in sources[0]:
            fail(f"kueue: mapping {mapping.get('name')}: expected one capacity source")
            continue
        source = sources[0]["capacity"]
        if source.get("driver") != driver:
            fail(f"kueue: capacity driver {source.get('driver')!r}, the agent publishes {driver!r}")
        selector = source.get("deviceSelector", {}).get("cel", {}).get("expression", "")
        if selector.replace('"', "'") != f"device.driver == '{driver}'":
            fail(f"kueue: deviceSelector {selector!r} is not the agent's driver {driver!r}")
        if any(source.get("name") not in d.get("capacity", {}) for d in cluster):
            fail(f"kueue: capacity {source.get('name')!r} is not one the agent publishes "
                 f"({sorted(cluster[0].get('capacity', {}))})")
        for cls in mapping.get("deviceClassNames", []):
            if cls not in DEVICE_CLASSES:
                fail(f"kueue: class {cls} is not one of the chart's {sorted(DEVICE_CLASSES)}")
            if cls in by_class:
                fail(f"kueue: class {cls} is mapped twice (Kueue refuses that)")
            by_class[cls] = (mapping["name"], source.get("name"))
    docs = folder_objects(folder)
    kinds = {d["kind"]: d for _, d in docs}
    cq, lq = kinds.get("ClusterQueue"), kinds.get("LocalQueue")
    if not cq or not lq or "ResourceFlavor" not in kinds:
        fail("kueue: queues.yaml needs a ResourceFlavor, a ClusterQueue and a LocalQueue")
        return
    if lq["spec"].get("clusterQueue") != cq["metadata"]["name"]:
        fail(f"kueue: LocalQueue {lq['metadata']['name']} points to "
             f"{lq['spec'].get('clusterQueue')}, not {cq['metadata']['name']}")
    quota = {}
    for group in cq["spec"]["resourceGroups"]:
        for flavor in group["flavors"]:
            if flavor["name"] != kinds["ResourceFlavor"]["metadata"]["name"]:
                fail(f"kueue: ClusterQueue flavor {flavor['name']} is not the ResourceFlavor")
            for resource in flavor["resources"]:
                if resource["name"] not in group["coveredResources"]:
                    fail(f"kueue: {resource['name']} is not in coveredResources")
                quota[resource["name"]] = (flavor["name"], quantity(resource["nominalQuota"]))
    templates = {d["metadata"]["name"]: d["spec"]["spec"] for _, d in docs
                 if d["kind"] == "ResourceClaimTemplate"}
    used, outcomes = {}, []
    for job in (d for _, d in docs if d["kind"] == "Job"):
        name = job["metadata"]["name"]
        if job["metadata"].get("labels", {}).get("kueue.x-k8s.io/queue-name") != \
                lq["metadata"]["name"] or job["metadata"]["namespace"] != lq["metadata"]["namespace"]:
            fail(f"kueue: Job {name} is not queued in LocalQueue {lq['metadata']['name']}")
        charge = {}
        for entry in job["spec"]["template"]["spec"].get("resourceClaims", []):
            template = entry.get("resourceClaimTemplateName")
            if template is None:
                fail(f"kueue: Job {name} names a ResourceClaim; Kueue charges only templates")
                continue
            for request in templates[template]["devices"]["requests"]:
                exactly = request.get("exactly")
                if exactly is None or exactly["deviceClassName"] not in by_class:
                    fail(f"kueue: Job {name}: request {request['name']} is not an exactly "
                         "request of a mapped class")
                    continue
                resource, capacity_name = by_class[exactly["deviceClassName"]]
                amount, why = kueue_charge(exactly, capacity_name, cluster)
                if why:
                    fail(f"kueue: Job {name}: {why}")
                    continue
                charge[resource] = charge.get(resource, 0) + amount
        lacks = {}
        for resource, amount in charge.items():
            if resource not in quota:
                lacks[resource] = f"resource {resource} unavailable in ClusterQueue"
                continue
            flavor, nominal = quota[resource]
            if used.get(resource, 0) + amount > nominal:
                lacks[resource] = (f"insufficient unused quota for {resource} in flavor {flavor}, "
                                   f"{gib(used.get(resource, 0) + amount - nominal)} more needed")
        if not lacks:
            for resource, amount in charge.items():
                used[resource] = used.get(resource, 0) + amount
        outcomes.append((name, "pending" if lacks else "admitted"))
        print(f"kueue: {name} is charged {json.dumps({k: gib(v) for k, v in charge.items()})}: "
              f"{'; '.join(lacks.values()) if lacks else 'admitted'}")
        text = one_line(readme)
        for resource, amount in charge.items():
            if not lacks and f'"{resource}": "{gib(amount)}"' not in text:
                fail(f"kueue: README.md does not show {name}'s resourceUsage "
                     f'{{"{resource}": "{gib(amount)}"}}')
        for message in lacks.values():
            if one_line(message) not in text:
                fail(f"kueue: README.md does not say why {name} waits: {message}")
    if outcomes != [("kueue-a", "admitted"), ("kueue-b", "admitted"), ("kueue-c", "pending")]:
        fail(f"kueue: outcomes {outcomes}; the README says kueue-a and kueue-b admitted, kueue-c "
             "pending")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("check", choices=["consistent", "rules", "fit", "chart", "webhook",
                                          "resource-quota", "kueue"])
    parser.add_argument("--chart", type=Path, help="the chart folder (default: charts/tessera "
                        "beside samples/)")
    parser.add_argument("--samples", required=True, type=Path)
    parser.add_argument("--agent")
    parser.add_argument("--webhook")
    parser.add_argument("--simgpu-lib")
    args = parser.parse_args()
    if args.check == "chart":
        chart = args.chart or args.samples.parent.parent / "charts" / "tessera"
        code = check_chart(args.samples, chart)
        if code == 77:
            return 77
    with tempfile.TemporaryDirectory() as work:
        if args.check == "chart":
            pass
        elif args.check == "consistent":
            check_consistent(args.samples)
        elif args.check == "rules":
            check_rules(args.agent, args.simgpu_lib, work)
        elif args.check == "fit":
            check_fit(args.samples, args.agent, args.simgpu_lib, work)
        elif args.check == "resource-quota":
            check_resource_quota(args.samples, args.webhook, work)
        elif args.check == "kueue":
            check_kueue(args.samples, args.agent, args.simgpu_lib, work)
        else:
            check_webhook(args.samples, args.webhook, args.agent, args.simgpu_lib, work)
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

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

# The names the chart creates (charts/tessera): the default class, the MPS preset, the extended
# resource name the default class is given for the extended-resource sample.
DEVICE_CLASSES = {"vgpu.tessera.dev", "mps.vgpu.tessera.dev"}
EXTENDED_RESOURCE = "vgpu.tessera.dev/gpu"
# The image the samples run: the name scripts/build-images.sh gives, with its default tag, the
# chart's appVersion (also the chart's default image tag).
CHART_YAML = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "charts",
                          "tessera", "Chart.yaml")
with open(CHART_YAML, encoding="utf-8") as chart_file:
    APP_VERSION = re.search(r'^appVersion:\s*"?([^"\s]+)"?\s*$', chart_file.read(), re.M).group(1)
SAMPLE_IMAGE = f"localhost/tessera-node-agent:{APP_VERSION}"
NAMESPACED = {"ResourceClaimTemplate", "ResourceClaim", "Pod", "Deployment"}
KNOWN_KINDS = {("v1", "Namespace"), ("v1", "Pod"), ("apps/v1", "Deployment"),
               ("resource.k8s.io/v1", "ResourceClaimTemplate"),
               ("resource.k8s.io/v1", "ResourceClaim")}
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
            if doc["kind"] != "Pod":
                continue
            spec = doc["spec"]
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


def check_webhook(samples, webhook, agent, simgpu_lib, work):
    work = Path(work)
    cert, key = work / "tls.crt", work / "tls.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    api = ThreadingHTTPServer(("127.0.0.1", 0), FakeApi)
    api.socket = context.wrap_socket(api.socket, server_side=True)
    threading.Thread(target=api.serve_forever, daemon=True).start()
    kubeconfig = work / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "samples",
        "clusters": [{"name": "fake", "cluster": {
            "server": f"https://127.0.0.1:{api.server_address[1]}",
            "certificate-authority": str(cert)}}],
        "users": [{"name": "test", "user": {"token": "sample-test"}}],
        "contexts": [{"name": "samples", "context": {"cluster": "fake", "user": "test"}}]}))
    port = free_port()
    server = subprocess.Popen([webhook, "--listen", f"127.0.0.1:{port}", "--tls-cert-file",
                               str(cert), "--tls-private-key-file", str(key), "--kubeconfig",
                               str(kubeconfig), "--shutdown-delay-ms", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    client = ssl.create_default_context(cafile=str(cert))
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", context=client,
                                       timeout=1)
                break
            except (urllib.error.URLError, ConnectionError, OSError):
                if server.poll() is not None:
                    raise RuntimeError("tessera-webhook exited: " + server.stdout.read())
                time.sleep(0.1)
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
    finally:
        server.terminate()
        server.wait(timeout=10)
        api.shutdown()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("check", choices=["consistent", "rules", "fit", "chart", "webhook"])
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
        else:
            check_webhook(args.samples, args.webhook, args.agent, args.simgpu_lib, work)
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

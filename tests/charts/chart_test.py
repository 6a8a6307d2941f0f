#!/usr/bin/env python3
"""Tests of charts/tessera with helm, the Kubernetes 1.34 and 1.36 schemas and the RBAC check.

    chart_test.py --repo REPO --tools DIR CHECK

CHECK is one of:
  variants        helm lint and helm template of the default values and every ci/*-values.yaml,
                  each rendered for Kubernetes 1.34 and 1.36 (a file's "# kube-versions:" line
                  narrows that, "# helm-args:" adds flags such as --api-versions), every object
                  validated against that release's schema (validate_manifests.py), and what the
                  chart promises checked in the default rendering
  contradictions  each contradictory combination of values fails with its message
  values          typed values as users give them: an all-digit image tag from --set (int64) and
                  from a values file (float64) rendered as that tag, checkInterval 0.5, and the
                  default images equal to what scripts/build-images.sh builds by default
  determinism     helm template twice gives byte-identical output in every TLS mode but helm
                  (whose genCA the comparison must catch), so a GitOps sync changes nothing
  rbac            the rendered roles grant exactly the API calls of the agent's and webhook's code
                  (default selfManaged TLS, cert-manager and a provided Secret)
  rbac-drift      rbac_check.py fails on a role with a rule too many or too few, and on a source
                  tree with a call the roles lack
  validator       validate_manifests.py refuses broken objects, each with its reason
  cel             the webhooks' matchConditions and the ResourceSlice policy evaluated on sample
                  requests (@marcbachmann/cel-js): pods without GPU requests never reach the
                  webhook, claims without a VgpuConfig never reach /validate, an agent writes
                  only its own node's slices
  cel-webhook     the pod conditions against the real tessera-webhook (--webhook): a claim pod
                  they do not send is one the webhook passes unchanged even with a Tessera claim,
                  one they send for a policy reason is one it refuses or warns about
  webhook-doc     docs/webhook.md shows the webhook configurations as the chart renders them
  samples         every samples/k8s/**/*.yaml validates against 1.34 and 1.36 (skipped, exit 77,
                  while there are none)
"""
import argparse
import glob
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import yaml

KUBE_VERSIONS = ("1.34", "1.36")
HERE = os.path.dirname(os.path.abspath(__file__))
NAMESPACE = "tessera-system"
SKIP = 77


class Failure(Exception):
    pass


class Context:
    def __init__(self, repo, tools):
        self.repo = repo
        self.tools = tools
        self.chart = os.path.join(repo, "charts", "tessera")
        self.helm = os.path.join(tools, "bin", "helm")
        if not os.access(self.helm, os.X_OK):
            raise Failure(f"no helm at {self.helm}: run scripts/install-helm.sh")

    def run(self, argv, check=True):
        result = subprocess.run(argv, capture_output=True, text=True)
        if check and result.returncode != 0:
            raise Failure(f"{' '.join(argv)} failed ({result.returncode}):\n{result.stdout}{result.stderr}")
        return result

    def template(self, kube_version, values_files=(), sets=(), extra=(), check=True):
        argv = [self.helm, "template", "tessera", self.chart, "--namespace", NAMESPACE,
                "--kube-version", f"{kube_version}.0"]
        for f in values_files:
            argv += ["-f", f]
        for s in sets:
            argv += ["--set", s]
        return self.run(argv + list(extra), check=check)

    def validate(self, kube_version, paths):
        result = self.run([sys.executable, os.path.join(HERE, "validate_manifests.py"),
                           "--kube-version", kube_version, "--tools", self.tools] + list(paths),
                          check=False)
        return result

    def variants(self):
        files = sorted(glob.glob(os.path.join(self.chart, "ci", "*-values.yaml")))
        if not files:
            raise Failure("no ci/*-values.yaml variants")
        return [("default", None)] + [(os.path.basename(f)[:-len("-values.yaml")], f) for f in files]


def header(path, key):
    if path is None:
        return None
    for line in open(path, encoding="utf-8"):
        if line.startswith(f"# {key}:"):
            return line.split(":", 1)[1].split()
    return None


def objects(text):
    return [d for d in yaml.safe_load_all(text) if d]


def find(docs, kind, name_suffix="", exact=False):
    found = [d for d in docs if d["kind"] == kind and (d["metadata"]["name"] == name_suffix if exact
                                                       else d["metadata"]["name"].endswith(name_suffix))]
    if len(found) != 1:
        raise Failure(f"expected one {kind} named {'' if exact else '*'}{name_suffix}, found {len(found)}")
    return found[0]


def expect(condition, message):
    if not condition:
        raise Failure(message)


def schedules_on(pod_spec, labels):
    """Whether kube-scheduler's NodeAffinity filter admits a node with `labels`: every nodeSelector
    label, and one of the required nodeSelectorTerms (ORed) whose matchExpressions all hold
    (k8s.io/component-helpers/scheduling/corev1/nodeaffinity: In, NotIn, Exists, DoesNotExist,
    Gt, Lt; a term without expressions matches nothing)."""
    if any(labels.get(k) != v for k, v in pod_spec.get("nodeSelector", {}).items()):
        return False
    required = (pod_spec.get("affinity", {}).get("nodeAffinity", {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if not required:
        return True

    def holds(e):
        key, op, values = e["key"], e["operator"], e.get("values", [])
        if op == "In":
            return key in labels and labels[key] in values
        if op == "NotIn":
            return key not in labels or labels[key] not in values
        if op == "Exists":
            return key in labels
        if op == "DoesNotExist":
            return key not in labels
        if op in ("Gt", "Lt"):
            if key not in labels or not labels[key].lstrip("-").isdigit():
                return False
            return int(labels[key]) > int(values[0]) if op == "Gt" else int(labels[key]) < int(values[0])
        raise Failure(f"unknown node selector operator {op}")

    return any(term.get("matchExpressions") and all(holds(e) for e in term["matchExpressions"])
               for term in required["nodeSelectorTerms"])


def check_promises(ctx, docs):
    """What the chart promises, in the default rendering."""
    ds = find(docs, "DaemonSet")
    spec = ds["spec"]["template"]["spec"]
    expect(spec.get("hostPID") is True, "the agent needs hostPID")
    # GPU nodes as NVIDIA's device plugin chart finds them: NFD's labels or GFD's (docs/coexistence.md).
    expect("nodeSelector" not in spec, f"no nodeSelector by default: {spec.get('nodeSelector')}")
    for labels, runs in (({"feature.node.kubernetes.io/pci-10de.present": "true"}, True),  # NFD alone
                         ({"feature.node.kubernetes.io/cpu-model.vendor_id": "NVIDIA"}, True),  # Tegra
                         ({"nvidia.com/gpu.present": "true"}, True),  # GFD / the GPU Operator
                         ({"feature.node.kubernetes.io/pci-10de.present": "false"}, False),
                         ({"kubernetes.io/os": "linux"}, False)):  # a CPU node
        expect(schedules_on(spec, labels) == runs,
               f"the agent {'should' if runs else 'should not'} run on a node labelled {labels}")
    rolling = ds["spec"]["updateStrategy"]
    expect(rolling["type"] == "RollingUpdate" and rolling["rollingUpdate"]["maxSurge"] == 1
           and rolling["rollingUpdate"]["maxUnavailable"] == 0, "maxSurge rolling update")
    agent = spec["containers"][0]
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in agent["env"]}
    expect(env.get("POD_UID") == "metadata.uid" and env.get("NODE_NAME") == "spec.nodeName",
           "POD_UID and NODE_NAME from the downward API")
    expect(agent["livenessProbe"]["httpGet"]["path"] == "/healthz" and agent["readinessProbe"],
           "liveness and readiness on /healthz")
    expect(agent["resources"].get("requests") and agent["resources"].get("limits"), "resources")
    mounts = {m["mountPath"]: m for m in agent["volumeMounts"]}
    for path in ("/var/lib/tessera", "/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins",
                 "/var/run/cdi", "/etc/cdi", "/usr/local/tessera/lib", "/run/nvidia/driver", "/dev",
                 "/sys/fs/cgroup"):
        expect(path in mounts, f"the agent mounts {path}")
    volumes = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"]}
    # The watcher in auto mode must not need BTF: no hostPath for it at all (a type Directory one
    # keeps the pod from starting where the kernel has none; without a type, or DirectoryOrCreate,
    # containerd and kubelet try to create it in sysfs, which fails too).
    expect("/sys/kernel/btf" not in mounts and "/sys/kernel/btf" not in volumes.values(),
           "no /sys/kernel/btf hostPath while the process watcher is auto")
    expect("--process-watch=auto" in agent["args"], f"--process-watch=auto: {agent['args']}")
    for m in agent["volumeMounts"]:
        expect(volumes[m["name"]] == m["mountPath"] or m["mountPath"] == "/host-shim",
               f"{m['mountPath']} is mounted at its host path ({volumes[m['name']]})")
    args = agent["args"]
    # MPS daemons go to a host cgroup outside the agent's container: the host's cgroups writable.
    expect(mounts["/sys/fs/cgroup"].get("readOnly") is False, "/sys/fs/cgroup writable for MPS daemons")
    for flag in ("--mps-daemon-cgroup=/sys/fs/cgroup/tessera-mps",
                 "--shim-path=/usr/local/tessera/lib/libvgpu.so", "--state-dir=/var/lib/tessera",
                 "--driver-root=/run/nvidia/driver", "--toolkit-spec-dirs=/etc/cdi,/var/run/cdi",
                 "--metrics-address=:9464"):
        expect(flag in args, f"agent flag {flag}")
    init = spec["initContainers"][0]
    script = init["args"][0]
    expect(re.search(r'cp "\$source" "\$temporary".*sync "\$temporary".*mv -f "\$temporary" "\$target".*sync /host-shim',
                     script, re.S), "the shim is installed by new file, fsync, rename, fsync of the folder")
    expect(init["volumeMounts"][0]["mountPath"] == "/host-shim"
           and volumes[init["volumeMounts"][0]["name"]] == "/usr/local/tessera/lib", "shim host folder")
    # The installer only copies a file into the root-owned host folder: root as its owner, nothing
    # else (run so under podman with the image's tools: docs/install.md, "Images").
    expect(init["securityContext"] == {"runAsUser": 0, "runAsNonRoot": False, "privileged": False,
                                       "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                       "capabilities": {"drop": ["ALL"]}},
           f"least privilege for install-shim: {init['securityContext']}")
    expect(len(init["volumeMounts"]) == 1, "install-shim mounts only the shim folder")
    expect(spec["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}},
           f"the agent pod's securityContext: {spec.get('securityContext')}")
    images = [c["image"] for c in spec["initContainers"] + spec["containers"]]
    deployment = find(docs, "Deployment")
    expect(deployment["spec"]["replicas"] == 2, "two webhook replicas")
    webhook_pod = deployment["spec"]["template"]["spec"]
    expect(webhook_pod["securityContext"] == {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                                              "seccompProfile": {"type": "RuntimeDefault"}},
           f"the webhook pod's securityContext: {webhook_pod.get('securityContext')}")
    images.append(webhook_pod["containers"][0]["image"])
    built = ctx.run([os.path.join(ctx.repo, "scripts", "build-images.sh"), "--print-images"]).stdout.split()
    expect(sorted(set(images)) == sorted(built),
           f"the default images {sorted(set(images))} are the ones build-images.sh makes: {built}")
    chart = yaml.safe_load(open(os.path.join(ctx.chart, "Chart.yaml")))
    expect(chart["version"] == chart["appVersion"] and all(i.endswith(":" + chart["appVersion"]) for i in images),
           f"images tagged with the chart's version {chart['version']}/{chart['appVersion']}: {images}")
    accounts = {d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"}
    expect(accounts == {spec["serviceAccountName"], webhook_pod["serviceAccountName"]},
           f"both service accounts made: {accounts}")
    expect(not [d for d in docs if d["kind"] == "Namespace"], "no Namespace unless namespace.create")
    pdb = find(docs, "PodDisruptionBudget")
    expect(pdb["spec"]["minAvailable"] == 1, "PDB minAvailable 1")
    mutating = find(docs, "MutatingWebhookConfiguration")
    validating = find(docs, "ValidatingWebhookConfiguration")
    for hook in mutating["webhooks"] + validating["webhooks"]:
        excluded = hook["namespaceSelector"]["matchExpressions"][0]
        expect(excluded["key"] == "kubernetes.io/metadata.name" and excluded["operator"] == "NotIn"
               and {"kube-system", NAMESPACE} <= set(excluded["values"]),
               f"{hook['name']} excludes kube-system and its own namespace")
        expect(hook["failurePolicy"] == "Fail" and hook.get("matchConditions"),
               f"{hook['name']}: failurePolicy Fail, narrowed by matchConditions")
        # selfManaged: the webhook sets the caBundle; a rendered one would be reset by each sync.
        expect("caBundle" not in hook["clientConfig"], f"{hook['name']}: no caBundle rendered")
    check_self_managed_tls(docs)

    classes = {d["metadata"]["name"]: d for d in docs if d["kind"] == "DeviceClass"}
    expect(set(classes) == {"vgpu.tessera.dev", "mps.vgpu.tessera.dev", "mig.vgpu.tessera.dev"},
           f"DeviceClasses {set(classes)}")
    mig_selector = classes["mig.vgpu.tessera.dev"]["spec"]["selectors"][0]["cel"]["expression"]
    expect(mig_selector == 'device.driver == "vgpu.tessera.dev" && '
                          'device.attributes["vgpu.tessera.dev"].type == "mig"',
           f"the MIG class selects MIG instances only: {mig_selector}")
    default_selector = classes["vgpu.tessera.dev"]["spec"]["selectors"][0]["cel"]["expression"]
    expect(default_selector == 'device.driver == "vgpu.tessera.dev" && '
                               'device.attributes["vgpu.tessera.dev"].type == "gpu"',
           f"the default class selects whole GPUs only, never a MIG instance: {default_selector}")
    mps_selector = classes["mps.vgpu.tessera.dev"]["spec"]["selectors"][0]["cel"]["expression"]
    expect(mps_selector == default_selector,
           f"the MPS preset selects whole GPUs only, as the default class: {mps_selector}")
    webhook_classes = [a for a in find(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
                       if a.startswith("--device-class=")]
    expect(webhook_classes == ["--device-class=vgpu.tessera.dev,mps.vgpu.tessera.dev,mig.vgpu.tessera.dev"],
           f"the webhook knows every class's claims as Tessera's: {webhook_classes}")
    mps = classes["mps.vgpu.tessera.dev"]["spec"]["config"][0]["opaque"]["parameters"]
    expect(mps["sharing"] == {"strategy": "MPS"}, "the MPS preset")
    expect("extendedResourceName" not in classes["vgpu.tessera.dev"]["spec"], "no extended resource by default")
    webhook_args = find(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    expect(not [a for a in webhook_args if a.startswith("--extended-resource-name")],
           f"no extended resource for the webhook to police by default: {webhook_args}")

    policy = find(docs, "ValidatingAdmissionPolicy")
    expect("authentication.kubernetes.io/node-name" in json.dumps(policy), "per-node slice policy")
    find(docs, "ValidatingAdmissionPolicyBinding")
    dashboard = find(docs, "ConfigMap", "-dashboard")
    expect(dashboard["metadata"]["labels"].get("grafana_dashboard") == "1", "grafana sidecar label")
    shipped = json.load(open(os.path.join(ctx.chart, "dashboards", "tessera-gpu-sharing.json")))
    expect(json.loads(dashboard["data"]["tessera-gpu-sharing.json"]) == shipped, "the dashboard as shipped")
    check_notes(ctx, images)


def notes(ctx, *sets):
    """NOTES.txt as helm install prints it (helm template leaves NOTES out); --dry-run=client needs no cluster."""
    argv = [ctx.helm, "install", "tessera", ctx.chart, "--namespace", NAMESPACE, "--dry-run=client"]
    for s in sets:
        argv += ["--set", s]
    out = ctx.run(argv).stdout
    expect("NOTES:" in out, f"no NOTES in helm install's output:\n{out[-2000:]}")
    return out.split("NOTES:", 1)[1]


def check_notes(ctx, images):
    text = notes(ctx)
    for image in set(images):
        expect(image in text, f"NOTES name the image {image}:\n{text}")
    for line in ("scripts/build-images.sh --save out/\n",
                 "ctr -n k8s.io images import out/tessera-node-agent-0.1.0.tar",
                 "ctr -n k8s.io images import out/tessera-webhook-0.1.0.tar",
                 "kind load image-archive out/tessera-node-agent-0.1.0.tar",
                 "kind load image-archive out/tessera-webhook-0.1.0.tar",
                 f"kubectl label namespace {NAMESPACE} pod-security.kubernetes.io/enforce=privileged"):
        expect(line in text, f"NOTES lack {line!r}:\n{text}")
    text = notes(ctx, "namespace.create=true", "agent.image.repository=registry.example.com/t/agent",
                 "agent.image.tag=1234567")
    expect("registry.example.com/t/agent:1234567" in text and "out/tessera-node-agent" not in text
           and "scripts/build-images.sh --only webhook --save out/\n" in text
           and "images import out/tessera-webhook-0.1.0.tar" in text
           and "kind load image-archive out/tessera-webhook-0.1.0.tar" in text,
           f"NOTES: building and loading steps for the local webhook image only, at its own tag:\n{text}")
    # build-images.sh gives one tag to what it builds, and names the archives by it: each image's
    # file carries that image's tag.
    text = notes(ctx, "webhook.image.tag=v3")
    for line in ("scripts/build-images.sh --only node-agent --save out/", "scripts/build-images.sh --only webhook --tag v3 --save out/",
                 "images import out/tessera-node-agent-0.1.0.tar", "images import out/tessera-webhook-v3.tar",
                 "kind load image-archive out/tessera-webhook-v3.tar"):
        expect(line in text, f"NOTES with webhook.image.tag=v3 lack {line!r}:\n{text}")
    text = notes(ctx, "agent.image.tag=v2", "webhook.image.tag=v2")
    for line in ("scripts/build-images.sh --tag v2 --save out/", "images import out/tessera-node-agent-v2.tar",
                 "images import out/tessera-webhook-v2.tar", "kind load image-archive out/tessera-webhook-v2.tar"):
        expect(line in text, f"NOTES with both tags v2 lack {line!r}:\n{text}")
    text = notes(ctx, "agent.image.repository=localhost/my-agent")
    expect("names the agent's image localhost/tessera-node-agent, not localhost/my-agent" in text,
           f"NOTES: a localhost/ repository build-images.sh does not make:\n{text}")
    text = notes(ctx, "namespace.create=true")
    expect("kubectl label namespace" not in text and f"labelled {NAMESPACE} pod-security.kubernetes.io/enforce=privileged" in text,
           f"NOTES with namespace.create:\n{text}")


def check_variants(ctx):
    renderings = {version: [] for version in KUBE_VERSIONS}  # release -> rendered files
    with tempfile.TemporaryDirectory() as directory:
        for name, values in ctx.variants():
            files = [values] if values else []
            for kube_version in header(values, "kube-versions") or KUBE_VERSIONS:
                # In the release namespace: the chart refuses default (a webhook-free namespace).
                lint = ctx.run([ctx.helm, "lint", ctx.chart, "--strict", "--kube-version", f"{kube_version}.0",
                                "--namespace", NAMESPACE]
                               + sum((["-f", f] for f in files), []))
                # helm lint logs a template's fail() and passes; a variant that needs no
                # --api-versions (which lint cannot take) must not hit one.
                if not header(values, "helm-args") and "funcMap fail" in lint.stdout + lint.stderr:
                    raise Failure(f"variant {name}: helm lint hit a fail():\n{lint.stdout}{lint.stderr}")
                rendered = ctx.template(kube_version, files, extra=header(values, "helm-args") or [])
                docs = objects(rendered.stdout)
                path = os.path.join(directory, f"{name}-{kube_version}.yaml")
                with open(path, "w") as out:
                    out.write(rendered.stdout)
                renderings[kube_version].append(path)
                check_variant(ctx, name, docs)
                print(f"ok: variant {name}, Kubernetes {kube_version}: helm lint, {len(docs)} objects rendered")
        # One validator run per release over all renderings (node starts once).
        for kube_version, paths in renderings.items():
            result = ctx.validate(kube_version, paths)
            if result.returncode != 0:
                raise Failure(f"Kubernetes {kube_version}:\n{result.stdout}{result.stderr}")
            print(f"ok: {len(paths)} renderings valid for Kubernetes {kube_version}: {result.stderr.strip()}")


def check_variant(ctx, name, docs):
    if name == "default":
        check_promises(ctx, docs)
    if name == "agent-settings":  # every row of the agent's flag table, and the webhook's logs
        args = find(docs, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]["args"]
        for flag in ("--reconcile-interval=30", "--device-poll-interval=15", "--check-interval=0.5",
                     "--enforcement-default=report", "--api-socket=/var/lib/tessera/api.sock",
                     "--log-format=json", "--mps-control=/usr/bin/nvidia-cuda-mps-control",
                     "--nvidia-smi=/usr/bin/nvidia-smi", "--shim-loading=LD_PRELOAD", "--api-socket-mode=0660"):
            expect(flag in args, f"agent flag {flag} in {args}")
        expect(args.count("-v") == 1, f"verbosity 1 is one -v: {args}")
        pod_spec = find(docs, "DaemonSet")["spec"]["template"]["spec"]
        for c in pod_spec["initContainers"] + pod_spec["containers"]:
            expect(c["image"] == "localhost/tessera-node-agent:1234567", f"an all-digit tag from a values file: {c['image']}")
        webhook = find(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
        expect("--log-format=json" in webhook and webhook.count("-v") == 2, f"webhook log flags: {webhook}")
    if name == "service-monitor":
        monitor = find(docs, "ServiceMonitor")
        expect(all(e["honorLabels"] is True for e in monitor["spec"]["endpoints"]), "honorLabels")
    if name.startswith("extended-resource"):
        spec = find(docs, "DeviceClass", "vgpu.tessera.dev", exact=True)["spec"]
        expect(spec.get("extendedResourceName") == "vgpu.tessera.dev/gpu", "extendedResourceName")
        webhook_args = find(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
        expect("--extended-resource-name=vgpu.tessera.dev/gpu" in webhook_args,
               f"the webhook polices pods asking for the extended resource: {webhook_args}")
    if name.startswith("tls-") and "cert-manager" in name:
        check_cert_manager_chain(docs)
    if name == "tls-helm":
        secret = find(docs, "Secret", "-tls")
        for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            for hook in find(docs, kind)["webhooks"]:
                expect(secret["data"]["ca.crt"] == hook["clientConfig"]["caBundle"],
                       f"{hook['name']}: the generated Secret's CA is the caBundle")
        args = find(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
        expect("--tls-cert-file=/etc/tessera-webhook/tls/tls.crt" in args
               and not [a for a in args if a.startswith("--tls-secret-name")], f"helm mode: files: {args}")
    if name == "namespace-create":
        namespace = find(docs, "Namespace", NAMESPACE, exact=True)
        labels = namespace["metadata"]["labels"]
        expect(labels.get("pod-security.kubernetes.io/enforce") == "privileged" and labels.get("team") == "gpu-platform",
               f"the release namespace with Pod Security level privileged: {labels}")
        expect(namespace["metadata"]["annotations"].get("helm.sh/resource-policy") == "keep", "kept on uninstall")
    if name == "existing-service-accounts":
        expect(not [d for d in docs if d["kind"] == "ServiceAccount"], "no ServiceAccount with create: false")
        pod_accounts = {find(docs, "DaemonSet")["spec"]["template"]["spec"]["serviceAccountName"],
                        find(docs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]}
        bound = {s["name"] for d in docs if d["kind"] == "ClusterRoleBinding" for s in d["subjects"]}
        expect(pod_accounts == bound == {"gpu-node-agent", "gpu-webhook"}, f"pods {pod_accounts}, bindings {bound}")
    if name == "process-watch-required":
        spec = find(docs, "DaemonSet")["spec"]["template"]["spec"]
        btf = [v for v in spec["volumes"] if v.get("hostPath", {}).get("path") == "/sys/kernel/btf"]
        expect(len(btf) == 1 and btf[0]["hostPath"]["type"] == "Directory", f"the BTF hostPath: {btf}")
        expect("--process-watch=on" in spec["containers"][0]["args"], "--process-watch=on")
        # With mpsDaemons.cgroup empty the MPS daemons stay in the agent's container: no flag, and
        # the watcher's cgroup mount read-only.
        agent = spec["containers"][0]
        expect(not [a for a in agent["args"] if a.startswith("--mps-daemon-cgroup")],
               f"no --mps-daemon-cgroup: {agent['args']}")
        cgroup = [m for m in agent["volumeMounts"] if m["mountPath"] == "/sys/fs/cgroup"]
        expect(len(cgroup) == 1 and cgroup[0].get("readOnly") is True, f"read-only cgroup mount: {cgroup}")
    if name == "minimal":
        # No process watcher, but MPS daemons still get their host cgroup.
        spec = find(docs, "DaemonSet")["spec"]["template"]["spec"]
        agent = spec["containers"][0]
        expect("--process-watch=off" in agent["args"]
               and "--mps-daemon-cgroup=/sys/fs/cgroup/tessera-mps" in agent["args"],
               f"watcher off, MPS daemon cgroup on: {agent['args']}")
        cgroup = [m for m in agent["volumeMounts"] if m["mountPath"] == "/sys/fs/cgroup"]
        expect(len(cgroup) == 1 and cgroup[0].get("readOnly") is False, f"writable cgroup mount: {cgroup}")


def check_self_managed_tls(docs):
    """TLS mode selfManaged (the default without cert-manager): no Secret and no certificate in
    the chart; the webhook is told its Secret, Service and configurations, and mounts nothing."""
    expect(not [d for d in docs if d["kind"] == "Secret"], "no Secret rendered: the webhook makes it")
    deployment = find(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    service = find(docs, "Service", "-webhook")["metadata"]["name"]
    for flag in (f"--tls-secret-name={service}-tls", f"--tls-secret-namespace={NAMESPACE}",
                 f"--service-name={service}", f"--mutating-webhook-configuration={service}",
                 f"--validating-webhook-configuration={service}", "--certificate-validity-days=365",
                 "--tls-secret-check-interval-seconds=60"):
        expect(flag in args, f"webhook flag {flag} in {args}")
    expect(not [a for a in args if a.startswith("--tls-cert-file")], f"no certificate files: {args}")
    expect("volumes" not in pod and "volumeMounts" not in pod["containers"][0], "no TLS volume")
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        expect(find(docs, kind)["metadata"]["name"] == service, f"{kind} named as the flag says")


def check_cert_manager_chain(docs):
    """A self-signed Issuer -> a CA Certificate -> a CA Issuer -> the serving certificate, and the
    webhook configurations' caBundle injected from the CA, which outlives serving renewals."""
    expect(not [d for d in docs if d["kind"] == "Secret"], "no generated Secret with cert-manager")
    issuers = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "Issuer"}
    certificates = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "Certificate"}
    cas = [n for n, c in certificates.items() if c.get("isCA")]
    servings = [n for n, c in certificates.items() if not c.get("isCA")]
    expect(len(cas) == 1 and len(servings) == 1, f"one CA and one serving certificate: {certificates}")
    ca, serving = certificates[cas[0]], certificates[servings[0]]
    expect(issuers.get(ca["issuerRef"]["name"]) == {"selfSigned": {}}, f"the CA is self-signed: {ca['issuerRef']}")
    expect(ca["privateKey"]["rotationPolicy"] == "Never", "the CA keeps its key when renewed")
    ca_issuer = issuers.get(serving["issuerRef"]["name"], {})
    expect(ca_issuer.get("ca", {}).get("secretName") == ca["secretName"],
           f"the serving certificate is signed by the CA Issuer of the CA's Secret: {serving['issuerRef']}, {issuers}")
    expect(serving["secretName"].endswith("-webhook-tls") and serving["secretName"] != ca["secretName"],
           "the serving certificate has a Secret of its own")
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        annotations = find(docs, kind)["metadata"].get("annotations", {})
        expect(annotations.get("cert-manager.io/inject-ca-from") == f"{NAMESPACE}/{cas[0]}",
               f"{kind}: caBundle injected from the CA certificate {cas[0]}: {annotations}")


# (what, --set values, kube version, helm args, the message's words)
CONTRADICTIONS = [
    ("maxSurge and maxUnavailable both 0", ["agent.updateStrategy.maxSurge=0"], "1.36", [],
     "maxSurge and maxUnavailable are both 0"),
    ("cert-manager mode and a provided certificate",
     ["webhook.tls.mode=certManager", "webhook.tls.secretName=mine"], "1.36",
     ["--api-versions", "cert-manager.io/v1"], "a provided certificate is used only with mode provided"),
    ("cert-manager mode without cert-manager", ["webhook.tls.mode=certManager"], "1.36", [],
     "does not serve cert-manager.io/v1"),
    ("provided mode without the CA", ["webhook.tls.mode=provided", "webhook.tls.secretName=mine"],
     "1.36", [], "needs both webhook.tls.secretName"),
    ("an install into default", [], "1.36", ["--namespace", "default"],
     "the release namespace is default: the webhooks do not cover their own namespace"),
    ("a self-managed certificate for more than ten years", ["webhook.tls.selfManaged.validityDays=3651"],
     "1.36", [], "at '/webhook/tls/selfManaged/validityDays': maximum"),
    ("extendedResourceName on 1.34 without the gate",
     ["deviceClasses.default.extendedResourceName=vgpu.tessera.dev/gpu"], "1.34", [],
     "Kubernetes 1.34 has as an alpha gate"),
    ("extendedResourceName without its class",
     ["deviceClasses.default.extendedResourceName=vgpu.tessera.dev/gpu",
      "deviceClasses.default.enabled=false"], "1.36", [], "deviceClasses.default.enabled is false"),
    ("PDB minAvailable not below replicas",
     ["webhook.replicas=1", "webhook.podDisruptionBudget.minAvailable=1", "webhook.failurePolicy=Ignore"],
     "1.36", [], "minAvailable 1 with webhook.replicas 1: no replica could ever be evicted"),
    ("one replica with failurePolicy Fail", ["webhook.replicas=1", "webhook.podDisruptionBudget.enabled=false"],
     "1.36", [], "webhook.replicas 1 with failurePolicy Fail"),
    ("driver-root mode with the host's root", ["agent.driver.mode=driver-root", "agent.driver.root=/"],
     "1.36", [], "the host's root cannot be mounted"),
    ("an agent setting the chart does not know", ["agent.config.nosuch=1"], "1.36", [],
     "additional properties 'nosuch' not allowed"),
    ("the MPS preset named like the default class", ["deviceClasses.mps.name=vgpu.tessera.dev"],
     "1.36", [], "the MPS preset needs a name of its own"),
    ("an existing agent service account without its name", ["agent.serviceAccount.create=false"], "1.36", [],
     "agent.serviceAccount.create is false but agent.serviceAccount.name is empty"),
    ("an existing webhook service account without its name", ["webhook.serviceAccount.create=false"], "1.36", [],
     "webhook.serviceAccount.create is false but webhook.serviceAccount.name is empty"),
    ("an image tag that is a fraction", [], "1.36", ["--set-json", "agent.image.tag=1.5"],
     "at '/agent/image/tag': got number, want integer or string"),
    ("checkInterval above the agent's range", [], "1.36", ["--set-json", "agent.config.checkInterval=3600.5"],
     "at '/agent/config/checkInterval': maximum: got 3,600.5, want 3,600"),
    ("checkInterval above the agent's range, from --set", ["agent.config.checkInterval=3600.5"], "1.36", [],
     "agent.config.checkInterval 3600.5: the agent takes 0 to 3600 seconds"),
]


def check_contradictions(ctx):
    for what, sets, kube_version, extra, message in CONTRADICTIONS:
        result = ctx.template(kube_version, sets=sets, extra=extra, check=False)
        expect(result.returncode != 0, f"{what}: rendered, expected a failure")
        expect(message in result.stderr, f"{what}: the message lacks {message!r}:\n{result.stderr}")
        print(f"ok: {what}: {message}")
    print(f"{len(CONTRADICTIONS)} contradictions refused")


def check_values(ctx):
    """Values typed as users type them. The agent reads --check-interval as a double in [0, 3600]
    (node-agent/src/agent/agent_config.cc, CLI::Range(0.0, 3600.0))."""
    def daemonset(*sets, files=()):
        return find(objects(ctx.template("1.36", files, sets=sets).stdout), "DaemonSet")["spec"]["template"]["spec"]
    # An int64 to helm, and a string (strvals leaves a leading 0 alone).
    docs = objects(ctx.template("1.36", sets=["agent.image.tag=1234567", "webhook.image.tag=0012"]).stdout)
    spec = find(docs, "DaemonSet")["spec"]["template"]["spec"]
    images = {c["image"] for c in spec["initContainers"] + spec["containers"]}
    expect(images == {"localhost/tessera-node-agent:1234567"}, f"--set agent.image.tag=1234567: {images}")
    deployment = find(docs, "Deployment")
    webhook_image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    expect(webhook_image == "localhost/tessera-webhook:0012", f"--set webhook.image.tag=0012: {webhook_image}")
    print("ok: --set agent.image.tag=1234567 renders localhost/tessera-node-agent:1234567; 0012 stays 0012")
    with tempfile.TemporaryDirectory() as directory:
        values = os.path.join(directory, "values.yaml")
        open(values, "w").write("agent:\n  image:\n    tag: 20260102\n  config:\n    checkInterval: 0.25\n")
        spec = daemonset(files=[values])
    expect(spec["containers"][0]["image"] == "localhost/tessera-node-agent:20260102", f"a values file's tag: {spec['containers'][0]['image']}")
    expect("--check-interval=0.25" in spec["containers"][0]["args"], f"checkInterval 0.25: {spec['containers'][0]['args']}")
    args = daemonset("agent.config.checkInterval=0.5")["containers"][0]["args"]  # a string to helm
    expect("--check-interval=0.5" in args, f"--set agent.config.checkInterval=0.5: {args}")
    print("ok: a values file's tag 20260102 (a float64 to helm) and checkInterval 0.25, --set checkInterval=0.5")
    # --gpus (docs/coexistence.md): indices from a values file, a UUID from --set; the schema
    # refuses what the agent would.
    with tempfile.TemporaryDirectory() as directory:
        values = os.path.join(directory, "values.yaml")
        open(values, "w").write('agent:\n  config:\n    gpus: "2,3"\n')
        args = daemonset(files=[values])["containers"][0]["args"]
    expect("--gpus=2,3" in args, f"gpus 2,3: {args}")
    uuid = "GPU-5e1a0000-7e55-4e2a-9000-000000000001"
    args = daemonset(f"agent.config.gpus={uuid}")["containers"][0]["args"]
    expect(f"--gpus={uuid}" in args, f"--set agent.config.gpus={uuid}: {args}")
    refused = ctx.template("1.36", sets=["agent.config.gpus=MIG-1"], check=False)
    expect(refused.returncode != 0 and "gpus" in refused.stderr, f"gpus MIG-1 rendered:\n{refused.stderr}")
    # A nodeSelector narrows the default affinity; both apply.
    spec = daemonset("agent.nodeSelector.pool=gpu-a")
    expect(schedules_on(spec, {"nvidia.com/gpu.present": "true", "pool": "gpu-a"})
           and not schedules_on(spec, {"nvidia.com/gpu.present": "true"}), "nodeSelector beside the affinity")
    print("ok: agent.config.gpus renders --gpus (2,3 and a UUID), MIG-1 refused; nodeSelector narrows the affinity")
    built = ctx.run([os.path.join(ctx.repo, "scripts", "build-images.sh"), "--print-images"]).stdout.split()
    app_version = yaml.safe_load(open(os.path.join(ctx.chart, "Chart.yaml")))["appVersion"]
    expect(built == [f"localhost/tessera-node-agent:{app_version}", f"localhost/tessera-webhook:{app_version}"],
           f"build-images.sh tags with the chart's appVersion {app_version}: {built}")
    print(f"ok: build-images.sh builds {' and '.join(built)} by default, the chart's default images")


def render_default(ctx, directory):
    path = os.path.join(directory, "rendered.yaml")
    with open(path, "w") as out:
        out.write(ctx.template("1.36").stdout)
    return path


def rbac_check(ctx, rendered, source_root=None):
    return ctx.run([sys.executable, os.path.join(HERE, "rbac_check.py"), "--source-root",
                    source_root or ctx.repo, rendered], check=False)


# TLS modes as (what, values file under ci/ or None, helm args).
TLS_RENDERINGS = [
    ("default (selfManaged)", None, []),
    ("cert-manager", "tls-cert-manager-values.yaml", ["--api-versions", "cert-manager.io/v1"]),
    ("auto with cert-manager", None, ["--api-versions", "cert-manager.io/v1"]),
    ("provided", "tls-provided-values.yaml", []),
]


def render_tls(ctx, values, extra, kube_version="1.36"):
    files = [os.path.join(ctx.chart, "ci", values)] if values else []
    return ctx.template(kube_version, files, extra=extra).stdout


def check_rbac(ctx):
    with tempfile.TemporaryDirectory() as directory:
        for what, values, extra in TLS_RENDERINGS:
            path = os.path.join(directory, "rendered.yaml")
            with open(path, "w") as out:
                out.write(render_tls(ctx, values, extra))
            result = rbac_check(ctx, path)
            print(f"{what}:\n{result.stdout}{result.stderr}")
            expect(result.returncode == 0, f"{what}: the chart's RBAC differs from the code's API calls")


def check_determinism(ctx):
    """A GitOps tool renders the chart at every sync: the same values must give the same bytes,
    or each sync would change the cluster (a new CA while failurePolicy is Fail)."""
    for what, values, extra in TLS_RENDERINGS:
        for kube_version in KUBE_VERSIONS:
            first = render_tls(ctx, values, extra, kube_version)
            second = render_tls(ctx, values, extra, kube_version)
            expect(first == second, f"{what}, Kubernetes {kube_version}: two renderings differ")
            print(f"ok: {what}, Kubernetes {kube_version}: two renderings byte-identical "
                  f"({len(first)} bytes)")
    # The comparison catches a render-time certificate: helm mode's genCA differs every time.
    first, second = (render_tls(ctx, None, ["--set", "webhook.tls.mode=helm"]) for _ in range(2))
    expect(first != second, "helm mode (genCA) rendered twice the same: the comparison cannot fail")
    print("ok: helm mode (genCA at render time) differs between renderings, as the check expects")


def check_rbac_drift(ctx):
    with tempfile.TemporaryDirectory() as directory:
        rendered = render_default(ctx, directory)
        docs = objects(open(rendered).read())

        def write(mutate, name):
            changed = json.loads(json.dumps(docs))
            mutate(changed)
            path = os.path.join(directory, name)
            with open(path, "w") as out:
                yaml.safe_dump_all(changed, out)
            return path

        def role(changed, component):
            return next(d for d in changed if d["kind"] == "ClusterRole"
                        and d["metadata"]["labels"]["app.kubernetes.io/component"] == component)

        def tls_role(changed):
            return next(d for d in changed if d["kind"] == "Role"
                        and d["metadata"]["labels"]["app.kubernetes.io/component"] == "webhook")

        cases = [
            ("a Secret other than the webhook's", write(
                lambda c: tls_role(c)["rules"][0].update(resourceNames=["someone-elses"]), "other-secret.yaml"),
             None, "but the webhook is given --tls-secret-name=tessera-webhook-tls"),
            ("every Secret of the namespace", write(
                lambda c: tls_role(c)["rules"][0].pop("resourceNames"), "every-secret.yaml"),
             None, "grants get of every secrets"),
            ("a create restricted by name", write(
                lambda c: tls_role(c)["rules"][1].update(resourceNames=["tessera-webhook-tls"]), "named-create.yaml"),
             None, "resourceNames cannot restrict create of secrets"),
            ("a verb too many", write(lambda c: role(c, "node-agent")["rules"][0]["verbs"].append("list"),
                                      "extra.yaml"), None, "which the code never calls"),
            ("a verb too few", write(lambda c: role(c, "webhook")["rules"][1]["verbs"].remove("create"),
                                     "missing.yaml"), None, "but no rule grants it"),
            ("a wildcard", write(lambda c: role(c, "webhook")["rules"].append(
                {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}), "wildcard.yaml"), None,
             "a wildcard"),
        ]
        # A source tree where the agent calls one more API: the unchanged chart must fail.
        tree = os.path.join(directory, "src")
        for folder in ("node-agent/src", "webhook/src", "common/kube"):
            shutil.copytree(os.path.join(ctx.repo, folder), os.path.join(tree, folder))
        added = os.path.join(tree, "node-agent/src/devices/resource_slices.cc")
        with open(added, "a") as out:
            out.write('\nvoid watch_slices(tessera::kube::KubeClient& kube_) {\n'
                      '  kube_.request("GET", std::string(kResourceSlicesPath) + "?watch=true");\n'
                      '  kube_.request("PATCH", "/api/v1/nodes/" + url_escape(name) + "/status", "{}");\n}\n')
        cases.append(("a new call in the code", rendered, tree, "watch resource.k8s.io/resourceslices"))
        cases.append(("a new subresource call", rendered, tree, "patch core/nodes/status"))
        computed = os.path.join(directory, "computed")
        shutil.copytree(os.path.join(ctx.repo, "node-agent/src"), os.path.join(computed, "node-agent/src"))
        shutil.copytree(os.path.join(ctx.repo, "webhook/src"), os.path.join(computed, "webhook/src"))
        shutil.copytree(os.path.join(ctx.repo, "common/kube"), os.path.join(computed, "common/kube"))
        with open(os.path.join(computed, "webhook/src/kube/template_writer.cc"), "a") as out:
            out.write('\nvoid any(tessera::kube::KubeClient& api_, const std::string& kind) {\n'
                      '  api_.request("GET", "/apis/resource.k8s.io/v1/" + kind);\n}\n')
        cases.append(("a call whose resource is computed", rendered, computed,
                      "the group or resource is not fixed"))
        for what, path, tree_root, message in cases:
            result = rbac_check(ctx, path, tree_root)
            expect(result.returncode != 0, f"{what}: rbac_check passed")
            expect(message in result.stdout, f"{what}: expected {message!r} in:\n{result.stdout}")
            print(f"ok: {what}: {message}")


BROKEN = """\
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: typo, labels: {enabled: true}}
spec:
  selector: {matchLabels: {a: b}}
  updateStrategy: {rollingUpdate: {maxSurge: 1, maxUnavialable: 0}}
  template:
    spec:
      hostPID: "yes"
      containers:
      - name: c
        resources: {limits: {cpu: 1, memory: 1Gi}}
        ports: [{containerPort: "80"}]
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: no-expression}
spec: {selectors: [{cel: {}}]}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: wrong-field}
spec: {extendedResource: vgpu.tessera.dev/gpu}
---
apiVersion: resource.k8s.io/v1alpha9
kind: DeviceClass
metadata: {name: no-such-version}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: bad-policy}
spec: {validations: [{message: no expression}]}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: bad-enum}
webhooks:
- {name: a.tessera.dev, admissionReviewVersions: [v1], sideEffects: None, failurePolicy: Sometimes,
   clientConfig: {service: {name: s, namespace: n}}}
---
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {name: bad-monitor}
spec: {endpoints: [{port: metrics, honorLabels: "yes"}]}
"""
BROKEN_REASONS = {
    "1.34": [
        "DaemonSet typo: DaemonSet.metadata.labels.enabled: expected a string, found a boolean",
        "DaemonSet.spec.updateStrategy.rollingUpdate.maxUnavialable: unknown field",
        "DaemonSet.spec.template.spec.hostPID: expected a boolean",
        "containers[0].ports[0].containerPort: expected an integer",
        "DeviceClass no-expression: DeviceClass.spec.selectors[0].cel.expression: required field is missing",
        "DeviceClass wrong-field: DeviceClass.spec.extendedResource: unknown field",
        "serves no kind DeviceClass in resource.k8s.io/v1alpha9",
        "ValidatingAdmissionPolicy bad-policy: ValidatingAdmissionPolicy.spec.validations[0].expression: required",
        "ServiceMonitor bad-monitor: /spec must have required property selector",
        "/spec/endpoints/0/honorLabels must be boolean",
    ],
}
# Enums are in kubernetes-models' 1.36 schema only (the generated client has none): 1.34 misses it.
BROKEN_REASONS["1.36"] = BROKEN_REASONS["1.34"] + [
    "ValidatingWebhookConfiguration bad-enum: /webhooks/0/failurePolicy must be equal to one of the allowed values",
]
# A field that 1.36 has and 1.34 lacks: DeviceClass.spec.extendedResourceName is in both (alpha in
# 1.34), so the release difference is shown with MutatingAdmissionPolicy, GA (v1) only in 1.36.
RELEASE_ONLY = """\
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: new-in-1-36}
spec: {mutations: [{patchType: ApplyConfiguration, applyConfiguration: {expression: "Object{}"}}]}
"""


def check_validator(ctx):
    with tempfile.TemporaryDirectory() as directory:
        broken = os.path.join(directory, "broken.yaml")
        open(broken, "w").write(BROKEN)
        for kube_version, reasons in BROKEN_REASONS.items():
            result = ctx.validate(kube_version, [broken])
            expect(result.returncode == 1, f"{kube_version}: broken objects passed:\n{result.stderr}")
            for reason in reasons:
                expect(reason in result.stdout, f"{kube_version}: no {reason!r} in:\n{result.stdout}")
            expect(not [line for line in result.stdout.splitlines()
                        if "resources.limits" in line], "a Quantity as a number is accepted")
            print(f"ok: Kubernetes {kube_version}: {len(reasons)} reasons found")
        newer = os.path.join(directory, "newer.yaml")
        open(newer, "w").write(RELEASE_ONLY)
        old, new = ctx.validate("1.34", [newer]), ctx.validate("1.36", [newer])
        expect(old.returncode == 1 and "serves no kind MutatingAdmissionPolicy" in old.stdout,
               f"1.34 accepted a 1.36 kind:\n{old.stdout}")
        expect(new.returncode == 0, f"1.36 refused its own kind:\n{new.stdout}")
        print("ok: MutatingAdmissionPolicy v1: refused by 1.34, accepted by 1.36")


def pod(containers=(), init=(), claims=False):
    spec = {"containers": [{"name": f"c{i}", "resources": {"limits": dict(l)}} for i, l in enumerate(containers)]
            or [{"name": "main"}]}
    if init:
        spec["initContainers"] = [{"name": f"i{i}", "resources": {"requests": dict(l)}} for i, l in enumerate(init)]
    if claims:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "team-a-gpu"}]
    return {"apiVersion": "v1", "kind": "Pod", "spec": spec}


def claim_pod(**container):
    """A pod whose container uses the pod claim "gpu" (of whatever class), with `container`'s
    fields (env, volumeMounts, securityContext) added."""
    spec = {"containers": [{"name": "main", "resources": {"claims": [{"name": "gpu"}]}, **container}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "some-template"}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a"}, "spec": spec}


def env(*names):
    return [{"name": n, "value": "x"} for n in names]


def mounts(*paths):
    return [{"name": f"v{i}", "mountPath": p} for i, p in enumerate(paths)]


# Pods with a claim and no shorthand: (what, pod, sent). The conditions cannot see a claim's
# class, so a claim is any driver's here. Sent: what the webhook's policy checks for a container
# with a Tessera claim (core/pod_mutation.cc check_policy), whatever the claim's class turns out
# to be; not sent: everything else, which the webhook would pass unchanged whatever the class.
CLAIM_PODS = [
    ("a claim pod (any driver's class) and nothing the policy checks", claim_pod(), False),
    ("a claim pod with ordinary env, mounts and securityContext",
     claim_pod(env=env("PATH_EXTRA", "CUDA_VISIBLE_DEVICES", "MY_TESSERA_X", "CUDA_DEVICE_ORDER"),
               volumeMounts=mounts("/data", "/var/lib/x", "/runner", "/etcd", "/var/run2", "/run/other", "/var/run/tesserax"),
               securityContext={"privileged": False, "runAsNonRoot": True}), False),
    ("a claim pod in an init container, nothing checked",
     {**claim_pod(), "spec": {**claim_pod()["spec"], "initContainers": [{"name": "init", "resources": {"claims": [{"name": "gpu"}]}}]}}, False),
    ("LD_PRELOAD beside a claim", claim_pod(env=env("LD_PRELOAD")), True),
    ("TESSERA_SHARE_DIR beside a claim", claim_pod(env=env("TESSERA_SHARE_DIR")), True),
    ("CUDA_DEVICE_MEMORY_LIMIT beside a claim", claim_pod(env=env("CUDA_DEVICE_MEMORY_LIMIT")), True),
    ("CUDA_DEVICE_SM_LIMIT_1 beside a claim", claim_pod(env=env("CUDA_DEVICE_SM_LIMIT_1")), True),
    ("a mount at /etc beside a claim", claim_pod(volumeMounts=mounts("/etc")), True),
    ("a mount at /etc/ld.so.preload", claim_pod(volumeMounts=mounts("/etc/ld.so.preload")), True),
    ("a mount at / beside a claim", claim_pod(volumeMounts=mounts("/")), True),
    ("a mount at /etc/ (trailing /)", claim_pod(volumeMounts=mounts("/etc/")), True),
    ("a mount at //etc", claim_pod(volumeMounts=mounts("//etc")), True),
    ("a mount at /data/../etc", claim_pod(volumeMounts=mounts("/data/../etc")), True),
    ("a mount at /var/run", claim_pod(volumeMounts=mounts("/var/run")), True),
    ("a mount at /run", claim_pod(volumeMounts=mounts("/run")), True),
    ("a mount at /var", claim_pod(volumeMounts=mounts("/var")), True),
    ("a mount inside the share root", claim_pod(volumeMounts=mounts("/var/run/tessera/shares/a/limits")), True),
    ("a mount inside /run/tessera", claim_pod(volumeMounts=mounts("/run/tessera/shares")), True),
    ("a privileged container with a claim", claim_pod(securityContext={"privileged": True}), True),
    ("LD_PRELOAD in an init container with a claim",
     {**claim_pod(), "spec": {**claim_pod()["spec"], "initContainers": [
         {"name": "init", "resources": {"claims": [{"name": "gpu"}]}, "env": env("LD_PRELOAD")}]}}, True),
]


def claim(drivers, template=False):
    devices = {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "vgpu.tessera.dev"}}]}
    if drivers:
        devices["config"] = [{"opaque": {"driver": d, "parameters": {}}} for d in drivers]
    return {"spec": {"spec": {"devices": devices}}} if template else {"spec": {"devices": devices}}


def evaluate(ctx, cases):
    """cases: [(expression, variables)] -> [value], through @marcbachmann/cel-js."""
    payload = json.dumps([{"expression": e, "variables": v} for e, v in cases])
    result = subprocess.run(["node", os.path.join(HERE, "evaluate_cel.mjs"), os.path.join(ctx.tools, "models")],
                            input=payload, capture_output=True, text=True)
    if result.returncode != 0:
        raise Failure(f"evaluate_cel.mjs failed: {result.stderr}")
    answers = json.loads(result.stdout)
    for (expression, _), answer in zip(cases, answers):
        if "error" in answer:
            raise Failure(f"CEL error in {expression!r}: {answer['error']}")
    return [a["value"] for a in answers]


def check_cel(ctx):
    docs = objects(ctx.template("1.36").stdout)
    hooks = {h["name"]: h for d in docs if d["kind"].endswith("WebhookConfiguration") for h in d["webhooks"]}
    condition = lambda name: hooks[name]["matchConditions"][0]["expression"]
    gpu, hami = {"tessera.dev/gpu": "1"}, {"nvidia.com/gpu": "1"}
    pods = [  # (what, pod, sent to /mutate, sent to /mutate/hami)
        ("a pod without GPU requests", pod([{"cpu": "1", "memory": "1Gi"}]), False, False),
        ("a pod with no resources at all", pod(), False, False),
        ("tessera.dev/gpu in a container's limits", pod([{"cpu": "1"}, gpu]), True, True),
        ("tessera.dev/gpu-memory in an init container's requests", pod(init=[{"tessera.dev/gpu-memory": "8Gi"}]), True, True),
        ("HAMi's nvidia.com/gpu", pod([hami]), False, True),
    ] + [(what, obj, sent, sent) for what, obj, sent in CLAIM_PODS]
    cases, expected = [], []
    for what, obj, plain, with_hami in pods:
        cases += [(condition("pods.vgpu.tessera.dev"), {"object": obj}),
                  (condition("hami-pods.vgpu.tessera.dev"), {"object": obj})]
        expected += [(what, "/mutate", plain), (what, "/mutate/hami", with_hami)]
    # The default class's extended resource: the pod has no claim yet when it is admitted (the
    # scheduler makes it), so the condition must name the resource, only where it is configured.
    extended = {"vgpu.tessera.dev/gpu": "1"}
    with_extended = objects(ctx.template("1.36", sets=["deviceClasses.default.extendedResourceName=vgpu.tessera.dev/gpu"]).stdout)
    extended_hooks = {h["name"]: h for d in with_extended if d["kind"] == "MutatingWebhookConfiguration" for h in d["webhooks"]}
    for what, obj, want in [
        ("the extended resource in a container's limits", pod([{"cpu": "1"}, extended]), True),
        ("the extended resource in an init container's requests", pod(init=[extended]), True),
        ("another vgpu.tessera.dev/ resource", pod([{"vgpu.tessera.dev/gpux": "1"}]), False),
        ("a pod without GPU requests", pod([{"cpu": "1"}]), False),
    ]:
        for hook in ("pods.vgpu.tessera.dev", "hami-pods.vgpu.tessera.dev"):
            cases.append((extended_hooks[hook]["matchConditions"][0]["expression"], {"object": obj}))
            expected.append((f"{what} (extendedResourceName set)", f"/mutate{'/hami' if 'hami' in hook else ''}", want))
    for hook in ("pods.vgpu.tessera.dev", "hami-pods.vgpu.tessera.dev"):  # no class has the name by default
        cases.append((condition(hook), {"object": pod([extended])}))
        expected.append(("vgpu.tessera.dev/gpu without extendedResourceName", f"/mutate{'/hami' if 'hami' in hook else ''}", False))
    # Another share root: the conditions follow webhook.shareRoot (normalised, with its /run twin)
    # as the webhook's --share-root does.
    moved = objects(ctx.template("1.36", sets=["webhook.shareRoot=/run//gpu-shares/"]).stdout)
    moved_hooks = {h["name"]: h for d in moved if d["kind"] == "MutatingWebhookConfiguration" for h in d["webhooks"]}
    for what, obj, want in [
        ("a mount inside /var/run/gpu-shares (shareRoot /run//gpu-shares/)", claim_pod(volumeMounts=mounts("/var/run/gpu-shares/a")), True),
        ("a mount at /run/gpu-shares (shareRoot /run//gpu-shares/)", claim_pod(volumeMounts=mounts("/run/gpu-shares")), True),
        ("a mount at /var/run/tessera/x (shareRoot /run//gpu-shares/)", claim_pod(volumeMounts=mounts("/var/run/tessera/x")), False),
    ]:
        for hook in ("pods.vgpu.tessera.dev", "hami-pods.vgpu.tessera.dev"):
            cases.append((moved_hooks[hook]["matchConditions"][0]["expression"], {"object": obj}))
            expected.append((what, f"/mutate{'/hami' if 'hami' in hook else ''}", want))
    claims = [
        ("a claim with a VgpuConfig", "resourceclaims", claim(["vgpu.tessera.dev"]), True),
        ("a claim with another driver's config", "resourceclaims", claim(["gpu.nvidia.com"]), False),
        ("a claim without config", "resourceclaims", claim([]), False),
        ("a template with a VgpuConfig", "resourceclaimtemplates", claim(["gpu.nvidia.com", "vgpu.tessera.dev"], True), True),
        ("a template without config", "resourceclaimtemplates", claim([], True), False),
    ]
    for what, resource, obj, sent in claims:
        cases.append((condition("claims.vgpu.tessera.dev"), {"object": obj, "request": {"resource": {"resource": resource}}}))
        expected.append((what, "/validate", sent))

    policy = find(docs, "ValidatingAdmissionPolicy")["spec"]
    agent = f"system:serviceaccount:{NAMESPACE}:{find(docs, 'DaemonSet')['spec']['template']['spec']['serviceAccountName']}"
    requests = [  # (what, request, object, oldObject, matched, allowed)
        ("the agent writes its own node's slice", {"operation": "CREATE", "userInfo": {"username": agent, "extra": {"authentication.kubernetes.io/node-name": ["gpu-1"]}}},
         {"spec": {"nodeName": "gpu-1"}}, None, True, True),
        ("the agent writes another node's slice", {"operation": "UPDATE", "userInfo": {"username": agent, "extra": {"authentication.kubernetes.io/node-name": ["gpu-1"]}}},
         {"spec": {"nodeName": "gpu-2"}}, {"spec": {"nodeName": "gpu-2"}}, True, False),
        ("the agent deletes another node's slice", {"operation": "DELETE", "userInfo": {"username": agent, "extra": {"authentication.kubernetes.io/node-name": ["gpu-1"]}}},
         None, {"spec": {"nodeName": "gpu-2"}}, True, False),
        ("the agent writes a slice for all nodes", {"operation": "CREATE", "userInfo": {"username": agent, "extra": {"authentication.kubernetes.io/node-name": ["gpu-1"]}}},
         {"spec": {"allNodes": True}}, None, True, False),
        ("a token without a node", {"operation": "CREATE", "userInfo": {"username": agent, "extra": {}}},
         {"spec": {"nodeName": "gpu-1"}}, None, True, False),
        ("another user", {"operation": "CREATE", "userInfo": {"username": "system:serviceaccount:x:y"}},
         {"spec": {"nodeName": "gpu-2"}}, None, False, None),
    ]
    policy_cases = []
    for what, request, obj, old, matched, allowed in requests:
        variables = {"request": request, "object": obj, "oldObject": old}
        policy_cases.append((what, variables, matched, allowed))
    values = evaluate(ctx, cases)
    for (what, endpoint, want), got in zip(expected, values):
        expect(got is want, f"{what}: sent to {endpoint} is {got}, expected {want}")
        print(f"ok: {what}: {'sent to' if want else 'never reaches'} {endpoint}")
    for what, variables, matched, allowed in policy_cases:
        got_match = evaluate(ctx, [(policy["matchConditions"][0]["expression"], variables)])[0]
        expect(got_match is matched, f"{what}: policy matched {got_match}, expected {matched}")
        if not matched:
            print(f"ok: {what}: not the agent, the policy does not apply")
            continue
        computed = {}
        for variable in policy["variables"]:
            computed[variable["name"]] = evaluate(ctx, [(variable["expression"], {**variables, "variables": computed})])[0]
        outcomes = evaluate(ctx, [(v["expression"], {**variables, "variables": computed}) for v in policy["validations"]])
        expect(all(outcomes) is allowed, f"{what}: allowed {all(outcomes)}, expected {allowed} ({outcomes})")
        messages = [v["messageExpression"] for v, ok in zip(policy["validations"], outcomes) if not ok and "messageExpression" in v]
        shown = evaluate(ctx, [(m, {**variables, "variables": computed}) for m in messages]) if messages else []
        print(f"ok: {what}: {'allowed' if allowed else 'denied'}{': ' + shown[0] if shown else ''}")


def review_of(pod, uid):
    gvk = {"group": "", "version": "v1", "kind": "Pod"}
    gvr = {"group": "", "version": "v1", "resource": "pods"}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": uid, "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
                        "name": pod["metadata"]["name"], "namespace": pod["metadata"]["namespace"],
                        "operation": "CREATE", "userInfo": {"username": "tenant"}, "object": pod,
                        "oldObject": None, "dryRun": False}}


def check_cel_webhook(ctx):
    """The conditions are sound against the real webhook: a claim pod they do not send is one the
    webhook would pass unchanged (allowed, no patch, no warning) even when every claim is a Tessera
    one, and each claim pod they send for a policy reason is one the webhook refuses or warns about
    when its claim is a Tessera one. The webhook's claim lookups fail here (its API server is a
    closed port), which it answers by treating the claim as a Tessera claim, with a warning."""
    if not ctx.webhook:
        raise Failure("--webhook (the tessera-webhook binary) is required")
    docs = objects(ctx.template("1.36").stdout)
    hooks = {h["name"]: h for d in docs if d["kind"] == "MutatingWebhookConfiguration" for h in d["webhooks"]}
    with tempfile.TemporaryDirectory() as work:
        cert, key = os.path.join(work, "tls.crt"), os.path.join(work, "tls.key")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                        "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", cert], check=True, capture_output=True)
        with socket.socket() as closed:
            closed.bind(("127.0.0.1", 0))
            dead_port = closed.getsockname()[1]
        with socket.socket() as free:
            free.bind(("127.0.0.1", 0))
            port = free.getsockname()[1]
        kubeconfig = os.path.join(work, "kubeconfig")
        with open(kubeconfig, "w") as f:
            yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "current-context": "c",
                            "clusters": [{"name": "dead", "cluster": {"server": f"https://127.0.0.1:{dead_port}", "certificate-authority": cert}}],
                            "users": [{"name": "u", "user": {"token": "t"}}],
                            "contexts": [{"name": "c", "context": {"cluster": "dead", "user": "u"}}]}, f)
        server = subprocess.Popen([ctx.webhook, "--listen", f"127.0.0.1:{port}", "--tls-cert-file", cert,
                                   "--tls-private-key-file", key, "--kubeconfig", kubeconfig, "--shutdown-delay-ms", "0"],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        client = ssl.create_default_context(cafile=cert)
        try:
            for _ in range(200):
                try:
                    urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", context=client, timeout=1)
                    break
                except (urllib.error.URLError, ConnectionError, OSError):
                    if server.poll() is not None:
                        raise Failure("tessera-webhook exited: " + server.stdout.read())
                    time.sleep(0.1)
            for hook, path in (("pods.vgpu.tessera.dev", "/mutate"), ("hami-pods.vgpu.tessera.dev", "/mutate/hami")):
                expression = hooks[hook]["matchConditions"][0]["expression"]
                sent = evaluate(ctx, [(expression, {"object": obj}) for _, obj, _ in CLAIM_PODS])
                for (what, obj, _), is_sent in zip(CLAIM_PODS, sent):
                    request = urllib.request.Request(f"https://127.0.0.1:{port}{path}", data=json.dumps(review_of(obj, "u")).encode(),
                                                     headers={"Content-Type": "application/json"})
                    response = json.load(urllib.request.urlopen(request, context=client, timeout=10))["response"]
                    acted = not response.get("allowed") or "patch" in response or bool(response.get("warnings"))
                    if is_sent:
                        expect(acted, f"{what}: sent to {path}, but the webhook passes it unchanged with a Tessera claim: {response}")
                        how = "refused" if not response.get("allowed") else "warned about"
                        print(f"ok: {what}: sent to {path}; with a Tessera claim the webhook {how} it")
                    else:
                        expect(not acted, f"{what}: not sent to {path}, but the webhook acts on it: {response}")
                        print(f"ok: {what}: not sent to {path}; the webhook would pass it unchanged even with a Tessera claim")
        finally:
            server.terminate()
            server.wait(timeout=10)


def check_webhook_doc(ctx):
    """docs/webhook.md shows the webhook configurations the chart renders with its defaults:
    the YAML block after its marker equals the rendering, labels left out. The default TLS mode
    (selfManaged) renders no caBundle: the webhook patches it in at run time."""
    path = os.path.join(ctx.repo, "docs", "webhook.md")
    with open(path) as f:
        text = f.read()
    marker = "<!-- rendered-webhook-configuration -->\n```yaml\n"
    expect(marker in text, f"{path}: no {marker!r}")
    block = text.split(marker, 1)[1].split("\n```", 1)[0]
    shown = [d for d in yaml.safe_load_all(block) if d]
    rendered = []
    for d in objects(ctx.template("1.36").stdout):
        if d["kind"].endswith("WebhookConfiguration"):
            d["metadata"].pop("labels", None)
            for hook in d["webhooks"]:
                expect("caBundle" not in hook["clientConfig"],
                       f"{hook['name']}: a caBundle rendered in the default (selfManaged) mode")
            rendered.append(d)
    for want, got in zip(rendered, shown + [None] * len(rendered)):
        expect(got == want, f"docs/webhook.md shows {json.dumps(got)[:300]}..., the chart renders "
               f"{json.dumps(want)}: regenerate the block")
    expect(len(shown) == len(rendered), f"docs/webhook.md shows {len(shown)} objects, the chart renders {len(rendered)}")
    print(f"ok: docs/webhook.md shows the {len(rendered)} webhook configurations as the chart renders them")


# Groups of sample objects with no schema here (no CRD package of theirs among the chart tools):
# left out of the validation and named in its output; tests/k8s-samples checks how they are used.
UNVALIDATED_GROUPS = ("kueue.x-k8s.io/",)


def check_samples(ctx):
    samples = sorted(glob.glob(os.path.join(ctx.repo, "samples", "k8s", "**", "*.yaml"), recursive=True))
    if not samples:
        print("no samples/k8s/**/*.yaml yet: skipped")
        return SKIP
    with tempfile.TemporaryDirectory() as directory:
        paths, skipped = [], []
        for i, path in enumerate(samples):
            with open(path) as f:
                docs = [d for d in yaml.safe_load_all(f) if d]
            kept = [d for d in docs if not str(d.get("apiVersion", "")).startswith(UNVALIDATED_GROUPS)]
            skipped += [f"{os.path.relpath(path, ctx.repo)}: {d['kind']} {d['metadata']['name']}" for d in docs if d not in kept]
            if len(kept) == len(docs):
                paths.append(path)
            elif kept:
                copy = os.path.join(directory, f"{i}-{os.path.basename(path)}")
                with open(copy, "w") as f:
                    yaml.safe_dump_all(kept, f)
                paths.append(copy)
        for kube_version in KUBE_VERSIONS:
            result = ctx.validate(kube_version, paths)
            if result.returncode != 0:
                raise Failure(f"samples, Kubernetes {kube_version}:\n{result.stdout}{result.stderr}")
            print(f"ok: {len(paths)} sample files, Kubernetes {kube_version}: {result.stderr.strip()}")
    for what in skipped:
        print(f"not validated (no schema for its group here): {what}")
    return 0


CHECKS = {"cel": check_cel, "cel-webhook": check_cel_webhook, "webhook-doc": check_webhook_doc,
          "variants": check_variants, "contradictions": check_contradictions,
          "values": check_values, "rbac": check_rbac, "determinism": check_determinism,
          "rbac-drift": check_rbac_drift, "validator": check_validator, "samples": check_samples}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", required=True)
    parser.add_argument("--tools", default=os.environ.get("TESSERA_CHART_TOOLS", "/opt/tessera/chart-tools"))
    parser.add_argument("--webhook", help="the tessera-webhook binary (cel-webhook)")
    parser.add_argument("check", choices=sorted(CHECKS))
    args = parser.parse_args()
    try:
        ctx = Context(os.path.abspath(args.repo), args.tools)
        ctx.webhook = args.webhook
        return CHECKS[args.check](ctx) or 0
    except Failure as failure:
        print(f"FAILED: {failure}")
        return 1


if __name__ == "__main__":
    sys.exit(main())

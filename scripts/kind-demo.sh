#!/usr/bin/env bash
# Creates a kind cluster with the feature gates Tessera needs, loads the images, installs the chart
# with helm, runs the samples of samples/k8s/ one after another, and prints what to look at.
# For a machine with a container engine (docker, or podman through kind's podman provider), kind,
# kubectl and helm, and an NVIDIA GPU: its driver and the NVIDIA Container Toolkit configured for
# that engine with `accept-nvidia-visible-devices-as-volume-mounts = true`, so that the kind node
# gets the GPU through the /dev/null mount below (the way NVIDIA's DRA driver's kind demo does).
# In the node it installs the toolkit from NVIDIA's apt repository (the node needs network), makes
# it containerd's default runtime, writes its CDI spec, and sets the label the chart's agent
# selects nodes by. NOT RUN on the build machine (it has no container engine daemon, no kind and
# no GPU); checked there with shellcheck only (ctest images.scripts_pass_shellcheck).
#
# Usage: scripts/kind-demo.sh [options]
#   --k8s 1.34|1.36     Kubernetes minor (default 1.36). 1.34 turns the alpha gates on:
#                       DRAConsumableCapacity, DRAExtendedResource, DRADeviceTaints,
#                       ResourceHealthStatus. 1.36 has them on by default (beta).
#   --node-image IMAGE  the kind node image (default kindest/node:v1.34.0 or v1.36.0)
#   --name NAME         the cluster's name (default tessera-demo)
#   --build-dir DIR     build the images from this build folder's programs (default build/release
#                       when it holds them; else a full release build, scripts/build-images.sh)
#   --skip-mps          do not run samples/k8s/mps-share (it needs MPS in the node's driver)
#   --delete            delete the cluster at the end (default: keep it to look at)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
k8s=1.36 node_image="" name=tessera-demo build_dir="" skip_mps=0 delete_at_end=0
while (($#)); do
  case "$1" in
    --k8s) k8s=$2 && shift 2 ;;
    --node-image) node_image=$2 && shift 2 ;;
    --name) name=$2 && shift 2 ;;
    --build-dir) build_dir=$2 && shift 2 ;;
    --skip-mps) skip_mps=1 && shift ;;
    --delete) delete_at_end=1 && shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' && exit 0 ;;
    *) echo "kind-demo: unknown option $1 (see --help)" >&2 && exit 2 ;;
  esac
done
case "$k8s" in
  1.34) gates=(DRAConsumableCapacity DRAExtendedResource DRADeviceTaints ResourceHealthStatus) ;;
  1.36) gates=() ;;
  *) echo "kind-demo: --k8s must be 1.34 or 1.36" >&2 && exit 2 ;;
esac
node_image=${node_image:-kindest/node:v$k8s.0}
say() { printf '\n== %s\n' "$*"; }
need() { command -v "$1" >/dev/null || { echo "kind-demo: $1 is not installed ($2)" >&2 && exit 1; }; }
need kind "https://kind.sigs.k8s.io"
need kubectl "https://kubernetes.io/docs/tasks/tools/"
need helm "https://helm.sh/docs/intro/install/"
if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
  engine=docker
elif command -v podman >/dev/null; then
  engine=podman
  export KIND_EXPERIMENTAL_PROVIDER=podman
else
  echo "kind-demo: needs a running docker, or podman" >&2 && exit 1
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/tessera-kind.XXXXXX")
trap 'rm -rf "$work"' EXIT

gate_text="the release defaults"
((${#gates[@]} == 0)) || gate_text="${gates[*]} on"
say "kind cluster $name ($node_image; feature gates: $gate_text)"
{
  echo "kind: Cluster"
  echo "apiVersion: kind.x-k8s.io/v1alpha4"
  if ((${#gates[@]})); then
    echo "featureGates:"
    for gate in "${gates[@]}"; do echo "  $gate: true"; done
  fi
  echo "nodes:"
  echo "  - role: control-plane"
  echo "    image: $node_image"
  echo "    extraMounts:"
  echo "      - hostPath: /dev/null"
  echo "        containerPath: /var/run/nvidia-container-devices/all"
} >"$work/kind.yaml"
cat "$work/kind.yaml"
kind get clusters 2>/dev/null | grep -qx "$name" || kind create cluster --name "$name" --config "$work/kind.yaml"
kubectl config use-context "kind-$name" >/dev/null
node=$name-control-plane

say "the GPU in the node; the NVIDIA Container Toolkit there (the agent's NVML, the CDI spec)"
"$engine" exec "$node" nvidia-smi -L || {
  echo "kind-demo: the kind node sees no GPU: configure the NVIDIA Container Toolkit for $engine" \
    "(nvidia-ctk runtime configure; accept-nvidia-visible-devices-as-volume-mounts = true)" >&2
  exit 1
}
# In the node: the toolkit from NVIDIA's apt repository (the steps of its install guide), made
# containerd's default runtime so the agent's pod gets NVML and the GPUs, and its CDI spec, which
# the agent gives tenants' containers (agent.driver.mode auto finds it).
# shellcheck disable=SC2016 # expanded in the node
"$engine" exec "$node" bash -c '
  set -euo pipefail
  if ! command -v nvidia-ctk >/dev/null; then
    apt-get update -qq && apt-get install -y -qq curl gnupg >/dev/null
    keyring=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg
    curl -fsSL https://nvidia.github.io/libnvidia-container/gpgkey | gpg --dearmor -o "$keyring"
    curl -fsSL https://nvidia.github.io/libnvidia-container/stable/deb/nvidia-container-toolkit.list |
      sed "s#deb https://#deb [signed-by=$keyring] https://#g" \
        >/etc/apt/sources.list.d/nvidia-container-toolkit.list
    apt-get update -qq && apt-get install -y -qq nvidia-container-toolkit >/dev/null
  fi
  nvidia-ctk runtime configure --runtime=containerd --set-as-default
  systemctl restart containerd
  nvidia-ctk cdi generate --output=/var/run/cdi/nvidia.yaml
  containerd config dump | grep -E "enable_cdi|cdi_spec_dirs|default_runtime_name"'
kubectl wait --for=condition=Ready --timeout=3m "node/$node"
kubectl label node "$node" nvidia.com/gpu.present=true --overwrite

say "images"
tag=$(git -C "$repo" describe --tags --always --dirty 2>/dev/null || echo dev)
build_dir=${build_dir:-$repo/build/release}
if [[ -x $build_dir/bin/tessera-node-agent && -x $build_dir/samples/memory-fill ]]; then
  "$repo/scripts/build-images.sh" --prebuilt "$build_dir" --tag "$tag" --save "$work/images"
else
  "$repo/scripts/build-images.sh" --tag "$tag" --save "$work/images"
fi
for image in tessera-node-agent tessera-webhook; do
  kind load image-archive --name "$name" "$work/images/$image-$tag.tar"
done

say "helm install tessera (namespace tessera-system)"
helm_args=(--namespace tessera-system --create-namespace --wait --timeout 5m
  --set agent.image.repository=localhost/tessera-node-agent --set "agent.image.tag=$tag"
  --set webhook.image.repository=localhost/tessera-webhook --set "webhook.image.tag=$tag"
  --set deviceClasses.default.extendedResourceName=vgpu.tessera.dev/gpu)
[[ $k8s == 1.36 ]] || helm_args+=(--set deviceClasses.extendedResourceGateEnabled=true)
helm upgrade --install tessera "$repo/charts/tessera" "${helm_args[@]}"
kubectl -n tessera-system get pods -o wide
kubectl get deviceclasses
for _ in $(seq 60); do
  kubectl get resourceslices --field-selector "spec.nodeName=$node,spec.driver=vgpu.tessera.dev" \
    -o name | grep -q . && break
  sleep 2
done
kubectl get resourceslices -o wide
kubectl get resourceslices --field-selector "spec.driver=vgpu.tessera.dev" -o yaml |
  grep -E -A3 '^\s+(capacity|memory|cores|allowMultipleAllocations):' | head -40

samples=$repo/samples/k8s
# Applies sample files with the image tag built above.
apply() {
  for file in "$@"; do
    sed "s|localhost/tessera-node-agent:0.1.0|localhost/tessera-node-agent:$tag|" "$file"
    echo "---"
  done | kubectl apply -f -
}
finished() {  # NAMESPACE POD: waits until the pod ends, prints its log
  kubectl -n "$1" wait --for=jsonpath='{.status.phase}'=Succeeded --timeout=10m "pod/$2" ||
    kubectl -n "$1" describe pod "$2"
  kubectl -n "$1" logs "$2"
}
claims() { kubectl -n "$1" get resourceclaims -o custom-columns='NAME:.metadata.name,STATE:.status.allocation.devices.results[0].device,SHARE:.status.allocation.devices.results[0].shareID,CONSUMED:.status.allocation.devices.results[0].consumedCapacity'; }
top_once() { timeout 5 kubectl -n tessera-system exec ds/tessera-node-agent -c node-agent -- tessera top || true; }

apply "$samples/namespace.yaml"

say "sample one-share: 8Gi and 30 % (memory-fill, then compute-burn for 60 s)"
apply "$samples"/one-share/*.yaml
kubectl -n tessera-samples wait --for=condition=Ready --timeout=5m pod/one-share || true
claims tessera-samples
top_once
finished tessera-samples one-share
kubectl delete -f "$samples/one-share/" --wait

say "sample two-tenants: 8Gi/60 % and 4Gi/40 % on one GPU, then a third that stays Pending"
apply "$samples"/two-tenants/*.yaml
kubectl -n tessera-samples wait --for=condition=Ready --timeout=5m pod/tenant-a pod/tenant-b
claims tessera-samples
top_once
apply "$samples"/two-tenants/third/*.yaml
sleep 15
kubectl -n tessera-samples get pods
kubectl -n tessera-samples get events --field-selector involvedObject.name=tenant-c | tail -3
kubectl delete -f "$samples/two-tenants/third/" -f "$samples/two-tenants/" --wait

if ((skip_mps == 0)); then
  say "sample mps-share: 4Gi and 25 % through a per-share MPS daemon"
  apply "$samples"/mps-share/*.yaml
  finished tessera-samples mps-share
  claims tessera-samples
  kubectl delete -f "$samples/mps-share/" --wait
fi

say "sample shorthand: tessera.dev/gpu-memory 8Gi, gpu-cores 30, translated by the webhook"
apply "$samples"/shorthand/*.yaml
kubectl -n tessera-samples get pod shorthand -o jsonpath='{.spec.resourceClaims}{"\n"}'
kubectl -n tessera-samples get resourceclaimtemplates
finished tessera-samples shorthand
kubectl delete -f "$samples/shorthand/" --wait

say "sample hami: nvidia.com/gpumem 3000, gpucores 30, in a namespace labelled for HAMi names"
apply "$samples"/hami/*.yaml
kubectl -n tessera-samples-hami get pod hami -o jsonpath='{.spec.resourceClaims}{"\n"}'
finished tessera-samples-hami hami
kubectl delete -f "$samples/hami/pod.yaml" --wait

say "sample extended-resource: vgpu.tessera.dev/gpu: 1, the whole GPU"
apply "$samples"/extended-resource/*.yaml
finished tessera-samples extended-resource
claims tessera-samples
kubectl delete -f "$samples/extended-resource/" --wait

say "what to look at"
cat <<EOF
  kubectl get resourceslices -o yaml            # the GPU, its memory and cores capacity
  kubectl get deviceclasses                     # vgpu.tessera.dev, mps.vgpu.tessera.dev
  kubectl -n tessera-system logs ds/tessera-node-agent -c node-agent
  kubectl -n tessera-system exec -it ds/tessera-node-agent -c node-agent -- tessera top
  kubectl -n tessera-system port-forward ds/tessera-node-agent 9464 & curl -s localhost:9464/metrics | grep ^tessera_
  samples/k8s/*/README.md                       # each sample, what it prints
  kind delete cluster --name $name              # when done
EOF
((delete_at_end == 0)) || kind delete cluster --name "$name"

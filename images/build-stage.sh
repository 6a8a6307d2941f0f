#!/bin/sh
# The Dockerfiles' build stage: configures Tessera for release without tests or the simulated GPU,
# builds one image's programs and stages them with their libraries into /out (stage-binaries.sh).
# Usage (inside the build stage): build-stage.sh node-agent|webhook
set -eu
component=${1:?usage: build-stage.sh node-agent|webhook}
case "$component" in
  node-agent) targets="tessera-node-agent tessera libvgpu tessera-cdi-hook memory-fill compute-burn" samples=ON ;;
  webhook) targets="tessera-webhook" samples=OFF ;;
  *)
    echo "build-stage: unknown image '$component'" >&2
    exit 2
    ;;
esac
start=$(date +%s)
cmake -S /src -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_BUILD_TESTS=OFF \
  -DTESSERA_BUILD_SIMGPU=OFF -DTESSERA_BUILD_SAMPLES="$samples" \
  -DCUDAToolkit_ROOT=/usr/local/cuda -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc >/dev/null
# shellcheck disable=SC2086 # one word per target
cmake --build /build -j "$(nproc)" --target $targets
/src/images/stage-binaries.sh "$component" /build /out
echo "build-stage: $component built and staged in $(($(date +%s) - start)) s on $(nproc) cores"

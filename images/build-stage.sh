#!/bin/sh
# The Dockerfiles' build stage: configures Tessera for release without tests or the simulated GPU,
# builds one image's programs and stages them with their libraries into /out (stage-binaries.sh).
# Usage (inside the build stage): build-stage.sh node-agent|webhook
set -eu
component=${1:?usage: build-stage.sh node-agent|webhook}
case "$component" in
  node-agent) targets="tessera-node-agent tessera libvgpu memory-fill compute-burn" samples=ON ;;
  webhook) targets="tessera-webhook" samples=OFF ;;
  *)
    echo "build-stage: unknown image '$component'" >&2
    exit 2
    ;;
esac
start=$(date +%s)
# Debian 12's CMake 3.25 marks CUDA::nvToolsExt deprecated without checking that the target exists,
# and CUDA 13 has no nvToolsExt, so the configure stops there. Later CMake releases check first;
# this is the same one-line change (the machine these images were first built on carries it too).
module=/usr/share/cmake-3.25/Modules/FindCUDAToolkit.cmake
unchecked='    if(CMAKE_MINIMUM_REQUIRED_VERSION VERSION_GREATER_EQUAL 3.25)'
if [ -f "$module" ] && grep -qxF "$unchecked" "$module"; then
  sed -i "s/^$unchecked\$/    if(TARGET CUDA::nvToolsExt AND CMAKE_MINIMUM_REQUIRED_VERSION VERSION_GREATER_EQUAL 3.25)/" \
    "$module"
fi
cmake -S /src -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_BUILD_TESTS=OFF \
  -DTESSERA_BUILD_SIMGPU=OFF -DTESSERA_BUILD_SAMPLES="$samples" \
  -DCUDAToolkit_ROOT=/usr/local/cuda -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc >/dev/null
# shellcheck disable=SC2086 # one word per target
cmake --build /build -j "$(nproc)" --target $targets
/src/images/stage-binaries.sh "$component" /build /out
echo "build-stage: $component built and staged in $(($(date +%s) - start)) s on $(nproc) cores"

#!/usr/bin/env bash
# Builds the tessera-node-agent and tessera-webhook images with Debian's podman (or buildah), from
# bases made without a registry:
#   - the runtime base (localhost/tessera-runtime-base:bookworm) from this host's files
#     (images/base/make-runtime-rootfs.sh), imported from a tar;
#   - for a release build, the build stage's base (localhost/tessera-build-base:bookworm), Debian
#     bookworm with the toolchain made by mmdebstrap (images/base/make-build-rootfs.sh), imported
#     from a tar; CUDA comes from --cuda (default /usr/local/cuda) as a build context.
#
# Usage: scripts/build-images.sh [options]
#   --prebuilt BUILD_DIR  do not compile: the images' `runtime-prebuilt` target, from the programs of
#                         an existing build folder (e.g. build/release); what the tests use
#   --tag TAG             image tag (default: the chart's appVersion, charts/tessera/Chart.yaml, which
#                         is also the chart's default image tag)
#   --engine podman|buildah   (default: podman, else buildah, whichever is installed)
#   --save DIR            also write DIR/<image>-<tag>.tar (podman save; `kind load image-archive`)
#   --only node-agent|webhook
#   --rebuild-bases       make the base images again even when they exist
#   --cuda DIR            the CUDA toolkit for the build stage (default /usr/local/cuda)
#   --print-images        print the images' names (localhost/tessera-<component>:<tag>) and exit
# Environment: ENGINE_ARGS, global options for every engine call (e.g. a private storage:
# "--root DIR --runroot DIR --storage-driver vfs"); CONTAINERS_CONF as podman reads it.
# Prints how long each step took.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)

prebuilt="" tag="" engine="" save="" only="" rebuild_bases=0 cuda=/usr/local/cuda print_images=0
while (($#)); do
  case "$1" in
    --prebuilt) prebuilt=$(cd "$2" && pwd) && shift 2 ;;
    --tag) tag=$2 && shift 2 ;;
    --engine) engine=$2 && shift 2 ;;
    --save) save=$2 && shift 2 ;;
    --only) only=$2 && shift 2 ;;
    --rebuild-bases) rebuild_bases=1 && shift ;;
    --cuda) cuda=$2 && shift 2 ;;
    --print-images) print_images=1 && shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' && exit 0 ;;
    *) echo "build-images: unknown option $1 (see --help)" >&2 && exit 2 ;;
  esac
done
# The chart's images default to localhost/tessera-<component>:<appVersion>, so the default tag here
# is that appVersion: images built, saved and imported on a node are the ones the chart names.
if [[ -z $tag ]]; then
  tag=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' "$repo/charts/tessera/Chart.yaml")
  [[ -n $tag ]] || {
    echo "build-images: no appVersion in $repo/charts/tessera/Chart.yaml (--tag TAG)" >&2
    exit 1
  }
fi
components=(node-agent webhook)
[[ -z $only ]] || components=("$only")
if ((print_images)); then
  for component in "${components[@]}"; do echo "localhost/tessera-$component:$tag"; done
  exit 0
fi
if [[ -z $engine ]]; then
  if command -v podman >/dev/null; then engine=podman; elif command -v buildah >/dev/null; then
    engine=buildah
  else
    echo "build-images: neither podman nor buildah is installed (apt-get install podman)" >&2
    exit 1
  fi
fi
[[ $engine == podman || $engine == buildah ]] || {
  echo "build-images: --engine must be podman or buildah, not $engine" >&2
  exit 2
}
read -r -a engine_args <<<"${ENGINE_ARGS:-}"

work=$(mktemp -d "${TMPDIR:-/tmp}/tessera-images.XXXXXX")
trap 'rm -rf "$work"' EXIT
e() { "$engine" "${engine_args[@]}" "$@"; }
seconds() { echo $(($(date +%s) - $1)); }
exists() { e image exists "$1" 2>/dev/null || e inspect --type image "$1" >/dev/null 2>&1; }

# Imports TAR as the image TAG (podman import; with buildah: a scratch container committed).
import_tar() {
  local tar=$1 image=$2
  if [[ $engine == podman ]]; then
    e import --quiet "$tar" "$image" >/dev/null
  else
    local ctr
    ctr=$(e from scratch)
    e add "$ctr" "$tar" / >/dev/null
    e commit --rm "$ctr" "$image" >/dev/null
  fi
}

runtime_base=localhost/tessera-runtime-base:bookworm
build_base=localhost/tessera-build-base:bookworm
if ((rebuild_bases)) || ! exists "$runtime_base"; then
  start=$(date +%s)
  "$repo/images/base/make-runtime-rootfs.sh" "$work/runtime-rootfs"
  tar -C "$work/runtime-rootfs" --numeric-owner -cf "$work/runtime-rootfs.tar" .
  import_tar "$work/runtime-rootfs.tar" "$runtime_base"
  echo "build-images: $runtime_base made from this host's files in $(seconds "$start") s"
fi
if [[ -z $prebuilt ]] && { ((rebuild_bases)) || ! exists "$build_base"; }; then
  start=$(date +%s)
  "$repo/images/base/make-build-rootfs.sh" "$work/build-rootfs.tar"
  import_tar "$work/build-rootfs.tar" "$build_base"
  rm -f "$work/build-rootfs.tar"
  echo "build-images: $build_base made with mmdebstrap in $(seconds "$start") s"
fi

for component in "${components[@]}"; do
  image=localhost/tessera-$component:$tag
  start=$(date +%s)
  args=(build --file "$repo/images/$component/Dockerfile" --tag "$image"
    --build-arg "RUNTIME_BASE=$runtime_base" --build-arg "BUILD_BASE=$build_base")
  if [[ -n $prebuilt ]]; then
    "$repo/images/stage-binaries.sh" "$component" "$prebuilt" "$work/staged-$component"
    e "${args[@]}" --target runtime-prebuilt --build-context "staged=$work/staged-$component" \
      "$work/staged-$component" >"$work/build.log" 2>&1 || {
      cat "$work/build.log" >&2
      exit 1
    }
    how="from $prebuilt"
  else
    [[ -x $cuda/bin/nvcc ]] || {
      echo "build-images: no nvcc under $cuda (--cuda DIR: the CUDA toolkit)" >&2
      exit 1
    }
    e "${args[@]}" --target runtime --build-context "cuda=$(cd "$cuda" && pwd -P)" "$repo"
    how="compiled from the repo"
  fi
  echo "build-images: $image built ($how) in $(seconds "$start") s"
  if [[ -n $save ]]; then
    mkdir -p "$save"
    rm -f "$save/tessera-$component-$tag.tar"
    if [[ $engine == podman ]]; then
      e save --quiet --format docker-archive -o "$save/tessera-$component-$tag.tar" "$image"
    else
      e push --quiet "$image" "docker-archive:$save/tessera-$component-$tag.tar:$image"
    fi
    echo "build-images: saved $save/tessera-$component-$tag.tar"
  fi
done

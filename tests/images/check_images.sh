#!/usr/bin/env bash
# Builds the tessera-node-agent and tessera-webhook images with scripts/build-images.sh --prebuilt
# (the Dockerfiles' runtime-prebuilt target, from this build folder's programs) in a private
# podman storage, and runs their programs inside them:
#   - tessera-node-agent --help (the image's entrypoint), tessera --help, tessera-webhook --help,
#     memory-fill and compute-burn --help;
#   - libvgpu.so at /opt/tessera/lib/libvgpu.so, byte for byte the build's, copied into a mounted
#     host folder with the image's own tools, as the chart's init container does;
#   - memory-fill on the simulated GPU, its driver mounted from outside (as the CDI spec brings the
#     host's driver), so the samples' program runs in the image;
#   - the webhook image runs as 65532; no NVIDIA driver file is in either image;
#   - the archive --save writes (for kind load image-archive) loads back and runs.
# Exits 77 (ctest: skipped) with the reason where podman cannot run here.
# Usage: check_images.sh REPO BUILD_DIR SIMGPU_LIB_DIR
set -euo pipefail
repo=$(cd "$1" && pwd) build=$(cd "$2" && pwd) simgpu_lib=$(cd "$3" && pwd)
total_start=$(date +%s)

skip() {
  echo "SKIPPED: $*"
  exit 77
}
fail() {
  echo "FAILED: $*" >&2
  exit 1
}
[[ $(id -u) -eq 0 ]] || skip "needs root: podman runs here as root with vfs storage and runc" \
  "(as agent.ContainerRuntime* do); this is uid $(id -u)"
command -v podman >/dev/null || skip "podman is not installed (scripts/install-deps.sh installs it)"
command -v runc >/dev/null || skip "runc is not installed (scripts/install-deps.sh installs it)"

# Podman's run root must be a short path (at most 50 characters).
work=$(mktemp -d /tmp/tessera-images-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
# This kind of machine refuses to raise RLIMIT_NOFILE/NPROC, which podman does by default; crun
# refuses its hybrid cgroup layout (runc does not); vfs storage is plain folders.
printf '[containers]\ndefault_ulimits = []\n' >"$work/containers.conf"
export CONTAINERS_CONF=$work/containers.conf
export ENGINE_ARGS="--root $work/storage --runroot $work/run --storage-driver vfs --runtime runc
  --cgroup-manager cgroupfs --events-backend file"
read -r -a engine_args <<<"$ENGINE_ARGS"
p() { podman "${engine_args[@]}" "$@"; }
run() { p run --rm --network none "$@"; }

# Whether podman works here at all: import a base and start a container from it. Past this point
# every failure is the images' own.
version=$(p --version 2>&1) || skip "podman --version: $(tail -1 <<<"$version")"
"$repo/images/base/make-runtime-rootfs.sh" "$work/probe-rootfs" >/dev/null
tar -C "$work/probe-rootfs" --numeric-owner -cf "$work/probe.tar" .
out=$(p import --quiet "$work/probe.tar" localhost/tessera-probe:1 2>&1) ||
  skip "podman cannot import an image here: $(tail -1 <<<"$out")"
out=$(run localhost/tessera-probe:1 /usr/bin/sh -c true 2>&1) ||
  skip "podman cannot start a container here: $(tail -1 <<<"$out")"
rm -rf "$work/probe-rootfs" "$work/probe.tar"

tag=ctest
start=$(date +%s)
# --rebuild-bases: the runtime base as the script makes it, not left from an earlier run.
"$repo/scripts/build-images.sh" --engine podman --prebuilt "$build" --tag "$tag" --rebuild-bases \
  --save "$work/archives" || fail "scripts/build-images.sh failed"
build_seconds=$(($(date +%s) - start))
agent=localhost/tessera-node-agent:$tag webhook=localhost/tessera-webhook:$tag

probe=$(run "$agent" --help 2>&1) || fail "tessera-node-agent --help (the entrypoint): $probe"
start=$(date +%s)
expect_help() {  # IMAGE ENTRYPOINT TEXT: ENTRYPOINT --help runs in IMAGE and prints TEXT
  local out
  out=$(run --entrypoint "$2" "$1" --help 2>&1) || fail "$2 --help in $1 exited $?: $out"
  grep -q "$3" <<<"$out" || fail "$2 --help in $1 does not print '$3': $out"
  echo "ok: $1: $2 --help: $(head -1 <<<"$out")"
}
grep -q "Tessera node agent" <<<"$probe" || fail "the agent image's entrypoint printed: $probe"
echo "ok: $agent: entrypoint --help: $(head -1 <<<"$probe")"
expect_help "$agent" /usr/local/bin/tessera-node-agent "Usage: tessera-node-agent"
expect_help "$agent" /usr/local/bin/tessera "tessera"
expect_help "$agent" /usr/local/bin/memory-fill "memory-fill"
expect_help "$agent" /usr/local/bin/compute-burn "compute-burn"
expect_help "$webhook" /usr/local/bin/tessera-webhook "tessera-webhook: the admission webhook"

# The shim at the documented path, the build's own bytes, installed into a host folder the way the
# chart's init container does it (a new file, sync, renamed over the old one) with the image's tools,
# under the init container's securityContext from the chart (agent.shimInstaller.securityContext in
# charts/tessera/values.yaml) as podman flags: with the chart's defaults uid 0, every capability
# dropped, a read-only root (no tmpfs either), no privilege escalation, not privileged. The host
# folder is root's 0755, as kubelet makes a hostPath DirectoryOrCreate.
shim_flags=$(python3 - "$repo/charts/tessera/values.yaml" <<'EOF'
import sys
import yaml
context = yaml.safe_load(open(sys.argv[1]))["agent"]["shimInstaller"]["securityContext"]
flags = []
for key, value in context.items():
    if key == "runAsUser":
        flags.append(f"--user={value}")
    elif key == "runAsNonRoot":
        if value:
            sys.exit("agent.shimInstaller.securityContext.runAsNonRoot is true, but the host "
                     "folder is root's")
    elif key == "privileged":
        if value:
            flags.append("--privileged")
    elif key == "allowPrivilegeEscalation":
        if not value:
            flags.append("--security-opt=no-new-privileges")
    elif key == "readOnlyRootFilesystem":
        if value:
            flags += ["--read-only", "--read-only-tmpfs=false"]
    elif key == "capabilities" and set(value) <= {"drop", "add"}:
        flags += [f"--cap-drop={c}" for c in value.get("drop", [])]
        flags += [f"--cap-add={c}" for c in value.get("add", [])]
    else:
        sys.exit(f"agent.shimInstaller.securityContext.{key}: {value!r}: not mapped to podman here")
print(" ".join(flags))
EOF
) || fail "the chart's shim-installer securityContext cannot be applied with podman"
read -r -a shim_flags <<<"$shim_flags"
mkdir -p "$work/host-lib"
chmod 0755 "$work/host-lib"
# shellcheck disable=SC2016 # expanded by the container's sh
install='set -eu; s=/opt/tessera/lib/libvgpu.so; t=/host-lib/libvgpu.so
  if [ -f "$t" ] && cmp -s "$s" "$t"; then echo up to date; exit 0; fi
  n="/host-lib/.libvgpu.so.new.$$"
  cp "$s" "$n"; chmod 0755 "$n"; sync "$n"; mv -f "$n" "$t"; sync /host-lib; echo installed'
install_shim() {
  run "${shim_flags[@]}" -v "$work/host-lib:/host-lib" --entrypoint /bin/sh "$agent" -c "$install"
}
out=$(install_shim 2>&1) ||
  fail "installing the shim with the image's tools under ${shim_flags[*]}: $out"
cmp "$build/libvgpu/libvgpu.so" "$work/host-lib/libvgpu.so" ||
  fail "the shim copied out of $agent differs from $build/libvgpu/libvgpu.so"
out=$(install_shim 2>&1) || fail "installing the shim again: $out"
[[ $out == "up to date" ]] || fail "an unchanged shim was copied again: $out"
# The flags hold: the same container can neither write its own root nor change a file's owner.
out=$(run "${shim_flags[@]}" --entrypoint /bin/sh "$agent" -c 'touch /opt/x' 2>&1) &&
  fail "the shim installer's root filesystem is writable under ${shim_flags[*]}"
out=$(run "${shim_flags[@]}" -v "$work/host-lib:/host-lib" --entrypoint /bin/sh "$agent" -c \
  'chown 1:1 /host-lib/libvgpu.so' 2>&1) &&
  fail "the shim installer could chown under ${shim_flags[*]} (a capability is left)"
echo "ok: $agent: /opt/tessera/lib/libvgpu.so is the build's shim; the image's sh, cmp, cp, sync," \
  "mv install it under the chart's securityContext (${shim_flags[*]})"

# No driver file in the images: the driver is the host's.
for image in "$agent" "$webhook"; do
  found=$(run --user 0 --entrypoint /usr/bin/sh "$image" -c \
    'ls /usr/bin /usr/local/bin /usr/lib/x86_64-linux-gnu /usr/lib64' | grep -E \
    '^(nvidia-smi|nvidia-cuda-mps-control|libcuda\.so|libnvidia-ml\.so)' || true)
  [[ -z $found ]] || fail "$image holds NVIDIA driver files: $found"
done
# ldconfig works in the agent image (the NVIDIA Container Toolkit's update-ldcache hook runs it).
out=$(run --entrypoint /usr/bin/sh "$agent" -c 'ldconfig && ldconfig -p' 2>&1) ||
  fail "ldconfig in $agent: $out"
grep -q 'libc.so.6 (libc6,x86-64)' <<<"$out" || fail "ldconfig in $agent cached no libc: $out"
user=$(p image inspect --format '{{.Config.User}}' "$webhook")
[[ $user == 65532:65532 ]] || fail "$webhook runs as '$user', not 65532:65532"
echo "ok: no NVIDIA driver file in either image; ldconfig runs in $agent; $webhook runs as $user"

# The saved archive (what kind-demo.sh loads into the kind node) holds a working image.
p rmi "$webhook" >/dev/null
p load --quiet -i "$work/archives/tessera-webhook-$tag.tar" >/dev/null ||
  fail "podman load of $work/archives/tessera-webhook-$tag.tar failed"
expect_help "$webhook" /usr/local/bin/tessera-webhook "tessera-webhook: the admission webhook"

# memory-fill in the agent image on the simulated GPU, the driver mounted from outside.
out=$(run -v "$simgpu_lib:/driver:ro" -e LD_LIBRARY_PATH=/driver \
  -e 'SIMGPU_DEVICES=name=NVIDIA H200,memory=16Gi,sms=132,cc=9.0' -e SIMGPU_STATE=/tmp/simgpu.state \
  --entrypoint /usr/local/bin/memory-fill "$agent" --api alloc --chunk 1Gi --max 2Gi 2>&1) ||
  fail "memory-fill in $agent on the simulated GPU: $out"
grep -q "\"bytes_obtained\": *2147483648" <<<"$out" || fail "memory-fill did not report 2 GiB: $out"
echo "ok: memory-fill in $agent obtained 2 GiB on the simulated GPU"

echo "sizes: $(p images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | tr '\n' ';')"
echo "timing: images built in ${build_seconds} s, checks in $(($(date +%s) - start)) s," \
  "$(($(date +%s) - total_start)) s in all"

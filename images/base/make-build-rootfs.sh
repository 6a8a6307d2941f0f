#!/bin/sh
# Writes the build stage's base image as a tar: Debian bookworm with the compiler, CMake, Ninja
# and the -dev packages Tessera compiles against (the compile-time part of
# scripts/install-deps.sh), made by mmdebstrap from the Debian mirror this host's apt uses. No
# container registry is involved; `podman import` turns the tar into the image. The CUDA toolkit
# (headers, nvcc) is not a Debian package of the version Tessera needs: the Dockerfiles copy it
# from the host's /usr/local/cuda through a named build context.
# Usage: make-build-rootfs.sh OUT.tar [MIRROR]
set -eu
out=${1:?usage: make-build-rootfs.sh OUT.tar [MIRROR]}
mirror=${2:-http://deb.debian.org/debian}
packages="build-essential cmake ninja-build pkg-config python3 ca-certificates
  libcli11-dev nlohmann-json3-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libcurl4-openssl-dev libssl-dev libyaml-cpp-dev libcpp-httplib-dev libspdlog-dev
  prometheus-cpp-dev"
command -v mmdebstrap >/dev/null || {
  echo "make-build-rootfs: mmdebstrap is not installed (scripts/install-deps.sh installs it)" >&2
  exit 1
}
# shellcheck disable=SC2086 # the list is split into words on purpose
mmdebstrap --variant=apt --include="$(echo $packages | tr ' ' ',')" \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  bookworm "$out" "$mirror"

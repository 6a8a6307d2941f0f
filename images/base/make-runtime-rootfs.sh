#!/bin/sh
# Assembles the runtime base image's root filesystem from this Debian host's own files, without a
# registry or a network: a merged-/usr layout, root and a non-root user (65532), the CA bundle,
# /tmp, the loader's configuration with ldconfig, and a few tools for the chart's init container
# and for debugging (sh, cp, mv, cmp, ...),
# each with the shared libraries ldd names for it. The images' own programs and libraries are
# added on top by their Dockerfiles (stage-binaries.sh), so this base holds no Tessera file.
# Usage: make-runtime-rootfs.sh ROOTFS_DIR
set -eu
rootfs=${1:?usage: make-runtime-rootfs.sh ROOTFS_DIR}
tools="sh cat cp mv rm ln ls mkdir chmod cmp sync sleep env"

rm -rf "$rootfs"
mkdir -p "$rootfs"
rootfs=$(cd "$rootfs" && pwd)
cd "$rootfs"
mkdir -p usr/bin usr/sbin usr/lib/x86_64-linux-gnu usr/lib64 usr/local/bin etc/ssl/certs \
  root home/nonroot run var/tmp tmp
for link in bin sbin lib lib64; do ln -s "usr/$link" "$link"; done
ln -s ../run var/run
chmod 1777 tmp var/tmp
chmod 0700 root

cat >etc/passwd <<'EOF'
root:x:0:0:root:/root:/bin/sh
nonroot:x:65532:65532:nonroot:/home/nonroot:/usr/sbin/nologin
EOF
cat >etc/group <<'EOF'
root:x:0:
nonroot:x:65532:
EOF
chown 65532:65532 home/nonroot
printf 'passwd: files\ngroup: files\nhosts: files dns\n' >etc/nsswitch.conf
# The loader's configuration and ldconfig: the NVIDIA Container Toolkit's update-ldcache hook runs
# ldconfig in the container after mounting the driver's libraries (Debian's ldconfig is static).
mkdir -p etc/ld.so.conf.d
echo 'include /etc/ld.so.conf.d/*.conf' >etc/ld.so.conf
printf '/usr/local/lib\n/usr/lib/x86_64-linux-gnu\n' >etc/ld.so.conf.d/x86_64-linux-gnu.conf
cp -L /sbin/ldconfig usr/sbin/ldconfig
cp -L /etc/ssl/certs/ca-certificates.crt etc/ssl/certs/ca-certificates.crt
[ -f /etc/os-release ] && cp -L /etc/os-release etc/os-release

put() {
  mkdir -p "$rootfs$(dirname "$2")"
  cp -L "$1" "$rootfs$2"
}
for tool in $tools; do
  path=$(command -v "$tool")
  case "$path" in
    /*) ;;
    *)
      echo "make-runtime-rootfs: $tool is not a program on this host" >&2
      exit 1
      ;;
  esac
  put "$path" "/usr/bin/$tool"
  ldd "$path" | sed -n -e 's/.*=> \(\/[^ ]*\) (0x.*/\1/p' -e 's/^[[:space:]]*\(\/[^ ]*\) (0x.*/\1/p' |
    while read -r library; do
      put "$library" "$(cd "$(dirname "$library")" && pwd -P)/$(basename "$library")"
    done
done
echo "make-runtime-rootfs: $rootfs: $(find "$rootfs" -type f | wc -l) files, $(du -sh "$rootfs" | cut -f1)"

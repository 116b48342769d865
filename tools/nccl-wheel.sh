#!/usr/bin/env bash
# Fetches NCCL's PyPI wheel nvidia-nccl-cu13==VERSION into DIR and unpacks it
# there, for the build's device-API code (make nccl-wheel; the Makefile runs
# it once on its own when CUDA is found and NCCL_HOME is not set).
#
#   bash tools/nccl-wheel.sh VERSION DIR
#
# Result: DIR/nvidia/nccl/{include/nccl.h,include/nccl_device/,lib/libnccl.so.2}
# (the wheel's layout; the Makefile points NCCL_HOME at DIR/nvidia/nccl).
# A wheel file already in DIR (or DMUON_NCCL_WHEEL=/path/to/file.whl, e.g. on
# a machine without network) is unpacked without downloading.  The unpacked
# tree appears only complete: files go to a temporary directory renamed into
# place, and the wheel is deleted after unpacking.  Log: DIR.log.
# Exit: 0 when DIR/nvidia/nccl is complete; 1 with a one-line reason otherwise
# (no python3/pip, no network, bad wheel).
set -u
version=${1:?usage: nccl-wheel.sh VERSION DIR}
dir=${2:?usage: nccl-wheel.sh VERSION DIR}
pkg="nvidia-nccl-cu13==$version"
log="$dir.log"
mkdir -p "$dir" || { echo "nccl-wheel: cannot create $dir"; exit 1; }
: > "$log"
if [ -f "$dir/nvidia/nccl/include/nccl_device.h" ] && [ -f "$dir/nvidia/nccl/lib/libnccl.so.2" ]; then
    echo "nccl-wheel: NCCL $version already unpacked in $dir/nvidia/nccl"
    exit 0
fi
fail() { echo "nccl-wheel: $* (log: $log)"; exit 1; }

whl=${DMUON_NCCL_WHEEL:-}
[ -n "$whl" ] || whl=$(ls "$dir"/nvidia_nccl_cu13-"$version"-*.whl 2>/dev/null | head -n1)
if [ -z "$whl" ]; then
    command -v python3 > /dev/null || fail "python3 not found: cannot download $pkg"
    python3 -m pip --version >> "$log" 2>&1 || fail "pip not found (python3 -m pip): cannot download $pkg"
    echo "nccl-wheel: downloading $pkg from PyPI (about 300 MB) into $dir"
    timeout 900 python3 -m pip download --no-deps --only-binary=:all: --disable-pip-version-check \
        --retries 1 --timeout 20 \
        -d "$dir" "$pkg" >> "$log" 2>&1 || fail "pip download $pkg failed (no network?)"
    whl=$(ls "$dir"/nvidia_nccl_cu13-"$version"-*.whl 2>/dev/null | head -n1)
    [ -n "$whl" ] || fail "pip reported success but left no wheel in $dir"
fi
[ -f "$whl" ] || fail "wheel '$whl' does not exist"

# a wheel is a zip archive
tmp="$dir/.unpack.$$"
rm -rf "$tmp"
python3 -m zipfile -e "$whl" "$tmp" >> "$log" 2>&1 || { rm -rf "$tmp"; fail "cannot unpack $whl"; }
for f in include/nccl.h include/nccl_device.h lib/libnccl.so.2; do
    [ -f "$tmp/nvidia/nccl/$f" ] || { rm -rf "$tmp"; fail "$whl lacks nvidia/nccl/$f"; }
done
got=$(sed -n 's/^#define NCCL_\(MAJOR\|MINOR\|PATCH\) *\([0-9]*\).*/\2/p' \
      "$tmp/nvidia/nccl/include/nccl.h" | paste -sd.)
[ "$got" = "$version" ] || { rm -rf "$tmp"; fail "$whl holds NCCL $got, not $version"; }
rm -rf "$dir/nvidia"
mv "$tmp/nvidia" "$dir/nvidia" || fail "cannot move the unpacked tree into $dir"
rm -rf "$tmp"
[ -n "${DMUON_NCCL_WHEEL:-}" ] || rm -f "$whl"
echo "nccl-wheel: NCCL $version unpacked in $dir/nvidia/nccl"

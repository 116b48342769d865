#!/usr/bin/env bash
# Installs the Debian packages dmuon's build and tests need, when missing.
# Run as root (or with sudo); does nothing when everything is present.
set -euo pipefail
pkgs="build-essential pkg-config libyaml-dev libsqlite3-dev sqlite3 libopenblas-dev
      liblapacke-dev libopenmpi-dev openmpi-bin libcmocka-dev
      fortunes gnuplot-nox clang libclang-rt-14-dev iproute2 util-linux"
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
    echo "dependencies: all present"
    exit 0
fi
echo "dependencies: installing$missing"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends $missing

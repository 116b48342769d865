#!/usr/bin/env bash
# Installs the Debian packages dmuon's build and tests need, when missing
# (run as root or with sudo), then the test-only Python packages in a
# virtual environment at build/pyenv (never committed; tests/run.sh uses it
# as DMUON_PYTHON when it exists).  A failing pip is reported, not fatal:
# the tests that need those packages skip without them.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pkgs="build-essential pkg-config libyaml-dev libsqlite3-dev sqlite3 libopenblas-dev
      liblapacke-dev libopenmpi-dev openmpi-bin libcmocka-dev
      fortunes gnuplot-nox clang libclang-rt-14-dev iproute2 util-linux python3 python3-venv"
# torch is pinned (the binding's tests compare against torch.optim.Muon of
# this release); PyPI's wheel pulls the CUDA libraries (see docs/python.md for
# the measured download and time).  The dmuon package (python/) goes in last,
# editable, so the tests import the tree's own binding.
TORCH_PIN=2.15.0
pyenv() {
    local env="$root/build/pyenv"
    if [ -x "$env/bin/python" ] && "$env/bin/python" -c 'import safetensors.numpy, numpy' 2>/dev/null; then
        echo "test python packages: present in $env"
    elif python3 -m venv "$env" && "$env/bin/python" -m pip install -q safetensors numpy; then
        echo "test python packages: safetensors and numpy installed in $env"
    else
        echo "note: could not install the test-only Python packages (safetensors, numpy) into" \
             "$env; the tests that read exports with them will skip" >&2
        return 0
    fi
    if "$env/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH_PIN')" 2>/dev/null; then
        echo "torch $TORCH_PIN: present in $env"
    elif "$env/bin/python" -m pip install -q "torch==$TORCH_PIN"; then
        echo "torch $TORCH_PIN installed in $env"
    else
        echo "note: could not install torch==$TORCH_PIN into $env; the PyTorch binding's" \
             "tests will skip" >&2
    fi
    # optional: mpi4py lets a trainer hand dmuon a communicator (comm=)
    "$env/bin/python" -c 'import mpi4py' 2>/dev/null || "$env/bin/python" -m pip install -q mpi4py ||
        echo "note: could not install mpi4py into $env; the comm= check will not run" >&2
    if "$env/bin/python" -m pip install -q --no-deps --no-build-isolation -e "$root/python" 2>/dev/null ||
       "$env/bin/python" -m pip install -q --no-deps -e "$root/python"; then
        echo "dmuon Python package: installed in $env (editable, from python/)"
    else
        echo "note: could not install the dmuon Python package into $env" >&2
    fi
    return 0
}
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
    echo "dependencies: all present"
    pyenv
    exit 0
fi
echo "dependencies: installing$missing"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends $missing
pyenv

#!/usr/bin/env bash
# GPU checks of the Newton–Schulz engine, for a machine with one NVIDIA GPU
# (written for an H200) and the CUDA toolkit.  Not part of `make test`, which
# must pass without a GPU.  Runs in about 4 minutes:
#
#   1. build (make -j16), which compiles kernels/*.cu when nvcc is found;
#      where the libyaml / SQLite / cmocka headers are missing, only the NS
#      sources with tests/gpu/standalone.c (probe rows are then printed,
#      not stored);
#   2. dmuon-verify ns --device cuda: FP32 and BF16 numerics against the
#      float64 SVD reference computed on the CPU (small shapes and the
#      Qwen2.5-1.5B shapes);
#   3. dmuon-probe --device cuda of Qwen2.5-1.5B's Muon shapes into a
#      temporary database, then --list and --check;
#   4. dmuon-bench ns --device cuda: Gram vs direct NS and the cuBLAS sgemm
#      rate on the same shapes, FP32 and BF16.
#
# Usage: bash tests/gpu/run.sh      (log: $OUT/gpu.log, or ./gpu.log)
# DMUON_GPU_PREBUILT=1 uses binaries already in bin/ instead of building.
# Exit: 0 when every step passed, 1 otherwise; 2 when no GPU is visible.
set -u
cd "$(dirname "$0")/../.."
out_dir=${OUT:-.}
mkdir -p "$out_dir"
log="$out_dir/gpu.log"
: > "$log"
say() { echo "$*" | tee -a "$log"; }
failed=0
step() {   # step NAME TIMEOUT_S CMD...
    local name=$1 limit=$2; shift 2
    say ""
    say "== $name: $*"
    local t0=$(date +%s)
    timeout "$limit" "$@" >> "$log" 2>&1
    local rc=$?
    say "== $name: exit $rc after $(( $(date +%s) - t0 )) s"
    [ "$rc" -eq 0 ] || failed=$((failed + 1))
    return $rc
}

say "dmuon GPU checks, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(uname -n)"
if ! command -v nvidia-smi > /dev/null || ! nvidia-smi -L >> "$log" 2>&1; then
    say "no NVIDIA GPU visible (nvidia-smi -L failed): nothing to check"
    exit 2
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >> "$log" 2>&1
command -v nvcc >> "$log" 2>&1 && nvcc --version | tail -n 2 >> "$log"

export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-8}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# 1. build: the whole project, or (where libyaml / SQLite / cmocka headers
# are missing) the NS sources with tests/gpu/standalone.c
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ "${DMUON_GPU_PREBUILT:-0}" = 1 ] && [ -x bin/dmuon-verify ]; then
    # binaries built with CUDA on another machine of the same architecture
    say "using prebuilt binaries in bin/ (DMUON_GPU_PREBUILT=1)"
    V=(bin/dmuon-verify ns); B=(bin/dmuon-bench ns); mode=full
elif step build 150 make -j16 && grep -q 'CUDA: found' "$log"; then
    V=(bin/dmuon-verify ns); B=(bin/dmuon-bench ns); mode=full
else
    say "full build unavailable: building the NS sources with tests/gpu/standalone.c"
    failed=0
    cu=${CUDA_HOME:-/usr/local/cuda}
    step build-standalone 120 bash -c "nvcc -O2 -std=c++17 -arch=sm_90 -Xcompiler -fPIC \
        -Ilibcore/include -Ilibcore -c kernels/ns_cuda.cu -o $tmp/k.o &&
      mpicc -std=c11 -O2 -Ilibcore/include -Ilibcore -I$cu/include -DDMUON_HAVE_CUDA=1 \
        -D_GNU_SOURCE libcore/ns.c libcore/ns_opts.c libcore/ns_check.c libcore/probe.c \
        libcore/rc.c libcore/types.c libcore/device.c libcore/io.c tools/verify/ns.c \
        tools/bench/ns.c tests/gpu/standalone.c $tmp/k.o -o $tmp/t -L$cu/lib64 \
        -Wl,-rpath,$cu/lib64 -lcublas -lcudart -lstdc++ -llapacke -lopenblas -lm" ||
        { say "standalone build failed: see $log"; exit 1; }
    V=("$tmp/t" verify); B=("$tmp/t" bench); mode=standalone
fi

shapes=256x1536,1536x1536,8960x1536,1536x8960   # Qwen2.5-1.5B Muon shapes

# 2. numerics against the float64 reference (computed on the CPU)
step verify-fp32-small 60 "${V[@]}" --device cuda
step verify-bf16-small 60 "${V[@]}" --device cuda --dtype bf16
step verify-direct-small 60 "${V[@]}" --device cuda --variant direct-pe5 \
    --shapes 64x64,32x96,96x32,1x37,37x1,33x97
step verify-fp32-model 150 "${V[@]}" --device cuda --shapes 256x1536,1536x1536 \
    --inputs gaussian,lowrank

# 3. probe: the model's distinct Muon shapes when this build reads model
# inventories, else the same shapes spelled out
if [ "$mode" = full ]; then
    probe_args=(--device cuda --db "$tmp/c.sqlite" --warmup 5 --iters 20)
    if [ -f models/qwen2.5-1.5b.yaml ] && ! grep -q 'this build has no model inventory' bin/dmuon-probe; then
        step probe 90 bin/dmuon-probe --model models/qwen2.5-1.5b.yaml "${probe_args[@]}"
    else
        step probe 90 bin/dmuon-probe --shapes "$shapes" "${probe_args[@]}"
    fi
    step probe-list 10 bin/dmuon-probe --list --db "$tmp/c.sqlite"
    step probe-check 10 bin/dmuon-probe --check --db "$tmp/c.sqlite"
    step plan-from-gpu-costs 30 bin/dmuon-plan models/qwen2.5-1.5b.yaml --ranks 32 \
        --device cuda --db "$tmp/c.sqlite"
else
    step probe 90 "$tmp/t" probe "$shapes"
fi

# 4. Gram vs direct and the sgemm rate
step bench-fp32 90 "${B[@]}" --device cuda --shapes "$shapes,4096x4096,1024x8192" --warmup 5 --iters 20
step bench-bf16 60 "${B[@]}" --device cuda --dtype bf16 --shapes "$shapes" --warmup 5 --iters 20

say ""
say "== GPU checks: $failed step(s) failed; log: $log"
[ "$failed" -eq 0 ]

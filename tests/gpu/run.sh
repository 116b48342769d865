#!/usr/bin/env bash
# GPU checks of the Newton–Schulz engine, for a machine with one NVIDIA GPU
# (written for an H200) and the CUDA toolkit.  Not part of `make test`, which
# must pass without a GPU.  Runs in about 4 minutes:
#
#   1. build (make -j16), which compiles kernels/*.cu when nvcc is found,
#      or take binaries built elsewhere (DMUON_GPU_PREBUILT=1);
#   2. dmuon-verify ns --device cuda: FP32 and BF16 numerics against the
#      float64 SVD reference computed on the CPU (small shapes and the
#      Qwen2.5-1.5B shapes);
#   3. dmuon-probe --device cuda of Qwen2.5-1.5B's Muon shapes into a
#      temporary database, then --list, --check, and dmuon-plan from them;
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

# 1. build: the whole project here, or binaries built with CUDA elsewhere
# (DMUON_GPU_PREBUILT=1 with bin/ filled)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ "${DMUON_GPU_PREBUILT:-0}" = 1 ] && [ -x bin/dmuon-verify ]; then
    say "using prebuilt binaries in bin/ (DMUON_GPU_PREBUILT=1)"
elif ! step build 150 make -j16 || ! grep -q 'CUDA: found' "$log"; then
    say "the build failed or found no CUDA (see $log); build on a machine with the"
    say "Debian packages of 'make deps' and the CUDA toolkit, copy bin/ here and rerun"
    say "with DMUON_GPU_PREBUILT=1 (the runtime libraries must be installed)"
    exit 1
fi
V=(bin/dmuon-verify ns); B=(bin/dmuon-bench ns)

shapes=256x1536,1536x1536,8960x1536,1536x8960   # Qwen2.5-1.5B Muon shapes

# 2. numerics against the float64 reference (computed on the CPU)
step verify-fp32-small 60 "${V[@]}" --device cuda
step verify-bf16-small 60 "${V[@]}" --device cuda --dtype bf16
step verify-direct-small 60 "${V[@]}" --device cuda --variant direct-pe5 \
    --shapes 64x64,32x96,96x32,1x37,37x1,33x97
step verify-fp32-model 150 "${V[@]}" --device cuda --shapes 256x1536,1536x1536 \
    --inputs gaussian,lowrank

# 3. probe the model's distinct Muon shapes, then plan from those costs
probe_args=(--device cuda --db "$tmp/c.sqlite" --warmup 5 --iters 20)
step probe 90 bin/dmuon-probe --model models/qwen2.5-1.5b.yaml "${probe_args[@]}"
step probe-list 10 bin/dmuon-probe --list --db "$tmp/c.sqlite"
step probe-check 10 bin/dmuon-probe --check --db "$tmp/c.sqlite"
step plan-from-gpu-costs 30 bin/dmuon-plan models/qwen2.5-1.5b.yaml --ranks 32 \
    --device cuda --db "$tmp/c.sqlite"

# 4. Gram vs direct and the sgemm rate
step bench-fp32 90 "${B[@]}" --device cuda --shapes "$shapes,4096x4096,1024x8192" --warmup 5 --iters 20
step bench-bf16 60 "${B[@]}" --device cuda --dtype bf16 --shapes "$shapes" --warmup 5 --iters 20

say ""
say "== GPU checks: $failed step(s) failed; log: $log"
[ "$failed" -eq 0 ]

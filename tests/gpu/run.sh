#!/usr/bin/env bash
# GPU checks, for a machine with one NVIDIA GPU (written for an H200) and the
# CUDA toolkit: one run of this script does every GPU check of the project in
# about 8 minutes.  Not part of `make test`, which must pass without a GPU.
#
#   1. build (make -j16): kernels/*.cu when nvcc is found, NCCL's device API
#      when NCCL >= 2.30 is available (the pinned wheel in build/third_party,
#      or NCCL_HOME), or take binaries built elsewhere (DMUON_GPU_PREBUILT=1);
#   2. dmuon-verify ns --device cuda: FP32 and BF16 numerics against the
#      float64 SVD reference computed on the CPU (small shapes and the
#      Qwen2.5-1.5B shapes), including inputs with ||X||_F = 1e-39 and 1e38
#      (their lines are counted: one per shape and norm must say "ok");
#   3. dmuon-probe --device cuda of Qwen2.5-1.5B's Muon shapes into a
#      temporary database, then --list, --check, and dmuon-plan from them;
#   4. dmuon-bench ns --device cuda: Gram vs direct NS, the cuBLAS sgemm and
#      BF16 GEMM rates, the per-shape kernel choice stored in the database's
#      ns_kernel table (a second run reads it back), and the target of
#      paper C.3: gram-pe5 BF16 on the Qwen2.5-1.5B shapes within 1.2 x its
#      operation count at the measured BF16 GEMM rate (--target 1.2);
#   5. the operators on one GPU with NCCL_MULTI_RANK_GPU_ENABLE=1 (NCCL >=
#      2.30.3; LSA only, multimem and GIN are off): dmuon-verify --backend
#      nccl-dev with 2, 4 and 8 ranks as one node (gathers bit-exact,
#      integer/one/two reductions exact, random BF16/F32 reductions bit for
#      bit in sched.h's documented order), --backend nccl with 2 and 4 ranks
#      (line C; NCCL's own order for random inputs), and a short dmuon-bench
#      of both backends; then tests/mpi/comm_check on --backend nccl: the
#      control plane, per-owner / coalesced / equal groups split phase, the
#      per-owner publish and its node half, a stall meeting the deadline,
#      and the NCCL communicator handoff, on 1 rank, and on 2 and 4 ranks
#      where NCCL >= 2.30.3;
#   7. the training runtime on this GPU (tests/mpi/rt_check: every gathered
#      weight of every step against the CPU reference, with a stated
#      tolerance since cuBLAS's Newton-Schulz is not OpenBLAS's bit for bit):
#      the same run on the CPU first, then --backend nccl --device cuda on
#      one rank (lines A, B and C, F32 and BF16, save/load/export, and over
#      a handed-over NCCL unique id or communicator), on 2 and 4
#      ranks of this GPU (FSDP, and HSDP as 2 virtual nodes) where backend
#      nccl runs several ranks per GPU
#      (step 5's probe: NCCL >= 2.30.3, NCCL_MULTI_RANK_GPU_ENABLE=1), and
#      what the NCCL backends do not offer yet (line D's operators) refused
#      by name rather than run.
#
# Usage: bash tests/gpu/run.sh      (log: $OUT/gpu.log, or ./gpu.log)
# DMUON_GPU_PREBUILT=1 uses binaries already in bin/ instead of building
# (their libnccl.so.2 must resolve here: see the ldd line in the log).
# NCCL: the build fetches the pinned nvidia-nccl-cu13 2.32.3 wheel from PyPI
# (about 300 MB); without network give DMUON_NCCL_WHEEL=/path/to/the.whl or
# NCCL_HOME=DIR (NCCL >= 2.30.3).  With only an older NCCL the nccl-dev and
# several-ranks-per-GPU steps are reported as skipped, with the reason.
# Exit: 0 when every step ran and passed; 1 when a step failed; 3 when none
# failed but some were skipped (the log's summary names them and why); 2
# when no GPU is visible.
set -u
cd "$(dirname "$0")/../.."
out_dir=${OUT:-.}
mkdir -p "$out_dir"
log="$out_dir/gpu.log"
: > "$log"
say() { echo "$*" | tee -a "$log"; }
failed=0 skipped=0
failed_names="" skipped_names=""
step() {   # step NAME TIMEOUT_S CMD...
    local name=$1 limit=$2; shift 2
    say ""
    say "== $name: $*"
    local t0=$(date +%s)
    timeout "$limit" "$@" >> "$log" 2>&1
    local rc=$?
    say "== $name: exit $rc after $(( $(date +%s) - t0 )) s"
    if [ "$rc" -ne 0 ]; then
        failed=$((failed + 1))
        failed_names="$failed_names $name"
    fi
    return $rc
}
skip() {   # skip NAME REASON
    say ""
    say "== $1: SKIPPED: $2"
    skipped=$((skipped + 1))
    skipped_names="$skipped_names $1"
}
# check NAME: a step that only greps the log (no command of its own)
check() {  # check NAME DESCRIPTION CONDITION-CMD...
    local name=$1 what=$2; shift 2
    if "$@"; then
        say "== $name: ok ($what)"
    else
        say "== $name: FAILED ($what)"
        failed=$((failed + 1))
        failed_names="$failed_names $name"
    fi
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
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ "${DMUON_GPU_PREBUILT:-0}" != 1 ] && [ -z "${NCCL_HOME:-}" ] &&
   [ ! -f build/third_party/nccl-2.32.3/nvidia/nccl/include/nccl_device.h ]; then
    # NCCL's device API and several ranks per GPU need the pinned NCCL
    # (PyPI, or DMUON_NCCL_WHEEL=/path/to/the.whl); a failure here only
    # leaves the toolkit's NCCL (the nccl-dev steps are then skipped)
    say ""
    say "== nccl-wheel: make nccl-wheel (not counted; the build goes on without it)"
    timeout 300 make nccl-wheel >> "$log" 2>&1 && say "== nccl-wheel: ok" ||
        say "== nccl-wheel: failed (see $log)"
fi
if [ "${DMUON_GPU_PREBUILT:-0}" = 1 ] && [ -x bin/dmuon-verify ]; then
    say "using prebuilt binaries in bin/ (DMUON_GPU_PREBUILT=1)"
elif ! step build 240 make -j16 || ! grep -q 'CUDA: found' "$log"; then
    say "the build failed or found no CUDA (see $log); build on a machine with the"
    say "Debian packages of 'make deps' and the CUDA toolkit, copy bin/ here and rerun"
    say "with DMUON_GPU_PREBUILT=1 (the runtime libraries must be installed)"
    exit 1
fi
grep -E '^  (CUDA|NCCL):' "$log" | tail -n 2 | sed 's/^/   /'
say "   libraries of dmuon-verify:"
ldd bin/dmuon-verify 2>&1 | grep -E 'nccl|cublas|cudart|not found' | sed 's/^/     /' | tee -a "$log"
V=(bin/dmuon-verify ns); B=(bin/dmuon-bench ns)

shapes=256x1536,1536x1536,8960x1536,1536x8960   # Qwen2.5-1.5B Muon shapes

# 2. numerics against the float64 reference (computed on the CPU), with the
#    norm extremes (every case of dmuon-verify ns runs 1e-39 and 1e38)
norm_lines() {   # norm_lines FROM-LINE: "||X||_F = ... ok" lines after it
    tail -n +"$1" "$log" | grep -cE 'ns [0-9]+x[0-9]+: \|\|X\|\|_F = (1e-39|1e\+38) ok'
}
small="64x64,32x96,96x32,1x37,37x1,33x97,256x1536"
from=$(( $(wc -l < "$log") + 1 ))
step verify-fp32-small 60 "${V[@]}" --device cuda
check norms-fp32 "14 norm-extreme lines ok (7 shapes x 1e-39, 1e38)" \
    test "$(norm_lines "$from")" -eq 14
from=$(( $(wc -l < "$log") + 1 ))
step verify-bf16-small 60 "${V[@]}" --device cuda --dtype bf16
check norms-bf16 "14 norm-extreme lines ok (BF16)" test "$(norm_lines "$from")" -eq 14
step verify-direct-small 60 "${V[@]}" --device cuda --variant direct-pe5 --shapes "$small"
from=$(( $(wc -l < "$log") + 1 ))
step verify-fp32-model 150 "${V[@]}" --device cuda --shapes 256x1536,1536x1536 \
    --inputs gaussian,lowrank
check norms-model "4 norm-extreme lines ok (Qwen shapes)" test "$(norm_lines "$from")" -eq 4

# 3. probe the model's distinct Muon shapes, then plan from those costs
probe_args=(--device cuda --db "$tmp/c.sqlite" --warmup 5 --iters 20)
step probe 90 bin/dmuon-probe --model models/qwen2.5-1.5b.yaml "${probe_args[@]}"
step probe-list 10 bin/dmuon-probe --list --db "$tmp/c.sqlite"
step probe-check 10 bin/dmuon-probe --check --db "$tmp/c.sqlite"
step plan-from-gpu-costs 30 bin/dmuon-plan models/qwen2.5-1.5b.yaml --ranks 32 \
    --device cuda --db "$tmp/c.sqlite"

# 4. Gram vs direct, the GEMM rates, the kernel choices, the 1.2x target
kdb="$tmp/k.sqlite"
step bench-fp32 90 "${B[@]}" --device cuda --shapes "$shapes,4096x4096,1024x8192" \
    --warmup 5 --iters 20 --db "$kdb"
step bench-bf16-target 60 "${B[@]}" --device cuda --dtype bf16 --shapes "$shapes" \
    --warmup 5 --iters 20 --db "$kdb" --target 1.2
if command -v sqlite3 > /dev/null; then
    sq() { sqlite3 "$kdb" "$1" 2> /dev/null; }
    say "   kernel choices stored (ns_kernel):"
    sqlite3 -header -column "$kdb" 'SELECT device, dtype, s, k, kernel, kernel_ms, gemm_ms,
        max_diff FROM ns_kernel ORDER BY dtype, s, k' 2>&1 | tee -a "$log" | sed 's/^/     /'
    n_before=$(sq 'SELECT count(*) FROM ns_kernel')
    check kernel-choices "kernel choices stored for fp32 and bf16" \
        test "$(sq 'SELECT count(DISTINCT dtype) FROM ns_kernel')" = 2
    stamp=$(sq 'SELECT max(measured_at) FROM ns_kernel')
    sleep 1
    step bench-bf16-cached 60 "${B[@]}" --device cuda --dtype bf16 --shapes "$shapes" \
        --warmup 2 --iters 5 --db "$kdb"
    check kernel-cache "a second run reads the choices (no new measurement)" \
        test -n "$stamp" -a "$(sq 'SELECT count(*) FROM ns_kernel')" = "$n_before" -a \
             "$(sq 'SELECT max(measured_at) FROM ns_kernel')" = "$stamp"
else
    skip kernel-choices "sqlite3 not installed (make deps)"
fi

# 5. the operators on this one GPU, several ranks (LSA path)
MPIRUN=(mpirun --oversubscribe --bind-to none -x NCCL_MULTI_RANK_GPU_ENABLE=1
        -x OPENBLAS_NUM_THREADS=1 -x NCCL_DEBUG=${NCCL_DEBUG:-WARN})
export NCCL_MULTI_RANK_GPU_ENABLE=1
ops_args=(--sizes 2K,1M+6 --paths chain --deadline-ms 60000)
probe_backend() {   # probe_backend B: 0 when B can run 2 ranks here
    timeout 60 "${MPIRUN[@]}" -np 2 bin/dmuon-verify --backend "$1" --ranks-per-node 2 \
        --op agv --sizes 2K --layouts rank --dtypes f32 --paths chain > "$tmp/probe.$1" 2>&1
}
for b in nccl-dev nccl; do
    if probe_backend $b; then
        say "   backend $b: runs 2 ranks on this GPU"
        eval "have_${b//-/_}=1"
    else
        why=$(grep -m1 -E 'error' "$tmp/probe.$b" | sed 's/^.*error: //')
        say "   backend $b: cannot run here: ${why:-see below}"
        sed 's/^/     /' "$tmp/probe.$b" | head -n 20 >> "$log"
        eval "have_${b//-/_}=0"
        eval "why_${b//-/_}=\"\${why:-probe failed}\""
    fi
done
for np in 2 4 8; do
    if [ "$have_nccl_dev" = 1 ]; then
        step "comm-nccl-dev-$np" 150 "${MPIRUN[@]}" -np $np bin/dmuon-verify --backend nccl-dev \
            --ranks-per-node $np "${ops_args[@]}"
    else
        skip "comm-nccl-dev-$np" "$why_nccl_dev"
    fi
done
for np in 2 4; do
    if [ "$have_nccl" = 1 ]; then
        step "comm-nccl-$np" 120 "${MPIRUN[@]}" -np $np bin/dmuon-verify --backend nccl \
            --ranks-per-node $np "${ops_args[@]}"
    else
        skip "comm-nccl-$np" "$why_nccl"
    fi
done
# 5b. the nccl backend beyond line C (tests/mpi/comm_check.c, the driver
#     tests/mpi/73-comm-backends.sh runs on MPI): the control plane over a
#     topology, per-owner / coalesced / equal groups at world and node scope
#     split phase (events, ncclCommGetAsyncError) and blocking, the
#     per-owner publish and its node half, a stalled rank timing out (the
#     communicators aborted), and the communicator handoff (a unique id, or
#     the driver's own ncclComm_t) with no MPI inside the library.  One rank
#     always; several ranks only with NCCL >= 2.30.3 (one GPU).
CC=build/tests/mpi/comm_check
if [ ! -x "$CC" ]; then
    step build-comm-check 120 make -j16 "$CC" || true
fi
nccl_ver=$(grep -m1 -oE '^  NCCL: [0-9]+\.[0-9]+\.[0-9]+' "$log" | awk '{print $2}')
multi_ok=0
if [ -n "$nccl_ver" ] &&
   [ "$(printf '%s\n' 2.30.3 "$nccl_ver" | sort -V | head -n 1)" = 2.30.3 ]; then
    multi_ok=1
fi
comm_step() {   # comm_step NAME TIMEOUT NP [ARGS...]: comm_check on nccl; its exit 3 is a skip
    local name=$1 limit=$2 np=$3; shift 3
    say ""
    say "== $name: -np $np $CC --backend nccl $*"
    local t0=$(date +%s)
    timeout "$limit" "${MPIRUN[@]}" -np "$np" "$CC" --backend nccl "$@" > "$tmp/$name.out" 2>&1
    local rc=$?
    cat "$tmp/$name.out" >> "$log"
    if [ "$rc" -eq 3 ] && grep -q '^skipped:' "$tmp/$name.out"; then
        skip "$name" "$(grep -m1 '^skipped:' "$tmp/$name.out" | sed 's/^skipped: //')"
        return
    fi
    say "== $name: exit $rc after $(( $(date +%s) - t0 )) s; $(grep -E '^[0-9]+ passed' "$tmp/$name.out" | tail -n 1)"
    if [ "$rc" -ne 0 ]; then
        failed=$((failed + 1))
        failed_names="$failed_names $name"
    fi
}
if [ ! -x "$CC" ]; then
    for n in comm-check-1 comm-check-handoff-id-1 comm-check-handoff-comm-1 comm-check-2 \
             comm-check-4 comm-check-handoff-id-4 comm-check-handoff-comm-2 comm-check-stall; do
        skip "$n" "$CC not built (make $CC)"
    done
else
    comm_step comm-check-1 120 1
    comm_step comm-check-handoff-id-1 60 1 --handoff id
    comm_step comm-check-handoff-comm-1 60 1 --handoff comm
    if [ "$multi_ok" = 1 ]; then
        DMUON_RANKS_PER_NODE=2 comm_step comm-check-2 150 2
        DMUON_RANKS_PER_NODE=2 comm_step comm-check-4 180 4
        DMUON_RANKS_PER_NODE=2 comm_step comm-check-handoff-id-4 180 4 --handoff id
        DMUON_RANKS_PER_NODE=2 comm_step comm-check-handoff-comm-2 120 2 --handoff comm
        DMUON_RANKS_PER_NODE=2 comm_step comm-check-stall 90 4 --stall 1
    else
        for n in comm-check-2 comm-check-4 comm-check-handoff-id-4 comm-check-handoff-comm-2 \
                 comm-check-stall; do
            skip "$n" "several ranks on one GPU need NCCL >= 2.30.3 (this build: ${nccl_ver:-unknown})"
        done
    fi
fi

for b in nccl-dev nccl; do
    v="have_${b//-/_}"
    if [ "${!v}" = 1 ]; then
        step "bench-ops-$b" 90 "${MPIRUN[@]}" -np 4 bin/dmuon-bench --backend $b \
            --ranks-per-node 4 -b 64K -e 16M -f 4 -w 5 -n 10 --launches 2
    else
        skip "bench-ops-$b" "backend $b cannot run here"
    fi
done

# 6. the PyTorch binding (python/dmuon) with CUDA modules.  dmuon.torch takes
#    CPU modules only and refuses CUDA ones (the copy between torch storage
#    and the runtime is a host memcpy; the device runtime's binding is not
#    written, docs/python.md).  So this step is a prepared command, noted in
#    the log and not counted as a skip; once the binding takes CUDA tensors:
#      step torch-cuda 300 env OMP_NUM_THREADS=1 DMUON_TORCH_DEVICE=cuda \
#          "${MPIRUN[@]}" -np 2 build/pyenv/bin/python tests/python/torch_check.py 2 "$tmp"
#    (make deps installs torch into build/pyenv).
say ""
say "== note: torch-cuda not run: dmuon.torch takes CPU modules only (prepared command in this script)"

# 7. the runtime on this GPU: pool from the NCCL backend (ncclMemAlloc +
#    symmetric window), state/views/scratch in device memory, Newton-Schulz
#    on the CUDA engine, the element updates as CUDA kernels
RT=build/tests/mpi/rt_check
if [ "${DMUON_GPU_PREBUILT:-0}" != 1 ]; then
    step build-rt-check 180 make -j16 "$RT"
fi
if [ -x "$RT" ]; then
    rt_f32=(--dtype f32 --tolerance 1e-4 --steps 3 --micro 2 --layers 3)
    rt_bf16=(--dtype bf16 --tolerance 1e-2 --steps 3 --micro 2 --layers 3)
    rt1=("${MPIRUN[@]}" -np 1 "$RT" --ranks-per-node 1)
    step rt-cpu-C-1 60 "${rt1[@]}" --line C "${rt_f32[@]}"
    step rt-cuda-nccl-C-1 120 "${rt1[@]}" --backend nccl --device cuda --line C "${rt_f32[@]}"
    step rt-cuda-nccl-A-1 120 "${rt1[@]}" --backend nccl --device cuda --line A "${rt_f32[@]}"
    step rt-cuda-nccl-B-1 120 "${rt1[@]}" --backend nccl --device cuda --line B "${rt_f32[@]}"
    step rt-cuda-nccl-C-bf16-1 120 "${rt1[@]}" --backend nccl --device cuda --line C \
        "${rt_bf16[@]}" --zero 2 --clip 0.05
    step rt-cuda-nccl-save-1 120 "${rt1[@]}" --backend nccl --device cuda --line C \
        "${rt_f32[@]}" --global-grads --steps 2 --save "$tmp/rt_ck" --export "$tmp/rt_e.st"
    step rt-cuda-nccl-load-1 120 "${rt1[@]}" --backend nccl --device cuda --line C \
        "${rt_f32[@]}" --global-grads --load "$tmp/rt_ck" --start 2 --steps 1
    # the communicator handoff: the runtime over a unique id the trainer
    # distributed, and over the trainer's own ncclComm_t (no MPI inside)
    step rt-cuda-nccl-handoff-id-1 120 "${rt1[@]}" --backend nccl --device cuda --line C \
        "${rt_f32[@]}" --handoff id
    step rt-cuda-nccl-handoff-comm-1 120 "${rt1[@]}" --backend nccl --device cuda --line C \
        "${rt_f32[@]}" --handoff comm
    # line D needs the scheduled gather and publish (nccl-dev's, which has
    # no equal algorithm for the even shards; nccl has no scheduled one):
    # until one NCCL backend offers both, it must be refused by name (no
    # crash, no hang)
    for b in nccl nccl-dev; do
        "${rt1[@]}" --backend $b --device cuda --line D "${rt_f32[@]}" > "$tmp/rt_d.$b" 2>&1
        rc=$?
        cat "$tmp/rt_d.$b" >> "$log"
        if [ "$rc" -eq 0 ]; then
            say "== rt-cuda-$b-D-1: ok (line D runs on $b)"
        else
            check "rt-cuda-$b-D-1" "line D on $b is refused naming what is missing (exit $rc)" \
                grep -qE 'eunsupported|not offered|EUNSUPPORTED' "$tmp/rt_d.$b"
        fi
    done
    # several ranks on this GPU: FSDP as one node, HSDP as 2 virtual nodes
    for cfg in "C-2:2:2:fsdp" "B-2:2:2:fsdp" "C-4:4:4:fsdp" "C-hsdp-4:4:2:hsdp" "B-hsdp-4:4:2:hsdp"; do
        IFS=: read -r name np k sh <<< "$cfg"
        if [ "$have_nccl" = 1 ]; then
            step "rt-cuda-nccl-$name" 180 "${MPIRUN[@]}" -np "$np" "$RT" --ranks-per-node "$k" \
                --sharding "$sh" --backend nccl --device cuda --line "${name%%-*}" "${rt_f32[@]}"
        else
            skip "rt-cuda-nccl-$name" "several ranks per GPU: $why_nccl"
        fi
    done
else
    skip rt-cuda "no $RT (build it with make tests, or without DMUON_GPU_PREBUILT=1)"
fi

say ""
say "== GPU checks: $failed step(s) failed${failed_names:+ (${failed_names# })}, $skipped skipped${skipped_names:+ (${skipped_names# })}; log: $log"
[ "$failed" -eq 0 ] || exit 1
[ "$skipped" -eq 0 ] || exit 3
exit 0

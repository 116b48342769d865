# Shared by the trainer's scripts (tests/mpi/70-train.sh, tools/train-equiv.sh,
# tools/train-bench.sh): how to launch dmuon-train on one host, and how to
# compare two per-step loss logs.  Source it; needs $bin (the built tools).

# train_mpirun NP ARGS...: NP ranks on this host (oversubscribed, yielding
# when idle, one BLAS thread each) running dmuon-train ARGS; killed after
# $TRAIN_TIMEOUT seconds when that is set.
train_mpirun() {
    local np=$1; shift
    OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        ${TRAIN_TIMEOUT:+timeout "$TRAIN_TIMEOUT"} mpirun -np "$np" --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 \
        "$bin/dmuon-train" "$@"
}

# loss_compare A.csv B.csv: one line
#   "<step-0 identical: yes|no> <median rel diff> <max rel diff> <steps> <loss0 A> <loss0 B>"
# over the steps that both logs have a training loss for; the relative
# difference of a step is |a - b| / |b|.  The loss column is found by name.
loss_compare() {
    awk -F, '
        FNR == 1 { for (i = 1; i <= NF; i++) if ($i == "loss") col = i; next }
        $col == "" { next }
        FNR == NR { a[$1] = $col; next }
        ($1 in a) { b[$1] = $col; n++ }
        END {
            if (n == 0) { print "no common steps"; exit 1 }
            m = 0
            for (s in b) { d = a[s] - b[s]; if (d < 0) d = -d; r[++m] = d / (b[s] < 0 ? -b[s] : b[s]) }
            # insertion sort (a few hundred values)
            for (i = 2; i <= m; i++) { v = r[i]; j = i - 1; while (j > 0 && r[j] > v) { r[j + 1] = r[j]; j-- } r[j + 1] = v }
            med = (m % 2) ? r[(m + 1) / 2] : (r[m / 2] + r[m / 2 + 1]) / 2
            s0 = (0 in a) && (0 in b) ? ((a[0] "" == b[0] "") ? "yes" : "no") : "n/a"
            printf "%s %.3e %.3e %d %s %s\n", s0, med, r[m], m, a[0], b[0]
        }' "$1" "$2"
}

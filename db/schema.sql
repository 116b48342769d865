-- dmuon cost database, schema version 2 (PRAGMA user_version = 2).
--
-- Every statement is idempotent (IF NOT EXISTS), so libcore migrates a
-- database of any older version by running this file again in one
-- transaction; a version that changes an existing table adds its ALTERs in
-- libcore/costdb.c's migrate().  History: 1 ns_cost; 2 adds ns_kernel.
--
-- Table ns_cost:
-- One row per (device, NS variant, dtype, matrix shape): the measured time
-- of one Newton–Schulz call on an m x n matrix (m rows, n columns, row-major,
-- PyTorch [out, in] order), the median across ranks of each rank's median
-- over timed iterations.  Written by dmuon-probe in one transaction per run;
-- read by dmuon-plan --cost db.  libcore embeds this file at build time
-- (libcore/costdb.c keeps the same text); a database with a lower
-- user_version is migrated, a higher one is refused.
CREATE TABLE IF NOT EXISTS ns_cost (
    device      TEXT    NOT NULL,            -- CPU model string + threads, or CUDA device name
    variant     TEXT    NOT NULL,            -- e.g. gram-pe5, direct-pe5, gram-muon5
    dtype       TEXT    NOT NULL,            -- fp32 | bf16 (input precision of the products)
    m           INTEGER NOT NULL CHECK (m > 0),
    n           INTEGER NOT NULL CHECK (n > 0),
    median_ms   REAL    NOT NULL CHECK (median_ms >= 0),
    min_ms      REAL    NOT NULL CHECK (min_ms >= 0),
    max_ms      REAL    NOT NULL CHECK (max_ms >= 0),
    samples     INTEGER NOT NULL CHECK (samples > 0),  -- timed iterations per rank
    ranks       INTEGER NOT NULL CHECK (ranks > 0),    -- ranks whose medians were combined
    libraries   TEXT    NOT NULL,            -- e.g. "OpenBLAS 0.3.21 ..." / "cuBLAS 13.0"
    host        TEXT    NOT NULL,
    measured_at TEXT    NOT NULL,            -- UTC, ISO 8601
    PRIMARY KEY (device, variant, dtype, m, n)
);

-- Table ns_kernel (version 2): the kernel chosen for the symmetric products
-- C = A·Aᵀ (A s x k, C s x s) of the GPU Newton–Schulz path, per GPU model,
-- product precision and shape (paper C.3).  Each candidate (cuBLAS SYRK,
-- cuBLAS GEMM, the block-triangular kernel) is checked against cuBLAS GEMM on
-- the same operands and timed once; the fastest that passes is stored, with
-- its time, GEMM's and its largest difference from GEMM.  Written by the first
-- NS call of a shape on that GPU model (and by dmuon-probe --device cuda);
-- read by every later context on the same model.
CREATE TABLE IF NOT EXISTS ns_kernel (
    device      TEXT    NOT NULL,            -- CUDA device name, e.g. "cuda: NVIDIA H200"
    dtype       TEXT    NOT NULL,            -- fp32 | bf16 (operand precision)
    s           INTEGER NOT NULL CHECK (s > 0),   -- rows of A = order of C
    k           INTEGER NOT NULL CHECK (k > 0),   -- columns of A
    kernel      TEXT    NOT NULL,            -- syrk | gemm | tri
    kernel_ms   REAL    NOT NULL CHECK (kernel_ms >= 0),
    gemm_ms     REAL    NOT NULL CHECK (gemm_ms >= 0),
    max_diff    REAL    NOT NULL CHECK (max_diff >= 0),  -- vs GEMM, relative to its largest element
    libraries   TEXT    NOT NULL,
    measured_at TEXT    NOT NULL,            -- UTC, ISO 8601
    PRIMARY KEY (device, dtype, s, k)
);
PRAGMA user_version = 2;

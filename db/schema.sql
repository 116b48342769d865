-- dmuon cost database, schema version 1 (PRAGMA user_version = 1).
--
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
PRAGMA user_version = 1;

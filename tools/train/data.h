/*
 * data.h — byte-level text for the trainer: loading, the held-out
 * validation split, and deterministic batches.
 *
 * Source: a file, or a directory whose regular files (symbolic links and
 * the fortune index files *.dat and *.u8 skipped, hidden files skipped) are
 * concatenated in name order.  The default is Debian's fortunes package,
 * /usr/share/games/fortunes.
 *
 * Split: the text is cut into blocks of TD_BLOCK bytes; every
 * val_every-th block (block index ≡ val_every − 1 mod val_every) goes to
 * the validation text, the others to the training text, so both come from
 * the same files in the same proportions.
 *
 * Batches: sequence j of micro-batch m of step s starts at a position drawn
 * from a counter-based stream keyed by (seed, s, m, j) — the same tokens
 * whatever the number of ranks or the line, so a run on 8 ranks sees the
 * tokens of a run on 1 rank (each rank takes its contiguous slice of j).
 * Validation windows are fixed: window i starts at i·stride.
 */
#ifndef DMUON_TRAIN_DATA_H
#define DMUON_TRAIN_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "dmuon/rc.h"

#define TD_DEFAULT_DIR "/usr/share/games/fortunes"
#define TD_BLOCK 4096

typedef struct {
    uint8_t *train, *val;     /* owned */
    size_t n_train, n_val;    /* bytes */
    size_t files;             /* files read */
    uint64_t digest;          /* FNV-1a of the whole text (dmuon_digest) */
    char source[1024];
} td_data;

/* Loads path (file or directory; NULL: TD_DEFAULT_DIR) and splits it.
 * val_every >= 2.  Errors: DMUON_ENOTFOUND (path missing, a directory with
 * no text file: the message says to run make deps for the default),
 * DMUON_EIO, DMUON_ENOMEM, DMUON_EINVAL (text too short for the split and
 * sequence length seq: each part needs > seq + 1 bytes). */
dmuon_rc td_load(const char *path, int val_every, int seq, td_data *d);
void td_release(td_data *d);

/* Fills tokens/targets [n, T] for sequences j0 .. j0+n−1 of (step, micro)
 * from the training text: targets are tokens shifted by one. */
void td_train_batch(const td_data *d, uint64_t seed, int64_t step, int micro, int j0, int n,
                    int T, uint8_t *tokens, uint8_t *targets);

/* Fills tokens/targets [n, T] for validation windows i0 .. i0+n−1 of a set of
 * total windows spread evenly over the validation text. */
void td_val_batch(const td_data *d, int i0, int n, int total, int T, uint8_t *tokens,
                  uint8_t *targets);

#endif

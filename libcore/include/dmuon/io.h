/*
 * dmuon/io.h — file helpers: atomic writes, whole-file reads, and a small
 * streaming JSON writer for tools' machine-readable output.
 *
 * Atomic write: the content goes to "PATH.tmp.XXXXXX" in the same directory,
 * is flushed and fsync'ed, then renamed over PATH.  A failure at any point
 * removes the temporary file and leaves PATH as it was.
 */
#ifndef DMUON_IO_H
#define DMUON_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dmuon/rc.h"

/* Callback that writes the whole content to f; returns DMUON_OK or an rc with
 * a message recorded. */
typedef dmuon_rc (*dmuon_write_fn)(FILE *f, void *ctx);

/* Writes path atomically through fn (see above).  "-" writes to stdout
 * directly; a symbolic link is written through (its target is replaced).
 * Errors: DMUON_EINVAL (empty path, or path names an existing non-regular
 * file such as a device, FIFO or directory), DMUON_EIO (link cannot be
 * resolved, temp file, write, fsync or rename failed; message names the
 * path; for "-", a write to standard output failed), or whatever fn
 * returned. */
dmuon_rc dmuon_write_atomic(const char *path, dmuon_write_fn fn, void *ctx);

/* Removes the temporary file of the atomic write in progress in this
 * process, if any.  Async-signal-safe: a tool's SIGINT/SIGTERM handler calls
 * it before the process dies, so no "PATH.tmp.XXXXXX" is left behind (the
 * path is kept in a static buffer while a write runs; one write at a time
 * per process is tracked).  For tests, DMUON_TEST_WRITE_STALL_MS=N makes
 * dmuon_write_atomic sleep N ms after creating the temporary file. */
void dmuon_write_abandon(void);

/* Reads at most max_bytes of the file at path into a malloc'ed, NUL-
 * terminated buffer (*len excludes the NUL).  Errors: DMUON_EIO, DMUON_ENOMEM,
 * DMUON_EINVAL if the file is larger than max_bytes. */
dmuon_rc dmuon_read_file(const char *path, size_t max_bytes, char **buf, size_t *len);

/* ------------------------------------------------------------------ JSON -- */

/* Streaming JSON writer: call begin/end and values in document order; commas
 * and string escaping are handled.  Doubles that are not finite are written
 * as null.  Nesting depth is limited to 32. */
typedef struct {
    FILE *f;
    int depth;
    bool first[33];   /* no element written yet at this depth */
    bool after_key;
    bool pretty;
} dmuon_json;

void dmuon_json_init(dmuon_json *w, FILE *f, bool pretty);
void dmuon_json_begin_object(dmuon_json *w);
void dmuon_json_end_object(dmuon_json *w);
void dmuon_json_begin_array(dmuon_json *w);
void dmuon_json_end_array(dmuon_json *w);
void dmuon_json_key(dmuon_json *w, const char *key);
void dmuon_json_str(dmuon_json *w, const char *s);
void dmuon_json_int(dmuon_json *w, int64_t v);
void dmuon_json_double(dmuon_json *w, double v);
void dmuon_json_bool(dmuon_json *w, bool v);
void dmuon_json_null(dmuon_json *w);
/* key + value shorthands */
void dmuon_json_kstr(dmuon_json *w, const char *key, const char *s);
void dmuon_json_kint(dmuon_json *w, const char *key, int64_t v);
void dmuon_json_kdouble(dmuon_json *w, const char *key, double v);
void dmuon_json_kbool(dmuon_json *w, const char *key, bool v);

/* ------------------------------------------------- file descriptors -- */

/* Writes len bytes of buf to fd (at offset off: pwrite), retrying after
 * EINTR and short writes.  False on an error (errno says which). */
bool dmuon_fd_write_all(int fd, const void *buf, size_t len);
bool dmuon_fd_pwrite_all(int fd, const void *buf, size_t len, uint64_t off);

/* Reads up to len bytes into buf, retrying after EINTR and short reads;
 * *got is the bytes read (fewer than len at end of file).  False on an
 * error (errno). */
bool dmuon_fd_read_all(int fd, void *buf, size_t len, size_t *got);

/* fsync of a directory, so that renames and new entries in it are durable
 * (a file system that cannot fsync directories, EINVAL, counts as done).
 * Errors: DMUON_EIO naming the directory. */
dmuon_rc dmuon_dir_fsync(const char *dir);

/* Removes the regular files directly inside dir, then dir; best effort
 * (what cannot be removed stays). */
void dmuon_dir_remove(const char *dir);

#endif

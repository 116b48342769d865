/*
 * dmuon/rc.h — return codes and error reporting for libcore.
 *
 * The library never prints and never exits.  Every fallible function returns
 * a dmuon_rc; on failure it has also recorded a one-line, lower-case message
 * that says what went wrong first and quotes its subject, e.g.
 *     models/x.yaml:12: field 'shape': expected a list of positive integers
 * The message is per thread and lasts until the next failure on that thread.
 * DMUON_FAIL records a new message; DMUON_TRY propagates an rc and appends the
 * caller's file:line to a trace that tools show with --verbose.
 */
#ifndef DMUON_RC_H
#define DMUON_RC_H

#include <stdarg.h>

typedef enum {
    DMUON_OK = 0,
    DMUON_EINVAL,       /* bad argument or option value from the caller */
    DMUON_EPARSE,       /* malformed input file (model, plan, header, YAML/JSON) */
    DMUON_EIO,          /* open/read/write/rename failed */
    DMUON_ENOMEM,       /* allocation failed */
    DMUON_ENOTFOUND,    /* a named thing (file, field, row, tensor) is missing */
    DMUON_EVERSION,     /* a file of another format version */
    DMUON_EMISMATCH,    /* digests, world size or tables disagree */
    DMUON_EDB,          /* SQLite error */
    DMUON_ENUMERIC,     /* NaN or Inf in input or result */
    DMUON_ETIMEOUT,     /* a wait passed its deadline */
    DMUON_ECOMM,        /* MPI / NCCL failure */
    DMUON_EDEVICE,      /* CUDA / cuBLAS failure or no device */
    DMUON_EUNSUPPORTED, /* valid request this build or input cannot serve */
    DMUON_ECHECK,       /* a verification check failed (wrong data, invariant) */
    DMUON_EINTR,        /* stopped on request (a caller's stop flag, e.g. on SIGINT) */
    DMUON_RC_COUNT
} dmuon_rc;

/* Short name of rc ("einval", ...); never NULL. */
const char *dmuon_rc_name(dmuon_rc rc);

/* The exit code a tool should use for rc: 0 for DMUON_OK, 1 for DMUON_ECHECK
 * (a check ran and failed), 2 for input and usage errors (EINVAL, EPARSE,
 * ENOTFOUND, EVERSION, EMISMATCH, ENUMERIC), 3 for everything else (I/O,
 * memory, database, communication, device). */
int dmuon_rc_exit_code(dmuon_rc rc);

/* The message recorded by the last failure on this thread ("" if none). */
const char *dmuon_errmsg(void);

/* The file:line trace of the last failure on this thread ("" if none). */
const char *dmuon_errtrace(void);

/* Clears this thread's message and trace. */
void dmuon_err_clear(void);

/* Sets the rank that prefixes later messages ("rank 3: ...") on this thread;
 * -1 (the default) prints no prefix. */
void dmuon_err_set_rank(int rank);

/* Records a message (printf format) for rc and returns rc.  Use DMUON_FAIL. */
dmuon_rc dmuon_err_set(dmuon_rc rc, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
dmuon_rc dmuon_err_vset(dmuon_rc rc, const char *file, int line, const char *fmt, va_list ap);

/* Appends file:line to the trace and returns rc.  Use DMUON_TRY. */
dmuon_rc dmuon_err_trace_add(dmuon_rc rc, const char *file, int line);

#define DMUON_FAIL(rc, ...) dmuon_err_set((rc), __FILE__, __LINE__, __VA_ARGS__)

/* Evaluates expr; on failure records this location and returns its rc. */
#define DMUON_TRY(expr)                                                     \
    do {                                                                    \
        dmuon_rc dmuon_try_rc_ = (expr);                                    \
        if (dmuon_try_rc_ != DMUON_OK)                                      \
            return dmuon_err_trace_add(dmuon_try_rc_, __FILE__, __LINE__);  \
    } while (0)

/* Like DMUON_TRY but stores the rc in `rc` and jumps to `label` (the one
 * cleanup label of a function that holds resources). */
#define DMUON_TRY_GOTO(rc, expr, label)                                     \
    do {                                                                    \
        (rc) = (expr);                                                      \
        if ((rc) != DMUON_OK) {                                             \
            dmuon_err_trace_add((rc), __FILE__, __LINE__);                  \
            goto label;                                                     \
        }                                                                   \
    } while (0)

#endif

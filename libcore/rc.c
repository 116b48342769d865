/*
 * rc.c — per-thread error message and trace for libcore (see dmuon/rc.h).
 *
 * Invariant: the message is set only by dmuon_err_set/vset; the trace grows
 * by one "file:line" per propagation and is cut (not overflowed) when full.
 */
#include "dmuon/rc.h"

#include <stdio.h>
#include <string.h>

static _Thread_local char err_msg[1024];
static _Thread_local char err_trace[1024];
static _Thread_local int err_rank = -1;

static const char *const rc_names[DMUON_RC_COUNT] = {
    "ok", "einval", "eparse", "eio", "enomem", "enotfound", "eversion",
    "emismatch", "edb", "enumeric", "etimeout", "ecomm", "edevice",
    "eunsupported", "echeck", "eintr",
};

const char *dmuon_rc_name(dmuon_rc rc)
{
    if ((int)rc < 0 || rc >= DMUON_RC_COUNT)
        return "unknown";
    return rc_names[rc];
}

int dmuon_rc_exit_code(dmuon_rc rc)
{
    switch (rc) {
    case DMUON_OK: return 0;
    case DMUON_ECHECK: return 1;
    case DMUON_EINVAL: case DMUON_EPARSE: case DMUON_ENOTFOUND:
    case DMUON_EVERSION: case DMUON_EMISMATCH: case DMUON_ENUMERIC:
        return 2;
    default: return 3;
    }
}

const char *dmuon_errmsg(void) { return err_msg; }
const char *dmuon_errtrace(void) { return err_trace; }

void dmuon_err_clear(void)
{
    err_msg[0] = '\0';
    err_trace[0] = '\0';
}

void dmuon_err_set_rank(int rank) { err_rank = rank; }

dmuon_rc dmuon_err_vset(dmuon_rc rc, const char *file, int line, const char *fmt, va_list ap)
{
    char body[sizeof err_msg];
    vsnprintf(body, sizeof body, fmt, ap);
    /* a message that already names its rank (one agreed from another rank,
     * or re-recorded) keeps that one prefix: never "rank 1: rank 0: ..." */
    int named = 0, n = 0;
    if (sscanf(body, "rank %*d: %n", &n) == 0 && n > 0)
        named = 1;
    size_t off = 0;
    if (err_rank >= 0 && !named) {
        int k = snprintf(err_msg, sizeof err_msg, "rank %d: ", err_rank);
        off = k > 0 && (size_t)k < sizeof err_msg ? (size_t)k : 0;
    }
    size_t len = strnlen(body, sizeof err_msg - off - 1);   /* cut at the buffer's end */
    memcpy(err_msg + off, body, len);
    err_msg[off + len] = '\0';
    snprintf(err_trace, sizeof err_trace, "%s:%d", file, line);
    return rc;
}

dmuon_rc dmuon_err_set(dmuon_rc rc, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    dmuon_err_vset(rc, file, line, fmt, ap);
    va_end(ap);
    return rc;
}

dmuon_rc dmuon_err_trace_add(dmuon_rc rc, const char *file, int line)
{
    size_t len = strlen(err_trace);
    if (len + 4 < sizeof err_trace)
        snprintf(err_trace + len, sizeof err_trace - len, " <- %s:%d", file, line);
    return rc;
}

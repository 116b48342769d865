/*
 * wait.h — libcore-internal: deadline waits that give the CPU away.
 *
 * Busy polling starves the other ranks when ranks outnumber cores (tests run
 * 8 ranks on 2 cores), so an idle poll yields the CPU, and a long idle run
 * sleeps.  Deadlines are absolute CLOCK_MONOTONIC nanoseconds.
 */
#ifndef DMUON_WAIT_H
#define DMUON_WAIT_H

#include <sched.h>
#include <stdint.h>
#include <time.h>

static inline uint64_t dmuon_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

typedef struct {
    uint64_t deadline;
    uint64_t idle_since;   /* start of the current run of idle polls */
    unsigned idle;         /* idle polls in a row; the caller resets it to 0
                              when something progressed */
} dmuon_waiter;

static inline void dmuon_waiter_start(dmuon_waiter *w, int deadline_ms)
{
    w->deadline = dmuon_now_ns() + (uint64_t)deadline_ms * 1000000u;
    w->idle = 0;
}

/* One idle poll: yield while the wait is young (data is usually about to
 * come, and sleeping costs a timer tick of latency per chunk); sleep 50 us
 * at a time once nothing has moved for 20 ms (a stuck peer). */
static inline void dmuon_waiter_idle(dmuon_waiter *w)
{
    if (w->idle++ == 0)
        w->idle_since = dmuon_now_ns();
    if (w->idle < 64 || dmuon_now_ns() - w->idle_since < 20000000u) {
        sched_yield();
    } else {
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
    }
}

static inline int dmuon_waiter_expired(const dmuon_waiter *w)
{
    return dmuon_now_ns() > w->deadline;
}

#endif

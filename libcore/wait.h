/*
 * wait.h — libcore-internal: deadline waits that give the CPU away.
 *
 * Busy polling starves the other ranks when ranks outnumber cores (tests run
 * 8 ranks on 2 cores), so an idle poll yields, and after a while sleeps a
 * few microseconds.  Deadlines are absolute CLOCK_MONOTONIC nanoseconds.
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
    unsigned idle;
} dmuon_waiter;

static inline void dmuon_waiter_start(dmuon_waiter *w, int deadline_ms)
{
    w->deadline = dmuon_now_ns() + (uint64_t)deadline_ms * 1000000u;
    w->idle = 0;
}

static inline void dmuon_waiter_idle(dmuon_waiter *w)
{
    w->idle++;
    if (w->idle < 4096) {
        sched_yield();
    } else {
        struct timespec ts = {0, w->idle < 256 ? 2000 : 20000};
        nanosleep(&ts, NULL);
    }
}

static inline int dmuon_waiter_expired(const dmuon_waiter *w)
{
    return dmuon_now_ns() > w->deadline;
}

#endif

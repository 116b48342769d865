/*
 * dmuon/timer.h — the clock and the statistic every timing in dmuon uses:
 * a monotonic wall clock in milliseconds and the median of a sample.
 */
#ifndef DMUON_TIMER_H
#define DMUON_TIMER_H

#include <stddef.h>

/* Milliseconds on CLOCK_MONOTONIC (arbitrary origin; only differences mean
 * anything). */
double dmuon_now_ms(void);

/* Median of v[0..n): sorts v in place; the mean of the middle two for even
 * n; 0 for n == 0. */
double dmuon_median(double *v, size_t n);

#endif

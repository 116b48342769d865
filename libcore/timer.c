/*
 * timer.c — monotonic clock and median (see dmuon/timer.h).
 */
#include "dmuon/timer.h"

#include <stdlib.h>
#include <time.h>

double dmuon_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double dmuon_median(double *v, size_t n)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

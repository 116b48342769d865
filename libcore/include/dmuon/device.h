/*
 * dmuon/device.h — names of compute devices, as stored in the cost database.
 *
 * A device name identifies what a Newton–Schulz time was measured on, so that
 * dmuon-plan reads only figures that apply to the target:
 *   CPU : "cpu: <model name from /proc/cpuinfo> x<T>"  (T = OpenBLAS threads)
 *   CUDA: "cuda: <cudaDeviceProp.name>"               (e.g. "cuda: NVIDIA H200")
 */
#ifndef DMUON_DEVICE_H
#define DMUON_DEVICE_H

#include <stddef.h>

#include "dmuon/rc.h"

typedef enum { DMUON_DEVICE_CPU = 0, DMUON_DEVICE_CUDA } dmuon_device_kind;

/* Parses "cpu" or "cuda" into *out.  Errors: DMUON_EINVAL naming the value. */
dmuon_rc dmuon_device_parse(const char *s, dmuon_device_kind *out);

/* Writes this machine's name for kind into out (cap bytes, NUL-terminated).
 * Errors: DMUON_EUNSUPPORTED (cuda asked in a build without CUDA),
 * DMUON_EDEVICE (no CUDA device visible). */
dmuon_rc dmuon_device_name(dmuon_device_kind kind, char *out, size_t cap);

/* Library versions for the cost table's `libraries` column, e.g.
 * "OpenBLAS 0.3.21 DYNAMIC_ARCH ... Prescott" or "CUDA 13000, cuBLAS 130000". */
void dmuon_device_libraries(dmuon_device_kind kind, char *out, size_t cap);

#endif

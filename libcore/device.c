/*
 * device.c — device names and library versions for the cost database
 * (see dmuon/device.h).  The CPU name is read from /proc/cpuinfo; the CUDA
 * name from the runtime (only in builds with CUDA, only where a GPU exists).
 */
#include "dmuon/device.h"

#include <cblas.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#ifdef DMUON_HAVE_CUDA
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#endif

dmuon_rc dmuon_device_parse(const char *s, dmuon_device_kind *out)
{
    if (s && !strcasecmp(s, "cpu")) {
        *out = DMUON_DEVICE_CPU;
        return DMUON_OK;
    }
    if (s && !strcasecmp(s, "cuda")) {
        *out = DMUON_DEVICE_CUDA;
        return DMUON_OK;
    }
    return DMUON_FAIL(DMUON_EINVAL, "unknown device '%s' (expected cpu or cuda)", s ? s : "");
}

static void cpu_model(char *out, size_t cap)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    snprintf(out, cap, "unknown cpu");
    if (!f)
        return;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0)
            continue;
        char *v = strchr(line, ':');
        if (!v)
            break;
        v++;
        while (*v == ' ' || *v == '\t')
            v++;
        v[strcspn(v, "\n")] = '\0';
        snprintf(out, cap, "%s", v);
        break;
    }
    fclose(f);
}

dmuon_rc dmuon_device_name(dmuon_device_kind kind, char *out, size_t cap)
{
    if (kind == DMUON_DEVICE_CPU) {
        char model[256];
        cpu_model(model, sizeof model);
        snprintf(out, cap, "cpu: %s x%d", model, openblas_get_num_threads());
        return DMUON_OK;
    }
#ifdef DMUON_HAVE_CUDA
    int dev = 0, count = 0;
    struct cudaDeviceProp prop;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)
        return DMUON_FAIL(DMUON_EDEVICE, "no CUDA device is visible on this machine");
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess)
        return DMUON_FAIL(DMUON_EDEVICE, "cannot read the CUDA device's properties");
    snprintf(out, cap, "cuda: %s", prop.name);
    return DMUON_OK;
#else
    snprintf(out, cap, "cuda: unavailable");
    return DMUON_FAIL(DMUON_EUNSUPPORTED, "this dmuon was built without CUDA");
#endif
}

void dmuon_device_libraries(dmuon_device_kind kind, char *out, size_t cap)
{
    if (kind == DMUON_DEVICE_CPU) {
        snprintf(out, cap, "%s", openblas_get_config());
        return;
    }
#ifdef DMUON_HAVE_CUDA
    int rt = 0;
    cudaRuntimeGetVersion(&rt);
    snprintf(out, cap, "CUDA runtime %d, cuBLAS %d", rt, CUBLAS_VERSION);
#else
    snprintf(out, cap, "none");
#endif
}

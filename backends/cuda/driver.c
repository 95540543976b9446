/*
 * backends/cuda/driver.c: the CUDA driver API loaded with dlopen (libcuda.so.1), so Tessera has
 * no link-time dependency on CUDA. One context: device 0's primary context, retained on first
 * use and made current in every thread that calls in. Every entry point returns TE_ERR_NO_CUDA
 * with a message (te_cuda_errmsg) when the driver or a device is missing.
 */
#define _GNU_SOURCE

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_impl.h"

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUevent;
typedef void *CUstream;
typedef unsigned long long CUdeviceptr;

static struct {
    void *lib;
    CUresult (*Init)(unsigned);
    CUresult (*DriverGetVersion)(int *);
    CUresult (*DeviceGetCount)(int *);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DeviceGetName)(char *, int, CUdevice);
    CUresult (*DeviceGetAttribute)(int *, int, CUdevice);
    CUresult (*DeviceTotalMem)(size_t *, CUdevice);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*CtxSynchronize)(void);
    CUresult (*ModuleLoadData)(CUmodule *, const void *);
    CUresult (*ModuleUnload)(CUmodule);
    CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, CUstream, void **, void **);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*MemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);
    CUresult (*MemsetD8)(CUdeviceptr, unsigned char, size_t);
    CUresult (*EventCreate)(CUevent *, unsigned);
    CUresult (*EventRecord)(CUevent, CUstream);
    CUresult (*EventSynchronize)(CUevent);
    CUresult (*EventElapsedTime)(float *, CUevent, CUevent);
    CUresult (*EventDestroy)(CUevent);
    CUresult (*GetErrorString)(CUresult, const char **);
    CUdevice dev;
    CUcontext ctx;
    int status;
    char why[512];
} cu;

static pthread_once_t cu_once = PTHREAD_ONCE_INIT;
static __thread char tl_err[4096];

int te__cuda_set_error(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tl_err, sizeof tl_err, fmt, ap);
    va_end(ap);
    return code;
}

const char *te_cuda_errmsg(void) { return tl_err; }

static const char *cu_str(CUresult r)
{
    const char *s = NULL;
    if (cu.GetErrorString && cu.GetErrorString(r, &s) == 0 && s)
        return s;
    return "unknown CUDA error";
}

static void cu_load(void)
{
    /* TESSERA_LIBCUDA names another driver library (the tests' emulated GPU,
     * tests/cuda_emu/); a name that cannot be loaded is an error, not a fallback. */
    const char *env = getenv("TESSERA_LIBCUDA");
    const char *names[] = {"libcuda.so.1", "libcuda.so", NULL};
    if (env && *env) {
        names[0] = env;
        names[1] = NULL;
    }
    for (int i = 0; names[i] && !cu.lib; i++)
        cu.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!cu.lib) {
        cu.status = TE_ERR_NO_CUDA;
        snprintf(cu.why, sizeof cu.why,
                 "no CUDA driver: %s cannot be loaded (%s); "
                 "GPU kernels can still be generated and compiled with NVRTC, but not run",
                 names[0], dlerror());
        return;
    }
#define SYM(field, name)                                                                           \
    do {                                                                                           \
        void *p = dlsym(cu.lib, name);                                                             \
        if (!p) {                                                                                  \
            cu.status = TE_ERR_NO_CUDA;                                                            \
            snprintf(cu.why, sizeof cu.why, "the CUDA driver lacks %s (too old?)", name);          \
            return;                                                                                \
        }                                                                                          \
        memcpy(&cu.field, &p, sizeof p);                                                           \
    } while (0)
    SYM(Init, "cuInit");
    SYM(DriverGetVersion, "cuDriverGetVersion");
    SYM(DeviceGetCount, "cuDeviceGetCount");
    SYM(DeviceGet, "cuDeviceGet");
    SYM(DeviceGetName, "cuDeviceGetName");
    SYM(DeviceGetAttribute, "cuDeviceGetAttribute");
    SYM(DeviceTotalMem, "cuDeviceTotalMem_v2");
    SYM(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    SYM(CtxSetCurrent, "cuCtxSetCurrent");
    SYM(CtxSynchronize, "cuCtxSynchronize");
    SYM(ModuleLoadData, "cuModuleLoadData");
    SYM(ModuleUnload, "cuModuleUnload");
    SYM(ModuleGetFunction, "cuModuleGetFunction");
    SYM(LaunchKernel, "cuLaunchKernel");
    SYM(MemAlloc, "cuMemAlloc_v2");
    SYM(MemFree, "cuMemFree_v2");
    SYM(MemcpyHtoD, "cuMemcpyHtoD_v2");
    SYM(MemcpyDtoH, "cuMemcpyDtoH_v2");
    SYM(MemcpyDtoD, "cuMemcpyDtoD_v2");
    SYM(MemsetD8, "cuMemsetD8_v2");
    SYM(EventCreate, "cuEventCreate");
    SYM(EventRecord, "cuEventRecord");
    SYM(EventSynchronize, "cuEventSynchronize");
    SYM(EventElapsedTime, "cuEventElapsedTime");
    SYM(EventDestroy, "cuEventDestroy_v2");
    SYM(GetErrorString, "cuGetErrorString");
#undef SYM
    CUresult r = cu.Init(0);
    if (r != 0) {
        cu.status = TE_ERR_NO_CUDA;
        snprintf(cu.why, sizeof cu.why, "cuInit failed: %s (no usable NVIDIA GPU?)", cu_str(r));
        return;
    }
    int n = 0;
    if ((r = cu.DeviceGetCount(&n)) != 0 || n <= 0) {
        cu.status = TE_ERR_NO_CUDA;
        snprintf(cu.why, sizeof cu.why, "the CUDA driver reports no device%s%s", r ? ": " : "",
                 r ? cu_str(r) : "");
        return;
    }
    if ((r = cu.DeviceGet(&cu.dev, 0)) != 0 ||
        (r = cu.DevicePrimaryCtxRetain(&cu.ctx, cu.dev)) != 0) {
        cu.status = TE_ERR_NO_CUDA;
        snprintf(cu.why, sizeof cu.why, "cannot create a context on device 0: %s", cu_str(r));
        return;
    }
    cu.status = TE_OK;
}

int te__cu_init(void)
{
    pthread_once(&cu_once, cu_load);
    if (cu.status != TE_OK)
        return te__cuda_set_error(cu.status, "%s", cu.why);
    CUresult r = cu.CtxSetCurrent(cu.ctx);
    if (r != 0)
        return te__cuda_set_error(TE_ERR_RUNTIME, "cuCtxSetCurrent: %s", cu_str(r));
    return TE_OK;
}

int te_cuda_probe(void) { return te__cu_init(); }

bool te_cuda_available(void) { return te_cuda_probe() == TE_OK; }

int te_cuda_device_count(int *count)
{
    if (count)
        *count = 0;
    int rc = te__cu_init();
    if (rc != TE_OK)
        return rc;
    int n = 0;
    CUresult r = cu.DeviceGetCount(&n);
    if (r != 0)
        return te__cuda_set_error(TE_ERR_RUNTIME, "cuDeviceGetCount: %s", cu_str(r));
    if (count)
        *count = n;
    return TE_OK;
}

int te_cuda_device_info_get(int ordinal, te_cuda_device_info *out)
{
    if (!out)
        return TE_ERR_ARG;
    memset(out, 0, sizeof *out);
    int rc = te__cu_init();
    if (rc != TE_OK)
        return rc;
    CUdevice d;
    CUresult r = cu.DeviceGet(&d, ordinal);
    if (r != 0)
        return te__cuda_set_error(TE_ERR_ARG, "no CUDA device %d: %s", ordinal, cu_str(r));
    out->ordinal = ordinal;
    cu.DeviceGetName(out->name, (int)sizeof out->name, d);
    int v;
#define ATTR(a) (cu.DeviceGetAttribute(&v, (a), d) == 0 ? v : 0)
    int major = ATTR(75), minor = ATTR(76);
    out->sm = major * 10 + minor;
    out->max_threads_per_block = ATTR(1);
    out->shared_per_block = (size_t)ATTR(8);
    out->warp_size = ATTR(10);
    out->regs_per_block = ATTR(12);
    out->clock_khz = ATTR(13);
    out->sm_count = ATTR(16);
    out->mem_clock_khz = ATTR(36);
    out->mem_bus_bits = ATTR(37);
    out->l2_bytes = ATTR(38);
    out->max_threads_per_sm = ATTR(39);
    out->shared_per_sm = (size_t)ATTR(81);
    out->shared_per_block_optin = (size_t)ATTR(97);
#undef ATTR
    cu.DeviceTotalMem(&out->total_mem, d);
    cu.DriverGetVersion(&out->driver_version);
    return TE_OK;
}

int te__cu_module_load(const void *image, te__cu_module *mod, char *errbuf, size_t n)
{
    int rc = te__cu_init();
    if (rc != TE_OK) {
        if (errbuf && n)
            snprintf(errbuf, n, "%s", tl_err);
        return rc;
    }
    CUresult r = cu.ModuleLoadData((CUmodule *)mod, image);
    if (r != 0) {
        if (errbuf && n)
            snprintf(errbuf, n, "cuModuleLoadData: %s", cu_str(r));
        return TE_ERR_LOAD;
    }
    return TE_OK;
}

void te__cu_module_unload(te__cu_module mod)
{
    if (mod && cu.status == TE_OK)
        cu.ModuleUnload(mod);
}

int te__cu_function(te__cu_module mod, const char *name, te__cu_func *fn, char *errbuf, size_t n)
{
    CUresult r = cu.ModuleGetFunction((CUfunction *)fn, mod, name);
    if (r != 0) {
        if (errbuf && n)
            snprintf(errbuf, n, "cuModuleGetFunction(%s): %s", name, cu_str(r));
        return TE_ERR_LOAD;
    }
    return TE_OK;
}

int te__cu_launch(te__cu_func fn, const int grid[3], const int block[3], void **params,
                  char *errbuf, size_t n)
{
    CUresult r = cu.LaunchKernel(fn, (unsigned)grid[0], (unsigned)grid[1], (unsigned)grid[2],
                                 (unsigned)block[0], (unsigned)block[1], (unsigned)block[2], 0,
                                 NULL, params, NULL);
    if (r != 0) {
        if (errbuf && n)
            snprintf(errbuf, n, "cuLaunchKernel: %s", cu_str(r));
        return TE_ERR_RUNTIME;
    }
    return TE_OK;
}

/* ---- Memory -------------------------------------------------------------------------------- */

#define CALL(expr, what)                                                                           \
    do {                                                                                           \
        int rc_ = te__cu_init();                                                                   \
        if (rc_ != TE_OK)                                                                          \
            return rc_;                                                                            \
        CUresult r_ = (expr);                                                                      \
        if (r_ != 0)                                                                               \
            return te__cuda_set_error(TE_ERR_RUNTIME, "%s: %s", what, cu_str(r_));                 \
        return TE_OK;                                                                              \
    } while (0)

int te_cuda_malloc(uint64_t *ptr, size_t bytes)
{
    if (!ptr)
        return TE_ERR_ARG;
    *ptr = 0;
    CALL(cu.MemAlloc((CUdeviceptr *)ptr, bytes ? bytes : 1), "cuMemAlloc");
}
int te_cuda_free(uint64_t ptr)
{
    if (!ptr)
        return TE_OK;
    CALL(cu.MemFree(ptr), "cuMemFree");
}
int te_cuda_copy_to_device(uint64_t dst, const void *src, size_t bytes)
{
    CALL(cu.MemcpyHtoD(dst, src, bytes), "cuMemcpyHtoD");
}
int te_cuda_copy_to_host(void *dst, uint64_t src, size_t bytes)
{
    CALL(cu.MemcpyDtoH(dst, src, bytes), "cuMemcpyDtoH");
}
int te_cuda_copy_device(uint64_t dst, uint64_t src, size_t bytes)
{
    CALL(cu.MemcpyDtoD(dst, src, bytes), "cuMemcpyDtoD");
}
int te_cuda_memset(uint64_t dst, unsigned char value, size_t bytes)
{
    CALL(cu.MemsetD8(dst, value, bytes), "cuMemsetD8");
}
int te_cuda_synchronize(void) { CALL(cu.CtxSynchronize(), "cuCtxSynchronize (a kernel failed)"); }

/* ---- Events -------------------------------------------------------------------------------- */

int te__cu_event_pair_time(int (*fn)(void *), void *user, double *ms)
{
    int rc = te__cu_init();
    if (rc != TE_OK)
        return rc;
    CUevent a = NULL, b = NULL;
    CUresult r;
    if ((r = cu.EventCreate(&a, 0)) != 0 || (r = cu.EventCreate(&b, 0)) != 0) {
        if (a)
            cu.EventDestroy(a);
        return te__cuda_set_error(TE_ERR_RUNTIME, "cuEventCreate: %s", cu_str(r));
    }
    rc = TE_OK;
    if ((r = cu.EventRecord(a, NULL)) != 0)
        rc = te__cuda_set_error(TE_ERR_RUNTIME, "cuEventRecord: %s", cu_str(r));
    if (rc == TE_OK)
        rc = fn(user);
    if (rc == TE_OK && (r = cu.EventRecord(b, NULL)) != 0)
        rc = te__cuda_set_error(TE_ERR_RUNTIME, "cuEventRecord: %s", cu_str(r));
    if (rc == TE_OK && (r = cu.EventSynchronize(b)) != 0)
        rc = te__cuda_set_error(TE_ERR_RUNTIME, "kernel failed: %s", cu_str(r));
    float f = 0;
    if (rc == TE_OK && (r = cu.EventElapsedTime(&f, a, b)) != 0)
        rc = te__cuda_set_error(TE_ERR_RUNTIME, "cuEventElapsedTime: %s", cu_str(r));
    cu.EventDestroy(a);
    cu.EventDestroy(b);
    if (ms)
        *ms = f;
    return rc;
}

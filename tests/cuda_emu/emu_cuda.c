/*
 * tests/cuda_emu/emu_cuda.c: an emulated CUDA driver for tests (libtessera_emu_cuda.so, loaded
 * by Tessera in place of libcuda.so.1 through TESSERA_LIBCUDA). With emu_nvrtc.c it lets the
 * whole GPU path -- build, load, launch, copy, time, and the tuner's measuring children -- run
 * on a machine without a GPU:
 *
 *   - memory is host memory (cuMemAlloc is aligned_alloc(256), a CUdeviceptr is its address);
 *   - a module's image is EMU_MAGIC plus the CUDA C++ source (emu_nvrtc.c); cuModuleLoadData
 *     compiles that source as host C++ with tests/cuda_shim/cuda_shim.h (one pthread per CUDA
 *     thread, __syncthreads a barrier, emulated shuffles) into a shared object, cached by the
 *     source's hash, and dlopens it; every `__global__` function gets a launcher by name;
 *   - launches run synchronously; an event records the host clock, so "kernel time" is the
 *     time the emulation took (meaningless as a GPU figure, but monotonic and positive);
 *   - one device, "Tessera emulated GPU", SM EMU_SM (default 80), 1 MiB of L2.
 *
 * Environment: EMU_CXX (host C++ compiler, default g++), EMU_SHIM_DIR (default: the source
 * tree's tests/cuda_shim, set at build time), EMU_CACHE (compiled modules; default
 * $TMPDIR/tessera-emu-<uid>), EMU_SM, and for fault injection EMU_CRASH_AT=FILE:N: the N-th
 * launch counted across processes in FILE aborts the process, as a GPU's sticky error
 * (an illegal address) leaves a context unusable and the tuner's measuring child must die;
 * EMU_HANG_AT=FILE:N: that launch never returns; EMU_CORRUPT_DTOH: every copy to the host
 * adds 1 to its first float (a wrong answer).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "emu_magic.h"

#ifndef EMU_DEFAULT_SHIM_DIR
#define EMU_DEFAULT_SHIM_DIR ""
#endif

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef int (*emu_launch_fn)(const char *, const int *, const int *, void **);

enum {
    OK = 0,
    ERR_INVALID_VALUE = 1,
    ERR_OUT_OF_MEMORY = 2,
    ERR_NOT_INITIALIZED = 3,
    ERR_INVALID_IMAGE = 200,
    ERR_NOT_FOUND = 500,
    ERR_LAUNCH_FAILED = 719,
};

typedef struct emu_function emu_function;

typedef struct {
    void *so;
    emu_launch_fn launch;
    emu_function *fns; /* handed out by cuModuleGetFunction, freed with the module */
} emu_module;

struct emu_function {
    emu_module *mod;
    emu_function *next;
    char name[256];
};

static int g_init;

CUresult cuGetErrorString(CUresult r, const char **s)
{
    switch (r) {
    case OK:
        *s = "no error";
        break;
    case ERR_INVALID_VALUE:
        *s = "invalid argument";
        break;
    case ERR_OUT_OF_MEMORY:
        *s = "out of memory";
        break;
    case ERR_NOT_INITIALIZED:
        *s = "initialization error";
        break;
    case ERR_INVALID_IMAGE:
        *s = "emulated driver: not an emulated image";
        break;
    case ERR_NOT_FOUND:
        *s = "named symbol not found";
        break;
    case ERR_LAUNCH_FAILED:
        *s = "emulated launch failed";
        break;
    default:
        *s = "emulated driver error";
        break;
    }
    return OK;
}

CUresult cuInit(unsigned flags)
{
    (void)flags;
    g_init = 1;
    return OK;
}

#define NEED_INIT                                                                                  \
    do {                                                                                           \
        if (!g_init)                                                                               \
            return ERR_NOT_INITIALIZED;                                                            \
    } while (0)

CUresult cuDriverGetVersion(int *v)
{
    *v = 13000;
    return OK;
}

CUresult cuDeviceGetCount(int *n)
{
    NEED_INIT;
    *n = 1;
    return OK;
}

CUresult cuDeviceGet(int *d, int ordinal)
{
    NEED_INIT;
    if (ordinal != 0)
        return ERR_INVALID_VALUE;
    *d = 0;
    return OK;
}

CUresult cuDeviceGetName(char *name, int len, int d)
{
    (void)d;
    snprintf(name, (size_t)len, "Tessera emulated GPU");
    return OK;
}

static int emu_sm(void)
{
    const char *e = getenv("EMU_SM");
    int sm = e && *e ? atoi(e) : 80;
    return sm >= 50 && sm < 130 ? sm : 80;
}

CUresult cuDeviceGetAttribute(int *v, int attr, int d)
{
    (void)d;
    switch (attr) {
    case 75:
        *v = emu_sm() / 10;
        break; /* compute capability major */
    case 76:
        *v = emu_sm() % 10;
        break; /* minor */
    case 1:
        *v = 1024;
        break; /* max threads per block */
    case 8:
        *v = 48 << 10;
        break; /* shared memory per block */
    case 10:
        *v = 32;
        break; /* warp size */
    case 12:
        *v = 65536;
        break; /* registers per block */
    case 13:
        *v = 1000000;
        break; /* clock kHz */
    case 16:
        *v = 1;
        break; /* multiprocessors */
    case 36:
        *v = 1000000;
        break; /* memory clock kHz */
    case 37:
        *v = 64;
        break; /* memory bus bits */
    case 38:
        *v = 1 << 20;
        break; /* L2 bytes */
    case 39:
        *v = 2048;
        break; /* max threads per SM */
    case 81:
        *v = 100 << 10;
        break; /* shared memory per SM */
    case 97:
        *v = 99 << 10;
        break; /* opt-in shared memory per block */
    default:
        *v = 0;
        break;
    }
    return OK;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, int d)
{
    (void)d;
    *bytes = (size_t)1 << 30;
    return OK;
}

static int g_ctx_token;

CUresult cuDevicePrimaryCtxRetain(void **ctx, int d)
{
    (void)d;
    NEED_INIT;
    *ctx = &g_ctx_token;
    return OK;
}

CUresult cuCtxSetCurrent(void *ctx)
{
    (void)ctx;
    return OK;
}

CUresult cuCtxSynchronize(void) { return OK; }

/* ---- Modules ---- */

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static const char *env_or(const char *name, const char *dflt)
{
    const char *v = getenv(name);
    return v && *v ? v : dflt;
}

/* Appends "{"name", launcher}," for every __global__ function of src to out (cap bytes). */
static int kernel_table(const char *src, char *out, size_t cap)
{
    size_t n = 0;
    int count = 0;
    for (const char *p = strstr(src, "__global__"); p; p = strstr(p + 1, "__global__")) {
        const char *q = strchr(p, '(');
        if (!q)
            break;
        if (!strncmp(q - strlen("__launch_bounds__"), "__launch_bounds__",
                     strlen("__launch_bounds__"))) {
            q = strchr(q, ')');
            q = q ? strchr(q, '(') : NULL;
            if (!q)
                break;
        }
        const char *e = q;
        while (e > p && e[-1] == ' ')
            e--;
        const char *b = e;
        while (b > p && (b[-1] == '_' || (b[-1] >= 'a' && b[-1] <= 'z') ||
                         (b[-1] >= 'A' && b[-1] <= 'Z') || (b[-1] >= '0' && b[-1] <= '9')))
            b--;
        int len = (int)(e - b);
        int w =
            snprintf(out + n, cap - n,
                     "        {\"%.*s\", [](void **a) { emu_apply(%.*s, a); }},\n", len, b, len, b);
        if (w < 0 || (size_t)w >= cap - n)
            return -1;
        n += (size_t)w;
        count++;
    }
    return count;
}

/* The launcher appended to a module: a[i] points at the value of parameter i (as
 * cuLaunchKernel's kernelParams do), so its type comes from the kernel's own signature. */
static const char *launcher_fmt =
    "\ntemplate <typename... P, size_t... I>\n"
    "static void emu_apply_(void (*fn)(P...), void **a, std::index_sequence<I...>)\n"
    "{\n"
    "    fn(*static_cast<P *>(a[I])...);\n"
    "}\n"
    "template <typename... P> static void emu_apply(void (*fn)(P...), void **a)\n"
    "{\n"
    "    emu_apply_(fn, a, std::index_sequence_for<P...>{});\n"
    "}\n"
    "\nextern \"C\" int emu_launch(const char *name, const int *grid, const int *block,\n"
    "                              void **args)\n"
    "{\n"
    "    struct entry { const char *name; tsh_call_fn call; };\n"
    "    static const entry table[] = {\n%s"
    "    };\n"
    "    for (const entry &e : table)\n"
    "        if (!strcmp(e.name, name)) {\n"
    "            tsh_kernel k = {};\n"
    "            k.name = e.name;\n"
    "            k.call = e.call;\n"
    "            memcpy(k.grid, grid, sizeof k.grid);\n"
    "            memcpy(k.block, block, sizeof k.block);\n"
    "            tsh_launch(&k, args);\n"
    "            return 0;\n"
    "        }\n"
    "    return 1;\n"
    "}\n";

CUresult cuModuleLoadData(void **mod, const void *image)
{
    NEED_INIT;
    const char *img = image;
    if (!img || strncmp(img, EMU_MAGIC, strlen(EMU_MAGIC)))
        return ERR_INVALID_IMAGE;
    const char *src = img + strlen(EMU_MAGIC);
    char cache[512], so[600], cpp[600], cmd[2400];
    snprintf(cache, sizeof cache, "%s", env_or("EMU_CACHE", ""));
    if (!*cache)
        snprintf(cache, sizeof cache, "%s/tessera-emu-%ld", env_or("TMPDIR", "/tmp"),
                 (long)getuid());
    mkdir(cache, 0700);
    uint64_t h = fnv1a(src);
    snprintf(so, sizeof so, "%s/%016llx.so", cache, (unsigned long long)h);
    if (access(so, R_OK) != 0) {
        size_t cap = 64 + 2 * strlen(src);
        char *table = malloc(cap);
        if (!table || kernel_table(src, table, cap) <= 0) {
            free(table);
            return ERR_INVALID_IMAGE;
        }
        snprintf(cpp, sizeof cpp, "%s/%016llx.%ld.cpp", cache, (unsigned long long)h,
                 (long)getpid());
        FILE *f = fopen(cpp, "w");
        if (!f) {
            free(table);
            return ERR_OUT_OF_MEMORY;
        }
        fprintf(f, "#include \"cuda_shim.h\"\n%s\n", src);
        fprintf(f, launcher_fmt, table);
        fclose(f);
        free(table);
        char tmp_so[640];
        snprintf(tmp_so, sizeof tmp_so, "%s.so", cpp);
        snprintf(cmd, sizeof cmd,
                 "'%s' -std=c++17 -O1 -w -pthread -shared -fPIC -I'%s' -o '%s' '%s' >'%s.log' "
                 "2>&1",
                 env_or("EMU_CXX", "g++"), env_or("EMU_SHIM_DIR", EMU_DEFAULT_SHIM_DIR), tmp_so,
                 cpp, cpp);
        if (system(cmd) != 0) {
            fprintf(stderr, "emulated driver: compiling %s failed (see %s.log)\n", cpp, cpp);
            return ERR_INVALID_IMAGE;
        }
        rename(tmp_so, so); /* atomic: another process may load it meanwhile */
        unlink(cpp);
        snprintf(cmd, sizeof cmd, "%s.log", cpp);
        unlink(cmd);
    }
    emu_module *m = calloc(1, sizeof *m);
    if (!m)
        return ERR_OUT_OF_MEMORY;
    m->so = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    *(void **)&m->launch = m->so ? dlsym(m->so, "emu_launch") : NULL;
    if (!m->launch) {
        fprintf(stderr, "emulated driver: %s\n", dlerror());
        if (m->so)
            dlclose(m->so);
        free(m);
        return ERR_INVALID_IMAGE;
    }
    *mod = m;
    return OK;
}

CUresult cuModuleUnload(void *mod)
{
    emu_module *m = mod;
    if (m) {
        while (m->fns) {
            emu_function *f = m->fns;
            m->fns = f->next;
            free(f);
        }
        dlclose(m->so);
        free(m);
    }
    return OK;
}

CUresult cuModuleGetFunction(void **fn, void *mod, const char *name)
{
    emu_function *f = calloc(1, sizeof *f);
    if (!f)
        return ERR_OUT_OF_MEMORY;
    emu_module *m = mod;
    f->mod = m;
    f->next = m->fns;
    m->fns = f;
    snprintf(f->name, sizeof f->name, "%s", name);
    *fn = f;
    return OK;
}

/* EMU_CRASH_AT=FILE:N (or EMU_HANG_AT): counts launches in FILE (across processes); the N-th
 * aborts (or never returns). */
static void maybe_fail(const char *var, int hang)
{
    const char *spec = getenv(var);
    const char *colon = spec ? strrchr(spec, ':') : NULL;
    if (!colon)
        return;
    char path[512];
    snprintf(path, sizeof path, "%.*s", (int)(colon - spec), spec);
    long at = atol(colon + 1), n = 0;
    int fd = open(path, O_RDWR | O_CREAT, 0600);
    if (fd < 0)
        return;
    flock(fd, LOCK_EX);
    char buf[32] = {0};
    if (read(fd, buf, sizeof buf - 1) > 0)
        n = atol(buf);
    n++;
    int len = snprintf(buf, sizeof buf, "%ld\n", n);
    if (lseek(fd, 0, SEEK_SET) == 0 && write(fd, buf, (size_t)len) == len) {
        /* counted */
    }
    flock(fd, LOCK_UN);
    close(fd);
    if (n == at && hang) {
        fprintf(stderr, "emulated driver: launch %ld: injected hang\n", n);
        for (;;)
            pause();
    }
    if (n == at) {
        fprintf(stderr, "emulated driver: launch %ld: injected illegal address, aborting\n", n);
        abort();
    }
}

CUresult cuLaunchKernel(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shmem, void *stream, void **params, void **extra)
{
    (void)shmem, (void)stream, (void)extra;
    emu_function *f = fn;
    if (!f || !params)
        return ERR_INVALID_VALUE;
    maybe_fail("EMU_CRASH_AT", 0);
    maybe_fail("EMU_HANG_AT", 1);
    int grid[3] = {(int)gx, (int)gy, (int)gz}, block[3] = {(int)bx, (int)by, (int)bz};
    return f->mod->launch(f->name, grid, block, params) == 0 ? OK : ERR_NOT_FOUND;
}

/* ---- Memory ---- */

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes)
{
    NEED_INIT;
    void *m = aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (!m)
        return ERR_OUT_OF_MEMORY;
    *p = (CUdeviceptr)(uintptr_t)m;
    return OK;
}

CUresult cuMemFree_v2(CUdeviceptr p)
{
    free((void *)(uintptr_t)p);
    return OK;
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n)
{
    memcpy((void *)(uintptr_t)d, s, n);
    return OK;
}

CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n)
{
    memcpy(d, (const void *)(uintptr_t)s, n);
    if (getenv("EMU_CORRUPT_DTOH") && n >= sizeof(float))
        ((float *)d)[0] += 1.0f; /* a wrong result the caller must catch */
    return OK;
}

CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n)
{
    memmove((void *)(uintptr_t)d, (const void *)(uintptr_t)s, n);
    return OK;
}

CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n)
{
    memset((void *)(uintptr_t)d, v, n);
    return OK;
}

/* ---- Events: the host clock (launches are synchronous) ---- */

CUresult cuEventCreate(void **e, unsigned flags)
{
    (void)flags;
    *e = calloc(1, sizeof(double));
    return *e ? OK : ERR_OUT_OF_MEMORY;
}

CUresult cuEventRecord(void *e, void *stream)
{
    (void)stream;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    *(double *)e = (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
    return OK;
}

CUresult cuEventSynchronize(void *e)
{
    (void)e;
    return OK;
}

CUresult cuEventElapsedTime(float *ms, void *a, void *b)
{
    *ms = (float)(*(double *)b - *(double *)a);
    return OK;
}

CUresult cuEventDestroy_v2(void *e)
{
    free(e);
    return OK;
}

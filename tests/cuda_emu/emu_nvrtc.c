/*
 * tests/cuda_emu/emu_nvrtc.c: the NVRTC half of the emulated GPU (tests only; see emu_cuda.c).
 * Loaded by Tessera as its NVRTC (TESSERA_NVRTC=path/to/libtessera_emu_nvrtc.so). Every call is
 * forwarded to the real NVRTC (EMU_REAL_NVRTC, else CUDA_HOME/lib64 or /usr/local/cuda/lib64),
 * so a program that does not compile for the GPU fails here too and the ptxas figures in the
 * log are the real ones; only the image differs: the "cubin" is EMU_MAGIC followed by the CUDA
 * C++ source, which the emulated driver compiles as host C++ when the module is loaded.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_magic.h"

typedef int (*create_fn)(void **, const char *, const char *, int, const char *const *,
                         const char *const *);
typedef int (*destroy_fn)(void **);
typedef int (*compile_fn)(void *, int, const char *const *);
typedef int (*size_fn)(void *, size_t *);
typedef int (*get_fn)(void *, char *);
typedef int (*version_fn)(int *, int *);
typedef const char *(*errstr_fn)(int);

static struct {
    void *lib;
    create_fn create;
    destroy_fn destroy;
    compile_fn compile;
    size_fn log_size, ptx_size;
    get_fn log, ptx;
    version_fn version;
    errstr_fn errstr;
} real;

/* Our program: the real one and the source. */
typedef struct {
    void *prog;
    char *src;
} emu_prog;

static void *open_real(void)
{
    const char *env = getenv("EMU_REAL_NVRTC");
    void *h = env && *env ? dlopen(env, RTLD_NOW | RTLD_LOCAL) : NULL;
    const char *homes[] = {getenv("CUDA_HOME"), "/usr/local/cuda"};
    const char *names[] = {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2"};
    char path[1024];
    for (int i = 0; i < 2 && !h; i++)
        for (int j = 0; j < 4 && !h && homes[i] && *homes[i]; j++) {
            snprintf(path, sizeof path, "%s/lib64/%s", homes[i], names[j]);
            h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        }
    return h;
}

static int load(void)
{
    if (real.lib)
        return 0;
    void *h = open_real();
    if (!h)
        return -1;
#define SYM(f, n) *(void **)&real.f = dlsym(h, n)
    SYM(create, "nvrtcCreateProgram");
    SYM(destroy, "nvrtcDestroyProgram");
    SYM(compile, "nvrtcCompileProgram");
    SYM(log_size, "nvrtcGetProgramLogSize");
    SYM(log, "nvrtcGetProgramLog");
    SYM(ptx_size, "nvrtcGetPTXSize");
    SYM(ptx, "nvrtcGetPTX");
    SYM(version, "nvrtcVersion");
    SYM(errstr, "nvrtcGetErrorString");
#undef SYM
    if (!real.create || !real.destroy || !real.compile || !real.log_size || !real.log ||
        !real.ptx_size || !real.ptx || !real.version || !real.errstr)
        return -1;
    real.lib = h;
    return 0;
}

const char *nvrtcGetErrorString(int r)
{
    return load() == 0 ? real.errstr(r) : "emulated NVRTC: the real NVRTC cannot be loaded";
}

int nvrtcVersion(int *major, int *minor) { return load() == 0 ? real.version(major, minor) : 7; }

int nvrtcCreateProgram(void **out, const char *src, const char *name, int nh,
                       const char *const *headers, const char *const *include_names)
{
    if (load() != 0)
        return 7; /* NVRTC_ERROR_BUILTIN_OPERATION_FAILURE */
    emu_prog *p = calloc(1, sizeof *p);
    if (!p || !(p->src = strdup(src ? src : ""))) {
        free(p);
        return 1; /* NVRTC_ERROR_OUT_OF_MEMORY */
    }
    int r = real.create(&p->prog, src, name, nh, headers, include_names);
    if (r != 0) {
        free(p->src);
        free(p);
        return r;
    }
    *out = p;
    return 0;
}

int nvrtcDestroyProgram(void **prog)
{
    emu_prog *p = prog ? *prog : NULL;
    if (!p)
        return 0;
    real.destroy(&p->prog);
    free(p->src);
    free(p);
    *prog = NULL;
    return 0;
}

int nvrtcCompileProgram(void *prog, int n, const char *const *opts)
{
    return real.compile(((emu_prog *)prog)->prog, n, opts);
}

int nvrtcGetProgramLogSize(void *prog, size_t *n)
{
    return real.log_size(((emu_prog *)prog)->prog, n);
}

int nvrtcGetProgramLog(void *prog, char *log) { return real.log(((emu_prog *)prog)->prog, log); }

int nvrtcGetPTXSize(void *prog, size_t *n) { return real.ptx_size(((emu_prog *)prog)->prog, n); }

int nvrtcGetPTX(void *prog, char *ptx) { return real.ptx(((emu_prog *)prog)->prog, ptx); }

/* The image: the magic line, then the source with its terminating NUL. */
int nvrtcGetCUBINSize(void *prog, size_t *n)
{
    *n = strlen(EMU_MAGIC) + strlen(((emu_prog *)prog)->src) + 1;
    return 0;
}

int nvrtcGetCUBIN(void *prog, char *out)
{
    strcpy(out, EMU_MAGIC);
    strcat(out, ((emu_prog *)prog)->src);
    return 0;
}

/*
 * backends/cuda/nvrtc.c: NVRTC loaded with dlopen. Compiles CUDA C++ to a cubin for one SM
 * and reads ptxas' resource figures (registers, shared memory, stack, spills) from the log
 * ("--ptxas-options=-v"), so they are recorded even on machines without a GPU.
 *
 * Search order for the library: $TESSERA_NVRTC (a path; "off" disables NVRTC), $CUDA_HOME/lib64,
 * $CUDA_PATH/lib64, /usr/local/cuda/lib64, then the loader's paths, each trying libnvrtc.so and the
 * versioned names of CUDA 13, 12 and 11.
 */
#define _GNU_SOURCE

#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_impl.h"

typedef int nvrtcResult;
typedef void *nvrtcProgram;

static struct {
    void *lib;
    const char *(*GetErrorString)(nvrtcResult);
    nvrtcResult (*Version)(int *, int *);
    nvrtcResult (*CreateProgram)(nvrtcProgram *, const char *, const char *, int,
                                 const char *const *, const char *const *);
    nvrtcResult (*DestroyProgram)(nvrtcProgram *);
    nvrtcResult (*CompileProgram)(nvrtcProgram, int, const char *const *);
    nvrtcResult (*GetProgramLogSize)(nvrtcProgram, size_t *);
    nvrtcResult (*GetProgramLog)(nvrtcProgram, char *);
    nvrtcResult (*GetCUBINSize)(nvrtcProgram, size_t *);
    nvrtcResult (*GetCUBIN)(nvrtcProgram, char *);
    nvrtcResult (*GetPTXSize)(nvrtcProgram, size_t *);
    nvrtcResult (*GetPTX)(nvrtcProgram, char *);
    int status;
    char why[1024];
} nv;

static pthread_once_t nv_once = PTHREAD_ONCE_INIT;

/* The directory with cuda_fp16.h and cuda_bf16.h, which NVRTC does not have built in (sources
 * with f16/bf16 include them): $CUDA_HOME/include, $CUDA_PATH/include, /usr/local/cuda/include,
 * or the include directory beside the loaded libnvrtc. False when none has cuda_fp16.h. */
static bool cuda_include_dir(char *out, size_t n)
{
    const char *roots[] = {getenv("CUDA_HOME"), getenv("CUDA_PATH"), "/usr/local/cuda"};
    char path[1100];
    for (int i = 0; i < 4; i++) {
        if (i < 3) {
            if (!roots[i] || !*roots[i])
                continue;
            snprintf(out, n, "%s/include", roots[i]);
        } else {
            Dl_info info;
            if (!nv.GetErrorString || !dladdr((void *)nv.GetErrorString, &info) || !info.dli_fname)
                return false;
            snprintf(out, n, "%s", info.dli_fname);
            for (int up = 0; up < 2; up++) { /* <root>/lib64/libnvrtc.so -> <root> */
                char *sl = strrchr(out, '/');
                if (!sl)
                    return false;
                *sl = 0;
            }
            strncat(out, "/include", n - strlen(out) - 1);
        }
        snprintf(path, sizeof path, "%s/cuda_fp16.h", out);
        FILE *f = fopen(path, "r");
        if (f) {
            fclose(f);
            return true;
        }
    }
    return false;
}

static void *try_open(const char *dir, char *tried, size_t n)
{
    static const char *const names[] = {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12",
                                        "libnvrtc.so.11.2", NULL};
    for (int i = 0; names[i]; i++) {
        char path[1024];
        if (dir)
            snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        else
            snprintf(path, sizeof path, "%s", names[i]);
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (h)
            return h;
        size_t l = strlen(tried);
        if (l + 4 < n && i == 0)
            snprintf(tried + l, n - l, "%s%s", l ? ", " : "", dir ? dir : "(loader paths)");
    }
    return NULL;
}

static void nv_load(void)
{
    char tried[600] = "";
    const char *env = getenv("TESSERA_NVRTC");
    if (env && (!strcmp(env, "off") || !strcmp(env, "none"))) {
        nv.status = TE_ERR_NO_CUDA;
        snprintf(nv.why, sizeof nv.why, "NVRTC disabled by TESSERA_NVRTC=%s", env);
        return;
    }
    if (env && *env) {
        nv.lib = dlopen(env, RTLD_NOW | RTLD_LOCAL);
        if (!nv.lib)
            snprintf(tried, sizeof tried, "%s", env);
    }
    char dir[600];
    const char *homes[] = {getenv("CUDA_HOME"), getenv("CUDA_PATH"), "/usr/local/cuda"};
    for (int i = 0; i < 3 && !nv.lib; i++) {
        if (!homes[i] || !*homes[i])
            continue;
        snprintf(dir, sizeof dir, "%s/lib64", homes[i]);
        nv.lib = try_open(dir, tried + strlen(tried), sizeof tried - strlen(tried));
    }
    if (!nv.lib)
        nv.lib = try_open(NULL, tried + strlen(tried), sizeof tried - strlen(tried));
    if (!nv.lib) {
        nv.status = TE_ERR_NO_CUDA;
        snprintf(nv.why, sizeof nv.why,
                 "NVRTC (libnvrtc.so) not found (looked in %s); install "
                 "the CUDA toolkit or set TESSERA_NVRTC to the library's path",
                 tried);
        return;
    }
#define SYM(n)                                                                                     \
    do {                                                                                           \
        void *p = dlsym(nv.lib, "nvrtc" #n);                                                       \
        if (!p) {                                                                                  \
            nv.status = TE_ERR_NO_CUDA;                                                            \
            snprintf(nv.why, sizeof nv.why, "NVRTC library lacks nvrtc" #n);                       \
            return;                                                                                \
        }                                                                                          \
        memcpy(&nv.n, &p, sizeof p);                                                               \
    } while (0)
    SYM(GetErrorString);
    SYM(Version);
    SYM(CreateProgram);
    SYM(DestroyProgram);
    SYM(CompileProgram);
    SYM(GetProgramLogSize);
    SYM(GetProgramLog);
    SYM(GetCUBINSize);
    SYM(GetCUBIN);
    SYM(GetPTXSize);
    SYM(GetPTX);
#undef SYM
    nv.status = TE_OK;
}

int te__nvrtc_load(char *errbuf, size_t n)
{
    pthread_once(&nv_once, nv_load);
    if (nv.status != TE_OK && errbuf && n)
        snprintf(errbuf, n, "%s", nv.why);
    return nv.status;
}

int te_nvrtc_probe(void)
{
    char why[1024];
    int rc = te__nvrtc_load(why, sizeof why);
    if (rc != TE_OK)
        te__cuda_set_error(rc, "%s", why);
    return rc;
}

bool te_nvrtc_available(void) { return te_nvrtc_probe() == TE_OK; }

int te_nvrtc_version(void)
{
    int a = 0, b = 0;
    if (te__nvrtc_load(NULL, 0) != TE_OK || nv.Version(&a, &b) != 0)
        return 0;
    return a * 1000 + b * 10;
}

static int compile(const char *source, const char *name, int sm, bool want_ptx, void **cubin,
                   size_t *size, char **log)
{
    if (cubin)
        *cubin = NULL;
    if (size)
        *size = 0;
    if (log)
        *log = NULL;
    if (!source || !cubin || !size || sm <= 0)
        return TE_ERR_ARG;
    char why[1024];
    int rc = te__nvrtc_load(why, sizeof why);
    if (rc != TE_OK) {
        if (log)
            *log = strdup(why);
        return te__cuda_set_error(rc, "%s", why);
    }
    nvrtcProgram prog = NULL;
    char file[200];
    snprintf(file, sizeof file, "%s.cu", name ? name : "tessera");
    int r = nv.CreateProgram(&prog, source, file, 0, NULL, NULL);
    if (r != 0) {
        if (log)
            *log = strdup(nv.GetErrorString(r));
        return te__cuda_set_error(TE_ERR_COMPILE, "nvrtcCreateProgram: %s", nv.GetErrorString(r));
    }
    char arch[64];
    snprintf(arch, sizeof arch, "--gpu-architecture=sm_%d", sm);
    const char *opts[] = {arch, "--ptxas-options=-v", "--std=c++17", NULL};
    int nopts = 3;
    if (want_ptx) { /* a virtual architecture: NVRTC stops at PTX (no ptxas, no -v) */
        snprintf(arch, sizeof arch, "--gpu-architecture=compute_%d", sm);
        opts[1] = opts[2];
        nopts = 2;
    }
    char inc[1040], dir[1024];
    if (strstr(source, "#include <cuda_fp16.h>") && cuda_include_dir(dir, sizeof dir)) {
        snprintf(inc, sizeof inc, "-I%s", dir);
        opts[nopts++] = inc;
    }
    r = nv.CompileProgram(prog, nopts, opts);
    size_t ln = 0;
    char *lg = NULL;
    if (nv.GetProgramLogSize(prog, &ln) == 0 && (lg = malloc(ln + 1)) != NULL) {
        lg[0] = 0;
        nv.GetProgramLog(prog, lg);
        lg[ln] = 0;
    }
    if (r != 0) {
        te__cuda_set_error(TE_ERR_COMPILE, "NVRTC failed for sm_%d (%s):\n%s", sm,
                           nv.GetErrorString(r), lg ? lg : "");
        if (log)
            *log = lg;
        else
            free(lg);
        nv.DestroyProgram(&prog);
        return TE_ERR_COMPILE;
    }
    size_t n = 0;
    char *img = NULL;
    if (want_ptx
            ? nv.GetPTXSize(prog, &n) != 0 || !(img = malloc(n + 1)) || nv.GetPTX(prog, img) != 0
            : nv.GetCUBINSize(prog, &n) != 0 || !(img = malloc(n ? n : 1)) ||
                  nv.GetCUBIN(prog, img) != 0) {
        free(img);
        free(lg);
        nv.DestroyProgram(&prog);
        return te__cuda_set_error(TE_ERR_COMPILE, "NVRTC produced no %s for sm_%d",
                                  want_ptx ? "PTX" : "cubin", sm);
    }
    if (want_ptx)
        img[n] = 0;
    nv.DestroyProgram(&prog);
    *cubin = img;
    *size = n;
    if (log)
        *log = lg;
    else
        free(lg);
    return TE_OK;
}

int te_nvrtc_compile(const char *source, const char *name, int sm, void **cubin, size_t *size,
                     char **log)
{
    return compile(source, name, sm, false, cubin, size, log);
}

int te__nvrtc_ptx(const char *source, const char *name, int sm, char **ptx, char **log)
{
    size_t n = 0;
    void *p = NULL;
    int rc = compile(source, name, sm, true, &p, &n, log);
    if (ptx)
        *ptx = p;
    else
        free(p);
    return rc;
}

/* ptxas -v, per function:
 *   ptxas info    : Compiling entry function 'k' for 'sm_90'
 *   ptxas info    : Function properties for k
 *   ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
 *   ptxas info    : Used 10 registers, used 1 barriers, 4096 bytes smem */
void te__ptxas_parse(const char *log, const char *name, te_cuda_kernel_info *info)
{
    info->registers = info->shared_bytes = info->stack_bytes = info->spill_bytes = -1;
    if (!log || !name)
        return;
    char want1[300], want2[300];
    snprintf(want1, sizeof want1, "Compiling entry function '%s'", name);
    snprintf(want2, sizeof want2, "Function properties for %s", name);
    bool in = false;
    for (const char *p = log; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        char ln[1024];
        snprintf(ln, sizeof ln, "%.*s", (int)(n < sizeof ln - 1 ? n : sizeof ln - 1), p);
        if (strstr(ln, "Compiling entry function"))
            in = strstr(ln, want1) != NULL;
        else if (strstr(ln, "Function properties for"))
            in = in || strstr(ln, want2) != NULL;
        if (in) {
            const char *q;
            if ((q = strstr(ln, "bytes stack frame")) != NULL) {
                const char *d = ln;
                while (*d && (*d < '0' || *d > '9'))
                    d++;
                info->stack_bytes = atoi(d);
                const char *sp = strstr(ln, "bytes stack frame, ");
                if (sp)
                    info->spill_bytes = atoi(sp + strlen("bytes stack frame, "));
            }
            if ((q = strstr(ln, "Used ")) != NULL) {
                info->registers = atoi(q + 5);
                const char *sm = strstr(ln, "bytes smem");
                if (sm) {
                    const char *d = sm;
                    while (d > ln && d[-1] == ' ')
                        d--;
                    while (d > ln && d[-1] >= '0' && d[-1] <= '9')
                        d--;
                    info->shared_bytes = atoi(d);
                } else {
                    info->shared_bytes = 0;
                }
                in = false;
            }
        }
        p = nl ? nl + 1 : NULL;
    }
}

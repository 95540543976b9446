/*
 * Baselines for `tessera bench` and `tessera tune` (see baselines.h).
 *
 * Choosing OpenBLAS's kernels. Debian's OpenBLAS (DYNAMIC_ARCH) picks its kernels in a library
 * constructor, from cpuid and $OPENBLAS_CORETYPE, when the library loads: for a CLI linked with
 * OpenBLAS that is before main(). Two ways to change the choice: load OpenBLAS with dlopen after
 * setting the variable, or re-execute the process with the variable set. We re-execute: the CLI
 * and the tests keep calling cblas_sgemm directly (no table of function pointers, no second copy
 * of OpenBLAS next to a linked one), the change is one execv() before anything else has started,
 * and it affects only the benchmark process (and what it forks), never tests or CI, which do not
 * set the variable. TESSERA_BASELINE_REEXEC guards against a loop: a process that has it never
 * re-executes again, it only reports what the re-execution gave.
 *
 * oneDNN is loaded with dlopen, so a machine without it builds and benchmarks (with a note).
 * Debian's oneDNN uses OpenMP (DNNL_CPU_THREADING_RUNTIME == DNNL_RUNTIME_OMP), the same libgomp
 * as OpenBLAS's OpenMP build and the generated kernels: one threading runtime, whose thread
 * count omp_set_num_threads() sets for all three.
 */
#define _GNU_SOURCE

#include "tools/baselines.h"
#include "tools/bl_vec.h"

#include <cblas.h>
#include <cpuid.h>
#include <dlfcn.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/* oneDNN's header gives the types of the entry points looked up with dlsym; without it (or with
 * -DTESSERA_NO_ONEDNN) the CLI builds and reports oneDNN as not built in. */
#if defined(__has_include) && !defined(TESSERA_NO_ONEDNN)
#if __has_include(<oneapi/dnnl/dnnl.h>)
#include <oneapi/dnnl/dnnl.h>
#if DNNL_VERSION_MAJOR == 2
#define TE_BL_HAVE_DNNL 1
#endif
#endif
#endif
#ifndef TE_BL_HAVE_DNNL
#define TE_BL_HAVE_DNNL 0
#endif

/* ---- CPU features and OpenBLAS core names --------------------------------------------- */

void te_bl_cpu_detect(te_bl_cpu *cpu)
{
    memset(cpu, 0, sizeof *cpu);
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d))
        return;
    unsigned maxleaf = a;
    cpu->intel = b == 0x756e6547u && d == 0x49656e69u && c == 0x6c65746eu; /* GenuineIntel */
    cpu->amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;   /* AuthenticAMD */
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return;
    int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, fma = (c >> 12) & 1;
    uint64_t xcr0 = 0;
    if (osxsave) {
        unsigned lo, hi;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        xcr0 = ((uint64_t)hi << 32) | lo;
    }
    int ymm_os = (xcr0 & 0x6) == 0x6, zmm_os = (xcr0 & 0xe6) == 0xe6;
    cpu->avx = avx && ymm_os;
    cpu->fma = fma && cpu->avx;
    if (maxleaf < 7)
        return;
    __cpuid_count(7, 0, a, b, c, d);
    cpu->avx2 = ((b >> 5) & 1) && cpu->fma;
    int f = (b >> 16) & 1, dq = (b >> 17) & 1, bw = (b >> 30) & 1, vl = (b >> 31) & 1;
    cpu->avx512 = f && dq && bw && vl && zmm_os && cpu->avx2;
    cpu->avx512_vnni = cpu->avx512 && ((c >> 11) & 1);
    /* AMX: TILE, BF16 and INT8 (edx bits 24, 22, 25) and the tile state in XCR0 (bits 17, 18:
     * XTILECFG, XTILEDATA). Linux also wants a per-process permission for XTILEDATA, which
     * oneDNN asks for itself. */
    int tile_os = (xcr0 & 0x60000) == 0x60000;
    cpu->amx = ((d >> 24) & 1) && ((d >> 22) & 1) && ((d >> 25) & 1) && tile_os;
    __cpuid_count(7, 1, a, b, c, d);
    cpu->avx512_bf16 = cpu->avx512 && ((a >> 5) & 1);
}

te_bl_level te_bl_cpu_level(const te_bl_cpu *cpu)
{
    if (cpu->avx512)
        return TE_BL_LEVEL_AVX512;
    if (cpu->avx2)
        return TE_BL_LEVEL_AVX2;
    if (cpu->avx)
        return TE_BL_LEVEL_AVX;
    return TE_BL_LEVEL_SSE;
}

te_bl_level te_bl_core_level(const char *core)
{
    static const struct {
        const char *name;
        te_bl_level level;
    } cores[] = {
        /* OpenBLAS 0.3.x driver/others/dynamic.c corename[] */
        {"Katmai", TE_BL_LEVEL_SSE},        {"Coppermine", TE_BL_LEVEL_SSE},
        {"Northwood", TE_BL_LEVEL_SSE},     {"Prescott", TE_BL_LEVEL_SSE},
        {"Banias", TE_BL_LEVEL_SSE},        {"Atom", TE_BL_LEVEL_SSE},
        {"Core2", TE_BL_LEVEL_SSE},         {"Penryn", TE_BL_LEVEL_SSE},
        {"Dunnington", TE_BL_LEVEL_SSE},    {"Nehalem", TE_BL_LEVEL_SSE},
        {"Athlon", TE_BL_LEVEL_SSE},        {"Opteron", TE_BL_LEVEL_SSE},
        {"Opteron_SSE3", TE_BL_LEVEL_SSE},  {"Barcelona", TE_BL_LEVEL_SSE},
        {"Nano", TE_BL_LEVEL_SSE},          {"Bobcat", TE_BL_LEVEL_SSE},
        {"Sandybridge", TE_BL_LEVEL_AVX},   {"Bulldozer", TE_BL_LEVEL_AVX},
        {"Piledriver", TE_BL_LEVEL_AVX},    {"Steamroller", TE_BL_LEVEL_AVX},
        {"Excavator", TE_BL_LEVEL_AVX2},    {"Haswell", TE_BL_LEVEL_AVX2},
        {"Zen", TE_BL_LEVEL_AVX2},          {"SkylakeX", TE_BL_LEVEL_AVX512},
        {"Cooperlake", TE_BL_LEVEL_AVX512}, {"SapphireRapids", TE_BL_LEVEL_AVX512},
    };
    for (size_t i = 0; core && i < sizeof cores / sizeof cores[0]; i++)
        if (!strcasecmp(core, cores[i].name))
            return cores[i].level;
    return TE_BL_LEVEL_UNKNOWN;
}

te_bl_core_class te_bl_classify_core(const char *core, const te_bl_cpu *cpu, const char **want)
{
    if (want)
        *want = NULL;
    te_bl_level have = te_bl_core_level(core), can = te_bl_cpu_level(cpu);
    if (have == TE_BL_LEVEL_UNKNOWN)
        return TE_BL_CORE_UNKNOWN;
    if (have >= can)
        return TE_BL_CORE_FITS;
    if (want) {
        if (can == TE_BL_LEVEL_AVX512)
            *want = cpu->avx512_bf16 ? "Cooperlake" : "SkylakeX";
        else if (can == TE_BL_LEVEL_AVX2)
            *want = cpu->amd ? "Zen" : "Haswell";
        else
            *want = "Sandybridge";
    }
    return TE_BL_CORE_GENERIC;
}

/* ---- OpenBLAS kernel selection (re-exec) ----------------------------------------------- */

#define REEXEC_VAR "TESSERA_BASELINE_REEXEC"

static char g_ob_note[448];
static char g_ob_core[64];
static int g_ob_trusted = 1, g_ob_selected;

static const char *level_name(te_bl_level l)
{
    switch (l) {
    case TE_BL_LEVEL_AVX512:
        return "AVX-512";
    case TE_BL_LEVEL_AVX2:
        return "AVX2";
    case TE_BL_LEVEL_AVX:
        return "AVX";
    case TE_BL_LEVEL_SSE:
        return "SSE";
    default:
        return "?";
    }
}

void te_bl_openblas_select(char **argv)
{
    if (g_ob_selected)
        return;
    g_ob_selected = 1;
    te_bl_cpu cpu;
    te_bl_cpu_detect(&cpu);
    const char *real = openblas_get_corename();
    snprintf(g_ob_core, sizeof g_ob_core, "%s", real ? real : "?");
    /* The marker is "PID:CORE": execv keeps the process id, so only the re-executed process
     * itself matches; a marker inherited by another process (a child, a nested run) is not
     * ours and is ignored. The caller's OPENBLAS_CORETYPE is copied: setenv() below may free
     * the string getenv() points to. */
    char caller[64] = "";
    if (getenv("OPENBLAS_CORETYPE"))
        snprintf(caller, sizeof caller, "%s", getenv("OPENBLAS_CORETYPE"));
    const char *mk = getenv(REEXEC_VAR), *set = caller[0] ? caller : NULL, *marker = NULL;
    if (mk) {
        char *colon;
        long pid = strtol(mk, &colon, 10);
        if (*colon == ':' && pid == (long)getpid())
            marker = colon + 1;
    }
    const char *want = NULL;
    te_bl_level cl = te_bl_cpu_level(&cpu);
    if (marker) {
        /* The re-executed process: report what the variable gave. */
        te_bl_core_class k = te_bl_classify_core(g_ob_core, &cpu, NULL);
        g_ob_trusted = k != TE_BL_CORE_GENERIC;
        snprintf(g_ob_note, sizeof g_ob_note,
                 "OpenBLAS: core %s is generic on this CPU (%s); re-ran with "
                 "OPENBLAS_CORETYPE=%s -> core %s%s",
                 marker, level_name(cl), set ? set : "?", g_ob_core,
                 g_ob_trusted ? "" : " (still generic: ratios to OpenBLAS left out)");
        return;
    }
    /* Test hook: pretend OpenBLAS reported this core (the first process only). */
    const char *fake = getenv("TESSERA_TEST_OPENBLAS_CORE");
    const char *seen = fake && *fake ? fake : g_ob_core;
    te_bl_core_class k = te_bl_classify_core(seen, &cpu, &want);
    if (k == TE_BL_CORE_GENERIC && argv && argv[0]) {
        fflush(stdout);
        fflush(stderr);
        /* A caller's OPENBLAS_CORETYPE that gives narrower kernels is replaced too (machines
         * set one for an OpenBLAS too old to know their CPU, often an AVX2 core on an AVX-512
         * CPU): the note names it. */
        char mark[192];
        snprintf(mark, sizeof mark, "%ld:%s%s%s%s", (long)getpid(), seen,
                 set ? " (OPENBLAS_CORETYPE=" : "", set ? set : "",
                 set ? " set by the caller)" : "");
        setenv(REEXEC_VAR, mark, 1);
        setenv("OPENBLAS_CORETYPE", want, 1);
        execv("/proc/self/exe", argv);
        execvp(argv[0], argv);
        /* Still here: the exec failed; undo and say so. */
        unsetenv(REEXEC_VAR);
        unsetenv("OPENBLAS_CORETYPE");
        g_ob_trusted = 0;
        snprintf(g_ob_note, sizeof g_ob_note,
                 "OpenBLAS: core %s is generic on this CPU (%s) and re-running with "
                 "OPENBLAS_CORETYPE=%s failed: ratios to OpenBLAS left out",
                 seen, level_name(cl), want);
        if (set)
            setenv("OPENBLAS_CORETYPE", set, 1);
        return;
    }
    g_ob_trusted = k != TE_BL_CORE_GENERIC;
    if (k == TE_BL_CORE_GENERIC)
        snprintf(g_ob_note, sizeof g_ob_note,
                 "OpenBLAS: core %s%s%s%s is generic on this CPU (%s; %s would fit): ratios to "
                 "OpenBLAS left out",
                 seen, set ? " (OPENBLAS_CORETYPE=" : "", set ? set : "",
                 set ? " set by the caller)" : "", level_name(cl), want);
    else if (k == TE_BL_CORE_UNKNOWN)
        snprintf(g_ob_note, sizeof g_ob_note,
                 "OpenBLAS: core %s (not in Tessera's table of cores; CPU level %s)", seen,
                 level_name(cl));
    else
        snprintf(g_ob_note, sizeof g_ob_note, "OpenBLAS: core %s fits this CPU (%s)%s%s%s", seen,
                 level_name(cl), set ? " (OPENBLAS_CORETYPE=" : "", set ? set : "",
                 set ? " set by the caller)" : "");
}

const char *te_bl_openblas_note(void) { return g_ob_note; }

const char *te_bl_openblas_core(void)
{
    if (!g_ob_core[0]) {
        const char *c = openblas_get_corename();
        snprintf(g_ob_core, sizeof g_ob_core, "%s", c ? c : "?");
    }
    return g_ob_core;
}

int te_bl_openblas_trusted(void) { return g_ob_trusted; }

/* ---- oneDNN (dlopen) ------------------------------------------------------------------- */

#if TE_BL_HAVE_DNNL
/* The entry points used, typed from the 2.x header so a mismatch is a compile error. */
static struct {
    __typeof__(&dnnl_engine_create) engine_create;
    __typeof__(&dnnl_stream_create) stream_create;
    __typeof__(&dnnl_stream_wait) stream_wait;
    __typeof__(&dnnl_memory_desc_init_by_tag) md_init_by_tag;
    __typeof__(&dnnl_memory_desc_equal) md_equal;
    __typeof__(&dnnl_memory_create) memory_create;
    __typeof__(&dnnl_memory_destroy) memory_destroy;
    __typeof__(&dnnl_matmul_desc_init) matmul_desc_init;
    __typeof__(&dnnl_dilated_convolution_forward_desc_init) conv_desc_init;
    __typeof__(&dnnl_primitive_desc_create) pd_create;
    __typeof__(&dnnl_primitive_desc_query) pd_query;
    __typeof__(&dnnl_primitive_desc_query_md) pd_query_md;
    __typeof__(&dnnl_primitive_desc_destroy) pd_destroy;
    __typeof__(&dnnl_primitive_create) prim_create;
    __typeof__(&dnnl_primitive_execute) prim_execute;
    __typeof__(&dnnl_primitive_destroy) prim_destroy;
    __typeof__(&dnnl_reorder_primitive_desc_create) reorder_pd_create;
    __typeof__(&dnnl_version) version;
    dnnl_engine_t engine;
    dnnl_stream_t stream;
} dn;
#endif

static int g_dn_state; /* 0 not tried, 1 loaded, -1 absent */
static char g_dn_note[320];

int te_bl_onednn_load(const char **note)
{
    if (g_dn_state) {
        if (note)
            *note = g_dn_note;
        return g_dn_state > 0;
    }
    g_dn_state = -1;
    const char *lib = getenv("TESSERA_ONEDNN_LIB");
    if (!lib || !*lib)
        lib = "libdnnl.so.2";
#if TE_BL_HAVE_DNNL
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(g_dn_note, sizeof g_dn_note,
                 "oneDNN: not available (%s); no oneDNN baseline (Debian: libdnnl-dev)",
                 e ? e : lib);
    } else {
        int ok = 1;
#define DN_SYM(field, name)                                                                        \
    do {                                                                                           \
        *(void **)&dn.field = dlsym(h, name);                                                      \
        ok = ok && dn.field;                                                                       \
    } while (0)
        DN_SYM(engine_create, "dnnl_engine_create");
        DN_SYM(stream_create, "dnnl_stream_create");
        DN_SYM(stream_wait, "dnnl_stream_wait");
        DN_SYM(md_init_by_tag, "dnnl_memory_desc_init_by_tag");
        DN_SYM(md_equal, "dnnl_memory_desc_equal");
        DN_SYM(memory_create, "dnnl_memory_create");
        DN_SYM(memory_destroy, "dnnl_memory_destroy");
        DN_SYM(matmul_desc_init, "dnnl_matmul_desc_init");
        DN_SYM(conv_desc_init, "dnnl_dilated_convolution_forward_desc_init");
        DN_SYM(pd_create, "dnnl_primitive_desc_create");
        DN_SYM(pd_query, "dnnl_primitive_desc_query");
        DN_SYM(pd_query_md, "dnnl_primitive_desc_query_md");
        DN_SYM(pd_destroy, "dnnl_primitive_desc_destroy");
        DN_SYM(prim_create, "dnnl_primitive_create");
        DN_SYM(prim_execute, "dnnl_primitive_execute");
        DN_SYM(prim_destroy, "dnnl_primitive_destroy");
        DN_SYM(reorder_pd_create, "dnnl_reorder_primitive_desc_create");
        DN_SYM(version, "dnnl_version");
#undef DN_SYM
        const dnnl_version_t *v = ok ? dn.version() : NULL;
        if (!ok || !v || v->major != 2) {
            snprintf(g_dn_note, sizeof g_dn_note,
                     "oneDNN: %s is not the oneDNN 2.x C API this build uses; no oneDNN "
                     "baseline",
                     lib);
        } else if (dn.engine_create(&dn.engine, dnnl_cpu, 0) != dnnl_success ||
                   dn.stream_create(&dn.stream, dn.engine, dnnl_stream_default_flags) !=
                       dnnl_success) {
            snprintf(g_dn_note, sizeof g_dn_note,
                     "oneDNN: %s loaded but no CPU engine; no oneDNN baseline", lib);
        } else {
            g_dn_state = 1;
            snprintf(g_dn_note, sizeof g_dn_note, "oneDNN %d.%d.%d (%s, %s threads)", v->major,
                     v->minor, v->patch, lib,
                     v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "non-OpenMP");
        }
        /* Never dlclose: oneDNN keeps global state (kernel caches) until exit. */
    }
#else
    snprintf(g_dn_note, sizeof g_dn_note,
             "oneDNN: not built in (no oneDNN 2.x oneapi/dnnl/dnnl.h at build time; Debian: "
             "libdnnl-dev); no oneDNN baseline (%s not tried)",
             lib);
#endif
    if (note)
        *note = g_dn_note;
    return g_dn_state > 0;
}

/* ---- Products --------------------------------------------------------------------------- */

struct te_bl_product {
    te_bl_lib lib;
    te_bl_shape sh;
    const float *A, *B1, *B3;
    float *C, *G, *U; /* C: the output; G, U: the gate's two products */
    char impl[96];
#if TE_BL_HAVE_DNNL
    dnnl_primitive_t prim;
    dnnl_memory_t src, w1, w3, dst1, dst3;
#endif
};

const char *te_bl_lib_name(te_bl_lib lib)
{
    return lib == TE_BL_OPENBLAS ? "OpenBLAS" : lib == TE_BL_ONEDNN ? "oneDNN" : "oneDNN packed";
}

double te_bl_shape_flops(const te_bl_shape *s)
{
    return (s->gate ? 4.0 : 2.0) * s->m * s->n * s->k;
}

void te_bl_set_threads(int threads)
{
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);
}

static float *alloc_f(size_t n) { return aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64); }

#if TE_BL_HAVE_DNNL
/* Destroys a primitive and its memory objects (NULL ones are skipped). */
static void dn_release(dnnl_primitive_t prim, dnnl_memory_t *ms, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (ms[i])
            dn.memory_destroy(ms[i]);
    if (prim)
        dn.prim_destroy(prim);
}

/* A descriptor of a [d0,] d1 x d2 matrix (nd 2 or 3), the last two axes swapped in storage
 * when t. */
static int dn_mat_md(dnnl_memory_desc_t *md, int nd, int64_t d0, int64_t d1, int64_t d2, int t)
{
    dnnl_dims_t dims = {d0, d1, d2};
    if (nd == 2)
        dims[0] = d1, dims[1] = d2;
    dnnl_format_tag_t tag = nd == 2 ? (t ? dnnl_ba : dnnl_ab) : (t ? dnnl_acb : dnnl_abc);
    return dn.md_init_by_tag(md, nd, dims, dnnl_f32, tag) == dnnl_success;
}

/* A memory object over `data` (DNNL_MEMORY_ALLOCATE: owned by oneDNN), NULL on failure. */
static dnnl_memory_t dn_mem_md(const dnnl_memory_desc_t *md, void *data)
{
    dnnl_memory_t m = NULL;
    return dn.memory_create(&m, md, dn.engine, data) == dnnl_success ? m : NULL;
}

/* Runs a reorder from -> to once; 1 ok. */
static int dn_reorder_once(dnnl_memory_t from, const dnnl_memory_desc_t *fmd, dnnl_memory_t to,
                           const dnnl_memory_desc_t *tmd)
{
    dnnl_primitive_desc_t rpd = NULL;
    dnnl_primitive_t r = NULL;
    int ok = dn.reorder_pd_create(&rpd, fmd, dn.engine, tmd, dn.engine, NULL) == dnnl_success &&
             dn.prim_create(&r, rpd) == dnnl_success;
    dnnl_exec_arg_t args[] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    ok = ok && dn.prim_execute(r, dn.stream, 2, args) == dnnl_success &&
         dn.stream_wait(dn.stream) == dnnl_success;
    if (r)
        dn.prim_destroy(r);
    if (rpd)
        dn.pd_destroy(rpd);
    return ok;
}

/* New memory of layout *want (owned by oneDNN) holding `data`, laid out as *umd says: one
 * reorder, run here. NULL on failure. */
static dnnl_memory_t dn_repacked(const dnnl_memory_desc_t *umd, const void *data,
                                 const dnnl_memory_desc_t *want)
{
    dnnl_memory_t user = dn_mem_md(umd, (void *)data);
    dnnl_memory_t packed = user ? dn_mem_md(want, DNNL_MEMORY_ALLOCATE) : NULL;
    if (packed && !dn_reorder_once(user, umd, packed, want)) {
        dn.memory_destroy(packed);
        packed = NULL;
    }
    if (user)
        dn.memory_destroy(user);
    return packed;
}

/* A memory object over `data` ([rows, cols] logical, transposed storage when t). */
static dnnl_memory_t dn_mem(int64_t rows, int64_t cols, int t, void *data)
{
    dnnl_memory_desc_t md;
    return dn_mat_md(&md, 2, 1, rows, cols, t) ? dn_mem_md(&md, data) : NULL;
}

/* Weights for the primitive: the user's buffer (plain), or reordered once into *want. */
static dnnl_memory_t dn_weights(te_bl_product *p, const float *B, const dnnl_memory_desc_t *want)
{
    if (!want)
        return dn_mem(p->sh.k, p->sh.n, p->sh.tb, (void *)B);
    dnnl_memory_desc_t umd;
    return dn_mat_md(&umd, 2, 1, p->sh.k, p->sh.n, p->sh.tb) ? dn_repacked(&umd, B, want) : NULL;
}

/* Creates the primitive and memory objects; 1 ok, 0 failed, -1 (packed) the layout oneDNN
 * picks for the weights is the plain one, so the packed variant would repeat the plain one. */
static int dn_create(te_bl_product *p, int packed)
{
    const te_bl_shape *s = &p->sh;
    dnnl_memory_desc_t src_md, w_md, dst_md;
    dnnl_dims_t sd = {s->m, s->k}, wd = {s->k, s->n}, dd = {s->m, s->n};
    if (dn.md_init_by_tag(&src_md, 2, sd, dnnl_f32, s->ta ? dnnl_ba : dnnl_ab) != dnnl_success ||
        dn.md_init_by_tag(&w_md, 2, wd, dnnl_f32,
                          packed  ? dnnl_format_tag_any
                          : s->tb ? dnnl_ba
                                  : dnnl_ab) != dnnl_success ||
        dn.md_init_by_tag(&dst_md, 2, dd, dnnl_f32, dnnl_ab) != dnnl_success)
        return 0;
    dnnl_matmul_desc_t mm;
    dnnl_primitive_desc_t pd = NULL;
    if (dn.matmul_desc_init(&mm, &src_md, &w_md, NULL, &dst_md) != dnnl_success ||
        dn.pd_create(&pd, &mm, NULL, dn.engine, NULL) != dnnl_success)
        return 0;
    const char *impl = NULL;
    if (dn.pd_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl)
        impl = "?";
    const dnnl_memory_desc_t *want = NULL;
    if (packed) {
        want = dn.pd_query_md(pd, dnnl_query_weights_md, 0);
        dnnl_memory_desc_t plain;
        dn.md_init_by_tag(&plain, 2, wd, dnnl_f32, s->tb ? dnnl_ba : dnnl_ab);
        if (!want || dn.md_equal(want, &plain)) {
            dn.pd_destroy(pd);
            return -1;
        }
        snprintf(p->impl, sizeof p->impl, "oneDNN %s, packed weights", impl);
    } else {
        snprintf(p->impl, sizeof p->impl, "oneDNN %s", impl);
    }
    int ok = dn.prim_create(&p->prim, pd) == dnnl_success;
    p->src = ok ? dn_mem(s->m, s->k, s->ta, (void *)p->A) : NULL;
    p->w1 = p->src ? dn_weights(p, p->B1, want) : NULL;
    p->dst1 = p->w1 ? dn_mem(s->m, s->n, 0, s->gate ? p->G : p->C) : NULL;
    ok = p->dst1 != NULL;
    if (ok && s->gate) {
        p->w3 = dn_weights(p, p->B3, want);
        p->dst3 = p->w3 ? dn_mem(s->m, s->n, 0, p->U) : NULL;
        ok = p->dst3 != NULL;
    }
    dn.pd_destroy(pd);
    return ok;
}

static void dn_run(te_bl_product *p)
{
    dnnl_exec_arg_t a1[] = {
        {DNNL_ARG_SRC, p->src}, {DNNL_ARG_WEIGHTS, p->w1}, {DNNL_ARG_DST, p->dst1}};
    dn.prim_execute(p->prim, dn.stream, 3, a1);
    if (p->sh.gate) {
        dnnl_exec_arg_t a3[] = {
            {DNNL_ARG_SRC, p->src}, {DNNL_ARG_WEIGHTS, p->w3}, {DNNL_ARG_DST, p->dst3}};
        dn.prim_execute(p->prim, dn.stream, 3, a3);
    }
    dn.stream_wait(dn.stream);
}
#endif

te_bl_product *te_bl_product_create(te_bl_lib lib, const te_bl_shape *shape, const float *A,
                                    const float *B1, const float *B3, const char **why)
{
    static const char *no_gate_t = "the MLP gate baseline takes no transposes";
    if (why)
        *why = NULL;
    if (shape->gate && (shape->ta || shape->tb || !B3)) {
        if (why)
            *why = no_gate_t;
        return NULL;
    }
    if (lib != TE_BL_OPENBLAS && !te_bl_onednn_load(why))
        return NULL;
    te_bl_product *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->lib = lib;
    p->sh = *shape;
    p->A = A;
    p->B1 = B1;
    p->B3 = B3;
    size_t mn = (size_t)shape->m * shape->n;
    p->C = alloc_f(mn);
    if (shape->gate) {
        p->G = alloc_f(mn);
        p->U = alloc_f(mn);
    }
    if (!p->C || (shape->gate && (!p->G || !p->U))) {
        te_bl_product_free(p);
        return NULL;
    }
    if (lib == TE_BL_OPENBLAS) {
        snprintf(p->impl, sizeof p->impl, "OpenBLAS core %s", te_bl_openblas_core());
        return p;
    }
    int made = 0;
#if TE_BL_HAVE_DNNL
    made = dn_create(p, lib == TE_BL_ONEDNN_PACKED);
    if (made > 0)
        return p;
#endif
    if (why)
        *why = made < 0 ? "oneDNN: the weights layout it picks is the plain one (no packed variant)"
                        : "oneDNN: could not create the matmul primitive";
    te_bl_product_free(p);
    return NULL;
}

static void sgemm(const te_bl_shape *s, const float *A, const float *B, float *C)
{
    cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans, s->tb ? CblasTrans : CblasNoTrans,
                s->m, s->n, s->k, 1.0f, A, s->ta ? s->m : s->k, B, s->tb ? s->k : s->n, 0.0f, C,
                s->n);
}

void te_bl_product_run(void *product)
{
    te_bl_product *p = product;
    if (p->lib == TE_BL_OPENBLAS) {
        sgemm(&p->sh, p->A, p->B1, p->sh.gate ? p->G : p->C);
        if (p->sh.gate)
            sgemm(&p->sh, p->A, p->B3, p->U);
    }
#if TE_BL_HAVE_DNNL
    else
        dn_run(p);
#endif
    if (p->sh.gate)
        te_bl_silu_mul(p->C, p->G, p->U, (size_t)p->sh.m * p->sh.n);
}

const float *te_bl_product_out(const te_bl_product *p) { return p->C; }

const char *te_bl_product_impl(const te_bl_product *p) { return p->impl; }

void te_bl_product_free(te_bl_product *p)
{
    if (!p)
        return;
#if TE_BL_HAVE_DNNL
    dnnl_memory_t ms[] = {p->src, p->w1, p->w3, p->dst1, p->dst3};
    dn_release(p->prim, ms, sizeof ms / sizeof ms[0]);
#endif
    free(p->C);
    free(p->G);
    free(p->U);
    free(p);
}

/* ---- Batched products and convolutions (oneDNN) ------------------------------------------ */

struct te_bl_bmm {
    char impl[128];
#if TE_BL_HAVE_DNNL
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c;
#endif
};

te_bl_bmm *te_bl_bmm_create_desc(const te_bl_bmm_desc *d, const float *A, const float *B, float *C,
                                 const char **why)
{
    if (why)
        *why = NULL;
    if (d->batch <= 0 || d->m <= 0 || d->n <= 0 || d->k <= 0) {
        if (why)
            *why = "oneDNN batched matmul: batch, m, n and k must be positive";
        return NULL;
    }
    if (!te_bl_onednn_load(why))
        return NULL;
#if TE_BL_HAVE_DNNL
    te_bl_bmm *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    int nd = d->batch > 1 ? 3 : 2, bb = d->b_shared ? 1 : d->batch;
    dnnl_memory_desc_t amd, bmd, bany, cmd;
    dnnl_dims_t bdims = {bb, d->k, d->n};
    if (nd == 2)
        bdims[0] = d->k, bdims[1] = d->n;
    dnnl_matmul_desc_t mm;
    dnnl_primitive_desc_t pd = NULL;
    int ok = dn_mat_md(&amd, nd, d->batch, d->m, d->k, d->ta) &&
             dn_mat_md(&bmd, nd, bb, d->k, d->n, d->tb) &&
             dn_mat_md(&cmd, nd, d->batch, d->m, d->n, 0) &&
             dn.md_init_by_tag(&bany, nd, bdims, dnnl_f32, dnnl_format_tag_any) == dnnl_success &&
             dn.matmul_desc_init(&mm, &amd, d->pack_b ? &bany : &bmd, NULL, &cmd) == dnnl_success &&
             dn.pd_create(&pd, &mm, NULL, dn.engine, NULL) == dnnl_success;
    const char *impl = NULL;
    if (ok && (dn.pd_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl))
        impl = "?";
    const dnnl_memory_desc_t *want =
        ok && d->pack_b ? dn.pd_query_md(pd, dnnl_query_weights_md, 0) : NULL;
    int plain = !want || dn.md_equal(want, &bmd);
    snprintf(p->impl, sizeof p->impl, "oneDNN %s%s", ok ? impl : "?",
             !d->pack_b ? ""
             : plain    ? ", packed weights = plain layout"
                        : ", packed weights");
    ok = ok && dn.prim_create(&p->prim, pd) == dnnl_success;
    p->a = ok ? dn_mem_md(&amd, (void *)A) : NULL;
    if (p->a) /* the weights, reordered once into the layout oneDNN picked when it differs */
        p->b = plain ? dn_mem_md(&bmd, (void *)B) : dn_repacked(&bmd, B, want);
    p->c = p->b ? dn_mem_md(&cmd, C) : NULL;
    if (pd)
        dn.pd_destroy(pd);
    if (!p->c) {
        te_bl_bmm_free(p);
        if (why)
            *why = "oneDNN: could not create the batched matmul primitive";
        return NULL;
    }
    return p;
#else
    (void)A, (void)B, (void)C;
    return NULL;
#endif
}

te_bl_bmm *te_bl_bmm_create(int batch, int m, int n, int k, int tb, const float *A, const float *B,
                            float *C, const char **why)
{
    te_bl_bmm_desc d = {.batch = batch, .m = m, .n = n, .k = k, .tb = tb};
    return te_bl_bmm_create_desc(&d, A, B, C, why);
}

void te_bl_bmm_run(te_bl_bmm *p)
{
#if TE_BL_HAVE_DNNL
    dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, p->a}, {DNNL_ARG_WEIGHTS, p->b}, {DNNL_ARG_DST, p->c}};
    dn.prim_execute(p->prim, dn.stream, 3, args);
    dn.stream_wait(dn.stream);
#else
    (void)p;
#endif
}

const char *te_bl_bmm_impl(const te_bl_bmm *p) { return p->impl; }

void te_bl_bmm_free(te_bl_bmm *p)
{
    if (!p)
        return;
#if TE_BL_HAVE_DNNL
    dnnl_memory_t ms[] = {p->a, p->b, p->c};
    dn_release(p->prim, ms, sizeof ms / sizeof ms[0]);
#endif
    free(p);
}

struct te_bl_conv {
    char impl[128];
#if TE_BL_HAVE_DNNL
    dnnl_primitive_t prim, x_in, y_out;  /* the convolution; reorders of X and Y or NULL */
    dnnl_memory_t ux, uy, x, w, bias, y; /* user X and Y (NCHW); what the primitive reads */
#endif
};

#if TE_BL_HAVE_DNNL
/* A reorder primitive from -> to (run in every call), NULL on failure. */
static dnnl_primitive_t dn_reorder_prim(const dnnl_memory_desc_t *fmd,
                                        const dnnl_memory_desc_t *tmd)
{
    dnnl_primitive_desc_t rpd = NULL;
    dnnl_primitive_t r = NULL;
    if (dn.reorder_pd_create(&rpd, fmd, dn.engine, tmd, dn.engine, NULL) == dnnl_success &&
        dn.prim_create(&r, rpd) != dnnl_success)
        r = NULL;
    if (rpd)
        dn.pd_destroy(rpd);
    return r;
}

/* A short name of an activation layout: "NCHW", "NHWC" or "blocked, C by 16". */
static void dn_layout_name(const dnnl_memory_desc_t *md, char *buf, size_t cap)
{
    const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
    if (md->format_kind != dnnl_blocked)
        snprintf(buf, cap, "an opaque layout");
    else if (b->inner_nblks == 0)
        snprintf(buf, cap, "%s", b->strides[1] == 1 ? "NHWC" : "NCHW");
    else
        snprintf(buf, cap, "blocked, %c by %lld", "NCHW"[b->inner_idxs[0] & 3],
                 (long long)b -> inner_blks[0]);
}
#endif

te_bl_conv *te_bl_conv_create(const te_bl_conv_desc *d, const float *X, const float *W,
                              const float *bias, float *Y, const char **why)
{
    if (why)
        *why = NULL;
    int64_t oh = d->stride > 0 && d->dil > 0
                     ? (d->h + 2 * d->pad - (int64_t)d->dil * (d->kh - 1) - 1) / d->stride + 1
                     : 0;
    int64_t ow = d->stride > 0 && d->dil > 0
                     ? (d->w + 2 * d->pad - (int64_t)d->dil * (d->kw - 1) - 1) / d->stride + 1
                     : 0;
    if (d->n <= 0 || d->c <= 0 || d->h <= 0 || d->w <= 0 || d->oc <= 0 || d->kh <= 0 ||
        d->kw <= 0 || d->pad < 0 || oh <= 0 || ow <= 0) {
        if (why)
            *why = "oneDNN convolution: the shape must be positive and give an output";
        return NULL;
    }
    if (!te_bl_onednn_load(why))
        return NULL;
#if TE_BL_HAVE_DNNL
    te_bl_conv *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    dnnl_dims_t xd = {d->n, d->c, d->h, d->w}, wd = {d->oc, d->c, d->kh, d->kw},
                yd = {d->n, d->oc, oh, ow}, bd = {d->oc};
    dnnl_dims_t st = {d->stride, d->stride}, dil = {d->dil - 1, d->dil - 1}, pad = {d->pad, d->pad};
    dnnl_memory_desc_t ux, uw, uy, ub, ax, aw, ay;
    dnnl_convolution_desc_t cd;
    dnnl_primitive_desc_t pd = NULL;
    int ok = dn.md_init_by_tag(&ux, 4, xd, dnnl_f32, dnnl_nchw) == dnnl_success &&
             dn.md_init_by_tag(&uw, 4, wd, dnnl_f32, dnnl_oihw) == dnnl_success &&
             dn.md_init_by_tag(&uy, 4, yd, dnnl_f32, dnnl_nchw) == dnnl_success &&
             dn.md_init_by_tag(&ub, 1, bd, dnnl_f32, dnnl_x) == dnnl_success &&
             dn.md_init_by_tag(&ax, 4, xd, dnnl_f32, dnnl_format_tag_any) == dnnl_success &&
             dn.md_init_by_tag(&aw, 4, wd, dnnl_f32, dnnl_format_tag_any) == dnnl_success &&
             dn.md_init_by_tag(&ay, 4, yd, dnnl_f32, dnnl_format_tag_any) == dnnl_success &&
             dn.conv_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct, &ax, &aw,
                               bias ? &ub : NULL, &ay, st, dil, pad, pad) == dnnl_success &&
             dn.pd_create(&pd, &cd, NULL, dn.engine, NULL) == dnnl_success &&
             dn.prim_create(&p->prim, pd) == dnnl_success;
    const dnnl_memory_desc_t *px = ok ? dn.pd_query_md(pd, dnnl_query_src_md, 0) : NULL;
    const dnnl_memory_desc_t *pw = ok ? dn.pd_query_md(pd, dnnl_query_weights_md, 0) : NULL;
    const dnnl_memory_desc_t *py = ok ? dn.pd_query_md(pd, dnnl_query_dst_md, 0) : NULL;
    ok = ok && px && pw && py;
    const char *impl = NULL;
    if (ok && (dn.pd_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl))
        impl = "?";
    if (ok) {
        char lay[48];
        dn_layout_name(px, lay, sizeof lay);
        snprintf(p->impl, sizeof p->impl, "oneDNN %s%s%s", impl,
                 dn.md_equal(px, &ux) ? "" : ", x as ", dn.md_equal(px, &ux) ? "" : lay);
    }
    /* X and Y: the caller's NCHW buffers, reordered in every run when oneDNN wants another
     * layout; the weights (and bias) reordered or copied once into memory oneDNN owns. */
    p->ux = ok ? dn_mem_md(&ux, (void *)X) : NULL;
    p->uy = p->ux ? dn_mem_md(&uy, Y) : NULL;
    ok = p->uy != NULL;
    if (ok && !dn.md_equal(px, &ux)) {
        p->x = dn_mem_md(px, DNNL_MEMORY_ALLOCATE);
        p->x_in = p->x ? dn_reorder_prim(&ux, px) : NULL;
        ok = p->x_in != NULL;
    }
    if (ok && !dn.md_equal(py, &uy)) {
        p->y = dn_mem_md(py, DNNL_MEMORY_ALLOCATE);
        p->y_out = p->y ? dn_reorder_prim(py, &uy) : NULL;
        ok = p->y_out != NULL;
    }
    p->w = ok ? dn_repacked(&uw, W, pw) : NULL;
    p->bias = p->w && bias ? dn_repacked(&ub, bias, &ub) : NULL;
    ok = p->w && (!bias || p->bias);
    if (pd)
        dn.pd_destroy(pd);
    if (!ok) {
        te_bl_conv_free(p);
        if (why)
            *why = "oneDNN: could not create the convolution primitive";
        return NULL;
    }
    return p;
#else
    (void)X, (void)W, (void)bias, (void)Y;
    return NULL;
#endif
}

void te_bl_conv_run(te_bl_conv *p)
{
#if TE_BL_HAVE_DNNL
    dnnl_memory_t x = p->x ? p->x : p->ux, y = p->y ? p->y : p->uy;
    if (p->x_in) {
        dnnl_exec_arg_t r[] = {{DNNL_ARG_FROM, p->ux}, {DNNL_ARG_TO, p->x}};
        dn.prim_execute(p->x_in, dn.stream, 2, r);
    }
    dnnl_exec_arg_t args[] = {
        {DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, p->w}, {DNNL_ARG_DST, y}, {DNNL_ARG_BIAS, p->bias}};
    dn.prim_execute(p->prim, dn.stream, p->bias ? 4 : 3, args);
    if (p->y_out) {
        dnnl_exec_arg_t r[] = {{DNNL_ARG_FROM, p->y}, {DNNL_ARG_TO, p->uy}};
        dn.prim_execute(p->y_out, dn.stream, 2, r);
    }
    dn.stream_wait(dn.stream);
#else
    (void)p;
#endif
}

const char *te_bl_conv_impl(const te_bl_conv *p) { return p->impl; }

void te_bl_conv_free(te_bl_conv *p)
{
    if (!p)
        return;
#if TE_BL_HAVE_DNNL
    dnnl_memory_t ms[] = {p->ux, p->uy, p->x, p->w, p->bias, p->y};
    if (p->x_in)
        dn.prim_destroy(p->x_in);
    if (p->y_out)
        dn.prim_destroy(p->y_out);
    dn_release(p->prim, ms, sizeof ms / sizeof ms[0]);
#endif
    free(p);
}

/* ---- Low-precision products -------------------------------------------------------------- */

struct te_bl_lowp {
    te_bl_lowp_kind kind;
    int m, n, k;
    void *C; /* float (bf16) or int32_t (u8s8), m x n */
    char impl[96];
#if TE_BL_HAVE_DNNL
    dnnl_primitive_t prim;
    dnnl_memory_t src, wei, dst;
#endif
};

const char *te_bl_lowp_kind_name(te_bl_lowp_kind kind)
{
    return kind == TE_BL_LOWP_BF16 ? "bf16" : kind == TE_BL_LOWP_U8S8 ? "u8s8" : "?";
}

int te_bl_lowp_native(te_bl_lowp_kind kind, const te_bl_cpu *cpu)
{
    if (kind == TE_BL_LOWP_BF16)
        return cpu->avx512_bf16 || cpu->amx;
    if (kind == TE_BL_LOWP_U8S8)
        return cpu->avx512_vnni || cpu->amx;
    return 0;
}

#if TE_BL_HAVE_DNNL
/* A plain row-major [rows, cols] memory object of dtype dt over `data`. */
static dnnl_memory_t dn_mem_dt(int64_t rows, int64_t cols, dnnl_data_type_t dt, void *data)
{
    dnnl_memory_desc_t md;
    dnnl_dims_t dims = {rows, cols};
    dnnl_memory_t m = NULL;
    if (dn.md_init_by_tag(&md, 2, dims, dt, dnnl_ab) != dnnl_success ||
        dn.memory_create(&m, &md, dn.engine, data) != dnnl_success)
        return NULL;
    return m;
}

/* A new memory object of layout *want holding the plain row-major [rows, cols] data (one
 * reorder, run here); NULL on failure. */
static dnnl_memory_t dn_reordered(int64_t rows, int64_t cols, dnnl_data_type_t dt, const void *data,
                                  const dnnl_memory_desc_t *want)
{
    dnnl_memory_desc_t umd;
    dnnl_dims_t dims = {rows, cols};
    return dn.md_init_by_tag(&umd, 2, dims, dt, dnnl_ab) == dnnl_success
               ? dn_repacked(&umd, data, want)
               : NULL;
}

/* Creates the primitive and memory objects of p; NULL when done, else why not (static). */
static const char *lowp_create(te_bl_lowp *p, const void *A, const void *B, int packed)
{
    static const char *const refused[TE_BL_LOWP_NKINDS] = {
        "oneDNN: refused the bf16 x bf16 -> f32 matmul (no kernel for it on this CPU)",
        "oneDNN: refused the u8 x s8 -> s32 matmul (no kernel for it on this CPU)"};
    static const char *const failed = "oneDNN: could not create the low-precision matmul's "
                                      "primitive or memory objects";
    int bf = p->kind == TE_BL_LOWP_BF16;
    dnnl_data_type_t ta = bf ? dnnl_bf16 : dnnl_u8, tb = bf ? dnnl_bf16 : dnnl_s8,
                     tc = bf ? dnnl_f32 : dnnl_s32;
    dnnl_memory_desc_t src_md, w_md, dst_md, plain_w;
    dnnl_dims_t sd = {p->m, p->k}, wd = {p->k, p->n}, dd = {p->m, p->n};
    if (dn.md_init_by_tag(&src_md, 2, sd, ta, dnnl_ab) != dnnl_success ||
        dn.md_init_by_tag(&w_md, 2, wd, tb, packed ? dnnl_format_tag_any : dnnl_ab) !=
            dnnl_success ||
        dn.md_init_by_tag(&plain_w, 2, wd, tb, dnnl_ab) != dnnl_success ||
        dn.md_init_by_tag(&dst_md, 2, dd, tc, dnnl_ab) != dnnl_success)
        return failed;
    dnnl_matmul_desc_t mm;
    dnnl_primitive_desc_t pd = NULL;
    if (dn.matmul_desc_init(&mm, &src_md, &w_md, NULL, &dst_md) != dnnl_success)
        return failed;
    if (dn.pd_create(&pd, &mm, NULL, dn.engine, NULL) != dnnl_success)
        return refused[p->kind];
    const char *impl = NULL;
    if (dn.pd_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl || !*impl)
        impl = "?";
    const dnnl_memory_desc_t *want = packed ? dn.pd_query_md(pd, dnnl_query_weights_md, 0) : NULL;
    int reorder = want && !dn.md_equal(want, &plain_w);
    snprintf(p->impl, sizeof p->impl, "oneDNN %s%s", impl,
             !packed   ? ""
             : reorder ? ", packed weights"
                       : ", packed weights = plain layout");
    int ok = (!packed || want) && dn.prim_create(&p->prim, pd) == dnnl_success;
    p->src = ok ? dn_mem_dt(p->m, p->k, ta, (void *)A) : NULL;
    if (p->src)
        p->wei =
            reorder ? dn_reordered(p->k, p->n, tb, B, want) : dn_mem_dt(p->k, p->n, tb, (void *)B);
    p->dst = p->wei ? dn_mem_dt(p->m, p->n, tc, p->C) : NULL;
    dn.pd_destroy(pd);
    return p->dst ? NULL : failed;
}
#endif

te_bl_lowp *te_bl_lowp_create(te_bl_lowp_kind kind, int m, int n, int k, const void *A,
                              const void *B, int packed, const char **why)
{
    static const char *const bad = "low-precision baseline: unknown kind, a non-positive m, n "
                                   "or k, or NULL inputs";
    static const char *const oom = "low-precision baseline: out of memory";
    if (why)
        *why = NULL;
    if ((kind != TE_BL_LOWP_BF16 && kind != TE_BL_LOWP_U8S8) || m <= 0 || n <= 0 || k <= 0 || !A ||
        !B) {
        if (why)
            *why = bad;
        return NULL;
    }
    if (!te_bl_onednn_load(why))
        return NULL;
    te_bl_lowp *p = calloc(1, sizeof *p);
    size_t bytes = ((size_t)m * (size_t)n * 4 + 63) / 64 * 64;
    if (p)
        p->C = aligned_alloc(64, bytes);
    if (!p || !p->C) {
        free(p);
        if (why)
            *why = oom;
        return NULL;
    }
    memset(p->C, 0x7f, bytes);
    p->kind = kind;
    p->m = m;
    p->n = n;
    p->k = k;
    const char *err = "oneDNN: not built in";
#if TE_BL_HAVE_DNNL
    err = lowp_create(p, A, B, packed != 0);
#else
    (void)packed;
#endif
    if (!err)
        return p;
    if (why)
        *why = err;
    te_bl_lowp_free(p);
    return NULL;
}

void te_bl_lowp_run(void *product)
{
#if TE_BL_HAVE_DNNL
    te_bl_lowp *p = product;
    dnnl_exec_arg_t a[] = {
        {DNNL_ARG_SRC, p->src}, {DNNL_ARG_WEIGHTS, p->wei}, {DNNL_ARG_DST, p->dst}};
    dn.prim_execute(p->prim, dn.stream, 3, a);
    dn.stream_wait(dn.stream);
#else
    (void)product;
#endif
}

const void *te_bl_lowp_out(const te_bl_lowp *p) { return p->C; }

const char *te_bl_lowp_impl(const te_bl_lowp *p) { return p->impl; }

void te_bl_lowp_free(te_bl_lowp *p)
{
    if (!p)
        return;
#if TE_BL_HAVE_DNNL
    dnnl_memory_t ms[] = {p->src, p->wei, p->dst};
    dn_release(p->prim, ms, sizeof ms / sizeof ms[0]);
#endif
    free(p->C);
    free(p);
}

/* ---- Timing ----------------------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int te_bl_time_alternating(int n, const te_bl_run_fn *fn, void *const *arg, int reps, double *med_s)
{
    if (n <= 0 || n > 64 || reps <= 0)
        return -1;
    double *t = malloc(sizeof(double) * (size_t)n * (size_t)reps);
    if (!t)
        return -1;
    /* After the warm-up, one timed call fixes how many calls make one sample: at least
     * TE_BL_MIN_SAMPLE_S each, so that short kernels are timed over many back-to-back calls
     * (as the tuner times its candidates) and not over one call plus the threads' wake-up. */
    int inner[64];
    /* The warm-up: every function in turn until each has run TE_BL_WARMUP_CALLS times and
     * TE_BL_WARMUP_S have passed (thread pools, library buffers, page faults, clocks). */
    double w0 = now_s();
    for (int c = 0; c < 1000 && (c < TE_BL_WARMUP_CALLS || now_s() - w0 < TE_BL_WARMUP_S); c++)
        for (int i = 0; i < n; i++)
            fn[i](arg[i]);
    for (int i = 0; i < n; i++) {
        double t0 = now_s();
        fn[i](arg[i]);
        double once = now_s() - t0;
        double k = once > 0 ? ceil(TE_BL_MIN_SAMPLE_S / once) : 1e4;
        inner[i] = k < 1 ? 1 : k > 1e4 ? 10000 : (int)k;
    }
    for (int r = 0; r < reps; r++)
        for (int i = 0; i < n; i++) {
            double t0 = now_s();
            for (int q = 0; q < inner[i]; q++)
                fn[i](arg[i]);
            t[(size_t)i * (size_t)reps + (size_t)r] = (now_s() - t0) / inner[i];
        }
    for (int i = 0; i < n; i++) {
        double *x = t + (size_t)i * (size_t)reps;
        qsort(x, (size_t)reps, sizeof(double), cmp_double);
        med_s[i] = x[reps / 2];
    }
    free(t);
    return 0;
}

double te_bl_rel_err(const float *a, const float *b, size_t n)
{
    double w = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]) / fmax(1.0, fabs((double)b[i]));
        if (!(e <= w))
            w = e;
    }
    return w;
}

const char *te_bl_load_note(void)
{
    static char note[512];
    double load[1];
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    note[0] = 0;
    if (getloadavg(load, 1) == 1 && load[0] > TE_BL_BUSY_LOAD)
        snprintf(note, sizeof note,
                 "busy machine: load average %.1f on %ld CPU(s) before this run: figures are "
                 "noisy and multi-thread ratios distorted (the baselines synchronize their "
                 "threads many times per call and lose more to other work than one parallel "
                 "loop does); measure on a quiet machine before quoting",
                 load[0], cpus);
    return note;
}

/* ---- Choosing and measuring ------------------------------------------------------------- */

void te_bl_result_choose(te_bl_result *r)
{
    r->openblas = te_bl_openblas_trusted() ? r->gflops[TE_BL_OPENBLAS] : NAN;
    double p = r->gflops[TE_BL_ONEDNN], q = r->gflops[TE_BL_ONEDNN_PACKED];
    r->onednn_lib = !isfinite(p) || (isfinite(q) && q > p) ? TE_BL_ONEDNN_PACKED : TE_BL_ONEDNN;
    r->onednn = r->gflops[r->onednn_lib];
    r->best = NAN;
    r->best_lib = -1;
    if (isfinite(r->openblas)) {
        r->best = r->openblas;
        r->best_lib = TE_BL_OPENBLAS;
    }
    if (isfinite(r->onednn) && !(r->onednn <= r->best)) {
        r->best = r->onednn;
        r->best_lib = r->onednn_lib;
    }
}

static void note_add(te_bl_result *r, const char *line)
{
    size_t l = strlen(r->notes);
    if (line && l + 2 < sizeof r->notes && !strstr(r->notes, line))
        snprintf(r->notes + l, sizeof r->notes - l, "%s%s", l ? "\n" : "", line);
}

/* Nothing measured yet. */
static void result_init(te_bl_result *r)
{
    memset(r, 0, sizeof *r);
    r->best = r->openblas = r->onednn = NAN;
    r->best_lib = -1;
    r->onednn_lib = TE_BL_ONEDNN;
    for (int l = 0; l < TE_BL_NLIBS; l++)
        r->gflops[l] = NAN;
}

int te_bl_set_create(te_bl_set *set, const te_bl_shape *shape, const float *A, const float *B1,
                     const float *B3, te_bl_result *r)
{
    memset(set, 0, sizeof *set);
    result_init(r);
    set->shape = *shape;
    int n = 0;
    for (int l = 0; l < TE_BL_NLIBS; l++) {
        const char *why = NULL;
        set->p[l] = te_bl_product_create((te_bl_lib)l, shape, A, B1, B3, &why);
        if (set->p[l])
            n++;
        else if (l != TE_BL_ONEDNN_PACKED) /* a missing packed variant is no news */
            note_add(r, why);
    }
    return n;
}

int te_bl_set_fns(const te_bl_set *set, te_bl_run_fn *fn, void **arg)
{
    int n = 0;
    for (int l = 0; l < TE_BL_NLIBS; l++)
        if (set->p[l]) {
            fn[n] = te_bl_product_run;
            arg[n++] = set->p[l];
        }
    return n;
}

void te_bl_set_result(const te_bl_set *set, const double *med_s, double flop, te_bl_result *r)
{
    size_t mn = (size_t)set->shape.m * set->shape.n;
    const te_bl_product *ob = set->p[TE_BL_OPENBLAS];
    for (int l = 0, i = 0; l < TE_BL_NLIBS; l++) {
        const te_bl_product *q = set->p[l];
        if (!q)
            continue;
        double t = med_s[i++];
        snprintf(r->impl[l], sizeof r->impl[l], "%s", te_bl_product_impl(q));
        /* Every library's output checked against OpenBLAS's (same inputs). */
        if (q != ob && ob &&
            te_bl_rel_err(te_bl_product_out(q), te_bl_product_out(ob), mn) > 1e-3) {
            note_add(r, "oneDNN: output differs from OpenBLAS's; left out");
            continue;
        }
        r->gflops[l] = flop / t * 1e-9;
    }
    te_bl_result_choose(r);
    if (!te_bl_openblas_trusted())
        note_add(r, te_bl_openblas_note());
}

const float *te_bl_set_reference(const te_bl_set *set)
{
    return set->p[TE_BL_OPENBLAS] ? te_bl_product_out(set->p[TE_BL_OPENBLAS]) : NULL;
}

void te_bl_set_free(te_bl_set *set)
{
    for (int l = 0; l < TE_BL_NLIBS; l++) {
        te_bl_product_free(set->p[l]);
        set->p[l] = NULL;
    }
}

int te_bl_measure(const te_bl_shape *shape, int threads, int reps, te_bl_result *r)
{
    te_bl_set_threads(threads);
    const te_bl_shape *s = shape;
    size_t na = (size_t)s->m * s->k, nb = (size_t)s->k * s->n;
    float *a = alloc_f(na), *b1 = alloc_f(nb), *b3 = s->gate ? alloc_f(nb) : NULL;
    te_bl_set set;
    int rc = -1;
    result_init(r);
    if (!a || !b1 || (s->gate && !b3))
        goto done;
    unsigned seed = 12345;
    for (size_t i = 0; i < na + 2 * nb; i++) {
        seed = seed * 1664525u + 1013904223u;
        float v = ((float)(seed >> 8) / 16777216.0f - 0.5f) * 0.5f;
        if (i < na)
            a[i] = v;
        else if (i < na + nb)
            b1[i - na] = v;
        else if (b3)
            b3[i - na - nb] = v;
    }
    te_bl_set_create(&set, s, a, b1, b3, r);
    te_bl_run_fn fn[TE_BL_NLIBS];
    void *arg[TE_BL_NLIBS];
    double med[TE_BL_NLIBS];
    int n = te_bl_set_fns(&set, fn, arg);
    if (n > 0 && te_bl_time_alternating(n, fn, arg, reps, med) == 0) {
        te_bl_set_result(&set, med, te_bl_shape_flops(s), r);
        rc = 0;
    }
    te_bl_set_free(&set);
done:
    free(a);
    free(b1);
    free(b3);
    return rc;
}

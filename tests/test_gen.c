/*
 * tests/test_gen.c: standalone kernels (tessera/gen.h and `tessera gen`).
 *
 *  - a user-defined fused expression (not from the operator library) generates a .c/.h pair
 *    that builds with `cc -std=c99 -Wall -Wextra -Werror -pedantic`, with and without OpenMP,
 *    and computes what te_reference_eval computes; the header documents the ABI;
 *  - a database record is picked up (trial uid, time, GFLOP/s, trace, version in the
 *    provenance of both files); without one the default schedule is used with a warning;
 *  - several shapes in one file share one prelude and a dispatcher returns -2 for an unknown
 *    shape; bad requests are refused;
 *  - the CLI: exit codes (0, 1, 2), usage, unknown operators listed, no files on usage errors;
 *  - CUDA files: header content, plain C includes the header, nvcc -c and NVRTC compile the .cu
 *    when the toolkit is present (skipped with a message otherwise).
 *
 * The kernels compiled in-process are small; the consumer project (tests/gen_consumer) covers
 * library operators with tuned-like schedules end to end.
 */
#define _GNU_SOURCE

#include <dlfcn.h>
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tessera/autotune.h"
#include "tessera/backend.h"
#include "tessera/cuda.h"
#include "tessera/gen.h"
#include "tessera/ops.h"
#include "tessera/tuner.h"
#include "tessera/tuning_db.h"
#include "testutil.h"

#ifndef TESSERA_CLI
#error "TESSERA_CLI (path of the tessera binary) must be defined by tests/gen.cmake"
#endif

static char g_dir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/test_gen.XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[512];
    if (getenv("TEST_GEN_KEEP")) { /* for debugging: keep the generated files */
        printf("generated files kept in %s\n", g_dir);
        return 0;
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Runs a shell command; returns its exit status (-1 when it did not exit normally). */
static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int ws = system(cmd);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    if (p)
        p[n] = 0;
    fclose(f);
    return p;
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

#define assert_contains(hay, needle)                                                               \
    do {                                                                                           \
        if (!strstr((hay), (needle)))                                                              \
            fail_msg("expected to find \"%s\" in:\n%s", (needle), (hay));                          \
    } while (0)

static const char *cc(void)
{
    const char *c = getenv("CC");
    return c && *c ? c : "cc";
}

/* Compiles a generated .c into a shared object with the strict flags of the ABI. */
static void compile_so(const char *src, const char *so, int openmp)
{
    int rc = sh("%s -std=c99 -Wall -Wextra -Werror -pedantic -O2 -fPIC -shared %s '%s' -o '%s' -lm",
                cc(), openmp ? "-fopenmp -march=native" : "", src, so);
    assert_int_equal(rc, 0);
}

/* Runs `tessera ARGS` with stdout/stderr to files in g_dir; returns the exit status. */
static int cli(const char *args, char **out, char **err)
{
    char o[512], e[512];
    snprintf(o, sizeof o, "%s/cli.out", g_dir);
    snprintf(e, sizeof e, "%s/cli.err", g_dir);
    int rc = sh("cd '%s' && TESSERA_DB= '%s' %s > '%s' 2> '%s'", g_dir, TESSERA_CLI, args, o, e);
    if (out)
        *out = slurp(o);
    if (err)
        *err = slurp(e);
    return rc;
}

/* ---- A user-defined fused expression ------------------------------------------------------ */

enum { UM = 24, UN = 32, UK = 20 };

typedef struct user_expr {
    te_tensor *X, *W, *g, *H, *Y;
} user_expr;

/* Y[i, j] = sigmoid(sum_k X[i, k] W[k, j]) * g[j] + 0.5: a projection with a gated epilogue,
 * written here from placeholders (not an operator of the library). */
static user_expr make_user_expr(te_ctx *ctx)
{
    user_expr u;
    u.X = te_placeholder(ctx, "X", TE_F32, 2, (int64_t[]){UM, UK});
    u.W = te_placeholder(ctx, "W", TE_F32, 2, (int64_t[]){UK, UN});
    u.g = te_placeholder(ctx, "g", TE_F32, 1, (int64_t[]){UN});
    te_expr *i = te_axis(ctx, "i", UM), *j = te_axis(ctx, "j", UN);
    te_expr *k = te_reduce_axis(ctx, "k", UK);
    u.H = te_compute(ctx, "H", 2, (te_expr *[]){i, j},
                     te_sum(ctx, te_mul(ctx, TE_AT(ctx, u.X, i, k), TE_AT(ctx, u.W, k, j)), 1, &k));
    te_expr *i2 = te_axis(ctx, "i", UM), *j2 = te_axis(ctx, "j", UN);
    u.Y = te_compute(
        ctx, "Y", 2, (te_expr *[]){i2, j2},
        te_add(ctx, te_mul(ctx, te_sigmoid(ctx, TE_AT(ctx, u.H, i2, j2)), TE_AT(ctx, u.g, j2)),
               te_f32(ctx, 0.5)));
    assert_non_null(u.Y);
    return u;
}

/* Rows of Y in parallel, H computed per row with its columns vectorized. */
static te_schedule *schedule_user_expr(te_ctx *ctx, user_expr *u)
{
    te_schedule *s = te_schedule_create(ctx, 1, &u->Y);
    te_stage *sy = te_schedule_stage(s, u->Y), *sh_ = te_schedule_stage(s, u->H);
    te_iter *io, *ii;
    assert_int_equal(te_split(sy, te_stage_axis(sy, 0), 4, &io, &ii), TE_OK);
    assert_int_equal(te_parallel(sy, io), TE_OK);
    assert_int_equal(te_vectorize(sy, te_stage_axis(sy, 1)), TE_OK);
    assert_int_equal(te_compute_at(sh_, sy, ii), TE_OK);
    assert_int_equal(
        te_reorder(sh_, 2, (te_iter *[]){te_stage_reduce_axis(sh_, 0), te_stage_axis(sh_, 1)}),
        TE_OK);
    assert_int_equal(te_vectorize(sh_, te_stage_axis(sh_, 1)), TE_OK);
    return s;
}

typedef int (*user_fn)(const float *, const float *, const float *, float *);

static void run_user_kernel(const char *so, const char *sym, user_expr *u, te_ctx *ctx)
{
    void *h =
        dlopen(so, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE /* OpenMP threads may outlive a call */);
    assert_non_null(h);
    void *p = dlsym(h, sym);
    assert_non_null(p);
    user_fn fn;
    memcpy(&fn, &p, sizeof p);
    tt_rng r;
    tt_rng_seed(&r, 3);
    float x[UM * UK], w[UK * UN], g[UN], y[UM * UN];
    double ref[UM * UN];
    tt_fill_f32(&r, x, UM * UK);
    tt_fill_f32(&r, w, UK * UN);
    tt_fill_f32(&r, g, UN);
    tt_poison_f32(y, UM * UN);
    assert_int_equal(fn(x, w, g, y), 0);
    assert_int_equal(te_reference_eval(ctx, 3, (te_tensor *[]){u->X, u->W, u->g},
                                       (const void *[]){x, w, g}, 1, &u->Y, (double *[]){ref}),
                     TE_OK);
    assert_true(tt_max_rel_err_f32(y, ref, UM * UN) < 1e-5);
    dlclose(h);
}

static void test_user_expression(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    user_expr u = make_user_expr(ctx);
    te_schedule *s = schedule_user_expr(ctx, &u);
    te_tensor *args[] = {u.X, u.W, u.g, u.Y};
    te_gen_kernel k = {.name = "fused", .schedule = s, .n_args = 4, .args = args};
    te_gen_options o = te_gen_options_default("fused");
    char dir[512];
    snprintf(dir, sizeof dir, "%s/user", g_dir);
    te_gen_output out;
    if (te_gen_files(ctx, 1, &k, &o, dir, &out) != TE_OK)
        fail_msg("%s", te_ctx_errmsg(ctx));
    assert_string_equal(out.source_name, "fused.c");
    assert_string_equal(out.header_name, "fused.h");

    /* the header documents the ABI */
    const char *h = out.header;
    assert_contains(h, "int fused(const float *X, const float *W, const float *g, float *Y);");
    assert_contains(h, "#ifndef TESSERA_GEN_FUSED_H");
    assert_contains(h, "extern \"C\"");
    assert_contains(h, "row-major");
    assert_contains(h, "X    input  float   [24][20]         strides {20, 1}, 1920 bytes");
    assert_contains(h, "Y    output float   [24][32]         strides {32, 1}, 3072 bytes");
    assert_contains(h, "Alignment: nothing beyond the element type's alignment is required");
    assert_contains(h, "OMP_NUM_THREADS");
    assert_contains(h, "Return value: 0 on success");
    assert_contains(h, "Y[i, j] = "); /* what it computes */
    assert_contains(h, "H[i, j] = sum(");
    assert_contains(h, "vectorize H j");       /* the trace, in the provenance */
    assert_contains(h, "given by the caller"); /* no database record */
    assert_contains(out.source, "vectorize H j");
    assert_contains(out.source, "TE_OMP(parallel for");
    assert_null(strstr(out.source, "#include \"tessera")); /* no Tessera include */
    assert_null(strstr(out.source, "#include <tessera"));
    assert_null(strstr(out.source, "_packed")); /* no packed entry */

    /* strict C99 builds, serial and OpenMP, compute what the reference computes */
    char so[1024];
    snprintf(so, sizeof so, "%s/fused_serial.so", dir);
    compile_so(out.source_path, so, 0);
    run_user_kernel(so, "fused", &u, ctx);
    snprintf(so, sizeof so, "%s/fused_omp.so", dir);
    compile_so(out.source_path, so, 1);
    run_user_kernel(so, "fused", &u, ctx);
    /* the header alone is valid C99 and C++-safe declarations */
    assert_int_equal(
        sh("cd '%s' && printf '#include \"fused.h\"\\nint main(void) { "
           "(void)fused; return 0; }\\n' > inc.c && %s -std=c99 -Wall -Wextra -Werror -pedantic "
           "-fsyntax-only inc.c",
           dir, cc()),
        0);
    te_ctx_free(ctx);
}

/* ---- Database records and provenance ------------------------------------------------------ */

static char *capture_stderr_begin(int *saved, char *path, size_t n)
{
    snprintf(path, n, "%s/stderr.txt", g_dir);
    fflush(stderr);
    *saved = dup(2);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    close(fd);
    return path;
}

static char *capture_stderr_end(int saved, const char *path)
{
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    return slurp(path);
}

static void test_db_provenance(void **state)
{
    (void)state;
    char dbpath[512];
    snprintf(dbpath, sizeof dbpath, "%s/prov.db", g_dir);
    te_db *db = NULL;
    assert_int_equal(te_db_open(dbpath, NULL, &db), TE_OK);
    te_target tgt = te_target_host();
    te_db_target dbt;
    char storage[1024];
    assert_int_equal(te_tuner_db_target(&tgt, &dbt, storage, sizeof storage), TE_OK);

    /* a trial for matmul 32^3: a configuration of its template space */
    te_ctx *ctx = te_ctx_create();
    te_tensor *in[TE_OP_MAX_IO], *outs[TE_OP_MAX_IO];
    int ni, no;
    assert_int_equal(te_op_build(ctx, "matmul", "m=32,n=32,k=32", in, &ni, outs, &no), TE_OK);
    te_space *sp = te_space_create(ctx, "matmul", ni, in, no, outs, TE_SPACE_AUTO, &tgt);
    assert_non_null(sp);
    te_rng rng;
    te_rng_seed(&rng, 11);
    const char *trace = te_space_sample(sp, &rng);
    assert_non_null(trace);
    const char *key = "matmul;k=32,m=32,n=32;f32";
    te_db_trial t = {.workload = {.key = key, .op = "matmul", .flops = 65536},
                     .target = dbt,
                     .trace = trace,
                     .status = TE_TRIAL_OK,
                     .median_s = 1.25e-6,
                     .repeats = 10,
                     .gflops = 52.4288,
                     .created_us = 1735689600000000LL, /* 2025-01-01 00:00:00 UTC */
                     .uid = "0194190e-2a00-7000-8000-0123456789ab"};
    assert_int_equal(te_db_record_trial(db, &t, NULL), TE_OK);

    te_tensor *args[] = {in[0], in[1], outs[0]};
    te_gen_kernel k;
    if (te_gen_kernel_from_db(ctx,
                              &(te_gen_from_db_options){.db = db,
                                                        .db_path = dbpath,
                                                        .workload_key = key,
                                                        .op = "matmul",
                                                        .name = "matmul",
                                                        .n_args = 3,
                                                        .args = args,
                                                        .n_out = 1,
                                                        .target = &tgt},
                              &k) != TE_OK)
        fail_msg("%s", te_ctx_errmsg(ctx));
    assert_int_equal(k.prov.from_db, 1);
    assert_string_equal(k.prov.trial_uid, t.uid);
    assert_string_equal(te_schedule_trace(k.schedule), trace);
    te_gen_options o = te_gen_options_default("matmul");
    o.command = "tessera gen matmul --shape m=32,n=32,k=32 --db prov.db -o out";
    te_gen_output out;
    assert_int_equal(te_gen_sources(ctx, 1, &k, &o, &out), TE_OK);
    const char *files[] = {out.source, out.header};
    char first_line[256];
    snprintf(first_line, sizeof first_line, "%.*s", (int)strcspn(trace, "\n"), trace);
    char version[64];
    snprintf(version, sizeof version, "Tessera %s", te_version());
    for (int f = 0; f < 2; f++) {
        assert_contains(files[f], "workload: matmul;k=32,m=32,n=32;f32");
        assert_contains(files[f], "0194190e-2a00-7000-8000-0123456789ab");
        assert_contains(files[f], "median 1.25 us, 52.43 GFLOP/s, on 2025-01-01 00:00:00 UTC");
        assert_contains(files[f], first_line);
        assert_contains(files[f], version);
        assert_contains(files[f], "tessera gen matmul --shape m=32,n=32,k=32 --db prov.db -o out");
        assert_contains(files[f], dbt.backend); /* the target key */
        assert_contains(files[f], dbt.compiler);
    }

    /* no record for this shape: the default schedule and a note, which the library does not
     * print (it never writes to stderr) ... */
    te_tensor *in2[TE_OP_MAX_IO], *outs2[TE_OP_MAX_IO];
    assert_int_equal(te_op_build(ctx, "matmul", "m=16,n=32,k=32", in2, &ni, outs2, &no), TE_OK);
    int saved;
    char errpath[512];
    capture_stderr_begin(&saved, errpath, sizeof errpath);
    te_gen_from_db_options fo = {.db = db,
                                 .db_path = dbpath,
                                 .workload_key = "matmul;k=32,m=16,n=32;f32",
                                 .op = "matmul",
                                 .name = "mm16",
                                 .n_args = 3,
                                 .args = (te_tensor *[]){in2[0], in2[1], outs2[0]},
                                 .n_out = 1,
                                 .target = &tgt};
    int rc = te_gen_kernel_from_db(ctx, &fo, &k);
    char *err = capture_stderr_end(saved, errpath);
    assert_int_equal(rc, TE_OK);
    assert_non_null(err);
    assert_null(strstr(err, "warning"));
    free(err);
    assert_contains(k.prov.note, "no record for this target");
    /* ... and the CLI warns with it */
    {
        char a2[1024], *o2 = NULL, *e2 = NULL;
        snprintf(a2, sizeof a2, "gen matmul --shape m=16,n=32,k=32 --db '%s' -o prov_out", dbpath);
        assert_int_equal(cli(a2, &o2, &e2), 0);
        assert_contains(e2, "warning: matmul;k=32,m=16,n=32;f32: no record for this target");
        free(o2);
        free(e2);
    }
    assert_int_equal(k.prov.from_db, 0);
    /* Without a record: the untuned default `tessera run` uses (the matmul template's
     * register tiles), not the plain loop nest, and the header says which. */
    assert_non_null(strstr(te_schedule_trace(k.schedule), "cache_write"));
    o = te_gen_options_default("mm16");
    assert_int_equal(te_gen_sources(ctx, 1, &k, &o, &out), TE_OK);
    assert_contains(out.header, "schedule: no record for this target in");
    assert_contains(out.header, "the untuned default schedule (template heuristic");

    /* a record whose trace no longer applies falls back with the reason */
    te_db_trial bad = t;
    bad.workload.key = "matmul;k=32,m=16,n=32;f32";
    bad.trace = "split nosuchstage i 4\n";
    bad.uid = NULL;
    assert_int_equal(te_db_record_trial(db, &bad, NULL), TE_OK);
    fo.workload_key = bad.workload.key;
    assert_int_equal(te_gen_kernel_from_db(ctx, &fo, &k), TE_OK);
    assert_int_equal(k.prov.from_db, 0);
    assert_contains(k.prov.note, "no longer applies");
    te_db_close(db);

    /* the CLI picks the record up, and warns (on stderr) only without one */
    char args_[1024], *cout = NULL, *cerr = NULL;
    snprintf(args_, sizeof args_, "gen matmul --shape m=32,n=32,k=32 --db '%s' -o prov_out",
             dbpath);
    assert_int_equal(cli(args_, &cout, &cerr), 0);
    assert_null(strstr(cerr, "warning"));
    char *hdr = slurp(strcat(strcpy(args_, g_dir), "/prov_out/matmul.h"));
    assert_non_null(hdr);
    assert_contains(hdr, "0194190e-2a00-7000-8000-0123456789ab");
    assert_contains(hdr, "tessera gen matmul --shape m=32,n=32,k=32 --db");
    assert_contains(hdr, "int matmul(const float *A, const float *B, float *out);");
    free(hdr);
    free(cout);
    free(cerr);
    snprintf(args_, sizeof args_, "gen matmul --shape m=8,n=8,k=8 --db '%s' -o prov_out", dbpath);
    assert_int_equal(cli(args_, &cout, &cerr), 0);
    assert_contains(cerr, "warning: matmul;k=8,m=8,n=8;f32: no record for this target");
    assert_contains(cerr, "default schedule");
    free(cout);
    free(cerr);
    te_ctx_free(ctx);
}

/* Issue 13: `gen --fallback` with only a compatible target's record says so on stderr. */
static void test_fallback_record_is_announced(void **state)
{
    (void)state;
    char dbpath[512];
    snprintf(dbpath, sizeof dbpath, "%s/fallback.db", g_dir);
    unlink(dbpath);
    te_db *db = NULL;
    assert_int_equal(te_db_open(dbpath, NULL, &db), TE_OK);
    te_target tgt = te_target_host();
    te_db_target dbt;
    char storage[1024];
    assert_int_equal(te_tuner_db_target(&tgt, &dbt, storage, sizeof storage), TE_OK);
    dbt.key = NULL; /* derived from the fields: another compiler, everything else ours */
    dbt.compiler = "othercc 1.0";
    te_ctx *ctx = te_ctx_create();
    te_tensor *in[TE_OP_MAX_IO], *outs[TE_OP_MAX_IO];
    int ni, no;
    assert_int_equal(te_op_build(ctx, "matmul", "m=16,n=16,k=16", in, &ni, outs, &no), TE_OK);
    te_space *sp = te_space_create(ctx, "matmul", ni, in, no, outs, TE_SPACE_AUTO, &tgt);
    assert_non_null(sp);
    te_rng rng;
    te_rng_seed(&rng, 5);
    const char *trace = te_space_sample(sp, &rng);
    assert_non_null(trace);
    te_db_trial t = {
        .workload = {.key = "matmul;k=16,m=16,n=16;f32", .op = "matmul", .flops = 8192},
        .target = dbt,
        .trace = trace,
        .status = TE_TRIAL_OK,
        .median_s = 1e-6,
        .repeats = 10,
        .gflops = 8.192,
        .created_us = 1735689600000000LL,
        .uid = "0194190e-2a00-7000-8000-0123456789ac"};
    assert_int_equal(te_db_record_trial(db, &t, NULL), TE_OK);
    te_db_close(db);
    char args_[1024], *cout = NULL, *cerr = NULL;
    snprintf(args_, sizeof args_,
             "gen matmul --shape m=16,n=16,k=16 --db '%s' --fallback -o fallback_out", dbpath);
    assert_int_equal(cli(args_, &cout, &cerr), 0);
    assert_contains(cerr, "warning: matmul;k=16,m=16,n=16;f32: no record for this target; using "
                          "the record of the compatible target");
    assert_contains(cerr, "othercc 1.0");
    free(cout);
    free(cerr);
    te_ctx_free(ctx);
}

/* ---- Several shapes, one prelude, a dispatcher -------------------------------------------- */

typedef int (*mm_dispatch)(int64_t, int64_t, int64_t, const float *, const float *, float *);

static te_gen_kernel lib_kernel(te_ctx *ctx, const char *op, const char *shape, const char *name,
                                int sched)
{
    te_tensor *in[TE_OP_MAX_IO], *outs[TE_OP_MAX_IO];
    int ni, no;
    assert_int_equal(te_op_build(ctx, op, shape, in, &ni, outs, &no), TE_OK);
    static te_tensor *pool[16][2 * TE_OP_MAX_IO]; /* argument lists outlive this call */
    static int used;
    assert_true(used < 16);
    te_tensor **args = pool[used++];
    memcpy(args, in, sizeof(te_tensor *) * (size_t)ni);
    memcpy(args + ni, outs, sizeof(te_tensor *) * (size_t)no);
    te_schedule *s = te_schedule_create(ctx, no, outs);
    if (sched) { /* a vectorized, parallel schedule so the kernels need helpers */
        te_stage *st = te_schedule_stage(s, outs[0]);
        te_iter *io, *ii;
        assert_int_equal(te_split(st, te_stage_axis(st, 1), 16, &io, &ii), TE_OK);
        assert_int_equal(te_reorder(st, 3, (te_iter *[]){io, te_stage_reduce_axis(st, 0), ii}),
                         TE_OK);
        assert_int_equal(te_vectorize(st, ii), TE_OK);
        assert_int_equal(te_parallel(st, te_stage_axis(st, 0)), TE_OK);
    }
    te_gen_kernel k = {.name = name, .schedule = s, .n_args = ni + no, .args = args};
    return k;
}

static void test_dispatcher(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    static const int64_t shp[2][3] = {{16, 32, 8}, {8, 48, 24}};
    te_gen_kernel k[2] = {lib_kernel(ctx, "matmul", "m=16,n=32,k=8", "mm_16x32x8", 1),
                          lib_kernel(ctx, "matmul", "m=8,n=48,k=24", "mm_8x48x24", 1)};
    for (int i = 0; i < 2; i++)
        memcpy(k[i].params, shp[i], sizeof shp[i]);
    te_gen_options o = te_gen_options_default("mm");
    o.n_params = 3;
    o.params[0] = "m", o.params[1] = "n", o.params[2] = "k";
    char dir[512];
    snprintf(dir, sizeof dir, "%s/dispatch", g_dir);
    /* the text, for a fixed AVX-512 target (the same on every build machine): one prelude
     * for both kernels */
    te_target t512 = te_target_host();
    t512.vector_bits = 512;
    snprintf(t512.isa, sizeof t512.isa, "sse4_2,avx,avx2,fma,f16c,avx512f,avx512dq,avx512bw");
    te_gen_options o512 = o;
    o512.target = &t512;
    te_gen_output txt;
    if (te_gen_sources(ctx, 2, k, &o512, &txt) != TE_OK)
        fail_msg("%s", te_ctx_errmsg(ctx));
    assert_int_equal(count(txt.source, "#include <math.h>"), 1);
    assert_int_equal(count(txt.source, "typedef float te_f32x16 "), 1);
    assert_int_equal(count(txt.source, "static inline te_f32x16 te_splat_f32x16("), 1);
    assert_int_equal(count(txt.source, "#ifdef _OPENMP\n#define TE_OMP(x)"), 1);
    /* the files, for the host: built and run below */
    te_gen_output out;
    if (te_gen_files(ctx, 2, k, &o, dir, &out) != TE_OK)
        fail_msg("%s", te_ctx_errmsg(ctx));
    assert_int_equal(count(out.source, "#include <math.h>"), 1);
    assert_contains(out.header, "int mm(int64_t m, int64_t n, int64_t k, const float *A, "
                                "const float *B, float *matmul);");
    assert_contains(out.header, "int mm_16x32x8(const float *A, const float *B, float *matmul);");
    assert_contains(out.header, "m=16, n=32, k=8");
    assert_contains(out.header, "-> mm_8x48x24()");
    assert_contains(out.header, "-2 when no kernel");
    assert_contains(out.source,
                    "    if (m == 8 && n == 48 && k == 24)\n        return mm_8x48x24(");
    char so[1024];
    snprintf(so, sizeof so, "%s/mm.so", dir);
    compile_so(out.source_path, so, 1);
    void *h =
        dlopen(so, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE /* OpenMP threads may outlive a call */);
    assert_non_null(h);
    void *p = dlsym(h, "mm");
    assert_non_null(p);
    mm_dispatch fn;
    memcpy(&fn, &p, sizeof p);
    tt_rng r;
    tt_rng_seed(&r, 5);
    for (int i = 0; i < 2; i++) {
        int64_t m = shp[i][0], n = shp[i][1], kk = shp[i][2];
        float *a = malloc(sizeof(float) * (size_t)(m * kk)),
              *b = malloc(sizeof(float) * (size_t)(kk * n));
        float *c = malloc(sizeof(float) * (size_t)(m * n));
        double *ref = malloc(sizeof(double) * (size_t)(m * n));
        tt_fill_f32(&r, a, (size_t)(m * kk));
        tt_fill_f32(&r, b, (size_t)(kk * n));
        tt_poison_f32(c, (size_t)(m * n));
        assert_int_equal(fn(m, n, kk, a, b, c), 0);
        assert_int_equal(te_reference_eval(ctx, 2, k[i].args, (const void *[]){a, b}, 1,
                                           &k[i].args[2], (double *[]){ref}),
                         TE_OK);
        assert_true(tt_max_rel_err_f32(c, ref, (size_t)(m * n)) < 1e-5);
        assert_int_equal(fn(m, n, kk + 1, a, b, c), -2); /* unknown shape */
        free(a), free(b), free(c), free(ref);
    }
    dlclose(h);

    /* refused requests */
    te_gen_options bad = te_gen_options_default("mm");
    assert_int_equal(te_gen_sources(ctx, 2, k, &bad, &out), TE_ERR_ARG); /* no parameters */
    bad = o;
    bad.name = NULL;
    assert_int_equal(te_gen_sources(ctx, 2, k, &bad, &out), TE_ERR_ARG);
    te_gen_kernel same[2] = {k[0], k[1]};
    memcpy(same[1].params, same[0].params, sizeof same[0].params);
    te_ctx_clear_error(ctx);
    assert_int_equal(te_gen_sources(ctx, 2, same, &o, &out), TE_ERR_ARG);
    assert_contains(te_ctx_errmsg(ctx), "same dispatch parameter values");
    same[1] = k[1];
    same[1].name = "mm_16x32x8";
    te_ctx_clear_error(ctx);
    assert_int_equal(te_gen_sources(ctx, 2, same, &o, &out), TE_ERR_ARG);
    assert_contains(te_ctx_errmsg(ctx), "both named");
    te_gen_kernel f64k = lib_kernel(ctx, "matmul", "m=4,n=4,k=4,dtype=f64", "mm_f64", 0);
    memcpy(same, (te_gen_kernel[]){k[0], f64k}, sizeof same);
    same[1].params[0] = 4;
    te_ctx_clear_error(ctx);
    assert_int_equal(te_gen_sources(ctx, 2, same, &o, &out), TE_ERR_ARG);
    assert_contains(te_ctx_errmsg(ctx), "f64");
    te_ctx_free(ctx);
}

/* ---- The command line --------------------------------------------------------------------- */

static void test_cli_exit_codes(void **state)
{
    (void)state;
    static const struct {
        const char *args;
        int rc;
        const char *err; /* expected on stderr (or stdout for --help) */
    } cases[] = {
        {"gen --help", 0, "usage: tessera gen OP"},
        {"gen", 2, "name an operator"},
        {"gen nosuchop --shape m=1", 2, "unknown operator 'nosuchop'"},
        {"gen nosuchop --shape m=1", 2, "tessera ops"},
        {"gen matmul", 2, "needs --shape"},
        {"gen matmul --shape m=4,n=4", 2, "k"},
        {"gen matmul --shape m=4,n=4,k=x", 2, "--shape 'm=4,n=4,k=x'"},
        {"gen matmul --shape m=4,n=4,k=4 --bogus", 2, "unknown option '--bogus'"},
        {"gen matmul --shape m=4,n=4,k=4 --target tpu", 2, "--target must be c or cuda"},
        {"gen matmul --shape m=4,n=4,k=4 --sm 80", 2, "--sm only applies"},
        {"gen matmul --shape m=4,n=4,k=4 --target cuda --sm 7", 2, "--sm takes"},
        {"gen matmul --shape m=4,n=4,k=4 --name 9x", 2, "--name must be a C identifier"},
        {"gen matmul --shape m=4,n=4,k=4 --shape k=4,n=4,m=4", 2, "repeats the workload"},
        {"gen matmul --shape m=4,n=4,k=4 matmul", 2, "unexpected argument"},
        {"gen matmul --shape m=4,n=4,k=4 -o", 2, "needs a value"},
        {"gen conv2d --shape n=1,c=2,h=4,w=4,oc=2,kh=1,kw=1 --shape "
         "n=1,c=2,h=4,w=4,oc=2,kh=1,kw=1,layout=NHWC",
         2, "cannot tell them apart"},
        {"gen matmul --shape m=4,n=4,k=4 -o /proc/no/such/dir", 1, "cannot"},
        {"gen matmul --shape m=4,n=4,k=4 --db /proc/version -o x", 1, "/proc/version"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out = NULL, *err = NULL;
        int rc = cli(cases[i].args, &out, &err);
        const char *where = cases[i].rc == 0 ? out : err;
        if (rc != cases[i].rc || !where || !strstr(where, cases[i].err))
            fail_msg("tessera %s: exit %d (want %d)\nstdout: %s\nstderr: %s", cases[i].args, rc,
                     cases[i].rc, out ? out : "", err ? err : "");
        free(out);
        free(err);
    }
    /* a bad command line shows the usage */
    char *uerr = NULL;
    assert_int_equal(cli("gen matmul --shape m=4,n=4,k=4 --bogus", NULL, &uerr), 2);
    assert_contains(uerr, "usage: tessera gen OP");
    free(uerr);
    /* unknown operator: the list of operators */
    char *err = NULL;
    assert_int_equal(cli("gen nosuchop --shape m=1", NULL, &err), 2);
    assert_contains(err, "matmul");
    assert_contains(err, "mlp_gate");
    free(err);
    /* usage errors write nothing */
    assert_int_equal(sh("test -e '%s/x' || test -e '%s/tessera.db'", g_dir, g_dir), 1);
    /* the top-level help lists gen */
    char *out = NULL;
    assert_int_equal(cli("--help", &out, NULL), 0);
    assert_contains(out, "gen ");
    free(out);

    /* success: files, a summary line, a dispatcher from several shapes */
    assert_int_equal(
        cli("gen softmax --shape m=4,n=16 --shape m=8,n=16 -o cli_out --quiet", &out, &err), 0);
    assert_string_equal(err, "");
    free(out);
    free(err);
    char path[512];
    snprintf(path, sizeof path, "%s/cli_out/softmax.h", g_dir);
    char *h = slurp(path);
    assert_non_null(h);
    assert_contains(h, "int softmax(int64_t m, int64_t n, const float *X, float *out);");
    assert_contains(h, "int softmax_m4_n16(const float *X, float *out);");
    free(h);
    assert_int_equal(sh("%s -std=c99 -Wall -Wextra -Werror -pedantic -c '%s/cli_out/softmax.c' "
                        "-o '%s/cli_out/softmax.o'",
                        cc(), g_dir, g_dir),
                     0);
    /* --target cuda writes .cu + .h without a GPU or NVRTC */
    assert_int_equal(cli("gen softmax --shape m=4,n=64 --target cuda -o cli_cuda", &out, &err), 0);
    assert_contains(out, "softmax.cu");
    free(out);
    free(err);
    snprintf(path, sizeof path, "%s/cli_cuda/softmax.cu", g_dir);
    assert_int_equal(access(path, R_OK), 0);
}

/* ---- CUDA files --------------------------------------------------------------------------- */

/* ---- Weights packed once (key nb): the generated packing function ------------------------ */

typedef int (*mm_fn)(const float *, const float *, float *);
typedef void (*pack_fn)(const float *, float *);

/* `tessera gen matmul ... nb=16` writes matmul_pack_B beside the kernel; a caller packs B with
 * it, passes the panels, and gets A B (both layouts of B), built with the ABI's strict flags. */
static void test_packed_weights_pack_function(void **state)
{
    (void)state;
    enum { M = 10, N = 48, K = 12 };
    for (int tb = 0; tb < 2; tb++) {
        char args[256], *out = NULL, *err = NULL;
        snprintf(args, sizeof args, "gen matmul --shape m=%d,n=%d,k=%d,nb=16,trans_b=%d -o pk%d", M,
                 N, K, tb, tb);
        if (cli(args, &out, &err) != 0)
            fail_msg("tessera %s: %s", args, err ? err : "");
        char path[512], so[512];
        snprintf(path, sizeof path, "%s/pk%d/matmul.h", g_dir, tb);
        char *hdr = slurp(path);
        assert_non_null(hdr);
        assert_contains(hdr, "void matmul_pack_B(const float *B, float *B_panels);");
        assert_contains(hdr, tb ? "B_panels[jb][kk][j] = B[jb * nb + j][kk]"
                                : "B_panels[jb][kk][j] = B[kk][jb * nb + j]");
        snprintf(path, sizeof path, "%s/pk%d/matmul.c", g_dir, tb);
        snprintf(so, sizeof so, "%s/pk%d/matmul.so", g_dir, tb);
        compile_so(path, so, 1);
        void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE /* OpenMP threads */);
        assert_non_null(h);
        void *pm = dlsym(h, "matmul"), *pp = dlsym(h, "matmul_pack_B");
        assert_non_null(pm);
        assert_non_null(pp);
        mm_fn mm;
        pack_fn pack;
        memcpy(&mm, &pm, sizeof pm);
        memcpy(&pack, &pp, sizeof pp);
        tt_rng r;
        tt_rng_seed(&r, 17);
        float a[M * K], b[K * N], bp[K * N], c[M * N];
        tt_fill_f32(&r, a, M * K);
        tt_fill_f32(&r, b, K * N);
        tt_poison_f32(bp, K * N);
        tt_poison_f32(c, M * N);
        pack(b, bp);
        assert_int_equal(mm(a, bp, c), 0);
        double worst = 0;
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double ref = 0;
                for (int q = 0; q < K; q++)
                    ref += (double)a[i * K + q] * (tb ? b[j * K + q] : b[q * N + j]);
                worst = fmax(worst, fabs(c[i * N + j] - ref) / fmax(1.0, fabs(ref)));
            }
        if (!(worst < 1e-5))
            fail_msg("trans_b %d: max relative error %g", tb, worst);
        dlclose(h);
        free(hdr);
        free(out);
        free(err);
    }
}

static void test_cuda_files(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    te_target tgt = te_target_cuda(80);
    te_gen_kernel k[2];
    static const char *shapes[2] = {"m=64,n=64,k=32", "m=128,n=64,k=64"};
    for (int i = 0; i < 2; i++) {
        te_tensor *in[TE_OP_MAX_IO], *outs[TE_OP_MAX_IO];
        int ni, no;
        assert_int_equal(te_op_build(ctx, "matmul", shapes[i], in, &ni, outs, &no), TE_OK);
        char name[64];
        snprintf(name, sizeof name, "mm_%d", i);
        /* no database: the GPU template with default knobs */
        assert_int_equal(te_gen_kernel_from_db(ctx,
                                               &(te_gen_from_db_options){
                                                   .op = "matmul",
                                                   .name = name,
                                                   .n_args = 3,
                                                   .args = (te_tensor *[]){in[0], in[1], outs[0]},
                                                   .n_out = 1,
                                                   .target = &tgt},
                                               &k[i]),
                         TE_OK);
        assert_contains(k[i].prov.note, "CUDA template 'matmul'");
        k[i].params[0] = i;
    }
    te_gen_options o = te_gen_options_default("mm");
    o.target = &tgt;
    o.n_params = 1;
    o.params[0] = "variant";
    char dir[512];
    snprintf(dir, sizeof dir, "%s/cuda", g_dir);
    te_gen_output out;
    if (te_gen_files(ctx, 2, k, &o, dir, &out) != TE_OK)
        fail_msg("%s", te_ctx_errmsg(ctx));
    assert_string_equal(out.source_name, "mm.cu");
    assert_contains(out.source, "extern \"C\" __global__ void __launch_bounds__(");
    assert_contains(out.source, "#ifndef __CUDACC_RTC__");
    assert_int_equal(count(out.source, "te_floordiv(T a, T b)"), 1);
    assert_contains(out.header, "int mm_0_launch(const float *A, const float *B, float *matmul, "
                                "void *stream);");
    assert_contains(out.header, "int mm_1_host(const float *A, const float *B, float *matmul);");
    assert_contains(out.header, "int mm_launch(int64_t variant, const float *A");
    assert_contains(out.header, "mm_1<<<grid (");
    assert_contains(out.header, "bytes of static shared memory");
    assert_contains(out.header, "threads per block");
    assert_contains(out.header, "#if defined(__CUDACC__)");
    /* plain C includes the header */
    assert_int_equal(
        sh("cd '%s' && printf '#include \"mm.h\"\\nint main(void) { "
           "(void)mm_host; return 0; }\\n' > inc.c && %s -std=c99 -Wall -Wextra -Werror "
           "-pedantic -fsyntax-only inc.c",
           dir, cc()),
        0);

    /* a user-defined elementwise expression gets the elementwise template */
    te_tensor *X = te_placeholder(ctx, "X", TE_F32, 2, (int64_t[]){64, 96});
    te_expr *i = te_axis(ctx, "i", 64), *j = te_axis(ctx, "j", 96);
    te_tensor *Y = te_compute(ctx, "Y", 2, (te_expr *[]){i, j},
                              te_mul(ctx, te_tanh(ctx, TE_AT(ctx, X, i, j)), te_f32(ctx, 2.0)));
    te_gen_kernel ek;
    assert_int_equal(te_gen_kernel_from_db(ctx,
                                           &(te_gen_from_db_options){.name = "scaled_tanh",
                                                                     .n_args = 2,
                                                                     .args = (te_tensor *[]){X, Y},
                                                                     .n_out = 1,
                                                                     .target = &tgt},
                                           &ek),
                     TE_OK);
    assert_contains(ek.prov.note, "elementwise");
    te_gen_options eo = te_gen_options_default("scaled_tanh");
    eo.target = &tgt;
    te_gen_output eout;
    if (te_gen_files(ctx, 1, &ek, &eo, dir, &eout) != TE_OK)
        fail_msg("%s", te_ctx_errmsg(ctx));

    /* NVRTC compiles the .cu as it is (the host part is behind __CUDACC_RTC__) */
    if (te_nvrtc_probe() == TE_OK) {
        const char *srcs[2] = {out.source, eout.source};
        for (int s = 0; s < 2; s++) {
            void *cubin = NULL;
            size_t size = 0;
            char *log = NULL;
            int rc =
                te_nvrtc_compile(srcs[s], s ? "scaled_tanh.cu" : "mm.cu", 80, &cubin, &size, &log);
            if (rc != TE_OK)
                fail_msg("NVRTC: %s", log ? log : te_cuda_errmsg());
            free(cubin);
            free(log);
        }
        printf("NVRTC compiled mm.cu and scaled_tanh.cu for sm_80\n");
    } else {
        printf("SKIP: NVRTC not available (%s); the .cu files are not compiled by NVRTC\n",
               te_cuda_errmsg());
    }
    /* nvcc compiles kernels and launchers */
    const char *nvcc = sh("command -v nvcc > /dev/null") == 0          ? "nvcc"
                       : access("/usr/local/cuda/bin/nvcc", X_OK) == 0 ? "/usr/local/cuda/bin/nvcc"
                                                                       : NULL;
    if (nvcc) {
        assert_int_equal(
            sh("'%s' -O2 -arch=sm_80 -c '%s' -o '%s/mm.o'", nvcc, out.source_path, dir), 0);
        printf("nvcc -c compiled mm.cu\n");
    } else {
        printf("SKIP: nvcc not found; the .cu files are not compiled by nvcc\n");
    }
    te_ctx_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_user_expression),
        cmocka_unit_test(test_db_provenance),
        cmocka_unit_test(test_dispatcher),
        cmocka_unit_test(test_cli_exit_codes),
        cmocka_unit_test(test_cuda_files),
        cmocka_unit_test(test_fallback_record_is_announced),
        cmocka_unit_test(test_packed_weights_pack_function),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

/* Tuple reductions in GPU schedules: rows bound to blockIdx.x (or rows to threadIdx.y), the
 * reduction split across threadIdx.x with te_bind_reduce, lowered by the cross_thread_reduce
 * pass into one shared array per component and tuple-valued tree steps. Run on the CPU (the C
 * backend runs GPU schedules) against the reference for argmax, Welford, online softmax and
 * Kahan; the CUDA source is emitted, compiled with NVRTC where it can be loaded, and run on the
 * device where there is one (each skipped with a message otherwise). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tessera/backend.h"
#include "tessera/cuda.h"
#include "tessera/schedule.h"
#include "tessera/te.h"
#include "testutil.h"

enum { M = 8, K = 200 };

typedef enum { P_ARGMAX, P_WELFORD, P_SOFTMAX, P_KAHAN, P_COUNT } problem;
static const char *pnames[] = {"argmax", "welford", "softmax", "kahan"};

typedef struct {
    te_ctx *ctx;
    te_tensor *A;
    int n;
    te_tensor *out[3];
} prob;

static prob make(problem p)
{
    prob r = {0};
    te_ctx *ctx = r.ctx = te_ctx_create();
    r.A = te_placeholder(ctx, "A", TE_F32, 2, (int64_t[]){M, K});
    te_expr *i = te_axis(ctx, "i", M), *k = te_reduce_axis(ctx, "k", K);
    te_expr *v = TE_AT(ctx, r.A, i, k);
    te_reducer *red;
    te_expr *srcs[3];
    const char *names[3];
    switch (p) {
    case P_ARGMAX:
        red = te_reducer_argmax(ctx, TE_F32, TE_I64);
        srcs[0] = v, srcs[1] = k, names[0] = "val", names[1] = "idx", r.n = 2;
        break;
    case P_WELFORD:
        red = te_reducer_welford(ctx, TE_F32);
        srcs[0] = te_f32(ctx, 1), srcs[1] = v, srcs[2] = te_f32(ctx, 0);
        names[0] = "cnt", names[1] = "mean", names[2] = "m2", r.n = 3;
        break;
    case P_SOFTMAX:
        red = te_reducer_online_softmax(ctx, TE_F32);
        srcs[0] = v, srcs[1] = te_f32(ctx, 1), names[0] = "mx", names[1] = "sm", r.n = 2;
        break;
    default:
        red = te_reducer_kahan(ctx, TE_F32);
        srcs[0] = v, srcs[1] = te_f32(ctx, 0), names[0] = "ks", names[1] = "kc", r.n = 2;
        break;
    }
    te_expr *body = te_reduce_tuple(ctx, red, r.n, srcs, 1, &k);
    if (te_compute_tuple(ctx, r.n, names, 1, &i, body, r.out))
        fail_msg("%s", te_ctx_errmsg(ctx));
    return r;
}

/* rows_y: four rows per block on threadIdx.y, else one row per block. */
static te_schedule *gpu_schedule(prob *p, int threads, bool rows_y)
{
    te_schedule *s = te_schedule_create(p->ctx, p->n, p->out);
    te_stage *st = te_schedule_stage(s, p->out[0]);
    te_iter *ko, *kt, *bi, *ti;
    assert_int_equal(te_split(st, te_stage_reduce_axis(st, 0), threads, &ko, &kt), TE_OK);
    assert_int_equal(te_reorder(st, 2, (te_iter *[]){kt, ko}), TE_OK);
    if (rows_y) {
        assert_int_equal(te_split(st, te_stage_axis(st, 0), 4, &bi, &ti), TE_OK);
        assert_int_equal(te_bind(st, bi, TE_BLOCK_X), TE_OK);
        assert_int_equal(te_bind(st, ti, TE_THREAD_Y), TE_OK);
    } else {
        assert_int_equal(te_bind(st, te_stage_axis(st, 0), TE_BLOCK_X), TE_OK);
    }
    if (te_bind_reduce(st, kt, TE_THREAD_X))
        fail_msg("bind_reduce: %s", te_ctx_errmsg(p->ctx));
    return s;
}

static void fill(problem pk, float *a)
{
    tt_rng g;
    tt_rng_seed(&g, tt_seed(51 + (uint64_t)pk));
    tt_fill_f32(&g, a, M * K);
    if (pk == P_ARGMAX)
        for (int m = 0; m < M; m++)
            a[m * K + 17] = a[m * K + 150] = 4.0f; /* ties in different threads' shares */
    if (pk == P_SOFTMAX)
        for (int c = 0; c < K; c++)
            a[c] = -INFINITY; /* a masked row */
}

static void check(prob *p, problem pk, const float *a, void *const *outs, const char *what)
{
    double *ref[3];
    for (int o = 0; o < p->n; o++)
        ref[o] = malloc(sizeof(double) * M);
    assert_int_equal(te_reference_eval(p->ctx, 1, &p->A, (const void *[]){a}, p->n, p->out, ref),
                     TE_OK);
    for (int o = 0; o < p->n; o++) {
        for (int j = 0; j < M; j++) {
            double got = te_tensor_dtype(p->out[o]) == TE_I64 ? (double)((int64_t *)outs[o])[j]
                                                              : ((float *)outs[o])[j];
            double tol = pk == P_KAHAN && o == 1 ? 1e-5 * fmax(1, fabs(ref[o][j])) : 1e-5;
            if (!(got == ref[o][j] || fabs(got - ref[o][j]) / fmax(1, fabs(ref[o][j])) < tol))
                fail_msg("%s %s: %s[%d] = %.9g, reference %.9g", pnames[pk], what,
                         te_tensor_name(p->out[o]), j, got, ref[o][j]);
        }
        free(ref[o]);
    }
}

static void run_cpu(problem pk, int threads, bool rows_y)
{
    prob p = make(pk);
    te_schedule *s = gpu_schedule(&p, threads, rows_y);
    te_tensor *args[4] = {p.A, p.out[0], p.out[1], p.out[2]};
    te_target host = te_target_host();
    te_module *m = NULL;
    if (te_build(s, 1 + p.n, args, "gtup", &host, &m))
        fail_msg("%s: te_build: %s", pnames[pk], te_ctx_errmsg(p.ctx));
    if (getenv("TESSERA_TEST_VERBOSE"))
        fprintf(stderr, "%s\n", te_module_source(m));
    float a[M * K];
    fill(pk, a);
    void *outs[3] = {NULL, NULL, NULL};
    for (int o = 0; o < p.n; o++) {
        outs[o] = malloc(8 * M);
        tt_poison_f32(outs[o], 2 * M);
    }
    assert_int_equal(te_module_run(m, (void *[]){a, outs[0], outs[1], p.n > 2 ? outs[2] : NULL}),
                     TE_OK);
    char what[64];
    snprintf(what, sizeof what, "CPU, %d threads%s", threads, rows_y ? ", rows on y" : "");
    check(&p, pk, a, outs, what);
    for (int o = 0; o < p.n; o++)
        free(outs[o]);
    te_module_free(m);
    te_ctx_free(p.ctx);
}

static void test_cross_thread_tuple_reductions_run_on_the_cpu(void **state)
{
    (void)state;
    for (int pk = 0; pk < P_COUNT; pk++) {
        run_cpu((problem)pk, 64, false);
        run_cpu((problem)pk, 24, false); /* not a power of two; 200 = 8 x 24 + 8 */
        run_cpu((problem)pk, 32, true);
    }
}

static void test_cross_thread_tuple_reduction_has_one_shared_array_per_component(void **state)
{
    (void)state;
    prob p = make(P_WELFORD);
    te_schedule *s = gpu_schedule(&p, 64, false);
    te_target host = te_target_host();
    te_lowered *f = te_lower(s, 4, (te_tensor *[]){p.A, p.out[0], p.out[1], p.out[2]}, "w", &host);
    assert_non_null(f);
    char *buf = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&buf, &len);
    te_lowered_print(f, fp);
    fclose(fp);
    assert_non_null(strstr(buf, "cnt_red"));
    assert_non_null(strstr(buf, "mean_red"));
    assert_non_null(strstr(buf, "m2_red"));
    free(buf);
    te_ctx_free(p.ctx);
}

static void test_cuda_source_of_tuple_reductions_compiles(void **state)
{
    (void)state;
    bool nvrtc = te_nvrtc_available(), dev = nvrtc && te_cuda_available();
    if (!nvrtc)
        printf("  NVRTC not loadable (%s): CUDA sources emitted, not compiled\n", te_cuda_errmsg());
    else if (!dev)
        printf("  no CUDA device: compiled with NVRTC, not run\n");
    for (int pk = 0; pk < P_COUNT; pk++) {
        for (int rows_y = 0; rows_y < 2; rows_y++) {
            prob p = make((problem)pk);
            te_tensor *args[4] = {p.A, p.out[0], p.out[1], p.out[2]};
            te_target tgt = te_target_cuda(80);
            te_lowered *f = te_lower(gpu_schedule(&p, 32, rows_y), 1 + p.n, args, "gtup", &tgt);
            if (!f)
                fail_msg("%s: lowering for CUDA: %s", pnames[pk], te_ctx_errmsg(p.ctx));
            const char *src = te_emit_cuda(p.ctx, f, &tgt);
            if (!src)
                fail_msg("%s: CUDA emission: %s", pnames[pk], te_ctx_errmsg(p.ctx));
            assert_non_null(strstr(src, "__global__"));
            assert_non_null(strstr(src, "__shared__"));
            if (nvrtc) {
                te_target t2 = tgt;
                if (dev)
                    assert_int_equal(te_cuda_target_device(0, &t2), TE_OK);
                te_cuda_module *cm = NULL;
                if (te_cuda_build(gpu_schedule(&p, 32, rows_y), 1 + p.n, args, "gtup", &t2, &cm))
                    fail_msg("%s: NVRTC: %s\n%s", pnames[pk], te_ctx_errmsg(p.ctx), src);
                if (dev) {
                    float a[M * K];
                    fill((problem)pk, a);
                    void *outs[3] = {NULL, NULL, NULL};
                    for (int o = 0; o < p.n; o++) {
                        outs[o] = malloc(8 * M);
                        tt_poison_f32(outs[o], 2 * M);
                    }
                    if (te_cuda_module_run(
                            cm, (void *[]){a, outs[0], outs[1], p.n > 2 ? outs[2] : NULL}))
                        fail_msg("%s: device run: %s", pnames[pk], te_cuda_module_errmsg(cm));
                    check(&p, (problem)pk, a, outs, "GPU");
                    for (int o = 0; o < p.n; o++)
                        free(outs[o]);
                }
                te_cuda_module_free(cm);
            }
            te_ctx_free(p.ctx);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cross_thread_tuple_reductions_run_on_the_cpu),
        cmocka_unit_test(test_cross_thread_tuple_reduction_has_one_shared_array_per_component),
        cmocka_unit_test(test_cuda_source_of_tuple_reductions_compiles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

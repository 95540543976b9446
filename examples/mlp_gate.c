/*
 * The transformer MLP gate, y = silu(x W1) * (x W3), defined from placeholders, scheduled by
 * hand, built for this CPU, checked against the reference interpreter, and printed as C.
 *
 *     example_mlp_gate [M K N] [--quiet]
 *
 * The schedule keeps a 4 x 32 tile of both products in registers (cache_write to local scope),
 * computes it inside the output's tile loop (compute_at), and applies the gate to it there, so
 * the two matrix products and the elementwise epilogue run as one fused kernel.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/backend.h"
#include "tessera/schedule.h"
#include "tessera/te.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, te_ctx_errmsg(ctx));                \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* x @ w as a reduction over k. */
static te_tensor *matmul(te_ctx *ctx, const char *name, te_tensor *x, te_tensor *w)
{
    int64_t m = te_tensor_shape(x)[0], k = te_tensor_shape(x)[1], n = te_tensor_shape(w)[1];
    te_expr *i = te_axis(ctx, "i", m), *j = te_axis(ctx, "j", n), *r = te_reduce_axis(ctx, "k", k);
    te_expr *prod = te_mul(ctx, TE_AT(ctx, x, i, r), TE_AT(ctx, w, r, j));
    return te_compute(ctx, name, 2, (te_expr *[]){i, j}, te_sum(ctx, prod, 1, &r));
}

/* Gives the product tile its own register-resident stage computed inside Y's tile loop. */
static void schedule_product(te_ctx *ctx, te_schedule *s, te_tensor *g, te_stage *sy, te_iter *at)
{
    te_tensor *acc = te_cache_write(s, g, TE_SCOPE_LOCAL); /* the accumulator tile */
    CHECK(acc);
    CHECK(te_compute_inline(te_schedule_stage(s, g)) == TE_OK); /* Y reads the tile directly */
    te_stage *sa = te_schedule_stage(s, acc);
    CHECK(te_compute_at(sa, sy, at) == TE_OK);
    te_iter *i = te_stage_axis(sa, 0), *j = te_stage_axis(sa, 1), *k = te_stage_reduce_axis(sa, 0);
    te_iter *ko, *ki;
    CHECK(te_split(sa, k, 4, &ko, &ki) == TE_OK);
    CHECK(te_reorder(sa, 4, (te_iter *[]){ko, ki, i, j}) == TE_OK);
    CHECK(te_unroll(sa, ki) == TE_OK);
    CHECK(te_unroll(sa, i) == TE_OK);
    CHECK(te_vectorize(sa, j) == TE_OK);
}

int main(int argc, char **argv)
{
    int64_t M = 64, K = 256, N = 512;
    bool quiet = false;
    int pos = 0;
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--quiet")) {
            quiet = true;
            continue;
        }
        int64_t v = strtoll(argv[a], NULL, 10);
        if (v <= 0 || pos > 2) {
            fprintf(stderr, "usage: %s [M K N] [--quiet]\n", argv[0]);
            return 2;
        }
        *(pos == 0 ? &M : pos == 1 ? &K : &N) = v;
        pos++;
    }
    te_ctx *ctx = te_ctx_create();
    te_tensor *X = te_placeholder(ctx, "X", TE_F32, 2, (int64_t[]){M, K});
    te_tensor *W1 = te_placeholder(ctx, "W1", TE_F32, 2, (int64_t[]){K, N});
    te_tensor *W3 = te_placeholder(ctx, "W3", TE_F32, 2, (int64_t[]){K, N});
    te_tensor *G1 = matmul(ctx, "G1", X, W1), *G3 = matmul(ctx, "G3", X, W3);
    te_expr *i = te_axis(ctx, "i", M), *j = te_axis(ctx, "j", N);
    te_expr *g1 = TE_AT(ctx, G1, i, j), *g3 = TE_AT(ctx, G3, i, j);
    te_tensor *Y = te_compute(ctx, "Y", 2, (te_expr *[]){i, j},
                              te_mul(ctx, te_mul(ctx, g1, te_sigmoid(ctx, g1)), g3));
    CHECK(Y);
    te_tensor_set_tag(ctx, Y, "mlp_gate");

    /* The schedule: 4 x 32 output tiles, column panels in parallel so each thread keeps its
     * slices of W1 and W3 in cache while it walks down the rows. */
    te_schedule *s = te_schedule_create(ctx, 1, &Y);
    CHECK(s);
    te_stage *sy = te_schedule_stage(s, Y);
    te_iter *io, *jo, *ii, *ji;
    CHECK(te_tile(sy, te_stage_axis(sy, 0), te_stage_axis(sy, 1), 4, 32, &io, &jo, &ii, &ji) ==
          TE_OK);
    CHECK(te_reorder(sy, 2, (te_iter *[]){jo, io}) == TE_OK);
    CHECK(te_parallel(sy, jo) == TE_OK);
    CHECK(te_unroll(sy, ii) == TE_OK);
    CHECK(te_vectorize(sy, ji) == TE_OK);
    schedule_product(ctx, s, G1, sy, io);
    schedule_product(ctx, s, G3, sy, io);

    te_target target = te_target_host();
    te_module *mod = NULL;
    CHECK(te_build(s, 4, (te_tensor *[]){X, W1, W3, Y}, "mlp_gate", &target, &mod) == TE_OK);

    /* Random inputs, a poisoned output, and the float64 oracle. */
    float *x = malloc(sizeof(float) * (size_t)(M * K)),
          *w1 = malloc(sizeof(float) * (size_t)(K * N));
    float *w3 = malloc(sizeof(float) * (size_t)(K * N)),
          *y = malloc(sizeof(float) * (size_t)(M * N));
    double *ref = malloc(sizeof(double) * (size_t)(M * N));
    srand(42);
    for (int64_t q = 0; q < M * K; q++)
        x[q] = (float)rand() / RAND_MAX - 0.5f;
    for (int64_t q = 0; q < K * N; q++) {
        w1[q] = ((float)rand() / RAND_MAX - 0.5f) * 0.1f;
        w3[q] = ((float)rand() / RAND_MAX - 0.5f) * 0.1f;
    }
    for (int64_t q = 0; q < M * N; q++)
        y[q] = NAN;
    CHECK(te_module_run(mod, (void *[]){x, w1, w3, y}) == TE_OK);
    CHECK(te_reference_eval(ctx, 3, (te_tensor *[]){X, W1, W3}, (const void *[]){x, w1, w3}, 1, &Y,
                            (double *[]){ref}) == TE_OK);
    double worst = 0;
    for (int64_t q = 0; q < M * N; q++) {
        double e = fabs(y[q] - ref[q]) / fmax(1.0, fabs(ref[q]));
        if (!(e <= worst))
            worst = e;
    }
    if (!quiet)
        printf("%s\n", te_module_source(mod));
    printf("mlp_gate %lldx%lldx%lld: max relative error vs reference %.3g (%s)\n", (long long)M,
           (long long)K, (long long)N, worst, worst < 1e-5 ? "ok" : "FAILED");
    te_module_free(mod);
    free(x);
    free(w1);
    free(w3);
    free(y);
    free(ref);
    te_ctx_free(ctx);
    return worst < 1e-5 ? 0 : 1;
}

/*
 * Random legal schedules over the operator library, each built for the CPU and checked against
 * the reference interpreter.
 *
 * The generator (tests/rand_schedule.h) applies random primitives with random arguments;
 * every schedule that results must compute the right answer.
 *
 * Environment: TESSERA_TEST_SEED (default 2026) and TESSERA_RANDOM_SCHEDULES (default 320).
 * A failure prints the seed, the operator, the schedule trace and the lowered IR.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backends/c/cc.h"
#include "tessera/backend.h"
#include "tessera/ops.h"
#include "tessera/schedule.h"
#include "testutil.h"

#include "op_cases.h"
#include "rand_schedule.h"

typedef struct {
    te_ctx *ctx;
    te_tensor *in[TE_OP_MAX_IO], *out[TE_OP_MAX_IO];
    int n_in, n_out;
    void *in_data[TE_OP_MAX_IO];
    double *ref[TE_OP_MAX_IO];
} op_case;

static void case_free(op_case *c)
{
    for (int i = 0; i < c->n_in; i++)
        free(c->in_data[i]);
    for (int i = 0; i < c->n_out; i++)
        free(c->ref[i]);
    te_ctx_free(c->ctx);
}

static void case_init(op_case *c, int k, tt_rng *r)
{
    memset(c, 0, sizeof *c);
    c->ctx = te_ctx_create();
    if (te_op_build(c->ctx, cases[k].op, cases[k].params, c->in, &c->n_in, c->out, &c->n_out))
        fail_msg("building %s(%s): %s", cases[k].op, cases[k].params, te_ctx_errmsg(c->ctx));
    for (int i = 0; i < c->n_in; i++) {
        int64_t ne = te_tensor_numel(c->in[i]);
        float *p = malloc(sizeof(float) * (size_t)ne);
        tt_fill_f32(r, p, (size_t)ne);
        /* Norms divide by the variance: keep inputs away from a degenerate row. */
        c->in_data[i] = p;
    }
    for (int o = 0; o < c->n_out; o++)
        c->ref[o] = malloc(sizeof(double) * (size_t)te_tensor_numel(c->out[o]));
    if (te_reference_eval(c->ctx, c->n_in, c->in, (const void *const *)c->in_data, c->n_out, c->out,
                          c->ref))
        fail_msg("reference for %s: %s", cases[k].op, te_ctx_errmsg(c->ctx));
}

enum { BATCH = 16 };

typedef struct {
    int kase;
    te_schedule *s;
    te_lowered *low;
    const char *src;
} candidate;

static void check_batch(op_case *cs, candidate *cand, int nb, uint64_t seed, int *done)
{
    const char *srcs[BATCH];
    te__cc_lib *libs[BATCH];
    int res[BATCH];
    char *errs[BATCH];
    for (int b = 0; b < nb; b++) {
        srcs[b] = cand[b].src;
        errs[b] = malloc(4096);
    }
    te__cc_build_many(nb, srcs, NULL, 0, libs, res, errs, 4096);
    /* Generated C is plain C99 for other projects too: pedantic, warning-free, and correct
     * without OpenMP. Checked on a sample, compiled without -fopenmp. GCC's
     * -Wmaybe-uninitialized false positive on registers set and read under the same tail
     * guards is silenced, as the standalone emitter does (te__c_unit_opts.standalone). The
     * code is for the host's vectors: -march=native, as the library builds it (without it,
     * GCC rejects a 512-bit vector helper it did not inline at -O1: -Wpsabi). */
    {
        const te__cc_opts strict = {
            NULL,
            "-std=c99 -pedantic -Wall -Wextra -Werror -Wno-maybe-uninitialized -O1 -march=native "
            "-fPIC -shared",
            NULL};
        te__cc_lib *slib = NULL;
        char err[4096];
        if (te__cc_build(srcs[0], &strict, &slib, err, sizeof err) != TE_OK) {
            fprintf(stderr, "seed %llu, %s(%s):\n%s\n", (unsigned long long)seed,
                    cases[cand[0].kase].op, cases[cand[0].kase].params, err);
            fail_msg("generated code is not clean C99");
        }
        te__cc_lib_free(slib);
    }
    for (int b = 0; b < nb; b++) {
        op_case *c = &cs[cand[b].kase];
        if (res[b] != TE_OK) {
            fprintf(stderr, "seed %llu, %s(%s), schedule:\n%s\n%s\n", (unsigned long long)seed,
                    cases[cand[b].kase].op, cases[cand[b].kase].params,
                    te_schedule_trace(cand[b].s), errs[b]);
            fail_msg("generated code did not compile");
        }
        te_packed_fn fn = (te_packed_fn)te__cc_lib_sym(libs[b], "kernel_packed");
        assert_non_null(fn);
        void *args[2 * TE_OP_MAX_IO];
        float *outs[TE_OP_MAX_IO];
        for (int i = 0; i < c->n_in; i++)
            args[i] = c->in_data[i];
        for (int o = 0; o < c->n_out; o++) {
            size_t ne = (size_t)te_tensor_numel(c->out[o]);
            outs[o] = malloc(sizeof(int64_t) * ne); /* room for i64 outputs (argmax) */
            tt_poison_f32(outs[o], 2 * ne);
            args[c->n_in + o] = outs[o];
        }
        assert_int_equal(fn(args), 0);
        for (int o = 0; o < c->n_out; o++) /* integer outputs (indices) compared as floats */
            if (te_tensor_dtype(c->out[o]) == TE_I64)
                for (size_t i = 0, ne = (size_t)te_tensor_numel(c->out[o]); i < ne; i++)
                    outs[o][i] = (float)((int64_t *)outs[o])[i];
        for (int o = 0; o < c->n_out; o++) {
            double err = tt_max_rel_err_f32(outs[o], c->ref[o], (size_t)te_tensor_numel(c->out[o]));
            if (!(err < 1e-5)) {
                fprintf(stderr, "seed %llu, %s(%s): output %d max rel error %g\nschedule:\n%s",
                        (unsigned long long)seed, cases[cand[b].kase].op,
                        cases[cand[b].kase].params, o, err, te_schedule_trace(cand[b].s));
                te_lowered_print(cand[b].low, stderr);
                fprintf(stderr, "source: %s\n", te__cc_lib_source_path(libs[b]));
                fail_msg("random schedule computed a wrong answer");
            }
            free(outs[o]);
        }
        te__cc_lib_free(libs[b]);
        free(errs[b]);
        (*done)++;
    }
}

static void test_random_schedules(void **state)
{
    (void)state;
    uint64_t seed = tt_seed(2026);
    const char *zn = getenv("TESSERA_RANDOM_SCHEDULES");
    int total = zn ? atoi(zn) : 320;
    tt_rng r;
    tt_rng_seed(&r, seed);
    op_case cs[NCASES];
    for (int k = 0; k < NCASES; k++)
        case_init(&cs[k], k, &r);
    te_target tgt = te_target_host();
    candidate cand[BATCH];
    int nb = 0, done = 0, want = 0;
    for (int t = 0; t < total; t++) {
        int k = t % NCASES;
        op_case *c = &cs[k];
        /* Outputs are checked as f32 here; operators with other outputs (argmax's i64 index)
         * have their own tests (test_tuple_reduce_ops). */
        bool f32_only = true;
        for (int o = 0; o < c->n_out; o++)
            f32_only = f32_only && te_tensor_dtype(c->out[o]) == TE_F32;
        if (!f32_only)
            continue;
        te_schedule *s = te_schedule_create(c->ctx, c->n_out, c->out);
        assert_non_null(s);
        rs_schedule(s, c->n_in, c->in, &r);
        te_tensor *args[2 * TE_OP_MAX_IO];
        memcpy(args, c->in, sizeof(te_tensor *) * (size_t)c->n_in);
        memcpy(args + c->n_in, c->out, sizeof(te_tensor *) * (size_t)c->n_out);
        te_lowered *low = te_lower(s, c->n_in + c->n_out, args, "kernel", &tgt);
        const char *src = low ? te_emit_c(c->ctx, low, &tgt) : NULL;
        if (!src) {
            fprintf(stderr, "seed %llu, %s(%s), schedule:\n%s", (unsigned long long)seed,
                    cases[k].op, cases[k].params, te_schedule_trace(s));
            fail_msg("lowering a legal schedule failed: %s", te_ctx_errmsg(c->ctx));
        }
        cand[nb++] = (candidate){k, s, low, src};
        if (nb == BATCH) {
            check_batch(cs, cand, nb, seed, &done);
            nb = 0;
        }
        want++;
    }
    if (nb)
        check_batch(cs, cand, nb, seed, &done);
    printf("checked %d random schedules over %d operator cases (seed %llu)\n", done, NCASES,
           (unsigned long long)seed);
    assert_int_equal(done, want);
    for (int k = 0; k < NCASES; k++)
        case_free(&cs[k]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_schedules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * Helpers for the search-space tests (test_space.c, test_sketch.c, test_trace.c): a workload
 * with random inputs and its reference output, and a checker that builds many traces in one
 * parallel compiler run and compares every kernel's output with the reference.
 */
#ifndef TESSERA_TESTS_SPACE_TESTLIB_H
#define TESSERA_TESTS_SPACE_TESTLIB_H

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backends/c/cc.h"
#include "tessera/autotune.h"
#include "tessera/backend.h"
#include "tessera/ops.h"
#include "testutil.h"

typedef struct tcase {
    const char *label;
    te_ctx *ctx;
    te_tensor *in[TE_OP_MAX_IO], *out[TE_OP_MAX_IO];
    int n_in, n_out;
    void *in_data[TE_OP_MAX_IO];
    double *ref[TE_OP_MAX_IO];
} tcase;

/* Random inputs and the reference outputs of a case whose tensors are set. */
static inline void tcase_fill(tcase *c, tt_rng *r)
{
    for (int i = 0; i < c->n_in; i++) {
        int64_t ne = te_tensor_numel(c->in[i]);
        float *p = malloc(sizeof(float) * (size_t)ne);
        tt_fill_f32(r, p, (size_t)ne);
        c->in_data[i] = p;
    }
    for (int o = 0; o < c->n_out; o++)
        c->ref[o] = malloc(sizeof(double) * (size_t)te_tensor_numel(c->out[o]));
    if (te_reference_eval(c->ctx, c->n_in, c->in, (const void *const *)c->in_data, c->n_out, c->out,
                          c->ref))
        fail_msg("reference for %s: %s", c->label, te_ctx_errmsg(c->ctx));
}

static inline void tcase_op(tcase *c, const char *op, const char *params, tt_rng *r)
{
    memset(c, 0, sizeof *c);
    c->label = op;
    c->ctx = te_ctx_create();
    if (te_op_build(c->ctx, op, params, c->in, &c->n_in, c->out, &c->n_out))
        fail_msg("building %s(%s): %s", op, params, te_ctx_errmsg(c->ctx));
    tcase_fill(c, r);
}

static inline void tcase_free(tcase *c)
{
    for (int i = 0; i < c->n_in; i++)
        free(c->in_data[i]);
    for (int o = 0; o < c->n_out; o++)
        free(c->ref[o]);
    te_ctx_free(c->ctx);
}

static inline void tcase_args(const tcase *c, te_tensor **args)
{
    memcpy(args, c->in, sizeof(te_tensor *) * (size_t)c->n_in);
    memcpy(args + c->n_in, c->out, sizeof(te_tensor *) * (size_t)c->n_out);
}

/* Instantiates, lowers, emits and compiles every trace (one parallel compiler run), runs each
 * kernel on the case's inputs and fails, printing the trace, when an output differs from the
 * reference by more than tol (relative). */
static inline void check_traces(tcase *c, te_space *sp, int n, const char *const *traces,
                                double tol)
{
    te_target tgt = te_target_host();
    const char **srcs = calloc((size_t)n, sizeof *srcs);
    te__cc_lib **libs = calloc((size_t)n, sizeof *libs);
    int *res = calloc((size_t)n, sizeof *res);
    char **errs = calloc((size_t)n, sizeof *errs);
    te_tensor *args[2 * TE_OP_MAX_IO];
    tcase_args(c, args);
    for (int b = 0; b < n; b++) {
        te_schedule *s = te_space_instantiate(sp, traces[b]);
        if (!s)
            fail_msg("%s: trace did not apply: %s\n%s", c->label, te_ctx_errmsg(c->ctx), traces[b]);
        te_lowered *low = te_lower(s, c->n_in + c->n_out, args, "kernel", &tgt);
        srcs[b] = low ? te_emit_c(c->ctx, low, &tgt) : NULL;
        if (!srcs[b])
            fail_msg("%s: lowering failed: %s\n%s", c->label, te_ctx_errmsg(c->ctx), traces[b]);
        errs[b] = malloc(4096);
    }
    /* -O1: these kernels are checked, not timed, and compile several times faster. */
    te__cc_opts opts = {
        NULL,
        getenv("TESSERA_CFLAGS") ? NULL : "-O1 -march=native -fPIC -shared -fopenmp -std=gnu11",
        NULL};
    te__cc_build_many(n, srcs, &opts, 0, libs, res, errs, 4096);
    for (int b = 0; b < n; b++) {
        if (res[b] != TE_OK)
            fail_msg("%s: generated code did not compile:\n%s\n%s", c->label, traces[b], errs[b]);
        te_packed_fn fn = (te_packed_fn)te__cc_lib_sym(libs[b], "kernel_packed");
        assert_non_null(fn);
        void *a[2 * TE_OP_MAX_IO];
        float *outs[TE_OP_MAX_IO];
        for (int i = 0; i < c->n_in; i++)
            a[i] = c->in_data[i];
        for (int o = 0; o < c->n_out; o++) {
            size_t ne = (size_t)te_tensor_numel(c->out[o]);
            outs[o] = malloc(sizeof(float) * ne);
            tt_poison_f32(outs[o], ne);
            a[c->n_in + o] = outs[o];
        }
        assert_int_equal(fn(a), 0);
        for (int o = 0; o < c->n_out; o++) {
            double err = tt_max_rel_err_f32(outs[o], c->ref[o], (size_t)te_tensor_numel(c->out[o]));
            if (!(err < tol))
                fail_msg("%s: output %d max rel error %g (source %s)\ntrace:\n%s", c->label, o, err,
                         te__cc_lib_source_path(libs[b]), traces[b]);
            free(outs[o]);
        }
        te__cc_lib_free(libs[b]);
        free(errs[b]);
    }
    free(srcs);
    free(libs);
    free(res);
    free(errs);
}

/* Whether `trace` has a line starting with `prefix`. */
static inline int trace_has(const char *trace, const char *prefix)
{
    size_t n = strlen(prefix);
    for (const char *p = trace; p && *p;) {
        if (!strncmp(p, prefix, n))
            return 1;
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return 0;
}

#endif

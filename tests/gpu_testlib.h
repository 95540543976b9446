/*
 * Helpers for the GPU pass tests (header-only, static functions): building thread loops and
 * barriers by hand, and lowering a real schedule up to (not including) one pass of the
 * pipeline so that a test can run that pass by itself on what the pipeline would give it.
 */
#ifndef TESSERA_TESTS_GPU_TESTLIB_H
#define TESSERA_TESTS_GPU_TESTLIB_H

#include <string.h>

#include "passes_testlib.h"
#include "tessera/backend.h"
#include "testutil.h"

/* A loop bound to a GPU index: for (var, 0, extent) bound to tag. */
static PT_UNUSED te_stmt *gt_bound(te_ctx *c, te_expr *var, int64_t extent, te_thread_tag tag,
                                   te_stmt *body)
{
    te_stmt *s = te__for(c, var, te_int(c, 0), te_int(c, extent), TE_FOR_THREAD, body);
    if (s)
        s->u.loop.thread_tag = tag;
    return s;
}

static PT_UNUSED te_stmt *gt_barrier(te_ctx *c)
{
    te_stmt *s = te__alloc(c, sizeof *s);
    if (s)
        s->kind = TE_S_BARRIER;
    return s;
}

/* Number of statements of kind k in s. */
static PT_UNUSED bool gt_count_fn(const te_stmt *s, void *user)
{
    int *n = user;
    if (s->kind == (te_stmt_kind)n[0])
        n[1]++;
    return true;
}

static PT_UNUSED int gt_count_kind(const te_stmt *s, te_stmt_kind k)
{
    int n[2] = {(int)k, 0};
    te__stmt_visit(s, gt_count_fn, NULL, n);
    return n[1];
}

/* What the pipeline hands a pass: its context and its input statement. */
typedef struct gt_lowering {
    te__pass_ctx pc;
    te_stmt *s;
} gt_lowering;

static PT_UNUSED bool gt_applies(te__pass_when w, bool gpu, bool cuda)
{
    switch (w) {
    case TE_PASS_ALWAYS:
        return true;
    case TE_PASS_GPU:
        return gpu;
    case TE_PASS_CUDA:
        return cuda;
    case TE_PASS_C:
        return !cuda;
    case TE_PASS_GPU_ON_C:
        return gpu && !cuda;
    }
    return false;
}

/* Runs the pipeline of te_lower on schedule s for target *tgt (which must outlive the result)
 * up to the first pass named `stop` (not run), and returns the context and statement that pass
 * would get. stop NULL runs the whole pipeline. Fails the test when a pass before it fails. */
static PT_UNUSED gt_lowering gt_lower_until(te_schedule *s, int n_args, te_tensor *const *args,
                                            const te_target *tgt, const char *stop)
{
    te_ctx *c = te_schedule_ctx(s);
    te_buf **bufs = te__alloc(c, sizeof(te_buf *) * (size_t)n_args);
    assert_non_null(bufs);
    for (int a = 0; a < n_args; a++) {
        bufs[a] = te__buf_new(c, args[a]->name, args[a]->dtype, args[a]->ndim, args[a]->shape,
                              TE_SCOPE_GLOBAL);
        assert_non_null(bufs[a]);
        bufs[a]->arg_index = a;
        bufs[a]->tensor = args[a];
    }
    gt_lowering L = {{c, s, tgt, n_args, args, bufs, "k"}, NULL};
    bool cuda = tgt->backend == TE_BACKEND_CUDA, gpu = false, found = stop == NULL;
    for (int i = 0; i < te__pipeline_n; i++) {
        const te__pass *p = &te__pipeline[i];
        if (stop && strcmp(p->name, stop) == 0) {
            found = true;
            break;
        }
        if (i > 0 && !gt_applies(p->when, gpu, cuda))
            continue;
        L.s = p->run(&L.pc, L.s);
        if (!L.s)
            fail_msg("pass '%s' failed: %s", p->name, te_ctx_errmsg(c));
        if (i == 0)
            gpu = te__has_thread_loops(L.s);
    }
    assert_true(found);
    return L;
}

#ifdef cmocka_unit_test
/* Builds schedule s of C = A B (A [M, K], B [K, N], f32) for the host C target (GPU code run on
 * the CPU), runs it on random A and B (seed) with C poisoned first, and returns the largest
 * relative error against te_reference_eval. A failed build or run fails the test. (Defined where
 * cmocka.h comes before this header.) */
static PT_UNUSED double gt_matmul_cpu_error(te_ctx *ctx, te_schedule *s, te_tensor *A, te_tensor *B,
                                            te_tensor *C, uint64_t seed)
{
    te_target host = te_target_host();
    te_module *mod = NULL;
    te_tensor *args[] = {A, B, C};
    if (te_build(s, 3, args, "gt_mm", &host, &mod) != TE_OK)
        fail_msg("build: %s", te_ctx_errmsg(ctx));
    size_t na = (size_t)te_tensor_numel(A), nb = (size_t)te_tensor_numel(B),
           nc = (size_t)te_tensor_numel(C);
    float *a = malloc(na * sizeof(float)), *b = malloc(nb * sizeof(float)),
          *c = malloc(nc * sizeof(float));
    double *ref = malloc(nc * sizeof(double));
    tt_rng r;
    tt_rng_seed(&r, tt_seed(seed));
    tt_fill_f32(&r, a, na);
    tt_fill_f32(&r, b, nb);
    tt_poison_f32(c, nc);
    assert_int_equal(te_module_run(mod, (void *[]){a, b, c}), TE_OK);
    assert_int_equal(
        te_reference_eval(ctx, 2, args, (const void *const[]){a, b}, 1, &C, (double *[]){ref}),
        TE_OK);
    double err = tt_max_rel_err_f32(c, ref, nc);
    te_module_free(mod);
    free(a);
    free(b);
    free(c);
    free(ref);
    return err;
}
#endif

#endif

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

#endif

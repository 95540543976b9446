/*
 * autotune/templates_cuda.c: the GPU schedule templates of backends/cuda/templates.c as tuning
 * templates for a CUDA target.
 *
 * A configuration is a te_cuda_knobs: the knobs are the template's own list
 * (te_cuda_knob_space: block and register tiles, the reduction step, copy vector width,
 * shared-memory padding, double buffering, unrolling for the matmul family; threads per block
 * for row operations; threads and vector width for elementwise operators), and the schedule is
 * what te_cuda_schedule_* makes of it. The templates call only public primitives, so the
 * configuration leaves the space as a trace like any other and replays without this file.
 * A combination the template refuses (a register tile that does not divide the block tile,
 * more than 1024 threads) or the target cannot run (lowering's GPU check: shared memory and
 * threads per block) is an invalid draw: sampling draws again, so every candidate the space
 * proposes lowers for the target.
 *
 * The CPU templates (autotune/templates.c) stay the ones for C targets; attention handles both
 * targets in its own template (autotune/templates_attention.c).
 */
#include <string.h>

#include "autotune/space_impl.h"
#include "tessera/cuda.h"

/* The knobs of the configuration being generated. */
static te_cuda_knobs knobs_of(te__gen *g, const char *tmpl)
{
    te_cuda_knobs k = te_cuda_knobs_default(tmpl);
    for (int i = 0; i < g->sp->nknobs; i++)
        (void)te_cuda_knobs_set(&k, g->sp->knobs[i].name, (int)te__knob_val(g, i));
    return k;
}

static int cuda_init(te_space *sp)
{
    int n_out = 0;
    const char *tmpl = te_cuda_template_for(sp->op, &n_out);
    if (!tmpl || sp->n_out != n_out || sp->target.backend != TE_BACKEND_CUDA)
        return TE_ERR_UNSUPPORTED;
    int n = 0;
    const te_cuda_knob_def *defs = te_cuda_knob_space(tmpl, &n);
    if (!defs || n > TE__MAX_KNOBS)
        return TE_ERR_UNSUPPORTED;
    for (int i = 0; i < n; i++) {
        int64_t v[TE__MAX_KVALS];
        int nv = defs[i].n < TE__MAX_KVALS ? defs[i].n : TE__MAX_KVALS;
        for (int j = 0; j < nv; j++)
            v[j] = defs[i].values[j];
        te__knob_add(sp, defs[i].name, nv, v);
    }
    /* The template must take the expression at all: its default configuration. */
    te_ctx *scratch = te_ctx_create_child(sp->ctx);
    te_schedule *s = scratch ? te_schedule_create(scratch, sp->n_out, sp->outs) : NULL;
    te_cuda_knobs k = te_cuda_knobs_default(tmpl);
    int rc = s ? te_cuda_schedule_op(s, sp->op, sp->n_out, sp->outs, &k) : TE_ERR_NOMEM;
    if (rc != TE_OK && scratch)
        te_ctx_set_error(sp->ctx, rc, "the CUDA '%s' template does not take this expression: %s",
                         tmpl, te_ctx_errmsg(scratch));
    te_ctx_free(scratch);
    return rc == TE_OK ? TE_OK : TE_ERR_UNSUPPORTED;
}

static int cuda_apply(te__gen *g)
{
    const char *tmpl = te_cuda_template_for(g->sp->op, NULL);
    if (!tmpl)
        return te__gen_fail(g, TE_ERR_UNSUPPORTED);
    te_cuda_knobs k = knobs_of(g, tmpl);
    int rc = te_cuda_schedule_op(g->s, g->sp->op, g->sp->n_out, g->sp->outs, &k);
    if (rc != TE_OK)
        return te__gen_fail(g, rc);
    /* The resource check: a configuration the target cannot run (shared memory or threads per
     * block over its limits, lowering's GPU check) is an invalid draw, never a candidate. */
    return te__gen_lowers(g);
}

const te__template te__t_cuda = {"cuda", cuda_init, cuda_apply, true};

const te__template *te__cuda_template_for(const char *op)
{
    return te_cuda_template_for(op, NULL) ? &te__t_cuda : NULL;
}

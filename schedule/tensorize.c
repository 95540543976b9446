/*
 * schedule/tensorize.c: the registry of tensor intrinsics, the matcher that proves a loop nest
 * computes what an intrinsic describes, and the te_tensorize primitive (tessera/tensorize.h).
 * Lowering (schedule/lower.c) turns a tensorized nest into a TE_S_INTRIN statement.
 */
#include <ctype.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schedule/lower_impl.h"
#include "schedule/tensorize_impl.h"
#include "te/arith.h"

/* ---- Registry -------------------------------------------------------------------------- */

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static te_ctx *reg_ctx;
static te_tensor_intrin **reg_v;
static int reg_n, reg_cap;
static bool reg_builtins_done;
static _Thread_local char reg_err[256];

static bool c_ident(const char *s)
{
    if (!s || !*s || !(isalpha((unsigned char)*s) || *s == '_'))
        return false;
    for (; *s; s++)
        if (!(isalnum((unsigned char)*s) || *s == '_'))
            return false;
    return true;
}

static void *fail(const char **err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void *fail(const char **err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reg_err, sizeof reg_err, fmt, ap);
    va_end(ap);
    if (err)
        *err = reg_err;
    return NULL;
}

static te_tensor_intrin *find_locked(const char *name)
{
    for (int i = 0; i < reg_n; i++)
        if (!strcmp(reg_v[i]->name, name))
            return reg_v[i];
    return NULL;
}

/* te_tensor_intrin_register with the lock held. */
static const te_tensor_intrin *register_locked(const te_tensor_intrin_desc *d, const char **err)
{
    if (!d || !c_ident(d->name))
        return fail(err, "tensor intrinsic: the name must be a C identifier");
    if (find_locked(d->name))
        return fail(err, "tensor intrinsic '%s' is already registered", d->name);
    if (!d->describe)
        return fail(err, "tensor intrinsic '%s': no describe callback", d->name);
    if (d->backend != TE_BACKEND_C && d->backend != TE_BACKEND_CUDA)
        return fail(err, "tensor intrinsic '%s': unknown backend", d->name);
    if (!d->c_update || !*d->c_update)
        return fail(err, "tensor intrinsic '%s': no implementation (c_update)", d->name);
    if (!reg_ctx && !(reg_ctx = te_ctx_create()))
        return fail(err, "out of memory");
    te_tensor *ins[TZ_MAX_OPS] = {0}, *out = NULL;
    int n_in = d->describe(reg_ctx, d->user, ins, &out);
    if (n_in < 0)
        return fail(err, "tensor intrinsic '%s': describe failed: %s", d->name,
                    te_ctx_errmsg(reg_ctx));
    if (n_in < 1 || n_in > TZ_MAX_OPS - 1 || !out || out->kind != TE_T_COMPUTE || out->tuple_n)
        return fail(err,
                    "tensor intrinsic '%s': the description must be one compute over 1 to %d "
                    "placeholders",
                    d->name, TZ_MAX_OPS - 1);
    te_tensor_intrin *in = te__alloc(reg_ctx, sizeof *in);
    if (!in)
        return fail(err, "out of memory");
    memset(in, 0, sizeof *in);
    in->ops[0] = out;
    for (int i = 0; i < n_in; i++) {
        if (!ins[i] || ins[i]->kind != TE_T_PLACEHOLDER || !c_ident(ins[i]->name))
            return fail(err,
                        "tensor intrinsic '%s': input %d is not a placeholder with a C-identifier "
                        "name",
                        d->name, i);
        for (int j = 0; j < i; j++)
            if (ins[j] == ins[i] || !strcmp(ins[j]->name, ins[i]->name))
                return fail(err, "tensor intrinsic '%s': input '%s' is given twice", d->name,
                            ins[i]->name);
        if (!te__expr_reads(out->body, ins[i]))
            return fail(err, "tensor intrinsic '%s': the description does not read '%s'", d->name,
                        ins[i]->name);
        in->ops[1 + i] = ins[i];
    }
    if (!c_ident(out->name))
        return fail(err, "tensor intrinsic '%s': the output's name must be a C identifier",
                    d->name);
    in->n_in = n_in;
    in->nd = out->ndim;
    for (int a = 0; a < out->ndim; a++) {
        in->ext[a] = out->shape[a];
        in->var[a] = out->axes[a];
    }
    const te_expr *b = out->body;
    if (b->kind == TE_E_REDUCE) {
        if (b->u.red.rkind != TE_RSUM || b->u.red.custom || b->u.red.nsrc)
            return fail(err, "tensor intrinsic '%s': only sums are supported as reductions",
                        d->name);
        in->nr = b->u.red.n;
        for (int r = 0; r < in->nr; r++) {
            in->var[in->nd + r] = b->u.red.axes[r];
            in->ext[in->nd + r] = b->u.red.axes[r]->u.var.extent;
        }
    }
    in->var_axis = d->var_axis;
    if (d->var_axis < -1 || d->var_axis >= in->nr)
        return fail(err, "tensor intrinsic '%s': var_axis %d is not one of its %d reduction axes",
                    d->name, d->var_axis, in->nr);
    bool all_zero = true;
    for (int o = 0; o <= n_in; o++)
        all_zero &= d->nfree[o] == 0;
    for (int o = 0; o <= n_in; o++) {
        int r = in->ops[o]->ndim;
        in->nfree[o] = all_zero ? (r > 1 ? r - 1 : 0) : d->nfree[o];
        if (in->nfree[o] < 0 || in->nfree[o] > r)
            return fail(err, "tensor intrinsic '%s': nfree[%d] = %d for a rank-%d operand", d->name,
                        o, d->nfree[o], r);
    }
    in->name = te__strdup(reg_ctx, d->name);
    in->features = te__strdup(reg_ctx, d->features ? d->features : "");
    in->doc = te__strdup(reg_ctx, d->doc ? d->doc : "");
    in->c_update = te__strdup(reg_ctx, d->c_update);
    in->c_overwrite = d->c_overwrite ? te__strdup(reg_ctx, d->c_overwrite) : NULL;
    in->c_prelude = d->c_prelude ? te__strdup(reg_ctx, d->c_prelude) : NULL;
    in->backend = d->backend;
    in->out = out;
    if (!in->name || !in->features || !in->doc || !in->c_update)
        return fail(err, "out of memory");
    if (reg_n == reg_cap) {
        int cap = reg_cap ? 2 * reg_cap : 32;
        te_tensor_intrin **v = realloc(reg_v, sizeof *v * (size_t)cap);
        if (!v)
            return fail(err, "out of memory");
        reg_v = v, reg_cap = cap;
    }
    reg_v[reg_n++] = in;
    return in;
}

static void ensure_builtins_locked(void)
{
    if (reg_builtins_done)
        return;
    reg_builtins_done = true;
    te__tz_register_builtins(register_locked);
}

const te_tensor_intrin *te_tensor_intrin_register(const te_tensor_intrin_desc *d, const char **err)
{
    pthread_mutex_lock(&reg_mu);
    ensure_builtins_locked();
    const te_tensor_intrin *r = register_locked(d, err);
    pthread_mutex_unlock(&reg_mu);
    return r;
}

const te_tensor_intrin *te_tensor_intrin_find(const char *name)
{
    if (!name)
        return NULL;
    pthread_mutex_lock(&reg_mu);
    ensure_builtins_locked();
    const te_tensor_intrin *r = find_locked(name);
    pthread_mutex_unlock(&reg_mu);
    return r;
}

int te_tensor_intrin_count(void)
{
    pthread_mutex_lock(&reg_mu);
    ensure_builtins_locked();
    int n = reg_n;
    pthread_mutex_unlock(&reg_mu);
    return n;
}

const te_tensor_intrin *te_tensor_intrin_at(int i)
{
    pthread_mutex_lock(&reg_mu);
    ensure_builtins_locked();
    const te_tensor_intrin *r = i >= 0 && i < reg_n ? reg_v[i] : NULL;
    pthread_mutex_unlock(&reg_mu);
    return r;
}

const char *te_tensor_intrin_name(const te_tensor_intrin *in) { return in ? in->name : NULL; }
const char *te_tensor_intrin_features(const te_tensor_intrin *in)
{
    return in ? in->features : NULL;
}
const char *te_tensor_intrin_doc(const te_tensor_intrin *in) { return in ? in->doc : NULL; }
te_backend_kind te_tensor_intrin_backend(const te_tensor_intrin *in)
{
    return in ? in->backend : TE_BACKEND_C;
}
te_tensor *te_tensor_intrin_output(const te_tensor_intrin *in) { return in ? in->out : NULL; }
int te_tensor_intrin_var_axis(const te_tensor_intrin *in) { return in ? in->var_axis : -1; }
int te_tensor_intrin_nreduce(const te_tensor_intrin *in) { return in ? in->nr : 0; }

/* Whether the comma-separated list `have` contains feature f (length len). */
static bool has_feature(const char *have, const char *f, size_t len)
{
    for (const char *p = have; p && *p;) {
        const char *e = strchr(p, ',');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == len && !strncmp(p, f, len))
            return true;
        p = e ? e + 1 : NULL;
    }
    return false;
}

int te_tensor_intrin_supported(const te_tensor_intrin *in, const te_target *t)
{
    if (!in || !t || t->backend != in->backend)
        return 0;
    for (const char *p = in->features; *p;) {
        const char *e = strchr(p, ',');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        /* CUDA targets: "sm_80" means compute capability 8.0 or newer. */
        if (t->backend == TE_BACKEND_CUDA && l > 3 && !strncmp(p, "sm_", 3)) {
            if (t->sm < atoi(p + 3))
                return 0;
        } else if (l && !has_feature(t->isa, p, l))
            return 0;
        p = e ? e + 1 : p + l;
    }
    return 1;
}

/* ---- Matching -------------------------------------------------------------------------- */

typedef struct mctx {
    const te_stage *st;
    const te_tensor_intrin *in;
    int nmap;                             /* stage root variables with a loop in the nest */
    const te_expr *svar[2 * TE_MAX_DIMS]; /* ... and the description variable each maps to */
    const te_expr *dvar[2 * TE_MAX_DIMS];
    int64_t sext[2 * TE_MAX_DIMS]; /* the nest's extent of each mapped variable */
    /* Each mapped root variable v is base * extent + leaf (the splits above the nest's loop
     * divide): lvar the leaf, svar's substitution `split`, and the ranges of leaf and base, so
     * that blocked layouts (v / 32, v % 32) simplify to linear forms in the leaf. */
    te_expr *lvar[2 * TE_MAX_DIMS], *split[2 * TE_MAX_DIMS];
    te__range_map ranges;
    te__tz_match *m;
    const te_expr *first_read[TZ_MAX_OPS]; /* the stage's first read of each input operand */
    char *why;
    size_t n;
} mctx;

static int refuse(mctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int refuse(mctx *c, const char *fmt, ...)
{
    if (c->why && c->n) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->why, c->n, fmt, ap);
        va_end(ap);
    }
    return TE_ERR_SCHEDULE;
}

/* Coefficient of variable v in the linear index e: false when e is not linear in v. */
static bool coef_of(te_ctx *ctx, te_expr *e, const te_expr *v, int64_t *k)
{
    te_expr *zero = te_int(ctx, 0);
    const te_expr *from[1] = {v};
    te_expr *to[1] = {zero};
    te__subst map = {1, from, to};
    te_expr *e0 = zero ? te__substitute(ctx, e, &map) : NULL;
    int64_t c;
    return e0 && te__arith_linear_in_var(e, e0, v, k, &c) && c == 0;
}

/* Checks one read: the stage reads tensor T at sidx (q indices), the description reads its
 * operand X at didx (r indices). */
static int match_access(mctx *c, te_ctx *sctx, int o, const te_tensor *T, int q,
                        te_expr *const *sidx, const te_tensor *X, int r, te_expr *const *didx)
{
    te_ctx *dctx = te__tensor_ctx(X);
    if (q < r)
        return refuse(c, "'%s' has rank %d, fewer than the description's '%s' (%d)", T->name, q,
                      X->name, r);
    for (int d = 0; d < r; d++) {
        int64_t zero[2 * TE_MAX_DIMS] = {0}, v0;
        if (!te__arith_eval_int(didx[d], c->in->nd + c->in->nr, c->in->var, zero, &v0) || v0)
            return refuse(c, "intrinsic '%s': its access to '%s' does not start at the origin",
                          c->in->name, X->name);
    }
    te__subst split = {c->nmap, c->svar, c->split};
    for (int j = 0; j < q; j++) {
        int d = j - (q - r); /* description dimension, < 0 for leading stage dimensions */
        te_expr *fj = te__simplify_expr(sctx, te__substitute(sctx, sidx[j], &split), &c->ranges);
        if (!fj)
            return refuse(c, "out of memory");
        int64_t mul = 0; /* a free dimension may move a whole multiple of the described step */
        for (int a = 0; a < c->nmap; a++) {
            int64_t ks, kd = 0;
            if (!coef_of(sctx, fj, c->lvar[a], &ks))
                return refuse(
                    c, "'%s' is indexed non-linearly in dimension %d along loop variable '%s'",
                    T->name, j, c->svar[a]->u.var.name);
            if (d >= 0 && !coef_of(dctx, didx[d], c->dvar[a], &kd))
                return refuse(c, "intrinsic '%s': non-linear access to '%s'", c->in->name, X->name);
            bool free_dim = d >= 0 && d < c->in->nfree[o];
            if (free_dim && kd != 0 && ks % kd == 0 && ks / kd >= 1 && (!mul || mul == ks / kd)) {
                mul = ks / kd;
                continue;
            }
            if (ks != kd)
                return refuse(c,
                              "'%s' moves by %lld along '%s' in dimension %d where the "
                              "intrinsic's '%s' moves by %lld%s",
                              T->name, (long long)ks, c->svar[a]->u.var.name, j, X->name,
                              (long long)kd,
                              free_dim && kd ? " (or a whole multiple of it, the same for every "
                                               "loop)"
                                             : "");
        }
        if (d >= 0)
            c->m->smul[o][d] = mul ? mul : 1;
    }
    return TE_OK;
}

static int match_expr(mctx *c, te_ctx *sctx, const te_expr *s, const te_expr *d)
{
    if (s->kind != d->kind || s->dtype != d->dtype || s->lanes != d->lanes)
        return refuse(c, "the stage's body differs from intrinsic '%s' (%s where it has %s)",
                      c->in->name, te_dtype_str(s->dtype), te_dtype_str(d->dtype));
    switch (s->kind) {
    case TE_E_INT:
        return s->u.i == d->u.i ? TE_OK
                                : refuse(c, "a constant differs from intrinsic '%s'", c->in->name);
    case TE_E_FLOAT:
        return s->u.f == d->u.f ? TE_OK
                                : refuse(c, "a constant differs from intrinsic '%s'", c->in->name);
    case TE_E_VAR:
        return refuse(c,
                      "the stage's value uses loop index '%s' (intrinsics compute from tensor "
                      "elements only)",
                      s->u.var.name);
    case TE_E_BINARY:
        if (s->u.bin.op != d->u.bin.op)
            return refuse(c, "an operation differs from intrinsic '%s'", c->in->name);
        if (match_expr(c, sctx, s->u.bin.a, d->u.bin.a))
            return TE_ERR_SCHEDULE;
        return match_expr(c, sctx, s->u.bin.b, d->u.bin.b);
    case TE_E_NOT:
    case TE_E_NEG:
    case TE_E_CAST:
        return match_expr(c, sctx, s->u.un.a, d->u.un.a);
    case TE_E_SELECT:
    case TE_E_IF:
        if (match_expr(c, sctx, s->u.sel.c, d->u.sel.c) ||
            match_expr(c, sctx, s->u.sel.t, d->u.sel.t))
            return TE_ERR_SCHEDULE;
        return match_expr(c, sctx, s->u.sel.f, d->u.sel.f);
    case TE_E_CALL:
        if (s->u.call.fn != d->u.call.fn || s->u.call.n != d->u.call.n)
            return refuse(c, "a function call differs from intrinsic '%s'", c->in->name);
        for (int i = 0; i < s->u.call.n; i++)
            if (match_expr(c, sctx, s->u.call.args[i], d->u.call.args[i]))
                return TE_ERR_SCHEDULE;
        return TE_OK;
    case TE_E_READ: {
        int o = 1;
        while (o <= c->in->n_in && c->in->ops[o] != d->u.read.t)
            o++;
        if (o > c->in->n_in)
            return refuse(c, "intrinsic '%s' reads a tensor it does not declare", c->in->name);
        te_tensor *T = s->u.read.t;
        if (c->m->ops[o] && c->m->ops[o] != T)
            return refuse(c, "intrinsic '%s' reads '%s' where the stage reads both '%s' and '%s'",
                          c->in->name, d->u.read.t->name, c->m->ops[o]->name, T->name);
        for (int p = 0; p <= c->in->n_in; p++)
            if (p != o && c->m->ops[p] == T)
                return refuse(c, "'%s' would be two operands of intrinsic '%s'", T->name,
                              c->in->name);
        if (c->first_read[o]) {
            const te_expr *f = c->first_read[o];
            for (int j = 0; j < f->u.read.n; j++)
                if (!te__expr_equal(f->u.read.idx[j], s->u.read.idx[j]))
                    return refuse(c, "'%s' is read at two different places", T->name);
        }
        if (match_access(c, sctx, o, T, s->u.read.n, s->u.read.idx, d->u.read.t, d->u.read.n,
                         d->u.read.idx))
            return TE_ERR_SCHEDULE;
        c->m->ops[o] = T;
        c->first_read[o] = s;
        return TE_OK;
    }
    case TE_E_REDUCE:
        if (s->u.red.rkind != TE_RSUM || s->u.red.custom || s->u.red.nsrc)
            return refuse(c, "stage '%s' is not a sum", c->st->tensor->name);
        return match_expr(c, sctx, s->u.red.src, d->u.red.src);
    default:
        return refuse(c, "the stage's body has an expression intrinsics cannot match");
    }
}

/* The root iterator leaf x of stage st is the innermost piece of (x itself, or the chain of
 * split inners above it), or NULL with a reason. */
static te_iter *root_of(mctx *c, const te_stage *st, te_iter *x, const int64_t *ext)
{
    te_iter *it = x;
    for (;;) {
        bool root = false;
        for (int d = 0; d < st->ndim; d++)
            root |= st->axes[d] == it;
        for (int r = 0; r < st->nred; r++)
            root |= st->raxes[r] == it;
        if (root)
            return it;
        te_rel *up = NULL;
        for (int k = 0; k < st->rels.n; k++) {
            te_rel *r = st->rels.v[k];
            if (r->kind == TE_REL_FUSE && r->fused == it) {
                refuse(c, "loop '%s' is a fused loop", x->name);
                return NULL;
            }
            if (r->kind == TE_REL_SPLIT && (r->inner == it || r->outer == it))
                up = r;
        }
        if (!up) {
            refuse(c, "loop '%s' has no axis", x->name);
            return NULL;
        }
        if (up->outer == it) {
            refuse(c, "loop '%s' is an outer piece of a split (its stride is not 1)", x->name);
            return NULL;
        }
        int64_t pe = ext ? ext[te__iter_index(st, up->parent)] : up->parent->extent;
        if (pe % up->factor && (ext || st->attach != TE_ATTACH_AT)) {
            refuse(c, "the split of '%s' by %lld leaves a tail (extent %lld)", up->parent->name,
                   (long long)up->factor, (long long)pe);
            return NULL;
        }
        it = up->parent;
    }
}

int te__tz_match_nest(const te_stage *st, const te_expr *body, int kt, const int64_t *ext,
                      const te_tensor_intrin *in, te__tz_match *m, char *why, size_t n)
{
    mctx c = {.st = st, .in = in, .m = m, .why = why, .n = n};
    /* A stage computed at another's loop has its extents from bound inference at lowering:
     * at schedule time its nest's extents are not known yet (lowering checks them). */
    bool known = ext || st->attach != TE_ATTACH_AT;
    memset(m, 0, sizeof *m);
    m->var_extent = -1;
    for (int o = 0; o < TZ_MAX_OPS; o++)
        for (int d = 0; d < TE_MAX_DIMS; d++)
            m->smul[o][d] = 1;
    te_ctx *sctx = st->sched->ctx;
    if (st->ntuple)
        return refuse(&c, "stage '%s' has several outputs", st->tensor->name);
    if (st->attach == TE_ATTACH_INLINE)
        return refuse(&c, "stage '%s' is inlined", st->tensor->name);
    if (st->tensor->dtype != in->out->dtype)
        return refuse(&c, "stage '%s' is %s, intrinsic '%s' computes %s", st->tensor->name,
                      te_dtype_str(st->tensor->dtype), in->name, te_dtype_str(in->out->dtype));
    if ((body->kind == TE_E_REDUCE) != (in->out->body->kind == TE_E_REDUCE))
        return refuse(&c, "stage '%s' %s a reduction and intrinsic '%s' %s", st->tensor->name,
                      body->kind == TE_E_REDUCE ? "is" : "is not", in->name,
                      in->out->body->kind == TE_E_REDUCE ? "is" : "is not");
    /* Each loop of the nest: the innermost piece of one axis, mapped to a description axis. */
    int nl = st->leaves.n, ndata = 0, nred = 0;
    int data_dim[TE_MAX_DIMS], red_idx[TE_MAX_DIMS];
    int64_t data_ext[TE_MAX_DIMS], red_ext[TE_MAX_DIMS];
    bool red_in[TE_MAX_DIMS] = {false};
    for (int k = kt; k < nl; k++) {
        te_iter *x = st->leaves.v[k];
        if (x->ann != TE_ANN_NONE)
            return refuse(&c,
                          "loop '%s' inside the nest is annotated (vectorize, unroll, "
                          "parallel or bind)",
                          x->name);
        te_schedule *s = st->sched;
        for (int i = 0; i < s->stages.n; i++) {
            te_stage *o = s->stages.v[i];
            if (o->attach == TE_ATTACH_AT && o->attach_iter == x)
                return refuse(&c, "stage '%s' is computed at loop '%s' of the nest",
                              o->tensor->name, x->name);
        }
        for (int q = 0; q < st->prefetches.n; q++) {
            te__prefetch *pf = st->prefetches.v[q];
            if (pf->at == x)
                return refuse(&c, "a prefetch is placed at loop '%s' inside the nest", x->name);
        }
        te_iter *root = root_of(&c, st, x, ext);
        if (!root)
            return TE_ERR_SCHEDULE;
        int64_t e = ext ? ext[te__iter_index(st, x)] : x->extent;
        for (int d = 0; d < st->ndim; d++)
            if (st->axes[d] == root) {
                for (int j = 0; j < ndata; j++)
                    if (data_dim[j] == d)
                        return refuse(&c, "axis '%s' has two loops in the nest", root->name);
                data_dim[ndata] = d, data_ext[ndata++] = e;
            }
        for (int r = 0; r < st->nred; r++)
            if (st->raxes[r] == root) {
                if (red_in[r])
                    return refuse(&c, "axis '%s' has two loops in the nest", root->name);
                red_in[r] = true;
                red_idx[nred] = r, red_ext[nred++] = e;
            }
    }
    if (ndata != in->nd || nred != in->nr)
        return refuse(&c,
                      "the nest has %d data-parallel and %d reduction loops; intrinsic '%s' "
                      "has %d and %d",
                      ndata, nred, in->name, in->nd, in->nr);
    /* Data loops, in dimension order, are the stage's last nd dimensions. */
    for (int a = 0; a < ndata; a++)
        for (int b = a + 1; b < ndata; b++)
            if (data_dim[b] < data_dim[a]) {
                int t = data_dim[a];
                int64_t te = data_ext[a];
                data_dim[a] = data_dim[b], data_ext[a] = data_ext[b];
                data_dim[b] = t, data_ext[b] = te;
            }
    for (int a = 0; a < nred; a++)
        for (int b = a + 1; b < nred; b++)
            if (red_idx[b] < red_idx[a]) {
                int t = red_idx[a];
                int64_t te = red_ext[a];
                red_idx[a] = red_idx[b], red_ext[a] = red_ext[b];
                red_idx[b] = t, red_ext[b] = te;
            }
    for (int a = 0; a < ndata; a++) {
        if (data_dim[a] != st->ndim - ndata + a)
            return refuse(&c,
                          "the nest's data-parallel loops must cover the last %d dimensions "
                          "of '%s'",
                          ndata, st->tensor->name);
        if (!known)
            data_ext[a] = in->ext[a];
        if (data_ext[a] != in->ext[a])
            return refuse(&c,
                          "the loop over dimension %d of '%s' has extent %lld; intrinsic "
                          "'%s' needs %lld",
                          data_dim[a], st->tensor->name, (long long)data_ext[a], in->name,
                          (long long)in->ext[a]);
        c.sext[c.nmap] = data_ext[a];
        c.svar[c.nmap] = st->axes[data_dim[a]]->var;
        c.dvar[c.nmap++] = in->var[a];
    }
    for (int r = 0; r < nred; r++) {
        int64_t want = in->ext[in->nd + r];
        if (!known && r != in->var_axis)
            red_ext[r] = want;
        if (r == in->var_axis) {
            if (red_ext[r] % want)
                return refuse(&c,
                              "reduction loop over '%s' has extent %lld, not a multiple of "
                              "%lld (intrinsic '%s')",
                              st->raxes[red_idx[r]]->name, (long long)red_ext[r], (long long)want,
                              in->name);
            m->var_extent = red_ext[r];
        } else if (red_ext[r] != want)
            return refuse(&c, "reduction loop over '%s' has extent %lld; intrinsic '%s' needs %lld",
                          st->raxes[red_idx[r]]->name, (long long)red_ext[r], in->name,
                          (long long)want);
        c.sext[c.nmap] = red_ext[r];
        c.svar[c.nmap] = st->raxes[red_idx[r]]->var;
        c.dvar[c.nmap++] = in->var[in->nd + r];
    }
    for (int a = 0; a < c.nmap; a++) {
        te_expr *base = te_var(sctx, "tz_base", TE_I64);
        c.lvar[a] = te_var(sctx, "tz_leaf", TE_I64);
        c.split[a] = base && c.lvar[a]
                         ? te_add(sctx, te_mul(sctx, base, te_int(sctx, c.sext[a])), c.lvar[a])
                         : NULL;
        if (!c.split[a] || te__ranges_push(sctx, &c.ranges, base, 0, INT32_MAX) ||
            te__ranges_push(sctx, &c.ranges, c.lvar[a], 0, c.sext[a] - 1))
            return refuse(&c, "out of memory");
    }
    bool whole = true;
    for (int k = 0; k < kt; k++)
        whole &= !((te_iter *)st->leaves.v[k])->reduce;
    m->whole_reduction = whole;
    /* The bodies, operand by operand. */
    m->ops[0] = st->tensor;
    if (match_expr(&c, sctx, body, in->out->body))
        return TE_ERR_SCHEDULE;
    for (int o = 1; o <= in->n_in; o++)
        if (!m->ops[o])
            return refuse(&c, "the stage does not read what intrinsic '%s' reads as '%s'", in->name,
                          in->ops[o]->name);
    m->nops = 1 + in->n_in;
    for (int o = 0; o < m->nops; o++)
        m->dim0[o] = m->ops[o]->ndim - in->ops[o]->ndim;
    /* Dense trailing dimensions (checked against tensor shapes; lowering checks buffers). */
    for (int o = known ? 0 : 1; o < m->nops; o++) {
        const te_tensor *X = in->ops[o], *T = m->ops[o];
        for (int d = in->nfree[o] + 1; d < X->ndim; d++)
            if (T->shape[m->dim0[o] + d] != X->shape[d])
                return refuse(&c,
                              "dimension %d of '%s' (extent %lld) must be dense as in "
                              "intrinsic '%s' (extent %lld)",
                              m->dim0[o] + d, T->name, (long long)T->shape[m->dim0[o] + d],
                              in->name, (long long)X->shape[d]);
    }
    return TE_OK;
}

/* ---- The primitive --------------------------------------------------------------------- */

static int check(te_stage *st, te_iter *at, const te_tensor_intrin *in, char *why, size_t n,
                 int *kt)
{
    if (!st || !at || !in) {
        snprintf(why, n, "te_tensorize: NULL argument");
        return TE_ERR_ARG;
    }
    *kt = te__leaf_pos(st, at);
    if (*kt < 0) {
        snprintf(why, n, "te_tensorize: '%s' is not a current loop of stage '%s'", at->name,
                 st->tensor->name);
        return TE_ERR_SCHEDULE;
    }
    if (st->tz) {
        snprintf(why, n, "te_tensorize: stage '%s' is already tensorized (at '%s')",
                 st->tensor->name, st->tz_at->name);
        return TE_ERR_SCHEDULE;
    }
    if (!st->body) {
        snprintf(why, n, "te_tensorize: stage '%s' computes nothing", st->tensor->name);
        return TE_ERR_SCHEDULE;
    }
    te__tz_match m;
    char r[400];
    int rc = te__tz_match_nest(st, st->body, *kt, NULL, in, &m, r, sizeof r);
    if (rc)
        snprintf(why, n, "te_tensorize: stage '%s' at '%s' does not match intrinsic '%s': %s",
                 st->tensor->name, at->name, in->name, r);
    return rc;
}

int te_tensorize_check(te_stage *st, te_iter *at, const te_tensor_intrin *in, char *why, size_t n)
{
    char buf[512];
    int kt;
    int rc = check(st, at, in, buf, sizeof buf, &kt);
    if (why && n)
        snprintf(why, n, "%s", rc ? buf : "");
    return rc;
}

int te_tensorize(te_stage *st, te_iter *at, const te_tensor_intrin *in)
{
    if (!st)
        return TE_ERR_ARG;
    char why[512];
    int kt;
    int rc = check(st, at, in, why, sizeof why, &kt);
    if (rc)
        return TE__SERR(st->sched, rc, "%s", why);
    st->tz_at = at;
    st->tz = in;
    st->touched = true;
    return te__trace_add(st->sched, "tensorize %s %s %s", st->tensor->name, at->name, in->name);
}

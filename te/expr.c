/* Expression constructors: each validates its operands and records a clear error. */
#include <math.h>
#include <string.h>

#include "te/internal.h"

static const char *binop_names[] = {"+",        "-",   "*",   "/",  "%",  "floordiv",
                                    "floormod", "min", "max", "==", "!=", "<",
                                    "<=",       ">",   ">=",  "&&", "||"};

static const char *intrin_names[TE_INTRIN_COUNT] = {"exp",   "log",  "sqrt",    "rsqrt",
                                                    "tanh",  "erf",  "sigmoid", "fabs",
                                                    "floor", "ceil", "pow",     "rint"};

const char *te_intrin_name(te_intrin fn)
{
    return (unsigned)fn < TE_INTRIN_COUNT ? intrin_names[fn] : "?";
}

const char *te__binop_name(te_binop op);
const char *te__binop_name(te_binop op) { return (unsigned)op <= TE_OR ? binop_names[op] : "?"; }

te_expr *te__new_expr(te_ctx *ctx, te_expr_kind kind, te_dtype dtype)
{
    te_expr *e = te__alloc(ctx, sizeof *e);
    if (e) {
        e->kind = kind;
        e->dtype = dtype;
        e->owner = te__ctx_id(ctx);
        e->lanes = 1;
    }
    return e;
}

static bool valid_dtype(te_dtype d) { return (unsigned)d < TE_DTYPE_COUNT; }

te_expr *te_const(te_ctx *ctx, te_dtype dtype, double v)
{
    if (!ctx)
        return NULL;
    if (!valid_dtype(dtype)) {
        te_ctx_set_error(ctx, TE_ERR_ARG, "te_const: invalid dtype %d", (int)dtype);
        return NULL;
    }
    te_expr *e = te__new_expr(ctx, te_dtype_is_float(dtype) ? TE_E_FLOAT : TE_E_INT, dtype);
    if (!e)
        return NULL;
    if (!te_dtype_is_float(dtype) && !(v >= -9.2e18 && v <= 9.2e18)) {
        te_ctx_set_error(ctx, TE_ERR_ARG, "te_const: %g does not fit in %s", v,
                         te_dtype_str(dtype));
        return NULL;
    }
    if (te_dtype_is_float(dtype))
        e->u.f = te_dtype_convert(v, TE_F64, dtype); /* a value of dtype: f16 rounds to f16 */
    else if (dtype == TE_BOOL)
        e->u.i = v != 0;
    else
        e->u.i = (int64_t)v;
    return e;
}

te_expr *te_int(te_ctx *ctx, int64_t v)
{
    if (!ctx)
        return NULL;
    te_expr *e = te__new_expr(ctx, TE_E_INT, TE_I64);
    if (e)
        e->u.i = v;
    return e;
}

te_expr *te_f32(te_ctx *ctx, double v) { return te_const(ctx, TE_F32, v); }

static te_expr *make_var(te_ctx *ctx, const char *name, te_dtype dtype, int64_t extent,
                         te_var_kind vk)
{
    te_expr *e = te__new_expr(ctx, TE_E_VAR, dtype);
    if (!e)
        return NULL;
    e->u.var.name = te__strdup(ctx, name);
    e->u.var.extent = extent;
    e->u.var.vkind = vk;
    e->u.var.id = te__next_id(ctx);
    return e->u.var.name ? e : NULL;
}

static bool valid_name(te_ctx *ctx, const char *what, const char *name)
{
    if (!name || !*name) {
        te_ctx_set_error(ctx, TE_ERR_ARG, "%s: a name is required", what);
        return false;
    }
    if (strlen(name) > 64) {
        te_ctx_set_error(ctx, TE_ERR_ARG, "%s: name '%.20s...' is longer than 64 characters", what,
                         name);
        return false;
    }
    return true;
}

static te_expr *make_axis(te_ctx *ctx, const char *fn, const char *name, int64_t extent,
                          te_var_kind vk)
{
    if (!ctx || !valid_name(ctx, fn, name))
        return NULL;
    if (extent <= 0) {
        te_ctx_set_error(ctx, TE_ERR_SHAPE, "%s: axis '%s' has non-positive extent %lld", fn, name,
                         (long long)extent);
        return NULL;
    }
    return make_var(ctx, name, TE_I64, extent, vk);
}

te_expr *te_axis(te_ctx *ctx, const char *name, int64_t extent)
{
    return make_axis(ctx, "te_axis", name, extent, TE_VAR_AXIS);
}

te_expr *te_reduce_axis(te_ctx *ctx, const char *name, int64_t extent)
{
    return make_axis(ctx, "te_reduce_axis", name, extent, TE_VAR_REDUCE);
}

te_expr *te__loop_var(te_ctx *ctx, const char *name, int64_t extent)
{
    return make_var(ctx, name, TE_I64, extent, TE_VAR_LOOP);
}

te_expr *te__prefetch_var(te_ctx *ctx, const char *name, int level)
{
    return make_var(ctx, name, TE_I64, level, TE_VAR_PREFETCH); /* the level in the extent */
}

te_expr *te_var(te_ctx *ctx, const char *name, te_dtype dtype)
{
    if (!ctx || !valid_name(ctx, "te_var", name))
        return NULL;
    if (!valid_dtype(dtype)) {
        te_ctx_set_error(ctx, TE_ERR_ARG, "te_var '%s': invalid dtype %d", name, (int)dtype);
        return NULL;
    }
    return make_var(ctx, name, dtype, 0, TE_VAR_FREE);
}

/* Converts a constant operand to the other operand's dtype, refusing conversions that would
 * change its value (0.5 to an integer). */
static te_expr *retype_const(te_ctx *ctx, te_expr *c, te_dtype to)
{
    if (c->kind == TE_E_FLOAT && !te_dtype_is_float(to) && c->u.f != (double)(int64_t)c->u.f) {
        te_ctx_set_error(ctx, TE_ERR_DTYPE,
                         "constant %g cannot be used as %s without changing "
                         "its value (use te_cast on the other operand)",
                         c->u.f, te_dtype_str(to));
        return NULL;
    }
    return te_const(ctx, to, c->kind == TE_E_INT ? (double)c->u.i : c->u.f);
}

static bool is_const(const te_expr *e) { return e->kind == TE_E_INT || e->kind == TE_E_FLOAT; }

te_expr *te_binary(te_ctx *ctx, te_binop op, te_expr *a, te_expr *b)
{
    if (!ctx || !a || !b)
        return NULL;
    if ((unsigned)op > TE_OR) {
        te_ctx_set_error(ctx, TE_ERR_ARG, "te_binary: invalid operator %d", (int)op);
        return NULL;
    }
    if (a->dtype != b->dtype) {
        if (is_const(b) && a->kind != TE_E_INT)
            b = retype_const(ctx, b, a->dtype);
        else if (is_const(a))
            a = retype_const(ctx, a, b->dtype);
        else if (is_const(b))
            b = retype_const(ctx, b, a->dtype);
        else {
            te_ctx_set_error(ctx, TE_ERR_DTYPE,
                             "dtype mismatch in '%s': left operand is %s, right operand is %s "
                             "(use te_cast)",
                             binop_names[op], te_dtype_str(a->dtype), te_dtype_str(b->dtype));
            return NULL;
        }
        if (!a || !b)
            return NULL;
    }
    if ((op == TE_AND || op == TE_OR) && a->dtype != TE_BOOL) {
        te_ctx_set_error(ctx, TE_ERR_DTYPE, "'%s' needs bool operands, got %s", binop_names[op],
                         te_dtype_str(a->dtype));
        return NULL;
    }
    if ((op == TE_MOD || op == TE_FLOORMOD) && te_dtype_is_float(a->dtype)) {
        te_ctx_set_error(ctx, TE_ERR_DTYPE, "'%s' needs integer operands, got %s", binop_names[op],
                         te_dtype_str(a->dtype));
        return NULL;
    }
    if ((op == TE_DIV || op == TE_MOD || op == TE_FLOORDIV || op == TE_FLOORMOD) &&
        b->kind == TE_E_INT && b->u.i == 0) {
        te_ctx_set_error(ctx, TE_ERR_ARG, "integer division by the constant zero in '%s'",
                         binop_names[op]);
        return NULL;
    }
    te_dtype rt = op >= TE_EQ ? TE_BOOL : a->dtype;
    te_expr *e = te__new_expr(ctx, TE_E_BINARY, rt);
    if (!e)
        return NULL;
    e->u.bin.op = op;
    e->u.bin.a = a;
    e->u.bin.b = b;
    e->lanes = a->lanes > b->lanes ? a->lanes : b->lanes;
    return e;
}

#define BINOP_FN(fname, OP)                                                                        \
    te_expr *fname(te_ctx *ctx, te_expr *a, te_expr *b) { return te_binary(ctx, OP, a, b); }
BINOP_FN(te_add, TE_ADD)
BINOP_FN(te_sub, TE_SUB)
BINOP_FN(te_mul, TE_MUL)
BINOP_FN(te_div, TE_DIV)
BINOP_FN(te_mod, TE_MOD)
BINOP_FN(te_floordiv, TE_FLOORDIV)
BINOP_FN(te_floormod, TE_FLOORMOD)
BINOP_FN(te_min, TE_MIN)
BINOP_FN(te_max, TE_MAX)
BINOP_FN(te_eq, TE_EQ)
BINOP_FN(te_ne, TE_NE)
BINOP_FN(te_lt, TE_LT)
BINOP_FN(te_le, TE_LE)
BINOP_FN(te_gt, TE_GT)
BINOP_FN(te_ge, TE_GE)
BINOP_FN(te_and, TE_AND)
BINOP_FN(te_or, TE_OR)
#undef BINOP_FN

te_expr *te_not(te_ctx *ctx, te_expr *a)
{
    if (!ctx || !a)
        return NULL;
    if (a->dtype != TE_BOOL) {
        te_ctx_set_error(ctx, TE_ERR_DTYPE, "te_not needs a bool operand, got %s",
                         te_dtype_str(a->dtype));
        return NULL;
    }
    te_expr *e = te__new_expr(ctx, TE_E_NOT, TE_BOOL);
    if (e) {
        e->u.un.a = a;
        e->lanes = a->lanes;
    }
    return e;
}

te_expr *te_neg(te_ctx *ctx, te_expr *a)
{
    if (!ctx || !a)
        return NULL;
    if (a->dtype == TE_BOOL || a->dtype == TE_U8) {
        te_ctx_set_error(ctx, TE_ERR_DTYPE, "te_neg needs a signed operand, got %s",
                         te_dtype_str(a->dtype));
        return NULL;
    }
    te_expr *e = te__new_expr(ctx, TE_E_NEG, a->dtype);
    if (e) {
        e->u.un.a = a;
        e->lanes = a->lanes;
    }
    return e;
}

static te_expr *make_select(te_ctx *ctx, te_expr_kind kind, const char *fn, te_expr *c, te_expr *t,
                            te_expr *f)
{
    if (!ctx || !c || !t || !f)
        return NULL;
    if (c->dtype != TE_BOOL) {
        te_ctx_set_error(ctx, TE_ERR_DTYPE, "%s: condition must be bool, got %s", fn,
                         te_dtype_str(c->dtype));
        return NULL;
    }
    if (t->dtype != f->dtype) {
        if (is_const(f))
            f = retype_const(ctx, f, t->dtype);
        else if (is_const(t))
            t = retype_const(ctx, t, f->dtype);
        else {
            te_ctx_set_error(ctx, TE_ERR_DTYPE, "%s: branches have different dtypes %s and %s", fn,
                             te_dtype_str(t->dtype), te_dtype_str(f->dtype));
            return NULL;
        }
        if (!t || !f)
            return NULL;
    }
    te_expr *e = te__new_expr(ctx, kind, t->dtype);
    if (e) {
        e->u.sel.c = c;
        e->u.sel.t = t;
        e->u.sel.f = f;
        e->lanes = t->lanes > c->lanes ? t->lanes : c->lanes;
    }
    return e;
}

te_expr *te_select(te_ctx *ctx, te_expr *cond, te_expr *t, te_expr *f)
{
    return make_select(ctx, TE_E_SELECT, "te_select", cond, t, f);
}

te_expr *te_if_then_else(te_ctx *ctx, te_expr *cond, te_expr *t, te_expr *f)
{
    return make_select(ctx, TE_E_IF, "te_if_then_else", cond, t, f);
}

te_expr *te_cast(te_ctx *ctx, te_dtype dtype, te_expr *a)
{
    if (!ctx || !a)
        return NULL;
    if (!valid_dtype(dtype)) {
        te_ctx_set_error(ctx, TE_ERR_ARG, "te_cast: invalid dtype %d", (int)dtype);
        return NULL;
    }
    if (a->dtype == dtype)
        return a;
    if (is_const(a) && a->lanes == 1 && !(a->kind == TE_E_FLOAT && !te_dtype_is_float(dtype))) {
        /* folded with the cast's rounding (te_dtype_convert) */
        double v = a->kind == TE_E_INT ? (double)a->u.i : a->u.f;
        if (te_dtype_is_float(dtype))
            v = te_dtype_convert(v, a->dtype, dtype);
        return te_const(ctx, dtype, v);
    }
    if (is_const(a) && a->lanes == 1) { /* float to integer: truncated, saturated, NaN -> 0 */
        double c = te_dtype_convert(a->u.f, a->dtype, dtype);
        te_expr *k = te__new_expr(ctx, TE_E_INT, dtype);
        if (k)
            k->u.i = dtype == TE_BOOL ? c != 0 : c >= 0x1p63 ? INT64_MAX : (int64_t)c;
        return k;
    }
    te_expr *e = te__new_expr(ctx, TE_E_CAST, dtype);
    if (e) {
        e->u.un.a = a;
        e->lanes = a->lanes;
    }
    return e;
}

te_expr *te_call(te_ctx *ctx, te_intrin fn, int nargs, te_expr *const *args)
{
    if (!ctx)
        return NULL;
    if ((unsigned)fn >= TE_INTRIN_COUNT) {
        te_ctx_set_error(ctx, TE_ERR_ARG, "te_call: invalid intrinsic %d", (int)fn);
        return NULL;
    }
    int want = fn == TE_POW ? 2 : 1;
    if (nargs != want || !args) {
        te_ctx_set_error(ctx, TE_ERR_ARG, "te_call: %s takes %d argument(s), got %d",
                         intrin_names[fn], want, nargs);
        return NULL;
    }
    te_expr *a[2] = {args[0], nargs > 1 ? args[1] : NULL};
    for (int i = 0; i < nargs; i++) {
        if (!a[i])
            return NULL;
    }
    if (!te_dtype_is_float(a[0]->dtype)) {
        te_ctx_set_error(ctx, TE_ERR_DTYPE, "%s needs a floating-point argument, got %s",
                         intrin_names[fn], te_dtype_str(a[0]->dtype));
        return NULL;
    }
    if (nargs == 2 && a[1]->dtype != a[0]->dtype) {
        if (is_const(a[1]))
            a[1] = retype_const(ctx, a[1], a[0]->dtype);
        else {
            te_ctx_set_error(ctx, TE_ERR_DTYPE, "%s: arguments have dtypes %s and %s",
                             intrin_names[fn], te_dtype_str(a[0]->dtype),
                             te_dtype_str(a[1]->dtype));
            return NULL;
        }
    }
    te_expr *e = te__new_expr(ctx, TE_E_CALL, a[0]->dtype);
    if (!e)
        return NULL;
    e->u.call.fn = fn;
    e->u.call.n = nargs;
    e->u.call.args[0] = a[0];
    e->u.call.args[1] = a[1];
    e->lanes = a[0]->lanes;
    return e;
}

#define INTRIN_FN(fname, FN)                                                                       \
    te_expr *fname(te_ctx *ctx, te_expr *a) { return te_call(ctx, FN, 1, &a); }
INTRIN_FN(te_exp, TE_EXP)
INTRIN_FN(te_log, TE_LOG)
INTRIN_FN(te_sqrt, TE_SQRT)
INTRIN_FN(te_rsqrt, TE_RSQRT)
INTRIN_FN(te_tanh, TE_TANH)
INTRIN_FN(te_erf, TE_ERF)
INTRIN_FN(te_sigmoid, TE_SIGMOID)
INTRIN_FN(te_fabs, TE_FABS)
INTRIN_FN(te_floor, TE_FLOOR)
INTRIN_FN(te_ceil, TE_CEIL)
INTRIN_FN(te_rint, TE_RINT)
#undef INTRIN_FN

te_expr *te_pow(te_ctx *ctx, te_expr *a, te_expr *b)
{
    return te_call(ctx, TE_POW, 2, (te_expr *[]){a, b});
}

te_expr *te_read(te_ctx *ctx, te_tensor *t, int n, te_expr *const *idx)
{
    if (!ctx || !t)
        return NULL;
    if (n != t->ndim || (n > 0 && !idx)) {
        te_ctx_set_error(ctx, TE_ERR_SHAPE,
                         "tensor '%s' has rank %d but is indexed with %d "
                         "index(es)",
                         t->name, t->ndim, n);
        return NULL;
    }
    for (int d = 0; d < n; d++) {
        if (!idx[d])
            return NULL;
        if (!te_dtype_is_int(idx[d]->dtype) || idx[d]->dtype == TE_BOOL) {
            te_ctx_set_error(ctx, TE_ERR_DTYPE,
                             "index %d of tensor '%s' has dtype %s; indices "
                             "must be integers",
                             d, t->name, te_dtype_str(idx[d]->dtype));
            return NULL;
        }
    }
    if (!te__ctx_may_use(ctx, t->owner)) {
        te_ctx_set_error(ctx, TE_ERR_ARG,
                         "tensor '%s' belongs to another context; an expression may only use "
                         "tensors of its own context or of the contexts it was created under "
                         "(te_ctx_create_child)",
                         t->name);
        return NULL;
    }
    te_expr *e = te__new_expr(ctx, TE_E_READ, t->dtype);
    if (!e)
        return NULL;
    e->u.read.t = t;
    e->u.read.n = n;
    e->u.read.idx = te__alloc(ctx, sizeof(te_expr *) * (size_t)(n ? n : 1));
    if (!e->u.read.idx)
        return NULL;
    for (int d = 0; d < n; d++) {
        te_expr *ix = idx[d];
        if (ix->dtype != TE_I64)
            ix = te_cast(ctx, TE_I64, ix);
        e->u.read.idx[d] = ix;
    }
    return e;
}

te_expr *te__load(te_ctx *ctx, te_buf *buf, int n, te_expr *const *idx)
{
    te_expr *e = te__new_expr(ctx, TE_E_LOAD, buf->dtype);
    if (!e)
        return NULL;
    e->u.load.buf = buf;
    e->u.load.n = n;
    e->u.load.idx = te__alloc(ctx, sizeof(te_expr *) * (size_t)(n ? n : 1));
    if (!e->u.load.idx)
        return NULL;
    for (int d = 0; d < n; d++) {
        e->u.load.idx[d] = idx[d];
        if (idx[d]->lanes > e->lanes)
            e->lanes = idx[d]->lanes;
    }
    return e;
}

te_expr *te__ramp(te_ctx *ctx, te_expr *base, int64_t stride, int lanes)
{
    te_expr *e = te__new_expr(ctx, TE_E_RAMP, base->dtype);
    if (e) {
        e->u.ramp.base = base;
        e->u.ramp.stride = stride;
        e->lanes = lanes;
    }
    return e;
}

te_expr *te__bcast(te_ctx *ctx, te_expr *v, int lanes)
{
    if (v->lanes == lanes)
        return v;
    te_expr *e = te__new_expr(ctx, TE_E_BCAST, v->dtype);
    if (e) {
        e->u.un.a = v;
        e->lanes = lanes;
    }
    return e;
}

/* ---- Reductions ---------------------------------------------------------------------- */

te_reducer *te_reducer_create(te_ctx *ctx, const char *name, te_expr *x, te_expr *y,
                              te_expr *combine, te_expr *identity)
{
    if (!ctx || !x || !y || !combine || !identity || !valid_name(ctx, "te_reducer_create", name))
        return NULL;
    if (x->kind != TE_E_VAR || y->kind != TE_E_VAR || x->u.var.vkind != TE_VAR_FREE ||
        y->u.var.vkind != TE_VAR_FREE || x == y) {
        te_ctx_set_error(ctx, TE_ERR_ARG,
                         "reducer '%s': x and y must be two distinct te_var "
                         "variables",
                         name);
        return NULL;
    }
    if (x->dtype != identity->dtype || y->dtype != identity->dtype ||
        combine->dtype != identity->dtype) {
        te_ctx_set_error(ctx, TE_ERR_DTYPE,
                         "reducer '%s': x, y, combine and identity must "
                         "share one dtype (identity is %s)",
                         name, te_dtype_str(identity->dtype));
        return NULL;
    }
    te_reducer *r = te__alloc(ctx, sizeof *r);
    if (!r)
        return NULL;
    r->name = te__strdup(ctx, name);
    r->x = x;
    r->y = y;
    r->combine = combine;
    r->identity = identity;
    r->n = 1;
    r->xs = &r->x;
    r->ys = &r->y;
    r->combines = &r->combine;
    r->identities = &r->identity;
    return r;
}

te_expr *te_reduce(te_ctx *ctx, te_reduce_kind kind, te_reducer *custom, te_expr *src, int naxes,
                   te_expr *const *axes)
{
    if (!ctx || !src)
        return NULL;
    if ((unsigned)kind > TE_RCUSTOM || (kind == TE_RCUSTOM) != (custom != NULL)) {
        te_ctx_set_error(ctx, TE_ERR_ARG,
                         "te_reduce: a custom reducer needs TE_RCUSTOM and "
                         "a te_reducer, the built-in kinds none");
        return NULL;
    }
    if (naxes <= 0 || naxes > TE_MAX_DIMS || !axes) {
        te_ctx_set_error(ctx, TE_ERR_ARG, "te_reduce: needs 1 to %d reduction axes, got %d",
                         TE_MAX_DIMS, naxes);
        return NULL;
    }
    if (custom && custom->tuple) {
        te_ctx_set_error(ctx, TE_ERR_ARG,
                         "te_reduce: reducer '%s' is a tuple reducer; reduce with "
                         "te_reduce_tuple and te_compute_tuple",
                         custom->name);
        return NULL;
    }
    if (custom && custom->identity->dtype != src->dtype) {
        te_ctx_set_error(ctx, TE_ERR_DTYPE, "reducer '%s' works on %s but the value is %s",
                         custom->name, te_dtype_str(custom->identity->dtype),
                         te_dtype_str(src->dtype));
        return NULL;
    }
    if (src->dtype == TE_BOOL) {
        te_ctx_set_error(ctx, TE_ERR_DTYPE, "te_reduce: cannot reduce bool values");
        return NULL;
    }
    for (int a = 0; a < naxes; a++) {
        if (!axes[a])
            return NULL;
        if (axes[a]->kind != TE_E_VAR || axes[a]->u.var.vkind != TE_VAR_REDUCE) {
            te_ctx_set_error(ctx, TE_ERR_ARG,
                             "te_reduce: argument %d is not a reduction axis "
                             "(make it with te_reduce_axis)",
                             a);
            return NULL;
        }
        for (int b = 0; b < a; b++) {
            if (axes[a] == axes[b]) {
                te_ctx_set_error(ctx, TE_ERR_ARG, "te_reduce: reduction axis '%s' listed twice",
                                 axes[a]->u.var.name);
                return NULL;
            }
        }
    }
    if (src->kind == TE_E_REDUCE) {
        te_ctx_set_error(ctx, TE_ERR_ARG,
                         "te_reduce: nested reductions are not supported; "
                         "reduce over several axes at once or use two computes");
        return NULL;
    }
    te_expr *e = te__new_expr(ctx, TE_E_REDUCE, src->dtype);
    if (!e)
        return NULL;
    e->u.red.rkind = kind;
    e->u.red.custom = custom;
    e->u.red.src = src;
    e->u.red.n = naxes;
    e->u.red.axes = te__alloc(ctx, sizeof(te_expr *) * (size_t)naxes);
    if (!e->u.red.axes)
        return NULL;
    memcpy(e->u.red.axes, axes, sizeof(te_expr *) * (size_t)naxes);
    return e;
}

te_expr *te_sum(te_ctx *ctx, te_expr *src, int n, te_expr *const *axes)
{
    return te_reduce(ctx, TE_RSUM, NULL, src, n, axes);
}
te_expr *te_rmax(te_ctx *ctx, te_expr *src, int n, te_expr *const *axes)
{
    return te_reduce(ctx, TE_RMAX, NULL, src, n, axes);
}
te_expr *te_rmin(te_ctx *ctx, te_expr *src, int n, te_expr *const *axes)
{
    return te_reduce(ctx, TE_RMIN, NULL, src, n, axes);
}
te_expr *te_prod(te_ctx *ctx, te_expr *src, int n, te_expr *const *axes)
{
    return te_reduce(ctx, TE_RPROD, NULL, src, n, axes);
}

te_expr *te__reduce_identity(te_ctx *ctx, te_reduce_kind kind, te_reducer *custom, te_dtype dtype)
{
    switch (kind) {
    case TE_RSUM:
        return te_const(ctx, dtype, 0);
    case TE_RPROD:
        return te_const(ctx, dtype, 1);
    case TE_RMAX:
    case TE_RMIN: {
        double v;
        switch (dtype) {
        case TE_F32:
        case TE_F64:
            v = INFINITY;
            break;
        case TE_I8:
            v = 127;
            break;
        case TE_U8:
            v = 255;
            break;
        case TE_I32:
            v = 2147483647.0;
            break;
        default: {
            te_expr *e = te_int(ctx, kind == TE_RMAX ? INT64_MIN : INT64_MAX);
            return e;
        }
        }
        if (kind == TE_RMAX)
            v = dtype == TE_U8 ? 0 : dtype == TE_I8 ? -128 : dtype == TE_I32 ? -2147483648.0 : -v;
        return te_const(ctx, dtype, v);
    }
    case TE_RCUSTOM:
        return custom->identity;
    }
    return NULL;
}

te_expr *te__reduce_combine(te_ctx *ctx, te_reduce_kind kind, te_reducer *custom, te_expr *acc,
                            te_expr *v)
{
    switch (kind) {
    case TE_RSUM:
        return te_add(ctx, acc, v);
    case TE_RPROD:
        return te_mul(ctx, acc, v);
    case TE_RMAX:
        return te_max(ctx, acc, v);
    case TE_RMIN:
        return te_min(ctx, acc, v);
    case TE_RCUSTOM: {
        te__subst m = {2, (const te_expr *[]){custom->x, custom->y}, (te_expr *[]){acc, v}};
        return te__substitute(ctx, custom->combine, &m);
    }
    }
    return NULL;
}

int te__is_const_int(const te_expr *e, int64_t *out)
{
    if (e && e->kind == TE_E_INT && e->lanes == 1) {
        if (out)
            *out = e->u.i;
        return 1;
    }
    return 0;
}

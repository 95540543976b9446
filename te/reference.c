/* The reference interpreter: evaluates tensor expressions directly, in float64. It is slow
 * and simple on purpose; every schedule and backend is checked against it. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "te/internal.h"

#define MAX_ENV 1024 /* variable bindings alive at once: loop axes and reducer arguments */

typedef struct {
    const te_tensor *t;
    double *data;    /* computed tensors (owned) */
    const void *raw; /* placeholders: caller's typed data */
} slot;

typedef struct {
    te_ctx *ctx;
    slot *slots;
    int nslots, cap;
    int *hash; /* open addressing on the tensor's address: slot index + 1, 0 empty; hcap a
                * power of two above twice nslots (a model's graph has hundreds of tensors, and
                * every element read looks its tensor up) */
    int hcap;
    const te_expr *vars[MAX_ENV];
    double vals[MAX_ENV];
    int nenv;
    int err;
} interp;

static unsigned slot_hash(const te_tensor *t, int hcap)
{
    uint64_t x = (uint64_t)(uintptr_t)t;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (unsigned)x & (unsigned)(hcap - 1);
}

static int find_slot(interp *in, const te_tensor *t)
{
    if (!in->hcap)
        return -1;
    for (unsigned h = slot_hash(t, in->hcap);; h = (h + 1) & (unsigned)(in->hcap - 1)) {
        int s = in->hash[h] - 1;
        if (s < 0 || in->slots[s].t == t)
            return s;
    }
}

/* Enters slot s in the hash, growing it (and rehashing) when it would be over half full. */
static int hash_slot(interp *in, int s)
{
    if (2 * (s + 1) >= in->hcap) {
        int cap = in->hcap ? 2 * in->hcap : 64;
        int *h = calloc((size_t)cap, sizeof *h);
        if (!h)
            return te_ctx_set_error(in->ctx, TE_ERR_NOMEM, "reference: out of memory");
        free(in->hash);
        in->hash = h;
        in->hcap = cap;
        for (int i = 0; i < s; i++) {
            int rc = hash_slot(in, i);
            if (rc)
                return rc;
        }
    }
    unsigned h = slot_hash(in->slots[s].t, in->hcap);
    while (in->hash[h])
        h = (h + 1) & (unsigned)(in->hcap - 1);
    in->hash[h] = s + 1;
    return TE_OK;
}

static double read_raw(const void *p, te_dtype dt, int64_t i)
{
    return te_dtype_load(dt, p, (size_t)i);
}

/* v, a value of dtype `from`, converted to `to` with te_cast's rounding (te_dtype_convert):
 * stores into f16/bf16 round to them, float to integer saturates. f32 and f64 values of their
 * own dtype stay as computed, in float64 (the reference's precision). */
static double convert(double v, te_dtype from, te_dtype to)
{
    if (from == to && te_dtype_is_float(to) && !te_dtype_is_half(to))
        return v;
    return te_dtype_convert(v, from, to);
}

static int compute_tensor(interp *in, const te_tensor *t);
static double eval(interp *in, const te_expr *e);

static double lookup(interp *in, const te_expr *v)
{
    for (int i = in->nenv - 1; i >= 0; i--)
        if (in->vars[i] == v)
            return in->vals[i];
    in->err =
        te_ctx_set_error(in->ctx, TE_ERR_ARG, "reference: variable '%s' is unbound", v->u.var.name);
    return 0;
}

static double eval_read(interp *in, const te_expr *e)
{
    const te_tensor *t = e->u.read.t;
    int64_t flat = 0;
    for (int d = 0; d < t->ndim; d++) {
        double x = eval(in, e->u.read.idx[d]);
        if (in->err)
            return 0;
        int64_t ix = (int64_t)x;
        if (ix < 0 || ix >= t->shape[d]) {
            in->err = te_ctx_set_error(in->ctx, TE_ERR_BOUNDS,
                                       "reference: read of tensor '%s' "
                                       "axis %d at index %lld is outside [0, %lld)",
                                       t->name, d, (long long)ix, (long long)t->shape[d]);
            return 0;
        }
        flat = flat * t->shape[d] + ix;
    }
    int s = find_slot(in, t);
    if (s < 0) {
        if (t->kind == TE_T_PLACEHOLDER) {
            in->err = te_ctx_set_error(in->ctx, TE_ERR_ARG,
                                       "reference: placeholder '%s' is "
                                       "used but no data was given for it",
                                       t->name);
            return 0;
        }
        if ((in->err = compute_tensor(in, t)))
            return 0;
        s = find_slot(in, t);
    }
    return in->slots[s].raw ? read_raw(in->slots[s].raw, t->dtype, flat) : in->slots[s].data[flat];
}

static double idiv(interp *in, double a, double b, bool floor_mode, bool mod)
{
    int64_t x = (int64_t)a, y = (int64_t)b;
    if (y == 0) {
        in->err = te_ctx_set_error(in->ctx, TE_ERR_RUNTIME,
                                   "reference: integer division by "
                                   "zero");
        return 0;
    }
    int64_t q = x / y, r = x % y;
    if (floor_mode && r != 0 && ((r < 0) != (y < 0))) {
        q -= 1;
        r += y;
    }
    return (double)(mod ? r : q);
}

static double eval_binary(interp *in, const te_expr *e)
{
    double a = eval(in, e->u.bin.a);
    if (in->err)
        return 0;
    /* && and || short-circuit, like C. */
    if (e->u.bin.op == TE_AND && a == 0)
        return 0;
    if (e->u.bin.op == TE_OR && a != 0)
        return 1;
    double b = eval(in, e->u.bin.b);
    if (in->err)
        return 0;
    bool isint = te_dtype_is_int(e->u.bin.a->dtype);
    double r;
    switch (e->u.bin.op) {
    case TE_ADD:
        r = a + b;
        break;
    case TE_SUB:
        r = a - b;
        break;
    case TE_MUL:
        r = a * b;
        break;
    case TE_DIV:
        r = isint ? idiv(in, a, b, false, false) : a / b;
        break;
    case TE_MOD:
        r = idiv(in, a, b, false, true);
        break;
    case TE_FLOORDIV:
        r = isint ? idiv(in, a, b, true, false) : floor(a / b);
        break;
    case TE_FLOORMOD:
        r = idiv(in, a, b, true, true);
        break;
    case TE_MIN:
        r = a < b ? a : b;
        break;
    case TE_MAX:
        r = a > b ? a : b;
        break;
    case TE_EQ:
        return a == b;
    case TE_NE:
        return a != b;
    case TE_LT:
        return a < b;
    case TE_LE:
        return a <= b;
    case TE_GT:
        return a > b;
    case TE_GE:
        return a >= b;
    case TE_AND:
        return b != 0;
    case TE_OR:
        return b != 0;
    default:
        r = NAN;
    }
    return isint ? convert(r, e->dtype, e->dtype) : r;
}

static double eval_call(interp *in, const te_expr *e)
{
    double a = eval(in, e->u.call.args[0]);
    double b = e->u.call.n > 1 ? eval(in, e->u.call.args[1]) : 0;
    switch (e->u.call.fn) {
    case TE_EXP:
        return exp(a);
    case TE_LOG:
        return log(a);
    case TE_SQRT:
        return sqrt(a);
    case TE_RSQRT:
        return 1.0 / sqrt(a);
    case TE_TANH:
        return tanh(a);
    case TE_ERF:
        return erf(a);
    case TE_SIGMOID:
        return 1.0 / (1.0 + exp(-a));
    case TE_FABS:
        return fabs(a);
    case TE_FLOOR:
        return floor(a);
    case TE_CEIL:
        return ceil(a);
    case TE_RINT:
        return rint(a);
    case TE_POW:
        return pow(a, b);
    default:
        return NAN;
    }
}

static bool push(interp *in, const te_expr *v, double x)
{
    if (in->nenv == MAX_ENV) {
        in->err = te_ctx_set_error(in->ctx, TE_ERR_UNSUPPORTED, "reference: nesting too deep");
        return false;
    }
    in->vars[in->nenv] = v;
    in->vals[in->nenv++] = x;
    return true;
}

static double combine(interp *in, const te_expr *red, double acc, double v)
{
    switch (red->u.red.rkind) {
    case TE_RSUM:
        return acc + v;
    case TE_RPROD:
        return acc * v;
    case TE_RMAX:
        return v > acc ? v : acc;
    case TE_RMIN:
        return v < acc ? v : acc;
    case TE_RCUSTOM: {
        const te_reducer *r = red->u.red.custom;
        if (!push(in, r->x, acc) || !push(in, r->y, v))
            return 0;
        double out = eval(in, r->combine);
        in->nenv -= 2;
        return out;
    }
    }
    return NAN;
}

/* A tuple reduction: every accumulator advances together; the node's component is returned.
 * comp -1 (the whole tuple) cannot reach here: te_compute refuses it. */
static double eval_reduce_tuple(interp *in, const te_expr *e)
{
    const te_reducer *r = e->u.red.custom;
    int n = e->u.red.n, nt = r->n, base = in->nenv;
    double acc[TE_MAX_TUPLE], val[TE_MAX_TUPLE], nxt[TE_MAX_TUPLE];
    for (int i = 0; i < nt; i++)
        acc[i] =
            convert(eval(in, r->identities[i]), r->identities[i]->dtype, r->identities[i]->dtype);
    for (int a = 0; a < n; a++)
        if (!push(in, e->u.red.axes[a], 0))
            return 0;
    for (;;) {
        for (int i = 0; i < nt; i++)
            val[i] = convert(eval(in, e->u.red.srcs[i]), e->u.red.srcs[i]->dtype,
                             r->identities[i]->dtype);
        if (in->err)
            break;
        int b2 = in->nenv;
        for (int i = 0; i < nt; i++)
            if (!push(in, r->xs[i], acc[i]) || !push(in, r->ys[i], val[i]))
                break;
        for (int i = 0; i < nt && !in->err; i++)
            nxt[i] =
                convert(eval(in, r->combines[i]), r->combines[i]->dtype, r->identities[i]->dtype);
        in->nenv = b2;
        if (in->err)
            break;
        memcpy(acc, nxt, sizeof(double) * (size_t)nt);
        int a = n - 1;
        for (; a >= 0; a--) {
            if (++in->vals[base + a] < (double)e->u.red.axes[a]->u.var.extent)
                break;
            in->vals[base + a] = 0;
        }
        if (a < 0)
            break;
    }
    in->nenv = base;
    return acc[e->u.red.comp > 0 ? e->u.red.comp : 0];
}

static double eval_reduce(interp *in, const te_expr *e)
{
    if (e->u.red.nsrc > 0)
        return eval_reduce_tuple(in, e);
    int n = e->u.red.n, base = in->nenv;
    double acc;
    switch (e->u.red.rkind) {
    case TE_RSUM:
        acc = 0;
        break;
    case TE_RPROD:
        acc = 1;
        break;
    case TE_RMAX:
        acc = -INFINITY;
        break;
    case TE_RMIN:
        acc = INFINITY;
        break;
    default:
        acc = eval(in, e->u.red.custom->identity);
    }
    for (int a = 0; a < n; a++)
        if (!push(in, e->u.red.axes[a], 0))
            return 0;
    for (;;) {
        double v = eval(in, e->u.red.src);
        if (in->err)
            break;
        acc = combine(in, e, acc, v);
        int a = n - 1;
        for (; a >= 0; a--) {
            if (++in->vals[base + a] < (double)e->u.red.axes[a]->u.var.extent)
                break;
            in->vals[base + a] = 0;
        }
        if (a < 0)
            break;
    }
    in->nenv = base;
    return acc;
}

static double eval(interp *in, const te_expr *e)
{
    if (in->err)
        return 0;
    switch (e->kind) {
    case TE_E_INT:
        return (double)e->u.i;
    case TE_E_FLOAT:
        return e->u.f;
    case TE_E_VAR:
        return lookup(in, e);
    case TE_E_BINARY:
        return eval_binary(in, e);
    case TE_E_NOT:
        return eval(in, e->u.un.a) == 0;
    case TE_E_NEG:
        return -eval(in, e->u.un.a);
    case TE_E_SELECT: {
        double c = eval(in, e->u.sel.c), t = eval(in, e->u.sel.t), f = eval(in, e->u.sel.f);
        return c != 0 ? t : f;
    }
    case TE_E_IF:
        return eval(in, e->u.sel.c) != 0 ? eval(in, e->u.sel.t) : eval(in, e->u.sel.f);
    case TE_E_CAST:
        return convert(eval(in, e->u.un.a), e->u.un.a->dtype, e->dtype);
    case TE_E_CALL:
        return eval_call(in, e);
    case TE_E_READ:
        return eval_read(in, e);
    case TE_E_REDUCE:
        return eval_reduce(in, e);
    default:
        in->err = te_ctx_set_error(in->ctx, TE_ERR_ARG,
                                   "reference: lowered-IR node in a tensor "
                                   "expression");
        return 0;
    }
}

static int add_slot(interp *in, const te_tensor *t, double *data, const void *raw)
{
    if (in->nslots == in->cap) {
        int cap = in->cap ? in->cap * 2 : 16;
        slot *s = realloc(in->slots, sizeof(slot) * (size_t)cap);
        if (!s)
            return te_ctx_set_error(in->ctx, TE_ERR_NOMEM, "reference: out of memory");
        in->slots = s;
        in->cap = cap;
    }
    in->slots[in->nslots] = (slot){t, data, raw};
    if (hash_slot(in, in->nslots))
        return te_ctx_errcode(in->ctx);
    in->nslots++;
    return TE_OK;
}

static int compute_tensor(interp *in, const te_tensor *t)
{
    int64_t n = te_tensor_numel(t);
    double *data = malloc(sizeof(double) * (size_t)n);
    if (!data)
        return te_ctx_set_error(in->ctx, TE_ERR_NOMEM, "reference: out of memory for '%s'",
                                t->name);
    int base = in->nenv;
    for (int d = 0; d < t->ndim; d++)
        if (!push(in, t->axes[d], 0)) {
            free(data);
            return in->err;
        }
    for (int64_t i = 0; i < n; i++) {
        int64_t rem = i;
        for (int d = t->ndim - 1; d >= 0; d--) {
            in->vals[base + d] = (double)(rem % t->shape[d]);
            rem /= t->shape[d];
        }
        double v = eval(in, t->body);
        if (in->err) {
            free(data);
            in->nenv = base;
            return in->err;
        }
        data[i] = convert(v, t->body->dtype, t->dtype);
    }
    in->nenv = base;
    int rc = add_slot(in, t, data, NULL);
    if (rc)
        free(data);
    return rc;
}

int te_reference_eval(te_ctx *ctx, int n_in, te_tensor *const *inputs, const void *const *in_data,
                      int n_out, te_tensor *const *outputs, double *const *out_data)
{
    if (!ctx)
        return TE_ERR_ARG;
    if (n_in < 0 || n_out <= 0 || (n_in && (!inputs || !in_data)) || !outputs || !out_data)
        return te_ctx_set_error(ctx, TE_ERR_ARG,
                                "te_reference_eval: needs outputs, output "
                                "buffers and data for every input");
    interp in = {.ctx = ctx};
    int rc = TE_OK;
    for (int i = 0; i < n_in && !rc; i++) {
        if (!inputs[i] || !in_data[i] || inputs[i]->kind != TE_T_PLACEHOLDER)
            rc = te_ctx_set_error(ctx, TE_ERR_ARG,
                                  "te_reference_eval: input %d must be a "
                                  "placeholder with data",
                                  i);
        else
            rc = add_slot(&in, inputs[i], NULL, in_data[i]);
    }
    for (int o = 0; o < n_out && !rc; o++) {
        const te_tensor *t = outputs[o];
        if (!t || !out_data[o]) {
            rc = te_ctx_set_error(ctx, TE_ERR_ARG, "te_reference_eval: output %d is NULL", o);
            break;
        }
        int s = find_slot(&in, t);
        if (s < 0 && t->kind == TE_T_COMPUTE) {
            if ((rc = compute_tensor(&in, t)))
                break;
            s = find_slot(&in, t);
        }
        if (s < 0) {
            rc = te_ctx_set_error(ctx, TE_ERR_ARG,
                                  "te_reference_eval: output '%s' has no "
                                  "data",
                                  t->name);
            break;
        }
        int64_t n = te_tensor_numel(t);
        for (int64_t i = 0; i < n; i++)
            out_data[o][i] =
                in.slots[s].raw ? read_raw(in.slots[s].raw, t->dtype, i) : in.slots[s].data[i];
    }
    for (int i = 0; i < in.nslots; i++)
        free(in.slots[i].data);
    free(in.slots);
    free(in.hash);
    return rc;
}

/*
 * A tiny interpreter for lowered statements, shared by the pass tests (header-only, static
 * functions). It runs a statement over buffers held as double arrays and evaluates integer
 * expressions exactly in int64, so a pass can be checked by running the program before and
 * after it. Scalars only (no RAMP/BCAST lanes); float lets and the calls sqrt, exp and log
 * (rounded to f32 for f32 values).
 */
#ifndef TESSERA_TESTS_PASSES_TESTLIB_H
#define TESSERA_TESTS_PASSES_TESTLIB_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schedule/passes.h"

#define PT_UNUSED __attribute__((unused))
#define PT_MAX_VARS 64
#define PT_MAX_BUFS 16

typedef struct pt_env {
    const te_expr *vars[PT_MAX_VARS];
    int64_t vals[PT_MAX_VARS];
    double fvals[PT_MAX_VARS]; /* the value of a float variable (a float let) */
    int nvars;
    const te_buf *bufs[PT_MAX_BUFS];
    double *data[PT_MAX_BUFS];
    int64_t size[PT_MAX_BUFS];
    int nbufs;
    int err; /* set on an unbound variable, unknown buffer, division by zero, out of bounds */
    long stores;
} pt_env;

static PT_UNUSED void pt_bind(pt_env *env, const te_expr *v, int64_t val)
{
    if (env->nvars < PT_MAX_VARS) {
        env->vars[env->nvars] = v;
        env->fvals[env->nvars] = (double)val;
        env->vals[env->nvars++] = val;
    } else {
        env->err = 1;
    }
}

static PT_UNUSED void pt_bind_f(pt_env *env, const te_expr *v, double val)
{
    pt_bind(env, v, (int64_t)val);
    if (!env->err)
        env->fvals[env->nvars - 1] = val;
}

static PT_UNUSED void pt_add_buf(pt_env *env, const te_buf *b, double *data, int64_t n)
{
    env->bufs[env->nbufs] = b;
    env->data[env->nbufs] = data;
    env->size[env->nbufs++] = n;
}

static PT_UNUSED int64_t pt_fdiv(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static PT_UNUSED int64_t pt_fmod(int64_t a, int64_t b)
{
    int64_t r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

static PT_UNUSED double pt_eval_f(pt_env *env, const te_expr *e);
static PT_UNUSED int64_t pt_eval_i(pt_env *env, const te_expr *e);

static PT_UNUSED int64_t pt_flat(pt_env *env, const te_buf *b, int n, te_expr *const *idx,
                                 int *slot)
{
    *slot = -1;
    for (int i = 0; i < env->nbufs; i++)
        if (env->bufs[i] == b)
            *slot = i;
    if (*slot < 0) {
        env->err = 1;
        return 0;
    }
    int64_t flat = 0;
    if (n == 1) {
        flat = pt_eval_i(env, idx[0]);
    } else {
        for (int d = 0; d < n; d++)
            flat = flat * b->shape[d] + pt_eval_i(env, idx[d]);
    }
    if (flat < 0 || flat >= env->size[*slot]) {
        env->err = 1;
        return 0;
    }
    return flat;
}

static PT_UNUSED int64_t pt_eval_i(pt_env *env, const te_expr *e)
{
    if (env->err)
        return 0;
    switch (e->kind) {
    case TE_E_INT:
        return e->u.i;
    case TE_E_FLOAT:
        return (int64_t)e->u.f;
    case TE_E_VAR:
        for (int i = env->nvars - 1; i >= 0; i--)
            if (env->vars[i] == e)
                return env->vals[i];
        env->err = 1;
        return 0;
    case TE_E_BINARY: {
        te_binop op = e->u.bin.op;
        if (te_dtype_is_float(e->u.bin.a->dtype)) {
            double a = pt_eval_f(env, e->u.bin.a), b = pt_eval_f(env, e->u.bin.b);
            switch (op) {
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
            default:
                return (int64_t)pt_eval_f(env, e);
            }
        }
        int64_t a = pt_eval_i(env, e->u.bin.a);
        if (op == TE_AND && !a)
            return 0;
        if (op == TE_OR && a)
            return 1;
        int64_t b = pt_eval_i(env, e->u.bin.b);
        switch (op) {
        case TE_ADD:
            return a + b;
        case TE_SUB:
            return a - b;
        case TE_MUL:
            return a * b;
        case TE_DIV:
        case TE_MOD:
        case TE_FLOORDIV:
        case TE_FLOORMOD:
            if (b == 0) {
                env->err = 1;
                return 0;
            }
            return op == TE_DIV        ? a / b
                   : op == TE_MOD      ? a % b
                   : op == TE_FLOORDIV ? pt_fdiv(a, b)
                                       : pt_fmod(a, b);
        case TE_MIN:
            return a < b ? a : b;
        case TE_MAX:
            return a > b ? a : b;
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
        case TE_OR:
            return b != 0;
        }
        return 0;
    }
    case TE_E_NOT:
        return !pt_eval_i(env, e->u.un.a);
    case TE_E_NEG:
        return -pt_eval_i(env, e->u.un.a);
    case TE_E_SELECT:
    case TE_E_IF:
        return pt_eval_i(env, e->u.sel.c) ? pt_eval_i(env, e->u.sel.t) : pt_eval_i(env, e->u.sel.f);
    case TE_E_CAST:
        return te_dtype_is_float(e->u.un.a->dtype) ? (int64_t)pt_eval_f(env, e->u.un.a)
                                                   : pt_eval_i(env, e->u.un.a);
    case TE_E_LOAD: {
        int slot;
        int64_t f = pt_flat(env, e->u.load.buf, e->u.load.n, e->u.load.idx, &slot);
        return env->err ? 0 : (int64_t)env->data[slot][f];
    }
    default:
        env->err = 1;
        return 0;
    }
}

static PT_UNUSED double pt_eval_f(pt_env *env, const te_expr *e)
{
    if (env->err)
        return 0;
    if (!te_dtype_is_float(e->dtype))
        return (double)pt_eval_i(env, e);
    bool f32 = e->dtype == TE_F32;
    switch (e->kind) {
    case TE_E_FLOAT:
        return e->u.f;
    case TE_E_VAR:
        for (int i = env->nvars - 1; i >= 0; i--)
            if (env->vars[i] == e)
                return env->fvals[i];
        env->err = 1;
        return 0;
    case TE_E_CALL: {
        double a = pt_eval_f(env, e->u.call.args[0]), r;
        switch (e->u.call.fn) {
        case TE_SQRT:
            r = sqrt(a);
            break;
        case TE_EXP:
            r = exp(a);
            break;
        case TE_LOG:
            r = log(a);
            break;
        default:
            env->err = 1;
            return 0;
        }
        return f32 ? (double)(float)r : r;
    }
    case TE_E_BINARY: {
        double a = pt_eval_f(env, e->u.bin.a), b = pt_eval_f(env, e->u.bin.b), r;
        switch (e->u.bin.op) {
        case TE_ADD:
            r = f32 ? (float)a + (float)b : a + b;
            break;
        case TE_SUB:
            r = f32 ? (float)a - (float)b : a - b;
            break;
        case TE_MUL:
            r = f32 ? (float)a * (float)b : a * b;
            break;
        case TE_DIV:
            r = f32 ? (float)a / (float)b : a / b;
            break;
        case TE_MIN:
            r = a < b ? a : b;
            break;
        case TE_MAX:
            r = a > b ? a : b;
            break;
        default:
            env->err = 1;
            return 0;
        }
        return r;
    }
    case TE_E_NEG:
        return -pt_eval_f(env, e->u.un.a);
    case TE_E_SELECT:
    case TE_E_IF:
        return pt_eval_i(env, e->u.sel.c) ? pt_eval_f(env, e->u.sel.t) : pt_eval_f(env, e->u.sel.f);
    case TE_E_CAST: {
        double v = pt_eval_f(env, e->u.un.a);
        return f32 ? (double)(float)v : v;
    }
    case TE_E_LOAD: {
        int slot;
        int64_t f = pt_flat(env, e->u.load.buf, e->u.load.n, e->u.load.idx, &slot);
        return env->err ? 0 : env->data[slot][f];
    }
    default:
        env->err = 1;
        return 0;
    }
}

static PT_UNUSED void pt_exec(pt_env *env, const te_stmt *s)
{
    if (!s || env->err)
        return;
    switch (s->kind) {
    case TE_S_FOR: {
        int64_t mn = pt_eval_i(env, s->u.loop.min), ex = pt_eval_i(env, s->u.loop.extent);
        for (int64_t v = mn; v < mn + ex && !env->err; v++) {
            pt_bind(env, s->u.loop.var, v);
            pt_exec(env, s->u.loop.body);
            env->nvars--;
        }
        break;
    }
    case TE_S_SEQ:
        for (int i = 0; i < s->u.seq.n; i++)
            pt_exec(env, s->u.seq.v[i]);
        break;
    case TE_S_IF:
        if (pt_eval_i(env, s->u.cond.cond))
            pt_exec(env, s->u.cond.then_s);
        else
            pt_exec(env, s->u.cond.else_s);
        break;
    case TE_S_STORE: {
        int slot;
        double v = pt_eval_f(env, s->u.store.value);
        int64_t f = pt_flat(env, s->u.store.buf, s->u.store.n, s->u.store.idx, &slot);
        if (!env->err) {
            env->data[slot][f] = v;
            env->stores++;
        }
        break;
    }
    case TE_S_ALLOC: {
        int64_t n = 1;
        for (int d = 0; d < s->u.alloc.buf->ndim; d++)
            n *= s->u.alloc.buf->shape[d];
        double *p = calloc((size_t)n, sizeof(double));
        pt_add_buf(env, s->u.alloc.buf, p, n);
        pt_exec(env, s->u.alloc.body);
        env->nbufs--;
        free(p);
        break;
    }
    case TE_S_LET:
        if (te_dtype_is_float(s->u.let.var->dtype))
            pt_bind_f(env, s->u.let.var, pt_eval_f(env, s->u.let.value));
        else
            pt_bind(env, s->u.let.var, pt_eval_i(env, s->u.let.value));
        pt_exec(env, s->u.let.body);
        env->nvars--;
        break;
    default:
        break;
    }
}

/* Prints a statement into a malloc'ed string (caller frees). */
static PT_UNUSED char *pt_print(const te_stmt *s)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    te__stmt_print(s, f, 0);
    fclose(f);
    return buf;
}

static PT_UNUSED char *pt_print_expr(const te_expr *e)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    te_expr_print(e, f);
    fclose(f);
    return buf;
}

/* Whether s prints as want; prints both on stderr when not. */
static PT_UNUSED int pt_print_is(const te_stmt *s, const char *want)
{
    char *txt = pt_print(s);
    int same = txt && strcmp(txt, want) == 0;
    if (!same)
        fprintf(stderr, "got:\n%s\nwant:\n%s\n", txt ? txt : "(null)", want);
    free(txt);
    return same;
}

/* One-index loads and stores: b[at] and b[at] = v. */
static PT_UNUSED te_expr *pt_ld(te_ctx *c, te_buf *b, te_expr *at)
{
    return te__load(c, b, 1, &at);
}

static PT_UNUSED te_stmt *pt_st(te_ctx *c, te_buf *b, te_expr *at, te_expr *v)
{
    return te__store(c, b, 1, &at, v);
}

/* Counts occurrences of a substring. */
static PT_UNUSED int pt_count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

/* What pt_same_effect runs the two programs over: one output buffer (each program writes its
 * own copy, starting from init, or NaN where init is NULL), optionally one input buffer both
 * read, and optionally one variable bound to a value. */
typedef struct pt_run {
    const te_buf *out;
    int64_t n;
    const double *init;
    const te_buf *in;
    double *in_data;
    int64_t in_n;
    const te_expr *var;
    int64_t val;
    bool any_stores; /* the counts of stores may differ (a pass adding a local buffer) */
} pt_run;

/* Runs a and b as r says. Returns 1 when both ran without error, stored as many times and left
 * the same values (NaN where both left NaN), else 0 with the difference on stderr. */
static PT_UNUSED int pt_same_effect(const te_stmt *a, const te_stmt *b, const pt_run *r)
{
    double *ra = malloc(sizeof(double) * (size_t)r->n), *rb = malloc(sizeof(double) * (size_t)r->n);
    int same = ra && rb;
    for (int64_t i = 0; same && i < r->n; i++)
        ra[i] = rb[i] = r->init ? r->init[i] : NAN;
    pt_env ea = {0}, eb = {0};
    pt_env *env[2] = {&ea, &eb};
    double *res[2] = {ra, rb};
    const te_stmt *prog[2] = {a, b};
    for (int k = 0; same && k < 2; k++) {
        if (r->var)
            pt_bind(env[k], r->var, r->val);
        if (r->in)
            pt_add_buf(env[k], r->in, r->in_data, r->in_n);
        pt_add_buf(env[k], r->out, res[k], r->n);
        pt_exec(env[k], prog[k]);
    }
    if (same && (ea.err || eb.err || (!r->any_stores && ea.stores != eb.stores))) {
        fprintf(stderr, "pt_same_effect: errors %d / %d, stores %ld / %ld\n", ea.err, eb.err,
                ea.stores, eb.stores);
        same = 0;
    }
    for (int64_t i = 0; same && i < r->n; i++)
        if (!((isnan(ra[i]) && isnan(rb[i])) || ra[i] == rb[i])) {
            fprintf(stderr, "pt_same_effect: element %lld: %g / %g\n", (long long)i, ra[i], rb[i]);
            same = 0;
        }
    free(ra);
    free(rb);
    return same;
}

#endif

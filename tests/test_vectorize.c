/* Tests for schedule/passes/vectorize.c on hand-built, storage-flattened loop IR. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schedule/passes.h"
#include "te/internal.h"

typedef struct fx {
    te_ctx *ctx;
    te_buf *A, *B, *C;
    te_expr *o, *v; /* outer loop variable, vector lane variable */
} fx;

static int setup(void **state)
{
    static fx f;
    f.ctx = te_ctx_create();
    int64_t n = 4096;
    f.A = te__buf_new(f.ctx, "A", TE_F32, 1, &n, TE_SCOPE_GLOBAL);
    f.B = te__buf_new(f.ctx, "B", TE_F32, 1, &n, TE_SCOPE_GLOBAL);
    f.C = te__buf_new(f.ctx, "C", TE_F32, 1, &n, TE_SCOPE_GLOBAL);
    f.o = te__loop_var(f.ctx, "i_o", 64);
    f.v = te__loop_var(f.ctx, "i_i", 16);
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    te_ctx_free(f->ctx);
    return 0;
}

static te_expr *I(fx *f, int64_t v) { return te_int(f->ctx, v); }
static te_expr *ld(fx *f, te_buf *b, te_expr *i) { return te__load(f->ctx, b, 1, &i); }
static te_stmt *st(fx *f, te_buf *b, te_expr *i, te_expr *v)
{
    return te__store(f->ctx, b, 1, &i, v);
}
/* i_o * 16 + i_i */
static te_expr *idx(fx *f) { return te_add(f->ctx, te_mul(f->ctx, f->o, I(f, 16)), f->v); }

/* vectorized (i_i, 0, lanes) { body } , passed through the pass */
static te_stmt *run(fx *f, te_expr *extent, te_stmt *body)
{
    te_stmt *s = te__for(f->ctx, f->v, I(f, 0), extent, TE_FOR_VECTORIZED, body);
    assert_non_null(s);
    te_stmt *r = te__pass_vectorize(TE_PC(f->ctx), s);
    assert_non_null(r);
    if (getenv("TESSERA_TEST_VERBOSE"))
        te__stmt_print(r, stderr, 0);
    return r;
}

/* The scalar fallback: a note "vectorize i_i: kept scalar: <reason>", then the serial loop;
 * returns the reason. */
static const char *fallback_reason(const te_stmt *r)
{
    assert_int_equal(r->kind, TE_S_SEQ);
    assert_int_equal(r->u.seq.n, 2);
    assert_int_equal(r->u.seq.v[0]->kind, TE_S_COMMENT);
    const char *t = r->u.seq.v[0]->u.comment.text;
    const char *pre = "vectorize i_i: kept scalar: ";
    assert_int_equal(strncmp(t, pre, strlen(pre)), 0);
    return t + strlen(pre);
}

static void assert_serial(const te_stmt *r)
{
    fallback_reason(r); /* never silent */
    r = r->u.seq.v[1];
    assert_int_equal(r->kind, TE_S_FOR);
    assert_int_equal(r->u.loop.fkind, TE_FOR_SERIAL);
}

static void assert_ramp(const te_expr *e, int64_t stride, int lanes)
{
    assert_int_equal(e->kind, TE_E_RAMP);
    assert_int_equal(e->u.ramp.stride, stride);
    assert_int_equal(e->lanes, lanes);
}

static void test_contiguous_becomes_ramp(void **state)
{
    fx *f = *state;
    te_stmt *r = run(f, I(f, 16),
                     st(f, f->C, idx(f), te_add(f->ctx, ld(f, f->A, idx(f)), ld(f, f->B, idx(f)))));
    assert_int_equal(r->kind, TE_S_STORE);
    assert_ramp(r->u.store.idx[0], 1, 16);
    /* base is the index at lane 0: i_o * 16 */
    const te_expr *base = r->u.store.idx[0]->u.ramp.base;
    assert_int_equal(base->kind, TE_E_BINARY);
    assert_int_equal(base->u.bin.op, TE_MUL);
    assert_ptr_equal(base->u.bin.a, f->o);
    const te_expr *v = r->u.store.value;
    assert_int_equal(v->lanes, 16);
    assert_int_equal(v->u.bin.a->kind, TE_E_LOAD);
    assert_ramp(v->u.bin.a->u.load.idx[0], 1, 16);
    assert_int_equal(v->u.bin.a->lanes, 16);
}

static void test_invariant_load_is_broadcast(void **state)
{
    fx *f = *state;
    /* C[i] = A[i] * B[i_o]: B's index does not depend on the lane */
    te_stmt *r = run(f, I(f, 16),
                     st(f, f->C, idx(f), te_mul(f->ctx, ld(f, f->A, idx(f)), ld(f, f->B, f->o))));
    assert_int_equal(r->kind, TE_S_STORE);
    const te_expr *b = r->u.store.value->u.bin.b;
    assert_int_equal(b->kind, TE_E_BCAST);
    assert_int_equal(b->lanes, 16);
    assert_int_equal(b->u.un.a->kind, TE_E_LOAD);
    assert_int_equal(b->u.un.a->lanes, 1);
    assert_ptr_equal(b->u.un.a->u.load.idx[0], f->o);
}

static void test_strided_load_and_store(void **state)
{
    fx *f = *state;
    /* C[3 * i_i + 1] = A[2 * (i_o * 16 + i_i)] */
    te_expr *si = te_add(f->ctx, te_mul(f->ctx, I(f, 3), f->v), I(f, 1));
    te_stmt *r = run(f, I(f, 16), st(f, f->C, si, ld(f, f->A, te_mul(f->ctx, idx(f), I(f, 2)))));
    assert_int_equal(r->kind, TE_S_STORE);
    assert_ramp(r->u.store.idx[0], 3, 16);
    int64_t c;
    assert_true(te__is_const_int(r->u.store.idx[0]->u.ramp.base, &c));
    assert_int_equal(c, 1);
    assert_ramp(r->u.store.value->u.load.idx[0], 2, 16);
}

static void test_nonlinear_index_is_gather(void **state)
{
    fx *f = *state;
    te_expr *g = te_floormod(f->ctx, te_mul(f->ctx, f->v, I(f, 5)), I(f, 7));
    te_stmt *r = run(f, I(f, 16), st(f, f->C, idx(f), ld(f, f->A, g)));
    assert_int_equal(r->kind, TE_S_STORE);
    const te_expr *l = r->u.store.value;
    assert_int_equal(l->kind, TE_E_LOAD);
    assert_int_equal(l->lanes, 16);
    assert_int_equal(l->u.load.idx[0]->kind, TE_E_BINARY); /* a vector of indices */
    assert_int_equal(l->u.load.idx[0]->lanes, 16);
}

/* Floor division and remainder by a constant are linear when every lane falls in one block
 * of the divisor (the index arithmetic of reshapes: a head split reads x + (64 i + x) / 8192 *
 * 64 + ...): contiguous loads, the quotient a scalar of lane 0. Where the lanes cross a block
 * boundary they stay a vector of indices. */
static void test_divisions_within_a_block_are_ramps(void **state)
{
    fx *f = *state;
    te_ctx *c = f->ctx;
    /* i_o * 16 + i_i: lanes 0..15 of a block of 16, so a block of 256 or 32 holds them all. */
    te_expr *q = te_floordiv(c, idx(f), I(f, 256));
    te_stmt *r = run(f, I(f, 16), st(f, f->C, idx(f), ld(f, f->A, te_add(c, f->v, q))));
    assert_ramp(r->u.store.value->u.load.idx[0], 1, 16);
    /* ramp base: the quotient at lane 0, no lane variable left */
    assert_int_equal(r->u.store.value->u.load.idx[0]->u.ramp.base->lanes, 1);
    r = run(f, I(f, 16), st(f, f->C, idx(f), ld(f, f->A, te_floormod(c, idx(f), I(f, 32)))));
    assert_ramp(r->u.store.value->u.load.idx[0], 1, 16);
    /* with an offset and a stride: (64 i_o + 16 + 2 i_i) mod 128 spans 16..46 of a block of 64;
     * (32 i_o + 16 + 2 i_i) mod 64 crosses 64 for odd i_o (48..78) */
    te_expr *a =
        te_add(c, te_add(c, te_mul(c, f->o, I(f, 64)), I(f, 16)), te_mul(c, f->v, I(f, 2)));
    r = run(f, I(f, 16), st(f, f->C, idx(f), ld(f, f->A, te_floormod(c, a, I(f, 128)))));
    assert_ramp(r->u.store.value->u.load.idx[0], 2, 16);
    a = te_add(c, te_add(c, te_mul(c, f->o, I(f, 32)), I(f, 16)), te_mul(c, f->v, I(f, 2)));
    r = run(f, I(f, 16), st(f, f->C, idx(f), ld(f, f->A, te_floormod(c, a, I(f, 64)))));
    assert_int_equal(r->u.store.value->u.load.idx[0]->kind, TE_E_BINARY);
    /* crossing: blocks of 8 hold half the lanes; an offset of 8 in blocks of 16 crosses too */
    r = run(f, I(f, 16), st(f, f->C, idx(f), ld(f, f->A, te_floordiv(c, idx(f), I(f, 8)))));
    assert_int_equal(r->u.store.value->u.load.idx[0]->kind, TE_E_BINARY);
    assert_int_equal(r->u.store.value->u.load.idx[0]->lanes, 16);
    a = te_add(c, idx(f), I(f, 8));
    r = run(f, I(f, 16), st(f, f->C, idx(f), ld(f, f->A, te_floordiv(c, a, I(f, 16)))));
    assert_int_equal(r->u.store.value->u.load.idx[0]->kind, TE_E_BINARY);
    /* an unknown term (i_o mod 3) times 16 keeps the block: still a ramp */
    a = te_add(c, te_mul(c, te_floormod(c, f->o, I(f, 3)), I(f, 16)), f->v);
    r = run(f, I(f, 16), st(f, f->C, idx(f), ld(f, f->A, te_floordiv(c, a, I(f, 16)))));
    assert_int_equal(r->u.store.value->kind, TE_E_BCAST); /* one element for all lanes */
}

static void test_reduction_into_scalar_falls_back(void **state)
{
    fx *f = *state;
    /* C[i_o] = C[i_o] + A[i]: every lane writes the same element */
    te_stmt *r =
        run(f, I(f, 16), st(f, f->C, f->o, te_add(f->ctx, ld(f, f->C, f->o), ld(f, f->A, idx(f)))));
    assert_serial(r);
    /* x - x: mentions the lane, but does not depend on it */
    r = run(f, I(f, 16), st(f, f->C, te_sub(f->ctx, f->v, f->v), ld(f, f->A, idx(f))));
    assert_serial(r);
}

static void test_lane_dependent_if_falls_back(void **state)
{
    fx *f = *state;
    te_stmt *body = te__if(f->ctx, te_lt(f->ctx, idx(f), I(f, 1000)),
                           st(f, f->C, idx(f), ld(f, f->A, idx(f))), NULL);
    assert_serial(run(f, I(f, 16), body));
    /* an if on the outer variable only stays an if around vector code */
    body = te__if(f->ctx, te_lt(f->ctx, f->o, I(f, 10)), st(f, f->C, idx(f), ld(f, f->A, idx(f))),
                  NULL);
    te_stmt *r = run(f, I(f, 16), body);
    assert_int_equal(r->kind, TE_S_IF);
    assert_int_equal(r->u.cond.then_s->kind, TE_S_STORE);
    assert_ramp(r->u.cond.then_s->u.store.idx[0], 1, 16);
}

static void test_select_and_guarded_load_vectorize(void **state)
{
    fx *f = *state;
    te_expr *a = ld(f, f->A, idx(f));
    te_expr *sel = te_select(f->ctx, te_lt(f->ctx, f->v, I(f, 5)), a, te_f32(f->ctx, 0));
    te_stmt *r = run(f, I(f, 16), st(f, f->C, idx(f), sel));
    assert_int_equal(r->kind, TE_S_STORE);
    assert_int_equal(r->u.store.value->kind, TE_E_SELECT);
    assert_int_equal(r->u.store.value->lanes, 16);
    assert_int_equal(r->u.store.value->u.sel.c->lanes, 16);
    /* if_then_else guarding a load (padding) must not become a plain blend of loads: the
     * load becomes a gather that reads element 0 in the lanes the guard excludes */
    te_expr *ite = te_if_then_else(f->ctx, te_lt(f->ctx, f->v, I(f, 5)), ld(f, f->A, idx(f)),
                                   te_f32(f->ctx, 0));
    r = run(f, I(f, 16), st(f, f->C, idx(f), ite));
    assert_int_equal(r->kind, TE_S_STORE);
    assert_int_equal(r->u.store.value->kind, TE_E_SELECT);
    const te_expr *g = r->u.store.value->u.sel.t;
    assert_int_equal(g->kind, TE_E_LOAD);
    assert_int_equal(g->lanes, 16);
    assert_int_equal(g->u.load.idx[0]->kind, TE_E_SELECT); /* masked index */
    assert_int_equal(g->u.load.idx[0]->lanes, 16);
    assert_ramp(g->u.load.idx[0]->u.sel.t, 1, 16);
    assert_int_equal(g->u.load.idx[0]->u.sel.f->kind, TE_E_BCAST);
    /* without loads it is a blend */
    te_expr *ite2 =
        te_if_then_else(f->ctx, te_lt(f->ctx, f->v, I(f, 5)), te_f32(f->ctx, 1), te_f32(f->ctx, 0));
    r = run(f, I(f, 16), st(f, f->C, idx(f), ite2));
    assert_int_equal(r->u.store.value->kind, TE_E_SELECT);
}

/* Evaluates a vectorized store C[ramp] = value lane by lane with A = a (n elements); records
 * every index read. Only what the masked loads need: loads, ramps, broadcasts, selects,
 * comparisons, and, not, +, -, *. */
typedef struct lane_env {
    fx *f;
    const te_expr *o;
    int64_t o_val;
    const float *a;
    int64_t n;
    bool oob; /* an index outside [0, n) was read */
} lane_env;

static double lane_eval(lane_env *env, const te_expr *e, int l)
{
    switch (e->kind) {
    case TE_E_INT:
        return (double)e->u.i;
    case TE_E_FLOAT:
        return e->u.f;
    case TE_E_VAR:
        assert_ptr_equal(e, env->o);
        return (double)env->o_val;
    case TE_E_RAMP:
        return lane_eval(env, e->u.ramp.base, 0) + (double)(e->u.ramp.stride * l);
    case TE_E_BCAST:
        return lane_eval(env, e->u.un.a, 0);
    case TE_E_NOT:
        return !lane_eval(env, e->u.un.a, l);
    case TE_E_SELECT:
        return lane_eval(env, e->u.sel.c, e->u.sel.c->lanes > 1 ? l : 0)
                   ? lane_eval(env, e->u.sel.t, e->u.sel.t->lanes > 1 ? l : 0)
                   : lane_eval(env, e->u.sel.f, e->u.sel.f->lanes > 1 ? l : 0);
    case TE_E_LOAD: {
        const te_expr *ix = e->u.load.idx[0];
        int64_t i = (int64_t)lane_eval(env, ix, ix->lanes > 1 ? l : 0);
        if (i < 0 || i >= env->n) {
            env->oob = true;
            return NAN;
        }
        return env->a[i];
    }
    case TE_E_BINARY: {
        const te_expr *ea = e->u.bin.a, *eb = e->u.bin.b;
        double a = lane_eval(env, ea, ea->lanes > 1 ? l : 0);
        double b = lane_eval(env, eb, eb->lanes > 1 ? l : 0);
        switch (e->u.bin.op) {
        case TE_ADD:
            return a + b;
        case TE_SUB:
            return a - b;
        case TE_MUL:
            return a * b;
        case TE_LT:
            return a < b;
        case TE_GE:
            return a >= b;
        case TE_AND:
            return a && b;
        default:
            break;
        }
        break;
    }
    default:
        break;
    }
    fail_msg("lane_eval: unexpected expression kind %d", (int)e->kind);
    return 0;
}

/* A 1-D stencil over A[0, 64): C[i] = (i >= 1 ? A[i-1] : 0) + A[i] + (i + 1 < 64 ? A[i+1] : 0)
 * with i = i_o * 16 + i_i. Used to be kept scalar; now a vector store whose masked loads never
 * read outside A, with the scalar program's values in every lane. */
static void test_guarded_stencil_reads_stay_in_bounds(void **state)
{
    fx *f = *state;
    te_ctx *c = f->ctx;
    int64_t n = 64;
    te_buf *A = te__buf_new(c, "A", TE_F32, 1, &n, TE_SCOPE_GLOBAL);
    te_expr *i = idx(f), *im = te_sub(c, idx(f), I(f, 1)), *ip = te_add(c, idx(f), I(f, 1));
    te_expr *lo = te_if_then_else(c, te_ge(c, im, I(f, 0)), ld(f, A, im), te_f32(c, 0));
    te_expr *hi = te_if_then_else(c, te_lt(c, ip, I(f, n)), ld(f, A, ip), te_f32(c, 0));
    /* nested: the inner guard is invariant, the outer one is not: still masked */
    te_expr *nest = te_if_then_else(
        c, te_lt(c, i, I(f, 60)),
        te_if_then_else(c, te_lt(c, f->o, I(f, 3)), ld(f, A, i), te_f32(c, 2)), te_f32(c, 0));
    te_expr *val = te_add(c, te_add(c, te_add(c, lo, ld(f, A, i)), hi), nest);
    te_stmt *r = run(f, I(f, 16), st(f, f->C, i, val));
    assert_int_equal(r->kind, TE_S_STORE);
    assert_ramp(r->u.store.idx[0], 1, 16);
    float a[64];
    for (int k = 0; k < 64; k++)
        a[k] = (float)(k * 7 % 13) + 0.5f;
    for (int64_t o = 0; o < 4; o++) {
        lane_env env = {f, f->o, o, a, n, false};
        for (int l = 0; l < 16; l++) {
            int64_t x = o * 16 + l;
            double want = (x >= 1 ? a[x - 1] : 0) + a[x] + (x + 1 < n ? a[x + 1] : 0) +
                          (x < 60 ? (o < 3 ? a[x] : 2) : 0);
            double got = lane_eval(&env, r->u.store.value, l);
            assert_false(env.oob);
            assert_true(got == want);
        }
    }
}

/* Constant strides other than 1 are gathers (ramps of that stride), never a fallback. */
static void test_constant_strides_are_gathers(void **state)
{
    fx *f = *state;
    for (int64_t k = -3; k <= 4; k++) {
        te_expr *ix = te_add(f->ctx, te_mul(f->ctx, f->v, I(f, k)), I(f, 100));
        te_stmt *r = run(f, I(f, 16), st(f, f->C, idx(f), ld(f, f->A, ix)));
        assert_int_equal(r->kind, TE_S_STORE);
        const te_expr *l = r->u.store.value;
        if (k == 0) {
            assert_int_equal(l->kind, TE_E_BCAST);
            continue;
        }
        assert_int_equal(l->kind, TE_E_LOAD);
        assert_ramp(l->u.load.idx[0], k, 16);
    }
}

/* Every fallback says why. */
static void test_fallback_reasons(void **state)
{
    fx *f = *state;
    te_stmt *body = st(f, f->C, f->v, ld(f, f->A, f->v));
    assert_string_equal(
        fallback_reason(run(f, I(f, 12), body)),
        "extent 12 is not a power of two in [2, 64] or a multiple of the register width");
    assert_string_equal(fallback_reason(run(f, f->o, body)), "the extent is not a constant");
    assert_string_equal(fallback_reason(run(f, I(f, 16), st(f, f->C, f->o, ld(f, f->A, idx(f))))),
                        "every lane stores to the same element (a reduction)");
    te_stmt *g = te__if(f->ctx, te_lt(f->ctx, idx(f), I(f, 1000)), body, NULL);
    assert_string_equal(fallback_reason(run(f, I(f, 16), g)),
                        "an if statement whose condition depends on the lane");
    te_expr *k = te__loop_var(f->ctx, "k", 4);
    te_stmt *inner = te__for(f->ctx, k, I(f, 0), I(f, 4), TE_FOR_SERIAL, body);
    assert_string_equal(fallback_reason(run(f, I(f, 16), inner)), "a nested loop in the body");
}

static void test_bad_lane_counts_fall_back(void **state)
{
    fx *f = *state;
    te_stmt *body = st(f, f->C, f->v, ld(f, f->A, f->v));
    assert_serial(run(f, I(f, 12), body));  /* not a power of two */
    assert_serial(run(f, I(f, 128), body)); /* too wide */
    assert_serial(run(f, I(f, 1), body));
    assert_serial(run(f, f->o, body)); /* extent not constant */
    te_stmt *r = run(f, I(f, 64), body);
    assert_int_equal(r->kind, TE_S_STORE);
    assert_ramp(r->u.store.idx[0], 1, 64);
}

static void test_nested_loop_falls_back(void **state)
{
    fx *f = *state;
    te_expr *k = te__loop_var(f->ctx, "k", 4);
    te_stmt *inner =
        te__for(f->ctx, k, I(f, 0), I(f, 4), TE_FOR_SERIAL, st(f, f->C, idx(f), ld(f, f->A, k)));
    assert_serial(run(f, I(f, 16), inner));
}

static void test_calls_casts_and_lets_vectorize(void **state)
{
    fx *f = *state;
    te_expr *t = te_var(f->ctx, "t", TE_F32);
    te_expr *val =
        te_exp(f->ctx, te_max(f->ctx, ld(f, f->A, idx(f)), te_cast(f->ctx, TE_F32, f->v)));
    te_stmt *body =
        te__let(f->ctx, t, val, st(f, f->C, idx(f), te_mul(f->ctx, t, ld(f, f->B, f->o))));
    te_stmt *r = run(f, I(f, 16), body);
    assert_int_equal(r->kind, TE_S_LET);
    assert_int_equal(r->u.let.var->lanes, 16);
    assert_int_equal(r->u.let.var->u.var.id, t->u.var.id); /* same variable, now a vector */
    assert_int_equal(r->u.let.value->kind, TE_E_CALL);
    assert_int_equal(r->u.let.value->lanes, 16);
    const te_stmt *s = r->u.let.body;
    assert_int_equal(s->kind, TE_S_STORE);
    assert_ptr_equal(s->u.store.value->u.bin.a, r->u.let.var);
    assert_int_equal(s->u.store.value->u.bin.b->kind, TE_E_BCAST);
}

static void test_outer_loops_untouched(void **state)
{
    fx *f = *state;
    te_stmt *vec = te__for(f->ctx, f->v, I(f, 0), I(f, 16), TE_FOR_VECTORIZED,
                           st(f, f->C, idx(f), ld(f, f->A, idx(f))));
    te_stmt *outer = te__for(f->ctx, f->o, I(f, 0), I(f, 64), TE_FOR_PARALLEL, vec);
    te_stmt *r = te__pass_vectorize(TE_PC(f->ctx), outer);
    assert_int_equal(r->kind, TE_S_FOR);
    assert_int_equal(r->u.loop.fkind, TE_FOR_PARALLEL);
    assert_int_equal(r->u.loop.body->kind, TE_S_STORE);
    /* the input is not mutated */
    assert_int_equal(outer->u.loop.body->kind, TE_S_FOR);
    /* streaming flag survives */
    te_stmt *s = st(f, f->C, idx(f), ld(f, f->A, idx(f)));
    s->u.store.nontemporal = true;
    r = run(f, I(f, 16), s);
    assert_true(r->u.store.nontemporal);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_contiguous_becomes_ramp, setup, teardown),
        cmocka_unit_test_setup_teardown(test_invariant_load_is_broadcast, setup, teardown),
        cmocka_unit_test_setup_teardown(test_strided_load_and_store, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nonlinear_index_is_gather, setup, teardown),
        cmocka_unit_test_setup_teardown(test_divisions_within_a_block_are_ramps, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reduction_into_scalar_falls_back, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lane_dependent_if_falls_back, setup, teardown),
        cmocka_unit_test_setup_teardown(test_select_and_guarded_load_vectorize, setup, teardown),
        cmocka_unit_test_setup_teardown(test_guarded_stencil_reads_stay_in_bounds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_constant_strides_are_gathers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fallback_reasons, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_lane_counts_fall_back, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nested_loop_falls_back, setup, teardown),
        cmocka_unit_test_setup_teardown(test_calls_casts_and_lets_vectorize, setup, teardown),
        cmocka_unit_test_setup_teardown(test_outer_loops_untouched, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Tests for schedule/passes/vectorize.c on hand-built, storage-flattened loop IR. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

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
static te_stmt *st(fx *f, te_buf *b, te_expr *i, te_expr *v) { return te__store(f->ctx, b, 1, &i, v); }
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

static void assert_serial(const te_stmt *r)
{
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
    te_stmt *r = run(f, I(f, 16), st(f, f->C, idx(f), te_add(f->ctx, ld(f, f->A, idx(f)), ld(f, f->B, idx(f)))));
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
    te_stmt *r = run(f, I(f, 16), st(f, f->C, idx(f), te_mul(f->ctx, ld(f, f->A, idx(f)), ld(f, f->B, f->o))));
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

static void test_reduction_into_scalar_falls_back(void **state)
{
    fx *f = *state;
    /* C[i_o] = C[i_o] + A[i]: every lane writes the same element */
    te_stmt *r = run(f, I(f, 16), st(f, f->C, f->o, te_add(f->ctx, ld(f, f->C, f->o), ld(f, f->A, idx(f)))));
    assert_serial(r);
    /* x - x: mentions the lane, but does not depend on it */
    r = run(f, I(f, 16), st(f, f->C, te_sub(f->ctx, f->v, f->v), ld(f, f->A, idx(f))));
    assert_serial(r);
}

static void test_lane_dependent_if_falls_back(void **state)
{
    fx *f = *state;
    te_stmt *body = te__if(f->ctx, te_lt(f->ctx, idx(f), I(f, 1000)), st(f, f->C, idx(f), ld(f, f->A, idx(f))), NULL);
    assert_serial(run(f, I(f, 16), body));
    /* an if on the outer variable only stays an if around vector code */
    body = te__if(f->ctx, te_lt(f->ctx, f->o, I(f, 10)), st(f, f->C, idx(f), ld(f, f->A, idx(f))), NULL);
    te_stmt *r = run(f, I(f, 16), body);
    assert_int_equal(r->kind, TE_S_IF);
    assert_int_equal(r->u.cond.then_s->kind, TE_S_STORE);
    assert_ramp(r->u.cond.then_s->u.store.idx[0], 1, 16);
}

static void test_select_vectorizes_guarded_load_does_not(void **state)
{
    fx *f = *state;
    te_expr *a = ld(f, f->A, idx(f));
    te_expr *sel = te_select(f->ctx, te_lt(f->ctx, f->v, I(f, 5)), a, te_f32(f->ctx, 0));
    te_stmt *r = run(f, I(f, 16), st(f, f->C, idx(f), sel));
    assert_int_equal(r->kind, TE_S_STORE);
    assert_int_equal(r->u.store.value->kind, TE_E_SELECT);
    assert_int_equal(r->u.store.value->lanes, 16);
    assert_int_equal(r->u.store.value->u.sel.c->lanes, 16);
    /* if_then_else guarding a load (padding) must not become a blend */
    te_expr *ite = te_if_then_else(f->ctx, te_lt(f->ctx, f->v, I(f, 5)), ld(f, f->A, idx(f)), te_f32(f->ctx, 0));
    assert_serial(run(f, I(f, 16), st(f, f->C, idx(f), ite)));
    /* without loads it is a blend */
    te_expr *ite2 = te_if_then_else(f->ctx, te_lt(f->ctx, f->v, I(f, 5)), te_f32(f->ctx, 1), te_f32(f->ctx, 0));
    r = run(f, I(f, 16), st(f, f->C, idx(f), ite2));
    assert_int_equal(r->u.store.value->kind, TE_E_SELECT);
}

static void test_bad_lane_counts_fall_back(void **state)
{
    fx *f = *state;
    te_stmt *body = st(f, f->C, f->v, ld(f, f->A, f->v));
    assert_serial(run(f, I(f, 12), body));  /* not a power of two */
    assert_serial(run(f, I(f, 128), body)); /* too wide */
    assert_serial(run(f, I(f, 1), body));
    assert_serial(run(f, f->o, body));      /* extent not constant */
    te_stmt *r = run(f, I(f, 64), body);
    assert_int_equal(r->kind, TE_S_STORE);
    assert_ramp(r->u.store.idx[0], 1, 64);
}

static void test_nested_loop_falls_back(void **state)
{
    fx *f = *state;
    te_expr *k = te__loop_var(f->ctx, "k", 4);
    te_stmt *inner = te__for(f->ctx, k, I(f, 0), I(f, 4), TE_FOR_SERIAL, st(f, f->C, idx(f), ld(f, f->A, k)));
    assert_serial(run(f, I(f, 16), inner));
}

static void test_calls_casts_and_lets_vectorize(void **state)
{
    fx *f = *state;
    te_expr *t = te_var(f->ctx, "t", TE_F32);
    te_expr *val = te_exp(f->ctx, te_max(f->ctx, ld(f, f->A, idx(f)), te_cast(f->ctx, TE_F32, f->v)));
    te_stmt *body = te__let(f->ctx, t, val, st(f, f->C, idx(f), te_mul(f->ctx, t, ld(f, f->B, f->o))));
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
        cmocka_unit_test_setup_teardown(test_reduction_into_scalar_falls_back, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lane_dependent_if_falls_back, setup, teardown),
        cmocka_unit_test_setup_teardown(test_select_vectorizes_guarded_load_does_not, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_lane_counts_fall_back, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nested_loop_falls_back, setup, teardown),
        cmocka_unit_test_setup_teardown(test_calls_casts_and_lets_vectorize, setup, teardown),
        cmocka_unit_test_setup_teardown(test_outer_loops_untouched, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

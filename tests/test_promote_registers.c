/* Tests of register promotion (schedule/passes/promote_registers.c): which local buffers are
 * marked to live in variables, what the mark says per element, what stays in memory, and that
 * the program (run before and after) and everything else in it is unchanged. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "passes_testlib.h"
#include "tessera/ops.h"

#define I(v) te_int(c, (v))

static te_stmt *st1(te_ctx *c, te_buf *b, te_expr *ix, te_expr *v)
{
    return te__store(c, b, 1, &ix, v);
}

static te_expr *ld1(te_ctx *c, te_buf *b, te_expr *ix) { return te__load(c, b, 1, &ix); }

static te__pass_ctx pcx(te_ctx *c)
{
    static te_target t;
    t = (te_target){.backend = TE_BACKEND_C, .vector_bits = 512};
    return (te__pass_ctx){.ctx = c, .target = &t};
}

/* The ALLOC of b in s (first found), or NULL. */
static const te_stmt *find_alloc(const te_stmt *s, const te_buf *b)
{
    if (!s)
        return NULL;
    const te_stmt *r = NULL;
    switch (s->kind) {
    case TE_S_ALLOC:
        return s->u.alloc.buf == b ? s : find_alloc(s->u.alloc.body, b);
    case TE_S_FOR:
        return find_alloc(s->u.loop.body, b);
    case TE_S_LET:
        return find_alloc(s->u.let.body, b);
    case TE_S_IF:
        return (r = find_alloc(s->u.cond.then_s, b)) ? r : find_alloc(s->u.cond.else_s, b);
    case TE_S_SEQ:
        for (int i = 0; i < s->u.seq.n && !r; i++)
            r = find_alloc(s->u.seq.v[i], b);
        return r;
    default:
        return NULL;
    }
}

static const te__promotion *promotion_of(const te_stmt *s, const te_buf *b)
{
    const te_stmt *a = find_alloc(s, b);
    assert_non_null(a);
    return a->u.alloc.promote;
}

/* Runs a and b with output C (n elements) and compares it. */
static void check_same(const te_stmt *a, const te_stmt *b, te_buf *C, int64_t n)
{
    assert_true(pt_same_effect(a, b, &(pt_run){.out = C, .n = n}));
}

/* An unrolled scalar accumulator: T[0..3] = 0; for k: T[j] += k * (j + 1); C[j] = T[j]. */
static void test_scalar_accumulators_promoted(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_buf *C = te__buf_new(c, "C", TE_F32, 1, (int64_t[]){4}, TE_SCOPE_GLOBAL);
    te_buf *T = te__buf_new(c, "T", TE_F32, 2, (int64_t[]){2, 2}, TE_SCOPE_LOCAL);
    te_expr *k = te__loop_var(c, "k", 10);
    te_stmt *init = NULL, *upd = NULL, *out = NULL;
    for (int j = 0; j < 4; j++) {
        te_expr *ix[2] = {I(j / 2), I(j % 2)};
        init = te__seq2(c, init, te__store(c, T, 2, ix, te_f32(c, 0)));
        te_expr *add = te_add(c, te__load(c, T, 2, ix), te_cast(c, TE_F32, te_mul(c, k, I(j + 1))));
        upd = te__seq2(c, upd, te__store(c, T, 2, ix, add));
        out = te__seq2(c, out, st1(c, C, I(j), te__load(c, T, 2, ix)));
    }
    te_stmt *loop = te__for(c, k, I(0), I(10), TE_FOR_SERIAL, upd);
    te_stmt *prog = te__alloc_stmt(c, T, te__seq(c, 3, (te_stmt *[]){init, loop, out}));
    te__pass_ctx pc = pcx(c);
    te_stmt *r = te__pass_promote_registers(&pc, prog);
    assert_non_null(r);
    const te__promotion *p = promotion_of(r, T);
    assert_non_null(p);
    assert_int_equal(p->lanes, 0);
    assert_int_equal(p->size, 4);
    for (int i = 0; i < 4; i++)
        assert_int_equal(p->kind[i], TE_PROMO_SCALAR);
    /* the input is not changed, and the body is shared */
    assert_null(prog->u.alloc.promote);
    assert_ptr_equal(r->u.alloc.body, prog->u.alloc.body);
    char *txt = pt_print(r);
    assert_non_null(strstr(txt, "allocate T[f32 x 2 x 2], local, registers (scalars)\n"));
    free(txt);
    check_same(prog, r, C, 4);
    te_ctx_free(c);
}

/* Vector chunks, a scalar lane inside one, a scalar outside any, an element never used. */
static void test_vector_chunks_lanes_and_scalars(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_buf *A = te__buf_new(c, "A", TE_F32, 1, (int64_t[]){16}, TE_SCOPE_GLOBAL);
    te_buf *C = te__buf_new(c, "C", TE_F32, 1, (int64_t[]){20}, TE_SCOPE_GLOBAL);
    te_buf *T = te__buf_new(c, "T", TE_F32, 1, (int64_t[]){20}, TE_SCOPE_LOCAL);
    te_expr *r0 = te__ramp(c, I(0), 1, 8), *r8 = te__ramp(c, I(8), 1, 8);
    te_stmt *s = te__seq(
        c, 5,
        (te_stmt *[]){st1(c, T, r0, ld1(c, A, r0)), st1(c, T, r8, ld1(c, A, r8)),
                      st1(c, T, I(17), te_f32(c, 2.5)),
                      st1(c, T, te_add(c, I(1), I(2)), te_mul(c, ld1(c, T, I(3)), te_f32(c, 10))),
                      st1(c, C, r0, ld1(c, T, r0))});
    te_stmt *prog = te__alloc_stmt(c, T, te__seq2(c, s, st1(c, C, I(16), ld1(c, T, I(17)))));
    te__pass_ctx pc = pcx(c);
    te_stmt *r = te__pass_promote_registers(&pc, prog);
    const te__promotion *p = promotion_of(r, T);
    assert_non_null(p);
    assert_int_equal(p->lanes, 8);
    assert_int_equal(p->size, 20);
    for (int i = 0; i < 16; i++)
        assert_int_equal(p->kind[i], TE_PROMO_LANE); /* 3 (1 + 2, folded) is a lane of chunk 0 */
    assert_int_equal(p->kind[16], TE_PROMO_UNUSED);
    assert_int_equal(p->kind[17], TE_PROMO_SCALAR);
    assert_int_equal(p->kind[18], TE_PROMO_UNUSED);
    char *txt = pt_print(r);
    assert_non_null(strstr(txt, ", local, registers (vectors of 8)\n"));
    free(txt);
    te_ctx_free(c);
}

/* What stays in memory: a loop-variant index, a misaligned or strided vector, two lane counts,
 * an index out of range, global scope, bool data, too many elements, no access at all. */
static void test_refusals(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te__pass_ctx pc = pcx(c);
    te_buf *C = te__buf_new(c, "C", TE_F32, 1, (int64_t[]){64}, TE_SCOPE_GLOBAL);
    te_expr *i = te__loop_var(c, "i", 16);
    struct {
        const char *what;
        te_dtype dt;
        int64_t n;
        te_scope scope;
        int kind;
    } cases[] = {
        {"variant", TE_F32, 16, TE_SCOPE_LOCAL, 0},
        {"misaligned", TE_F32, 16, TE_SCOPE_LOCAL, 1},
        {"strided", TE_F32, 16, TE_SCOPE_LOCAL, 2},
        {"two widths", TE_F32, 16, TE_SCOPE_LOCAL, 3},
        {"out of range", TE_F32, 16, TE_SCOPE_LOCAL, 4},
        {"global", TE_F32, 16, TE_SCOPE_GLOBAL, 5},
        {"bool", TE_BOOL, 16, TE_SCOPE_LOCAL, 5},
        {"too big", TE_F32, TE__PROMOTE_MAX + 1, TE_SCOPE_LOCAL, 5},
        {"unused", TE_F32, 16, TE_SCOPE_LOCAL, 6},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        te_buf *T = te__buf_new(c, "T", cases[k].dt, 1, (int64_t[]){cases[k].n}, cases[k].scope);
        te_expr *zero = te_const(c, cases[k].dt, 0);
        te_stmt *body = NULL;
        switch (cases[k].kind) {
        case 0:
            body = te__for(c, i, I(0), I(16), TE_FOR_SERIAL, st1(c, T, i, zero));
            break;
        case 1:
            body = st1(c, T, te__ramp(c, I(4), 1, 8), te__bcast(c, zero, 8));
            break;
        case 2:
            body = st1(c, T, te__ramp(c, I(0), 2, 8), te__bcast(c, zero, 8));
            break;
        case 3:
            body = te__seq2(c, st1(c, T, te__ramp(c, I(0), 1, 8), te__bcast(c, zero, 8)),
                            st1(c, T, te__ramp(c, I(8), 1, 4), te__bcast(c, zero, 4)));
            break;
        case 4:
            body = st1(c, T, I(16), zero);
            break;
        case 5:
            body = st1(c, T, I(3), zero);
            break;
        case 6:
            body = st1(c, C, I(0), te_f32(c, 1));
            break;
        }
        te_stmt *prog = te__alloc_stmt(c, T, body);
        te_stmt *r = te__pass_promote_registers(&pc, prog);
        assert_non_null(r);
        if (promotion_of(r, T))
            fail_msg("case '%s' was promoted", cases[k].what);
        assert_ptr_equal(r, prog); /* nothing to change: the same statement */
    }
    /* a load with a variant index refuses as a store does */
    te_buf *T = te__buf_new(c, "T", TE_F32, 1, (int64_t[]){16}, TE_SCOPE_LOCAL);
    te_stmt *prog = te__alloc_stmt(
        c, T,
        te__seq2(c, st1(c, T, I(0), te_f32(c, 1)),
                 te__for(c, i, I(0), I(16), TE_FOR_SERIAL, st1(c, C, i, ld1(c, T, i)))));
    assert_null(promotion_of(te__pass_promote_registers(&pc, prog), T));
    te_ctx_free(c);
}

/* Statements around a promoted buffer keep what they carry; nested allocations are decided
 * one by one. */
static void test_rebuild_keeps_fields(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_buf *C = te__buf_new(c, "C", TE_F32, 1, (int64_t[]){64}, TE_SCOPE_GLOBAL);
    te_buf *T = te__buf_new(c, "T", TE_F32, 1, (int64_t[]){2}, TE_SCOPE_LOCAL);
    te_buf *U = te__buf_new(c, "U", TE_F32, 1, (int64_t[]){64}, TE_SCOPE_LOCAL);
    te_expr *b = te__loop_var(c, "b", 4), *i = te__loop_var(c, "i", 16);
    te_expr *ix = te_add(c, te_mul(c, b, I(16)), i);
    te_stmt *inner =
        te__seq(c, 4,
                (te_stmt *[]){st1(c, T, I(0), te_cast(c, TE_F32, b)), st1(c, T, I(1), te_f32(c, 3)),
                              st1(c, U, ix, te_add(c, ld1(c, T, I(0)), ld1(c, T, I(1)))),
                              st1(c, C, ix, ld1(c, U, ix))});
    inner->u.seq.v[3]->u.store.nontemporal = true;
    te_stmt *iloop = te__for(c, i, I(0), I(16), TE_FOR_VECTORIZED, inner);
    te_stmt *prog =
        te__alloc_stmt(c, U,
                       te__for(c, b, I(0), I(4), TE_FOR_THREAD,
                               te__if(c, te_lt(c, b, I(3)), te__alloc_stmt(c, T, iloop), NULL)));
    prog->u.alloc.body->u.loop.thread_tag = TE_THREAD_X;
    te__pass_ctx pc = pcx(c);
    te_stmt *r = te__pass_promote_registers(&pc, prog);
    assert_non_null(r);
    assert_null(promotion_of(r, U)); /* variant index */
    const te__promotion *p = promotion_of(r, T);
    assert_non_null(p);
    assert_int_equal(p->kind[0], TE_PROMO_SCALAR);
    assert_int_equal(p->kind[1], TE_PROMO_SCALAR);
    const te_stmt *bl = r->u.alloc.body;
    assert_int_equal(bl->kind, TE_S_FOR);
    assert_int_equal(bl->u.loop.fkind, TE_FOR_THREAD);
    assert_int_equal(bl->u.loop.thread_tag, TE_THREAD_X);
    assert_int_equal(bl->u.loop.body->kind, TE_S_IF);
    const te_stmt *ta = find_alloc(r, T);
    assert_ptr_equal(ta->u.alloc.body, iloop); /* unchanged below the mark: shared */
    char *before = pt_print(prog), *after = pt_print(r);
    /* the printed IR differs only by the mark */
    assert_int_equal(pt_count(after, "registers"), 1);
    assert_int_equal(pt_count(before, "registers"), 0);
    assert_int_equal(pt_count(after, "// streaming"), 1);
    free(before);
    free(after);
    /* promoting again changes nothing */
    assert_ptr_equal(te__pass_promote_registers(&pc, r), r);
    te_ctx_free(c);
}

static void test_pipeline_runs_it_last_for_c_targets(void **state)
{
    (void)state;
    int n = te__pipeline_n;
    assert_string_equal(te__pipeline[n - 1].name, "promote_registers");
    assert_true(te__pipeline[n - 1].run == te__pass_promote_registers);
    assert_int_equal(te__pipeline[n - 1].when, TE_PASS_C);
    /* after legalization, in the order the C emitter applied them */
    assert_true(te__pipeline[n - 2].run == te__pass_legalize_vectors);
}

/* Through te_lower: a register-tiled matmul (cache_write local, compute_at, unroll, vectorize)
 * ends with its accumulator tile marked, in chunks of the target's register width. */
static const te_stmt *find_promoted(const te_stmt *s)
{
    if (!s)
        return NULL;
    const te_stmt *r = NULL;
    switch (s->kind) {
    case TE_S_ALLOC:
        return s->u.alloc.promote ? s : find_promoted(s->u.alloc.body);
    case TE_S_FOR:
        return find_promoted(s->u.loop.body);
    case TE_S_LET:
        return find_promoted(s->u.let.body);
    case TE_S_IF:
        return (r = find_promoted(s->u.cond.then_s)) ? r : find_promoted(s->u.cond.else_s);
    case TE_S_SEQ:
        for (int i = 0; i < s->u.seq.n && !r; i++)
            r = find_promoted(s->u.seq.v[i]);
        return r;
    default:
        return NULL;
    }
}

static void test_lowered_register_tile(void **state)
{
    (void)state;
    for (int bits = 256; bits <= 512; bits += 256) {
        te_ctx *c = te_ctx_create();
        te_tensor *in[TE_OP_MAX_IO], *out[TE_OP_MAX_IO];
        int ni, no;
        assert_int_equal(te_op_build(c, "matmul", "m=8,n=32,k=16", in, &ni, out, &no), TE_OK);
        te_schedule *s = te_schedule_create(c, 1, out);
        te_tensor *CL = te_cache_write(s, out[0], TE_SCOPE_LOCAL);
        assert_non_null(CL);
        te_stage *sc = te_schedule_stage(s, out[0]), *sl = te_schedule_stage(s, CL);
        te_iter *io, *jo, *ii, *ji;
        assert_int_equal(
            te_tile(sc, te_stage_axis(sc, 0), te_stage_axis(sc, 1), 4, 16, &io, &jo, &ii, &ji),
            TE_OK);
        assert_int_equal(te_vectorize(sc, ji), TE_OK);
        assert_int_equal(te_unroll(sc, ii), TE_OK); /* the tile is read at constant indices */
        assert_int_equal(te_compute_at(sl, sc, jo), TE_OK);
        te_iter *k = te_stage_reduce_axis(sl, 0);
        assert_int_equal(
            te_reorder(sl, 3, (te_iter *[]){k, te_stage_axis(sl, 0), te_stage_axis(sl, 1)}), TE_OK);
        assert_int_equal(te_unroll(sl, te_stage_axis(sl, 0)), TE_OK);
        assert_int_equal(te_vectorize(sl, te_stage_axis(sl, 1)), TE_OK);
        te_target t = {.backend = TE_BACKEND_C, .vector_bits = bits, .num_cores = 1};
        te_lowered *f = te_lower(s, 3, (te_tensor *[]){in[0], in[1], out[0]}, "mm", &t);
        if (!f)
            fail_msg("%s", te_ctx_errmsg(c));
        const te_stmt *a = find_promoted(f->body);
        assert_non_null(a);
        assert_string_equal(a->u.alloc.buf->name, "matmul_local");
        const te__promotion *p = a->u.alloc.promote;
        assert_int_equal(p->lanes, bits / 32);
        assert_int_equal(p->size, 64);
        for (int i = 0; i < 64; i++)
            assert_int_equal(p->kind[i], TE_PROMO_LANE);
        te_ctx_free(c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scalar_accumulators_promoted),
        cmocka_unit_test(test_vector_chunks_lanes_and_scalars),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_rebuild_keeps_fields),
        cmocka_unit_test(test_pipeline_runs_it_last_for_c_targets),
        cmocka_unit_test(test_lowered_register_tile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

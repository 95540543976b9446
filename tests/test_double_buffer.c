/* Tests of double buffering: a shared tile marked te_double_buffer and allocated at the top of
 * a serial loop's body gets a leading axis of 2; when its fill comes first in the body it moves
 * ahead (the prologue fills half 0, iteration v fills half (v + 1) % 2 while it reads half v % 2,
 * one barrier per iteration, placed by the pass), otherwise iteration v uses half v % 2; tiles
 * not marked keep their shape; without a schedule or a mark the program comes back unchanged;
 * and the double-buffered matmuls built for the C target match te_reference_eval. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "gpu_testlib.h"
#include "tessera/cuda.h"
#include "tessera/ops.h"
#include "testutil.h"

typedef struct mm {
    te_ctx *c;
    te_tensor *A, *B, *C;
    te_schedule *s;
} mm;

/* The matmul template; db: 0 none, 1 both tiles (the knob), 2 only A's tile, 3 only B's (marked
 * after). */
static mm mm_make(int64_t M, int64_t N, int64_t K, int db)
{
    mm m;
    m.c = te_ctx_create();
    m.A = te_placeholder(m.c, "A", TE_F32, 2, (int64_t[]){M, K});
    m.B = te_placeholder(m.c, "B", TE_F32, 2, (int64_t[]){K, N});
    m.C = te_op_matmul(m.c, m.A, m.B, 0, 0, "C");
    m.s = te_schedule_create(m.c, 1, &m.C);
    te_cuda_knobs k = te_cuda_knobs_default("matmul");
    k.double_buffer = db == 1;
    assert_int_equal(te_cuda_schedule_matmul(m.s, m.C, NULL, &k), TE_OK);
    if (db == 2 || db == 3) {
        te_stage *as = te_schedule_stage_by_name(m.s, db == 2 ? "A_shared" : "B_shared");
        assert_non_null(as);
        assert_int_equal(te_double_buffer(as), TE_OK);
    }
    return m;
}

/* The shared allocations of s, by name. */
typedef struct {
    const te_buf *bufs[8];
    int n;
} allocs;

static bool alloc_fn(const te_stmt *s, void *user)
{
    allocs *a = user;
    if (s->kind == TE_S_ALLOC && s->u.alloc.buf->scope == TE_SCOPE_SHARED && a->n < 8)
        a->bufs[a->n++] = s->u.alloc.buf;
    return true;
}

static const te_buf *shared_named(const te_stmt *s, const char *name)
{
    allocs a = {.n = 0};
    te__stmt_visit(s, alloc_fn, NULL, &a);
    for (int i = 0; i < a.n; i++)
        if (strcmp(a.bufs[i]->name, name) == 0)
            return a.bufs[i];
    return NULL;
}

/* Every access to buf: its rank, and whether its first index is the half of this iteration,
 * floormod(k_o - 0, 2), or of the next, floormod((k_o + 1) - 0, 2), or the prologue's. */
typedef struct {
    const te_buf *buf;
    int accesses, wrong_rank, halves, next_halves, first;
} acc_ctx;

static bool is_var(const te_expr *e, const char *name)
{
    return e->kind == TE_E_VAR && strcmp(e->u.var.name, name) == 0;
}

static void one_access(acc_ctx *a, int n, te_expr *const *idx)
{
    a->accesses++;
    if (n != a->buf->ndim)
        a->wrong_rank++;
    /* floormod(x - min, 2) */
    const te_expr *h = idx[0];
    int64_t two = 0;
    if (!(h->kind == TE_E_BINARY && h->u.bin.op == TE_FLOORMOD &&
          te__is_const_int(h->u.bin.b, &two) && two == 2 && h->u.bin.a->kind == TE_E_BINARY &&
          h->u.bin.a->u.bin.op == TE_SUB))
        return;
    const te_expr *x = h->u.bin.a->u.bin.a;
    int64_t c = -1;
    if (is_var(x, "k_o"))
        a->halves++;
    else if (x->kind == TE_E_BINARY && x->u.bin.op == TE_ADD && is_var(x->u.bin.a, "k_o") &&
             te__is_const_int(x->u.bin.b, &c) && c == 1)
        a->next_halves++;
    else if (te__is_const_int(x, &c) && c == 0)
        a->first++;
}

static bool acc_expr(const te_expr *e, void *user)
{
    acc_ctx *a = user;
    if (e->kind == TE_E_LOAD && e->u.load.buf == a->buf)
        one_access(a, e->u.load.n, e->u.load.idx);
    return true;
}

static bool acc_stmt(const te_stmt *s, void *user)
{
    acc_ctx *a = user;
    if (s->kind == TE_S_STORE && s->u.store.buf == a->buf)
        one_access(a, s->u.store.n, s->u.store.idx);
    return true;
}

static acc_ctx accesses(const te_stmt *s, const te_buf *b)
{
    acc_ctx a = {b, 0, 0, 0, 0, 0};
    te__stmt_visit(s, acc_stmt, acc_expr, &a);
    return a;
}

static void test_double_buffer_prefetches_the_next_tile_into_the_other_half(void **state)
{
    (void)state;
    mm m = mm_make(64, 64, 32, 1);
    te_target tgt = te_target_cuda(80);
    gt_lowering L = gt_lower_until(m.s, 3, (te_tensor *[]){m.A, m.B, m.C}, &tgt, "double_buffer");
    te_stmt *out = te__pass_double_buffer(&L.pc, L.s);
    assert_non_null(out);
    assert_ptr_not_equal(out, L.s);
    for (int t = 0; t < 2; t++) {
        const char *name = t ? "B_shared" : "A_shared";
        const te_buf *b0 = shared_named(L.s, name), *b1 = shared_named(out, name);
        assert_non_null(b0);
        assert_non_null(b1);
        assert_int_equal(b1->ndim, b0->ndim + 1);
        assert_int_equal(b1->shape[0], 2);
        assert_true(b1->prefetched);
        for (int d = 0; d < b0->ndim; d++)
            assert_int_equal(b1->shape[d + 1], b0->shape[d]);
        /* no access to the old buffer is left; the prologue fills half 0, the loop fills the
         * next iteration's half and reads this iteration's */
        assert_int_equal(accesses(out, b0).accesses, 0);
        acc_ctx a = accesses(out, b1);
        assert_int_equal(a.wrong_rank, 0);
        assert_true(a.first >= 1 && a.next_halves == a.first && a.halves >= 1);
        assert_int_equal(a.first + a.next_halves + a.halves, a.accesses);
    }
    /* the barriers come with it: one after the prologue and one per iteration */
    assert_int_equal(gt_count_kind(out, TE_S_BARRIER), 2);
    char *txt = pt_print(out);
    assert_non_null(strstr(txt, "allocate A_shared[f32 x 2 x "));
    assert_non_null(strstr(txt, "if (((k_o + 1) < 4))"));
    free(txt);
    /* and the barrier pass adds none for the prefetched tiles */
    gt_lowering L2 = gt_lower_until(m.s, 3, (te_tensor *[]){m.A, m.B, m.C}, &tgt, "barrier");
    assert_int_equal(gt_count_kind(te__pass_barrier(&L2.pc, L2.s), TE_S_BARRIER), 2);
    te_ctx_free(m.c);
}

static void test_double_buffer_leaves_unmarked_tiles_and_programs_alone(void **state)
{
    (void)state;
    te_target tgt = te_target_cuda(80);
    /* nothing marked: the very same program */
    mm m = mm_make(64, 64, 32, 0);
    gt_lowering L = gt_lower_until(m.s, 3, (te_tensor *[]){m.A, m.B, m.C}, &tgt, "double_buffer");
    assert_ptr_equal(te__pass_double_buffer(&L.pc, L.s), L.s);
    /* without a schedule (a pass run by itself) there is nothing to read the marks from */
    assert_ptr_equal(te__pass_double_buffer(TE_PC(m.c), L.s), L.s);
    te_ctx_free(m.c);
    /* only A's tile marked: B's keeps its shape and accesses; A's fill is first in the k-step
     * and moves ahead */
    m = mm_make(64, 64, 32, 2);
    L = gt_lower_until(m.s, 3, (te_tensor *[]){m.A, m.B, m.C}, &tgt, "double_buffer");
    te_stmt *out = te__pass_double_buffer(&L.pc, L.s);
    const te_buf *a0 = shared_named(L.s, "A_shared"), *a1 = shared_named(out, "A_shared");
    const te_buf *b0 = shared_named(L.s, "B_shared"), *b1 = shared_named(out, "B_shared");
    assert_int_equal(a1->ndim, a0->ndim + 1);
    assert_true(a1->prefetched);
    assert_ptr_equal(b1, b0);
    assert_int_equal(accesses(out, b1).halves, 0);
    /* B's refill still needs its barrier: the prologue's, then two per k-step (B's fill is
     * read after it; the next iteration fills A's half and B after the one at the end) */
    gt_lowering L2 = gt_lower_until(m.s, 3, (te_tensor *[]){m.A, m.B, m.C}, &tgt, "barrier");
    assert_int_equal(gt_count_kind(te__pass_barrier(&L2.pc, L2.s), TE_S_BARRIER), 3);
    te_ctx_free(m.c);
    /* only B's tile marked: its fill comes after A's, which is not doubled, so it cannot move
     * ahead; the halves alternate (iteration v uses half v % 2) and the barrier pass places
     * the barriers, two per k-step as A needs */
    m = mm_make(64, 64, 32, 3);
    L = gt_lower_until(m.s, 3, (te_tensor *[]){m.A, m.B, m.C}, &tgt, "double_buffer");
    out = te__pass_double_buffer(&L.pc, L.s);
    b1 = shared_named(out, "B_shared");
    assert_int_equal(b1->ndim, 3);
    assert_false(b1->prefetched);
    acc_ctx a = accesses(out, b1);
    assert_true(a.accesses >= 2);
    assert_int_equal(a.halves, a.accesses);
    assert_int_equal(gt_count_kind(out, TE_S_BARRIER), 0);
    L2 = gt_lower_until(m.s, 3, (te_tensor *[]){m.A, m.B, m.C}, &tgt, "barrier");
    assert_int_equal(gt_count_kind(te__pass_barrier(&L2.pc, L2.s), TE_S_BARRIER), 2);
    te_ctx_free(m.c);
}

static void check_cpu_build(int64_t M, int64_t N, int64_t K, int db)
{
    mm m = mm_make(M, N, K, db);
    double err = gt_matmul_cpu_error(m.c, m.s, m.A, m.B, m.C, 40 + (uint64_t)db);
    if (!(err <= 1e-4))
        fail_msg("%lldx%lldx%lld db=%d: max rel err %g", (long long)M, (long long)N, (long long)K,
                 db, err);
    te_ctx_free(m.c);
}

static void test_double_buffered_matmul_on_the_c_target_matches_the_reference(void **state)
{
    (void)state;
    check_cpu_build(64, 64, 64, 1); /* 8 k-steps: both halves used several times */
    check_cpu_build(64, 64, 40, 2); /* an odd number of k-steps, one tile doubled */
    check_cpu_build(48, 72, 24, 3); /* only B's tile: halves without prefetching */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_double_buffer_prefetches_the_next_tile_into_the_other_half),
        cmocka_unit_test(test_double_buffer_leaves_unmarked_tiles_and_programs_alone),
        cmocka_unit_test(test_double_buffered_matmul_on_the_c_target_matches_the_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Tests of hoisting shared allocations: shared buffers allocated inside serial and thread loops
 * move to the top of their kernel's block body (once each), local
 * allocations and code outside kernels stay where they are, each kernel keeps its own, the
 * program computes the same (pt interpreter before and after), and a lowered matmul has its
 * tiles allocated directly inside the block loops. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "gpu_testlib.h"
#include "tessera/cuda.h"
#include "tessera/ops.h"
#include "testutil.h"

#define I(v) te_int(c, (v))

/* Counts the shared allocations of s, and those under a loop. */
typedef struct {
    int under_loop;
    int total;
} shared_ctx;

static void walk(const te_stmt *s, int loops, shared_ctx *sc)
{
    if (!s)
        return;
    switch (s->kind) {
    case TE_S_FOR:
        walk(s->u.loop.body, loops + 1, sc);
        break;
    case TE_S_SEQ:
        for (int i = 0; i < s->u.seq.n; i++)
            walk(s->u.seq.v[i], loops, sc);
        break;
    case TE_S_IF:
        walk(s->u.cond.then_s, loops, sc);
        walk(s->u.cond.else_s, loops, sc);
        break;
    case TE_S_ALLOC:
        if (s->u.alloc.buf->scope == TE_SCOPE_SHARED) {
            sc->total++;
            sc->under_loop += loops > 0;
        }
        walk(s->u.alloc.body, loops, sc);
        break;
    case TE_S_LET:
        walk(s->u.let.body, loops, sc);
        break;
    default:
        break;
    }
}

/* The block body of the kernel at s (inside its chain of block loops). */
static const te_stmt *block_body(const te_stmt *s)
{
    while (s->kind == TE_S_FOR && s->u.loop.fkind == TE_FOR_THREAD &&
           s->u.loop.thread_tag <= TE_BLOCK_Z)
        s = s->u.loop.body;
    return s;
}

typedef struct hp {
    te_ctx *c;
    te_buf *A, *B, *S1, *S2, *L;
    te_expr *bx, *ko, *tx, *tx2;
    te_stmt *kernel;
} hp;

/* bx(2) { for ko(3) { alloc S1; tx(8) { S1[tx] = A[..]; }; tx2(8) { alloc L (local); alloc S2;
 * S2[tx2] = S1[7 - tx2]; L[0] = S2[tx2] * 2; B[..] += L[0] } } } */
static void hp_init(hp *p)
{
    te_ctx *c = p->c = te_ctx_create();
    p->A = te__buf_new(c, "A", TE_F64, 1, (int64_t[]){48}, TE_SCOPE_GLOBAL);
    p->B = te__buf_new(c, "B", TE_F64, 1, (int64_t[]){16}, TE_SCOPE_GLOBAL);
    p->S1 = te__buf_new(c, "S1", TE_F64, 1, (int64_t[]){8}, TE_SCOPE_SHARED);
    p->S2 = te__buf_new(c, "S2", TE_F64, 1, (int64_t[]){8}, TE_SCOPE_SHARED);
    p->L = te__buf_new(c, "L", TE_F64, 1, (int64_t[]){1}, TE_SCOPE_LOCAL);
    p->bx = te__loop_var(c, "bx", 2);
    p->ko = te__loop_var(c, "ko", 3);
    p->tx = te__loop_var(c, "tx", 8);
    p->tx2 = te__loop_var(c, "tx2", 8);
    te_expr *ga = te_add(c, te_add(c, te_mul(c, p->bx, I(24)), te_mul(c, p->ko, I(8))), p->tx);
    te_expr *gb = te_add(c, te_mul(c, p->bx, I(8)), p->tx2);
    te_expr *r = te_sub(c, I(7), p->tx2), *z = I(0);
    te_stmt *fill = gt_bound(c, p->tx, 8, TE_THREAD_X,
                             te__store(c, p->S1, 1, &p->tx, te__load(c, p->A, 1, &ga)));
    te_stmt *use = gt_bound(
        c, p->tx2, 8, TE_THREAD_X,
        te__alloc_stmt(
            c, p->L,
            te__alloc_stmt(c, p->S2,
                           te__seq(c, 3,
                                   (te_stmt *[]){
                                       te__store(c, p->S2, 1, &p->tx2, te__load(c, p->S1, 1, &r)),
                                       te__store(c, p->L, 1, &z,
                                                 te_mul(c, te__load(c, p->S2, 1, &p->tx2),
                                                        te_const(c, TE_F64, 2))),
                                       te__store(c, p->B, 1, &gb,
                                                 te_add(c, te__load(c, p->B, 1, &gb),
                                                        te__load(c, p->L, 1, &z))),
                                   }))));
    p->kernel = gt_bound(c, p->bx, 2, TE_BLOCK_X,
                         te__for(c, p->ko, I(0), I(3), TE_FOR_SERIAL,
                                 te__alloc_stmt(c, p->S1, te__seq2(c, fill, use))));
}

static double *run(hp *p, const te_stmt *s, const double *a)
{
    double *b = malloc(sizeof(double) * 16);
    for (int i = 0; i < 16; i++)
        b[i] = 0.5 * i; /* B accumulates */
    pt_env env = {0};
    pt_add_buf(&env, p->A, (double *)a, 48);
    pt_add_buf(&env, p->B, b, 16);
    pt_exec(&env, s);
    assert_int_equal(env.err, 0);
    return b;
}

static void test_hoist_shared_moves_allocations_out_of_loops_to_the_block_body(void **state)
{
    (void)state;
    hp p;
    hp_init(&p);
    shared_ctx before = {0, 0};
    walk(block_body(p.kernel), 0, &before);
    assert_int_equal(before.under_loop, 2);
    te_stmt *out = te__pass_hoist_shared(TE_PC(p.c), p.kernel);
    assert_non_null(out);
    /* the block loop now starts with S2 and S1 (innermost found first), and no shared
     * allocation is under a loop */
    const te_stmt *b = block_body(out);
    assert_int_equal(b->kind, TE_S_ALLOC);
    assert_ptr_equal(b->u.alloc.buf, p.S2);
    assert_int_equal(b->u.alloc.body->kind, TE_S_ALLOC);
    assert_ptr_equal(b->u.alloc.body->u.alloc.buf, p.S1);
    assert_int_equal(b->u.alloc.body->u.alloc.body->kind, TE_S_FOR);
    shared_ctx after = {0, 0};
    walk(b, 0, &after);
    assert_int_equal(after.total, 2);
    assert_int_equal(after.under_loop, 0);
    /* the per-thread buffer stays inside its thread loop */
    char *txt = pt_print(out);
    assert_non_null(
        strstr(txt, "  thread threadIdx.x (tx2, 0, 8) {\n      allocate L[f64 x 1], local\n"));
    free(txt);
    /* same results */
    tt_rng r;
    tt_rng_seed(&r, tt_seed(3));
    double a[48];
    tt_fill_f64(&r, a, 48);
    double *r1 = run(&p, p.kernel, a), *r2 = run(&p, out, a);
    for (int i = 0; i < 16; i++)
        assert_true(r1[i] == r2[i]);
    for (int blk = 0; blk < 2; blk++)
        for (int t = 0; t < 8; t++) {
            double want = 0.5 * (blk * 8 + t);
            for (int k = 0; k < 3; k++)
                want += 2 * a[blk * 24 + k * 8 + 7 - t];
            assert_true(fabs(r2[blk * 8 + t] - want) <= 1e-12);
        }
    free(r1);
    free(r2);
    te_ctx_free(p.c);
}

static void test_hoist_shared_leaves_code_outside_kernels_alone(void **state)
{
    (void)state;
    hp p;
    hp_init(&p);
    te_ctx *c = p.c;
    te_expr *i = te__loop_var(c, "i", 8);
    /* a shared buffer in code that is not a kernel is not this pass's business */
    te_stmt *host =
        te__for(c, i, I(0), I(8), TE_FOR_SERIAL,
                te__alloc_stmt(c, p.S2, te__store(c, p.S2, 1, &i, te_const(c, TE_F64, 1))));
    assert_ptr_equal(te__pass_hoist_shared(TE_PC(c), host), host);
    te_stmt *prog = te__seq2(c, host, p.kernel);
    te_stmt *out = te__pass_hoist_shared(TE_PC(c), prog);
    assert_non_null(out);
    assert_int_equal(out->kind, TE_S_SEQ);
    assert_ptr_equal(out->u.seq.v[0], host);
    assert_int_equal(block_body(out->u.seq.v[1])->kind, TE_S_ALLOC);
    te_ctx_free(c);
}

static void test_hoist_shared_allocates_a_buffer_once_and_per_kernel(void **state)
{
    (void)state;
    hp p;
    hp_init(&p);
    te_ctx *c = p.c;
    /* the same buffer allocated in two places of one kernel (as unrolling makes) */
    te_expr *tx = te__loop_var(c, "t", 8), *bx = te__loop_var(c, "b", 2);
    te_stmt *w =
        gt_bound(c, tx, 8, TE_THREAD_X,
                 te__alloc_stmt(c, p.S2, te__store(c, p.S2, 1, &tx, te_const(c, TE_F64, 1))));
    te_stmt *k2 = gt_bound(c, bx, 2, TE_BLOCK_X, te__seq2(c, w, w));
    te_stmt *out = te__pass_hoist_shared(TE_PC(c), te__seq2(c, p.kernel, k2));
    assert_non_null(out);
    shared_ctx s1 = {0, 0}, s2 = {0, 0};
    walk(block_body(out->u.seq.v[0]), 0, &s1);
    walk(block_body(out->u.seq.v[1]), 0, &s2);
    assert_int_equal(s1.total, 2); /* S1 and S2 of the first kernel */
    assert_int_equal(s2.total, 1); /* S2 once in the second */
    assert_int_equal(s2.under_loop, 0);
    assert_ptr_equal(block_body(out->u.seq.v[1])->u.alloc.buf, p.S2);
    /* a kernel of threads only: the allocation goes around the thread loop */
    te_stmt *t_only = te__pass_hoist_shared(TE_PC(c), w);
    assert_int_equal(t_only->kind, TE_S_ALLOC);
    assert_int_equal(t_only->u.alloc.body->kind, TE_S_FOR);
    assert_int_equal(gt_count_kind(t_only, TE_S_ALLOC), 1);
    te_ctx_free(c);
}

static void test_hoist_shared_more_than_64_buffers_is_an_error(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_expr *tx = te__loop_var(c, "tx", 4);
    te_stmt *body = NULL;
    for (int i = 0; i < 65; i++) {
        char name[16];
        snprintf(name, sizeof name, "S%d", i);
        te_buf *S = te__buf_new(c, name, TE_F32, 1, (int64_t[]){4}, TE_SCOPE_SHARED);
        body = te__seq2(c, body, te__alloc_stmt(c, S, te__store(c, S, 1, &tx, te_f32(c, 1))));
    }
    assert_null(te__pass_hoist_shared(TE_PC(c), gt_bound(c, tx, 4, TE_THREAD_X, body)));
    assert_non_null(strstr(te_ctx_errmsg(c), "more than 64 shared buffers"));
    te_ctx_free(c);
}

static void test_hoist_shared_of_a_lowered_matmul(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_tensor *A = te_placeholder(c, "A", TE_F32, 2, (int64_t[]){64, 32});
    te_tensor *B = te_placeholder(c, "B", TE_F32, 2, (int64_t[]){32, 64});
    te_tensor *C = te_op_matmul(c, A, B, 0, 0, "C");
    te_schedule *s = te_schedule_create(c, 1, &C);
    te_cuda_knobs kn = te_cuda_knobs_default("matmul");
    assert_int_equal(te_cuda_schedule_matmul(s, C, NULL, &kn), TE_OK);
    te_target tgt = te_target_cuda(80);
    gt_lowering L = gt_lower_until(s, 3, (te_tensor *[]){A, B, C}, &tgt, "hoist_shared");
    /* as built: the tiles are allocated inside the k_o loop */
    shared_ctx before = {0, 0};
    walk(L.s, 0, &before);
    assert_int_equal(before.total, 2);
    assert_true(before.under_loop == 2);
    te_stmt *out = te__pass_hoist_shared(&L.pc, L.s);
    assert_non_null(out);
    /* find the kernel (the root may start with comments) */
    const te_stmt *k = out;
    if (k->kind == TE_S_SEQ)
        for (int i = 0; i < k->u.seq.n; i++)
            if (k->u.seq.v[i]->kind == TE_S_FOR) {
                k = k->u.seq.v[i];
                break;
            }
    assert_int_equal(k->kind, TE_S_FOR);
    const te_stmt *b = block_body(k);
    assert_int_equal(b->kind, TE_S_ALLOC);
    assert_int_equal(b->u.alloc.body->kind, TE_S_ALLOC);
    assert_int_equal(b->u.alloc.buf->scope, TE_SCOPE_SHARED);
    assert_int_equal(b->u.alloc.body->u.alloc.buf->scope, TE_SCOPE_SHARED);
    shared_ctx after = {0, 0};
    walk(b, 0, &after);
    assert_int_equal(after.total, 2);
    assert_int_equal(after.under_loop, 0);
    te_ctx_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hoist_shared_moves_allocations_out_of_loops_to_the_block_body),
        cmocka_unit_test(test_hoist_shared_leaves_code_outside_kernels_alone),
        cmocka_unit_test(test_hoist_shared_allocates_a_buffer_once_and_per_kernel),
        cmocka_unit_test(test_hoist_shared_more_than_64_buffers_is_an_error),
        cmocka_unit_test(test_hoist_shared_of_a_lowered_matmul),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

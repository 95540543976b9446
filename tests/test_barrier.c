/* Tests of barrier insertion: a barrier between a shared write and a read (and before a refill
 * in a serial loop), none where no shared buffer conflicts, one hoisted above an inner loop
 * instead of inside it, double-buffered tiles need one less, and a barrier needed where not
 * every thread arrives is an error naming the buffer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "gpu_testlib.h"
#include "tessera/cuda.h"
#include "tessera/ops.h"
#include "testutil.h"

#define I(v) te_int(c, (v))

typedef struct prog {
    te_ctx *c;
    te_buf *A, *B, *S;
    te_expr *bx, *tx, *tx2;
} prog;

static void prog_init(prog *p)
{
    te_ctx *c = p->c = te_ctx_create();
    p->A = te__buf_new(c, "A", TE_F32, 1, (int64_t[]){128}, TE_SCOPE_GLOBAL);
    p->B = te__buf_new(c, "B", TE_F32, 1, (int64_t[]){128}, TE_SCOPE_GLOBAL);
    p->S = te__buf_new(c, "S", TE_F32, 1, (int64_t[]){32}, TE_SCOPE_SHARED);
    p->bx = te__loop_var(c, "bx", 4);
    p->tx = te__loop_var(c, "tx", 32);
    p->tx2 = te__loop_var(c, "tx2", 32);
}

/* S[tv] = A[bx * 32 + tv] */
static te_stmt *fill(prog *p, te_expr *tv)
{
    te_ctx *c = p->c;
    te_expr *g = te_add(c, te_mul(c, p->bx, I(32)), tv);
    return te__store(c, p->S, 1, (te_expr *[]){tv}, te__load(c, p->A, 1, &g));
}

/* B[bx * 32 + tv] = S[31 - tv] */
static te_stmt *use(prog *p, te_expr *tv)
{
    te_ctx *c = p->c;
    te_expr *g = te_add(c, te_mul(c, p->bx, I(32)), tv);
    te_expr *r = te_sub(c, I(31), tv);
    return te__store(c, p->B, 1, &g, te__load(c, p->S, 1, &r));
}

static te_stmt *kernel(prog *p, te_stmt *body)
{
    return gt_bound(p->c, p->bx, 4, TE_BLOCK_X, te__alloc_stmt(p->c, p->S, body));
}

static void test_barrier_between_shared_write_and_read(void **state)
{
    (void)state;
    prog p;
    prog_init(&p);
    te_ctx *c = p.c;
    te_stmt *k = kernel(&p, te__seq2(c, gt_bound(c, p.tx, 32, TE_THREAD_X, fill(&p, p.tx)),
                                     gt_bound(c, p.tx2, 32, TE_THREAD_X, use(&p, p.tx2))));
    te_stmt *out = te__pass_barrier(TE_PC(c), k);
    assert_non_null(out);
    assert_int_equal(gt_count_kind(out, TE_S_BARRIER), 1);
    /* block loop, allocation, then [fill loop, barrier, use loop] */
    const te_stmt *body = out->u.loop.body->u.alloc.body;
    assert_int_equal(body->kind, TE_S_SEQ);
    assert_int_equal(body->u.seq.n, 3);
    assert_int_equal(body->u.seq.v[0]->kind, TE_S_FOR);
    assert_ptr_equal(body->u.seq.v[0]->u.loop.var, p.tx);
    assert_int_equal(body->u.seq.v[1]->kind, TE_S_BARRIER);
    assert_ptr_equal(body->u.seq.v[2]->u.loop.var, p.tx2);
    /* the input is not changed */
    assert_int_equal(gt_count_kind(k, TE_S_BARRIER), 0);
    te_ctx_free(c);
}

static void test_barrier_inside_one_thread_loop_between_write_and_read(void **state)
{
    (void)state;
    prog p;
    prog_init(&p);
    te_ctx *c = p.c;
    te_stmt *k =
        kernel(&p, gt_bound(c, p.tx, 32, TE_THREAD_X, te__seq2(c, fill(&p, p.tx), use(&p, p.tx))));
    te_stmt *out = te__pass_barrier(TE_PC(c), k);
    assert_non_null(out);
    char *txt = pt_print(out);
    assert_string_equal(txt, "thread blockIdx.x (bx, 0, 4) {\n"
                             "  allocate S[f32 x 32], shared\n"
                             "  thread threadIdx.x (tx, 0, 32) {\n"
                             "    S[tx] = A[((bx * 32) + tx)]\n"
                             "    barrier()\n"
                             "    B[((bx * 32) + tx)] = S[(31 - tx)]\n"
                             "  }\n"
                             "}\n");
    free(txt);
    te_ctx_free(c);
}

static void test_no_barrier_without_a_shared_conflict(void **state)
{
    (void)state;
    prog p;
    prog_init(&p);
    te_ctx *c = p.c;
    te_buf *S2 = te__buf_new(c, "S2", TE_F32, 1, (int64_t[]){32}, TE_SCOPE_SHARED);
    /* writes of two shared buffers, and reads of global memory only: nothing to order */
    te_expr *g = te_add(c, te_mul(c, p.bx, I(32)), p.tx2);
    te_stmt *k = kernel(
        &p, te__alloc_stmt(
                c, S2,
                te__seq2(c, gt_bound(c, p.tx, 32, TE_THREAD_X, fill(&p, p.tx)),
                         gt_bound(c, p.tx2, 32, TE_THREAD_X,
                                  te__seq2(c,
                                           te__store(c, S2, 1, (te_expr *[]){p.tx2},
                                                     te__load(c, p.A, 1, &g)),
                                           te__store(c, p.B, 1, &g, te__load(c, p.A, 1, &g)))))));
    te_stmt *out = te__pass_barrier(TE_PC(c), k);
    assert_ptr_equal(out, k);
    /* two reads in a row do not conflict either */
    te_stmt *r2 = kernel(&p, te__seq2(c, gt_bound(c, p.tx, 32, TE_THREAD_X, use(&p, p.tx)),
                                      gt_bound(c, p.tx2, 32, TE_THREAD_X, use(&p, p.tx2))));
    assert_ptr_equal(te__pass_barrier(TE_PC(c), r2), r2);
    te_ctx_free(c);
}

static void test_barrier_before_refill_in_serial_loop(void **state)
{
    (void)state;
    prog p;
    prog_init(&p);
    te_ctx *c = p.c;
    te_expr *ko = te__loop_var(c, "ko", 3);
    /* for ko: { fill S; read S } -- the next iteration's fill must wait for this one's reads */
    te_stmt *k = kernel(&p, te__for(c, ko, I(0), I(3), TE_FOR_SERIAL,
                                    te__seq2(c, gt_bound(c, p.tx, 32, TE_THREAD_X, fill(&p, p.tx)),
                                             gt_bound(c, p.tx2, 32, TE_THREAD_X, use(&p, p.tx2)))));
    te_stmt *out = te__pass_barrier(TE_PC(c), k);
    assert_non_null(out);
    assert_int_equal(gt_count_kind(out, TE_S_BARRIER), 2);
    const te_stmt *loop = out->u.loop.body->u.alloc.body;
    assert_int_equal(loop->kind, TE_S_FOR);
    const te_stmt *body = loop->u.loop.body;
    assert_int_equal(body->kind, TE_S_SEQ);
    assert_int_equal(body->u.seq.n, 4);
    assert_int_equal(body->u.seq.v[0]->kind, TE_S_BARRIER); /* write after read */
    assert_ptr_equal(body->u.seq.v[1]->u.loop.var, p.tx);
    assert_int_equal(body->u.seq.v[2]->kind, TE_S_BARRIER); /* read after write */
    assert_ptr_equal(body->u.seq.v[3]->u.loop.var, p.tx2);
    te_ctx_free(c);
}

static void test_barrier_is_hoisted_above_an_inner_serial_loop(void **state)
{
    (void)state;
    prog p;
    prog_init(&p);
    te_ctx *c = p.c;
    te_expr *j = te__loop_var(c, "j", 8);
    te_expr *g = te_add(c, te_mul(c, p.bx, I(32)), p.tx2);
    /* fill S; for j: B[..] = S[j] (uniform loop reading S): one barrier, before the loop */
    te_stmt *rd =
        gt_bound(c, p.tx2, 32, TE_THREAD_X, te__store(c, p.B, 1, &g, te__load(c, p.S, 1, &j)));
    te_stmt *k = kernel(&p, te__seq2(c, gt_bound(c, p.tx, 32, TE_THREAD_X, fill(&p, p.tx)),
                                     te__for(c, j, I(0), I(8), TE_FOR_SERIAL, rd)));
    te_stmt *out = te__pass_barrier(TE_PC(c), k);
    assert_non_null(out);
    assert_int_equal(gt_count_kind(out, TE_S_BARRIER), 1);
    const te_stmt *body = out->u.loop.body->u.alloc.body;
    assert_int_equal(body->u.seq.n, 3);
    assert_int_equal(body->u.seq.v[1]->kind, TE_S_BARRIER);
    assert_ptr_equal(body->u.seq.v[2]->u.loop.var, j);
    assert_ptr_equal(body->u.seq.v[2]->u.loop.body, rd); /* nothing inside the loop */
    te_ctx_free(c);
}

static void test_barrier_inside_a_block_uniform_branch_is_allowed(void **state)
{
    (void)state;
    prog p;
    prog_init(&p);
    te_ctx *c = p.c;
    /* if (bx < 2): the same in every thread of a block */
    te_stmt *k = kernel(&p, te__if(c, te_lt(c, p.bx, I(2)),
                                   te__seq2(c, gt_bound(c, p.tx, 32, TE_THREAD_X, fill(&p, p.tx)),
                                            gt_bound(c, p.tx2, 32, TE_THREAD_X, use(&p, p.tx2))),
                                   NULL));
    te_stmt *out = te__pass_barrier(TE_PC(c), k);
    assert_non_null(out);
    const te_stmt *then_s = out->u.loop.body->u.alloc.body->u.cond.then_s;
    assert_int_equal(then_s->u.seq.n, 3);
    assert_int_equal(then_s->u.seq.v[1]->kind, TE_S_BARRIER);
    te_ctx_free(c);
}

static void test_no_barrier_inside_divergent_branch_is_an_error_naming_the_buffer(void **state)
{
    (void)state;
    prog p;
    prog_init(&p);
    te_ctx *c = p.c;
    /* if (tx < 16) { S[tx] = ...; ... = S[31 - tx] }: half the threads would wait forever */
    te_stmt *k = kernel(&p, gt_bound(c, p.tx, 32, TE_THREAD_X,
                                     te__if(c, te_lt(c, p.tx, I(16)),
                                            te__seq2(c, fill(&p, p.tx), use(&p, p.tx)), NULL)));
    assert_null(te__pass_barrier(TE_PC(c), k));
    const char *msg = te_ctx_errmsg(c);
    assert_non_null(strstr(msg, "shared buffer 'S'"));
    assert_non_null(strstr(msg, "inside a condition that depends on the thread"));
    assert_int_equal(te_ctx_errcode(c), TE_ERR_SCHEDULE);
    te_ctx_free(c);
}

static void test_barrier_under_a_thread_dependent_let_or_loaded_condition_is_an_error(void **state)
{
    (void)state;
    prog p;
    prog_init(&p);
    te_ctx *c = p.c;
    /* let v = tx * 2; if (v < 16) {...}: v differs between threads */
    te_expr *v = te_var(c, "v", TE_I64);
    te_stmt *k =
        kernel(&p, gt_bound(c, p.tx, 32, TE_THREAD_X,
                            te__let(c, v, te_mul(c, p.tx, I(2)),
                                    te__if(c, te_lt(c, v, I(16)),
                                           te__seq2(c, fill(&p, p.tx), use(&p, p.tx)), NULL))));
    assert_null(te__pass_barrier(TE_PC(c), k));
    assert_non_null(strstr(te_ctx_errmsg(c), "shared buffer 'S'"));
    te_ctx_clear_error(c);
    /* if (A[0] > 0): a loaded value is taken to differ between threads */
    te_expr *z = I(0);
    te_stmt *k2 = kernel(&p, gt_bound(c, p.tx, 32, TE_THREAD_X,
                                      te__if(c, te_gt(c, te__load(c, p.A, 1, &z), te_f32(c, 0)),
                                             te__seq2(c, fill(&p, p.tx), use(&p, p.tx)), NULL)));
    assert_null(te__pass_barrier(TE_PC(c), k2));
    assert_non_null(strstr(te_ctx_errmsg(c), "inside a condition that depends on the thread"));
    te_ctx_clear_error(c);
    /* a let of a block-uniform value does not make the branch divergent */
    te_stmt *k3 =
        kernel(&p, te__let(c, v, te_mul(c, p.bx, I(2)),
                           te__if(c, te_lt(c, v, I(4)),
                                  te__seq2(c, gt_bound(c, p.tx, 32, TE_THREAD_X, fill(&p, p.tx)),
                                           gt_bound(c, p.tx2, 32, TE_THREAD_X, use(&p, p.tx2))),
                                  NULL)));
    te_stmt *out = te__pass_barrier(TE_PC(c), k3);
    assert_non_null(out);
    assert_int_equal(gt_count_kind(out, TE_S_BARRIER), 1);
    te_ctx_free(c);
}

static void test_barrier_in_a_thread_loop_narrower_than_the_block_is_an_error(void **state)
{
    (void)state;
    prog p;
    prog_init(&p);
    te_ctx *c = p.c;
    te_buf *B = p.B;
    te_expr *t64 = te__loop_var(c, "t64", 64);
    te_expr *g = te_add(c, te_mul(c, p.bx, I(32)), te_floordiv(c, t64, I(2)));
    /* the block has 64 threads (t64); the loop over S has 32 */
    te_stmt *k = kernel(
        &p,
        te__seq2(c, gt_bound(c, t64, 64, TE_THREAD_X, te__store(c, B, 1, &g, te_f32(c, 1))),
                 gt_bound(c, p.tx, 32, TE_THREAD_X, te__seq2(c, fill(&p, p.tx), use(&p, p.tx)))));
    assert_null(te__pass_barrier(TE_PC(c), k));
    const char *msg = te_ctx_errmsg(c);
    assert_non_null(strstr(msg, "'S'"));
    assert_non_null(strstr(msg, "threadIdx.x with extent 32, narrower than the block's 64"));
    te_ctx_free(c);
}

static void test_barrier_in_a_loop_with_thread_dependent_bounds_is_an_error(void **state)
{
    (void)state;
    prog p;
    prog_init(&p);
    te_ctx *c = p.c;
    te_expr *j = te__loop_var(c, "j", 32);
    te_expr *g = te_add(c, te_mul(c, p.bx, I(32)), p.tx2);
    /* fill S in one thread loop; read it in a loop whose trip count is the thread index. The
     * barrier goes before the thread loop, which is legal. */
    te_stmt *rd = te__for(c, j, I(0), te_add(c, p.tx2, I(1)), TE_FOR_SERIAL,
                          te__store(c, p.B, 1, &g, te__load(c, p.S, 1, &j)));
    te_stmt *ok = kernel(&p, te__seq2(c, gt_bound(c, p.tx, 32, TE_THREAD_X, fill(&p, p.tx)),
                                      gt_bound(c, p.tx2, 32, TE_THREAD_X, rd)));
    te_stmt *out = te__pass_barrier(TE_PC(c), ok);
    assert_non_null(out);
    assert_int_equal(out->u.loop.body->u.alloc.body->u.seq.v[1]->kind, TE_S_BARRIER);
    /* write S in such a loop and read it in the same loop: the barrier between the write and
     * the read would be inside the per-thread loop */
    te_expr *jj = te__loop_var(c, "jj", 32);
    te_expr *rj = te_sub(c, I(31), jj);
    te_stmt *wr = te__for(c, jj, I(0), te_add(c, p.tx2, I(1)), TE_FOR_SERIAL,
                          te__seq2(c, te__store(c, p.S, 1, &jj, te__load(c, p.A, 1, &g)),
                                   te__store(c, p.B, 1, &g, te__load(c, p.S, 1, &rj))));
    te_stmt *bad = kernel(&p, gt_bound(c, p.tx2, 32, TE_THREAD_X, wr));
    assert_null(te__pass_barrier(TE_PC(c), bad));
    const char *msg = te_ctx_errmsg(c);
    assert_non_null(strstr(msg, "shared buffer 'S'"));
    assert_non_null(strstr(msg, "inside a loop whose bounds depend on the thread"));
    te_ctx_free(c);
}

static void test_double_buffered_tiles_need_one_barrier_less(void **state)
{
    (void)state;
    for (int db = 0; db < 2; db++) {
        te_ctx *c = te_ctx_create();
        te_tensor *A = te_placeholder(c, "A", TE_F32, 2, (int64_t[]){64, 32});
        te_tensor *B = te_placeholder(c, "B", TE_F32, 2, (int64_t[]){32, 64});
        te_tensor *C = te_op_matmul(c, A, B, 0, 0, "C");
        te_schedule *s = te_schedule_create(c, 1, &C);
        te_cuda_knobs k = te_cuda_knobs_default("matmul");
        k.double_buffer = db;
        assert_int_equal(te_cuda_schedule_matmul(s, C, NULL, &k), TE_OK);
        te_target tgt = te_target_cuda(80);
        gt_lowering L = gt_lower_until(s, 3, (te_tensor *[]){A, B, C}, &tgt, "barrier");
        /* double-buffered, the tiles come with the double_buffer pass's barriers: one after the
         * first fill, one per k-step */
        assert_int_equal(gt_count_kind(L.s, TE_S_BARRIER), 2 * db);
        te_stmt *out = te__pass_barrier(&L.pc, L.s);
        assert_non_null(out);
        /* one before refilling the tiles, one before reading them; with the next tiles fetched
         * into the other halves, none added: one per k-step */
        int n = gt_count_kind(out, TE_S_BARRIER);
        if (n != 2) {
            char *txt = pt_print(out);
            fail_msg("double_buffer=%d: %d barriers, want 2:\n%s", db, n, txt);
        }
        te_ctx_free(c);
    }
}

/* Barriers by the pass, then thread split, compute what the block computes on a GPU: one
 * 4 x 16 thread nest whose body passes values between threads through two shared arrays,
 * phase after phase (no barrier written by hand). Compared with a direct simulation in which
 * every phase completes in all threads before the next starts. */
static int64_t perm(int64_t t, int64_t mul, int64_t add) { return (t * mul + add) % 64; }

static void test_inserted_barriers_make_the_block_compute_the_gpu_result(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_buf *A = te__buf_new(c, "A", TE_F64, 1, (int64_t[]){128}, TE_SCOPE_GLOBAL);
    te_buf *B = te__buf_new(c, "B", TE_F64, 1, (int64_t[]){128}, TE_SCOPE_GLOBAL);
    te_buf *S0 = te__buf_new(c, "S0", TE_F64, 1, (int64_t[]){64}, TE_SCOPE_SHARED);
    te_buf *S1 = te__buf_new(c, "S1", TE_F64, 1, (int64_t[]){64}, TE_SCOPE_SHARED);
    te_expr *bx = te__loop_var(c, "bx", 2), *ty = te__loop_var(c, "ty", 4),
            *tx = te__loop_var(c, "tx", 16), *it = te__loop_var(c, "it", 3);
    te_expr *t = te_add(c, te_mul(c, ty, I(16)), tx);
#define P(mul, add) te_floormod(c, te_add(c, te_mul(c, t, I(mul)), add), I(64))
    te_expr *ga = te_add(c, te_mul(c, bx, I(64)), t);
    te_expr *gb = te_add(c, te_mul(c, bx, I(64)), P(3, te_add(c, it, I(0))));
    te_expr *p1 = P(5, I(3)), *p2 = P(9, I(1)), *p3 = P(7, I(0));
    te_stmt *step = te__seq2(
        c,
        te__store(c, S1, 1, &t,
                  te_add(c, te_mul(c, te__load(c, S0, 1, &p1), te_const(c, TE_F64, 0.5)),
                         te__load(c, A, 1, &gb))),
        te__store(c, S0, 1, &t, te_sub(c, te__load(c, S1, 1, &p2), te__load(c, S1, 1, &t))));
    te_stmt *body = te__seq(c, 3,
                            (te_stmt *[]){te__store(c, S0, 1, &t, te__load(c, A, 1, &ga)),
                                          te__for(c, it, I(0), I(3), TE_FOR_SERIAL, step),
                                          te__store(c, B, 1, &ga, te__load(c, S0, 1, &p3))});
#undef P
    te_stmt *k =
        gt_bound(c, bx, 2, TE_BLOCK_X,
                 te__alloc_stmt(c, S0,
                                te__alloc_stmt(c, S1,
                                               gt_bound(c, ty, 4, TE_THREAD_Y,
                                                        gt_bound(c, tx, 16, TE_THREAD_X, body)))));
    te_stmt *bar = te__pass_barrier(TE_PC(c), k);
    assert_non_null(bar);
    te_stmt *cpu = te__pass_thread_split(TE_PC(c), bar);
    assert_non_null(cpu);
    assert_int_equal(gt_count_kind(cpu, TE_S_BARRIER), 0);

    tt_rng r;
    tt_rng_seed(&r, tt_seed(99));
    double a[128], b[128], want[128];
    tt_fill_f64(&r, a, 128);
    for (int blk = 0; blk < 2; blk++) {
        double s0[64], s1[64];
        for (int i = 0; i < 64; i++)
            s0[i] = a[blk * 64 + i];
        for (int i3 = 0; i3 < 3; i3++) {
            for (int i = 0; i < 64; i++)
                s1[i] = s0[perm(i, 5, 3)] * 0.5 + a[blk * 64 + perm(i, 3, i3)];
            for (int i = 0; i < 64; i++)
                s0[i] = s1[perm(i, 9, 1)] - s1[i];
        }
        for (int i = 0; i < 64; i++)
            want[blk * 64 + i] = s0[perm(i, 7, 0)];
    }
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < 128; i++)
            b[i] = NAN;
        pt_env env = {0};
        pt_add_buf(&env, A, a, 128);
        pt_add_buf(&env, B, b, 128);
        pt_exec(&env, pass ? k : cpu);
        assert_int_equal(env.err, 0);
        int wrong = 0;
        for (int i = 0; i < 128; i++)
            wrong += b[i] != want[i];
        if (pass == 0 && wrong)
            fail_msg("%d of 128 outputs differ from the simulation", wrong);
        if (pass == 1)
            assert_true(wrong > 0); /* one thread after the other is not the GPU's result */
    }
    assert_true(gt_count_kind(bar, TE_S_BARRIER) >= 3);
    te_ctx_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_barrier_between_shared_write_and_read),
        cmocka_unit_test(test_barrier_inside_one_thread_loop_between_write_and_read),
        cmocka_unit_test(test_no_barrier_without_a_shared_conflict),
        cmocka_unit_test(test_barrier_before_refill_in_serial_loop),
        cmocka_unit_test(test_barrier_is_hoisted_above_an_inner_serial_loop),
        cmocka_unit_test(test_barrier_inside_a_block_uniform_branch_is_allowed),
        cmocka_unit_test(test_no_barrier_inside_divergent_branch_is_an_error_naming_the_buffer),
        cmocka_unit_test(test_barrier_under_a_thread_dependent_let_or_loaded_condition_is_an_error),
        cmocka_unit_test(test_barrier_in_a_thread_loop_narrower_than_the_block_is_an_error),
        cmocka_unit_test(test_barrier_in_a_loop_with_thread_dependent_bounds_is_an_error),
        cmocka_unit_test(test_double_buffered_tiles_need_one_barrier_less),
        cmocka_unit_test(test_inserted_barriers_make_the_block_compute_the_gpu_result),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

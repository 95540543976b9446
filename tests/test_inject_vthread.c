/* Tests of virtual threads (te_bind TE_VTHREAD, schedule/passes/inject_vthread.c): the matmul
 * template's register tile split into 2 x 2 strided pieces keeps one k loop and one copy of each
 * shared tile per k-step, with the accumulators expanded to [2][2][..]; the result matches
 * te_reference_eval on the C target (GPU code run on the CPU) at ragged sizes; the pass keeps a
 * loop serial when running a statement once could change the results; the primitive's trace
 * line replays and prints as C; bad uses are refused. */
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

static mm mm_make(int64_t M, int64_t N, int64_t K, int vm, int vn, int dbuf)
{
    mm m;
    m.c = te_ctx_create();
    m.A = te_placeholder(m.c, "A", TE_F32, 2, (int64_t[]){M, K});
    m.B = te_placeholder(m.c, "B", TE_F32, 2, (int64_t[]){K, N});
    m.C = te_op_matmul(m.c, m.A, m.B, 0, 0, "C");
    m.s = te_schedule_create(m.c, 1, &m.C);
    te_cuda_knobs k = te_cuda_knobs_default("matmul");
    k.thread_n = 8, k.vthread_m = vm, k.vthread_n = vn, k.double_buffer = dbuf;
    if (te_cuda_schedule_matmul(m.s, m.C, NULL, &k) != TE_OK)
        fail_msg("template: %s", te_ctx_errmsg(m.c));
    return m;
}

typedef struct {
    const char *name;
    int stores, loops_vthread, loops_k;
    const te_buf *buf;
} census;

static bool census_fn(const te_stmt *s, void *user)
{
    census *c = user;
    if (s->kind == TE_S_STORE && strcmp(s->u.store.buf->name, c->name) == 0)
        c->stores++;
    if (s->kind == TE_S_ALLOC && strcmp(s->u.alloc.buf->name, "C_local") == 0)
        c->buf = s->u.alloc.buf;
    if (s->kind == TE_S_FOR && s->u.loop.fkind == TE_FOR_VTHREAD)
        c->loops_vthread++;
    if (s->kind == TE_S_FOR && strcmp(s->u.loop.var->u.var.name, "k_o") == 0)
        c->loops_k++;
    return true;
}

static census count_in(const te_stmt *s, const char *name)
{
    census c = {.name = name};
    te__stmt_visit(s, census_fn, NULL, &c);
    return c;
}

static void test_vthreads_share_the_k_loop_and_the_shared_tiles(void **state)
{
    (void)state;
    te_target tgt = te_target_cuda(80);
    for (int ragged = 0; ragged < 2; ragged++) {
        /* the plain template and the one with virtual threads, side by side */
        int64_t M = 128, N = ragged ? 160 : 128, K = 32;
        mm p = mm_make(M, N, K, 1, 1, 0), v = mm_make(M, N, K, 2, 2, 0);
        gt_lowering Lp =
            gt_lower_until(p.s, 3, (te_tensor *[]){p.A, p.B, p.C}, &tgt, "inject_vthread");
        gt_lowering Lv =
            gt_lower_until(v.s, 3, (te_tensor *[]){v.A, v.B, v.C}, &tgt, "inject_vthread");
        census before = count_in(Lv.s, "A_shared");
        assert_int_equal(before.loops_vthread, 2);
        te_stmt *out = te__pass_inject_vthread(&Lv.pc, Lv.s);
        assert_non_null(out);
        census after = count_in(out, "A_shared"), plain = count_in(Lp.s, "A_shared");
        census bafter = count_in(out, "B_shared"), bplain = count_in(Lp.s, "B_shared");
        assert_int_equal(after.loops_vthread, 0);
        /* one k loop, and the tiles are copied by the same statements as without vthreads */
        assert_int_equal(after.loops_k, 1);
        assert_int_equal(after.stores, plain.stores);
        assert_int_equal(bafter.stores, bplain.stores);
        /* the accumulators: [vthread_m][vthread_n][thread_m / 2][thread_n / 2] */
        assert_non_null(after.buf);
        assert_int_equal(after.buf->ndim, 4);
        assert_int_equal(after.buf->shape[0], 2);
        assert_int_equal(after.buf->shape[1], 2);
        assert_int_equal(after.buf->shape[2], 2);
        assert_int_equal(after.buf->shape[3], 4);
        /* and the pass does nothing to a program without virtual threads */
        assert_ptr_equal(te__pass_inject_vthread(&Lp.pc, Lp.s), Lp.s);
        te_ctx_free(p.c);
        te_ctx_free(v.c);
    }
}

static void check_cpu_build(int64_t M, int64_t N, int64_t K, int vm, int vn, int dbuf)
{
    mm m = mm_make(M, N, K, vm, vn, dbuf);
    double err = gt_matmul_cpu_error(m.c, m.s, m.A, m.B, m.C, 70 + (uint64_t)(vm * 4 + vn));
    if (!(err <= 1e-5))
        fail_msg("%lldx%lldx%lld vthreads %dx%d: max rel err %g", (long long)M, (long long)N,
                 (long long)K, vm, vn, err);
    te_ctx_free(m.c);
}

static void test_vthread_matmul_on_the_c_target_matches_the_reference(void **state)
{
    (void)state;
    check_cpu_build(128, 128, 64, 2, 2, 0);
    check_cpu_build(100, 136, 36, 2, 2, 0); /* ragged in every dimension */
    check_cpu_build(64, 200, 40, 1, 2, 1);  /* one axis, double-buffered tiles */
    check_cpu_build(80, 64, 24, 2, 1, 0);
}

/* vthread (v, 0, 2) { body }, over buffers made here. */
typedef struct {
    te_ctx *c;
    te_expr *v;
    te_buf *out, *acc, *x;
} hand;

static hand hand_make(void)
{
    hand h;
    h.c = te_ctx_create();
    h.v = te__loop_var(h.c, "v", 2);
    h.out = te__buf_new(h.c, "out", TE_F32, 1, (int64_t[]){2}, TE_SCOPE_GLOBAL);
    h.acc = te__buf_new(h.c, "acc", TE_F32, 1, (int64_t[]){1}, TE_SCOPE_GLOBAL);
    h.x = te__buf_new(h.c, "x", TE_F32, 1, (int64_t[]){1}, TE_SCOPE_LOCAL);
    return h;
}

static te_expr *ld(hand *h, te_buf *b, te_expr *i) { return te__load(h->c, b, 1, &i); }

static te_stmt *st(hand *h, te_buf *b, te_expr *i, te_expr *v)
{
    return te__store(h->c, b, 1, &i, v);
}

static te_stmt *vloop(hand *h, te_stmt *body)
{
    return te__for(h->c, h->v, te_int(h->c, 0), te_int(h->c, 2), TE_FOR_VTHREAD, body);
}

static void test_vthread_loops_that_cannot_be_interleaved_stay_serial(void **state)
{
    (void)state;
    /* acc[0] += 1 does not mention v but accumulates into a buffer from outside the loop: run
     * once it would add 1, not 2 */
    hand h = hand_make();
    te_expr *z = te_int(h.c, 0);
    te_stmt *s =
        vloop(&h, te__seq2(h.c, st(&h, h.out, h.v, te_f32(h.c, 1.0)),
                           st(&h, h.acc, z, te_add(h.c, ld(&h, h.acc, z), te_f32(h.c, 1.0)))));
    te_stmt *r = te__pass_inject_vthread(TE_PC(h.c), s);
    assert_non_null(r);
    assert_int_equal(r->kind, TE_S_FOR);
    assert_int_equal(r->u.loop.fkind, TE_FOR_SERIAL);
    assert_ptr_equal(r->u.loop.body, s->u.loop.body);
    /* x = out[0] does not mention v but reads what the iterations write */
    s = vloop(&h, te__alloc_stmt(h.c, h.x,
                                 te__seq2(h.c, st(&h, h.out, h.v, te_f32(h.c, 2.0)),
                                          st(&h, h.x, z, ld(&h, h.out, z)))));
    r = te__pass_inject_vthread(TE_PC(h.c), s);
    assert_int_equal(r->u.loop.fkind, TE_FOR_SERIAL);
    /* a non-constant extent */
    te_expr *n = te__loop_var(h.c, "n", 4);
    s = te__for(h.c, h.v, z, n, TE_FOR_VTHREAD, st(&h, h.out, h.v, te_f32(h.c, 3.0)));
    r = te__pass_inject_vthread(TE_PC(h.c), s);
    assert_int_equal(r->u.loop.fkind, TE_FOR_SERIAL);
    /* the legal form: a local written per iteration is expanded and the loop becomes unrolled
     * copies around the statements that mention v */
    s = vloop(&h, te__alloc_stmt(h.c, h.x,
                                 te__seq2(h.c, st(&h, h.x, z, te_cast(h.c, TE_F32, h.v)),
                                          st(&h, h.out, h.v, ld(&h, h.x, z)))));
    r = te__pass_inject_vthread(TE_PC(h.c), s);
    char *txt = pt_print(r);
    assert_non_null(strstr(txt, "allocate x[f32 x 2 x 1], local"));
    assert_non_null(strstr(txt, "unrolled (v, 0, 2)"));
    assert_null(strstr(txt, "vthread"));
    free(txt);
    /* run it: out[v] = v */
    double out[2] = {-1, -1}, xs[2] = {0, 0};
    pt_env env = {.nvars = 0};
    pt_add_buf(&env, h.out, out, 2);
    pt_add_buf(&env, r->u.alloc.buf, xs, 2);
    pt_exec(&env, r->u.alloc.body);
    assert_int_equal(env.err, 0);
    assert_true(out[0] == 0.0 && out[1] == 1.0);
    te_ctx_free(h.c);
}

static void test_vthread_binding_replays_prints_and_refuses_bad_uses(void **state)
{
    (void)state;
    mm m = mm_make(64, 64, 16, 2, 2, 0);
    const char *tr = te_schedule_trace(m.s);
    assert_non_null(strstr(tr, "vthread\n"));
    /* the trace replays onto a fresh schedule and gives the same program */
    assert_true(tt_trace_replays(m.s, 1, &m.C, "TE_VTHREAD)"));
    /* a reduction loop cannot be a virtual thread; neither can an unknown tag */
    te_schedule *s3 = te_schedule_create(m.c, 1, &m.C);
    te_stage *st3 = te_schedule_stage(s3, m.C);
    assert_int_equal(te_bind(st3, te_stage_reduce_axis(st3, 0), TE_VTHREAD), TE_ERR_SCHEDULE);
    assert_int_equal(te_bind(st3, te_stage_axis(st3, 0), (te_thread_tag)(TE_VTHREAD + 1)),
                     TE_ERR_ARG);
    /* nor a cross-thread reduction */
    assert_int_equal(te_bind_reduce(st3, te_stage_reduce_axis(st3, 0), TE_VTHREAD),
                     TE_ERR_SCHEDULE);
    te_ctx_free(m.c);
    /* the template's knob is checked */
    te_ctx *ctx = te_ctx_create();
    te_tensor *A = te_placeholder(ctx, "A", TE_F32, 2, (int64_t[]){64, 64});
    te_tensor *C = te_op_matmul(ctx, A, A, 0, 0, "C");
    te_schedule *s = te_schedule_create(ctx, 1, &C);
    te_cuda_knobs k = te_cuda_knobs_default("matmul");
    k.thread_m = 1, k.vthread_m = 2;
    assert_int_equal(te_cuda_schedule_matmul(s, C, NULL, &k), TE_ERR_ARG);
    assert_non_null(strstr(te_ctx_errmsg(ctx), "vthread_m must divide thread_m"));
    te_ctx_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vthreads_share_the_k_loop_and_the_shared_tiles),
        cmocka_unit_test(test_vthread_matmul_on_the_c_target_matches_the_reference),
        cmocka_unit_test(test_vthread_loops_that_cannot_be_interleaved_stay_serial),
        cmocka_unit_test(test_vthread_binding_replays_prints_and_refuses_bad_uses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

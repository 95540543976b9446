/* Tests of the cross-thread reduction (te_bind_reduce): a loop marked with a te__xreduce
 * becomes per-thread partial results in a shared array combined by a halving tree, then folded
 * into the target (in thread 0 for a global buffer, in every thread for a per-thread one).
 * Checked structurally (array size, the tree's step extents, where the last store runs) and
 * numerically: after the barrier pass and thread split the pt interpreter must give the direct
 * sum / max, for power-of-two and other thread counts; a real te_bind_reduce schedule built
 * for the C target matches te_reference_eval. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "gpu_testlib.h"
#include "tessera/cuda.h"
#include "testutil.h"

#define I(v) te_int(c, (v))
#define ROWS 4

typedef struct red {
    te_ctx *c;
    te_buf *A, *O;
    int64_t threads, per; /* threads, and elements each thread reduces */
    te_stmt *loop;        /* the marked loop */
    te_stmt *kernel;
} red;

static te__xreduce *mark(te_ctx *c, te_buf *buf, te_expr *idx, te_reduce_kind kind)
{
    te__xreduce *x = te__alloc(c, sizeof *x);
    assert_non_null(x);
    x->buf = buf;
    x->ndim = 1;
    x->idx = te__alloc(c, sizeof(te_expr *));
    x->idx[0] = idx;
    x->kind = kind;
    x->custom = NULL;
    x->dtype = TE_F64;
    return x;
}

/* for r (blockIdx.x, ROWS) { O[r] = init (one thread); for k (threadIdx.x, threads, marked):
 * for ko (per): O[r] = combine(O[r], A[r * n + ko * threads + k]) } */
static void red_init(red *p, int64_t threads, int64_t per, te_reduce_kind kind)
{
    te_ctx *c = p->c = te_ctx_create();
    p->threads = threads;
    p->per = per;
    int64_t n = threads * per;
    p->A = te__buf_new(c, "A", TE_F64, 1, (int64_t[]){ROWS * n}, TE_SCOPE_GLOBAL);
    p->O = te__buf_new(c, "O", TE_F64, 1, (int64_t[]){ROWS}, TE_SCOPE_GLOBAL);
    te_expr *r = te__loop_var(c, "r", ROWS), *k = te__loop_var(c, "k", threads),
            *ko = te__loop_var(c, "ko", per), *w = te__loop_var(c, "w", 1);
    te_expr *g = te_add(c, te_add(c, te_mul(c, r, I(n)), te_mul(c, ko, I(threads))), k);
    te_expr *acc = te__load(c, p->O, 1, &r);
    te_stmt *upd =
        te__store(c, p->O, 1, &r, te__reduce_combine(c, kind, NULL, acc, te__load(c, p->A, 1, &g)));
    p->loop =
        gt_bound(c, k, threads, TE_THREAD_X, te__for(c, ko, I(0), I(per), TE_FOR_SERIAL, upd));
    p->loop->u.loop.xreduce = mark(c, p->O, r, kind);
    te_stmt *init = gt_bound(c, w, 1, TE_THREAD_X,
                             te__store(c, p->O, 1, &r, te__reduce_identity(c, kind, NULL, TE_F64)));
    p->kernel = gt_bound(c, r, ROWS, TE_BLOCK_X, te__seq2(c, init, p->loop));
}

static double *random_input(int64_t n, uint64_t seed)
{
    tt_rng r;
    tt_rng_seed(&r, tt_seed(seed));
    double *a = malloc(sizeof(double) * (size_t)n);
    tt_fill_f64(&r, a, (size_t)n);
    return a;
}

static double *run(const te_stmt *s, red *p, const double *a)
{
    double *o = malloc(sizeof(double) * ROWS);
    for (int i = 0; i < ROWS; i++)
        o[i] = NAN;
    pt_env env = {0};
    pt_add_buf(&env, p->A, (double *)a, ROWS * p->threads * p->per);
    pt_add_buf(&env, p->O, o, ROWS);
    pt_exec(&env, s);
    assert_int_equal(env.err, 0);
    return o;
}

/* The pass, then what makes it runnable on the CPU: barriers and the thread split. */
static te_stmt *lower_on_cpu(te_ctx *c, te_stmt *s)
{
    te_stmt *x = te__pass_cross_thread_reduce(TE_PC(c), s);
    assert_non_null(x);
    te_stmt *b = te__pass_barrier(TE_PC(c), x);
    assert_non_null(b);
    te_stmt *t = te__pass_thread_split(TE_PC(c), b);
    assert_non_null(t);
    return t;
}

/* Collects the extents of the thread loops of s in order. */
typedef struct {
    int64_t ext[64];
    int n;
} extents;

static bool ext_fn(const te_stmt *s, void *user)
{
    extents *e = user;
    int64_t v;
    if (s->kind == TE_S_FOR && s->u.loop.fkind == TE_FOR_THREAD &&
        s->u.loop.thread_tag >= TE_THREAD_X && te__is_const_int(s->u.loop.extent, &v) && e->n < 64)
        e->ext[e->n++] = v;
    return true;
}

static bool has_xreduce_fn(const te_stmt *s, void *user)
{
    if (s->kind == TE_S_FOR && s->u.loop.xreduce)
        *(int *)user += 1;
    return true;
}

static int count_marked(const te_stmt *s)
{
    int n = 0;
    te__stmt_visit(s, has_xreduce_fn, NULL, &n);
    return n;
}

static void test_cross_thread_reduce_builds_a_shared_tree_of_halving_steps(void **state)
{
    (void)state;
    red p;
    red_init(&p, 32, 3, TE_RSUM);
    te_ctx *c = p.c;
    te_stmt *out = te__pass_cross_thread_reduce(TE_PC(c), p.loop);
    assert_non_null(out);
    assert_int_equal(count_marked(out), 0);
    /* alloc O_red[32] shared around: the partial loop, 5 steps, the final store */
    assert_int_equal(out->kind, TE_S_ALLOC);
    const te_buf *sh = out->u.alloc.buf;
    assert_string_equal(sh->name, "O_red");
    assert_int_equal(sh->scope, TE_SCOPE_SHARED);
    assert_int_equal(sh->ndim, 1);
    assert_int_equal(sh->shape[0], 32);
    extents e = {.n = 0};
    te__stmt_visit(out, ext_fn, NULL, &e);
    int64_t want[] = {32, 16, 8, 4, 2, 1, 1};
    assert_int_equal(e.n, 7);
    for (int i = 0; i < 7; i++)
        assert_int_equal(e.ext[i], want[i]);
    /* the partial result is per thread, starts at the identity */
    char *txt = pt_print(out);
    assert_non_null(strstr(txt, "allocate O_part[f64 x 1], local\n"));
    assert_non_null(strstr(txt, "O_part[0] = 0\n"));
    assert_non_null(strstr(txt, "O_red[k] = O_part[0]\n"));
    assert_non_null(strstr(txt, "O_red[k_s16] = (O_red[k_s16] + O_red[(k_s16 + 16)])\n"));
    /* a global target is written once, by one thread */
    assert_non_null(strstr(txt, "thread threadIdx.x (k_w, 0, 1) {\n  O[r] = (O[r] + O_red[0])\n"));
    free(txt);
    /* the barrier pass puts one barrier before each step and before the final read */
    te_stmt *b = te__pass_barrier(TE_PC(c), te__pass_cross_thread_reduce(TE_PC(c), p.kernel));
    assert_non_null(b);
    assert_int_equal(gt_count_kind(b, TE_S_BARRIER), 6);
    te_ctx_free(c);
}

static void check_sum(int64_t threads, int64_t per)
{
    red p;
    red_init(&p, threads, per, TE_RSUM);
    double *a = random_input(ROWS * threads * per, 11 + (uint64_t)threads);
    te_stmt *cpu = lower_on_cpu(p.c, p.kernel);
    double *got = run(cpu, &p, a);
    double *serial = run(p.kernel, &p, a); /* the marked loop run as a plain loop */
    for (int r = 0; r < ROWS; r++) {
        double want = 0;
        for (int64_t i = 0; i < threads * per; i++)
            want += a[r * threads * per + i];
        if (!(fabs(got[r] - want) <= 1e-12 * (1 + fabs(want))))
            fail_msg("%lld threads: O[%d] = %.17g, want %.17g", (long long)threads, r, got[r],
                     want);
        assert_true(fabs(serial[r] - want) <= 1e-12 * (1 + fabs(want)));
    }
    free(a);
    free(got);
    free(serial);
    te_ctx_free(p.c);
}

static void test_cross_thread_reduce_sum_matches_direct_sum_for_32_threads(void **state)
{
    (void)state;
    check_sum(32, 3);
}

static void test_cross_thread_reduce_sum_matches_direct_sum_for_odd_thread_counts(void **state)
{
    (void)state;
    /* 100 -> 50 -> 25 -> 13 -> 7 -> 4 -> 2 -> 1: every odd step carries its middle element */
    check_sum(100, 2);
    check_sum(7, 5);
    check_sum(1, 4);
    red p;
    red_init(&p, 100, 2, TE_RSUM);
    extents e = {.n = 0};
    te__stmt_visit(te__pass_cross_thread_reduce(TE_PC(p.c), p.loop), ext_fn, NULL, &e);
    int64_t want[] = {100, 50, 25, 12, 6, 3, 2, 1, 1};
    assert_int_equal(e.n, 9);
    for (int i = 0; i < 9; i++)
        assert_int_equal(e.ext[i], want[i]);
    te_ctx_free(p.c);
}

static void test_cross_thread_reduce_max_matches_direct_max(void **state)
{
    (void)state;
    red p;
    red_init(&p, 48, 2, TE_RMAX);
    double *a = random_input(ROWS * 96, 3);
    te_stmt *cpu = lower_on_cpu(p.c, p.kernel);
    double *got = run(cpu, &p, a);
    for (int r = 0; r < ROWS; r++) {
        double want = -INFINITY;
        for (int i = 0; i < 96; i++)
            want = a[r * 96 + i] > want ? a[r * 96 + i] : want;
        assert_true(got[r] == want);
    }
    free(a);
    free(got);
    te_ctx_free(p.c);
}

static void test_cross_thread_reduce_into_a_local_gives_every_thread_the_total(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_buf *A = te__buf_new(c, "A", TE_F64, 1, (int64_t[]){64}, TE_SCOPE_GLOBAL);
    te_buf *B = te__buf_new(c, "B", TE_F64, 1, (int64_t[]){16}, TE_SCOPE_GLOBAL);
    te_buf *L = te__buf_new(c, "L", TE_F64, 1, (int64_t[]){1}, TE_SCOPE_LOCAL);
    te_expr *bx = te__loop_var(c, "bx", 1), *t0 = te__loop_var(c, "t0", 16),
            *k = te__loop_var(c, "k", 16), *ko = te__loop_var(c, "ko", 4),
            *t2 = te__loop_var(c, "t2", 16);
    te_expr *z = I(0), *g = te_add(c, te_mul(c, ko, I(16)), k);
    te_stmt *loop = gt_bound(
        c, k, 16, TE_THREAD_X,
        te__for(c, ko, I(0), I(4), TE_FOR_SERIAL,
                te__store(c, L, 1, &z, te_add(c, te__load(c, L, 1, &z), te__load(c, A, 1, &g)))));
    loop->u.loop.xreduce = mark(c, L, z, TE_RSUM);
    /* L[0] = 0 in every thread; reduce; B[t2] = L[0] + t2 in every thread */
    te_stmt *k_s = gt_bound(
        c, bx, 1, TE_BLOCK_X,
        te__alloc_stmt(c, L,
                       te__seq(c, 3,
                               (te_stmt *[]){
                                   gt_bound(c, t0, 16, TE_THREAD_X,
                                            te__store(c, L, 1, &z, te_const(c, TE_F64, 0))),
                                   loop,
                                   gt_bound(c, t2, 16, TE_THREAD_X,
                                            te__store(c, B, 1, &t2,
                                                      te_add(c, te__load(c, L, 1, &z),
                                                             te_cast(c, TE_F64, t2)))),
                               })));
    te_stmt *x = te__pass_cross_thread_reduce(TE_PC(c), loop);
    char *txt = pt_print(x);
    assert_null(strstr(txt, "k_w")); /* no single-thread loop: every thread folds the total */
    assert_non_null(strstr(txt, "L[0] = (L[0] + L_red[0])"));
    free(txt);
    te_stmt *cpu = lower_on_cpu(c, k_s);
    double *a = random_input(64, 9);
    double b[16];
    for (int i = 0; i < 16; i++)
        b[i] = NAN;
    pt_env env = {0};
    pt_add_buf(&env, A, a, 64);
    pt_add_buf(&env, B, b, 16);
    pt_exec(&env, cpu);
    assert_int_equal(env.err, 0);
    double sum = 0;
    for (int i = 0; i < 64; i++)
        sum += a[i];
    for (int t = 0; t < 16; t++)
        assert_true(fabs(b[t] - (sum + t)) <= 1e-12 * (1 + fabs(sum + t)));
    free(a);
    te_ctx_free(c);
}

static void test_cross_thread_reduce_needs_a_constant_thread_count_naming_the_loop(void **state)
{
    (void)state;
    red p;
    red_init(&p, 32, 1, TE_RSUM);
    te_ctx *c = p.c;
    te_stmt *l = p.loop;
    te_stmt *bad =
        te__for(c, l->u.loop.var, I(0), te_var(c, "n", TE_I64), TE_FOR_THREAD, l->u.loop.body);
    bad->u.loop.thread_tag = TE_THREAD_X;
    bad->u.loop.xreduce = l->u.loop.xreduce;
    assert_null(te__pass_cross_thread_reduce(TE_PC(c), bad));
    assert_non_null(strstr(te_ctx_errmsg(c), "cross-thread reduction over 'k'"));
    assert_non_null(strstr(te_ctx_errmsg(c), "constant positive thread count"));
    /* inside another loop bound to the same index there is no thread left to reduce over */
    te_ctx_clear_error(c);
    te_expr *o = te__loop_var(c, "outer_x", 2);
    assert_null(te__pass_cross_thread_reduce(TE_PC(c), gt_bound(c, o, 2, TE_THREAD_X, l)));
    assert_non_null(strstr(te_ctx_errmsg(c), "reduction over 'k' is inside loop 'outer_x'"));
    /* unmarked programs come back unchanged */
    te_stmt *plain = te__for(c, l->u.loop.var, I(0), I(32), TE_FOR_SERIAL, l->u.loop.body);
    te_ctx_clear_error(c);
    assert_ptr_equal(te__pass_cross_thread_reduce(TE_PC(c), plain), plain);
    te_ctx_free(c);
}

/* Y[i] = sum_k X[i, k] over 8 x 200, k split by 64 threads (a ragged last share). */
static te_schedule *row_sum(te_ctx *c, te_tensor **X, te_tensor **Y)
{
    *X = te_placeholder(c, "X", TE_F32, 2, (int64_t[]){8, 200});
    te_expr *i = te_axis(c, "i", 8), *k = te_reduce_axis(c, "k", 200);
    *Y = te_compute(c, "Y", 1, &i, te_sum(c, TE_AT(c, *X, i, k), 1, &k));
    assert_non_null(*Y);
    te_schedule *s = te_schedule_create(c, 1, Y);
    te_stage *st = te_schedule_stage(s, *Y);
    te_iter *ko, *kt;
    assert_int_equal(te_split(st, te_stage_reduce_axis(st, 0), 64, &ko, &kt), TE_OK);
    assert_int_equal(te_reorder(st, 2, (te_iter *[]){kt, ko}), TE_OK);
    assert_int_equal(te_bind(st, te_stage_axis(st, 0), TE_BLOCK_X), TE_OK);
    assert_int_equal(te_bind_reduce(st, kt, TE_THREAD_X), TE_OK);
    return s;
}

static void test_cross_thread_reduce_of_a_bind_reduce_schedule(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_tensor *X, *Y;
    te_schedule *s = row_sum(c, &X, &Y);
    te_target host = te_target_host();
    gt_lowering L = gt_lower_until(s, 2, (te_tensor *[]){X, Y}, &host, "cross_thread_reduce");
    assert_int_equal(count_marked(L.s), 1);
    te_stmt *out = te__pass_cross_thread_reduce(&L.pc, L.s);
    assert_non_null(out);
    assert_int_equal(count_marked(out), 0);
    char *txt = pt_print(out);
    assert_non_null(strstr(txt, "allocate Y_red[f32 x 64], shared"));
    free(txt);

    /* the whole pipeline on the C target against the reference */
    te_schedule *s2 = row_sum(c, &X, &Y);
    te_module *m = NULL;
    if (te_build(s2, 2, (te_tensor *[]){X, Y}, "rowsum", &host, &m) != TE_OK)
        fail_msg("build: %s", te_ctx_errmsg(c));
    float x[8 * 200], y[8];
    double ref[8];
    tt_rng r;
    tt_rng_seed(&r, tt_seed(21));
    tt_fill_f32(&r, x, 8 * 200);
    tt_poison_f32(y, 8);
    assert_int_equal(te_module_run(m, (void *[]){x, y}), TE_OK);
    assert_int_equal(
        te_reference_eval(c, 1, &X, (const void *const[]){x}, 1, &Y, (double *[]){ref}), TE_OK);
    double err = tt_max_rel_err_f32(y, ref, 8);
    if (!(err <= 1e-5))
        fail_msg("max rel err %g", err);
    te_module_free(m);
    te_ctx_free(c);
}

/* Y[i] = sum_k X[i, k] over 8 x 128 with four rows per block: i split by 4, the inner part
 * bound to threadIdx.y, k's inner part (32) reduced across threadIdx.x. */
static te_schedule *rows_per_block(te_ctx *c, te_tensor **X, te_tensor **Y)
{
    *X = te_placeholder(c, "X", TE_F32, 2, (int64_t[]){8, 128});
    te_expr *i = te_axis(c, "i", 8), *k = te_reduce_axis(c, "k", 128);
    *Y = te_compute(c, "Y", 1, &i, te_sum(c, TE_AT(c, *X, i, k), 1, &k));
    assert_non_null(*Y);
    te_schedule *s = te_schedule_create(c, 1, Y);
    te_stage *st = te_schedule_stage(s, *Y);
    te_iter *ko, *kt, *bi, *ti;
    assert_int_equal(te_split(st, te_stage_axis(st, 0), 4, &bi, &ti), TE_OK);
    assert_int_equal(te_split(st, te_stage_reduce_axis(st, 0), 32, &ko, &kt), TE_OK);
    assert_int_equal(te_reorder(st, 2, (te_iter *[]){kt, ko}), TE_OK);
    assert_int_equal(te_bind(st, bi, TE_BLOCK_X), TE_OK);
    assert_int_equal(te_bind(st, ti, TE_THREAD_Y), TE_OK);
    assert_int_equal(te_bind_reduce(st, kt, TE_THREAD_X), TE_OK);
    return s;
}

static void
test_cross_thread_reduce_inside_a_thread_y_loop_gives_each_row_its_own_slice(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_tensor *X, *Y;
    te_schedule *s = rows_per_block(c, &X, &Y);
    te_target host = te_target_host();
    gt_lowering L = gt_lower_until(s, 2, (te_tensor *[]){X, Y}, &host, "cross_thread_reduce");
    te_stmt *out = te__pass_cross_thread_reduce(&L.pc, L.s);
    assert_non_null(out);
    char *txt = pt_print(out);
    /* four rows of 32 partial results, row i_i at i_i * 32 */
    assert_non_null(strstr(txt, "allocate Y_red[f32 x 128], shared"));
    assert_non_null(strstr(txt, "Y_red[(((i_i - 0) * 32) + k_i)] = Y_part[0]"));
    assert_non_null(strstr(txt, "(Y[((i_o * 4) + i_i)] + Y_red[((i_i - 0) * 32)])"));
    free(txt);
    /* numerically, through the whole C pipeline (barriers, thread split) */
    te_schedule *s2 = rows_per_block(c, &X, &Y);
    te_module *m = NULL;
    if (te_build(s2, 2, (te_tensor *[]){X, Y}, "rows4", &host, &m) != TE_OK)
        fail_msg("build: %s", te_ctx_errmsg(c));
    float x[8 * 128], y[8];
    double ref[8];
    tt_rng r;
    tt_rng_seed(&r, tt_seed(8));
    tt_fill_f32(&r, x, 8 * 128);
    tt_poison_f32(y, 8);
    assert_int_equal(te_module_run(m, (void *[]){x, y}), TE_OK);
    assert_int_equal(
        te_reference_eval(c, 1, &X, (const void *const[]){x}, 1, &Y, (double *[]){ref}), TE_OK);
    double err = tt_max_rel_err_f32(y, ref, 8);
    if (!(err <= 1e-5))
        fail_msg("rows sharing one reduction array? max rel err %g", err);
    te_module_free(m);
    te_ctx_free(c);
}

static void test_cross_thread_reduce_of_a_1d_block_keeps_the_warp_shuffle_form(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_tensor *X, *Y;
    te_schedule *s = row_sum(c, &X, &Y);
    te_target tgt = te_target_cuda(80);
    te_lowered *f = te_lower(s, 2, (te_tensor *[]){X, Y}, "rowsum", &tgt);
    if (!f)
        fail_msg("lower: %s", te_ctx_errmsg(c));
    const char *src = te_emit_cuda(c, f, &tgt);
    assert_non_null(src);
    /* 64 partial results: one shared step, then the last 32 in a warp */
    assert_non_null(strstr(src, "__shfl_down_sync"));
    te_ctx_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cross_thread_reduce_builds_a_shared_tree_of_halving_steps),
        cmocka_unit_test(test_cross_thread_reduce_sum_matches_direct_sum_for_32_threads),
        cmocka_unit_test(test_cross_thread_reduce_sum_matches_direct_sum_for_odd_thread_counts),
        cmocka_unit_test(test_cross_thread_reduce_max_matches_direct_max),
        cmocka_unit_test(test_cross_thread_reduce_into_a_local_gives_every_thread_the_total),
        cmocka_unit_test(test_cross_thread_reduce_needs_a_constant_thread_count_naming_the_loop),
        cmocka_unit_test(test_cross_thread_reduce_of_a_bind_reduce_schedule),
        cmocka_unit_test(
            test_cross_thread_reduce_inside_a_thread_y_loop_gives_each_row_its_own_slice),
        cmocka_unit_test(test_cross_thread_reduce_of_a_1d_block_keeps_the_warp_shuffle_form),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Tests of the CUDA vector filter: a vectorized loop whose body is a single store stays
 * vectorized; any other vectorized loop (several statements, a guard, a nested loop) becomes an
 * unrolled loop with the same variable, bounds and body; other loops are untouched; in a
 * lowered matmul the shared-tile copies stay vectorized, and are unrolled when a ragged shape
 * gives them a tail guard. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "gpu_testlib.h"
#include "tessera/cuda.h"
#include "tessera/ops.h"

#define I(v) te_int(c, (v))

static void test_vector_filter_keeps_a_single_store_vectorized(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_buf *A = te__buf_new(c, "A", TE_F32, 1, (int64_t[]){64}, TE_SCOPE_GLOBAL);
    te_buf *S = te__buf_new(c, "S", TE_F32, 1, (int64_t[]){64}, TE_SCOPE_SHARED);
    te_expr *tx = te__loop_var(c, "tx", 16), *v = te__loop_var(c, "v", 4);
    te_expr *g = te_add(c, te_mul(c, tx, I(4)), v);
    te_stmt *copy = gt_bound(c, tx, 16, TE_THREAD_X,
                             te__for(c, v, I(0), I(4), TE_FOR_VECTORIZED,
                                     te__store(c, S, 1, &g, te__load(c, A, 1, &g))));
    assert_ptr_equal(te__pass_gpu_vector_filter(TE_PC(c), copy), copy);
    te_ctx_free(c);
}

static void test_vector_filter_unrolls_other_vectorized_loops(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_buf *A = te__buf_new(c, "A", TE_F32, 1, (int64_t[]){64}, TE_SCOPE_GLOBAL);
    te_buf *B = te__buf_new(c, "B", TE_F32, 1, (int64_t[]){64}, TE_SCOPE_GLOBAL);
    te_expr *tx = te__loop_var(c, "tx", 16), *v = te__loop_var(c, "v", 4),
            *j = te__loop_var(c, "j", 2);
    te_expr *g = te_add(c, te_mul(c, tx, I(4)), v);
    te_stmt *st = te__store(c, B, 1, &g, te__load(c, A, 1, &g));
    te_stmt *bodies[] = {
        te__seq2(c, st, te__store(c, A, 1, &g, te_f32(c, 0))), /* two stores */
        te__if(c, te_lt(c, g, I(60)), st, NULL),               /* a tail guard */
        te__for(c, j, I(0), I(2), TE_FOR_SERIAL, st),          /* a nested loop */
    };
    for (int i = 0; i < 3; i++) {
        te_stmt *vl = te__for(c, v, I(0), I(4), TE_FOR_VECTORIZED, bodies[i]);
        te_stmt *k = gt_bound(c, tx, 16, TE_THREAD_X, vl);
        te_stmt *out = te__pass_gpu_vector_filter(TE_PC(c), k);
        assert_non_null(out);
        assert_int_equal(out->u.loop.fkind, TE_FOR_THREAD);
        assert_int_equal(out->u.loop.thread_tag, TE_THREAD_X);
        const te_stmt *l = out->u.loop.body;
        assert_int_equal(l->kind, TE_S_FOR);
        assert_int_equal(l->u.loop.fkind, TE_FOR_UNROLLED);
        assert_ptr_equal(l->u.loop.var, v);
        assert_ptr_equal(l->u.loop.min, vl->u.loop.min);
        assert_ptr_equal(l->u.loop.extent, vl->u.loop.extent);
        assert_ptr_equal(l->u.loop.body, bodies[i]);
        /* the input is unchanged */
        assert_int_equal(vl->u.loop.fkind, TE_FOR_VECTORIZED);
    }
    /* loops of other kinds stay as they are */
    te_stmt *ser = te__for(c, v, I(0), I(4), TE_FOR_SERIAL, bodies[0]);
    assert_ptr_equal(te__pass_gpu_vector_filter(TE_PC(c), ser), ser);
    te_ctx_free(c);
}

typedef struct {
    int store_body, other_body;
} vec_count;

static bool vec_fn(const te_stmt *s, void *user)
{
    vec_count *v = user;
    if (s->kind == TE_S_FOR && s->u.loop.fkind == TE_FOR_VECTORIZED) {
        if (s->u.loop.body->kind == TE_S_STORE)
            v->store_body++;
        else
            v->other_body++;
    }
    return true;
}

static bool unrolled_fn(const te_stmt *s, void *user)
{
    if (s->kind == TE_S_FOR && s->u.loop.fkind == TE_FOR_UNROLLED)
        (*(int *)user)++;
    return true;
}

static int count_unrolled(const te_stmt *s)
{
    int n = 0;
    te__stmt_visit(s, unrolled_fn, NULL, &n);
    return n;
}

static void test_vector_filter_on_a_lowered_matmul_keeps_the_tile_copies(void **state)
{
    (void)state;
    /* tiles that divide the matrices, and a ragged case (70 x 50 x 36) */
    static const int64_t shapes[2][3] = {{64, 64, 32}, {70, 50, 36}};
    for (int sh = 0; sh < 2; sh++) {
        te_ctx *c = te_ctx_create();
        int64_t M = shapes[sh][0], N = shapes[sh][1], K = shapes[sh][2];
        te_tensor *A = te_placeholder(c, "A", TE_F32, 2, (int64_t[]){M, K});
        te_tensor *B = te_placeholder(c, "B", TE_F32, 2, (int64_t[]){K, N});
        te_tensor *C = te_op_matmul(c, A, B, 0, 0, "C");
        te_schedule *s = te_schedule_create(c, 1, &C);
        te_cuda_knobs kn = te_cuda_knobs_default("matmul");
        kn.vec = 4;
        assert_int_equal(te_cuda_schedule_matmul(s, C, NULL, &kn), TE_OK);
        te_target tgt = te_target_cuda(80);
        gt_lowering L = gt_lower_until(s, 3, (te_tensor *[]){A, B, C}, &tgt, "gpu_vector_filter");
        te_stmt *out = te__pass_gpu_vector_filter(&L.pc, L.s);
        assert_non_null(out);
        vec_count before = {0, 0}, after = {0, 0};
        te__stmt_visit(L.s, vec_fn, NULL, &before);
        te__stmt_visit(out, vec_fn, NULL, &after);
        /* divisible: the two tile copies and the stores of a thread's rows of 4 results are
         * single stores and stay vectorized; ragged: they carry a tail guard and are unrolled */
        assert_int_equal(before.store_body, sh == 0 ? 3 : 0);
        assert_int_equal(before.other_body, sh == 0 ? 0 : 3);
        assert_int_equal(after.store_body, before.store_body);
        assert_int_equal(after.other_body, 0);
        assert_int_equal(count_unrolled(out), count_unrolled(L.s) + before.other_body);
        assert_int_equal(gt_count_kind(out, TE_S_FOR), gt_count_kind(L.s, TE_S_FOR));
        te_ctx_free(c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vector_filter_keeps_a_single_store_vectorized),
        cmocka_unit_test(test_vector_filter_unrolls_other_vectorized_loops),
        cmocka_unit_test(test_vector_filter_on_a_lowered_matmul_keeps_the_tile_copies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

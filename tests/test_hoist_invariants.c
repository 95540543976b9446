/* Tests of the hoist_invariants pass: a math call a loop does not move is computed once, before
 * the outermost such loop, and nothing else moves: calls of a loop variable, reads of what the
 * loop writes, reads an if, an if_then_else branch or a loop of unknown extent guards, and
 * anything inside a GPU thread loop. Each rewrite is run before and after and must store the
 * same values; a layer norm built end to end computes its scale once per row and matches the
 * float64 reference. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "passes_testlib.h"
#include "tessera/backend.h"
#include "tessera/ops.h"
#include "testutil.h"

#define I(v) te_int(c, (v))

typedef struct fx {
    te_ctx *c;
    te_buf *A, *Y; /* A: an input of 8 values, Y: the output of 64 */
    double a[8];
} fx;

static fx make(void)
{
    fx f;
    f.c = te_ctx_create();
    f.A = te__buf_new(f.c, "A", TE_F32, 1, (int64_t[]){8}, TE_SCOPE_GLOBAL);
    f.Y = te__buf_new(f.c, "Y", TE_F32, 1, (int64_t[]){64}, TE_SCOPE_GLOBAL);
    for (int i = 0; i < 8; i++)
        f.a[i] = 1.5 + i;
    return f;
}

/* Runs the pass on prog, checks the printed result and that both programs store the same
 * values into Y (reading A; v bound to val when given). */
static te_stmt *hoist(fx *f, te_stmt *prog, const char *want, te_expr *v, int64_t val)
{
    te_stmt *out = te__pass_hoist_invariants(TE_PC(f->c), prog);
    assert_non_null(out);
    assert_true(pt_print_is(out, want));
    assert_true(pt_same_effect(
        prog, out,
        &(pt_run){
            .out = f->Y, .n = 64, .in = f->A, .in_data = f->a, .in_n = 8, .var = v, .val = val}));
    return out;
}

/* The layer norm shape: a row's statistic is written inside the row loop, then read by a call
 * in the output loop. The call moves before the output loop (it reads what the row loop
 * writes, so no further); a call of an input alone moves before both loops, and an equal one
 * shares its let. */
static void test_calls_move_before_the_outermost_loop_they_do_not_depend_on(void **state)
{
    (void)state;
    fx f = make();
    te_ctx *c = f.c;
    te_buf *M = te__buf_new(c, "m", TE_F32, 1, (int64_t[]){1}, TE_SCOPE_LOCAL);
    te_expr *r = te__loop_var(c, "r", 4), *j = te__loop_var(c, "j", 8);
    te_expr *at = te_add(c, te_mul(c, r, I(8)), j);
    te_expr *scale =
        te_div(c, te_f32(c, 1), te_sqrt(c, te_add(c, pt_ld(c, M, I(0)), te_f32(c, 1))));
    te_stmt *out_loop = te__for(c, j, I(0), I(8), TE_FOR_SERIAL,
                                te__seq(c, 2,
                                        (te_stmt *[]){
                                            pt_st(c, f.Y, at,
                                                  te_mul(c, te_mul(c, pt_ld(c, f.A, j), scale),
                                                         te_exp(c, pt_ld(c, f.A, I(7))))),
                                            pt_st(c, f.Y, te_add(c, at, I(32)),
                                                  te_add(c, te_exp(c, pt_ld(c, f.A, I(7))),
                                                         te_sqrt(c, te_cast(c, TE_F32, j)))),
                                        }));
    te_stmt *prog = te__for(
        c, r, I(0), I(4), TE_FOR_PARALLEL,
        te__alloc_stmt(
            c, M,
            te__seq(c, 2,
                    (te_stmt *[]){pt_st(c, M, I(0), te_mul(c, pt_ld(c, f.A, r), pt_ld(c, f.A, r))),
                                  out_loop})));
    hoist(&f, prog,
          "let hoisted1 = exp(A[7])\n"
          "parallel (r, 0, 4) {\n"
          "  allocate m[f32 x 1], local\n"
          "  m[0] = (A[r] * A[r])\n"
          "  let hoisted0 = (1f / sqrt((m[0] + 1f)))\n"
          "  for (j, 0, 8) {\n"
          "    Y[((r * 8) + j)] = ((A[j] * hoisted0) * hoisted1)\n"
          "    Y[(((r * 8) + j) + 32)] = (hoisted1 + sqrt(f32(j)))\n"
          "  }\n"
          "}\n",
          NULL, 0);
    te_ctx_free(c);
}

/* Left in place: a loop that writes what the call reads; a read behind an if, behind an
 * if_then_else branch, inside a loop of unknown extent; anything inside a GPU thread loop. A
 * call without reads still leaves an if (float arithmetic does not trap). */
static void test_guarded_reads_written_buffers_and_thread_loops_stay(void **state)
{
    (void)state;
    fx f = make();
    te_ctx *c = f.c;
    te_expr *j = te__loop_var(c, "j", 8), *n = te__loop_var(c, "n", 9);
    te_expr *e7 = te_exp(c, pt_ld(c, f.A, I(7)));
    te_stmt *writes =
        te__for(c, j, I(0), I(8), TE_FOR_SERIAL,
                te__seq(c, 2,
                        (te_stmt *[]){pt_st(c, f.Y, I(40), te_cast(c, TE_F32, j)),
                                      pt_st(c, f.Y, j, te_sqrt(c, pt_ld(c, f.Y, I(40))))}));
    te_stmt *guarded = te__for(
        c, j, I(0), I(8), TE_FOR_SERIAL,
        te__if(c, te_lt(c, j, I(3)),
               te__seq(c, 2,
                       (te_stmt *[]){pt_st(c, f.Y, te_add(c, j, I(8)), e7),
                                     pt_st(c, f.Y, te_add(c, j, I(16)), te_exp(c, te_f32(c, 2)))}),
               NULL));
    te_stmt *branch = te__for(
        c, j, I(0), I(8), TE_FOR_SERIAL,
        pt_st(c, f.Y, te_add(c, j, I(24)),
              te_if_then_else(c, te_lt(c, j, I(2)), te_log(c, pt_ld(c, f.A, I(1))), te_f32(c, 0))));
    te_stmt *unknown = te__for(c, j, I(0), n, TE_FOR_SERIAL,
                               pt_st(c, f.Y, te_add(c, j, I(48)), te_log(c, pt_ld(c, f.A, I(2)))));
    te_stmt *thread = te__for(c, j, I(0), I(8), TE_FOR_THREAD,
                              pt_st(c, f.Y, te_add(c, j, I(56)), te_log(c, pt_ld(c, f.A, I(3)))));
    thread->u.loop.thread_tag = 0;
    hoist(&f, te__seq(c, 4, (te_stmt *[]){writes, guarded, branch, unknown}),
          "for (j, 0, 8) {\n"
          "  Y[40] = f32(j)\n"
          "  Y[j] = sqrt(Y[40])\n"
          "}\n"
          "let hoisted0 = exp(2f)\n"
          "for (j, 0, 8) {\n"
          "  if ((j < 3)) {\n"
          "    Y[(j + 8)] = exp(A[7])\n"
          "    Y[(j + 16)] = hoisted0\n"
          "  }\n"
          "}\n"
          "for (j, 0, 8) {\n"
          "  Y[(j + 24)] = if_then_else((j < 2), log(A[1]), 0f)\n"
          "}\n"
          "for (j, 0, n) {\n"
          "  Y[(j + 48)] = log(A[2])\n"
          "}\n",
          n, 5);
    te_stmt *out = te__pass_hoist_invariants(TE_PC(c), thread);
    assert_ptr_equal(out, thread);
    te_ctx_free(c);
}

/* End to end: a layer norm whose output pass runs per row computes 1 / sqrt(var + eps) once per
 * row (a let before the output's loop in the IR, a const before it in the C), and matches the
 * float64 reference. */
static void test_layer_norm_scale_once_per_row(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    enum { M = 8, N = 96 };
    te_tensor *X = te_placeholder(ctx, "X", TE_F32, 2, (int64_t[]){M, N});
    te_tensor *G = te_placeholder(ctx, "G", TE_F32, 1, (int64_t[]){N});
    te_tensor *Y = te_op_layer_norm(ctx, X, G, NULL, 1e-5, -1, "ln");
    assert_non_null(Y);
    te_schedule *s = te_schedule_create(ctx, 1, &Y);
    te_stage *sy = te_schedule_stage(s, Y);
    te_iter *row = te_stage_axis(sy, 0), *jo, *ji;
    assert_int_equal(te_parallel(sy, row), TE_OK);
    assert_int_equal(te_split(sy, te_stage_axis(sy, 1), 16, &jo, &ji), TE_OK);
    assert_int_equal(te_vectorize(sy, ji), TE_OK);
    for (int q = te_schedule_nstages(s) - 2; q >= 0; q--)
        assert_int_equal(te_compute_at(te_schedule_stage_at(s, q), sy, row), TE_OK);
    te_target tgt = te_target_host();
    te_tensor *args[] = {X, G, Y};
    te_lowered *f = te_lower(s, 3, args, "ln", &tgt);
    assert_non_null(f);
    char *ir = NULL;
    size_t len = 0;
    FILE *mf = open_memstream(&ir, &len);
    te_lowered_print(f, mf);
    fclose(mf);
    const char *let = strstr(ir, "let hoisted0 = "), *loop = strstr(ir, "for (i1_o");
    if (!let || !loop || let > loop || !strstr(let, "sqrt"))
        fail_msg("no sqrt let before the output loop:\n%s", ir);
    const char *src = te_emit_c(ctx, f, &tgt);
    assert_non_null(src);
    const char *decl = strstr(src, "const float hoisted0 = "), *cloop = strstr(src, "i1_o = 0");
    assert_true(decl && cloop && decl < cloop);
    free(ir);
    te_module *m = NULL;
    if (te_build_lowered(ctx, f, "ln", &tgt, &m))
        fail_msg("te_build_lowered: %s", te_ctx_errmsg(ctx));
    static float x[M * N], g[N], y[M * N];
    tt_rng r;
    tt_rng_seed(&r, tt_seed(71));
    tt_fill_f32(&r, x, M * N);
    tt_fill_f32(&r, g, N);
    tt_poison_f32(y, M * N);
    assert_int_equal(te_module_run(m, (void *[]){x, g, y}), TE_OK);
    double *ref = malloc(sizeof(double) * M * N);
    assert_int_equal(
        te_reference_eval(ctx, 2, (te_tensor *[]){X, G}, (const void *const[]){x, g}, 1, &Y, &ref),
        TE_OK);
    double err = tt_max_rel_err_f32(y, ref, M * N);
    printf("layer norm, scale hoisted: max relative error %.3g\n", err);
    assert_true(err < 1e-5);
    free(ref);
    te_module_free(m);
    te_ctx_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_calls_move_before_the_outermost_loop_they_do_not_depend_on),
        cmocka_unit_test(test_guarded_reads_written_buffers_and_thread_loops_stay),
        cmocka_unit_test(test_layer_norm_scale_once_per_row),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

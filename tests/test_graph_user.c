/* User operators as graph nodes (te_graph_op_register) and the run's threads
 * (te_graph_compile_ex): a user tensor expression is used by name from the C API and the text
 * form, fuses as its pattern kind allows, runs and matches the float64 reference; the schedule
 * puts independent small groups in one wave with the thread budget split among them, and the
 * results are the same bytes for 1 and 2 threads. */
/* cmocka.h needs these first. */
// clang-format off
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
// clang-format on

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/graph.h"
#include "tessera/ops.h"
#include "tessera/target.h"
#include "tessera/tuner.h"
#include "tessera/tuning_db.h"
#include "testutil.h"

static tt_rng g_rng;
static te_fuse_rules *g_rules;

static te_fuse_target target(void) { return tt_fuse_target(1 << 20); }

/* ---- The user operators ------------------------------------------------------------------ */

static double attr_f64(const te_op_params *kv, const char *key)
{
    for (int i = 0; i < kv->n; i++)
        if (!strcmp(kv->p[i].key, key))
            return strtod(kv->p[i].val, NULL);
    return NAN; /* every declared attribute is passed: a missing one fails the test */
}

typedef struct st_args {
    te_tensor *x;
    double alpha;
} st_args;

static te_expr *scaled_tanh_body(te_ctx *ctx, te_expr *const *axes, void *user)
{
    const st_args *a = user;
    te_expr *x = te_read(ctx, a->x, te_tensor_ndim(a->x), axes);
    te_expr *ax = te_mul(ctx, te_const(ctx, te_tensor_dtype(a->x), a->alpha), x);
    return te_call(ctx, TE_TANH, 1, &ax);
}

static int calls; /* how often the callbacks ran */

/* y = tanh(alpha * x): elementwise. */
static int build_scaled_tanh(te_ctx *ctx, int n_in, te_tensor *const *in, const te_op_params *attrs,
                             const char *name, te_tensor **out, void *user)
{
    (void)n_in, (void)user;
    calls++;
    st_args a = {in[0], attr_f64(attrs, "alpha")};
    if (!(a.alpha > 0))
        return te_ctx_set_error(ctx, TE_ERR_ARG, "alpha must be > 0");
    out[0] = te_compute_shape(ctx, name, te_tensor_ndim(in[0]), te_tensor_shape(in[0]),
                              scaled_tanh_body, &a);
    return out[0] ? TE_OK : te_ctx_errcode(ctx);
}

/* The same expression as an opaque operator: it fuses with nothing. */
static int build_opaque_scale(te_ctx *ctx, int n_in, te_tensor *const *in,
                              const te_op_params *attrs, const char *name, te_tensor **out,
                              void *user)
{
    return build_scaled_tanh(ctx, n_in, in, attrs, name, out, user);
}

static void register_ops(void)
{
    char err[256];
    static int done;
    if (done)
        return;
    te_graph_user_op st = {.name = "scaled_tanh",
                           .kind = TE_KIND_ELEMWISE,
                           .min_in = 1,
                           .max_in = 1,
                           .inputs = "X",
                           .attrs = "alpha=1",
                           .flop_per_elem = 4,
                           .build = build_scaled_tanh};
    if (te_graph_op_register(&st, err, sizeof err))
        fail_msg("%s", err);
    te_graph_user_op op = st;
    op.name = "opaque_scale";
    op.kind = TE_KIND_OPAQUE;
    op.build = build_opaque_scale;
    if (te_graph_op_register(&op, err, sizeof err))
        fail_msg("%s", err);
    done = 1;
}

static void test_register_refuses_bad_operators_with_a_message(void **state)
{
    (void)state;
    register_ops();
    char err[256];
    te_graph_user_op ok = {.name = "fine_op",
                           .kind = TE_KIND_ELEMWISE,
                           .min_in = 1,
                           .max_in = 1,
                           .build = build_scaled_tanh};
    te_graph_user_op bad = ok;
    bad.name = "matmul";
    assert_int_equal(te_graph_op_register(&bad, err, sizeof err), TE_ERR_ARG);
    assert_non_null(strstr(err, "'matmul'"));
    assert_non_null(strstr(err, "taken"));
    bad.name = "scaled_tanh";
    assert_int_equal(te_graph_op_register(&bad, err, sizeof err), TE_ERR_ARG);
    assert_non_null(strstr(err, "taken"));
    bad.name = "2bad";
    assert_int_equal(te_graph_op_register(&bad, err, sizeof err), TE_ERR_ARG);
    assert_non_null(strstr(err, "C identifier"));
    bad = ok;
    bad.build = NULL;
    assert_int_equal(te_graph_op_register(&bad, err, sizeof err), TE_ERR_ARG);
    assert_non_null(strstr(err, "callback"));
    bad = ok;
    bad.max_in = 0;
    assert_int_equal(te_graph_op_register(&bad, err, sizeof err), TE_ERR_ARG);
    bad = ok;
    bad.attrs = "alpha";
    assert_int_equal(te_graph_op_register(&bad, err, sizeof err), TE_ERR_ARG);
    assert_non_null(strstr(err, "attributes"));
    assert_int_equal(te_graph_op_register(NULL, err, sizeof err), TE_ERR_ARG);
    assert_int_equal(te_graph_op_kind("scaled_tanh"), TE_KIND_ELEMWISE);
    assert_int_equal(te_graph_op_kind("opaque_scale"), TE_KIND_OPAQUE);
}

static void test_user_node_checks_inputs_and_attributes(void **state)
{
    (void)state;
    register_ops();
    te_graph *g = te_graph_create();
    int x = te_graph_input(g, "x", TE_F32, 2, (int64_t[]){4, 8});
    assert_true(te_graph_node(g, "scaled_tanh", "beta=2", 1, &x, "y") < 0);
    assert_non_null(strstr(te_graph_errmsg(g), "node 'y' (scaled_tanh)"));
    assert_non_null(strstr(te_graph_errmsg(g), "beta"));
    te_graph_clear_error(g);
    assert_true(te_graph_node(g, "scaled_tanh", "alpha=-1", 1, &x, "y") < 0);
    assert_non_null(strstr(te_graph_errmsg(g), "alpha must be > 0"));
    te_graph_clear_error(g);
    assert_true(te_graph_node(g, "scaled_tanh", NULL, 2, (int[]){x, x}, "y") < 0);
    assert_non_null(strstr(te_graph_errmsg(g), "inputs given"));
    te_graph_free(g);
}

/* Runs e on fresh random inputs (seeded: equal across calls with equal seeds) and returns the
 * first output (caller frees); checks every output against the reference. */
static float *run_and_check(te_graph *g, te_graph_exec *e, uint64_t seed, double tol)
{
    tt_rng r;
    tt_rng_seed(&r, seed);
    int nin = te_graph_input_count(g);
    float *in[8];
    const void *inp[8];
    for (int i = 0; i < nin; i++) {
        size_t n = (size_t)te_graph_value_numel(g, te_graph_input_value(g, i));
        in[i] = malloc(sizeof(float) * n);
        tt_fill_f32(&r, in[i], n);
        inp[i] = in[i];
    }
    int nout = te_graph_output_count(g);
    float *out[8];
    for (int j = 0; j < nout; j++) {
        size_t n = (size_t)te_graph_value_numel(g, te_graph_output_value(g, j));
        out[j] = malloc(sizeof(float) * n);
        tt_poison_f32(out[j], n);
    }
    if (te_graph_run(e, inp, (void *const *)out))
        fail_msg("%s", te_graph_errmsg(g));
    for (int j = 0; j < nout; j++) {
        int v = te_graph_output_value(g, j);
        size_t n = (size_t)te_graph_value_numel(g, v);
        double *want = malloc(sizeof(double) * n);
        assert_int_equal(te_graph_eval_reference(g, inp, 1, &v, &want), TE_OK);
        double err = tt_max_rel_err_f32(out[j], want, n);
        if (!(err <= tol))
            fail_msg("output '%s': relative error %g", te_graph_value_name(g, v), err);
        free(want);
        if (j)
            free(out[j]);
    }
    for (int i = 0; i < nin; i++)
        free(in[i]);
    return out[0];
}

static void test_user_node_from_text_fuses_runs_and_matches_reference(void **state)
{
    (void)state;
    register_ops();
    te_graph *g = te_graph_create();
    if (te_graph_parse(g,
                       "input x f32[16,32]\n"
                       "const w f32[32,24] random seed=1 lo=-0.2 hi=0.2\n"
                       "const b f32[24] random seed=2\n"
                       "h = matmul(x, w)\n"
                       "hb = add(h, b)\n"
                       "y = scaled_tanh(hb) alpha=0.5\n"
                       "output y\n",
                       "user.graph"))
        fail_msg("%s", te_graph_errmsg(g));
    te_fuse_target t = target();
    te_fuse_plan *p = te_graph_fuse(g, g_rules, &t);
    assert_non_null(p);
    /* Elementwise: it joins the matmul's epilogue, one kernel for the three nodes. */
    assert_int_equal(te_fuse_plan_group_count(p), 1);
    te_ctx *ctx = te_ctx_create();
    te_graph_group_expr ge;
    assert_int_equal(te_graph_group_expr_build(g, p, 0, ctx, &ge), TE_OK);
    assert_string_equal(ge.name, "graph_matmul_add_scaled_tanh");
    assert_non_null(strstr(ge.key, "graph_matmul_add_scaled_tanh"));
    te_ctx_free(ctx);
    te_graph_exec *e = NULL;
    if (te_graph_compile(g, p, NULL, &e))
        fail_msg("%s", te_graph_errmsg(g));
    assert_int_equal(te_graph_exec_kernel_count(e), 1);
    free(run_and_check(g, e, 7, 1e-5));
    te_graph_exec_free(e);
    te_fuse_plan_free(p);
    te_graph_free(g);
}

static void test_user_node_attribute_reaches_the_expression(void **state)
{
    (void)state;
    register_ops();
    te_graph *g = te_graph_create();
    int x = te_graph_input(g, "x", TE_F32, 1, (int64_t[]){64});
    int y = te_graph_node(g, "scaled_tanh", "alpha=0.25", 1, &x, "y");
    int z = te_graph_node(g, "scaled_tanh", NULL, 1, &x, "z"); /* the default, alpha=1 */
    te_graph_output(g, y);
    te_graph_output(g, z);
    if (te_graph_errcode(g))
        fail_msg("%s", te_graph_errmsg(g));
    assert_int_equal(te_graph_optimize(g, NULL), TE_OK); /* rebuilds: the callback again */
    te_fuse_target t = target();
    te_fuse_plan *p = te_graph_fuse(g, g_rules, &t);
    te_graph_exec *e = NULL;
    if (te_graph_compile(g, p, NULL, &e))
        fail_msg("%s", te_graph_errmsg(g));
    float in[64], oy[64], oz[64];
    tt_fill_f32(&g_rng, in, 64);
    tt_poison_f32(oy, 64);
    tt_poison_f32(oz, 64);
    assert_int_equal(te_graph_run(e, (const void *[]){in}, (void *[]){oy, oz}), TE_OK);
    for (int i = 0; i < 64; i++) {
        assert_float_equal(oy[i], tanh(0.25 * in[i]), 1e-6);
        assert_float_equal(oz[i], tanh(in[i]), 1e-6);
    }
    te_graph_exec_free(e);
    te_fuse_plan_free(p);
    te_graph_free(g);
}

static void test_user_node_prints_and_parses_back(void **state)
{
    (void)state;
    register_ops();
    te_graph *g = te_graph_create();
    if (te_graph_parse(g, "input x f32[4,8]\ny = scaled_tanh(x) alpha=0.5\noutput y\n", "a.graph"))
        fail_msg("%s", te_graph_errmsg(g));
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    assert_int_equal(te_graph_print(g, f, NULL), TE_OK);
    fclose(f);
    assert_non_null(strstr(text, "scaled_tanh(x)"));
    assert_non_null(strstr(text, "alpha=0.5"));
    te_graph *h = te_graph_create();
    if (te_graph_parse(h, text, "printed.graph"))
        fail_msg("%s", te_graph_errmsg(h));
    assert_int_equal(te_graph_node_count(h), 1);
    assert_string_equal(te_graph_node_op(h, 0), "scaled_tanh");
    free(text);
    te_graph_free(h);
    te_graph_free(g);
}

static void test_memplan_steps_refuse_decreasing_steps(void **state)
{
    (void)state;
    te_graph *g = te_graph_create();
    int x = te_graph_input(g, "x", TE_F32, 1, (int64_t[]){16});
    int a = te_graph_node(g, "relu", NULL, 1, &x, "a");
    int b = te_graph_node(g, "opaque_scale", NULL, 1, &a, "b");
    int c = te_graph_node(g, "opaque_scale", NULL, 1, &b, "c");
    te_graph_output(g, te_graph_node(g, "opaque_scale", NULL, 1, &c, "d"));
    te_fuse_plan *p = te_graph_fuse(g, NULL, NULL);
    int ng = te_fuse_plan_group_count(p);
    assert_int_equal(ng, 4); /* a | b | c | d: opaque nodes fuse with nothing */
    te_graph_memplan *m0 = NULL;
    assert_int_equal(te_graph_memplan_create(p, &m0), TE_OK);
    te_graph_mem_stats s0;
    te_graph_memplan_stats(m0, &s0);
    assert_true(s0.pool_bytes < s0.fused_bytes); /* a and c share bytes group by group */
    te_graph_memplan_free(m0);
    int step[8] = {0};
    for (int i = 0; i < ng; i++)
        step[i] = ng - 1 - i;
    te_graph_memplan *m = NULL;
    assert_int_equal(te_graph_memplan_create_steps(p, step, &m), TE_ERR_ARG);
    assert_null(m);
    for (int i = 0; i < ng; i++)
        step[i] = 0; /* every group in one step: no intermediate may share bytes */
    assert_int_equal(te_graph_memplan_create_steps(p, step, &m), TE_OK);
    te_graph_mem_stats st;
    te_graph_memplan_stats(m, &st);
    assert_int_equal(st.pool_bytes, st.fused_bytes); /* a, b, c all live at once */
    te_graph_memplan_free(m);
    te_fuse_plan_free(p);
    te_graph_free(g);
}

/* Fake timings: the tuner records trials without compiling; the shortest trace wins. */
static double fake_time(const char *trace, void *user)
{
    (void)user;
    return 1e-3 + 1e-6 * (double)(strlen(trace) % 97);
}

static void test_user_node_group_is_tuned_and_runs_from_the_database(void **state)
{
    (void)state;
    register_ops();
    char dir[512];
    assert_int_equal(tt_tmpdir_make(dir, sizeof dir, "graph_user"), 0);
    te_db *db = NULL;
    assert_int_equal(te_db_open(tt_path_in(dir, "t.db"), NULL, &db), TE_OK);
    te_graph *g = te_graph_create();
    if (te_graph_parse(g,
                       "input x f32[8,16]\n"
                       "const w f32[16,8] random seed=1 lo=-0.3 hi=0.3\n"
                       "h = matmul(x, w)\n"
                       "y = scaled_tanh(h) alpha=0.75\n"
                       "output y\n",
                       "tuned.graph"))
        fail_msg("%s", te_graph_errmsg(g));
    te_fuse_target ft = target();
    te_fuse_plan *p = te_graph_fuse(g, g_rules, &ft);
    assert_int_equal(te_fuse_plan_group_count(p), 1);
    te_target tgt = te_target_host();
    tgt.num_cores = 2;
    /* The group's expression as a tuning task, as `tessera tune --graph` adds it. */
    te_ctx *ctx = te_ctx_create();
    te_graph_group_expr ge;
    assert_int_equal(te_graph_group_expr_build(g, p, 0, ctx, &ge), TE_OK);
    /* The weight w (input 1) is measured cold, as a run of the graph meets it, and the key
     * says so. */
    assert_int_equal(ge.cold_inputs, 2u);
    assert_non_null(strstr(ge.key, ";cold=1"));
    te_tune_options o = te_tune_options_default();
    o.max_trials = 4;
    o.target = &tgt;
    o.fake_runner = fake_time;
    o.quiet = 1;
    te_tuner *t = te_tuner_create(db, &o);
    if (te_graph_group_expr_add_task(t, &ge, 1) || te_tuner_run(t))
        fail_msg("%s", te_tuner_errmsg(t));
    te_tuner_free(t);
    te_ctx_free(ctx);
    /* Compiled from the record, run, and checked against the reference. */
    te_graph_compile_opts co = {.target = &tgt, .db = db, .threads = 2};
    te_graph_exec *e = NULL;
    if (te_graph_compile_ex(g, p, &co, &e))
        fail_msg("%s", te_graph_errmsg(g));
    const char *note = NULL;
    if (te_graph_exec_group_from_db(e, 0, &note) != 1)
        fail_msg("group 0 not from the database: %s", note);
    free(run_and_check(g, e, 3, 1e-5));
    te_graph_exec_free(e);
    te_fuse_plan_free(p);
    te_graph_free(g);
    te_db_close(db);
    tt_tmpdir_remove(dir);
}

/* ---- Threads across the run ---------------------------------------------------------------- */

/* Two opaque branches from x (groups of their own, independent), then their sum. */
static const char *branches = "input x f32[8,16]\n"
                              "a = opaque_scale(x) alpha=0.5\n"
                              "b = opaque_scale(x) alpha=2\n"
                              "c = add(a, b)\n"
                              "const w f32[16,16] random seed=3 lo=-0.3 hi=0.3\n"
                              "y = matmul(c, w)\n"
                              "output y\n";

/* Parses `text` (fail on error) and fuses it with the shipped rules into *p. */
static te_graph *parse_fused(const char *text, const char *name, te_fuse_plan **p)
{
    te_graph *g = te_graph_create();
    if (te_graph_parse(g, text, name))
        fail_msg("%s", te_graph_errmsg(g));
    te_fuse_target t = target();
    *p = te_graph_fuse(g, g_rules, &t);
    assert_non_null(*p);
    return g;
}

/* The group that computes value `name`. */
static int group_of(const te_graph *g, const te_fuse_plan *p, const char *name)
{
    return te_fuse_plan_group_of(p, te_graph_value_producer(g, te_graph_find(g, name)));
}

static te_graph_exec *compile_with(te_graph *g, te_fuse_plan *p, int threads, double grain,
                                   int no_concurrency)
{
    te_graph_compile_opts o = {
        .threads = threads, .min_flops_per_thread = grain, .no_concurrency = no_concurrency};
    te_graph_exec *e = NULL;
    if (te_graph_compile_ex(g, p, &o, &e))
        fail_msg("%s", te_graph_errmsg(g));
    assert_int_equal(te_graph_exec_threads(e), threads);
    /* Never more threads than the budget in any wave, nor than a kernel's parallel loops can
     * use; and every thread used where the kernels can use them. */
    for (int w = 0; w < te_graph_exec_wave_count(e); w++) {
        int sum = 0;
        double width = 0;
        for (int gi = 0; gi < te_fuse_plan_group_count(p); gi++) { /* views: 0 threads */
            if (te_graph_exec_group_wave(e, gi) != w)
                continue;
            int t = te_graph_exec_group_threads(e, gi);
            double wd = te_graph_exec_group_width(e, gi);
            assert_true(wd == 0 ? t == 0 : t >= 1 && t <= wd);
            sum += t;
            width += wd;
        }
        assert_int_equal(sum, width < threads ? (int)width : threads);
    }
    return e;
}

static void test_independent_small_groups_share_a_wave_and_the_threads(void **state)
{
    (void)state;
    register_ops();
    te_fuse_plan *p;
    te_graph *g = parse_fused(branches, "branches.graph", &p);
    int ga = group_of(g, p, "a"), gb = group_of(g, p, "b"), gy = group_of(g, p, "y");
    assert_int_not_equal(ga, gb);
    assert_int_equal(te_fuse_plan_group_count(p), 4); /* a, b, add, matmul */

    /* 2 threads, tiny groups: a and b in one wave, one thread each; the rest after it. */
    te_graph_exec *e2 = compile_with(g, p, 2, 0, 0);
    assert_int_equal(te_graph_exec_group_wave(e2, ga), te_graph_exec_group_wave(e2, gb));
    assert_int_equal(te_graph_exec_group_threads(e2, ga), 1);
    assert_int_equal(te_graph_exec_group_threads(e2, gb), 1);
    assert_true(te_graph_exec_group_wave(e2, gy) > te_graph_exec_group_wave(e2, ga));
    assert_int_equal(te_graph_exec_group_threads(e2, gy), 2);
    assert_int_equal(te_graph_exec_wave_count(e2), 3);
    /* Concurrent groups never share pool bytes. */
    const te_graph_memplan *mp = te_graph_exec_memplan(e2);
    int64_t oa = te_graph_memplan_offset(mp, te_graph_find(g, "a"));
    int64_t ob = te_graph_memplan_offset(mp, te_graph_find(g, "b"));
    assert_true(oa >= 0 && ob >= 0);
    assert_true(oa + 8 * 16 * 4 <= ob || ob + 8 * 16 * 4 <= oa);

    /* One thread, no concurrency asked, or groups too big to share: one group per wave. */
    te_graph_exec *e1 = compile_with(g, p, 1, 0, 0);
    assert_int_equal(te_graph_exec_wave_count(e1), 4);
    te_graph_exec *en = compile_with(g, p, 2, 0, 1);
    assert_int_equal(te_graph_exec_wave_count(en), 4);
    te_graph_exec *eb = compile_with(g, p, 2, 1e-3, 0);
    assert_int_equal(te_graph_exec_wave_count(eb), 4);
    assert_int_equal(te_graph_exec_group_threads(eb, ga), 2);

    /* The same bytes whichever schedule ran, and the reference's values. */
    float *y2 = run_and_check(g, e2, 11, 1e-5);
    float *y1 = run_and_check(g, e1, 11, 1e-5);
    float *yn = run_and_check(g, en, 11, 1e-5);
    assert_memory_equal(y1, y2, 8 * 16 * sizeof(float));
    assert_memory_equal(y1, yn, 8 * 16 * sizeof(float));
    for (int rep = 0; rep < 20; rep++) { /* the workers are reused from run to run */
        float *again = run_and_check(g, e2, 11, 1e-5);
        assert_memory_equal(y1, again, 8 * 16 * sizeof(float));
        free(again);
    }
    free(y1), free(y2), free(yn);
    te_graph_exec_free(e1);
    te_graph_exec_free(e2);
    te_graph_exec_free(en);
    te_graph_exec_free(eb);
    te_fuse_plan_free(p);
    te_graph_free(g);
}

/* Two reductions to one value each, large for the grain given: their kernels' parallel loops
 * have one iteration (rows too short for the sketch rule that splits a reduction among the
 * threads), so each can use one thread, and at 2 threads they run side by side however many
 * FLOPs they have; a wide group runs alone. */
static void test_narrow_kernels_share_a_wave_whatever_their_size(void **state)
{
    (void)state;
    te_fuse_plan *p;
    te_graph *g = parse_fused("input x f32[1,1024]\n"
                              "input z f32[1,1024]\n"
                              "sx = sum(x)\n"
                              "sz = sum(z)\n"
                              "input r f32[64,256]\n"
                              "sr = sum(r)\n"
                              "output sx, sz, sr\n",
                              "narrow.graph", &p);
    assert_int_equal(te_fuse_plan_group_count(p), 3);
    int gx = group_of(g, p, "sx"), gz = group_of(g, p, "sz"), gr = group_of(g, p, "sr");
    /* Every group is large (a grain of 1e-3 FLOP per thread). */
    te_graph_exec *e = compile_with(g, p, 2, 1e-3, 0);
    assert_true(te_graph_exec_group_width(e, gx) == 1);
    assert_true(te_graph_exec_group_width(e, gz) == 1);
    assert_true(te_graph_exec_group_width(e, gr) >= 2);
    assert_int_equal(te_graph_exec_group_wave(e, gx), te_graph_exec_group_wave(e, gz));
    assert_int_equal(te_graph_exec_group_threads(e, gx), 1);
    assert_int_equal(te_graph_exec_group_threads(e, gz), 1);
    assert_int_not_equal(te_graph_exec_group_wave(e, gr), te_graph_exec_group_wave(e, gx));
    assert_int_equal(te_graph_exec_group_threads(e, gr), 2);
    assert_int_equal(te_graph_exec_wave_count(e), 2);
    /* Without concurrency each runs alone, a narrow one still on the one thread it can use. */
    te_graph_exec *en = compile_with(g, p, 2, 1e-3, 1);
    assert_int_equal(te_graph_exec_wave_count(en), 3);
    assert_int_equal(te_graph_exec_group_threads(en, gx), 1);
    free(run_and_check(g, e, 5, 1e-5));
    free(run_and_check(g, en, 5, 1e-5));
    te_graph_exec_free(e);
    te_graph_exec_free(en);
    te_fuse_plan_free(p);
    te_graph_free(g);
}

static void test_encoder_results_identical_for_1_and_2_threads(void **state)
{
    (void)state;
    te_graph *g = te_graph_create();
    if (te_graph_parse(g,
                       "input x f32[8,32]\n"
                       "const ln_g f32[32] random seed=1 lo=0.5 hi=1.5\n"
                       "const ln_b f32[32] random seed=2\n"
                       "const w1 f32[32,64] random seed=3 lo=-0.2 hi=0.2\n"
                       "const b1 f32[64] random seed=4\n"
                       "const w2 f32[64,32] random seed=5 lo=-0.2 hi=0.2\n"
                       "h = layer_norm(x, ln_g, ln_b)\n"
                       "f1 = matmul(h, w1)\nf1b = add(f1, b1)\ng = gelu(f1b)\n"
                       "s = softmax(g)\n"
                       "f2 = matmul(s, w2)\ny = add(f2, x)\n"
                       "output y\n",
                       "ffn.graph"))
        fail_msg("%s", te_graph_errmsg(g));
    te_fuse_target t = target();
    te_fuse_plan *p = te_graph_fuse(g, g_rules, &t);
    te_graph_exec *e1 = compile_with(g, p, 1, 0, 0);
    te_graph_exec *e2 = compile_with(g, p, 2, 0, 0);
    float *y1 = run_and_check(g, e1, 5, 1e-5);
    float *y2 = run_and_check(g, e2, 5, 1e-5);
    assert_memory_equal(y1, y2, 8 * 32 * sizeof(float));
    free(y1), free(y2);
    te_graph_exec_free(e1);
    te_graph_exec_free(e2);
    te_fuse_plan_free(p);
    te_graph_free(g);
}

static void test_compile_ex_refuses_negative_threads(void **state)
{
    (void)state;
    te_graph *g = te_graph_create();
    int x = te_graph_input(g, "x", TE_F32, 1, (int64_t[]){4});
    te_graph_output(g, te_graph_node(g, "relu", NULL, 1, &x, "y"));
    te_fuse_plan *p = te_graph_fuse(g, NULL, NULL);
    te_graph_compile_opts o = {.threads = -1};
    te_graph_exec *e = NULL;
    assert_int_equal(te_graph_compile_ex(g, p, &o, &e), TE_ERR_ARG);
    assert_null(e);
    assert_non_null(strstr(te_graph_errmsg(g), "threads"));
    te_fuse_plan_free(p);
    te_graph_free(g);
}

static int setup(void **state)
{
    (void)state;
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/cpu.rules", TE_RULES_DIR);
    g_rules = te_fuse_rules_load(path, err, sizeof err);
    return g_rules ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    te_fuse_rules_free(g_rules);
    return 0;
}

int main(void)
{
    tt_rng_seed(&g_rng, tt_seed(15));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_register_refuses_bad_operators_with_a_message),
        cmocka_unit_test(test_user_node_checks_inputs_and_attributes),
        cmocka_unit_test(test_user_node_from_text_fuses_runs_and_matches_reference),
        cmocka_unit_test(test_user_node_attribute_reaches_the_expression),
        cmocka_unit_test(test_user_node_group_is_tuned_and_runs_from_the_database),
        cmocka_unit_test(test_user_node_prints_and_parses_back),
        cmocka_unit_test(test_memplan_steps_refuse_decreasing_steps),
        cmocka_unit_test(test_independent_small_groups_share_a_wave_and_the_threads),
        cmocka_unit_test(test_narrow_kernels_share_a_wave_whatever_their_size),
        cmocka_unit_test(test_encoder_results_identical_for_1_and_2_threads),
        cmocka_unit_test(test_compile_ex_refuses_negative_threads),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

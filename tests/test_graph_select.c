/* In-model selection (graph/select.c): every workload's schedules timed inside whole runs of
 * the graph, recorded under the in-model key, and preferred by te_graph_compile_db; ranked
 * picks (te_graph_compile_opts.pick) and the refusals. Times come from the machine, so the
 * tests check what was recorded and chosen, never which schedule is faster. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/graph.h"
#include "tessera/target.h"
#include "tessera/tuner.h"
#include "tessera/tuning_db.h"
#include "testutil.h"

static te_fuse_rules *g_rules;

static te_fuse_target fuse_target(void) { return tt_fuse_target(1 << 20); }

/* Two layers of the same shapes (one workload met twice) and a last matmul of its own. */
static const char *two_layers = "input x f32[8,16]\n"
                                "const w1 f32[16,16] random seed=1 lo=-0.3 hi=0.3\n"
                                "const w2 f32[16,16] random seed=2 lo=-0.3 hi=0.3\n"
                                "const w3 f32[16,24] random seed=3 lo=-0.3 hi=0.3\n"
                                "h1 = matmul(x, w1)\n"
                                "a1 = relu(h1)\n"
                                "h2 = matmul(a1, w2)\n"
                                "a2 = relu(h2)\n"
                                "y = matmul(a2, w3)\n"
                                "output y\n";

static double fake_time(const char *trace, void *user)
{
    (void)user;
    return 1e-3 + 1e-6 * (double)(strlen(trace) % 97);
}

typedef struct fixture {
    char dir[512];
    te_db *db;
    te_graph *g;
    te_fuse_plan *p;
    te_target tgt;
} fixture;

/* The graph fused, its distinct groups tuned for 12 fake-timed trials each into a new file. */
static void fixture_make(fixture *f, int tune)
{
    memset(f, 0, sizeof *f);
    assert_int_equal(tt_tmpdir_make(f->dir, sizeof f->dir, "graph_select"), 0);
    assert_int_equal(te_db_open(tt_path_in(f->dir, "t.db"), NULL, &f->db), TE_OK);
    f->g = te_graph_create();
    if (te_graph_parse(f->g, two_layers, "two_layers.graph"))
        fail_msg("%s", te_graph_errmsg(f->g));
    te_fuse_target ft = fuse_target();
    f->p = te_graph_fuse(f->g, g_rules, &ft);
    assert_non_null(f->p);
    assert_int_equal(te_fuse_plan_group_count(f->p), 3);
    f->tgt = te_target_host();
    f->tgt.num_cores = 2;
    if (!tune)
        return;
    te_tune_options o = te_tune_options_default();
    o.max_trials = 24;
    o.target = &f->tgt;
    o.fake_runner = fake_time;
    o.quiet = 1;
    te_tuner *t = te_tuner_create(f->db, &o);
    te_ctx *ctx[3] = {0};
    for (int gi = 0; gi < 3; gi++) {
        te_graph_group_expr ge;
        ctx[gi] = te_ctx_create();
        assert_int_equal(te_graph_group_expr_build(f->g, f->p, gi, ctx[gi], &ge), TE_OK);
        if (gi == 1)
            continue; /* the same workload as group 0 */
        if (te_graph_group_expr_add_task(t, &ge, 1))
            fail_msg("%s", te_tuner_errmsg(t));
    }
    if (te_tuner_run(t))
        fail_msg("%s", te_tuner_errmsg(t));
    te_tuner_free(t);
    for (int gi = 0; gi < 3; gi++)
        te_ctx_free(ctx[gi]);
}

static void fixture_free(fixture *f)
{
    te_fuse_plan_free(f->p);
    te_graph_free(f->g);
    te_db_close(f->db);
    tt_tmpdir_remove(f->dir);
}

static te_graph_exec *compile_pick(fixture *f, int pick)
{
    te_graph_compile_opts co = {.target = &f->tgt, .db = f->db, .threads = 2, .pick = pick};
    te_graph_exec *e = NULL;
    if (te_graph_compile_ex(f->g, f->p, &co, &e))
        fail_msg("%s", te_graph_errmsg(f->g));
    return e;
}

/* Runs e on seeded inputs and compares its output with the float64 reference. */
static void check_run(te_graph *g, te_graph_exec *e)
{
    float x[8 * 16], y[8 * 24];
    tt_rng r;
    tt_rng_seed(&r, tt_seed(3));
    tt_fill_f32(&r, x, 8 * 16);
    tt_poison_f32(y, 8 * 24);
    const void *in[] = {x};
    if (te_graph_run(e, in, (void *[]){y}))
        fail_msg("%s", te_graph_errmsg(g));
    int v = te_graph_output_value(g, 0);
    double *want = malloc(sizeof(double) * 8 * 24);
    assert_non_null(want);
    assert_int_equal(te_graph_eval_reference(g, in, 1, &v, &want), TE_OK);
    double err = tt_max_rel_err_f32(y, want, 8 * 24);
    if (!(err <= 1e-5))
        fail_msg("relative error %g", err);
    free(want);
}

static void test_pick_ranks_records_and_the_default(void **state)
{
    (void)state;
    fixture f;
    fixture_make(&f, 1);
    te_graph_exec *d = compile_pick(&f, TE_GRAPH_PICK_DEFAULT);
    te_graph_exec *b = compile_pick(&f, 1), *b0 = compile_pick(&f, TE_GRAPH_PICK_BEST);
    te_graph_exec *second = compile_pick(&f, 2);
    for (int gi = 0; gi < 3; gi++) {
        assert_int_equal(te_graph_exec_group_from_db(d, gi, NULL), 0);
        {
            const char *nt = NULL;
            if (te_graph_exec_group_from_db(b, gi, &nt) != 1)
                fail_msg("group %d: %s", gi, nt);
        }
        assert_int_equal(te_graph_exec_group_from_db(second, gi, NULL), 1);
        /* Without in-model records, pick 1 and the best are the same record. */
        assert_string_equal(te_graph_exec_group_trace(b, gi), te_graph_exec_group_trace(b0, gi));
        /* The second record is another schedule (top-k keeps distinct traces). */
        assert_true(
            strcmp(te_graph_exec_group_trace(b, gi), te_graph_exec_group_trace(second, gi)) != 0);
        /* Groups 0 and 1 are one workload: one key, one in-model key with the run's hash. */
        const char *ck = te_graph_exec_group_context_key(b, gi);
        assert_non_null(strstr(ck, te_graph_exec_group_key(b, gi)));
        assert_non_null(strstr(ck, ";model="));
    }
    assert_string_equal(te_graph_exec_group_key(b, 0), te_graph_exec_group_key(b, 1));
    assert_string_equal(te_graph_exec_group_context_key(b, 0),
                        te_graph_exec_group_context_key(d, 0));
    check_run(f.g, d);
    check_run(f.g, second);
    /* A rank past the records: the default schedule, said so. */
    te_graph_exec *far = compile_pick(&f, 50);
    const char *note = NULL;
    assert_int_equal(te_graph_exec_group_from_db(far, 0, &note), 0);
    assert_non_null(strstr(note, "fewer than 50 records"));
    te_graph_exec *list[] = {d, b, b0, second, far};
    for (size_t i = 0; i < sizeof list / sizeof list[0]; i++)
        te_graph_exec_free(list[i]);
    fixture_free(&f);
}

static void test_selection_records_in_model_times_that_compile_prefers(void **state)
{
    (void)state;
    fixture f;
    fixture_make(&f, 1);
    te_graph_select_opts so = {.target = &f.tgt, .threads = 2, .candidates = 2, .reps = 3};
    te_graph_select_result res;
    if (te_graph_select_in_context(f.g, f.p, f.db, &so, &res))
        fail_msg("%s", te_graph_errmsg(f.g));
    /* Two workloads, each with the default and two records: three schedules at most each
     * (fewer when a record is the default's schedule). */
    assert_int_equal(res.workloads, 2);
    assert_in_range(res.recorded, 4, 6);
    assert_in_range(res.changed, 0, 2);
    assert_true(res.ms_default > 0 && res.ms_tuned > 0 && res.ms_selected > 0);
    assert_in_range(res.whole_pick, 0, 2);
    /* The in-model keys hold the per-kernel times; the model's key the three whole runs, and
     * the compile takes every schedule from the fastest of those and says so. */
    te_graph_exec *e = compile_pick(&f, TE_GRAPH_PICK_BEST);
    te_db_target dbt;
    char storage[1024];
    assert_int_equal(te_tuner_db_target(&f.tgt, &dbt, storage, sizeof storage), TE_OK);
    te_db_trial_list *w = NULL;
    assert_int_equal(te_db_history(f.db, te_graph_exec_model_key(e), &dbt, 0, &w), TE_OK);
    assert_int_equal((int)w->n, 3);
    te_db_trial_list_free(w);
    assert_int_equal(te_db_best(f.db, te_graph_exec_model_key(e), &dbt, 0, &w), TE_OK);
    for (int gi = 0; gi < 3; gi++) {
        const char *note = NULL;
        assert_int_equal(te_graph_exec_group_from_db(e, gi, &note), 1);
        assert_non_null(strstr(note, "whole-run trial"));
        char *sec = te_graph_whole_trace_section(w->items[0].trace, te_graph_exec_group_key(e, gi));
        assert_non_null(sec);
        assert_string_equal(sec, te_graph_exec_group_trace(e, gi));
        free(sec);
        te_db_trial_list *l = NULL;
        assert_int_equal(te_db_best(f.db, te_graph_exec_group_context_key(e, gi), &dbt, 0, &l),
                         TE_OK);
        assert_true(l->items[0].median_s > 0 && l->items[0].repeats == 3);
        te_db_trial_list_free(l);
    }
    te_db_trial_list_free(w);
    assert_null(te_graph_whole_trace_section("@workload a\nsplit x i 4\n", "b"));
    check_run(f.g, e);
    te_graph_exec_free(e);
    /* A faster whole run of the defaults (as when the choices lost to them as a whole): the
     * compile then takes the defaults' schedules, whatever the per-kernel times say. */
    te_graph_exec *d0 = compile_pick(&f, TE_GRAPH_PICK_DEFAULT);
    char *text = NULL;
    {
        size_t cap = 1;
        for (int gi = 0; gi < 3; gi++)
            cap += strlen(te_graph_exec_group_key(d0, gi)) +
                   strlen(te_graph_exec_group_trace(d0, gi)) + 16;
        text = calloc(1, cap);
        assert_non_null(text);
        for (int gi = 0; gi < 3; gi++) {
            bool dup = false;
            for (int q = 0; q < gi; q++)
                dup |= !strcmp(te_graph_exec_group_key(d0, q), te_graph_exec_group_key(d0, gi));
            if (!dup)
                snprintf(text + strlen(text), cap - strlen(text), "@workload %s\n%s\n",
                         te_graph_exec_group_key(d0, gi), te_graph_exec_group_trace(d0, gi));
        }
    }
    te_db_trial fast = {.workload = {.key = te_graph_exec_model_key(d0)},
                        .target = dbt,
                        .trace = text,
                        .status = TE_TRIAL_OK,
                        .median_s = 1e-9,
                        .repeats = 1};
    assert_int_equal(te_db_record_trials(f.db, &fast, 1), TE_OK);
    free(text);
    e = compile_pick(&f, TE_GRAPH_PICK_BEST);
    for (int gi = 0; gi < 3; gi++) {
        const char *tr = te_graph_exec_group_trace(d0, gi);
        size_t n = strlen(tr);
        /* the section keeps the trace's lines; a trace without a final newline gains one */
        assert_int_equal(strncmp(te_graph_exec_group_trace(e, gi), tr, n), 0);
    }
    check_run(f.g, e);
    te_graph_exec_free(e);
    te_graph_exec_free(d0);
    /* A second selection adds trials and loses none. */
    te_db_trial_list *h = NULL;
    te_graph_exec *d = compile_pick(&f, TE_GRAPH_PICK_DEFAULT);
    assert_int_equal(te_db_history(f.db, te_graph_exec_group_context_key(d, 2), &dbt, 0, &h),
                     TE_OK);
    size_t before = h->n;
    te_db_trial_list_free(h);
    if (te_graph_select_in_context(f.g, f.p, f.db, &so, &res))
        fail_msg("%s", te_graph_errmsg(f.g));
    assert_int_equal(te_db_history(f.db, te_graph_exec_group_context_key(d, 2), &dbt, 0, &h),
                     TE_OK);
    assert_true(h->n > before);
    te_db_trial_list_free(h);
    te_graph_exec_free(d);
    fixture_free(&f);
}

static void test_selection_without_records_records_nothing(void **state)
{
    (void)state;
    fixture f;
    fixture_make(&f, 0);
    te_graph_select_result res;
    memset(&res, 0x55, sizeof res);
    assert_int_equal(te_graph_select_in_context(f.g, f.p, f.db, NULL, &res), TE_OK);
    assert_int_equal(res.workloads, 0);
    assert_int_equal(res.recorded, 0);
    fixture_free(&f);
}

static void test_selection_and_pick_refuse_bad_arguments(void **state)
{
    (void)state;
    fixture f;
    fixture_make(&f, 0);
    te_graph_select_result res;
    assert_int_equal(te_graph_select_in_context(f.g, f.p, NULL, NULL, &res), TE_ERR_ARG);
    assert_non_null(strstr(te_graph_errmsg(f.g), "no database"));
    te_graph_clear_error(f.g); /* a graph keeps its first error */
    te_graph_select_opts so = {.candidates = 9};
    assert_int_equal(te_graph_select_in_context(f.g, f.p, f.db, &so, &res), TE_ERR_ARG);
    assert_non_null(strstr(te_graph_errmsg(f.g), "candidates 9"));
    te_graph_clear_error(f.g);
    so = (te_graph_select_opts){.reps = -1};
    assert_int_equal(te_graph_select_in_context(f.g, f.p, f.db, &so, &res), TE_ERR_ARG);
    te_graph_clear_error(f.g);
    te_graph_compile_opts co = {.pick = -2};
    te_graph_exec *e = NULL;
    assert_int_equal(te_graph_compile_ex(f.g, f.p, &co, &e), TE_ERR_ARG);
    assert_null(e);
    assert_non_null(strstr(te_graph_errmsg(f.g), "pick -2"));
    fixture_free(&f);
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
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pick_ranks_records_and_the_default),
        cmocka_unit_test(test_selection_records_in_model_times_that_compile_prefers),
        cmocka_unit_test(test_selection_without_records_records_nothing),
        cmocka_unit_test(test_selection_and_pick_refuse_bad_arguments),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

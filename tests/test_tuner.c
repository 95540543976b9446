/* Tests for the tuning job (autotune/tuner.c, search.c) and `tessera tune`:
 *  - search on a small template space finds the known optimum of a synthetic objective (grid
 *    exactly, evolutionary within a fraction of the space);
 *  - the same seed gives the same trial sequence (trace hashes of two runs into two
 *    databases), another seed another one;
 *  - faulty candidates injected through TESSERA_TUNE_INJECT (segfault, hang, wrong values,
 *    compile error) are recorded with their statuses while the job completes;
 *  - a job killed with SIGKILL and rerun resumes and never measures a trace twice;
 *  - task lists, shards, user-defined expressions, the database's best schedule;
 *  - bad command lines exit with status 2. */
#define _GNU_SOURCE

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tessera/ops.h"
#include "tessera/tuner.h"
#include "testutil.h"

#ifndef TESSERA_CLI
#error "TESSERA_CLI (path of the tessera binary) must be defined by tests/tuner.cmake"
#endif

TT_TMPDIR_FIXTURE("tuner")

static te_db *open_db(const char *name)
{
    te_db *db = NULL;
    int rc = te_db_open(path(name), NULL, &db);
    if (rc != TE_OK)
        fprintf(stderr, "open %s: %s\n", name, te_db_errmsg(db));
    assert_int_equal(rc, TE_OK);
    return db;
}

/* ---- A synthetic objective: every number in the trace wants to be 4 (or 8 for parallel
 * extents), so the optimum is known by enumerating the space. ------------------------------ */

static double fake_time(const char *trace, void *user)
{
    int *calls = user;
    if (calls)
        (*calls)++;
    double t = 1.0;
    for (const char *p = trace; *p;) {
        if (*p >= '0' && *p <= '9' && (p == trace || p[-1] == ' ')) {
            double v = strtod(p, NULL);
            double d = log2(v > 0 ? v : 1) - 2;
            t += 0.05 * d * d;
            while (*p >= '0' && *p <= '9')
                p++;
        } else {
            p++;
        }
    }
    if (strstr(trace, "parallel"))
        t *= 0.5;
    if (strstr(trace, "vectorize"))
        t *= 0.7;
    return t * 1e-3;
}

/* The space the tuner will build for an operator, enumerated: its size and best objective. */
static int64_t enumerate(const char *op, const char *params, double *best)
{
    te_ctx *ctx = te_ctx_create();
    te_tensor *in[TE_OP_MAX_IO], *out[TE_OP_MAX_IO];
    int n_in, n_out;
    assert_int_equal(te_op_build(ctx, op, params, in, &n_in, out, &n_out), TE_OK);
    te_target tgt = te_target_host();
    te_space *sp = te_space_create(ctx, op, n_in, in, n_out, out, TE_SPACE_TEMPLATE, &tgt);
    assert_non_null(sp);
    int64_t n = te_space_size(sp);
    *best = INFINITY;
    for (int64_t i = 0; i < n && n < 5000; i++) {
        const char *t = te_space_get(sp, i);
        if (!t) {
            te_ctx_clear_error(ctx);
            continue;
        }
        double v = fake_time(t, NULL);
        if (v < *best)
            *best = v;
    }
    te_ctx_free(ctx);
    return n;
}

static double db_best_time(te_db *db, const char *key)
{
    te_db_trial_list *l = NULL;
    te_target tgt = te_target_host();
    te_db_target dbt;
    char storage[1024];
    assert_int_equal(te_tuner_db_target(&tgt, &dbt, storage, sizeof storage), TE_OK);
    double r = INFINITY;
    if (te_db_best(db, key, &dbt, 0, &l) == TE_OK && l->n)
        r = l->items[0].median_s;
    te_db_trial_list_free(l);
    return r;
}

static te_tuner *fake_tuner(te_db *db, te_tune_strategy s, int64_t trials, uint64_t seed,
                            int *calls)
{
    te_tune_options o = te_tune_options_default();
    o.strategy = s;
    o.space = TE_SPACE_TEMPLATE;
    o.max_trials = trials;
    o.seed = seed;
    o.batch_size = 8;
    o.quiet = 1;
    o.fake_runner = fake_time;
    o.fake_user = calls;
    te_tuner *t = te_tuner_create(db, &o);
    assert_non_null(t);
    return t;
}

static void test_grid_finds_known_optimum(void **state)
{
    (void)state;
    const char *params = "m=16,n=16,k=16";
    double best;
    int64_t size = enumerate("matmul", params, &best);
    printf("  template space of matmul %s: %lld configurations\n", params, (long long)size);
    assert_true(size > 4 && size < 5000);
    te_db *db = open_db("grid.db");
    int calls = 0;
    te_tuner *t = fake_tuner(db, TE_TUNE_GRID, size + 10, 1, &calls);
    assert_int_equal(te_tuner_add_op(t, "matmul", params, 1), TE_OK);
    assert_int_equal(te_tuner_run(t), TE_OK);
    te_tune_task_info ti;
    assert_int_equal(te_tuner_task_info(t, 0, &ti), TE_OK);
    assert_string_equal(ti.stop_reason, "space exhausted");
    assert_true(fabs(db_best_time(db, ti.workload_key) - best) < 1e-12);
    te_tuner_free(t);
    te_db_close(db);
    /* Early stop: a task ends after N trials without a 1% gain, before its budget. */
    db = open_db("early.db");
    te_tune_options o = te_tune_options_default();
    o.strategy = TE_TUNE_RANDOM;
    o.max_trials = size;
    o.early_stop = 10;
    o.batch_size = 4;
    o.quiet = 1;
    o.fake_runner = fake_time;
    t = te_tuner_create(db, &o);
    assert_int_equal(te_tuner_add_op(t, "matmul", params, 1), TE_OK);
    assert_int_equal(te_tuner_run(t), TE_OK);
    te_tuner_task_info(t, 0, &ti);
    printf("  early stop after %lld trials\n", (long long)ti.trials);
    assert_string_equal(ti.stop_reason, "early stop");
    assert_true(ti.trials < size);
    te_tuner_free(t);
    te_db_close(db);
}

static void test_evolutionary_finds_known_optimum(void **state)
{
    (void)state;
    const char *params = "m=64,n=64,k=64";
    double best;
    int64_t size = enumerate("matmul", params, &best);
    printf("  template space of matmul %s: %lld configurations\n", params, (long long)size);
    int64_t budget = size / 6 > 48 ? size / 6 : 48;
    te_db *db = open_db("evo.db");
    te_tuner *t = fake_tuner(db, TE_TUNE_EVOLUTIONARY, budget, 3, NULL);
    assert_int_equal(te_tuner_add_op(t, "matmul", params, 1), TE_OK);
    assert_int_equal(te_tuner_run(t), TE_OK);
    te_tune_task_info ti;
    te_tuner_task_info(t, 0, &ti);
    double got = db_best_time(db, ti.workload_key);
    printf("  evolutionary, %lld trials: best %.6g, optimum %.6g\n", (long long)ti.trials, got,
           best);
    if (size < 5000)
        assert_true(got <= best * 1.02);
    te_tuner_free(t);
    te_db_close(db);
    /* Random search with the same budget, for comparison (printed, not asserted). */
    db = open_db("rnd.db");
    t = fake_tuner(db, TE_TUNE_RANDOM, budget, 3, NULL);
    te_tuner_add_op(t, "matmul", params, 1);
    te_tuner_run(t);
    te_tuner_task_info(t, 0, &ti);
    printf("  random, %lld trials: best %.6g\n", (long long)ti.trials,
           db_best_time(db, ti.workload_key));
    te_tuner_free(t);
    te_db_close(db);
}

/* The trace hashes of every trial of a workload, oldest first, joined. */
static char *sequence(te_db *db, const char *key)
{
    te_db_trial_list *l = NULL;
    assert_int_equal(te_db_history(db, key, NULL, 0, &l), TE_OK);
    char *s = calloc(l->n + 1, 18);
    for (size_t i = 0; i < l->n; i++) {
        strcat(s, l->items[i].trace_hash);
        strcat(s, " ");
    }
    te_db_trial_list_free(l);
    return s;
}

static void test_seed_reproduces_sequence(void **state)
{
    (void)state;
    const te_tune_strategy strategies[] = {TE_TUNE_RANDOM, TE_TUNE_EVOLUTIONARY};
    for (int s = 0; s < 2; s++) {
        char *seq[3];
        const uint64_t seeds[3] = {7, 7, 8};
        char key[256] = "";
        for (int r = 0; r < 3; r++) {
            char name[64];
            snprintf(name, sizeof name, "seed-%d-%d.db", s, r);
            te_db *db = open_db(name);
            te_tuner *t = fake_tuner(db, strategies[s], 48, seeds[r], NULL);
            assert_int_equal(te_tuner_add_op(t, "matmul", "m=64,n=48,k=32", 1), TE_OK);
            assert_int_equal(te_tuner_run(t), TE_OK);
            te_tune_task_info ti;
            te_tuner_task_info(t, 0, &ti);
            snprintf(key, sizeof key, "%s", ti.workload_key);
            seq[r] = sequence(db, key);
            te_tuner_free(t);
            te_db_close(db);
        }
        assert_true(strlen(seq[0]) == 48 * 17);
        assert_string_equal(seq[0], seq[1]);
        assert_string_not_equal(seq[0], seq[2]);
        for (int r = 0; r < 3; r++)
            free(seq[r]);
    }
}

/* ---- The command line ----------------------------------------------------------------------- */

static int cli(const char *env, const char *fmt, ...)
{
    char args[2048], cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "cd '%s' && %s '%s' %s >'%s/out.txt' 2>'%s/err.txt'", dir,
             env ? env : "", TESSERA_CLI, args, dir, dir);
    int ws = system(cmd);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

static void count_statuses(te_db *db, const char *key, int64_t *n)
{
    memset(n, 0, sizeof(int64_t) * TE_TRIAL_STATUS_COUNT);
    te_db_trial_list *l = NULL;
    assert_int_equal(te_db_history(db, key, NULL, 0, &l), TE_OK);
    for (size_t i = 0; i < l->n; i++)
        n[l->items[i].status]++;
    te_db_trial_list_free(l);
}

static void test_cli_faulty_candidates(void **state)
{
    (void)state;
    int rc = cli("TESSERA_TUNE_INJECT=segv,hang,wrong,compile",
                 "tune matmul --shape m=16,n=16,k=16 --trials 12 --batch 6 --timeout 1 "
                 "--strategy random --db faults.db");
    assert_int_equal(rc, 0);
    te_db *db = open_db("faults.db");
    int64_t n[TE_TRIAL_STATUS_COUNT];
    count_statuses(db, "matmul;k=16,m=16,n=16;f32", n);
    for (int s = 0; s < TE_TRIAL_STATUS_COUNT; s++)
        if (n[s])
            printf("  %s: %lld\n", te_trial_status_str((te_trial_status)s), (long long)n[s]);
    assert_int_equal(n[TE_TRIAL_RUNTIME_ERROR], 1);
    assert_int_equal(n[TE_TRIAL_TIMEOUT], 1);
    assert_int_equal(n[TE_TRIAL_WRONG_ANSWER], 1);
    assert_int_equal(n[TE_TRIAL_COMPILE_ERROR], 1);
    assert_int_equal(n[TE_TRIAL_OK], 8);
    te_db_job_list *jl = NULL;
    assert_int_equal(te_db_jobs(db, 0, &jl), TE_OK);
    assert_int_equal(jl->n, 1);
    assert_int_equal(jl->items[0].status, TE_JOB_FINISHED);
    assert_int_equal(jl->items[0].trials_done, 12);
    te_db_job_list_free(jl);
    te_db_close(db);
}

/* The same through the command line, measuring for real: random search with one seed gives the
 * same trial sequence in two fresh databases. */
static void test_cli_seed(void **state)
{
    (void)state;
    char *seq[2];
    for (int r = 0; r < 2; r++) {
        assert_int_equal(cli(NULL,
                             "tune matmul --shape m=32,n=24,k=16 --trials 24 --batch 8 "
                             "--strategy random --seed 9 --db seed%d.db --json",
                             r),
                         0);
        char name[32];
        snprintf(name, sizeof name, "seed%d.db", r);
        te_db *db = open_db(name);
        seq[r] = sequence(db, "matmul;k=16,m=32,n=24;f32");
        te_db_close(db);
    }
    assert_int_equal(strlen(seq[0]), 24 * 17);
    assert_string_equal(seq[0], seq[1]);
    free(seq[0]);
    free(seq[1]);
}

static void test_cli_kill_and_resume(void **state)
{
    (void)state;
    const char *args = "tune matmul --shape m=48,n=32,k=16 --trials 64 --batch 8 "
                       "--strategy random --seed 3 --db resume.db";
    /* A compile cache of its own, so the job really compiles and is still running when killed. */
    char env[600], cmd[1024];
    snprintf(env, sizeof env, "TESSERA_CACHE_DIR='%s'", path("kcache-resume"));
    snprintf(cmd, sizeof cmd, "exec env %s '%s' %s >/dev/null 2>&1", env, TESSERA_CLI, args);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (chdir(dir) != 0)
            _exit(127);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    /* Wait until some batches are recorded, then kill it mid-job. */
    const char *key = "matmul;k=16,m=48,n=32;f32";
    int64_t seen = 0;
    for (double t0 = tt_now_s(); tt_now_s() - t0 < 60;) {
        usleep(50000);
        struct stat st;
        if (stat(path("resume.db"), &st) != 0)
            continue;
        te_db *db = NULL;
        te_db_options ro = {TE_DB_READONLY, NULL, 0};
        if (te_db_open(path("resume.db"), &ro, &db) == TE_OK) {
            te_db_trial_list *l = NULL;
            if (te_db_history(db, key, NULL, 0, &l) == TE_OK)
                seen = (int64_t)l->n;
            te_db_trial_list_free(l);
        }
        te_db_close(db);
        if (seen >= 16)
            break;
    }
    kill(pid, SIGKILL);
    int ws;
    waitpid(pid, &ws, 0);
    printf("  killed after %lld trials were recorded\n", (long long)seen);
    assert_true(seen >= 16);
    te_db *db = open_db("resume.db");
    te_db_job_list *jl = NULL;
    assert_int_equal(te_db_jobs(db, 0, &jl), TE_OK);
    assert_int_equal(jl->n, 1);
    assert_int_equal(jl->items[0].status, TE_JOB_INTERRUPTED);
    int64_t before = jl->items[0].trials_done;
    te_db_job_list_free(jl);
    te_db_close(db);
    assert_true(before < 64);
    /* Rerun: the same job continues to its budget, nothing is measured twice. */
    assert_int_equal(cli(env, "%s", args), 0);
    db = open_db("resume.db");
    assert_int_equal(te_db_jobs(db, 0, &jl), TE_OK);
    assert_int_equal(jl->n, 1);
    assert_int_equal(jl->items[0].status, TE_JOB_FINISHED);
    assert_int_equal(jl->items[0].trials_done, 64);
    te_db_job_list_free(jl);
    te_db_trial_list *l = NULL;
    assert_int_equal(te_db_history(db, key, NULL, 0, &l), TE_OK);
    assert_int_equal(l->n, 64);
    for (size_t i = 0; i < l->n; i++)
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(l->items[i].trace_hash, l->items[j].trace_hash);
    te_db_trial_list_free(l);
    te_db_close(db);
}

static void test_cli_bad_arguments(void **state)
{
    (void)state;
    const char *bad[] = {
        "tune",
        "tune matmul",
        "tune matmul --shape m=8",
        "tune nosuchop --shape m=8",
        "tune matmul --shape m=8,n=8,k=8 --trials 0",
        "tune matmul --shape m=8,n=8,k=8 --trials ten",
        "tune matmul --shape m=8,n=8,k=8 --time 3y",
        "tune matmul --shape m=8,n=8,k=8 --strategy best",
        "tune matmul --shape m=8,n=8,k=8 --space magic",
        "tune matmul --shape m=8,n=8,k=8 --shard 2/2",
        "tune matmul --shape m=8,n=8,k=8 --shard 0/2",
        "tune matmul --shape m=8,n=8,k=8 --target tpu",
        "tune matmul --shape m=8,n=8,k=8 --frobnicate",
        "tune matmul --shape m=8,n=8,k=8 --seed",
        "tune matmul softmax --shape m=8,n=8",
        "ops --bogus",
        "ops nosuchop",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = cli(NULL, "%s --db bad.db", bad[i]);
        if (rc != 2)
            printf("  '%s' exited %d\n", bad[i], rc);
        assert_int_equal(rc, 2);
    }
    struct stat st;
    assert_true(stat(path("bad.db"), &st) != 0); /* no usage error created a database */
    assert_int_equal(cli(NULL, "tune matmul --shape m=8,n=8,k=8 --target cuda --db bad.db"), 1);
    assert_int_equal(cli(NULL, "tune --help"), 0);
    assert_int_equal(cli(NULL, "ops"), 0);
    assert_int_equal(cli(NULL, "ops --json matmul"), 0);
}

/* ---- Task lists, shards, expressions, best schedules ----------------------------------------- */

static void test_task_list_and_shards(void **state)
{
    (void)state;
    FILE *f = fopen(path("tasks.json"), "w");
    assert_non_null(f);
    fprintf(f, "[{\"op\": \"matmul\", \"shape\": \"m=32,n=32,k=32\"},\n"
               " {\"op\": \"softmax\", \"shape\": \"m=16,n=64\", \"weight\": 2},\n"
               " {\"op\": \"relu\", \"params\": \"m=8,n=64\"}]\n");
    fclose(f);
    te_db *db = open_db("tasks.db");
    te_tuner *t = fake_tuner(db, TE_TUNE_RANDOM, 40, 1, NULL);
    int n = 0;
    assert_int_equal(te_tuner_add_tasks_file(t, path("tasks.json"), 1, 2, &n), TE_OK);
    assert_int_equal(n, 1);
    assert_int_equal(te_tuner_add_tasks_file(t, path("tasks.json"), 0, 2, &n), TE_OK);
    assert_int_equal(n, 2);
    assert_int_equal(te_tuner_ntasks(t), 3);
    te_tune_options o = te_tune_options_default();
    (void)o;
    assert_int_equal(te_tuner_run(t), TE_OK);
    int64_t total = 0;
    for (int i = 0; i < 3; i++) {
        te_tune_task_info ti;
        te_tuner_task_info(t, i, &ti);
        printf("  %s: %lld trials\n", ti.workload_key, (long long)ti.trials);
        assert_true(ti.trials > 0);
        total += ti.trials;
    }
    assert_int_equal(total, 40);
    te_tuner_free(t);
    /* Malformed lists are refused with the entry named. */
    f = fopen(path("bad.json"), "w");
    fprintf(f, "[{\"op\": \"matmul\", \"shape\": \"m=1,n=1,k=1\"}, {\"shape\": \"m=2\"}]");
    fclose(f);
    t = fake_tuner(db, TE_TUNE_RANDOM, 1, 1, NULL);
    assert_int_equal(te_tuner_add_tasks_file(t, path("bad.json"), 0, 1, NULL), TE_ERR_ARG);
    assert_non_null(strstr(te_tuner_errmsg(t), "task 1"));
    assert_int_equal(te_tuner_add_tasks_file(t, path("missing.json"), 0, 1, NULL), TE_ERR_IO);
    te_tuner_free(t);
    te_db_close(db);
}

/* A task whose candidates all fail does not starve the others. */
static double fail_softmax(const char *trace, void *user)
{
    (void)user;
    return strstr(trace, "softmax") ? -1 : fake_time(trace, NULL);
}

static void test_failing_task_does_not_starve(void **state)
{
    (void)state;
    te_db *db = open_db("starve.db");
    te_tune_options o = te_tune_options_default();
    o.strategy = TE_TUNE_RANDOM;
    o.max_trials = 96;
    o.batch_size = 8;
    o.quiet = 1;
    o.fake_runner = fail_softmax;
    te_tuner *t = te_tuner_create(db, &o);
    assert_int_equal(te_tuner_add_op(t, "softmax", "m=64,n=256", 1), TE_OK);
    assert_int_equal(te_tuner_add_op(t, "matmul", "m=64,n=64,k=64", 1), TE_OK);
    assert_int_equal(te_tuner_run(t), TE_OK);
    te_tune_task_info a, b;
    te_tuner_task_info(t, 0, &a);
    te_tuner_task_info(t, 1, &b);
    printf("  failing softmax: %lld trials, matmul: %lld trials\n", (long long)a.trials,
           (long long)b.trials);
    assert_int_equal(a.n_by_status[TE_TRIAL_OK], 0);
    assert_true(b.trials >= 48);
    te_tuner_free(t);
    te_db_close(db);
}

typedef struct warnings {
    int n;
    char last[1024];
} warnings;

static void collect_warning(const char *msg, void *user)
{
    warnings *w = user;
    w->n++;
    snprintf(w->last, sizeof w->last, "%s", msg);
}

/* The library never prints: warnings reach on_warning (and nothing at all when quiet). */
static void test_warnings_go_to_the_callback_not_stderr(void **state)
{
    (void)state;
    for (int quiet = 0; quiet <= 1; quiet++) {
        te_db *db = open_db(quiet ? "warn_quiet.db" : "warn.db");
        warnings w = {0};
        te_tune_options o = te_tune_options_default();
        o.strategy = TE_TUNE_GRID;
        o.space = TE_SPACE_SKETCH; /* not enumerable: grid samples it, with a warning */
        o.max_trials = 8;
        o.batch_size = 8;
        o.quiet = quiet;
        o.fake_runner = fake_time;
        o.on_warning = collect_warning;
        o.user = &w;
        te_tuner *t = te_tuner_create(db, &o);
        assert_int_equal(te_tuner_add_op(t, "softmax", "m=64,n=256", 1), TE_OK);
        assert_int_equal(te_tuner_run(t), TE_OK);
        if (quiet) {
            assert_int_equal(w.n, 0);
        } else {
            assert_int_equal(w.n, 1);
            assert_non_null(strstr(w.last, "not enumerable; grid search samples it at random"));
            assert_null(strchr(w.last, '\n'));
        }
        te_tuner_free(t);
        te_db_close(db);
    }
}

/* A user-defined fused expression tunes with no schedule code (its gemm structure gets the
 * gemm template's space); the best record then builds the operator. */
static void test_user_expression_and_best_schedule(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    te_tensor *X = te_placeholder(ctx, "X", TE_F32, 2, (int64_t[]){32, 48});
    te_tensor *W = te_placeholder(ctx, "W", TE_F32, 2, (int64_t[]){48, 40});
    te_expr *i = te_axis(ctx, "i", 32), *j = te_axis(ctx, "j", 40);
    te_expr *k = te_reduce_axis(ctx, "k", 48);
    te_tensor *P =
        te_compute(ctx, "P", 2, (te_expr *[]){i, j},
                   te_sum(ctx, te_mul(ctx, TE_AT(ctx, X, i, k), TE_AT(ctx, W, k, j)), 1, &k));
    te_expr *i2 = te_axis(ctx, "i", 32), *j2 = te_axis(ctx, "j", 40);
    te_tensor *Y = te_compute(ctx, "Y", 2, (te_expr *[]){i2, j2},
                              te_max(ctx, TE_AT(ctx, P, i2, j2), te_f32(ctx, 0)));
    assert_non_null(Y);
    te_db *db = open_db("expr.db");
    te_tune_options o = te_tune_options_default();
    o.max_trials = 16;
    o.batch_size = 8;
    o.quiet = 1;
    o.measure.compile_timeout_s = 5; /* some sketches unroll into very slow compiles */
    te_tuner *t = te_tuner_create(db, &o);
    assert_int_equal(te_tuner_add_expr(t, "dense_relu", 2, (te_tensor *[]){X, W}, 1, &Y, 1), TE_OK);
    assert_int_equal(te_tuner_run(t), TE_OK);
    te_tune_task_info ti;
    te_tuner_task_info(t, 0, &ti);
    printf("  %s: %lld trials, %lld ok, best %.4g ms\n", ti.workload_key, (long long)ti.trials,
           (long long)ti.n_by_status[TE_TRIAL_OK], ti.best_median_s * 1e3);
    assert_string_equal(ti.space_kind, "template");
    assert_non_null(strstr(ti.workload_key, "dense_relu;X=32x48,W=48x40;f32;expr="));
    assert_true(ti.n_by_status[TE_TRIAL_OK] > 0);
    assert_non_null(ti.best_trace);
    char key[512];
    snprintf(key, sizeof key, "%s", ti.workload_key);
    te_tuner_free(t);
    /* Build from the best record. */
    te_schedule *s = NULL;
    int from_db = 0;
    te_target tgt = te_target_host();
    assert_int_equal(te_tuner_best_schedule(ctx, db, key, 1, &Y, &tgt, &s, &from_db, NULL, 0),
                     TE_OK);
    assert_int_equal(from_db, 1);
    te_module *m = NULL;
    assert_int_equal(te_build(s, 3, (te_tensor *[]){X, W, Y}, "dense_relu", &tgt, &m), TE_OK);
    te_module_free(m);
    /* No record: the default schedule, from_db 0 and the reason (nothing printed). */
    char why[256];
    assert_int_equal(te_tuner_best_schedule(ctx, db, "nothing;here;f32", 1, &Y, &tgt, &s, &from_db,
                                            why, sizeof why),
                     TE_OK);
    assert_non_null(s);
    assert_int_equal(from_db, 0);
    assert_non_null(strstr(why, "no record for this target"));
    te_db_close(db);
    te_ctx_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grid_finds_known_optimum),
        cmocka_unit_test(test_evolutionary_finds_known_optimum),
        cmocka_unit_test(test_seed_reproduces_sequence),
        cmocka_unit_test(test_cli_bad_arguments),
        cmocka_unit_test(test_cli_faulty_candidates),
        cmocka_unit_test(test_cli_seed),
        cmocka_unit_test(test_cli_kill_and_resume),
        cmocka_unit_test(test_task_list_and_shards),
        cmocka_unit_test(test_failing_task_does_not_starve),
        cmocka_unit_test(test_warnings_go_to_the_callback_not_stderr),
        cmocka_unit_test(test_user_expression_and_best_schedule),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

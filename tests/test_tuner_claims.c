/* Tests for concurrent tuning jobs on one database (autotune/tuner.c, tuning_db/claims.c):
 *  - two identical jobs (processes, fake runner) on one database and one workload split the
 *    work: no configuration is measured twice, and together they measure every one;
 *  - a claim left by a dead job is treated as stale and reclaimed;
 *  - a live claim of another job is refused, and recording the trial releases it;
 *  - environmental failures (timeouts) are recorded as transient and measured again by a later
 *    job once, deterministic ones never, and retry_failed measures every failed one again;
 *    (with the fake runner, and for real through `tessera tune`: an injected hang times out,
 *    the next job measures that configuration again and gets its time; an injected compile
 *    error is measured again only with --retry-failed);
 *  - the default compile limit scales with the machine's load. */
#define _GNU_SOURCE

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "autotune/measure_impl.h"
#include "tessera/tuner.h"

#include "testutil.h"

TT_TMPDIR_FIXTURE("claims")

/* A fake measurement slow enough that two jobs overlap on every batch. */
static double slow_fake(const char *trace, void *user)
{
    (void)user;
    usleep(3000);
    return 1e-3 * (1.0 + (double)(strlen(trace) % 17));
}

#define KEY "matmul;k=16,m=32,n=32;f32"

/* One tuning job in this process: grid search, so both jobs propose the same sequence. */
static int run_job(const char *db_name, int64_t trials)
{
    te_db *db = NULL;
    if (te_db_open(path(db_name), NULL, &db) != TE_OK) {
        te_db_close(db);
        return 1;
    }
    te_tune_options o = te_tune_options_default();
    o.strategy = TE_TUNE_GRID;
    o.space = TE_SPACE_TEMPLATE;
    o.max_trials = trials;
    o.batch_size = 4;
    o.quiet = 1;
    o.new_job = 1;
    o.fake_runner = slow_fake;
    te_tuner *t = te_tuner_create(db, &o);
    int rc =
        t && te_tuner_add_op(t, "matmul", "m=32,n=32,k=16", 1) == TE_OK && te_tuner_run(t) == TE_OK
            ? 0
            : 1;
    if (rc && t)
        fprintf(stderr, "job: %s\n", te_tuner_errmsg(t));
    te_tuner_free(t);
    te_db_close(db);
    return rc;
}

static void test_two_jobs_split_the_work(void **state)
{
    (void)state;
    /* Create the database first so both jobs only open it. */
    te_db *db = NULL;
    assert_int_equal(te_db_open(path("two.db"), NULL, &db), TE_OK);
    te_db_close(db);
    pid_t pids[2];
    for (int i = 0; i < 2; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0)
            _exit(run_job("two.db", 60));
    }
    for (int i = 0; i < 2; i++) {
        int ws = 0;
        assert_int_equal(waitpid(pids[i], &ws, 0), pids[i]);
        assert_true(WIFEXITED(ws));
        assert_int_equal(WEXITSTATUS(ws), 0);
    }
    db = NULL;
    assert_int_equal(te_db_open(path("two.db"), NULL, &db), TE_OK);
    te_db_trial_list *l = NULL;
    assert_int_equal(te_db_history(db, KEY, NULL, 0, &l), TE_OK);
    size_t dup = 0;
    for (size_t i = 0; i < l->n; i++)
        for (size_t j = 0; j < i; j++)
            dup += !strcmp(l->items[i].trace_hash, l->items[j].trace_hash);
    printf("  %zu trials, %zu measured twice\n", l->n, dup);
    assert_int_equal(dup, 0);
    assert_true(l->n >= 60);
    te_db_trial_list_free(l);
    te_db_close(db);
}

static te_db_target host_target(char *storage, size_t size)
{
    te_target tgt = te_target_host();
    te_db_target dbt;
    assert_int_equal(te_tuner_db_target(&tgt, &dbt, storage, size), TE_OK);
    return dbt;
}

static void test_stale_claims_are_reclaimed(void **state)
{
    (void)state;
    te_db *db = NULL;
    assert_int_equal(te_db_open(path("stale.db"), NULL, &db), TE_OK);
    char storage[1024];
    te_db_target dbt = host_target(storage, sizeof storage);
    int64_t a = 0, b = 0;
    assert_int_equal(te_db_job_start(db, "job a", 0, &a), TE_OK);
    assert_int_equal(te_db_job_start(db, "job b", 0, &b), TE_OK);
    const char *h[2] = {"00000000000000aa", "00000000000000bb"};
    int got[2] = {-1, -1};
    assert_int_equal(te_db_claim_traces(db, KEY, &dbt, a, NULL, 2, h, got), TE_OK);
    assert_int_equal(got[0], 1);
    assert_int_equal(got[1], 1);
    /* A live claim of job a: job b may not take it; job a may claim it again. */
    assert_int_equal(te_db_claim_traces(db, KEY, &dbt, b, NULL, 2, h, got), TE_OK);
    assert_int_equal(got[0], 0);
    assert_int_equal(got[1], 0);
    assert_int_equal(te_db_claim_traces(db, KEY, &dbt, a, NULL, 1, h, got), TE_OK);
    assert_int_equal(got[0], 1);
    /* Recording the trial releases the claim, and then the trial itself settles the trace. */
    te_db_trial r = {.workload = {.key = KEY},
                     .target = dbt,
                     .trace = "t",
                     .trace_hash = h[0],
                     .status = TE_TRIAL_OK,
                     .median_s = 1e-3,
                     .spread_s = 0,
                     .repeats = 1,
                     .gflops = NAN,
                     .job_id = a};
    r.transient = 1; /* only a failure can be environmental */
    assert_int_equal(te_db_record_trial(db, &r, NULL), TE_ERR_ARG);
    r.transient = 0;
    assert_int_equal(te_db_record_trial(db, &r, NULL), TE_OK);
    assert_int_equal(te_db_claim_traces(db, KEY, &dbt, b, NULL, 1, h, got), TE_OK);
    assert_int_equal(got[0], 0);
    /* An old claim is stale. */
    te_db_claim_options quick = {.stale_us = 1};
    usleep(2000);
    assert_int_equal(te_db_claim_traces(db, KEY, &dbt, b, &quick, 1, h + 1, got), TE_OK);
    assert_int_equal(got[0], 1);
    /* A claim of a job that was killed (its process is gone) is stale at once. */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        te_db *cdb = NULL;
        int64_t c = 0;
        const char *hc[1] = {"00000000000000cc"};
        int g = 0;
        int ok = te_db_open(path("stale.db"), NULL, &cdb) == TE_OK &&
                 te_db_job_start(cdb, "job c", 0, &c) == TE_OK &&
                 te_db_claim_traces(cdb, KEY, &dbt, c, NULL, 1, hc, &g) == TE_OK && g == 1;
        _exit(ok ? 0 : 1); /* dies without finishing its job or releasing its claim */
    }
    int ws = 0;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    const char *hc[1] = {"00000000000000cc"};
    assert_int_equal(te_db_claim_traces(db, KEY, &dbt, a, NULL, 1, hc, got), TE_OK);
    assert_int_equal(got[0], 1);
    /* Finishing a job releases its claims. */
    assert_int_equal(te_db_job_finish(db, a, TE_JOB_FINISHED), TE_OK);
    assert_int_equal(te_db_claim_traces(db, KEY, &dbt, b, NULL, 1, hc, got), TE_OK);
    assert_int_equal(got[0], 1);
    assert_int_equal(te_db_check(db, NULL), TE_OK);
    te_db_close(db);
}

/* Fails every configuration: a timeout for traces of even length, a crash for odd ones. */
static double failing_fake(const char *trace, void *user)
{
    int *calls = user;
    (*calls)++;
    return strlen(trace) % 2 == 0 ? TE_TUNE_FAKE_TIMEOUT : -1;
}

static int64_t fake_job(te_db *db, int retry_failed, int *calls)
{
    te_tune_options o = te_tune_options_default();
    o.strategy = TE_TUNE_GRID;
    o.space = TE_SPACE_TEMPLATE;
    o.max_trials = 24;
    o.batch_size = 8;
    o.quiet = 1;
    o.new_job = 1;
    o.retry_failed = retry_failed;
    o.fake_runner = failing_fake;
    o.fake_user = calls;
    te_tuner *t = te_tuner_create(db, &o);
    assert_non_null(t);
    assert_int_equal(te_tuner_add_op(t, "matmul", "m=32,n=32,k=16", 1), TE_OK);
    assert_int_equal(te_tuner_run(t), TE_OK);
    int64_t id = te_tuner_job_id(t, NULL);
    te_tuner_free(t);
    return id;
}

static void test_environmental_failures_are_retried(void **state)
{
    (void)state;
    te_db *db = NULL;
    assert_int_equal(te_db_open(path("retry.db"), NULL, &db), TE_OK);
    int calls = 0;
    int64_t j1 = fake_job(db, 0, &calls);
    te_db_trial_list *l = NULL;
    assert_int_equal(te_db_history(db, KEY, NULL, 0, &l), TE_OK);
    assert_int_equal(l->n, 24);
    int n_env = 0;
    for (size_t i = 0; i < l->n; i++) {
        assert_int_equal(l->items[i].transient, l->items[i].status == TE_TRIAL_TIMEOUT);
        n_env += l->items[i].transient;
    }
    te_db_trial_list_free(l);
    assert_true(n_env > 0 && n_env < 24);
    /* The flag travels through export and import. */
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    assert_non_null(mem);
    assert_int_equal(te_db_export(db, mem, KEY, NULL, NULL), TE_OK);
    fclose(mem);
    te_db *copy = NULL;
    assert_int_equal(te_db_open(path("retry-copy.db"), NULL, &copy), TE_OK);
    assert_int_equal(te_db_import_buffer(copy, buf, len, NULL), TE_OK);
    free(buf);
    assert_int_equal(te_db_history(copy, KEY, NULL, 0, &l), TE_OK);
    int n_env_copy = 0;
    for (size_t i = 0; i < l->n; i++)
        n_env_copy += l->items[i].transient;
    te_db_trial_list_free(l);
    te_db_close(copy);
    assert_int_equal(n_env_copy, n_env);
    /* A second job measures the environmental failures of the first again (once), never the
     * deterministic ones; a third does not measure them a third time. */
    fake_job(db, 0, &calls);
    fake_job(db, 0, &calls);
    assert_int_equal(te_db_history(db, KEY, NULL, 0, &l), TE_OK);
    int64_t first_env_retried = 0, det_retried = 0, thrice = 0;
    for (size_t i = 0; i < l->n; i++) {
        if (l->items[i].job_id != j1)
            continue;
        int seen = 0;
        for (size_t j = 0; j < l->n; j++)
            seen += !strcmp(l->items[j].trace_hash, l->items[i].trace_hash);
        if (l->items[i].transient)
            first_env_retried += seen == 2;
        else
            det_retried += seen > 1;
        thrice += seen > 2;
    }
    te_db_trial_list_free(l);
    printf("  %d environmental failures, %lld retried once\n", n_env, (long long)first_env_retried);
    assert_int_equal(first_env_retried, n_env);
    assert_int_equal(det_retried, 0);
    assert_int_equal(thrice, 0);
    /* --retry-failed measures every failed configuration again. */
    fake_job(db, 1, &calls);
    assert_int_equal(te_db_history(db, KEY, NULL, 0, &l), TE_OK);
    for (size_t i = 0; i < l->n; i++) {
        if (l->items[i].job_id != j1)
            continue;
        int seen = 0;
        for (size_t j = 0; j < l->n; j++)
            seen += !strcmp(l->items[j].trace_hash, l->items[i].trace_hash);
        det_retried += !l->items[i].transient && seen == 2;
    }
    te_db_trial_list_free(l);
    assert_int_equal(det_retried, 24 - n_env);
    te_db_close(db);
}

#ifndef TESSERA_CLI
#error "TESSERA_CLI (path of the tessera binary) must be defined by tests/tuner.cmake"
#endif

static int cli(const char *env, const char *args)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd '%s' && %s '%s' %s >'%s/out.txt' 2>'%s/err.txt'", dir,
             env ? env : "", TESSERA_CLI, args, dir, dir);
    int ws = system(cmd);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

/* Trials of the hash `h` in l with status s; *n_all gets all trials of h. */
static int count_hash(const te_db_trial_list *l, const char *h, te_trial_status s, int *n_all)
{
    int n = 0;
    *n_all = 0;
    for (size_t i = 0; i < l->n; i++)
        if (!strcmp(l->items[i].trace_hash, h)) {
            (*n_all)++;
            n += l->items[i].status == s;
        }
    return n;
}

static void test_cli_timeouts_are_retried_for_real(void **state)
{
    (void)state;
    const char *args = "tune matmul --shape m=16,n=16,k=16 --trials 4 --batch 4 --timeout 0.5 "
                       "--strategy grid --new-job --quiet --db real.db";
    assert_int_equal(cli("TESSERA_TUNE_INJECT=hang,compile", args), 0);
    const char *key = "matmul;k=16,m=16,n=16;f32";
    te_db *db = NULL;
    assert_int_equal(te_db_open(path("real.db"), NULL, &db), TE_OK);
    te_db_trial_list *l = NULL;
    assert_int_equal(te_db_history(db, key, NULL, 0, &l), TE_OK);
    char hang[17] = "", bad[17] = "";
    for (size_t i = 0; i < l->n; i++) {
        if (l->items[i].status == TE_TRIAL_TIMEOUT) {
            snprintf(hang, sizeof hang, "%s", l->items[i].trace_hash);
            assert_int_equal(l->items[i].transient, 1);
        }
        if (l->items[i].status == TE_TRIAL_COMPILE_ERROR) {
            snprintf(bad, sizeof bad, "%s", l->items[i].trace_hash);
            assert_int_equal(l->items[i].transient, 0);
        }
    }
    te_db_trial_list_free(l);
    te_db_close(db);
    assert_true(hang[0] && bad[0]);
    /* The next job measures the timed-out configuration again; the compile error stays. */
    assert_int_equal(cli(NULL, args), 0);
    assert_int_equal(te_db_open(path("real.db"), NULL, &db), TE_OK);
    assert_int_equal(te_db_history(db, key, NULL, 0, &l), TE_OK);
    int all = 0;
    assert_int_equal(count_hash(l, hang, TE_TRIAL_OK, &all), 1);
    assert_int_equal(all, 2);
    assert_int_equal(count_hash(l, bad, TE_TRIAL_COMPILE_ERROR, &all), 1);
    assert_int_equal(all, 1);
    te_db_trial_list_free(l);
    te_db_close(db);
    /* --retry-failed measures the compile error again too. */
    char retry[1024];
    snprintf(retry, sizeof retry, "%s --retry-failed", args);
    assert_int_equal(cli(NULL, retry), 0);
    assert_int_equal(te_db_open(path("real.db"), NULL, &db), TE_OK);
    assert_int_equal(te_db_history(db, key, NULL, 0, &l), TE_OK);
    assert_int_equal(count_hash(l, bad, TE_TRIAL_OK, &all), 1);
    assert_int_equal(all, 2);
    assert_int_equal(count_hash(l, hang, TE_TRIAL_OK, &all), 1);
    assert_int_equal(all, 2); /* an ok trial settles it, even with --retry-failed */
    te_db_trial_list_free(l);
    te_db_close(db);
}

static void test_compile_timeout_scales_with_load(void **state)
{
    (void)state;
    assert_true(te__compile_timeout_for_load(0.5, 2) == 20);
    assert_true(te__compile_timeout_for_load(2, 2) == 20);
    assert_true(te__compile_timeout_for_load(8, 2) == 80);
    assert_true(te__compile_timeout_for_load(1e6, 2) == 200);
    assert_true(te__compile_timeout_for_load(3, 0) == 20);
    double now = te__default_compile_timeout();
    assert_true(now >= 20 && now <= 200);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_jobs_split_the_work),
        cmocka_unit_test(test_stale_claims_are_reclaimed),
        cmocka_unit_test(test_environmental_failures_are_retried),
        cmocka_unit_test(test_cli_timeouts_are_retried_for_real),
        cmocka_unit_test(test_compile_timeout_scales_with_load),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

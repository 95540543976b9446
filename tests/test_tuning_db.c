/* The tuning database's C API: recording, lookups, the two tiers, target fallback, jobs,
 * prune and check. */
#include "test_tuning_db_common.h"

#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>

TDB_FIXTURE("user.db", 1)

static void test_new_database_has_schema_wal_and_keys(void **state)
{
    (void)state;
    te_db *db = tdb_open(path, 0);
    te_db_info in;
    assert_int_equal(te_db_get_info(db, &in), TE_OK);
    assert_int_equal(in.schema_version, TE_DB_SCHEMA_VERSION);
    assert_string_equal(in.journal_mode, "wal");
    assert_int_equal(in.n_trials, 0);
    assert_null(in.system_path);
    assert_int_equal(te_db_close(db), TE_OK);

    char key[256];
    int n = te_db_target_key(&tdb_cpu, key, sizeof key);
    assert_string_equal(key, "c;x86_64;AMD EPYC;avx512f,avx2,fma;2 cores;gcc 12.2.0");
    assert_int_equal(n, (int)strlen(key));
    te_db_target gpu = {.backend = "cuda",
                        .sm = 80,
                        .device = "NVIDIA A100; SXM",
                        .cores = 108,
                        .compiler = "nvrtc 12.2",
                        .driver = "12.2"};
    te_db_target_key(&gpu, key, sizeof key);
    assert_string_equal(key, "cuda;sm_80;NVIDIA A100, SXM;108 SMs;nvrtc 12.2;driver 12.2");
    assert_int_equal(te_db_target_key(&(te_db_target){0}, key, sizeof key), TE_ERR_ARG);
    /* snprintf-like truncation. */
    assert_int_equal(te_db_target_key(&tdb_cpu, key, 5), n);
    assert_string_equal(key, "c;x8");

    char h1[17], h2[17];
    te_db_trace_hash("split(i,32)", h1);
    te_db_trace_hash("split(i,64)", h2);
    assert_int_equal(strlen(h1), 16);
    assert_string_not_equal(h1, h2);
    assert_string_equal(te_trial_status_str(TE_TRIAL_WRONG_ANSWER), "wrong_answer");
    te_trial_status st;
    assert_int_equal(te_trial_status_parse("timeout", &st), TE_OK);
    assert_int_equal(st, TE_TRIAL_TIMEOUT);
    assert_int_equal(te_trial_status_parse("nope", &st), TE_ERR_ARG);
}

static void test_record_best_topk_history(void **state)
{
    (void)state;
    te_db *db = tdb_open(path, 0);
    te_db_trial batch[6] = {tdb_trial("t-a", 3e-3), tdb_trial("t-b", 1e-3), tdb_trial("t-c", 2e-3),
                            tdb_trial("t-d", 5e-4), tdb_trial("t-b", 9e-4), tdb_trial("t-e", 0)};
    batch[3].status = TE_TRIAL_WRONG_ANSWER; /* fastest, but wrong: never "best" */
    batch[3].error = "max rel err 0.5";
    batch[5].status = TE_TRIAL_COMPILE_ERROR;
    batch[5].median_s = NAN;
    batch[5].spread_s = NAN;
    batch[5].gflops = NAN;
    batch[5].error = "error: expected ';'";
    for (int i = 0; i < 6; i++)
        batch[i].created_us = 1000 + i;
    assert_int_equal(te_db_record_trials(db, batch, 6), TE_OK);
    int64_t id = 0;
    te_db_trial one = tdb_trial("t-f", 4e-3);
    assert_int_equal(te_db_record_trial(db, &one, &id), TE_OK);
    assert_true(id > 0);
    assert_int_equal(tdb_count(db), 7);

    te_db_trial_list *l = NULL;
    assert_int_equal(te_db_best(db, TDB_MATMUL, &tdb_cpu, 0, &l), TE_OK);
    assert_int_equal(l->n, 1);
    assert_string_equal(l->items[0].trace, "t-b");
    assert_true(l->items[0].median_s == 9e-4);
    assert_true(l->items[0].exact_target);
    assert_false(l->items[0].from_system);
    assert_string_equal(l->items[0].target.key,
                        "c;x86_64;AMD EPYC;avx512f,avx2,fma;2 cores;gcc 12.2.0");
    assert_string_equal(l->items[0].workload.op, "matmul");
    assert_string_equal(l->items[0].workload.shapes, "{\"m\":1024,\"n\":1024,\"k\":1024}");
    assert_int_equal(strlen(l->items[0].uid), 36);
    te_db_trial_list_free(l);

    /* top-k: distinct traces, fastest first; the slower repeat of t-b is skipped. */
    assert_int_equal(te_db_top_k(db, TDB_MATMUL, &tdb_cpu, 3, 0, &l), TE_OK);
    assert_int_equal(l->n, 3);
    assert_string_equal(l->items[0].trace, "t-b");
    assert_string_equal(l->items[1].trace, "t-c");
    assert_string_equal(l->items[2].trace, "t-a");
    te_db_trial_list_free(l);
    assert_int_equal(te_db_top_k(db, TDB_MATMUL, &tdb_cpu, 0, 0, &l), TE_ERR_ARG);

    /* A target given by key only finds the same rows. */
    te_db_target bykey = {.key = "c;x86_64;AMD EPYC;avx512f,avx2,fma;2 cores;gcc 12.2.0"};
    assert_int_equal(te_db_best(db, TDB_MATMUL, &bykey, 0, &l), TE_OK);
    te_db_trial_list_free(l);

    /* History: every status, oldest first; limit keeps the newest. */
    assert_int_equal(te_db_history(db, TDB_MATMUL, &tdb_cpu, 0, &l), TE_OK);
    assert_int_equal(l->n, 7);
    assert_string_equal(l->items[0].trace, "t-a");
    assert_int_equal(l->items[5].status, TE_TRIAL_COMPILE_ERROR);
    assert_true(isnan(l->items[5].median_s));
    assert_string_equal(l->items[5].error, "error: expected ';'");
    assert_string_equal(l->items[6].trace, "t-f");
    te_db_trial_list_free(l);
    assert_int_equal(te_db_history(db, TDB_MATMUL, NULL, 2, &l), TE_OK);
    assert_int_equal(l->n, 2);
    assert_string_equal(l->items[0].trace, "t-e");
    assert_string_equal(l->items[1].trace, "t-f");
    te_db_trial_list_free(l);
    assert_int_equal(te_db_history(db, "nothing;x;f32", NULL, 0, &l), TE_OK);
    assert_int_equal(l->n, 0);
    te_db_trial_list_free(l);

    /* has_trace: what the tuner's resume asks. */
    char h[17];
    int found = -1;
    te_db_trace_hash("t-d", h);
    assert_int_equal(te_db_has_trace(db, TDB_MATMUL, &tdb_cpu, h, &found), TE_OK);
    assert_int_equal(found, 1);
    te_db_trace_hash("t-zzz", h);
    assert_int_equal(te_db_has_trace(db, TDB_MATMUL, &tdb_cpu, h, &found), TE_OK);
    assert_int_equal(found, 0);

    /* Unknown workload: not found, with a message. */
    assert_int_equal(te_db_best(db, "conv2d;n=1;f32", &tdb_cpu, 0, &l), TE_ERR_NOT_FOUND);
    assert_null(l);
    assert_non_null(strstr(te_db_errmsg(db), "conv2d"));
    te_db_close(db);
}

static void test_invalid_trials_are_rejected_and_batches_are_atomic(void **state)
{
    (void)state;
    te_db *db = tdb_open(path, 0);
    te_db_trial t = tdb_trial("x", 1e-3);
    t.trace = NULL;
    assert_int_equal(te_db_record_trial(db, &t, NULL), TE_ERR_ARG);
    assert_non_null(strstr(te_db_errmsg(db), "trace"));
    t = tdb_trial("x", NAN);
    assert_int_equal(te_db_record_trial(db, &t, NULL), TE_ERR_ARG);
    t = tdb_trial("x", 1e-3);
    t.workload.shapes = "{m:1}";
    assert_int_equal(te_db_record_trial(db, &t, NULL), TE_ERR_ARG);
    assert_non_null(strstr(te_db_errmsg(db), "JSON"));
    t = tdb_trial("x", 1e-3);
    t.target.backend = "opencl";
    assert_int_equal(te_db_record_trial(db, &t, NULL), TE_ERR_ARG);
    t = tdb_trial("x", 1e-3);
    t.gflops = INFINITY;
    assert_int_equal(te_db_record_trial(db, &t, NULL), TE_ERR_ARG);
    t = tdb_trial("x", 1e-3);
    t.status = (te_trial_status)99;
    assert_int_equal(te_db_record_trial(db, &t, NULL), TE_ERR_ARG);

    /* A failure inside the transaction (unknown job, duplicate uid) rolls back the batch. */
    te_db_trial b[3] = {tdb_trial("a", 1e-3), tdb_trial("b", 1e-3), tdb_trial("c", 1e-3)};
    b[2].job_id = 4242;
    assert_int_equal(te_db_record_trials(db, b, 3), TE_ERR_ARG);
    assert_non_null(strstr(te_db_errmsg(db), "job 4242"));
    assert_int_equal(tdb_count(db), 0);
    b[2].job_id = 0;
    b[0].uid = b[2].uid = "0190c0de-0000-7000-8000-000000000001";
    assert_int_equal(te_db_record_trials(db, b, 3), TE_ERR_ARG);
    assert_non_null(strstr(te_db_errmsg(db), "already exists"));
    assert_int_equal(tdb_count(db), 0);
    /* The cached target/workload ids of the rolled-back batch must not be reused. */
    b[2].uid = NULL;
    assert_int_equal(te_db_record_trials(db, b, 3), TE_OK);
    assert_int_equal(tdb_count(db), 3);
    assert_int_equal(te_db_check(db, NULL), TE_OK);
    te_db_close(db);
}

static void test_trials_are_append_only(void **state)
{
    (void)state;
    te_db *db = tdb_open(path, 0);
    te_db_trial t = tdb_trial("x", 1e-3);
    assert_int_equal(te_db_record_trial(db, &t, NULL), TE_OK);
    te_db_close(db);
    sqlite3 *h;
    assert_int_equal(sqlite3_open(path, &h), SQLITE_OK);
    char *err = NULL;
    assert_int_not_equal(sqlite3_exec(h, "UPDATE trials SET median_s = 0", NULL, NULL, &err),
                         SQLITE_OK);
    assert_non_null(strstr(err, "append-only"));
    sqlite3_free(err);
    /* The documented `best` view answers from the plain sqlite3 shell too. */
    sqlite3_stmt *st;
    assert_int_equal(
        sqlite3_prepare_v2(h, "SELECT workload, target, trace FROM best", -1, &st, NULL),
        SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 2), "x");
    sqlite3_finalize(st);
    sqlite3_close(h);
}

static void record_on(te_db *db, te_db_target tg, const char *trace, double median)
{
    te_db_trial t = tdb_trial(trace, median);
    t.target = tg;
    assert_int_equal(te_db_record_trial(db, &t, NULL), TE_OK);
}

static void test_fallback_only_when_asked_and_reported(void **state)
{
    (void)state;
    te_db *db = tdb_open(path, 0);
    te_db_target avx2 = tdb_cpu, avx512 = tdb_cpu, arm = tdb_cpu;
    avx2.features = "avx2,fma";
    avx512.compiler = "clang 14.0.6";
    arm.arch = "aarch64";
    arm.features = "neon";
    record_on(db, avx2, "on-avx2", 2e-3);
    record_on(db, avx512, "on-avx512", 1e-3);
    record_on(db, arm, "on-arm", 5e-4);

    /* Our machine: same CPU and features as avx512 but gcc: no exact record. */
    te_db_trial_list *l = NULL;
    assert_int_equal(te_db_best(db, TDB_MATMUL, &tdb_cpu, 0, &l), TE_ERR_NOT_FOUND);
    assert_non_null(strstr(te_db_errmsg(db), "fallback"));
    assert_int_equal(te_db_best(db, TDB_MATMUL, &tdb_cpu, TE_DB_FALLBACK, &l), TE_OK);
    assert_string_equal(l->items[0].trace, "on-avx512"); /* most shared features */
    assert_false(l->items[0].exact_target);
    assert_string_equal(l->items[0].target.key,
                        "c;x86_64;AMD EPYC;avx512f,avx2,fma;2 cores;clang 14.0.6");
    te_db_trial_list_free(l);

    /* A CPU without avx512f must not get code that uses it. */
    te_db_target old = tdb_cpu;
    old.features = "fma,avx2";
    old.device = "Intel Haswell";
    assert_int_equal(te_db_best(db, TDB_MATMUL, &old, TE_DB_FALLBACK, &l), TE_OK);
    assert_string_equal(l->items[0].trace, "on-avx2");
    te_db_trial_list_free(l);
    /* Given by key only, the key is parsed for the fallback. */
    te_db_target bykey = {.key = "c;x86_64;Intel Haswell;fma,avx2;4 cores;gcc 13"};
    assert_int_equal(te_db_best(db, TDB_MATMUL, &bykey, TE_DB_FALLBACK, &l), TE_OK);
    assert_string_equal(l->items[0].trace, "on-avx2");
    te_db_trial_list_free(l);
    te_db_target sse = tdb_cpu;
    sse.features = "sse4.2";
    assert_int_equal(te_db_best(db, TDB_MATMUL, &sse, TE_DB_FALLBACK, &l), TE_ERR_NOT_FOUND);
    te_db_target riscv = tdb_cpu;
    riscv.arch = "riscv64";
    assert_int_equal(te_db_best(db, TDB_MATMUL, &riscv, TE_DB_FALLBACK, &l), TE_ERR_NOT_FOUND);

    /* CUDA: same SM major, not above ours, highest first. */
    te_db_target a100 = {.backend = "cuda",
                         .sm = 80,
                         .device = "A100",
                         .cores = 108,
                         .compiler = "nvrtc 12.2",
                         .driver = "12.2"};
    te_db_target h100 = a100, a10 = a100, v100 = a100;
    h100.sm = 90;
    h100.device = "H100";
    a10.sm = 86;
    a10.device = "A10";
    v100.sm = 70;
    v100.device = "V100";
    record_on(db, a100, "gpu-80", 1e-4);
    record_on(db, v100, "gpu-70", 1e-4);
    assert_int_equal(te_db_best(db, TDB_MATMUL, &a10, TE_DB_FALLBACK, &l), TE_OK);
    assert_string_equal(l->items[0].trace, "gpu-80");
    assert_false(l->items[0].exact_target);
    te_db_trial_list_free(l);
    assert_int_equal(te_db_best(db, TDB_MATMUL, &h100, TE_DB_FALLBACK, &l), TE_ERR_NOT_FOUND);
    te_db_target t75 = a100;
    t75.sm = 75;
    assert_int_equal(te_db_best(db, TDB_MATMUL, &t75, TE_DB_FALLBACK, &l), TE_OK);
    assert_string_equal(l->items[0].trace, "gpu-70");
    te_db_trial_list_free(l);
    te_db_close(db);
}

static void test_system_tier_read_first_user_and_never_written(void **state)
{
    (void)state;
    char sys[320];
    tdb_path(sys, sizeof sys, dir, "system.db");
    te_db *s = tdb_open(sys, TE_DB_NO_WAL); /* a shipped file is best without a WAL */
    record_on(s, tdb_cpu, "sys-fast", 1e-4);
    record_on(s, tdb_cpu, "sys-slow", 9e-3);
    te_db_target other = tdb_cpu;
    other.cores = 64;
    record_on(s, other, "sys-other", 1e-4);
    te_db_close(s);
    size_t n0, n1;
    unsigned char *before = tdb_slurp(sys, &n0);

    setenv("TESSERA_SYSTEM_DB", sys, 1);
    te_db *db = NULL;
    assert_int_equal(te_db_open(path, NULL, &db), TE_OK);
    te_db_info in;
    assert_int_equal(te_db_get_info(db, &in), TE_OK);
    assert_string_equal(in.system_path, sys);
    assert_int_equal(in.n_system_trials, 3);

    /* Nothing in the user's database yet: the system answers, and says so. */
    te_db_trial_list *l = NULL;
    assert_int_equal(te_db_best(db, TDB_MATMUL, &tdb_cpu, 0, &l), TE_OK);
    assert_string_equal(l->items[0].trace, "sys-fast");
    assert_true(l->items[0].from_system);
    te_db_trial_list_free(l);
    assert_int_equal(te_db_best(db, TDB_MATMUL, &tdb_cpu, TE_DB_USER_ONLY, &l), TE_ERR_NOT_FOUND);

    /* The user's own measurement is consulted first, even when slower. */
    record_on(db, tdb_cpu, "user", 5e-3);
    assert_int_equal(te_db_best(db, TDB_MATMUL, &tdb_cpu, 0, &l), TE_OK);
    assert_string_equal(l->items[0].trace, "user");
    assert_false(l->items[0].from_system);
    te_db_trial_list_free(l);
    /* top-k fills up from the system database. */
    assert_int_equal(te_db_top_k(db, TDB_MATMUL, &tdb_cpu, 5, 0, &l), TE_OK);
    assert_int_equal(l->n, 3);
    assert_string_equal(l->items[1].trace, "sys-fast");
    assert_true(l->items[1].from_system);
    te_db_trial_list_free(l);
    assert_int_equal(te_db_history(db, TDB_MATMUL, NULL, 0, &l), TE_OK);
    assert_int_equal(l->n, 4);
    te_db_trial_list_free(l);
    int found = 1;
    char h[17];
    te_db_trace_hash("sys-fast", h);
    assert_int_equal(te_db_has_trace(db, TDB_MATMUL, &tdb_cpu, h, &found), TE_OK);
    assert_int_equal(found, 0); /* resume looks at the user's own work only */
    te_db_close(db);

    unsigned char *after = tdb_slurp(sys, &n1);
    assert_int_equal(n0, n1);
    assert_memory_equal(before, after, n0);
    free(before);
    free(after);

    /* A system database that cannot be opened is a clear error, not silently ignored. */
    setenv("TESSERA_SYSTEM_DB", "/nonexistent/system.db", 1);
    assert_int_not_equal(te_db_open(path, NULL, &db), TE_OK);
    assert_non_null(strstr(te_db_errmsg(db), "system database"));
    te_db_close(db);
    /* ... unless asked to ignore it. */
    te_db_options o = {.flags = TE_DB_NO_SYSTEM};
    assert_int_equal(te_db_open(path, &o, &db), TE_OK);
    te_db_close(db);
    unsetenv("TESSERA_SYSTEM_DB");
}

static void test_jobs_progress_finish_resume_and_dead_ones(void **state)
{
    (void)state;
    te_db *db = tdb_open(path, 0);
    int64_t job = 0;
    assert_int_equal(te_db_job_start(db, "tessera tune matmul --trials 3", 3, &job), TE_OK);
    te_db_trial b[3] = {tdb_trial("a", 1e-3), tdb_trial("b", 2e-3), tdb_trial("c", 3e-3)};
    for (int i = 0; i < 3; i++)
        b[i].job_id = job;
    assert_int_equal(te_db_record_trials(db, b, 2), TE_OK);
    te_db_job_list *l = NULL;
    assert_int_equal(te_db_jobs(db, job, &l), TE_OK);
    assert_int_equal(l->n, 1);
    assert_int_equal(l->items[0].status, TE_JOB_RUNNING);
    assert_int_equal(l->items[0].trials_done, 2);
    assert_int_equal(l->items[0].trials_planned, 3);
    assert_int_equal(l->items[0].pid, getpid());
    assert_string_equal(l->items[0].command, "tessera tune matmul --trials 3");
    te_db_job_list_free(l);
    assert_int_equal(te_db_job_finish(db, job, TE_JOB_INTERRUPTED), TE_OK);
    assert_int_equal(te_db_job_resume(db, job), TE_OK);
    assert_int_equal(te_db_record_trial(db, &b[2], NULL), TE_OK);
    assert_int_equal(te_db_job_finish(db, job, TE_JOB_FINISHED), TE_OK);
    assert_int_equal(te_db_jobs(db, job, &l), TE_OK);
    assert_int_equal(l->items[0].status, TE_JOB_FINISHED);
    assert_int_equal(l->items[0].trials_done, 3);
    assert_true(l->items[0].ended_us >= l->items[0].started_us);
    te_db_job_list_free(l);
    assert_int_equal(te_db_job_finish(db, 999, TE_JOB_FINISHED), TE_ERR_NOT_FOUND);
    assert_int_equal(te_db_job_finish(db, job, TE_JOB_RUNNING), TE_ERR_ARG);
    assert_int_equal(te_db_jobs(db, 999, &l), TE_ERR_NOT_FOUND);

    /* A job whose process died without finishing reads as interrupted. */
    pid_t child = fork();
    if (child == 0) {
        te_db *c = NULL;
        te_db_options o = {.flags = TE_DB_NO_SYSTEM};
        int64_t id;
        int ok = te_db_open(path, &o, &c) == TE_OK && te_db_job_start(c, "doomed", 10, &id) == 0;
        _exit(ok ? 0 : 1); /* no te_db_job_finish */
    }
    int ws;
    assert_int_equal(waitpid(child, &ws, 0), child);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    assert_int_equal(te_db_jobs(db, 0, &l), TE_OK);
    assert_int_equal(l->n, 2);
    assert_string_equal(l->items[0].command, "doomed"); /* newest first */
    assert_int_equal(l->items[0].status, TE_JOB_INTERRUPTED);
    te_db_job_list_free(l);
    te_db_close(db);
}

static void test_prune_by_age_and_status_keeps_best(void **state)
{
    (void)state;
    te_db *db = tdb_open(path, 0);
    te_db_trial b[5] = {tdb_trial("old-best", 1e-4), tdb_trial("old-slow", 1e-3),
                        tdb_trial("old-bad", 0), tdb_trial("new", 2e-4), tdb_trial("new-bad", 0)};
    b[0].created_us = b[1].created_us = b[2].created_us = 1000000;
    b[2].status = b[4].status = TE_TRIAL_TIMEOUT;
    assert_int_equal(te_db_record_trials(db, b, 5), TE_OK);

    int64_t n = -1;
    assert_int_equal(te_db_prune(db, &(te_db_prune_options){0}, &n), TE_ERR_ARG);
    te_db_prune_options o = {.older_than_us = 2000000, .keep_best = 1, .dry_run = 1};
    assert_int_equal(te_db_prune(db, &o, &n), TE_OK);
    assert_int_equal(n, 2);
    assert_int_equal(tdb_count(db), 5);
    o.dry_run = 0;
    assert_int_equal(te_db_prune(db, &o, &n), TE_OK);
    assert_int_equal(n, 2);
    te_db_trial_list *l = NULL;
    assert_int_equal(te_db_best(db, TDB_MATMUL, &tdb_cpu, 0, &l), TE_OK);
    assert_string_equal(l->items[0].trace, "old-best");
    te_db_trial_list_free(l);
    o = (te_db_prune_options){.status_mask = 1u << TE_TRIAL_TIMEOUT};
    assert_int_equal(te_db_prune(db, &o, &n), TE_OK);
    assert_int_equal(n, 1);
    assert_int_equal(tdb_count(db), 2);
    char *report = NULL;
    assert_int_equal(te_db_check(db, &report), TE_OK);
    assert_string_equal(report, "ok");
    free(report);
    te_db_close(db);
}

static void test_check_reports_inconsistent_rows(void **state)
{
    (void)state;
    te_db *db = tdb_open(path, 0);
    record_on(db, tdb_cpu, "x", 1e-3);
    te_db_close(db);
    sqlite3 *h;
    assert_int_equal(sqlite3_open(path, &h), SQLITE_OK);
    assert_int_equal(sqlite3_exec(h,
                                  "INSERT INTO trials(uid, workload_id, target_id, trace, "
                                  "trace_hash, status, created_us, tessera_version) "
                                  "VALUES('u2', 1, 77, 't', 'h', 'ok', 1, '0')",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(h);
    db = tdb_open(path, 0);
    char *report = NULL;
    assert_int_equal(te_db_check(db, &report), TE_ERR_CORRUPT);
    assert_non_null(strstr(report, "foreign key"));
    assert_non_null(strstr(report, "median"));
    free(report);
    te_db_close(db);
}

/* A fresh database with two consistent ok trials and a failed one, then `sql` run on it with
 * the plain SQLite library; returns te_db_check's code and its report (caller frees). */
static int check_after(const char *sql, char **report)
{
    remove(path);
    te_db *db = tdb_open(path, 0);
    te_db_trial t[3] = {tdb_trial("a", 1e-3), tdb_trial("b", 2e-3), tdb_trial("c", 0)};
    t[2].status = TE_TRIAL_COMPILE_ERROR;
    t[2].median_s = NAN;
    t[2].gflops = NAN;
    t[2].error = "x.c:1: error: expected ';'";
    assert_int_equal(te_db_record_trials(db, t, 3), TE_OK);
    te_db_close(db);
    sqlite3 *h;
    assert_int_equal(sqlite3_open(path, &h), SQLITE_OK);
    char *err = NULL;
    if (sqlite3_exec(h, sql, NULL, NULL, &err) != SQLITE_OK)
        fail_msg("%s: %s", sql, err);
    sqlite3_close(h);
    db = tdb_open(path, 0);
    int rc = te_db_check(db, report);
    te_db_close(db);
    return rc;
}

/* te_db_check compares every schema object with the schema the migrations create and the rows
 * with each other: each damage below is found, reported with its count and an example, and
 * the check fails. */
static void test_check_finds_schema_damage_and_contradicting_rows(void **state)
{
    (void)state;
    static const char insert[] =
        "INSERT INTO trials(uid, workload_id, target_id, trace, trace_hash, status, error, "
        "median_s, gflops, repeats, created_us, tessera_version) VALUES";
    char fake_fast[512], ok_with_error[512], gflops_no_time[512];
    snprintf(fake_fast, sizeof fake_fast,
             "%s('0190c0de-0000-7000-8000-000000000010', 1, 1, 'f', 'ff', 'ok', '', 1e-9, 64.5, "
             "10, 5, '0'), ('0190c0de-0000-7000-8000-000000000011', 1, 1, 'g', 'gg', 'ok', '', "
             "2e-9, 64.5, 10, 6, '0')",
             insert);
    snprintf(ok_with_error, sizeof ok_with_error,
             "%s('0190c0de-0000-7000-8000-000000000012', 1, 1, 'e', 'ee', 'ok', 'segfault', "
             "1e-3, NULL, 10, 5, '0')",
             insert);
    snprintf(gflops_no_time, sizeof gflops_no_time,
             "%s('0190c0de-0000-7000-8000-000000000013', 1, 1, 'n', 'nn', 'timeout', '', NULL, "
             "3.5, 10, 5, '0')",
             insert);
    const struct {
        const char *sql, *needles[3];
    } cases[] = {
        {"DROP VIEW best", {"view 'best' is missing", NULL}},
        {"DROP TRIGGER trials_append_only", {"trigger 'trials_append_only' is missing", NULL}},
        {"DROP INDEX trials_by_hash; CREATE INDEX trials_by_hash ON trials(trace_hash)",
         {"index 'trials_by_hash' differs", NULL}},
        {"DROP VIEW best; CREATE VIEW best AS SELECT * FROM trials", {"view 'best' differs", NULL}},
        {"CREATE TRIGGER no_prune BEFORE DELETE ON trials BEGIN SELECT 1; END",
         {"unexpected trigger 'no_prune'", NULL}},
        {"DROP INDEX trials_by_time", {"index 'trials_by_time' is missing", NULL}},
        {fake_fast, {"2 trials whose GFLOP/s disagree", "(e.g. trial 4, 5)", NULL}},
        {"UPDATE targets SET device = 'Intel Xeon'",
         {"1 targets whose columns contradict their key", "device column 'Intel Xeon'", NULL}},
        {"UPDATE targets SET cores = 64", {"cores column '64'", NULL}},
        {"UPDATE targets SET backend = 'cuda'", {"backend column 'cuda'", NULL}},
        {ok_with_error, {"1 ok trials with an error text", NULL}},
        {gflops_no_time, {"GFLOP/s figure but no positive median", NULL}},
        {"UPDATE workloads SET flops = -1", {"negative flops", NULL}},
        {"UPDATE jobs SET trials_done = -1; INSERT INTO jobs(uid, started_us, ended_us) "
         "VALUES('0190c0de-0000-7000-8000-0000000000aa', 10, 5)",
         {"1 jobs with negative counts or an end before their start", NULL}},
    };
    char *report = NULL;
    assert_int_equal(check_after("SELECT 1", &report), TE_OK);
    assert_string_equal(report, "ok");
    free(report);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = check_after(cases[i].sql, &report);
        for (int j = 0; cases[i].needles[j]; j++)
            if (rc != TE_ERR_CORRUPT || !report || !strstr(report, cases[i].needles[j]))
                fail_msg("after \"%s\": rc %d, report \"%s\" lacks \"%s\"", cases[i].sql, rc,
                         report ? report : "(none)", cases[i].needles[j]);
        free(report);
        report = NULL;
    }
    /* Several problems at once: every one is reported, one per line. */
    char all[2048];
    snprintf(all, sizeof all, "DROP VIEW best; DROP TRIGGER trials_append_only; %s; %s", fake_fast,
             ok_with_error);
    assert_int_equal(check_after(all, &report), TE_ERR_CORRUPT);
    int lines = 1;
    for (const char *p = report; *p; p++)
        lines += *p == '\n';
    if (lines != 4)
        fail_msg("want 4 problem lines, got: %s", report);
    free(report);
}

static int count_cb(const te_db_summary *row, void *ud)
{
    int *n = ud;
    assert_string_equal(row->workload_key, TDB_MATMUL);
    assert_int_equal(row->n_trials, 2);
    assert_int_equal(row->n_ok, 1);
    assert_true(row->best_median_s == 1e-3);
    (*n)++;
    return 0;
}

static void test_summary_and_argument_checks(void **state)
{
    (void)state;
    te_db *db = tdb_open(path, 0);
    record_on(db, tdb_cpu, "x", 1e-3);
    te_db_trial t = tdb_trial("y", 0);
    t.status = TE_TRIAL_RUNTIME_ERROR;
    assert_int_equal(te_db_record_trial(db, &t, NULL), TE_OK);
    int n = 0;
    assert_int_equal(te_db_summary_foreach(db, 0, count_cb, &n), TE_OK);
    assert_int_equal(n, 1);
    te_db_trial_list *l;
    assert_int_equal(te_db_best(db, NULL, &tdb_cpu, 0, &l), TE_ERR_ARG);
    assert_int_equal(te_db_best(db, TDB_MATMUL, NULL, 0, &l), TE_ERR_ARG);
    assert_int_equal(te_db_record_trials(db, NULL, 1), TE_ERR_ARG);
    assert_int_equal(te_db_record_trials(db, NULL, 0), TE_OK);
    assert_int_equal(te_db_open(NULL, NULL, NULL), TE_ERR_ARG);
    te_db *bad = NULL;
    assert_int_equal(te_db_open(NULL, NULL, &bad), TE_ERR_ARG);
    te_db_close(bad);
    te_db_close(NULL);
    te_db_trial_list_free(NULL);
    te_db_job_list_free(NULL);
    assert_string_equal(te_db_errmsg(NULL), "out of memory");
    te_db_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_new_database_has_schema_wal_and_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(test_record_best_topk_history, setup, teardown),
        cmocka_unit_test_setup_teardown(test_invalid_trials_are_rejected_and_batches_are_atomic,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_trials_are_append_only, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fallback_only_when_asked_and_reported, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_system_tier_read_first_user_and_never_written, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_jobs_progress_finish_resume_and_dead_ones, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_prune_by_age_and_status_keeps_best, setup, teardown),
        cmocka_unit_test_setup_teardown(test_check_reports_inconsistent_rows, setup, teardown),
        cmocka_unit_test_setup_teardown(test_check_finds_schema_damage_and_contradicting_rows,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_summary_and_argument_checks, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

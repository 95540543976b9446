/* Tests for tuning on a cluster (docs/CLUSTER.md), the parts that need no scheduler:
 *  - shard assignment is 64-bit FNV-1a of the workload key modulo the shard count: fixed keys
 *    land in fixed shards (expected values computed outside Tessera and written down here);
 *  - the shards of a task list partition it (every task in exactly one shard, whatever the
 *    order of the list), and every shard refuses the same malformed or duplicated lists;
 *  - a retried shard resumes rather than re-measures: rerunning a finished shard with
 *    `--resume` measures nothing, and a shard killed mid-run whose job still reads running (as
 *    when the retry lands on another machine) continues its job to the budget without
 *    measuring any configuration twice, while a job alive on this host is never taken over;
 *  - `tessera db merge` of databases from different targets keeps them apart: each target's
 *    best stays its own.
 * The scheduler itself (Slurm job array, requeue, afterany merge) is tests/cluster/slurm_test.sh.
 */
#define _GNU_SOURCE

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tessera/tuner.h"
#include "tessera/tuning_db.h"
#include "testutil.h"

#ifndef TESSERA_CLI
#error "TESSERA_CLI (path of the tessera binary) must be defined by tests/cluster.cmake"
#endif

TT_TMPDIR_FIXTURE("cluster")

static te_db *open_db(const char *name)
{
    te_db *db = NULL;
    int rc = te_db_open(path(name), NULL, &db);
    if (rc != TE_OK)
        fprintf(stderr, "open %s: %s\n", name, te_db_errmsg(db));
    assert_int_equal(rc, TE_OK);
    return db;
}

/* Runs `tessera ARGS` in the test directory; its exit status (-1 when it did not exit). */
static int cli(const char *fmt, ...)
{
    char args[2048], cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd,
             "cd '%s' && TESSERA_CACHE_DIR='%s/kcache' '%s' %s >'%s/out.txt' 2>'%s/err.txt'", dir,
             dir, TESSERA_CLI, args, dir, dir);
    int ws = system(cmd);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

static void write_file(const char *name, const char *text)
{
    FILE *f = fopen(path(name), "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* ---- Shard assignment ------------------------------------------------------------------- */

static void test_shard_of_a_key_is_fixed(void **state)
{
    (void)state;
    /* The published FNV-1a 64 test vectors, then workload keys hashed by an independent
     * implementation (Python: h ^= byte; h = h * 0x100000001b3 mod 2^64 from 0xcbf29ce484222325).
     */
    static const struct {
        const char *key;
        uint64_t hash;
        int shard[4]; /* of 2, 3, 4 and 7 shards */
    } cases[] = {
        {"", 0xcbf29ce484222325ull, {1, 2, 1, 2}},
        {"a", 0xaf63dc4c8601ec8cull, {0, 1, 0, 5}},
        {"foobar", 0x85944171f73967e8ull, {0, 0, 0, 6}},
        {"relu;m=8,n=64;f32", 0xd3e30fd4ca4db411ull, {1, 1, 1, 4}},
        {"softmax;m=8,n=32;f32", 0xafba14de960589d8ull, {0, 1, 0, 1}},
        {"matmul;k=1024,m=1024,n=1024;f32", 0x8f78045610a93290ull, {0, 0, 0, 6}},
    };
    static const int ns[4] = {2, 3, 4, 7};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_true(te_tuner_shard_hash(cases[i].key) == cases[i].hash);
        assert_int_equal(te_tuner_shard_of(cases[i].key, 1), 0);
        for (int j = 0; j < 4; j++)
            assert_int_equal(te_tuner_shard_of(cases[i].key, ns[j]), cases[i].shard[j]);
    }
    assert_true(te_tuner_shard_hash(NULL) == 0xcbf29ce484222325ull);
    assert_int_equal(te_tuner_shard_of(NULL, 4), TE_ERR_ARG);
    assert_int_equal(te_tuner_shard_of("a", 0), TE_ERR_ARG);
    assert_int_equal(te_tuner_shard_of("a", -3), TE_ERR_ARG);
}

#define NTASKS 12
static const char *const task_ops[NTASKS][2] = {
    {"relu", "m=8,n=64"}, {"relu", "m=16,n=32"}, {"softmax", "m=8,n=32"},  {"softmax", "m=4,n=64"},
    {"gelu", "m=8,n=32"}, {"silu", "m=8,n=64"},  {"sigmoid", "m=4,n=32"},  {"tanh", "m=8,n=16"},
    {"relu", "m=4,n=4"},  {"gelu", "m=16,n=16"}, {"softmax", "m=16,n=16"}, {"tanh", "m=16,n=32"},
};

/* Writes the task list in the given order (reversed when rev). */
static void write_tasks(const char *name, int rev)
{
    char text[4096];
    size_t len = 0;
    len += (size_t)snprintf(text + len, sizeof text - len, "[");
    for (int j = 0; j < NTASKS; j++) {
        int i = rev ? NTASKS - 1 - j : j;
        len +=
            (size_t)snprintf(text + len, sizeof text - len, "%s{\"op\": \"%s\", \"shape\": \"%s\"}",
                             j ? ",\n " : "", task_ops[i][0], task_ops[i][1]);
    }
    snprintf(text + len, sizeof text - len, "]\n");
    write_file(name, text);
}

/* The keys shard i/n of a list gets, as one string "key\n..." in list order. */
static void shard_keys(const char *list, int i, int n, char *out, size_t size, int *count)
{
    te_tuner *t = te_tuner_create(NULL, NULL);
    assert_non_null(t);
    int added = -1;
    assert_int_equal(te_tuner_add_tasks_file(t, path(list), i, n, &added), TE_OK);
    assert_int_equal(added, te_tuner_ntasks(t));
    out[0] = 0;
    size_t len = 0;
    for (int k = 0; k < te_tuner_ntasks(t); k++) {
        te_tune_task_info ti;
        assert_int_equal(te_tuner_task_info(t, k, &ti), TE_OK);
        /* Its shard is the key's, nothing else. */
        assert_int_equal(te_tuner_shard_of(ti.workload_key, n), n > 1 ? i : 0);
        len += (size_t)snprintf(out + len, size - len, "%s\n", ti.workload_key);
    }
    *count = added;
    te_tuner_free(t);
}

static void test_shards_partition_the_task_list(void **state)
{
    (void)state;
    write_tasks("tasks.json", 0);
    write_tasks("reversed.json", 1);
    char all[4096];
    int n_all;
    shard_keys("tasks.json", 0, 1, all, sizeof all, &n_all);
    assert_int_equal(n_all, NTASKS);
    static const int ns[] = {2, 3, 4, 5, 12, 40};
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
        int n = ns[a], total = 0, nonempty = 0;
        int seen[NTASKS] = {0};
        for (int i = 0; i < n; i++) {
            char keys[4096], rkeys[4096];
            int c, rc;
            shard_keys("tasks.json", i, n, keys, sizeof keys, &c);
            shard_keys("reversed.json", i, n, rkeys, sizeof rkeys, &rc);
            /* The same tasks whatever the order of the list. */
            assert_int_equal(c, rc);
            for (char *p = keys; *p;) {
                char *e = strchr(p, '\n');
                *e = 0;
                char line[4200];
                snprintf(line, sizeof line, "%s\n", p);
                assert_non_null(strstr(rkeys, line));
                const char *hit = strstr(all, line);
                assert_non_null(hit);
                int idx = 0;
                for (const char *q = all; q < hit; q++)
                    idx += *q == '\n';
                seen[idx]++;
                p = e + 1;
            }
            total += c;
            nonempty += c > 0;
        }
        /* Every task in exactly one shard. */
        assert_int_equal(total, NTASKS);
        for (int k = 0; k < NTASKS; k++)
            assert_int_equal(seen[k], 1);
        /* All shards added to one tuner, one after the other: the whole list. */
        te_tuner *t = te_tuner_create(NULL, NULL);
        for (int i = 0; i < n; i++)
            assert_int_equal(te_tuner_add_tasks_file(t, path("tasks.json"), i, n, NULL), TE_OK);
        assert_int_equal(te_tuner_ntasks(t), NTASKS);
        /* ... and a shard once more: its tasks are duplicates. */
        int s0 = te_tuner_shard_of("relu;m=8,n=64;f32", n);
        assert_int_equal(te_tuner_add_tasks_file(t, path("reversed.json"), s0, n, NULL),
                         TE_ERR_ARG);
        assert_non_null(strstr(te_tuner_errmsg(t), "listed twice"));
        te_tuner_free(t);
        printf("  %d shards: %d non-empty\n", n, nonempty);
        assert_true(nonempty >= (n < NTASKS ? 2 : 4)); /* a hash, not everything in one shard */
    }
}

static void test_every_shard_refuses_a_bad_list(void **state)
{
    (void)state;
    /* A duplicate and a malformed entry are refused by every shard, also by the shards the
     * entries do not belong to. */
    write_file("dup.json", "[{\"op\": \"relu\", \"shape\": \"m=8,n=64\"},\n"
                           " {\"op\": \"softmax\", \"shape\": \"m=8,n=32\"},\n"
                           " {\"op\": \"relu\", \"shape\": \"n=64,m=8\"}]\n");
    write_file("bad.json", "[{\"op\": \"relu\", \"shape\": \"m=8,n=64\"}, {\"shape\": \"m=2\"}]");
    write_file("badop.json", "[{\"op\": \"relu\", \"shape\": \"m=8,n=64\"},"
                             " {\"op\": \"nosuchop\", \"shape\": \"m=2\"}]");
    for (int n = 1; n <= 4; n++)
        for (int i = 0; i < n; i++) {
            te_tuner *t = te_tuner_create(NULL, NULL);
            assert_int_equal(te_tuner_add_tasks_file(t, path("dup.json"), i, n, NULL), TE_ERR_ARG);
            assert_non_null(strstr(te_tuner_errmsg(t), "task 2"));
            assert_non_null(strstr(te_tuner_errmsg(t), "listed twice"));
            te_tuner_free(t);
            t = te_tuner_create(NULL, NULL);
            assert_int_equal(te_tuner_add_tasks_file(t, path("bad.json"), i, n, NULL), TE_ERR_ARG);
            assert_non_null(strstr(te_tuner_errmsg(t), "task 1"));
            te_tuner_free(t);
            t = te_tuner_create(NULL, NULL);
            assert_int_equal(te_tuner_add_tasks_file(t, path("badop.json"), i, n, NULL),
                             TE_ERR_ARG);
            assert_non_null(strstr(te_tuner_errmsg(t), "nosuchop"));
            te_tuner_free(t);
        }
    /* The command line: an empty shard is fine (exit 0), a bad list a usage error in every
     * shard. */
    write_file("one.json", "[{\"op\": \"relu\", \"shape\": \"m=8,n=64\"}]");
    /* relu;m=8,n=64;f32 is in shard 1 of 2 (test_shard_of_a_key_is_fixed). */
    assert_int_equal(cli("tune --tasks one.json --shard 0/2 --trials 4 --db empty.db"), 0);
    struct stat st;
    assert_true(stat(path("empty.db"), &st) != 0); /* nothing to tune: no database made */
    for (int i = 0; i < 2; i++)
        assert_int_equal(cli("tune --tasks dup.json --shard %d/2 --trials 4 --db dup.db", i), 2);
}

/* ---- Retries resume ---------------------------------------------------------------------- */

typedef struct {
    int64_t trials, distinct, jobs, job_trials;
    char job_status[32];
} db_counts;

/* Counts of a shard database, read with plain SQLite: every trial, distinct (workload, trace)
 * pairs, jobs, and the first job's trials_done and status. */
static db_counts count(const char *name)
{
    db_counts c = {0};
    sqlite3 *h = NULL;
    assert_int_equal(sqlite3_open_v2(path(name), &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_busy_timeout(h, 10000); /* a tuner may be creating the file or writing it */
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(h,
                                        "SELECT (SELECT count(*) FROM trials), "
                                        "(SELECT count(*) FROM (SELECT DISTINCT workload_id, "
                                        "trace_hash FROM trials)), (SELECT count(*) FROM jobs), "
                                        "(SELECT trials_done FROM jobs ORDER BY id LIMIT 1), "
                                        "(SELECT status FROM jobs ORDER BY id LIMIT 1)",
                                        -1, &st, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    c.trials = sqlite3_column_int64(st, 0);
    c.distinct = sqlite3_column_int64(st, 1);
    c.jobs = sqlite3_column_int64(st, 2);
    c.job_trials = sqlite3_column_int64(st, 3);
    const unsigned char *s = sqlite3_column_text(st, 4);
    snprintf(c.job_status, sizeof c.job_status, "%s", s ? (const char *)s : "");
    sqlite3_finalize(st);
    sqlite3_close(h);
    return c;
}

/* Trials in a database a tuner may still be creating: -1 while it has none to show. */
static int64_t poll_trials(const char *name)
{
    sqlite3 *h = NULL;
    sqlite3_stmt *st = NULL;
    int64_t n = -1;
    if (sqlite3_open_v2(path(name), &h, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(h, "SELECT count(*) FROM trials", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(h);
    return n;
}

static void check_db(const char *name)
{
    te_db *db = open_db(name);
    char *report = NULL;
    int rc = te_db_check(db, &report);
    if (rc != TE_OK)
        printf("  %s: %s\n", name, report);
    assert_int_equal(rc, TE_OK);
    free(report);
    te_db_close(db);
}

/* Two tiny tasks, both in shard 0 of 2 (softmax;m=8,n=32;f32 and tanh;m=8,n=64;f32). */
static const char *const shard_tasks = "[{\"op\": \"softmax\", \"shape\": \"m=8,n=32\"},\n"
                                       " {\"op\": \"relu\", \"shape\": \"m=8,n=64\"},\n"
                                       " {\"op\": \"tanh\", \"shape\": \"m=8,n=64\"}]\n";

static void test_rerun_of_a_finished_shard_measures_nothing(void **state)
{
    (void)state;
    write_file("shard.json", shard_tasks);
    assert_int_equal(te_tuner_shard_of("softmax;m=8,n=32;f32", 2), 0);
    assert_int_equal(te_tuner_shard_of("tanh;m=8,n=64;f32", 2), 0);
    assert_int_equal(te_tuner_shard_of("relu;m=8,n=64;f32", 2), 1);
    const char *args = "tune --tasks shard.json --shard 0/2 --trials 8 --batch 4 --strategy random "
                       "--db finished.db --resume --quiet";
    assert_int_equal(cli("%s", args), 0);
    db_counts a = count("finished.db");
    printf("  first run: %lld trials\n", (long long)a.trials);
    assert_int_equal(a.trials, 8);
    assert_int_equal(a.jobs, 1);
    assert_string_equal(a.job_status, "finished");
    /* The retry (same command, as a scheduler reruns it): the same job, nothing measured. */
    assert_int_equal(cli("%s --json", args), 0);
    db_counts b = count("finished.db");
    assert_int_equal(b.trials, 8);
    assert_int_equal(b.jobs, 1);
    assert_int_equal(b.job_trials, 8);
    assert_string_equal(b.job_status, "finished");
    FILE *f = fopen(path("out.txt"), "r");
    assert_non_null(f);
    char out[16384];
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = 0;
    fclose(f);
    assert_non_null(strstr(out, "\"resumed\": true"));
    assert_non_null(strstr(out, "\"stop\": \"finished before\""));
    assert_null(strstr(out, "relu;"));                  /* the other shard's task */
    assert_non_null(strstr(out, "\"best_trace\": \"")); /* the best records are reported */
    /* Without --resume a finished command starts a new job (tuning more is a rerun). */
    assert_int_equal(cli("tune --tasks shard.json --shard 0/2 --trials 8 --batch 4 --strategy "
                         "random --db finished.db --quiet"),
                     0);
    db_counts c = count("finished.db");
    assert_int_equal(c.jobs, 2);
    assert_int_equal(c.trials, 16);
    assert_int_equal(c.distinct, 16); /* ... and never measures a configuration twice */
    check_db("finished.db");
}

static void test_killed_shard_resumes_to_its_budget_once(void **state)
{
    (void)state;
    write_file("shard.json", shard_tasks);
    const char *args =
        "tune --tasks shard.json --shard 0/2 --trials 24 --batch 4 --strategy random "
        "--seed 5 --db killed.db --resume --quiet";
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "exec env TESSERA_CACHE_DIR='%s' '%s' %s >/dev/null 2>&1",
             path("kcache-killed"), TESSERA_CLI, args);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (chdir(dir) != 0)
            _exit(127);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    /* Kill it once its first batch is recorded. */
    int64_t seen = 0;
    struct stat st;
    for (double t0 = tt_now_s(); tt_now_s() - t0 < 120 && seen < 4;) {
        usleep(20000);
        if (stat(path("killed.db"), &st) == 0)
            seen = poll_trials("killed.db");
    }
    kill(pid, SIGKILL);
    int ws;
    waitpid(pid, &ws, 0);
    db_counts a = count("killed.db");
    printf("  killed after %lld trials\n", (long long)a.trials);
    assert_true(a.trials >= 4 && a.trials < 24);
    /* The retry lands on another machine: the killed job still reads running there. */
    sqlite3 *h = NULL;
    assert_int_equal(sqlite3_open(path("killed.db"), &h), SQLITE_OK);
    assert_int_equal(
        sqlite3_exec(h, "UPDATE jobs SET host = 'another-node', pid = 1", NULL, NULL, NULL),
        SQLITE_OK);
    sqlite3_close(h);
    te_db *db = open_db("killed.db");
    te_db_job_list *jl = NULL;
    assert_int_equal(te_db_jobs(db, 0, &jl), TE_OK);
    assert_int_equal(jl->n, 1);
    assert_int_equal(jl->items[0].status, TE_JOB_RUNNING);
    te_db_job_list_free(jl);
    te_db_close(db);
    /* The retry continues that job to its budget: only the missing trials, none twice. */
    assert_int_equal(cli("%s", args), 0);
    db_counts b = count("killed.db");
    printf("  after the retry: %lld trials, %lld distinct, %lld job(s)\n", (long long)b.trials,
           (long long)b.distinct, (long long)b.jobs);
    assert_int_equal(b.jobs, 1);
    assert_int_equal(b.trials, 24);
    assert_int_equal(b.distinct, 24);
    assert_int_equal(b.job_trials, 24);
    assert_string_equal(b.job_status, "finished");
    /* A second retry measures nothing. */
    assert_int_equal(cli("%s", args), 0);
    assert_int_equal(count("killed.db").trials, 24);
    check_db("killed.db");
}

static void test_resume_never_takes_over_a_live_job_here(void **state)
{
    (void)state;
    write_file("shard.json", shard_tasks);
    const char *args = "tune --tasks shard.json --shard 0/2 --trials 8 --batch 4 --strategy random "
                       "--db live.db --resume --quiet";
    assert_int_equal(cli("%s", args), 0);
    /* Make its job look alive on this host: running, with this test's pid. */
    char host[256] = "", sql[512];
    gethostname(host, sizeof host - 1);
    snprintf(sql, sizeof sql,
             "UPDATE jobs SET status = 'running', ended_us = NULL, host = '%s', pid = %d", host,
             (int)getpid());
    sqlite3 *h = NULL;
    assert_int_equal(sqlite3_open(path("live.db"), &h), SQLITE_OK);
    assert_int_equal(sqlite3_exec(h, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(h);
    /* The rerun leaves it alone and starts a job of its own, which measures new configurations
     * only. */
    assert_int_equal(cli("%s", args), 0);
    db_counts c = count("live.db");
    assert_int_equal(c.jobs, 2);
    assert_string_equal(c.job_status, "running"); /* the first job, untouched */
    assert_int_equal(c.trials, 16);
    assert_int_equal(c.distinct, 16);
}

/* ---- Merging across targets --------------------------------------------------------------- */

static const char *const wkey = "softmax;m=8,n=32;f32";

static void record(te_db *db, const char *device, const char *trace, double median_s)
{
    te_db_trial r = {
        .workload = {.key = wkey, .op = "softmax", .shapes = "{\"m\":8,\"n\":32}", .flops = 1e3},
        .target = {.backend = "c",
                   .arch = "x86_64",
                   .device = device,
                   .features = "avx2,fma",
                   .cores = 2,
                   .compiler = "gcc 12.2.0"},
        .trace = trace,
        .status = TE_TRIAL_OK,
        .median_s = median_s,
        .spread_s = median_s * 0.01,
        .repeats = 5,
        .gflops = 1e3 / median_s * 1e-9,
    };
    assert_int_equal(te_db_record_trial(db, &r, NULL), TE_OK);
}

static void expect_best(te_db *db, const char *device, double median_s, const char *trace)
{
    te_db_target t = {.backend = "c",
                      .arch = "x86_64",
                      .device = device,
                      .features = "avx2,fma",
                      .cores = 2,
                      .compiler = "gcc 12.2.0"};
    char key[512];
    te_db_target_key(&t, key, sizeof key);
    for (int flags = 0; flags <= TE_DB_FALLBACK; flags += TE_DB_FALLBACK) {
        te_db_trial_list *l = NULL;
        assert_int_equal(te_db_best(db, wkey, &t, flags | TE_DB_USER_ONLY, &l), TE_OK);
        assert_int_equal(l->n, 1);
        assert_true(l->items[0].median_s == median_s);
        assert_string_equal(l->items[0].trace, trace);
        assert_string_equal(l->items[0].target.key, key);
        assert_int_equal(l->items[0].exact_target, 1);
        te_db_trial_list_free(l);
    }
}

static void test_merge_keeps_targets_apart(void **state)
{
    (void)state;
    /* Machine A is slow, machine B fast, on the same workload. */
    te_db *a = open_db("a.db");
    record(a, "cpu A", "split softmax i1 8\n", 2e-3);
    record(a, "cpu A", "split softmax i1 16\n", 1e-3);
    te_db_close(a);
    te_db *b = open_db("b.db");
    record(b, "cpu B", "split softmax i1 4\n", 0.5e-3);
    record(b, "cpu B", "split softmax i1 32\n", 0.8e-3);
    te_db_close(b);
    assert_int_equal(cli("db merge a.db b.db --db merged.db"), 0);
    assert_int_equal(cli("db merge b.db --db a.db"), 0);
    static const char *const merged[] = {"merged.db", "a.db"};
    for (int i = 0; i < 2; i++) {
        te_db *db = open_db(merged[i]);
        te_db_info info;
        assert_int_equal(te_db_get_info(db, &info), TE_OK);
        assert_int_equal(info.n_trials, 4);
        assert_int_equal(info.n_targets, 2);
        assert_int_equal(info.n_workloads, 1);
        /* Each target keeps its own best: B's faster record never becomes A's. */
        expect_best(db, "cpu A", 1e-3, "split softmax i1 16\n");
        expect_best(db, "cpu B", 0.5e-3, "split softmax i1 4\n");
        te_db_close(db);
        check_db(merged[i]);
        /* The command line shows one best per target. */
        assert_int_equal(cli("db best --workload '%s' --json --db %s", wkey, merged[i]), 0);
        FILE *f = fopen(path("out.txt"), "r");
        char out[8192];
        size_t n = fread(out, 1, sizeof out - 1, f);
        out[n] = 0;
        fclose(f);
        assert_non_null(strstr(out, "cpu A"));
        assert_non_null(strstr(out, "cpu B"));
        assert_non_null(strstr(out, "split softmax i1 16"));
        assert_non_null(strstr(out, "split softmax i1 4"));
        assert_null(strstr(out, "split softmax i1 8\\n"));
        assert_null(strstr(out, "split softmax i1 32"));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shard_of_a_key_is_fixed),
        cmocka_unit_test(test_shards_partition_the_task_list),
        cmocka_unit_test(test_every_shard_refuses_a_bad_list),
        cmocka_unit_test(test_rerun_of_a_finished_shard_measures_nothing),
        cmocka_unit_test(test_killed_shard_resumes_to_its_budget_once),
        cmocka_unit_test(test_resume_never_takes_over_a_live_job_here),
        cmocka_unit_test(test_merge_keeps_targets_apart),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

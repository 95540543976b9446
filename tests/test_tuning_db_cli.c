/* `tessera db`: exit statuses (0 ok / 1 failed / 2 bad usage), --help everywhere, --json that
 * parses, export/import/merge through the command line. Runs the real binary (TESSERA_CLI). */
#include "test_tuning_db_common.h"

#include <grp.h>
#include <pwd.h>
#include <sys/wait.h>

#include <sqlite3.h>

#include "tuning_db/json.h"

#ifndef TESSERA_CLI
#error "TESSERA_CLI (path of the tessera binary) must be defined by tests/tuning_db.cmake"
#endif

static char dir[256], db_file[320], out_file[320], err_file[320];
static char *out_text, *err_text;

static int setup(void **state)
{
    (void)state;
    tdb_mkdtemp(dir, sizeof dir);
    tdb_path(db_file, sizeof db_file, dir, "cli.db");
    tdb_path(out_file, sizeof out_file, dir, "stdout");
    tdb_path(err_file, sizeof err_file, dir, "stderr");
    unsetenv("TESSERA_SYSTEM_DB");
    unsetenv("TESSERA_DB");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    free(out_text);
    free(err_text);
    out_text = err_text = NULL;
    tdb_rmdir(dir);
    return 0;
}

/* Runs `tessera <args>` through the shell; returns its exit status, keeps stdout/stderr. */
static int cli(const char *fmt, ...)
{
    char args[2048], cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' %s >'%s' 2>'%s'", dir, TESSERA_CLI, args, out_file,
             err_file);
    int ws = system(cmd);
    assert_true(WIFEXITED(ws));
    size_t n;
    free(out_text);
    free(err_text);
    out_text = (char *)tdb_slurp(out_file, &n);
    out_text = realloc(out_text, n + 1);
    out_text[n] = '\0';
    err_text = (char *)tdb_slurp(err_file, &n);
    err_text = realloc(err_text, n + 1);
    err_text[n] = '\0';
    return WEXITSTATUS(ws);
}

/* Every non-empty line of stdout is one valid JSON value; returns the count. */
static int json_lines(void)
{
    int n = 0;
    for (char *p = out_text; *p;) {
        char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (len) {
            if (!te__json_valid(p, len))
                fail_msg("not JSON: %.*s", (int)len, p);
            n++;
        }
        p += len + (nl != NULL);
    }
    return n;
}

static void seed(void)
{
    te_db *db = tdb_open(db_file, 0);
    int64_t job;
    assert_int_equal(te_db_job_start(db, "tessera tune matmul", 3, &job), TE_OK);
    te_db_trial t[3] = {tdb_trial("fast", 1e-3), tdb_trial("slow", 2e-3), tdb_trial("bad", 0)};
    t[2].status = TE_TRIAL_TIMEOUT;
    for (int i = 0; i < 3; i++)
        t[i].job_id = job;
    assert_int_equal(te_db_record_trials(db, t, 3), TE_OK);
    assert_int_equal(te_db_job_finish(db, job, TE_JOB_FINISHED), TE_OK);
    te_db_close(db);
}

/* Runs fn in a forked child without root's powers: as `nobody` when the test runs as root
 * (as in CI), else as the current (non-root) user. Returns the child's exit status, or -1 when
 * no unprivileged user is available. */
static int as_unprivileged(int (*fn)(void))
{
    struct passwd *pw = getuid() == 0 ? getpwnam("nobody") : NULL;
    if (getuid() == 0 && !pw)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (pw && (setgroups(0, NULL) != 0 || setgid(pw->pw_gid) != 0 || setuid(pw->pw_uid) != 0))
            _exit(77);
        _exit(fn());
    }
    int ws = 0;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    assert_true(WIFEXITED(ws));
    return WEXITSTATUS(ws);
}

/* In the unprivileged child: queries of a database in a read-only directory. */
static int query_read_only_directory(void)
{
    if (access(dir, W_OK) == 0 || access(db_file, R_OK) != 0)
        return 77; /* still privileged (capabilities), or TMPDIR not reachable */
    int bad = 0;
    te_db *db = NULL;
    te_db_options o = {.flags = TE_DB_READONLY | TE_DB_NO_SYSTEM};
    int rc = te_db_open(db_file, &o, &db);
    te_db_trial_list *l = NULL;
    if (rc != TE_OK) {
        fprintf(stderr, "read-only open: %s\n", te_db_errmsg(db));
        bad = 1;
    } else if (te_db_best(db, TDB_MATMUL, &tdb_cpu, 0, &l) != TE_OK || l->n != 1) {
        fprintf(stderr, "best: %s\n", te_db_errmsg(db));
        bad = 1;
    } else if (te_db_check(db, NULL) != TE_OK) {
        fprintf(stderr, "check: %s\n", te_db_errmsg(db));
        bad = 1;
    }
    te_db_trial_list_free(l);
    te_db_close(db);
    /* A read-write open says why it cannot write, instead of SQLite's "attempt to write a
     * readonly database" halfway through opening. */
    o.flags = TE_DB_NO_SYSTEM;
    rc = te_db_open(db_file, &o, &db);
    if (rc != TE_ERR_READONLY || strstr(te_db_errmsg(db), "attempt to write") ||
        !strstr(te_db_errmsg(db), "read")) {
        fprintf(stderr, "read-write open: %d %s\n", rc, te_db_errmsg(db));
        bad = 1;
    }
    te_db_close(db);
    /* The CLI's read commands. */
    const char *cmds[] = {
        "info",   "list", "best -w '" TDB_MATMUL "'", "history -w '" TDB_MATMUL "'", "jobs",
        "export", "check"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "'%s' db %s --db '%s' >/dev/null 2>/tmp/tessera-ro-%d.err",
                 TESSERA_CLI, cmds[i], db_file, (int)getpid());
        int ws = system(cmd);
        if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
            char show[1200];
            snprintf(show, sizeof show, "cat /tmp/tessera-ro-%d.err >&2", (int)getpid());
            fprintf(stderr, "tessera db %s failed:\n", cmds[i]);
            if (system(show) != 0)
                fprintf(stderr, "(no stderr)\n");
            bad = 1;
        }
    }
    char err[64];
    snprintf(err, sizeof err, "/tmp/tessera-ro-%d.err", (int)getpid());
    unlink(err);
    return bad;
}

/* A database in a directory the user cannot write (a shared, read-only location): every query
 * works, read-only, and leaves no file behind. */
static void test_read_only_directory_is_queryable(void **state)
{
    (void)state;
    seed();
    assert_int_equal(chmod(db_file, 0644), 0);
    assert_int_equal(chmod(dir, 0555), 0);
    int rc = as_unprivileged(query_read_only_directory);
    assert_int_equal(chmod(dir, 0700), 0);
    if (rc == -1 || rc == 77) {
        fprintf(stderr, "skipped: no unprivileged user to run as (need `nobody` when root)\n");
        skip();
    }
    assert_int_equal(rc, 0);
    char p[400];
    snprintf(p, sizeof p, "%s-shm", db_file);
    assert_false(tdb_exists(p));
    snprintf(p, sizeof p, "%s-wal", db_file);
    assert_false(tdb_exists(p));
}

/* `tessera db check` on a database whose `best` view and append-only trigger were dropped and
 * whose target row contradicts its key: every problem on stdout, exit status 1. */
static void test_check_reports_every_problem_and_exits_1(void **state)
{
    (void)state;
    seed();
    assert_int_equal(cli("db check --db cli.db"), 0);
    sqlite3 *h;
    assert_int_equal(sqlite3_open(db_file, &h), SQLITE_OK);
    assert_int_equal(sqlite3_exec(h,
                                  "DROP VIEW best; DROP TRIGGER trials_append_only; "
                                  "UPDATE trials SET median_s = 1e-9 WHERE trace = 'fast'; "
                                  "UPDATE targets SET compiler = 'clang 18'",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(h);
    assert_int_equal(cli("db check --db cli.db"), 1);
    const char *needles[] = {"view 'best' is missing", "trigger 'trials_append_only' is missing",
                             "1 trials whose GFLOP/s disagree", "compiler column 'clang 18'"};
    for (size_t i = 0; i < sizeof needles / sizeof needles[0]; i++)
        if (!strstr(out_text, needles[i]))
            fail_msg("check output lacks '%s':\n%s", needles[i], out_text);
    assert_int_equal(cli("db check --db cli.db --json"), 1);
    assert_int_equal(json_lines(), 1);
    assert_non_null(strstr(out_text, "\"ok\":false"));
}

static void test_usage_errors_exit_2_and_help_exits_0(void **state)
{
    (void)state;
    assert_int_equal(cli("db"), 2);
    assert_non_null(strstr(err_text, "usage: tessera db"));
    assert_int_equal(cli("db frobnicate"), 2);
    assert_non_null(strstr(err_text, "unknown subcommand 'frobnicate'"));
    assert_int_equal(cli("db info --bogus"), 2);
    assert_non_null(strstr(err_text, "unknown option '--bogus'"));
    assert_non_null(strstr(err_text, "usage: tessera db info"));
    assert_int_equal(cli("db info --db"), 2);
    assert_non_null(strstr(err_text, "needs a value"));
    assert_int_equal(cli("db best"), 2);
    assert_int_equal(cli("db best -w x --top zero"), 2);
    assert_int_equal(cli("db prune"), 2);
    assert_int_equal(cli("db prune --status slow"), 2);
    assert_int_equal(cli("db import"), 2);
    assert_int_equal(cli("db list extra"), 2);
    assert_int_equal(cli("db info --json=yes"), 2);
    assert_int_equal(cli("db --help"), 0);
    assert_non_null(strstr(out_text, "subcommands:"));
    static const char *subs[] = {"info",   "list",  "best",  "history", "jobs",        "export",
                                 "import", "merge", "prune", "check",   "bench-insert"};
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
        if (cli("db %s --help", subs[i]) != 0)
            fail_msg("tessera db %s --help failed", subs[i]);
        assert_non_null(strstr(out_text, "usage: tessera db"));
        assert_non_null(strstr(out_text, "--db FILE"));
    }
    /* Nothing above created a database. */
    assert_false(tdb_exists(db_file));
    char dflt[400];
    tdb_path(dflt, sizeof dflt, dir, "tessera.db");
    assert_false(tdb_exists(dflt));
}

/* One option parser serves every subcommand: the same mistakes get the same messages, exit
 * status 2 and the subcommand's usage, and nothing is opened or created. */
static void test_every_subcommand_parses_options_alike(void **state)
{
    (void)state;
    static const char *subs[] = {"info",   "list",  "best",  "history", "jobs",        "export",
                                 "import", "merge", "prune", "check",   "bench-insert"};
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
        char usage[64];
        snprintf(usage, sizeof usage, "usage: tessera db %s", subs[i]);
        assert_int_equal(cli("db %s --bogus", subs[i]), 2);
        assert_non_null(strstr(err_text, "unknown option '--bogus'"));
        assert_non_null(strstr(err_text, usage));
        assert_int_equal(cli("db %s --db", subs[i]), 2);
        assert_non_null(strstr(err_text, "option '--db' needs a value"));
        assert_int_equal(cli("db %s --json=yes", subs[i]), 2);
        assert_non_null(strstr(err_text, "option '--json=yes' takes no value"));
        assert_int_equal(cli("db %s --js", subs[i]), 2); /* long names are exact */
        assert_non_null(strstr(err_text, "unknown option '--js'"));
        assert_int_equal(cli("db %s -q", subs[i]), 2);
        assert_non_null(strstr(err_text, "unknown option '-q'"));
        assert_int_equal(cli("db %s -h", subs[i]), 0);
        assert_non_null(strstr(out_text, usage));
    }
    assert_int_equal(cli("db list --db cli.db stray"), 2);
    assert_non_null(strstr(err_text, "unexpected argument 'stray'"));
    assert_int_equal(cli("db history -w"), 2);
    assert_non_null(strstr(err_text, "option '-w' needs a value"));
    assert_int_equal(cli("db jobs --id=0"), 2);
    assert_non_null(strstr(err_text, "bad number for --id"));
    assert_false(tdb_exists(db_file));
}

static void test_failures_exit_1_with_a_message(void **state)
{
    (void)state;
    assert_int_equal(cli("db info --db missing.db"), 1);
    assert_non_null(strstr(err_text, "missing.db"));
    assert_false(tdb_exists("missing.db"));
    tdb_write(db_file, "not a database at all", 21);
    assert_int_equal(cli("db list --db cli.db"), 1);
    assert_non_null(strstr(err_text, "not an SQLite database"));
    assert_int_equal(cli("db import --db new.db no-such-file.jsonl"), 1);
}

static void test_queries_tables_and_json(void **state)
{
    (void)state;
    seed();
    assert_int_equal(cli("db info --db cli.db"), 0);
    char version[32];
    snprintf(version, sizeof version, "schema version:  %d", TE_DB_SCHEMA_VERSION);
    assert_non_null(strstr(out_text, version));
    assert_non_null(strstr(out_text, "3 (2 ok)"));
    assert_int_equal(cli("db info --db cli.db --json"), 0);
    assert_int_equal(json_lines(), 1);
    assert_non_null(strstr(out_text, "\"trials\":3"));
    /* $TESSERA_DB is the default database. */
    assert_int_equal(cli("db info --json"), 1); /* ./tessera.db does not exist */
    setenv("TESSERA_DB", db_file, 1);
    assert_int_equal(cli("db info --json"), 0);
    unsetenv("TESSERA_DB");

    assert_int_equal(cli("db list --db cli.db"), 0);
    assert_non_null(strstr(out_text, "WORKLOAD"));
    assert_non_null(strstr(out_text, TDB_MATMUL));
    assert_int_equal(cli("db list --db cli.db --json"), 0);
    assert_int_equal(json_lines(), 1);
    assert_int_equal(cli("db list --db cli.db --workload conv --json"), 0);
    assert_int_equal(json_lines(), 0);

    assert_int_equal(cli("db best --db cli.db -w '%s'", TDB_MATMUL), 0);
    assert_non_null(strstr(out_text, "fast"));
    assert_null(strstr(out_text, "slow"));
    assert_int_equal(cli("db best --db cli.db -w '%s' -k 5 --json", TDB_MATMUL), 0);
    assert_int_equal(json_lines(), 2);
    assert_int_equal(cli("db best --db cli.db -w 'conv2d;x;f32'"), 1);
    /* Fallback is explicit and shown. */
    assert_int_equal(cli("db best --db cli.db -w '%s' -t 'c;x86_64;AMD EPYC;avx512f,avx2,fma;2 "
                         "cores;gcc 13.1.0'",
                         TDB_MATMUL),
                     1);
    assert_int_equal(cli("db best --db cli.db -w '%s' -t 'c;x86_64;AMD EPYC;avx512f,avx2,fma;2 "
                         "cores;gcc 13.1.0' --fallback",
                         TDB_MATMUL),
                     0);
    assert_non_null(strstr(out_text, "(fallback)"));
    assert_int_equal(cli("db best --db cli.db -w '%s' -t 'c;x86_64;AMD EPYC;avx512f,avx2,fma;2 "
                         "cores;gcc 13.1.0' --fallback --json",
                         TDB_MATMUL),
                     0);
    assert_non_null(strstr(out_text, "\"exact_target\":false"));

    assert_int_equal(cli("db history --db cli.db -w '%s' --json", TDB_MATMUL), 0);
    assert_int_equal(json_lines(), 3);
    assert_int_equal(cli("db history --db cli.db -w '%s' -n 1", TDB_MATMUL), 0);
    assert_non_null(strstr(out_text, "timeout"));
    assert_int_equal(cli("db jobs --db cli.db"), 0);
    assert_non_null(strstr(out_text, "finished"));
    assert_non_null(strstr(out_text, "3/3"));
    assert_int_equal(cli("db jobs --db cli.db --json"), 0);
    assert_int_equal(json_lines(), 1);
    assert_int_equal(cli("db check --db cli.db"), 0);
    assert_int_equal(cli("db check --db cli.db --json"), 0);
    assert_non_null(strstr(out_text, "\"ok\":true"));
    assert_int_equal(cli("db prune --db cli.db --status timeout --dry-run --json"), 0);
    assert_non_null(strstr(out_text, "\"deleted\":1"));
    assert_int_equal(cli("db prune --db cli.db --status timeout,wrong_answer"), 0);
    assert_int_equal(cli("db prune --db cli.db --older-than 0 --keep-best"), 0);
    assert_non_null(strstr(out_text, "deleted 1 trials"));
    assert_int_equal(cli("db info --db cli.db --json"), 0);
    assert_non_null(strstr(out_text, "\"trials\":1"));
}

static void test_export_import_merge_round_trip(void **state)
{
    (void)state;
    seed();
    assert_int_equal(cli("db export --db cli.db -o all.jsonl"), 0);
    assert_int_equal(cli("db export --db cli.db --json"), 0);
    assert_int_equal(json_lines(), 3);
    char *first = strdup(out_text);
    assert_int_equal(cli("db import --db copy.db all.jsonl --json"), 0);
    assert_non_null(strstr(out_text, "\"imported\":3"));
    assert_int_equal(cli("db export --db copy.db"), 0);
    assert_string_equal(out_text, first);
    free(first);
    /* stdin, duplicates skipped. */
    assert_int_equal(cli("db import --db copy.db - < all.jsonl"), 0);
    assert_non_null(strstr(out_text, "3 already present"));
    /* A malformed line: status 1, the line number, nothing imported. */
    char bad[400];
    tdb_path(bad, sizeof bad, dir, "bad.jsonl");
    FILE *f = fopen(bad, "w");
    size_t n;
    char *all = (char *)tdb_slurp(strcat(strcpy((char[400]){0}, dir), "/all.jsonl"), &n);
    fwrite(all, 1, n, f);
    fputs("{\"uid\": oops}\n", f);
    fclose(f);
    free(all);
    assert_int_equal(cli("db import --db fresh.db bad.jsonl"), 1);
    assert_non_null(strstr(err_text, "line 4"));
    assert_int_equal(cli("db info --db fresh.db --json"), 0);
    assert_non_null(strstr(out_text, "\"trials\":0"));
    /* Merge: the shard's trials once, however often merged. */
    assert_int_equal(cli("db merge --db fresh.db cli.db copy.db --json"), 0);
    assert_int_equal(json_lines(), 2);
    assert_non_null(strstr(out_text, "\"imported\":3"));
    assert_non_null(strstr(out_text, "\"duplicates\":3"));
    assert_int_equal(cli("db merge --db fresh.db fresh.db"), 1);
    assert_int_equal(cli("db bench-insert --trials 2000 --batch 500 --json"), 0);
    assert_int_equal(json_lines(), 1);
    assert_non_null(strstr(out_text, "trials_per_s"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_usage_errors_exit_2_and_help_exits_0, setup, teardown),
        cmocka_unit_test_setup_teardown(test_every_subcommand_parses_options_alike, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_failures_exit_1_with_a_message, setup, teardown),
        cmocka_unit_test_setup_teardown(test_queries_tables_and_json, setup, teardown),
        cmocka_unit_test_setup_teardown(test_export_import_merge_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_only_directory_is_queryable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_check_reports_every_problem_and_exits_1, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Files the database must refuse without changing a byte: garbage, non-SQLite, foreign SQLite,
 * truncated, read-only, missing directory, newer schema; and the forward migration of an older
 * schema, WAL off for network file systems. */
#include "test_tuning_db_common.h"

#include <sqlite3.h>

#include "tuning_db/schema.h"

TDB_FIXTURE("t.db", 1)

/* Opening `path` (read-write unless flags say otherwise) fails with `want`, its message contains
 * `needle`, and the file's bytes are exactly what they were. */
static void expect_refused(int flags, int want, const char *needle)
{
    size_t n0 = 0, n1 = 0;
    unsigned char *before = tdb_slurp(path, &n0);
    te_db *db = NULL;
    te_db_options o = {.flags = flags | TE_DB_NO_SYSTEM};
    int rc = te_db_open(path, &o, &db);
    if (rc != want)
        fail_msg("te_db_open: want %s, got %s (%s)", te_status_str(want), te_status_str(rc),
                 te_db_errmsg(db));
    if (!strstr(te_db_errmsg(db), needle))
        fail_msg("message '%s' lacks '%s'", te_db_errmsg(db), needle);
    te_db_close(db);
    unsigned char *after = tdb_slurp(path, &n1);
    assert_int_equal(n0, n1);
    if (n0)
        assert_memory_equal(before, after, n0);
    free(before);
    free(after);
}

/* A real Tessera database with enough rows to span many pages, closed cleanly. */
static void make_db(int n)
{
    te_db *db = tdb_open(path, 0);
    te_db_trial *t = calloc((size_t)n, sizeof *t);
    char(*traces)[48] = calloc((size_t)n, 48);
    for (int i = 0; i < n; i++) {
        snprintf(traces[i], 48, "trace-%d-padding-padding", i);
        t[i] = tdb_trial(traces[i], 1e-3 + i * 1e-6);
    }
    assert_int_equal(te_db_record_trials(db, t, (size_t)n), TE_OK);
    te_db_close(db);
    free(t);
    free(traces);
}

static void test_garbage_and_text_files_are_refused(void **state)
{
    (void)state;
    unsigned char junk[8192];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (unsigned char)(i * 131 + 7);
    tdb_write(path, junk, sizeof junk);
    expect_refused(0, TE_ERR_CORRUPT, "not an SQLite database");
    expect_refused(TE_DB_READONLY, TE_ERR_CORRUPT, "not an SQLite database");
    tdb_write(path, "hello, world\n", 13);
    expect_refused(0, TE_ERR_CORRUPT, "not an SQLite database");
    /* A valid SQLite header on garbage pages. */
    memcpy(junk, "SQLite format 3", 16);
    junk[16] = 0x10; /* page size 4096 */
    junk[17] = 0x00;
    tdb_write(path, junk, sizeof junk);
    expect_refused(0, TE_ERR_CORRUPT, path);
}

static void test_foreign_sqlite_database_is_refused(void **state)
{
    (void)state;
    sqlite3 *h;
    assert_int_equal(sqlite3_open(path, &h), SQLITE_OK);
    assert_int_equal(
        sqlite3_exec(h, "CREATE TABLE photos(id INTEGER PRIMARY KEY, name TEXT)", NULL, NULL, NULL),
        SQLITE_OK);
    sqlite3_close(h);
    expect_refused(0, TE_ERR_CORRUPT, "not a Tessera database");
    assert_int_equal(sqlite3_open(path, &h), SQLITE_OK);
    assert_int_equal(
        sqlite3_exec(h, "PRAGMA application_id = 1234; PRAGMA user_version = 2", NULL, NULL, NULL),
        SQLITE_OK);
    sqlite3_close(h);
    expect_refused(0, TE_ERR_CORRUPT, "another application");
}

static void test_truncated_database_is_refused(void **state)
{
    (void)state;
    make_db(3000);
    size_t n = 0;
    unsigned char *full = tdb_slurp(path, &n);
    assert_true(n > 100000);
    assert_false(tdb_exists(strcat(strcpy((char[400]){0}, path), "-wal")));
    tdb_write(path, full, n / 2);
    expect_refused(0, TE_ERR_CORRUPT, "truncated");
    expect_refused(TE_DB_READONLY, TE_ERR_CORRUPT, "truncated");
    tdb_write(path, full, n - 1000); /* not even a whole page short */
    expect_refused(0, TE_ERR_CORRUPT, "truncated");
    tdb_write(path, full, 60);
    expect_refused(0, TE_ERR_CORRUPT, "truncated");
    /* The untouched original still opens. */
    tdb_write(path, full, n);
    te_db *db = tdb_open(path, 0);
    assert_int_equal(tdb_count(db), 3000);
    assert_int_equal(te_db_check(db, NULL), TE_OK);
    te_db_close(db);
    free(full);
}

static void test_read_only_file_is_refused_for_writing_but_readable(void **state)
{
    (void)state;
    make_db(10);
    assert_int_equal(chmod(path, 0444), 0);
    expect_refused(0, TE_ERR_READONLY, "read-only");
    size_t n0, n1;
    unsigned char *before = tdb_slurp(path, &n0);
    te_db *db = tdb_open(path, TE_DB_READONLY);
    assert_int_equal(tdb_count(db), 10);
    te_db_trial_list *l = NULL;
    assert_int_equal(te_db_best(db, TDB_MATMUL, &tdb_cpu, 0, &l), TE_OK);
    te_db_trial_list_free(l);
    te_db_trial t = tdb_trial("x", 1e-3);
    assert_int_equal(te_db_record_trial(db, &t, NULL), TE_ERR_READONLY);
    assert_int_equal(te_db_job_start(db, "x", 1, NULL), TE_ERR_READONLY);
    assert_int_equal(te_db_import_buffer(db, "", 0, NULL), TE_ERR_READONLY);
    te_db_close(db);
    unsigned char *after = tdb_slurp(path, &n1);
    assert_int_equal(n0, n1);
    assert_memory_equal(before, after, n0);
    free(before);
    free(after);
}

static void test_missing_directory_and_missing_file(void **state)
{
    (void)state;
    char p[400];
    snprintf(p, sizeof p, "%s/no/such/dir/t.db", dir);
    te_db *db = NULL;
    assert_int_equal(te_db_open(p, NULL, &db), TE_ERR_IO);
    assert_non_null(strstr(te_db_errmsg(db), "does not exist"));
    te_db_close(db);
    assert_false(tdb_exists(p));
    te_db_options o = {.flags = TE_DB_NO_CREATE | TE_DB_NO_SYSTEM};
    assert_int_equal(te_db_open(path, &o, &db), TE_ERR_NOT_FOUND);
    te_db_close(db);
    o.flags = TE_DB_READONLY | TE_DB_NO_SYSTEM;
    assert_int_equal(te_db_open(path, &o, &db), TE_ERR_NOT_FOUND);
    te_db_close(db);
    assert_false(tdb_exists(path));
    /* A zero-length file is a new database, unless the caller said not to create one. */
    tdb_write(path, "", 0);
    expect_refused(TE_DB_NO_CREATE, TE_ERR_CORRUPT, "empty file");
    expect_refused(TE_DB_READONLY, TE_ERR_CORRUPT, "empty file");
    db = tdb_open(path, 0);
    assert_int_equal(tdb_count(db), 0);
    te_db_close(db);
}

static void test_newer_schema_is_refused_untouched(void **state)
{
    (void)state;
    make_db(5);
    sqlite3 *h;
    assert_int_equal(sqlite3_open(path, &h), SQLITE_OK);
    /* A future version, written by the rollback journal so that the main file is the whole
     * state (no -wal beside it). */
    assert_int_equal(sqlite3_exec(h,
                                  "PRAGMA journal_mode = DELETE; PRAGMA user_version = 99; "
                                  "CREATE TABLE future(x)",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(h);
    expect_refused(0, TE_ERR_VERSION, "newer");
    expect_refused(TE_DB_READONLY, TE_ERR_VERSION, "upgrade Tessera");
    assert_false(tdb_exists(strcat(strcpy((char[400]){0}, path), "-wal")));
    assert_int_equal(sqlite3_open(path, &h), SQLITE_OK);
    sqlite3_stmt *st;
    sqlite3_prepare_v2(h, "PRAGMA journal_mode", -1, &st, NULL);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), "delete"); /* not made WAL */
    sqlite3_finalize(st);
    sqlite3_close(h);
}

/* No -wal or -shm file beside `path`. */
static void expect_no_wal_files(const char *when)
{
    char p[400];
    const char *sfx[] = {"-wal", "-shm", "-journal"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s%s", path, sfx[i]);
        if (tdb_exists(p))
            fail_msg("%s: %s was left beside the database", when, p);
    }
}

/* Sets PRAGMAs on `path` with the plain SQLite library, keeping the file in WAL mode (as
 * Tessera writes it) and closing cleanly, so no -wal/-shm remains. */
static void sqlite_set(const char *sql)
{
    sqlite3 *h;
    assert_int_equal(sqlite3_open(path, &h), SQLITE_OK);
    assert_int_equal(sqlite3_exec(h, sql, NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_close(h), SQLITE_OK);
    expect_no_wal_files(sql);
}

/* A file refused as "not modified" must not get -wal/-shm files either (gen and bench open
 * read-only and were refused a newer database, leaving both behind). Every refusal of a
 * WAL-mode file, read-write, read-only and no-create. */
static void test_refused_open_leaves_no_wal_files(void **state)
{
    (void)state;
    const int flags[] = {0, TE_DB_READONLY, TE_DB_NO_CREATE};
    make_db(5);
    expect_no_wal_files("make_db");
    sqlite_set("PRAGMA journal_mode = WAL; PRAGMA user_version = 99");
    for (int i = 0; i < 3; i++) {
        expect_refused(flags[i], TE_ERR_VERSION, "newer");
        expect_no_wal_files(i == 0   ? "read-write open of a newer schema"
                            : i == 1 ? "read-only open of a newer schema"
                                     : "no-create open of a newer schema");
    }
    sqlite_set("PRAGMA journal_mode = WAL; PRAGMA user_version = 2; PRAGMA application_id = 77");
    for (int i = 0; i < 3; i++) {
        expect_refused(flags[i], TE_ERR_CORRUPT, "another application");
        expect_no_wal_files("refused foreign application id");
    }
    sqlite_set("PRAGMA journal_mode = WAL; PRAGMA application_id = 0");
    for (int i = 0; i < 3; i++) {
        expect_refused(flags[i], TE_ERR_CORRUPT, "not a Tessera database");
        expect_no_wal_files("refused database without application id");
    }
    /* An older schema cannot be migrated by a read-only open: refused, untouched. */
    sqlite_set("PRAGMA journal_mode = WAL; PRAGMA user_version = 1; PRAGMA application_id = "
               "1413829459");
    expect_refused(TE_DB_READONLY, TE_ERR_VERSION, "older");
    expect_no_wal_files("read-only open of an older schema");
}

static void test_version_1_is_migrated_forward(void **state)
{
    (void)state;
    sqlite3 *h;
    assert_int_equal(sqlite3_open(path, &h), SQLITE_OK);
    assert_int_equal(sqlite3_exec(h, te__schema_migration(0), NULL, NULL, NULL), SQLITE_OK);
    char sql[512];
    snprintf(sql, sizeof sql,
             "PRAGMA application_id = %d; PRAGMA user_version = 1;"
             "INSERT INTO targets(key, backend) VALUES('c;x86_64;old', 'c');"
             "INSERT INTO workloads(key, op) VALUES('%s', 'matmul');"
             "INSERT INTO jobs(uid, command, started_us) VALUES('j1', 'tessera tune', 5);"
             "INSERT INTO trials(uid, workload_id, target_id, job_id, trace, trace_hash, status, "
             "median_s, created_us, tessera_version) VALUES('u1', 1, 1, 1, 'old-trace', 'h', "
             "'ok', 0.5, 7, '0.0.1');",
             TE_DB_APPLICATION_ID, TDB_MATMUL);
    assert_int_equal(sqlite3_exec(h, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(h);

    /* Read-only cannot migrate: a clear refusal. */
    expect_refused(TE_DB_READONLY, TE_ERR_VERSION, "older");
    te_db *db = tdb_open(path, 0);
    te_db_info in;
    assert_int_equal(te_db_get_info(db, &in), TE_OK);
    assert_int_equal(in.schema_version, TE_DB_SCHEMA_VERSION);
    te_db_trial_list *l = NULL;
    te_db_target old = {.key = "c;x86_64;old"};
    assert_int_equal(te_db_best(db, TDB_MATMUL, &old, 0, &l), TE_OK);
    assert_string_equal(l->items[0].trace, "old-trace");
    assert_string_equal(l->items[0].job_uid, "j1");
    te_db_trial_list_free(l);
    te_db_job_list *jobs = NULL;
    assert_int_equal(te_db_jobs(db, 0, &jobs), TE_OK);
    assert_int_equal(jobs->n, 1);
    assert_string_equal(jobs->items[0].host, ""); /* the column version 2 added */
    te_db_job_list_free(jobs);
    assert_int_equal(te_db_check(db, NULL), TE_OK);
    te_db_close(db);
    assert_int_equal(sqlite3_open(path, &h), SQLITE_OK);
    assert_int_not_equal(sqlite3_exec(h, "UPDATE trials SET median_s = 1", NULL, NULL, NULL),
                         SQLITE_OK);
    sqlite3_close(h);
    assert_null(te__schema_migration(TE_DB_SCHEMA_VERSION));
    assert_null(te__schema_migration(-1));
}

/* Version 3 added claims and trials.transient: a version-2 file keeps its trials (not
 * transient) and can claim traces afterwards. */
static void test_version_2_gains_claims_and_transient(void **state)
{
    (void)state;
    sqlite3 *h;
    assert_int_equal(sqlite3_open(path, &h), SQLITE_OK);
    assert_int_equal(sqlite3_exec(h, te__schema_migration(0), NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_exec(h, te__schema_migration(1), NULL, NULL, NULL), SQLITE_OK);
    char sql[768];
    snprintf(sql, sizeof sql,
             "PRAGMA application_id = %d; PRAGMA user_version = 2;"
             "INSERT INTO targets(key, backend) VALUES('c;x86_64;old', 'c');"
             "INSERT INTO workloads(key, op) VALUES('%s', 'matmul');"
             "INSERT INTO jobs(uid, command, started_us) VALUES('j1', 'tessera tune', 5);"
             "INSERT INTO trials(uid, workload_id, target_id, job_id, trace, trace_hash, status, "
             "error, created_us, tessera_version) VALUES('u1', 1, 1, 1, 'old-trace', 'h', "
             "'timeout', 'no result within 1 s', 7, '0.0.1');",
             TE_DB_APPLICATION_ID, TDB_MATMUL);
    assert_int_equal(sqlite3_exec(h, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(h);
    te_db *db = tdb_open(path, 0);
    te_db_info in;
    assert_int_equal(te_db_get_info(db, &in), TE_OK);
    assert_int_equal(in.schema_version, TE_DB_SCHEMA_VERSION);
    te_db_target old = {.key = "c;x86_64;old"};
    te_db_trial_list *l = NULL;
    assert_int_equal(te_db_history(db, TDB_MATMUL, &old, 0, &l), TE_OK);
    assert_int_equal(l->n, 1);
    assert_int_equal(l->items[0].transient, 0); /* old failures stay final */
    te_db_trial_list_free(l);
    int64_t job = 0;
    assert_int_equal(te_db_job_start(db, "tune", 0, &job), TE_OK);
    const char *hashes[2] = {"h", "h2"};
    int claimed[2] = {-1, -1};
    assert_int_equal(te_db_claim_traces(db, TDB_MATMUL, &old, job, NULL, 2, hashes, claimed),
                     TE_OK);
    assert_int_equal(claimed[0], 0);
    assert_int_equal(claimed[1], 1);
    assert_int_equal(te_db_check(db, NULL), TE_OK);
    te_db_close(db);
    /* check: only a failure can be transient. */
    expect_corrupt_after(path,
                         "INSERT INTO trials(uid, workload_id, target_id, trace, trace_hash, "
                         "status, median_s, created_us, tessera_version, transient) "
                         "VALUES('u2', 1, 1, 't2', 'h2', 'ok', 0.5, 8, '0.0.1', 1)",
                         "transient");
}

static void test_no_wal_environment_variable(void **state)
{
    (void)state;
    setenv("TESSERA_DB_NO_WAL", "1", 1);
    te_db *db = tdb_open(path, 0);
    te_db_info in;
    assert_int_equal(te_db_get_info(db, &in), TE_OK);
    assert_string_equal(in.journal_mode, "delete");
    te_db_trial t = tdb_trial("x", 1e-3);
    assert_int_equal(te_db_record_trial(db, &t, NULL), TE_OK);
    te_db_close(db);
    unsetenv("TESSERA_DB_NO_WAL");
    db = tdb_open(path, 0);
    assert_int_equal(te_db_get_info(db, &in), TE_OK);
    assert_string_equal(in.journal_mode, "wal");
    assert_int_equal(in.n_trials, 1);
    te_db_close(db);
}

static void test_memory_database(void **state)
{
    (void)state;
    te_db *db = tdb_open(":memory:", 0);
    te_db_trial t = tdb_trial("x", 1e-3);
    assert_int_equal(te_db_record_trial(db, &t, NULL), TE_OK);
    assert_int_equal(tdb_count(db), 1);
    te_db_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_garbage_and_text_files_are_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_foreign_sqlite_database_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncated_database_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_only_file_is_refused_for_writing_but_readable,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_directory_and_missing_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_newer_schema_is_refused_untouched, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refused_open_leaves_no_wal_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_version_1_is_migrated_forward, setup, teardown),
        cmocka_unit_test_setup_teardown(test_version_2_gains_claims_and_transient, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_wal_environment_variable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_memory_database, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

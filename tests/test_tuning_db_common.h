/* Helpers shared by the tuning database tests (static, header-only, so each test executable
 * stays one .c file as tests/CMakeLists.txt expects). */
#ifndef TESSERA_TESTS_TUNING_DB_COMMON_H
#define TESSERA_TESTS_TUNING_DB_COMMON_H

#define _GNU_SOURCE
#include <ftw.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* cmocka.h needs these first; keep the order. */
// clang-format off
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <sqlite3.h>
// clang-format on

#include "tessera/tuning_db.h"

/* A fresh directory under $TMPDIR (or /tmp), removed by tdb_rmdir. */
static inline void tdb_mkdtemp(char *buf, size_t n)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(buf, n, "%s/tessera-db-test-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    assert_non_null(mkdtemp(buf));
}

static inline int tdb__rm(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)flag;
    (void)f;
    chmod(p, 0700);
    return remove(p);
}

static inline void tdb_rmdir(const char *dir) { nftw(dir, tdb__rm, 16, FTW_DEPTH | FTW_PHYS); }

static inline void tdb_path(char *buf, size_t n, const char *dir, const char *name)
{
    snprintf(buf, n, "%s/%s", dir, name);
}

/* The whole file, malloc'ed; *size its length. NULL if it cannot be read. */
static inline unsigned char *tdb_slurp(const char *path, size_t *size)
{
    *size = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc(n > 0 ? (size_t)n : 1);
    size_t got = p ? fread(p, 1, (size_t)n, f) : 0;
    fclose(f);
    *size = got;
    return p;
}

static inline void tdb_write(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static inline int tdb_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static const te_db_target tdb_cpu = {.backend = "c",
                                     .arch = "x86_64",
                                     .device = "AMD EPYC",
                                     .features = "avx512f,avx2,fma",
                                     .cores = 2,
                                     .compiler = "gcc 12.2.0"};

#define TDB_MATMUL "matmul;m=1024,n=1024,k=1024;f32"

/* An ok trial of TDB_MATMUL on tdb_cpu with the given trace and median. */
static inline te_db_trial tdb_trial(const char *trace, double median_s)
{
    te_db_trial t = {.workload = {.key = TDB_MATMUL,
                                  .shapes = "{\"m\":1024,\"n\":1024,\"k\":1024}",
                                  .flops = 2.0 * 1024 * 1024 * 1024},
                     .target = tdb_cpu,
                     .trace = trace,
                     .status = TE_TRIAL_OK,
                     .median_s = median_s,
                     .spread_s = median_s / 100,
                     .repeats = 10,
                     .gflops = median_s > 0 ? 2.0 * 1024 * 1024 * 1024 / median_s / 1e9 : NAN};
    return t;
}

/* A cmocka fixture over a fresh directory holding database file `name`: defines `dir` and
 * `path` (dir/name), setup (makes dir; unsets TESSERA_SYSTEM_DB, and TESSERA_DB_NO_WAL when
 * no_wal_unset is 1) and teardown (removes dir). */
#define TDB_FIXTURE(name, no_wal_unset)                                                            \
    static char dir[256], path[320];                                                               \
    static int setup(void **state)                                                                 \
    {                                                                                              \
        (void)state;                                                                               \
        tdb_mkdtemp(dir, sizeof dir);                                                              \
        tdb_path(path, sizeof path, dir, name);                                                    \
        unsetenv("TESSERA_SYSTEM_DB");                                                             \
        if (no_wal_unset)                                                                          \
            unsetenv("TESSERA_DB_NO_WAL");                                                         \
        return 0;                                                                                  \
    }                                                                                              \
    static int teardown(void **state)                                                              \
    {                                                                                              \
        (void)state;                                                                               \
        tdb_rmdir(dir);                                                                            \
        return 0;                                                                                  \
    }

/* Opens path with flags (no system db unless given), asserting success. */
static inline te_db *tdb_open(const char *path, int flags)
{
    te_db *db = NULL;
    te_db_options o = {.flags = flags | TE_DB_NO_SYSTEM};
    int rc = te_db_open(path, &o, &db);
    if (rc != TE_OK)
        fail_msg("te_db_open(%s): %s", path, te_db_errmsg(db));
    return db;
}

/* Writes `sql` into the database at path around the API (the sqlite3 library directly),
 * then asserts that te_db_check reports the file corrupt with `needle` in its report. */
static inline void expect_corrupt_after(const char *path, const char *sql, const char *needle)
{
    sqlite3 *h;
    assert_int_equal(sqlite3_open(path, &h), SQLITE_OK);
    assert_int_equal(sqlite3_exec(h, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(h);
    te_db *db = tdb_open(path, 0);
    char *report = NULL;
    assert_int_equal(te_db_check(db, &report), TE_ERR_CORRUPT);
    if (!report || !strstr(report, needle))
        fail_msg("check report lacks '%s': %s", needle, report ? report : "(none)");
    free(report);
    te_db_close(db);
}

static inline int64_t tdb_count(te_db *db)
{
    te_db_info in;
    assert_int_equal(te_db_get_info(db, &in), TE_OK);
    return in.n_trials;
}

#endif

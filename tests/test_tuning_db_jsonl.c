/* JSON lines export/import (exact round trip, atomic rejection with line numbers), merging
 * databases without duplicates, and the JSON reader itself. */
#include "test_tuning_db_common.h"

#include <stdint.h>

#include "testutil.h"
#include "tuning_db/json.h"

static char dir[256], path[320], path2[320];

static int setup(void **state)
{
    (void)state;
    tdb_mkdtemp(dir, sizeof dir);
    tdb_path(path, sizeof path, dir, "a.db");
    tdb_path(path2, sizeof path2, dir, "b.db");
    unsetenv("TESSERA_SYSTEM_DB");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tdb_rmdir(dir);
    return 0;
}

/* Exports db into a malloc'ed string. */
static char *export_all(te_db *db, size_t *n)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, n);
    assert_non_null(f);
    assert_int_equal(te_db_export(db, f, NULL, NULL, NULL), TE_OK);
    fclose(f);
    return buf;
}

static double random_double(tt_rng *r)
{
    switch (tt_rng_int(r, 5)) {
    case 0: { /* any finite bit pattern */
        for (;;) {
            uint64_t bits = tt_rng_next(r);
            double d;
            memcpy(&d, &bits, sizeof d);
            if (isfinite(d))
                return fabs(d);
        }
    }
    case 1:
        return 4.9406564584124654e-324; /* smallest subnormal */
    case 2:
        return tt_rng_uniform(r, 0, 1e-3);
    case 3:
        return 0.1 + 0.2;
    default:
        return NAN;
    }
}

/* Fills db with n trials whose doubles and strings stress the writer. */
static void fill_odd(te_db *db, int n, uint64_t seed)
{
    tt_rng r;
    tt_rng_seed(&r, seed);
    int64_t job;
    assert_int_equal(te_db_job_start(db, "tessera tune \"odd\" \\ job\n", n, &job), TE_OK);
    static const char *traces[] = {"plain",
                                   "quote\" back\\slash",
                                   "tab\there\nnewline",
                                   "ctrl\x01\x1f",
                                   "utf8 \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
                                   "slash / and {braces}"};
    static char bufs[64][64];
    te_db_target gpu = {.backend = "cuda",
                        .sm = 86,
                        .device = "RTX \"3090\"",
                        .cores = 82,
                        .compiler = "nvrtc 12.2",
                        .driver = "535.54"};
    for (int i = 0; i < n; i++) {
        snprintf(bufs[i % 64], sizeof bufs[0], "%s #%d", traces[i % 6], i);
        te_db_trial t = tdb_trial(bufs[i % 64], 1e-3);
        if (i % 3 == 1)
            t.target = gpu;
        t.status = (te_trial_status)(i % TE_TRIAL_STATUS_COUNT);
        t.median_s = random_double(&r);
        if (t.status == TE_TRIAL_OK && isnan(t.median_s))
            t.median_s = 0.0;
        t.spread_s = random_double(&r);
        t.gflops = random_double(&r);
        t.workload.flops = i % 2 ? 0 : 1.2345678901234567e15;
        /* te_db_check holds GFLOP/s to flops / median: random bits where the flops are unknown,
         * derived where they are known, none without a positive median. */
        if (!(t.median_s > 0))
            t.gflops = NAN;
        else if (t.workload.flops > 0)
            t.gflops = isfinite(t.workload.flops / t.median_s * 1e-9)
                           ? t.workload.flops / t.median_s * 1e-9
                           : NAN;
        t.workload.shapes = i % 2 ? "{\"m\": [1, 2, {\"x\": -0.0}], \"s\": \"a\\u00e9\"}" : NULL;
        t.workload.key = i % 2 ? "conv2d;n=1,c=64;f32" : TDB_MATMUL;
        t.error = t.status ? "error:\n  \"line 3\"" : NULL;
        t.job_id = i % 4 ? job : 0;
        t.created_us = 1700000000000000 + i;
        t.repeats = i;
        assert_int_equal(te_db_record_trial(db, &t, NULL), TE_OK);
    }
}

static void test_export_import_round_trip_is_exact(void **state)
{
    (void)state;
    te_db *a = tdb_open(path, 0);
    fill_odd(a, 120, tt_seed(7));
    size_t n1, n2;
    char *text1 = export_all(a, &n1);

    te_db *b = tdb_open(path2, 0);
    te_db_import_stats s;
    assert_int_equal(te_db_import_buffer(b, text1, n1, &s), TE_OK);
    assert_int_equal(s.lines, 120);
    assert_int_equal(s.imported, 120);
    assert_int_equal(s.duplicates, 0);
    char *text2 = export_all(b, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(text1, text2, n1);

    /* Field by field, doubles bit for bit. */
    te_db_trial_list *la = NULL, *lb = NULL;
    assert_int_equal(te_db_history(a, TDB_MATMUL, NULL, 0, &la), TE_OK);
    assert_int_equal(te_db_history(b, TDB_MATMUL, NULL, 0, &lb), TE_OK);
    assert_int_equal(la->n, lb->n);
    for (size_t i = 0; i < la->n; i++) {
        const te_db_trial *x = &la->items[i], *y = &lb->items[i];
        assert_string_equal(x->uid, y->uid);
        assert_string_equal(x->trace, y->trace);
        assert_string_equal(x->target.key, y->target.key);
        assert_string_equal(x->error, y->error);
        assert_memory_equal(&x->median_s, &y->median_s, sizeof(double));
        assert_memory_equal(&x->spread_s, &y->spread_s, sizeof(double));
        assert_memory_equal(&x->gflops, &y->gflops, sizeof(double));
        assert_memory_equal(&x->workload.flops, &y->workload.flops, sizeof(double));
        assert_int_equal(x->created_us, y->created_us);
        if (x->job_uid)
            assert_string_equal(x->job_uid, y->job_uid);
        else
            assert_null(y->job_uid);
    }
    te_db_trial_list_free(la);
    te_db_trial_list_free(lb);
    te_db_job_list *ja, *jb;
    assert_int_equal(te_db_jobs(a, 0, &ja), TE_OK);
    assert_int_equal(te_db_jobs(b, 0, &jb), TE_OK);
    assert_int_equal(jb->n, 1);
    assert_string_equal(ja->items[0].uid, jb->items[0].uid);
    assert_string_equal(ja->items[0].command, jb->items[0].command);
    assert_int_equal(ja->items[0].trials_done, jb->items[0].trials_done); /* not recounted */
    te_db_job_list_free(ja);
    te_db_job_list_free(jb);

    /* Importing again adds nothing. */
    assert_int_equal(te_db_import_buffer(b, text1, n1, &s), TE_OK);
    assert_int_equal(s.imported, 0);
    assert_int_equal(s.duplicates, 120);
    assert_int_equal(tdb_count(b), 120);
    free(text1);
    free(text2);

    /* Filtered export. */
    char *buf = NULL;
    size_t n = 0;
    int64_t written = 0;
    FILE *f = open_memstream(&buf, &n);
    assert_int_equal(te_db_export(a, f, "conv2d;n=1,c=64;f32", NULL, &written), TE_OK);
    fclose(f);
    assert_int_equal(written, 60);
    free(buf);
    te_db_close(a);
    te_db_close(b);
}

static const char *valid_line(void)
{
    return "{\"uid\":\"0190c0de-0000-7000-8000-00000000000A\",\"workload\":{\"key\":\"w;1;f32\","
           "\"shapes\":[1,2]},\"target\":{\"key\":\"c;x86_64;cpu;avx2;2 cores;gcc\","
           "\"backend\":\"c\"},\"trace\":\"t\",\"status\":\"ok\",\"median_s\":1e-3,"
           "\"created_us\":5}";
}

static void test_blank_lines_crlf_and_minimal_lines_import(void **state)
{
    (void)state;
    te_db *db = tdb_open(path, 0);
    char text[2048];
    snprintf(text, sizeof text, "\n  \r\n%s\r\n\n", valid_line());
    te_db_import_stats s;
    assert_int_equal(te_db_import_buffer(db, text, strlen(text), &s), TE_OK);
    assert_int_equal(s.lines, 1);
    assert_int_equal(s.imported, 1);
    te_db_trial_list *l = NULL;
    te_db_target t = {.key = "c;x86_64;cpu;avx2;2 cores;gcc"};
    assert_int_equal(te_db_best(db, "w;1;f32", &t, 0, &l), TE_OK);
    assert_string_equal(l->items[0].workload.shapes, "[1,2]");
    assert_string_equal(l->items[0].workload.op, "w");
    assert_null(l->items[0].job_uid);
    assert_true(isnan(l->items[0].gflops));
    te_db_trial_list_free(l);
    /* From a FILE* as well; an empty input is fine. */
    FILE *f = fmemopen(text, strlen(text), "r");
    assert_int_equal(te_db_import(db, f, &s), TE_OK);
    fclose(f);
    assert_int_equal(s.duplicates, 1);
    assert_int_equal(te_db_import_buffer(db, "", 0, &s), TE_OK);
    assert_int_equal(s.lines, 0);
    te_db_close(db);
}

static void test_malformed_line_rejects_whole_import_with_line_number(void **state)
{
    (void)state;
    static const struct {
        const char *line, *needle;
    } bad[] = {
        {"{\"uid\":\"x\"", "column"},
        {"not json", "unexpected character"},
        {"[1,2,3]", "one JSON object"},
        {"{\"uid\":\"x\",\"workload\":{\"key\":\"w\"},\"target\":{\"key\":\"k\",\"backend\":\"c\"},"
         "\"trace\":\"t\",\"status\":\"fast\"}",
         "unknown trial status"},
        {"{\"uid\":\"x\",\"workload\":{\"key\":\"w\"},\"target\":{\"key\":\"k\",\"backend\":\"c\"},"
         "\"trace\":\"t\",\"status\":\"ok\",\"median_s\":\"1ms\"}",
         "median_s"},
        {"{\"uid\":\"x\",\"workload\":{\"key\":\"w\"},\"target\":{\"key\":\"k\",\"backend\":\"c\"},"
         "\"status\":\"ok\",\"median_s\":1}",
         "trace"},
        {"{\"uid\":\"x\",\"workload\":{\"key\":\"w\"},\"target\":{\"key\":\"k\",\"backend\":\"c\"},"
         "\"trace\":\"t\",\"status\":\"ok\"}",
         "median"},
        {"{\"uid\":\"x\",\"workload\":{\"key\":\"w\"},\"target\":{\"key\":\"k\",\"backend\":\"x\"},"
         "\"trace\":\"t\",\"status\":\"ok\",\"median_s\":1}",
         "backend"},
        {"{\"uid\":\"x\",\"workload\":{\"key\":\"w\"},\"target\":{\"key\":\"k\",\"backend\":\"c\"},"
         "\"trace\":\"t\\u0000\",\"status\":\"ok\",\"median_s\":1}",
         "u0000"},
        {"{\"uid\":\"x\",\"workload\":{\"key\":\"w\"},\"target\":{\"key\":\"k\",\"backend\":\"c\"},"
         "\"trace\":\"t\",\"status\":\"ok\",\"median_s\":1,\"repeats\":1.5}",
         "repeats"},
        {"{\"uid\":\"x\",\"workload\":{\"key\":\"w\"},\"target\":{\"key\":\"k\",\"backend\":\"c\"},"
         "\"trace\":\"t\",\"status\":\"ok\",\"median_s\":1,\"job\":{\"uid\":\"j\","
         "\"status\":\"sleeping\"}}",
         "job status"},
        {"{\"uid\":\"x\",\"workload\":{\"key\":\"w\"},\"target\":{\"key\":\"k\",\"backend\":\"c\"},"
         "\"trace\":\"t\",\"status\":\"ok\",\"median_s\":NaN}",
         "unexpected character"},
        {"{\"a\":1} {\"b\":2}", "after the JSON value"},
        {"{\"a\":01}", "expected ','"},
    };
    te_db *db = tdb_open(path, 0);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[4096];
        /* Two valid lines (one a blank-separated duplicate), then the bad one on line 4. */
        snprintf(text, sizeof text, "%s\n\n%s\n%s\n%s\n", valid_line(), valid_line(), bad[i].line,
                 valid_line());
        te_db_import_stats s;
        int rc = te_db_import_buffer(db, text, strlen(text), &s);
        assert_int_equal(rc, TE_ERR_CORRUPT);
        assert_int_equal(s.error_line, 4);
        assert_int_equal(s.imported, 0);
        const char *msg = te_db_errmsg(db);
        if (!strstr(msg, "line 4:") || !strstr(msg, bad[i].needle))
            fail_msg("case %zu: message '%s' lacks 'line 4:' or '%s'", i, msg, bad[i].needle);
        assert_non_null(strstr(msg, "nothing was imported"));
        assert_int_equal(tdb_count(db), 0); /* the valid lines before it were not kept */
    }
    /* Nesting bombs are refused, not recursed into. */
    char deep[3000];
    memset(deep, '[', 2000);
    deep[2000] = '\0';
    te_db_import_stats s;
    assert_int_equal(te_db_import_buffer(db, deep, strlen(deep), &s), TE_ERR_CORRUPT);
    assert_non_null(strstr(te_db_errmsg(db), "nesting"));
    assert_int_equal(te_db_check(db, NULL), TE_OK);
    te_db_close(db);
}

/* Import refuses invalid UTF-8 anywhere in a line and uids (trial or job) that are not UUIDs,
 * naming the line; recording refuses them too, except in the error text, which is repaired
 * (U+FFFD). Whatever is stored exports as valid UTF-8 and imports again. */
static void test_invalid_utf8_and_uids_are_refused(void **state)
{
    (void)state;
    static const char tail[] = "\"workload\":{\"key\":\"w\"},\"target\":{\"key\":\"k\","
                               "\"backend\":\"c\"},\"status\":\"ok\",\"median_s\":1,";
    static const struct {
        const char *uid, *rest, *needle;
    } bad[] = {
        {"0190c0de-0000-7000-8000-000000000001", "\"trace\":\"t\xff\"", "invalid UTF-8"},
        {"0190c0de-0000-7000-8000-000000000001", "\"trace\":\"\xc0\xaf\"", "invalid UTF-8"},
        {"0190c0de-0000-7000-8000-000000000001", "\"trace\":\"\xed\xa0\x80\"", "invalid UTF-8"},
        {"0190c0de-0000-7000-8000-000000000001", "\"trace\":\"\xf4\x90\x80\x80\"", "invalid UTF-8"},
        {"0190c0de-0000-7000-8000-000000000001", "\"trace\":\"t\",\"error\":\"\xe2\x82\"",
         "invalid UTF-8"},
        {"0190c0de-0000-7000-8000-000000000001", "\"trace\":\"t\",\"x\":{\"\xfe\":1}",
         "invalid UTF-8"},
        {"x", "\"trace\":\"t\"", "not a UUID"},
        {"0190c0de-0000-7000-8000-00000000001", "\"trace\":\"t\"", "not a UUID"},
        {"0190c0de-0000-7000-8000-00000000000g", "\"trace\":\"t\"", "not a UUID"},
        {"0190c0de00000-7000-8000-000000000001", "\"trace\":\"t\"", "not a UUID"},
        {"0190c0de-0000-7000-8000-000000000001",
         "\"trace\":\"t\",\"job\":{\"uid\":\"j1\",\"status\":\"running\"}", "job uid"},
    };
    te_db *db = tdb_open(path, 0);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[4096];
        snprintf(text, sizeof text, "%s\n\n%s\n{\"uid\":\"%s\",%s%s}\n%s\n", valid_line(),
                 valid_line(), bad[i].uid, tail, bad[i].rest, valid_line());
        te_db_import_stats st;
        int rc = te_db_import_buffer(db, text, strlen(text), &st);
        const char *msg = te_db_errmsg(db);
        if (rc != TE_ERR_CORRUPT || st.error_line != 4 || !strstr(msg, "line 4:") ||
            !strstr(msg, bad[i].needle))
            fail_msg("case %zu: rc %d, line %lld, message '%s' (want 'line 4:' and '%s')", i, rc,
                     (long long)st.error_line, msg, bad[i].needle);
        assert_int_equal(tdb_count(db), 0);
    }
    /* Valid multi-byte text of every length imports. */
    char text[2048];
    snprintf(
        text, sizeof text,
        "{\"uid\":\"0190c0de-0000-7000-8000-0000000000AB\",%s\"trace\":\"\xc3\xa9 \xe2\x82\xac "
        "\xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf\"}\n",
        tail);
    assert_int_equal(te_db_import_buffer(db, text, strlen(text), NULL), TE_OK);
    assert_int_equal(tdb_count(db), 1);

    /* Recording: invalid UTF-8 in a key or trace, or a uid that is not a UUID, is TE_ERR_ARG. */
    te_db_trial t = tdb_trial("bad \xff trace", 1e-3);
    assert_int_equal(te_db_record_trial(db, &t, NULL), TE_ERR_ARG);
    assert_non_null(strstr(te_db_errmsg(db), "trace is not valid UTF-8"));
    t = tdb_trial("t", 1e-3);
    t.workload.key = "matmul;m=\xc0\x80;f32";
    assert_int_equal(te_db_record_trial(db, &t, NULL), TE_ERR_ARG);
    assert_non_null(strstr(te_db_errmsg(db), "workload key is not valid UTF-8"));
    t = tdb_trial("t", 1e-3);
    t.uid = "not-a-uuid";
    assert_int_equal(te_db_record_trial(db, &t, NULL), TE_ERR_ARG);
    assert_non_null(strstr(te_db_errmsg(db), "not a UUID"));
    /* A stray byte in a compiler's message does not cost the trial: it is replaced. */
    t = tdb_trial("t-err", 0);
    t.status = TE_TRIAL_COMPILE_ERROR;
    t.median_s = NAN;
    t.error = "x.c:1: error: stray '\xb5' in program";
    assert_int_equal(te_db_record_trial(db, &t, NULL), TE_OK);
    assert_int_equal(tdb_count(db), 2);
    size_t n;
    char *out = export_all(db, &n);
    assert_int_equal(te__utf8_valid_prefix(out, n), n);
    assert_non_null(strstr(out, "stray '\xef\xbf\xbd' in program"));
    te_db *db2 = tdb_open(path2, 0);
    te_db_import_stats st;
    assert_int_equal(te_db_import_buffer(db2, out, n, &st), TE_OK);
    assert_int_equal(st.imported, 2);
    free(out);
    te_db_close(db2);
    te_db_close(db);
}

static void test_merge_folds_databases_without_duplicates(void **state)
{
    (void)state;
    te_db *a = tdb_open(path, 0);
    fill_odd(a, 40, 1);
    size_t n;
    char *text = export_all(a, &n);
    te_db *b = tdb_open(path2, 0);
    /* b shares the first 20 lines of a's export and has 30 of its own. */
    char *cut = text;
    for (int i = 0; i < 20; i++)
        cut = strchr(cut, '\n') + 1;
    assert_int_equal(te_db_import_buffer(b, text, (size_t)(cut - text), NULL), TE_OK);
    fill_odd(b, 30, 2);
    te_db_close(b);
    free(text);
    size_t nb0, nb1;
    unsigned char *before = tdb_slurp(path2, &nb0);

    te_db_import_stats s;
    assert_int_equal(te_db_merge(a, path2, &s), TE_OK);
    assert_int_equal(s.lines, 50);
    assert_int_equal(s.imported, 30);
    assert_int_equal(s.duplicates, 20);
    assert_int_equal(tdb_count(a), 70);
    assert_int_equal(te_db_merge(a, path2, &s), TE_OK);
    assert_int_equal(s.imported, 0);
    assert_int_equal(tdb_count(a), 70);
    te_db_job_list *jobs;
    assert_int_equal(te_db_jobs(a, 0, &jobs), TE_OK);
    assert_int_equal(jobs->n, 2);
    te_db_job_list_free(jobs);
    assert_int_equal(te_db_check(a, NULL), TE_OK);

    /* The source is opened read-only and left as it was. */
    unsigned char *after = tdb_slurp(path2, &nb1);
    assert_int_equal(nb0, nb1);
    assert_memory_equal(before, after, nb0);
    free(before);
    free(after);

    assert_int_equal(te_db_merge(a, path, &s), TE_ERR_ARG);
    char junk[400];
    tdb_path(junk, sizeof junk, dir, "junk.db");
    tdb_write(junk, "garbage garbage garbage", 23);
    assert_int_equal(te_db_merge(a, junk, &s), TE_ERR_CORRUPT);
    assert_non_null(strstr(te_db_errmsg(a), "merge"));
    tdb_path(junk, sizeof junk, dir, "absent.db");
    assert_int_equal(te_db_merge(a, junk, &s), TE_ERR_NOT_FOUND);
    assert_int_equal(tdb_count(a), 70);
    te_db_close(a);
}

/* Bytes moved (schema 5): 0 and NAN record as unknown (NULL, read back as NAN), a negative or
 * infinite figure is refused, a known one survives export -> import and merge bit for bit, and
 * an exported line carries "bytes" only when known (an imported line without it is fine). */
static void test_bytes_moved_survive_export_import_and_merge(void **state)
{
    (void)state;
    te_db *a = tdb_open(path, 0);
    te_db_trial t[3] = {tdb_trial("with-bytes", 1e-3), tdb_trial("zero-bytes", 2e-3),
                        tdb_trial("nan-bytes", 3e-3)};
    t[0].bytes = 12582912.0 + 0.5;
    t[1].bytes = 0;
    t[2].bytes = NAN;
    assert_int_equal(te_db_record_trials(a, t, 3), TE_OK);
    te_db_trial bad = tdb_trial("negative", 1e-3);
    bad.bytes = -4;
    assert_int_equal(te_db_record_trial(a, &bad, NULL), TE_ERR_ARG);
    assert_non_null(strstr(te_db_errmsg(a), "bytes"));
    bad.bytes = INFINITY;
    assert_int_equal(te_db_record_trial(a, &bad, NULL), TE_ERR_ARG);
    te_db_trial_list *l = NULL;
    assert_int_equal(te_db_history(a, TDB_MATMUL, NULL, 0, &l), TE_OK);
    assert_int_equal(l->n, 3);
    assert_true(l->items[0].bytes == 12582912.5);
    assert_true(isnan(l->items[1].bytes) && isnan(l->items[2].bytes));
    te_db_trial_list_free(l);
    assert_int_equal(te_db_best(a, TDB_MATMUL, &tdb_cpu, 0, &l), TE_OK);
    assert_true(l->items[0].bytes == 12582912.5);
    te_db_trial_list_free(l);
    assert_int_equal(te_db_check(a, NULL), TE_OK);

    size_t n;
    char *text = export_all(a, &n);
    const char *first = strstr(text, "\"bytes\":12582912.5");
    assert_non_null(first);
    assert_true(first < strchr(text, '\n'));
    assert_null(strstr(strchr(text, '\n'), "\"bytes\"")); /* unknown: left out */
    te_db *b = tdb_open(path2, 0);
    assert_int_equal(te_db_import_buffer(b, text, n, NULL), TE_OK);
    size_t n2;
    char *again = export_all(b, &n2);
    assert_int_equal(n, n2);
    assert_memory_equal(text, again, n);
    free(again);
    free(text);
    te_db_close(b);
    /* A line with a bad bytes value aborts the import with its line number. */
    static const char bad_line[] =
        "{\"uid\":\"0190c0de-0000-7000-8000-000000000001\",\"workload\":{\"key\":\"k;;f32\"},"
        "\"target\":{\"key\":\"c;x\",\"backend\":\"c\"},\"trace\":\"t\",\"status\":\"timeout\","
        "\"bytes\":\"many\"}\n";
    te_db_import_stats st;
    assert_int_equal(te_db_import_buffer(a, bad_line, sizeof bad_line - 1, &st), TE_ERR_CORRUPT);
    assert_int_equal(st.error_line, 1);
    assert_non_null(strstr(te_db_errmsg(a), "bytes"));

    /* Merge into a third database keeps them. */
    char path3[400];
    tdb_path(path3, sizeof path3, dir, "c.db");
    te_db_close(a);
    te_db *c = tdb_open(path3, 0);
    te_db_import_stats s;
    assert_int_equal(te_db_merge(c, path, &s), TE_OK);
    assert_int_equal(s.imported, 3);
    assert_int_equal(te_db_history(c, TDB_MATMUL, NULL, 0, &l), TE_OK);
    assert_int_equal(l->n, 3);
    assert_true(l->items[0].bytes == 12582912.5);
    assert_true(isnan(l->items[1].bytes) && isnan(l->items[2].bytes));
    te_db_trial_list_free(l);
    te_db_close(c);
}

static void test_json_reader_edges(void **state)
{
    (void)state;
    te__json_doc doc = {0};
    const char *s = " {\"a\" : [1, -0.5e+2, true, false, null, \"\\ud83d\\ude00\\n\"], \"b\": {}} ";
    te__json *v = te__json_parse(&doc, s, strlen(s));
    assert_non_null(v);
    te__json *a = te__json_member(v, "a");
    assert_non_null(a);
    assert_int_equal(a->first->type, TE__JSON_NUMBER);
    assert_true(a->first->is_int);
    assert_true(a->first->next->num == -50.0);
    assert_false(a->first->next->is_int);
    te__json *str = a->first->next->next->next->next->next;
    assert_string_equal(str->str, "\xf0\x9f\x98\x80\n");
    assert_null(te__json_member(v, "c"));
    te__json_doc_free(&doc);
    static const char *bad[] = {
        "",   "{",   "[1,]",        "{\"a\"}",     "\"\\x\"",    "\"\x01\"", "1.",   "-",
        "+1", "tru", "\"\\ud800\"", "\"\\udc00\"", "{\"a\":1,}", "[1 2]",    "\"abc"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (te__json_valid(bad[i], strlen(bad[i])))
            fail_msg("accepted invalid JSON '%s'", bad[i]);
    }
    static const char *good[] = {"0",
                                 "-0",
                                 "1e5",
                                 "[]",
                                 "{}",
                                 "\"\"",
                                 "[[[]]]",
                                 "9223372036854775808",
                                 "\"\\/\\b\\f\\r\\t\""};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        if (!te__json_valid(good[i], strlen(good[i])))
            fail_msg("rejected valid JSON '%s'", good[i]);
    /* An integer beyond int64 stays a number but is not an integer. */
    v = te__json_parse(&doc, "9223372036854775808", 19);
    assert_false(v->is_int);
    te__json_doc_free(&doc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_export_import_round_trip_is_exact, setup, teardown),
        cmocka_unit_test_setup_teardown(test_blank_lines_crlf_and_minimal_lines_import, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_malformed_line_rejects_whole_import_with_line_number,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_merge_folds_databases_without_duplicates, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_invalid_utf8_and_uids_are_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bytes_moved_survive_export_import_and_merge, setup,
                                        teardown),
        cmocka_unit_test(test_json_reader_edges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

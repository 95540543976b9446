/* Every ```sql block of docs/TUNING_DB.md runs against a database filled the way the tuner
 * fills one (workload keys from te_op_workload_key, target keys from te_db_target_key): each
 * statement must run without error and return rows, so a documented query that silently finds
 * nothing (a key spelled in an order the code never writes) fails here. */
#include "test_tuning_db_common.h"

#include <sqlite3.h>

#include "tessera/ops.h"
#include "tessera/te.h"

#ifndef TESSERA_DOCS_TUNING_DB
#error "TESSERA_DOCS_TUNING_DB (path of docs/TUNING_DB.md) must be defined by tests/tuning_db.cmake"
#endif

TDB_FIXTURE("docs.db", 0)

/* The canonical workload key of `op` with `params`, as the tuner records it. */
static void workload_key(const char *op, const char *params, char *key, size_t n)
{
    te_ctx *ctx = te_ctx_create();
    te_op_params kv;
    assert_int_equal(te_op_params_parse(ctx, params, &kv), TE_OK);
    int len = te_op_workload_key(ctx, te_op_lookup(op), &kv, key, n);
    if (len < 0)
        fail_msg("%s %s: %s", op, params, te_ctx_errmsg(ctx));
    te_ctx_free(ctx);
}

/* Matmul 1024^3 and 64^3 on the documentation's CPU target, fast and slow ok trials, compile
 * errors and a timeout, all in one finished job. */
static void fill(void)
{
    char big[256], small[256];
    workload_key("matmul", "m=1024,n=1024,k=1024", big, sizeof big);
    workload_key("matmul", "m=64,n=64,k=64", small, sizeof small);
    te_db *db = tdb_open(path, 0);
    int64_t job;
    assert_int_equal(
        te_db_job_start(db, "tessera tune matmul --shape m=1024,n=1024,k=1024", 8, &job), TE_OK);
    const struct {
        const char *key, *shapes, *trace, *error;
        double flops, median;
        te_trial_status status;
    } rows[] = {
        {big, "{\"m\":1024,\"n\":1024,\"k\":1024}", "split(i,32);vectorize(j)", NULL,
         2.0 * (1 << 30), 2e-3, TE_TRIAL_OK},
        {big, "{\"m\":1024,\"n\":1024,\"k\":1024}", "split(i,64);vectorize(j)", NULL,
         2.0 * (1 << 30), 3e-3, TE_TRIAL_OK},
        {big, "{\"m\":1024,\"n\":1024,\"k\":1024}", "unroll(k,64)", "x.c:3: error: expected ';'",
         2.0 * (1 << 30), NAN, TE_TRIAL_COMPILE_ERROR},
        {big, "{\"m\":1024,\"n\":1024,\"k\":1024}", "unroll(k,128)", "x.c:3: error: expected ';'",
         2.0 * (1 << 30), NAN, TE_TRIAL_COMPILE_ERROR},
        {big, "{\"m\":1024,\"n\":1024,\"k\":1024}", "split(k,1)", "run exceeded 10 s",
         2.0 * (1 << 30), NAN, TE_TRIAL_TIMEOUT},
        {small, "{\"m\":64,\"n\":64,\"k\":64}", "split(i,8)", NULL, 2.0 * 64 * 64 * 64, 2e-5,
         TE_TRIAL_OK},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        te_db_trial t = {
            .workload = {.key = rows[i].key, .shapes = rows[i].shapes, .flops = rows[i].flops},
            .target = tdb_cpu,
            .trace = rows[i].trace,
            .status = rows[i].status,
            .error = rows[i].error,
            .median_s = rows[i].median,
            .spread_s = NAN,
            .repeats = rows[i].status == TE_TRIAL_OK ? 10 : 0,
            .gflops = rows[i].flops / rows[i].median * 1e-9,
            .job_id = job};
        assert_int_equal(te_db_record_trial(db, &t, NULL), TE_OK);
    }
    assert_int_equal(te_db_job_finish(db, job, TE_JOB_FINISHED), TE_OK);
    char *report = NULL;
    assert_int_equal(te_db_check(db, &report), TE_OK);
    free(report);
    te_db_close(db);
}

/* The text of every ```sql block of the document, concatenated (malloc'ed); *n_blocks counts
 * them. */
static char *sql_blocks(const char *doc, int *n_blocks)
{
    size_t cap = strlen(doc) + 1, n = 0;
    char *out = malloc(cap);
    assert_non_null(out);
    *n_blocks = 0;
    int in = 0;
    for (const char *line = doc; *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        if (!in && len >= 6 && !strncmp(line, "```sql", 6)) {
            in = 1;
            ++*n_blocks;
        } else if (in && len >= 3 && !strncmp(line, "```", 3)) {
            in = 0;
            out[n++] = '\n';
        } else if (in) {
            memcpy(out + n, line, len);
            n += len;
            out[n++] = '\n';
        }
        line += len + (nl != NULL);
    }
    out[n] = '\0';
    assert_false(in); /* every block is closed */
    return out;
}

static void test_every_documented_query_runs_and_finds_rows(void **state)
{
    (void)state;
    fill();
    size_t size;
    char *doc = (char *)tdb_slurp(TESSERA_DOCS_TUNING_DB, &size);
    assert_non_null(doc);
    doc = realloc(doc, size + 1);
    doc[size] = '\0';
    int n_blocks = 0;
    char *sql = sql_blocks(doc, &n_blocks);
    assert_true(n_blocks >= 1);

    sqlite3 *h;
    assert_int_equal(sqlite3_open_v2(path, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    int n_statements = 0, failed = 0, lists_failed = 0;
    for (const char *p = sql; *p;) {
        sqlite3_stmt *st = NULL;
        const char *tail = NULL;
        int rc = sqlite3_prepare_v2(h, p, -1, &st, &tail);
        if (rc != SQLITE_OK) {
            fprintf(stderr, "documented SQL does not run: %s\n  near: %.200s\n", sqlite3_errmsg(h),
                    p);
            failed++;
            break;
        }
        if (!st) { /* only comments and white space left */
            p = tail;
            continue;
        }
        n_statements++;
        int rows = 0, nonzero = 0;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            rows++;
            nonzero |=
                sqlite3_column_type(st, 0) != SQLITE_INTEGER || sqlite3_column_int64(st, 0) != 0;
        }
        const char *text = sqlite3_sql(st);
        if (rc != SQLITE_DONE) {
            fprintf(stderr, "documented SQL fails: %s\n  %s\n", sqlite3_errmsg(h), text);
            failed++;
        } else if (!rows || !nonzero) {
            /* Every documented query must find something in a real database: one that returns
             * nothing (or a count of 0) is a query that cannot match what the code writes. */
            fprintf(stderr, "documented SQL returns %s:\n  %s\n", rows ? "only 0" : "no rows",
                    text);
            failed++;
        }
        if (strstr(text, "status != 'ok'") && strstr(text, "error") && rows >= 3)
            lists_failed = 1;
        sqlite3_finalize(st);
        p = tail;
    }
    sqlite3_close(h);
    if (failed)
        fail_msg("%d of %d documented statements failed or found nothing", failed, n_statements);
    assert_true(n_statements >= 10);
    /* One documented query lists every failed trial with its error text. */
    if (!lists_failed)
        fail_msg("no documented query lists every failed trial (status != 'ok') with its error");
    free(sql);
    free(doc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_every_documented_query_runs_and_finds_rows, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

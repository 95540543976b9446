/* te_db_check: SQLite's integrity and foreign-key checks, the schema objects against the ones
 * the migrations create, and the rows for internal consistency. Every problem is reported with
 * its count and a few examples. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tuning_db/db_impl.h"
#include "tuning_db/schema.h"

enum { N_EXAMPLES = 3 };

typedef struct {
    te_db *db;
    te__conn *c;
    te__sb out;
    int problems;
} checker;

static void problem(checker *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(checker *k, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    te__sb_puts(&k->out, line);
    te__sb_puts(&k->out, "\n");
    k->problems++;
}

/* ---- SQLite's own checks ------------------------------------------------------------------- */

static void check_integrity(checker *k)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(k->c->h, "PRAGMA integrity_check", -1, &st, NULL);
    if (rc == SQLITE_OK) {
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            const char *line = (const char *)sqlite3_column_text(st, 0);
            if (line && strcmp(line, "ok"))
                problem(k, "integrity: %s", line);
        }
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        problem(k, "integrity_check failed: %s", sqlite3_errmsg(k->c->h));
}

/* ---- the schema ---------------------------------------------------------------------------- */

typedef struct {
    char *type, *name, *sql; /* sql with runs of white space folded to one space */
} schema_obj;

typedef struct {
    schema_obj *v;
    int n;
} schema_list;

static char *fold_space(const char *s)
{
    char *out = malloc(strlen(s ? s : "") + 1), *o = out;
    if (!out)
        return NULL;
    int space = 0;
    for (const char *p = s ? s : ""; *p; p++) {
        if (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') {
            space = 1;
            continue;
        }
        if (space && o > out)
            *o++ = ' ';
        space = 0;
        *o++ = *p;
    }
    *o = '\0';
    return out;
}

static void schema_free(schema_list *l)
{
    for (int i = 0; i < l->n; i++) {
        free(l->v[i].type);
        free(l->v[i].name);
        free(l->v[i].sql);
    }
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

/* Every table, index, view and trigger of h (SQLite's internal objects aside). SQLITE_OK or
 * an SQLite error code. */
static int schema_read(sqlite3 *h, schema_list *l)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(h,
                                "SELECT type, name, sql FROM sqlite_master "
                                "WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name",
                                -1, &st, NULL);
    while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        schema_obj *v = realloc(l->v, sizeof *v * (size_t)(l->n + 1));
        if (!v) {
            rc = SQLITE_NOMEM;
            break;
        }
        l->v = v;
        schema_obj *o = &l->v[l->n++];
        o->type = strdup((const char *)sqlite3_column_text(st, 0));
        o->name = strdup((const char *)sqlite3_column_text(st, 1));
        o->sql = fold_space((const char *)sqlite3_column_text(st, 2));
        if (!o->type || !o->name || !o->sql)
            rc = SQLITE_NOMEM;
        else
            rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* The schema this library creates: every migration step applied to an empty in-memory
 * database, so it can never disagree with what te_db_open writes. */
static int schema_expected(schema_list *l)
{
    sqlite3 *h = NULL;
    int rc = sqlite3_open_v2(":memory:", &h, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    for (int v = 0; rc == SQLITE_OK && v < TE_DB_SCHEMA_VERSION; v++)
        rc = sqlite3_exec(h, te__schema_migration(v), NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        rc = schema_read(h, l);
    sqlite3_close(h);
    return rc;
}

static void check_schema(checker *k)
{
    schema_list want = {0}, have = {0};
    int rc = schema_expected(&want);
    if (rc == SQLITE_OK)
        rc = schema_read(k->c->h, &have);
    if (rc != SQLITE_OK) {
        problem(k, "schema check failed: %s", sqlite3_errstr(rc));
        schema_free(&want);
        schema_free(&have);
        return;
    }
    for (int i = 0; i < want.n; i++) {
        const schema_obj *w = &want.v[i], *h = NULL;
        for (int j = 0; j < have.n && !h; j++)
            if (!strcmp(have.v[j].name, w->name))
                h = &have.v[j];
        if (!h)
            problem(k, "schema: %s '%s' is missing (expected: %s)", w->type, w->name, w->sql);
        else if (strcmp(h->type, w->type))
            problem(k, "schema: '%s' is a %s, expected a %s", w->name, h->type, w->type);
        else if (strcmp(h->sql, w->sql))
            problem(k,
                    "schema: %s '%s' differs from the expected definition: has \"%s\", "
                    "expected \"%s\"",
                    w->type, w->name, h->sql, w->sql);
    }
    /* Extra indexes and views only add to what a user can ask; an extra trigger or table can
     * change what the library's own statements do. */
    for (int j = 0; j < have.n; j++) {
        int known = 0;
        for (int i = 0; i < want.n && !known; i++)
            known = !strcmp(want.v[i].name, have.v[j].name);
        if (!known && (!strcmp(have.v[j].type, "trigger") || !strcmp(have.v[j].type, "table")))
            problem(k, "schema: unexpected %s '%s' (not created by Tessera): %s", have.v[j].type,
                    have.v[j].name, have.v[j].sql);
    }
    schema_free(&want);
    schema_free(&have);
}

/* ---- rows ---------------------------------------------------------------------------------- */

/* Runs `sql`, which selects one id per offending row, and reports their count with the first
 * few ids ("<count> <what> (e.g. <noun> 3, 7, 9)"). */
static void check_rows(checker *k, const char *sql, const char *noun, const char *what)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(k->c->h, sql, -1, &st, NULL);
    int64_t n = 0, ex[N_EXAMPLES];
    while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (n < N_EXAMPLES)
            ex[n] = sqlite3_column_int64(st, 0);
        n++;
        rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        problem(k, "check failed (%s): %s", what, sqlite3_errmsg(k->c->h));
        return;
    }
    if (!n)
        return;
    char list[128] = "";
    for (int64_t i = 0; i < n && i < N_EXAMPLES; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%lld", i ? ", " : "",
                 (long long)ex[i]);
    problem(k, "%lld %s (e.g. %s %s%s)", (long long)n, what, noun, list,
            n > N_EXAMPLES ? ", ..." : "");
}

static int text_eq(const char *column, const char *from_key)
{
    /* The key writes a ';' inside a field as ','. */
    for (; *column && *from_key; column++, from_key++)
        if ((*column == ';' ? ',' : *column) != *from_key)
            return 0;
    return !*column && !*from_key;
}

/* Each target's columns against the fields its key spells: the key is the identity, so a
 * column that says something else (another device, compiler, core count) is a contradiction.
 * Empty columns (a target recorded by key only) say nothing and pass. */
static void check_targets(checker *k)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(k->c->h,
                                "SELECT id, key, backend, arch, device, features, sm, cores, "
                                "compiler, driver FROM targets ORDER BY id",
                                -1, &st, NULL);
    int64_t n = 0;
    char first[512] = "";
    while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        rc = SQLITE_OK;
        const char *key = (const char *)sqlite3_column_text(st, 1);
        char *copy = strdup(key ? key : "");
        if (!copy) {
            rc = SQLITE_NOMEM;
            break;
        }
        te_db_target p;
        te__target_parse(copy, &p);
        static const char *const names[] = {"backend",  "arch",   "device", "features",
                                            "compiler", "driver", "sm",     "cores"};
        const char *parsed[] = {
            p.backend ? p.backend : "", p.arch, p.device, p.features, p.compiler, p.driver};
        const int cols[] = {2, 3, 4, 5, 8, 9, 6, 7};
        int bad = -1;
        for (int f = 0; f < 6 && bad < 0; f++) {
            const char *v = (const char *)sqlite3_column_text(st, cols[f]);
            if (v && (*v || f == 0) && !text_eq(v, parsed[f]))
                bad = f;
        }
        int64_t sm = sqlite3_column_int64(st, 6), cores = sqlite3_column_int64(st, 7);
        if (bad < 0 && sm && sm != p.sm)
            bad = 6;
        if (bad < 0 && cores && cores != p.cores)
            bad = 7;
        if (bad >= 0) {
            if (!n)
                snprintf(first, sizeof first, "target %lld: %s column '%s' but key '%s'",
                         (long long)sqlite3_column_int64(st, 0), names[bad],
                         (const char *)sqlite3_column_text(st, cols[bad]), key ? key : "");
            n++;
        }
        free(copy);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        problem(k, "check failed (targets): %s", sqlite3_errmsg(k->c->h));
        return;
    }
    if (n)
        problem(k, "%lld targets whose columns contradict their key (e.g. %s)", (long long)n,
                first);
}

static void check_consistency(checker *k)
{
    static const struct {
        const char *sql, *noun, *what;
    } rows[] = {
        {"SELECT \"rowid\" FROM pragma_foreign_key_check", "row", "rows violate a foreign key"},
        {"SELECT id FROM trials WHERE status = 'ok' AND (median_s IS NULL OR median_s < 0)",
         "trial", "ok trials without a valid median time"},
        {"SELECT id FROM trials WHERE status NOT IN ('ok', 'compile_error', 'runtime_error', "
         "'timeout', 'wrong_answer', 'invalid_schedule', 'load_error', 'other_error')",
         "trial", "trials with an unknown status"},
        {"SELECT id FROM trials WHERE trace_hash = '' OR uid = ''", "trial",
         "trials without a uid or trace hash"},
        {"SELECT id FROM trials WHERE status = 'ok' AND error != ''", "trial",
         "ok trials with an error text"},
        {"SELECT id FROM trials WHERE gflops IS NOT NULL AND (gflops < 0 OR median_s IS NULL "
         "OR median_s <= 0)",
         "trial", "trials with a GFLOP/s figure but no positive median time"},
        /* GFLOP/s is flops / median / 1e9: a median of 1 ns beside 64.5 GFLOP/s is a lie. */
        {"SELECT tr.id FROM trials tr JOIN workloads w ON w.id = tr.workload_id "
         "WHERE tr.gflops IS NOT NULL AND tr.median_s > 0 AND w.flops > 0 "
         "AND abs(tr.gflops - w.flops / tr.median_s * 1e-9) > 1e-3 * (w.flops / tr.median_s * "
         "1e-9) ORDER BY tr.id",
         "trial", "trials whose GFLOP/s disagree with the workload's flops and median time"},
        {"SELECT id FROM trials WHERE transient NOT IN (0, 1) OR (transient = 1 AND status = "
         "'ok')",
         "trial", "trials whose transient flag is not 0 or 1, or is set on an ok trial"},
        {"SELECT id FROM trials WHERE spread_s < 0 OR repeats < 0 OR created_us < 0", "trial",
         "trials with a negative spread, repeat count or time stamp"},
        /* Bytes moved are unknown (NULL) or counted, and a kernel moves at least one byte. */
        {"SELECT id FROM trials WHERE bytes IS NOT NULL AND NOT (bytes > 0 AND bytes < 1e300)",
         "trial", "trials whose bytes moved are not positive"},
        {"SELECT id FROM workloads WHERE flops < 0 OR json_valid(shapes) = 0 ORDER BY id",
         "workload", "workloads with negative flops or shapes that are not JSON"},
        {"SELECT id FROM jobs WHERE trials_done < 0 OR trials_planned < 0 OR started_us < 0 OR "
         "(ended_us IS NOT NULL AND ended_us < started_us) ORDER BY id",
         "job", "jobs with negative counts or an end before their start"},
        {"SELECT rowid FROM target_peaks WHERE NOT (value > 0 AND value < 1e300) OR "
         "(kind = 'fma' AND (dtype NOT IN ('f32', 'f64') OR isa = '')) OR "
         "(kind = 'copy' AND (dtype != '' OR isa != '')) OR measured_us < 0 ORDER BY rowid",
         "peak", "target peaks that are not positive or name no dtype and ISA"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        check_rows(k, rows[i].sql, rows[i].noun, rows[i].what);
    check_targets(k);
}

int te_db_check(te_db *db, char **report)
{
    if (!db)
        return TE_ERR_ARG;
    te__db_clear_err(db);
    if (report)
        *report = NULL;
    checker k = {.db = db, .c = &db->user};
    check_integrity(&k);
    check_schema(&k);
    check_consistency(&k);
    int problems = k.problems;
    if (!problems)
        te__sb_puts(&k.out, "ok");
    else if (k.out.n && k.out.p[k.out.n - 1] == '\n')
        k.out.p[--k.out.n] = '\0';
    int code = problems ? te__db_err(db, TE_ERR_CORRUPT, "%s: %d problem(s) found", db->user.path,
                                     problems)
                        : TE_OK;
    if (k.out.oom) {
        te__sb_free(&k.out);
        return te__db_err(db, TE_ERR_NOMEM, "out of memory");
    }
    if (report)
        *report = k.out.p;
    else
        te__sb_free(&k.out);
    return code;
}

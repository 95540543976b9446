/* tools/db_print.c: the table/JSON printer of `tessera db` (see db_print.h). */
#include "tools/db_print.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- Table cells ---------------------------------------------------------------------------- */

static void add_cell(db_printer *p, const char *s)
{
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 64;
        char **c = realloc(p->cells, cap * sizeof *c);
        if (!c)
            return;
        p->cells = c;
        p->cap = cap;
    }
    p->cells[p->n++] = strdup(s ? s : "");
}

void dbp_init(db_printer *p, int json, int ncol, const char *const *headings)
{
    memset(p, 0, sizeof *p);
    p->json = json;
    p->ncol = ncol < 1 ? 1 : ncol > DBP_MAX_COLS ? DBP_MAX_COLS : ncol;
    if (!json && headings) {
        for (int i = 0; i < p->ncol; i++)
            add_cell(p, headings[i]);
        p->with_head = 1;
    }
}

void dbp_begin(db_printer *p)
{
    p->nfields = 0;
    if (p->json)
        putchar('{');
}

/* In JSON mode, writes the member name (and the comma before it) and returns 1 when the value
 * is to be written; in table mode, adds the cell and returns 0. */
static int field(db_printer *p, const char *key, const char *cell)
{
    if (!p->json) {
        if (cell && p->nfields < p->ncol) {
            add_cell(p, cell);
            p->nfields++;
        }
        return 0;
    }
    if (!key)
        return 0;
    if (p->nfields++)
        putchar(',');
    te_db_json_write_str(stdout, key);
    putchar(':');
    return 1;
}

void dbp_str(db_printer *p, const char *key, const char *v, const char *cell)
{
    if (field(p, key, cell))
        te_db_json_write_str(stdout, v);
}

void dbp_int(db_printer *p, const char *key, int64_t v, const char *cell)
{
    if (field(p, key, cell))
        printf("%lld", (long long)v);
}

void dbp_num(db_printer *p, const char *key, double v, const char *cell)
{
    if (field(p, key, cell))
        te_db_json_write_num(stdout, v);
}

void dbp_bool(db_printer *p, const char *key, int v, const char *cell)
{
    if (field(p, key, cell))
        fputs(v ? "true" : "false", stdout);
}

void dbp_raw(db_printer *p, const char *key, const char *json_text, const char *cell)
{
    if (field(p, key, cell))
        fputs(json_text, stdout);
}

void dbp_end(db_printer *p)
{
    if (p->json)
        puts("}");
    else
        for (; p->nfields < p->ncol; p->nfields++)
            add_cell(p, "");
    p->rows++;
}

size_t dbp_finish(db_printer *p)
{
    size_t w[DBP_MAX_COLS] = {0}, nc = (size_t)p->ncol;
    for (size_t i = 0; i < p->n; i++) {
        size_t len = p->cells[i] ? strlen(p->cells[i]) : 0;
        if (len > w[i % nc])
            w[i % nc] = len;
    }
    for (size_t i = 0; i < p->n; i++) {
        size_t col = i % nc;
        const char *s = p->cells[i] ? p->cells[i] : "";
        if (col == nc - 1)
            printf("%s\n", s);
        else
            printf("%-*s  ", (int)w[col], s);
    }
    for (size_t i = 0; i < p->n; i++)
        free(p->cells[i]);
    free(p->cells);
    size_t rows = p->rows;
    memset(p, 0, sizeof *p);
    return rows;
}

/* ---- Trials --------------------------------------------------------------------------------- */

void dbp_trials(const te_db_trial_list *l, int json, int with_trace)
{
    db_printer p;
    dbp_init(
        &p, json, 8,
        (const char *[]){"#", "STATUS", "MEDIAN", "SPREAD", "GFLOP/S", "BYTES", "TARGET", "WHEN"});
    for (size_t i = 0; i < l->n; i++) {
        const te_db_trial *r = &l->items[i];
        char n[24], m[32], s[32], g[32], b[32], w[40], tk[600];
        snprintf(tk, sizeof tk, "%s%s%s", r->target.key, r->exact_target ? "" : " (fallback)",
                 r->from_system ? " [system]" : "");
        dbp_begin(&p);
        dbp_str(&p, NULL, NULL, db_fmt_i64(n, sizeof n, (int64_t)i + 1));
        dbp_str(&p, "uid", r->uid, NULL);
        dbp_str(&p, "workload", r->workload.key, NULL);
        dbp_str(&p, "target", r->target.key, NULL);
        dbp_bool(&p, "exact_target", r->exact_target, NULL);
        dbp_bool(&p, "from_system", r->from_system, NULL);
        dbp_str(&p, "trace", r->trace, NULL);
        dbp_str(&p, "trace_hash", r->trace_hash, NULL);
        dbp_str(&p, "status", te_trial_status_str(r->status), te_trial_status_str(r->status));
        dbp_str(&p, "error", r->error, NULL);
        dbp_num(&p, "median_s", r->median_s, db_fmt_time(m, sizeof m, r->median_s));
        dbp_num(&p, "spread_s", r->spread_s, db_fmt_time(s, sizeof s, r->spread_s));
        dbp_int(&p, "repeats", r->repeats, NULL);
        dbp_num(&p, "gflops", r->gflops, db_fmt_num(g, sizeof g, r->gflops, "%.1f"));
        dbp_num(&p, "bytes", r->bytes, db_fmt_bytes(b, sizeof b, r->bytes));
        dbp_str(&p, NULL, NULL, tk);
        dbp_int(&p, "created_us", r->created_us, db_fmt_stamp(w, sizeof w, r->created_us));
        dbp_str(&p, "tessera_version", r->tessera_version, NULL);
        dbp_str(&p, "job", r->job_uid, NULL);
        dbp_end(&p);
    }
    dbp_finish(&p);
    /* Traces are several lines long: they follow the table, one block per row. */
    for (size_t i = 0; !json && with_trace && i < l->n; i++) {
        const char *z = l->items[i].trace ? l->items[i].trace : "";
        printf("\n#%zu trace:\n", i + 1);
        while (*z) {
            size_t n = strcspn(z, "\n");
            printf("    %.*s\n", (int)n, z);
            z += n + (z[n] == '\n');
        }
    }
}

/* ---- Cells ---------------------------------------------------------------------------------- */

const char *db_fmt_time(char *buf, size_t n, double s)
{
    if (isnan(s))
        snprintf(buf, n, "-");
    else if (s < 1e-6)
        snprintf(buf, n, "%.1f ns", s * 1e9);
    else if (s < 1e-3)
        snprintf(buf, n, "%.2f us", s * 1e6);
    else if (s < 1)
        snprintf(buf, n, "%.3f ms", s * 1e3);
    else
        snprintf(buf, n, "%.3f s", s);
    return buf;
}

const char *db_fmt_num(char *buf, size_t n, double x, const char *fmt)
{
    if (isnan(x))
        snprintf(buf, n, "-");
    else
        snprintf(buf, n, fmt, x);
    return buf;
}

const char *db_fmt_bytes(char *buf, size_t n, double x)
{
    if (!(x >= 0) || !isfinite(x))
        snprintf(buf, n, "-");
    else if (x < 1024)
        snprintf(buf, n, "%.0f B", x);
    else if (x < 1024.0 * 1024)
        snprintf(buf, n, "%.1f KiB", x / 1024);
    else if (x < 1024.0 * 1024 * 1024)
        snprintf(buf, n, "%.1f MiB", x / (1024.0 * 1024));
    else
        snprintf(buf, n, "%.1f GiB", x / (1024.0 * 1024 * 1024));
    return buf;
}

const char *db_fmt_i64(char *buf, size_t n, int64_t x)
{
    snprintf(buf, n, "%lld", (long long)x);
    return buf;
}

const char *db_fmt_stamp(char *buf, size_t n, int64_t us)
{
    if (us <= 0) {
        snprintf(buf, n, "-");
        return buf;
    }
    time_t t = (time_t)(us / 1000000);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, n, "%Y-%m-%d %H:%M:%SZ", &tm);
    return buf;
}

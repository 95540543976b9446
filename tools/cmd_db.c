/* `tessera db`: query and maintain the tuning database. Each subcommand parses its own options
 * from a small table, prints aligned tables for people or --json for scripts, and returns
 * 0 (ok), 1 (failed) or 2 (bad usage). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tessera/tuning_db.h"
#include "tools/cli.h"
#include "tuning_db/json.h"

#define EXIT_USAGE 2

/* ---- option parsing ------------------------------------------------------------------------ */

typedef struct {
    const char *name;  /* "--db" */
    const char *alias; /* "-o" or NULL */
    int takes_value;
    const char **value; /* for options with a value */
    int *flag;          /* for flags */
} opt_spec;

typedef struct {
    const char *name, *args, *summary, *details;
    int (*run)(int argc, char **argv);
    int hidden;
} subcommand;

static const subcommand *current;

static void sub_usage(FILE *f, const subcommand *s)
{
    fprintf(f, "usage: tessera db %s %s\n\n%s\n", s->name, s->args, s->summary);
    if (s->details)
        fprintf(f, "\n%s", s->details);
    fprintf(f, "\ncommon options:\n"
               "  --db FILE   the user database (default: $TESSERA_DB, else ./tessera.db)\n"
               "  --help      this text\n");
}

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "tessera db %s: ", current->name);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n\n");
    sub_usage(stderr, current);
    return EXIT_USAGE;
}

/* Parses argv[1..] against specs; positional arguments go to pos (at most max_pos, NULL-
 * terminated). Returns 0, EXIT_USAGE (message printed) or -1 for --help (usage printed). */
static int parse_opts(int argc, char **argv, const opt_spec *specs, const char **pos, int max_pos)
{
    int npos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            sub_usage(stdout, current);
            return -1;
        }
        if (a[0] == '-' && a[1] != '\0') {
            const opt_spec *s = NULL;
            const char *eq = strchr(a, '=');
            size_t n = eq ? (size_t)(eq - a) : strlen(a);
            for (int k = 0; specs[k].name && !s; k++)
                if ((strlen(specs[k].name) == n && !strncmp(a, specs[k].name, n)) ||
                    (specs[k].alias && !strcmp(a, specs[k].alias)))
                    s = &specs[k];
            if (!s)
                return usage_error("unknown option '%s'", a);
            if (!s->takes_value) {
                if (eq)
                    return usage_error("option '%s' takes no value", a);
                *s->flag = 1;
                continue;
            }
            if (eq)
                *s->value = eq + 1;
            else if (i + 1 < argc)
                *s->value = argv[++i];
            else
                return usage_error("option '%s' needs a value", a);
            continue;
        }
        if (npos >= max_pos)
            return usage_error("unexpected argument '%s'", a);
        pos[npos++] = a;
    }
    if (pos)
        pos[npos] = NULL;
    return 0;
}

static int parse_i64(const char *text, const char *what, int64_t lo, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end || v < lo)
        return usage_error("bad number for %s", what);
    *out = v;
    return 0;
}

static const char *db_path(const char *given)
{
    if (given)
        return given;
    const char *env = getenv("TESSERA_DB");
    return env && *env ? env : "tessera.db";
}

/* Opens for reading (never creates; a read-only file opens read-only) or for writing. */
static int open_db(const char *given, int write, te_db **out)
{
    const char *path = db_path(given);
    te_db_options o = {.flags = write ? 0 : TE_DB_NO_CREATE};
    int code = te_db_open(path, &o, out);
    if (code == TE_ERR_READONLY && !write) {
        te_db_close(*out);
        o.flags |= TE_DB_READONLY;
        code = te_db_open(path, &o, out);
    }
    if (code) {
        fprintf(stderr, "tessera db %s: %s\n", current->name, te_db_errmsg(*out));
        te_db_close(*out);
        *out = NULL;
        return 1;
    }
    return 0;
}

static int fail_db(te_db *db)
{
    fprintf(stderr, "tessera db %s: %s\n", current->name, te_db_errmsg(db));
    te_db_close(db);
    return 1;
}

/* ---- output helpers ------------------------------------------------------------------------ */

/* A table of strings printed with aligned columns. */
typedef struct {
    int ncol;
    char **cells;
    size_t n, cap;
} table;

static void table_add(table *t, ...)
{
    va_list ap;
    va_start(ap, t);
    if (t->n + (size_t)t->ncol > t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 64;
        while (cap < t->n + (size_t)t->ncol)
            cap *= 2;
        char **p = realloc(t->cells, cap * sizeof *p);
        if (!p) {
            va_end(ap);
            return;
        }
        t->cells = p;
        t->cap = cap;
    }
    for (int i = 0; i < t->ncol; i++) {
        const char *s = va_arg(ap, const char *);
        t->cells[t->n++] = strdup(s ? s : "");
    }
    va_end(ap);
}

static void table_print(table *t, FILE *f)
{
    size_t w[16] = {0};
    for (size_t i = 0; i < t->n; i++) {
        size_t len = t->cells[i] ? strlen(t->cells[i]) : 0;
        if (len > w[i % (size_t)t->ncol])
            w[i % (size_t)t->ncol] = len;
    }
    for (size_t i = 0; i < t->n; i++) {
        int col = (int)(i % (size_t)t->ncol);
        const char *s = t->cells[i] ? t->cells[i] : "";
        if (col == t->ncol - 1)
            fprintf(f, "%s\n", s);
        else
            fprintf(f, "%-*s  ", (int)w[col], s);
    }
    for (size_t i = 0; i < t->n; i++)
        free(t->cells[i]);
    free(t->cells);
    memset(t, 0, sizeof *t);
}

static const char *fmt_time(char *buf, size_t n, double s)
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

static const char *fmt_num(char *buf, size_t n, double x, const char *fmt)
{
    if (isnan(x))
        snprintf(buf, n, "-");
    else
        snprintf(buf, n, fmt, x);
    return buf;
}

static const char *fmt_i64(char *buf, size_t n, int64_t x)
{
    snprintf(buf, n, "%lld", (long long)x);
    return buf;
}

static const char *fmt_stamp(char *buf, size_t n, int64_t us)
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

static void jkey(const char *key, int first)
{
    if (!first)
        putchar(',');
    te__json_write_str(stdout, key);
    putchar(':');
}

static void jstr(const char *key, const char *v, int first)
{
    jkey(key, first);
    te__json_write_str(stdout, v);
}

static void jnum(const char *key, double v)
{
    jkey(key, 0);
    te__json_write_num(stdout, v);
}

static void jint(const char *key, int64_t v)
{
    jkey(key, 0);
    printf("%lld", (long long)v);
}

static void json_trial(const te_db_trial *t)
{
    putchar('{');
    jstr("uid", t->uid, 1);
    jstr("workload", t->workload.key, 0);
    jstr("target", t->target.key, 0);
    jkey("exact_target", 0);
    fputs(t->exact_target ? "true" : "false", stdout);
    jkey("from_system", 0);
    fputs(t->from_system ? "true" : "false", stdout);
    jstr("trace", t->trace, 0);
    jstr("trace_hash", t->trace_hash, 0);
    jstr("status", te_trial_status_str(t->status), 0);
    jstr("error", t->error, 0);
    jnum("median_s", t->median_s);
    jnum("spread_s", t->spread_s);
    jint("repeats", t->repeats);
    jnum("gflops", t->gflops);
    jint("created_us", t->created_us);
    jstr("tessera_version", t->tessera_version, 0);
    jstr("job", t->job_uid, 0);
    putchar('}');
}

/* ---- subcommands --------------------------------------------------------------------------- */

static int cmd_info(int argc, char **argv)
{
    const char *path = NULL;
    int json = 0;
    opt_spec specs[] = {{"--db", NULL, 1, &path, NULL}, {"--json", NULL, 0, NULL, &json}, {0}};
    int rc = parse_opts(argc, argv, specs, NULL, 0);
    if (rc)
        return rc < 0 ? 0 : rc;
    te_db *db;
    if (open_db(path, 0, &db))
        return 1;
    te_db_info in;
    if (te_db_get_info(db, &in))
        return fail_db(db);
    if (json) {
        putchar('{');
        jstr("path", in.path, 1);
        jstr("system_path", in.system_path, 0);
        jint("schema_version", in.schema_version);
        jstr("journal_mode", in.journal_mode, 0);
        jkey("readonly", 0);
        fputs(in.readonly ? "true" : "false", stdout);
        jint("targets", in.n_targets);
        jint("workloads", in.n_workloads);
        jint("trials", in.n_trials);
        jint("ok_trials", in.n_ok);
        jint("jobs", in.n_jobs);
        jint("system_trials", in.n_system_trials);
        jint("file_bytes", in.file_bytes);
        puts("}");
    } else {
        printf("database:        %s%s\n", in.path, in.readonly ? " (read-only)" : "");
        printf("system database: %s\n", in.system_path ? in.system_path : "(none)");
        printf("schema version:  %d\n", in.schema_version);
        printf("journal mode:    %s\n", in.journal_mode);
        printf("file size:       %lld bytes\n", (long long)in.file_bytes);
        printf("targets:         %lld\n", (long long)in.n_targets);
        printf("workloads:       %lld\n", (long long)in.n_workloads);
        printf("trials:          %lld (%lld ok)\n", (long long)in.n_trials, (long long)in.n_ok);
        printf("jobs:            %lld\n", (long long)in.n_jobs);
        if (in.system_path)
            printf("system trials:   %lld\n", (long long)in.n_system_trials);
    }
    te_db_close(db);
    return 0;
}

typedef struct {
    const char *wfilter, *tfilter, *wexact;
    int json, nrows;
    table tab;
    char **targets; /* for best without --target */
    size_t ntargets;
} list_ctx;

static int list_cb(const te_db_summary *r, void *ud)
{
    list_ctx *c = ud;
    if (c->wexact && strcmp(r->workload_key, c->wexact))
        return 0;
    if (c->wexact) {
        for (size_t i = 0; i < c->ntargets; i++)
            if (!strcmp(c->targets[i], r->target_key))
                return 0;
        char **p = realloc(c->targets, (c->ntargets + 1) * sizeof *p);
        if (!p)
            return 1;
        c->targets = p;
        c->targets[c->ntargets++] = strdup(r->target_key);
        return 0;
    }
    if (c->wfilter && !strstr(r->workload_key, c->wfilter))
        return 0;
    if (c->tfilter && !strstr(r->target_key, c->tfilter))
        return 0;
    if (c->json) {
        putchar('{');
        jstr("workload", r->workload_key, 1);
        jstr("target", r->target_key, 0);
        jint("trials", r->n_trials);
        jint("ok", r->n_ok);
        jnum("best_median_s", r->best_median_s);
        jnum("best_gflops", r->best_gflops);
        jkey("from_system", 0);
        fputs(r->from_system ? "true" : "false", stdout);
        puts("}");
    } else {
        char a[32], b[32], t[32], g[32];
        table_add(&c->tab, r->workload_key, r->target_key, fmt_i64(a, sizeof a, r->n_trials),
                  fmt_i64(b, sizeof b, r->n_ok), fmt_time(t, sizeof t, r->best_median_s),
                  fmt_num(g, sizeof g, r->best_gflops, "%.1f"), r->from_system ? "system" : "user");
    }
    c->nrows++;
    return 0;
}

static int cmd_list(int argc, char **argv)
{
    const char *path = NULL;
    list_ctx c = {.tab = {.ncol = 7}};
    opt_spec specs[] = {{"--db", NULL, 1, &path, NULL},
                        {"--json", NULL, 0, NULL, &c.json},
                        {"--workload", "-w", 1, &c.wfilter, NULL},
                        {"--target", "-t", 1, &c.tfilter, NULL},
                        {0}};
    int rc = parse_opts(argc, argv, specs, NULL, 0);
    if (rc)
        return rc < 0 ? 0 : rc;
    te_db *db;
    if (open_db(path, 0, &db))
        return 1;
    if (!c.json)
        table_add(&c.tab, "WORKLOAD", "TARGET", "TRIALS", "OK", "BEST", "GFLOP/S", "DB");
    int code = te_db_summary_foreach(db, 0, list_cb, &c);
    if (code) {
        table_print(&c.tab, stdout);
        return fail_db(db);
    }
    if (!c.json) {
        table_print(&c.tab, stdout);
        if (!c.nrows)
            printf("(no trials)\n");
    }
    te_db_close(db);
    return 0;
}

static void print_trials(const te_db_trial_list *l, int json, int with_trace)
{
    if (json) {
        for (size_t i = 0; i < l->n; i++) {
            json_trial(&l->items[i]);
            putchar('\n');
        }
        return;
    }
    /* Traces are several lines long: they follow the table, one block per row. */
    table t = {.ncol = 7};
    table_add(&t, "#", "STATUS", "MEDIAN", "SPREAD", "GFLOP/S", "TARGET", "WHEN");
    for (size_t i = 0; i < l->n; i++) {
        const te_db_trial *r = &l->items[i];
        char n[24], m[32], s[32], g[32], w[40], tk[600];
        snprintf(tk, sizeof tk, "%s%s%s", r->target.key, r->exact_target ? "" : " (fallback)",
                 r->from_system ? " [system]" : "");
        table_add(&t, fmt_i64(n, sizeof n, (int64_t)i + 1), te_trial_status_str(r->status),
                  fmt_time(m, sizeof m, r->median_s), fmt_time(s, sizeof s, r->spread_s),
                  fmt_num(g, sizeof g, r->gflops, "%.1f"), tk,
                  fmt_stamp(w, sizeof w, r->created_us));
    }
    table_print(&t, stdout);
    for (size_t i = 0; with_trace && i < l->n; i++) {
        const char *z = l->items[i].trace ? l->items[i].trace : "";
        printf("\n#%zu trace:\n", i + 1);
        while (*z) {
            size_t n = strcspn(z, "\n");
            printf("    %.*s\n", (int)n, z);
            z += n + (z[n] == '\n');
        }
    }
}

static int cmd_best(int argc, char **argv)
{
    const char *path = NULL, *wkey = NULL, *tkey = NULL, *ktext = NULL;
    int json = 0, fallback = 0;
    opt_spec specs[] = {{"--db", NULL, 1, &path, NULL},
                        {"--json", NULL, 0, NULL, &json},
                        {"--workload", "-w", 1, &wkey, NULL},
                        {"--target", "-t", 1, &tkey, NULL},
                        {"--top", "-k", 1, &ktext, NULL},
                        {"--fallback", NULL, 0, NULL, &fallback},
                        {0}};
    int rc = parse_opts(argc, argv, specs, NULL, 0);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (!wkey)
        return usage_error("%s", "--workload is required");
    int64_t k = 1;
    if (ktext && (rc = parse_i64(ktext, "--top", 1, &k)))
        return rc;
    te_db *db;
    if (open_db(path, 0, &db))
        return 1;
    list_ctx c = {.wexact = wkey};
    if (!tkey && (rc = te_db_summary_foreach(db, 0, list_cb, &c)) != 0) {
        if (rc < 0)
            return fail_db(db);
    }
    size_t ntk = tkey ? 1 : c.ntargets;
    int found = 0, status = 0;
    te_db_trial_list *all[ntk ? ntk : 1];
    for (size_t i = 0; i < ntk; i++) {
        te_db_target t = {.key = tkey ? tkey : c.targets[i]};
        all[i] = NULL;
        int code = te_db_top_k(db, wkey, &t, (int)k, fallback ? TE_DB_FALLBACK : 0, &all[i]);
        if (code == TE_OK)
            found++;
        else if (code != TE_ERR_NOT_FOUND || tkey) {
            fprintf(stderr, "tessera db best: %s\n", te_db_errmsg(db));
            status = 1;
        }
    }
    for (size_t i = 0; i < ntk; i++) {
        if (all[i])
            print_trials(all[i], json, 1);
        te_db_trial_list_free(all[i]);
    }
    if (!found && !status) {
        fprintf(stderr, "tessera db best: no ok trial of '%s'\n", wkey);
        status = 1;
    }
    for (size_t i = 0; i < c.ntargets; i++)
        free(c.targets[i]);
    free(c.targets);
    te_db_close(db);
    return status;
}

static int cmd_history(int argc, char **argv)
{
    const char *path = NULL, *wkey = NULL, *tkey = NULL, *ltext = NULL;
    int json = 0;
    opt_spec specs[] = {{"--db", NULL, 1, &path, NULL},       {"--json", NULL, 0, NULL, &json},
                        {"--workload", "-w", 1, &wkey, NULL}, {"--target", "-t", 1, &tkey, NULL},
                        {"--limit", "-n", 1, &ltext, NULL},   {0}};
    int rc = parse_opts(argc, argv, specs, NULL, 0);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (!wkey)
        return usage_error("%s", "--workload is required");
    int64_t limit = 0;
    if (ltext && (rc = parse_i64(ltext, "--limit", 0, &limit)))
        return rc;
    te_db *db;
    if (open_db(path, 0, &db))
        return 1;
    te_db_target t = {.key = tkey};
    te_db_trial_list *l = NULL;
    if (te_db_history(db, wkey, tkey ? &t : NULL, limit, &l))
        return fail_db(db);
    print_trials(l, json, 1);
    te_db_trial_list_free(l);
    te_db_close(db);
    return 0;
}

static int cmd_jobs(int argc, char **argv)
{
    const char *path = NULL, *idtext = NULL;
    int json = 0;
    opt_spec specs[] = {{"--db", NULL, 1, &path, NULL},
                        {"--json", NULL, 0, NULL, &json},
                        {"--id", NULL, 1, &idtext, NULL},
                        {0}};
    int rc = parse_opts(argc, argv, specs, NULL, 0);
    if (rc)
        return rc < 0 ? 0 : rc;
    int64_t id = 0;
    if (idtext && (rc = parse_i64(idtext, "--id", 1, &id)))
        return rc;
    te_db *db;
    if (open_db(path, 0, &db))
        return 1;
    te_db_job_list *l = NULL;
    if (te_db_jobs(db, id, &l))
        return fail_db(db);
    table t = {.ncol = 7};
    if (!json)
        table_add(&t, "ID", "STATUS", "TRIALS", "STARTED", "ENDED", "HOST/PID", "COMMAND");
    for (size_t i = 0; i < l->n; i++) {
        const te_db_job *j = &l->items[i];
        if (json) {
            putchar('{');
            jkey("id", 1);
            printf("%lld", (long long)j->id);
            jstr("uid", j->uid, 0);
            jstr("status", te_job_status_str(j->status), 0);
            jint("trials_done", j->trials_done);
            jint("trials_planned", j->trials_planned);
            jint("started_us", j->started_us);
            jint("ended_us", j->ended_us);
            jstr("host", j->host, 0);
            jint("pid", j->pid);
            jstr("command", j->command, 0);
            puts("}");
            continue;
        }
        char a[24], b[48], c[40], d[40], e[300];
        snprintf(b, sizeof b, "%lld/%lld", (long long)j->trials_done, (long long)j->trials_planned);
        snprintf(e, sizeof e, "%s/%lld", j->host, (long long)j->pid);
        table_add(&t, fmt_i64(a, sizeof a, j->id), te_job_status_str(j->status), b,
                  fmt_stamp(c, sizeof c, j->started_us), fmt_stamp(d, sizeof d, j->ended_us), e,
                  j->command);
    }
    if (!json)
        table_print(&t, stdout);
    te_db_job_list_free(l);
    te_db_close(db);
    return 0;
}

static int cmd_export(int argc, char **argv)
{
    const char *path = NULL, *wkey = NULL, *tkey = NULL, *out = NULL;
    int json = 0; /* accepted for uniformity: export always writes JSON lines */
    opt_spec specs[] = {{"--db", NULL, 1, &path, NULL},       {"--json", NULL, 0, NULL, &json},
                        {"--workload", "-w", 1, &wkey, NULL}, {"--target", "-t", 1, &tkey, NULL},
                        {"--output", "-o", 1, &out, NULL},    {0}};
    int rc = parse_opts(argc, argv, specs, NULL, 0);
    if (rc)
        return rc < 0 ? 0 : rc;
    te_db *db;
    if (open_db(path, 0, &db))
        return 1;
    FILE *f = stdout;
    if (out && strcmp(out, "-") && !(f = fopen(out, "w"))) {
        fprintf(stderr, "tessera db export: %s: %s\n", out, strerror(errno));
        te_db_close(db);
        return 1;
    }
    int64_t n = 0;
    int code = te_db_export(db, f, wkey, tkey, &n);
    if (f != stdout && fclose(f) != 0 && !code) {
        fprintf(stderr, "tessera db export: %s: %s\n", out, strerror(errno));
        te_db_close(db);
        return 1;
    }
    if (code)
        return fail_db(db);
    if (f != stdout)
        fprintf(stderr, "exported %lld trials to %s\n", (long long)n, out);
    te_db_close(db);
    return 0;
}

static void print_stats(const char *what, const char *src, const te_db_import_stats *s, int json)
{
    if (json) {
        putchar('{');
        jstr("source", src, 1);
        jint("read", s->lines);
        jint("imported", s->imported);
        jint("duplicates", s->duplicates);
        puts("}");
    } else {
        printf("%s: %lld trials read, %lld %s, %lld already present\n", src, (long long)s->lines,
               (long long)s->imported, what, (long long)s->duplicates);
    }
}

static int cmd_import_or_merge(int argc, char **argv, int merge)
{
    const char *path = NULL, *files[65];
    int json = 0;
    opt_spec specs[] = {{"--db", NULL, 1, &path, NULL}, {"--json", NULL, 0, NULL, &json}, {0}};
    int rc = parse_opts(argc, argv, specs, files, 64);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (!files[0])
        return usage_error("%s", merge ? "give at least one database to merge"
                                       : "give at least one file to import ('-' = stdin)");
    te_db *db;
    if (open_db(path, 1, &db))
        return 1;
    int status = 0;
    for (int i = 0; files[i]; i++) {
        te_db_import_stats s;
        int code;
        if (merge) {
            code = te_db_merge(db, files[i], &s);
        } else {
            FILE *f = strcmp(files[i], "-") ? fopen(files[i], "rb") : stdin;
            if (!f) {
                fprintf(stderr, "tessera db import: %s: %s\n", files[i], strerror(errno));
                status = 1;
                continue;
            }
            code = te_db_import(db, f, &s);
            if (f != stdin)
                fclose(f);
        }
        if (code) {
            fprintf(stderr, "tessera db %s: %s: %s\n", current->name, files[i], te_db_errmsg(db));
            status = 1;
            continue;
        }
        print_stats(merge ? "merged" : "imported", files[i], &s, json);
    }
    te_db_close(db);
    return status;
}

static int cmd_import(int argc, char **argv) { return cmd_import_or_merge(argc, argv, 0); }
static int cmd_merge(int argc, char **argv) { return cmd_import_or_merge(argc, argv, 1); }

static int cmd_prune(int argc, char **argv)
{
    const char *path = NULL, *days = NULL, *statuses = NULL;
    int json = 0, keep_best = 0, dry = 0;
    opt_spec specs[] = {{"--db", NULL, 1, &path, NULL},
                        {"--json", NULL, 0, NULL, &json},
                        {"--older-than", NULL, 1, &days, NULL},
                        {"--status", NULL, 1, &statuses, NULL},
                        {"--keep-best", NULL, 0, NULL, &keep_best},
                        {"--dry-run", "-n", 0, NULL, &dry},
                        {0}};
    int rc = parse_opts(argc, argv, specs, NULL, 0);
    if (rc)
        return rc < 0 ? 0 : rc;
    te_db_prune_options o = {.keep_best = keep_best, .dry_run = dry};
    if (days) {
        char *end;
        errno = 0;
        double d = strtod(days, &end);
        if (errno || end == days || *end || !(d >= 0))
            return usage_error("bad number of days '%s'", days);
        o.older_than_us = te_db_now_us() - (int64_t)(d * 86400e6);
        if (o.older_than_us <= 0)
            o.older_than_us = 1;
    }
    if (statuses) {
        char *copy = strdup(statuses);
        for (char *s = strtok(copy, ","); s; s = strtok(NULL, ",")) {
            te_trial_status st;
            if (te_trial_status_parse(s, &st)) {
                rc = usage_error("unknown trial status '%s'", s);
                break;
            }
            o.status_mask |= 1u << st;
        }
        free(copy);
        if (rc)
            return rc;
    }
    if (!days && !statuses)
        return usage_error("%s", "give --older-than DAYS and/or --status LIST");
    te_db *db;
    if (open_db(path, !dry, &db))
        return 1;
    int64_t n = 0;
    if (te_db_prune(db, &o, &n))
        return fail_db(db);
    if (json)
        printf("{\"deleted\":%lld,\"dry_run\":%s}\n", (long long)n, dry ? "true" : "false");
    else
        printf("%s %lld trials\n", dry ? "would delete" : "deleted", (long long)n);
    te_db_close(db);
    return 0;
}

static int cmd_check(int argc, char **argv)
{
    const char *path = NULL;
    int json = 0;
    opt_spec specs[] = {{"--db", NULL, 1, &path, NULL}, {"--json", NULL, 0, NULL, &json}, {0}};
    int rc = parse_opts(argc, argv, specs, NULL, 0);
    if (rc)
        return rc < 0 ? 0 : rc;
    te_db *db;
    if (open_db(path, 0, &db))
        return 1;
    char *report = NULL;
    int code = te_db_check(db, &report);
    if (code && !report)
        return fail_db(db);
    if (json) {
        printf("{\"ok\":%s,", code ? "false" : "true");
        jstr("report", report, 1);
        puts("}");
    } else {
        printf("%s: %s\n", db_path(path), report);
    }
    free(report);
    te_db_close(db);
    return code ? 1 : 0;
}

/* Hidden: measures how many trials per second one writer records, batched. */
static int cmd_bench_insert(int argc, char **argv)
{
    const char *path = NULL, *ntext = NULL, *btext = NULL;
    int json = 0;
    opt_spec specs[] = {{"--db", NULL, 1, &path, NULL},
                        {"--json", NULL, 0, NULL, &json},
                        {"--trials", "-n", 1, &ntext, NULL},
                        {"--batch", NULL, 1, &btext, NULL},
                        {0}};
    int rc = parse_opts(argc, argv, specs, NULL, 0);
    if (rc)
        return rc < 0 ? 0 : rc;
    int64_t n = 100000, batch = 1000;
    if ((ntext && (rc = parse_i64(ntext, "--trials", 1, &n))) ||
        (btext && (rc = parse_i64(btext, "--batch", 1, &batch))))
        return rc;
    char tmp[] = "/tmp/tessera-bench-XXXXXX";
    int own = !path;
    if (own) {
        int fd = mkstemp(tmp);
        if (fd < 0) {
            perror("tessera db bench-insert: mkstemp");
            return 1;
        }
        close(fd);
        path = tmp;
    }
    te_db *db;
    if (open_db(path, 1, &db))
        return 1;
    te_db_trial *tr = calloc((size_t)batch, sizeof *tr);
    char(*traces)[64] = calloc((size_t)batch, 64);
    if (!tr || !traces) {
        fprintf(stderr, "tessera db bench-insert: out of memory\n");
        return 1;
    }
    te_db_target tg = {.backend = "c",
                       .arch = "x86_64",
                       .device = "bench CPU",
                       .features = "avx2,fma",
                       .cores = 2,
                       .compiler = "gcc 12.2.0"};
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    int status = 0;
    for (int64_t done = 0; done < n && !status;) {
        int64_t m = n - done < batch ? n - done : batch;
        for (int64_t i = 0; i < m; i++) {
            snprintf(traces[i], 64, "split(i,%lld);split(j,%lld);vectorize(j)",
                     (long long)(done + i), (long long)((done + i) % 17));
            tr[i] = (te_db_trial){.workload = {.key = "matmul;m=512,n=512,k=512;f32"},
                                  .target = tg,
                                  .trace = traces[i],
                                  .status = TE_TRIAL_OK,
                                  .median_s = 1e-3 + (double)(done + i) * 1e-9,
                                  .spread_s = 1e-5,
                                  .repeats = 10,
                                  .gflops = 268.4};
        }
        if (te_db_record_trials(db, tr, (size_t)m)) {
            fprintf(stderr, "tessera db bench-insert: %s\n", te_db_errmsg(db));
            status = 1;
        }
        done += m;
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
    te_db_info in;
    te_db_get_info(db, &in);
    if (!status) {
        if (json)
            printf("{\"trials\":%lld,\"batch\":%lld,\"seconds\":%.6f,\"trials_per_s\":%.0f,"
                   "\"journal_mode\":\"%s\"}\n",
                   (long long)n, (long long)batch, s, (double)n / s, in.journal_mode);
        else
            printf("%lld trials in batches of %lld: %.3f s, %.0f trials/s (journal %s, "
                   "synchronous %s)\n",
                   (long long)n, (long long)batch, s, (double)n / s, in.journal_mode,
                   strcmp(in.journal_mode, "wal") ? "FULL" : "NORMAL");
    }
    free(tr);
    free(traces);
    te_db_close(db);
    if (own) {
        unlink(tmp);
        char side[64];
        snprintf(side, sizeof side, "%s-wal", tmp);
        unlink(side);
        snprintf(side, sizeof side, "%s-shm", tmp);
        unlink(side);
    }
    return status;
}

static const subcommand subcommands[] = {
    {"info", "[--json]", "Show the database's path, schema version, journal mode and counts.", NULL,
     cmd_info, 0},
    {"list", "[--workload TEXT] [--target TEXT] [--json]",
     "List every (workload, target) pair with its trial counts and best time.",
     "options:\n  -w, --workload TEXT  only workloads whose key contains TEXT\n"
     "  -t, --target TEXT    only targets whose key contains TEXT\n",
     cmd_list, 0},
    {"best", "--workload KEY [--target KEY] [--top K] [--fallback] [--json]",
     "Show the fastest ok trials of a workload (on every target, or one).",
     "options:\n  -w, --workload KEY  exact workload key, e.g. 'matmul;m=1024,n=1024,k=1024;f32'\n"
     "  -t, --target KEY    exact target key\n  -k, --top K         the K fastest (default 1)\n"
     "  --fallback          with --target: use the nearest compatible target when the exact\n"
     "                      one has no record, and say so\n",
     cmd_best, 0},
    {"history", "--workload KEY [--target KEY] [--limit N] [--json]",
     "Show every trial of a workload, oldest first.",
     "options:\n  -w, --workload KEY  exact workload key\n  -t, --target KEY    exact target "
     "key\n  -n, --limit N       only the newest N\n",
     cmd_history, 0},
    {"jobs", "[--id N] [--json]", "List tuning jobs, newest first.", NULL, cmd_jobs, 0},
    {"export", "[--workload KEY] [--target KEY] [-o FILE] [--json]",
     "Write trials as JSON lines (one trial per line with its workload, target and job).",
     "options:\n  -o, --output FILE   write to FILE instead of stdout\n", cmd_export, 0},
    {"import", "FILE... [--json]",
     "Read JSON lines written by export ('-' = stdin). Each file is one transaction: a\n"
     "malformed line rejects the whole file (with its line number) and imports nothing.\n"
     "Trials already present (same uid) are skipped.",
     NULL, cmd_import, 0},
    {"merge", "DATABASE... [--json]",
     "Fold other Tessera databases (other machines, shards) into this one without duplicating\n"
     "trials. The other files are opened read-only.",
     NULL, cmd_merge, 0},
    {"prune", "[--older-than DAYS] [--status LIST] [--keep-best] [--dry-run] [--json]",
     "Delete trials older than DAYS and/or with one of the statuses in LIST\n"
     "(comma-separated: ok, compile_error, runtime_error, timeout, wrong_answer,\n"
     "invalid_schedule, load_error, other_error).",
     "options:\n  --keep-best   never delete the best ok trial of a (workload, target)\n"
     "  -n, --dry-run  only count\n",
     cmd_prune, 0},
    {"check", "[--json]",
     "Run SQLite's integrity and foreign-key checks and Tessera's consistency checks.\n"
     "Exit status 1 when a problem is found.",
     NULL, cmd_check, 0},
    {"bench-insert", "[--trials N] [--batch B] [--db FILE] [--json]",
     "Measure how many trials per second one writer records in batched transactions\n"
     "(default: 100000 trials, batches of 1000, in a temporary file).",
     NULL, cmd_bench_insert, 1},
};

static void db_usage(FILE *f)
{
    fprintf(f, "usage: tessera db <subcommand> [--db FILE] [--json] [options]\n\nsubcommands:\n");
    for (size_t i = 0; i < sizeof subcommands / sizeof subcommands[0]; i++)
        if (!subcommands[i].hidden)
            fprintf(f, "  %-8s %s\n", subcommands[i].name, subcommands[i].args);
    fprintf(f, "\nThe database is --db FILE, else $TESSERA_DB, else ./tessera.db; a read-only\n"
               "system database comes from $TESSERA_SYSTEM_DB. 'tessera db <subcommand> --help'\n"
               "describes one subcommand. Exit status: 0 ok, 1 failed, 2 bad usage.\n");
}

int te_cmd_db(int argc, char **argv)
{
    if (argc < 2) {
        db_usage(stderr);
        return EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        db_usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof subcommands / sizeof subcommands[0]; i++)
        if (!strcmp(argv[1], subcommands[i].name)) {
            current = &subcommands[i];
            return subcommands[i].run(argc - 1, argv + 1);
        }
    fprintf(stderr, "tessera db: unknown subcommand '%s'\n\n", argv[1]);
    db_usage(stderr);
    return EXIT_USAGE;
}

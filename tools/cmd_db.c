/*
 * `tessera db`: query and maintain the tuning database.
 *
 * Every subcommand is one row of the table at the end of this file: its name, usage text,
 * the options it accepts beyond the common ones (--db FILE, --json, --help), how many
 * positional arguments it takes, and the function that runs it. One parser (getopt_long)
 * reads every command line against that row, so options behave the same everywhere: long
 * names exactly as listed (no abbreviations), `--name=VALUE` or `--name VALUE`, one-letter
 * aliases, options and arguments in any order, `--` ends the options. Output goes through the
 * one table/JSON printer (db_print.c). Exit status: 0 ok, 1 failed, 2 bad usage (a message
 * and the subcommand's usage on stderr).
 */
#define _GNU_SOURCE

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tessera/tuning_db.h"
#include "tools/cli.h"
#include "tools/db_print.h"
#include "tools/roofline.h"

#define EXIT_USAGE 2
#define MAX_POS 64 /* positional arguments (import, merge) */

/* ---- Options --------------------------------------------------------------------------------- */

/* Every option of every subcommand. */
typedef enum db_opt {
    OPT_NONE,
    OPT_DB,
    OPT_JSON,
    OPT_HELP,
    OPT_WORKLOAD,
    OPT_TARGET,
    OPT_TOP,
    OPT_FALLBACK,
    OPT_LIMIT,
    OPT_ID,
    OPT_OUTPUT,
    OPT_OLDER_THAN,
    OPT_STATUS,
    OPT_KEEP_BEST,
    OPT_DRY_RUN,
    OPT_TRIALS,
    OPT_BATCH,
    OPT_SVG,
    OPT_COUNT
} db_opt;

static const struct {
    const char *name; /* long name, without "--" */
    int has_value;
} opt_defs[OPT_COUNT] = {
    [OPT_DB] = {"db", 1},
    [OPT_JSON] = {"json", 0},
    [OPT_HELP] = {"help", 0},
    [OPT_WORKLOAD] = {"workload", 1},
    [OPT_TARGET] = {"target", 1},
    [OPT_TOP] = {"top", 1},
    [OPT_FALLBACK] = {"fallback", 0},
    [OPT_LIMIT] = {"limit", 1},
    [OPT_ID] = {"id", 1},
    [OPT_OUTPUT] = {"output", 1},
    [OPT_OLDER_THAN] = {"older-than", 1},
    [OPT_STATUS] = {"status", 1},
    [OPT_KEEP_BEST] = {"keep-best", 0},
    [OPT_DRY_RUN] = {"dry-run", 0},
    [OPT_TRIALS] = {"trials", 1},
    [OPT_BATCH] = {"batch", 1},
    [OPT_SVG] = {"svg", 1},
};

/* An option a subcommand accepts beyond --db, --json and --help, with its one-letter alias. */
typedef struct {
    db_opt id;
    char alias; /* 0: none */
} sub_opt;

/* A parsed command line. */
typedef struct {
    const char *val[OPT_COUNT];   /* the value of each option with one (the last given), or NULL */
    int on[OPT_COUNT];            /* whether each option was given */
    const char *pos[MAX_POS + 1]; /* positional arguments, NULL-terminated */
    int npos;
} db_args;

typedef struct subcommand {
    const char *name, *args, *summary, *details;
    int (*run)(const db_args *a);
    int max_pos;     /* positional arguments accepted */
    sub_opt opts[8]; /* terminated by OPT_NONE */
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

/* Parses argv[1..argc) (argv[0] is the subcommand) against the options of `sub` with the CLI's
 * one parser (tools/cli.h). Returns 0, EXIT_USAGE (message and usage on stderr) or -1 for
 * --help (usage on stdout). */
static int parse_args(const subcommand *sub, int argc, char **argv, db_args *a)
{
    te_cli_opt opts[OPT_COUNT + 1];
    int n = 0;
    db_opt common[] = {OPT_DB, OPT_JSON, OPT_HELP};
    for (int i = 0; i < 3; i++)
        opts[n++] = (te_cli_opt){opt_defs[common[i]].name, common[i] == OPT_HELP ? 'h' : 0,
                                 opt_defs[common[i]].has_value ? TE_CLI_VALUE : TE_CLI_FLAG,
                                 (int)common[i]};
    for (int i = 0; sub->opts[i].id != OPT_NONE; i++) {
        db_opt id = sub->opts[i].id;
        opts[n++] = (te_cli_opt){opt_defs[id].name, sub->opts[i].alias,
                                 opt_defs[id].has_value ? TE_CLI_VALUE : TE_CLI_FLAG, (int)id};
    }
    opts[n] = (te_cli_opt){0};
    char cmd[64];
    snprintf(cmd, sizeof cmd, "db %s", sub->name);
    memset(a, 0, sizeof *a);
    te_cli_parser p;
    te_cli_parser_init(&p, cmd, argc, argv, opts);
    for (int c; (c = te_cli_next(&p)) != TE_CLI_END;) {
        if (c == TE_CLI_BAD) {
            fputc('\n', stderr);
            sub_usage(stderr, sub);
            return EXIT_USAGE;
        }
        if (c == TE_CLI_ARG) {
            if (a->npos >= sub->max_pos)
                return usage_error("unexpected argument '%s'", p.value);
            a->pos[a->npos++] = p.value;
            continue;
        }
        db_opt id = (db_opt)c;
        if (id == OPT_HELP) {
            sub_usage(stdout, sub);
            return -1;
        }
        a->on[id] = 1;
        if (opt_defs[id].has_value)
            a->val[id] = p.value;
    }
    a->pos[a->npos] = NULL;
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

/* ---- The database -------------------------------------------------------------------------- */

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

/* ---- Subcommands ---------------------------------------------------------------------------- */

static int cmd_info(const db_args *a)
{
    te_db *db;
    if (open_db(a->val[OPT_DB], 0, &db))
        return 1;
    te_db_info in;
    if (te_db_get_info(db, &in))
        return fail_db(db);
    if (a->on[OPT_JSON]) {
        db_printer p;
        dbp_init(&p, 1, 1, NULL);
        dbp_begin(&p);
        dbp_str(&p, "path", in.path, NULL);
        dbp_str(&p, "system_path", in.system_path, NULL);
        dbp_int(&p, "schema_version", in.schema_version, NULL);
        dbp_str(&p, "journal_mode", in.journal_mode, NULL);
        dbp_bool(&p, "readonly", in.readonly, NULL);
        dbp_int(&p, "targets", in.n_targets, NULL);
        dbp_int(&p, "workloads", in.n_workloads, NULL);
        dbp_int(&p, "trials", in.n_trials, NULL);
        dbp_int(&p, "ok_trials", in.n_ok, NULL);
        dbp_int(&p, "jobs", in.n_jobs, NULL);
        dbp_int(&p, "system_trials", in.n_system_trials, NULL);
        dbp_int(&p, "file_bytes", in.file_bytes, NULL);
        dbp_end(&p);
        dbp_finish(&p);
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
    db_printer *out;
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
    char a[32], b[32], t[32], g[32];
    db_printer *p = c->out;
    dbp_begin(p);
    dbp_str(p, "workload", r->workload_key, r->workload_key);
    dbp_str(p, "target", r->target_key, r->target_key);
    dbp_int(p, "trials", r->n_trials, db_fmt_i64(a, sizeof a, r->n_trials));
    dbp_int(p, "ok", r->n_ok, db_fmt_i64(b, sizeof b, r->n_ok));
    dbp_num(p, "best_median_s", r->best_median_s, db_fmt_time(t, sizeof t, r->best_median_s));
    dbp_num(p, "best_gflops", r->best_gflops, db_fmt_num(g, sizeof g, r->best_gflops, "%.1f"));
    dbp_bool(p, "from_system", r->from_system, r->from_system ? "system" : "user");
    dbp_end(p);
    return 0;
}

static int cmd_list(const db_args *a)
{
    te_db *db;
    if (open_db(a->val[OPT_DB], 0, &db))
        return 1;
    db_printer p;
    dbp_init(&p, a->on[OPT_JSON], 7,
             (const char *[]){"WORKLOAD", "TARGET", "TRIALS", "OK", "BEST", "GFLOP/S", "DB"});
    list_ctx c = {.wfilter = a->val[OPT_WORKLOAD], .tfilter = a->val[OPT_TARGET], .out = &p};
    int code = te_db_summary_foreach(db, 0, list_cb, &c);
    size_t rows = dbp_finish(&p);
    if (code)
        return fail_db(db);
    if (!a->on[OPT_JSON] && !rows)
        printf("(no trials)\n");
    te_db_close(db);
    return 0;
}

static int cmd_best(const db_args *a)
{
    const char *wkey = a->val[OPT_WORKLOAD], *tkey = a->val[OPT_TARGET];
    if (!wkey)
        return usage_error("%s", "--workload is required");
    int64_t k = 1;
    int rc;
    if (a->val[OPT_TOP] && (rc = parse_i64(a->val[OPT_TOP], "--top", 1, &k)))
        return rc;
    te_db *db;
    if (open_db(a->val[OPT_DB], 0, &db))
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
        int code =
            te_db_top_k(db, wkey, &t, (int)k, a->on[OPT_FALLBACK] ? TE_DB_FALLBACK : 0, &all[i]);
        if (code == TE_OK)
            found++;
        else if (code != TE_ERR_NOT_FOUND || tkey) {
            fprintf(stderr, "tessera db best: %s\n", te_db_errmsg(db));
            status = 1;
        }
    }
    for (size_t i = 0; i < ntk; i++) {
        if (all[i])
            dbp_trials(all[i], a->on[OPT_JSON], 1);
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

static int cmd_history(const db_args *a)
{
    const char *wkey = a->val[OPT_WORKLOAD], *tkey = a->val[OPT_TARGET];
    if (!wkey)
        return usage_error("%s", "--workload is required");
    int64_t limit = 0;
    int rc;
    if (a->val[OPT_LIMIT] && (rc = parse_i64(a->val[OPT_LIMIT], "--limit", 0, &limit)))
        return rc;
    te_db *db;
    if (open_db(a->val[OPT_DB], 0, &db))
        return 1;
    te_db_target t = {.key = tkey};
    te_db_trial_list *l = NULL;
    if (te_db_history(db, wkey, tkey ? &t : NULL, limit, &l))
        return fail_db(db);
    dbp_trials(l, a->on[OPT_JSON], 1);
    te_db_trial_list_free(l);
    te_db_close(db);
    return 0;
}

static int cmd_jobs(const db_args *a)
{
    int64_t id = 0;
    int rc;
    if (a->val[OPT_ID] && (rc = parse_i64(a->val[OPT_ID], "--id", 1, &id)))
        return rc;
    te_db *db;
    if (open_db(a->val[OPT_DB], 0, &db))
        return 1;
    te_db_job_list *l = NULL;
    if (te_db_jobs(db, id, &l))
        return fail_db(db);
    db_printer p;
    dbp_init(&p, a->on[OPT_JSON], 7,
             (const char *[]){"ID", "STATUS", "TRIALS", "STARTED", "ENDED", "HOST/PID", "COMMAND"});
    for (size_t i = 0; i < l->n; i++) {
        const te_db_job *j = &l->items[i];
        char n[24], b[48], c[40], d[40], e[300];
        snprintf(b, sizeof b, "%lld/%lld", (long long)j->trials_done, (long long)j->trials_planned);
        snprintf(e, sizeof e, "%s/%lld", j->host, (long long)j->pid);
        dbp_begin(&p);
        dbp_int(&p, "id", j->id, db_fmt_i64(n, sizeof n, j->id));
        dbp_str(&p, "uid", j->uid, NULL);
        dbp_str(&p, "status", te_job_status_str(j->status), te_job_status_str(j->status));
        dbp_int(&p, "trials_done", j->trials_done, b);
        dbp_int(&p, "trials_planned", j->trials_planned, NULL);
        dbp_int(&p, "started_us", j->started_us, db_fmt_stamp(c, sizeof c, j->started_us));
        dbp_int(&p, "ended_us", j->ended_us, db_fmt_stamp(d, sizeof d, j->ended_us));
        dbp_str(&p, "host", j->host, e);
        dbp_int(&p, "pid", j->pid, NULL);
        dbp_str(&p, "command", j->command, j->command);
        dbp_end(&p);
    }
    dbp_finish(&p);
    te_db_job_list_free(l);
    te_db_close(db);
    return 0;
}

/* --json is accepted for uniformity: export always writes JSON lines. */
static int cmd_export(const db_args *a)
{
    const char *out = a->val[OPT_OUTPUT];
    te_db *db;
    if (open_db(a->val[OPT_DB], 0, &db))
        return 1;
    FILE *f = stdout;
    if (out && strcmp(out, "-") && !(f = fopen(out, "w"))) {
        fprintf(stderr, "tessera db export: %s: %s\n", out, strerror(errno));
        te_db_close(db);
        return 1;
    }
    int64_t n = 0;
    int code = te_db_export(db, f, a->val[OPT_WORKLOAD], a->val[OPT_TARGET], &n);
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
        db_printer p;
        dbp_init(&p, 1, 1, NULL);
        dbp_begin(&p);
        dbp_str(&p, "source", src, NULL);
        dbp_int(&p, "read", s->lines, NULL);
        dbp_int(&p, "imported", s->imported, NULL);
        dbp_int(&p, "duplicates", s->duplicates, NULL);
        dbp_end(&p);
        dbp_finish(&p);
    } else {
        printf("%s: %lld trials read, %lld %s, %lld already present\n", src, (long long)s->lines,
               (long long)s->imported, what, (long long)s->duplicates);
    }
}

static int cmd_import_or_merge(const db_args *a, int merge)
{
    if (!a->pos[0])
        return usage_error("%s", merge ? "give at least one database to merge"
                                       : "give at least one file to import ('-' = stdin)");
    te_db *db;
    if (open_db(a->val[OPT_DB], 1, &db))
        return 1;
    int status = 0;
    for (int i = 0; a->pos[i]; i++) {
        const char *file = a->pos[i];
        te_db_import_stats s;
        int code;
        if (merge) {
            code = te_db_merge(db, file, &s);
        } else {
            FILE *f = strcmp(file, "-") ? fopen(file, "rb") : stdin;
            if (!f) {
                fprintf(stderr, "tessera db import: %s: %s\n", file, strerror(errno));
                status = 1;
                continue;
            }
            code = te_db_import(db, f, &s);
            if (f != stdin)
                fclose(f);
        }
        if (code) {
            fprintf(stderr, "tessera db %s: %s: %s\n", current->name, file, te_db_errmsg(db));
            status = 1;
            continue;
        }
        print_stats(merge ? "merged" : "imported", file, &s, a->on[OPT_JSON]);
    }
    te_db_close(db);
    return status;
}

static int cmd_import(const db_args *a) { return cmd_import_or_merge(a, 0); }
static int cmd_merge(const db_args *a) { return cmd_import_or_merge(a, 1); }

static int cmd_prune(const db_args *a)
{
    const char *days = a->val[OPT_OLDER_THAN], *statuses = a->val[OPT_STATUS];
    int dry = a->on[OPT_DRY_RUN], rc = 0;
    te_db_prune_options o = {.keep_best = a->on[OPT_KEEP_BEST], .dry_run = dry};
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
    if (open_db(a->val[OPT_DB], !dry, &db))
        return 1;
    int64_t n = 0;
    if (te_db_prune(db, &o, &n))
        return fail_db(db);
    if (a->on[OPT_JSON]) {
        db_printer p;
        dbp_init(&p, 1, 1, NULL);
        dbp_begin(&p);
        dbp_int(&p, "deleted", n, NULL);
        dbp_bool(&p, "dry_run", dry, NULL);
        dbp_end(&p);
        dbp_finish(&p);
    } else {
        printf("%s %lld trials\n", dry ? "would delete" : "deleted", (long long)n);
    }
    te_db_close(db);
    return 0;
}

static int cmd_check(const db_args *a)
{
    te_db *db;
    if (open_db(a->val[OPT_DB], 0, &db))
        return 1;
    char *report = NULL;
    int code = te_db_check(db, &report);
    if (code && !report)
        return fail_db(db);
    if (a->on[OPT_JSON]) {
        db_printer p;
        dbp_init(&p, 1, 1, NULL);
        dbp_begin(&p);
        dbp_bool(&p, "ok", !code, NULL);
        dbp_str(&p, "report", report, NULL);
        dbp_end(&p);
        dbp_finish(&p);
    } else {
        printf("%s: %s\n", db_path(a->val[OPT_DB]), report);
    }
    free(report);
    te_db_close(db);
    return code ? 1 : 0;
}

/* Hidden: measures how many trials per second one writer records, batched. */
static int cmd_bench_insert(const db_args *a)
{
    const char *path = a->val[OPT_DB];
    int64_t n = 100000, batch = 1000;
    int rc;
    if ((a->val[OPT_TRIALS] && (rc = parse_i64(a->val[OPT_TRIALS], "--trials", 1, &n))) ||
        (a->val[OPT_BATCH] && (rc = parse_i64(a->val[OPT_BATCH], "--batch", 1, &batch))))
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
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
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
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    te_db_info in;
    te_db_get_info(db, &in);
    if (!status) {
        if (a->on[OPT_JSON]) {
            char secs[64], rate[64];
            snprintf(secs, sizeof secs, "%.6f", s);
            snprintf(rate, sizeof rate, "%.0f", (double)n / s);
            db_printer p;
            dbp_init(&p, 1, 1, NULL);
            dbp_begin(&p);
            dbp_int(&p, "trials", n, NULL);
            dbp_int(&p, "batch", batch, NULL);
            dbp_raw(&p, "seconds", secs, NULL);
            dbp_raw(&p, "trials_per_s", rate, NULL);
            dbp_str(&p, "journal_mode", in.journal_mode, NULL);
            dbp_end(&p);
            dbp_finish(&p);
        } else {
            printf("%lld trials in batches of %lld: %.3f s, %.0f trials/s (journal %s, "
                   "synchronous %s)\n",
                   (long long)n, (long long)batch, s, (double)n / s, in.journal_mode,
                   strcmp(in.journal_mode, "wal") ? "FULL" : "NORMAL");
        }
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

static int cmd_roofline(const db_args *a)
{
    return te_roofline_db_command(db_path(a->val[OPT_DB]), a->val[OPT_WORKLOAD], a->val[OPT_TARGET],
                                  a->val[OPT_SVG], a->on[OPT_JSON]);
}

static const subcommand subcommands[] = {
    {"info",
     "[--json]",
     "Show the database's path, schema version, journal mode and counts.",
     NULL,
     cmd_info,
     0,
     {{OPT_NONE, 0}},
     0},
    {"list",
     "[--workload TEXT] [--target TEXT] [--json]",
     "List every (workload, target) pair with its trial counts and best time.",
     "options:\n  -w, --workload TEXT  only workloads whose key contains TEXT\n"
     "  -t, --target TEXT    only targets whose key contains TEXT\n",
     cmd_list,
     0,
     {{OPT_WORKLOAD, 'w'}, {OPT_TARGET, 't'}, {OPT_NONE, 0}},
     0},
    {"best",
     "--workload KEY [--target KEY] [--top K] [--fallback] [--json]",
     "Show the fastest ok trials of a workload (on every target, or one).",
     "options:\n  -w, --workload KEY  exact workload key, e.g. 'matmul;m=1024,n=1024,k=1024;f32'\n"
     "  -t, --target KEY    exact target key\n  -k, --top K         the K fastest (default 1)\n"
     "  --fallback          with --target: use the nearest compatible target when the exact\n"
     "                      one has no record, and say so\n",
     cmd_best,
     0,
     {{OPT_WORKLOAD, 'w'}, {OPT_TARGET, 't'}, {OPT_TOP, 'k'}, {OPT_FALLBACK, 0}, {OPT_NONE, 0}},
     0},
    {"history",
     "--workload KEY [--target KEY] [--limit N] [--json]",
     "Show every trial of a workload, oldest first.",
     "options:\n  -w, --workload KEY  exact workload key\n  -t, --target KEY    exact target "
     "key\n  -n, --limit N       only the newest N\n",
     cmd_history,
     0,
     {{OPT_WORKLOAD, 'w'}, {OPT_TARGET, 't'}, {OPT_LIMIT, 'n'}, {OPT_NONE, 0}},
     0},
    {"jobs",
     "[--id N] [--json]",
     "List tuning jobs, newest first.",
     NULL,
     cmd_jobs,
     0,
     {{OPT_ID, 0}, {OPT_NONE, 0}},
     0},
    {"export",
     "[--workload KEY] [--target KEY] [-o FILE] [--json]",
     "Write trials as JSON lines (one trial per line with its workload, target and job).",
     "options:\n  -o, --output FILE   write to FILE instead of stdout\n",
     cmd_export,
     0,
     {{OPT_WORKLOAD, 'w'}, {OPT_TARGET, 't'}, {OPT_OUTPUT, 'o'}, {OPT_NONE, 0}},
     0},
    {"import",
     "FILE... [--json]",
     "Read JSON lines written by export ('-' = stdin). Each file is one transaction: a\n"
     "malformed line rejects the whole file (with its line number) and imports nothing.\n"
     "Trials already present (same uid) are skipped.",
     NULL,
     cmd_import,
     MAX_POS,
     {{OPT_NONE, 0}},
     0},
    {"merge",
     "DATABASE... [--json]",
     "Fold other Tessera databases (other machines, shards) into this one without duplicating\n"
     "trials. The other files are opened read-only.",
     NULL,
     cmd_merge,
     MAX_POS,
     {{OPT_NONE, 0}},
     0},
    {"prune",
     "[--older-than DAYS] [--status LIST] [--keep-best] [--dry-run] [--json]",
     "Delete trials older than DAYS and/or with one of the statuses in LIST\n"
     "(comma-separated: ok, compile_error, runtime_error, timeout, wrong_answer,\n"
     "invalid_schedule, load_error, other_error).",
     "options:\n  --keep-best   never delete the best ok trial of a (workload, target)\n"
     "  -n, --dry-run  only count\n",
     cmd_prune,
     0,
     {{OPT_OLDER_THAN, 0}, {OPT_STATUS, 0}, {OPT_KEEP_BEST, 0}, {OPT_DRY_RUN, 'n'}, {OPT_NONE, 0}},
     0},
    {"check",
     "[--json]",
     "Run SQLite's integrity and foreign-key checks, compare every table, index, view and\n"
     "trigger with the schema Tessera creates, and check the rows against each other\n"
     "(GFLOP/s vs flops and median, target columns vs key, statuses vs error text, ...).\n"
     "Every problem is listed with its count and examples; exit status 1 when there is one.",
     NULL,
     cmd_check,
     0,
     {{OPT_NONE, 0}},
     0},
    {"roofline",
     "[--workload TEXT] [--target TEXT] [--svg FILE] [--json]",
     "Place the best ok trial of every (workload, target) under its target's roofs: flops\n"
     "and compulsory bytes counted from the lowered IR, GFLOP/s, arithmetic intensity, the\n"
     "roof min(peak, AI x bandwidth) and the fraction reached. Library operators are\n"
     "recounted; user expressions and fused graph groups use the flops and bytes the tuner\n"
     "stored (trials recorded before schema 5 store no bytes: tune them again). The peaks\n"
     "come from `tessera target --measure`; docs/PERFORMANCE.md explains the figures.",
     "options:\n  -w, --workload TEXT  only workloads whose key contains TEXT\n"
     "  -t, --target TEXT    only targets whose key contains TEXT\n"
     "  --svg FILE           also write the roofline plot (SVG) to FILE\n",
     cmd_roofline,
     0,
     {{OPT_WORKLOAD, 'w'}, {OPT_TARGET, 't'}, {OPT_SVG, 0}, {OPT_NONE, 0}},
     0},
    {"bench-insert",
     "[--trials N] [--batch B] [--db FILE] [--json]",
     "Measure how many trials per second one writer records in batched transactions\n"
     "(default: 100000 trials, batches of 1000, in a temporary file).",
     NULL,
     cmd_bench_insert,
     0,
     {{OPT_TRIALS, 'n'}, {OPT_BATCH, 0}, {OPT_NONE, 0}},
     1},
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
            db_args a;
            int rc = parse_args(current, argc - 1, argv + 1, &a);
            if (rc)
                return rc < 0 ? 0 : rc;
            return current->run(&a);
        }
    fprintf(stderr, "tessera db: unknown subcommand '%s'\n\n", argv[1]);
    db_usage(stderr);
    return EXIT_USAGE;
}

/*
 * schedule/trace.c: replaying the text that te_schedule_trace prints
 * (te_schedule_apply_trace), and printing it as C (te_trace_to_c).
 *
 * One primitive per line, exactly as the primitives (loops.c, placement.c, dataflow.c,
 * gpu.c) append them:
 *
 *   split S x F              split_nparts S x N         tile S x y XF YF
 *   fuse S outer inner       reorder S it...            compute_at S P it
 *   compute_inline S         compute_root S             cache_read T scope R...
 *   cache_write T scope      vectorize S x              unroll S x
 *   parallel S x             unroll_max S N             nontemporal S 0|1
 *   bind S x blockIdx.x|...|threadIdx.z|vthread          rfactor S x
 *   storage_align S AXIS FACTOR OFFSET    double_buffer S     bind_reduce S x threadIdx.x|y|z
 *   prefetch S at T A ahead DIST [LEVEL]  (A: S, or the stage S is computed in, whose loop is
 *                                `ahead`; LEVEL the cache level 2 or 3, absent for 1)
 *   tensorize S x INTRINSIC       (a registered tensor intrinsic, tessera/tensorize.h)
 *   pipeline S x W                (W: the producer whose loop S's loops fuse into)
 *
 * S, P and R name stages (by the tensor they compute), T a tensor (a stage's or, for
 * cache_read, a placeholder that the reader stages read), x, y and `it` iterators of the stage
 * (te_stage_iter names: "i", "i_o", "i_o_j_f", ...). Blank lines and lines starting with '#'
 * are ignored.
 */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "schedule/sched_impl.h"
#include "tessera/tensorize.h"

#define MAX_TOK 72

typedef struct {
    int n;
    char *t[MAX_TOK];
} toks;

/* Splits a line (modified in place) at blanks. */
static void tokenize(char *line, toks *tk)
{
    tk->n = 0;
    for (char *p = line; *p;) {
        while (*p && isspace((unsigned char)*p))
            p++;
        if (!*p)
            break;
        if (tk->n == MAX_TOK) {
            tk->n = MAX_TOK + 1; /* too many: reported by the caller */
            return;
        }
        tk->t[tk->n++] = p;
        while (*p && !isspace((unsigned char)*p))
            p++;
        if (*p)
            *p++ = 0;
    }
}

/* A decimal integer that fits int64: strtoll clamps one that does not to the range's end,
 * which would then be applied as if written (found by tests/fuzz/fuzz_trace.c). */
static bool parse_i64(const char *s, int64_t *out)
{
    char *end;
    if (!s || !*s)
        return false;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end || errno == ERANGE)
        return false;
    *out = v;
    return true;
}

static bool parse_scope(const char *s, te_scope *out)
{
    if (!strcmp(s, "global"))
        *out = TE_SCOPE_GLOBAL;
    else if (!strcmp(s, "local"))
        *out = TE_SCOPE_LOCAL;
    else if (!strcmp(s, "shared"))
        *out = TE_SCOPE_SHARED;
    else
        return false;
    return true;
}

static const char *const thread_tags[] = {"blockIdx.x",  "blockIdx.y",  "blockIdx.z", "threadIdx.x",
                                          "threadIdx.y", "threadIdx.z", "vthread"};

static bool parse_tag(const char *s, te_thread_tag *out)
{
    for (int i = 0; i < 7; i++)
        if (!strcmp(s, thread_tags[i])) {
            *out = (te_thread_tag)i;
            return true;
        }
    return false;
}

typedef struct {
    const char *name;
    te_tensor *found;
} find_ctx;

static bool find_fn(const te_expr *e, void *user)
{
    find_ctx *f = user;
    if (!f->found && e->kind == TE_E_READ && !strcmp(e->u.read.t->name, f->name))
        f->found = e->u.read.t;
    return !f->found;
}

/* The tensor named `name` that stage `reader` reads (a placeholder or a computed tensor). */
static te_tensor *find_read(te_stage *reader, const char *name)
{
    find_ctx f = {name, NULL};
    if (reader)
        te__expr_visit(reader->body, find_fn, &f);
    return f.found;
}

/* The per-line error: "<what>" naming the line. */
#define LERR(code, ...) te_ctx_set_error(ctx, code, __VA_ARGS__)

static te_stage *need_stage(te_schedule *s, const char *name, int *rc)
{
    te_stage *st = te_schedule_stage_by_name(s, name);
    if (!st)
        *rc = te_ctx_set_error(te_schedule_ctx(s), TE_ERR_NOT_FOUND,
                               "no stage named '%s' in this schedule", name);
    return st;
}

static te_iter *need_iter(te_stage *st, const char *name, int *rc)
{
    te_iter *it = st ? te_stage_iter(st, name) : NULL;
    if (st && !it)
        *rc = te_ctx_set_error(te_schedule_ctx(st->sched), TE_ERR_NOT_FOUND,
                               "stage '%s' has no iterator named '%s'", te_stage_name(st), name);
    return it;
}

/* Applies one tokenized line. Returns TE_OK or a status with a message on ctx. */
static int apply_line(te_schedule *s, toks *tk)
{
    te_ctx *ctx = te_schedule_ctx(s);
    const char *op = tk->t[0];
    int n = tk->n, rc = TE_OK;
    int64_t a = 0, b = 0;
#define NEED(cnt)                                                                                  \
    do {                                                                                           \
        if (n != (cnt))                                                                            \
            return LERR(TE_ERR_ARG, "'%s' takes %d fields, got %d", op, (cnt)-1, n - 1);           \
    } while (0)
#define STAGE(i) need_stage(s, tk->t[i], &rc)
#define ITER(st, i) need_iter(st, tk->t[i], &rc)
    if (!strcmp(op, "split") || !strcmp(op, "split_nparts")) {
        NEED(4);
        te_stage *st = STAGE(1);
        te_iter *x = ITER(st, 2);
        if (rc)
            return rc;
        if (!parse_i64(tk->t[3], &a))
            return LERR(TE_ERR_ARG, "'%s': '%s' is not an integer (in the int64 range)", op,
                        tk->t[3]);
        return op[5] ? te_split_nparts(st, x, a, NULL, NULL) : te_split(st, x, a, NULL, NULL);
    }
    if (!strcmp(op, "tile")) {
        NEED(6);
        te_stage *st = STAGE(1);
        te_iter *x = ITER(st, 2), *y = ITER(st, 3);
        if (rc)
            return rc;
        if (!parse_i64(tk->t[4], &a) || !parse_i64(tk->t[5], &b))
            return LERR(TE_ERR_ARG, "'tile': factors must be integers");
        return te_tile(st, x, y, a, b, NULL, NULL, NULL, NULL);
    }
    if (!strcmp(op, "fuse")) {
        NEED(4);
        te_stage *st = STAGE(1);
        te_iter *x = ITER(st, 2), *y = ITER(st, 3);
        return rc ? rc : te_fuse(st, x, y, NULL);
    }
    if (!strcmp(op, "reorder")) {
        if (n < 3)
            return LERR(TE_ERR_ARG, "'reorder' needs a stage and at least one iterator");
        te_stage *st = STAGE(1);
        te_iter *order[MAX_TOK];
        for (int i = 2; i < n && !rc; i++)
            order[i - 2] = ITER(st, i);
        return rc ? rc : te_reorder(st, n - 2, order);
    }
    if (!strcmp(op, "compute_at")) {
        NEED(4);
        te_stage *st = STAGE(1), *p = st ? STAGE(2) : NULL;
        te_iter *at = ITER(p, 3);
        return rc ? rc : te_compute_at(st, p, at);
    }
    if (!strcmp(op, "pipeline")) {
        NEED(4);
        te_stage *st = STAGE(1), *w = st ? STAGE(3) : NULL;
        te_iter *x = ITER(st, 2);
        return rc ? rc : te_pipeline(st, x, w);
    }
    if (!strcmp(op, "compute_with")) {
        NEED(4);
        te_stage *st = STAGE(1), *w = st ? STAGE(2) : NULL;
        te_iter *x = ITER(w, 3);
        return rc ? rc : te_compute_with(st, w, x);
    }
    if (!strcmp(op, "compute_inline") || !strcmp(op, "compute_root")) {
        NEED(2);
        te_stage *st = STAGE(1);
        if (rc)
            return rc;
        return op[8] == 'i' ? te_compute_inline(st) : te_compute_root(st);
    }
    if (!strcmp(op, "cache_read")) {
        te_scope sc;
        if (n < 4)
            return LERR(TE_ERR_ARG, "'cache_read' needs a tensor, a scope and reader stages");
        if (!parse_scope(tk->t[2], &sc))
            return LERR(TE_ERR_ARG, "'cache_read': unknown scope '%s'", tk->t[2]);
        te_stage *readers[MAX_TOK];
        for (int i = 3; i < n && !rc; i++)
            readers[i - 3] = STAGE(i);
        if (rc)
            return rc;
        te_tensor *t = NULL;
        te_stage *own = te_schedule_stage_by_name(s, tk->t[1]);
        if (own)
            t = te_stage_tensor(own);
        for (int i = 0; !t && i < n - 3; i++)
            t = find_read(readers[i], tk->t[1]);
        if (!t)
            return LERR(TE_ERR_NOT_FOUND, "'cache_read': stage '%s' reads no tensor named '%s'",
                        tk->t[3], tk->t[1]);
        return te_cache_read(s, t, sc, n - 3, readers) ? TE_OK
               : te_ctx_errcode(ctx)                   ? te_ctx_errcode(ctx)
                                                       : TE_ERR_SCHEDULE;
    }
    if (!strcmp(op, "cache_write")) {
        te_scope sc;
        NEED(3);
        te_stage *st = STAGE(1);
        if (rc)
            return rc;
        if (!parse_scope(tk->t[2], &sc))
            return LERR(TE_ERR_ARG, "'cache_write': unknown scope '%s'", tk->t[2]);
        return te_cache_write(s, te_stage_tensor(st), sc) ? TE_OK
               : te_ctx_errcode(ctx)                      ? te_ctx_errcode(ctx)
                                                          : TE_ERR_SCHEDULE;
    }
    if (!strcmp(op, "vectorize") || !strcmp(op, "unroll") || !strcmp(op, "parallel") ||
        !strcmp(op, "reduce_tree")) {
        NEED(3);
        te_stage *st = STAGE(1);
        te_iter *x = ITER(st, 2);
        if (rc)
            return rc;
        return op[0] == 'v'   ? te_vectorize(st, x)
               : op[0] == 'u' ? te_unroll(st, x)
               : op[0] == 'r' ? te_reduce_tree(st, x)
                              : te_parallel(st, x);
    }
    if (!strcmp(op, "unroll_max") || !strcmp(op, "nontemporal")) {
        NEED(3);
        te_stage *st = STAGE(1);
        if (rc)
            return rc;
        if (!parse_i64(tk->t[2], &a) || a < INT32_MIN || a > INT32_MAX)
            return LERR(TE_ERR_ARG, "'%s': '%s' is not an integer", op, tk->t[2]);
        if (op[0] == 'n' && a != 0 && a != 1)
            return LERR(TE_ERR_ARG, "'nontemporal' takes 0 or 1, got %s", tk->t[2]);
        return op[0] == 'u' ? te_pragma_unroll_max(st, (int)a) : te_stage_nontemporal(st, a != 0);
    }
    if (!strcmp(op, "prefetch")) {
        if (n != 8 && n != 9)
            NEED(7);
        te_stage *st = STAGE(1), *as = st ? STAGE(4) : NULL;
        te_iter *at = ITER(st, 2), *ahead = ITER(as, 5);
        if (rc)
            return rc;
        te_tensor *t = NULL;
        te_stage *own = te_schedule_stage_by_name(s, tk->t[3]);
        t = own ? te_stage_tensor(own) : find_read(st, tk->t[3]);
        if (!t)
            return LERR(TE_ERR_NOT_FOUND, "'prefetch': stage '%s' reads no tensor named '%s'",
                        tk->t[1], tk->t[3]);
        if (!parse_i64(tk->t[6], &a))
            return LERR(TE_ERR_ARG, "'prefetch': '%s' is not an integer", tk->t[6]);
        int64_t lv = 1, lines = TE__PREFETCH_MAX_LINES;
        if (n >= 8 && (!parse_i64(tk->t[7], &lv) || lv < 1 || lv > 3))
            return LERR(TE_ERR_ARG, "'prefetch': the cache level '%s' is not 1, 2 or 3", tk->t[7]);
        if (n == 9 && (!parse_i64(tk->t[8], &lines) || lines < 1 || lines > TE__PREFETCH_MAX_LINES))
            return LERR(TE_ERR_ARG, "'prefetch': the lines per iteration '%s' are not in [1, %d]",
                        tk->t[8], TE__PREFETCH_MAX_LINES);
        return te_prefetch_lines(st, at, t, ahead, a, (int)lv, (int)lines);
    }
    if (!strcmp(op, "tensorize")) {
        NEED(4);
        te_stage *st = STAGE(1);
        te_iter *x = ITER(st, 2);
        if (rc)
            return rc;
        const te_tensor_intrin *in = te_tensor_intrin_find(tk->t[3]);
        if (!in)
            return LERR(TE_ERR_NOT_FOUND, "'tensorize': no tensor intrinsic named '%s'", tk->t[3]);
        return te_tensorize(st, x, in);
    }
    if (!strcmp(op, "bind")) {
        NEED(4);
        te_thread_tag tag;
        te_stage *st = STAGE(1);
        te_iter *x = ITER(st, 2);
        if (rc)
            return rc;
        if (!parse_tag(tk->t[3], &tag))
            return LERR(TE_ERR_ARG, "'bind': unknown thread tag '%s'", tk->t[3]);
        return te_bind(st, x, tag);
    }
    if (!strcmp(op, "rfactor")) {
        NEED(3);
        te_stage *st = STAGE(1);
        te_iter *x = ITER(st, 2);
        if (rc)
            return rc;
        return te_rfactor(s, te_stage_tensor(st), x) ? TE_OK
               : te_ctx_errcode(ctx)                 ? te_ctx_errcode(ctx)
                                                     : TE_ERR_SCHEDULE;
    }
    if (!strcmp(op, "storage_align")) {
        NEED(5);
        te_stage *st = STAGE(1);
        int64_t c = 0;
        if (rc)
            return rc;
        if (!parse_i64(tk->t[2], &a) || !parse_i64(tk->t[3], &b) || !parse_i64(tk->t[4], &c) ||
            a < INT32_MIN || a > INT32_MAX || b < INT32_MIN || b > INT32_MAX || c < INT32_MIN ||
            c > INT32_MAX)
            return LERR(TE_ERR_ARG, "'storage_align': axis, factor and offset must be integers");
        return te_storage_align(st, (int)a, (int)b, (int)c);
    }
    if (!strcmp(op, "double_buffer")) {
        NEED(2);
        te_stage *st = STAGE(1);
        return rc ? rc : te_double_buffer(st);
    }
    if (!strcmp(op, "bind_reduce")) {
        NEED(4);
        te_thread_tag tag;
        te_stage *st = STAGE(1);
        te_iter *x = ITER(st, 2);
        if (rc)
            return rc;
        if (!parse_tag(tk->t[3], &tag))
            return LERR(TE_ERR_ARG, "'bind_reduce': unknown thread tag '%s'", tk->t[3]);
        return te_bind_reduce(st, x, tag);
    }
    return LERR(TE_ERR_ARG, "unknown primitive '%s'", op);
#undef NEED
#undef STAGE
#undef ITER
}

int te_schedule_apply_trace(te_schedule *s, const char *trace)
{
    if (!s)
        return TE_ERR_ARG;
    te_ctx *ctx = te_schedule_ctx(s);
    if (!trace)
        return te_ctx_set_error(ctx, TE_ERR_ARG, "te_schedule_apply_trace: trace is NULL");
    te_ctx_clear_error(ctx);
    int lineno = 0;
    for (const char *p = trace; *p;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        lineno++;
        char buf[1024];
        if (len >= sizeof buf)
            return te_ctx_set_error(ctx, TE_ERR_ARG, "trace line %d is too long (%zu characters)",
                                    lineno, len);
        memcpy(buf, p, len);
        buf[len] = 0;
        p = e ? e + 1 : p + len;
        toks tk;
        char copy[1024];
        memcpy(copy, buf, len + 1);
        tokenize(buf, &tk);
        if (tk.n == 0 || tk.t[0][0] == '#')
            continue;
        if (tk.n > MAX_TOK)
            return te_ctx_set_error(ctx, TE_ERR_ARG, "trace line %d has too many fields", lineno);
        int rc = apply_line(s, &tk);
        if (rc) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", te_ctx_errmsg(ctx));
            te_ctx_clear_error(ctx);
            /* trim trailing blanks of the echoed line */
            size_t cl = strlen(copy);
            while (cl && isspace((unsigned char)copy[cl - 1]))
                copy[--cl] = 0;
            return te_ctx_set_error(ctx, rc, "trace line %d '%s': %s", lineno, copy,
                                    msg[0] ? msg : te_status_str(rc));
        }
    }
    return TE_OK;
}

/* ---- Trace to C ------------------------------------------------------------------------ */

typedef struct {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->oom = true;
            return;
        }
        if (b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = (b->cap + (size_t)k) * 2 + 256;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
}

/* C identifier for a stage variable: "st_" + name with other characters as '_'. */
static void stage_var(const char *name, char *out, size_t n)
{
    size_t k = (size_t)snprintf(out, n, "st_");
    for (const char *p = name; *p && k + 1 < n; p++)
        out[k++] = isalnum((unsigned char)*p) ? *p : '_';
    out[k] = 0;
}

/* A C string literal of s (names are plain identifiers; escape anything else). */
static void sb_str(sbuf *b, const char *s)
{
    sb_printf(b, "\"");
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            sb_printf(b, "\\%c", *s);
        else if (isprint((unsigned char)*s))
            sb_printf(b, "%c", *s);
        else
            sb_printf(b, "\\%03o", (unsigned char)*s);
    }
    sb_printf(b, "\"");
}

typedef struct {
    char names[256][96];
    int n;
} declared;

/* Makes sure a stage variable exists; declares it on first use. */
static void use_stage(sbuf *b, declared *d, const char *sched, const char *name)
{
    char v[96];
    stage_var(name, v, sizeof v);
    for (int i = 0; i < d->n; i++)
        if (!strcmp(d->names[i], name))
            return;
    if (d->n < 256)
        snprintf(d->names[d->n++], sizeof d->names[0], "%s", name);
    sb_printf(b, "    te_stage *%s = te_schedule_stage_by_name(%s, ", v, sched);
    sb_str(b, name);
    sb_printf(b, ");\n");
}

static void iter_expr(sbuf *b, const char *stage, const char *it)
{
    char v[96];
    stage_var(stage, v, sizeof v);
    sb_printf(b, "te_stage_iter(%s, ", v);
    sb_str(b, it);
    sb_printf(b, ")");
}

/* A C identifier for a tensor variable (placeholders are referenced by the caller's names). */
static void tensor_ident(const char *name, char *out, size_t n)
{
    size_t k = 0;
    for (const char *p = name; *p && k + 1 < n; p++)
        out[k++] = isalnum((unsigned char)*p) ? *p : '_';
    out[k] = 0;
}

/* The C expression for tensor `name` in a translated trace: its stage's tensor when the trace
 * named that stage before, else the caller's variable of that name (a placeholder). */
static void tensor_ref(const declared *d, const char *name, char *out, size_t n)
{
    for (int i = 0; i < d->n; i++)
        if (!strcmp(d->names[i], name)) {
            char v[96];
            stage_var(name, v, sizeof v);
            snprintf(out, n, "te_stage_tensor(%s)", v);
            return;
        }
    tensor_ident(name, out, n);
}

char *te_trace_to_c(const char *trace, const char *sched_var)
{
    if (!trace)
        return NULL;
    const char *sv = sched_var && *sched_var ? sched_var : "s";
    sbuf b = {0};
    declared *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    sb_printf(&b, "/* Schedule replayed from a Tessera trace. Placeholders named by "
                  "cache_read or prefetch\n * are referenced by C variables named like the "
                  "tensors. */\n");
    sb_printf(&b, "{\n    int rc = TE_OK;\n");
    int lineno = 0;
    bool bad = false;
    for (const char *p = trace; *p && !bad;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        lineno++;
        char buf[1024];
        if (len >= sizeof buf) {
            bad = true;
            break;
        }
        memcpy(buf, p, len);
        buf[len] = 0;
        p = e ? e + 1 : p + len;
        toks tk;
        char copy[1024];
        memcpy(copy, buf, len + 1);
        tokenize(buf, &tk);
        if (tk.n == 0)
            continue;
        if (tk.n > MAX_TOK) {
            bad = true;
            break;
        }
        if (tk.t[0][0] == '#') {
            char *c = copy + (tk.t[0] - buf) + 1;
            while (*c == ' ' || *c == '\t')
                c++;
            for (char *q = c; *q; q++)
                if (q[0] == '*' && q[1] == '/')
                    q[1] = '|';
            sb_printf(&b, "    /* %s */\n", c);
            continue;
        }
        const char *op = tk.t[0];
        int n = tk.n;
        char v[96], v2[96];
        int64_t x, y;
        if ((!strcmp(op, "split") || !strcmp(op, "split_nparts")) && n == 4 &&
            parse_i64(tk.t[3], &x)) {
            use_stage(&b, d, sv, tk.t[1]);
            stage_var(tk.t[1], v, sizeof v);
            sb_printf(&b, "    if (rc == TE_OK) rc = %s(%s, ",
                      op[5] ? "te_split_nparts" : "te_split", v);
            iter_expr(&b, tk.t[1], tk.t[2]);
            sb_printf(&b, ", %lld, NULL, NULL);\n", (long long)x);
        } else if (!strcmp(op, "tile") && n == 6 && parse_i64(tk.t[4], &x) &&
                   parse_i64(tk.t[5], &y)) {
            use_stage(&b, d, sv, tk.t[1]);
            stage_var(tk.t[1], v, sizeof v);
            sb_printf(&b, "    if (rc == TE_OK) rc = te_tile(%s, ", v);
            iter_expr(&b, tk.t[1], tk.t[2]);
            sb_printf(&b, ", ");
            iter_expr(&b, tk.t[1], tk.t[3]);
            sb_printf(&b, ", %lld, %lld, NULL, NULL, NULL, NULL);\n", (long long)x, (long long)y);
        } else if (!strcmp(op, "fuse") && n == 4) {
            use_stage(&b, d, sv, tk.t[1]);
            stage_var(tk.t[1], v, sizeof v);
            sb_printf(&b, "    if (rc == TE_OK) rc = te_fuse(%s, ", v);
            iter_expr(&b, tk.t[1], tk.t[2]);
            sb_printf(&b, ", ");
            iter_expr(&b, tk.t[1], tk.t[3]);
            sb_printf(&b, ", NULL);\n");
        } else if (!strcmp(op, "reorder") && n >= 3) {
            use_stage(&b, d, sv, tk.t[1]);
            stage_var(tk.t[1], v, sizeof v);
            sb_printf(&b, "    if (rc == TE_OK) rc = te_reorder(%s, %d, (te_iter *[]){", v, n - 2);
            for (int i = 2; i < n; i++) {
                sb_printf(&b, i > 2 ? ",\n        " : "\n        ");
                iter_expr(&b, tk.t[1], tk.t[i]);
            }
            sb_printf(&b, "});\n");
        } else if (!strcmp(op, "compute_at") && n == 4) {
            use_stage(&b, d, sv, tk.t[1]);
            use_stage(&b, d, sv, tk.t[2]);
            stage_var(tk.t[1], v, sizeof v);
            stage_var(tk.t[2], v2, sizeof v2);
            sb_printf(&b, "    if (rc == TE_OK) rc = te_compute_at(%s, %s, ", v, v2);
            iter_expr(&b, tk.t[2], tk.t[3]);
            sb_printf(&b, ");\n");
        } else if (!strcmp(op, "pipeline") && n == 4) {
            use_stage(&b, d, sv, tk.t[1]);
            use_stage(&b, d, sv, tk.t[3]);
            stage_var(tk.t[1], v, sizeof v);
            stage_var(tk.t[3], v2, sizeof v2);
            sb_printf(&b, "    if (rc == TE_OK) rc = te_pipeline(%s, ", v);
            iter_expr(&b, tk.t[1], tk.t[2]);
            sb_printf(&b, ", %s);\n", v2);
        } else if (!strcmp(op, "compute_with") && n == 4) {
            use_stage(&b, d, sv, tk.t[1]);
            use_stage(&b, d, sv, tk.t[2]);
            stage_var(tk.t[1], v, sizeof v);
            stage_var(tk.t[2], v2, sizeof v2);
            sb_printf(&b, "    if (rc == TE_OK) rc = te_compute_with(%s, %s, ", v, v2);
            iter_expr(&b, tk.t[2], tk.t[3]);
            sb_printf(&b, ");\n");
        } else if ((!strcmp(op, "compute_inline") || !strcmp(op, "compute_root")) && n == 2) {
            use_stage(&b, d, sv, tk.t[1]);
            stage_var(tk.t[1], v, sizeof v);
            sb_printf(&b, "    if (rc == TE_OK) rc = te_%s(%s);\n", op, v);
        } else if (!strcmp(op, "cache_read") && n >= 4) {
            te_scope sc;
            if (!parse_scope(tk.t[2], &sc)) {
                bad = true;
                break;
            }
            for (int i = 3; i < n; i++)
                use_stage(&b, d, sv, tk.t[i]);
            char tv[160];
            tensor_ref(d, tk.t[1], tv, sizeof tv);
            sb_printf(
                &b,
                "    if (rc == TE_OK && !te_cache_read(%s, %s, TE_SCOPE_%s, %d, (te_stage *[]){",
                sv, tv,
                sc == TE_SCOPE_LOCAL    ? "LOCAL"
                : sc == TE_SCOPE_SHARED ? "SHARED"
                                        : "GLOBAL",
                n - 3);
            for (int i = 3; i < n; i++) {
                stage_var(tk.t[i], v, sizeof v);
                sb_printf(&b, "%s%s", i > 3 ? ", " : "", v);
            }
            sb_printf(&b, "}))\n        rc = TE_ERR_SCHEDULE;\n");
        } else if (!strcmp(op, "cache_write") && n == 3) {
            te_scope sc;
            if (!parse_scope(tk.t[2], &sc)) {
                bad = true;
                break;
            }
            use_stage(&b, d, sv, tk.t[1]);
            stage_var(tk.t[1], v, sizeof v);
            sb_printf(&b,
                      "    if (rc == TE_OK && !te_cache_write(%s, te_stage_tensor(%s), "
                      "TE_SCOPE_%s))\n        rc = TE_ERR_SCHEDULE;\n",
                      sv, v,
                      sc == TE_SCOPE_LOCAL    ? "LOCAL"
                      : sc == TE_SCOPE_SHARED ? "SHARED"
                                              : "GLOBAL");
        } else if ((!strcmp(op, "vectorize") || !strcmp(op, "unroll") || !strcmp(op, "parallel") ||
                    !strcmp(op, "reduce_tree")) &&
                   n == 3) {
            use_stage(&b, d, sv, tk.t[1]);
            stage_var(tk.t[1], v, sizeof v);
            sb_printf(&b, "    if (rc == TE_OK) rc = te_%s(%s, ", op, v);
            iter_expr(&b, tk.t[1], tk.t[2]);
            sb_printf(&b, ");\n");
        } else if (!strcmp(op, "unroll_max") && n == 3 && parse_i64(tk.t[2], &x)) {
            use_stage(&b, d, sv, tk.t[1]);
            stage_var(tk.t[1], v, sizeof v);
            sb_printf(&b, "    if (rc == TE_OK) rc = te_pragma_unroll_max(%s, %lld);\n", v,
                      (long long)x);
        } else if (!strcmp(op, "nontemporal") && n == 3 && parse_i64(tk.t[2], &x)) {
            use_stage(&b, d, sv, tk.t[1]);
            stage_var(tk.t[1], v, sizeof v);
            sb_printf(&b, "    if (rc == TE_OK) rc = te_stage_nontemporal(%s, %s);\n", v,
                      x ? "true" : "false");
        } else if (!strcmp(op, "prefetch") && n >= 7 && n <= 9 && parse_i64(tk.t[6], &x)) {
            use_stage(&b, d, sv, tk.t[1]);
            use_stage(&b, d, sv, tk.t[4]);
            char tv[160];
            tensor_ref(d, tk.t[3], tv, sizeof tv);
            stage_var(tk.t[1], v, sizeof v);
            sb_printf(&b, "    if (rc == TE_OK) rc = te_prefetch%s(%s, ",
                      n == 9   ? "_lines"
                      : n == 8 ? "_level"
                               : "",
                      v);
            iter_expr(&b, tk.t[1], tk.t[2]);
            sb_printf(&b, ", %s, ", tv);
            iter_expr(&b, tk.t[4], tk.t[5]);
            if (n == 9)
                sb_printf(&b, ", %lld, %s, %s);\n", (long long)x, tk.t[7], tk.t[8]);
            else if (n == 8)
                sb_printf(&b, ", %lld, %s);\n", (long long)x, tk.t[7]);
            else
                sb_printf(&b, ", %lld);\n", (long long)x);
        } else if (!strcmp(op, "tensorize") && n == 4) {
            use_stage(&b, d, sv, tk.t[1]);
            stage_var(tk.t[1], v, sizeof v);
            sb_printf(&b, "    if (rc == TE_OK) rc = te_tensorize(%s, ", v);
            iter_expr(&b, tk.t[1], tk.t[2]);
            sb_printf(&b, ", te_tensor_intrin_find(\"%s\"));\n", tk.t[3]);
        } else if (!strcmp(op, "rfactor") && n == 3) {
            use_stage(&b, d, sv, tk.t[1]);
            stage_var(tk.t[1], v, sizeof v);
            sb_printf(&b, "    if (rc == TE_OK && !te_rfactor(%s, te_stage_tensor(%s), ", sv, v);
            iter_expr(&b, tk.t[1], tk.t[2]);
            sb_printf(&b, "))\n        rc = TE_ERR_SCHEDULE;\n");
        } else if (!strcmp(op, "storage_align") && n == 5) {
            int64_t z;
            if (!parse_i64(tk.t[2], &x) || !parse_i64(tk.t[3], &y) || !parse_i64(tk.t[4], &z)) {
                bad = true;
                break;
            }
            use_stage(&b, d, sv, tk.t[1]);
            stage_var(tk.t[1], v, sizeof v);
            sb_printf(&b, "    if (rc == TE_OK) rc = te_storage_align(%s, %lld, %lld, %lld);\n", v,
                      (long long)x, (long long)y, (long long)z);
        } else if (!strcmp(op, "double_buffer") && n == 2) {
            use_stage(&b, d, sv, tk.t[1]);
            stage_var(tk.t[1], v, sizeof v);
            sb_printf(&b, "    if (rc == TE_OK) rc = te_double_buffer(%s);\n", v);
        } else if ((!strcmp(op, "bind") || !strcmp(op, "bind_reduce")) && n == 4) {
            te_thread_tag tag;
            if (!parse_tag(tk.t[3], &tag)) {
                bad = true;
                break;
            }
            static const char *const tagc[] = {"TE_BLOCK_X",  "TE_BLOCK_Y",  "TE_BLOCK_Z",
                                               "TE_THREAD_X", "TE_THREAD_Y", "TE_THREAD_Z",
                                               "TE_VTHREAD"};
            use_stage(&b, d, sv, tk.t[1]);
            stage_var(tk.t[1], v, sizeof v);
            sb_printf(&b, "    if (rc == TE_OK) rc = te_%s(%s, ", op, v);
            iter_expr(&b, tk.t[1], tk.t[2]);
            sb_printf(&b, ", %s);\n", tagc[tag]);
        } else {
            bad = true;
        }
    }
    sb_printf(&b,
              "    if (rc != TE_OK)\n        fprintf(stderr, \"schedule: %%s\\n\", "
              "te_ctx_errmsg(te_schedule_ctx(%s)));\n}\n",
              sv);
    free(d);
    if (bad || b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

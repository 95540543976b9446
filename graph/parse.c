/* The graph's text form (grammar in tessera/graph.h): parsing and printing. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"

typedef struct lexer {
    const char *p;
    const char *file;
    int line;
    te_graph *g;
} lexer;

#define PERR(lx, code, ...) perr(lx, code, __VA_ARGS__)

__attribute__((format(printf, 3, 4))) static int perr(lexer *lx, int code, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return te__graph_error(lx->g, code, "%s:%d: %s", lx->file, lx->line, buf);
}

static void prefix_line(lexer *lx)
{
    char msg[sizeof lx->g->msg];
    memcpy(msg, lx->g->msg, sizeof msg);
    snprintf(lx->g->msg, sizeof lx->g->msg, "%.200s:%d: %.500s", lx->file, lx->line, msg);
}

static void skip_ws(const char **p)
{
    while (**p == ' ' || **p == '\t' || **p == '\r')
        (*p)++;
}

/* Reads an identifier into buf; returns its length (0 when none). */
static size_t ident(const char **p, char *buf, size_t n)
{
    skip_ws(p);
    size_t len = 0;
    const char *s = *p;
    if (!(isalpha((unsigned char)*s) || *s == '_'))
        return 0;
    while (isalnum((unsigned char)s[len]) || s[len] == '_')
        len++;
    if (len >= n)
        len = n - 1;
    memcpy(buf, s, len);
    buf[len] = 0;
    *p = s + len;
    while (isalnum((unsigned char)**p) || **p == '_')
        (*p)++;
    return len;
}

/* DTYPE '[' INT {',' INT} ']' */
static int parse_type(lexer *lx, const char **p, te_dtype *dt, int *ndim, int64_t *shape)
{
    char tok[16];
    if (!ident(p, tok, sizeof tok) || te_dtype_parse(tok, dt) != TE_OK || *dt == TE_BOOL)
        return PERR(lx, TE_ERR_ARG,
                    "expected a dtype (f32, f64, i32, i64, ...) and a shape, "
                    "like f32[1,3,56,56]");
    skip_ws(p);
    if (**p != '[')
        return PERR(lx, TE_ERR_ARG, "expected '[' after the dtype %s", tok);
    (*p)++;
    *ndim = 0;
    for (;;) {
        skip_ws(p);
        char *end;
        errno = 0;
        long long v = strtoll(*p, &end, 10);
        if (end == *p || errno)
            return PERR(lx, TE_ERR_ARG, "expected an extent in the shape");
        if (*ndim == TE_MAX_DIMS)
            return PERR(lx, TE_ERR_SHAPE, "more than %d axes", TE_MAX_DIMS);
        shape[(*ndim)++] = v;
        *p = end;
        skip_ws(p);
        if (**p == ',') {
            (*p)++;
            continue;
        }
        if (**p == ']') {
            (*p)++;
            return TE_OK;
        }
        return PERR(lx, TE_ERR_ARG, "expected ',' or ']' in the shape");
    }
}

/* Next whitespace-delimited word of the line into buf; 0 at the end of the line. */
static size_t word(const char **p, char *buf, size_t n)
{
    skip_ws(p);
    size_t len = 0;
    while ((*p)[len] && !isspace((unsigned char)(*p)[len]) && (*p)[len] != '#')
        len++;
    if (!len)
        return 0;
    size_t c = len < n ? len : n - 1;
    memcpy(buf, *p, c);
    buf[c] = 0;
    *p += len;
    return len;
}

static int parse_num(const char *s, double *out)
{
    char *end;
    errno = 0;
    *out = strtod(s, &end);
    return end != s && !*end && !errno;
}

static int stmt_const(lexer *lx, const char *p)
{
    char name[64];
    if (!ident(&p, name, sizeof name))
        return PERR(lx, TE_ERR_ARG, "const: expected a name");
    te_dtype dt;
    int ndim;
    int64_t shape[TE_MAX_DIMS];
    int rc = parse_type(lx, &p, &dt, &ndim, shape);
    if (rc)
        return rc;
    uint64_t seed = 0;
    double lo = -1, hi = 1, fill = 0;
    int mode = 0; /* 0 random, 1 fill, 2 file */
    char file[600] = "", w[600];
    while (word(&p, w, sizeof w)) {
        double x;
        if (!strcmp(w, "random")) {
            mode = 0;
        } else if (!strncmp(w, "seed=", 5)) {
            char *end;
            seed = strtoull(w + 5, &end, 10);
            if (end == w + 5 || *end)
                return PERR(lx, TE_ERR_ARG, "const '%s': seed=%s is not an integer", name, w + 5);
        } else if (!strncmp(w, "lo=", 3) && parse_num(w + 3, &x)) {
            lo = x;
        } else if (!strncmp(w, "hi=", 3) && parse_num(w + 3, &x)) {
            hi = x;
        } else if (!strncmp(w, "fill=", 5) && parse_num(w + 5, &x)) {
            mode = 1;
            fill = x;
        } else if (!strncmp(w, "file=", 5) && w[5]) {
            mode = 2;
            snprintf(file, sizeof file, "%s", w + 5);
        } else {
            return PERR(lx, TE_ERR_ARG,
                        "const '%s': unknown initializer '%s' (random, seed=N, lo=X, hi=X, "
                        "fill=X, file=PATH)",
                        name, w);
        }
    }
    if (mode == 0) {
        int id = te_graph_const_random(lx->g, name, dt, ndim, shape, seed, lo, hi);
        return id < 0 ? PERR(lx, id, "%s", "") : TE_OK;
    }
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d] > 0 ? shape[d] : 1;
    size_t bytes = (size_t)n * te_dtype_size(dt);
    void *data = malloc(bytes ? bytes : 1);
    if (!data)
        return PERR(lx, TE_ERR_NOMEM, "const '%s': out of memory", name);
    if (mode == 1) {
        for (int64_t i = 0; i < n; i++)
            te__from_f64(&fill, dt, 1, (char *)data + (size_t)i * te_dtype_size(dt));
    } else {
        FILE *f = fopen(file, "rb");
        size_t got = f ? fread(data, 1, bytes, f) : 0;
        int extra = f ? fgetc(f) != EOF : 0;
        if (f)
            fclose(f);
        if (!f || got != bytes || extra) {
            free(data);
            return PERR(lx, TE_ERR_IO, "const '%s': file '%s' %s (need %zu bytes of %s)", name,
                        file, !f ? "cannot be read" : "has the wrong size", bytes,
                        te_dtype_str(dt));
        }
    }
    int id = te_graph_const(lx->g, name, dt, ndim, shape, data);
    free(data);
    if (id >= 0 && mode == 1) {
        lx->g->v[id].init = TE__INIT_FILL;
        lx->g->v[id].lo = fill;
    }
    return id < 0 ? id : TE_OK;
}

/* Resolves a value name used by a statement. */
static int use(lexer *lx, const char *name, const char *what)
{
    int v = te_graph_find(lx->g, name);
    if (v < 0)
        return PERR(lx, TE_ERR_NOT_FOUND,
                    "%s: no value named '%s' (values are defined before "
                    "use)",
                    what, name);
    return v;
}

static int stmt_node(lexer *lx, const char *p)
{
    char names[TE__G_MAXIO][64];
    int nout = 0;
    for (;;) {
        if (nout == TE__G_MAXIO)
            return PERR(lx, TE_ERR_ARG, "too many outputs");
        if (!ident(&p, names[nout], sizeof names[0]))
            return PERR(lx, TE_ERR_ARG, "expected 'input', 'const', 'output' or NAME = OP(...)");
        nout++;
        skip_ws(&p);
        if (*p == ',') {
            p++;
            continue;
        }
        break;
    }
    if (*p != '=')
        return PERR(lx, TE_ERR_ARG, "expected '=' after '%s'", names[nout - 1]);
    p++;
    char op[40];
    if (!ident(&p, op, sizeof op))
        return PERR(lx, TE_ERR_ARG, "node '%s': expected an operator name after '='", names[0]);
    skip_ws(&p);
    if (*p != '(')
        return PERR(lx, TE_ERR_ARG, "node '%s': expected '(' after %s", names[0], op);
    p++;
    int in[TE__G_MAXIO], nin = 0;
    skip_ws(&p);
    if (*p == ')') {
        p++;
    } else {
        for (;;) {
            char a[64];
            if (!ident(&p, a, sizeof a))
                return PERR(lx, TE_ERR_ARG, "node '%s': expected an input name", names[0]);
            if (nin == TE__G_MAXIO)
                return PERR(lx, TE_ERR_ARG, "node '%s': too many inputs", names[0]);
            char what[96];
            snprintf(what, sizeof what, "node '%s' input %d", names[0], nin + 1);
            int v = use(lx, a, what);
            if (v < 0)
                return v;
            in[nin++] = v;
            skip_ws(&p);
            if (*p == ',') {
                p++;
                continue;
            }
            if (*p == ')') {
                p++;
                break;
            }
            return PERR(lx, TE_ERR_ARG, "node '%s': expected ',' or ')' in the inputs", names[0]);
        }
    }
    char attrs[TE__G_ATTRS] = "";
    skip_ws(&p);
    size_t len = 0;
    while (p[len] && p[len] != '#')
        len++;
    while (len && isspace((unsigned char)p[len - 1]))
        len--;
    if (len >= sizeof attrs)
        return PERR(lx, TE_ERR_ARG, "node '%s': attributes are too long", names[0]);
    memcpy(attrs, p, len);
    attrs[len] = 0;
    for (size_t i = 0; i < len; i++)
        if (isspace((unsigned char)attrs[i]) && !(i > 0 && attrs[i - 1] == ',') &&
            !(i + 1 < len && attrs[i + 1] == ','))
            return PERR(lx, TE_ERR_ARG, "node '%s': attributes are KEY=VAL separated by ',': '%s'",
                        names[0], attrs);
    const char *nm[TE__G_MAXIO];
    int outs[TE__G_MAXIO];
    for (int i = 0; i < nout; i++)
        nm[i] = names[i];
    int rc = te_graph_node_multi(lx->g, op, attrs, nin, in, nout, nm, outs);
    if (rc) {
        prefix_line(lx); /* put the line in front of the node's message */
    }
    return rc;
}

int te_graph_parse(te_graph *g, const char *text, const char *filename)
{
    if (!g || !text)
        return g ? te__graph_error(g, TE_ERR_ARG, "parse: text is NULL") : TE_ERR_ARG;
    lexer lx = {text, filename ? filename : "<string>", 0, g};
    char line[2048];
    const char *p = text;
    while (*p) {
        lx.line++;
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (len >= sizeof line)
            return PERR(&lx, TE_ERR_ARG, "line is longer than %zu characters", sizeof line - 1);
        memcpy(line, p, len);
        line[len] = 0;
        p = nl ? nl + 1 : p + len;
        char *hash = strchr(line, '#');
        if (hash)
            *hash = 0;
        const char *s = line;
        skip_ws(&s);
        if (!*s)
            continue;
        const char *q = s;
        char kw[16] = "";
        ident(&q, kw, sizeof kw);
        skip_ws(&q);
        int rc;
        if (!strcmp(kw, "input") && *q != '=' && *q != ',') {
            char name[64];
            te_dtype dt;
            int ndim;
            int64_t shape[TE_MAX_DIMS];
            if (!ident(&q, name, sizeof name))
                return PERR(&lx, TE_ERR_ARG, "input: expected a name");
            rc = parse_type(&lx, &q, &dt, &ndim, shape);
            if (rc)
                return rc;
            skip_ws(&q);
            if (*q)
                return PERR(&lx, TE_ERR_ARG, "input '%s': unexpected '%s'", name, q);
            int id = te_graph_input(g, name, dt, ndim, shape);
            rc = id < 0 ? PERR(&lx, id, "%s", "") : TE_OK;
        } else if (!strcmp(kw, "const") && *q != '=' && *q != ',') {
            rc = stmt_const(&lx, q);
        } else if (!strcmp(kw, "output") && *q != '=' && *q != ',') {
            rc = TE_OK;
            for (;;) {
                char name[64];
                if (!ident(&q, name, sizeof name))
                    return PERR(&lx, TE_ERR_ARG, "output: expected a value name");
                int v = use(&lx, name, "output");
                if (v < 0)
                    return v;
                te_graph_output(g, v);
                skip_ws(&q);
                if (*q == ',') {
                    q++;
                    continue;
                }
                if (*q)
                    return PERR(&lx, TE_ERR_ARG, "output: unexpected '%s'", q);
                break;
            }
        } else {
            rc = stmt_node(&lx, s);
        }
        if (rc) {
            /* Messages from te_graph_* calls lack the line; perr already added it. */
            if (strncmp(g->msg, lx.file, strlen(lx.file)) != 0)
                prefix_line(&lx);
            return rc;
        }
    }
    return TE_OK;
}

int te_graph_load(te_graph *g, const char *path)
{
    if (!g || !path)
        return g ? te__graph_error(g, TE_ERR_ARG, "load: path is NULL") : TE_ERR_ARG;
    FILE *f = fopen(path, "rb");
    if (!f)
        return te__graph_error(g, TE_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0;) {
        n += got;
        if (cap - n - 1 == 0) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (!buf)
        return te__graph_error(g, TE_ERR_NOMEM, "%s: out of memory", path);
    buf[n] = 0;
    int rc = te_graph_parse(g, buf, path);
    free(buf);
    return rc;
}

/* ---- Printing ----------------------------------------------------------------------------- */

static int64_t numel_of_value(const te__gvalue *v)
{
    int64_t n = 1;
    for (int d = 0; d < v->ndim; d++)
        n *= v->shape[d];
    return n;
}

static void print_type(const te__gvalue *v, FILE *f)
{
    fprintf(f, "%s[", te_dtype_str(v->dtype));
    for (int d = 0; d < v->ndim; d++)
        fprintf(f, "%s%lld", d ? "," : "", (long long)v->shape[d]);
    fprintf(f, "]");
}

int te_graph_print(const te_graph *g, FILE *f, const char *data_dir)
{
    if (!g || !f)
        return TE_ERR_ARG;
    for (int i = 0; i < g->nv; i++) {
        const te__gvalue *v = &g->v[i];
        if (v->kind == TE_GRAPH_INPUT) {
            fprintf(f, "input %s ", v->name);
            print_type(v, f);
            fprintf(f, "\n");
        } else if (v->kind == TE_GRAPH_CONST) {
            fprintf(f, "const %s ", v->name);
            print_type(v, f);
            if (v->init == TE__INIT_RANDOM)
                fprintf(f, " random seed=%llu lo=%.17g hi=%.17g\n", (unsigned long long)v->seed,
                        v->lo, v->hi);
            else if (v->init == TE__INIT_FILL)
                fprintf(f, " fill=%.17g\n", v->lo);
            else if (data_dir) {
                char path[600];
                snprintf(path, sizeof path, "%s/%s.bin", data_dir, v->name);
                FILE *df = fopen(path, "wb");
                size_t bytes = (size_t)numel_of_value(v) * te_dtype_size(v->dtype);
                if (!df || fwrite(v->data, 1, bytes, df) != bytes) {
                    if (df)
                        fclose(df);
                    return TE_ERR_IO;
                }
                fclose(df);
                fprintf(f, " file=%s\n", path);
            } else {
                /* No silent zeros: reading this back fails on the missing initializer file. */
                fprintf(f, " file=%s.bin  # folded data: give te_graph_print a data directory\n",
                        v->name);
            }
        }
    }
    for (int n = 0; n < g->nn; n++) {
        const te__gnode *nd = &g->n[n];
        for (int i = 0; i < nd->n_out; i++)
            fprintf(f, "%s%s", i ? ", " : "", g->v[nd->out[i]].name);
        fprintf(f, " = %s(", nd->op->name);
        for (int i = 0; i < nd->n_in; i++)
            fprintf(f, "%s%s", i ? ", " : "", g->v[nd->in[i]].name);
        fprintf(f, ")%s%s\n", nd->attrs[0] ? " " : "", nd->attrs);
    }
    int first = 1;
    for (int i = 0; i < g->nv; i++)
        if (g->v[i].is_output) {
            fprintf(f, "%s%s", first ? "output " : ", ", g->v[i].name);
            first = 0;
        }
    if (!first)
        fprintf(f, "\n");
    return ferror(f) ? TE_ERR_IO : TE_OK;
}

/* Fusion rules as data: the parser of the rule files (grammar in tessera/graph.h). The parser
 * is a pure function of its text (no globals, no I/O), so it can be fuzzed. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "graph/fuse_internal.h"

typedef struct rparser {
    const char *file;
    int line;
    char *err;
    size_t errsize;
} rparser;

__attribute__((format(printf, 2, 3))) static int rerr(rparser *ps, const char *fmt, ...)
{
    if (ps->err && ps->errsize) {
        int n = snprintf(ps->err, ps->errsize, "%s:%d: ", ps->file, ps->line);
        if (n >= 0 && (size_t)n < ps->errsize) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(ps->err + n, ps->errsize - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return TE_ERR_ARG;
}

/* ---- Globs and elements ------------------------------------------------------------------- */

/* Copies src into dst (size bytes); false, with dst unchanged, when it does not fit. */
static bool copy_fits(char *dst, size_t size, const char *src)
{
    size_t n = strlen(src);
    if (n >= size)
        return false;
    memcpy(dst, src, n + 1);
    return true;
}

static int glob_match(const char *g, const char *s)
{
    if (!*g)
        return !*s;
    if (*g == '*')
        return glob_match(g + 1, s) || (*s && glob_match(g, s + 1));
    return *s == *g && glob_match(g + 1, s + 1);
}

int te__pelem_accepts(const te__pelem *e, const te__gop *op)
{
    for (int i = 0; i < e->natoms; i++) {
        const te__patom *a = &e->atoms[i];
        if (a->type == TE__ATOM_ANY || (a->type == TE__ATOM_KIND && a->kind == op->kind) ||
            (a->type == TE__ATOM_NAME && glob_match(a->name, op->name)))
            return 1;
    }
    return 0;
}

static void skip_ws(const char **p)
{
    while (**p == ' ' || **p == '\t')
        (*p)++;
}

static int is_atom_char(char c) { return isalnum((unsigned char)c) || c == '_' || c == '*'; }

static int parse_count(const char **p, int *out)
{
    if (!isdigit((unsigned char)**p))
        return 0;
    long v = 0;
    while (isdigit((unsigned char)**p)) {
        v = v * 10 + (**p - '0');
        if (v > 1000)
            return 0;
        (*p)++;
    }
    *out = (int)v;
    return 1;
}

static int parse_elem(rparser *ps, const char **p, te__pelem *e)
{
    memset(e, 0, sizeof *e);
    e->min = e->max = 1;
    for (;;) {
        skip_ws(p);
        if (e->natoms == TE__R_ATOMS)
            return rerr(ps, "more than %d alternatives in one element", TE__R_ATOMS);
        te__patom *a = &e->atoms[e->natoms];
        int kind = **p == '@';
        if (kind)
            (*p)++;
        size_t n = 0;
        while (is_atom_char((*p)[n]))
            n++;
        if (!n)
            return rerr(ps, "expected an operator name, '@kind' or 'any' at '%.20s'", *p);
        if (n >= sizeof a->name)
            return rerr(ps, "name '%.*s' is too long", (int)n, *p);
        memcpy(a->name, *p, n);
        a->name[n] = 0;
        *p += n;
        if (kind) {
            a->type = TE__ATOM_KIND;
            if (te_op_kind_parse(a->name, &a->kind))
                return rerr(ps,
                            "unknown kind '@%s' (elemwise, broadcast, injective, reduction, "
                            "out_ewise, opaque)",
                            a->name);
        } else if (!strcmp(a->name, "any")) {
            a->type = TE__ATOM_ANY;
        } else {
            a->type = TE__ATOM_NAME;
            if (!strchr(a->name, '*') && !te__gop_find(a->name))
                return rerr(ps, "unknown operator '%s' (see `tessera fuse --ops`)", a->name);
            if (strchr(a->name, '*')) {
                int any = 0;
                for (int i = 0; i < te_graph_op_count(); i++)
                    any |= glob_match(a->name, te_graph_op_name(i));
                if (!any)
                    return rerr(ps, "pattern '%s' matches no operator", a->name);
            }
        }
        e->natoms++;
        if (**p == '|') {
            (*p)++;
            continue;
        }
        break;
    }
    /* Quantifier. */
    if (**p == '?') {
        e->min = 0, e->max = 1, e->has_quant = 1;
        (*p)++;
    } else if (**p == '+') {
        e->min = 1, e->max = TE__R_INF, e->has_quant = 1;
        (*p)++;
    } else if (**p == '{') {
        (*p)++;
        if (!parse_count(p, &e->min))
            return rerr(ps, "expected a count after '{'");
        e->max = e->min;
        if (**p == ',') {
            (*p)++;
            e->max = TE__R_INF;
            if (isdigit((unsigned char)**p) && !parse_count(p, &e->max))
                return rerr(ps, "bad count in '{N,M}'");
        }
        if (**p != '}')
            return rerr(ps, "expected '}' to close the quantifier");
        (*p)++;
        if (e->max < e->min || e->max == 0)
            return rerr(ps, "quantifier {%d,%d} is empty", e->min, e->max);
        e->has_quant = 1;
    }
    if (**p && !isspace((unsigned char)**p) && !strchr("-,)]", **p))
        return rerr(ps, "unexpected '%c' after an element", **p);
    return TE_OK;
}

static void skip_arrow(const char **p)
{
    skip_ws(p);
    if ((*p)[0] == '-' && (*p)[1] == '>') {
        *p += 2;
        skip_ws(p);
    }
}

/* A sequence of elements up to ',' or ')'. */
static int parse_seq(rparser *ps, const char **p, te__pelem *out, int *n)
{
    *n = 0;
    for (;;) {
        skip_arrow(p);
        if (**p == ',' || **p == ')' || !**p)
            return TE_OK;
        if (*n == TE__R_PATH)
            return rerr(ps, "a branch path has more than %d elements", TE__R_PATH);
        int rc = parse_elem(ps, p, &out[(*n)++]);
        if (rc)
            return rc;
    }
}

static int parse_pattern(rparser *ps, const char *text, te__rule *r)
{
    const char *p = text;
    r->nitems = 0;
    for (;;) {
        skip_arrow(&p);
        if (!*p)
            break;
        if (r->nitems == TE__R_ITEMS)
            return rerr(ps, "pattern has more than %d items", TE__R_ITEMS);
        te__pitem *it = &r->items[r->nitems];
        memset(it, 0, sizeof *it);
        int rc;
        if (*p == '(') {
            p++;
            it->type = TE__ITEM_BRANCH;
            rc = parse_seq(ps, &p, it->p1, &it->n1);
            if (rc)
                return rc;
            if (*p != ',')
                return rerr(ps, "a branch is '(path, path) join': expected ','");
            p++;
            rc = parse_seq(ps, &p, it->p2, &it->n2);
            if (rc)
                return rc;
            if (*p != ')')
                return rerr(ps, "expected ')' to close the branch");
            p++;
            if (it->n1 == 0 && it->n2 == 0)
                return rerr(ps, "a branch needs at least one non-empty path");
            skip_arrow(&p);
            if (!*p)
                return rerr(ps, "a branch needs the element that joins its paths after ')'");
            rc = parse_elem(ps, &p, &it->elem);
            if (!rc && (it->elem.min != 1 || it->elem.max != 1))
                rc = rerr(ps, "the join of a branch cannot have a quantifier");
        } else if (*p == '[') {
            p++;
            it->type = TE__ITEM_SIBLINGS;
            rc = parse_elem(ps, &p, &it->elem);
            if (rc)
                return rc;
            if (!it->elem.has_quant)
                it->elem.min = 2, it->elem.max = TE__R_INF;
            if (it->elem.min < 2)
                return rerr(ps, "siblings need a quantifier of at least 2");
            skip_ws(&p);
            if (*p != ']')
                return rerr(ps, "expected ']' to close the siblings");
            p++;
        } else {
            if (*p == ',' || *p == ')' || *p == ']')
                return rerr(ps, "unexpected '%c' in the pattern", *p);
            it->type = TE__ITEM_ELEM;
            rc = parse_elem(ps, &p, &it->elem);
        }
        if (rc)
            return rc;
        r->nitems++;
    }
    if (!r->nitems)
        return rerr(ps, "rule '%s': the pattern is empty", r->name);
    /* The first element must match something: an anchor that may be absent is ambiguous. */
    if (r->items[0].type == TE__ITEM_ELEM && r->items[0].elem.min == 0)
        return rerr(ps, "rule '%s': the first element cannot be optional", r->name);
    for (int i = 1; i < r->nitems; i++)
        if (r->items[i].type == TE__ITEM_BRANCH)
            return rerr(ps, "rule '%s': a branch can only start a pattern", r->name);
    for (int i = 0; i + 1 < r->nitems; i++)
        if (r->items[i].type == TE__ITEM_SIBLINGS)
            return rerr(ps, "rule '%s': siblings can only end a pattern", r->name);
    /* Specificity: names count more than kinds, kinds more than globs, 'any' nothing. */
    int spec = 0;
    for (int i = 0; i < r->nitems; i++) {
        const te__pitem *it = &r->items[i];
        const te__pelem *els[1 + 2 * TE__R_PATH];
        int ne = 0;
        els[ne++] = &it->elem;
        for (int k = 0; k < it->n1; k++)
            els[ne++] = &it->p1[k];
        for (int k = 0; k < it->n2; k++)
            els[ne++] = &it->p2[k];
        for (int k = 0; k < ne; k++) {
            int best = 0;
            for (int a = 0; a < els[k]->natoms; a++) {
                const te__patom *at = &els[k]->atoms[a];
                int s = at->type == TE__ATOM_ANY    ? 0
                        : at->type == TE__ATOM_KIND ? 2
                        : strchr(at->name, '*')     ? 1
                                                    : 3;
                best = a == 0 || s < best ? s : best; /* an alternation is as weak as its weakest */
            }
            spec += best;
        }
    }
    r->specificity = spec;
    return TE_OK;
}

/* The class must agree with the pattern's shape. */
static int check_class(rparser *ps, te__rule *r)
{
    int has_branch = 0, has_sib = 0, has_elem = 0;
    for (int i = 0; i < r->nitems; i++) {
        has_branch |= r->items[i].type == TE__ITEM_BRANCH;
        has_sib |= r->items[i].type == TE__ITEM_SIBLINGS;
        has_elem |= r->items[i].type == TE__ITEM_ELEM;
    }
    if (!strcmp(r->cls, "vertical")) {
        if (has_branch || has_sib)
            return rerr(ps, "rule '%s': a vertical pattern is a chain of elements", r->name);
    } else if (!strcmp(r->cls, "horizontal")) {
        if (r->nitems != 1 || !has_sib)
            return rerr(ps, "rule '%s': a horizontal pattern is one '[siblings]'", r->name);
    } else if (!strcmp(r->cls, "branch")) {
        if (!has_branch && !r->escape)
            return rerr(ps,
                        "rule '%s': a branch pattern has '(path, path) join' or lets an "
                        "intermediate leave the group (where escape=1)",
                        r->name);
        if (has_sib)
            return rerr(ps, "rule '%s': siblings make it a composite", r->name);
    } else if (!strcmp(r->cls, "composite")) {
        if (!(has_sib && (has_elem || has_branch)) && !(has_branch && has_elem))
            return rerr(ps,
                        "rule '%s': a composite pattern mixes classes (a chain or branch "
                        "with siblings, or a branch with a chain)",
                        r->name);
    } else {
        return rerr(ps, "rule '%s': unknown class '%s' (vertical, horizontal, branch, composite)",
                    r->name, r->cls);
    }
    return TE_OK;
}

static int parse_int_word(const char *s, long long lo, long long hi, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || errno || v < lo || v > hi)
        return 0;
    *out = v;
    return 1;
}

static int parse_where(rparser *ps, const char *text, te__rule *r)
{
    const char *p = text;
    for (;;) {
        skip_ws(&p);
        if (!*p)
            return TE_OK;
        char w[128];
        size_t n = 0;
        while (p[n] && !isspace((unsigned char)p[n]))
            n++;
        if (n >= sizeof w)
            return rerr(ps, "constraint '%.20s...' is too long", p);
        memcpy(w, p, n);
        w[n] = 0;
        p += n;
        char *eq = strchr(w, '=');
        if (!eq || eq == w || !eq[1])
            return rerr(ps, "constraint '%s' is not KEY=VALUE", w);
        *eq = 0;
        const char *k = w, *v = eq + 1;
        long long iv;
        if (!strcmp(k, "dtype")) {
            for (const char *q = v; *q;) {
                char d[16];
                size_t l = strcspn(q, "|");
                if (l >= sizeof d)
                    return rerr(ps, "dtype '%s' is unknown", v);
                memcpy(d, q, l);
                d[l] = 0;
                te_dtype dt;
                if (te_dtype_parse(d, &dt))
                    return rerr(ps, "dtype '%s' is unknown", d);
                r->dtype_mask |= 1u << dt;
                q += l + (q[l] == '|');
            }
        } else if (!strcmp(k, "rank") && parse_int_word(v, 1, TE_MAX_DIMS, &iv)) {
            r->rank = (int)iv;
        } else if (!strcmp(k, "min_rank") && parse_int_word(v, 1, TE_MAX_DIMS, &iv)) {
            r->min_rank = (int)iv;
        } else if (!strcmp(k, "target")) {
            if (strcmp(v, "cpu") && strcmp(v, "cuda"))
                return rerr(ps, "target '%s': use cpu or cuda", v);
            snprintf(r->target, sizeof r->target, "%s", v);
        } else if (!strcmp(k, "isa")) {
            if (strlen(v) >= sizeof r->isa)
                return rerr(ps, "isa '%s' is too long", v);
            snprintf(r->isa, sizeof r->isa, "%s", v);
        } else if (!strcmp(k, "kernel")) {
            int kh, kw;
            char extra;
            if (sscanf(v, "%dx%d%c", &kh, &kw, &extra) != 2 || kh < 1 || kw < 1)
                return rerr(ps, "kernel '%s': write KHxKW, like 1x1", v);
            r->kernel_h = kh, r->kernel_w = kw;
        } else if (!strcmp(k, "same_shape") && parse_int_word(v, 0, 1, &iv)) {
            r->same_shape = (int)iv;
        } else if (!strcmp(k, "escape") && parse_int_word(v, 0, 1, &iv)) {
            r->escape = (int)iv;
        } else if (!strcmp(k, "max_numel") && parse_int_word(v, 1, INT64_MAX, &iv)) {
            r->max_numel = iv;
        } else if (!strcmp(k, "min_sm") && parse_int_word(v, 10, 1000, &iv)) {
            r->min_sm = (int)iv;
        } else {
            return rerr(ps,
                        "constraint '%s=%s' is unknown or has a bad value (dtype, rank, "
                        "min_rank, target, isa, kernel, same_shape, escape, max_numel, "
                        "min_sm 10..1000)",
                        k, v);
        }
    }
}

static int add_rule(te_fuse_rules *rs, const te__rule *r)
{
    if (rs->n == rs->cap) {
        int cap = rs->cap ? rs->cap * 2 : 32;
        te__rule *p = realloc(rs->r, sizeof *p * (size_t)cap);
        if (!p)
            return TE_ERR_NOMEM;
        rs->r = p;
        rs->cap = cap;
    }
    rs->r[rs->n++] = *r;
    return TE_OK;
}

te_fuse_rules *te_fuse_rules_parse(const char *text, const char *filename, char *err,
                                   size_t errsize)
{
    rparser ps = {filename ? filename : "<string>", 0, err, errsize};
    if (err && errsize)
        err[0] = 0;
    if (!text) {
        rerr(&ps, "no text");
        return NULL;
    }
    te_fuse_rules *rs = calloc(1, sizeof *rs);
    if (!rs)
        return NULL;
    te__rule cur;
    int in_rule = 0, have_pattern = 0, have_class = 0, have_prio = 0, rule_line = 0;
    char pattern_text[256] = "";
    const char *p = text;
    int rc = TE_OK;
    while (*p && !rc) {
        ps.line++;
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        char line[512];
        if (len >= sizeof line) {
            rc = rerr(&ps, "line is longer than %zu characters", sizeof line - 1);
            break;
        }
        memcpy(line, p, len);
        line[len] = 0;
        p = nl ? nl + 1 : p + len;
        for (size_t i = 0; i < len; i++)
            if (line[i] == '#' || line[i] == '\r') {
                line[i] = 0;
                break;
            } else if ((unsigned char)line[i] < 0x20 && line[i] != '\t') {
                rc = rerr(&ps, "control character 0x%02x", (unsigned char)line[i]);
                break;
            }
        if (rc)
            break;
        const char *s = line;
        skip_ws(&s);
        if (!*s)
            continue;
        char kw[16];
        size_t kl = 0;
        while (s[kl] && !isspace((unsigned char)s[kl]) && kl < sizeof kw - 1)
            kw[kl] = s[kl], kl++;
        kw[kl] = 0;
        const char *arg = s + kl;
        skip_ws(&arg);
        char argbuf[512];
        if (!copy_fits(argbuf, sizeof argbuf, arg)) {
            rc = rerr(&ps, "line is longer than %zu characters", sizeof argbuf - 1);
            break;
        }
        for (size_t n = strlen(argbuf); n && isspace((unsigned char)argbuf[n - 1]);)
            argbuf[--n] = 0;
        if (!strcmp(kw, "rule")) {
            if (in_rule) {
                rc = rerr(&ps, "rule '%s' (line %d) has no 'end'", cur.name, rule_line);
                break;
            }
            memset(&cur, 0, sizeof cur);
            cur.rank = cur.min_rank = -1;
            size_t n = strlen(argbuf);
            int ok = n > 0 && n < sizeof cur.name &&
                     (isalpha((unsigned char)argbuf[0]) || argbuf[0] == '_');
            for (size_t i = 0; ok && i < n; i++)
                ok = isalnum((unsigned char)argbuf[i]) || argbuf[i] == '_';
            if (!ok) {
                rc = rerr(&ps, "'rule' needs a name (an identifier of at most %zu characters)",
                          sizeof cur.name - 1);
                break;
            }
            for (int i = 0; i < rs->n; i++)
                if (!strcmp(rs->r[i].name, argbuf)) {
                    rc = rerr(&ps, "rule '%s' is defined twice (first at line %d)", argbuf,
                              rs->r[i].line);
                    break;
                }
            if (!copy_fits(cur.name, sizeof cur.name, argbuf)) {
                rc = rerr(&ps, "rule name is longer than %zu characters", sizeof cur.name - 1);
                break;
            }
            in_rule = 1;
            have_pattern = have_class = have_prio = 0;
            rule_line = cur.line = ps.line;
            continue;
        }
        if (!in_rule) {
            rc = rerr(&ps, "'%s' outside a rule (start one with 'rule NAME')", kw);
            break;
        }
        if (!strcmp(kw, "end")) {
            if (*argbuf) {
                rc = rerr(&ps, "'end' takes nothing after it");
                break;
            }
            if (!have_pattern || !have_class) {
                rc =
                    rerr(&ps, "rule '%s' needs a %s", cur.name, have_pattern ? "class" : "pattern");
                break;
            }
            int save = ps.line;
            ps.line = rule_line;
            rc = check_class(&ps, &cur);
            ps.line = save;
            if (rc)
                break;
            cur.order = rs->n;
            if (add_rule(rs, &cur)) {
                rc = rerr(&ps, "out of memory");
                break;
            }
            in_rule = 0;
        } else if (!strcmp(kw, "class")) {
            if (have_class || strlen(argbuf) >= sizeof cur.cls || !*argbuf) {
                rc = rerr(&ps, have_class ? "a second 'class'" : "bad class '%s'", argbuf);
                break;
            }
            copy_fits(cur.cls, sizeof cur.cls, argbuf); /* length checked above */
            have_class = 1;
        } else if (!strcmp(kw, "pattern")) {
            if (have_pattern) {
                rc = rerr(&ps, "a second 'pattern'");
                break;
            }
            if (strlen(argbuf) >= sizeof pattern_text) {
                rc = rerr(&ps, "pattern is longer than %zu characters", sizeof pattern_text - 1);
                break;
            }
            copy_fits(pattern_text, sizeof pattern_text, argbuf); /* length checked above */
            copy_fits(cur.pattern, sizeof cur.pattern, argbuf);
            rc = parse_pattern(&ps, pattern_text, &cur);
            have_pattern = 1;
        } else if (!strcmp(kw, "where")) {
            rc = parse_where(&ps, argbuf, &cur);
        } else if (!strcmp(kw, "priority")) {
            long long v;
            if (have_prio || !parse_int_word(argbuf, -1000000, 1000000, &v)) {
                rc = rerr(&ps,
                          have_prio ? "a second 'priority'"
                                    : "priority '%s' is not an integer in +-1000000",
                          argbuf);
                break;
            }
            cur.priority = (int)v;
            have_prio = 1;
        } else if (!strcmp(kw, "produces")) {
            char opn[64] = "";
            size_t n = strcspn(argbuf, " \t");
            if (!n || n >= sizeof cur.produces) {
                rc = rerr(&ps, "'produces' needs an operator name");
                break;
            }
            memcpy(opn, argbuf, n);
            opn[n] = 0;
            if (!te__gop_find(opn)) {
                rc = rerr(&ps, "produces unknown operator '%s'", opn);
                break;
            }
            if (!copy_fits(cur.produces, sizeof cur.produces, opn)) {
                rc = rerr(&ps, "operator name '%s' is too long", opn);
                break;
            }
            const char *a = argbuf + n;
            skip_ws(&a);
            if (strlen(a) >= sizeof cur.produces_attrs || strchr(a, ' ')) {
                rc = rerr(&ps, "produces: attributes are KEY=VAL separated by ',' ('%s')", a);
                break;
            }
            snprintf(cur.produces_attrs, sizeof cur.produces_attrs, "%s", a);
        } else {
            rc = rerr(&ps,
                      "unknown directive '%s' (class, pattern, where, priority, produces, "
                      "end)",
                      kw);
        }
    }
    if (!rc && in_rule) {
        ps.line = rule_line;
        rc = rerr(&ps, "rule '%s' has no 'end'", cur.name);
    }
    if (rc) {
        te_fuse_rules_free(rs);
        return NULL;
    }
    return rs;
}

te_fuse_rules *te_fuse_rules_load(const char *path, char *err, size_t errsize)
{
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f) {
        if (err && errsize)
            snprintf(err, errsize, "%s: cannot open: %s", path ? path : "(null)", strerror(errno));
        return NULL;
    }
    size_t cap = 8192, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0)
            break;
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
    if (!buf) {
        if (err && errsize)
            snprintf(err, errsize, "%s: out of memory", path);
        return NULL;
    }
    buf[n] = 0;
    if (strlen(buf) != n) {
        free(buf);
        if (err && errsize)
            snprintf(err, errsize, "%s: contains a NUL byte", path);
        return NULL;
    }
    te_fuse_rules *r = te_fuse_rules_parse(buf, path, err, errsize);
    free(buf);
    return r;
}

int te_fuse_rules_merge(te_fuse_rules *a, const te_fuse_rules *b, char *err, size_t errsize)
{
    if (!a || !b)
        return TE_ERR_ARG;
    for (int i = 0; i < b->n; i++)
        for (int j = 0; j < a->n; j++)
            if (!strcmp(a->r[j].name, b->r[i].name)) {
                if (err && errsize)
                    snprintf(err, errsize, "rule '%s' is defined in both rule sets", b->r[i].name);
                return TE_ERR_ARG;
            }
    for (int i = 0; i < b->n; i++) {
        te__rule r = b->r[i];
        r.order = a->n;
        if (add_rule(a, &r))
            return TE_ERR_NOMEM;
    }
    return TE_OK;
}

void te_fuse_rules_free(te_fuse_rules *r)
{
    if (r) {
        free(r->r);
        free(r);
    }
}

#define ROK(r, i) ((r) && (i) >= 0 && (i) < (r)->n)
int te_fuse_rules_count(const te_fuse_rules *r) { return r ? r->n : 0; }
const char *te_fuse_rule_name(const te_fuse_rules *r, int i)
{
    return ROK(r, i) ? r->r[i].name : NULL;
}
const char *te_fuse_rule_class(const te_fuse_rules *r, int i)
{
    return ROK(r, i) ? r->r[i].cls : NULL;
}
const char *te_fuse_rule_pattern(const te_fuse_rules *r, int i)
{
    return ROK(r, i) ? r->r[i].pattern : NULL;
}
int te_fuse_rule_priority(const te_fuse_rules *r, int i)
{
    return ROK(r, i) ? r->r[i].priority : 0;
}
const char *te_fuse_rule_produces(const te_fuse_rules *r, int i)
{
    return ROK(r, i) && r->r[i].produces[0] ? r->r[i].produces : NULL;
}

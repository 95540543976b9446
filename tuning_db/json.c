/* A strict JSON reader (RFC 8259) and the writer helpers. The reader never trusts its input:
 * it is the target of the import fuzzer. */
#include "tuning_db/json.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define TE__JSON_MAX_DEPTH 64

typedef struct {
    te__json_doc *doc;
    const char *s, *p, *end;
    int failed;
} parser;

static void fail(parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(parser *ps, const char *fmt, ...)
{
    if (ps->failed)
        return;
    ps->failed = 1;
    int k =
        snprintf(ps->doc->err, sizeof ps->doc->err, "column %zu: ", (size_t)(ps->p - ps->s) + 1);
    if (k < 0 || (size_t)k >= sizeof ps->doc->err)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ps->doc->err + k, sizeof ps->doc->err - (size_t)k, fmt, ap);
    va_end(ap);
}

static void skip_ws(parser *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static te__json *new_node(parser *ps, te__json_type type)
{
    te__json *v = te__arena_alloc(&ps->doc->arena, sizeof *v);
    if (!v) {
        fail(ps, "out of memory");
        return NULL;
    }
    memset(v, 0, sizeof *v);
    v->type = type;
    v->raw = ps->p;
    return v;
}

static int hex4(parser *ps, unsigned *out)
{
    if (ps->end - ps->p < 4) {
        fail(ps, "truncated \\u escape");
        return 0;
    }
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = ps->p[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else {
            fail(ps, "bad hex digit in \\u escape");
            return 0;
        }
    }
    ps->p += 4;
    *out = v;
    return 1;
}

static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | cp >> 12);
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | cp >> 18);
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* Length of the well-formed UTF-8 sequence at p[0..n) (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF), or 0 when it is not one. */
static size_t utf8_seq(const unsigned char *p, size_t n)
{
    if (n == 0)
        return 0;
    unsigned c = p[0];
    size_t len;
    unsigned lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0)
            lo = 0xa0; /* overlong */
        if (c == 0xed)
            hi = 0x9f; /* surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0)
            lo = 0x90; /* overlong */
        if (c == 0xf4)
            hi = 0x8f; /* above U+10FFFF */
    } else
        return 0;
    if (n < len || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if ((p[i] & 0xc0) != 0x80)
            return 0;
    return len;
}

size_t te__utf8_valid_prefix(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        size_t k = utf8_seq(p + i, n - i);
        if (!k)
            break;
        i += k;
    }
    return i;
}

/* Parses a string starting at the opening quote; returns the decoded text in the arena. */
static char *parse_string(parser *ps)
{
    ps->p++; /* opening quote */
    /* The decoded text is never longer than the encoded one. */
    const char *q = ps->p;
    while (q < ps->end && *q != '"') {
        if (*q == '\\' && q + 1 < ps->end)
            q++;
        q++;
    }
    char *out = te__arena_alloc(&ps->doc->arena, (size_t)(q - ps->p) + 1);
    if (!out) {
        fail(ps, "out of memory");
        return NULL;
    }
    char *o = out;
    for (;;) {
        if (ps->p >= ps->end) {
            fail(ps, "unterminated string");
            return NULL;
        }
        unsigned char c = (unsigned char)*ps->p;
        if (c == '"') {
            ps->p++;
            break;
        }
        if (c < 0x20) {
            fail(ps, "control character in string");
            return NULL;
        }
        if (c >= 0x80) {
            size_t k = utf8_seq((const unsigned char *)ps->p, (size_t)(ps->end - ps->p));
            if (!k) {
                fail(ps, "invalid UTF-8 in a string (byte 0x%02x)", c);
                return NULL;
            }
            memcpy(o, ps->p, k);
            o += k;
            ps->p += k;
            continue;
        }
        if (c != '\\') {
            *o++ = (char)c;
            ps->p++;
            continue;
        }
        ps->p++;
        if (ps->p >= ps->end) {
            fail(ps, "unterminated escape");
            return NULL;
        }
        char e = *ps->p++;
        switch (e) {
        case '"':
        case '\\':
        case '/':
            *o++ = e;
            break;
        case 'b':
            *o++ = '\b';
            break;
        case 'f':
            *o++ = '\f';
            break;
        case 'n':
            *o++ = '\n';
            break;
        case 'r':
            *o++ = '\r';
            break;
        case 't':
            *o++ = '\t';
            break;
        case 'u': {
            unsigned cp;
            if (!hex4(ps, &cp))
                return NULL;
            if (cp >= 0xdc00 && cp <= 0xdfff) {
                fail(ps, "lone low surrogate in \\u escape");
                return NULL;
            }
            if (cp >= 0xd800 && cp <= 0xdbff) {
                unsigned lo;
                if (ps->end - ps->p < 2 || ps->p[0] != '\\' || ps->p[1] != 'u') {
                    fail(ps, "high surrogate without its low half");
                    return NULL;
                }
                ps->p += 2;
                if (!hex4(ps, &lo))
                    return NULL;
                if (lo < 0xdc00 || lo > 0xdfff) {
                    fail(ps, "bad low surrogate");
                    return NULL;
                }
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            }
            if (cp == 0) {
                fail(ps, "\\u0000 is not allowed in Tessera text");
                return NULL;
            }
            /* 6 escape bytes (12 for a pair) always cover the 1..4 output bytes. */
            o += put_utf8(o, cp);
            break;
        }
        default:
            fail(ps, "bad escape '\\%c'", e);
            return NULL;
        }
    }
    *o = '\0';
    return out;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

static te__json *parse_number(parser *ps)
{
    te__json *v = new_node(ps, TE__JSON_NUMBER);
    if (!v)
        return NULL;
    const char *p = ps->p;
    int integral = 1;
    if (p < ps->end && *p == '-')
        p++;
    if (p >= ps->end || !is_digit(*p)) {
        fail(ps, "bad number");
        return NULL;
    }
    if (*p == '0')
        p++;
    else
        while (p < ps->end && is_digit(*p))
            p++;
    if (p < ps->end && *p == '.') {
        integral = 0;
        p++;
        if (p >= ps->end || !is_digit(*p)) {
            fail(ps, "bad number: digits must follow '.'");
            return NULL;
        }
        while (p < ps->end && is_digit(*p))
            p++;
    }
    if (p < ps->end && (*p == 'e' || *p == 'E')) {
        integral = 0;
        p++;
        if (p < ps->end && (*p == '+' || *p == '-'))
            p++;
        if (p >= ps->end || !is_digit(*p)) {
            fail(ps, "bad number: digits must follow the exponent");
            return NULL;
        }
        while (p < ps->end && is_digit(*p))
            p++;
    }
    size_t n = (size_t)(p - ps->p);
    char small[64], *text = small;
    if (n >= sizeof small && !(text = te__arena_alloc(&ps->doc->arena, n + 1))) {
        fail(ps, "out of memory");
        return NULL;
    }
    memcpy(text, ps->p, n);
    text[n] = '\0';
    v->num = strtod(text, NULL);
    if (integral) {
        errno = 0;
        long long x = strtoll(text, NULL, 10);
        if (errno == 0) {
            v->is_int = 1;
            v->i = x;
        }
    }
    ps->p = p;
    v->raw_len = n;
    return v;
}

static te__json *parse_value(parser *ps, int depth);

static te__json *parse_container(parser *ps, int depth, int is_object)
{
    te__json *v = new_node(ps, is_object ? TE__JSON_OBJECT : TE__JSON_ARRAY);
    if (!v)
        return NULL;
    char close = is_object ? '}' : ']';
    ps->p++;
    te__json **tail = &v->first;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
        v->raw_len = (size_t)(ps->p - v->raw);
        return v;
    }
    for (;;) {
        char *key = NULL;
        skip_ws(ps);
        if (is_object) {
            if (ps->p >= ps->end || *ps->p != '"') {
                fail(ps, "expected a member name in quotes");
                return NULL;
            }
            if (!(key = parse_string(ps)))
                return NULL;
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != ':') {
                fail(ps, "expected ':' after a member name");
                return NULL;
            }
            ps->p++;
        }
        te__json *child = parse_value(ps, depth + 1);
        if (!child)
            return NULL;
        child->key = key;
        *tail = child;
        tail = &child->next;
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == close) {
            ps->p++;
            break;
        }
        fail(ps, is_object ? "expected ',' or '}'" : "expected ',' or ']'");
        return NULL;
    }
    v->raw_len = (size_t)(ps->p - v->raw);
    return v;
}

static te__json *parse_literal(parser *ps, const char *word, te__json_type type)
{
    size_t n = strlen(word);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0) {
        fail(ps, "unexpected character '%c'", *ps->p);
        return NULL;
    }
    te__json *v = new_node(ps, type);
    if (!v)
        return NULL;
    ps->p += n;
    v->raw_len = n;
    return v;
}

static te__json *parse_value(parser *ps, int depth)
{
    if (depth > TE__JSON_MAX_DEPTH) {
        fail(ps, "nesting deeper than %d levels", TE__JSON_MAX_DEPTH);
        return NULL;
    }
    skip_ws(ps);
    if (ps->p >= ps->end) {
        fail(ps, "unexpected end of input");
        return NULL;
    }
    switch (*ps->p) {
    case '{':
        return parse_container(ps, depth, 1);
    case '[':
        return parse_container(ps, depth, 0);
    case '"': {
        te__json *v = new_node(ps, TE__JSON_STRING);
        if (!v || !(v->str = parse_string(ps)))
            return NULL;
        v->raw_len = (size_t)(ps->p - v->raw);
        return v;
    }
    case 't':
        return parse_literal(ps, "true", TE__JSON_TRUE);
    case 'f':
        return parse_literal(ps, "false", TE__JSON_FALSE);
    case 'n':
        return parse_literal(ps, "null", TE__JSON_NULL);
    default:
        if (*ps->p == '-' || is_digit(*ps->p))
            return parse_number(ps);
        if ((unsigned char)*ps->p >= 0x20 && (unsigned char)*ps->p < 0x7f)
            fail(ps, "unexpected character '%c'", *ps->p);
        else
            fail(ps, "unexpected byte 0x%02x", (unsigned char)*ps->p);
        return NULL;
    }
}

te__json *te__json_parse(te__json_doc *doc, const char *s, size_t n)
{
    parser ps = {.doc = doc, .s = s, .p = s, .end = s + n};
    doc->err[0] = '\0';
    te__json *v = parse_value(&ps, 0);
    if (!v)
        return NULL;
    skip_ws(&ps);
    if (ps.p != ps.end) {
        fail(&ps, "unexpected text after the JSON value");
        return NULL;
    }
    return v;
}

void te__json_doc_free(te__json_doc *doc) { te__arena_free(&doc->arena); }

int te__json_valid(const char *s, size_t n)
{
    te__json_doc doc = {0};
    int ok = te__json_parse(&doc, s, n) != NULL;
    te__json_doc_free(&doc);
    return ok;
}

te__json *te__json_member(const te__json *obj, const char *key)
{
    if (!obj || obj->type != TE__JSON_OBJECT)
        return NULL;
    for (te__json *m = obj->first; m; m = m->next)
        if (!strcmp(m->key, key))
            return m;
    return NULL;
}

void te__json_write_str(FILE *f, const char *s)
{
    if (!s) {
        fputs("null", f);
        return;
    }
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"':
            fputs("\\\"", f);
            break;
        case '\\':
            fputs("\\\\", f);
            break;
        case '\n':
            fputs("\\n", f);
            break;
        case '\r':
            fputs("\\r", f);
            break;
        case '\t':
            fputs("\\t", f);
            break;
        default:
            if (*p < 0x20)
                fprintf(f, "\\u%04x", *p);
            else
                fputc(*p, f);
        }
    }
    fputc('"', f);
}

void te__json_write_num(FILE *f, double x)
{
    if (!isfinite(x))
        fputs("null", f);
    else
        fprintf(f, "%.17g", x);
}

void te_db_json_write_str(FILE *f, const char *s) { te__json_write_str(f, s); }

void te_db_json_write_num(FILE *f, double x) { te__json_write_num(f, x); }

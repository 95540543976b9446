/* The JSON reader and writer helpers over jansson. jansson does the parsing, validation and
 * decoding; this file turns its tree into the arena DOM of json.h, recovering the source text
 * of each value by walking the (then known valid) input beside the tree, and puts jansson's
 * errors into Tessera's words. The reader never trusts its input: it is the target of the
 * import fuzzer (tests/fuzz/fuzz_db_import.c). */
#include "tuning_db/json.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define TE__JSON_MAX_DEPTH 64

static void set_err(te__json_doc *doc, size_t column, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err(te__json_doc *doc, size_t column, const char *fmt, ...)
{
    int k = snprintf(doc->err, sizeof doc->err, "column %zu: ", column);
    if (k < 0 || (size_t)k >= sizeof doc->err)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(doc->err + k, sizeof doc->err - (size_t)k, fmt, ap);
    va_end(ap);
}

/* Refuses nesting bombs before jansson (whose own limit is 2048 levels) recurses into them:
 * the column of the first bracket deeper than the limit, or 0. Brackets inside strings do not
 * count; the scan needs no valid input. */
static size_t too_deep(const char *s, size_t n)
{
    int depth = 0, in_str = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == '[' || c == '{') {
            if (++depth > TE__JSON_MAX_DEPTH)
                return i + 1;
        } else if (c == ']' || c == '}') {
            depth--;
        }
    }
    return 0;
}

/* jansson's error in Tessera's words; the tests and users grep for these phrases. */
static void translate_error(te__json_doc *doc, const json_error_t *e, const char *s, size_t n)
{
    size_t col = e->position > 0 ? (size_t)e->position : 1;
    unsigned byte = 0;
    switch (json_error_code(e)) {
    case json_error_invalid_utf8:
        if (sscanf(e->text, "unable to decode byte 0x%x", &byte) == 1)
            set_err(doc, col, "invalid UTF-8 in a string (byte 0x%02x)", byte & 0xffu);
        else
            set_err(doc, col, "invalid UTF-8");
        return;
    case json_error_premature_end_of_input:
        set_err(doc, col, "unexpected end of input (%s)", e->text);
        return;
    case json_error_end_of_input_expected:
        set_err(doc, col, "unexpected text after the JSON value");
        return;
    case json_error_null_character:
        set_err(doc, col, "\\u0000 is not allowed in Tessera text");
        return;
    case json_error_duplicate_key:
        set_err(doc, col, "a member name appears twice in one object (%s)", e->text);
        return;
    case json_error_numeric_overflow:
        set_err(doc, col, "number out of range (%s)", e->text);
        return;
    case json_error_out_of_memory:
        set_err(doc, col, "out of memory");
        return;
    default:
        break;
    }
    if (!strncmp(e->text, "invalid token near '", 20)) {
        /* A token jansson could not read: name its first character, and say what a number
         * followed by more digits (a leading zero, "01") should have been followed by. */
        size_t pos = e->position > 0 ? (size_t)e->position : 0;
        size_t tok = strlen(e->text + 20) - (e->text[strlen(e->text) - 1] == '\'');
        size_t start = tok <= pos ? pos - tok : 0;
        unsigned char c = start < n ? (unsigned char)s[start] : 0;
        if (c == '0' && start + 1 < n && s[start + 1] >= '0' && s[start + 1] <= '9')
            set_err(doc, start + 2,
                    "expected ',' or the end of the container after '0' (a "
                    "number has no leading zeros)");
        else if (c >= 0x20 && c < 0x7f)
            set_err(doc, start + 1, "unexpected character '%c' (%s)", c, e->text);
        else
            set_err(doc, start + 1, "unexpected byte 0x%02x", c);
        return;
    }
    set_err(doc, col, "%s", e->text);
}

/* A cursor over input jansson accepted: the value boundaries are found without checks. */
typedef struct {
    const char *p, *end;
} cursor;

static void skip_ws(cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static void skip_string(cursor *c)
{
    c->p++; /* opening quote */
    while (c->p < c->end && *c->p != '"')
        c->p += *c->p == '\\' ? 2 : 1;
    if (c->p < c->end)
        c->p++;
}

static void skip_scalar(cursor *c)
{
    while (c->p < c->end && *c->p != ',' && *c->p != ']' && *c->p != '}' && *c->p != ' ' &&
           *c->p != '\t' && *c->p != '\n' && *c->p != '\r')
        c->p++;
}

static char *arena_strndup(te__arena *a, const char *s, size_t n)
{
    char *o = te__arena_alloc(a, n + 1);
    if (o) {
        memcpy(o, s, n);
        o[n] = '\0';
    }
    return o;
}

/* Converts jansson's value j, whose text starts at c->p (after white space), into a node of
 * doc; leaves c->p after the value. NULL when memory ran out. */
static te__json *convert(te__json_doc *doc, json_t *j, cursor *c)
{
    te__json *v = te__arena_alloc(&doc->arena, sizeof *v);
    if (!v)
        return NULL;
    memset(v, 0, sizeof *v);
    skip_ws(c);
    v->raw = c->p;
    te__json **tail = &v->first;
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        v->type = TE__JSON_OBJECT;
        c->p++; /* '{' */
        /* jansson keeps members in the order of the text, and duplicates were refused. */
        const char *key;
        json_t *m;
        json_object_foreach(j, key, m)
        {
            skip_ws(c);
            skip_string(c);
            skip_ws(c);
            c->p++; /* ':' */
            te__json *child = convert(doc, m, c);
            if (!child || !(child->key = arena_strndup(&doc->arena, key, strlen(key))))
                return NULL;
            *tail = child;
            tail = &child->next;
            skip_ws(c);
            if (c->p < c->end && *c->p == ',')
                c->p++;
        }
        skip_ws(c);
        c->p++; /* '}' */
        break;
    }
    case JSON_ARRAY: {
        v->type = TE__JSON_ARRAY;
        c->p++; /* '[' */
        size_t i;
        json_t *m;
        json_array_foreach(j, i, m)
        {
            te__json *child = convert(doc, m, c);
            if (!child)
                return NULL;
            *tail = child;
            tail = &child->next;
            skip_ws(c);
            if (c->p < c->end && *c->p == ',')
                c->p++;
        }
        skip_ws(c);
        c->p++; /* ']' */
        break;
    }
    case JSON_STRING:
        v->type = TE__JSON_STRING;
        if (!(v->str = arena_strndup(&doc->arena, json_string_value(j), json_string_length(j))))
            return NULL;
        skip_string(c);
        break;
    case JSON_INTEGER:
    case JSON_REAL: {
        /* From the text itself: jansson reads every number as a double (so that integers
         * beyond int64 are numbers, not errors), and the integer value must be exact. */
        v->type = TE__JSON_NUMBER;
        skip_scalar(c);
        size_t n = (size_t)(c->p - v->raw);
        char small[64], *text = n < sizeof small ? small : te__arena_alloc(&doc->arena, n + 1);
        if (!text)
            return NULL;
        memcpy(text, v->raw, n);
        text[n] = '\0';
        v->num = strtod(text, NULL);
        if (!strpbrk(text, ".eE")) {
            errno = 0;
            long long x = strtoll(text, NULL, 10);
            if (errno == 0) {
                v->is_int = 1;
                v->i = x;
            }
        }
        break;
    }
    case JSON_TRUE:
    case JSON_FALSE:
    case JSON_NULL:
        v->type = json_is_true(j)    ? TE__JSON_TRUE
                  : json_is_false(j) ? TE__JSON_FALSE
                                     : TE__JSON_NULL;
        skip_scalar(c);
        break;
    }
    if (c->p > c->end) /* cannot happen on input jansson accepted; never read past it */
        c->p = c->end;
    v->raw_len = (size_t)(c->p - v->raw);
    return v;
}

te__json *te__json_parse(te__json_doc *doc, const char *s, size_t n)
{
    doc->err[0] = '\0';
    if (!s)
        s = "";
    size_t deep = too_deep(s, n);
    if (deep) {
        set_err(doc, deep, "nesting deeper than %d levels", TE__JSON_MAX_DEPTH);
        return NULL;
    }
    json_error_t e;
    json_t *j =
        json_loadb(s, n, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, &e);
    if (!j) {
        translate_error(doc, &e, s, n);
        return NULL;
    }
    cursor c = {s, s + n};
    te__json *v = convert(doc, j, &c);
    json_decref(j);
    if (!v)
        set_err(doc, 1, "out of memory");
    return v;
}

void te__json_doc_free(te__json_doc *doc) { te__arena_free(&doc->arena); }

int te__json_valid(const char *s, size_t n)
{
    if (too_deep(s ? s : "", n))
        return 0;
    json_error_t e;
    json_t *j = json_loadb(s ? s : "", n,
                           JSON_DECODE_ANY | JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, &e);
    json_decref(j);
    return j != NULL;
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

size_t te__utf8_repair_into(const char *s, size_t n, char *out)
{
    char *o = out;
    for (size_t i = 0; i < n;) {
        size_t k = te__utf8_valid_prefix(s + i, n - i);
        memcpy(o, s + i, k);
        o += k;
        i += k;
        if (i < n) {
            memcpy(o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
        }
    }
    return (size_t)(o - out);
}

/* Dumps j (consumed) to f; jansson formats into memory first, so a failure writes nothing. */
static void dump(FILE *f, json_t *j, size_t flags)
{
    char *text = j ? json_dumps(j, flags | JSON_ENCODE_ANY) : NULL;
    json_decref(j);
    fputs(text ? text : "null", f);
    free(text);
}

void te__json_write_str(FILE *f, const char *s)
{
    if (!s) {
        fputs("null", f);
        return;
    }
    size_t n = strlen(s);
    if (te__utf8_valid_prefix(s, n) == n) {
        dump(f, json_stringn(s, n), 0);
        return;
    }
    /* Text that is not UTF-8 (a hand-edited database): every bad byte becomes U+FFFD. */
    char *fixed = malloc(3 * n + 1);
    if (!fixed) {
        fputs("null", f);
        return;
    }
    dump(f, json_stringn(fixed, te__utf8_repair_into(s, n, fixed)), 0);
    free(fixed);
}

void te__json_write_num(FILE *f, double x)
{
    if (!isfinite(x))
        fputs("null", f);
    else
        dump(f, json_real(x), JSON_REAL_PRECISION(17));
}

void te_db_json_write_str(FILE *f, const char *s) { te__json_write_str(f, s); }

void te_db_json_write_num(FILE *f, double x) { te__json_write_num(f, x); }

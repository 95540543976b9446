/* Private: the JSON reader (a DOM in an arena) and writer helpers for JSON lines export/import,
 * task lists and the CLI's --json output, over jansson (libjansson-dev).
 *
 * jansson parses, validates (RFC 8259, UTF-8 with no overlong forms, surrogates or code points
 * above U+10FFFF, no \u0000) and decodes; this layer adds what Tessera relies on and jansson
 * does not give: the source text of every value (raw/raw_len: a workload's shapes are stored as
 * written, byte for byte), exact int64 integers (is_int, i) next to the double, a nesting
 * limit of 64 levels checked before jansson recurses, and error messages in Tessera's words
 * ("column N: ..."). Member names must be unique within an object (jansson's
 * JSON_REJECT_DUPLICATES): an ambiguous line is refused rather than read one way. */
#ifndef TESSERA_TUNING_DB_JSON_H
#define TESSERA_TUNING_DB_JSON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tuning_db/db_impl.h"

typedef enum {
    TE__JSON_NULL,
    TE__JSON_FALSE,
    TE__JSON_TRUE,
    TE__JSON_NUMBER,
    TE__JSON_STRING,
    TE__JSON_ARRAY,
    TE__JSON_OBJECT
} te__json_type;

typedef struct te__json te__json;
struct te__json {
    te__json_type type;
    const char *raw; /* the value's text in the input */
    size_t raw_len;
    double num;      /* NUMBER */
    int is_int;      /* NUMBER written without fraction or exponent, fits int64 */
    int64_t i;       /* NUMBER when is_int */
    char *str;       /* STRING, decoded, NUL-terminated (an escaped NUL is rejected) */
    char *key;       /* member name when the parent is an OBJECT */
    te__json *first; /* ARRAY/OBJECT children, in order */
    te__json *next;
};

typedef struct {
    te__arena arena;
    char err[160]; /* "column N: ..." after a failed parse */
} te__json_doc;

/* Parses exactly one JSON value (surrounding white space allowed) from s[0..n). Returns the
 * root, owned by doc, or NULL with doc->err set. Nesting deeper than 64 levels is refused. */
te__json *te__json_parse(te__json_doc *doc, const char *s, size_t n);
/* Frees everything a parse allocated; doc can be reused. */
void te__json_doc_free(te__json_doc *doc);
/* 1 when s[0..n) is one valid JSON value. */
int te__json_valid(const char *s, size_t n);
/* The length of the longest prefix of s[0..n) that is well-formed UTF-8 (n when all of it is):
 * no overlong forms, surrogates or code points above U+10FFFF. (jansson checks the same
 * inside its parser but does not export the check; recording and repairing text need it.) */
size_t te__utf8_valid_prefix(const char *s, size_t n);
/* Copies s[0..n) to out (at least 3 n bytes) with every byte that is not part of a well-formed
 * UTF-8 sequence replaced by U+FFFD; returns the bytes written (no terminating NUL). */
size_t te__utf8_repair_into(const char *s, size_t n, char *out);
/* The first member named key of an OBJECT, or NULL. */
te__json *te__json_member(const te__json *obj, const char *key);

/* Writes s as a quoted JSON string ("null" for NULL); bytes that are not well-formed UTF-8 are
 * written as U+FFFD, so the output is always valid JSON. */
void te__json_write_str(FILE *f, const char *s);
/* Writes x so that it reads back bit for bit (17 significant digits), or null for NaN and
 * infinity. */
void te__json_write_num(FILE *f, double x);

#endif

/* The growing string every emitter and writer in Tessera builds its text in. */
#include <stdlib.h>
#include <string.h>

#include "te/internal.h"

void te__sb_putn(te__sb *b, const char *s, size_t n)
{
    if (b->oom || !s)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void te__sb_puts(te__sb *b, const char *s)
{
    if (s)
        te__sb_putn(b, s, strlen(s));
}

void te__sb_printf(te__sb *b, const char *fmt, ...)
{
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof tmp) {
        te__sb_putn(b, tmp, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->oom = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    te__sb_putn(b, big, (size_t)n);
    free(big);
}

void te__sb_free(te__sb *b)
{
    free(b->p);
    *b = (te__sb){0};
}

const char *te__sb_finish(te_ctx *ctx, te__sb *b)
{
    const char *r = b->oom ? NULL : te__strdup(ctx, b->p ? b->p : "");
    if (b->oom)
        te_ctx_set_error(ctx, TE_ERR_NOMEM, "out of memory building text");
    te__sb_free(b);
    return r;
}

void te__sb_comment(te__sb *b, const char *z)
{
    for (const char *p = z ? z : ""; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        te__sb_puts(b, n ? " * " : " *");
        for (size_t i = 0; i < n; i++) {
            if (p[i] == '*' && i + 1 < n && p[i + 1] == '/')
                te__sb_puts(b, "* "); /* never close the comment early */
            else
                te__sb_putn(b, p + i, 1);
        }
        te__sb_puts(b, "\n");
        p += n + (nl ? 1 : 0);
    }
}

void te__c_ident(const char *z, char *out, size_t n)
{
    size_t j = 0;
    if (!n)
        return;
    if (!z || !*z)
        z = "v";
    if (*z >= '0' && *z <= '9' && j + 1 < n)
        out[j++] = '_';
    for (; *z && j + 1 < n; z++) {
        char c = *z;
        bool ok =
            (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
        out[j++] = ok ? c : '_';
    }
    out[j] = 0;
}

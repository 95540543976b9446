/* The context: a chunked bump arena plus the sticky error message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "te/internal.h"

typedef struct chunk {
    struct chunk *next;
    size_t used, size;
    max_align_t data[];
} chunk;

#define TE__CTX_MAX_ANCESTORS 8

struct te_ctx {
    uint64_t id;
    int n_ancestors;
    uint64_t ancestors[TE__CTX_MAX_ANCESTORS]; /* ids whose objects this context may use */
    chunk *chunks;
    int next_id;
    int errcode;
    char errmsg[1024];
    void **cache; /* te__ctx_cache_slot: TE__CTX_CACHE_SLOTS entries, in the arena */
};

static uint64_t next_ctx_id(void)
{
    static uint64_t last;
    return __atomic_add_fetch(&last, 1, __ATOMIC_RELAXED);
}

te_ctx *te_ctx_create(void)
{
    te_ctx *c = calloc(1, sizeof(te_ctx));
    if (c)
        c->id = next_ctx_id();
    return c;
}

te_ctx *te_ctx_create_child(te_ctx *parent)
{
    if (!parent || parent->n_ancestors >= TE__CTX_MAX_ANCESTORS)
        return NULL;
    te_ctx *c = te_ctx_create();
    if (!c)
        return NULL;
    c->ancestors[0] = parent->id;
    memcpy(c->ancestors + 1, parent->ancestors, sizeof(uint64_t) * (size_t)parent->n_ancestors);
    c->n_ancestors = parent->n_ancestors + 1;
    return c;
}

uint64_t te__ctx_id(const te_ctx *ctx) { return ctx ? ctx->id : 0; }

void **te__ctx_cache_slot(te_ctx *ctx, int key)
{
    if (!ctx || key < 0 || key >= TE__CTX_CACHE_SLOTS)
        return NULL;
    if (!ctx->cache && !(ctx->cache = te__alloc(ctx, sizeof(void *) * TE__CTX_CACHE_SLOTS)))
        return NULL;
    return &ctx->cache[key];
}

bool te__ctx_may_use(const te_ctx *ctx, uint64_t owner)
{
    if (owner == ctx->id)
        return true;
    for (int i = 0; i < ctx->n_ancestors; i++)
        if (ctx->ancestors[i] == owner)
            return true;
    return false;
}

void te_ctx_free(te_ctx *ctx)
{
    if (!ctx)
        return;
    for (chunk *c = ctx->chunks, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    free(ctx);
}

const char *te_ctx_errmsg(const te_ctx *ctx) { return ctx ? ctx->errmsg : "no context"; }

int te_ctx_errcode(const te_ctx *ctx) { return ctx ? ctx->errcode : TE_ERR_ARG; }

void te_ctx_clear_error(te_ctx *ctx)
{
    if (!ctx)
        return;
    ctx->errcode = TE_OK;
    ctx->errmsg[0] = 0;
}

int te_ctx_set_error(te_ctx *ctx, int code, const char *fmt, ...)
{
    if (ctx && ctx->errcode == TE_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ctx->errmsg, sizeof ctx->errmsg, fmt, ap);
        va_end(ap);
        ctx->errcode = code;
    }
    return code;
}

void te__ctx_prefix_error(te_ctx *ctx, const char *prefix)
{
    if (!ctx || ctx->errcode == TE_OK || !prefix)
        return;
    char old[sizeof ctx->errmsg];
    memcpy(old, ctx->errmsg, sizeof old);
    snprintf(ctx->errmsg, sizeof ctx->errmsg, "%s%s", prefix, old);
}

void *te__alloc(te_ctx *ctx, size_t size)
{
    size = (size + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    chunk *c = ctx->chunks;
    if (!c || c->size - c->used < size) {
        size_t cap = size > 60000 ? size : 60000;
        c = malloc(sizeof(chunk) + cap);
        if (!c) {
            te_ctx_set_error(ctx, TE_ERR_NOMEM, "out of memory allocating %zu bytes", size);
            return NULL;
        }
        c->used = 0;
        c->size = cap;
        c->next = ctx->chunks;
        ctx->chunks = c;
    }
    void *p = (char *)c->data + c->used;
    c->used += size;
    memset(p, 0, size);
    return p;
}

char *te__strdup(te_ctx *ctx, const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *p = te__alloc(ctx, n);
    if (p)
        memcpy(p, s, n);
    return p;
}

char *te__sprintf(te_ctx *ctx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *p = te__alloc(ctx, (size_t)n + 1);
    if (!p)
        return NULL;
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return p;
}

int te__next_id(te_ctx *ctx) { return ++ctx->next_id; }

int te__vec_push(te_ctx *ctx, te__vec *vec, void *p)
{
    if (vec->n == vec->cap) {
        int cap = vec->cap ? vec->cap * 2 : 8;
        void **v = te__alloc(ctx, sizeof(void *) * (size_t)cap);
        if (!v)
            return TE_ERR_NOMEM;
        if (vec->n)
            memcpy(v, vec->v, sizeof(void *) * (size_t)vec->n);
        vec->v = v;
        vec->cap = cap;
    }
    vec->v[vec->n++] = p;
    return TE_OK;
}

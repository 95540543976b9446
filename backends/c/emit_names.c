/*
 * backends/c/emit_names.c: the C emitter's names: kernel identifiers, a unique C name for every
 * buffer and variable of a function (valid, never reserved, never taken twice), and the
 * emitter's error helper.
 */
#include <stdio.h>
#include <string.h>

#include "backends/c/emit_impl.h"

void te__c_fail(emitter *em, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    te__emit_vfail(em->ctx, &em->err, "te_emit_c", em->f->name, code, fmt, ap);
    va_end(ap);
}

static bool is_reserved(const char *z) { return te__emit_reserved(z, TE__LANG_C); }

char *te__c_kernel_ident(const char *name, char *buf, size_t n)
{
    return te__emit_kernel_ident(name, TE__LANG_C, buf, n);
}

bool te__c_name_used(const emitter *em, const char *z)
{
    for (int i = 0; i < em->nused; i++)
        if (strcmp(em->used[i], z) == 0)
            return true;
    return false;
}

const char *te__c_take_name(emitter *em, const char *z)
{
    const char *p = te__strdup(em->ctx, z);
    if (!p) {
        te__c_fail(em, TE_ERR_NOMEM, "out of memory");
        return "oom";
    }
    if (em->nused == em->capused) {
        int cap = em->capused ? em->capused * 2 : 64;
        const char **v = te__alloc(em->ctx, sizeof(char *) * (size_t)cap);
        if (!v) {
            te__c_fail(em, TE_ERR_NOMEM, "out of memory");
            return p;
        }
        if (em->nused)
            memcpy(v, em->used, sizeof(char *) * (size_t)em->nused);
        em->used = v;
        em->capused = cap;
    }
    em->used[em->nused++] = p;
    return p;
}

const char *te__c_unique_name(emitter *em, const char *base, int id)
{
    char z[160], cand[224];
    te__c_ident(base, z, sizeof z);
    if (!is_reserved(z) && !te__c_name_used(em, z))
        return te__c_take_name(em, z);
    if (is_reserved(z) && strncmp(z, "te_", 3) == 0) {
        /* the te_ namespace belongs to the prelude: move out of it */
        snprintf(cand, sizeof cand, "v_%s", z);
        if (!te__c_name_used(em, cand))
            return te__c_take_name(em, cand);
        memmove(z + 2, z, sizeof z - 3);
        z[0] = 'v', z[1] = '_', z[sizeof z - 1] = 0;
    }
    snprintf(cand, sizeof cand, "%s_%d", z, id);
    for (int k = 2; te__c_name_used(em, cand) || is_reserved(cand); k++)
        snprintf(cand, sizeof cand, "%s_%d_%d", z, id, k);
    return te__c_take_name(em, cand);
}

const char *te__c_lookup_name(emitter *em, int kind, int id, const void *ptr, const char *base)
{
    const char *z = te__names_find(&em->names, kind, kind == 0, id, ptr);
    if (z)
        return z;
    z = te__c_unique_name(em, base, id);
    if (te__names_add(em->ctx, &em->names, kind, id, ptr, z) != TE_OK) {
        te__c_fail(em, TE_ERR_NOMEM, "out of memory");
        return "oom";
    }
    return z;
}

const char *te__c_var_name(emitter *em, const te_expr *v)
{
    return te__c_lookup_name(em, 0, v->u.var.id, NULL, v->u.var.name);
}

const char *te__c_buf_name(emitter *em, const te_buf *b)
{
    return te__c_lookup_name(em, 1, b->id, b, b->name);
}

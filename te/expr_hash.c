/* The structural hash of a tensor expression: every computed stage the outputs depend on (its
 * name, kind, dtype, shape, axes and body, constants bit for bit, custom reducers in full) and
 * the outputs' names. The tuner's workload keys of user expressions (te_tuner_expr_hash) and of
 * registered operators (te_op_workload_key) both use it. */
#include <string.h>

#include "te/internal.h"
#include "tessera/ops.h"

int te__collect_stages(int n_out, te_tensor *const *outs, te_tensor **st, int cap)
{
    int n = 0;
    for (int o = 0; o < n_out; o++) {
        te_tensor *tmp[256];
        int k = te_op_stages(outs[o], tmp, 256);
        if (k > 256)
            k = 256;
        for (int i = 0; i < k; i++) {
            int dup = 0;
            for (int j = 0; j < n && !dup; j++)
                dup = st[j] == tmp[i];
            if (!dup && n < cap)
                st[n++] = tmp[i];
        }
    }
    return n;
}

/* 64-bit FNV-1a, as backends/backend.c's te__hash_bytes (the same values). */
static uint64_t h_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *z = p;
    for (size_t i = 0; i < n; i++) {
        h ^= z[i];
        h *= 0x100000001b3ull;
    }
    return h;
}
static uint64_t h_str(uint64_t h, const char *s)
{
    return h_bytes(h, s ? s : "", s ? strlen(s) + 1 : 1);
}
static uint64_t h_i64(uint64_t h, int64_t v) { return h_bytes(h, &v, sizeof v); }

static uint64_t hash_expr(uint64_t h, const te_expr *e)
{
    if (!e)
        return h_i64(h, -1);
    h = h_i64(h, e->kind);
    h = h_i64(h, e->dtype);
    switch (e->kind) {
    case TE_E_INT:
        return h_i64(h, e->u.i);
    case TE_E_FLOAT:
        return h_bytes(h, &e->u.f, sizeof e->u.f);
    case TE_E_VAR:
        h = h_str(h, e->u.var.name);
        h = h_i64(h, e->u.var.extent);
        return h_i64(h, e->u.var.vkind);
    case TE_E_BINARY:
        h = h_i64(h, e->u.bin.op);
        return hash_expr(hash_expr(h, e->u.bin.a), e->u.bin.b);
    case TE_E_NOT:
    case TE_E_NEG:
    case TE_E_CAST:
    case TE_E_BCAST:
        return hash_expr(h, e->u.un.a);
    case TE_E_SELECT:
    case TE_E_IF:
        return hash_expr(hash_expr(hash_expr(h, e->u.sel.c), e->u.sel.t), e->u.sel.f);
    case TE_E_CALL:
        h = h_i64(h, e->u.call.fn);
        for (int i = 0; i < e->u.call.n; i++)
            h = hash_expr(h, e->u.call.args[i]);
        return h;
    case TE_E_READ:
        h = h_str(h, e->u.read.t->name);
        for (int i = 0; i < e->u.read.n; i++)
            h = hash_expr(h, e->u.read.idx[i]);
        return h;
    case TE_E_REDUCE:
        h = h_i64(h, e->u.red.rkind);
        if (e->u.red.custom) {
            const te_reducer *r = e->u.red.custom;
            if (r->tuple) /* every component's combine and identity, not only the first */
                for (int c = 0; c < r->n; c++) {
                    h = hash_expr(h, r->combines[c]);
                    h = hash_expr(h, r->identities[c]);
                }
            else {
                h = hash_expr(h, r->combine);
                h = hash_expr(h, r->identity);
            }
        }
        for (int i = 0; i < e->u.red.n; i++)
            h = hash_expr(h, e->u.red.axes[i]);
        if (e->u.red.nsrc > 0) { /* tuple: the component and every source */
            h = h_i64(h, e->u.red.comp);
            for (int c = 0; c < e->u.red.nsrc; c++)
                h = hash_expr(h, e->u.red.srcs[c]);
            return h;
        }
        return hash_expr(h, e->u.red.src);
    default:
        return h;
    }
}

uint64_t te__tensor_sig_hash(uint64_t h, const te_tensor *t)
{
    h = h_str(h, t->name);
    h = h_i64(h, t->kind);
    h = h_i64(h, t->dtype);
    h = h_i64(h, t->ndim);
    for (int d = 0; d < t->ndim; d++)
        h = h_i64(h, t->shape[d]);
    return h;
}

uint64_t te__expr_hash(int n_out, te_tensor *const *outs)
{
    te_tensor *st[256];
    int n = te__collect_stages(n_out, outs, st, 256);
    uint64_t h = 0xcbf29ce484222325ull; /* FNV offset basis */
    for (int i = 0; i < n; i++) {
        h = te__tensor_sig_hash(h, st[i]);
        for (int d = 0; d < st[i]->ndim; d++)
            h = hash_expr(h, st[i]->axes[d]);
        h = hash_expr(h, st[i]->body);
    }
    for (int o = 0; o < n_out; o++)
        h = h_str(h, outs[o]->name);
    return h;
}

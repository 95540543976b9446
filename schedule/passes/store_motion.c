/*
 * The store_motion pass: an element a loop reads and writes at an address the loop does not
 * move lives in a register for the whole loop.
 *
 *     for (k_i, 0, 32) {                          allocate C_acc[f32 x 32], local
 *       C[a] = C[a] + X[..] * W[..]                C_acc[0:16] = C[a]
 *       C[a + 2816] = C[a + 2816] + ...     ->     C_acc[16:32] = C[a + 2816]
 *     }                                            for (k_i, 0, 32) {
 *                                                    C_acc[0:16] = C_acc[0:16] + X[..] * W[..]
 *                                                    ...
 *                                                  }
 *                                                  C[a] = C_acc[0:16]
 *                                                  C[a + 2816] = C_acc[16:32]
 *
 * gcc does this itself (store motion), clang does not: a matmul tile accumulating in its
 * output ran 3x slower compiled by clang. With the accumulators in a local buffer with constant
 * indices, promote_registers makes them variables and any C compiler keeps them in registers.
 *
 * Conditions, per buffer, for a serial loop of a constant extent >= 1: every access of the
 * buffer inside the loop is a load or store directly in the loop's body (not inside an if, a
 * branch of an if_then_else or a nested loop, which the pass visits first), at an index that reads
 * no memory and that the loop does not move; the indices are pairwise equal or provably disjoint
 * (their difference is a constant at least the access width), of one width; one element is both
 * read and written; no tensor intrinsic in the loop takes the buffer; no store is a streaming one.
 * Distinct buffers never overlap (kernel arguments are restrict), so only the buffer's own accesses
 * matter. At most TE__STORE_MOTION_MAX_REGS vector registers' worth of elements per loop.
 */
#include <stdio.h>
#include <string.h>

#include "schedule/passes.h"
#include "te/arith.h"

#define MAX_SLOTS 64

/* One distinct element (or vector of elements) of a candidate buffer. */
typedef struct slot {
    te_expr *idx; /* the flat index (a ramp for a vector access) */
    bool loaded, stored;
} slot;

typedef struct cand {
    te_buf *buf;
    int lanes;
    bool bad;
    int nslot;
    slot s[MAX_SLOTS];
} cand;

typedef struct sm {
    te_ctx *ctx;
    const te_stmt *loop;
    cand *c;
    int n, cap;
    bool oom;
} sm;

static cand *cand_of(sm *m, te_buf *b)
{
    for (int i = 0; i < m->n; i++)
        if (m->c[i].buf == b)
            return &m->c[i];
    if (m->n == m->cap) {
        int nc = m->cap ? m->cap * 2 : 8;
        cand *q = te__alloc(m->ctx, sizeof *q * (size_t)nc);
        if (!q) {
            m->oom = true;
            return NULL;
        }
        if (m->c)
            memcpy(q, m->c, sizeof *q * (size_t)m->n);
        m->c = q;
        m->cap = nc;
    }
    cand *c = &m->c[m->n++];
    memset(c, 0, sizeof *c);
    c->buf = b;
    return c;
}

/* The base of an index and the number of elements the access covers. */
static te_expr *base_of(te_expr *idx, int *lanes)
{
    if (idx->kind == TE_E_RAMP) {
        *lanes = idx->lanes;
        return idx->u.ramp.stride == 1 ? idx->u.ramp.base : NULL;
    }
    *lanes = 1;
    return idx->lanes == 1 ? idx : NULL;
}

/* Whether two accesses are at provably distinct elements (bases a constant >= lanes apart). */
static bool disjoint(sm *m, te_expr *a, te_expr *b, int lanes)
{
    te_expr *d = te_sub(m->ctx, a, b);
    d = d ? te__simplify_expr(m->ctx, d, NULL) : NULL;
    int64_t c;
    if (!d) {
        m->oom = true;
        return false;
    }
    return te__is_const_int(d, &c) && (c >= lanes || c <= -lanes);
}

/* Records an access of b at idx; marks b unusable when the access does not qualify. */
static void note(sm *m, te_buf *b, int n, te_expr *const *idx, bool store, bool direct)
{
    cand *c = cand_of(m, b);
    if (!c || c->bad)
        return;
    int lanes = 0;
    te_expr *base = n == 1 ? base_of(idx[0], &lanes) : NULL;
    if (!direct || !base || te__expr_has_load(idx[0]) ||
        te__expr_uses_var(idx[0], m->loop->u.loop.var) || (c->lanes && c->lanes != lanes)) {
        c->bad = true;
        return;
    }
    c->lanes = lanes;
    for (int i = 0; i < c->nslot; i++) {
        if (te__expr_equal(c->s[i].idx, idx[0])) {
            c->s[i].loaded |= !store;
            c->s[i].stored |= store;
            return;
        }
        int l2;
        if (!disjoint(m, base, base_of(c->s[i].idx, &l2), lanes)) {
            c->bad = true;
            return;
        }
    }
    if (c->nslot == MAX_SLOTS) {
        c->bad = true;
        return;
    }
    c->s[c->nslot++] = (slot){idx[0], !store, store};
}

typedef struct load_visit {
    sm *m;
    bool direct;
} load_visit;

static bool visit_load(const te_expr *e, void *user)
{
    load_visit *lv = user;
    if (e->kind == TE_E_LOAD)
        note(lv->m, e->u.load.buf, e->u.load.n, e->u.load.idx, false, lv->direct);
    if (e->kind == TE_E_IF) {
        /* only the taken branch is evaluated: its reads are conditional, and loading them
         * before the loop could read outside the buffer */
        load_visit branch = {lv->m, false};
        te__expr_visit(e->u.sel.c, visit_load, lv);
        te__expr_visit(e->u.sel.t, visit_load, &branch);
        te__expr_visit(e->u.sel.f, visit_load, &branch);
        return false;
    }
    return true;
}

/* Every access in s; `direct`: s runs once per iteration of the loop, unconditionally. */
static void scan(sm *m, const te_stmt *s, bool direct)
{
    if (!s || m->oom)
        return;
    load_visit lv = {m, direct};
    switch (s->kind) {
    case TE_S_SEQ:
        for (int i = 0; i < s->u.seq.n; i++)
            scan(m, s->u.seq.v[i], direct);
        break;
    case TE_S_STORE:
        for (int i = 0; i < s->u.store.n; i++)
            te__expr_visit(s->u.store.idx[i], visit_load, &lv);
        te__expr_visit(s->u.store.value, visit_load, &lv);
        note(m, s->u.store.buf, s->u.store.n, s->u.store.idx, true,
             direct && !s->u.store.nontemporal);
        break;
    case TE_S_FOR:
        te__expr_visit(s->u.loop.extent, visit_load, &lv);
        scan(m, s->u.loop.body, false);
        break;
    case TE_S_IF:
        te__expr_visit(s->u.cond.cond, visit_load, &lv);
        scan(m, s->u.cond.then_s, false);
        scan(m, s->u.cond.else_s, false);
        break;
    case TE_S_LET:
        /* a let inside the loop may bind what an index uses: its accesses stay */
        te__expr_visit(s->u.let.value, visit_load, &lv);
        scan(m, s->u.let.body, false);
        break;
    case TE_S_ALLOC: {
        /* a buffer allocated inside the loop does not outlive an iteration */
        cand *c = cand_of(m, s->u.alloc.buf);
        if (c)
            c->bad = true;
        scan(m, s->u.alloc.body, direct);
        break;
    }
    case TE_S_INTRIN:
        for (int o = 0; o < s->u.intrin.nops; o++)
            if (s->u.intrin.addr[o]->kind == TE_E_LOAD) {
                cand *c = cand_of(m, s->u.intrin.addr[o]->u.load.buf);
                if (c)
                    c->bad = true;
            }
        break;
    default:
        break;
    }
}

/* What a promoted buffer's accesses become: the slot's part of the local buffer. */
typedef struct repl {
    cand *c; /* the promoted buffers, c[0 .. nc) */
    int nc;
    te_buf *acc;
} repl;

static te_expr *slot_index(te_ctx *ctx, int k, int lanes)
{
    te_expr *at = te_int(ctx, (int64_t)k * lanes);
    return lanes > 1 && at ? te__ramp(ctx, at, 1, lanes) : at;
}

/* The index into acc of access b[idx]: *at stays NULL when b is not promoted. false when out
 * of memory (or for an access of a promoted buffer that is no slot, which the scan rules out). */
static bool acc_index(te_ctx *ctx, const repl *r, const te_buf *b, const te_expr *idx, te_expr **at)
{
    *at = NULL;
    for (int ci = 0, k = 0; ci < r->nc; k += r->c[ci].nslot, ci++) {
        if (r->c[ci].buf != b)
            continue;
        for (int i = 0; i < r->c[ci].nslot; i++)
            if (te__expr_equal(r->c[ci].s[i].idx, idx))
                return (*at = slot_index(ctx, k + i, r->c[ci].lanes)) != NULL;
        return false; /* every access was recorded as a slot */
    }
    return true;
}

static te_expr *repl_expr(te_ctx *ctx, te_expr *e, void *user)
{
    te_expr *at;
    if (e->kind != TE_E_LOAD || !acc_index(ctx, user, e->u.load.buf, e->u.load.idx[0], &at))
        return e->kind == TE_E_LOAD ? NULL : e;
    return at ? te__load(ctx, ((repl *)user)->acc, 1, &at) : e;
}

static te_stmt *repl_stmt(te_ctx *ctx, te_stmt *s, void *user)
{
    te_expr *at;
    if (s->kind != TE_S_STORE || !acc_index(ctx, user, s->u.store.buf, s->u.store.idx[0], &at))
        return s->kind == TE_S_STORE ? NULL : s;
    return at ? te__store(ctx, ((repl *)user)->acc, 1, &at, s->u.store.value) : s;
}

static te_stmt *motion(te_ctx *ctx, te_stmt *s, void *user)
{
    (void)user;
    int64_t ext;
    if (s->kind != TE_S_FOR || s->u.loop.fkind != TE_FOR_SERIAL || s->u.loop.xreduce ||
        !te__is_const_int(s->u.loop.extent, &ext) || ext < 1)
        return s;
    sm m = {ctx, s, NULL, 0, 0, false};
    scan(&m, s->u.loop.body, true);
    if (m.oom)
        return NULL;
    /* The candidates kept: read and written somewhere, within the register budget. */
    repl r = {m.c, 0, NULL};
    int regs = 0, elems = 0;
    te_dtype dt = TE_F32;
    for (int i = 0; i < m.n; i++) {
        cand *c = &m.c[i];
        bool rw = false;
        for (int j = 0; j < c->nslot && !c->bad; j++)
            rw |= c->s[j].loaded && c->s[j].stored;
        int64_t bytes = (int64_t)c->lanes * (int64_t)te_dtype_size(c->buf->dtype);
        int per = bytes > 64 ? (int)((bytes + 63) / 64) : 1; /* 512-bit registers a slot takes */
        if (c->bad || !rw || c->buf->dtype == TE_BOOL || (r.nc && c->buf->dtype != dt) ||
            regs + c->nslot * per > TE__STORE_MOTION_MAX_REGS ||
            elems + c->nslot * c->lanes > TE__PROMOTE_MAX)
            continue;
        dt = c->buf->dtype;
        regs += c->nslot * per;
        elems += c->nslot * c->lanes;
        m.c[r.nc++] = *c;
    }
    if (!r.nc)
        return s;
    char name[96];
    snprintf(name, sizeof name, "%s_acc", r.c[0].buf->name);
    if (!(r.acc = te__buf_new(ctx, name, dt, 1, (int64_t[]){elems}, TE_SCOPE_LOCAL)))
        return NULL;
    te_stmt *loop = te__stmt_mutate(ctx, s, repl_stmt, repl_expr, &r);
    if (!loop)
        return NULL;
    te_stmt *pre = NULL, *post = NULL;
    for (int ci = 0, k = 0; ci < r.nc; ci++)
        for (int j = 0; j < r.c[ci].nslot; j++, k++) {
            cand *c = &r.c[ci];
            te_expr *at = slot_index(ctx, k, c->lanes), *orig = c->s[j].idx;
            te_expr *in = at ? te__load(ctx, c->buf, 1, &orig) : NULL;
            te_expr *out = at ? te__load(ctx, r.acc, 1, &at) : NULL;
            te_stmt *ld = in ? te__store(ctx, r.acc, 1, &at, in) : NULL;
            te_stmt *st = out ? te__store(ctx, c->buf, 1, &orig, out) : NULL;
            if (!ld || !st)
                return NULL;
            /* loaded before only if the loop reads it, stored after only if it writes it */
            if (c->s[j].loaded)
                pre = te__seq2(ctx, pre, ld);
            if (c->s[j].stored)
                post = te__seq2(ctx, post, st);
        }
    te_stmt *body = te__seq2(ctx, te__seq2(ctx, pre, loop), post);
    return body ? te__alloc_stmt(ctx, r.acc, body) : NULL;
}

te_stmt *te__pass_store_motion(const te__pass_ctx *pc, te_stmt *s)
{
    te_ctx *ctx = pc->ctx;
    if (!ctx || !s)
        return NULL;
    te_stmt *r = te__stmt_mutate(ctx, s, motion, NULL, NULL);
    if (!r) {
        if (te_ctx_errcode(ctx) == TE_OK)
            te_ctx_set_error(ctx, TE_ERR_NOMEM, "store_motion: out of memory");
        return NULL;
    }
    return r;
}

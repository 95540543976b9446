/*
 * Search spaces: creation, the decision engine shared by templates and sketches, sampling,
 * grid enumeration, mutation and instantiation (see autotune/space_impl.h for the model).
 *
 * Every configuration is generated on a schedule built in a scratch context that is freed
 * before the call returns, so sampling millions of configurations does not grow the space's
 * context: only the traces (and their decision vectors) are kept there.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autotune/space_impl.h"
#include "tessera/ops.h"

/* ---- Random stream ---------------------------------------------------------------------- */

void te_rng_seed(te_rng *r, uint64_t seed)
{
    if (r)
        r->s = seed * 0x9E3779B97F4A7C15ull + 1;
}

uint64_t te_rng_next(te_rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int64_t rng_int(te_rng *r, int64_t n)
{
    return n <= 1 ? 0 : (int64_t)(te_rng_next(r) % (uint64_t)n);
}

/* ---- Helpers ---------------------------------------------------------------------------- */

int te__lanes(const te_space *sp, te_dtype dt)
{
    size_t sz = te_dtype_size(dt);
    int bits = sp->target.vector_bits > 0 ? sp->target.vector_bits : 256;
    int l = sz ? (int)((size_t)bits / (8 * sz)) : 1;
    return l > 0 ? l : 1;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int te__split_candidates(int64_t extent, int lanes, int64_t *out, int cap)
{
    int64_t tmp[256];
    int n = 0;
    if (extent < 1)
        extent = 1;
    for (int64_t d = 1; d * d <= extent && n < 200; d++)
        if (extent % d == 0) {
            tmp[n++] = d;
            if (d != extent / d)
                tmp[n++] = extent / d;
        }
    for (int64_t p = 2; p < extent && n < 230; p *= 2)
        tmp[n++] = p;
    for (int64_t m = 1; m <= 4 && lanes > 1 && lanes * m < extent && n < 250; m++)
        tmp[n++] = lanes * m;
    qsort(tmp, (size_t)n, sizeof tmp[0], cmp_i64);
    int k = 0;
    for (int i = 0; i < n; i++)
        if (k == 0 || tmp[k - 1] != tmp[i])
            tmp[k++] = tmp[i];
    if (k <= cap) {
        memcpy(out, tmp, sizeof(int64_t) * (size_t)k);
        return k;
    }
    /* Too many: keep the smallest ones (tiles) and a spread of the rest, and the extent. */
    int keep = cap / 2;
    memcpy(out, tmp, sizeof(int64_t) * (size_t)keep);
    for (int i = keep; i < cap; i++)
        out[i] = tmp[keep + (int64_t)(i - keep) * (k - 1 - keep) /
                                (cap - 1 - keep > 0 ? cap - 1 - keep : 1)];
    out[cap - 1] = tmp[k - 1];
    return cap;
}

/* ---- Decisions -------------------------------------------------------------------------- */

int te__gen_fail(te__gen *g, int rc)
{
    if (rc != TE_OK && g->err == TE_OK)
        g->err = rc;
    return rc;
}

int te__gen_lowers(te__gen *g)
{
    te_space *sp = g->sp;
    te_tensor *args[32];
    int na = 0;
    for (int i = 0; i < sp->n_in && na < 32; i++)
        args[na++] = sp->ins[i];
    for (int i = 0; i < sp->n_out && na < 32; i++)
        args[na++] = sp->outs[i];
    if (!te_lower(g->s, na, args, "cand", &sp->target))
        return te__gen_fail(g, te_ctx_errcode(g->ctx) ? te_ctx_errcode(g->ctx) : TE_ERR_SCHEDULE);
    return TE_OK;
}

te_stage *te__split_rfactor(te__gen *g, te_stage *st, int64_t factor, bool outer)
{
    te_iter *ko, *ki;
    if (!TE__OK(g, te_split(st, te_stage_reduce_axis(st, 0), factor, &ko, &ki)))
        return NULL;
    te_tensor *R = te_rfactor(g->s, te_stage_tensor(st), outer ? ko : ki);
    if (!R) {
        te__gen_fail(g, TE_ERR_SCHEDULE);
        return NULL;
    }
    return te_schedule_stage(g->s, R);
}

int te__decide(te__gen *g, int ncand)
{
    if (ncand <= 1)
        return 0;
    if (g->n >= TE__MAX_DEC)
        return 0;
    int v;
    if (g->n < g->nrec)
        v = g->dec[g->n] < 0 ? 0 : g->dec[g->n] >= ncand ? ncand - 1 : g->dec[g->n];
    else
        v = g->rng ? (int)rng_int(g->rng, ncand) : 0;
    g->dec[g->n] = v;
    g->card[g->n] = ncand;
    g->n++;
    return v;
}

int64_t te__knob_val(te__gen *g, int k)
{
    const te__knob *kn = &g->sp->knobs[k];
    int i = g->dec[k];
    return kn->v[i < 0 ? 0 : i >= kn->n ? kn->n - 1 : i];
}

/* ---- Memo: trace -> decisions ----------------------------------------------------------- */

static uint64_t hash_str(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

static te__memo_ent *memo_find(te_space *sp, const char *trace)
{
    if (!sp->memo_cap)
        return NULL;
    uint64_t h = hash_str(trace);
    for (int i = (int)(h % (uint64_t)sp->memo_cap);; i = (i + 1) % sp->memo_cap) {
        te__memo_ent *e = &sp->memo[i];
        if (!e->trace)
            return NULL;
        if (e->h == h && !strcmp(e->trace, trace))
            return e;
    }
}

/* Remembers (trace, decisions); returns the arena copy of the trace or NULL. */
static const char *memo_put(te_space *sp, const char *trace, const te__gen *g)
{
    te__memo_ent *e = memo_find(sp, trace);
    if (e)
        return e->trace;
    if ((sp->memo_n + 1) * 2 > sp->memo_cap) {
        int cap = sp->memo_cap ? sp->memo_cap * 2 : 256;
        te__memo_ent *m = te__alloc(sp->ctx, sizeof *m * (size_t)cap);
        if (!m)
            return NULL;
        for (int i = 0; i < sp->memo_cap; i++) {
            te__memo_ent *o = &sp->memo[i];
            if (!o->trace)
                continue;
            int j = (int)(o->h % (uint64_t)cap);
            while (m[j].trace)
                j = (j + 1) % cap;
            m[j] = *o;
        }
        sp->memo = m;
        sp->memo_cap = cap;
    }
    char *t = te__strdup(sp->ctx, trace);
    int32_t *d = te__alloc(sp->ctx, sizeof(int32_t) * (size_t)(2 * g->n + 1));
    if (!t || !d)
        return NULL;
    memcpy(d, g->dec, sizeof(int32_t) * (size_t)g->n);
    memcpy(d + g->n, g->card, sizeof(int32_t) * (size_t)g->n);
    uint64_t h = hash_str(t);
    int j = (int)(h % (uint64_t)sp->memo_cap);
    while (sp->memo[j].trace)
        j = (j + 1) % sp->memo_cap;
    sp->memo[j] = (te__memo_ent){h, t, g->n, d};
    sp->memo_n++;
    return t;
}

/* ---- Generation ------------------------------------------------------------------------- */

/* Copies the scratch context's error onto the space's context. */
static void carry_error(te_space *sp, te_ctx *scratch, int rc, const char *what)
{
    const char *m = scratch ? te_ctx_errmsg(scratch) : "";
    te_ctx_set_error(sp->ctx, rc ? rc : TE_ERR_INTERNAL, "%s: %s", what,
                     m && *m ? m : te_status_str(rc ? rc : TE_ERR_INTERNAL));
}

/* Generates one configuration: decisions dec[0..ndec) are replayed, later ones drawn from rng
 * (or 0). For templates the knob indices must all be given or rng set. Returns the arena
 * trace, or NULL with *rc set (the message stays on `scratch_err` for the caller). */
static const char *generate(te_space *sp, const int32_t *dec, int ndec, te_rng *rng, int *rc_out,
                            char *errbuf, size_t errsz)
{
    te_ctx *scratch = te_ctx_create_child(sp->ctx);
    if (!scratch) {
        *rc_out = TE_ERR_NOMEM;
        snprintf(errbuf, errsz, "out of memory");
        return NULL;
    }
    te__gen *g = calloc(1, sizeof *g);
    const char *out = NULL;
    int rc = TE_OK;
    if (!g) {
        rc = TE_ERR_NOMEM;
        goto done;
    }
    g->sp = sp;
    g->ctx = scratch;
    g->rng = rng;
    g->s = te_schedule_create(scratch, sp->n_out, sp->outs);
    if (!g->s) {
        rc = te_ctx_errcode(scratch) ? te_ctx_errcode(scratch) : TE_ERR_INTERNAL;
        goto done;
    }
    if (ndec > TE__MAX_DEC)
        ndec = TE__MAX_DEC;
    if (dec && ndec > 0)
        memcpy(g->dec, dec, sizeof(int32_t) * (size_t)ndec);
    g->nrec = dec ? ndec : 0;
    if (sp->tmpl) {
        for (int k = 0; k < sp->nknobs; k++) {
            if (k >= g->nrec)
                g->dec[k] = rng ? (int32_t)rng_int(rng, sp->knobs[k].n) : 0;
            if (g->dec[k] < 0 || g->dec[k] >= sp->knobs[k].n)
                g->dec[k] = 0;
            g->card[k] = sp->knobs[k].n;
        }
        g->n = sp->nknobs;
        rc = sp->tmpl->apply(g);
    } else {
        rc = te__sketch_apply(g);
    }
    if (!rc)
        rc = g->err;
    if (rc)
        goto done;
    out = memo_put(sp, te_schedule_trace(g->s), g);
    if (!out)
        rc = TE_ERR_NOMEM;
done:
    if (rc && errbuf)
        snprintf(errbuf, errsz, "%s",
                 te_ctx_errmsg(scratch)[0] ? te_ctx_errmsg(scratch) : te_status_str(rc));
    *rc_out = rc;
    free(g);
    te_ctx_free(scratch);
    return out;
}

/* ---- Public API ------------------------------------------------------------------------- */

te_space *te_space_create(te_ctx *ctx, const char *op, int n_in, te_tensor *const *ins, int n_out,
                          te_tensor *const *outs, te_space_kind kind, const te_target *target)
{
    if (!ctx)
        return NULL;
    if (n_out <= 0 || !outs || n_in < 0 || (n_in > 0 && !ins)) {
        te_ctx_set_error(ctx, TE_ERR_ARG,
                         "te_space_create: needs at least one output and the "
                         "input list");
        return NULL;
    }
    if ((unsigned)kind > TE_SPACE_SKETCH) {
        te_ctx_set_error(ctx, TE_ERR_ARG, "te_space_create: invalid kind %d", (int)kind);
        return NULL;
    }
    for (int i = 0; i < n_out; i++)
        if (!outs[i] || te_tensor_is_placeholder(outs[i])) {
            te_ctx_set_error(ctx, TE_ERR_ARG, "te_space_create: output %d is %s", i,
                             outs[i] ? "a placeholder" : "NULL");
            return NULL;
        }
    for (int i = 0; i < n_in; i++)
        if (!ins[i]) {
            te_ctx_set_error(ctx, TE_ERR_ARG, "te_space_create: input %d is NULL", i);
            return NULL;
        }
    te_space *sp = te__alloc(ctx, sizeof *sp);
    if (!sp)
        return NULL;
    sp->ctx = ctx;
    sp->op = op ? te__strdup(ctx, op) : NULL;
    sp->n_in = n_in;
    sp->n_out = n_out;
    sp->ins = te__alloc(ctx, sizeof(te_tensor *) * (size_t)(n_in + 1));
    sp->outs = te__alloc(ctx, sizeof(te_tensor *) * (size_t)n_out);
    if (!sp->ins || !sp->outs || (op && !sp->op))
        return NULL;
    if (n_in)
        memcpy(sp->ins, ins, sizeof(te_tensor *) * (size_t)n_in);
    memcpy(sp->outs, outs, sizeof(te_tensor *) * (size_t)n_out);
    sp->target = target ? *target : te_target_host();
    sp->lanes = te__lanes(sp, te_tensor_dtype(outs[0]));
    /* The expression must be schedulable at all. */
    te_ctx *scratch = te_ctx_create_child(ctx);
    if (!scratch || !te_schedule_create(scratch, n_out, outs)) {
        carry_error(sp, scratch, scratch ? te_ctx_errcode(scratch) : TE_ERR_NOMEM,
                    "te_space_create");
        te_ctx_free(scratch);
        return NULL;
    }
    te_ctx_free(scratch);
    if (kind != TE_SPACE_SKETCH && op) {
        /* a CUDA target takes the operator's GPU template where it has one */
        bool cuda = sp->target.backend == TE_BACKEND_CUDA;
        const te__template *t = cuda ? te__cuda_template_for(op) : NULL;
        if (!t)
            t = te__template_for(op);
        if (t && cuda && !t->cuda)
            t = NULL; /* a C target's template: the GPU sketches instead */
        if (t) {
            sp->tmpl = t;
            int rc = t->init(sp);
            if (rc) {
                sp->tmpl = NULL;
                sp->nknobs = 0;
                if (kind == TE_SPACE_TEMPLATE) {
                    char why[1024];
                    snprintf(why, sizeof why, "%s", te_ctx_errmsg(ctx));
                    te_ctx_clear_error(ctx);
                    te_ctx_set_error(ctx, rc,
                                     "te_space_create: the '%s' template does not fit "
                                     "this expression: %s",
                                     t->name, why);
                    return NULL;
                }
                te_ctx_clear_error(ctx);
            }
        }
    } else if (kind == TE_SPACE_AUTO) {
        /* No operator name (a fused group): the first template that recognizes the
         * expression's structure, else sketches. */
        const te__template *ts[8];
        int nt = te__templates_by_structure(ts, 8);
        for (int i = 0; i < nt && !sp->tmpl; i++) {
            sp->tmpl = ts[i];
            if (ts[i]->init(sp)) {
                if (getenv("TESSERA_DEFAULT_DEBUG"))
                    fprintf(stderr, "space: template %s: %s\n", ts[i]->name, te_ctx_errmsg(ctx));
                sp->tmpl = NULL;
                sp->nknobs = 0;
                sp->tdata = NULL;
                te_ctx_clear_error(ctx);
            }
        }
    }
    if (kind == TE_SPACE_TEMPLATE && !sp->tmpl) {
        te_ctx_set_error(ctx, TE_ERR_UNSUPPORTED,
                         "te_space_create: operator '%s' has no "
                         "template (use TE_SPACE_SKETCH or TE_SPACE_AUTO)",
                         op ? op : "(null)");
        return NULL;
    }
    if (sp->tmpl) {
        sp->kind = TE_SPACE_TEMPLATE;
        return sp;
    }
    sp->kind = TE_SPACE_SKETCH;
    int rc = te__sketch_init(sp);
    if (rc) {
        te_ctx_set_error(ctx, rc, "te_space_create: sketch generation failed");
        return NULL;
    }
    return sp;
}

te_space_kind te_space_kind_of(const te_space *sp) { return sp ? sp->kind : TE_SPACE_AUTO; }

int64_t te_space_size(const te_space *sp)
{
    if (!sp || !sp->tmpl)
        return -1;
    int64_t n = 1;
    for (int k = 0; k < sp->nknobs; k++) {
        if (n > INT64_MAX / (sp->knobs[k].n > 0 ? sp->knobs[k].n : 1))
            return INT64_MAX;
        n *= sp->knobs[k].n > 0 ? sp->knobs[k].n : 1;
    }
    return n;
}

const char *te_space_get(te_space *sp, int64_t i)
{
    if (!sp)
        return NULL;
    int64_t size = te_space_size(sp);
    if (size < 0) {
        te_ctx_set_error(sp->ctx, TE_ERR_UNSUPPORTED,
                         "te_space_get: a sketch space is not "
                         "enumerable; use te_space_sample");
        return NULL;
    }
    if (i < 0 || i >= size) {
        te_ctx_set_error(sp->ctx, TE_ERR_ARG, "te_space_get: index %lld is outside [0, %lld)",
                         (long long)i, (long long)size);
        return NULL;
    }
    int32_t dec[TE__MAX_KNOBS];
    /* Mixed radix, the last knob varying fastest. */
    for (int k = sp->nknobs - 1; k >= 0; k--) {
        int n = sp->knobs[k].n > 0 ? sp->knobs[k].n : 1;
        dec[k] = (int32_t)(i % n);
        i /= n;
    }
    int rc;
    char err[1024];
    const char *t = generate(sp, dec, sp->nknobs, NULL, &rc, err, sizeof err);
    if (!t)
        te_ctx_set_error(sp->ctx, rc, "te_space_get: configuration failed to apply: %s", err);
    return t;
}

const char *te_space_sample(te_space *sp, te_rng *rng)
{
    if (!sp)
        return NULL;
    if (!rng) {
        te_ctx_set_error(sp->ctx, TE_ERR_ARG, "te_space_sample: rng is NULL");
        return NULL;
    }
    int rc = TE_OK;
    char err[1024] = "";
    for (int attempt = 0; attempt < 64; attempt++) {
        const char *t = generate(sp, NULL, 0, rng, &rc, err, sizeof err);
        if (t)
            return t;
    }
    te_ctx_set_error(sp->ctx, rc, "te_space_sample: no valid configuration in 64 attempts: %s",
                     err);
    return NULL;
}

/* Trace-level mutation for traces this space did not produce: change one number. */
static const char *mutate_text(te_space *sp, const char *trace, te_rng *rng)
{
    int nlines = 0;
    for (const char *p = trace; *p; p++)
        nlines += *p == '\n';
    size_t len = strlen(trace);
    char *buf = malloc(len + 64);
    if (!buf)
        return NULL;
    for (int attempt = 0; attempt < 32; attempt++) {
        /* Collect the lines that carry a decision. */
        const char *lines[1024];
        int nl = 0;
        for (const char *p = trace; *p && nl < 1024;) {
            if (!strncmp(p, "split ", 6) || !strncmp(p, "split_nparts ", 13) ||
                !strncmp(p, "tile ", 5) || !strncmp(p, "unroll_max ", 11) ||
                !strncmp(p, "nontemporal ", 12))
                lines[nl++] = p;
            const char *e = strchr(p, '\n');
            p = e ? e + 1 : p + strlen(p);
        }
        if (!nl)
            break;
        const char *ln = lines[rng_int(rng, nl)];
        const char *eol = strchr(ln, '\n');
        if (!eol)
            eol = ln + strlen(ln);
        /* The last number on the line (tile: one of the two). */
        const char *num_end = eol, *num_beg;
        while (num_end > ln && num_end[-1] == ' ')
            num_end--;
        num_beg = num_end;
        while (num_beg > ln && num_beg[-1] >= '0' && num_beg[-1] <= '9')
            num_beg--;
        if (!strncmp(ln, "tile ", 5) && rng_int(rng, 2)) {
            const char *q = num_beg - 1; /* the blank before the last number */
            num_end = q;
            num_beg = q;
            while (num_beg > ln && num_beg[-1] >= '0' && num_beg[-1] <= '9')
                num_beg--;
        }
        if (num_beg == num_end)
            continue;
        long long old = strtoll(num_beg, NULL, 10), nv;
        if (!strncmp(ln, "unroll_max ", 11)) {
            static const int pv[] = {0, 16, 64, 512};
            nv = pv[rng_int(rng, 4)];
        } else if (!strncmp(ln, "nontemporal ", 12)) {
            nv = !old;
        } else {
            int64_t c[8] = {old / 2,         old * 2,         old + 1,     old - 1,
                            old + sp->lanes, old - sp->lanes, old * 3 / 2, old * 2 / 3};
            nv = c[rng_int(rng, 8)];
            if (nv < 1)
                nv = 1;
        }
        if (nv == old)
            continue;
        size_t pre = (size_t)(num_beg - trace);
        int k = snprintf(buf, len + 64, "%.*s%lld%s", (int)pre, trace, nv, num_end);
        if (k < 0 || (size_t)k >= len + 64)
            continue;
        te_ctx *scratch = te_ctx_create_child(sp->ctx);
        te_schedule *s = scratch ? te_schedule_create(scratch, sp->n_out, sp->outs) : NULL;
        bool ok = s && te_schedule_apply_trace(s, buf) == TE_OK;
        te_ctx_free(scratch);
        if (ok) {
            const char *t = te__strdup(sp->ctx, buf);
            free(buf);
            return t;
        }
    }
    free(buf);
    (void)nlines;
    return NULL;
}

const char *te_space_mutate(te_space *sp, const char *trace, te_rng *rng)
{
    if (!sp)
        return NULL;
    if (!trace || !rng) {
        te_ctx_set_error(sp->ctx, TE_ERR_ARG, "te_space_mutate: %s is NULL",
                         trace ? "rng" : "trace");
        return NULL;
    }
    te__memo_ent *e = memo_find(sp, trace);
    if (e) {
        const int32_t *card = e->dec + e->n;
        int choices[TE__MAX_DEC], nc = 0;
        for (int i = 0; i < e->n; i++)
            if (card[i] > 1)
                choices[nc++] = i;
        int32_t dec[TE__MAX_DEC];
        for (int attempt = 0; nc && attempt < 32; attempt++) {
            memcpy(dec, e->dec, sizeof(int32_t) * (size_t)e->n);
            int p = choices[rng_int(rng, nc)];
            int32_t nv = (int32_t)rng_int(rng, card[p] - 1);
            dec[p] = nv >= e->dec[p] ? nv + 1 : nv;
            int rc;
            char err[64];
            const char *t = generate(sp, dec, e->n, rng, &rc, err, sizeof err);
            if (t && strcmp(t, trace))
                return t;
        }
    }
    const char *t = mutate_text(sp, trace, rng);
    if (!t)
        te_ctx_set_error(sp->ctx, TE_ERR_NOT_FOUND,
                         "te_space_mutate: found no valid neighbour "
                         "of the trace");
    return t;
}

te_schedule *te_space_instantiate(te_space *sp, const char *trace)
{
    if (!sp)
        return NULL;
    te_schedule *s = te_schedule_create(sp->ctx, sp->n_out, sp->outs);
    if (!s)
        return NULL;
    if (te_schedule_apply_trace(s, trace ? trace : "") != TE_OK)
        return NULL;
    return s;
}

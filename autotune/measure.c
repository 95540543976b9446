/*
 * autotune/measure.c: the measurer. Every candidate of a batch is built through the backend's
 * function table (backends/backend_impl.h: emit_unit and compile_many, one compiler per core,
 * the on-disk cache shared with te_build), then the built batch is run and checked in forked
 * children (measure_child.c) against the reference output (measure_check.c).
 */
#define _GNU_SOURCE

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "autotune/measure_impl.h"
#include "backends/backend_impl.h"

void te__cand_clear(te__cand *c)
{
    free(c->trace);
    memset(c, 0, sizeof *c);
}

double te__meas_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

te__measurer *te__measurer_create(int n_in, te_tensor *const *ins, int n_out,
                                  te_tensor *const *outs, const te_target *target,
                                  const te_measure_options *o, char *err, size_t errsize)
{
    if (n_in < 0 || n_out < 1 || n_in + n_out > MAX_ARGS || (n_in && !ins) || !outs) {
        snprintf(err, errsize, "measurer: between 1 and %d kernel arguments are supported",
                 MAX_ARGS);
        return NULL;
    }
    te__measurer *m = calloc(1, sizeof *m);
    if (!m) {
        snprintf(err, errsize, "out of memory");
        return NULL;
    }
    m->target = target ? *target : te_target_host();
    if (o)
        m->o = *o;
    if (m->o.timeout_s <= 0)
        m->o.timeout_s = 10;
    if (m->o.min_time_s <= 0)
        m->o.min_time_s = 0.01;
    if (m->o.min_repeats <= 0)
        m->o.min_repeats = 3;
    if (m->o.max_repeats <= 0)
        m->o.max_repeats = 200;
    if (m->o.max_repeats < m->o.min_repeats)
        m->o.max_repeats = m->o.min_repeats;
    if (m->o.slow_factor == 0)
        m->o.slow_factor = 3;
    if (m->o.max_stmts == 0)
        m->o.max_stmts = 3000;
    m->n_in = n_in;
    m->n_out = n_out;
    for (int i = 0; i < n_in + n_out; i++) {
        te_tensor *t = i < n_in ? ins[i] : outs[i - n_in];
        if (!t) {
            snprintf(err, errsize, "measurer: argument %d is NULL", i);
            te__measurer_free(m);
            return NULL;
        }
        m->args[i] = t;
        size_t n = (size_t)te_tensor_numel(t), es = te_dtype_size(te_tensor_dtype(t));
        m->bytes[i] = n * es;
        m->bufs[i] = aligned_alloc(64, (m->bytes[i] + 63) / 64 * 64 + 64);
        if (!m->bufs[i]) {
            snprintf(err, errsize, "out of memory for argument '%s'", te_tensor_name(t));
            te__measurer_free(m);
            return NULL;
        }
        if (i < n_in)
            te__meas_fill_random(m->bufs[i], te_tensor_dtype(t), n, 1000 + (uint64_t)i);
        else {
            m->ref[i] = mmap(NULL, m->bytes[i] + 64, PROT_READ | PROT_WRITE,
                             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
            if (m->ref[i] == MAP_FAILED) {
                m->ref[i] = NULL;
                snprintf(err, errsize, "out of memory for the reference of '%s'",
                         te_tensor_name(t));
                te__measurer_free(m);
                return NULL;
            }
        }
    }
    if (m->o.flush_cache) {
        m->flush_bytes = 64u << 20;
        m->flush = malloc(m->flush_bytes);
    }
    return m;
}

void te__measurer_free(te__measurer *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->n_in + m->n_out; i++) {
        free(m->bufs[i]);
        if (m->ref[i])
            munmap(m->ref[i], m->bytes[i] + 64);
    }
    free(m->flush);
    free(m);
}

void te__measurer_set_cold(te__measurer *m, uint32_t mask)
{
    if (!m)
        return;
    m->cold = mask;
#if !defined(__x86_64__) && !defined(__i386__)
    /* No line flush here: evicting means overwriting the whole cache. */
    if (mask && !m->flush) {
        m->flush_bytes = 64u << 20;
        m->flush = malloc(m->flush_bytes);
    }
#endif
}

const char *te__measurer_ref_kind(const te__measurer *m) { return m ? m->ref_kind : NULL; }
double te__measurer_tolerance(const te__measurer *m) { return m ? m->tol : 0; }
void te__measurer_set_best(te__measurer *m, double best_s)
{
    if (m)
        m->best_s = best_s;
}

void te__measurer_times(const te__measurer *m, double *compile_s, double *run_s)
{
    *compile_s = m ? m->compile_s : 0;
    *run_s = m ? m->run_s : 0;
}

double te__measurer_bytes(const te__measurer *m)
{
    double b = 0;
    for (int i = 0; m && i < m->n_in + m->n_out; i++)
        b += (double)m->bytes[i];
    return b;
}

/* ---- Building: several candidates per compiler run ------------------------------------------ */

/* The compiler's fixed start-up cost (driver, cc1, assembler, linker) is about 30% of a typical
 * batch's compile time when every candidate is its own translation unit. Candidates given as
 * lowered functions are therefore emitted by the backend several to a unit (emit_unit: one
 * prelude, the kernels renamed cand0_, cand1_, ...) and compiled together; a unit that fails
 * is rebuilt member by member so that only the bad member is an error. Candidates given as
 * source text (hand-written or injected ones) are compiled alone, as given. */
typedef struct {
    const char *src;
    int first, n;       /* members: order[first .. first + n) */
    const char **names; /* kernel names in the unit */
} unit;

double te__compile_timeout_for_load(double load1, int ncores)
{
    double per_core = ncores > 0 && load1 > 0 ? load1 / ncores : 0;
    double t = 20.0 * (per_core > 1 ? per_core : 1);
    return t < 200 ? t : 200;
}

double te__default_compile_timeout(void)
{
    double load[1] = {0};
    if (getloadavg(load, 1) != 1)
        load[0] = 0;
    return te__compile_timeout_for_load(load[0], (int)sysconf(_SC_NPROCESSORS_ONLN));
}

/* Records the failing status of building candidate x (TE_ERR_LOWER: it could not be emitted,
 * an invalid schedule as when lowering fails). */
static void build_failed(te__cand *x, int st, const char *err)
{
    x->status = st == TE_ERR_COMPILE ? TE_TRIAL_COMPILE_ERROR
                : st == TE_ERR_LOAD  ? TE_TRIAL_LOAD_ERROR
                : st == TE_ERR_LOWER ? TE_TRIAL_INVALID_SCHEDULE
                                     : TE_TRIAL_OTHER_ERROR;
    if (err)
        snprintf(x->err, sizeof x->err, "%s", err);
    x->done = 1;
}

/* Compiles units[0 .. nu) with the backend; on success fills kern[] and fns[] per candidate
 * (c[which[order[...]]]). Members of failed multi-kernel units are appended to retry. */
static void compile_units(te__measurer *m, const te__backend *be, te__cand *c, const int *which,
                          const int *order, unit *units, int nu, te__kernel **kern,
                          te_packed_fn *fns, int *retry, int *nretry)
{
    const char **srcs = calloc((size_t)nu, sizeof *srcs);
    int *counts = calloc((size_t)nu, sizeof *counts), *st = calloc((size_t)nu, sizeof *st);
    const char *const **names = calloc((size_t)nu, sizeof *names);
    char **errs = calloc((size_t)nu, sizeof *errs);
    char *errmem = malloc((size_t)nu * TE__ERR_LEN);
    int total = 0;
    for (int u = 0; u < nu; u++)
        total += units[u].n;
    te__kernel **out = calloc((size_t)(total ? total : 1), sizeof *out);
    if (srcs && counts && st && names && errs && errmem && out) {
        for (int u = 0; u < nu; u++) {
            srcs[u] = units[u].src;
            counts[u] = units[u].n;
            names[u] = units[u].names;
            errs[u] = errmem + (size_t)u * TE__ERR_LEN;
        }
        be->compile_many(nu, srcs, counts, names, &m->target, m->o.build_jobs, out, st, errs,
                         TE__ERR_LEN);
        for (int u = 0, at = 0; u < nu; at += units[u].n, u++) {
            for (int f = 0; f < units[u].n; f++) {
                int i = which[order[units[u].first + f]];
                if (st[u] == TE_OK) {
                    kern[i] = out[at + f];
                    fns[i] = be->entry ? be->entry(kern[i]) : NULL;
                } else if (units[u].n > 1) {
                    retry[(*nretry)++] = order[units[u].first + f];
                } else {
                    build_failed(&c[i], st[u], errs[u]);
                }
            }
        }
    } else {
        for (int u = 0; u < nu; u++)
            for (int f = 0; f < units[u].n; f++)
                build_failed(&c[which[order[units[u].first + f]]], TE_ERR_NOMEM, "out of memory");
    }
    free(out);
    free(srcs);
    free(counts);
    free(st);
    free(names);
    free(errs);
    free(errmem);
}

static bool count_stmt(const te_stmt *s, void *user)
{
    if (s->kind != TE_S_SEQ && s->kind != TE_S_COMMENT)
        ++*(int64_t *)user;
    return true;
}

int64_t te__lowered_stmts(const te_lowered *f)
{
    int64_t n = 0;
    if (f)
        te__stmt_visit(f->body, count_stmt, NULL, &n);
    return n;
}

static const char *const cand_name[] = {"cand"};

/* The unit of members order[first .. first + n): a candidate's own source, or the backend's
 * emission of the members' lowered functions under distinct names. NULL source on failure
 * (message in the first member's err). */
static void make_unit(te_ctx *ctx, const te__backend *be, const te_target *target, te__cand *c,
                      const int *which, const int *order, unit *un)
{
    te__cand *x0 = &c[which[order[un->first]]];
    un->names = (const char **)cand_name;
    un->src = NULL;
    if (x0->source) {
        un->src = x0->source;
        return;
    }
    const te_lowered **fs = te__alloc(ctx, sizeof *fs * (size_t)un->n);
    te_lowered *copies = te__alloc(ctx, sizeof *copies * (size_t)un->n);
    const char **names = te__alloc(ctx, sizeof *names * (size_t)un->n);
    if (!fs || !copies || !names) {
        snprintf(x0->err, sizeof x0->err, "out of memory");
        return;
    }
    for (int f = 0; f < un->n; f++) {
        copies[f] = *c[which[order[un->first + f]]].lowered;
        if (un->n > 1)
            copies[f].name = te__sprintf(ctx, "cand%d_", f);
        names[f] = copies[f].name;
        fs[f] = &copies[f];
    }
    un->names = names;
    un->src = un->n == 1 || !be->emit_unit ? be->emit(ctx, fs[0], target)
                                           : be->emit_unit(ctx, un->n, fs, target);
    if (!un->src) {
        snprintf(x0->err, sizeof x0->err, "emitting %s: %s",
                 be->kind == TE_BACKEND_C ? "C" : "CUDA", te_ctx_errmsg(ctx));
        te_ctx_clear_error(ctx);
    }
}

/* Reorders order[0 .. nl) so that its consecutive runs of `per` (the compiler units) have
 * about equal code sizes: the largest candidate first into the unit with the fewest statements
 * that has room (a unit compiles as long as its largest members take, and the units of a batch
 * compile side by side, so one unit holding all the large candidates leaves the other
 * compilers idle). Orders by size alone when memory is short. */
static void balance_units(const te__cand *c, const int *which, int *order, int nl, int per)
{
    if (nl <= per || per <= 1)
        return;
    int nunits = (nl + per - 1) / per;
    int *sorted = malloc(sizeof *sorted * (size_t)nl), *fill = calloc((size_t)nunits, sizeof *fill);
    int64_t *load = calloc((size_t)nunits, sizeof *load);
    if (!sorted || !fill || !load) {
        free(sorted);
        free(fill);
        free(load);
        return;
    }
    memcpy(sorted, order, sizeof *sorted * (size_t)nl);
    for (int a = 1; a < nl; a++) /* insertion sort, largest first (a batch is small) */
        for (int b = a; b > 0 && c[which[sorted[b]]].stmts > c[which[sorted[b - 1]]].stmts; b--) {
            int t = sorted[b];
            sorted[b] = sorted[b - 1];
            sorted[b - 1] = t;
        }
    for (int a = 0; a < nl; a++) {
        int best = -1;
        for (int u = 0; u < nunits; u++) {
            int cap = u + 1 < nunits ? per : nl - per * (nunits - 1);
            if (fill[u] < cap && (best < 0 || load[u] < load[best]))
                best = u;
        }
        order[best * per + fill[best]++] = sorted[a];
        load[best] += c[which[sorted[a]]].stmts + 1;
    }
    free(sorted);
    free(fill);
    free(load);
}

/* Builds candidates c[which[0 .. k)]: kern[i] and fns[i] for the ones that built, status and
 * err (done = 1) for the others. */
static void build_batch(te__measurer *m, te__cand *c, const int *which, int k, te__kernel **kern,
                        te_packed_fn *fns)
{
    const te__backend *be = te__backend_get(m->target.backend);
    if (!be || !be->compile_many || !be->entry) {
        for (int q = 0; q < k; q++) {
            te__cand *x = &c[which[q]];
            x->status = TE_TRIAL_OTHER_ERROR;
            snprintf(x->err, sizeof x->err, "the %s backend cannot build tuning candidates",
                     be ? be->name : "unknown");
            x->done = 1;
        }
        return;
    }
    te_ctx *ctx = te_ctx_create();
    int *order = calloc((size_t)k, sizeof *order), *retry = calloc((size_t)k, sizeof *retry);
    unit *units = calloc((size_t)k, sizeof *units);
    if (!ctx || !order || !retry || !units) {
        for (int q = 0; q < k; q++)
            build_failed(&c[which[q]], TE_ERR_NOMEM, "out of memory");
        goto out;
    }
    int jobs = m->o.build_jobs > 0 ? m->o.build_jobs : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (jobs < 1)
        jobs = 1;
    /* Over the code budget: not compiled (see te_measure_options.max_stmts). */
    for (int q = 0; q < k; q++) {
        te__cand *x = &c[which[q]];
        if (x->source || !x->lowered)
            continue;
        x->stmts = te__lowered_stmts(x->lowered);
        if (m->o.max_stmts > 0 && x->stmts > m->o.max_stmts) {
            char e[256];
            snprintf(e, sizeof e,
                     "not compiled: %lld statements after lowering, over the code budget of %d "
                     "(compile time grows with code size; te_measure_options.max_stmts, "
                     "tessera tune --max-stmts)",
                     (long long)x->stmts, m->o.max_stmts);
            build_failed(x, TE_ERR_COMPILE, e);
        }
    }
    /* Order: the lowered candidates first, in units of at most `per` (one unit per compiler, at
     * most 8 candidates each: measured on 2 cores, 10% faster than two units of 4 per
     * compiler, 30% faster than one per candidate), then the sources, one unit each. */
    int no = 0, nl = 0, nu = 0;
    for (int q = 0; q < k; q++)
        if (!c[which[q]].source && !c[which[q]].done)
            order[no++] = q;
    nl = no;
    for (int q = 0; q < k; q++)
        if (c[which[q]].source && !c[which[q]].done)
            order[no++] = q;
    int per = (nl + jobs - 1) / jobs;
    if (per > 8)
        per = 8;
    if (per < 1 || !be->emit_unit)
        per = 1;
    balance_units(c, which, order, nl, per);
    for (int f = 0; f < no; nu++) {
        units[nu].first = f;
        units[nu].n = f < nl ? (nl - f < per ? nl - f : per) : 1;
        f += units[nu].n;
    }
    /* Emission; a unit that cannot be emitted falls back to its members alone. */
    int nretry = 0;
    for (int u = 0; u < nu; u++)
        make_unit(ctx, be, &m->target, c, which, order, &units[u]);
    int nok = 0;
    for (int u = 0; u < nu; u++) {
        if (units[u].src) {
            units[nok++] = units[u];
            continue;
        }
        if (units[u].n > 1)
            for (int f = 0; f < units[u].n; f++)
                retry[nretry++] = order[units[u].first + f];
        else
            build_failed(&c[which[order[units[u].first]]], TE_ERR_LOWER, NULL);
    }
    int nretry2 = 0;
    compile_units(m, be, c, which, order, units, nok, kern, fns, retry + nretry, &nretry2);
    nretry += nretry2;
    if (nretry) {
        /* Members of failed units, one unit each (retry holds positions in which[]). */
        for (int r = 0; r < nretry; r++) {
            units[r].first = r;
            units[r].n = 1;
            make_unit(ctx, be, &m->target, c, which, retry, &units[r]);
        }
        int nr = 0;
        for (int r = 0; r < nretry; r++) {
            if (units[r].src)
                units[nr++] = units[r];
            else
                build_failed(&c[which[retry[r]]], TE_ERR_LOWER, NULL);
        }
        int left = 0;
        compile_units(m, be, c, which, retry, units, nr, kern, fns, order, &left);
    }
    for (int q = 0; q < k; q++) {
        int i = which[q];
        if (kern[i] && !fns[i]) {
            c[i].status = TE_TRIAL_LOAD_ERROR;
            snprintf(c[i].err, sizeof c[i].err, "no packed entry");
            c[i].done = 1;
        }
    }
out:
    free(order);
    free(retry);
    free(units);
    te_ctx_free(ctx);
}

void te__measure_batch(te__measurer *m, te__cand *c, int n)
{
    if (!m || n <= 0)
        return;
    int *which = calloc((size_t)n, sizeof *which), *ridx = calloc((size_t)n, sizeof *ridx);
    te_packed_fn *fns = calloc((size_t)n, sizeof *fns);
    te__kernel **kern = calloc((size_t)n, sizeof *kern);
    int k = 0, nrun = 0;
    if (!which || !ridx || !fns || !kern) {
        for (int i = 0; i < n; i++)
            if (!c[i].done) {
                c[i].status = TE_TRIAL_OTHER_ERROR;
                snprintf(c[i].err, sizeof c[i].err, "out of memory");
                c[i].done = 1;
            }
        goto out;
    }
    for (int i = 0; i < n; i++) {
        if (c[i].done)
            continue;
        if (!c[i].source && !c[i].lowered) {
            c[i].status = TE_TRIAL_OTHER_ERROR;
            snprintf(c[i].err, sizeof c[i].err, "no source");
            c[i].done = 1;
            continue;
        }
        c[i].err[0] = 0;
        which[k++] = i;
    }
    if (k == 0)
        goto out;
    /* The compile limit for tuning (cc.c reads $TESSERA_CC_TIMEOUT): a candidate that takes
     * longer than this to compile is not worth the time it would cost every batch. */
    const char *user_limit = getenv("TESSERA_CC_TIMEOUT");
    int set_limit = m->o.compile_timeout_s > 0 || !user_limit || !*user_limit;
    char *saved = user_limit ? strdup(user_limit) : NULL;
    double scale = 1; /* a retry of an environmental failure gets a larger limit */
    for (int q = 0; q < k; q++)
        if (c[which[q]].limit_scale > scale)
            scale = c[which[q]].limit_scale;
    if (set_limit || scale > 1) {
        char v[32];
        double base = m->o.compile_timeout_s > 0 ? m->o.compile_timeout_s
                      : set_limit                ? te__default_compile_timeout()
                                                 : atof(user_limit);
        snprintf(v, sizeof v, "%g", base * scale);
        setenv("TESSERA_CC_TIMEOUT", v, 1);
        set_limit = 1;
    }
    double t0 = te__meas_now();
    build_batch(m, c, which, k, kern, fns);
    m->compile_s = te__meas_now() - t0;
    if (set_limit) {
        if (saved)
            setenv("TESSERA_CC_TIMEOUT", saved, 1);
        else
            unsetenv("TESSERA_CC_TIMEOUT");
    }
    free(saved);
    for (int q = 0; q < k; q++) {
        te__cand *x = &c[which[q]];
        if (x->done)
            continue;
        x->median_s = x->spread_s = NAN;
        if (!fns[which[q]]) {
            x->status = TE_TRIAL_OTHER_ERROR;
            snprintf(x->err, sizeof x->err, "not built");
            x->done = 1;
            continue;
        }
        x->status = TE_TRIAL_STATUS_COUNT; /* pending */
        ridx[nrun++] = which[q];
    }
    t0 = te__meas_now();
    if (nrun && m->ref_ok)
        te__meas_run_batch(m, c, fns, ridx, nrun);
    m->run_s = te__meas_now() - t0;
    for (int q = 0; q < nrun; q++) {
        te__cand *x = &c[ridx[q]];
        if (x->status == TE_TRIAL_STATUS_COUNT) {
            x->status = TE_TRIAL_OTHER_ERROR;
            snprintf(x->err, sizeof x->err, m->ref_ok ? "not run" : "no reference output");
        }
        x->done = 1;
    }
out:;
    const te__backend *be = te__backend_get(m->target.backend);
    for (int i = 0; kern && be && i < n; i++)
        be->free(kern[i]);
    free(which);
    free(ridx);
    free(fns);
    free(kern);
}

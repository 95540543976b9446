/*
 * autotune/search.c: the search strategies. Each proposes traces from a search space
 * (tessera/autotune.h) that were never measured for the workload (the tuner's `seen`
 * callback answers from this run and from the database):
 *
 *  - random: uniform samples (te_space_sample) from a seeded stream, so the same seed gives
 *    the same sequence of proposals;
 *  - grid: te_space_get(0), te_space_get(1), ... for enumerable (template) spaces;
 *  - evolutionary (Ansor's search in miniature): once a few candidates are measured, each
 *    batch starts from the best measured traces, mutates them (te_space_mutate) for a couple
 *    of generations scored only by the cost model, adds fresh random samples for diversity,
 *    and measures the candidates the model ranks highest plus a quarter chosen at random
 *    (exploration keeps the model honest where it has no data). The model (cost_model.c) is
 *    refit on every measured trial before each proposal.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autotune/tune_impl.h"

typedef struct {
    char *trace;
    double gflops;
} measured;

struct te__search {
    te_tune_strategy strat;
    te_space *sp;
    char *first; /* proposed before anything else (te__search_first), owned */
    te_rng rng;
    int64_t grid_next;
    te__gbt *model;
    int model_dirty;
    double norm; /* gflops that maps to target 1 */
    measured *ms;
    int nm, cap;
    int n_ok;
};

te__search *te__search_create(te_tune_strategy strategy, te_space *sp, uint64_t seed)
{
    te__search *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->strat = strategy;
    s->sp = sp;
    te_rng_seed(&s->rng, seed);
    if (strategy == TE_TUNE_EVOLUTIONARY) {
        s->model = te__gbt_create(TE_NUM_FEATURES);
        if (!s->model) {
            free(s);
            return NULL;
        }
    }
    return s;
}

void te__search_free(te__search *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->nm; i++)
        free(s->ms[i].trace);
    free(s->ms);
    free(s->first);
    te__gbt_free(s->model);
    free(s);
}

void te__search_set_space(te__search *s, te_space *sp)
{
    if (s)
        s->sp = sp;
}

static uint64_t rnd(te__search *s, uint64_t n) { return n ? te_rng_next(&s->rng) % n : 0; }

/* A small open-addressing set of trace hashes for one proposal round. */
typedef struct {
    uint64_t *v;
    int cap;
} hset;

static uint64_t hash_of(const char *hex)
{
    uint64_t h = 0;
    for (const char *p = hex; *p; p++)
        h = h * 16 + (uint64_t)(*p <= '9' ? *p - '0' : *p - 'a' + 10);
    return h | 1;
}

static int hset_add(hset *h, const char *hex) /* 1 when new */
{
    if (!h->v)
        return 1;
    uint64_t x = hash_of(hex);
    for (int i = (int)(x % (uint64_t)h->cap);; i = (i + 1) % h->cap) {
        if (h->v[i] == x)
            return 0;
        if (!h->v[i]) {
            h->v[i] = x;
            return 1;
        }
    }
}

typedef struct {
    char *trace;
    double pred;
} pooled;

static int cmp_pred(const void *a, const void *b)
{
    double x = ((const pooled *)a)->pred, y = ((const pooled *)b)->pred;
    return (x < y) - (x > y);
}

static int cmp_gflops(const void *a, const void *b)
{
    double x = ((const measured *)a)->gflops, y = ((const measured *)b)->gflops;
    return (x < y) - (x > y);
}

/* Accepts a candidate trace if it is new: not seen by the tuner, not in this round. */
static int fresh(const char *trace, hset *round, te__seen_fn seen, void *user)
{
    char hex[17];
    te_db_trace_hash(trace, hex);
    if (seen && seen(hex, user))
        return 0;
    return hset_add(round, hex);
}

static int propose_random(te__search *s, int n, char **out, hset *round, te__seen_fn seen,
                          void *user)
{
    int k = 0;
    for (int tries = 0; k < n && tries < 64 * n + 256; tries++) {
        const char *t = te_space_sample(s->sp, &s->rng);
        if (!t || !fresh(t, round, seen, user))
            continue;
        out[k] = strdup(t);
        if (out[k])
            k++;
    }
    return k;
}

static int propose_grid(te__search *s, int n, char **out, hset *round, te__seen_fn seen, void *user)
{
    int64_t size = te_space_size(s->sp);
    if (size < 0)
        return propose_random(s, n, out, round, seen, user);
    int k = 0;
    while (k < n && s->grid_next < size) {
        const char *t = te_space_get(s->sp, s->grid_next++);
        if (!t || !fresh(t, round, seen, user))
            continue;
        out[k] = strdup(t);
        if (out[k])
            k++;
    }
    return k;
}

/* Parent for a mutation: a tournament of two among the top `top` measured. */
static const char *pick_parent(te__search *s, int top)
{
    int a = (int)rnd(s, (uint64_t)top), b = (int)rnd(s, (uint64_t)top);
    return s->ms[a < b ? a : b].trace; /* ms is sorted, best first */
}

static int propose_evolutionary(te__search *s, int n, char **out, hset *round, te__seen_fn seen,
                                te__featurize_fn featurize, void *user)
{
    if (s->n_ok < 8 || !featurize) {
        /* Not enough data for a model yet: random, but keep the best seeds in play. */
        return propose_random(s, n, out, round, seen, user);
    }
    if (s->model_dirty && te__gbt_nsamples(s->model) >= 8) {
        te__gbt_fit(s->model);
        s->model_dirty = 0;
    }
    qsort(s->ms, (size_t)s->nm, sizeof *s->ms, cmp_gflops);
    int top = s->n_ok < 16 ? s->n_ok : 16;
    int want = 3 * n + 8, np = 0, cap = want + 4 * 8 * 2 + 8;
    pooled *pool = calloc((size_t)cap, sizeof *pool);
    float feat[TE_NUM_FEATURES];
    if (!pool)
        return propose_random(s, n, out, round, seen, user);
    /* Generation 0: mutations of the best, and a few fresh samples. */
    for (int tries = 0; np < want && tries < 8 * want; tries++) {
        const char *t;
        if (rnd(s, 4) == 0) {
            t = te_space_sample(s->sp, &s->rng);
        } else {
            t = te_space_mutate(s->sp, pick_parent(s, top), &s->rng);
            if (t && rnd(s, 3) == 0)
                t = te_space_mutate(s->sp, t, &s->rng);
        }
        if (!t || !fresh(t, round, seen, user))
            continue;
        if (!featurize(t, feat, user))
            continue;
        pool[np].trace = strdup(t);
        pool[np].pred = te__gbt_predict(s->model, feat);
        if (pool[np].trace)
            np++;
    }
    /* Generation 1: mutate the best-predicted few again, scored by the model alone. */
    qsort(pool, (size_t)np, sizeof *pool, cmp_pred);
    int elite = np < 8 ? np : 8;
    for (int e = 0; e < elite && np < cap; e++) {
        for (int r = 0; r < 4 && np < cap; r++) {
            const char *t = te_space_mutate(s->sp, pool[e].trace, &s->rng);
            if (!t || !fresh(t, round, seen, user) || !featurize(t, feat, user))
                continue;
            pool[np].trace = strdup(t);
            pool[np].pred = te__gbt_predict(s->model, feat);
            if (pool[np].trace)
                np++;
        }
    }
    qsort(pool, (size_t)np, sizeof *pool, cmp_pred);
    int n_explore = n / 4, n_greedy = n - n_explore, k = 0;
    for (int i = 0; i < np && k < n_greedy; i++) {
        out[k++] = pool[i].trace;
        pool[i].trace = NULL;
    }
    /* Exploration: random members of the rest of the pool. */
    for (int tries = 0; k < n && tries < 4 * n && np > 0; tries++) {
        int i = (int)rnd(s, (uint64_t)np);
        if (!pool[i].trace)
            continue;
        out[k++] = pool[i].trace;
        pool[i].trace = NULL;
    }
    for (int i = 0; i < np; i++)
        free(pool[i].trace);
    free(pool);
    if (k < n)
        k += propose_random(s, n - k, out + k, round, seen, user);
    return k;
}

int te__search_propose(te__search *s, int n, char **out, te__seen_fn seen,
                       te__featurize_fn featurize, void *user)
{
    if (!s || !s->sp || n <= 0 || !out)
        return 0;
    hset round = {NULL, 0};
    round.cap = 64 * n + 1024;
    round.v = calloc((size_t)round.cap, sizeof *round.v);
    int k, k0 = 0;
    if (s->first) { /* the untuned default, once: a tune never ends worse than no tune */
        if (round.v && fresh(s->first, &round, seen, user))
            out[k0++] = s->first;
        else
            free(s->first);
        s->first = NULL;
    }
    if (n - k0 <= 0) {
        free(round.v);
        return k0;
    }
    switch (s->strat) {
    case TE_TUNE_GRID:
        k = propose_grid(s, n - k0, out + k0, &round, seen, user);
        break;
    case TE_TUNE_EVOLUTIONARY:
        k = propose_evolutionary(s, n - k0, out + k0, &round, seen, featurize, user);
        break;
    default:
        k = propose_random(s, n - k0, out + k0, &round, seen, user);
        break;
    }
    free(round.v);
    return k + k0;
}

void te__search_first(te__search *s, const char *trace)
{
    if (!s || !trace)
        return;
    free(s->first);
    s->first = strdup(trace);
}

static void add_measured(te__search *s, const char *trace, const float *feat, double gflops)
{
    if (!(gflops > 0))
        gflops = 0;
    if (gflops > 0) {
        if (s->nm == s->cap) {
            int cap = s->cap ? 2 * s->cap : 64;
            measured *nm = realloc(s->ms, sizeof *nm * (size_t)cap);
            if (!nm)
                return;
            s->ms = nm;
            s->cap = cap;
        }
        char *t = strdup(trace);
        if (!t)
            return;
        s->ms[s->nm].trace = t;
        s->ms[s->nm].gflops = gflops;
        s->nm++;
        s->n_ok++;
    }
    if (!s->model || !feat)
        return;
    if (gflops > s->norm) {
        if (s->norm > 0)
            te__gbt_scale_targets(s->model, s->norm / gflops);
        s->norm = gflops;
    }
    double y = s->norm > 0 ? gflops / s->norm : 0;
    /* Weight the fast ones more: ranking among good candidates is what matters. */
    te__gbt_add(s->model, feat, y, 0.25 + y);
    s->model_dirty = 1;
}

void te__search_update(te__search *s, const char *trace, const float *feat, double gflops)
{
    if (s && trace)
        add_measured(s, trace, feat, gflops);
}

void te__search_seed(te__search *s, const char *trace, const float *feat, double gflops)
{
    if (s && trace)
        add_measured(s, trace, feat, gflops);
}

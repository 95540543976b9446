/*
 * A random schedule generator for tests: applies random primitives with random arguments
 * (cache_write, rfactor, cache_read, compute_inline, compute_at, compute_root, split,
 * split_nparts, tile, fuse, reorder, vectorize, unroll, parallel, the unroll pragma,
 * streaming stores). Refusals are expected and ignored: an illegal request must leave the
 * schedule unchanged, so every schedule that results must still compute the right answer.
 */
#ifndef TESSERA_TESTS_RAND_SCHEDULE_H
#define TESSERA_TESTS_RAND_SCHEDULE_H

#include "tessera/schedule.h"
#include "testutil.h"

static te_iter *rs_leaf(te_stage *st, tt_rng *r)
{
    int n = te_stage_nleaves(st);
    return n ? te_stage_leaf(st, (int)tt_rng_int(r, n)) : NULL;
}

static void rs_loops(te_stage *st, tt_rng *r)
{
    int rounds = (int)tt_rng_int(r, 5);
    for (int q = 0; q < rounds; q++) {
        te_iter *x = rs_leaf(st, r);
        if (!x)
            return;
        int64_t e = te_iter_extent(x);
        int n = te_stage_nleaves(st);
        switch (tt_rng_int(r, 6)) {
        case 0:
        case 1:
            te_split(st, x, 1 + tt_rng_int(r, e + 1), NULL, NULL);
            break;
        case 2:
            te_split_nparts(st, x, 1 + tt_rng_int(r, e + 1), NULL, NULL);
            break;
        case 3:
            for (int i = 0; i + 1 < n; i++)
                if (te_stage_leaf(st, i) == x) {
                    if (tt_rng_int(r, 2))
                        te_fuse(st, x, te_stage_leaf(st, i + 1), NULL);
                    else
                        te_tile(st, x, te_stage_leaf(st, i + 1), 1 + tt_rng_int(r, 5),
                                1 + tt_rng_int(r, 9), NULL, NULL, NULL, NULL);
                    break;
                }
            break;
        default: {
            te_iter *order[64];
            for (int i = 0; i < n && i < 64; i++)
                order[i] = te_stage_leaf(st, i);
            for (int i = n - 1; i > 0; i--) {
                int j = (int)tt_rng_int(r, i + 1);
                te_iter *t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
            te_reorder(st, n, order);
        }
        }
    }
}

static void rs_annotations(te_stage *st, tt_rng *r)
{
    int n = te_stage_nleaves(st);
    if (n && tt_rng_int(r, 2)) {
        te_iter *in = te_stage_leaf(st, n - 1);
        if (te_iter_extent(in) <= 64)
            te_vectorize(st, in);
    }
    if (tt_rng_int(r, 3) == 0) {
        te_iter *x = rs_leaf(st, r);
        if (x && te_iter_extent(x) <= 8)
            te_unroll(st, x);
    }
    if (tt_rng_int(r, 3) == 0)
        te_parallel(st, rs_leaf(st, r));
    if (tt_rng_int(r, 4) == 0)
        te_pragma_unroll_max(st, (int)tt_rng_int(r, 3) * 16);
    if (tt_rng_int(r, 5) == 0)
        te_stage_nontemporal(st, tt_rng_int(r, 2));
}

static void rs_schedule(te_schedule *s, int n_in, te_tensor *const *in_tensors, tt_rng *r)
{
    int n = te_schedule_nstages(s);
    te_tensor *red[32];
    int nred = 0;
    for (int i = 0; i < n && nred < 32; i++) {
        te_stage *st = te_schedule_stage_at(s, i);
        if (te_stage_nreduce(st) > 0)
            red[nred++] = te_stage_tensor(st);
    }
    for (int i = 0; i < nred; i++)
        if (tt_rng_int(r, 3) == 0)
            te_cache_write(s, red[i], TE_SCOPE_LOCAL);
    /* rfactor of a split reduction axis (before any other transformation of the stage). */
    n = te_schedule_nstages(s);
    for (int i = 0; i < n; i++) {
        te_stage *st = te_schedule_stage_at(s, i);
        te_iter *k = te_stage_nreduce(st) == 1 ? te_stage_reduce_axis(st, 0) : NULL, *ko, *ki;
        if (k && tt_rng_int(r, 4) == 0 &&
            te_split(st, k, 1 + tt_rng_int(r, te_iter_extent(k)), &ko, &ki) == TE_OK)
            te_rfactor(s, te_stage_tensor(st), tt_rng_int(r, 2) ? ki : ko);
    }
    /* cache_read of an input into a copy read by one of its readers. */
    if (tt_rng_int(r, 3) == 0 && n_in) {
        te_tensor *in = in_tensors[tt_rng_int(r, n_in)];
        n = te_schedule_nstages(s);
        for (int i = 0; i < n; i++) {
            te_stage *st = te_schedule_stage_at(s, (int)((i + tt_rng_int(r, n)) % n));
            if (te_cache_read(s, in, TE_SCOPE_GLOBAL, 1, &st))
                break;
        }
    }
    n = te_schedule_nstages(s);
    for (int i = n - 1; i >= 0; i--) {
        te_stage *st = te_schedule_stage_at(s, i);
        int64_t pick = tt_rng_int(r, 9);
        if (pick < 2) {
            te_compute_inline(st);
        } else if (pick < 5 && i + 1 < n) {
            te_stage *p = te_schedule_stage_at(s, i + 1 + (int)tt_rng_int(r, n - i - 1));
            te_compute_at(st, p, rs_leaf(p, r));
        } else if (pick == 5) {
            te_compute_root(st);
        }
        rs_loops(st, r);
        rs_annotations(st, r);
    }
    te_ctx_clear_error(te_schedule_ctx(s));
}

#endif

/* Memory planning of fused graphs' intermediates: liveness against the plan (every reader
 * inside a buffer's lifetime, readers of its views included), no two simultaneously-live
 * buffers overlapping in the pool, a group's inputs and outputs never sharing bytes (but a
 * view's: a reshape is its root's bytes), views with no buffer of their own, alignment, the
 * pool against a brute-force optimum on small random graphs (with and without reshapes), and
 * the graph run from the pool (one allocation, poisoned) against the float64 reference. */
/* cmocka.h needs these first. */
// clang-format off
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
// clang-format on

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/graph.h"
#include "testutil.h"

static te_fuse_target target(void) { return tt_fuse_target(1 << 20); }

/* A random graph of n nodes on rows of 4: matmuls by random-width constants, adds of two
 * values of one width, tanh, and with `reshapes` reshapes to the same shape (views where
 * nothing fuses them); the last value and one random other are outputs. */
static void random_graph(te_graph *g, uint64_t seed, int n, int reshapes)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
#define RND(m) (s ^= s << 13, s ^= s >> 7, s ^= s << 17, (int)(s % (uint64_t)(m)))
    int vals[64], width[64], nv = 0;
    vals[nv] = te_graph_input(g, "x", TE_F32, 2, (int64_t[]){4, 8});
    width[nv++] = 8;
    for (int i = 0; i < n; i++) {
        int a = RND(nv), kind = RND(reshapes ? 4 : 3), v;
        char name[16];
        snprintf(name, sizeof name, "v%d", i);
        if (kind == 0) {
            int w = 4 + 4 * RND(6);
            char wn[16];
            snprintf(wn, sizeof wn, "w%d", i);
            int c = te_graph_const_random(g, wn, TE_F32, 2, (int64_t[]){width[a], w}, 10 + i, -0.5,
                                          0.5);
            v = te_graph_node(g, "matmul", NULL, 2, (int[]){vals[a], c}, name);
            width[nv] = w;
        } else if (kind == 3) {
            char shape[32];
            snprintf(shape, sizeof shape, "shape=4:%d", width[a]);
            v = te_graph_node(g, "reshape", shape, 1, (int[]){vals[a]}, name);
            width[nv] = width[a];
        } else {
            int b = -1;
            for (int k = nv - 1; k >= 0 && b < 0 && kind == 1; k--)
                if (k != a && width[k] == width[a])
                    b = k;
            if (b >= 0)
                v = te_graph_node(g, "add", NULL, 2, (int[]){vals[a], vals[b]}, name);
            else
                v = te_graph_node(g, "tanh", NULL, 1, (int[]){vals[a]}, name);
            width[nv] = width[a];
        }
        vals[nv++] = v;
    }
    te_graph_output(g, vals[nv - 1]);
    te_graph_output(g, vals[1 + RND(nv - 1)]);
#undef RND
    if (te_graph_errcode(g))
        fail_msg("%s", te_graph_errmsg(g));
}

/* The value whose storage v shares, from the plan alone: views (te_fuse_group.view) followed
 * back to a value that is not a view's output. */
static int root_of(te_graph *g, const te_fuse_plan *p, int v)
{
    for (;;) {
        int n = te_graph_value_producer(g, v);
        te_fuse_group gr;
        if (n < 0 || te_fuse_plan_group(p, te_fuse_plan_group_of(p, n), &gr) || !gr.view)
            return v;
        v = te_graph_node_input(g, n, 0);
    }
}

/* The checks every plan must pass; returns the number of buffers. step: the plan's steps (NULL:
 * step gi for group gi). */
static int check_invariants_steps(te_graph *g, const te_fuse_plan *p, const te_graph_memplan *m,
                                  const int *step)
{
#define STEP(gi) (step ? step[gi] : (gi))
    te_graph_mem_stats st;
    te_graph_memplan_stats(m, &st);
    te_graph_mem_buffer b[64];
    assert_true(st.n_buffers <= 64);
    size_t end = 0, fused = 0;
    /* Views: no buffer, the root's offset, a root that is no view. */
    for (int v = 0; v < te_graph_value_count(g); v++) {
        int r = root_of(g, p, v);
        assert_int_equal(te_graph_memplan_alias(m, v), r);
        assert_int_equal(te_graph_memplan_offset(m, v), te_graph_memplan_offset(m, r));
        if (r != v) {
            assert_false(te_graph_value_is_output(g, v));
            assert_string_equal(te_graph_node_op(g, te_graph_value_producer(g, v)), "reshape");
        }
    }
    for (int i = 0; i < st.n_buffers; i++) {
        assert_int_equal(te_graph_memplan_buffer(m, i, &b[i]), TE_OK);
        int v = b[i].value;
        size_t bytes =
            (size_t)te_graph_value_numel(g, v) * te_dtype_size(te_graph_value_dtype(g, v));
        fused += bytes;
        assert_true(b[i].bytes >= bytes);
        assert_int_equal(b[i].offset % TE_GRAPH_MEM_ALIGN, 0);
        assert_int_equal(b[i].bytes % TE_GRAPH_MEM_ALIGN, 0);
        assert_int_equal((int64_t)b[i].offset, te_graph_memplan_offset(m, v));
        assert_false(te_graph_value_is_output(g, v));
        assert_int_equal(te_graph_memplan_alias(m, v), v);
        /* Liveness: written by group `first`, every reader of it or of a view of it within
         * [first, last], the last one at `last`. */
        assert_int_equal(STEP(te_fuse_plan_group_of(p, te_graph_value_producer(g, v))), b[i].first);
        int last = b[i].first;
        for (int n = 0; n < te_graph_node_count(g); n++)
            for (int k = 0; k < te_graph_node_ninputs(g, n); k++)
                if (root_of(g, p, te_graph_node_input(g, n, k)) == v &&
                    STEP(te_fuse_plan_group_of(p, n)) > last)
                    last = STEP(te_fuse_plan_group_of(p, n));
        assert_int_equal(b[i].last, last);
        if (b[i].offset + b[i].bytes > end)
            end = b[i].offset + b[i].bytes;
    }
    assert_int_equal(st.pool_bytes, end);
    assert_int_equal(st.fused_bytes, fused);
    assert_true(st.live_bytes <= st.pool_bytes);
    assert_true(st.fused_bytes <= st.unfused_bytes);
    /* No two buffers live at one time share a byte. */
    for (int i = 0; i < st.n_buffers; i++)
        for (int j = i + 1; j < st.n_buffers; j++) {
            int live = b[i].first <= b[j].last && b[j].first <= b[i].last;
            int mem =
                b[i].offset < b[j].offset + b[j].bytes && b[j].offset < b[i].offset + b[i].bytes;
            if (live && mem)
                fail_msg("'%s' and '%s' are live together and overlap",
                         te_graph_value_name(g, b[i].value), te_graph_value_name(g, b[j].value));
        }
    /* A kernel's inputs (read through any views) and outputs never share a byte. */
    for (int gi = 0; gi < te_fuse_plan_group_count(p); gi++) {
        te_fuse_group gr;
        te_fuse_plan_group(p, gi, &gr);
        if (gr.view)
            continue;
        for (int o = 0; o < gr.n_outputs; o++) {
            int64_t oo = te_graph_memplan_offset(m, gr.outputs[o]);
            int64_t ob = te_graph_value_numel(g, gr.outputs[o]) *
                         (int64_t)te_dtype_size(te_graph_value_dtype(g, gr.outputs[o]));
            for (int i = 0; oo >= 0 && i < gr.n_nodes; i++)
                for (int k = 0; k < te_graph_node_ninputs(g, gr.nodes[i]); k++) {
                    int v = te_graph_node_input(g, gr.nodes[i], k);
                    int64_t io = te_graph_memplan_offset(m, v);
                    int64_t ib = te_graph_value_numel(g, v) *
                                 (int64_t)te_dtype_size(te_graph_value_dtype(g, v));
                    int inside = te_graph_value_producer(g, v) >= 0 &&
                                 te_fuse_plan_group_of(p, te_graph_value_producer(g, v)) == gi;
                    if (!inside && io >= 0 && io < oo + ob && oo < io + ib)
                        fail_msg("group %d reads '%s' and writes '%s' in shared bytes", gi,
                                 te_graph_value_name(g, v), te_graph_value_name(g, gr.outputs[o]));
                }
        }
    }
    return st.n_buffers;
#undef STEP
}

static int check_invariants(te_graph *g, const te_fuse_plan *p, const te_graph_memplan *m)
{
    return check_invariants_steps(g, p, m, NULL);
}

/* The smallest pool of any placement: first-fit (lowest offset) over every order of the
 * buffers reaches every optimal placement (take the buffers of one by increasing offset). */
static size_t brute_force(const te_graph_mem_buffer *b, int n)
{
    int perm[8];
    for (int i = 0; i < n; i++)
        perm[i] = i;
    size_t best = (size_t)-1;
    for (;;) {
        size_t off[8], pool = 0;
        for (int k = 0; k < n; k++) {
            const te_graph_mem_buffer *x = &b[perm[k]];
            size_t at = 0;
            for (int moved = 1; moved;) {
                moved = 0;
                for (int j = 0; j < k; j++) {
                    const te_graph_mem_buffer *y = &b[perm[j]];
                    if (x->first <= y->last && y->first <= x->last && at < off[j] + y->bytes &&
                        off[j] < at + x->bytes) {
                        at = off[j] + y->bytes;
                        moved = 1;
                    }
                }
            }
            off[k] = at;
            if (at + x->bytes > pool)
                pool = at + x->bytes;
        }
        if (pool < best)
            best = pool;
        /* next permutation */
        int i = n - 2;
        while (i >= 0 && perm[i] > perm[i + 1])
            i--;
        if (i < 0)
            break;
        int j = n - 1;
        while (perm[j] < perm[i])
            j--;
        int t = perm[i];
        perm[i] = perm[j], perm[j] = t;
        for (int a = i + 1, z = n - 1; a < z; a++, z--)
            t = perm[a], perm[a] = perm[z], perm[z] = t;
    }
    return best;
}

/* Random graphs (with reshapes: some views) planned within the brute-force bounds. */
static void random_graphs_within_bounds(int reshapes, int *views_seen)
{
    te_fuse_target t = target();
    int tried = 0, reused = 0;
    for (uint64_t seed = 1; seed <= 60; seed++) {
        te_graph *g = te_graph_create();
        random_graph(g, seed, 10, reshapes);
        te_fuse_plan *p = te_graph_fuse(g, NULL, &t);
        assert_non_null(p);
        te_graph_memplan *m = NULL;
        assert_int_equal(te_graph_memplan_create(p, &m), TE_OK);
        int n = check_invariants(g, p, m);
        for (int gi = 0; views_seen && gi < te_fuse_plan_group_count(p); gi++) {
            te_fuse_group gr;
            te_fuse_plan_group(p, gi, &gr);
            *views_seen += gr.view;
        }
        te_graph_mem_stats st;
        te_graph_memplan_stats(m, &st);
        if (n >= 2 && n <= 7) {
            te_graph_mem_buffer b[8];
            for (int i = 0; i < n; i++)
                te_graph_memplan_buffer(m, i, &b[i]);
            size_t opt = brute_force(b, n);
            if (!(st.live_bytes <= opt && opt <= st.pool_bytes && st.pool_bytes <= opt + opt / 2))
                fail_msg("seed %d: live %zu, optimum %zu, pool %zu", (int)seed, st.live_bytes, opt,
                         st.pool_bytes);
            tried++;
        }
        reused += st.pool_bytes < st.fused_bytes;
        te_graph_memplan_free(m);
        te_fuse_plan_free(p);
        te_graph_free(g);
    }
    assert_true(tried >= 10);
    assert_true(reused >= 5);
}

static void test_random_graphs_plan_within_bounds(void **state)
{
    (void)state;
    random_graphs_within_bounds(0, NULL);
}

static void test_random_graphs_with_reshape_views_plan_within_bounds(void **state)
{
    (void)state;
    int views = 0;
    random_graphs_within_bounds(1, &views);
    assert_true(views >= 10);
}

static void test_chain_reuses_and_runs_from_the_pool(void **state)
{
    (void)state;
    /* Five matmuls in a chain: m1 and m3 (and m2 and m4) are never live together. */
    te_graph *g = te_graph_create();
    assert_int_equal(te_graph_parse(g,
                                    "input x f32[16,32]\n"
                                    "const w1 f32[32,32] random seed=1 lo=-0.3 hi=0.3\n"
                                    "const w2 f32[32,32] random seed=2 lo=-0.3 hi=0.3\n"
                                    "const w3 f32[32,32] random seed=3 lo=-0.3 hi=0.3\n"
                                    "const w4 f32[32,32] random seed=4 lo=-0.3 hi=0.3\n"
                                    "const w5 f32[32,16] random seed=5 lo=-0.3 hi=0.3\n"
                                    "m1 = matmul(x, w1)\nm2 = matmul(m1, w2)\n"
                                    "m3 = matmul(m2, w3)\nm4 = matmul(m3, w4)\n"
                                    "y = matmul(m4, w5)\noutput y\n",
                                    "chain.graph"),
                     TE_OK);
    te_fuse_target t = target();
    te_fuse_plan *p = te_graph_fuse(g, NULL, &t);
    assert_non_null(p);
    te_graph_exec *e = NULL;
    if (te_graph_compile(g, p, NULL, &e))
        fail_msg("%s", te_graph_errmsg(g));
    const te_graph_memplan *m = te_graph_exec_memplan(e);
    te_graph_mem_stats st;
    te_graph_memplan_stats(m, &st);
    check_invariants(g, p, m);
    assert_int_equal(st.n_buffers, 4);
    assert_int_equal(st.fused_bytes, 4 * 16 * 32 * 4);
    assert_int_equal(st.pool_bytes, 2 * 16 * 32 * 4);
    assert_int_equal(te_graph_memplan_offset(m, te_graph_find(g, "m1")),
                     te_graph_memplan_offset(m, te_graph_find(g, "m3")));
    /* The pool is poisoned before the first run: every pooled value reads as NaN. */
    for (int i = 0; i < st.n_buffers; i++) {
        te_graph_mem_buffer b;
        te_graph_memplan_buffer(m, i, &b);
        const float *x0 = te_graph_exec_value(e, b.value);
        for (int64_t j = 0; j < te_graph_value_numel(g, b.value); j++)
            assert_true(x0[j] != x0[j]);
    }
    tt_rng rng;
    tt_rng_seed(&rng, 7);
    float x[16 * 32], y[16 * 16];
    tt_fill_f32(&rng, x, 16 * 32);
    const void *in[1] = {x};
    double want[16 * 16], *wp = want;
    int yv = te_graph_find(g, "y");
    assert_int_equal(te_graph_eval_reference(g, in, 1, &yv, &wp), TE_OK);
    for (int run = 0; run < 2; run++) { /* the pool is poisoned by compile; reused by run 2 */
        tt_poison_f32(y, 16 * 16);
        if (te_graph_run(e, in, (void *const[]){y}))
            fail_msg("%s", te_graph_errmsg(g));
        assert_true(tt_max_rel_err_f32(y, want, 16 * 16) <= 1e-5);
    }
    te_graph_exec_free(e);
    te_fuse_plan_free(p);
    te_graph_free(g);
}

/* Views of an intermediate (a chain of two), of a graph input and of a constant: none is a
 * buffer, each has its root's offset, and the root stays live until the last reader of its
 * views; the graph runs from the pool and matches the reference. */
static void test_views_share_their_roots_storage_and_extend_its_life(void **state)
{
    (void)state;
    te_graph *g = te_graph_create();
    assert_int_equal(te_graph_parse(g,
                                    "input x f32[8,16]\n"
                                    "const w1 f32[16,16] random seed=1 lo=-0.3 hi=0.3\n"
                                    "const w2 f32[8,8] random seed=2 lo=-0.3 hi=0.3\n"
                                    "const c f32[2,64] random seed=3 lo=-0.3 hi=0.3\n"
                                    "m1 = matmul(x, w1)\n"
                                    "a = reshape(m1) shape=16:8\n"
                                    "b = reshape(a) shape=32:4\n"
                                    "t = tanh(a)\n"
                                    "m2 = matmul(t, w2)\n"
                                    "m3 = matmul(m2, w2)\n"
                                    "xr = reshape(x) shape=32:4\n"
                                    "cr = reshape(c) shape=4:32\n"
                                    "m4 = matmul(b, cr)\n"
                                    "m5 = matmul(xr, cr)\n"
                                    "y = add(m4, m5)\n"
                                    "output y, m3\n",
                                    "views.graph"),
                     TE_OK);
    te_fuse_target t = target();
    te_fuse_plan *p = te_graph_fuse(g, NULL, &t);
    assert_non_null(p);
    int va = te_graph_find(g, "a"), vb = te_graph_find(g, "b"), m1 = te_graph_find(g, "m1");
    int xr = te_graph_find(g, "xr"), cr = te_graph_find(g, "cr");
    int views = 0;
    for (int gi = 0; gi < te_fuse_plan_group_count(p); gi++) {
        te_fuse_group gr;
        te_fuse_plan_group(p, gi, &gr);
        views += gr.view;
    }
    assert_int_equal(views, 4); /* a, b, xr, cr */
    te_graph_memplan *m = NULL;
    assert_int_equal(te_graph_memplan_create(p, &m), TE_OK);
    check_invariants(g, p, m);
    assert_int_equal(te_graph_memplan_alias(m, va), m1);
    assert_int_equal(te_graph_memplan_alias(m, vb), m1); /* through a */
    assert_int_equal(te_graph_memplan_alias(m, xr), te_graph_find(g, "x"));
    assert_int_equal(te_graph_memplan_alias(m, cr), te_graph_find(g, "c"));
    assert_int_equal(te_graph_memplan_alias(m, m1), m1);
    assert_true(te_graph_memplan_offset(m, m1) >= 0);
    assert_int_equal(te_graph_memplan_offset(m, vb), te_graph_memplan_offset(m, m1));
    assert_int_equal(te_graph_memplan_offset(m, xr), -1);
    assert_int_equal(te_graph_memplan_offset(m, cr), -1);
    te_graph_mem_stats st;
    te_graph_memplan_stats(m, &st);
    /* m1, t, m2, m4, m5 (y's group may take the add: then m4 or m5 is inside it). */
    int m1_last = -1;
    for (int i = 0; i < st.n_buffers; i++) {
        te_graph_mem_buffer bb;
        te_graph_memplan_buffer(m, i, &bb);
        assert_true(bb.value != va && bb.value != vb && bb.value != xr && bb.value != cr);
        if (bb.value == m1)
            m1_last = bb.last;
    }
    /* m1 lives until m4, which reads it through a -> b. */
    int g4 = te_fuse_plan_group_of(p, te_graph_value_producer(g, te_graph_find(g, "m4")));
    assert_int_equal(m1_last, g4);
    /* The same over steps (two groups per step where the order allows it). */
    int ng = te_fuse_plan_group_count(p), step[64];
    assert_true(ng <= 64);
    for (int gi = 0; gi < ng; gi++)
        step[gi] = gi / 2;
    te_graph_memplan *ms = NULL;
    assert_int_equal(te_graph_memplan_create_steps(p, step, &ms), TE_OK);
    check_invariants_steps(g, p, ms, step);
    te_graph_memplan_free(ms);
    te_graph_memplan_free(m);

    /* Run from the pool (poisoned), twice, against the reference. */
    te_graph_exec *e = NULL;
    if (te_graph_compile(g, p, NULL, &e))
        fail_msg("%s", te_graph_errmsg(g));
    for (int gi = 0; gi < ng; gi++) /* the executable plans over its waves */
        step[gi] = te_graph_exec_group_wave(e, gi);
    check_invariants_steps(g, p, te_graph_exec_memplan(e), step);
    assert_ptr_equal(te_graph_exec_value(e, vb), te_graph_exec_value(e, m1));
    assert_ptr_equal(te_graph_exec_value(e, cr), te_graph_value_data(g, te_graph_find(g, "c")));
    tt_rng rng;
    tt_rng_seed(&rng, 9);
    float x[8 * 16], y[32 * 32], y3[16 * 8];
    tt_fill_f32(&rng, x, 8 * 16);
    const void *in[1] = {x};
    int ys[2] = {te_graph_find(g, "y"), te_graph_find(g, "m3")};
    /* Outputs come in value order: m3, then y. */
    assert_int_equal(te_graph_output_value(g, 0), ys[1]);
    assert_int_equal(te_graph_output_value(g, 1), ys[0]);
    static double want_y[32 * 32], want_m3[16 * 8];
    double *wp[2] = {want_y, want_m3};
    assert_int_equal(te_graph_eval_reference(g, in, 2, ys, wp), TE_OK);
    for (int run = 0; run < 2; run++) {
        tt_poison_f32(y, 32 * 32);
        tt_poison_f32(y3, 16 * 8);
        if (te_graph_run(e, in, (void *const[]){y3, y}))
            fail_msg("%s", te_graph_errmsg(g));
        double ey = tt_max_rel_err_f32(y, want_y, 32 * 32);
        if (!(ey <= 1e-5))
            fail_msg("run %d: y: relative error %g (y[0] %g, want %g)", run, ey, y[0], want_y[0]);
        assert_true(tt_max_rel_err_f32(y3, want_m3, 16 * 8) <= 1e-5);
    }
    te_graph_exec_free(e);
    te_fuse_plan_free(p);
    te_graph_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_graphs_plan_within_bounds),
        cmocka_unit_test(test_random_graphs_with_reshape_views_plan_within_bounds),
        cmocka_unit_test(test_views_share_their_roots_storage_and_extend_its_life),
        cmocka_unit_test(test_chain_reuses_and_runs_from_the_pool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Index operators (concat, split, slice, gather, where, expand) and the added reductions
 * (log_softmax, reduce_max, reduce_l2) on random shapes and attributes: the reference
 * interpreter against a naive float64 implementation written here, and the operator built for
 * the CPU with its default schedule against the reference. */
/* cmocka.h needs these first. */
// clang-format off
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
// clang-format on

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/backend.h"
#include "tessera/graph.h"
#include "tessera/ops.h"
#include "testutil.h"

static uint64_t g_seed;
static tt_rng g_rng;

enum { REPS = 40 };

static int64_t numel(int nd, const int64_t *s)
{
    int64_t n = 1;
    for (int d = 0; d < nd; d++)
        n *= s[d];
    return n;
}

/* Row-major strides. */
static void strides(int nd, const int64_t *s, int64_t *st)
{
    int64_t k = 1;
    for (int d = nd - 1; d >= 0; d--) {
        st[d] = k;
        k *= s[d];
    }
}

/* Multi-index of flat position f. */
static void unflat(int nd, const int64_t *s, int64_t f, int64_t *ix)
{
    for (int d = nd - 1; d >= 0; d--) {
        ix[d] = f % s[d];
        f /= s[d];
    }
}

static void rand_shape(int lo, int hi, int maxext, int *nd, int64_t *s)
{
    *nd = lo + (int)tt_rng_int(&g_rng, hi - lo + 1);
    for (int d = 0; d < *nd; d++)
        s[d] = 1 + tt_rng_int(&g_rng, maxext);
}

static float *rnd(int64_t n)
{
    float *p = malloc(sizeof(float) * (size_t)(n ? n : 1));
    tt_fill_f32(&g_rng, p, (size_t)n);
    return p;
}

/* The tensor evaluated by the reference (caller frees), failing the test on error. */
static double *ref(te_ctx *ctx, te_tensor *out, int n_in, te_tensor *const *ins,
                   const void *const *data)
{
    if (!out)
        fail_msg("operator failed: %s (seed %llu)", te_ctx_errmsg(ctx), (unsigned long long)g_seed);
    double *res = malloc(sizeof(double) * (size_t)te_tensor_numel(out));
    if (te_reference_eval(ctx, n_in, ins, data, 1, &out, &res))
        fail_msg("reference failed: %s", te_ctx_errmsg(ctx));
    return res;
}

static void check_close(const double *got, const double *want, int64_t n, double tol,
                        const char *what)
{
    for (int64_t i = 0; i < n; i++) {
        double e = fabs(got[i] - want[i]) / fmax(1.0, fabs(want[i]));
        if (!(e <= tol))
            fail_msg("%s: element %lld is %.9g, want %.9g (seed %llu)", what, (long long)i, got[i],
                     want[i], (unsigned long long)g_seed);
    }
}

/* Builds outs with the default schedule for the CPU, runs it on data and compares every output
 * (f32) with the reference. */
static void check_compiled(te_ctx *ctx, int n_in, te_tensor *const *ins, const void *const *data,
                           int n_out, te_tensor *const *outs, const char *what)
{
    te_schedule *s = te_schedule_create(ctx, n_out, outs);
    assert_non_null(s);
    te_tensor *args[80];
    assert_true(n_in + n_out <= 80);
    memcpy(args, ins, sizeof(te_tensor *) * (size_t)n_in);
    memcpy(args + n_in, outs, sizeof(te_tensor *) * (size_t)n_out);
    te_target tgt = te_target_host();
    te_module *m = NULL;
    if (te_build(s, n_in + n_out, args, "op", &tgt, &m))
        fail_msg("%s: te_build: %s", what, te_ctx_errmsg(ctx));
    void *buf[80];
    memcpy(buf, data, sizeof(void *) * (size_t)n_in);
    for (int o = 0; o < n_out; o++) {
        size_t n = (size_t)te_tensor_numel(outs[o]);
        buf[n_in + o] = malloc(sizeof(float) * n);
        tt_poison_f32(buf[n_in + o], n);
    }
    assert_int_equal(te_module_run(m, buf), TE_OK);
    for (int o = 0; o < n_out; o++) {
        size_t n = (size_t)te_tensor_numel(outs[o]);
        double *want = ref(ctx, outs[o], n_in, ins, data);
        double e = tt_max_rel_err_f32(buf[n_in + o], want, n);
        if (!(e < 1e-5))
            fail_msg("%s output %d: compiled differs from the reference by %g (seed %llu)", what, o,
                     e, (unsigned long long)g_seed);
        free(want);
        free(buf[n_in + o]);
    }
    te_module_free(m);
}

static void test_concat_matches_naive_on_random_shapes(void **state)
{
    (void)state;
    for (int rep = 0; rep < REPS; rep++) {
        te_ctx *ctx = te_ctx_create();
        int nd, n = 1 + (int)tt_rng_int(&g_rng, 4);
        int64_t s[TE_MAX_DIMS];
        rand_shape(1, 4, 4, &nd, s);
        int axis = (int)tt_rng_int(&g_rng, nd);
        te_tensor *X[4];
        float *d[4];
        int64_t ext[4], total = 0;
        for (int i = 0; i < n; i++) {
            int64_t si[TE_MAX_DIMS];
            memcpy(si, s, sizeof si);
            si[axis] = ext[i] = 1 + tt_rng_int(&g_rng, 4);
            total += ext[i];
            char nm[16];
            snprintf(nm, sizeof nm, "X%d", i);
            X[i] = te_placeholder(ctx, nm, TE_F32, nd, si);
            d[i] = rnd(numel(nd, si));
        }
        int neg = (int)tt_rng_int(&g_rng, 2);
        te_tensor *Y = te_op_concat(ctx, n, X, neg ? axis - nd : axis, "Y");
        double *got = ref(ctx, Y, n, X, (const void *const *)d);
        int64_t os[TE_MAX_DIMS];
        memcpy(os, s, sizeof(int64_t) * (size_t)nd);
        os[axis] = total;
        assert_int_equal(te_tensor_shape(Y)[axis], total);
        int64_t N = numel(nd, os), ix[TE_MAX_DIMS];
        double *want = malloc(sizeof(double) * (size_t)N);
        for (int64_t f = 0; f < N; f++) {
            unflat(nd, os, f, ix);
            int i = 0;
            while (ix[axis] >= ext[i])
                ix[axis] -= ext[i++];
            int64_t si[TE_MAX_DIMS], st[TE_MAX_DIMS], off = 0;
            memcpy(si, s, sizeof si);
            si[axis] = ext[i];
            strides(nd, si, st);
            for (int q = 0; q < nd; q++)
                off += ix[q] * st[q];
            want[f] = d[i][off];
        }
        check_close(got, want, N, 0, "concat");
        if (rep % 4 == 0)
            check_compiled(ctx, n, X, (const void *const *)d, 1, &Y, "concat");
        free(got);
        free(want);
        for (int i = 0; i < n; i++)
            free(d[i]);
        te_ctx_free(ctx);
    }
}

/* Python's slice.indices(): the independent statement of ONNX's clamping rules. */
static int64_t py_slice(int64_t dim, int64_t start, int64_t end, int64_t step, int64_t *idx)
{
    int64_t lower = step > 0 ? 0 : -1, upper = step > 0 ? dim : dim - 1;
    int64_t b = start, e = end;
    if (b < 0) {
        b += dim;
        if (b < lower)
            b = lower;
    } else if (b > upper)
        b = upper;
    if (e < 0) {
        e += dim;
        if (e < lower)
            e = lower;
    } else if (e > upper)
        e = upper;
    int64_t n = 0;
    for (int64_t i = b; step > 0 ? i < e : i > e; i += step)
        idx[n++] = i;
    return n;
}

static int64_t rand_bound(int64_t dim)
{
    switch (tt_rng_int(&g_rng, 6)) {
    case 0:
        return INT64_MAX; /* exporters' "to the end" */
    case 1:
        return -INT64_MAX;
    case 2:
        return -(1 + tt_rng_int(&g_rng, dim + 2));
    default:
        return tt_rng_int(&g_rng, dim + 3);
    }
}

static void test_slice_matches_python_indices_with_negative_steps_and_clamping(void **state)
{
    (void)state;
    int done = 0, empty = 0;
    for (int rep = 0; done < 3 * REPS; rep++) {
        int nd;
        int64_t s[TE_MAX_DIMS];
        rand_shape(1, 4, 6, &nd, s);
        int n = 1 + (int)tt_rng_int(&g_rng, nd), axes[TE_MAX_DIMS];
        int64_t st[TE_MAX_DIMS], en[TE_MAX_DIMS], sp[TE_MAX_DIMS];
        int64_t sel[TE_MAX_DIMS][64], cnt[TE_MAX_DIMS];
        bool used[TE_MAX_DIMS] = {0};
        for (int d = 0; d < nd; d++) {
            cnt[d] = s[d];
            for (int64_t i = 0; i < s[d]; i++)
                sel[d][i] = i;
        }
        bool is_empty = false;
        for (int i = 0; i < n; i++) {
            int a;
            do
                a = (int)tt_rng_int(&g_rng, nd);
            while (used[a]);
            used[a] = true;
            axes[i] = tt_rng_int(&g_rng, 2) ? a - nd : a;
            st[i] = rand_bound(s[a]);
            en[i] = rand_bound(s[a]);
            sp[i] = (1 + tt_rng_int(&g_rng, 3)) * (tt_rng_int(&g_rng, 2) ? -1 : 1);
            cnt[a] = py_slice(s[a], st[i], en[i], sp[i], sel[a]);
            is_empty |= cnt[a] == 0;
        }
        te_ctx *ctx = te_ctx_create();
        te_tensor *X = te_placeholder(ctx, "X", TE_F32, nd, s);
        te_tensor *Y = te_op_slice(ctx, X, n, axes, st, en, sp, "Y");
        if (is_empty) {
            assert_null(Y);
            assert_int_equal(te_ctx_errcode(ctx), TE_ERR_SHAPE);
            assert_non_null(strstr(te_ctx_errmsg(ctx), "is empty"));
            te_ctx_free(ctx);
            empty++;
            continue;
        }
        float *d = rnd(numel(nd, s));
        double *got = ref(ctx, Y, 1, &X, (const void *const *)&d);
        int64_t N = numel(nd, cnt), ix[TE_MAX_DIMS], xst[TE_MAX_DIMS];
        strides(nd, s, xst);
        for (int q = 0; q < nd; q++)
            assert_int_equal(te_tensor_shape(Y)[q], cnt[q]);
        double *want = malloc(sizeof(double) * (size_t)N);
        for (int64_t f = 0; f < N; f++) {
            unflat(nd, cnt, f, ix);
            int64_t off = 0;
            for (int q = 0; q < nd; q++)
                off += sel[q][ix[q]] * xst[q];
            want[f] = d[off];
        }
        check_close(got, want, N, 0, "slice");
        if (done % 8 == 0)
            check_compiled(ctx, 1, &X, (const void *const *)&d, 1, &Y, "slice");
        free(got);
        free(want);
        free(d);
        te_ctx_free(ctx);
        done++;
    }
    assert_true(empty > 0); /* the random bounds reach the empty case too */
}

static void test_split_parts_are_slices(void **state)
{
    (void)state;
    for (int rep = 0; rep < REPS; rep++) {
        int nd;
        int64_t s[TE_MAX_DIMS];
        rand_shape(1, 3, 7, &nd, s);
        int axis = (int)tt_rng_int(&g_rng, nd);
        int n = 1 + (int)tt_rng_int(&g_rng, s[axis]);
        int64_t sizes[8], left = s[axis];
        bool given = n <= 8 && tt_rng_int(&g_rng, 2);
        for (int i = 0; given && i < n; i++) {
            sizes[i] = i == n - 1 ? left : 1 + tt_rng_int(&g_rng, left - (n - 1 - i));
            left -= sizes[i];
        }
        te_ctx *ctx = te_ctx_create();
        te_tensor *X = te_placeholder(ctx, "X", TE_F32, nd, s), *out[64];
        if (n > 64)
            n = 64;
        int rc = te_op_split(ctx, X, axis, n, given ? sizes : NULL, out, "Y");
        if (!given && n > 1 && (s[axis] + n - 1) / n * (n - 1) >= s[axis]) {
            /* ceil(dim / n) per part leaves nothing for the last one */
            assert_int_equal(rc, TE_ERR_SHAPE);
            te_ctx_free(ctx);
            continue;
        }
        if (rc)
            fail_msg("split: %s", te_ctx_errmsg(ctx));
        float *d = rnd(numel(nd, s));
        int64_t off = 0, xst[TE_MAX_DIMS], ix[TE_MAX_DIMS];
        strides(nd, s, xst);
        int64_t chunk = (s[axis] + n - 1) / n;
        for (int i = 0; i < n; i++) {
            int64_t want_ext = given ? sizes[i] : i < n - 1 ? chunk : s[axis] - chunk * (n - 1);
            assert_int_equal(te_tensor_shape(out[i])[axis], want_ext);
            char nm[16];
            snprintf(nm, sizeof nm, "Y_%d", i);
            assert_string_equal(te_tensor_name(out[i]), nm);
            double *got = ref(ctx, out[i], 1, &X, (const void *const *)&d);
            int64_t N = te_tensor_numel(out[i]);
            for (int64_t f = 0; f < N; f++) {
                unflat(nd, te_tensor_shape(out[i]), f, ix);
                ix[axis] += off;
                int64_t o = 0;
                for (int q = 0; q < nd; q++)
                    o += ix[q] * xst[q];
                assert_true(got[f] == d[o]);
            }
            free(got);
            off += want_ext;
        }
        if (rep % 8 == 0)
            check_compiled(ctx, 1, &X, (const void *const *)&d, n, out, "split");
        free(d);
        te_ctx_free(ctx);
    }
}

static void test_gather_with_negative_indices_on_any_axis(void **state)
{
    (void)state;
    for (int rep = 0; rep < REPS; rep++) {
        int nd, ni;
        int64_t s[TE_MAX_DIMS], is[TE_MAX_DIMS];
        rand_shape(1, 3, 5, &nd, s);
        rand_shape(1, 2, 4, &ni, is);
        int axis = (int)tt_rng_int(&g_rng, nd);
        te_dtype idt = tt_rng_int(&g_rng, 4) ? TE_I64 : TE_I32;
        te_ctx *ctx = te_ctx_create();
        te_tensor *X = te_placeholder(ctx, "X", TE_F32, nd, s);
        te_tensor *I = te_placeholder(ctx, "I", idt, ni, is);
        int64_t nidx = numel(ni, is), dim = s[axis];
        int64_t *iv = malloc(sizeof(int64_t) * (size_t)nidx);
        int32_t *iv32 = malloc(sizeof(int32_t) * (size_t)nidx);
        for (int64_t k = 0; k < nidx; k++) {
            iv[k] = tt_rng_int(&g_rng, 2 * dim) - dim; /* [-dim, dim) */
            iv32[k] = (int32_t)iv[k];
        }
        float *d = rnd(numel(nd, s));
        te_tensor *Y = te_op_gather(ctx, X, I, tt_rng_int(&g_rng, 2) ? axis - nd : axis, "Y");
        te_tensor *ins[] = {X, I};
        const void *data[] = {d, idt == TE_I64 ? (void *)iv : (void *)iv32};
        double *got = ref(ctx, Y, 2, ins, data);
        int ro = te_tensor_ndim(Y);
        assert_int_equal(ro, nd + ni - 1);
        int64_t N = te_tensor_numel(Y), ix[TE_MAX_DIMS], xst[TE_MAX_DIMS], ist[TE_MAX_DIMS];
        strides(nd, s, xst);
        strides(ni, is, ist);
        double *want = malloc(sizeof(double) * (size_t)N);
        for (int64_t f = 0; f < N; f++) {
            unflat(ro, te_tensor_shape(Y), f, ix);
            int64_t k = 0, off = 0;
            for (int q = 0; q < ni; q++)
                k += ix[axis + q] * ist[q];
            int64_t j = iv[k] < 0 ? iv[k] + dim : iv[k];
            for (int q = 0; q < nd; q++)
                off += (q < axis ? ix[q] : q == axis ? j : ix[q + ni - 1]) * xst[q];
            want[f] = d[off];
        }
        check_close(got, want, N, 0, "gather");
        if (rep % 4 == 0)
            check_compiled(ctx, 2, ins, data, 1, &Y, "gather");
        free(got);
        free(want);
        free(iv);
        free(iv32);
        free(d);
        te_ctx_free(ctx);
    }
}

static void test_gather_clamps_out_of_range_indices_and_refuses_float_indices(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    te_tensor *X = te_placeholder(ctx, "X", TE_F32, 1, (int64_t[]){4});
    te_tensor *I = te_placeholder(ctx, "I", TE_I64, 1, (int64_t[]){3});
    te_tensor *Y = te_op_gather(ctx, X, I, 0, "Y");
    float d[4] = {1, 2, 3, 4};
    int64_t iv[3] = {9, -9, -1};
    double *got = ref(ctx, Y, 2, (te_tensor *[]){X, I}, (const void *[]){d, iv});
    assert_true(got[0] == 4 && got[1] == 1 && got[2] == 4);
    free(got);
    te_tensor *F = te_placeholder(ctx, "F", TE_F32, 1, (int64_t[]){3});
    assert_null(te_op_gather(ctx, X, F, 0, "Z"));
    assert_int_equal(te_ctx_errcode(ctx), TE_ERR_DTYPE);
    assert_non_null(strstr(te_ctx_errmsg(ctx), "indices 'F'"));
    te_ctx_free(ctx);
}

/* A random shape that broadcasts to s (rank nd): a suffix with some extents set to 1. */
static int bshape(int nd, const int64_t *s, int64_t *out)
{
    int r = 1 + (int)tt_rng_int(&g_rng, nd);
    for (int d = 0; d < r; d++)
        out[d] = tt_rng_int(&g_rng, 3) ? s[nd - r + d] : 1;
    return r;
}

/* Flat offset in a broadcast operand of rank r, shape bs, for output index ix (rank nd). */
static int64_t boff(int nd, const int64_t *ix, int r, const int64_t *bs)
{
    int64_t st[TE_MAX_DIMS], off = 0;
    strides(r, bs, st);
    for (int d = 0; d < r; d++)
        off += (bs[d] == 1 ? 0 : ix[nd - r + d]) * st[d];
    return off;
}

static void test_where_broadcasts_bool_u8_and_float_conditions(void **state)
{
    (void)state;
    for (int rep = 0; rep < REPS; rep++) {
        int nd;
        int64_t s[TE_MAX_DIMS], cs[TE_MAX_DIMS], xs[TE_MAX_DIMS], ys[TE_MAX_DIMS];
        rand_shape(1, 4, 4, &nd, s);
        int rc_ = bshape(nd, s, cs), rx = bshape(nd, s, xs), ry = bshape(nd, s, ys);
        /* the output shape is s only if some operand covers each axis: make X do it */
        rx = nd;
        memcpy(xs, s, sizeof(int64_t) * (size_t)nd);
        te_dtype cdt = (te_dtype[]){TE_BOOL, TE_U8, TE_F32}[tt_rng_int(&g_rng, 3)];
        te_ctx *ctx = te_ctx_create();
        te_tensor *C = te_placeholder(ctx, "C", cdt, rc_, cs);
        te_tensor *X = te_placeholder(ctx, "X", TE_F32, rx, xs);
        te_tensor *Y = te_placeholder(ctx, "Y", TE_F32, ry, ys);
        int64_t nc = numel(rc_, cs);
        uint8_t *cb = malloc((size_t)nc);
        float *cf = malloc(sizeof(float) * (size_t)nc);
        for (int64_t k = 0; k < nc; k++) {
            cb[k] = (uint8_t)tt_rng_int(&g_rng, 2);
            cf[k] = cb[k] ? (float)tt_rng_uniform(&g_rng, -2, 2) : 0.0f;
        }
        float *dx = rnd(numel(rx, xs)), *dy = rnd(numel(ry, ys));
        te_tensor *W = te_op_where(ctx, C, X, Y, "W");
        te_tensor *ins[] = {C, X, Y};
        const void *data[] = {cdt == TE_F32 ? (void *)cf : (void *)cb, dx, dy};
        double *got = ref(ctx, W, 3, ins, data);
        int64_t N = numel(nd, s), ix[TE_MAX_DIMS];
        double *want = malloc(sizeof(double) * (size_t)N);
        for (int64_t f = 0; f < N; f++) {
            unflat(nd, s, f, ix);
            bool c = cb[boff(nd, ix, rc_, cs)];
            want[f] = c ? dx[boff(nd, ix, rx, xs)] : dy[boff(nd, ix, ry, ys)];
        }
        check_close(got, want, N, 0, "where");
        if (rep % 4 == 0)
            check_compiled(ctx, 3, ins, data, 1, &W, "where");
        free(got);
        free(want);
        free(cb);
        free(cf);
        free(dx);
        free(dy);
        te_ctx_free(ctx);
    }
}

/* Builds Y (u8 or f32 elements) for the CPU with the default schedule, runs it on data (output
 * poisoned first) and returns the output as doubles (caller frees). */
static double *run_compiled(te_ctx *ctx, int n_in, te_tensor *const *ins, const void *const *data,
                            te_tensor *Y)
{
    te_schedule *s = te_schedule_create(ctx, 1, &Y);
    assert_non_null(s);
    te_tensor *args[4];
    memcpy(args, ins, sizeof(te_tensor *) * (size_t)n_in);
    args[n_in] = Y;
    te_target tgt = te_target_host();
    te_module *m = NULL;
    if (te_build(s, n_in + 1, args, "op", &tgt, &m))
        fail_msg("te_build: %s", te_ctx_errmsg(ctx));
    size_t n = (size_t)te_tensor_numel(Y);
    te_dtype dt = te_tensor_dtype(Y);
    void *buf[4];
    memcpy(buf, data, sizeof(void *) * (size_t)n_in);
    buf[n_in] = malloc(n * te_dtype_size(dt));
    memset(buf[n_in], 0xA5, n * te_dtype_size(dt)); /* neither 0 nor 1; NaN as f32 bits */
    if (dt == TE_F32)
        tt_poison_f32(buf[n_in], n);
    assert_int_equal(te_module_run(m, buf), TE_OK);
    double *out = malloc(sizeof(double) * n);
    for (size_t i = 0; i < n; i++)
        out[i] = dt == TE_U8 ? ((uint8_t *)buf[n_in])[i] : ((float *)buf[n_in])[i];
    free(buf[n_in]);
    te_module_free(m);
    return out;
}

static void test_compare_logic_not_sign_on_broadcast_shapes(void **state)
{
    (void)state;
    static const te_binop cmp[] = {TE_EQ, TE_NE, TE_LT, TE_LE, TE_GT, TE_GE};
    static const te_binop lg[] = {TE_AND, TE_OR, TE_NE};
    for (int rep = 0; rep < REPS; rep++) {
        int nd;
        int64_t s[TE_MAX_DIMS], as[TE_MAX_DIMS], bs[TE_MAX_DIMS];
        rand_shape(1, 4, 4, &nd, s);
        int ra = nd, rb = bshape(nd, s, bs);
        memcpy(as, s, sizeof(int64_t) * (size_t)nd);
        if (rep % 2) { /* the broadcast operand first */
            ra = bshape(nd, s, as);
            rb = nd;
            memcpy(bs, s, sizeof(int64_t) * (size_t)nd);
        }
        int64_t na = numel(ra, as), nb = numel(rb, bs), N = numel(nd, s), ix[TE_MAX_DIMS];
        te_ctx *ctx = te_ctx_create();
        int kind = rep % 3; /* 0: compare f32, 1: compare i64, 2: logic u8/bool */
        te_binop op = kind < 2 ? cmp[tt_rng_int(&g_rng, 6)] : lg[tt_rng_int(&g_rng, 3)];
        te_dtype da = kind == 0 ? TE_F32 : kind == 1 ? TE_I64 : TE_U8;
        te_dtype db = kind == 2 && tt_rng_int(&g_rng, 2) ? TE_BOOL : da;
        te_tensor *A = te_placeholder(ctx, "A", da, ra, as);
        te_tensor *B = te_placeholder(ctx, "B", db, rb, bs);
        double *va = malloc(sizeof(double) * (size_t)na), *vb = malloc(sizeof(double) * (size_t)nb);
        void *pa = malloc(8 * (size_t)na), *pb = malloc(8 * (size_t)nb);
        for (int64_t k = 0; k < na + nb; k++) {
            bool first = k < na;
            int64_t j = first ? k : k - na;
            te_dtype dt = first ? da : db;
            void *p = first ? pa : pb;
            double v;
            if (dt == TE_F32) { /* few distinct values, so that equality happens */
                v = (float)(0.5 * (double)tt_rng_int(&g_rng, 5) - 1.0);
                ((float *)p)[j] = (float)v;
            } else if (dt == TE_I64) {
                v = (double)(tt_rng_int(&g_rng, 5) - 2);
                ((int64_t *)p)[j] = (int64_t)v;
            } else { /* u8 truth values may be any non-zero byte; bool is 0 / 1 */
                int64_t b = tt_rng_int(&g_rng, 2);
                uint8_t byte = (uint8_t)(b && dt == TE_U8 ? 1 + tt_rng_int(&g_rng, 255) : b);
                ((uint8_t *)p)[j] = byte;
                v = byte != 0;
            }
            (first ? va : vb)[j] = v;
        }
        te_tensor *Y =
            kind < 2 ? te_op_compare(ctx, op, A, B, "Y") : te_op_logic(ctx, op, A, B, "Y");
        assert_non_null(Y);
        assert_int_equal(te_tensor_dtype(Y), TE_U8);
        assert_int_equal(te_tensor_ndim(Y), nd);
        te_tensor *ins[] = {A, B};
        const void *data[] = {pa, pb};
        double *got = ref(ctx, Y, 2, ins, data);
        double *want = malloc(sizeof(double) * (size_t)N);
        for (int64_t f = 0; f < N; f++) {
            unflat(nd, s, f, ix);
            double x = va[boff(nd, ix, ra, as)], y = vb[boff(nd, ix, rb, bs)];
            bool r = false;
            if (kind < 2)
                r = op == TE_EQ   ? x == y
                    : op == TE_NE ? x != y
                    : op == TE_LT ? x < y
                    : op == TE_LE ? x <= y
                    : op == TE_GT ? x > y
                                  : x >= y;
            else
                r = op == TE_AND ? x && y : op == TE_OR ? x || y : (x != 0) != (y != 0);
            want[f] = r;
        }
        char what[64];
        snprintf(what, sizeof what, "%s on %s", te_tensor_tag(Y), te_dtype_str(da));
        check_close(got, want, N, 0, what);
        double *comp = run_compiled(ctx, 2, ins, data, Y);
        check_close(comp, want, N, 0, what);
        free(comp);
        free(got);
        /* not and sign on A */
        te_tensor *Z = kind == 2 ? te_op_not(ctx, A, "Z") : te_op_sign(ctx, A, "Z");
        assert_non_null(Z);
        assert_int_equal(te_tensor_dtype(Z), kind == 2 ? TE_U8 : da);
        if (kind < 2) { /* f32 output for the compiled check: sign of f32 only */
            te_tensor *in1[] = {A};
            const void *d1[] = {pa};
            got = ref(ctx, Z, 1, in1, d1);
            for (int64_t k = 0; k < na; k++)
                want[k] = va[k] > 0 ? 1 : va[k] < 0 ? -1 : 0;
            check_close(got, want, na, 0, "sign");
            free(got);
            if (kind == 0) {
                comp = run_compiled(ctx, 1, in1, d1, Z);
                check_close(comp, want, na, 0, "sign compiled");
                free(comp);
            }
        } else {
            te_tensor *in1[] = {A};
            const void *d1[] = {pa};
            got = ref(ctx, Z, 1, in1, d1);
            for (int64_t k = 0; k < na; k++)
                want[k] = va[k] == 0;
            check_close(got, want, na, 0, "not");
            comp = run_compiled(ctx, 1, in1, d1, Z);
            check_close(comp, want, na, 0, "not compiled");
            free(comp);
            free(got);
        }
        free(want);
        free(va);
        free(vb);
        free(pa);
        free(pb);
        te_ctx_free(ctx);
    }
}

static void test_mod_floor_and_fmod_with_zero_divisors(void **state)
{
    (void)state;
    for (int rep = 0; rep < REPS; rep++) {
        int nd;
        int64_t s[TE_MAX_DIMS], bs[TE_MAX_DIMS], ix[TE_MAX_DIMS];
        rand_shape(1, 3, 5, &nd, s);
        int rb = bshape(nd, s, bs);
        int64_t N = numel(nd, s), nb = numel(rb, bs);
        int fm = rep % 2, flt = rep % 4 == 1;
        te_dtype dt = flt ? TE_F32 : rep % 3 ? TE_I64 : TE_I32;
        te_ctx *ctx = te_ctx_create();
        te_tensor *A = te_placeholder(ctx, "A", dt, nd, s),
                  *B = te_placeholder(ctx, "B", dt, rb, bs);
        void *pa = malloc(8 * (size_t)N), *pb = malloc(8 * (size_t)nb);
        double *va = malloc(sizeof(double) * (size_t)N), *vb = malloc(sizeof(double) * (size_t)nb);
        for (int64_t k = 0; k < N + nb; k++) {
            bool first = k < N;
            int64_t j = first ? k : k - N;
            void *p = first ? pa : pb;
            double v;
            if (flt) {
                v = (float)tt_rng_uniform(&g_rng, 0.25, 4) * (tt_rng_int(&g_rng, 2) ? 1 : -1);
                ((float *)p)[j] = (float)v;
            } else {
                v = (double)(tt_rng_int(&g_rng, first ? 41 : 9) - (first ? 20 : 4)); /* 0, -1 */
                if (dt == TE_I64)
                    ((int64_t *)p)[j] = (int64_t)v;
                else
                    ((int32_t *)p)[j] = (int32_t)v;
            }
            (first ? va : vb)[j] = v;
        }
        te_tensor *Y = te_op_mod(ctx, A, B, fm || flt, "Y");
        te_tensor *ins[] = {A, B};
        const void *data[] = {pa, pb};
        double *got = ref(ctx, Y, 2, ins, data), *want = malloc(sizeof(double) * (size_t)N);
        for (int64_t f = 0; f < N; f++) {
            unflat(nd, s, f, ix);
            double a = va[f], b = vb[boff(nd, ix, rb, bs)];
            if (flt)
                want[f] = (double)((float)a - (float)b * truncf((float)a / (float)b));
            else if (b == 0 || b == -1)
                want[f] = 0;
            else {
                int64_t r = (int64_t)a % (int64_t)b;
                if (!fm && r != 0 && ((r < 0) != (b < 0)))
                    r += (int64_t)b;
                want[f] = (double)r;
            }
        }
        check_close(got, want, N, flt ? 1e-6 : 0, fm ? "fmod" : "floor mod");
        if (flt) {
            for (int64_t f = 0; f < N; f++) { /* and C's fmod, to float rounding */
                unflat(nd, s, f, ix);
                want[f] = fmod(va[f], vb[boff(nd, ix, rb, bs)]);
            }
            check_close(got, want, N, 1e-5, "fmod vs C fmod");
            check_compiled(ctx, 2, ins, data, 1, &Y, "fmod");
        } else { /* compiled, integer output */
            te_schedule *sc = te_schedule_create(ctx, 1, &Y);
            te_tensor *args[] = {A, B, Y};
            te_target tgt = te_target_host();
            te_module *m = NULL;
            if (te_build(sc, 3, args, "mod", &tgt, &m))
                fail_msg("te_build: %s", te_ctx_errmsg(ctx));
            void *out = malloc(8 * (size_t)N);
            memset(out, 0x5A, 8 * (size_t)N);
            assert_int_equal(te_module_run(m, (void *[]){pa, pb, out}), TE_OK);
            for (int64_t f = 0; f < N; f++) {
                double v = dt == TE_I64 ? (double)((int64_t *)out)[f] : ((int32_t *)out)[f];
                if (v != want[f])
                    fail_msg("compiled mod element %lld is %g, want %g (seed %llu)", (long long)f,
                             v, want[f], (unsigned long long)g_seed);
            }
            free(out);
            te_module_free(m);
        }
        free(got);
        free(want);
        free(va);
        free(vb);
        free(pa);
        free(pb);
        te_ctx_free(ctx);
    }
    te_ctx *ctx = te_ctx_create();
    te_tensor *F = te_placeholder(ctx, "F", TE_F32, 1, (int64_t[]){3});
    assert_null(te_op_mod(ctx, F, F, 0, "m"));
    assert_non_null(strstr(te_ctx_errmsg(ctx), "mod 'm': input 'A' ('F') is f32: a float "
                                               "remainder needs fmod=1"));
    te_ctx_free(ctx);
}

static void test_compare_and_logic_refuse_bad_input_with_messages(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    te_tensor *F = te_placeholder(ctx, "F", TE_F32, 2, (int64_t[]){3, 4});
    te_tensor *G = te_placeholder(ctx, "G", TE_F32, 1, (int64_t[]){3});
    te_tensor *I = te_placeholder(ctx, "I", TE_I64, 1, (int64_t[]){4});
    te_tensor *U = te_placeholder(ctx, "U", TE_U8, 1, (int64_t[]){4});
#define REFUSED(call, want_code, want_msg)                                                         \
    do {                                                                                           \
        assert_null(call);                                                                         \
        assert_int_equal(te_ctx_errcode(ctx), want_code);                                          \
        if (!strstr(te_ctx_errmsg(ctx), want_msg))                                                 \
            fail_msg("error '%s' does not mention '%s'", te_ctx_errmsg(ctx), want_msg);            \
        te_ctx_clear_error(ctx);                                                                   \
    } while (0)
    REFUSED(te_op_compare(ctx, TE_LT, F, G, "c1"), TE_ERR_SHAPE,
            "less 'c1': cannot broadcast input 'A' ('F') axis 1 (extent 4) with input 'B' ('G')");
    REFUSED(te_op_compare(ctx, TE_EQ, F, I, "c2"), TE_ERR_DTYPE, "equal 'c2'");
    REFUSED(te_op_compare(ctx, TE_ADD, F, F, "c3"), TE_ERR_ARG, "is not one of TE_EQ");
    REFUSED(te_op_logic(ctx, TE_AND, U, I, "l1"), TE_ERR_DTYPE,
            "and 'l1': input 'B' ('I') has dtype i64; truth values are bool or u8");
    REFUSED(te_op_logic(ctx, TE_LT, U, U, "l2"), TE_ERR_ARG, "is not one of TE_AND, TE_OR");
    REFUSED(te_op_not(ctx, F, "n1"), TE_ERR_DTYPE, "not 'n1': input 'X' ('F') has dtype f32");
    REFUSED(te_op_not(ctx, NULL, "n2"), TE_ERR_ARG, "not 'n2'");
    REFUSED(te_op_sign(ctx, NULL, "s1"), TE_ERR_ARG, "sign 's1'");
#undef REFUSED
    te_ctx_free(ctx);
}

static void test_expand_follows_numpy_broadcast(void **state)
{
    (void)state;
    for (int rep = 0; rep < REPS; rep++) {
        int nd;
        int64_t s[TE_MAX_DIMS] = {0}, xs[TE_MAX_DIMS], ts[TE_MAX_DIMS];
        rand_shape(1, 4, 4, &nd, s);
        int rx = bshape(nd, s, xs);
        /* the target: s with some extents 1 where X has the extent (kept from X), maybe a
         * lower rank than X's */
        int rt = nd;
        for (int d = 0; d < nd; d++) {
            int xd = d - (nd - rx);
            ts[d] = xd >= 0 && xs[xd] == s[d] && tt_rng_int(&g_rng, 2) ? 1 : s[d];
        }
        int64_t os[TE_MAX_DIMS];
        memcpy(os, s, sizeof(int64_t) * (size_t)nd);
        for (int d = 0; d < nd; d++)
            if (ts[d] == 1 && (d - (nd - rx) < 0 || xs[d - (nd - rx)] == 1))
                os[d] = 1;
        te_ctx *ctx = te_ctx_create();
        te_tensor *X = te_placeholder(ctx, "X", TE_F32, rx, xs);
        float *dx = rnd(numel(rx, xs));
        te_tensor *Y = te_op_expand(ctx, X, rt, ts, "Y");
        double *got = ref(ctx, Y, 1, &X, (const void *const *)&dx);
        for (int d = 0; d < nd; d++)
            assert_int_equal(te_tensor_shape(Y)[d], os[d]);
        int64_t N = numel(nd, os), ix[TE_MAX_DIMS];
        double *want = malloc(sizeof(double) * (size_t)N);
        for (int64_t f = 0; f < N; f++) {
            unflat(nd, os, f, ix);
            want[f] = dx[boff(nd, ix, rx, xs)];
        }
        check_close(got, want, N, 0, "expand");
        if (rep % 8 == 0)
            check_compiled(ctx, 1, &X, (const void *const *)&dx, 1, &Y, "expand");
        free(got);
        free(want);
        free(dx);
        te_ctx_free(ctx);
    }
    te_ctx *ctx = te_ctx_create();
    te_tensor *X = te_placeholder(ctx, "X", TE_F32, 2, (int64_t[]){3, 2});
    assert_null(te_op_expand(ctx, X, 2, (int64_t[]){3, 4}, "Y"));
    assert_int_equal(te_ctx_errcode(ctx), TE_ERR_SHAPE);
    assert_non_null(strstr(te_ctx_errmsg(ctx), "input 'X' ('X') axis 1 (extent 2)"));
    te_ctx_free(ctx);
}

static void test_log_softmax_matches_naive(void **state)
{
    (void)state;
    for (int rep = 0; rep < REPS; rep++) {
        int nd;
        int64_t s[TE_MAX_DIMS], st[TE_MAX_DIMS], ix[TE_MAX_DIMS];
        rand_shape(1, 4, 6, &nd, s);
        int axis = (int)tt_rng_int(&g_rng, nd);
        te_ctx *ctx = te_ctx_create();
        te_tensor *X = te_placeholder(ctx, "X", TE_F32, nd, s);
        int64_t N = numel(nd, s);
        float *d = rnd(N);
        for (int64_t i = 0; i < N; i++)
            d[i] *= 8; /* large enough that a naive exp would lose digits */
        te_tensor *Y = te_op_log_softmax(ctx, X, axis - (int)tt_rng_int(&g_rng, 2) * nd, "Y");
        double *got = ref(ctx, Y, 1, &X, (const void *const *)&d);
        strides(nd, s, st);
        double *want = malloc(sizeof(double) * (size_t)N);
        for (int64_t f = 0; f < N; f++) {
            unflat(nd, s, f, ix);
            int64_t base = f - ix[axis] * st[axis];
            double mx = -INFINITY, sum = 0;
            for (int64_t k = 0; k < s[axis]; k++)
                mx = fmax(mx, d[base + k * st[axis]]);
            for (int64_t k = 0; k < s[axis]; k++)
                sum += exp(d[base + k * st[axis]] - mx);
            want[f] = d[f] - mx - log(sum);
        }
        check_close(got, want, N, 1e-12, "log_softmax");
        if (rep % 4 == 0)
            check_compiled(ctx, 1, &X, (const void *const *)&d, 1, &Y, "log_softmax");
        free(got);
        free(want);
        free(d);
        te_ctx_free(ctx);
    }
}

static void test_reduce_max_and_l2_over_random_axes(void **state)
{
    (void)state;
    for (int rep = 0; rep < 2 * REPS; rep++) {
        int nd;
        int64_t s[TE_MAX_DIMS], ix[TE_MAX_DIMS];
        rand_shape(1, 4, 5, &nd, s);
        int na = 0, axes[TE_MAX_DIMS];
        bool red[TE_MAX_DIMS] = {0};
        for (int d = 0; d < nd; d++)
            if (tt_rng_int(&g_rng, 2)) {
                red[d] = true;
                axes[na++] = tt_rng_int(&g_rng, 2) ? d - nd : d;
            }
        if (!na) {
            red[nd - 1] = true;
            axes[na++] = nd - 1;
        }
        int keep = (int)tt_rng_int(&g_rng, 2), l2 = rep % 2;
        te_ctx *ctx = te_ctx_create();
        te_tensor *X = te_placeholder(ctx, "X", TE_F32, nd, s);
        int64_t N = numel(nd, s);
        float *d = rnd(N);
        te_tensor *Y = l2 ? te_op_reduce_l2(ctx, X, na, axes, keep, "Y")
                          : te_op_reduce(ctx, X, TE_RMAX, na, axes, keep, "Y");
        double *got = ref(ctx, Y, 1, &X, (const void *const *)&d);
        /* Output index: the kept axes (reduced ones at 0 with keepdims). */
        int64_t ks[TE_MAX_DIMS], kst[TE_MAX_DIMS];
        for (int q = 0; q < nd; q++)
            ks[q] = red[q] ? 1 : s[q];
        strides(nd, ks, kst);
        int64_t M = numel(nd, ks);
        assert_int_equal(te_tensor_numel(Y), M);
        if (keep)
            assert_int_equal(te_tensor_ndim(Y), nd);
        double *want = malloc(sizeof(double) * (size_t)M);
        for (int64_t o = 0; o < M; o++)
            want[o] = l2 ? 0 : -INFINITY;
        for (int64_t f = 0; f < N; f++) {
            unflat(nd, s, f, ix);
            int64_t o = 0;
            for (int q = 0; q < nd; q++)
                o += (red[q] ? 0 : ix[q]) * kst[q];
            want[o] = l2 ? want[o] + (double)d[f] * d[f] : fmax(want[o], d[f]);
        }
        for (int64_t o = 0; l2 && o < M; o++)
            want[o] = sqrt(want[o]);
        check_close(got, want, M, 1e-12, l2 ? "reduce_l2" : "reduce_max");
        if (rep % 4 < 2)
            check_compiled(ctx, 1, &X, (const void *const *)&d, 1, &Y, l2 ? "l2" : "max");
        free(got);
        free(want);
        free(d);
        te_ctx_free(ctx);
    }
}

static void test_index_operators_refuse_bad_input_with_messages(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    te_tensor *A = te_placeholder(ctx, "A", TE_F32, 2, (int64_t[]){2, 3});
    te_tensor *B = te_placeholder(ctx, "B", TE_F32, 2, (int64_t[]){4, 5});
    assert_null(te_op_concat(ctx, 2, (te_tensor *[]){A, B}, 0, "C"));
    assert_string_equal(te_ctx_errmsg(ctx), "concat 'C': input 1 ('B') axis 1 has extent 5 but "
                                            "input 0 ('A') has 3; only the concat axis 0 may "
                                            "differ");
    te_ctx_clear_error(ctx);
    assert_null(
        te_op_slice(ctx, A, 1, (int[]){1}, (int64_t[]){0}, (int64_t[]){3}, (int64_t[]){0}, "S"));
    assert_non_null(strstr(te_ctx_errmsg(ctx), "step 0 of axis 1"));
    te_ctx_clear_error(ctx);
    assert_null(
        te_op_slice(ctx, A, 2, (int[]){1, -1}, (int64_t[]){0, 0}, (int64_t[]){1, 1}, NULL, "S"));
    assert_non_null(strstr(te_ctx_errmsg(ctx), "sliced twice"));
    te_ctx_clear_error(ctx);
    te_tensor *out[3];
    assert_int_equal(te_op_split(ctx, A, 1, 2, (int64_t[]){1, 1}, out, "P"), TE_ERR_SHAPE);
    assert_null(out[0]);
    assert_non_null(strstr(te_ctx_errmsg(ctx), "sum to 2 but input 'A' axis 1 has 3"));
    te_ctx_clear_error(ctx);
    te_tensor *Bi = te_placeholder(ctx, "Bi", TE_I32, 2, (int64_t[]){2, 3});
    assert_null(te_op_where(ctx, A, A, Bi, "W"));
    assert_int_equal(te_ctx_errcode(ctx), TE_ERR_DTYPE);
    te_ctx_clear_error(ctx);
    assert_null(te_op_where(ctx, B, A, A, "W"));
    assert_non_null(strstr(te_ctx_errmsg(ctx), "input 'X' ('A') axis 0 (extent 2) to extent 4"));
    te_ctx_clear_error(ctx);
    assert_null(te_op_log_softmax(ctx, Bi, 0, "L"));
    assert_int_equal(te_ctx_errcode(ctx), TE_ERR_DTYPE);
    te_ctx_free(ctx);
}

/* The graph layer: a split node with three outputs, gather with i64 constant indices and where
 * with a u8 condition input (inputs of their own dtype), through the text form, compiled
 * against the graph's reference. */
static void test_graph_split_gather_where_through_text_and_compile(void **state)
{
    (void)state;
    te_graph *g = te_graph_create();
    int x = te_graph_input(g, "x", TE_F32, 2, (int64_t[]){4, 7});
    int c = te_graph_input(g, "c", TE_U8, 2, (int64_t[]){4, 1});
    int idx = te_graph_const(g, "idx", TE_I64, 1, (int64_t[]){3}, (int64_t[]){-1, 0, 2});
    int p[3];
    assert_int_equal(te_graph_node_multi(g, "split", "axis=1,sizes=2:4:1", 1, &x, 3,
                                         (const char *[]){"p0", "p1", "p2"}, p),
                     TE_OK);
    int gt = te_graph_node(g, "gather", "axis=1", 2, (int[]){p[1], idx}, "gt");
    int w = te_graph_node(g, "where", NULL, 3, (int[]){c, gt, p[2]}, "w");
    int r = te_graph_node(g, "reduce_l2", "axes=1,keepdims=0", 1, &w, "r");
    int ls = te_graph_node(g, "log_softmax", "axis=0", 1, &p[0], "ls");
    if (te_graph_errcode(g))
        fail_msg("%s", te_graph_errmsg(g));
    assert_int_equal(te_graph_value_dtype(g, gt), TE_F32);
    te_graph_output(g, r);
    te_graph_output(g, ls);
    /* A mixed dtype where the operator needs one is still refused, naming both inputs. */
    assert_true(te_graph_node(g, "add", NULL, 2, (int[]){x, c}, "bad") < 0);
    assert_non_null(strstr(te_graph_errmsg(g), "input 2 'c' has dtype u8 but input 1 'x' has f32"));
    te_graph_clear_error(g);
    assert_true(te_graph_node_multi(g, "split", NULL, 1, &x, 9, NULL, p) < 0);
    assert_non_null(strstr(te_graph_errmsg(g), "takes 1 to 8 outputs, 9 given"));
    te_graph_clear_error(g);

    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    char dir[256];
    assert_int_equal(tt_tmpdir_make(dir, sizeof dir, "ops-index"), 0);
    assert_int_equal(te_graph_print(g, f, dir), TE_OK);
    fclose(f);
    assert_non_null(strstr(text, "p0, p1, p2 = split(x) axis=1,sizes=2:4:1"));
    te_graph *h = te_graph_create();
    if (te_graph_parse(h, text, "split.graph"))
        fail_msg("%s\n%s", te_graph_errmsg(h), text);
    free(text);
    assert_int_equal(te_graph_node_noutputs(h, 0), 3);

    float xd[28];
    uint8_t cd[4] = {1, 0, 0, 1};
    tt_fill_f32(&g_rng, xd, 28);
    const void *ins[] = {xd, cd};
    te_fuse_plan *plan = te_graph_fuse(h, NULL, NULL);
    te_graph_exec *e = NULL;
    if (!plan || te_graph_compile(h, plan, NULL, &e))
        fail_msg("%s", te_graph_errmsg(h));
    float ro[4], lo[8];
    tt_poison_f32(ro, 4);
    tt_poison_f32(lo, 8);
    assert_int_equal(te_graph_run(e, ins, (void *const[]){ro, lo}), TE_OK);
    double rr[4], rl[8], *refs[] = {rr, rl};
    int outs[2] = {te_graph_output_value(h, 0), te_graph_output_value(h, 1)};
    assert_int_equal(te_graph_eval_reference(h, ins, 2, outs, refs), TE_OK);
    /* Direct: r[i] = |where(c[i], x[i, 2 + {3, 0, 2}], x[i, 6])|. */
    for (int i = 0; i < 4; i++) {
        double sq = 0;
        int cols[3] = {5, 2, 4};
        for (int k = 0; k < 3; k++) {
            double v = cd[i] ? xd[i * 7 + cols[k]] : xd[i * 7 + 6];
            sq += v * v;
        }
        assert_true(fabs(rr[i] - sqrt(sq)) < 1e-12);
    }
    assert_true(tt_max_rel_err_f32(ro, rr, 4) < 1e-5);
    assert_true(tt_max_rel_err_f32(lo, rl, 8) < 1e-5);
    te_graph_exec_free(e);
    te_fuse_plan_free(plan);
    te_graph_free(h);
    te_graph_free(g);
    tt_tmpdir_remove(dir);
}

static int setup(void **state)
{
    (void)state;
    g_seed = tt_seed(4242);
    tt_rng_seed(&g_rng, g_seed);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concat_matches_naive_on_random_shapes),
        cmocka_unit_test(test_slice_matches_python_indices_with_negative_steps_and_clamping),
        cmocka_unit_test(test_split_parts_are_slices),
        cmocka_unit_test(test_gather_with_negative_indices_on_any_axis),
        cmocka_unit_test(test_gather_clamps_out_of_range_indices_and_refuses_float_indices),
        cmocka_unit_test(test_where_broadcasts_bool_u8_and_float_conditions),
        cmocka_unit_test(test_compare_logic_not_sign_on_broadcast_shapes),
        cmocka_unit_test(test_compare_and_logic_refuse_bad_input_with_messages),
        cmocka_unit_test(test_mod_floor_and_fmod_with_zero_divisors),
        cmocka_unit_test(test_expand_follows_numpy_broadcast),
        cmocka_unit_test(test_log_softmax_matches_naive),
        cmocka_unit_test(test_reduce_max_and_l2_over_random_axes),
        cmocka_unit_test(test_index_operators_refuse_bad_input_with_messages),
        cmocka_unit_test(test_graph_split_gather_where_through_text_and_compile),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}

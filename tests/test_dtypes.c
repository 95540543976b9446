/* Dtypes: the table's facts, the f16/bf16 conversions against an independent software
 * reference (and the compiler's _Float16), casts between all dtypes bit-exact in generated C
 * (scalar and vectorized) against the library, the reference interpreter and that independent
 * reference, f16/bf16 arithmetic, mixed-precision matmuls checked with the per-dtype
 * tolerance, and a tune of a tiny bf16 matmul. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tessera/backend.h"
#include "tessera/cuda.h"
#include "tessera/gen.h"
#include "tessera/ops.h"
#include "tessera/schedule.h"
#include "tessera/te.h"
#include "tessera/tuner.h"
#include "tessera/tuning_db.h"
#include "testutil.h"

static int setup(void **state)
{
    *state = te_ctx_create();
    return *state ? 0 : -1;
}

static int teardown(void **state)
{
    te_ctx_free(*state);
    return 0;
}

/* ---- An independent software reference -------------------------------------------------- */

static uint32_t f2u(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static float u2f(uint32_t u)
{
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* A binary format with `mb` stored significand bits and `eb` exponent bits. */
typedef struct {
    int mb, eb;
} fmt;
static const fmt F16 = {10, 5}, BF16 = {7, 8};

/* Decodes bits of fmt f to a float by arithmetic (NaN payloads moved to the top of f32's). */
static float ind_decode(uint16_t h, fmt f)
{
    int bias = (1 << (f.eb - 1)) - 1;
    uint32_t sign = h >> 15, e = (h >> f.mb) & ((1u << f.eb) - 1), m = h & ((1u << f.mb) - 1);
    if (e == (1u << f.eb) - 1)
        return u2f((sign << 31) | 0x7f800000u | (m << (23 - f.mb)));
    double v = e ? ldexp((double)(m + (1u << f.mb)), (int)e - bias - f.mb)
                 : ldexp((double)m, 1 - bias - f.mb);
    return (float)(sign ? -v : v);
}

/* Rounds an f32 value to fmt f by scaling and nearbyint (ties to even in the default mode):
 * the specification of docs/DTYPES.md, written differently from te/status.c. */
static uint16_t ind_encode(float x, fmt f)
{
    uint32_t u = f2u(x);
    uint16_t sign = (uint16_t)((u >> 31) << 15);
    int bias = (1 << (f.eb - 1)) - 1, emin = 1 - bias;
    uint16_t inf = (uint16_t)(((1u << f.eb) - 1) << f.mb);
    if (isnan(x)) /* quiet, sign and top payload bits kept */
        return (uint16_t)(sign | inf | (1u << (f.mb - 1)) | ((u & 0x7fffff) >> (23 - f.mb)));
    double a = fabs((double)x);
    if (isinf(x))
        return sign | inf;
    if (a == 0)
        return sign;
    int E;
    frexp(a, &E);
    int e = E - 1; /* a in [2^e, 2^(e+1)) */
    if (e < emin)
        e = emin;
    double q = nearbyint(ldexp(a, f.mb - e));
    if (q >= ldexp(1, f.mb + 1)) {
        q /= 2;
        e++;
    }
    if (e > bias)
        return sign | inf;
    uint32_t qi = (uint32_t)q;
    if (qi < (1u << f.mb))
        return (uint16_t)(sign | qi); /* subnormal */
    return (uint16_t)(sign | ((uint32_t)(e + bias) << f.mb) | (qi - (1u << f.mb)));
}

/* ---- The table ------------------------------------------------------------------------------ */

static void test_dtype_table_has_f16_and_bf16_rows(void **state)
{
    (void)state;
    te_dtype d;
    assert_int_equal(te_dtype_parse("f16", &d), TE_OK);
    assert_int_equal(d, TE_F16);
    assert_int_equal(te_dtype_parse("bf16", &d), TE_OK);
    assert_int_equal(d, TE_BF16);
    assert_int_equal(te_dtype_size(TE_F16), 2);
    assert_int_equal(te_dtype_size(TE_BF16), 2);
    assert_string_equal(te_dtype_str(TE_BF16), "bf16");
    assert_string_equal(te_dtype_ctype(TE_F16), "uint16_t");
    assert_string_equal(te_dtype_cuda_type(TE_F16), "__half");
    assert_string_equal(te_dtype_cuda_type(TE_BF16), "__nv_bfloat16");
    assert_true(te_dtype_is_float(TE_F16) && te_dtype_is_float(TE_BF16));
    assert_false(te_dtype_is_int(TE_BF16));
    assert_true(te_dtype_is_half(TE_F16) && !te_dtype_is_half(TE_F32));
    assert_int_equal(te_dtype_compute(TE_BF16), TE_F32);
    assert_int_equal(te_dtype_compute(TE_I8), TE_I8);
    assert_true(te_dtype_unit_roundoff(TE_BF16) == ldexp(1, -8));
    assert_true(te_dtype_unit_roundoff(TE_F16) == ldexp(1, -11));
    assert_true(te_dtype_unit_roundoff(TE_F32) == ldexp(1, -24));
    assert_true(te_dtype_unit_roundoff(TE_I32) == 0);
    assert_string_equal(te_dtype_conv_fn(TE_BF16, 1, 1), "__float2bfloat16_rn");
    assert_null(te_dtype_conv_fn(TE_F32, 0, 0));
    /* existing values did not move: they are hashed into workload keys */
    assert_int_equal(TE_F32, 5);
    assert_int_equal(TE_F64, 6);
    /* tolerances: integers exact, halves looser, growing with the reduction */
    assert_true(te_dtype_tolerance(TE_I32, 100) == 0);
    assert_true(te_dtype_tolerance(TE_F32, 1) == 1e-5);
    assert_true(te_dtype_tolerance(TE_BF16, 64) > te_dtype_tolerance(TE_F16, 64));
    assert_true(te_dtype_tolerance(TE_F16, 64) > te_dtype_tolerance(TE_F16, 1));
    assert_true(te_dtype_tolerance(TE_F16, 64) < 0.1);
}

/* ---- Conversions against the independent reference ----------------------------------------- */

static void test_every_half_bit_pattern_decodes_exactly(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float a = te_f16_to_f32((uint16_t)h), b = ind_decode((uint16_t)h, F16);
        if (f2u(a) != f2u(b))
            fail_msg("f16 %04x: library %08x, independent %08x", h, f2u(a), f2u(b));
        a = te_bf16_to_f32((uint16_t)h), b = ind_decode((uint16_t)h, BF16);
        if (f2u(a) != f2u(b))
            fail_msg("bf16 %04x: library %08x, independent %08x", h, f2u(a), f2u(b));
#ifdef __FLT16_MAX__
        _Float16 c;
        uint16_t hh = (uint16_t)h;
        memcpy(&c, &hh, 2);
        float cf = (float)c;
        if (isnan(cf) ? !isnan(te_f16_to_f32(hh)) : f2u(cf) != f2u(te_f16_to_f32(hh)))
            fail_msg("f16 %04x: library %08x, _Float16 %08x", h, f2u(te_f16_to_f32(hh)), f2u(cf));
#endif
    }
}

/* Every f32 whose low bits sit at, just below and just above a rounding boundary of both
 * formats (all 2^16 high halves with 9 low patterns), plus random ones. */
static void test_f32_to_half_rounds_like_the_independent_reference(void **state)
{
    (void)state;
    static const uint32_t lows[] = {0x0000, 0x0001, 0x0fff, 0x1000, 0x1001, 0x2000,
                                    0x7fff, 0x8000, 0x8001, 0xffff, 0x3000, 0x5000};
    tt_rng r;
    tt_rng_seed(&r, tt_seed(15));
    long n = 0;
    for (uint32_t hi = 0; hi < 65536; hi++)
        for (size_t l = 0; l < sizeof lows / sizeof lows[0] + 2; l++) {
            uint32_t u =
                hi << 16 |
                (l < sizeof lows / sizeof lows[0] ? lows[l] : (uint32_t)(tt_rng_next(&r) & 0xffff));
            float x = u2f(u);
            uint16_t a = te_f32_to_f16(x), b = ind_encode(x, F16);
            if (a != b)
                fail_msg("f32 %08x -> f16: library %04x, independent %04x", u, a, b);
            a = te_f32_to_bf16(x), b = ind_encode(x, BF16);
            if (a != b)
                fail_msg("f32 %08x -> bf16: library %04x, independent %04x", u, a, b);
#ifdef __FLT16_MAX__
            _Float16 c = (_Float16)x;
            uint16_t cb;
            memcpy(&cb, &c, 2);
            if (isnan(x) ? !((cb & 0x7c00) == 0x7c00 && (cb & 0x3ff)) : cb != te_f32_to_f16(x))
                fail_msg("f32 %08x -> f16: library %04x, _Float16 %04x", u, te_f32_to_f16(x), cb);
#endif
            n++;
        }
    assert_true(n > 900000);
    /* the edge cases by name */
    assert_int_equal(te_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(te_f32_to_f16(65519.996f), 0x7bff);
    assert_int_equal(te_f32_to_f16(65520.0f), 0x7c00); /* tie to even: infinity */
    assert_int_equal(te_f32_to_f16(-1e9f), 0xfc00);
    assert_int_equal(te_f32_to_f16(0x1p-24f), 0x0001);
    assert_int_equal(te_f32_to_f16(0x1p-25f), 0x0000);   /* tie to even: zero */
    assert_int_equal(te_f32_to_f16(0x1.8p-24f), 0x0002); /* tie to even: 2 */
    assert_int_equal(te_f32_to_f16(0x1.002p0f), 0x3c00); /* 1 + 2^-11: tie, down */
    assert_int_equal(te_f32_to_f16(0x1.006p0f), 0x3c02); /* 1 + 3 2^-11: tie, up */
    assert_int_equal(te_f32_to_f16(-0.0f), 0x8000);
    assert_int_equal(te_f32_to_f16(u2f(0x7f800001)), 0x7e00); /* signaling NaN: quiet */
    assert_int_equal(te_f32_to_bf16(u2f(0x7f800001)), 0x7fc0);
    assert_int_equal(te_f32_to_bf16(u2f(0xffc12345)), 0xffc1);
    assert_int_equal(te_f32_to_bf16(0x1.01p0f), 0x3f80);       /* 1 + 2^-8: tie, down */
    assert_int_equal(te_f32_to_bf16(0x1.03p0f), 0x3f82);       /* 1 + 3 2^-8: tie, up */
    assert_int_equal(te_f32_to_bf16(u2f(0x7f7f8000)), 0x7f80); /* past the largest: inf */
    assert_int_equal(te_f32_to_bf16(u2f(0x7f7f7fff)), 0x7f7f);
    assert_int_equal(te_f32_to_bf16(u2f(0x00000001)), 0x0000); /* below half a bf16 ulp */
    assert_int_equal(te_f32_to_bf16(u2f(0x00008000)), 0x0000); /* tie to even */
    assert_int_equal(te_f32_to_bf16(u2f(0x00018000)), 0x0002);
}

/* ---- Casts in generated code ---------------------------------------------------------------- */

static const te_dtype all_dtypes[] = {TE_BOOL, TE_I8,  TE_U8,  TE_I32, TE_I64,
                                      TE_F32,  TE_F64, TE_F16, TE_BF16};
#define NDT ((int)(sizeof all_dtypes / sizeof all_dtypes[0]))
#define NV 64 /* edge values per source dtype (a multiple of the vector width) */

/* The edge values of a source dtype, as doubles (stored with te_dtype_store's rounding). */
static int edge_values(te_dtype d, double *v)
{
    int n = 0;
    if (te_dtype_is_float(d)) {
        static const uint32_t bits[] = {
            0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000, 0x7f7fffff,
            0xff7fffff, 0x00800000, 0x00000001, 0x80000001, 0x477fe000, 0x477ff000, 0x477fefff,
            0xc77ff000, 0x38800000, 0x33800000, 0x33000000, 0x33c00000, 0x3f801000, 0x3f803000,
            0x3f808000, 0x3f818000, 0x7f7f8000, 0x7f7f7fff, 0x00018000, 0x42fff000, 0x43000000,
            0xc3010000, 0xc3008000, 0x437f8000, 0x43800000, 0xbfc00000, 0xbf000000, 0x4f000000,
            0x4effffff, 0xcf000000, 0xcf000001, 0x5f000000, 0xdf000001, 0x3f000000, 0x40200000,
            0x40600000, 0xc0200000, 0x3e99999a, 0x4048f5c3, 0xc048f5c3, 0x3b800000, 0x387fc000,
            0x387fe000};
        for (size_t i = 0; i < sizeof bits / sizeof bits[0]; i++)
            v[n++] = (double)u2f(bits[i]);
        if (d == TE_F64) { /* values only a double holds: f32 ties and beyond */
            v[n++] = 1.0 + ldexp(1, -24);
            v[n++] = 1.0 + ldexp(1, -24) + ldexp(1, -40);
            v[n++] = 1e300;
            v[n++] = -1e-300;
            v[n++] = 4294967296.5;
        }
    } else {
        static const double ints[] = {0,        1,        -1,           2,           3,
                                      127,      128,      -128,         -129,        255,
                                      256,      2047,     2049,         65504,       65505,
                                      65519,    65520,    65536,        -65520,      16777217,
                                      16777219, 33554435, 2147483647,   -2147483648, 257,
                                      511,      1000000,  4278190081.0, -5,          4097};
        for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
            v[n++] = ints[i];
        if (d == TE_I64) {
            v[n++] = 9007199254740992.0; /* 2^53 */
            v[n++] = -1099511627776.0 - 1;
        }
    }
    /* padding: small values */
    for (int i = 0; n < NV; i++)
        v[n++] = (i % 7) - 3;
    return n;
}

/* The independent reference of te_cast(to, x) for an x of dtype `from` with value v, as the
 * bits of the result stored in dtype `to` (little-endian, in *out). */
static void ind_cast(double v, te_dtype from, te_dtype to, void *out)
{
    bool ffl = te_dtype_is_float(from);
    switch (to) {
    case TE_BOOL:
        *(bool *)out = v != 0;
        return;
    case TE_F16:
    case TE_BF16: {
        float x = (float)v; /* f64 and integers: through f32 (documented double rounding) */
        *(uint16_t *)out = ind_encode(x, to == TE_F16 ? F16 : BF16);
        return;
    }
    case TE_F32: {
        float x = (float)v;
        memcpy(out, &x, 4);
        return;
    }
    case TE_F64:
        memcpy(out, &v, 8);
        return;
    default:
        break;
    }
    int64_t lo = to == TE_I8 ? -128 : to == TE_U8 ? 0 : to == TE_I32 ? INT32_MIN : INT64_MIN;
    int64_t hi = to == TE_I8 ? 127 : to == TE_U8 ? 255 : to == TE_I32 ? INT32_MAX : INT64_MAX;
    int64_t r;
    if (ffl) {
        if (isnan(v))
            r = 0;
        else if (v >= (double)hi + 1.0 || v >= 9.2233720368547758e18)
            r = hi;
        else if (v <= (double)lo - 1.0 || v < -9.2233720368547758e18)
            r = lo;
        else
            r = (int64_t)v; /* truncation toward zero */
    } else {
        r = (int64_t)v;
    }
    switch (to) {
    case TE_I8:
        *(int8_t *)out = (int8_t)(ffl ? r : (int8_t)(uint8_t)(r & 0xff));
        break;
    case TE_U8:
        *(uint8_t *)out = (uint8_t)(r & 0xff);
        break;
    case TE_I32:
        *(int32_t *)out = ffl ? (int32_t)r : (int32_t)(uint32_t)(r & 0xffffffff);
        break;
    default:
        *(int64_t *)out = r;
        break;
    }
}

static uint64_t bits_of(const unsigned char *p, size_t n)
{
    uint64_t u = 0;
    memcpy(&u, p, n);
    return u;
}

static bool is_nan_bits(te_dtype d, const void *p)
{
    return te_dtype_is_float(d) && isnan(te_dtype_load(d, p, 0));
}

/* A schedule of the one-axis Y with its axis split by `lanes` and the inner piece vectorized
 * (lanes 1: the plain loop). */
static te_schedule *vector_schedule(te_ctx *ctx, te_tensor *Y, int lanes)
{
    te_schedule *s = te_schedule_create(ctx, 1, &Y);
    assert_non_null(s);
    if (lanes > 1) {
        te_stage *st = te_schedule_stage(s, Y);
        te_iter *o, *in;
        assert_int_equal(te_split(st, te_stage_axis(st, 0), lanes, &o, &in), TE_OK);
        assert_int_equal(te_vectorize(st, in), TE_OK);
    }
    return s;
}

/* Builds Y = cast(to, X) over NV values (vectorized by `lanes` when above 1), runs it and
 * compares every element's bits with the library (te_dtype_convert), the independent
 * reference, and the reference interpreter (NaNs by NaN-ness there: it works in doubles).
 * Returns a copy of the module's C source, which the caller frees. */
static char *check_cast_lanes(te_ctx *ctx, te_dtype from, te_dtype to, int lanes)
{
    bool vec = lanes > 1;
    double v[NV];
    int n = edge_values(from, v);
    size_t fs = te_dtype_size(from), ts = te_dtype_size(to);
    unsigned char x[NV * 8], y[NV * 8], want[8], lib[8], ref[8];
    for (int i = 0; i < n; i++)
        te_dtype_store(from, x, (size_t)i, v[i]);
    (void)fs;
    char name[64];
    snprintf(name, sizeof name, "cast_%s_%s%s%d", te_dtype_str(to), te_dtype_str(from),
             vec ? "_v" : "", vec ? lanes : 1);
    te_tensor *X = te_placeholder(ctx, "X", from, 1, (int64_t[]){n});
    te_expr *i = te_axis(ctx, "i", n);
    te_tensor *Y = te_compute(ctx, "Y", 1, (te_expr *[]){i}, te_cast(ctx, to, TE_AT(ctx, X, i)));
    assert_non_null(Y);
    te_schedule *s = vector_schedule(ctx, Y, lanes);
    te_target tgt = te_target_host();
    te_module *m = NULL;
    if (te_build(s, 2, (te_tensor *[]){X, Y}, name, &tgt, &m) != TE_OK)
        fail_msg("%s: %s", name, te_ctx_errmsg(ctx));
    memset(y, 0x5b, sizeof y);
    assert_int_equal(te_module_run(m, (void *[]){x, y}), TE_OK);
    double r[NV];
    assert_int_equal(te_reference_eval(ctx, 1, &X, (const void *[]){x}, 1, &Y, (double *[]){r}),
                     TE_OK);
    for (int k = 0; k < n; k++) {
        double xv = te_dtype_load(from, x, (size_t)k);
        memset(want, 0, 8);
        memset(lib, 0, 8);
        memset(ref, 0, 8);
        ind_cast(xv, from, to, want);
        te_dtype_store(to, lib, 0, te_dtype_convert(xv, from, to));
        te_dtype_store(to, ref, 0, r[k]);
        const unsigned char *got = y + (size_t)k * ts;
        if (memcmp(got, want, ts) || memcmp(lib, want, ts))
            fail_msg("%s: element %d (%.17g): generated %016llx, library %016llx, independent "
                     "%016llx",
                     name, k, xv, (unsigned long long)bits_of(got, ts),
                     (unsigned long long)bits_of(lib, ts), (unsigned long long)bits_of(want, ts));
        if (is_nan_bits(to, want) ? !is_nan_bits(to, ref) : memcmp(ref, want, ts) != 0)
            fail_msg("%s: element %d (%.17g): reference interpreter %.17g", name, k, xv, r[k]);
    }
    char *src = strdup(te_module_source(m));
    assert_non_null(src);
    te_module_free(m);
    return src;
}

static void check_cast(te_ctx *ctx, te_dtype from, te_dtype to, bool vec)
{
    free(check_cast_lanes(ctx, from, to, vec ? 8 : 1));
}

static void test_casts_between_all_dtypes_are_bit_exact_in_generated_c(void **state)
{
    te_ctx *ctx = *state;
    for (int a = 0; a < NDT; a++)
        for (int b = 0; b < NDT; b++) {
            if (a == b || all_dtypes[a] == TE_BOOL)
                continue;
            check_cast(ctx, all_dtypes[a], all_dtypes[b], false);
        }
}

static void test_vectorized_casts_are_bit_exact_in_generated_c(void **state)
{
    te_ctx *ctx = *state;
    static const te_dtype fl[] = {TE_F32, TE_F64, TE_F16, TE_BF16};
    for (int a = 0; a < NDT; a++)
        for (int b = 0; b < 4; b++) {
            te_dtype from = all_dtypes[a], to = fl[b];
            if (from == to || from == TE_BOOL)
                continue;
            check_cast(ctx, from, to, true);
            if (te_dtype_is_float(from) && to == TE_F32) /* and float to every integer */
                for (int c = 1; c < 5; c++)
                    check_cast(ctx, from, all_dtypes[c], true);
        }
}

/* Bytes to and from 32-bit lanes at 8 and 16 lanes go through the widening and narrowing
 * helpers (GCC scalarizes __builtin_convertvector chains of them), bit-exact, narrowing
 * modular as in C; and the requantize chain i32 -> u8 -> i32 -> f32 stays exact. */
static void test_byte_vector_casts_use_the_widening_helpers(void **state)
{
    te_ctx *ctx = *state;
    static const te_dtype bytes[] = {TE_U8, TE_I8}, wide[] = {TE_I32, TE_F32};
    for (int l = 8; l <= 16; l *= 2)
        for (int b = 0; b < 2; b++)
            for (int w = 0; w < 2; w++) {
                char want[64];
                char *src = check_cast_lanes(ctx, bytes[b], wide[w], l);
                snprintf(want, sizeof want, "te_cvt_%s_%sx%d(", te_dtype_str(wide[w]),
                         te_dtype_str(bytes[b]), l);
                if (!strstr(src, want))
                    fail_msg("no %s in:\n%s", want, src);
                free(src);
                if (wide[w] != TE_I32)
                    continue;
                src = check_cast_lanes(ctx, TE_I32, bytes[b], l);
                snprintf(want, sizeof want, "te_cvt_%s_i32x%d(", te_dtype_str(bytes[b]), l);
                if (!strstr(src, want))
                    fail_msg("no %s in:\n%s", want, src);
                free(src);
            }
    /* The chain: y = f32(i32(u8(x))) - 3 over values beyond a byte's range (modular). */
    enum { N = 77 };
    int32_t x[N];
    float y[N];
    for (int i = 0; i < N; i++)
        x[i] = (i * 37 - 1000) * (i % 3 ? 1 : 17);
    te_tensor *X = te_placeholder(ctx, "X", TE_I32, 1, (int64_t[]){N});
    te_expr *i = te_axis(ctx, "i", N);
    te_expr *c = te_cast(ctx, TE_I32, te_cast(ctx, TE_U8, TE_AT(ctx, X, i)));
    te_tensor *Y = te_compute(ctx, "Y", 1, (te_expr *[]){i},
                              te_sub(ctx, te_cast(ctx, TE_F32, c), te_f32(ctx, 3.0)));
    te_schedule *s = vector_schedule(ctx, Y, 16);
    te_target tgt = te_target_host();
    te_module *m = NULL;
    assert_int_equal(te_build(s, 2, (te_tensor *[]){X, Y}, "byte_chain", &tgt, &m), TE_OK);
    for (int k = 0; k < N; k++)
        y[k] = NAN;
    assert_int_equal(te_module_run(m, (void *[]){x, y}), TE_OK);
    for (int k = 0; k < N; k++)
        if (y[k] != (float)(uint8_t)x[k] - 3.0f)
            fail_msg("element %d (%d): %g, want %g", k, x[k], y[k], (float)(uint8_t)x[k] - 3.0f);
    te_module_free(m);
}

/* ---- Arithmetic ----------------------------------------------------------------------------- */

/* Y = A * B + C on f16 (and bf16): computed in f32, rounded once on store; vectorized too. */
static void check_half_fma(te_ctx *ctx, te_dtype dt, bool vec)
{
    enum { N = 96 };
    uint16_t a[N], b[N], c[N], y[N];
    tt_rng r;
    tt_rng_seed(&r, tt_seed(7));
    for (int i = 0; i < N; i++) {
        te_dtype_store(dt, a, (size_t)i, tt_rng_uniform(&r, -4, 4));
        te_dtype_store(dt, b, (size_t)i, tt_rng_uniform(&r, -4, 4));
        te_dtype_store(dt, c, (size_t)i, tt_rng_uniform(&r, -1, 1));
    }
    te_tensor *A = te_placeholder(ctx, "A", dt, 1, (int64_t[]){N});
    te_tensor *B = te_placeholder(ctx, "B", dt, 1, (int64_t[]){N});
    te_tensor *C = te_placeholder(ctx, "C", dt, 1, (int64_t[]){N});
    te_expr *i = te_axis(ctx, "i", N);
    te_expr *body = te_add(ctx, te_mul(ctx, TE_AT(ctx, A, i), TE_AT(ctx, B, i)), TE_AT(ctx, C, i));
    te_tensor *Y = te_compute(ctx, "Y", 1, (te_expr *[]){i}, body);
    assert_non_null(Y);
    te_schedule *s = vector_schedule(ctx, Y, vec ? 16 : 1);
    te_target tgt = te_target_host();
    te_module *m = NULL;
    if (te_build(s, 4, (te_tensor *[]){A, B, C, Y}, vec ? "hfma_v" : "hfma", &tgt, &m) != TE_OK)
        fail_msg("%s", te_ctx_errmsg(ctx));
    assert_non_null(strstr(te_module_source(m), te_dtype_conv_fn(dt, 0, 1)));
    memset(y, 0xff, sizeof y); /* NaN in both formats */
    assert_int_equal(te_module_run(m, (void *[]){a, b, c, y}), TE_OK);
    double ref[N];
    assert_int_equal(te_reference_eval(ctx, 3, (te_tensor *[]){A, B, C}, (const void *[]){a, b, c},
                                       1, &Y, (double *[]){ref}),
                     TE_OK);
    int exact = 0;
    for (int k = 0; k < N; k++) {
        /* the f32 computation, rounded once, by the independent reference */
        float fa = te_dtype_load(dt, a, (size_t)k), fb = te_dtype_load(dt, b, (size_t)k),
              fc = te_dtype_load(dt, c, (size_t)k);
        volatile float p = fa * fb;
        float want = p + fc;
        /* gcc may contract a * b + c into one fma (-std=gnu11): one rounding less */
        uint16_t wb = ind_encode(want, dt == TE_F16 ? F16 : BF16),
                 wf = ind_encode(fmaf(fa, fb, fc), dt == TE_F16 ? F16 : BF16);
        if (y[k] != wb && y[k] != wf)
            fail_msg("%s element %d: generated %04x, f32 then rounded %04x (fused %04x)",
                     te_dtype_str(dt), k, y[k], wb, wf);
        uint16_t rb;
        te_dtype_store(dt, &rb, 0, ref[k]);
        double g = te_dtype_load(dt, y, (size_t)k);
        if (fabs(g - ref[k]) / fmax(1, fabs(ref[k])) > te_dtype_tolerance(dt, 1))
            fail_msg("%s element %d: %g vs reference %g", te_dtype_str(dt), k, g, ref[k]);
        exact += rb == y[k];
    }
    assert_true(exact >= N - 2); /* f32 versus float64 arithmetic: at most a rare tie apart */
    te_module_free(m);
}

static void test_half_arithmetic_computes_in_f32_and_rounds_on_store(void **state)
{
    te_ctx *ctx = *state;
    check_half_fma(ctx, TE_F16, false);
    check_half_fma(ctx, TE_F16, true);
    check_half_fma(ctx, TE_BF16, false);
    check_half_fma(ctx, TE_BF16, true);
}

/* Constants of a half dtype are values of it; folded casts round like run-time ones. */
static void test_half_constants_and_folded_casts_round(void **state)
{
    te_ctx *ctx = *state;
    te_expr *c = te_const(ctx, TE_BF16, 1.00390625); /* 1 + 2^-8: tie, to 1 */
    assert_non_null(c);
    te_expr *k = te_cast(ctx, TE_F16, te_f32(ctx, 65520.0));
    assert_non_null(k);
    te_tensor *Y = te_compute(ctx, "Y", 1, (te_expr *[]){te_axis(ctx, "i", 1)},
                              te_add(ctx, te_cast(ctx, TE_F32, c), te_cast(ctx, TE_F32, k)));
    double r;
    assert_int_equal(te_reference_eval(ctx, 0, NULL, NULL, 1, &Y, (double *[]){&r}), TE_OK);
    assert_true(isinf(r));
    te_expr *q = te_cast(ctx, TE_I8, te_f32(ctx, 300.5));
    te_expr *z = te_cast(ctx, TE_U8, te_f32(ctx, NAN));
    te_tensor *Q = te_compute(ctx, "Q", 1, (te_expr *[]){te_axis(ctx, "i", 1)},
                              te_add(ctx, te_cast(ctx, TE_I32, q), te_cast(ctx, TE_I32, z)));
    assert_int_equal(te_reference_eval(ctx, 0, NULL, NULL, 1, &Q, (double *[]){&r}), TE_OK);
    assert_true(r == 127);
}

/* ---- Mixed-precision matmuls ------------------------------------------------------------- */

/* C = A B with A, B of dtype `in`, accumulated in `acc` (te_op_matmul_mixed) or, when acc is
 * `in` itself, te_op_matmul (accumulating at storage precision), tiled and vectorized. */
static void check_matmul(te_ctx *ctx, te_dtype in, te_dtype acc, bool tiled)
{
    enum { M = 24, N = 40, K = 48 };
    uint16_t a[M * K], b[K * N];
    tt_rng r;
    tt_rng_seed(&r, tt_seed(3));
    for (int i = 0; i < M * K; i++)
        te_dtype_store(in, a, (size_t)i, tt_rng_uniform(&r, -1, 1));
    for (int i = 0; i < K * N; i++)
        te_dtype_store(in, b, (size_t)i, tt_rng_uniform(&r, -1, 1));
    te_tensor *A = te_placeholder(ctx, "A", in, 2, (int64_t[]){M, K});
    te_tensor *B = te_placeholder(ctx, "B", in, 2, (int64_t[]){K, N});
    te_tensor *C = acc == in ? te_op_matmul(ctx, A, B, 0, 0, "C")
                             : te_op_matmul_mixed(ctx, A, B, 0, 0, acc, "C");
    if (!C)
        fail_msg("%s", te_ctx_errmsg(ctx));
    assert_int_equal(te_tensor_dtype(C), acc);
    te_schedule *s = te_schedule_create(ctx, 1, &C);
    if (tiled) {
        te_stage *st = te_schedule_stage(s, C);
        te_iter *io, *jo, *ii, *ji, *ko, *ki;
        assert_int_equal(
            te_tile(st, te_stage_axis(st, 0), te_stage_axis(st, 1), 8, 8, &io, &jo, &ii, &ji),
            TE_OK);
        assert_int_equal(te_split(st, te_stage_reduce_axis(st, 0), 4, &ko, &ki), TE_OK);
        assert_int_equal(te_reorder(st, 6, (te_iter *[]){io, jo, ko, ii, ki, ji}), TE_OK);
        assert_int_equal(te_vectorize(st, ji), TE_OK);
    }
    te_target tgt = te_target_host();
    te_module *m = NULL;
    if (te_build(s, 3, (te_tensor *[]){A, B, C}, "mm", &tgt, &m) != TE_OK)
        fail_msg("%s", te_ctx_errmsg(ctx));
    size_t cs = te_dtype_size(acc);
    unsigned char *c = malloc((size_t)M * N * cs);
    memset(c, 0xff, (size_t)M * N * cs); /* NaN */
    assert_int_equal(te_module_run(m, (void *[]){a, b, c}), TE_OK);
    double *ref = malloc(sizeof(double) * M * N);
    assert_int_equal(te_reference_eval(ctx, 2, (te_tensor *[]){A, B}, (const void *[]){a, b}, 1, &C,
                                       (double *[]){ref}),
                     TE_OK);
    double tol = te_dtype_tolerance(acc, K), worst = 0;
    for (int i = 0; i < M * N; i++) {
        /* the independent reference: float64 sums of the decoded inputs */
        double want = 0;
        for (int k = 0; k < K; k++)
            want += (double)te_dtype_load(in, a, (size_t)(i / N * K + k)) *
                    te_dtype_load(in, b, (size_t)(k * N + i % N));
        double wr = te_dtype_is_half(acc) ? te_dtype_convert(want, TE_F64, acc) : want;
        if (fabs(wr - ref[i]) > 1e-12)
            fail_msg("reference interpreter %g, independent %g", ref[i], wr);
        double g = te_dtype_load(acc, c, (size_t)i), e = fabs(g - want) / fmax(1, fabs(want));
        if (!(e <= tol))
            fail_msg("%s x %s -> %s%s element %d: %.9g vs %.9g (error %g > tolerance %g)",
                     te_dtype_str(in), te_dtype_str(in), te_dtype_str(acc), tiled ? " tiled" : "",
                     i, g, want, e, tol);
        worst = fmax(worst, e);
    }
    print_message("%s -> %s%s: worst relative error %.3g (tolerance %.3g)\n", te_dtype_str(in),
                  te_dtype_str(acc), tiled ? " tiled" : "", worst, tol);
    free(c);
    free(ref);
    te_module_free(m);
}

static void test_bf16_and_f16_matmuls_with_f32_accumulation_compile_and_check(void **state)
{
    te_ctx *ctx = *state;
    check_matmul(ctx, TE_BF16, TE_F32, false);
    check_matmul(ctx, TE_BF16, TE_F32, true);
    check_matmul(ctx, TE_F16, TE_F32, false);
    check_matmul(ctx, TE_F16, TE_F32, true);
    /* accumulating in the half dtype itself: within the looser bound */
    check_matmul(ctx, TE_F16, TE_F16, false);
    check_matmul(ctx, TE_BF16, TE_BF16, true);
}

static void test_matmul_mixed_refuses_bad_dtypes(void **state)
{
    te_ctx *ctx = *state;
    te_tensor *A = te_placeholder(ctx, "A", TE_BF16, 2, (int64_t[]){4, 4});
    te_tensor *B = te_placeholder(ctx, "B", TE_F16, 2, (int64_t[]){4, 4});
    te_tensor *I = te_placeholder(ctx, "I", TE_I8, 2, (int64_t[]){4, 4});
    te_ctx_clear_error(ctx);
    assert_null(te_op_matmul_mixed(ctx, A, B, 0, 0, TE_F32, "C"));
    assert_non_null(strstr(te_ctx_errmsg(ctx), "must share a dtype"));
    te_ctx_clear_error(ctx);
    assert_null(te_op_matmul_mixed(ctx, A, A, 0, 0, TE_F16, "C"));
    assert_non_null(strstr(te_ctx_errmsg(ctx), "accumulation dtype f16"));
    te_ctx_clear_error(ctx);
    assert_null(te_op_matmul_mixed(ctx, I, I, 0, 0, TE_F32, "C"));
    assert_non_null(strstr(te_ctx_errmsg(ctx), "matmul_integer"));
    te_ctx_clear_error(ctx);
}

/* ---- CUDA --------------------------------------------------------------------------------- */

/* Emits a GPU schedule of y = f(x) stages with f16/bf16 storage and compiles it with NVRTC for
 * sm_80 and sm_90 (skipped with a message without libnvrtc; no device needed). */
static void test_cuda_emission_of_half_dtypes_compiles_with_nvrtc(void **state)
{
    te_ctx *ctx = *state;
    enum { M = 8, N = 64, K = 16 };
    te_tensor *A = te_placeholder(ctx, "A", TE_BF16, 2, (int64_t[]){M, K});
    te_tensor *B = te_placeholder(ctx, "B", TE_BF16, 2, (int64_t[]){K, N});
    te_tensor *C = te_op_matmul_mixed(ctx, A, B, 0, 0, TE_F32, "C");
    te_expr *i = te_axis(ctx, "i", M), *j = te_axis(ctx, "j", N);
    /* f32 -> f16 store, f16 -> i8 (saturating) and f16 -> bf16 casts */
    te_tensor *H =
        te_compute(ctx, "H", 2, (te_expr *[]){i, j},
                   te_cast(ctx, TE_F16, te_mul(ctx, TE_AT(ctx, C, i, j), te_f32(ctx, 3.0))));
    te_expr *i2 = te_axis(ctx, "i", M), *j2 = te_axis(ctx, "j", N);
    te_expr *h = TE_AT(ctx, H, i2, j2);
    te_tensor *Q = te_compute(
        ctx, "Q", 2, (te_expr *[]){i2, j2},
        te_add(ctx, te_cast(ctx, TE_F32, te_cast(ctx, TE_I8, h)),
               te_cast(ctx, TE_F32,
                       te_cast(ctx, TE_BF16, te_add(ctx, h, te_const(ctx, TE_F16, 0.5))))));
    assert_non_null(Q);
    te_tensor *outs[] = {C, H, Q};
    static const int sms[] = {80, 90};
    for (int v = 0; v < 2; v++) {
        te_schedule *s = te_schedule_create(ctx, 3, outs);
        for (int o = 0; o < 3; o++) {
            te_stage *st = te_schedule_stage(s, outs[o]);
            assert_int_equal(te_bind(st, te_stage_axis(st, 0), TE_BLOCK_X), TE_OK);
            assert_int_equal(te_bind(st, te_stage_axis(st, 1), TE_THREAD_X), TE_OK);
        }
        te_target tgt = te_target_cuda(sms[v]);
        te_lowered *f = te_lower(s, 5, (te_tensor *[]){A, B, C, H, Q}, "half_gpu", &tgt);
        if (!f)
            fail_msg("lowering: %s", te_ctx_errmsg(ctx));
        const char *src = te_emit_cuda(ctx, f, &tgt);
        if (!src)
            fail_msg("emission: %s", te_ctx_errmsg(ctx));
        assert_non_null(strstr(src, "#include <cuda_fp16.h>"));
        assert_non_null(strstr(src, "const __nv_bfloat16 *"));
        assert_non_null(strstr(src, "__bfloat162float("));
        assert_non_null(strstr(src, "__float2half_rn("));
        assert_non_null(strstr(src, "__float2int_rz("));
        if (te_nvrtc_probe() != TE_OK) {
            print_message("[  SKIP    ] NVRTC: %s\n", te_cuda_errmsg());
            return;
        }
        void *cubin = NULL;
        size_t size = 0;
        char *log = NULL;
        if (te_nvrtc_compile(src, "half_gpu", sms[v], &cubin, &size, &log) != TE_OK)
            fail_msg("NVRTC sm_%d: %s\n%s", sms[v], log ? log : "", src);
        assert_true(size > 0);
        free(cubin);
        free(log);
    }
}

/* ---- tessera gen ------------------------------------------------------------------------- */

/* Generated files of a bf16 x bf16 -> f32 matmul and an f16 output: the header spells the
 * storage types, and source and header compile together. */
static void test_gen_files_spell_half_storage_and_compile(void **state)
{
    te_ctx *ctx = *state;
    char dir[256];
    assert_int_equal(tt_tmpdir_make(dir, sizeof dir, "dtgen"), 0);
    te_tensor *A = te_placeholder(ctx, "A", TE_BF16, 2, (int64_t[]){8, 16});
    te_tensor *B = te_placeholder(ctx, "B", TE_BF16, 2, (int64_t[]){16, 8});
    te_tensor *C = te_op_matmul_mixed(ctx, A, B, 0, 0, TE_F32, "C");
    te_expr *i = te_axis(ctx, "i", 8), *j = te_axis(ctx, "j", 8);
    te_tensor *H =
        te_compute(ctx, "H", 2, (te_expr *[]){i, j}, te_cast(ctx, TE_F16, TE_AT(ctx, C, i, j)));
    te_gen_kernel k = {0};
    k.name = "mm_half";
    k.schedule = te_schedule_create(ctx, 2, (te_tensor *[]){C, H});
    k.n_args = 4;
    k.args = (te_tensor *[]){A, B, C, H};
    te_gen_options o = te_gen_options_default("mm_half");
    te_gen_output out;
    if (te_gen_files(ctx, 1, &k, &o, dir, &out) != TE_OK)
        fail_msg("%s", te_ctx_errmsg(ctx));
    assert_non_null(strstr(out.header, "const uint16_t *"));
    assert_non_null(strstr(out.source, "te_f32_to_f16("));
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cc -std=gnu11 -Wall -Werror -fopenmp -c -I'%s' -o '%s' '%s'", dir,
             tt_path_in(dir, "mm_half.o"), out.source_path);
    if (system(cmd) != 0)
        fail_msg("generated files do not compile: %s\n%s\n%s", cmd, out.header, out.source);
    tt_tmpdir_remove(dir);
}

/* ---- The tuner ------------------------------------------------------------------------------ */

static void print_warning(const char *msg, void *user)
{
    (void)user;
    print_message("tuner: %s\n", msg);
}

static void test_tune_of_a_tiny_bf16_matmul_runs_and_checks(void **state)
{
    te_ctx *ctx = *state;
    char dir[256];
    assert_int_equal(tt_tmpdir_make(dir, sizeof dir, "dtypes"), 0);
    te_db *db = NULL;
    assert_int_equal(te_db_open(tt_path_in(dir, "t.db"), NULL, &db), TE_OK);
    te_tensor *A = te_placeholder(ctx, "A", TE_BF16, 2, (int64_t[]){16, 32});
    te_tensor *B = te_placeholder(ctx, "B", TE_BF16, 2, (int64_t[]){32, 16});
    te_tensor *C = te_op_matmul_mixed(ctx, A, B, 0, 0, TE_F32, "C");
    te_tensor *H = te_op_matmul(ctx, A, B, 0, 0, "H"); /* bf16 output */
    te_tune_options o = te_tune_options_default();
    o.max_trials = 6;
    o.batch_size = 3;
    o.on_warning = print_warning;
    te_tuner *t = te_tuner_create(db, &o);
    assert_non_null(t);
    assert_int_equal(te_tuner_add_expr(t, "mm_bf16_f32", 2, (te_tensor *[]){A, B}, 1, &C, 1),
                     TE_OK);
    assert_int_equal(te_tuner_add_expr(t, "mm_bf16", 2, (te_tensor *[]){A, B}, 1, &H, 1), TE_OK);
    if (te_tuner_run(t) != TE_OK)
        fail_msg("%s", te_tuner_errmsg(t));
    for (int i = 0; i < 2; i++) {
        te_tune_task_info info;
        assert_int_equal(te_tuner_task_info(t, i, &info), TE_OK);
        print_message("%s: best %s\n", info.workload_key, info.best_trace ? info.best_trace : "-");
        assert_non_null(strstr(info.workload_key, "bf16"));
        assert_non_null(info.best_trace); /* at least one candidate ran and passed the check */
    }
    /* the dtype is part of the workload key */
    char k1[512], k2[512];
    te_tensor *A32 = te_placeholder(ctx, "A", TE_F32, 2, (int64_t[]){16, 32});
    te_tensor *B32 = te_placeholder(ctx, "B", TE_F32, 2, (int64_t[]){32, 16});
    te_tensor *C32 = te_op_matmul(ctx, A32, B32, 0, 0, "H");
    assert_true(te_tuner_expr_key("mm", 2, (te_tensor *[]){A, B}, 1, &H, k1, sizeof k1) > 0);
    assert_true(te_tuner_expr_key("mm", 2, (te_tensor *[]){A32, B32}, 1, &C32, k2, sizeof k2) > 0);
    assert_string_not_equal(k1, k2);
    te_tuner_free(t);
    te_db_close(db);
    tt_tmpdir_remove(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtype_table_has_f16_and_bf16_rows),
        cmocka_unit_test(test_every_half_bit_pattern_decodes_exactly),
        cmocka_unit_test(test_f32_to_half_rounds_like_the_independent_reference),
        cmocka_unit_test_setup_teardown(test_casts_between_all_dtypes_are_bit_exact_in_generated_c,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_vectorized_casts_are_bit_exact_in_generated_c, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_byte_vector_casts_use_the_widening_helpers, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_half_arithmetic_computes_in_f32_and_rounds_on_store,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_half_constants_and_folded_casts_round, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_bf16_and_f16_matmuls_with_f32_accumulation_compile_and_check, setup, teardown),
        cmocka_unit_test_setup_teardown(test_matmul_mixed_refuses_bad_dtypes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cuda_emission_of_half_dtypes_compiles_with_nvrtc,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_gen_files_spell_half_storage_and_compile, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_tune_of_a_tiny_bf16_matmul_runs_and_checks, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

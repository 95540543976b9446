/* Tests of vector width legalization (schedule/passes/legalize_vectors.c): stores and lets
 * wider than the target's registers split into register-wide parts, ramps sliced by offsetting
 * their base, lanes that are not a multiple of the width left alone. Each program is run before
 * and after the pass, lane by lane (vector statements are scalarized here for the scalar
 * interpreter of passes_testlib.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "passes_testlib.h"
#include "tessera/ops.h"

#define I(v) te_int(c, (v))

/* ---- Scalarizing vector code, to run it ---------------------------------------------------- */

typedef struct lanes_map {
    int n;
    const te_expr *var[16];
    te_expr *lane[16][64];
} lanes_map;

static te_expr *lane_of(te_ctx *c, lanes_map *m, te_expr *x, int l)
{
    if (!x)
        return x;
    for (int i = m->n - 1; i >= 0; i--) /* the innermost binding */
        if (m->var[i] == x)
            return m->lane[i][l];
    if (x->lanes == 1)
        return x;
    switch (x->kind) {
    case TE_E_RAMP:
        return te_add(c, x->u.ramp.base, I(x->u.ramp.stride * l));
    case TE_E_BCAST:
        return x->u.un.a;
    case TE_E_VAR:
        fail_msg("vector variable '%s' unbound", x->u.var.name);
        return NULL;
    case TE_E_LOAD: {
        te_expr *idx[TE_MAX_DIMS];
        for (int i = 0; i < x->u.load.n; i++)
            idx[i] = lane_of(c, m, x->u.load.idx[i], l);
        return te__load(c, x->u.load.buf, x->u.load.n, idx);
    }
    case TE_E_BINARY:
        return te_binary(c, x->u.bin.op, lane_of(c, m, x->u.bin.a, l),
                         lane_of(c, m, x->u.bin.b, l));
    case TE_E_NEG:
        return te_neg(c, lane_of(c, m, x->u.un.a, l));
    case TE_E_CAST:
        return te_cast(c, x->dtype, lane_of(c, m, x->u.un.a, l));
    case TE_E_SELECT:
        return te_select(c, lane_of(c, m, x->u.sel.c, l), lane_of(c, m, x->u.sel.t, l),
                         lane_of(c, m, x->u.sel.f, l));
    default:
        fail_msg("expression kind %d not scalarized", x->kind);
        return NULL;
    }
}

static te_stmt *scalarize(te_ctx *c, lanes_map *m, te_stmt *s)
{
    switch (s->kind) {
    case TE_S_FOR:
        return te__for(c, s->u.loop.var, s->u.loop.min, s->u.loop.extent, TE_FOR_SERIAL,
                       scalarize(c, m, s->u.loop.body));
    case TE_S_SEQ: {
        te_stmt *r = NULL;
        for (int i = 0; i < s->u.seq.n; i++)
            r = te__seq2(c, r, scalarize(c, m, s->u.seq.v[i]));
        return r;
    }
    case TE_S_STORE: {
        int lanes = s->u.store.value->lanes;
        if (s->u.store.idx[0]->lanes > lanes)
            lanes = s->u.store.idx[0]->lanes;
        if (lanes == 1)
            return s;
        te_stmt *r = NULL;
        for (int l = 0; l < lanes; l++) {
            te_expr *ix = lane_of(c, m, s->u.store.idx[0], l);
            r = te__seq2(c, r,
                         te__store(c, s->u.store.buf, 1, &ix, lane_of(c, m, s->u.store.value, l)));
        }
        return r;
    }
    case TE_S_LET: {
        /* the interpreter binds integers only: a let's lanes are substituted */
        te_expr *v = s->u.let.var, *val = s->u.let.value;
        assert_true(m->n < 16 && val->lanes <= 64);
        int k = m->n++;
        m->var[k] = NULL; /* the value is computed outside the new binding */
        for (int l = 0; l < 64; l++)
            m->lane[k][l] = l < val->lanes ? lane_of(c, m, val, l) : val;
        m->var[k] = v;
        te_stmt *b = scalarize(c, m, s->u.let.body);
        m->n = k; /* out of scope */
        return b;
    }
    case TE_S_ALLOC:
        return te__alloc_stmt(c, s->u.alloc.buf, scalarize(c, m, s->u.alloc.body));
    default:
        return s;
    }
}

/* Runs a and b (vector code) with A (input, n) and C (output, n) and compares C. */
static void check_same(te_ctx *c, te_stmt *a, te_stmt *b, te_buf *A, te_buf *C, int64_t n)
{
    lanes_map ma = {0}, mb = {0};
    te_stmt *sa = scalarize(c, &ma, a), *sb = scalarize(c, &mb, b);
    assert_non_null(sa);
    assert_non_null(sb);
    double *in = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        in[i] = (double)((i * 7) % 23) - 5;
    assert_true(
        pt_same_effect(sa, sb, &(pt_run){.out = C, .n = n, .in = A, .in_data = in, .in_n = n}));
    free(in);
}

static te_target with_bits(int bits)
{
    te_target t = {0};
    t.backend = TE_BACKEND_C;
    t.vector_bits = bits;
    return t;
}

/* The largest store lane count in s. */
static int max_store_lanes(const te_stmt *s)
{
    int m = 0, k;
    switch (s->kind) {
    case TE_S_FOR:
        return max_store_lanes(s->u.loop.body);
    case TE_S_SEQ:
        for (int i = 0; i < s->u.seq.n; i++)
            if ((k = max_store_lanes(s->u.seq.v[i])) > m)
                m = k;
        return m;
    case TE_S_LET:
        return max_store_lanes(s->u.let.body);
    case TE_S_ALLOC:
        return max_store_lanes(s->u.alloc.body);
    case TE_S_STORE:
        return s->u.store.value->lanes;
    default:
        return 0;
    }
}

/* The pass run on prog for a target of `bits`-bit vectors; *txt its printed result (freed by
 * the caller), shown with TESSERA_TEST_VERBOSE. */
static te_stmt *legalized(te_ctx *c, te_stmt *prog, int bits, char **txt)
{
    te_target t = with_bits(bits);
    te__pass_ctx pc = {.ctx = c, .target = &t};
    te_stmt *out = te__pass_legalize_vectors(&pc, prog);
    assert_non_null(out);
    *txt = pt_print(out);
    if (getenv("TESSERA_TEST_VERBOSE"))
        fputs(*txt, stderr);
    return out;
}

/* ---- Tests --------------------------------------------------------------------------------- */

/* for i in 0..4: C[ramp(i * 32, 1, 32)] = A[ramp(i * 32, 1, 32)] * x32(2) + x32(1) */
static te_stmt *wide_add(te_ctx *c, te_buf *A, te_buf *C, te_expr *i, bool nontemporal)
{
    te_expr *base = te_mul(c, i, I(32));
    te_expr *v = te_add(c,
                        te_mul(c, te__load(c, A, 1, (te_expr *[]){te__ramp(c, base, 1, 32)}),
                               te__bcast(c, te_f32(c, 2), 32)),
                        te__bcast(c, te_f32(c, 1), 32));
    te_stmt *st = te__store(c, C, 1, (te_expr *[]){te__ramp(c, base, 1, 32)}, v);
    st->u.store.nontemporal = nontemporal;
    return te__for(c, i, I(0), I(4), TE_FOR_PARALLEL, st);
}

static void test_store_split_to_register_width(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_buf *A = te__buf_new(c, "A", TE_F32, 1, (int64_t[]){128}, TE_SCOPE_GLOBAL);
    te_buf *C = te__buf_new(c, "C", TE_F32, 1, (int64_t[]){128}, TE_SCOPE_GLOBAL);
    te_stmt *prog = wide_add(c, A, C, te__loop_var(c, "i", 4), true);
    char *txt;
    te_stmt *out = legalized(c, prog, 256, &txt);
    /* four 8-lane parts, bases offset by 8, the streaming flag kept, the loop kind kept */
    assert_int_equal(pt_count(txt, ", 1, 8)] = "), 4);
    assert_int_equal(pt_count(txt, "// streaming"), 4);
    assert_non_null(strstr(txt, "C[ramp((i * 32), 1, 8)] = "));
    assert_non_null(strstr(txt, "C[ramp(((i * 32) + 24), 1, 8)] = "));
    assert_non_null(strstr(txt, "x8(2f)"));
    assert_int_equal(pt_count(txt, ", 32)"), 0);
    assert_int_equal(out->kind, TE_S_FOR);
    assert_int_equal(out->u.loop.fkind, TE_FOR_PARALLEL);
    assert_int_equal(max_store_lanes(out), 8);
    free(txt);
    check_same(c, prog, out, A, C, 128);

    /* AVX-512: 16-lane parts; a NULL target means 512 bits too */
    te_stmt *out16 = legalized(c, prog, 512, &txt);
    free(txt);
    assert_int_equal(max_store_lanes(out16), 16);
    check_same(c, prog, out16, A, C, 128);
    assert_int_equal(max_store_lanes(te__pass_legalize_vectors(TE_PC(c), prog)), 16);
    assert_int_equal(te__vector_width_lanes(NULL), 16);
    te_target avx2 = with_bits(256);
    assert_int_equal(te__vector_width_lanes(&avx2), 8);
    te_target none = with_bits(0);
    assert_int_equal(te__vector_width_lanes(&none), 16);
    te_ctx_free(c);
}

static void test_constant_and_offset_bases_fold(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_buf *A = te__buf_new(c, "A", TE_F32, 1, (int64_t[]){96}, TE_SCOPE_GLOBAL);
    te_buf *C = te__buf_new(c, "C", TE_F32, 1, (int64_t[]){96}, TE_SCOPE_GLOBAL);
    te_expr *j = te__loop_var(c, "j", 2);
    /* base j * 64 + 32 (constant last, as simplify leaves it), and a constant base */
    te_expr *b1 = te_add(c, te_mul(c, j, I(64)), I(32));
    te_stmt *s1 = te__store(c, C, 1, (te_expr *[]){te__ramp(c, b1, 1, 32)},
                            te__load(c, A, 1, (te_expr *[]){te__ramp(c, b1, 1, 32)}));
    te_stmt *s0 = te__store(c, C, 1, (te_expr *[]){te__ramp(c, I(0), 1, 32)},
                            te__load(c, A, 1, (te_expr *[]){te__ramp(c, I(64), 1, 32)}));
    te_stmt *prog = te__seq2(c, te__for(c, j, I(0), I(1), TE_FOR_SERIAL, s1), s0);
    char *txt;
    te_stmt *out = legalized(c, prog, 512, &txt);
    assert_non_null(
        strstr(txt, "C[ramp(((j * 64) + 48), 1, 16)] = A[ramp(((j * 64) + 48), 1, 16)]"));
    assert_non_null(strstr(txt, "C[ramp(16, 1, 16)] = A[ramp(80, 1, 16)]"));
    free(txt);
    check_same(c, prog, out, A, C, 96);
    te_ctx_free(c);
}

static void test_vector_let_split_into_parts(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_buf *A = te__buf_new(c, "A", TE_F32, 1, (int64_t[]){16}, TE_SCOPE_GLOBAL);
    te_buf *C = te__buf_new(c, "C", TE_F32, 1, (int64_t[]){16}, TE_SCOPE_GLOBAL);
    te_expr *r = te__ramp(c, I(0), 1, 16);
    te_expr *v = te_var(c, "v", TE_F32);
    v->lanes = 16;
    te_expr *val = te_mul(c, te__load(c, A, 1, &r), te__bcast(c, te_f32(c, 3), 16));
    te_stmt *prog =
        te__let(c, v, val,
                te__store(c, C, 1, &r, te_sub(c, te_add(c, v, v), te__bcast(c, te_f32(c, 1), 16))));
    char *txt;
    te_stmt *out = legalized(c, prog, 256, &txt);
    assert_non_null(strstr(txt, "let v_0 = (A[ramp(0, 1, 8)] * x8(3f)"));
    assert_non_null(strstr(txt, "let v_1 = (A[ramp(8, 1, 8)] * x8(3f)"));
    assert_non_null(strstr(txt, "C[ramp(8, 1, 8)] = ((v_1 + v_1) - x8(1f)"));
    assert_int_equal(pt_count(txt, "let v "), 0);
    free(txt);
    /* each part is a fresh 8-lane variable */
    assert_int_equal(out->kind, TE_S_LET);
    assert_int_equal(out->u.let.var->lanes, 8);
    assert_int_not_equal(out->u.let.var->u.var.id, v->u.var.id);
    check_same(c, prog, out, A, C, 16);
    te_ctx_free(c);
}

/* One let variable bound twice, the second let inside the first one's body (what unrolling a
 * loop whose body binds a vector let makes): each use takes the parts of the innermost
 * binding. The first binding's parts used to win, so the second copy of an unrolled 128-wide
 * rfactor read the first copy's values: silently wrong layer norms. */
static void test_rebound_let_takes_its_own_parts(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_buf *A = te__buf_new(c, "A", TE_F32, 1, (int64_t[]){32}, TE_SCOPE_GLOBAL);
    te_buf *C = te__buf_new(c, "C", TE_F32, 1, (int64_t[]){32}, TE_SCOPE_GLOBAL);
    te_expr *r0 = te__ramp(c, I(0), 1, 16), *r1 = te__ramp(c, I(16), 1, 16);
    te_expr *v = te_var(c, "v", TE_F32);
    v->lanes = 16;
    te_expr *two = te__bcast(c, te_f32(c, 2), 16);
    te_stmt *inner =
        te__let(c, v, te__load(c, A, 1, &r1), te__store(c, C, 1, &r1, te_mul(c, v, two)));
    te_stmt *prog = te__let(c, v, te__load(c, A, 1, &r0),
                            te__seq2(c, te__store(c, C, 1, &r0, te_add(c, v, two)), inner));
    char *txt;
    te_stmt *out = legalized(c, prog, 256, &txt);
    assert_int_equal(pt_count(txt, "let v_0 "), 2);
    free(txt);
    check_same(c, prog, out, A, C, 32);
    te_ctx_free(c);
}

static void test_narrow_and_odd_widths_unchanged(void **state)
{
    (void)state;
    te_ctx *c = te_ctx_create();
    te_buf *A = te__buf_new(c, "A", TE_F32, 1, (int64_t[]){24}, TE_SCOPE_GLOBAL);
    te_buf *C = te__buf_new(c, "C", TE_F32, 1, (int64_t[]){24}, TE_SCOPE_GLOBAL);
    te_expr *r8 = te__ramp(c, I(0), 1, 8), *r12 = te__ramp(c, I(8), 1, 12);
    te_stmt *s8 = te__store(c, C, 1, &r8, te__load(c, A, 1, &r8));
    te_stmt *s12 = te__store(c, C, 1, &r12, te__load(c, A, 1, &r12));
    te_expr *k = te__loop_var(c, "k", 4);
    te_stmt *s1 = te__store(c, C, 1, (te_expr *[]){te_add(c, k, I(20))},
                            te__load(c, A, 1, (te_expr *[]){te_add(c, k, I(20))}));
    te_stmt *prog =
        te__seq(c, 3, (te_stmt *[]){s8, s12, te__for(c, k, I(0), I(4), TE_FOR_UNROLLED, s1)});
    te_target t = with_bits(256);
    te__pass_ctx pc = {.ctx = c, .target = &t};
    te_stmt *out = te__pass_legalize_vectors(&pc, prog);
    assert_non_null(out);
    /* 8 lanes fit; 12 lanes are no multiple of 8: both stores are the very same statements */
    assert_int_equal(out->kind, TE_S_SEQ);
    assert_ptr_equal(out->u.seq.v[0], s8);
    assert_ptr_equal(out->u.seq.v[1], s12);
    assert_int_equal(out->u.seq.v[2]->u.loop.fkind, TE_FOR_UNROLLED);
    char *a = pt_print(prog), *b = pt_print(out);
    assert_string_equal(a, b);
    free(a);
    free(b);
    check_same(c, prog, out, A, C, 24);
    te_ctx_free(c);
}

static void test_pipeline_runs_it_for_c_targets(void **state)
{
    (void)state;
    int at = -1;
    for (int i = 0; i < te__pipeline_n; i++)
        if (te__pipeline[i].run == te__pass_legalize_vectors)
            at = i;
    assert_true(at > 0);
    assert_string_equal(te__pipeline[at].name, "legalize_vectors");
    assert_int_equal(te__pipeline[at].when, TE_PASS_C);
    /* after every pass that makes vectors or GPU thread loops */
    for (int i = at + 1; i < te__pipeline_n; i++)
        assert_true(te__pipeline[i].run != te__pass_vectorize &&
                    te__pipeline[i].run != te__pass_unroll &&
                    te__pipeline[i].run != te__pass_thread_split);
}

/* Through te_lower: a 32-lane vectorized elementwise loop comes out in register-wide stores. */
static void test_lowered_for_the_target(void **state)
{
    (void)state;
    for (int bits = 256; bits <= 512; bits += 256) {
        te_ctx *c = te_ctx_create();
        te_tensor *in[TE_OP_MAX_IO], *out[TE_OP_MAX_IO];
        int ni, no;
        assert_int_equal(te_op_build(c, "relu", "m=4,n=64", in, &ni, out, &no), TE_OK);
        te_schedule *s = te_schedule_create(c, 1, out);
        te_stage *st = te_schedule_stage(s, out[0]);
        te_iter *o, *i;
        assert_int_equal(te_split(st, te_stage_axis(st, 1), 32, &o, &i), TE_OK);
        assert_int_equal(te_vectorize(st, i), TE_OK);
        te_target t = {.backend = TE_BACKEND_C, .vector_bits = bits, .num_cores = 1};
        te_lowered *f = te_lower(s, 2, (te_tensor *[]){in[0], out[0]}, "k", &t);
        if (!f)
            fail_msg("%s", te_ctx_errmsg(c));
        assert_int_equal(max_store_lanes(f->body), bits / 32);
        te_ctx_free(c);
    }
}

/* A vector loop whose extent is a multiple of the register width but not a power of two (a
 * register tile three vectors across) vectorizes on C targets and comes out register-wide;
 * other extents, and every such extent on CUDA, stay scalar with a note. */
static void test_multiple_of_the_width(void **state)
{
    (void)state;
    const struct {
        int bits, lanes;
        bool vec;
    } cases[] = {{512, 48, true},  {256, 48, true},  {256, 24, true},
                 {512, 24, false}, {512, 96, false}, {256, 12, false}};
    for (int q = 0; q < (int)(sizeof cases / sizeof cases[0]); q++) {
        te_ctx *c = te_ctx_create();
        te_tensor *in[TE_OP_MAX_IO], *out[TE_OP_MAX_IO];
        int ni, no;
        assert_int_equal(te_op_build(c, "relu", "m=4,n=96", in, &ni, out, &no), TE_OK);
        te_schedule *s = te_schedule_create(c, 1, out);
        te_stage *st = te_schedule_stage(s, out[0]);
        te_iter *o, *i;
        assert_int_equal(te_split(st, te_stage_axis(st, 1), cases[q].lanes, &o, &i), TE_OK);
        assert_int_equal(te_vectorize(st, i), TE_OK);
        te_target t = {.backend = TE_BACKEND_C, .vector_bits = cases[q].bits, .num_cores = 1};
        te_lowered *f = te_lower(s, 2, (te_tensor *[]){in[0], out[0]}, "k", &t);
        if (!f)
            fail_msg("%s", te_ctx_errmsg(c));
        const char *notes[2] = {NULL, NULL};
        int nn = te_lowered_notes(f, notes, 2);
        if (cases[q].vec) {
            assert_int_equal(nn, 0);
            assert_int_equal(max_store_lanes(f->body), cases[q].bits / 32);
        } else {
            assert_true(nn >= 1);
            assert_non_null(strstr(notes[0], "or a multiple of the register width"));
            assert_int_equal(max_store_lanes(f->body), 1);
        }
        te_ctx_free(c);
    }
    /* CUDA: no legalization runs, so 48 lanes are never made. */
    te_ctx *c = te_ctx_create();
    te_expr *v = te__loop_var(c, "v", 48);
    int64_t n = 96;
    te_buf *A = te__buf_new(c, "A", TE_F32, 1, &n, TE_SCOPE_GLOBAL);
    te_buf *B = te__buf_new(c, "B", TE_F32, 1, &n, TE_SCOPE_GLOBAL);
    te_stmt *body = te__store(c, B, 1, &v, te__load(c, A, 1, &v));
    te_stmt *loop = te__for(c, v, I(0), I(48), TE_FOR_VECTORIZED, body);
    te_target cuda = {.backend = TE_BACKEND_CUDA, .vector_bits = 512};
    te_stmt *r = te__pass_vectorize(&(te__pass_ctx){.ctx = c, .target = &cuda}, loop);
    assert_non_null(r);
    assert_int_equal(max_store_lanes(r), 1);
    te_target host = {.backend = TE_BACKEND_C, .vector_bits = 512};
    r = te__pass_vectorize(&(te__pass_ctx){.ctx = c, .target = &host}, loop);
    assert_int_equal(max_store_lanes(r), 48);
    te_ctx_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_store_split_to_register_width),
        cmocka_unit_test(test_constant_and_offset_bases_fold),
        cmocka_unit_test(test_vector_let_split_into_parts),
        cmocka_unit_test(test_rebound_let_takes_its_own_parts),
        cmocka_unit_test(test_narrow_and_odd_widths_unchanged),
        cmocka_unit_test(test_pipeline_runs_it_for_c_targets),
        cmocka_unit_test(test_lowered_for_the_target),
        cmocka_unit_test(test_multiple_of_the_width),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

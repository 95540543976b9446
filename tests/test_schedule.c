/* Scheduling primitives: what each does to the loop order, and how each rejects illegal
 * requests while leaving the schedule unchanged. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tessera/schedule.h"
#include "tessera/te.h"

typedef struct {
    te_ctx *ctx;
    te_tensor *A, *B, *C, *D; /* C = A x B (reduction), D = relu(C) */
    te_schedule *s;
    te_stage *sc, *sd;
} fixture;

static void build(fixture *f, int64_t m, int64_t n, int64_t k)
{
    te_ctx *ctx = f->ctx = te_ctx_create();
    f->A = te_placeholder(ctx, "A", TE_F32, 2, (int64_t[]){m, k});
    f->B = te_placeholder(ctx, "B", TE_F32, 2, (int64_t[]){k, n});
    te_expr *i = te_axis(ctx, "i", m), *j = te_axis(ctx, "j", n), *r = te_reduce_axis(ctx, "k", k);
    f->C =
        te_compute(ctx, "C", 2, (te_expr *[]){i, j},
                   te_sum(ctx, te_mul(ctx, TE_AT(ctx, f->A, i, r), TE_AT(ctx, f->B, r, j)), 1, &r));
    te_expr *i2 = te_axis(ctx, "i", m), *j2 = te_axis(ctx, "j", n);
    f->D = te_compute(ctx, "D", 2, (te_expr *[]){i2, j2},
                      te_max(ctx, TE_AT(ctx, f->C, i2, j2), te_f32(ctx, 0)));
    assert_non_null(f->D);
    f->s = te_schedule_create(ctx, 1, &f->D);
    assert_non_null(f->s);
    f->sc = te_schedule_stage(f->s, f->C);
    f->sd = te_schedule_stage(f->s, f->D);
    assert_non_null(f->sc);
    assert_non_null(f->sd);
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    build(f, 64, 48, 32);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    te_ctx_free(f->ctx);
    free(f);
    return 0;
}

static char *leaf_names(te_stage *st)
{
    static char buf[512];
    buf[0] = 0;
    for (int i = 0; i < te_stage_nleaves(st); i++) {
        te_iter *it = te_stage_leaf(st, i);
        char one[64];
        snprintf(one, sizeof one, "%s%s:%lld", i ? " " : "", te_iter_name(it),
                 (long long)te_iter_extent(it));
        strcat(buf, one);
    }
    return buf;
}

/* An illegal call must fail with `code`, leave a message containing `needle`, and leave the
 * loop order and trace as they were. */
static void expect_reject(fixture *f, te_stage *st, int rc, int code, const char *needle,
                          const char *leaves_before, const char *trace_before)
{
    assert_int_equal(rc, code);
    if (!strstr(te_ctx_errmsg(f->ctx), needle))
        fail_msg("message '%s' lacks '%s'", te_ctx_errmsg(f->ctx), needle);
    assert_string_equal(leaf_names(st), leaves_before);
    assert_string_equal(te_schedule_trace(f->s), trace_before);
    te_ctx_clear_error(f->ctx);
}

static void test_stages_in_producer_order(void **state)
{
    fixture *f = *state;
    assert_int_equal(te_schedule_nstages(f->s), 2);
    assert_ptr_equal(te_schedule_stage_at(f->s, 0), f->sc);
    assert_ptr_equal(te_schedule_stage_at(f->s, 1), f->sd);
    assert_string_equal(leaf_names(f->sc), "i:64 j:48 k:32");
    assert_null(te_schedule_stage(f->s, f->A)); /* placeholders have no stage */
    assert_non_null(strstr(te_ctx_errmsg(f->ctx), "placeholder"));
}

static void test_split_divisible_and_not(void **state)
{
    fixture *f = *state;
    te_iter *o, *i;
    assert_int_equal(te_split(f->sc, te_stage_axis(f->sc, 0), 16, &o, &i), TE_OK);
    assert_string_equal(leaf_names(f->sc), "i_o:4 i_i:16 j:48 k:32");
    assert_int_equal(te_split(f->sc, te_stage_axis(f->sc, 1), 10, &o, &i), TE_OK);
    assert_string_equal(leaf_names(f->sc), "i_o:4 i_i:16 j_o:5 j_i:10 k:32");
    assert_int_equal(te_split_nparts(f->sc, te_stage_reduce_axis(f->sc, 0), 3, &o, &i), TE_OK);
    assert_string_equal(leaf_names(f->sc), "i_o:4 i_i:16 j_o:5 j_i:10 k_o:3 k_i:11");
    assert_true(te_iter_is_reduce(o));
    assert_non_null(strstr(te_schedule_trace(f->s), "split C i 16\n"));
}

static void test_tile_fuse_reorder(void **state)
{
    fixture *f = *state;
    te_iter *io, *jo, *ii, *ji, *fz;
    assert_int_equal(
        te_tile(f->sd, te_stage_axis(f->sd, 0), te_stage_axis(f->sd, 1), 8, 16, &io, &jo, &ii, &ji),
        TE_OK);
    assert_string_equal(leaf_names(f->sd), "i_o:8 j_o:3 i_i:8 j_i:16");
    assert_int_equal(te_fuse(f->sd, io, jo, &fz), TE_OK);
    assert_string_equal(leaf_names(f->sd), "i_o_j_o_f:24 i_i:8 j_i:16");
    assert_int_equal(te_reorder(f->sd, 2, (te_iter *[]){ji, ii}), TE_OK);
    assert_string_equal(leaf_names(f->sd), "i_o_j_o_f:24 j_i:16 i_i:8");
    assert_ptr_equal(te_stage_iter(f->sd, "j_i"), ji);
}

static void test_split_rejects(void **state)
{
    fixture *f = *state;
    te_iter *o, *i;
    char before[512];
    strcpy(before, leaf_names(f->sc));
    const char *tr = "";
    expect_reject(f, f->sc, te_split(f->sc, te_stage_axis(f->sc, 0), 0, &o, &i), TE_ERR_ARG,
                  "factor must be positive", before, tr);
    expect_reject(f, f->sc, te_split(f->sc, te_stage_axis(f->sd, 0), 4, &o, &i), TE_ERR_SCHEDULE,
                  "belongs to stage 'D'", before, tr);
    expect_reject(f, f->sc, te_split(f->sc, NULL, 4, &o, &i), TE_ERR_ARG, "NULL", before, tr);
    assert_int_equal(te_split(f->sc, te_stage_axis(f->sc, 0), 4, &o, &i), TE_OK);
    strcpy(before, leaf_names(f->sc));
    char trace[256];
    strcpy(trace, te_schedule_trace(f->s));
    expect_reject(f, f->sc, te_split(f->sc, te_stage_axis(f->sc, 0), 4, &o, &i), TE_ERR_SCHEDULE,
                  "not a current loop", before, trace);
    expect_reject(f, f->sc, te_split_nparts(f->sc, o, -1, NULL, NULL), TE_ERR_ARG,
                  "nparts must be positive", before, trace);
}

static void test_fuse_reorder_rejects(void **state)
{
    fixture *f = *state;
    char before[512];
    strcpy(before, leaf_names(f->sc));
    te_iter *i = te_stage_axis(f->sc, 0), *j = te_stage_axis(f->sc, 1),
            *k = te_stage_reduce_axis(f->sc, 0);
    expect_reject(f, f->sc, te_fuse(f->sc, j, i, NULL), TE_ERR_SCHEDULE, "directly inside", before,
                  "");
    expect_reject(f, f->sc, te_fuse(f->sc, j, k, NULL), TE_ERR_SCHEDULE, "cannot fuse reduction",
                  before, "");
    expect_reject(f, f->sc, te_reorder(f->sc, 3, (te_iter *[]){k, i, k}), TE_ERR_SCHEDULE,
                  "named twice", before, "");
    expect_reject(f, f->sc, te_reorder(f->sc, 1, (te_iter *[]){te_stage_axis(f->sd, 0)}),
                  TE_ERR_SCHEDULE, "belongs to stage", before, "");
    expect_reject(f, f->sc, te_tile(f->sc, i, k, 4, 4, NULL, NULL, NULL, NULL), TE_ERR_SCHEDULE,
                  "directly inside", before, "");
    assert_null(te_stage_axis(f->sc, 5));
    assert_non_null(strstr(te_ctx_errmsg(f->ctx), "axis 5 does not exist"));
    te_ctx_clear_error(f->ctx);
}

static void test_annotation_rejects(void **state)
{
    fixture *f = *state;
    char before[512];
    strcpy(before, leaf_names(f->sc));
    te_iter *i = te_stage_axis(f->sc, 0), *k = te_stage_reduce_axis(f->sc, 0);
    expect_reject(f, f->sc, te_vectorize(f->sc, i), TE_ERR_SCHEDULE, "not the innermost", before,
                  "");
    te_iter *fz;
    assert_int_equal(te_fuse(f->sd, te_stage_axis(f->sd, 0), te_stage_axis(f->sd, 1), &fz), TE_OK);
    char dl[512], dt[128];
    strcpy(dl, leaf_names(f->sd));
    strcpy(dt, te_schedule_trace(f->s));
    expect_reject(f, f->sd, te_vectorize(f->sd, NULL), TE_ERR_ARG, "NULL", dl, dt);
    expect_reject(f, f->sc, te_parallel(f->sc, k), TE_ERR_SCHEDULE, "reduction loop", before, dt);
    assert_int_equal(te_parallel(f->sc, i), TE_OK);
    char trace[128];
    strcpy(trace, te_schedule_trace(f->s));
    expect_reject(f, f->sc, te_parallel(f->sc, te_stage_axis(f->sc, 1)), TE_ERR_SCHEDULE,
                  "already has a parallel loop", before, trace);
    expect_reject(f, f->sc, te_unroll(f->sc, i), TE_ERR_SCHEDULE, "already annotated", before,
                  trace);
    expect_reject(f, f->sc, te_pragma_unroll_max(f->sc, -3), TE_ERR_ARG, "max_steps", before,
                  trace);
    expect_reject(f, f->sc, te_stage_nontemporal(f->sc, true), TE_ERR_SCHEDULE, "not an output",
                  before, trace);
}

static void test_placement_rejects(void **state)
{
    fixture *f = *state;
    char before[512];
    strcpy(before, leaf_names(f->sc));
    expect_reject(f, f->sc, te_compute_inline(f->sc), TE_ERR_SCHEDULE, "reduction", before, "");
    expect_reject(f, f->sd, te_compute_inline(f->sd), TE_ERR_SCHEDULE, "output", leaf_names(f->sd),
                  "");
    expect_reject(f, f->sd, te_compute_at(f->sd, f->sc, te_stage_axis(f->sc, 0)), TE_ERR_SCHEDULE,
                  "output", leaf_names(f->sd), "");
    expect_reject(f, f->sc, te_compute_at(f->sc, f->sd, te_stage_axis(f->sc, 0)), TE_ERR_SCHEDULE,
                  "belongs to stage 'C'", before, "");
    expect_reject(f, f->sc, te_compute_at(f->sc, f->sc, te_stage_axis(f->sc, 0)), TE_ERR_SCHEDULE,
                  "itself", before, "");
    /* compute_at then split of the attach loop is refused. */
    te_iter *j = te_stage_axis(f->sd, 1);
    assert_int_equal(te_compute_at(f->sc, f->sd, j), TE_OK);
    char trace[256];
    strcpy(trace, te_schedule_trace(f->s));
    expect_reject(f, f->sd, te_split(f->sd, j, 4, NULL, NULL), TE_ERR_SCHEDULE,
                  "computed at loop 'j'", leaf_names(f->sd), trace);
    /* cache_write after other primitives. */
    assert_null(te_cache_write(f->s, f->C, TE_SCOPE_LOCAL));
    assert_non_null(strstr(te_ctx_errmsg(f->ctx), "apply cache_write before"));
    te_ctx_clear_error(f->ctx);
    /* cache_read for a stage that does not read the tensor. */
    assert_null(te_cache_read(f->s, f->A, TE_SCOPE_LOCAL, 1, &f->sd));
    assert_non_null(strstr(te_ctx_errmsg(f->ctx), "does not read 'A'"));
    te_ctx_clear_error(f->ctx);
}

static void test_cache_write_and_read(void **state)
{
    fixture *f = *state;
    te_tensor *cl = te_cache_write(f->s, f->C, TE_SCOPE_LOCAL);
    assert_non_null(cl);
    assert_string_equal(te_tensor_name(cl), "C_local");
    te_stage *scl = te_schedule_stage(f->s, cl);
    assert_int_equal(te_schedule_nstages(f->s), 3);
    assert_ptr_equal(te_schedule_stage_at(f->s, 0), scl);
    assert_int_equal(te_stage_nreduce(scl), 1);
    assert_int_equal(te_stage_nreduce(f->sc), 0);
    assert_string_equal(leaf_names(f->sc), "i:64 j:48");
    te_tensor *al = te_cache_read(f->s, f->A, TE_SCOPE_LOCAL, 1, &scl);
    assert_non_null(al);
    assert_int_equal(te_schedule_nstages(f->s), 4);
    assert_ptr_equal(te_schedule_stage_at(f->s, 0), te_schedule_stage(f->s, al));
    assert_non_null(
        strstr(te_schedule_trace(f->s), "cache_write C local\ncache_read A local C_local\n"));
}

static void test_schedule_create_rejects(void **state)
{
    fixture *f = *state;
    assert_null(te_schedule_create(f->ctx, 1, &f->A));
    assert_non_null(strstr(te_ctx_errmsg(f->ctx), "'A' is a placeholder"));
    te_ctx_clear_error(f->ctx);
    assert_null(te_schedule_create(f->ctx, 0, NULL));
    assert_non_null(strstr(te_ctx_errmsg(f->ctx), "at least one output"));
    te_ctx_clear_error(f->ctx);
}

/* Issue 13: traces address stages by name, so two tensors of one schedule with the same name
 * would make "compute_inline U" replay onto whichever 'U' comes first, with TE_OK. */
/* A NULL output or a NULL compute body (from a caller's own bug, not from an earlier failed
 * call) is an argument error with a message, never NULL with error code 0. And an earlier
 * error stays the one reported. */
static void test_null_arguments_have_messages(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    te_tensor *none = NULL;
    assert_null(te_schedule_create(ctx, 1, &none));
    assert_int_equal(te_ctx_errcode(ctx), TE_ERR_ARG);
    assert_non_null(strstr(te_ctx_errmsg(ctx), "te_schedule_create"));
    assert_non_null(strstr(te_ctx_errmsg(ctx), "NULL"));
    te_ctx_clear_error(ctx);

    te_expr *i = te_axis(ctx, "i", 4);
    assert_null(te_compute(ctx, "Y", 1, (te_expr *[]){i}, NULL));
    assert_int_equal(te_ctx_errcode(ctx), TE_ERR_ARG);
    assert_non_null(strstr(te_ctx_errmsg(ctx), "te_compute"));
    assert_non_null(strstr(te_ctx_errmsg(ctx), "'Y'"));
    te_ctx_clear_error(ctx);

    assert_null(te_compute(ctx, "Y", 1, (te_expr *[]){NULL}, te_f32(ctx, 1)));
    assert_int_equal(te_ctx_errcode(ctx), TE_ERR_ARG);
    assert_non_null(strstr(te_ctx_errmsg(ctx), "te_compute"));
    te_ctx_clear_error(ctx);

    /* The first error is kept: a body that failed to build reports its own cause. */
    te_ctx_set_error(ctx, TE_ERR_SHAPE, "first problem");
    assert_null(te_compute(ctx, "Y", 1, (te_expr *[]){i}, NULL));
    assert_string_equal(te_ctx_errmsg(ctx), "first problem");
    te_ctx_free(ctx);
}

static void test_duplicate_names_rejected(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    te_tensor *A = te_placeholder(ctx, "A", TE_F32, 1, (int64_t[]){16});
    te_expr *i = te_axis(ctx, "i", 16), *i2 = te_axis(ctx, "i", 16), *i3 = te_axis(ctx, "i", 16);
    te_tensor *U1 = te_compute(ctx, "U", 1, &i, te_add(ctx, TE_AT(ctx, A, i), te_f32(ctx, 1)));
    te_tensor *U2 = te_compute(ctx, "U", 1, &i2, te_mul(ctx, TE_AT(ctx, U1, i2), te_f32(ctx, 2)));
    te_tensor *V = te_compute(ctx, "V", 1, &i3, te_neg(ctx, TE_AT(ctx, U2, i3)));
    assert_non_null(V);
    assert_null(te_schedule_create(ctx, 1, &V));
    assert_int_equal(te_ctx_errcode(ctx), TE_ERR_ARG);
    const char *msg = te_ctx_errmsg(ctx);
    if (!strstr(msg, "'U'") || !strstr(msg, "unique"))
        fail_msg("unclear message: %s", msg);
    te_ctx_clear_error(ctx);
    /* Two outputs with one name. */
    te_expr *j = te_axis(ctx, "i", 16), *j2 = te_axis(ctx, "i", 16);
    te_tensor *V2 = te_compute(ctx, "V", 1, &j, TE_AT(ctx, A, j));
    te_tensor *V3 = te_compute(ctx, "V", 1, &j2, TE_AT(ctx, A, j2));
    assert_null(te_schedule_create(ctx, 2, (te_tensor *[]){V2, V3}));
    assert_non_null(strstr(te_ctx_errmsg(ctx), "'V'"));
    te_ctx_clear_error(ctx);
    /* A compute named like a placeholder it reads. */
    te_expr *k = te_axis(ctx, "i", 16);
    te_tensor *A2 = te_compute(ctx, "A", 1, &k, te_add(ctx, TE_AT(ctx, A, k), te_f32(ctx, 1)));
    assert_null(te_schedule_create(ctx, 1, &A2));
    assert_non_null(strstr(te_ctx_errmsg(ctx), "'A'"));
    te_ctx_clear_error(ctx);
    /* Two placeholders with one name. */
    te_tensor *A3 = te_placeholder(ctx, "A", TE_F32, 1, (int64_t[]){16});
    te_expr *l = te_axis(ctx, "i", 16);
    te_tensor *W = te_compute(ctx, "W", 1, &l, te_add(ctx, TE_AT(ctx, A, l), TE_AT(ctx, A3, l)));
    assert_null(te_schedule_create(ctx, 1, &W));
    assert_non_null(strstr(te_ctx_errmsg(ctx), "'A'"));
    te_ctx_free(ctx);
}

/* The stages cache_read, cache_write and rfactor add get names no other tensor of the schedule
 * has, placeholders included. */
static void test_derived_names_stay_unique(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    te_tensor *A = te_placeholder(ctx, "A", TE_F32, 2, (int64_t[]){8, 32});
    te_tensor *AL = te_placeholder(ctx, "A_local", TE_F32, 2, (int64_t[]){8, 32});
    te_tensor *CR = te_placeholder(ctx, "C_rf", TE_F32, 1, (int64_t[]){8});
    te_expr *i = te_axis(ctx, "i", 8);
    te_expr *r2 = te_reduce_axis(ctx, "k", 32);
    te_tensor *C =
        te_compute(ctx, "C", 1, &i,
                   te_sum(ctx, te_add(ctx, TE_AT(ctx, A, i, r2), TE_AT(ctx, AL, i, r2)), 1, &r2));
    te_expr *i2 = te_axis(ctx, "i", 8);
    te_tensor *D = te_compute(ctx, "D", 1, &i2, te_add(ctx, TE_AT(ctx, C, i2), TE_AT(ctx, CR, i2)));
    assert_non_null(D);
    te_ctx_clear_error(ctx);
    te_schedule *s = te_schedule_create(ctx, 1, &D);
    assert_non_null(s);
    te_stage *sc = te_schedule_stage(s, C);
    te_tensor *a_local = te_cache_read(s, A, TE_SCOPE_LOCAL, 1, &sc);
    assert_non_null(a_local);
    assert_string_not_equal(te_tensor_name(a_local), "A_local");
    te_tensor *rf = te_rfactor(s, C, te_stage_reduce_axis(sc, 0));
    assert_non_null(rf);
    assert_string_not_equal(te_tensor_name(rf), "C_rf");
    /* Every name resolves to exactly the tensor that has it. */
    assert_ptr_equal(te_schedule_tensor_by_name(s, "A_local"), AL);
    assert_ptr_equal(te_schedule_tensor_by_name(s, "C_rf"), CR);
    assert_ptr_equal(te_schedule_tensor_by_name(s, te_tensor_name(a_local)), a_local);
    assert_ptr_equal(te_schedule_tensor_by_name(s, te_tensor_name(rf)), rf);
    te_ctx_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_stages_in_producer_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_split_divisible_and_not, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tile_fuse_reorder, setup, teardown),
        cmocka_unit_test_setup_teardown(test_split_rejects, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fuse_reorder_rejects, setup, teardown),
        cmocka_unit_test_setup_teardown(test_annotation_rejects, setup, teardown),
        cmocka_unit_test_setup_teardown(test_placement_rejects, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cache_write_and_read, setup, teardown),
        cmocka_unit_test_setup_teardown(test_schedule_create_rejects, setup, teardown),
        cmocka_unit_test(test_duplicate_names_rejected),
        cmocka_unit_test(test_null_arguments_have_messages),
        cmocka_unit_test(test_derived_names_stay_unique),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

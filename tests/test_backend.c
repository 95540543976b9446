/* Tests for the backend function table (backends/backend_impl.h): the lookup, and a kernel
 * taken through emit, emit_unit, compile_many, entry, run, time and free of the C table, as
 * te_build and the tuner's measurer use it; the CUDA table's emission needs no CUDA. */
#define _GNU_SOURCE

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "backends/backend_impl.h"
#include "tessera/cuda.h"
#include "tessera/ops.h"

static void test_lookup(void **state)
{
    (void)state;
    const te__backend *c = te__backend_get(TE_BACKEND_C);
    const te__backend *cu = te__backend_get(TE_BACKEND_CUDA);
    assert_non_null(c);
    assert_non_null(cu);
    assert_int_equal(c->kind, TE_BACKEND_C);
    assert_int_equal(cu->kind, TE_BACKEND_CUDA);
    assert_string_equal(c->name, "c");
    assert_string_equal(cu->name, "cuda");
    assert_null(te__backend_get((te_backend_kind)42));
    te_target t;
    assert_int_equal(c->target(&t), TE_OK);
    assert_int_equal(t.backend, TE_BACKEND_C);
    const void *entries[] = {
        (const void *)c->emit,   (const void *)c->emit_unit, (const void *)c->compile_many,
        (const void *)c->run,    (const void *)c->time,      (const void *)c->entry,
        (const void *)c->source, (const void *)c->free,      (const void *)c->emit_standalone};
    for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++)
        assert_non_null(entries[i]);
    assert_null(c->prelude);
    assert_non_null(cu->emit);
    assert_non_null(cu->prelude);
    assert_null(cu->compile_many); /* CUDA builds through te_cuda_build */
}

static void test_c_pass_through(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    te_tensor *ins[8], *outs[8];
    int n_in, n_out;
    assert_int_equal(te_op_build(ctx, "relu", "m=1,n=37", ins, &n_in, outs, &n_out), TE_OK);
    te_target tgt = te_target_host();
    const te__backend *be = te__backend_get(tgt.backend);
    te_tensor *args[2] = {ins[0], outs[0]};
    const te_lowered *fs[3];
    const char *names[3] = {"one", "two", "three"};
    for (int i = 0; i < 3; i++) {
        te_schedule *s = te_schedule_create(ctx, 1, outs);
        assert_non_null(s);
        fs[i] = te_lower(s, 2, args, names[i], &tgt);
        assert_non_null(fs[i]);
    }
    /* one source with one kernel, one with two */
    const char *srcs[2] = {be->emit(ctx, fs[0], &tgt), be->emit_unit(ctx, 2, fs + 1, &tgt)};
    assert_non_null(srcs[0]);
    assert_non_null(srcs[1]);
    const char *const n0[] = {"one"}, *const n1[] = {"two", "three"};
    const char *const *nm[2] = {n0, n1};
    te__kernel *k[3] = {0};
    int st[2];
    assert_int_equal(be->compile_many(2, srcs, (const int[]){1, 2}, nm, &tgt, 2, k, st, NULL, 0),
                     TE_OK);
    assert_int_equal(st[0], TE_OK);
    assert_int_equal(st[1], TE_OK);
    float x[37], y[37];
    for (int i = 0; i < 37; i++)
        x[i] = (float)(i - 18);
    for (int j = 0; j < 3; j++) {
        assert_non_null(k[j]);
        assert_non_null(be->entry(k[j]));
        assert_non_null(strstr(be->source(k[j]), names[j]));
        memset(y, 0xff, sizeof y);
        assert_int_equal(be->run(k[j], (void *[]){x, y}), TE_OK);
        for (int i = 0; i < 37; i++)
            assert_true(y[i] == (x[i] > 0 ? x[i] : 0.0f));
        double med = -1;
        assert_int_equal(be->time(k[j], (void *[]){x, y}, 1, 3, &med), TE_OK);
        assert_true(med >= 0);
    }
    /* the kernels of one unit share its library: freeing one leaves the other runnable */
    be->free(k[1]);
    assert_int_equal(be->run(k[2], (void *[]){x, y}), TE_OK);
    be->free(k[2]);
    be->free(k[0]);
    be->free(NULL);
    /* a source that does not compile: its status, and no kernel */
    const char *bad = "int one_packed(void **a) { return a + ; }\n";
    char ebuf[512], *errs[1] = {ebuf};
    te__kernel *kb = NULL;
    int sb = TE_OK;
    assert_int_equal(be->compile_many(1, &bad, (const int[]){1}, (const char *const *const[]){n0},
                                      &tgt, 1, &kb, &sb, errs, sizeof ebuf),
                     TE_ERR_COMPILE);
    assert_int_equal(sb, TE_ERR_COMPILE);
    assert_null(kb);
    te_ctx_free(ctx);
}

static void test_cuda_emission_without_cuda(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    te_tensor *ins[8], *outs[8];
    int n_in, n_out;
    assert_int_equal(te_op_build(ctx, "relu", "m=2,n=128", ins, &n_in, outs, &n_out), TE_OK);
    te_target tgt = te_target_cuda(80);
    te_schedule *s = te_schedule_create(ctx, 1, outs);
    te_cuda_knobs kn = te_cuda_knobs_default("elementwise");
    assert_int_equal(te_cuda_schedule_elementwise(s, outs[0], &kn), TE_OK);
    te_tensor *args[2] = {ins[0], outs[0]};
    const te_lowered *f = te_lower(s, 2, args, "relu", &tgt);
    assert_non_null(f);
    const te__backend *be = te__backend_get(TE_BACKEND_CUDA);
    const char *src = be->emit(ctx, f, &tgt);
    assert_non_null(src);
    assert_non_null(strstr(src, "__global__"));
    const char *only = NULL;
    te__emitted_fn ef = {0};
    te__emit_opts eo = {.no_prelude = true};
    assert_int_equal(be->emit_standalone(ctx, 1, &f, &tgt, &eo, &only, &ef), TE_OK);
    assert_non_null(ef.cuda);
    assert_null(strstr(only, be->prelude));
    assert_non_null(strstr(only, "__global__"));
    te_ctx_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lookup),
        cmocka_unit_test(test_c_pass_through),
        cmocka_unit_test(test_cuda_emission_without_cuda),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Plugins and registered operators (te_op_register, te_plugin_load, `--plugin`): the example
 * plugin (examples/plugin/gelu_gate.c) listed, tuned, generated and used as a graph node by the
 * real CLI; its operator built in this process and checked against the float64 reference;
 * workload keys that change with the definition; and every refusal (missing file, missing init,
 * ABI mismatch, duplicate name, bad definitions) a clear message and a nonzero status. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "tessera/ops.h"
#include "tessera/te.h"
#include "testutil.h"

static char g_dir[512];

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return strdup("");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = 0;
    fclose(f);
    return s;
}

/* Runs a shell command in g_dir; its exit status (128 + signal when killed). */
static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int st = system(cmd);
    if (WIFSIGNALED(st))
        return 128 + WTERMSIG(st);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* `tessera ARGS` in g_dir (TESSERA_PLUGINS as env, NULL: unset); output of both streams. */
static int cli_env(const char *env, const char *args, char **out)
{
    char o[600];
    snprintf(o, sizeof o, "%s/cli.out", g_dir);
    int rc = sh("cd '%s' && TESSERA_DB= %s%s%s '%s' %s > '%s' 2>&1", g_dir,
                env ? "TESSERA_PLUGINS='" : "env -u TESSERA_PLUGINS", env ? env : "",
                env ? "'" : "", TESSERA_CLI, args, o);
    *out = slurp(o);
    return rc;
}

static int cli(const char *args, char **out) { return cli_env(NULL, args, out); }

#define assert_contains(hay, needle)                                                               \
    do {                                                                                           \
        if (!strstr((hay), (needle)))                                                              \
            fail_msg("expected to find \"%s\" in:\n%s", (needle), (hay));                          \
    } while (0)

/* ---- The CLI ------------------------------------------------------------------------------ */

static void test_ops_lists_the_plugin_operator(void **state)
{
    (void)state;
    char *out;
    assert_int_equal(cli("ops --plugin " PLUGIN_EXAMPLE " gelu_gate", &out), 0);
    assert_contains(out, "gelu_gate");
    assert_contains(out, "from " PLUGIN_EXAMPLE);
    assert_contains(out, "alpha=1");
    free(out);
    /* $TESSERA_PLUGINS, colon-separated, and the same file twice is loaded once */
    assert_int_equal(
        cli_env(PLUGIN_EXAMPLE ":" PLUGIN_EXAMPLE, "ops --json --plugin=" PLUGIN_EXAMPLE, &out), 0);
    assert_contains(out, "\"name\": \"gelu_gate\"");
    assert_contains(out, "\"inputs\": \"X[m,k], W[k,n], G[m,n]\"");
    free(out);
    /* without the plugin the operator is unknown */
    assert_int_equal(cli("ops gelu_gate", &out), 2);
    assert_contains(out, "unknown operator 'gelu_gate'");
    free(out);
}

static void test_tune_and_gen_of_a_plugin_operator(void **state)
{
    (void)state;
    char *out;
    assert_int_equal(cli("tune --plugin " PLUGIN_EXAMPLE " gelu_gate --shape m=12,n=16,k=8 "
                         "--trials 3 --db t.db",
                         &out),
                     0);
    /* every candidate was checked against the reference: none failed */
    assert_contains(out, "errors 0");
    free(out);
    assert_int_equal(cli("db list --db t.db", &out), 0);
    assert_contains(out, "gelu_gate;k=8,m=12,n=16;f32;expr=");
    free(out);
    assert_int_equal(cli("gen --plugin " PLUGIN_EXAMPLE " gelu_gate --shape m=12,n=16,k=8 --db "
                         "t.db -o gen",
                         &out),
                     0);
    assert_contains(out, "1 from database records");
    free(out);
    assert_int_equal(sh("cd '%s' && cc -std=c99 -Wall -Wextra -Werror -pedantic -c gen/gelu_gate.c "
                        "-o gen/gelu_gate.o 2>/dev/null",
                        g_dir),
                     0);
    char *src = slurp(tt_path_in(g_dir, "gen/gelu_gate.c"));
    assert_contains(src, "--plugin"); /* the command that regenerates it loads the plugin */
    free(src);
}

static void test_changed_definition_gets_another_key(void **state)
{
    (void)state;
    char *out;
    assert_int_equal(cli("tune --plugin " PLUGIN_EXAMPLE " gelu_gate --shape m=8,n=8,k=8 "
                         "--trials 2 --db k.db --quiet",
                         &out),
                     0);
    free(out);
    /* the variant builds tanh where the example builds erf: same name, same keys */
    assert_int_equal(cli("tune --plugin " PLUGIN_VARIANT " gelu_gate --shape m=8,n=8,k=8 "
                         "--trials 2 --db k.db",
                         &out),
                     0);
    /* nothing of the old definition is reused: both runs measured their own trials */
    assert_contains(out, "trials 2/2");
    free(out);
    assert_int_equal(cli("db list --db k.db --json", &out), 0);
    /* two workloads, each with its own two trials: none were taken over */
    int n = 0;
    char first[64] = "";
    for (const char *p = out; (p = strstr(p, "gelu_gate;k=8,m=8,n=8;f32;expr=")); p++) {
        const char *row_end = strchr(p, '}');
        const char *trials = strstr(p, "\"trials\":2,");
        if (!row_end || !trials || trials > row_end)
            fail_msg("workload row without its own 2 trials:\n%s", out);
        if (!n)
            snprintf(first, sizeof first, "%.48s", p);
        else if (!strncmp(first, p, strlen(first)))
            fail_msg("one key twice:\n%s", out);
        n++;
    }
    assert_int_equal(n, 2);
    free(out);
}

static void test_graph_node_of_a_plugin_operator(void **state)
{
    (void)state;
    FILE *f = fopen(tt_path_in(g_dir, "p.graph"), "w");
    assert_non_null(f);
    fprintf(f, "input x f32[8,16]\n"
               "const w f32[16,12] random seed=1\n"
               "const g f32[8,12] random seed=2\n"
               "h = gelu_gate(x, w, g) alpha=0.5\n"
               "y = relu(h)\n"
               "output y\n");
    fclose(f);
    char *out;
    assert_int_equal(cli("fuse --plugin " PLUGIN_EXAMPLE " p.graph", &out), 0);
    assert_contains(out, "h (gelu_gate)");
    free(out);
    assert_int_equal(cli("run --plugin " PLUGIN_EXAMPLE " p.graph --check --runs 1", &out), 0);
    assert_contains(out, "every group output matches the reference");
    free(out);
    assert_int_equal(
        cli_env(PLUGIN_EXAMPLE, "tune --graph p.graph --trials 4 --batch 2 --db g.db", &out), 0);
    assert_contains(out, "graph_gelu_gate;in0=8x16,in1=16x12,in2=8x12;f32;expr=");
    assert_contains(out, "errors 0");
    free(out);
    /* without the plugin: a clear error naming the operator */
    assert_int_not_equal(cli("fuse p.graph", &out), 0);
    assert_contains(out, "gelu_gate");
    free(out);
}

static void test_refused_plugins_fail_cleanly(void **state)
{
    (void)state;
    static const struct {
        const char *args, *want;
    } cases[] = {
        {"ops --plugin /no/such/plugin.so", "cannot load"},
        {"ops --plugin " PLUGIN_FIXTURE1, "no function tessera_plugin_init"},
        {"ops --plugin " PLUGIN_FIXTURE2, "built for plugin ABI version 2"},
        {"ops --plugin " PLUGIN_FIXTURE3, "operator 'matmul': the name is taken"},
        {"ops --plugin " PLUGIN_FIXTURE4, "key 'alpha' is no input dimension"},
        {"fuse --plugin " PLUGIN_FIXTURE5 " x.graph", "taken (by the graph operator 'batch_norm')"},
        {"tune --plugin " PLUGIN_FIXTURE3 " matmul --shape m=4,n=4,k=4", "the name is taken"},
        {"gen --plugin " PLUGIN_FIXTURE2 " matmul --shape m=4,n=4,k=4", "ABI"},
        {"run --plugin /no/such/plugin.so x.graph", "cannot load"},
        {"ops --plugin", "option '--plugin' needs a value"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out;
        int rc = cli(cases[i].args, &out);
        if (rc == 0 || rc >= 128 || !strstr(out, cases[i].want))
            fail_msg("tessera %s: exit %d, want nonzero without a crash and \"%s\" in:\n%s",
                     cases[i].args, rc, cases[i].want, out);
        free(out);
    }
    char *out;
    assert_int_not_equal(cli_env("/no/such.so", "ops", &out), 0);
    assert_contains(out, "plugin /no/such.so");
    free(out);
}

/* ---- The API, in this process ------------------------------------------------------------ */

static void test_loaded_operator_matches_the_reference(void **state)
{
    (void)state;
    char err[512];
    assert_int_equal(te_plugin_load(PLUGIN_EXAMPLE, err, sizeof err), TE_OK);
    assert_int_equal(te_plugin_load(PLUGIN_EXAMPLE, err, sizeof err), TE_OK); /* once */
    const te_op_info *op = te_op_lookup("gelu_gate");
    assert_non_null(op);
    assert_non_null(op->def);
    assert_string_equal(op->attrs, "alpha=1");
    assert_string_equal(op->inputs, "X,W,G");
    int n_reg = 0;
    te_op_list_registered(&n_reg);
    assert_true(n_reg >= 1);

    te_ctx *ctx = te_ctx_create();
    te_tensor *in[TE_OP_MAX_IO], *outs[TE_OP_MAX_IO];
    int n_in = 0, n_out = 0;
    enum { M = 6, N = 5, K = 7 };
    assert_int_equal(
        te_op_build(ctx, "gelu_gate", "m=6,n=5,k=7,alpha=2,dtype=f64", in, &n_in, outs, &n_out),
        TE_OK);
    assert_int_equal(n_in, 3);
    assert_int_equal(n_out, 1);
    tt_rng rng;
    tt_rng_seed(&rng, tt_seed(17));
    double x[M * K], w[K * N], g[M * N], y[M * N];
    for (int i = 0; i < M * K; i++)
        x[i] = tt_rng_uniform(&rng, -1, 1);
    for (int i = 0; i < K * N; i++)
        w[i] = tt_rng_uniform(&rng, -1, 1);
    for (int i = 0; i < M * N; i++)
        g[i] = tt_rng_uniform(&rng, -1, 1), y[i] = NAN;
    const void *ins_data[] = {x, w, g};
    double *outs_data[] = {y};
    int rc = te_reference_eval(ctx, 3, in, ins_data, 1, outs, outs_data);
    if (rc)
        fail_msg("te_reference_eval: %s", te_ctx_errmsg(ctx));
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++)
                s += x[i * K + k] * w[k * N + j];
            double want = 2 * (0.5 * s * (1 + erf(s / sqrt(2.0)))) * g[i * N + j];
            if (!(fabs(y[i * N + j] - want) <= 1e-12 * (1 + fabs(want))))
                fail_msg("y[%d,%d] = %.17g, want %.17g", i, j, y[i * N + j], want);
        }
    /* the workload key carries the expression hash, and the hash follows the shape */
    te_op_params kv;
    char k1[256], k2[256];
    assert_int_equal(te_op_params_parse(ctx, "m=6,n=5,k=7", &kv), TE_OK);
    assert_true(te_op_workload_key(ctx, op, &kv, k1, sizeof k1) > 0);
    assert_non_null(strstr(k1, "gelu_gate;k=7,m=6,n=5;f32;expr="));
    assert_int_equal(te_op_params_parse(ctx, "m=6,n=5,k=7,alpha=3", &kv), TE_OK);
    assert_true(te_op_workload_key(ctx, op, &kv, k2, sizeof k2) > 0);
    assert_string_not_equal(k1, k2);
    /* bad parameters: the registry's own messages */
    assert_int_equal(te_op_build(ctx, "gelu_gate", "m=6,n=5", in, &n_in, outs, &n_out), TE_ERR_ARG);
    assert_non_null(strstr(te_ctx_errmsg(ctx), "missing key 'k'"));
    te_ctx_free(ctx);
    ctx = te_ctx_create(); /* a context keeps its first error */
    assert_int_equal(te_op_build(ctx, "gelu_gate", "m=0,n=5,k=2", in, &n_in, outs, &n_out),
                     TE_ERR_ARG);
    assert_non_null(strstr(te_ctx_errmsg(ctx), "must be positive"));
    te_ctx_free(ctx);
}

static int build_copy(te_ctx *ctx, int n_in, te_tensor *const *in, const te_op_params *attrs,
                      const char *name, te_tensor **out, void *user)
{
    (void)ctx, (void)n_in, (void)attrs, (void)name, (void)user;
    out[0] = in[0];
    return TE_OK;
}

static void test_register_refuses_bad_definitions(void **state)
{
    (void)state;
    static const te_op_key k_mn[] = {{"m", NULL, 0, "rows", 0}, {"n", NULL, 0, "cols", 0}};
    static const te_op_key k_attr[] = {{"m", NULL, 0, "rows", 0}, {"beta", NULL, 0, "b", 0}};
    static const te_op_key k_word[] = {{"m", NULL, 1, "a|b", 0}};
    static const te_op_key k_dflt[] = {{"m", NULL, 0, "rows", 0}, {"beta", "x", 0, "b", 0}};
    static const struct {
        te_op_def d;
        const char *want;
    } cases[] = {
        {{.name = "9bad", .inputs = "X[4]", .build = build_copy}, "C identifier"},
        {{.name = "softmax", .inputs = "X[4]", .build = build_copy}, "the name is taken"},
        {{.name = "no_build", .inputs = "X[4]"}, "no build function"},
        {{.name = "no_inputs", .build = build_copy}, "no inputs"},
        {{.name = "bad_dim", .nkeys = 2, .keys = k_mn, .inputs = "X[m,q]", .build = build_copy},
         "dimension 'q' is no key"},
        {{.name = "bad_syntax", .nkeys = 2, .keys = k_mn, .inputs = "X(m)", .build = build_copy},
         "expected NAME[dim,...]"},
        {{.name = "attr_nodef", .nkeys = 2, .keys = k_attr, .inputs = "X[m]", .build = build_copy},
         "needs a default"},
        {{.name = "word_dim", .nkeys = 1, .keys = k_word, .inputs = "X[m]", .build = build_copy},
         "word key"},
        {{.name = "bad_default", .nkeys = 2, .keys = k_dflt, .inputs = "X[m]", .build = build_copy},
         "not a valid value"},
        {{.name = "bad_kind", .inputs = "X[4]", .build = build_copy, .kind = "fancy"},
         "kind 'fancy'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[512] = "";
        int rc = te_op_register(&cases[i].d, err, sizeof err);
        if (rc == TE_OK || !strstr(err, cases[i].want))
            fail_msg("case %zu: status %d, message '%s' (want '%s')", i, rc, err, cases[i].want);
    }
    assert_int_equal(te_op_register(NULL, NULL, 0), TE_ERR_ARG);
    /* a good one registers once, then its name is taken */
    te_op_def ok = {.name = "plugin_test_copy",
                    .nkeys = 2,
                    .keys = k_mn,
                    .inputs = "X[m,n]",
                    .build = build_copy,
                    .kind = "elemwise"};
    char err[512];
    assert_int_equal(te_op_register(&ok, err, sizeof err), TE_OK);
    assert_int_equal(te_op_register(&ok, err, sizeof err), TE_ERR_ARG);
    assert_non_null(strstr(err, "the name is taken (by te_op_register)"));
    /* and the library's te_op_info.build of a registered operator fails cleanly */
    te_ctx *ctx = te_ctx_create();
    const te_op_info *op = te_op_lookup("plugin_test_copy");
    assert_non_null(op);
    te_op_params kv;
    te_tensor *in[TE_OP_MAX_IO], *outs[TE_OP_MAX_IO];
    int n_in, n_out;
    assert_int_equal(te_op_params_parse(ctx, "m=2,n=3", &kv), TE_OK);
    assert_int_equal(op->build(ctx, &kv, in, &n_in, outs, &n_out), TE_ERR_ARG);
    assert_int_equal(te_op_info_build(ctx, op, &kv, in, &n_in, outs, &n_out), TE_OK);
    assert_int_equal(te_tensor_shape(in[0])[1], 3);
    te_ctx_free(ctx);
}

static void test_plugin_load_errors_in_process(void **state)
{
    (void)state;
    char err[512];
    assert_int_equal(te_plugin_load("/no/such/plugin.so", err, sizeof err), TE_ERR_IO);
    assert_non_null(strstr(err, "cannot load"));
    assert_int_equal(te_plugin_load(PLUGIN_FIXTURE1, err, sizeof err), TE_ERR_NOT_FOUND);
    assert_int_equal(te_plugin_load(PLUGIN_FIXTURE2, err, sizeof err), TE_ERR_UNSUPPORTED);
    assert_int_equal(te_plugin_load(PLUGIN_FIXTURE3, err, sizeof err), TE_ERR_ARG);
    assert_non_null(strstr(err, "matmul"));
    assert_int_equal(te_plugin_load(NULL, err, sizeof err), TE_ERR_ARG);
    assert_int_equal(te_plugin_load("", NULL, 0), TE_ERR_ARG);
}

static int setup(void **state)
{
    (void)state;
    return tt_tmpdir_make(g_dir, sizeof g_dir, "plugin") ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    tt_tmpdir_remove(g_dir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ops_lists_the_plugin_operator),
        cmocka_unit_test(test_tune_and_gen_of_a_plugin_operator),
        cmocka_unit_test(test_changed_definition_gets_another_key),
        cmocka_unit_test(test_graph_node_of_a_plugin_operator),
        cmocka_unit_test(test_refused_plugins_fail_cleanly),
        cmocka_unit_test(test_loaded_operator_matches_the_reference),
        cmocka_unit_test(test_register_refuses_bad_definitions),
        cmocka_unit_test(test_plugin_load_errors_in_process),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

/* The lowering pipeline as a table (schedule/pipeline.c): the table agrees with
 * docs/ARCHITECTURE.md, IR dumps come after exactly the passes that run, a failing pass is named
 * in the error, cross-thread reductions are lowered by their pass, and `tessera lower` drives
 * all of it from the command line. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "schedule/passes.h"
#include "tessera/backend.h"
#include "tessera/cuda.h"
#include "tessera/ops.h"
#include "tessera/schedule.h"

#define OK(x) assert_int_equal((x), TE_OK)

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    size_t got = fread(buf, 1, (size_t)n, f);
    buf[got] = 0;
    fclose(f);
    return buf;
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

/* A 32x32x32 matmul with a vectorized loop, so the vector passes have work. */
typedef struct mm {
    te_ctx *ctx;
    te_schedule *s;
    te_tensor *args[3];
} mm;

static mm make_matmul(void)
{
    mm m;
    m.ctx = te_ctx_create();
    te_tensor *in[TE_OP_MAX_IO], *out[TE_OP_MAX_IO];
    int n_in = 0, n_out = 0;
    OK(te_op_build(m.ctx, "matmul", "m=32,n=32,k=32", in, &n_in, out, &n_out));
    m.s = te_schedule_create(m.ctx, 1, out);
    te_stage *st = te_schedule_stage(m.s, out[0]);
    te_iter *jo, *ji;
    OK(te_split(st, te_stage_axis(st, 1), 8, &jo, &ji));
    te_iter *order[] = {te_stage_axis(st, 0), jo, te_stage_reduce_axis(st, 0), ji};
    OK(te_reorder(st, 4, order));
    if (te_vectorize(st, ji) != TE_OK)
        fail_msg("%s", te_ctx_errmsg(m.ctx));
    m.args[0] = in[0];
    m.args[1] = in[1];
    m.args[2] = out[0];
    return m;
}

/* ---- The table and the documentation ------------------------------------------------------ */

/* docs/ARCHITECTURE.md holds the table between <!-- pass-table --> markers, one row per pass:
 * "| # | pass | runs | what it does |". */
static void test_pass_table_matches_architecture_doc(void **state)
{
    (void)state;
    char *doc = slurp(TE_SOURCE_DIR "/docs/ARCHITECTURE.md");
    assert_non_null(doc);
    char *start = strstr(doc, "<!-- pass-table");
    char *end = strstr(doc, "<!-- /pass-table -->");
    if (!start || !end || end < start)
        fail_msg("docs/ARCHITECTURE.md has no <!-- pass-table --> ... <!-- /pass-table --> block");
    *end = 0;
    int row = 0;
    for (char *line = strchr(start, '\n'); line && *line; line = strchr(line + 1, '\n')) {
        int idx;
        char name[64], when[64];
        if (sscanf(line + 1, "| %d | %63[^ |] | %63[^|]|", &idx, name, when) != 3)
            continue;
        for (char *w = when + strlen(when); w > when && w[-1] == ' ';)
            *--w = 0;
        if (idx != row)
            fail_msg("doc row %d is numbered %d", row, idx);
        if (row >= te_lower_pass_count())
            fail_msg("the doc lists more passes than the pipeline runs (%d)",
                     te_lower_pass_count());
        if (strcmp(name, te_lower_pass_name(row)) || strcmp(when, te_lower_pass_when(row)))
            fail_msg("doc row %d is '%s' (%s), the pipeline runs '%s' (%s); regenerate it with "
                     "`tessera lower --passes --markdown`",
                     row, name, when, te_lower_pass_name(row), te_lower_pass_when(row));
        if (!strstr(line, te_lower_pass_what(row)))
            fail_msg("doc row %d does not describe '%s' as the code does: %s", row, name,
                     te_lower_pass_what(row));
        row++;
    }
    assert_int_equal(row, te_lower_pass_count());
    assert_null(te_lower_pass_name(row));
    assert_null(te_lower_pass_name(-1));
    free(doc);
}

static void test_table_starts_with_loop_nests_and_every_pass_is_named(void **state)
{
    (void)state;
    assert_string_equal(te_lower_pass_name(0), "loop_nests");
    for (int i = 0; i < te__pipeline_n; i++) {
        assert_non_null(te__pipeline[i].run);
        assert_true(strlen(te__pipeline[i].name) > 0);
        assert_true(strlen(te__pipeline[i].what) > 0);
    }
}

/* ---- Dumps ---------------------------------------------------------------------------------- */

static bool runs_on_c_cpu_schedule(int i)
{
    return !strcmp(te_lower_pass_when(i), "always") || !strcmp(te_lower_pass_when(i), "C target");
}

static void test_dump_all_prints_ir_after_every_pass_that_runs(void **state)
{
    (void)state;
    mm m = make_matmul();
    char *buf = NULL;
    size_t n = 0;
    FILE *out = open_memstream(&buf, &n);
    te_target tgt = te_target_host();
    te_lowered *f = te_lower_dump(m.s, 3, m.args, "mm", &tgt, "all", out);
    fclose(out);
    assert_non_null(f);
    int expect = 0;
    for (int i = 0; i < te_lower_pass_count(); i++) {
        char head[96];
        snprintf(head, sizeof head, "// ---- IR after pass %d '%s' ----\nfunc mm(A, B, matmul)", i,
                 te_lower_pass_name(i));
        if (runs_on_c_cpu_schedule(i)) {
            expect++;
            if (!strstr(buf, head))
                fail_msg("no dump after pass %d (%s):\n%s", i, te_lower_pass_name(i), buf);
        } else if (strstr(buf, head)) {
            fail_msg("pass %d (%s) runs only on %s but was dumped", i, te_lower_pass_name(i),
                     te_lower_pass_when(i));
        }
    }
    assert_int_equal(count(buf, "// ---- IR after pass"), expect);
    /* The loop nest is not vectorized yet; after vectorize it is. */
    char *vec = strstr(buf, "'vectorize'");
    assert_non_null(vec);
    char *ramp = strstr(buf, "ramp(");
    assert_true(ramp && ramp > vec);
    free(buf);
    te_ctx_free(m.ctx);
}

static void test_dump_env_var_selects_passes_and_goes_to_stderr(void **state)
{
    (void)state;
    mm m = make_matmul();
    char path[] = "/tmp/tessera_dump_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    setenv("TESSERA_DUMP_IR", "vectorize,unroll", 1);
    te_target tgt = te_target_host();
    te_lowered *f = te_lower(m.s, 3, m.args, "mm", &tgt);
    unsetenv("TESSERA_DUMP_IR");
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(fd);
    assert_non_null(f);
    char *text = slurp(path);
    unlink(path);
    assert_int_equal(count(text, "// ---- IR after pass"), 2);
    assert_non_null(strstr(text, "'vectorize' ----"));
    assert_non_null(strstr(text, "'unroll' ----"));
    free(text);
    te_ctx_free(m.ctx);
}

static void test_unknown_pass_in_dump_is_an_error_listing_the_passes(void **state)
{
    (void)state;
    mm m = make_matmul();
    te_target tgt = te_target_host();
    assert_null(te_lower_dump(m.s, 3, m.args, "mm", &tgt, "vectorize,vectorise", stderr));
    assert_int_equal(te_ctx_errcode(m.ctx), TE_ERR_ARG);
    const char *msg = te_ctx_errmsg(m.ctx);
    assert_non_null(strstr(msg, "unknown pass 'vectorise'"));
    assert_non_null(strstr(msg, "loop_nests"));
    assert_non_null(strstr(msg, "thread_split"));
    te_ctx_free(m.ctx);
}

/* ---- Errors ---------------------------------------------------------------------------------- */

static void test_failing_pass_is_named_in_the_error(void **state)
{
    (void)state;
    /* A CPU schedule lowered for CUDA: nothing is bound to blocks or threads, which only the
     * GPU check refuses. */
    mm m = make_matmul();
    te_target cuda = te_target_cuda(80);
    assert_null(te_lower(m.s, 3, m.args, "mm", &cuda));
    const char *msg = te_ctx_errmsg(m.ctx);
    if (strncmp(msg, "lowering pass 'gpu_check': ", 27) != 0)
        fail_msg("error does not name the pass first: %s", msg);
    assert_non_null(strstr(msg, "bound to a GPU block or thread"));
    te_ctx_free(m.ctx);
}

/* ---- Cross-thread reductions are a pass ------------------------------------------------------ */

static bool marked_loop(const te_stmt *s, void *user)
{
    if (s->kind == TE_S_FOR && s->u.loop.xreduce)
        *(int *)user += 1;
    return true;
}

static void test_cross_thread_reduction_is_lowered_by_its_pass(void **state)
{
    (void)state;
    te_ctx *ctx = te_ctx_create();
    te_tensor *in[TE_OP_MAX_IO], *out[TE_OP_MAX_IO];
    int n_in = 0, n_out = 0;
    OK(te_op_build(ctx, "softmax", "m=4,n=64", in, &n_in, out, &n_out));
    te_schedule *s = te_schedule_create(ctx, 1, out);
    te_cuda_knobs k = te_cuda_knobs_default("softmax");
    OK(te_cuda_schedule_softmax(s, out[0], &k));
    te_tensor *args[2] = {in[0], out[0]};
    te_target tgt = te_target_host();
    char *buf = NULL;
    size_t n = 0;
    FILE *dump = open_memstream(&buf, &n);
    te_lowered *f = te_lower_dump(s, 2, args, "sm", &tgt, "loop_nests,cross_thread_reduce", dump);
    fclose(dump);
    if (!f)
        fail_msg("%s", te_ctx_errmsg(ctx));
    /* Before the pass the reduction loops are marked; after it the tree is there. */
    char *after = strstr(buf, "'cross_thread_reduce' ----");
    assert_non_null(after);
    char *mark = strstr(buf, "reduce-into softmax_max");
    assert_true(mark && mark < after);
    assert_null(strstr(after, "reduce-into"));
    assert_non_null(strstr(after, "softmax_max_red"));
    int marked = 0;
    te__stmt_visit(f->body, marked_loop, NULL, &marked);
    assert_int_equal(marked, 0);
    free(buf);
    te_ctx_free(ctx);
}

/* ---- The command line ------------------------------------------------------------------------ */

static int cli(const char *args, char **out)
{
    char cmd[1024], path[] = "/tmp/tessera_lower_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    snprintf(cmd, sizeof cmd, "TESSERA_DB= '%s' lower %s > '%s' 2>&1", TESSERA_CLI, args, path);
    int rc = system(cmd);
    *out = slurp(path);
    unlink(path);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void test_cli_lower_prints_ir_dumps_and_passes(void **state)
{
    (void)state;
    char *out;
    assert_int_equal(cli("matmul --shape m=8,n=8,k=8", &out), 0);
    assert_non_null(strstr(out, "func matmul(A, B, matmul) {"));
    free(out);
    assert_int_equal(cli("matmul --shape m=8,n=8,k=8 --dump=loop_nests,simplify", &out), 0);
    assert_int_equal(count(out, "// ---- IR after pass"), 4); /* loop_nests, 3 x simplify */
    free(out);
    assert_int_equal(cli("matmul --shape m=8,n=8,k=8 --emit", &out), 0);
    assert_non_null(strstr(out, "int matmul_packed(void **args)"));
    free(out);
    assert_int_equal(cli("--passes", &out), 0);
    for (int i = 0; i < te_lower_pass_count(); i++)
        assert_non_null(strstr(out, te_lower_pass_name(i)));
    free(out);
    assert_int_equal(cli("--passes --markdown", &out), 0);
    assert_non_null(strstr(out, "| 0 | loop_nests | always |"));
    free(out);
}

/* A vectorize that lowering kept scalar is reported on stderr as "note: ..." (and as a comment
 * in the printed program); one that vectorizes (a padding read, now a masked gather) is not. */
static void test_cli_lower_notes_scalar_fallbacks_on_stderr(void **state)
{
    (void)state;
    char cmd[1024], op[] = "/tmp/tessera_lower_o_XXXXXX", ep[] = "/tmp/tessera_lower_e_XXXXXX";
    close(mkstemp(op));
    close(mkstemp(ep));
    static const char *const widths[2] = {"6", "8"};
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd,
                 "TESSERA_DB= '%s' lower pad --shape n=1,c=1,h=4,w=30,pad=1 --trace 'split pad i3 "
                 "%s\nvectorize pad i3_i' > '%s' 2> '%s'",
                 TESSERA_CLI, widths[k], op, ep);
        int rc = system(cmd);
        assert_true(WIFEXITED(rc) && WEXITSTATUS(rc) == 0);
        char *out = slurp(op), *err = slurp(ep);
        if (k == 0) {
            /* one line for the pieces loop partitioning made of the loop */
            assert_non_null(strstr(err, "note: vectorize i3_i: kept scalar: extent 6 is not a "
                                        "power of two in [2, 64] or a multiple of the register "
                                        "width (4 loops)\n"));
            assert_int_equal(count(err, "note:"), 1);
            assert_non_null(strstr(out, "// vectorize i3_i: kept scalar: extent 6"));
            assert_null(strstr(out, "note:"));
        } else {
            /* the padding reads vectorize (masked gathers at the borders): nothing to report */
            assert_null(strstr(err, "note:"));
            assert_null(strstr(out, "kept scalar"));
            assert_non_null(strstr(out, "ramp("));
        }
        free(out);
        free(err);
    }
    unlink(op);
    unlink(ep);
}

static void test_cli_lower_bad_usage_exits_2_with_a_message(void **state)
{
    (void)state;
    static const struct {
        const char *args, *msg;
    } cases[] = {
        {"", "name an operator"},
        {"nosuchop --shape m=1", "unknown operator 'nosuchop'"},
        {"matmul", "needs --shape"},
        {"matmul --shape m=8", "missing key 'n'"},
        {"matmul --shape m=8,n=8,k=8 --dump=nope", "unknown pass 'nope'"},
        {"matmul --shape m=8,n=8,k=8 --target tpu", "--target must be c or cuda"},
        {"matmul --shape m=8,n=8,k=8 --sm 7", "--sm takes"},
        {"matmul --shape m=8,n=8,k=8 --frobnicate", "unknown option '--frobnicate'"},
        {"matmul --shape m=8,n=8,k=8 --dump --emit", "give one"},
        {"matmul --shape m=8,n=8,k=8 --trace 'split matmul nope 4'", "trace does not apply"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out;
        int rc = cli(cases[i].args, &out);
        if (!strstr(out, cases[i].msg) || (rc != 2 && rc != 1))
            fail_msg("'tessera lower %s' exited %d, want 1 or 2 and '%s':\n%s", cases[i].args, rc,
                     cases[i].msg, out);
        free(out);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pass_table_matches_architecture_doc),
        cmocka_unit_test(test_table_starts_with_loop_nests_and_every_pass_is_named),
        cmocka_unit_test(test_dump_all_prints_ir_after_every_pass_that_runs),
        cmocka_unit_test(test_dump_env_var_selects_passes_and_goes_to_stderr),
        cmocka_unit_test(test_unknown_pass_in_dump_is_an_error_listing_the_passes),
        cmocka_unit_test(test_failing_pass_is_named_in_the_error),
        cmocka_unit_test(test_cross_thread_reduction_is_lowered_by_its_pass),
        cmocka_unit_test(test_cli_lower_prints_ir_dumps_and_passes),
        cmocka_unit_test(test_cli_lower_notes_scalar_fallbacks_on_stderr),
        cmocka_unit_test(test_cli_lower_bad_usage_exits_2_with_a_message),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

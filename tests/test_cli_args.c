/* The CLI's one command-line parser (tools/cli_args.c): long options with `--opt value` and
 * `--opt=value`, aliases, optional values, positional arguments in order, `--`, and errors that
 * name the option and point at --help. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tools/cli.h"

char **te_cli_argv; /* defined by tools/tessera.c in the CLI */

enum { O_JSON, O_OUT, O_SHAPE, O_DUMP, O_HELP, O_START };

static const te_cli_opt opts[] = {
    {"json", 0, TE_CLI_FLAG, O_JSON},     {"out", 'o', TE_CLI_VALUE, O_OUT},
    {"shape", 0, TE_CLI_VALUE, O_SHAPE},  {"params", 0, TE_CLI_VALUE, O_SHAPE},
    {"dump", 0, TE_CLI_OPTIONAL, O_DUMP}, {"help", 'h', TE_CLI_FLAG, O_HELP},
    {"start", 0, TE_CLI_VALUE, O_START},  {0}};

/* What one parse saw: "id=value" words joined by spaces, "ARG=x" for positionals, "BAD" for an
 * error; stderr's text in err. */
typedef struct parsed {
    char seen[1024];
    char err[1024];
} parsed;

static parsed parse(const char *line)
{
    parsed r;
    memset(&r, 0, sizeof r);
    char buf[512], *argv[32];
    snprintf(buf, sizeof buf, "cmd %s", line);
    int argc = 0;
    for (char *save = NULL, *t = strtok_r(buf, " ", &save); t && argc < 31;
         t = strtok_r(NULL, " ", &save))
        argv[argc++] = t;
    argv[argc] = NULL;
    char path[] = "/tmp/test_cli_args.XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    te_cli_parser p;
    te_cli_parser_init(&p, "demo", argc, argv, opts);
    size_t n = 0;
    for (int c; (c = te_cli_next(&p)) != TE_CLI_END;) {
        if (c == TE_CLI_BAD) {
            n += (size_t)snprintf(r.seen + n, sizeof r.seen - n, "%sBAD", n ? " " : "");
            break;
        }
        if (c == TE_CLI_ARG)
            n += (size_t)snprintf(r.seen + n, sizeof r.seen - n, "%sARG=%s", n ? " " : "", p.value);
        else
            n += (size_t)snprintf(r.seen + n, sizeof r.seen - n, "%s%d[%s]=%s", n ? " " : "", c,
                                  p.word, p.value ? p.value : "(null)");
    }
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    lseek(fd, 0, SEEK_SET);
    ssize_t got = read(fd, r.err, sizeof r.err - 1);
    r.err[got > 0 ? got : 0] = 0;
    close(fd);
    unlink(path);
    return r;
}

static void expect(const char *line, const char *seen, const char *err)
{
    parsed r = parse(line);
    if (strcmp(r.seen, seen))
        fail_msg("'%s': parsed as '%s', want '%s' (stderr: %s)", line, r.seen, seen, r.err);
    if (err ? !strstr(r.err, err) : r.err[0] != 0)
        fail_msg("'%s': stderr '%s', want '%s'", line, r.err, err ? err : "");
}

static void test_values_both_spellings_and_aliases(void **state)
{
    (void)state;
    expect("--out dir", "1[--out]=dir", NULL);
    expect("--out=dir", "1[--out]=dir", NULL);
    expect("-o dir", "1[-o]=dir", NULL);
    expect("--params m=1 --shape=n=2", "2[--params]=m=1 2[--shape]=n=2", NULL);
    expect("--json", "0[--json]=(null)", NULL);
    /* a value may start with '-' */
    expect("--start -1", "5[--start]=-1", NULL);
}

static void test_positional_arguments_keep_their_order(void **state)
{
    (void)state;
    expect("a --json b -o d c", "ARG=a 0[--json]=(null) ARG=b 1[-o]=d ARG=c", NULL);
    /* "--" ends the options */
    expect("x -- --json -o", "ARG=x ARG=--json ARG=-o", NULL);
    expect("-", "ARG=-", NULL);
}

static void test_optional_value_only_with_equals(void **state)
{
    (void)state;
    expect("--dump", "3[--dump]=(null)", NULL);
    expect("--dump=simplify", "3[--dump]=simplify", NULL);
    expect("--dump simplify", "3[--dump]=(null) ARG=simplify", NULL);
}

static void test_errors_name_the_option_and_point_at_help(void **state)
{
    (void)state;
    expect("--bogus", "BAD", "tessera demo: unknown option '--bogus' (see 'tessera demo --help')");
    expect("--bogus=1", "BAD", "unknown option '--bogus=1'");
    expect("-x", "BAD", "unknown option '-x'");
    expect("--out", "BAD", "option '--out' needs a value");
    expect("a -o", "ARG=a BAD", "option '-o' needs a value");
    expect("--json=yes", "BAD", "option '--json=yes' takes no value");
    /* no abbreviations: adding an option never changes what an old command line means */
    expect("--js", "BAD", "unknown option '--js'");
    expect("--sha m=1", "BAD", "unknown option '--sha'");
}

static void test_usage_error_format(void **state)
{
    (void)state;
    char *argv[] = {"cmd", NULL};
    te_cli_parser p;
    te_cli_parser_init(&p, "demo", 1, argv, opts);
    assert_int_equal(te_cli_next(&p), TE_CLI_END);
    assert_int_equal(te_cli_next(&p), TE_CLI_END);
    fflush(stderr);
    FILE *f = tmpfile();
    int saved = dup(2);
    dup2(fileno(f), 2);
    assert_int_equal(te_cli_usage_error(&p, "unexpected argument '%s'", "x"), 2);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char text[256] = "";
    rewind(f);
    size_t got = fread(text, 1, sizeof text - 1, f);
    text[got] = 0;
    fclose(f);
    assert_string_equal(text,
                        "tessera demo: unexpected argument 'x' (see 'tessera demo --help')\n");
}

static void test_plugin_list_limits(void **state)
{
    (void)state;
    te_cli_plugins pl = {0};
    char *argv[] = {"cmd", NULL};
    te_cli_parser p;
    te_cli_parser_init(&p, "demo", 1, argv, opts);
    for (int i = 0; i < TE_CLI_MAX_PLUGINS; i++)
        assert_int_equal(te_cli_plugin_add(&pl, &p, "x.so"), 0);
    fflush(stderr);
    int saved = dup(2);
    FILE *f = tmpfile();
    dup2(fileno(f), 2);
    assert_int_equal(te_cli_plugin_add(&pl, &p, "y.so"), 2);
    assert_int_equal(te_cli_plugin_add(&pl, &p, ""), 2);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    fclose(f);
    assert_int_equal(pl.n, TE_CLI_MAX_PLUGINS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values_both_spellings_and_aliases),
        cmocka_unit_test(test_positional_arguments_keep_their_order),
        cmocka_unit_test(test_optional_value_only_with_equals),
        cmocka_unit_test(test_errors_name_the_option_and_point_at_help),
        cmocka_unit_test(test_usage_error_format),
        cmocka_unit_test(test_plugin_list_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

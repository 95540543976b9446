/* Subcommands of the `tessera` CLI. Each returns the process exit status: 0 ok, 1 failed,
 * 2 bad usage. argv[0] is the subcommand's name. */
#ifndef TESSERA_TOOLS_CLI_H
#define TESSERA_TOOLS_CLI_H

#include <getopt.h>

/* main's argv (NULL-terminated), for commands that re-execute themselves (tools/baselines.h:
 * te_bl_openblas_select). Set by main before any command runs. */
extern char **te_cli_argv;

int te_cmd_db(int argc, char **argv);
int te_cmd_bench(int argc, char **argv);
int te_cmd_tune(int argc, char **argv);
int te_cmd_ops(int argc, char **argv);
int te_cmd_gen(int argc, char **argv);
int te_cmd_lower(int argc, char **argv);
int te_cmd_fuse(int argc, char **argv);
int te_cmd_run(int argc, char **argv);
int te_cmd_import(int argc, char **argv);
int te_cmd_target(int argc, char **argv);

/* ---- The one command-line parser (tools/cli_args.c) ---------------------------------------
 *
 * Every command describes its options as a table and reads its command line with one loop over
 * getopt_long, so options behave the same everywhere: long names exactly as listed (no
 * abbreviations, so adding an option never breaks a command line), `--name VALUE` or
 * `--name=VALUE`, one-letter aliases (`-o DIR`), options and positional arguments in any order,
 * `--` ends the options. Errors name the option and point at the command's --help:
 *
 *     static const te_cli_opt opts[] = {{"json", 0, TE_CLI_FLAG, O_JSON},
 *                                       {"out", 'o', TE_CLI_VALUE, O_OUT},
 *                                       {"help", 'h', TE_CLI_FLAG, O_HELP}, {0}};
 *     te_cli_parser p;
 *     te_cli_parser_init(&p, "gen", argc, argv, opts);
 *     for (int c; (c = te_cli_next(&p)) != TE_CLI_END;)
 *         switch (c) {
 *         case TE_CLI_BAD: return 2;                       // message printed
 *         case TE_CLI_ARG: ... p.value is a positional argument ...
 *         case O_OUT: dir = p.value; break;
 *         ...
 *         }
 */

/* Whether an option takes a value. */
typedef enum te_cli_has_value {
    TE_CLI_FLAG,     /* no value; `--json=1` is an error */
    TE_CLI_VALUE,    /* a value: `--out DIR` or `--out=DIR` (`-o DIR`) */
    TE_CLI_OPTIONAL, /* a value only as `--dump=PASS`; `--dump` alone gives value NULL */
} te_cli_has_value;

/* One option. A table ends with an entry whose name is NULL. Several names may share an id
 * (`--shape` and `--params`). */
typedef struct te_cli_opt {
    const char *name;           /* long name without "--" */
    char alias;                 /* one-letter alias ('q' for -q); 0: none */
    te_cli_has_value has_value; /* TE_CLI_FLAG, TE_CLI_VALUE or TE_CLI_OPTIONAL */
    int id;                     /* what te_cli_next returns for it; >= 0 */
} te_cli_opt;

/* What te_cli_next returns besides an option's id. */
enum {
    TE_CLI_END = -1, /* the command line is read */
    TE_CLI_ARG = -2, /* a positional argument, in value */
    TE_CLI_BAD = -3, /* bad usage; the message is printed ("tessera CMD: unknown option '--x'
                        (see 'tessera CMD --help')"); the command returns 2 */
};

#define TE_CLI_MAX_OPTS 64

/* The parser's state: fill it with te_cli_parser_init. After each te_cli_next, `value` is the
 * option's value (NULL for flags) or the positional argument, `word` the option as written
 * ("--trials", "-q", "--trials=5" gives "--trials"), `opt` its table entry. */
typedef struct te_cli_parser {
    const char *cmd; /* for messages: "tune", "db list", "bench --graph" */
    int argc;
    char **argv;
    const te_cli_opt *opts;
    const char *value;
    const te_cli_opt *opt;
    char word[64];
    /* internal */
    int nopts, rest, done;
    struct option lo[TE_CLI_MAX_OPTS + 1];
    char shorts[3 * TE_CLI_MAX_OPTS + 4];
} te_cli_parser;

/* Prepares p to read argv[1..argc) (argv[0] is the command's name) against opts. */
void te_cli_parser_init(te_cli_parser *p, const char *cmd, int argc, char **argv,
                        const te_cli_opt *opts);
/* The next option's id, TE_CLI_ARG, TE_CLI_END, or TE_CLI_BAD after printing why (an unknown
 * option, a missing value, a value given to a flag). Uses getopt_long's global state: one
 * parser at a time. */
int te_cli_next(te_cli_parser *p);
/* Prints "tessera CMD: " + the formatted message + " (see 'tessera CMD --help')" to stderr and
 * returns 2, for the command's own usage errors. */
int te_cli_usage_error(const te_cli_parser *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- Plugins ------------------------------------------------------------------------------ */

/* The `--plugin LIB.so` option every command that takes operator names accepts (repeatable),
 * and $TESSERA_PLUGINS (colon-separated paths, loaded first). te_cli_plugin_add records one
 * path (at most TE_CLI_MAX_PLUGINS; 0, or 2 after printing why); te_cli_plugins_load loads
 * $TESSERA_PLUGINS and then the recorded paths with te_plugin_load (include/tessera/ops.h) and
 * returns 0, or 1 after printing "tessera CMD: plugin PATH: <reason>" for the first one that
 * fails. */
#define TE_CLI_MAX_PLUGINS 16
typedef struct te_cli_plugins {
    const char *path[TE_CLI_MAX_PLUGINS];
    int n;
} te_cli_plugins;
int te_cli_plugin_add(te_cli_plugins *pl, const te_cli_parser *p, const char *path);
int te_cli_plugins_load(const char *cmd, const te_cli_plugins *pl);

#endif

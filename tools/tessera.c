/* The `tessera` command line: a table of subcommands. */
#include <stdio.h>
#include <string.h>

#include "tessera/status.h"
#include "tools/cli.h"

char **te_cli_argv;

static const struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} commands[] = {
    {"db", te_cmd_db, "query and maintain the tuning database"},
    {"bench", te_cmd_bench, "benchmark Tessera kernels beside OpenBLAS and oneDNN"},
    {"tune", te_cmd_tune,
     "search schedules for an operator or a model's fused groups, into the database"},
    {"ops", te_cmd_ops, "list the operator library with its parameters"},
    {"gen", te_cmd_gen,
     "write a standalone kernel (.c/.cu + .h), or a model's kernels and a C runner"},
    {"lower", te_cmd_lower, "print an operator's loop program, after any lowering pass"},
    {"fuse", te_cmd_fuse, "print the fusion plan of a graph: groups, rules, rejected fusions"},
    {"run", te_cmd_run,
     "compile and run a fused graph or ONNX model: .npy in/out, --check, --bench"},
    {"import", te_cmd_import, "import an ONNX model as a graph (text form plus weight files)"},
    {"target", te_cmd_target,
     "show the host target and its peaks; --measure records FMA peaks and copy bandwidth"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: tessera [--version] [--help] <command> [<args>]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\n'tessera <command> --help' describes one command.\n");
}

int main(int argc, char **argv)
{
    te_cli_argv = argv;
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("tessera %s\n", te_version());
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "tessera: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}

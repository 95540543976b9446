/* Subcommands of the `tessera` CLI. Each returns the process exit status: 0 ok, 1 failed,
 * 2 bad usage. argv[0] is the subcommand's name. */
#ifndef TESSERA_TOOLS_CLI_H
#define TESSERA_TOOLS_CLI_H

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

#endif

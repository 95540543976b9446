/*
 * `tessera gen`: write a self-contained kernel (.c + .h, or .cu + .h) for the best recorded
 * schedule of a workload, for projects that do not link Tessera.
 *
 *   tessera gen matmul --shape m=512,n=512,k=512 --db tune.db -o kernels
 *   tessera gen matmul --shape m=64,n=64,k=64 --shape m=128,n=256,k=64 -o kernels
 *   tessera gen softmax --shape m=4096,n=4096 --target cuda --sm 90 -o kernels
 *   tessera gen model.onnx --db tune.db -o kernels      (fused kernels + runner.c)
 *
 * The library call behind it is te_gen_files (tessera/gen.h), which takes any tensor
 * expression; this file parses the command line, builds the operators and looks up records
 * (te_gen_kernel_from_db).
 */
#define _GNU_SOURCE

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tessera/cuda.h"
#include "tessera/gen.h"
#include "tessera/ops.h"
#include "tessera/tuning_db.h"
#include "tools/cli.h"
#include "tools/graph_cli.h"

#define MAX_SHAPES 64

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tessera gen OP --shape KEY=VAL,... [--shape KEY=VAL,...] [options]\n"
            "       tessera gen MODEL.onnx [--shape NAME=N,...] [-o DIR] [--db FILE]\n"
            "       tessera gen --graph GRAPH [-o DIR] [--db FILE] [--precision f32|bf16]\n\n"
            "Writes a self-contained kernel for operator OP (`tessera ops` lists them) with the\n"
            "best schedule recorded in the tuning database for this workload and target (or the\n"
            "default schedule, with a warning, when none is recorded): DIR/NAME.c and DIR/NAME.h\n"
            "for the C target, DIR/NAME.cu and DIR/NAME.h for CUDA. The files need nothing of\n"
            "Tessera: a plain C compiler (C99, OpenMP optional) or nvcc builds them. The header\n"
            "documents the ABI and where the schedule came from.\n\n"
            "For a model (or a graph): the fused groups (as tessera run MODEL.onnx compiles\n"
            "them, schedules from the database) as kernels in DIR/NAME_k<i>.c and .h, the\n"
            "weights as DIR/weights/*.npy, and DIR/runner.c, a C program that reads the inputs\n"
            "from .npy files, calls the kernels in order and writes the outputs as .npy\n"
            "(DIR/Makefile and DIR/README.md say how to build it). NAME defaults to the\n"
            "model's file name.\n\n"
            "Several --shape options put one kernel per shape into the file plus a dispatcher\n"
            "NAME(int64_t KEY..., arrays...) taking the keys written in the --shape options.\n\n"
            "options:\n"
            "  --shape KEY=VAL,...  the operator's parameters (also --params); repeatable; for\n"
            "                       a model its symbolic dimensions or input shapes\n"
            "  --graph GRAPH        a graph's text form instead of an operator\n"
            "  --target c|cuda      target of the generated code (default c; cpu = c)\n"
            "  --sm N               CUDA compute capability x10 (default: device 0's, else 80)\n"
            "  --plugin LIB.so      load the operators of a plugin (repeatable; also the\n"
            "                       colon-separated $TESSERA_PLUGINS; docs/PLUGINS.md)\n"
            "  --db FILE            the database (default: $TESSERA_DB, else ./tessera.db)\n"
            "  --precision P        a model or graph: f32 (default) or bf16, its f32 matmuls\n"
            "                       with constant weights on the CPU's bf16 dot products (an\n"
            "                       error without AVX-512 BF16 or AMX-BF16; docs/DTYPES.md)\n"
            "  --fallback           use the nearest compatible target's record when this target\n"
            "                       has none (another compiler, fewer ISA features)\n"
            "  -o, --out DIR        output directory (default .; created when missing)\n"
            "  --name NAME          base name of the files and of the entry (default OP)\n"
            "  --dispatch           write the dispatcher even for one shape\n"
            "  --quiet              no warnings, no summary\n\n"
            "Exit status: 0 written, 1 failed (generation, database, files), 2 bad usage.\n");
}

static void short_usage(void)
{
    fprintf(stderr, "usage: tessera gen OP --shape KEY=VAL,... [--shape ...] [--target c|cuda] "
                    "[--db FILE] [-o DIR]\n");
}

static int bad(const char *fmt, const char *arg)
{
    fprintf(stderr, "tessera gen: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nusage: tessera gen OP --shape KEY=VAL,... [--shape ...] [--target c|cuda] "
                    "[--db FILE] [-o DIR]\n(see tessera gen --help)\n");
    return 2;
}

static void list_ops(FILE *f)
{
    int n = 0;
    const te_op_info *ops = te_op_list(&n);
    fprintf(f, "operators (details: tessera ops):");
    for (int i = 0; i < n; i++)
        fprintf(f, "%s%s", i % 8 ? " " : "\n  ", ops[i].name);
    fprintf(f, "\n");
}

/* Appends one shell word, quoted when it needs to be. */
static void add_word(char *buf, size_t size, size_t *len, const char *w)
{
    bool plain = *w != 0;
    for (const char *c = w; *c; c++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=,./:@%", *c))
            plain = false;
    if (*len >= size)
        return;
    if (plain) {
        *len += (size_t)snprintf(buf + *len, size - *len, " %s", w);
        return;
    }
    *len += (size_t)snprintf(buf + *len, size - *len, " '");
    for (const char *c = w; *c && *len < size; c++)
        *len += (size_t)snprintf(buf + *len, size - *len, *c == '\'' ? "'\\''" : "%c", *c);
    if (*len < size)
        *len += (size_t)snprintf(buf + *len, size - *len, "'");
}

static bool parse_int(const char *s, long lo, long hi, long *out)
{
    if (!s || !*s)
        return false;
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || errno || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

/* `tessera gen MODEL.onnx` and `tessera gen --graph GRAPH`: te_gen_graph_files. */
static int gen_graph(const char *path, int nshapes, const char *const *shapes, const char *db_path,
                     const char *dir, const char *name, int fallback, int quiet,
                     te_cli_precision prec, const char *cmdline)
{
    char opt[4096] = "", base[64];
    for (int i = 0; i < nshapes; i++) {
        if (strlen(opt) + strlen(shapes[i]) + 2 > sizeof opt)
            return bad("%s", "--shape lists are too long");
        if (i)
            strcat(opt, ",");
        strcat(opt, shapes[i]);
    }
    if (fallback)
        return bad("%s", "--fallback applies to operators only");
    if (!name) { /* the file's name without directory and extension, as an identifier */
        const char *slash = strrchr(path, '/');
        snprintf(base, sizeof base, "%s", slash ? slash + 1 : path);
        char *dot = strrchr(base, '.');
        if (dot && dot != base)
            *dot = 0;
        for (char *c = base; *c; c++)
            if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                  (*c >= '0' && *c <= '9') || *c == '_'))
                *c = '_';
        if (base[0] >= '0' && base[0] <= '9')
            base[0] = '_';
        name = base[0] ? base : "model";
    }
    for (const char *c = name; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '_') ||
            (c == name && *c >= '0' && *c <= '9'))
            return bad("--name must be a C identifier, not '%s'", name);
    te_cli_fused f;
    int rc = te_cli_fused_load_model("gen", path, opt, NULL, 0, 0, prec, &f);
    if (rc)
        return rc;
    if (!db_path) {
        const char *env = getenv("TESSERA_DB");
        db_path = env && *env ? env : "tessera.db";
    }
    te_db *db = NULL;
    struct stat st;
    if (stat(db_path, &st) == 0) {
        if (te_db_open(db_path, &(te_db_options){.flags = TE_DB_READONLY}, &db) != TE_OK) {
            fprintf(stderr, "tessera gen: %s: %s\n", db_path, te_db_errmsg(db));
            te_db_close(db);
            te_cli_fused_free(&f);
            return 1;
        }
    } else if (!quiet) {
        fprintf(stderr, "tessera gen: warning: no database at %s: default schedules\n", db_path);
    }
    te_ctx *ctx = te_ctx_create();
    te_target tgt = te_target_host();
    te_gen_options o = te_gen_options_default(name);
    o.target = &tgt;
    o.command = cmdline;
    te_gen_graph_result res;
    rc = ctx ? te_gen_graph_files(ctx, f.g, f.plan, db, db ? db_path : NULL, &o, dir, &res)
             : TE_ERR_NOMEM;
    if (rc)
        fprintf(stderr, "tessera gen: %s\n", ctx ? te_ctx_errmsg(ctx) : "out of memory");
    else if (!quiet)
        printf("wrote %s/%s_k*.c and .h (%d kernels for %d fused groups, %d from database "
               "records), %s/weights/ (%d .npy files), %s, %s and %s\n"
               "build: make -C %s   (or: cd %s && cc -O3 -march=native -std=gnu11 -fopenmp -o "
               "runner runner.c %s_k*.c -lm)\n",
               dir, name, res.n_kernels, res.n_groups, res.n_from_db, dir, res.n_weights,
               res.runner_path, res.makefile_path, res.readme_path, dir, dir, name);
    te_ctx_free(ctx);
    te_db_close(db);
    te_cli_fused_free(&f);
    return rc ? 1 : 0;
}

int te_cmd_gen(int argc, char **argv)
{
    const char *op = NULL, *db_path = NULL, *dir = ".", *name = NULL, *graph = NULL;
    const char *shapes[MAX_SHAPES];
    int nshapes = 0, cuda = 0, sm = 0, fallback = 0, force_dispatch = 0, quiet = 0;
    char cmdline[4096];
    size_t cl = (size_t)snprintf(cmdline, sizeof cmdline, "tessera gen");
    enum {
        O_HELP,
        O_FALLBACK,
        O_DISPATCH,
        O_QUIET,
        O_SHAPE,
        O_DB,
        O_GRAPH,
        O_OUT,
        O_NAME,
        O_TARGET,
        O_SM,
        O_PRECISION
    };
    te_cli_precision prec = TE_CLI_PRECISION_F32;
    int prec_given = 0;
    enum { O_PLUGIN = 1000 }; /* --plugin LIB.so (tools/cli.h) */
    te_cli_plugins plugins = {0};
    static const te_cli_opt opts[] = {{"help", 'h', TE_CLI_FLAG, O_HELP},
                                      {"fallback", 0, TE_CLI_FLAG, O_FALLBACK},
                                      {"dispatch", 0, TE_CLI_FLAG, O_DISPATCH},
                                      {"quiet", 'q', TE_CLI_FLAG, O_QUIET},
                                      {"shape", 0, TE_CLI_VALUE, O_SHAPE},
                                      {"params", 0, TE_CLI_VALUE, O_SHAPE},
                                      {"db", 0, TE_CLI_VALUE, O_DB},
                                      {"graph", 0, TE_CLI_VALUE, O_GRAPH},
                                      {"out", 'o', TE_CLI_VALUE, O_OUT},
                                      {"name", 0, TE_CLI_VALUE, O_NAME},
                                      {"target", 0, TE_CLI_VALUE, O_TARGET},
                                      {"sm", 0, TE_CLI_VALUE, O_SM},
                                      {"precision", 0, TE_CLI_VALUE, O_PRECISION},
                                      {"plugin", 0, TE_CLI_VALUE, O_PLUGIN},
                                      {0}};
    te_cli_parser cp;
    te_cli_parser_init(&cp, "gen", argc, argv, opts);
    for (int c; (c = te_cli_next(&cp)) != TE_CLI_END;) {
        const char *v = cp.value;
        switch (c) {
        case O_PLUGIN:
            if (te_cli_plugin_add(&plugins, &cp, cp.value))
                return 2;
            break;
        case TE_CLI_BAD:
            short_usage();
            return 2;
        case TE_CLI_ARG:
            if (op)
                return bad("unexpected argument '%s' (one operator per command)", v);
            op = v;
            break;
        case O_HELP:
            usage(stdout);
            return 0;
        case O_FALLBACK:
            fallback = 1;
            break;
        case O_DISPATCH:
            force_dispatch = 1;
            break;
        case O_QUIET:
            quiet = 1;
            break;
        case O_SHAPE:
            if (nshapes == MAX_SHAPES)
                return bad("at most %s shapes per file", "64");
            shapes[nshapes++] = v;
            break;
        case O_DB:
            db_path = v;
            break;
        case O_GRAPH:
            graph = v;
            break;
        case O_OUT:
            dir = v;
            break;
        case O_NAME:
            name = v;
            break;
        case O_TARGET:
            if (!strcmp(v, "cuda") || !strcmp(v, "gpu"))
                cuda = 1;
            else if (!strcmp(v, "c") || !strcmp(v, "cpu"))
                cuda = 0;
            else
                return bad("--target must be c or cuda, not '%s'", v);
            break;
        case O_PRECISION:
            if (te_cli_precision_parse("gen", v, &prec))
                return 2;
            prec_given = 1;
            break;
        case O_SM: {
            long iv;
            if (!parse_int(v, 10, 200, &iv))
                return bad("--sm takes a compute capability times ten (80, 90), not '%s'", v);
            sm = (int)iv;
            break;
        }
        }
        /* The command that regenerates the files, without display-only options. */
        if (c != O_QUIET) {
            if (cp.opt)
                add_word(cmdline, sizeof cmdline, &cl, cp.word);
            if (v)
                add_word(cmdline, sizeof cmdline, &cl, v);
        }
    }
    if (te_cli_plugins_load("gen", &plugins))
        return 1;
    if (op && te_cli_is_model(op)) {
        if (graph)
            return bad("%s", "give a MODEL.onnx or --graph GRAPH, not both");
        graph = op, op = NULL;
    }
    if (graph) {
        if (op)
            return bad("unexpected argument '%s' with --graph", op);
        if (cuda || sm || force_dispatch)
            return bad("%s", "a model or graph is generated for the C target only, without a "
                             "dispatcher");
        if (nshapes && !te_cli_is_model(graph))
            return bad("%s", "--shape applies to operators and ONNX models, not to a graph");
        return gen_graph(graph, nshapes, shapes, db_path, dir, name, fallback, quiet, prec,
                         cmdline);
    }
    if (prec_given)
        return bad("%s", "--precision applies to a model or graph (tessera gen --graph GRAPH), "
                         "not to an operator");
    if (!op)
        return bad("%s", "name an operator: tessera gen OP --shape KEY=VAL,... (see tessera ops)");
    const te_op_info *info = te_op_lookup(op);
    if (!info) {
        fprintf(stderr, "tessera gen: unknown operator '%s'\n", op);
        list_ops(stderr);
        return 2;
    }
    if (!nshapes)
        return bad("operator '%s' needs --shape KEY=VAL,... (see tessera ops)", op);
    if (sm && !cuda)
        return bad("%s", "--sm only applies to --target cuda");
    if (!name)
        name = op;
    for (const char *c = name; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '_') ||
            (c == name && *c >= '0' && *c <= '9'))
            return bad("--name must be a C identifier, not '%s'", name);

    te_ctx *ctx = te_ctx_create();
    if (!ctx) {
        fprintf(stderr, "tessera gen: out of memory\n");
        return 1;
    }
    int rc = 0;
    te_db *db = NULL;
    te_gen_kernel *kernels = calloc((size_t)nshapes, sizeof *kernels);
    te_op_params *kv = calloc((size_t)nshapes, sizeof *kv);
    const char ***arg_names = calloc((size_t)nshapes, sizeof *arg_names);
    te_gen_options o = te_gen_options_default(name);
    te_target tgt;
    if (!kernels || !kv || !arg_names) {
        fprintf(stderr, "tessera gen: out of memory\n");
        rc = 1;
        goto done;
    }

    /* Usage errors first: every shape parses and builds before any file is touched. */
    char keys[MAX_SHAPES][512];
    for (int i = 0; i < nshapes; i++) {
        if (te_op_params_parse(ctx, shapes[i], &kv[i]) != TE_OK ||
            te_op_workload_key(ctx, info, &kv[i], keys[i], sizeof keys[i]) < 0) {
            fprintf(stderr, "tessera gen: --shape '%s': %s\n(see tessera ops %s)\n", shapes[i],
                    te_ctx_errmsg(ctx), op);
            rc = 2;
            goto done;
        }
        for (int j = 0; j < i; j++)
            if (!strcmp(keys[i], keys[j])) {
                fprintf(stderr, "tessera gen: --shape '%s' repeats the workload %s\n", shapes[i],
                        keys[i]);
                rc = 2;
                goto done;
            }
    }
    /* Dispatch parameters: the integer keys written in any --shape, in the operator's order. */
    int dispatch = nshapes > 1 || force_dispatch;
    if (dispatch) {
        for (int q = 0; q < info->nkeys; q++) {
            const te_op_key *key = &info->keys[q];
            if (key->is_str)
                continue;
            bool given = false;
            for (int i = 0; i < nshapes; i++)
                for (int e = 0; e < kv[i].n; e++)
                    given |= !strcmp(kv[i].p[e].key, key->name);
            if (!given)
                continue;
            if (o.n_params == TE_GEN_MAX_PARAMS) {
                rc = bad("%s", "too many dispatch parameters");
                goto done;
            }
            int p = o.n_params++;
            o.params[p] = key->name;
            for (int i = 0; i < nshapes; i++) {
                int64_t val = key->dflt ? strtoll(key->dflt, NULL, 10) : 0;
                for (int e = 0; e < kv[i].n; e++)
                    if (!strcmp(kv[i].p[e].key, key->name))
                        val = kv[i].p[e].ival;
                kernels[i].params[p] = val;
            }
        }
        if (!o.n_params) {
            rc = bad("%s", "a dispatcher needs integer parameters in --shape");
            goto done;
        }
        for (int i = 0; i < nshapes; i++)
            for (int j = 0; j < i; j++) {
                bool same = true;
                for (int p = 0; p < o.n_params; p++)
                    same &= kernels[i].params[p] == kernels[j].params[p];
                if (same) {
                    fprintf(stderr,
                            "tessera gen: shapes '%s' and '%s' differ only in non-integer "
                            "parameters; a dispatcher cannot tell them apart (generate them "
                            "into separate files with --name)\n",
                            shapes[j], shapes[i]);
                    rc = 2;
                    goto done;
                }
            }
    }

    if (cuda) {
        if (!sm && te_cuda_target_device(0, &tgt) == TE_OK)
            sm = tgt.sm;
        else
            tgt = te_target_cuda(sm ? sm : 80);
    } else {
        tgt = te_target_host();
    }
    o.target = &tgt;
    o.command = cmdline;
    o.op = op;

    if (!db_path) {
        const char *env = getenv("TESSERA_DB");
        db_path = env && *env ? env : "tessera.db";
    }
    struct stat st;
    if (stat(db_path, &st) == 0) {
        if (te_db_open(db_path, &(te_db_options){.flags = TE_DB_READONLY}, &db) != TE_OK) {
            fprintf(stderr, "tessera gen: %s: %s\n", db_path, te_db_errmsg(db));
            rc = 1;
            goto done;
        }
    } else if (!quiet) {
        fprintf(stderr, "tessera gen: warning: no database at %s: default schedules\n", db_path);
    }

    for (int i = 0; i < nshapes; i++) {
        te_tensor *in[TE_OP_MAX_IO], *outs[TE_OP_MAX_IO], *args[2 * TE_OP_MAX_IO];
        int ni = 0, no = 0;
        if (te_op_info_build(ctx, info, &kv[i], in, &ni, outs, &no) != TE_OK) {
            fprintf(stderr, "tessera gen: --shape '%s': %s\n", shapes[i], te_ctx_errmsg(ctx));
            rc = 2;
            goto done;
        }
        for (int a = 0; a < ni; a++)
            args[a] = in[a];
        for (int a = 0; a < no; a++)
            args[ni + a] = outs[a];
        char kname[256];
        if (dispatch) {
            size_t len = (size_t)snprintf(kname, sizeof kname, "%s", name);
            for (int p = 0; p < o.n_params && len < sizeof kname; p++)
                len += (size_t)snprintf(kname + len, sizeof kname - len, "_%s%lld", o.params[p],
                                        (long long)kernels[i].params[p]);
            for (char *c = kname; *c; c++)
                if (*c == '-')
                    *c = 'm';
        } else {
            snprintf(kname, sizeof kname, "%s", name);
        }
        /* an output named like the function (the registry names it after the operator)
         * is called "out" in the generated code */
        const char **anames = calloc((size_t)(ni + no), sizeof *anames);
        if (!anames) {
            rc = 1;
            goto done;
        }
        arg_names[i] = anames;
        for (int a = ni; a < ni + no; a++)
            if (!strcmp(te_tensor_name(args[a]), name) || !strcmp(te_tensor_name(args[a]), kname) ||
                !strcmp(te_tensor_name(args[a]), op))
                anames[a] = no == 1 ? "out" : te_tensor_name(args[a]);
        int64_t saved[TE_GEN_MAX_PARAMS];
        memcpy(saved, kernels[i].params, sizeof saved);
        te_gen_from_db_options fo = {.db = db,
                                     .db_path = db ? db_path : NULL,
                                     .workload_key = keys[i],
                                     .op = op,
                                     .name = kname,
                                     .n_args = ni + no,
                                     .args = args,
                                     .n_out = no,
                                     .target = &tgt,
                                     .flags = fallback ? TE_DB_FALLBACK : 0};
        if (te_gen_kernel_from_db(ctx, &fo, &kernels[i]) != TE_OK) {
            fprintf(stderr, "tessera gen: %s\n", te_ctx_errmsg(ctx));
            rc = 1;
            goto done;
        }
        memcpy(kernels[i].params, saved, sizeof saved);
        kernels[i].arg_names = anames;
        const te_gen_provenance *pr = &kernels[i].prov;
        if (!quiet && !pr->from_db && pr->reason && pr->fallback)
            fprintf(stderr, "tessera gen: warning: %s: %s; using %s\n", keys[i], pr->reason,
                    pr->fallback);
        /* Issue 13: a record measured on another (compatible) target is said so. */
        if (!quiet && pr->from_db && !pr->exact_target)
            fprintf(stderr,
                    "tessera gen: warning: %s: no record for this target; using the record of "
                    "the compatible target %s (--fallback)\n",
                    keys[i], pr->target_key ? pr->target_key : "(unknown)");
    }

    te_gen_output out;
    if (te_gen_files(ctx, nshapes, kernels, &o, dir, &out) != TE_OK) {
        fprintf(stderr, "tessera gen: %s\n", te_ctx_errmsg(ctx));
        rc = 1;
        goto done;
    }
    if (!quiet) {
        int from_db = 0;
        for (int i = 0; i < nshapes; i++)
            from_db += kernels[i].prov.from_db;
        printf("wrote %s and %s (%d kernel%s, %d from database records)\n", out.source_path,
               out.header_path, nshapes, nshapes == 1 ? "" : "s", from_db);
    }

done:
    te_db_close(db);
    for (int i = 0; arg_names && i < nshapes; i++)
        free(arg_names[i]);
    free(arg_names);
    free(kernels);
    free(kv);
    te_ctx_free(ctx);
    return rc;
}

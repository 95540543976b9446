/*
 * `tessera lower`: lowers one operator of the library and prints its loop program, the IR after
 * any pass of the pipeline (--dump), the pass table (--passes) or the emitted source (--emit).
 *
 *   tessera lower matmul --shape m=64,n=64,k=64
 *   tessera lower matmul --shape m=64,n=64,k=64 --db tune.db --dump=vectorize,unroll
 *   tessera lower softmax --shape m=128,n=256 --trace-file best.trace --emit
 *   tessera lower --passes
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/autotune.h"
#include "tessera/backend.h"
#include "tessera/cuda.h"
#include "tessera/gen.h"
#include "tessera/ops.h"
#include "tessera/schedule.h"
#include "tessera/tuning_db.h"
#include "tools/cli.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tessera lower OP --shape KEY=VAL,... [options]\n"
            "       tessera lower --passes [--markdown]\n\n"
            "Lowers the operator (see `tessera ops`) with a schedule and prints the loop program\n"
            "the backend turns into code.\n\n"
            "  --shape KEY=VAL,...  the operator's parameters (also --params)\n"
            "  --plugin LIB.so      load the operators of a plugin (repeatable; also the\n"
            "                       colon-separated $TESSERA_PLUGINS; docs/PLUGINS.md)\n"
            "  --db FILE            use the best schedule recorded in FILE for this target\n"
            "                       (default: the default schedule: the plain loop nest on C,\n"
            "                       the operator's template with default knobs on CUDA)\n"
            "  --trace TEXT         apply this schedule trace (as `tessera db best` prints it)\n"
            "  --trace-file FILE    apply the trace in FILE\n"
            "  --target c|cuda      what to lower for (default c, the host CPU)\n"
            "  --sm N               CUDA compute capability x10 (default 80)\n"
            "  --dump[=PASSES]      print the IR after every pass, or after the comma-separated\n"
            "                       PASSES (the same as TESSERA_DUMP_IR=PASSES)\n"
            "  --emit               print the generated C or CUDA source instead of the IR\n"
            "  --passes             list the lowering pipeline: every pass, in order, and when\n"
            "                       it runs (--markdown: as the table in docs/ARCHITECTURE.md)\n");
}

static int bad(const char *fmt, const char *arg)
{
    fprintf(stderr, "tessera lower: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n\n");
    usage(stderr);
    return 2;
}

static void print_passes(int markdown)
{
    if (markdown)
        printf("| # | pass | runs | what it does |\n| --- | --- | --- | --- |\n");
    else
        printf("%-3s %-20s %-24s %s\n", "#", "pass", "runs", "what it does");
    for (int i = 0; i < te_lower_pass_count(); i++)
        printf(markdown ? "| %d | %s | %s | %s |\n" : "%-3d %-20s %-24s %s\n", i,
               te_lower_pass_name(i), te_lower_pass_when(i), te_lower_pass_what(i));
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = (n + 4096 + 1) * 2;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, 4096, f);
        n += got;
        if (got < 4096)
            break;
    }
    fclose(f);
    buf[n] = 0;
    return buf;
}

/* Everything after option parsing: returns the exit status. */
static int lower_op(te_ctx *ctx, const char *op, const char *shape, const char *db_path,
                    const char *trace, const te_target *tgt, const char *dump, int emit)
{
    te_tensor *ins[TE_OP_MAX_IO], *outs[TE_OP_MAX_IO];
    int n_in = 0, n_out = 0;
    if (te_op_build(ctx, op, shape, ins, &n_in, outs, &n_out) != TE_OK) {
        fprintf(stderr, "tessera lower: %s\n", te_ctx_errmsg(ctx));
        return 2;
    }
    te_tensor *args[2 * TE_OP_MAX_IO];
    for (int i = 0; i < n_in; i++)
        args[i] = ins[i];
    for (int i = 0; i < n_out; i++)
        args[n_in + i] = outs[i];
    te_schedule *s = NULL;
    if (trace) {
        s = te_schedule_create(ctx, n_out, outs);
        if (s && te_schedule_apply_trace(s, trace) != TE_OK) {
            fprintf(stderr, "tessera lower: the trace does not apply: %s\n", te_ctx_errmsg(ctx));
            return 1;
        }
    } else {
        /* The schedule `tessera gen` would use: the best record in the database, else the
         * default (the plain loop nest on C, the operator's template on CUDA). */
        te_db *db = NULL;
        te_db_options dbo = {.flags = TE_DB_READONLY};
        if (db_path && te_db_open(db_path, &dbo, &db) != TE_OK) {
            fprintf(stderr, "tessera lower: %s\n", te_db_errmsg(db));
            te_db_close(db);
            return 1;
        }
        char key[512];
        te_op_params kv;
        te_gen_kernel k;
        int rc = te_op_params_parse(ctx, shape, &kv) != TE_OK ||
                         te_op_workload_key(ctx, te_op_lookup(op), &kv, key, sizeof key) < 0
                     ? te_ctx_errcode(ctx)
                     : te_gen_kernel_from_db(ctx,
                                             &(te_gen_from_db_options){.db = db,
                                                                       .db_path = db_path,
                                                                       .workload_key = key,
                                                                       .op = op,
                                                                       .name = op,
                                                                       .n_args = n_in + n_out,
                                                                       .args = args,
                                                                       .n_out = n_out,
                                                                       .target = tgt},
                                             &k);
        te_db_close(db);
        if (rc != TE_OK) {
            fprintf(stderr, "tessera lower: %s\n", te_ctx_errmsg(ctx));
            return 1;
        }
        if (db && !k.prov.from_db && k.prov.reason)
            fprintf(stderr, "tessera lower: warning: %s: %s; using %s\n", key, k.prov.reason,
                    k.prov.fallback ? k.prov.fallback : "the default schedule");
        s = k.schedule;
    }
    if (!s) {
        fprintf(stderr, "tessera lower: %s\n", te_ctx_errmsg(ctx));
        return 1;
    }
    te_lowered *f = te_lower_dump(s, n_in + n_out, args, op, tgt, dump, stdout);
    if (!f) {
        fprintf(stderr, "tessera lower: %s\n", te_ctx_errmsg(ctx));
        return te_ctx_errcode(ctx) == TE_ERR_ARG ? 2 : 1;
    }
    /* What the schedule asked for and lowering did not do (a vectorize kept scalar). */
    int nn = te_lowered_notes(f, NULL, 0);
    const char **notes = nn > 0 ? malloc(sizeof *notes * (size_t)nn) : NULL;
    if (notes) {
        te_lowered_notes(f, notes, nn);
        /* Loop partitioning copies a loop into pieces: one line per distinct note. */
        for (int i = 0; i < nn; i++) {
            int same = 1, seen = 0;
            for (int j = 0; j < i && !seen; j++)
                seen = !strcmp(notes[j], notes[i]);
            if (seen)
                continue;
            for (int j = i + 1; j < nn; j++)
                same += !strcmp(notes[j], notes[i]);
            if (same > 1)
                fprintf(stderr, "note: %s (%d loops)\n", notes[i], same);
            else
                fprintf(stderr, "note: %s\n", notes[i]);
        }
        free(notes);
    }
    if (dump)
        return 0;
    if (emit) {
        const char *src =
            tgt->backend == TE_BACKEND_CUDA ? te_emit_cuda(ctx, f, tgt) : te_emit_c(ctx, f, tgt);
        if (!src) {
            fprintf(stderr, "tessera lower: %s\n", te_ctx_errmsg(ctx));
            return 1;
        }
        fputs(src, stdout);
        return 0;
    }
    te_lowered_print(f, stdout);
    return 0;
}

int te_cmd_lower(int argc, char **argv)
{
    enum {
        O_SHAPE = 1,
        O_DB,
        O_TRACE,
        O_TRACE_FILE,
        O_TARGET,
        O_SM,
        O_DUMP,
        O_EMIT,
        O_PASSES,
        O_MARKDOWN
    };
    enum { O_PLUGIN = 1000 }; /* --plugin LIB.so (tools/cli.h) */
    te_cli_plugins plugins = {0};
    static const te_cli_opt opts[] = {{"shape", 0, TE_CLI_VALUE, O_SHAPE},
                                      {"params", 0, TE_CLI_VALUE, O_SHAPE},
                                      {"db", 0, TE_CLI_VALUE, O_DB},
                                      {"trace", 0, TE_CLI_VALUE, O_TRACE},
                                      {"trace-file", 0, TE_CLI_VALUE, O_TRACE_FILE},
                                      {"target", 0, TE_CLI_VALUE, O_TARGET},
                                      {"sm", 0, TE_CLI_VALUE, O_SM},
                                      {"dump", 0, TE_CLI_OPTIONAL, O_DUMP},
                                      {"emit", 0, TE_CLI_FLAG, O_EMIT},
                                      {"passes", 0, TE_CLI_FLAG, O_PASSES},
                                      {"markdown", 0, TE_CLI_FLAG, O_MARKDOWN},
                                      {"help", 'h', TE_CLI_FLAG, 'h'},
                                      {"plugin", 0, TE_CLI_VALUE, O_PLUGIN},
                                      {0}};
    const char *shape = NULL, *db_path = NULL, *trace = NULL, *trace_file = NULL, *dump = NULL;
    int cuda = 0, sm = 80, emit = 0, passes = 0, markdown = 0;
    const char *pos[2] = {NULL, NULL};
    int npos = 0;
    te_cli_parser cp;
    te_cli_parser_init(&cp, "lower", argc, argv, opts);
    for (int c; (c = te_cli_next(&cp)) != TE_CLI_END;) {
        const char *v = cp.value;
        switch (c) {
        case O_PLUGIN:
            if (te_cli_plugin_add(&plugins, &cp, cp.value))
                return 2;
            break;
        case TE_CLI_BAD:
            usage(stderr);
            return 2;
        case TE_CLI_ARG:
            if (npos == 2)
                return bad("unexpected argument '%s'", v);
            pos[npos++] = v;
            break;
        case O_SHAPE:
            shape = v;
            break;
        case O_DB:
            db_path = v;
            break;
        case O_TRACE:
            trace = v;
            break;
        case O_TRACE_FILE:
            trace_file = v;
            break;
        case O_TARGET:
            if (strcmp(v, "c") && strcmp(v, "cuda"))
                return bad("--target must be c or cuda, not '%s'", v);
            cuda = !strcmp(v, "cuda");
            break;
        case O_SM: {
            char *end;
            long iv = strtol(v, &end, 10);
            if (*end || iv < 30 || iv > 200)
                return bad("--sm takes a compute capability x10 such as 80 or 90, not '%s'", v);
            sm = (int)iv;
            break;
        }
        case O_DUMP:
            dump = v && *v ? v : "all";
            break;
        case O_EMIT:
            emit = 1;
            break;
        case O_PASSES:
            passes = 1;
            break;
        case O_MARKDOWN:
            markdown = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        }
    }
    if (te_cli_plugins_load("lower", &plugins))
        return 1;
    if (passes) {
        print_passes(markdown);
        return 0;
    }
    if (npos == 0)
        return bad("%s",
                   "name an operator: tessera lower OP --shape KEY=VAL,... (see tessera ops)");
    if (npos > 1)
        return bad("unexpected argument '%s'", pos[1]);
    const char *op = pos[0];
    if (!te_op_lookup(op))
        return bad("unknown operator '%s' (see tessera ops)", op);
    if (!shape)
        return bad("operator '%s' needs --shape KEY=VAL,... (see tessera ops)", op);
    if ((trace || trace_file) && db_path)
        return bad("%s", "--db and --trace/--trace-file choose the schedule: give one");
    if (trace && trace_file)
        return bad("%s", "give --trace or --trace-file, not both");
    if (dump && emit)
        return bad("%s", "--dump prints IR and --emit prints source: give one");
    char *trace_text = NULL;
    if (trace_file && !(trace = trace_text = read_file(trace_file))) {
        fprintf(stderr, "tessera lower: cannot read %s\n", trace_file);
        return 1;
    }
    te_target tgt = cuda ? te_target_cuda(sm) : te_target_host();
    te_ctx *ctx = te_ctx_create();
    int rc = ctx ? lower_op(ctx, op, shape, db_path, trace, &tgt, dump, emit) : 1;
    te_ctx_free(ctx);
    free(trace_text);
    return rc;
}

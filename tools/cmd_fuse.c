/*
 * `tessera fuse`: reads a graph in the text form (include/tessera/graph.h), optionally runs the
 * graph passes, and prints the fusion plan: the groups, the rule that formed each and, for
 * every rejected candidate, the check that failed with its numbers.
 *
 *   tessera fuse block.graph
 *   tessera fuse block.graph --optimize --rules my.rules --json
 *   tessera fuse block.graph --dot | dot -Tsvg > plan.svg
 *   tessera fuse block.graph --check        # compile every group, compare with the reference
 *   tessera fuse --rules-list
 */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tessera/graph.h"
#include "tessera/onnx.h"
#include "tools/cli.h"
#include "tools/graph_cli.h"

static void usage(FILE *f)
{
    fprintf(
        f, "usage: tessera fuse GRAPH|MODEL.onnx [--shape NAME=N,...] [--rules FILE] [--no-rules]\n"
           "                  [--optimize] [--precision f32|bf16] [--json | --dot] [--check]\n"
           "       tessera fuse --rules-list [--rules FILE]\n"
           "       tessera fuse --ops\n\n"
           "Partitions the graph's operators into fused kernels and prints the plan: groups,\n"
           "the rule that formed each, and every rejected fusion with the reason. An .onnx\n"
           "model is imported first (as `tessera import` does) and always optimized.\n\n"
           "  --shape NAME=N,...  bind a model's symbolic dimensions (or NAME=AxB for a whole\n"
           "                 input shape), as `tessera import --shape`\n"
           "  --rules FILE   fusion rules (default: $TESSERA_RULES, else the shipped\n"
           "                 rules/cpu.rules found next to the tessera executable)\n"
           "  --no-rules     only the generic kind-based fusion\n"
           "  --optimize     run dead-node elimination, CSE, constant folding and the\n"
           "                 attention rewrite (one flash-form attention node) first\n"
           "                 (folds batch norm into convolution weights)\n"
           "  --precision P  f32 (default) or bf16: after the passes, f32 matmuls with constant\n"
           "                 weights on the CPU's bf16 dot products (te_graph_lower_bf16; an\n"
           "                 error without AVX-512 BF16 or AMX-BF16; --check then compares\n"
           "                 with the f32 graph's reference within the bf16 bound)\n"
           "  --plugin LIB.so load the operators of a plugin (repeatable; also the\n"
           "                 colon-separated $TESSERA_PLUGINS; docs/PLUGINS.md)\n"
           "  --json         the plan as JSON\n"
           "  --dot          the fused graph as Graphviz (one cluster per kernel)\n"
           "  --check        compile every group (default schedule, C backend), run the graph\n"
           "                 on random inputs and compare every group output with the float64\n"
           "                 reference of the unfused graph (fails above 1e-5 relative error);\n"
           "                 integer inputs get values in [0, 4), gather indices within their\n"
           "                 axis, u8 (bool) inputs 0 or 1\n"
           "  --rules-list   list the rules (name, class, priority, pattern, produces)\n"
           "  --ops          list the operators a graph may use, with kinds and attributes\n");
}

static int bad(const char *fmt, const char *arg)
{
    fprintf(stderr, "tessera fuse: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n\n");
    usage(stderr);
    return 2;
}

typedef struct check_state {
    te_graph *g;
    te_graph *ref; /* --precision bf16: the f32 graph before the lowering, else NULL */
    const te_fuse_plan *p;
    const te_cli_refs *refs; /* the references of the group outputs, evaluated once */
    int bad, failed;
} check_state;

/* The values --check fills integer input v with: [0, bound). For the indices of gather nodes,
 * the smallest extent of their indexed axes; for a u8 input (ONNX bool), 2; else 4 (small, so
 * that comparisons with small constants like Equal(ids, 0) take both outcomes). */
static int64_t int_bound(const te_graph *g, int v)
{
    int64_t bound = te_graph_value_dtype(g, v) == TE_U8 ? 2 : 4, dim = 0;
    for (int n = 0; n < te_graph_node_count(g); n++) {
        if (strcmp(te_graph_node_op(g, n), "gather") || te_graph_node_ninputs(g, n) != 2 ||
            te_graph_node_input(g, n, 1) != v)
            continue;
        int x = te_graph_node_input(g, n, 0), r = te_graph_value_ndim(g, x);
        const char *a = strstr(te_graph_node_attrs(g, n), "axis=");
        int axis = a ? atoi(a + 5) : 0;
        axis = axis < 0 ? axis + r : axis;
        if (axis >= 0 && axis < r) {
            int64_t e = te_graph_value_shape(g, x)[axis];
            dim = dim && dim < e ? dim : e;
        }
    }
    return dim ? dim : bound;
}

/* After group gi ran (its outputs are live in the pool now): each output against the float64
 * reference of the unfused graph. */
static void check_group(te_graph_exec *e, int gi, void *user)
{
    check_state *cs = user;
    te_graph *g = cs->g;
    te_fuse_group gr;
    te_fuse_plan_group(cs->p, gi, &gr);
    for (int k = 0; !cs->failed && k < gr.n_outputs; k++) {
        int v = gr.outputs[k];
        double worst, rms;
        if (te_cli_refs_compare(cs->refs, v, te_graph_exec_value(e, v), &worst, &rms)) {
            fprintf(stderr, "tessera fuse: no reference for '%s'\n", te_graph_value_name(g, v));
            cs->failed = 1;
            return;
        }
        /* bf16: values descending from bf16 ones get the bf16 bound (as tessera run --check). */
        double tol = 1e-5, t16 = 0;
        if (cs->ref)
            t16 = te_graph_value_bf16_tolerance(g, v, rms);
        tol = t16 > tol ? t16 : tol;
        int ok = worst <= tol;
        double own = NAN; /* beyond the bound: the group's own error, from the data it read */
        if (!ok && !cs->ref) {
            int rc = te_cli_group_own_error("fuse", g, cs->p, e, gi, &own);
            if (rc != TE_OK && rc != TE_ERR_UNSUPPORTED) {
                cs->failed = 1;
                return;
            }
            ok = own <= tol;
        }
        cs->bad += !ok;
        printf("check: group %d %-28s output %-12s max rel err %.2e %s", gi, gr.rule,
               te_graph_value_name(g, v), worst, ok ? "ok" : "FAILED");
        if (t16 > 0)
            printf(" (bf16 bound %.2e)", tol);
        if (!isnan(own))
            printf(" (inherited: the group alone %.2e)", own);
        printf("\n");
    }
}

/* Compiles and runs the plan on random inputs (integers: int_bound's ranges); prints one line per
 * group output. Returns 0 when every output is within 1e-5 of the reference (ref: the f32 graph
 * of a bf16-lowered g, NULL otherwise; values descending from bf16 ones get the bf16 bound). */
static int check_plan(te_graph *g, te_graph *ref, const te_fuse_plan *p)
{
    te_graph_exec *e = NULL;
    if (te_graph_compile(g, p, NULL, &e)) {
        fprintf(stderr, "tessera fuse: %s\n", te_graph_errmsg(g));
        return 1;
    }
    int nin = te_graph_input_count(g), rc = 0;
    void **in = calloc((size_t)nin + 1, sizeof *in);
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (int i = 0; in && i < nin; i++) {
        int v = te_graph_input_value(g, i);
        int64_t n = te_graph_value_numel(g, v);
        te_dtype dt = te_graph_value_dtype(g, v);
        if (dt != TE_F32 && dt != TE_F64 && dt != TE_I64 && dt != TE_I32 && dt != TE_U8) {
            fprintf(stderr,
                    "tessera fuse: --check fills f32, f64, i64, i32 and u8 inputs only ('%s' is "
                    "%s)\n",
                    te_graph_value_name(g, v), te_dtype_str(dt));
            rc = 1;
            break;
        }
        int64_t bound = dt == TE_F32 || dt == TE_F64 ? 0 : int_bound(g, v);
        in[i] = malloc((size_t)n * te_dtype_size(dt));
        for (int64_t j = 0; in[i] && j < n; j++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            double x = ((double)(s >> 11) / 9007199254740992.0) * 2 - 1;
            int64_t k = bound ? (int64_t)((s >> 11) % (uint64_t)bound) : 0;
            if (x == 0)
                x = 0.5;
            if (dt == TE_F32)
                ((float *)in[i])[j] = (float)x;
            else if (dt == TE_F64)
                ((double *)in[i])[j] = x;
            else if (dt == TE_I64)
                ((int64_t *)in[i])[j] = k;
            else if (dt == TE_I32)
                ((int32_t *)in[i])[j] = (int32_t)k;
            else
                ((uint8_t *)in[i])[j] = (uint8_t)k;
        }
    }
    te_cli_refs *refs = rc ? NULL : te_cli_refs_create("fuse", g, ref, p, (const void *const *)in);
    rc |= !refs;
    check_state cs = {g, ref, p, refs, 0, 0};
    if (!rc && te_graph_run_each(e, (const void *const *)in, NULL, check_group, &cs)) {
        fprintf(stderr, "tessera fuse: %s\n", te_graph_errmsg(g));
        rc = 1;
    }
    rc |= cs.failed;
    te_cli_refs_free(refs);
    for (int i = 0; in && i < nin; i++)
        free(in[i]);
    free(in);
    int nk = te_graph_exec_kernel_count(e);
    te_graph_exec_free(e);
    if (!rc)
        printf("check: %d kernels, %s\n", nk,
               cs.bad ? "some outputs differ from the reference" : "all outputs match");
    return rc || cs.bad ? 1 : 0;
}

static void list_ops(void)
{
    printf("%-18s %-10s %-26s %s\n", "operator", "kind", "inputs", "attributes (defaults)");
    for (int i = 0; i < te_graph_op_count(); i++) {
        const char *op = te_graph_op_name(i);
        printf("%-18s %-10s %-26s %s\n", op, te_op_kind_name((te_op_kind)te_graph_op_kind(op)),
               te_graph_op_inputs(op), *te_graph_op_attrs(op) ? te_graph_op_attrs(op) : "-");
    }
}

int te_cmd_fuse(int argc, char **argv)
{
    enum { O_PLUGIN = 1000 }; /* --plugin LIB.so (tools/cli.h) */
    te_cli_plugins plugins = {0};
    static const te_cli_opt opts[] = {{"rules", 'r', TE_CLI_VALUE, 'r'},
                                      {"no-rules", 0, TE_CLI_FLAG, 'n'},
                                      {"optimize", 0, TE_CLI_FLAG, 'O'},
                                      {"json", 0, TE_CLI_FLAG, 'j'},
                                      {"dot", 0, TE_CLI_FLAG, 'd'},
                                      {"rules-list", 0, TE_CLI_FLAG, 'l'},
                                      {"ops", 0, TE_CLI_FLAG, 'o'},
                                      {"help", 'h', TE_CLI_FLAG, 'h'},
                                      {"check", 0, TE_CLI_FLAG, 'c'},
                                      {"shape", 0, TE_CLI_VALUE, 's'},
                                      {"precision", 0, TE_CLI_VALUE, 'p'},
                                      {"plugin", 0, TE_CLI_VALUE, O_PLUGIN},
                                      {0}};
    te_cli_precision prec = TE_CLI_PRECISION_F32;
    const char *rules_path = NULL, *shapes = NULL;
    int no_rules = 0, optimize = 0, json = 0, dot = 0, list = 0, ops = 0, check = 0, c;
    const char *pos[2] = {NULL, NULL};
    int npos = 0;
    te_cli_parser cp;
    te_cli_parser_init(&cp, "fuse", argc, argv, opts);
    while ((c = te_cli_next(&cp)) != TE_CLI_END) {
        const char *v = cp.value;
        switch (c) {
        case O_PLUGIN:
            if (te_cli_plugin_add(&plugins, &cp, cp.value))
                return 2;
            break;
        case TE_CLI_BAD:
            return 2;
        case TE_CLI_ARG:
            if (npos < 2)
                pos[npos] = v;
            npos++;
            break;
        case 'r':
            rules_path = v;
            break;
        case 's':
            shapes = v;
            break;
        case 'p':
            if (te_cli_precision_parse("fuse", v, &prec))
                return 2;
            break;
        case 'n':
            no_rules = 1;
            break;
        case 'O':
            optimize = 1;
            break;
        case 'j':
            json = 1;
            break;
        case 'd':
            dot = 1;
            break;
        case 'l':
            list = 1;
            break;
        case 'o':
            ops = 1;
            break;
        case 'c':
            check = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        }
    }
    if (te_cli_plugins_load("fuse", &plugins))
        return 1;
    if (ops) {
        list_ops();
        return 0;
    }
    if (json && dot)
        return bad("%s", "--json and --dot exclude each other");
    if (!list && npos != 1)
        return bad("%s", npos == 0 ? "give one GRAPH or MODEL.onnx file"
                                   : "give only one GRAPH or MODEL.onnx file");
    char path[PATH_MAX + 64];
    te_fuse_rules *rules = NULL;
    if (!no_rules) {
        if (!rules_path) {
            if (!te_cli_default_rules(path, sizeof path)) {
                fprintf(stderr, "tessera fuse: cannot find the shipped rules/cpu.rules; give "
                                "--rules FILE or set TESSERA_RULES\n");
                return 1;
            }
            rules_path = path;
        }
        char err[512];
        rules = te_fuse_rules_load(rules_path, err, sizeof err);
        if (!rules) {
            fprintf(stderr, "tessera fuse: %s\n", err);
            return 1;
        }
    }
    if (list) {
        printf("%s: %d rules\n", rules_path ? rules_path : "(none)", te_fuse_rules_count(rules));
        for (int i = 0; i < te_fuse_rules_count(rules); i++)
            printf("%-26s %-10s %4d  %-44s %s\n", te_fuse_rule_name(rules, i),
                   te_fuse_rule_class(rules, i), te_fuse_rule_priority(rules, i),
                   te_fuse_rule_pattern(rules, i),
                   te_fuse_rule_produces(rules, i) ? te_fuse_rule_produces(rules, i) : "");
        te_fuse_rules_free(rules);
        return 0;
    }
    if (shapes && !te_cli_is_model(pos[0])) {
        te_fuse_rules_free(rules);
        return bad("%s", "--shape applies to an .onnx model, not to a graph file");
    }
    /* Models are always optimized, as run, tune and gen do, so that the groups are the same. */
    if (te_cli_is_model(pos[0]))
        optimize = 1;
    te_graph *g = NULL;
    if (te_cli_graph_load("fuse", pos[0], shapes, optimize, json || dot ? NULL : stdout, &g)) {
        te_fuse_rules_free(rules);
        return 1;
    }
    if (te_cli_apply_precision("fuse", g, prec, json || dot ? NULL : stdout)) {
        te_graph_free(g);
        te_fuse_rules_free(rules);
        return 1;
    }
    te_fuse_target t;
    te_fuse_target_host(&t); /* without an L2 size every staged intermediate is refused */
    te_fuse_plan *p = te_graph_fuse(g, rules, &t);
    if (!p) {
        fprintf(stderr, "tessera fuse: %s\n", te_graph_errmsg(g));
        te_graph_free(g);
        te_fuse_rules_free(rules);
        return 1;
    }
    if (!json && !dot && (optimize || prec == TE_CLI_PRECISION_BF16))
        printf("\n");
    if (!json && !dot && rules_path)
        printf("rules: %s (%d)\n", rules_path, te_fuse_rules_count(rules));
    int rc = json  ? te_fuse_plan_print_json(p, stdout)
             : dot ? te_fuse_plan_print_dot(p, stdout)
                   : te_fuse_plan_print(p, stdout);
    if (!rc && check) {
        fflush(stdout);
        te_graph *ref = NULL; /* bf16: the f32 graph, loaded as g was before the lowering */
        if (prec == TE_CLI_PRECISION_BF16)
            rc = te_cli_graph_load("fuse", pos[0], shapes, optimize, NULL, &ref);
        if (!rc)
            rc = check_plan(g, ref, p);
        te_graph_free(ref);
    }
    te_fuse_plan_free(p);
    te_graph_free(g);
    te_fuse_rules_free(rules);
    return rc ? 1 : 0;
}

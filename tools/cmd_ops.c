/* `tessera ops`: the operator library's registry (te_op_list), with each operator's keys. */
#include <stdio.h>
#include <string.h>

#include "tessera/ops.h"
#include "tools/cli.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: tessera ops [--json] [--plugin LIB.so]... [NAME]\n\n"
               "Lists every operator `tessera tune` and te_op_build accept, with its parameters\n"
               "(KEY=VAL for --shape; keys without a default are required).\n\n"
               "A matrix-vector or skinny product against weights stored [out][in] (inference\n"
               "engines' layout) is matmul with m=1..16 and trans_b=1, B being [n, k]:\n"
               "  tessera tune matmul --shape m=1,n=2048,k=768,trans_b=1\n"
               "(mlp_gate takes trans_b too; docs/GENERATING.md, \"Matrix-vector and skinny\n"
               "products\").\n\n"
               "  --json         print a JSON list of operators\n"
               "  --plugin LIB   also load the operators of plugin LIB (repeatable; and the\n"
               "                 colon-separated $TESSERA_PLUGINS)\n"
               "  NAME           show only this operator\n");
}

static void json_str(const char *s)
{
    putchar('"');
    for (; s && *s; s++) {
        if (*s == '"' || *s == '\\')
            printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            printf("\\u%04x", *s);
        else
            putchar(*s);
    }
    putchar('"');
}

int te_cmd_ops(int argc, char **argv)
{
    enum { O_JSON, O_HELP };
    enum { O_PLUGIN = 1000 }; /* --plugin LIB.so (tools/cli.h) */
    te_cli_plugins plugins = {0};
    static const te_cli_opt opts[] = {{"json", 0, TE_CLI_FLAG, O_JSON},
                                      {"help", 'h', TE_CLI_FLAG, O_HELP},
                                      {"plugin", 0, TE_CLI_VALUE, O_PLUGIN},
                                      {0}};
    int json = 0;
    const char *only = NULL;
    te_cli_parser cp;
    te_cli_parser_init(&cp, "ops", argc, argv, opts);
    for (int c; (c = te_cli_next(&cp)) != TE_CLI_END;) {
        switch (c) {
        case O_PLUGIN:
            if (te_cli_plugin_add(&plugins, &cp, cp.value))
                return 2;
            break;
        case TE_CLI_BAD:
            return 2;
        case TE_CLI_ARG:
            if (only)
                return te_cli_usage_error(&cp, "unexpected argument '%s'", cp.value);
            only = cp.value;
            break;
        case O_JSON:
            json = 1;
            break;
        case O_HELP:
            usage(stdout);
            return 0;
        }
    }
    if (te_cli_plugins_load("ops", &plugins))
        return 1;
    int n_lib = 0, n_reg = 0;
    const te_op_info *lib = te_op_list(&n_lib), *reg = te_op_list_registered(&n_reg);
    int n = n_lib + n_reg;
    if (only && !te_op_lookup(only)) {
        fprintf(stderr, "tessera ops: unknown operator '%s'\n", only);
        return 2;
    }
    if (json)
        printf("[");
    int shown = 0;
    for (int i = 0; i < n; i++) {
        const te_op_info *op = i < n_lib ? &lib[i] : &reg[i - n_lib];
        if (only && strcmp(only, op->name))
            continue;
        if (json) {
            printf("%s\n  {\"name\": ", shown ? "," : "");
            json_str(op->name);
            printf(", \"description\": ");
            json_str(op->description);
            if (op->def) {
                printf(", \"plugin\": ");
                json_str(op->origin);
                printf(", \"inputs\": ");
                json_str(op->def->inputs);
                printf(", \"kind\": ");
                json_str(op->def->kind);
            }
            printf(", \"params\": [");
            for (int k = 0; k < op->nkeys; k++) {
                const te_op_key *key = &op->keys[k];
                printf("%s{\"key\": ", k ? ", " : "");
                json_str(key->name);
                printf(", \"required\": %s, \"default\": ", key->dflt ? "false" : "true");
                if (key->dflt)
                    json_str(key->dflt);
                else
                    printf("null");
                printf(", \"type\": \"%s\", \"help\": ", key->is_str ? "word" : "int");
                json_str(key->help);
                printf("}");
            }
            printf("]}");
        } else {
            printf("%s%-18s %s\n", shown && only ? "\n" : "", op->name, op->description);
            if (op->def)
                printf("    from %s; inputs %s; kind %s\n", op->origin, op->def->inputs,
                       op->def->kind);
            for (int k = 0; k < op->nkeys; k++) {
                const te_op_key *key = &op->keys[k];
                char kd[96];
                if (key->dflt)
                    snprintf(kd, sizeof kd, "%s=%s", key->name, key->dflt);
                else
                    snprintf(kd, sizeof kd, "%s (required)", key->name);
                printf("    %-24s %s\n", kd, key->help ? key->help : "");
            }
        }
        shown++;
    }
    if (json)
        printf("\n]\n");
    return 0;
}

/* The one command-line parser of the CLI (tools/cli.h): a table of options read with
 * getopt_long, and the --plugin / $TESSERA_PLUGINS loading every operator command shares. */
#define _GNU_SOURCE

#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/graph.h"
#include "tessera/ops.h"
#include "tools/cli.h"

void te_cli_parser_init(te_cli_parser *p, const char *cmd, int argc, char **argv,
                        const te_cli_opt *opts)
{
    memset(p, 0, sizeof *p);
    p->cmd = cmd;
    p->argc = argc;
    p->argv = argv;
    p->opts = opts;
    /* '-': positional arguments come back in order (code 1); ':': a missing value is ':'. */
    size_t ns = 0;
    p->shorts[ns++] = '-';
    p->shorts[ns++] = ':';
    int n = 0;
    for (; opts[n].name && n < TE_CLI_MAX_OPTS; n++) {
        static const int has_arg[] = {no_argument, required_argument, optional_argument};
        p->lo[n] = (struct option){opts[n].name, has_arg[opts[n].has_value], NULL, 256 + n};
        if (opts[n].alias) {
            p->shorts[ns++] = opts[n].alias;
            for (int k = 0; k < (int)opts[n].has_value; k++)
                p->shorts[ns++] = ':';
        }
    }
    p->lo[n] = (struct option){0};
    p->shorts[ns] = 0;
    p->nopts = n;
    opterr = 0;
    optind = 0; /* glibc: restart the scan */
}

static int bad(te_cli_parser *p, const char *fmt, const char *word)
{
    fprintf(stderr, "tessera %s: ", p->cmd);
    fprintf(stderr, fmt, word);
    fprintf(stderr, " (see 'tessera %s --help')\n", p->cmd);
    return TE_CLI_BAD;
}

int te_cli_usage_error(const te_cli_parser *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "tessera %s: ", p->cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see 'tessera %s --help')\n", p->cmd);
    va_end(ap);
    return 2;
}

static void set_word(te_cli_parser *p, const char *w)
{
    snprintf(p->word, sizeof p->word, "%.*s", (int)strcspn(w, "="), w);
}

int te_cli_next(te_cli_parser *p)
{
    p->value = NULL;
    p->opt = NULL;
    p->word[0] = 0;
    if (p->done)
        return TE_CLI_END;
    if (p->rest) { /* after "--": everything is positional */
        if (optind < p->argc) {
            p->value = p->argv[optind++];
            return TE_CLI_ARG;
        }
        p->done = 1;
        return TE_CLI_END;
    }
    int c = getopt_long(p->argc, p->argv, p->shorts, p->lo, NULL);
    if (c == -1) {
        p->rest = 1;
        return te_cli_next(p);
    }
    if (c == 1) {
        p->value = optarg;
        return TE_CLI_ARG;
    }
    if (c == ':') {
        if (optopt >= 256 || optopt == 0)
            return bad(p, "option '%s' needs a value", p->argv[optind - 1]);
        char w[3] = {'-', (char)optopt, 0};
        return bad(p, "option '%s' needs a value", w);
    }
    if (c == '?') {
        if (optopt >= 256) /* a known flag given "=VALUE" */
            return bad(p, "option '%s' takes no value", p->argv[optind - 1]);
        if (optopt) {
            char w[3] = {'-', (char)optopt, 0};
            return bad(p, "unknown option '%s'", w);
        }
        return bad(p, "unknown option '%s'", p->argv[optind - 1]);
    }
    const te_cli_opt *o = NULL;
    if (c >= 256 && c - 256 < p->nopts) {
        o = &p->opts[c - 256];
        /* The word that held the option: the one before a separate value. */
        const char *w = optarg && optind >= 2 && optarg == p->argv[optind - 1]
                            ? p->argv[optind - 2]
                            : p->argv[optind - 1];
        /* Long names are exact: getopt_long would take "--js" for "--json". */
        size_t n = strcspn(w, "=");
        if (n != strlen(o->name) + 2 || strncmp(w, "--", 2) || strncmp(w + 2, o->name, n - 2))
            return bad(p, "unknown option '%s'", w);
        set_word(p, w);
    } else {
        for (int i = 0; i < p->nopts && !o; i++)
            if (p->opts[i].alias == c)
                o = &p->opts[i];
        if (!o) {
            char w[3] = {'-', (char)c, 0};
            return bad(p, "unknown option '%s'", w);
        }
        snprintf(p->word, sizeof p->word, "-%c", c);
    }
    p->opt = o;
    p->value = o->has_value == TE_CLI_FLAG ? NULL : optarg;
    return o->id;
}
/* ---- Plugins ------------------------------------------------------------------------------ */

int te_cli_plugin_add(te_cli_plugins *pl, const te_cli_parser *p, const char *path)
{
    if (!path || !*path)
        return te_cli_usage_error(p, "--plugin needs a file name");
    if (pl->n == TE_CLI_MAX_PLUGINS)
        return te_cli_usage_error(p, "at most %d --plugin options", TE_CLI_MAX_PLUGINS);
    pl->path[pl->n++] = path;
    return 0;
}

static int load_one(const char *cmd, const char *path)
{
    char err[1024];
    if (te_plugin_load(path, err, sizeof err) == TE_OK)
        return 0;
    fprintf(stderr, "tessera %s: plugin %s: %s\n", cmd, path, err);
    return 1;
}

int te_cli_plugins_load(const char *cmd, const te_cli_plugins *pl)
{
    const char *env = getenv("TESSERA_PLUGINS");
    if (env && *env) {
        char *list = strdup(env);
        if (!list) {
            fprintf(stderr, "tessera %s: out of memory\n", cmd);
            return 1;
        }
        int rc = 0;
        for (char *save = NULL, *tok = strtok_r(list, ":", &save); tok && !rc;
             tok = strtok_r(NULL, ":", &save))
            rc = load_one(cmd, tok);
        free(list);
        if (rc)
            return rc;
    }
    for (int i = 0; pl && i < pl->n; i++)
        if (load_one(cmd, pl->path[i]))
            return 1;
    /* te_op_register knows the operator library only; a graph's own operators (batch_norm,
     * reshape) would shadow a plugin operator of the same name in graphs. */
    int n_reg = 0;
    const te_op_info *reg = te_op_list_registered(&n_reg);
    for (int i = 0; i < n_reg; i++)
        for (int j = 0; j < te_graph_op_count(); j++)
            if (!strcmp(reg[i].name, te_graph_op_name(j))) {
                fprintf(stderr,
                        "tessera %s: plugin %s: operator '%s': the name is taken (by the graph "
                        "operator '%s'); rename the operator\n",
                        cmd, reg[i].origin, reg[i].name, te_graph_op_name(j));
                return 1;
            }
    return 0;
}

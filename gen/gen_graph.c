/*
 * gen/gen_graph.c: a fused graph as standalone C (te_gen_graph_files, tessera/gen.h).
 *
 * Every fused group becomes the tensor expression the graph executor compiles
 * (te_graph_group_expr_build); groups doing the same work share one kernel. The kernels go into
 * <name>.c/.h through te_gen_files (schedules from the database as te_gen_kernel_from_db finds
 * them); the constants are written as .npy files under weights/; runner.c is a plain C program
 * that holds the value table (shapes, dtypes, pool offsets from te_graph_memplan_create), reads
 * the weights and the inputs (.npy), calls the kernels in plan order and writes the outputs
 * (.npy). A view group (a reshape, te_fuse_group.view) has no kernel: its output is a V_VIEW
 * entry of the table whose buffer is its root's (te_graph_memplan_alias). A Makefile and a
 * README say how to build and run it.
 */
#define _GNU_SOURCE

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gen/gen_impl.h"
#include "tessera/graph.h"
#include "tessera/npy.h"

/* A constant the kernels read packed in column panels (te_graph_group_expr.packed_nb). */
typedef struct packed_w {
    int v, nb, trans;
} packed_w;

/* The entry of pk[0..n) that input i of ge reads packed, or -1 (also for an input that is not
 * packed). */
static int packed_entry(const packed_w *pk, int n, const te_graph_group_expr *ge, int i)
{
    for (int q = 0; ge->packed_nb[i] && q < n; q++)
        if (pk[q].v == ge->in_values[i] && pk[q].nb == ge->packed_nb[i] &&
            pk[q].trans == ge->packed_trans[i])
            return q;
    return -1;
}

/* The fixed part of runner.c: .npy in and out, allocation, argument parsing. The generated
 * part (the value table and the calls) is spliced in where the marker lines are. */
static const char k_runner_head[] =
    "#define _POSIX_C_SOURCE 200809L\n"
    "#include <stdint.h>\n"
    "#include <stdio.h>\n"
    "#include <stdlib.h>\n"
    "#include <string.h>\n"
    "#include <sys/stat.h>\n"
    "\n"
    "%s"
    "\n"
    "enum { V_INPUT, V_CONST, V_POOL, V_OUTPUT, V_VIEW };\n"
    "\n"
    "typedef struct value {\n"
    "    const char *name;\n"
    "    int kind;\n"
    "    const char *descr; /* .npy dtype */\n"
    "    size_t esize;\n"
    "    int ndim;\n"
    "    int64_t shape[8];\n"
    "    int64_t numel;\n"
    "    int64_t offset; /* V_POOL: byte offset in the pool */\n"
    "    int root; /* V_VIEW: the value whose storage it shares */\n"
    "} value;\n"
    "\n";

static const char k_runner_body[] =
    "static void *buf[NV];\n"
    "\n"
    "/* Reads a .npy file (format 1.0-3.0, C order, little-endian) that must hold value v. */\n"
    "static int npy_read(const char *path, const value *v, void *dst)\n"
    "{\n"
    "    FILE *f = fopen(path, \"rb\");\n"
    "    if (!f) {\n"
    "        fprintf(stderr, \"runner: cannot open %s\\n\", path);\n"
    "        return 1;\n"
    "    }\n"
    "    unsigned char pre[12];\n"
    "    char hdr[4096];\n"
    "    size_t hlen = 0, lb;\n"
    "    int ok = fread(pre, 1, 8, f) == 8 && !memcmp(pre, \"\\x93NUMPY\", 6) && pre[6] >= 1 &&\n"
    "             pre[6] <= 3;\n"
    "    lb = ok && pre[6] == 1 ? 2 : 4;\n"
    "    ok = ok && fread(pre + 8, 1, lb, f) == lb;\n"
    "    if (ok) {\n"
    "        hlen = (size_t)pre[8] | (size_t)pre[9] << 8;\n"
    "        if (lb == 4)\n"
    "            hlen |= (size_t)pre[10] << 16 | (size_t)pre[11] << 24;\n"
    "        ok = hlen < sizeof hdr && fread(hdr, 1, hlen, f) == hlen;\n"
    "    }\n"
    "    if (!ok) {\n"
    "        fprintf(stderr, \"runner: %s: not a .npy file\\n\", path);\n"
    "        fclose(f);\n"
    "        return 1;\n"
    "    }\n"
    "    hdr[hlen] = 0;\n"
    "    char want[160];\n"
    "    snprintf(want, sizeof want, \"'%s'\", v->descr);\n"
    "    const char *d = strstr(hdr, \"'descr'\"), *fo = strstr(hdr, \"'fortran_order'\");\n"
    "    const char *sh = strstr(hdr, \"'shape'\");\n"
    "    int64_t shape[8], nd = 0;\n"
    "    if (sh && (sh = strchr(sh, '('))) {\n"
    "        for (sh++; nd < 8;) {\n"
    "            while (*sh == ' ' || *sh == ',')\n"
    "                sh++;\n"
    "            if (*sh < '0' || *sh > '9')\n"
    "                break;\n"
    "            shape[nd++] = strtoll(sh, (char **)&sh, 10);\n"
    "        }\n"
    "    }\n"
    "    ok = d && strstr(d, want) && fo && strstr(fo, \"False\") && sh && *sh == ')' &&\n"
    "         nd == v->ndim;\n"
    "    for (int k = 0; ok && k < nd; k++)\n"
    "        ok = shape[k] == v->shape[k];\n"
    "    if (!ok) {\n"
    "        fprintf(stderr, \"runner: %s: needs %s (C order) of shape (\", path, want);\n"
    "        for (int k = 0; k < v->ndim; k++)\n"
    "            fprintf(stderr, \"%s%lld\", k ? \", \" : \"\", (long long)v->shape[k]);\n"
    "        fprintf(stderr, \") for '%s'; the header is %s\\n\", v->name, hdr);\n"
    "        fclose(f);\n"
    "        return 1;\n"
    "    }\n"
    "    size_t n = (size_t)v->numel * v->esize;\n"
    "    ok = fread(dst, 1, n, f) == n && fgetc(f) == EOF;\n"
    "    fclose(f);\n"
    "    if (!ok)\n"
    "        fprintf(stderr, \"runner: %s: the data is not %zu bytes\\n\", path, n);\n"
    "    return !ok;\n"
    "}\n"
    "\n"
    "static int npy_write(const char *path, const value *v, const void *src)\n"
    "{\n"
    "    char h[512];\n"
    "    int k = snprintf(h, sizeof h, \"{'descr': '%s', 'fortran_order': False, 'shape': (\",\n"
    "                     v->descr);\n"
    "    for (int d = 0; d < v->ndim; d++)\n"
    "        k += snprintf(h + k, sizeof h - (size_t)k, \"%s%lld\", d ? \", \" : \"\",\n"
    "                      (long long)v->shape[d]);\n"
    "    k += snprintf(h + k, sizeof h - (size_t)k, \"%s), }\", v->ndim == 1 ? \",\" : \"\");\n"
    "    size_t total = (10 + (size_t)k + 1 + 63) / 64 * 64, hl = total - 10;\n"
    "    memset(h + k, ' ', hl - (size_t)k - 1);\n"
    "    h[hl - 1] = '\\n';\n"
    "    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hl & "
    "0xff),\n"
    "                             (unsigned char)(hl >> 8)};\n"
    "    FILE *f = fopen(path, \"wb\");\n"
    "    size_t n = (size_t)v->numel * v->esize;\n"
    "    int ok = f && fwrite(pre, 1, 10, f) == 10 && fwrite(h, 1, hl, f) == hl &&\n"
    "             fwrite(src, 1, n, f) == n;\n"
    "    if (f && fclose(f))\n"
    "        ok = 0;\n"
    "    if (!ok)\n"
    "        fprintf(stderr, \"runner: cannot write %s\\n\", path);\n"
    "    return !ok;\n"
    "}\n"
    "\n"
    "static void *alloc64(size_t n)\n"
    "{\n"
    "    void *p = NULL;\n"
    "    if (posix_memalign(&p, 64, n ? n : 64))\n"
    "        return NULL;\n"
    "    memset(p, 0xff, n); /* NaN in floats: data never written shows */\n"
    "    return p;\n"
    "}\n"
    "\n"
    "static int run_kernels(void);\n"
    "\n"
    "int main(int argc, char **argv)\n"
    "{\n"
    "    const char *wdir = NULL, *odir = \".\", *given[NV] = {0};\n"
    "    char wbuf[4096];\n"
    "    for (int a = 1; a < argc; a++) {\n"
    "        if (!strcmp(argv[a], \"-h\") || !strcmp(argv[a], \"--help\")) {\n"
    "            printf(\"usage: %s [-w WEIGHTS_DIR] [-o OUT_DIR] [NAME=]IN.npy...\\n\\n\"\n"
    "                   \"Runs the model: reads the weights (default: weights/ beside the \"\n"
    "                   \"program) and each input, calls the kernels, writes OUT_DIR/NAME.npy \"\n"
    "                   \"for each output.\\ninputs:\", argv[0]);\n"
    "            for (int v = 0; v < NV; v++)\n"
    "                if (V[v].kind == V_INPUT)\n"
    "                    printf(\" %s\", V[v].name);\n"
    "            printf(\"\\n\");\n"
    "            return 0;\n"
    "        } else if (!strcmp(argv[a], \"-w\") && a + 1 < argc) {\n"
    "            wdir = argv[++a];\n"
    "        } else if (!strcmp(argv[a], \"-o\") && a + 1 < argc) {\n"
    "            odir = argv[++a];\n"
    "        } else {\n"
    "            /* NAME=FILE, or FILE for the first input not given yet */\n"
    "            const char *eq = strchr(argv[a], '=');\n"
    "            int v = 0, found = 0;\n"
    "            for (v = 0; v < NV && !found; v++)\n"
    "                found = V[v].kind == V_INPUT &&\n"
    "                        (eq ? strlen(V[v].name) == (size_t)(eq - argv[a]) &&\n"
    "                                  !strncmp(V[v].name, argv[a], (size_t)(eq - argv[a]))\n"
    "                            : !given[v]);\n"
    "            v--;\n"
    "            if (!found) {\n"
    "                fprintf(stderr, \"runner: '%s': no such input (see %s --help)\\n\", argv[a],\n"
    "                        argv[0]);\n"
    "                return 2;\n"
    "            }\n"
    "            given[v] = eq ? eq + 1 : argv[a];\n"
    "        }\n"
    "    }\n"
    "    if (!wdir) {\n"
    "        snprintf(wbuf, sizeof wbuf, \"%s\", argv[0]);\n"
    "        char *slash = strrchr(wbuf, '/');\n"
    "        if (slash)\n"
    "            strcpy(slash + 1, \"weights\");\n"
    "        else\n"
    "            snprintf(wbuf, sizeof wbuf, \"weights\");\n"
    "        wdir = wbuf;\n"
    "    }\n"
    "    unsigned char *pool = alloc64(POOL_BYTES);\n"
    "    if (!pool)\n"
    "        return fprintf(stderr, \"runner: out of memory\\n\"), 1;\n"
    "    for (int v = 0; v < NV; v++) {\n"
    "        char path[8192];\n"
    "        if (V[v].kind == V_VIEW)\n"
    "            continue; /* its root's buffer, below */\n"
    "        buf[v] = V[v].kind == V_POOL ? pool + V[v].offset\n"
    "                                     : alloc64((size_t)V[v].numel * V[v].esize);\n"
    "        if (!buf[v])\n"
    "            return fprintf(stderr, \"runner: out of memory\\n\"), 1;\n"
    "        if (V[v].kind == V_CONST) {\n"
    "            snprintf(path, sizeof path, \"%s/%s.npy\", wdir, V[v].name);\n"
    "            if (npy_read(path, &V[v], buf[v]))\n"
    "                return 1;\n"
    "        } else if (V[v].kind == V_INPUT) {\n"
    "            if (!given[v]) {\n"
    "                fprintf(stderr, \"runner: no data for input '%s' (give %s=FILE.npy)\\n\",\n"
    "                        V[v].name, V[v].name);\n"
    "                return 2;\n"
    "            }\n"
    "            if (npy_read(given[v], &V[v], buf[v]))\n"
    "                return 1;\n"
    "        }\n"
    "    }\n"
    "    /* A view (a reshape) shares its root's bytes: no copy, no buffer of its own. */\n"
    "    for (int v = 0; v < NV; v++)\n"
    "        if (V[v].kind == V_VIEW)\n"
    "            buf[v] = buf[V[v].root];\n"
    "    if (run_kernels())\n"
    "        return 1;\n"
    "    mkdir(odir, 0777); /* may exist; a write below says when it is not usable */\n"
    "    for (int v = 0; v < NV; v++) {\n"
    "        char path[8192];\n"
    "        snprintf(path, sizeof path, \"%s/%s.npy\", odir, V[v].name);\n"
    "        if (V[v].kind == V_OUTPUT && npy_write(path, &V[v], buf[v]))\n"
    "            return 1;\n"
    "        if (V[v].kind == V_OUTPUT)\n"
    "            printf(\"wrote %s\\n\", path);\n"
    "    }\n"
    "    for (int v = 0; v < NV; v++)\n"
    "        if (V[v].kind != V_POOL && V[v].kind != V_VIEW)\n"
    "            free(buf[v]);\n"
    "    free(pool);\n"
    "    return 0;\n"
    "}\n"
    "\n";

static int write_text(te_ctx *ctx, const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f)) {
        if (f)
            fclose(f);
        return te_ctx_set_error(ctx, TE_ERR_IO, "te_gen_graph_files: cannot write %s: %s", path,
                                strerror(errno));
    }
    return TE_OK;
}

static int make_dir(te_ctx *ctx, const char *dir)
{
    if (mkdir(dir, 0777) && errno != EEXIST)
        return te_ctx_set_error(ctx, TE_ERR_IO, "te_gen_graph_files: cannot create %s: %s", dir,
                                strerror(errno));
    return TE_OK;
}

int te_gen_graph_files(te_ctx *ctx, te_graph *g, const te_fuse_plan *p, te_db *db,
                       const char *db_path, const te_gen_options *opts, const char *dir,
                       te_gen_graph_result *out)
{
    if (!ctx)
        return TE_ERR_ARG;
    if (!g || !p || !opts || !opts->name || !dir || !out)
        return te_ctx_set_error(ctx, TE_ERR_ARG, "te_gen_graph_files: bad arguments");
    memset(out, 0, sizeof *out);
    te_target host = te_target_host();
    const te_target *tgt = opts->target ? opts->target : &host;
    if (tgt->backend != TE_BACKEND_C)
        return te_ctx_set_error(ctx, TE_ERR_UNSUPPORTED,
                                "te_gen_graph_files: graphs are generated for the C target only");
    char name[64];
    te__c_ident(opts->name, name, sizeof name);
    int ng = te_fuse_plan_group_count(p), nv = te_graph_value_count(g);
    te_graph_group_expr *ge = te__alloc(ctx, sizeof *ge * (size_t)(ng + 1));
    int *kof = te__alloc(ctx, sizeof(int) * (size_t)(ng + 1));         /* group -> kernel */
    te_gen_kernel *ks = te__alloc(ctx, sizeof *ks * (size_t)(ng + 1)); /* distinct kernels */
    int *vidx = te__alloc(ctx, sizeof(int) * (size_t)(nv + 1));        /* value -> runner index */
    if (!ge || !kof || !ks || !vidx)
        return te_ctx_set_error(ctx, TE_ERR_NOMEM, "te_gen_graph_files: out of memory");
    te_graph_memplan *mp = NULL;
    int rc = te_graph_memplan_create(p, &mp);
    if (rc)
        return te_ctx_set_error(ctx, rc, "te_gen_graph_files: planning the intermediates: %s",
                                te_status_str(rc));
    for (int v = 0; v < nv; v++)
        vidx[v] = -1;
    int nk = 0, nval = 0, nviews = 0, nkeys = 0;
    /* Every kernel's expression first: their keys make the run's in-model keys, whose records
     * (te_graph_select_in_context) win over a workload's records measured alone, as in
     * te_graph_compile_db. */
    const char **keys = te__alloc(ctx, sizeof *keys * (size_t)(ng + 1));
    if (!keys)
        rc = te_ctx_set_error(ctx, TE_ERR_NOMEM, "te_gen_graph_files: out of memory");
    for (int gi = 0; !rc && gi < ng; gi++) {
        te_fuse_group gr;
        te_fuse_plan_group(p, gi, &gr);
        if (gr.view)
            continue;
        rc = te_graph_group_expr_build(g, p, gi, ctx, &ge[gi]);
        if (rc)
            rc = te_ctx_set_error(ctx, rc, "te_gen_graph_files: %s", te_graph_errmsg(g));
        else
            keys[nkeys++] = ge[gi].key;
    }
    te_db_target dbt;
    char tstore[1024];
    int have_dbt = db && te_tuner_db_target(tgt, &dbt, tstore, sizeof tstore) == TE_OK;
    /* The model's fastest whole run recorded (te_graph_select_in_context), whose schedules come
     * first, as in te_graph_compile_ex. */
    te_db_trial_list *whole = NULL;
    char mkey[64];
    if (!rc && have_dbt &&
        (te_graph_model_key(nkeys, keys, mkey, sizeof mkey) >= (int)sizeof mkey ||
         te_db_best(db, mkey, &dbt, 0, &whole) != TE_OK || !whole->n)) {
        te_db_trial_list_free(whole);
        whole = NULL;
    }
    for (int gi = 0; !rc && gi < ng; gi++) {
        te_fuse_group gr;
        te_fuse_plan_group(p, gi, &gr);
        kof[gi] = -1;
        if (gr.view) {
            /* No kernel: the view's output and its root (which may be read only through it, as
             * a reshaped constant is) are in the table, the view as V_VIEW. */
            int v = te_graph_node_output(g, gr.nodes[0], 0), root = te_graph_memplan_alias(mp, v);
            if (vidx[root] < 0)
                vidx[root] = nval++;
            if (vidx[v] < 0)
                vidx[v] = nval++;
            nviews++;
            continue;
        }
        for (int i = 0; i < ge[gi].n_in; i++)
            if (!ge[gi].packed_nb[i] && vidx[ge[gi].in_values[i]] < 0)
                vidx[ge[gi].in_values[i]] = nval++; /* packed constants: their own entries */
        for (int i = 0; i < ge[gi].n_out; i++)
            if (vidx[ge[gi].out_values[i]] < 0)
                vidx[ge[gi].out_values[i]] = nval++;
        for (int j = 0; j < gi; j++)
            if (kof[j] >= 0 && !strcmp(ge[j].key, ge[gi].key)) {
                kof[gi] = kof[j];
                break;
            }
        if (kof[gi] >= 0)
            continue;
        te_tensor *args[2 * TE_GRAPH_GROUP_MAXIO];
        int na = 0;
        for (int i = 0; i < ge[gi].n_in; i++)
            args[na++] = ge[gi].ins[i];
        for (int i = 0; i < ge[gi].n_out; i++)
            args[na++] = ge[gi].outs[i];
        char kname[128], ckey[1200];
        snprintf(kname, sizeof kname, "%s_k%d", name, nk);
        const char *wkey = ge[gi].key;
        te_db_trial_list *inm = NULL;
        if (have_dbt &&
            te_graph_context_key(nkeys, keys, ge[gi].key, ckey, sizeof ckey) < (int)sizeof ckey &&
            te_db_best(db, ckey, &dbt, 0, &inm) == TE_OK)
            wkey = ckey;
        te_db_trial_list_free(inm);
        char *sec = whole ? te_graph_whole_trace_section(whole->items[0].trace, ge[gi].key) : NULL;
        rc = te_gen_kernel_from_db(
            ctx,
            &(te_gen_from_db_options){.db = db,
                                      .db_path = db_path,
                                      .workload_key = wkey,
                                      .name = kname,
                                      .n_args = na,
                                      .args = args,
                                      .n_out = ge[gi].n_out,
                                      .target = tgt,
                                      .trace = sec,
                                      .trace_record = sec ? &whole->items[0] : NULL},
            &ks[nk]);
        free(sec);
        if (rc)
            break;
        out->n_from_db += ks[nk].prov.from_db;
        kof[gi] = nk++;
    }
    te_db_trial_list_free(whole);
    /* Every graph input, whether or not a group reads it, so the runner's CLI is the model's. */
    for (int i = 0; !rc && i < te_graph_input_count(g); i++) {
        int v = te_graph_input_value(g, i);
        if (vidx[v] < 0)
            vidx[v] = nval++;
    }
    /* One file pair per kernel: a file of several kernels would need a dispatcher. */
    for (int k = 0; !rc && k < nk; k++) {
        te_gen_options ko = *opts;
        ko.name = ks[k].name;
        ko.target = tgt;
        ko.n_params = 0;
        rc = te_gen_files(ctx, 1, &ks[k], &ko, dir, NULL);
    }
    char wdir[4096];
    snprintf(wdir, sizeof wdir, "%s/weights", dir);
    if (!rc)
        rc = make_dir(ctx, wdir);
    /* The value table in runner order, the weights as .npy files. */
    te__sb r = {0};
    te_graph_mem_stats ms;
    te_graph_memplan_stats(mp, &ms);
    te__sb_printf(&r,
                  "/*\n * runner.c: runs the fused graph of %s (%d groups, %d kernels in "
                  "%s_k*.c, %d reshape views),\n * generated by tessera gen. Needs nothing of "
                  "Tessera:\n *\n"
                  " *     cc -O3 -march=native -std=gnu11 -fopenmp -o runner runner.c %s_k*.c -lm\n"
                  " *     (any C99 compiler builds it; the flags are those the kernels were timed "
                  "with)\n"
                  " *     ./runner x=input.npy -o out/        # writes out/<output>.npy\n *\n"
                  " * The weights are read from weights/<name>.npy (beside the program, or -w "
                  "DIR);\n * the intermediates share one pool of %zu bytes.\n",
                  opts->command ? opts->command : name, ng, nk, name, nviews, name, ms.pool_bytes);
    if (opts->command) {
        te__sb_puts(&r, " *\n * Regenerate with:\n");
        te__sb_comment(&r, opts->command);
    }
    te__sb_puts(&r, " */\n");
    te__sb inc = {0};
    for (int k = 0; k < nk; k++)
        te__sb_printf(&inc, "#include \"%s.h\"\n", ks[k].name);
    te__sb_printf(&r, k_runner_head, inc.p ? inc.p : "");
    te__sb_free(&inc);
    /* The constants the kernels read packed in column panels (te_graph_group_expr.packed_nb):
     * one entry and one weights file each, after the graph's values. */
    int npk = 0;
    packed_w *pk = te__alloc(ctx, sizeof *pk * (size_t)(ng * TE_GRAPH_GROUP_MAXIO + 1));
    if (!pk && !rc)
        rc = te_ctx_set_error(ctx, TE_ERR_NOMEM, "te_gen_graph_files: out of memory");
    for (int gi = 0; !rc && gi < ng; gi++)
        for (int i = 0; kof[gi] >= 0 && i < ge[gi].n_in; i++)
            if (ge[gi].packed_nb[i] && packed_entry(pk, npk, &ge[gi], i) < 0)
                pk[npk++] =
                    (packed_w){ge[gi].in_values[i], ge[gi].packed_nb[i], ge[gi].packed_trans[i]};
    te__sb_printf(&r, "#define NV %d\n#define POOL_BYTES ((size_t)%zu)\n\n", nval + npk,
                  ms.pool_bytes ? ms.pool_bytes : (size_t)64);
    te__sb_puts(&r, "static const value V[NV] = {\n");
    int *order = te__alloc(ctx, sizeof(int) * (size_t)(nval + 1));
    if (!order && !rc)
        rc = te_ctx_set_error(ctx, TE_ERR_NOMEM, "te_gen_graph_files: out of memory");
    for (int v = 0; !rc && v < nv; v++)
        if (vidx[v] >= 0)
            order[vidx[v]] = v;
    for (int i = 0; !rc && i < nval; i++) {
        int v = order[i];
        te_dtype dt = te_graph_value_dtype(g, v);
        const char *descr = te_npy_descr(dt);
        if (!descr) {
            rc = te_ctx_set_error(ctx, TE_ERR_UNSUPPORTED,
                                  "te_gen_graph_files: value '%s' has dtype %s, which .npy files "
                                  "of the runner do not carry",
                                  te_graph_value_name(g, v), te_dtype_str(dt));
            break;
        }
        int64_t off = te_graph_memplan_offset(mp, v);
        int root = te_graph_memplan_alias(mp, v);
        te_graph_value_kind kind = te_graph_value_kind_of(g, v);
        const char *k = kind == TE_GRAPH_INPUT           ? "V_INPUT"
                        : kind == TE_GRAPH_CONST         ? "V_CONST"
                        : root != v                      ? "V_VIEW"
                        : te_graph_value_is_output(g, v) ? "V_OUTPUT"
                        : off >= 0                       ? "V_POOL"
                                                         : "V_OUTPUT";
        int nd = te_graph_value_ndim(g, v);
        const int64_t *sh = te_graph_value_shape(g, v);
        te__sb_printf(&r, "    {\"%s\", %s, \"%s\", %zu, %d, {", te_graph_value_name(g, v), k,
                      descr, te_dtype_size(dt), nd);
        for (int d = 0; d < nd; d++)
            te__sb_printf(&r, "%s%lld", d ? ", " : "", (long long)sh[d]);
        te__sb_printf(&r, "}, %lld, %lld, %d}, /* %d", (long long)te_graph_value_numel(g, v),
                      (long long)(off >= 0 && root == v ? off : 0), vidx[root], i);
        if (root != v)
            te__sb_printf(&r, ": a view of %s", te_graph_value_name(g, root));
        te__sb_puts(&r, " */\n");
        if (kind == TE_GRAPH_CONST) {
            char path[8192], err[8400];
            snprintf(path, sizeof path, "%s/%s.npy", wdir, te_graph_value_name(g, v));
            if (te_npy_write(path, dt, nd, sh, te_graph_value_data(g, v), err, sizeof err)) {
                rc = te_ctx_set_error(ctx, TE_ERR_IO, "te_gen_graph_files: %s", err);
                break;
            }
            out->n_weights++;
        }
    }
    for (int q = 0; !rc && q < npk; q++) {
        int v = pk[q].v, tr = pk[q].trans;
        const int64_t *sh = te_graph_value_shape(g, v);
        int64_t kk = sh[tr ? 1 : 0], n = sh[tr ? 0 : 1], nb = pk[q].nb;
        char pname[160];
        snprintf(pname, sizeof pname, "%s_panels%lld%s", te_graph_value_name(g, v), (long long)nb,
                 tr ? "_t" : "");
        int64_t psh[3] = {n / nb, kk, nb};
        te__sb_printf(
            &r,
            "    {\"%s\", V_CONST, \"<f4\", 4, 3, {%lld, %lld, %lld}, %lld, 0, %d}, /* %d: "
            "%s [%lld, %lld] packed in column panels of %lld: [n / %lld][k][%lld], "
            "p[jb][kk][j] = %s */\n",
            pname, (long long)psh[0], (long long)psh[1], (long long)psh[2], (long long)(n * kk),
            nval + q, nval + q, te_graph_value_name(g, v), (long long)sh[0], (long long)sh[1],
            (long long)nb, (long long)nb, (long long)nb,
            tr ? "W[jb * nb + j][kk]" : "W[kk][jb * nb + j]");
        float *buf = malloc(sizeof(float) * (size_t)(n * kk));
        char path[8192], err[8400];
        snprintf(path, sizeof path, "%s/%s.npy", wdir, pname);
        if (!buf || te_graph_pack_panels(te_graph_value_data(g, v), kk, n, tr, nb, buf) ||
            te_npy_write(path, TE_F32, 3, psh, buf, err, sizeof err))
            rc = te_ctx_set_error(ctx, buf ? TE_ERR_IO : TE_ERR_NOMEM, "te_gen_graph_files: %s",
                                  buf ? err : "out of memory");
        free(buf);
        out->n_weights++;
    }
    te__sb_puts(&r, "};\n\n");
    te__sb_puts(&r, k_runner_body);
    /* The calls, in plan order. */
    te__sb_puts(&r,
                "/* The groups in plan order. */\nstatic int run_kernels(void)\n{\n    int rc;\n");
    for (int gi = 0; !rc && gi < ng; gi++) {
        te_fuse_group gr;
        te_fuse_plan_group(p, gi, &gr);
        if (gr.view) {
            int v = te_graph_node_output(g, gr.nodes[0], 0);
            te__sb_printf(&r, "    /* group %d: view of %s (%s = reshape, no copy) */\n", gi,
                          te_graph_value_name(g, te_graph_memplan_alias(mp, v)),
                          te_graph_value_name(g, v));
            continue;
        }
        te__sb_printf(&r, "    /* group %d: %s (", gi, gr.rule);
        for (int n = 0; n < gr.n_nodes; n++)
            te__sb_printf(&r, "%s%s %s", n ? ", " : "", te_graph_node_op(g, gr.nodes[n]),
                          te_graph_node_name(g, gr.nodes[n]));
        te__sb_printf(&r, ") */\n    rc = %s_k%d(", name, kof[gi]);
        int na = 0;
        for (int i = 0; i < ge[gi].n_in; i++, na++) {
            int v = ge[gi].in_values[i], q = packed_entry(pk, npk, &ge[gi], i);
            int slot = q >= 0 ? nval + q : vidx[v];
            te__sb_printf(&r, "%s(const %s *)buf[%d]", na ? ", " : "",
                          te_dtype_ctype(te_graph_value_dtype(g, v)), slot);
        }
        for (int i = 0; i < ge[gi].n_out; i++, na++) {
            int v = ge[gi].out_values[i];
            te__sb_printf(&r, "%s(%s *)buf[%d]", na ? ", " : "",
                          te_dtype_ctype(te_graph_value_dtype(g, v)), vidx[v]);
        }
        te__sb_printf(&r,
                      ");\n    if (rc) {\n        fprintf(stderr, \"runner: kernel %s_k%d (group "
                      "%d) returned %%d\\n\", rc);\n        return 1;\n    }\n",
                      name, kof[gi], gi);
    }
    te__sb_puts(&r, "    return 0;\n}\n");
    const char *runner = rc ? NULL : te__sb_finish(ctx, &r);
    if (rc)
        te__sb_free(&r);
    else if (!runner)
        rc = te_ctx_set_error(ctx, TE_ERR_NOMEM, "te_gen_graph_files: out of memory");
    te_graph_memplan_free(mp);
    if (rc)
        return rc;
    out->runner_path = te__sprintf(ctx, "%s/runner.c", dir);
    out->makefile_path = te__sprintf(ctx, "%s/Makefile", dir);
    out->readme_path = te__sprintf(ctx, "%s/README.md", dir);
    out->n_groups = ng;
    out->n_kernels = nk;
    if (!out->runner_path || !out->makefile_path || !out->readme_path)
        return te_ctx_set_error(ctx, TE_ERR_NOMEM, "te_gen_graph_files: out of memory");
    rc = write_text(ctx, out->runner_path, runner);
    const char *mk = te__sprintf(ctx,
                                 "# Builds the runner of %s (generated by tessera gen).\n"
                                 "# The flags the kernels were timed with; any C99 compiler "
                                 "builds them, slower without -march.\n"
                                 "CC ?= cc\nCFLAGS ?= -O3 -march=native -fopenmp\n\n"
                                 "runner: runner.c $(wildcard %s_k*.c %s_k*.h)\n"
                                 "\t$(CC) $(CFLAGS) -std=gnu11 -o runner runner.c %s_k*.c -lm\n\n"
                                 "clean:\n\trm -f runner\n",
                                 name, name, name, name);
    const char *rd = te__sprintf(
        ctx,
        "# %s: a fused graph as standalone C\n\n"
        "Generated by `%s`.\n\n"
        "- `%s_k<i>.c`, `%s_k<i>.h`: %d kernels (the %d fused groups; groups doing the same "
        "work share one; %d reshapes are views of their input's bytes, no kernel), each "
        "documented in its header\n"
        "- `weights/`: the %d constants as .npy files\n"
        "- `runner.c`: allocates the inputs, outputs and one pool of %zu bytes for the "
        "intermediates, reads the weights and the inputs (.npy), calls the kernels in order and "
        "writes every output as .npy\n\n"
        "Build and run (any C99 compiler; OpenMP optional; -march=native is how the kernels were "
        "timed):\n\n"
        "    make      # or: cc -O3 -march=native -std=gnu11 -fopenmp -o runner runner.c %s_k*.c "
        "-lm\n"
        "    ./runner NAME=input.npy -o out/\n\n"
        "`./runner --help` lists the inputs.\n",
        name, opts->command ? opts->command : "tessera gen", name, name, nk, ng, nviews,
        out->n_weights, ms.pool_bytes, name);
    if (!mk || !rd)
        return te_ctx_set_error(ctx, TE_ERR_NOMEM, "te_gen_graph_files: out of memory");
    if (!rc)
        rc = write_text(ctx, out->makefile_path, mk);
    if (!rc)
        rc = write_text(ctx, out->readme_path, rd);
    return rc;
}

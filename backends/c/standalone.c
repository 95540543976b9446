/*
 * backends/c/standalone.c: standalone kernel files for other projects (tessera/gen.h).
 *
 * te_gen_sources lowers every kernel of a request, emits them into one translation unit with
 * one prelude (te__emit_c_unit), adds the dispatcher when asked, and writes a header that
 * documents the ABI. Both files begin with the same provenance comment. The CUDA target is in
 * backends/cuda/standalone_cuda.c; te_gen_kernel_from_db picks a schedule from the database.
 */
#define _GNU_SOURCE

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "backends/c/c_backend.h"
#include "backends/c/standalone.h"
#include "tessera/autotune.h"
#include "tessera/ops.h"
#include "tessera/tuner.h"

/* ---- Options and checks ------------------------------------------------------------------- */

te_gen_options te_gen_options_default(const char *name)
{
    te_gen_options o;
    memset(&o, 0, sizeof o);
    o.name = name;
    return o;
}

static bool is_ident_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* Words a dispatcher parameter must not be (C and C++ keywords, the types it uses). */
static bool bad_param_name(const char *z)
{
    static const char *const w[] = {
        "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else",
        "enum", "extern", "float", "for", "goto", "if", "inline", "int", "long", "register",
        "restrict", "return", "short", "signed", "sizeof", "static", "struct", "switch",
        "typedef", "union", "unsigned", "void", "volatile", "while", "bool", "true", "false",
        "class", "new", "delete", "this", "template", "typename", "namespace", "operator",
        "private", "public", "protected", "friend", "virtual", "using", "try", "catch", "throw",
        "int64_t", "int32_t", "stream", "NULL", NULL};
    if (!strncmp(z, "te_", 3) || !strncmp(z, "__", 2) || (z[0] == '_' && z[1] >= 'A' && z[1] <= 'Z'))
        return true;
    for (int i = 0; w[i]; i++)
        if (!strcmp(z, w[i]))
            return true;
    return false;
}

static const char *tensor_op(const te_gen_kernel *k, const te_gen_options *o)
{
    if (o->op && *o->op)
        return o->op;
    for (int i = k->n_args - 1; i >= 0; i--)
        if (k->args[i] && te_tensor_tag(k->args[i]) && *te_tensor_tag(k->args[i]))
            return te_tensor_tag(k->args[i]);
    return NULL;
}

/* Validates the request and fills the plan. */
static int make_plan(te_ctx *ctx, int n, const te_gen_kernel *k, const te_gen_options *o,
                     te__gen_plan *p)
{
    memset(p, 0, sizeof *p);
    if (n < 1 || !k || !o)
        return te_ctx_set_error(ctx, TE_ERR_ARG, "te_gen: no kernel to generate");
    if (!o->name || !*o->name)
        return te_ctx_set_error(ctx, TE_ERR_ARG, "te_gen: options.name (the file and entry name) "
                                                 "is required");
    for (const char *c = o->name; *c; c++)
        if (!is_ident_char(*c) && *c != '-' && *c != '.')
            return te_ctx_set_error(ctx, TE_ERR_ARG,
                                    "te_gen: name '%s' must consist of letters, digits and '_'",
                                    o->name);
    if (o->n_params < 0 || o->n_params > TE_GEN_MAX_PARAMS)
        return te_ctx_set_error(ctx, TE_ERR_ARG, "te_gen: %d dispatch parameters (0 to %d)",
                                o->n_params, TE_GEN_MAX_PARAMS);
    p->n = n;
    p->k = k;
    p->o = o;
    p->target = o->target;
    char buf[200];
    p->entry = te__strdup(ctx, te__c_kernel_ident(o->name, buf, sizeof buf - 16));
    p->knames = te__alloc(ctx, sizeof(char *) * (size_t)n);
    if (!p->entry || !p->knames)
        return te_ctx_set_error(ctx, TE_ERR_NOMEM, "te_gen: out of memory");
    for (int i = 0; i < n; i++) {
        const te_gen_kernel *ki = &k[i];
        if (!ki->schedule || ki->n_args < 1 || !ki->args)
            return te_ctx_set_error(ctx, TE_ERR_ARG,
                                    "te_gen: kernel %d needs a schedule and its arguments", i);
        for (int a = 0; a < ki->n_args; a++)
            if (!ki->args[a])
                return te_ctx_set_error(ctx, TE_ERR_ARG, "te_gen: kernel %d: argument %d is NULL",
                                        i, a);
        const char *nm = ki->name && *ki->name ? ki->name : (n == 1 && !o->n_params ? o->name : NULL);
        if (!nm)
            return te_ctx_set_error(ctx, TE_ERR_ARG, "te_gen: kernel %d needs a name", i);
        p->knames[i] = te__strdup(ctx, te__c_kernel_ident(nm, buf, sizeof buf - 16));
        for (int j = 0; j < i; j++)
            if (!strcmp(p->knames[i], p->knames[j]))
                return te_ctx_set_error(ctx, TE_ERR_ARG,
                                        "te_gen: kernels %d and %d are both named '%s'", j, i,
                                        p->knames[i]);
        if (o->n_params && !strcmp(p->knames[i], p->entry))
            return te_ctx_set_error(ctx, TE_ERR_ARG,
                                    "te_gen: kernel %d is named '%s' like the dispatcher", i,
                                    p->entry);
    }
    if (n > 1 && !o->n_params)
        return te_ctx_set_error(ctx, TE_ERR_ARG, "te_gen: %d kernels in one file need dispatch "
                                                 "parameters (options.n_params) to choose between "
                                                 "them", n);
    if (o->n_params) {
        for (int i = 1; i < n; i++) {
            if (k[i].n_args != k[0].n_args)
                return te_ctx_set_error(ctx, TE_ERR_ARG,
                                        "te_gen: one dispatcher needs the same arguments in every "
                                        "kernel: '%s' takes %d, '%s' %d",
                                        p->knames[0], k[0].n_args, p->knames[i], k[i].n_args);
            for (int a = 0; a < k[0].n_args; a++)
                if (te_tensor_dtype(k[i].args[a]) != te_tensor_dtype(k[0].args[a]))
                    return te_ctx_set_error(ctx, TE_ERR_ARG,
                                            "te_gen: argument %d is %s in '%s' but %s in '%s'", a,
                                            te_dtype_str(te_tensor_dtype(k[0].args[a])),
                                            p->knames[0],
                                            te_dtype_str(te_tensor_dtype(k[i].args[a])),
                                            p->knames[i]);
            for (int j = 0; j < i; j++) {
                bool same = true;
                for (int q = 0; q < o->n_params; q++)
                    same &= k[i].params[q] == k[j].params[q];
                if (same)
                    return te_ctx_set_error(ctx, TE_ERR_ARG,
                                            "te_gen: kernels '%s' and '%s' have the same "
                                            "dispatch parameter values",
                                            p->knames[j], p->knames[i]);
            }
        }
        for (int q = 0; q < o->n_params; q++) {
            if (!o->params[q] || !*o->params[q])
                return te_ctx_set_error(ctx, TE_ERR_ARG, "te_gen: dispatch parameter %d has no "
                                                         "name", q);
            char z[64];
            size_t j = 0;
            for (const char *c = o->params[q]; *c && j + 2 < sizeof z; c++)
                z[j++] = is_ident_char(*c) ? *c : '_';
            z[j] = 0;
            if (z[0] >= '0' && z[0] <= '9') {
                memmove(z + 1, z, j + 1);
                z[0] = '_';
            }
            /* distinct from the tensors' names and each other */
            for (bool again = true; again;) {
                again = bad_param_name(z);
                for (int a = 0; a < k[0].n_args && !again; a++)
                    again = !strcmp(z, te_tensor_name(k[0].args[a]));
                for (int r = 0; r < q && !again; r++)
                    again = !strcmp(z, p->params[r]);
                if (again && strlen(z) + 2 < sizeof z)
                    strcat(z, "_");
                else
                    again = false;
            }
            p->params[q] = te__strdup(ctx, z);
        }
    }
    te_target host;
    if (!p->target) {
        host = te_target_host();
        p->target = te__alloc(ctx, sizeof host);
        if (p->target)
            memcpy((void *)p->target, &host, sizeof host);
    }
    if (!p->target)
        return te_ctx_set_error(ctx, TE_ERR_NOMEM, "te_gen: out of memory");
    te_db_target dbt;
    char storage[1024];
    if (te_tuner_db_target(p->target, &dbt, storage, sizeof storage) == TE_OK)
        te_db_target_key(&dbt, p->target_key, sizeof p->target_key);
    else
        te_target_key(p->target, p->target_key, sizeof p->target_key);
    return TE_OK;
}

/* ---- Comments ----------------------------------------------------------------------------- */

/* Appends text as comment lines with `prefix` after " * " (and never closes the comment). */
static void comment_lines(te__sb *b, const char *prefix, const char *text)
{
    const char *p = text;
    while (p && *p) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        te__sb_puts(b, " *");
        if (n || *prefix)
            te__sb_printf(b, " %s", prefix);
        char *line = strndup(p, n);
        if (!line) {
            b->oom = true;
            return;
        }
        for (char *q = line; (q = strstr(q, "*/"));)
            q[1] = '|'; /* "*|" */
        te__sb_puts(b, line);
        free(line);
        te__sb_puts(b, "\n");
        p += n + (nl ? 1 : 0);
    }
}

static void fmt_time(double s, char *buf, size_t n)
{
    if (!isfinite(s) || s <= 0)
        snprintf(buf, n, "?");
    else if (s < 1e-3)
        snprintf(buf, n, "%.2f us", s * 1e6);
    else if (s < 1)
        snprintf(buf, n, "%.3f ms", s * 1e3);
    else
        snprintf(buf, n, "%.3f s", s);
}

static void kernel_label(te__gen_plan *p, int i, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = 0;
    for (int q = 0; q < p->o->n_params && len < n; q++)
        len += (size_t)snprintf(buf + len, n - len, "%s%s=%lld", q ? ", " : "", p->params[q],
                                (long long)p->k[i].params[q]);
}

void te__gen_comment(te__gen_plan *p, te__sb *b, const char *file_name, const char *kind)
{
    const te_gen_options *o = p->o;
    const char *op = tensor_op(&p->k[0], o);
    te__sb_printf(b, "/*\n * %s: %s, generated by Tessera %s (`tessera gen`) for the %s target.\n",
                   file_name, op ? op : p->entry, te_version(), kind);
    if (p->n > 1)
        te__sb_printf(b, " * %d shapes in one file, dispatched by %s().\n", p->n, p->entry);
    te__sb_puts(b, " * It needs nothing of Tessera to build or run. Do not edit: regenerate");
    if (o->command && *o->command) {
        te__sb_puts(b, " with\n *\n");
        comment_lines(b, "    ", o->command);
        te__sb_puts(b, " *\n");
    } else {
        te__sb_puts(b, " it\n * with te_gen_files (tessera/gen.h).\n *\n");
    }
    te__sb_printf(b, " * target:   %s\n", p->target_key);
    for (int i = 0; i < p->n; i++) {
        const te_gen_kernel *k = &p->k[i];
        const te_gen_provenance *pr = &k->prov;
        char label[256];
        kernel_label(p, i, label, sizeof label);
        te__sb_printf(b, " *\n * kernel %s%s%s%s\n", p->knames[i], *label ? " (" : "", label,
                       *label ? ")" : "");
        if (pr->workload_key)
            comment_lines(b, "  workload: ", pr->workload_key);
        if (pr->from_db) {
            te__sb_printf(b, " *   trial:    %s (id %lld", pr->trial_uid ? pr->trial_uid : "?",
                           (long long)pr->trial_id);
            if (pr->job_id)
                te__sb_printf(b, ", job %lld", (long long)pr->job_id);
            te__sb_puts(b, ")");
            if (pr->db_path)
                te__sb_printf(b, " in %s", pr->db_path);
            te__sb_puts(b, "\n");
            char t[64];
            fmt_time(pr->median_s, t, sizeof t);
            te__sb_printf(b, " *   measured: median %s", t);
            if (isfinite(pr->gflops) && pr->gflops > 0)
                te__sb_printf(b, ", %.2f GFLOP/s", pr->gflops);
            if (pr->created_us > 0) {
                time_t secs = (time_t)(pr->created_us / 1000000);
                struct tm tm;
                char d[64];
                if (gmtime_r(&secs, &tm) && strftime(d, sizeof d, "%Y-%m-%d %H:%M:%S UTC", &tm))
                    te__sb_printf(b, ", on %s", d);
            }
            if (pr->measured_by && *pr->measured_by)
                te__sb_printf(b, " by Tessera %s", pr->measured_by);
            te__sb_puts(b, "\n");
            if (!pr->exact_target && pr->target_key)
                comment_lines(b, "  measured on a compatible target: ", pr->target_key);
        } else {
            comment_lines(b, "  schedule: ",
                          pr->note && *pr->note ? pr->note : "given by the caller (no record)");
        }
        const char *trace = te_schedule_trace(k->schedule);
        te__sb_puts(b, " *   schedule trace:\n");
        comment_lines(b, "    ", trace && *trace ? trace : "(default schedule: no primitives)\n");
    }
    te__sb_puts(b, " */\n");
}

/* Every computed stage of the kernel's outputs, producers first, as "T[i, j] = ...". */
static void describe_stages(te__gen_plan *p, te__sb *b, int i)
{
    const te_gen_kernel *k = &p->k[i];
    te_tensor *seen[64];
    int nseen = 0;
    for (int a = 0; a < k->n_args; a++) {
        if (te_tensor_is_placeholder(k->args[a]))
            continue;
        te_tensor *st[64];
        int ns = te_op_stages(k->args[a], st, 64);
        for (int s = 0; s < ns && s < 64; s++) {
            bool dup = false;
            for (int j = 0; j < nseen; j++)
                dup |= seen[j] == st[s];
            if (dup || nseen == 64)
                continue;
            seen[nseen++] = st[s];
            char *text = NULL;
            size_t len = 0;
            FILE *f = open_memstream(&text, &len);
            if (!f) {
                b->oom = true;
                return;
            }
            te_tensor_print(st[s], f);
            fclose(f);
            comment_lines(b, "    ", text);
            free(text);
        }
    }
}

void te__gen_describe_kernel(te__gen_plan *p, te__sb *b, int i, const char *const *cnames)
{
    const te_gen_kernel *k = &p->k[i];
    te__sb_puts(b, " * Computes:\n");
    describe_stages(p, b, i);
    te__sb_puts(b, " *\n * Arguments, in order (row-major, contiguous; strides in elements):\n");
    size_t w = 4;
    for (int a = 0; a < k->n_args; a++)
        if (strlen(cnames[a]) > w)
            w = strlen(cnames[a]);
    for (int a = 0; a < k->n_args; a++) {
        te_tensor *t = k->args[a];
        int nd = te_tensor_ndim(t);
        const int64_t *sh = te_tensor_shape(t);
        char shape[256] = "", strides[256] = "";
        size_t ls = 0, lt = 0;
        int64_t stride = 1;
        int64_t st[TE_MAX_DIMS];
        for (int d = nd - 1; d >= 0; d--) {
            st[d] = stride;
            stride *= sh[d];
        }
        for (int d = 0; d < nd; d++) {
            ls += (size_t)snprintf(shape + ls, sizeof shape - ls, "[%lld]", (long long)sh[d]);
            lt += (size_t)snprintf(strides + lt, sizeof strides - lt, "%s%lld", d ? ", " : "",
                                   (long long)st[d]);
        }
        te__sb_printf(b, " *   %-*s %-6s %-7s %-16s strides {%s}, %lld bytes", (int)w,
                       cnames[a], te_tensor_is_placeholder(t) ? "input" : "output",
                       te_dtype_ctype(te_tensor_dtype(t)), shape, strides,
                       (long long)(te_tensor_numel(t) * (int64_t)te_dtype_size(te_tensor_dtype(t))));
        if (strcmp(cnames[a], te_tensor_name(t)))
            te__sb_printf(b, " (tensor %s)", te_tensor_name(t));
        te__sb_puts(b, "\n");
    }
}

void te__gen_describe_dispatch(te__gen_plan *p, te__sb *b, const char *suffix)
{
    for (int i = 0; i < p->n; i++) {
        char label[256];
        kernel_label(p, i, label, sizeof label);
        te__sb_printf(b, " *   %-32s -> %s%s\n", label, p->knames[i], suffix);
    }
}

void te__gen_dispatch_params(te__gen_plan *p, te__sb *b)
{
    for (int q = 0; q < p->o->n_params; q++)
        te__sb_printf(b, "%sint64_t %s", q ? ", " : "", p->params[q]);
}

void te__gen_dispatch_cond(te__gen_plan *p, te__sb *b, int i)
{
    for (int q = 0; q < p->o->n_params; q++)
        te__sb_printf(b, "%s%s == %lld", q ? " && " : "", p->params[q],
                       (long long)p->k[i].params[q]);
}

/* ---- The C target ------------------------------------------------------------------------- */

static void c_prototype(te__sb *b, const te_gen_kernel *k, const char *name,
                        const te__c_kernel_info *info, te__gen_plan *p, bool dispatch,
                        bool restrict_)
{
    te__sb_printf(b, "int %s(", name);
    if (dispatch) {
        te__gen_dispatch_params(p, b);
        te__sb_puts(b, ", ");
    }
    int n_in = k->n_args - p->n_out;
    for (int a = 0; a < k->n_args; a++)
        te__sb_printf(b, "%s%s%s *%s%s", a ? ", " : "", a < n_in ? "const " : "",
                       te_dtype_ctype(te_tensor_dtype(k->args[a])), restrict_ ? "restrict " : "",
                       info->params[a]);
    te__sb_puts(b, ")");
}

static void header_guard(te__gen_plan *p, char *g, size_t n)
{
    size_t j = (size_t)snprintf(g, n, "TESSERA_GEN_");
    for (const char *c = p->entry; *c && j + 3 < n; c++)
        g[j++] = (*c >= 'a' && *c <= 'z') ? (char)(*c - 32) : *c;
    snprintf(g + j, n - j, "_H");
}

static int gen_c(te_ctx *ctx, te__gen_plan *p, te_gen_output *out)
{
    int n = p->n;
    const te_lowered **fs = te__alloc(ctx, sizeof(te_lowered *) * (size_t)n);
    te__c_kernel_info *info = te__alloc(ctx, sizeof *info * (size_t)n);
    if (!fs || !info)
        return te_ctx_set_error(ctx, TE_ERR_NOMEM, "te_gen: out of memory");
    for (int i = 0; i < n; i++) {
        const te_gen_kernel *k = &p->k[i];
        fs[i] = te_lower(k->schedule, k->n_args, k->args, p->knames[i], p->target);
        if (!fs[i])
            return te_ctx_errcode(ctx) != TE_OK ? te_ctx_errcode(ctx) : TE_ERR_LOWER;
        if (i == 0)
            p->n_out = fs[i]->n_outputs;
        else if (fs[i]->n_outputs != p->n_out)
            return te_ctx_set_error(ctx, TE_ERR_ARG,
                                    "te_gen: '%s' writes %d outputs but '%s' %d", p->knames[0],
                                    p->n_out, p->knames[i], fs[i]->n_outputs);
    }
    char src_name[256], hdr_name[256];
    snprintf(src_name, sizeof src_name, "%s.c", p->o->name);
    snprintf(hdr_name, sizeof hdr_name, "%s.h", p->o->name);

    te__sb comment = {0};
    te__gen_comment(p, &comment, src_name, "C");
    const char *const **names = te__alloc(ctx, sizeof *names * (size_t)n);
    if (!names) {
        free(comment.p);
        return te_ctx_set_error(ctx, TE_ERR_NOMEM, "te_gen: out of memory");
    }
    for (int i = 0; i < n; i++)
        names[i] = p->k[i].arg_names;
    te__c_unit_opts uo = {.comment = comment.p ? comment.p : "", .no_packed = 1,
                          .standalone = 1, .arg_names = names};
    const char *units = comment.oom ? NULL : te__emit_c_unit(ctx, n, fs, p->target, &uo, info);
    free(comment.p);
    if (!units)
        return te_ctx_errcode(ctx) != TE_OK ? te_ctx_errcode(ctx) : TE_ERR_NOMEM;

    bool dispatch = p->o->n_params > 0;
    bool any_omp = false, any_fail = false, any_nt = false;
    for (int i = 0; i < n; i++) {
        any_omp |= info[i].uses_omp;
        any_fail |= info[i].may_fail;
        any_nt |= info[i].n_nt > 0;
    }

    /* ---- the source: the unit, then the dispatcher */
    te__sb src = {0};
    te__sb_puts(&src, units);
    if (dispatch) {
        te__sb_printf(&src, "\n/* Calls the kernel generated for these parameter values; -2 when "
                             "there is none. */\n");
        c_prototype(&src, &p->k[0], p->entry, &info[0], p, true, true);
        te__sb_puts(&src, "\n{\n");
        for (int i = 0; i < n; i++) {
            te__sb_puts(&src, "    if (");
            te__gen_dispatch_cond(p, &src, i);
            te__sb_printf(&src, ")\n        return %s(", info[i].ident);
            for (int a = 0; a < p->k[i].n_args; a++)
                te__sb_printf(&src, "%s%s", a ? ", " : "", info[0].params[a]);
            te__sb_puts(&src, ");\n");
        }
        te__sb_puts(&src, "    return -2;\n}\n");
    }

    /* ---- the header */
    te__sb h = {0};
    te__gen_comment(p, &h, hdr_name, "C");
    char guard[256];
    header_guard(p, guard, sizeof guard);
    bool any_bool = false;
    for (int i = 0; i < n; i++)
        for (int a = 0; a < p->k[i].n_args; a++)
            any_bool |= te_tensor_dtype(p->k[i].args[a]) == TE_BOOL;
    te__sb_printf(&h, "#ifndef %s\n#define %s\n\n%s#include <stdint.h>\n\n"
                       "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n", guard, guard,
                   any_bool ? "#include <stdbool.h>\n" : "");
    te__sb_printf(
        &h,
        "/*\n"
        " * ABI of the functions below (%s has their definitions):\n"
        " *\n"
        " *  - Arrays are dense, row-major (C order) and contiguous: element [i0][i1]...[iN] of an\n"
        " *    array of shape [d0][d1]...[dN] is at element offset (((i0 * d1) + i1) * d2 + ...) + iN.\n"
        " *    There is no padding between rows; the strides (in elements) are listed with each\n"
        " *    argument. Shapes are fixed: each kernel is specialised to the shapes it documents.\n"
        " *  - Inputs (const) are only read. Outputs are written entirely; what they held before\n"
        " *    is ignored. Arrays must not overlap (the definitions use restrict).\n"
        " *  - Alignment: nothing beyond the element type's alignment is required.%s\n"
        " *  - Threads: %s\n"
        " *    The functions keep no global state: calls are reentrant and thread-safe.\n"
        " *  - Return value: 0 on success%s%s.\n"
        " *  - Compiler: GCC or Clang (the vector code uses their vector extensions), any C\n"
        " *    standard from C99 on; `-std=c99 -Wall -Wextra -Werror -pedantic` is clean. The\n"
        " *    speed above was measured with `-O3 -march=native -std=gnu11 -fopenmp` on the\n"
        " *    target above. In ISO modes (-std=c99, -std=c11) GCC does not fuse multiplies and\n"
        " *    adds: add -ffp-contract=fast (or use -std=gnu99) to get that speed. Without ISA\n"
        " *    flags (-march) it still builds and runs, slower (GCC may print notes about the\n"
        " *    vector ABI, -Wpsabi: harmless).\n"
        " */\n\n",
        src_name,
        any_nt ? "\n *    Outputs marked \"streaming\" use non-temporal stores when they are 64-byte\n"
                 " *    aligned (checked at every call; ordinary stores otherwise)."
               : "",
        any_omp ? "compiled with OpenMP (-fopenmp), the parallel loops run on an OpenMP\n"
                  " *    team of OMP_NUM_THREADS threads (omp_set_num_threads works too); compiled\n"
                  " *    without it, everything runs on the calling thread (the OpenMP pragmas are\n"
                  " *    behind the TE_OMP macro and vanish)."
                : "none: the kernels run on the calling thread (no parallel loops).",
        any_fail ? ", -1 when a scratch allocation (malloc) failed" : "",
        dispatch ? "; the dispatcher returns -2 for parameter values it has no kernel for" : "");
    for (int i = 0; i < n; i++) {
        const te_gen_kernel *k = &p->k[i];
        char label[256];
        kernel_label(p, i, label, sizeof label);
        te__sb_printf(&h, "/*\n * %s%s%s%s\n *\n", info[i].ident, *label ? " (" : "", label,
                       *label ? ")" : "");
        te__gen_describe_kernel(p, &h, i, info[i].params);
        for (int j = 0; j < info[i].n_nt; j++)
            te__sb_printf(&h, " *   %s: streaming stores when 64-byte aligned\n",
                           info[i].nt_params[j]);
        te__sb_printf(&h, " *\n * Returns 0%s.%s\n */\n",
                       info[i].may_fail ? ", or -1 when a scratch allocation failed" : "",
                       info[i].uses_omp ? " Parallel (OpenMP) when compiled with -fopenmp." : "");
        c_prototype(&h, k, info[i].ident, &info[i], p, false, false);
        te__sb_puts(&h, ";\n\n");
    }
    if (dispatch) {
        te__sb_printf(&h, "/*\n * %s: calls the kernel generated for the given parameter "
                           "values:\n *\n", p->entry);
        te__gen_describe_dispatch(p, &h, "()");
        te__sb_puts(&h, " *\n * The arrays are those of the kernel called (same order, dtypes "
                         "and layout; their\n * shapes follow from the parameters). Returns "
                         "what it returns, or -2 when no kernel\n * was generated for the "
                         "values.\n */\n");
        c_prototype(&h, &p->k[0], p->entry, &info[0], p, true, false);
        te__sb_puts(&h, ";\n\n");
    }
    te__sb_printf(&h, "#ifdef __cplusplus\n}\n#endif\n\n#endif /* %s */\n", guard);

    out->source = te__sb_finish(ctx, &src);
    out->header = te__sb_finish(ctx, &h);
    out->source_name = te__strdup(ctx, src_name);
    out->header_name = te__strdup(ctx, hdr_name);
    if (!out->source || !out->header || !out->source_name || !out->header_name)
        return te_ctx_set_error(ctx, TE_ERR_NOMEM, "te_gen: out of memory");
    return TE_OK;
}

/* ---- API ---------------------------------------------------------------------------------- */

int te_gen_sources(te_ctx *ctx, int n, const te_gen_kernel *kernels, const te_gen_options *opts,
                   te_gen_output *out)
{
    if (!ctx)
        return TE_ERR_ARG;
    if (!out)
        return te_ctx_set_error(ctx, TE_ERR_ARG, "te_gen: out is required");
    memset(out, 0, sizeof *out);
    te__gen_plan p;
    int rc = make_plan(ctx, n, kernels, opts, &p);
    if (rc != TE_OK)
        return rc;
    if (p.target->backend == TE_BACKEND_CUDA)
        return te__gen_cuda(&p, out);
    return gen_c(ctx, &p, out);
}

static int write_file(te_ctx *ctx, const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return te_ctx_set_error(ctx, TE_ERR_IO, "te_gen: cannot write %s: %s", path,
                                strerror(errno));
    size_t n = strlen(text);
    bool ok = fwrite(text, 1, n, f) == n;
    ok &= fclose(f) == 0;
    if (!ok)
        return te_ctx_set_error(ctx, TE_ERR_IO, "te_gen: cannot write %s: %s", path,
                                strerror(errno));
    return TE_OK;
}

int te_gen_files(te_ctx *ctx, int n, const te_gen_kernel *kernels, const te_gen_options *opts,
                 const char *dir, te_gen_output *out)
{
    te_gen_output local;
    if (!out)
        out = &local;
    int rc = te_gen_sources(ctx, n, kernels, opts, out);
    if (rc != TE_OK)
        return rc;
    if (!dir || !*dir)
        dir = ".";
    struct stat stt;
    if (stat(dir, &stt) != 0) {
        if (mkdir(dir, 0777) != 0 && errno != EEXIST)
            return te_ctx_set_error(ctx, TE_ERR_IO, "te_gen: cannot create directory %s: %s", dir,
                                    strerror(errno));
    } else if (!S_ISDIR(stt.st_mode)) {
        return te_ctx_set_error(ctx, TE_ERR_IO, "te_gen: %s is not a directory", dir);
    }
    out->source_path = te__sprintf(ctx, "%s/%s", dir, out->source_name);
    out->header_path = te__sprintf(ctx, "%s/%s", dir, out->header_name);
    if (!out->source_path || !out->header_path)
        return te_ctx_set_error(ctx, TE_ERR_NOMEM, "te_gen: out of memory");
    rc = write_file(ctx, out->header_path, out->header);
    if (rc == TE_OK)
        rc = write_file(ctx, out->source_path, out->source);
    return rc;
}

static const char *dupz(te_ctx *ctx, const char *z) { return z ? te__strdup(ctx, z) : NULL; }

int te_gen_kernel_from_db(te_ctx *ctx, te_db *db, const char *db_path, const char *workload_key,
                          const char *op, const char *name, int n_args, te_tensor *const *args,
                          int n_out, const te_target *target, int flags, int quiet,
                          te_gen_kernel *k)
{
    if (!ctx)
        return TE_ERR_ARG;
    if (!k || n_args < 1 || !args || n_out < 1 || n_out > n_args)
        return te_ctx_set_error(ctx, TE_ERR_ARG, "te_gen_kernel_from_db: bad arguments");
    memset(k, 0, sizeof *k);
    te_tensor **argv = te__alloc(ctx, sizeof(te_tensor *) * (size_t)n_args);
    if (!argv)
        return te_ctx_set_error(ctx, TE_ERR_NOMEM, "te_gen: out of memory");
    memcpy(argv, args, sizeof(te_tensor *) * (size_t)n_args);
    k->name = dupz(ctx, name);
    k->n_args = n_args;
    k->args = argv;
    k->prov.workload_key = dupz(ctx, workload_key);
    k->prov.db_path = dupz(ctx, db_path);
    k->prov.median_s = NAN;
    k->prov.gflops = NAN;
    k->prov.exact_target = 1;
    te_tensor *const *outs = argv + (n_args - n_out);
    te_target host;
    if (!target) {
        host = te_target_host();
        target = &host;
    }
    bool cuda = target->backend == TE_BACKEND_CUDA;
    char why[1024];
    snprintf(why, sizeof why, db ? "no record for this target%s%s" : "no database",
             db_path ? " in " : "", db_path ? db_path : "");
    if (db && workload_key) {
        te_db_target dbt;
        char storage[1024];
        te_db_trial_list *l = NULL;
        if (te_tuner_db_target(target, &dbt, storage, sizeof storage) == TE_OK &&
            te_db_best(db, workload_key, &dbt, flags, &l) == TE_OK && l && l->n) {
            const te_db_trial *r = &l->items[0];
            te_schedule *s = te_schedule_create(ctx, n_out, outs);
            int rc = s ? te_schedule_apply_trace(s, r->trace) : TE_ERR_SCHEDULE;
            if (rc == TE_OK) {
                te_gen_provenance *pr = &k->prov;
                k->schedule = s;
                pr->from_db = 1;
                pr->target_key = dupz(ctx, r->target.key);
                pr->trial_uid = dupz(ctx, r->uid);
                pr->trial_id = r->id;
                pr->job_id = r->job_id;
                pr->median_s = r->median_s;
                pr->gflops = r->gflops;
                pr->created_us = r->created_us;
                pr->measured_by = dupz(ctx, r->tessera_version);
                pr->exact_target = r->exact_target;
                te_db_trial_list_free(l);
                return TE_OK;
            }
            snprintf(why, sizeof why, "its best record (trial %s) no longer applies: %s",
                     r->uid ? r->uid : "?", te_ctx_errmsg(ctx));
            te_ctx_clear_error(ctx);
        } else if (te_db_errmsg(db) && *te_db_errmsg(db) && !l) {
            /* a lookup error other than "no record" is still only a reason to fall back */
        }
        te_db_trial_list_free(l);
    }
    char what[512] = "";
    int rc = TE_OK;
    if (cuda) {
        const char *opn = op;
        for (int i = 0; !opn && i < n_out; i++)
            if (te_tensor_tag(outs[i]) && *te_tensor_tag(outs[i]))
                opn = te_tensor_tag(outs[i]);
        rc = te__gen_cuda_default_schedule(ctx, opn, n_out, outs, &k->schedule, what, sizeof what);
    } else {
        k->schedule = te_schedule_create(ctx, n_out, outs);
        if (!k->schedule)
            rc = te_ctx_errcode(ctx) != TE_OK ? te_ctx_errcode(ctx) : TE_ERR_SCHEDULE;
        snprintf(what, sizeof what, "the default schedule (the plain loop nest, untuned)");
    }
    if (rc != TE_OK)
        return rc;
    k->prov.note = te__sprintf(ctx, "%s: %s", why, what);
    if (!quiet)
        fprintf(stderr, "tessera gen: warning: %s: %s; using %s\n",
                workload_key ? workload_key : (name ? name : "(no workload key)"), why, what);
    return TE_OK;
}

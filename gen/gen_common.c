/*
 * gen/gen_common.c: standalone kernel files for other projects (tessera/gen.h), the parts
 * both targets share.
 *
 * te_gen_sources checks a request into a plan (valid, distinct names), then hands it to the
 * C target (gen_c.c) or the CUDA target (gen_cuda.c). Both files of either target begin with
 * the same provenance comment and describe their kernels the same way (this file).
 * te_gen_kernel_from_db picks a schedule with te_tuner_best_record.
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
#include "gen/gen_impl.h"
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

bool te__gen_reserved(const char *z, const char *const *extra)
{
    static const char *const w[] = {
        "auto",     "break",     "case",     "char",    "const",    "continue",  "default",
        "do",       "double",    "else",     "enum",    "extern",   "float",     "for",
        "goto",     "if",        "inline",   "int",     "long",     "register",  "restrict",
        "return",   "short",     "signed",   "sizeof",  "static",   "struct",    "switch",
        "typedef",  "union",     "unsigned", "void",    "volatile", "while",     "bool",
        "true",     "false",     "class",    "new",     "delete",   "this",      "template",
        "typename", "namespace", "operator", "private", "public",   "protected", "friend",
        "virtual",  "using",     "try",      "catch",   "throw",    "stream",    "NULL",
        NULL};
    if (!strncmp(z, "te_", 3) || !strncmp(z, "__", 2) ||
        (z[0] == '_' && z[1] >= 'A' && z[1] <= 'Z'))
        return true;
    for (int i = 0; w[i]; i++)
        if (!strcmp(z, w[i]))
            return true;
    for (int i = 0; extra && extra[i]; i++)
        if (!strcmp(z, extra[i]))
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
        return te_ctx_set_error(ctx, TE_ERR_ARG,
                                "te_gen: options.name (the file and entry name) "
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
        const char *nm =
            ki->name && *ki->name ? ki->name : (n == 1 && !o->n_params ? o->name : NULL);
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
        return te_ctx_set_error(ctx, TE_ERR_ARG,
                                "te_gen: %d kernels in one file need dispatch "
                                "parameters (options.n_params) to choose between "
                                "them",
                                n);
    if (o->n_params) {
        for (int i = 1; i < n; i++) {
            if (k[i].n_args != k[0].n_args)
                return te_ctx_set_error(ctx, TE_ERR_ARG,
                                        "te_gen: one dispatcher needs the same arguments in every "
                                        "kernel: '%s' takes %d, '%s' %d",
                                        p->knames[0], k[0].n_args, p->knames[i], k[i].n_args);
            for (int a = 0; a < k[0].n_args; a++)
                if (te_tensor_dtype(k[i].args[a]) != te_tensor_dtype(k[0].args[a]))
                    return te_ctx_set_error(
                        ctx, TE_ERR_ARG, "te_gen: argument %d is %s in '%s' but %s in '%s'", a,
                        te_dtype_str(te_tensor_dtype(k[0].args[a])), p->knames[0],
                        te_dtype_str(te_tensor_dtype(k[i].args[a])), p->knames[i]);
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
                return te_ctx_set_error(ctx, TE_ERR_ARG,
                                        "te_gen: dispatch parameter %d has no "
                                        "name",
                                        q);
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
                again = te__gen_reserved(z, (const char *const[]){"int64_t", "int32_t", NULL});
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

void te__gen_kernel_label(const te__gen_plan *p, int i, char *buf, size_t n)
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
        te__gen_kernel_label(p, i, label, sizeof label);
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
            if (pr->note && *pr->note)
                comment_lines(b, "  from:     ", pr->note);
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
        te__sb_printf(b, " *   %-*s %-6s %-7s %-16s strides {%s}, %lld bytes", (int)w, cnames[a],
                      te_tensor_is_placeholder(t) ? "input" : "output",
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
        te__gen_kernel_label(p, i, label, sizeof label);
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

void te__gen_dispatch_body(te__gen_plan *p, te__sb *b, const char *const *callees,
                           const char *suffix, const char *const *args, const char *extra)
{
    for (int i = 0; i < p->n; i++) {
        te__sb_puts(b, "    if (");
        te__gen_dispatch_cond(p, b, i);
        te__sb_printf(b, ")\n        return %s%s(", callees[i], suffix);
        for (int a = 0; a < p->k[i].n_args; a++)
            te__sb_printf(b, "%s%s", a ? ", " : "", args[a]);
        te__sb_printf(b, "%s);\n", extra);
    }
    te__sb_puts(b, "    return -2;\n}\n");
}

/* ---- Pieces of both targets' files ------------------------------------------------------- */

int te__gen_lower(te_ctx *ctx, te__gen_plan *p, int i, te_lowered **f)
{
    const te_gen_kernel *k = &p->k[i];
    *f = te_lower(k->schedule, k->n_args, k->args, p->knames[i], p->target);
    if (!*f)
        return te_ctx_errcode(ctx) != TE_OK ? te_ctx_errcode(ctx) : TE_ERR_LOWER;
    if (i == 0)
        p->n_out = (*f)->n_outputs;
    else if ((*f)->n_outputs != p->n_out)
        return te_ctx_set_error(ctx, TE_ERR_ARG, "te_gen: '%s' writes %d outputs but '%s' %d",
                                p->knames[0], p->n_out, p->knames[i], (*f)->n_outputs);
    return TE_OK;
}

void te__gen_file_names(const te__gen_plan *p, const char *ext, char *src, char *hdr, size_t n)
{
    snprintf(src, n, "%s.%s", p->o->name, ext);
    snprintf(hdr, n, "%s.h", p->o->name);
}

void te__gen_header_begin(te__gen_plan *p, te__sb *h, const char *src_name, const char *hdr_name,
                          const char *kind, bool with_bool, char *guard, size_t guard_size)
{
    te__gen_comment(p, h, hdr_name, kind);
    size_t j = (size_t)snprintf(guard, guard_size, "TESSERA_GEN_");
    for (const char *c = p->entry; *c && j + 3 < guard_size; c++)
        guard[j++] = (*c >= 'a' && *c <= 'z') ? (char)(*c - 32) : *c;
    snprintf(guard + j, guard_size - j, "_H");
    te__sb_printf(h,
                  "#ifndef %s\n#define %s\n\n%s#include <stdint.h>\n\n"
                  "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n",
                  guard, guard, with_bool ? "#include <stdbool.h>\n" : "");
    te__sb_printf(h, "/*\n * ABI of the functions below (%s has their definitions", src_name);
}

const char te__gen_abi_arrays[] =
    " *  - Arrays are dense, row-major (C order) and contiguous: element [i0][i1]...[iN] of an\n"
    " *    array of shape [d0][d1]...[dN] is at element offset (((i0 * d1) + i1) * d2 + ...) + "
    "iN.\n"
    " *    There is no padding between rows; the strides (in elements) are listed with each\n"
    " *    argument. Shapes are fixed: each kernel is specialised to the shapes it documents.\n";

int te__gen_finish(te_ctx *ctx, te__sb *src, te__sb *hdr, const char *src_name,
                   const char *hdr_name, te_gen_output *out)
{
    out->source = te__sb_finish(ctx, src);
    out->header = te__sb_finish(ctx, hdr);
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
        return te__gen_cuda(ctx, &p, out);
    return te__gen_c(ctx, &p, out);
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

static int kernel_begin(te_ctx *ctx, const char *db_path, const char *workload_key,
                        const char *name, int n_args, te_tensor *const *args, int n_out,
                        te_gen_kernel *k);
static void prov_of(te_ctx *ctx, const te_db_trial *r, te_gen_provenance *pr);
static int kernel_from_db(te_ctx *ctx, te_db *db, const char *db_path, const char *workload_key,
                          const char *op, const char *name, int n_args, te_tensor *const *args,
                          int n_out, const te_target *target, int flags, te_gen_kernel *k);

int te_gen_kernel_from_db(te_ctx *ctx, const te_gen_from_db_options *o, te_gen_kernel *k)
{
    if (!ctx)
        return TE_ERR_ARG;
    if (!o)
        return te_ctx_set_error(ctx, TE_ERR_ARG, "te_gen_kernel_from_db: options are NULL");
    if (o->trace && o->trace_record && o->n_out >= 1 && o->n_out <= o->n_args && o->args) {
        /* A given record's schedule (a whole run's); the lookup when it no longer applies. */
        te_schedule *s = te_schedule_create(ctx, o->n_out, o->args + (o->n_args - o->n_out));
        if (s && te_schedule_apply_trace(s, o->trace) == TE_OK) {
            int rc = kernel_begin(ctx, o->db_path, o->workload_key, o->name, o->n_args, o->args,
                                  o->n_out, k);
            if (rc)
                return rc;
            k->schedule = s;
            prov_of(ctx, o->trace_record, &k->prov);
            k->prov.note =
                dupz(ctx, "the model's fastest whole run (te_graph_select_in_context): the "
                          "time above is the whole run's, every kernel together");
            return TE_OK;
        }
        te_ctx_clear_error(ctx); /* the schedule stays in ctx's arena, unused */
    }
    return kernel_from_db(ctx, o->db, o->db_path, o->workload_key, o->op, o->name, o->n_args,
                          o->args, o->n_out, o->target, o->flags, k);
}

/* The parts of *k every path fills: name, arguments (copied into ctx) and the provenance's
 * key, path and unknown figures. */
static int kernel_begin(te_ctx *ctx, const char *db_path, const char *workload_key,
                        const char *name, int n_args, te_tensor *const *args, int n_out,
                        te_gen_kernel *k)
{
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
    return TE_OK;
}

/* The provenance of record r (the schedule is r's trace). */
static void prov_of(te_ctx *ctx, const te_db_trial *r, te_gen_provenance *pr)
{
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
}

static int kernel_from_db(te_ctx *ctx, te_db *db, const char *db_path, const char *workload_key,
                          const char *op, const char *name, int n_args, te_tensor *const *args,
                          int n_out, const te_target *target, int flags, te_gen_kernel *k)
{
    int brc = kernel_begin(ctx, db_path, workload_key, name, n_args, args, n_out, k);
    if (brc)
        return brc;
    te_tensor *const *outs = k->args + (n_args - n_out);
    te_target host;
    if (!target) {
        host = te_target_host();
        target = &host;
    }
    char why[1024];
    te_db_trial_list *l = NULL;
    int found = te_tuner_best_record(ctx, db, workload_key, n_out, outs, target, flags,
                                     &k->schedule, &l, why, sizeof why);
    if (found == TE_OK) {
        prov_of(ctx, &l->items[0], &k->prov);
        te_db_trial_list_free(l);
        return TE_OK;
    }
    if (found == TE_ERR_ARG)
        return te_ctx_set_error(ctx, TE_ERR_ARG, "te_gen_kernel_from_db: bad arguments");
    if (found == TE_ERR_NOT_FOUND && db && db_path) {
        size_t len = strlen(why);
        snprintf(why + len, sizeof why - len, " in %s", db_path);
    }
    char what[512] = "";
    int rc = TE_OK;
    if (target->backend == TE_BACKEND_CUDA) {
        const char *opn = op;
        for (int i = 0; !opn && i < n_out; i++)
            if (te_tensor_tag(outs[i]) && *te_tensor_tag(outs[i]))
                opn = te_tensor_tag(outs[i]);
        rc = te__gen_cuda_default_schedule(ctx, opn, n_out, outs, &k->schedule, what, sizeof what);
    } else {
        /* The untuned default `tessera run` uses: the operator's (or the structure's) template
         * or sketches ranked by the analytic model; the plain loop nest only when none lowers. */
        char note[256] = "";
        rc = te_tune_default_schedule(ctx, op, n_args - n_out, k->args, n_out, outs, target,
                                      &k->schedule, note, sizeof note);
        if (rc == TE_OK) {
            snprintf(what, sizeof what, "the untuned default schedule (%s)",
                     strncmp(note, "default: ", 9) ? note : note + 9);
        } else {
            te_ctx_clear_error(ctx);
            rc = TE_OK;
            k->schedule = te_schedule_create(ctx, n_out, outs);
            if (!k->schedule)
                rc = te_ctx_errcode(ctx) != TE_OK ? te_ctx_errcode(ctx) : TE_ERR_SCHEDULE;
            snprintf(what, sizeof what, "the default schedule (the plain loop nest, untuned)");
        }
    }
    if (rc != TE_OK)
        return rc;
    k->prov.note = te__sprintf(ctx, "%s: %s", why, what);
    k->prov.reason = te__strdup(ctx, why);
    k->prov.fallback = te__strdup(ctx, what);
    return k->prov.note && k->prov.reason && k->prov.fallback
               ? TE_OK
               : te_ctx_set_error(ctx, TE_ERR_NOMEM, "te_gen: out of memory");
}

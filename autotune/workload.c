/*
 * autotune/workload.c: what the tuner needs to know about a workload and a target, apart from
 * searching: the structural hash and key of a user-defined expression, its floating-point
 * operation count, its longest reduction (for the tolerance of the output check), the
 * database identity of a target, and the parsing of strategy names and durations.
 */
#define _GNU_SOURCE

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autotune/tune_impl.h"
#include "backends/c/cc.h"
#include "te/internal.h"
#include "tessera/cuda.h"
#include "tessera/ops.h"

/* ---- Small helpers -------------------------------------------------------------------------- */

const char *te_tune_strategy_str(te_tune_strategy s)
{
    switch (s) {
    case TE_TUNE_RANDOM:
        return "random";
    case TE_TUNE_GRID:
        return "grid";
    case TE_TUNE_EVOLUTIONARY:
        return "evolutionary";
    }
    return "?";
}

int te_tune_strategy_parse(const char *text, te_tune_strategy *out)
{
    if (!text || !out)
        return TE_ERR_ARG;
    for (int s = TE_TUNE_RANDOM; s <= TE_TUNE_EVOLUTIONARY; s++)
        if (!strcmp(text, te_tune_strategy_str((te_tune_strategy)s))) {
            *out = (te_tune_strategy)s;
            return TE_OK;
        }
    return TE_ERR_ARG;
}

te_tune_options te_tune_options_default(void)
{
    te_tune_options o;
    memset(&o, 0, sizeof o);
    o.strategy = TE_TUNE_EVOLUTIONARY;
    o.space = TE_SPACE_AUTO;
    o.seed = 1;
    o.batch_size = 16;
    o.warm_start = 1;
    return o;
}

double te_tune_parse_duration(const char *text)
{
    if (!text || !*text)
        return -1;
    errno = 0;
    char *end;
    double v = strtod(text, &end);
    if (end == text || errno || !(v >= 0) || !isfinite(v))
        return -1;
    double unit = 1;
    if (*end == 's')
        end++;
    else if (*end == 'm')
        unit = 60, end++;
    else if (*end == 'h')
        unit = 3600, end++;
    else if (*end == 'd')
        unit = 86400, end++;
    if (*end)
        return -1;
    return v * unit;
}

/* ---- Expression utilities ------------------------------------------------------------------- */

/* Whether an operation on dtype counts: floating point always, integers (not booleans) when
 * ints is set. */
static int num(te_dtype dt, int ints)
{
    return te_dtype_is_float(dt) || (ints && te_dtype_is_int(dt) && dt != TE_BOOL);
}

/* Arithmetic operations of e per evaluation: those on floating-point values and, inside an
 * integer reduction (ints = 1: an int8 matmul's or convolution's multiply-adds), those on
 * integers too; index arithmetic is never counted (reads are leaves). */
static double expr_flops(const te_expr *e, int ints)
{
    if (!e)
        return 0;
    double f = 0, fl = num(e->dtype, ints);
    switch (e->kind) {
    case TE_E_BINARY:
        f = expr_flops(e->u.bin.a, ints) + expr_flops(e->u.bin.b, ints);
        if (e->u.bin.op <= TE_MAX)
            f += fl;
        else if (e->u.bin.op <= TE_GE)
            f += num(e->u.bin.a->dtype, ints);
        return f;
    case TE_E_NEG:
        return expr_flops(e->u.un.a, ints) + fl;
    case TE_E_NOT:
    case TE_E_CAST:
    case TE_E_BCAST:
        return expr_flops(e->u.un.a, ints);
    case TE_E_SELECT:
    case TE_E_IF:
        return expr_flops(e->u.sel.c, ints) +
               fmax(expr_flops(e->u.sel.t, ints), expr_flops(e->u.sel.f, ints));
    case TE_E_CALL:
        for (int i = 0; i < e->u.call.n; i++)
            f += expr_flops(e->u.call.args[i], ints);
        return f + fl;
    case TE_E_REDUCE: {
        int in = ints || num(e->dtype, 1);
        fl = num(e->dtype, in);
        double ext = 1;
        for (int i = 0; i < e->u.red.n; i++)
            ext *= (double)e->u.red.axes[i]->u.var.extent;
        double comb = 1;
        double src = 0;
        if (e->u.red.rkind == TE_RCUSTOM && e->u.red.custom) {
            const te_reducer *r = e->u.red.custom;
            comb = 0;
            for (int c = 0; c < (r->tuple ? r->n : 1); c++)
                comb += expr_flops(r->tuple ? r->combines[c] : r->combine, in);
        }
        if (e->u.red.nsrc > 0)
            for (int c = 0; c < e->u.red.nsrc; c++)
                src += expr_flops(e->u.red.srcs[c], in);
        else
            src = expr_flops(e->u.red.src, in);
        return ext * (src + (fl ? comb : 0));
    }
    default:
        return 0; /* constants, variables, reads (indices are integer arithmetic) */
    }
}

double te_tuner_flops(int n_out, te_tensor *const *outs)
{
    te_tensor *st[256];
    int n = te__collect_stages(n_out, outs, st, 256);
    double f = 0;
    for (int i = 0; i < n; i++)
        f += (double)te_tensor_numel(st[i]) * expr_flops(st[i]->body, 0);
    return f;
}

int64_t te__max_reduction(int n_out, te_tensor *const *outs)
{
    te_tensor *st[256];
    int n = te__collect_stages(n_out, outs, st, 256);
    int64_t best = 1;
    for (int i = 0; i < n; i++) {
        const te_expr *b = st[i]->body;
        if (b && b->kind == TE_E_REDUCE) {
            int64_t r = 1;
            for (int k = 0; k < b->u.red.n; k++)
                r *= b->u.red.axes[k]->u.var.extent;
            if (r > best)
                best = r;
        }
    }
    return best;
}

uint64_t te_tuner_expr_hash(int n_out, te_tensor *const *outs)
{
    return te__expr_hash(n_out, outs); /* te/expr_hash.c: te_op_workload_key uses it too */
}

/* Placeholder signatures are part of the key; the hash covers computed stages, and the reads
 * name the placeholders, whose shapes are in the key itself. */
int te_tuner_expr_key(const char *name, int n_in, te_tensor *const *ins, int n_out,
                      te_tensor *const *outs, char *buf, size_t size)
{
    if (!name || !*name || n_out < 1 || !outs || (n_in && !ins))
        return TE_ERR_ARG;
    char shapes[1024];
    size_t len = 0;
    shapes[0] = 0;
    for (int i = 0; i < n_in; i++) {
        const te_tensor *t = ins[i];
        len += (size_t)snprintf(shapes + len, len < sizeof shapes ? sizeof shapes - len : 0,
                                "%s%s=", i ? "," : "", t->name);
        for (int d = 0; d < t->ndim && len < sizeof shapes; d++)
            len += (size_t)snprintf(shapes + len, sizeof shapes - len, "%s%lld", d ? "x" : "",
                                    (long long)t->shape[d]);
    }
    if (len >= sizeof shapes)
        return TE_ERR_OVERFLOW;
    uint64_t h = te_tuner_expr_hash(n_out, outs);
    for (int i = 0; i < n_in; i++)
        h = te__tensor_sig_hash(h, ins[i]);
    return snprintf(buf, size, "%s;%s;%s;expr=%016llx", name, shapes,
                    te_dtype_str(te_tensor_dtype(outs[0])), (unsigned long long)h);
}

/* ---- Targets ----------------------------------------------------------------------------- */

static void compiler_name(const char *cc, char *out, size_t n)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "%s --version 2>/dev/null", cc);
    snprintf(out, n, "%s", cc);
    FILE *p = popen(cmd, "r");
    if (!p)
        return;
    char line[256] = "";
    int found = 0;
    while (fgets(line, sizeof line, p)) {
        if (found)
            continue;
        if (strstr(line, "clang"))
            snprintf(out, n, "clang"), found = 1;
        else if (strstr(line, "gcc") || strstr(line, "GCC") || strstr(line, "Free Software"))
            snprintf(out, n, "gcc"), found = 1;
    }
    pclose(p);
}

int te_tuner_db_target(const te_target *target, te_db_target *out, char *storage, size_t size)
{
    if (!target || !out || !storage || size < 512)
        return TE_ERR_ARG;
    memset(out, 0, sizeof *out);
    char key[512];
    te_target_key(target, key, sizeof key);
    /* te_target_key: "c;arch;model;isa;Nc;version" (CPU) or "cuda;sm_XX;name". */
    char *f[8] = {0};
    int nf = 0;
    for (char *p = key; nf < 8;) {
        f[nf++] = p;
        char *q = strchr(p, ';');
        if (!q)
            break;
        *q = 0;
        p = q + 1;
    }
    size_t used = 0;
#define KEEP(dst, src)                                                                             \
    do {                                                                                           \
        int k_ = snprintf(storage + used, size - used, "%s", (const char *)(src));                 \
        (dst) = storage + used;                                                                    \
        used += (size_t)k_ + 1;                                                                    \
        if (used > size)                                                                           \
            return TE_ERR_OVERFLOW;                                                                \
    } while (0)
    if (target->backend == TE_BACKEND_CUDA) {
        KEEP(out->backend, "cuda");
        KEEP(out->arch, nf > 1 && f[1] ? f[1] : "");
        KEEP(out->device, target->cpu_model);
        KEEP(out->features, "");
        out->sm = target->sm;
        char nv[32] = "nvrtc", drv[32] = "";
        int v = te_nvrtc_version();
        if (v > 0)
            snprintf(nv, sizeof nv, "nvrtc %d.%d", v / 1000, (v % 1000) / 10);
        if (target->cuda_driver > 0) {
            out->cores = target->num_cores;
            snprintf(drv, sizeof drv, "%d.%d", target->cuda_driver / 1000,
                     (target->cuda_driver % 1000) / 10);
        }
        KEEP(out->compiler, nv);
        KEEP(out->driver, drv);
        return TE_OK;
    }
    char cname[64], comp[160];
    const char *cc = target->cc && *target->cc ? target->cc : getenv("CC");
    compiler_name(cc && *cc ? cc : "cc", cname, sizeof cname);
    snprintf(comp, sizeof comp, "%s %s", cname, nf >= 6 && f[5] ? f[5] : "unknown");
    KEEP(out->backend, "c");
    KEEP(out->arch, nf > 1 && f[1] ? f[1] : "unknown");
    KEEP(out->device, target->cpu_model);
    KEEP(out->features, target->isa);
    out->cores = target->num_cores;
    KEEP(out->compiler, comp);
    KEEP(out->driver, "");
#undef KEEP
    return TE_OK;
}

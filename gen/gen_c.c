/*
 * gen/gen_c.c: standalone C files (tessera/gen.h, C target).
 *
 * Every kernel of a request is lowered, and the C backend emits all of them into one
 * translation unit with one prelude (its table's emit_standalone: no packed entries); the
 * dispatcher follows when asked. The
 * header documents the ABI: layout, alignment, threads, return codes, and each kernel.
 */
#define _GNU_SOURCE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend_impl.h"
#include "backends/c/c_backend.h"
#include "gen/gen_impl.h"
#include "tessera/ops.h"

/* ---- Prototypes ------------------------------------------------------------------------- */

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

/* ---- Weights packed once (te_op_packed_view) -------------------------------------------- */

/* A kernel input that is the panels of a weight read through te_op_packed_view. */
typedef struct {
    const char *weight; /* the view: the weight's name and logical shape */
    int64_t k, n, nb;
    bool trans; /* the weight is [n, k] */
} packed_arg;

/* Whether input P of kernel k is read only through a packed_view stage; fills *pa. */
static bool packed_input(const te__gen_plan *p, const te_gen_kernel *k, const te_tensor *P,
                         packed_arg *pa)
{
    if (P->kind != TE_T_PLACEHOLDER || P->ndim != 3)
        return false;
    for (int o = k->n_args - p->n_out; o < k->n_args; o++) {
        te_tensor *st[256];
        int ns = te_op_stages(k->args[o], st, 256);
        for (int q = 0; q < ns && q < 256; q++) {
            const te_tensor *V = st[q];
            if (!V->tag || strcmp(V->tag, "packed_view") || V->ndim != 2 ||
                V->body->kind != TE_E_READ || V->body->u.read.t != P || V->body->u.read.n != 3)
                continue;
            const te_expr *jb = V->body->u.read.idx[0];
            if (jb->kind != TE_E_BINARY || jb->u.bin.op != TE_FLOORDIV)
                return false;
            pa->weight = V->name;
            pa->trans = jb->u.bin.a == V->axes[0];
            pa->nb = P->shape[2];
            pa->k = P->shape[1];
            pa->n = P->shape[0] * P->shape[2];
            return true;
        }
    }
    return false;
}

/* The packing function of input a of kernel i: "<kernel>_pack_<weight>". */
static void pack_name(char *buf, size_t n, const te__c_kernel_info *info, const packed_arg *pa)
{
    char w[128];
    te__c_ident(pa->weight, w, sizeof w);
    snprintf(buf, n, "%s_pack_%s", info->ident, w);
}

static void pack_prototype(te__sb *b, const char *fn, const char *ctype, const char *w,
                           const char *panels, bool restrict_)
{
    te__sb_printf(b, "void %s(const %s *%s%s, %s *%s%s)", fn, ctype, restrict_ ? "restrict " : "",
                  w, ctype, restrict_ ? "restrict " : "", panels);
}

/* Appends the packing functions of kernel i to the source (src) or their documentation and
 * prototypes to the header (hdr). */
static void pack_functions(const te__gen_plan *p, int i, const te__c_kernel_info *info, te__sb *src,
                           te__sb *hdr)
{
    const te_gen_kernel *k = &p->k[i];
    for (int a = 0; a < k->n_args - p->n_out; a++) {
        packed_arg pa;
        if (!packed_input(p, k, k->args[a], &pa))
            continue;
        char fn[320], w[128];
        pack_name(fn, sizeof fn, info, &pa);
        te__c_ident(pa.weight, w, sizeof w);
        const char *ct = te_dtype_ctype(te_tensor_dtype(k->args[a])), *pn = info->params[a];
        long long K = (long long)pa.k, N = (long long)pa.n, NB = (long long)pa.nb;
        if (hdr) {
            te__sb_printf(hdr,
                          "/*\n * %s: packs the weight %s, %s [%lld][%lld] (row-major), into "
                          "the column\n * panels of nb = %lld columns that %s() reads as %s "
                          "[%lld][%lld][%lld]:\n"
                          " *     %s[jb][kk][j] = %s%s\n"
                          " * Call it once per weight (when the weights are loaded); the kernel "
                          "then reads\n * the panels in every call. The arrays must not "
                          "overlap.\n */\n",
                          fn, w, ct, pa.trans ? N : K, pa.trans ? K : N, NB, info->ident, pn,
                          N / NB, K, NB, pn, w,
                          pa.trans ? "[jb * nb + j][kk]" : "[kk][jb * nb + j]");
            pack_prototype(hdr, fn, ct, w, pn, false);
            te__sb_puts(hdr, ";\n\n");
            continue;
        }
        te__sb_printf(src, "\n/* Packs %s into the panels %s() reads (see the header). */\n", w,
                      info->ident);
        pack_prototype(src, fn, ct, w, pn, true);
        te__sb_printf(src,
                      "\n{\n"
                      "    for (long jb = 0; jb < %lldL; ++jb)\n"
                      "        for (long kk = 0; kk < %lldL; ++kk)\n"
                      "            for (long j = 0; j < %lldL; ++j)\n"
                      "                %s[(jb * %lldL + kk) * %lldL + j] = %s[",
                      N / NB, K, NB, pn, K, NB, w);
        if (pa.trans)
            te__sb_printf(src, "(jb * %lldL + j) * %lldL + kk];\n}\n", NB, K);
        else
            te__sb_printf(src, "kk * %lldL + jb * %lldL + j];\n}\n", N, NB);
    }
}

int te__gen_c(te_ctx *ctx, te__gen_plan *p, te_gen_output *out)
{
    int n = p->n;
    te_lowered **fs = te__alloc(ctx, sizeof(te_lowered *) * (size_t)n);
    te__c_kernel_info *info = te__alloc(ctx, sizeof *info * (size_t)n);
    te__emitted_fn *efs = te__alloc(ctx, sizeof *efs * (size_t)n);
    if (!fs || !info || !efs)
        return te_ctx_set_error(ctx, TE_ERR_NOMEM, "te_gen: out of memory");
    for (int i = 0; i < n; i++) {
        int lrc = te__gen_lower(ctx, p, i, &fs[i]);
        if (lrc != TE_OK)
            return lrc;
    }
    char src_name[256], hdr_name[256];
    te__gen_file_names(p, "c", src_name, hdr_name, sizeof src_name);

    te__sb comment = {0};
    te__gen_comment(p, &comment, src_name, "C");
    const char *const **names = te__alloc(ctx, sizeof *names * (size_t)n);
    if (!names) {
        free(comment.p);
        return te_ctx_set_error(ctx, TE_ERR_NOMEM, "te_gen: out of memory");
    }
    for (int i = 0; i < n; i++)
        names[i] = p->k[i].arg_names;
    const te__backend *be = te__backend_get(TE_BACKEND_C);
    te__emit_opts eo = {.comment = comment.p, .arg_names = names};
    const char *units = NULL;
    int erc = comment.oom ? te_ctx_set_error(ctx, TE_ERR_NOMEM, "te_gen: out of memory")
                          : be->emit_standalone(ctx, n, (const te_lowered *const *)fs, p->target,
                                                &eo, &units, efs);
    free(comment.p);
    if (erc != TE_OK)
        return erc;
    for (int i = 0; i < n; i++)
        info[i] = *efs[i].c;

    bool dispatch = p->o->n_params > 0;
    bool any_omp = false, any_fail = false, any_nt = false;
    for (int i = 0; i < n; i++) {
        any_omp |= info[i].uses_omp;
        any_fail |= info[i].may_fail;
        any_nt |= info[i].n_nt > 0;
    }

    /* ---- the source: the unit, the packing functions, then the dispatcher */
    te__sb src = {0};
    te__sb_puts(&src, units);
    for (int i = 0; i < n; i++)
        pack_functions(p, i, &info[i], &src, NULL);
    if (dispatch) {
        te__sb_printf(&src, "\n/* Calls the kernel generated for these parameter values; -2 when "
                            "there is none. */\n");
        c_prototype(&src, &p->k[0], p->entry, &info[0], p, true, true);
        te__sb_puts(&src, "\n{\n");
        const char **callees = te__alloc(ctx, sizeof(char *) * (size_t)n);
        if (!callees) {
            te__sb_free(&src);
            return te_ctx_set_error(ctx, TE_ERR_NOMEM, "te_gen: out of memory");
        }
        for (int i = 0; i < n; i++)
            callees[i] = info[i].ident;
        te__gen_dispatch_body(p, &src, callees, "", info[0].params, "");
    }

    /* ---- the header */
    bool any_bool = false;
    for (int i = 0; i < n; i++)
        for (int a = 0; a < p->k[i].n_args; a++)
            any_bool |= te_tensor_dtype(p->k[i].args[a]) == TE_BOOL;
    char guard[256];
    te__sb h = {0};
    te__gen_header_begin(p, &h, src_name, hdr_name, "C", any_bool, guard, sizeof guard);
    te__sb_printf(
        &h,
        "):\n"
        " *\n"
        "%s"
        " *  - Inputs (const) are only read. Outputs are written entirely; what they held before\n"
        " *    is ignored. Arrays must not overlap (the definitions use restrict).\n"
        " *  - Alignment: nothing beyond the element type's alignment is required.%s\n"
        " *  - Threads: %s\n"
        " *    Calls are reentrant and thread-safe. The only global state is the scratch\n"
        " *    of buffers a kernel needs for a whole call (te_scratch): kept for the next\n"
        " *    call (taken and given back with atomic exchanges, so concurrent calls each\n"
        " *    get their own), freed when the program ends or the code is unloaded.\n"
        " *  - Return value: 0 on success%s%s.\n"
        " *  - Compiler: GCC or Clang (the vector code uses their vector extensions), any C\n"
        " *    standard from C99 on; `-std=c99 -Wall -Wextra -Werror -pedantic` is clean. The\n"
        " *    speed above was measured with `-O3 -march=native -std=gnu11 -fopenmp` on the\n"
        " *    target above. In ISO modes (-std=c99, -std=c11) GCC does not fuse multiplies and\n"
        " *    adds: add -ffp-contract=fast (or use -std=gnu99) to get that speed. Without ISA\n"
        " *    flags (-march) it still builds and runs, slower (GCC may print notes about the\n"
        " *    vector ABI, -Wpsabi: harmless).\n"
        " */\n\n",
        te__gen_abi_arrays,
        any_nt
            ? "\n *    Outputs marked \"streaming\" use non-temporal stores when they are 64-byte\n"
              " *    aligned (checked at every call; ordinary stores otherwise)."
            : "",
        any_omp
            ? "compiled with OpenMP (-fopenmp), the parallel loops run on an OpenMP\n"
              " *    team of OMP_NUM_THREADS threads (omp_set_num_threads works too); compiled\n"
              " *    without it, everything runs on the calling thread (the OpenMP pragmas are\n"
              " *    behind the TE_OMP macro and vanish)."
            : "none: the kernels run on the calling thread (no parallel loops).",
        any_fail ? ", -1 when a scratch allocation (malloc) failed" : "",
        dispatch ? "; the dispatcher returns -2 for parameter values it has no kernel for" : "");
    for (int i = 0; i < n; i++) {
        const te_gen_kernel *k = &p->k[i];
        char label[256];
        te__gen_kernel_label(p, i, label, sizeof label);
        te__sb_printf(&h, "/*\n * %s%s%s%s\n *\n", info[i].ident, *label ? " (" : "", label,
                      *label ? ")" : "");
        te__gen_describe_kernel(p, &h, i, info[i].params);
        for (int j = 0; j < info[i].n_nt; j++)
            te__sb_printf(&h, " *   %s: streaming stores when 64-byte aligned\n",
                          info[i].nt_params[j]);
        if (info[i].features && *info[i].features)
            te__sb_printf(&h, " *   needs a CPU with %s (tensor intrinsics)\n", info[i].features);
        te__sb_printf(&h, " *\n * Returns 0%s%s.%s\n */\n",
                      info[i].may_fail ? ", or -1 when a scratch allocation failed" : "",
                      info[i].uses_amx ? ", or -4 when the operating system refuses AMX (Linux "
                                         "arch_prctl ARCH_REQ_XCOMP_PERM)"
                                       : "",
                      info[i].uses_omp ? " Parallel (OpenMP) when compiled with -fopenmp." : "");
        c_prototype(&h, k, info[i].ident, &info[i], p, false, false);
        te__sb_puts(&h, ";\n\n");
        pack_functions(p, i, &info[i], NULL, &h);
    }
    if (dispatch) {
        te__sb_printf(&h,
                      "/*\n * %s: calls the kernel generated for the given parameter "
                      "values:\n *\n",
                      p->entry);
        te__gen_describe_dispatch(p, &h, "()");
        te__sb_puts(&h, " *\n * The arrays are those of the kernel called (same order, dtypes "
                        "and layout; their\n * shapes follow from the parameters). Returns "
                        "what it returns, or -2 when no kernel\n * was generated for the "
                        "values.\n */\n");
        c_prototype(&h, &p->k[0], p->entry, &info[0], p, true, false);
        te__sb_puts(&h, ";\n\n");
    }
    te__sb_printf(&h, "#ifdef __cplusplus\n}\n#endif\n\n#endif /* %s */\n", guard);

    return te__gen_finish(ctx, &src, &h, src_name, hdr_name, out);
}

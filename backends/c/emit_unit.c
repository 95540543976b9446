/*
 * backends/c/emit_unit.c: C files: each kernel's body, signature (`int <name>(const float
 * *restrict A, ..., float *restrict C)`, returning 0, or -1 when a heap allocation failed) and
 * packed entry `int <name>_packed(void **args)`; a file of several kernels with one provenance
 * comment and one prelude, the union of what they use (te__emit_c_unit, te_emit_c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/c/emit_impl.h"

/* The prelude the kernels of a unit need: the union of what their emitters recorded. */
static void merge_needs(emitter *u, const emitter *em)
{
    for (int d = 0; d < TE_DTYPE_COUNT; d++) {
        u->vtypes[d] |= em->vtypes[d];
        u->vtypes_u[d] |= em->vtypes_u[d];
        for (int h = 0; h < H_COUNT; h++)
            u->helpers[h][d] |= em->helpers[h][d];
        for (int f = 0; f < TE_DTYPE_COUNT; f++)
            u->casts[d][f] |= em->casts[d][f];
    }
    u->need_half |= em->need_half;
    u->need_immintrin |= em->need_immintrin;
    u->uses_omp |= em->uses_omp;
    u->uses_unroll |= em->uses_unroll;
    u->uses_heap |= em->uses_heap;
    u->nscratch = em->nscratch;
    for (int i = 0; i < em->n_intrins; i++)
        if (te__intrin_record(u->intrins, &u->n_intrins,
                              (int)(sizeof u->intrins / sizeof u->intrins[0]), em->intrins[i]))
            te__c_fail(u, TE_ERR_UNSUPPORTED, "more than %d tensor intrinsics in one file",
                       u->n_intrins);
}

/* Emits one lowered function (its body, signature and, unless `packed` is false, its packed
 * entry) into *k; the prelude it needs stays recorded in em. `avoid` names (other kernels of
 * the unit) are never used for the function's own variables. Fills *info when given. */
static void emit_function(emitter *em, te__sb *k, bool packed, int n_avoid,
                          const char *const *avoid, const char *const *arg_names,
                          te__c_kernel_info *info)
{
    te_ctx *ctx = em->ctx;
    const te_lowered *f = em->f;
    char kname[160];
    te__c_kernel_ident(f->name, kname, sizeof kname - 8);
    te__c_take_name(em, kname);
    te__c_take_name(em, te__sprintf(ctx, "%s_packed", kname));
    for (int i = 0; i < n_avoid; i++)
        if (avoid[i] && !te__c_name_used(em, avoid[i]))
            te__c_take_name(em, avoid[i]);
    for (int i = 0; i < f->n_args; i++) {
        if (!f->args[i]) {
            te__c_fail(em, TE_ERR_ARG, "argument %d is NULL", i);
            break;
        }
        if (arg_names && arg_names[i] && *arg_names[i])
            te__c_lookup_name(em, 1, f->args[i]->id, f->args[i], arg_names[i]);
        else
            te__c_buf_name(em, f->args[i]);
    }

    /* the kernel body: it decides which types and helpers the prelude needs */
    te__c_block_open(em);
    te__c_gen_stmt(em, em->err ? NULL : f->body);
    te__c_block_close(em);
    if (em->nt_stores)
        te__c_use_helper(em, H_SFENCE, TE_F32, 1);

    /* kernel signature */
    te__sb sig = {0};
    te__sb_printf(&sig, "int %s(", kname);
    int n_in = f->n_args - f->n_outputs;
    for (int i = 0; i < f->n_args && !em->err; i++) {
        const te_buf *b = f->args[i];
        te__sb_printf(&sig, "%s%s%s *restrict %s", i ? ", " : "", i < n_in ? "const " : "",
                      te__c_ctype(b->dtype), te__c_buf_name(em, b));
    }
    te__sb_puts(&sig, ")");
    if (sig.p && strlen(sig.p) > 100) { /* one parameter per line */
        free(sig.p);
        sig = (te__sb){0};
        te__sb_printf(&sig, "int %s(", kname);
        for (int i = 0; i < f->n_args; i++) {
            const te_buf *b = f->args[i];
            te__sb_printf(&sig, "%s%s%s *restrict %s", i ? ",\n        " : "",
                          i < n_in ? "const " : "", te__c_ctype(b->dtype), te__c_buf_name(em, b));
        }
        te__sb_puts(&sig, ")");
    }
    te__sb_printf(k, "%s\n{\n", sig.p ? sig.p : "");
    if (sig.oom)
        k->oom = true;
    free(sig.p);
    for (int i = 0; i < em->n_nt; i++)
        te__sb_printf(k,
                      "    const int %s = ((uintptr_t)%s & 63) == 0; /* streaming stores need "
                      "64-byte alignment */\n",
                      em->nt_flag[i], te__c_buf_name(em, em->nt_bufs[i]));
    if (te__c_unit_uses_amx(em))
        te__sb_puts(k, "    if (te_amx_permit()) /* the OS refused AMX (arch_prctl) */\n"
                       "        return -4;\n");
    if (em->uses_oom)
        te__sb_puts(
            k, "    int te_oom = 0; /* set when an allocation inside a parallel loop fails */\n");
    if (em->n_nt || em->uses_oom)
        te__sb_puts(k, "\n");
    te__sb_puts(k, em->out.p ? em->out.p : "");
    if (em->nt_stores)
        te__sb_printf(k, "    %s();\n", te__c_helper_name(em, H_SFENCE, TE_F32, 1));
    te__sb_puts(k, em->uses_oom ? "    return te_oom ? -1 : 0;\n}\n" : "    return 0;\n}\n");

    /* packed entry */
    if (packed) {
        te__sb_printf(k, "\nint %s_packed(void **args)\n{\n    return %s(", kname, kname);
        for (int i = 0; i < f->n_args; i++)
            te__sb_printf(k, "%sargs[%d]", i ? ", " : "", i);
        te__sb_puts(k, ");\n}\n");
    }
    if (em->out.oom)
        k->oom = true;

    if (info && !em->err) {
        memset(info, 0, sizeof *info);
        info->ident = te__strdup(ctx, kname);
        info->n_params = f->n_args;
        info->params = te__alloc(ctx, sizeof(char *) * (size_t)(f->n_args ? f->n_args : 1));
        info->nt_params = te__alloc(ctx, sizeof(char *) * (size_t)(em->n_nt ? em->n_nt : 1));
        if (!info->ident || !info->params || !info->nt_params) {
            te__c_fail(em, TE_ERR_NOMEM, "out of memory");
            return;
        }
        for (int i = 0; i < f->n_args; i++)
            info->params[i] = te__c_buf_name(em, f->args[i]);
        for (int i = 0; i < em->n_nt; i++)
            info->nt_params[i] = te__c_buf_name(em, em->nt_bufs[i]);
        info->n_nt = em->n_nt;
        info->may_fail = em->uses_heap || em->uses_oom;
        info->uses_omp = em->uses_omp;
        info->uses_amx = te__c_unit_uses_amx(em);
        te__sb fe = {0};
        for (int q = 0; q < em->n_intrins; q++) {
            const char *need = te__c_intrin_features(em->intrins[q]);
            if (*need && !(fe.p && strstr(fe.p, need)))
                te__sb_printf(&fe, "%s%s", fe.p ? "," : "", need);
        }
        info->features = te__strdup(ctx, fe.p ? fe.p : "");
        free(fe.p);
    }
}

static bool lowered_ok(const te_lowered *f)
{
    return f && f->body && f->name && f->n_args >= 0 && (!f->n_args || f->args) &&
           f->n_outputs >= 0 && f->n_outputs <= f->n_args;
}

const char *te__emit_c_unit(te_ctx *ctx, int n, const te_lowered *const *fs,
                            const te_target *target, const te__c_unit_opts *opts,
                            te__c_kernel_info *info)
{
    if (!ctx)
        return NULL;
    if (n < 1 || !fs) {
        te_ctx_set_error(ctx, TE_ERR_ARG, "te_emit_c: no lowered function");
        return NULL;
    }
    for (int i = 0; i < n; i++)
        if (!lowered_ok(fs[i])) {
            te_ctx_set_error(ctx, TE_ERR_ARG, "te_emit_c: incomplete lowered function");
            return NULL;
        }
    bool packed = !opts || !opts->no_packed;
    emitter *u = calloc(1, sizeof *u);
    te__sb *kt = calloc((size_t)n, sizeof *kt);
    const char **idents = calloc((size_t)n, sizeof *idents);
    if (!u || !kt || !idents) {
        free(u);
        free(kt);
        free(idents);
        te_ctx_set_error(ctx, TE_ERR_NOMEM, "te_emit_c: out of memory");
        return NULL;
    }
    u->ctx = ctx;
    u->f = fs[0];
    u->target = target;
    char kname[160];
    for (int i = 0; i < n; i++)
        idents[i] = te__strdup(ctx, te__c_kernel_ident(fs[i]->name, kname, sizeof kname - 8));
    for (int i = 0; i < n && !u->err; i++)
        for (int j = 0; j < i; j++)
            if (idents[i] && idents[j] && !strcmp(idents[i], idents[j]))
                te__c_fail(u, TE_ERR_ARG, "two kernels of one file are both named '%s'", idents[i]);

    for (int i = 0; i < n && !u->err; i++) {
        emitter *em = calloc(1, sizeof *em);
        if (!em) {
            te__c_fail(u, TE_ERR_NOMEM, "out of memory");
            break;
        }
        em->ctx = ctx;
        em->f = fs[i];
        em->target = target;
        em->nscratch = u->nscratch; /* the file's scratch sites are numbered across kernels */
        emit_function(em, &kt[i], packed, n, idents,
                      opts && opts->arg_names ? opts->arg_names[i] : NULL, info ? &info[i] : NULL);
        merge_needs(u, em);
        if (em->err)
            u->err = em->err;
        else if (kt[i].oom)
            te__c_fail(u, TE_ERR_NOMEM, "out of memory");
        free(em->out.p);
        free(em);
    }

    te__sb o = {0};
    if (opts && opts->comment) {
        te__sb_puts(&o, opts->comment);
    } else {
        const char **headers = te__alloc(ctx, sizeof(char *) * (size_t)n);
        if (!headers)
            te__c_fail(u, TE_ERR_NOMEM, "out of memory");
        for (int i = 0; headers && i < n; i++)
            headers[i] = fs[i]->header;
        te__emit_provenance(&o, idents[0], "C", headers ? n : 0, headers, target);
    }
    te__c_emit_prelude(u, &o, opts && opts->standalone);
    te__c_emit_intrins(u, &o);
    for (int i = 0; i < n; i++) {
        if (i)
            te__sb_puts(&o, "\n");
        te__sb_puts(&o, kt[i].p ? kt[i].p : "");
    }

    const char *result = NULL;
    if (o.oom)
        te__c_fail(u, TE_ERR_NOMEM, "out of memory");
    if (!u->err)
        result = te__strdup(ctx, o.p ? o.p : "");
    free(o.p);
    for (int i = 0; i < n; i++)
        free(kt[i].p);
    free(kt);
    free(idents);
    free(u);
    return result;
}

const char *te_emit_c(te_ctx *ctx, const te_lowered *f, const te_target *target)
{
    if (!ctx)
        return NULL;
    if (!lowered_ok(f)) {
        te_ctx_set_error(ctx, TE_ERR_ARG, "te_emit_c: incomplete lowered function");
        return NULL;
    }
    return te__emit_c_unit(ctx, 1, &f, target, NULL, NULL);
}

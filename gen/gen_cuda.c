/*
 * gen/gen_cuda.c: standalone CUDA files (tessera/gen.h, CUDA target).
 *
 * The .cu file has the provenance comment, the CUDA prelude once, the __global__ kernels of
 * every lowered function, and then, outside NVRTC (`#ifndef __CUDACC_RTC__`), host launchers on
 * the CUDA runtime API: `<kernel>_launch(device pointers..., stream)` and `<kernel>_host(host
 * pointers...)` (allocates, copies in, launches, copies out), plus the dispatchers. The header
 * declares the launchers for C and C++ (a stream is a `void *`, a cudaStream_t) and, under
 * __CUDACC__, the kernels themselves, and documents every launch configuration.
 */
#define _GNU_SOURCE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend_impl.h"
#include "backends/cuda/cuda_impl.h"
#include "gen/gen_impl.h"
#include "tessera/autotune.h"
#include "tessera/cuda.h"
#include "tessera/ops.h"

/* ---- Default schedules -------------------------------------------------------------------- */

int te__gen_cuda_default_schedule(te_ctx *ctx, const char *op, int n_out, te_tensor *const *outs,
                                  te_schedule **out, char *what, size_t what_size)
{
    *out = NULL;
    te_tensor *Y = outs[n_out - 1];
    if (op && !strcmp(op, "attention") && n_out == 1) {
        /* Attention has its GPU configuration in the autotune template (thread per query row,
         * shared tiles of K and V per key block); its first configuration is the default. */
        te_target t = te_target_cuda(80);
        te_space *sp = te_space_create(ctx, "attention", 0, NULL, 1, outs, TE_SPACE_TEMPLATE, &t);
        const char *tr = sp ? te_space_get(sp, 0) : NULL;
        te_schedule *s = tr ? te_space_instantiate(sp, tr) : NULL;
        if (!s)
            return te_ctx_errcode(ctx) != TE_OK ? te_ctx_errcode(ctx) : TE_ERR_SCHEDULE;
        *out = s;
        snprintf(what, what_size,
                 "the attention template's default GPU configuration (a thread per query row, "
                 "shared tiles of K and V; untuned)");
        return TE_OK;
    }
    /* the operator's GPU template (backends/cuda/templates.c), else the elementwise one */
    int want = 0;
    const char *tpl = te_cuda_template_for(op, &want);
    if (!tpl || want != n_out)
        tpl = "elementwise";
    for (int attempt = 0; attempt < 2; attempt++) {
        te_schedule *s = te_schedule_create(ctx, n_out, outs);
        if (!s)
            return te_ctx_errcode(ctx) != TE_OK ? te_ctx_errcode(ctx) : TE_ERR_SCHEDULE;
        te_cuda_knobs k = te_cuda_knobs_default(tpl);
        int rc;
        if (strcmp(tpl, "elementwise") != 0)
            rc = te_cuda_schedule_op(s, op, n_out, outs, &k);
        else if (n_out != 1)
            rc = te_ctx_set_error(ctx, TE_ERR_UNSUPPORTED, "%d outputs", n_out);
        else
            rc = te_cuda_schedule_elementwise(s, Y, &k);
        if (rc == TE_OK) {
            *out = s;
            if (k.tile_m)
                snprintf(what, what_size,
                         "the CUDA template '%s' with its default knobs (block tile %dx%dx%d, "
                         "thread tile %dx%d, vec %d; untuned)",
                         tpl, k.tile_m, k.tile_n, k.tile_k, k.thread_m, k.thread_n, k.vec);
            else if (!strcmp(tpl, "elementwise"))
                snprintf(what, what_size,
                         "the CUDA template 'elementwise' with its default knobs (%d threads per "
                         "block, vec %d; untuned)",
                         k.threads, k.vec);
            else
                snprintf(what, what_size,
                         "the CUDA template '%s' with its default knobs (%d threads per block; "
                         "untuned)",
                         tpl, k.threads);
            return TE_OK;
        }
        if (attempt == 0 && strcmp(tpl, "elementwise") != 0) {
            te_ctx_clear_error(ctx);
            tpl = "elementwise";
            continue;
        }
        char msg[512];
        snprintf(msg, sizeof msg, "%s", te_ctx_errmsg(ctx));
        te_ctx_clear_error(ctx);
        return te_ctx_set_error(ctx, TE_ERR_UNSUPPORTED,
                                "tessera gen: no CUDA schedule is recorded for '%s' and no default "
                                "GPU template applies (%s); tune it for the CUDA target or give a "
                                "GPU schedule",
                                te_tensor_name(Y), msg);
    }
    return TE_ERR_INTERNAL;
}

/* ---- Names and types ---------------------------------------------------------------------- */

/* The CUDA type of a dtype in the launchers' casts (long long: the launchers never use the
 * 32-bit index mode). */
static const char *cu_type(te_dtype d)
{
    const char *t = te_dtype_cuda_type(d); /* the dtype table's CUDA spelling */
    return t ? t : "?";
}

/* Type of an argument in the launchers (C-compatible header types). */
static const char *host_type(te_dtype d) { return te_dtype_ctype(d); }

/* Words the launchers' argument names must avoid besides te__gen_reserved's: the launchers'
 * own locals and CUDA's built-in names. */
static const char *const launcher_words[] = {"st",        "rc",       "err", "dim3",
                                             "threadIdx", "blockIdx", NULL};

static bool taken(const char *z, const char *const *names, int n)
{
    if (te__gen_reserved(z, launcher_words))
        return true;
    for (int i = 0; i < n; i++)
        if (names[i] && !strcmp(z, names[i]))
            return true;
    return false;
}

/* C names of the launchers' arguments: the tensors' names, made valid and distinct. */
static const char **arg_names(te_ctx *ctx, const te_gen_kernel *k, const te__gen_plan *p)
{
    const char **v = te__alloc(ctx, sizeof(char *) * (size_t)(k->n_args + p->o->n_params + 1));
    if (!v)
        return NULL;
    const char *others[TE_GEN_MAX_PARAMS + 64];
    int no = 0;
    for (int q = 0; q < p->o->n_params; q++)
        others[no++] = p->params[q];
    for (int a = 0; a < k->n_args; a++) {
        char z[128];
        const char *s = k->arg_names && k->arg_names[a] && *k->arg_names[a]
                            ? k->arg_names[a]
                            : te_tensor_name(k->args[a]);
        te__c_ident(s, z, sizeof z - 2);
        while (taken(z, others, no) && strlen(z) + 2 < sizeof z)
            strcat(z, "_");
        v[a] = te__strdup(ctx, z);
        if (!v[a])
            return NULL;
        if (no < (int)(sizeof others / sizeof others[0]))
            others[no++] = v[a];
    }
    return v;
}

/* Static shared memory of one kernel, summed from its `__shared__ T __align__(16) x[N];`. */
static long long shared_bytes(const char *text, size_t len)
{
    long long total = 0;
    const char *end = text + len;
    for (const char *p = text; p < end && (p = strstr(p, "__shared__ ")) && p < end; p++) {
        const char *q = p + strlen("__shared__ ");
        long long sz = 4;
        if (!strncmp(q, "double", 6) || !strncmp(q, "long long", 9))
            sz = 8;
        else if (!strncmp(q, "bool", 4) || !strncmp(q, "signed char", 11) ||
                 !strncmp(q, "unsigned char", 13))
            sz = 1;
        const char *lb = strchr(q, '[');
        const char *nl = strchr(q, '\n');
        if (!lb || (nl && lb > nl))
            continue;
        long long count = 1;
        while (lb && *lb == '[') {
            count *= strtoll(lb + 1, NULL, 10);
            lb = strchr(lb, ']');
            lb = lb ? lb + 1 : NULL;
        }
        total += count * sz;
    }
    return total;
}

/* ---- Emission ----------------------------------------------------------------------------- */

typedef struct cu_fn {
    te__cuda_program prog;
    const char **args;  /* launcher argument names */
    const char **kdecl; /* per kernel: its __global__ declaration text */
    long long *shared;  /* per kernel: static shared bytes */
} cu_fn;

static void launcher_params(te__sb *b, const te_gen_kernel *k, const char *const *names, int n_in)
{
    for (int a = 0; a < k->n_args; a++)
        te__sb_printf(b, "%s%s%s *%s", a ? ", " : "", a < n_in ? "const " : "",
                      host_type(te_tensor_dtype(k->args[a])), names[a]);
}

static int64_t arg_bytes(te_tensor *t)
{
    return te_tensor_numel(t) * (int64_t)te_dtype_size(te_tensor_dtype(t));
}

int te__gen_cuda(te_ctx *ctx, te__gen_plan *p, te_gen_output *out)
{
    int n = p->n;
    cu_fn *fn = te__alloc(ctx, sizeof *fn * (size_t)n);
    if (!fn)
        return te_ctx_set_error(ctx, TE_ERR_NOMEM, "te_gen: out of memory");
    memset(fn, 0, sizeof *fn * (size_t)n);
    /* Each function is lowered and emitted in turn (its kernels alone, no prelude), so its
     * names are numbered as when it is generated by itself. */
    const te__backend *be = te__backend_get(TE_BACKEND_CUDA);
    te__emit_opts eo = {.no_prelude = true};
    for (int i = 0; i < n; i++) {
        const te_gen_kernel *k = &p->k[i];
        te_lowered *f = NULL;
        const char *text = NULL;
        te__emitted_fn ef = {0};
        int rc = te__gen_lower(ctx, p, i, &f);
        if (rc == TE_OK)
            rc = be->emit_standalone(ctx, 1, (const te_lowered *const *)&f, p->target, &eo, &text,
                                     &ef);
        if (rc != TE_OK)
            return rc;
        fn[i].prog = *ef.cuda;
        fn[i].args = arg_names(ctx, k, p);
        int nk = fn[i].prog.nkernels;
        fn[i].kdecl = te__alloc(ctx, sizeof(char *) * (size_t)(nk ? nk : 1));
        fn[i].shared = te__alloc(ctx, sizeof(long long) * (size_t)(nk ? nk : 1));
        if (!fn[i].args || !fn[i].kdecl || !fn[i].shared)
            return te_ctx_set_error(ctx, TE_ERR_NOMEM, "te_gen: out of memory");
        /* each kernel's declaration and shared memory, from its text */
        const char *src = fn[i].prog.source;
        for (int j = 0; j < nk; j++) {
            char pat[256];
            snprintf(pat, sizeof pat, ") %s(", fn[i].prog.kernels[j].name);
            const char *at = strstr(src, pat);
            const char *start = at;
            while (start && start > src && strncmp(start, "extern \"C\"", 10))
                start--;
            const char *brace = at ? strstr(at, "\n{") : NULL;
            if (!at || !brace)
                return te_ctx_set_error(ctx, TE_ERR_INTERNAL,
                                        "te_gen: kernel '%s' not found in the CUDA source",
                                        fn[i].prog.kernels[j].name);
            fn[i].kdecl[j] = te__sprintf(ctx, "%.*s;", (int)(brace - start), start);
            const char *next = strstr(brace, "extern \"C\" __global__");
            fn[i].shared[j] = shared_bytes(brace, next ? (size_t)(next - brace) : strlen(brace));
        }
        /* kernel names must not collide across the functions of the file */
        for (int i2 = 0; i2 < i; i2++)
            for (int j = 0; j < nk; j++)
                for (int j2 = 0; j2 < fn[i2].prog.nkernels; j2++)
                    if (!strcmp(fn[i].prog.kernels[j].name, fn[i2].prog.kernels[j2].name))
                        return te_ctx_set_error(ctx, TE_ERR_ARG,
                                                "te_gen: two CUDA kernels are named '%s'; name "
                                                "the generated functions apart",
                                                fn[i].prog.kernels[j].name);
    }
    int n_in0 = p->k[0].n_args - p->n_out;
    bool dispatch = p->o->n_params > 0;
    char src_name[256], hdr_name[256];
    te__gen_file_names(p, "cu", src_name, hdr_name, sizeof src_name);

    /* ---- the .cu file */
    te__sb s = {0};
    te__gen_comment(p, &s, src_name, "CUDA");
    te__sb_puts(&s, be->prelude);
    for (int i = 0; i < n; i++)
        te__sb_puts(&s, fn[i].prog.source);
    te__sb_printf(
        &s,
        "/* ---- Host launchers (CUDA runtime API; not part of an NVRTC compilation) ---- */\n"
        "#ifndef __CUDACC_RTC__\n#include <cuda_runtime.h>\n\n#include \"%s\"\n\n"
        "/* 0, -1 for an allocation failure, -3 for any other CUDA error. */\n"
        "static int te_gen_status(cudaError_t e)\n{\n"
        "    return e == cudaSuccess ? 0 : e == cudaErrorMemoryAllocation ? -1 : -3;\n}\n\n"
        "/* An intermediate buffer, passed as whatever pointer type a kernel takes. */\n"
        "struct te_gen_ptr {\n    void *p;\n"
        "    template <typename T> operator T *() const { return static_cast<T *>(p); }\n};\n\n",
        hdr_name);
    for (int i = 0; i < n; i++) {
        const te_gen_kernel *k = &p->k[i];
        const te__cuda_program *pg = &fn[i].prog;
        const char *const *an = fn[i].args;
        int n_in = k->n_args - p->n_out;
        /* device-pointer launcher */
        te__sb_printf(&s, "extern \"C\" int %s_launch(", p->knames[i]);
        launcher_params(&s, k, an, n_in);
        te__sb_puts(&s, ", void *stream)\n{\n    cudaStream_t st = (cudaStream_t)stream;\n"
                        "    cudaError_t err = cudaSuccess;\n");
        if (pg->ntemps) {
            te__sb_printf(&s, "    void *te_tmp[%d] = {0};\n", pg->ntemps);
            for (int t = 0; t < pg->ntemps; t++)
                te__sb_printf(&s,
                              "    if (err == cudaSuccess)\n"
                              "        err = cudaMalloc(&te_tmp[%d], %zu); /* intermediate */\n",
                              t, pg->temp_bytes[t]);
        }
        for (int j = 0; j < pg->nkernels; j++) {
            const te__cuda_kernel *kk = &pg->kernels[j];
            te__sb_printf(&s,
                          "    if (err == cudaSuccess) {\n"
                          "        %s<<<dim3(%d, %d, %d), dim3(%d, %d, %d), 0, st>>>(",
                          kk->name, kk->grid[0], kk->grid[1], kk->grid[2], kk->block[0],
                          kk->block[1], kk->block[2]);
            for (int q = 0; q < kk->nparams; q++) {
                int slot = kk->params[q];
                if (slot < k->n_args)
                    te__sb_printf(&s, "%s(%s *)%s", q ? ", " : "",
                                  cu_type(te_tensor_dtype(k->args[slot])), an[slot]);
                else
                    te__sb_printf(&s, "%ste_gen_ptr{te_tmp[%d]}", q ? ", " : "", slot - k->n_args);
            }
            te__sb_puts(&s, ");\n        err = cudaGetLastError();\n    }\n");
        }
        if (pg->ntemps) {
            te__sb_puts(&s,
                        "    if (err == cudaSuccess)\n        err = cudaStreamSynchronize(st);\n");
            for (int t = 0; t < pg->ntemps; t++)
                te__sb_printf(&s, "    cudaFree(te_tmp[%d]);\n", t);
        }
        te__sb_puts(&s, "    return te_gen_status(err);\n}\n\n");
        /* host-pointer launcher */
        te__sb_printf(&s, "extern \"C\" int %s_host(", p->knames[i]);
        launcher_params(&s, k, an, n_in);
        te__sb_printf(&s, ")\n{\n    void *d[%d] = {0};\n    cudaError_t err = cudaSuccess;\n",
                      k->n_args);
        for (int a = 0; a < k->n_args; a++)
            te__sb_printf(&s,
                          "    if (err == cudaSuccess)\n        err = cudaMalloc(&d[%d], %lld);\n",
                          a, (long long)arg_bytes(k->args[a]));
        for (int a = 0; a < n_in; a++)
            te__sb_printf(&s,
                          "    if (err == cudaSuccess)\n"
                          "        err = cudaMemcpy(d[%d], %s, %lld, cudaMemcpyHostToDevice);\n",
                          a, an[a], (long long)arg_bytes(k->args[a]));
        te__sb_printf(&s, "    int rc = err == cudaSuccess ? %s_launch(", p->knames[i]);
        for (int a = 0; a < k->n_args; a++)
            te__sb_printf(&s, "%s(%s%s *)d[%d]", a ? ", " : "", a < n_in ? "const " : "",
                          host_type(te_tensor_dtype(k->args[a])), a);
        te__sb_puts(&s, ", 0) : te_gen_status(err);\n");
        for (int a = n_in; a < k->n_args; a++)
            te__sb_printf(&s,
                          "    if (rc == 0)\n"
                          "        rc = te_gen_status(cudaMemcpy(%s, d[%d], %lld, "
                          "cudaMemcpyDeviceToHost));\n",
                          an[a], a, (long long)arg_bytes(k->args[a]));
        te__sb_printf(&s,
                      "    for (int i = 0; i < %d; i++)\n        cudaFree(d[i]);\n"
                      "    return rc;\n}\n\n",
                      k->n_args);
    }
    if (dispatch) {
        const char *const *an = fn[0].args;
        for (int host = 0; host < 2; host++) {
            te__sb_printf(&s, "extern \"C\" int %s_%s(", p->entry, host ? "host" : "launch");
            te__gen_dispatch_params(p, &s);
            te__sb_puts(&s, ", ");
            launcher_params(&s, &p->k[0], an, n_in0);
            te__sb_printf(&s, "%s)\n{\n", host ? "" : ", void *stream");
            te__gen_dispatch_body(p, &s, p->knames, host ? "_host" : "_launch", an,
                                  host ? "" : ", stream");
            te__sb_puts(&s, "\n");
        }
    }
    te__sb_puts(&s, "#endif /* __CUDACC_RTC__ */\n");

    /* ---- the header */
    te__sb h = {0};
    char guard[256];
    te__gen_header_begin(p, &h, src_name, hdr_name, "CUDA", true, guard, sizeof guard);
    te__sb_printf(
        &h,
        "; compile it with nvcc, e.g.\n"
        " * `nvcc -O3 -arch=sm_%d -c %s`, and link with the CUDA runtime, -lcudart):\n"
        " *\n"
        "%s"
        " *  - <kernel>_launch takes device pointers (cudaMalloc'ed, or any device-accessible\n"
        " *    memory) and a stream (a cudaStream_t passed as void *; NULL is the default "
        "stream).\n"
        " *    It only enqueues: synchronize the stream before reading the outputs. Kernels with\n"
        " *    intermediate buffers allocate them with cudaMalloc for the call and synchronize "
        "the\n"
        " *    stream before freeing them.\n"
        " *  - <kernel>_host takes host pointers: it allocates device memory, copies the inputs "
        "in,\n"
        " *    launches on the default stream, copies the outputs back and frees (synchronous).\n"
        " *  - Inputs (const) are only read. Outputs are written entirely. Arrays must not "
        "overlap.\n"
        " *  - Alignment: cudaMalloc's alignment (256 bytes) is enough; pointers into the middle\n"
        " *    of an allocation must keep 16-byte alignment where the kernels use float4 "
        "accesses.\n"
        " *  - Return value: 0 on success, -1 when a device allocation failed, -3 for any other\n"
        " *    CUDA error (a failed launch, an invalid device pointer, no device)%s.\n"
        " *  - The kernels use no dynamic shared memory; their launch configurations are fixed\n"
        " *    and listed with each launcher.\n"
        " */\n\n",
        p->target->sm > 0 ? p->target->sm : 80, src_name, te__gen_abi_arrays,
        dispatch ? "; the dispatchers return -2 for parameter values they have no kernel for" : "");
    for (int i = 0; i < n; i++) {
        const te_gen_kernel *k = &p->k[i];
        const te__cuda_program *pg = &fn[i].prog;
        int n_in = k->n_args - p->n_out;
        te__sb_printf(&h, "/*\n * %s_launch, %s_host\n *\n", p->knames[i], p->knames[i]);
        te__gen_describe_kernel(p, &h, i, fn[i].args);
        te__sb_printf(&h, " *\n * Launches, in order, on the given stream:\n");
        for (int j = 0; j < pg->nkernels; j++) {
            const te__cuda_kernel *kk = &pg->kernels[j];
            te__sb_printf(&h,
                          " *   %s<<<grid (%d, %d, %d), block (%d, %d, %d)>>>: %d threads per "
                          "block, %lld bytes of static shared memory\n",
                          kk->name, kk->grid[0], kk->grid[1], kk->grid[2], kk->block[0],
                          kk->block[1], kk->block[2], kk->block[0] * kk->block[1] * kk->block[2],
                          fn[i].shared[j]);
        }
        if (pg->ntemps) {
            size_t tb = 0;
            for (int t = 0; t < pg->ntemps; t++)
                tb += pg->temp_bytes[t];
            te__sb_printf(&h, " *   intermediates: %d device buffers, %zu bytes in all\n",
                          pg->ntemps, tb);
        }
        te__sb_puts(&h, " */\n");
        te__sb_printf(&h, "int %s_launch(", p->knames[i]);
        launcher_params(&h, k, fn[i].args, n_in);
        te__sb_printf(&h, ", void *stream);\nint %s_host(", p->knames[i]);
        launcher_params(&h, k, fn[i].args, n_in);
        te__sb_puts(&h, ");\n\n");
    }
    if (dispatch) {
        te__sb_printf(&h,
                      "/*\n * %s_launch, %s_host: call the launcher generated for the given "
                      "parameter values:\n *\n",
                      p->entry, p->entry);
        te__gen_describe_dispatch(p, &h, "_launch / _host");
        te__sb_puts(&h, " *\n * The arrays are those of the kernel called. Returns what it "
                        "returns, or -2 when no\n * kernel was generated for the values.\n */\n");
        for (int host = 0; host < 2; host++) {
            te__sb_printf(&h, "int %s_%s(", p->entry, host ? "host" : "launch");
            te__gen_dispatch_params(p, &h);
            te__sb_puts(&h, ", ");
            launcher_params(&h, &p->k[0], fn[0].args, n_in0);
            te__sb_puts(&h, host ? ");\n" : ", void *stream);\n");
        }
        te__sb_puts(&h, "\n");
    }
    te__sb_puts(&h, "#ifdef __cplusplus\n}\n#endif\n\n"
                    "#if defined(__CUDACC__)\n/* The kernels, for launching them directly. */\n");
    for (int i = 0; i < n; i++)
        for (int j = 0; j < fn[i].prog.nkernels; j++)
            te__sb_printf(&h, "%s\n", fn[i].kdecl[j]);
    te__sb_printf(&h, "#endif\n\n#endif /* %s */\n", guard);

    return te__gen_finish(ctx, &s, &h, src_name, hdr_name, out);
}

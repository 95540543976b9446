/*
 * backends/cuda/emit_cuda_kernels.c: a lowered function (lowered for a CUDA target) -> CUDA
 * C++: one `extern "C" __global__` kernel per root statement whose outer loops are bound to
 * blockIdx, with its parameters (the buffers it uses: arguments, then device temporaries),
 * launch dimensions and __launch_bounds__; the provenance comment and prelude of the file.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/emit_cuda_impl.h"

/* ---- Kernels -------------------------------------------------------------------------------- */

typedef struct {
    const te_buf **v;
    int n, max;
} bufset;

static void bs_add(bufset *b, const te_buf *x)
{
    if (x->scope != TE_SCOPE_GLOBAL)
        return;
    for (int i = 0; i < b->n; i++)
        if (b->v[i] == x)
            return;
    if (b->n < b->max)
        b->v[b->n] = x;
    b->n++;
}

static bool bs_expr(const te_expr *x, void *user)
{
    if (x->kind == TE_E_LOAD)
        bs_add(user, x->u.load.buf);
    return true;
}

/* Every buffer a statement stores to (its loads come through bs_expr). */
static bool bs_stmt(const te_stmt *s, void *user)
{
    if (s->kind == TE_S_STORE)
        bs_add(user, s->u.store.buf);
    return true;
}

static bool writes(const te_stmt *s, const te_buf *b)
{
    if (!s)
        return false;
    switch (s->kind) {
    case TE_S_FOR:
        return writes(s->u.loop.body, b);
    case TE_S_SEQ:
        for (int i = 0; i < s->u.seq.n; i++)
            if (writes(s->u.seq.v[i], b))
                return true;
        return false;
    case TE_S_IF:
        return writes(s->u.cond.then_s, b) || writes(s->u.cond.else_s, b);
    case TE_S_STORE:
        return s->u.store.buf == b;
    case TE_S_INTRIN: /* operand 0 is the output */
        return s->u.intrin.nops > 0 && s->u.intrin.addr[0]->u.load.buf == b;
    case TE_S_ALLOC:
        return writes(s->u.alloc.body, b);
    case TE_S_LET:
        return writes(s->u.let.body, b);
    default:
        return false;
    }
}

typedef struct prog_ctx {
    cem *e;
    te__sb *src;
    const te_lowered *f;
    te__cuda_program *p;
    const te_buf *temps[256];
    int ntemps;
    te__vec kernels;
    const char *kbase;
    const char *stage;
} prog_ctx;

static int buf_slot(prog_ctx *pc, const te_buf *b)
{
    if (b->arg_index >= 0)
        return b->arg_index;
    for (int i = 0; i < pc->ntemps; i++)
        if (pc->temps[i] == b)
            return pc->f->n_args + i;
    return -1;
}

static void emit_kernel(prog_ctx *pc, const te_stmt *s)
{
    cem *e = pc->e;
    te_ctx *ctx = e->ctx;
    te__cuda_kernel *k = te__alloc(ctx, sizeof *k);
    if (!k) {
        te__cem_fail(e, TE_ERR_NOMEM, "out of memory");
        return;
    }
    int idx = pc->kernels.n;
    k->name = idx == 0 ? pc->kbase : te__sprintf(ctx, "%s_k%d", pc->kbase, idx);
    k->grid[0] = k->grid[1] = k->grid[2] = 1;
    /* block loops */
    const te_stmt *b = s;
    const te_expr *bvars[3] = {NULL, NULL, NULL};
    int64_t bhi[3] = {0, 0, 0}; /* blockIdx < the grid's size (a CUDA int when not constant) */
    while (b->kind == TE_S_FOR && b->u.loop.fkind == TE_FOR_THREAD &&
           b->u.loop.thread_tag <= TE_BLOCK_Z) {
        int64_t ex = 1;
        bhi[b->u.loop.thread_tag] =
            te__is_const_int(b->u.loop.extent, &ex) && ex >= 1 ? ex - 1 : INT32_MAX;
        k->grid[b->u.loop.thread_tag] = (int)ex;
        bvars[b->u.loop.thread_tag] = b->u.loop.var;
        b = b->u.loop.body;
    }
    if (!te__block_dims(b, e->dims)) {
        te__cem_fail(e, TE_ERR_SCHEDULE, "a loop bound to threadIdx has a non-constant extent");
        return;
    }
    /* Warp-collective intrinsics: one warp per thread of the schedule along x. */
    e->warp = te__cem_has_intrin(b);
    e->cp_async = te__cem_uses_cp_async(e, b);
    if (e->warp) {
        if (e->dims[0] != 1) {
            te__cem_fail(e, TE_ERR_SCHEDULE,
                         "kernel '%s' calls a warp-collective tensor intrinsic and has a loop "
                         "bound to threadIdx.x (extent %lld): bind the tensorized stage's tiles "
                         "to blockIdx and threadIdx.y/z only, and no loop of the kernel to "
                         "threadIdx.x (the intrinsic's warp is threadIdx.x)",
                         k->name, (long long)e->dims[0]);
            return;
        }
        e->dims[0] = 32;
        if (32 * e->dims[1] * e->dims[2] > 1024) {
            te__cem_fail(e, TE_ERR_SCHEDULE,
                         "kernel '%s' calls a warp-collective tensor intrinsic with %lld x %lld "
                         "warps per block; at most 32 fit in a block of 1024 threads",
                         k->name, (long long)e->dims[1], (long long)e->dims[2]);
            return;
        }
    }
    for (int d = 0; d < 3; d++)
        k->block[d] = (int)e->dims[d];
    int nt = k->block[0] * k->block[1] * k->block[2];
    /* parameters */
    const te_buf *bv[TE__CUDA_MAX_PARAMS];
    bufset bs = {bv, 0, TE__CUDA_MAX_PARAMS};
    te__stmt_visit(s, bs_stmt, bs_expr, &bs);
    if (bs.n > TE__CUDA_MAX_PARAMS) {
        te__cem_fail(e, TE_ERR_UNSUPPORTED, "a kernel uses more than %d buffers",
                     TE__CUDA_MAX_PARAMS);
        return;
    }
    /* order: arguments by index, then temps */
    for (int i = 1; i < bs.n; i++)
        for (int j = i; j > 0 && buf_slot(pc, bv[j - 1]) > buf_slot(pc, bv[j]); j--) {
            const te_buf *t = bv[j];
            bv[j] = bv[j - 1];
            bv[j - 1] = t;
        }
    te__sb *o = pc->src;
    te__sb_printf(o, "// %s: grid (%d, %d, %d), block (%d, %d, %d)%s%s\n", k->name, k->grid[0],
                  k->grid[1], k->grid[2], k->block[0], k->block[1], k->block[2],
                  pc->stage ? "; stage " : "", pc->stage ? pc->stage : "");
    te__sb_printf(o, "extern \"C\" __global__ void __launch_bounds__(%d) %s(", nt, k->name);
    bool multi = bs.n > 2;
    for (int i = 0; i < bs.n; i++) {
        const te_buf *x = bv[i];
        bool out = writes(s, x);
        k->params[k->nparams++] = buf_slot(pc, x);
        te__sb_printf(o, "%s%s%s%s *__restrict__ %s", i ? "," : "",
                      multi ? "\n        " : (i ? " " : ""), out ? "" : "const ",
                      te__cem_ctype(e, x->dtype), te__cem_buf_name(e, x));
    }
    te__sb_puts(o, ")\n{\n");
    e->indent = 1;
    e->ranges.n = 0;
    for (int d = 0; d < 3; d++)
        if (bvars[d]) {
            te__cem_line(e, "const int %s = blockIdx.%s;", te__cem_var_name(e, bvars[d]),
                         te__cem_dim_name[d]);
            te__cem_check_push(e, te__ranges_push(ctx, &e->ranges, bvars[d], 0, bhi[d]));
        }
    e->npath = 0;
    te__cem_gen_stmt(e, b);
    e->warp = false;
    e->cp_async = false;
    te__sb_puts(o, "}\n\n");
    te__vec_push(ctx, &pc->kernels, k);
}

static void walk_root(prog_ctx *pc, const te_stmt *s)
{
    cem *e = pc->e;
    if (!s || e->err)
        return;
    switch (s->kind) {
    case TE_S_SEQ:
        for (int i = 0; i < s->u.seq.n; i++)
            walk_root(pc, s->u.seq.v[i]);
        return;
    case TE_S_ALLOC:
        if (s->u.alloc.buf->scope == TE_SCOPE_GLOBAL && pc->ntemps < 256) {
            pc->temps[pc->ntemps++] = s->u.alloc.buf;
            walk_root(pc, s->u.alloc.body);
            return;
        }
        break;
    case TE_S_COMMENT:
        if (s->u.comment.text && !strncmp(s->u.comment.text, "compute ", 8))
            pc->stage = s->u.comment.text + 8;
        return;
    case TE_S_FOR:
        if (s->u.loop.fkind == TE_FOR_THREAD) {
            emit_kernel(pc, s);
            return;
        }
        break;
    default:
        break;
    }
    te__cem_fail(e, TE_ERR_SCHEDULE,
                 "stage '%s' runs outside any loop bound to blockIdx/threadIdx "
                 "(lower with a CUDA target to get the GPU check's explanation)",
                 pc->stage ? pc->stage : "?");
}

static bool big_buf(const te_buf *b)
{
    return te__buf_numel(b) >= ((int64_t)1 << 31) || b->dtype == TE_I64;
}

static bool any_big(const te_stmt *s, bool *big);
static bool big_expr(const te_expr *x, void *user)
{
    if (x->kind == TE_E_LOAD && big_buf(x->u.load.buf))
        *(bool *)user = true;
    return true;
}
static bool any_big(const te_stmt *s, bool *big)
{
    if (!s)
        return *big;
    switch (s->kind) {
    case TE_S_FOR:
        any_big(s->u.loop.body, big);
        break;
    case TE_S_SEQ:
        for (int i = 0; i < s->u.seq.n; i++)
            any_big(s->u.seq.v[i], big);
        break;
    case TE_S_IF:
        any_big(s->u.cond.then_s, big);
        any_big(s->u.cond.else_s, big);
        break;
    case TE_S_STORE:
        if (big_buf(s->u.store.buf))
            *big = true;
        te__expr_visit(s->u.store.value, big_expr, big);
        break;
    case TE_S_ALLOC:
        if (big_buf(s->u.alloc.buf))
            *big = true;
        any_big(s->u.alloc.body, big);
        break;
    case TE_S_LET:
        te__expr_visit(s->u.let.value, big_expr, big);
        any_big(s->u.let.body, big);
        break;
    default:
        break;
    }
    return *big;
}

const char te__cuda_prelude[] =
    "\n// floor division and modulo for signed operands not known to be non-negative\n"
    "template <typename T> __device__ __forceinline__ T te_floordiv(T a, T b)\n"
    "{\n    T q = a / b;\n    return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;\n}\n"
    "template <typename T> __device__ __forceinline__ T te_floormod(T a, T b)\n"
    "{\n    T r = a % b;\n    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;\n}\n\n"
    "// global -> shared copies of 4, 8 or 16 bytes that complete asynchronously on sm_80+\n"
    "// (cp.async: the thread goes on; te_cp_async_wait waits for all of its copies)\n"
    "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800\n"
    "__device__ __forceinline__ unsigned te_smem(const void *p)\n"
    "{\n    return (unsigned)__cvta_generic_to_shared(p);\n}\n"
    "__device__ __forceinline__ void te_cp_async4(float *d, const float *s)\n"
    "{\n    asm volatile(\"cp.async.ca.shared.global [%0], [%1], 4;\\n\" ::\"r\"(te_smem(d)), "
    "\"l\"(s));\n}\n"
    "__device__ __forceinline__ void te_cp_async8(float2 *d, const float2 *s)\n"
    "{\n    asm volatile(\"cp.async.ca.shared.global [%0], [%1], 8;\\n\" ::\"r\"(te_smem(d)), "
    "\"l\"(s));\n}\n"
    "__device__ __forceinline__ void te_cp_async16(float4 *d, const float4 *s)\n"
    "{\n    asm volatile(\"cp.async.cg.shared.global [%0], [%1], 16;\\n\" ::\"r\"(te_smem(d)), "
    "\"l\"(s));\n}\n"
    "__device__ __forceinline__ void te_cp_async_wait()\n"
    "{\n    asm volatile(\"cp.async.wait_all;\\n\" ::: \"memory\");\n}\n"
    "#else\n"
    "__device__ __forceinline__ void te_cp_async4(float *d, const float *s) { *d = *s; }\n"
    "__device__ __forceinline__ void te_cp_async8(float2 *d, const float2 *s) { *d = *s; }\n"
    "__device__ __forceinline__ void te_cp_async16(float4 *d, const float4 *s) { *d = *s; }\n"
    "__device__ __forceinline__ void te_cp_async_wait() {}\n"
    "#endif\n\n";

static int emit_program(te_ctx *ctx, const te_lowered *f, const te_target *target,
                        te__cuda_program *out, bool kernels_only);

int te__cuda_emit_program(te_ctx *ctx, const te_lowered *f, const te_target *target,
                          te__cuda_program *out)
{
    return emit_program(ctx, f, target, out, false);
}

int te__cuda_emit_kernels(te_ctx *ctx, const te_lowered *f, const te_target *target,
                          te__cuda_program *out)
{
    return emit_program(ctx, f, target, out, true);
}

static int emit_program(te_ctx *ctx, const te_lowered *f, const te_target *target,
                        te__cuda_program *out, bool kernels_only)
{
    if (!ctx || !out)
        return TE_ERR_ARG;
    memset(out, 0, sizeof *out);
    if (!f || !f->body || !f->name || f->n_args < 0 || (f->n_args && !f->args))
        return te_ctx_set_error(ctx, TE_ERR_ARG, "te_emit_cuda: incomplete lowered function");
    cem *e = calloc(1, sizeof *e);
    te__sb *body = calloc(1, sizeof *body);
    if (!e || !body) {
        free(e);
        free(body);
        return te_ctx_set_error(ctx, TE_ERR_NOMEM, "te_emit_cuda: out of memory");
    }
    e->ctx = ctx;
    e->f = f;
    e->o = body;
    e->target = target;
    bool big = false;
    for (int i = 0; i < f->n_args; i++)
        big |= big_buf(f->args[i]);
    any_big(f->body, &big);
    e->small = !big;
    char kbase[160];
    te__emit_kernel_ident(f->name, TE__LANG_CUDA, kbase, sizeof kbase);
    te__cem_lookup(e, 2, 0, e, kbase);
    for (int i = 0; i < f->n_args; i++)
        te__cem_buf_name(e, f->args[i]);
    prog_ctx pc = {.e = e, .src = body, .f = f, .p = out, .kbase = te__strdup(ctx, kbase)};
    walk_root(&pc, f->body);
    if (!pc.kernels.n && !e->err)
        te__cem_fail(e, TE_ERR_SCHEDULE, "no kernel: no loop is bound to blockIdx or threadIdx");

    if (e->n_intrins && !e->err) { /* the intrinsics' functions, before the kernels */
        te__sb fns = {0};
        te__cem_emit_intrins(e, &fns);
        te__sb_puts(&fns, body->p ? body->p : "");
        if (fns.oom)
            te__cem_fail(e, TE_ERR_NOMEM, "out of memory");
        free(body->p);
        *body = fns;
        e->uses_half = true; /* <mma.h> needs cuda_fp16.h and cuda_bf16.h on the include path */
    }
    if (e->uses_half && !e->err) { /* the storage types and conversions of f16 and bf16 */
        te__sb inc = {0};
        te__sb_puts(&inc, "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n\n");
        te__sb_puts(&inc, body->p ? body->p : "");
        if (inc.oom)
            te__cem_fail(e, TE_ERR_NOMEM, "out of memory");
        free(body->p);
        *body = inc;
    }
    te__sb o = {0};
    if (!kernels_only) {
        te__emit_provenance(&o, kbase, "CUDA", 1, &f->header, target);
        te__sb_puts(&o, te__cuda_prelude);
    }
    te__sb_puts(&o, body->p ? body->p : "");
    int rc = e->err;
    if (!rc && (o.oom || body->oom))
        rc = te_ctx_set_error(ctx, TE_ERR_NOMEM, "te_emit_cuda: out of memory");
    if (!rc) {
        out->source = te__strdup(ctx, o.p ? o.p : "");
        out->nkernels = pc.kernels.n;
        out->kernels =
            te__alloc(ctx, sizeof(te__cuda_kernel) * (size_t)(pc.kernels.n ? pc.kernels.n : 1));
        out->n_args = f->n_args;
        out->ntemps = pc.ntemps;
        out->temp_bytes = te__alloc(ctx, sizeof(size_t) * (size_t)(pc.ntemps ? pc.ntemps : 1));
        if (!out->source || !out->kernels || !out->temp_bytes) {
            rc = TE_ERR_NOMEM;
        } else {
            for (int i = 0; i < pc.kernels.n; i++)
                out->kernels[i] = *(te__cuda_kernel *)pc.kernels.v[i];
            for (int i = 0; i < pc.ntemps; i++) {
                size_t n = te_dtype_size(pc.temps[i]->dtype);
                for (int d = 0; d < pc.temps[i]->ndim; d++)
                    n *= (size_t)pc.temps[i]->shape[d];
                out->temp_bytes[i] = n;
            }
        }
    }
    free(o.p);
    free(body->p);
    free(body);
    free(e);
    return rc;
}

const char *te_emit_cuda(te_ctx *ctx, const te_lowered *f, const te_target *target)
{
    te__cuda_program p;
    return te__cuda_emit_program(ctx, f, target, &p) == TE_OK ? p.source : NULL;
}

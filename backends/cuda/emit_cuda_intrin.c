/*
 * backends/cuda/emit_cuda_intrin.c: tensor intrinsic calls (TE_S_INTRIN, te_tensorize) in CUDA.
 *
 * CUDA intrinsics (schedule/intrin_cuda.c) are warp-collective: every lane of a warp calls the
 * function with the same pointers and the lanes share the work (WMMA fragments). A kernel that
 * calls one has no loop bound to threadIdx.x; the kernel emitter launches it with
 * blockDim.x = 32 (emit_cuda_kernels.c), so each thread of the schedule (a threadIdx.y/z
 * position) is one warp. The ordinary statements of such a kernel run on every lane; its stores
 * are done by lane 0 (emit_cuda_stmt.c), and each call sits between two __syncwarp()s, so that
 * the call sees lane 0's stores (an initialization of the output, a copy into shared memory)
 * and lane 0 sees the call's results.
 *
 * The call passes each operand's address at the tile's origin and the strides of its free
 * dimensions, as the C backend does; the function is defined once per file, before the
 * kernels, as
 *     __device__ __forceinline__ void NAME(float *__restrict__ C, long long C_s0, ...)
 * under an include guard (TE_INTRIN_NAME), after the intrinsics' preludes (#include <mma.h>).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/emit_cuda_impl.h"
#include "schedule/tensorize_impl.h"

static bool intrin_fn(const te_stmt *s, void *user)
{
    if (s->kind == TE_S_INTRIN)
        *(bool *)user = true;
    return true;
}

bool te__cem_has_intrin(const te_stmt *s)
{
    bool found = false;
    te__stmt_visit(s, intrin_fn, NULL, &found);
    return found;
}

/* The byte alignment WMMA needs of a fragment's address, and of its row stride. */
enum { WMMA_ADDR_ALIGN = 32, WMMA_LDM_ALIGN = 16 };

void te__cem_gen_intrin(cem *e, const te_stmt *s)
{
    const te_tensor_intrin *in = s->u.intrin.in;
    if (in->backend != TE_BACKEND_CUDA) {
        te__cem_fail(e, TE_ERR_UNSUPPORTED,
                     "tensor intrinsic '%s' is a C (CPU) intrinsic; a CUDA kernel can only call "
                     "CUDA intrinsics (cuda_wmma_*)",
                     in->name);
        return;
    }
    if (!e->target || !te_tensor_intrin_supported(in, e->target)) {
        te__cem_fail(e, TE_ERR_UNSUPPORTED,
                     "tensor intrinsic '%s' needs %s; the target is %s (sm_%d)", in->name,
                     in->features[0] ? in->features : "a CUDA target",
                     e->target ? e->target->cpu_model : "not given", e->target ? e->target->sm : 0);
        return;
    }
    if (!e->warp) {
        te__cem_fail(e, TE_ERR_INTERNAL, "tensor intrinsic '%s' outside a warp kernel", in->name);
        return;
    }
    if (s->u.intrin.overwrite && !in->c_overwrite) {
        te__cem_fail(e, TE_ERR_INTERNAL, "tensor intrinsic '%s' has no overwrite form", in->name);
        return;
    }
    /* The operands: global or shared memory (WMMA loads from either), aligned as WMMA's loads
     * need for an implementation that uses them. */
    bool wmma = strstr(in->c_update, "wmma::load_matrix_sync") != NULL;
    const char *arg[TE_INTRIN_STMT_MAX_OPS];
    int64_t strides[TE_INTRIN_STMT_MAX_OPS][TE_MAX_DIMS];
    for (int o = 0; o < s->u.intrin.nops; o++) {
        const te_expr *a = s->u.intrin.addr[o];
        const te_buf *b = a->u.load.buf;
        size_t es = te_dtype_size(b->dtype);
        if (b->scope != TE_SCOPE_GLOBAL && b->scope != TE_SCOPE_SHARED) {
            te__cem_fail(e, TE_ERR_UNSUPPORTED,
                         "operand '%s' of tensor intrinsic '%s' is in thread-local memory; warp "
                         "intrinsics read and write global or shared memory",
                         b->name, in->name);
            return;
        }
        if (a->u.load.n != 1) {
            te__cem_fail(e, TE_ERR_INTERNAL, "operand '%s' of '%s' has an index that is not flat",
                         b->name, in->name);
            return;
        }
        int64_t amul = WMMA_ADDR_ALIGN / (int64_t)es;
        if (wmma && !te__arith_multiple_of(a->u.load.idx[0], amul)) {
            te__cem_fail(e, TE_ERR_SCHEDULE,
                         "operand '%s' of tensor intrinsic '%s': its tile origin (element %s) is "
                         "not provably a multiple of %lld elements (WMMA needs %d-byte aligned "
                         "fragments: tiles at multiples of 16 rows and k, row lengths a multiple "
                         "of %lld)",
                         b->name, in->name, te__cem_text(e, a->u.load.idx[0]), (long long)amul,
                         WMMA_ADDR_ALIGN, (long long)(WMMA_LDM_ALIGN / (int64_t)es));
            return;
        }
        for (int f = 0; f < s->u.intrin.nfree[o]; f++) {
            int64_t stride = te__intrin_stride(s, o, f);
            if (wmma && (stride * (int64_t)es) % WMMA_LDM_ALIGN) {
                te__cem_fail(e, TE_ERR_SCHEDULE,
                             "operand '%s' of tensor intrinsic '%s' has a row stride of %lld "
                             "elements (%lld bytes); WMMA needs a multiple of %d bytes",
                             b->name, in->name, (long long)stride,
                             (long long)(stride * (int64_t)es), WMMA_LDM_ALIGN);
                return;
            }
            strides[o][f] = stride;
        }
        arg[o] = te__sprintf(e->ctx, "%s[%s]", te__cem_buf_name(e, b),
                             te__cem_text(e, a->u.load.idx[0]));
    }
    if (te__intrin_record(e->intrins, &e->n_intrins,
                          (int)(sizeof e->intrins / sizeof e->intrins[0]), in)) {
        te__cem_fail(e, TE_ERR_UNSUPPORTED, "more than %d tensor intrinsics in one program",
                     e->n_intrins);
        return;
    }
    te__sb call = {0};
    te__sb_printf(&call, "%s%s(", in->name, s->u.intrin.overwrite ? "_overwrite" : "");
    for (int o = 0; o < s->u.intrin.nops; o++) {
        te__sb_printf(&call, "%s&%s", o ? ", " : "", arg[o]);
        for (int f = 0; f < s->u.intrin.nfree[o]; f++)
            te__sb_printf(&call, ", %lld", (long long)strides[o][f]);
    }
    if (s->u.intrin.n >= 0)
        te__sb_printf(&call, ", %lld", (long long)s->u.intrin.n);
    te__sb_puts(&call, ");");
    if (call.oom) {
        free(call.p);
        te__cem_fail(e, TE_ERR_NOMEM, "out of memory");
        return;
    }
    te__cem_line(e, "__syncwarp(); // warp-collective: every lane, the same pointers");
    te__cem_line(e, "%s", call.p);
    te__cem_line(e, "__syncwarp();");
    free(call.p);
}

static void emit_signature(cem *e, te__sb *o, const te_tensor_intrin *in, const char *suffix)
{
    te__sb_printf(o, "__device__ __forceinline__ void %s%s(", in->name, suffix);
    for (int op = 0; op <= in->n_in; op++) {
        const te_tensor *X = in->ops[op];
        te__sb_printf(o, "%s%s%s *__restrict__ %s", op ? ", " : "", op ? "const " : "",
                      te__cem_ctype(e, X->dtype), X->name);
        for (int f = 0; f < in->nfree[op]; f++)
            te__sb_printf(o, ", long long %s_s%d", X->name, f);
    }
    if (in->var_axis >= 0)
        te__sb_puts(o, ", long long n");
    te__sb_puts(o, ")\n{\n");
}

void te__cem_emit_intrins(cem *e, te__sb *o)
{
    if (!e->n_intrins)
        return;
    te__sb_puts(o, "// ---- Tensor intrinsics (te_tensorize): warp-collective ----\n");
    for (int i = 0; i < e->n_intrins; i++) {
        const te_tensor_intrin *in = e->intrins[i];
        bool dup = false;
        for (int j = 0; j < i && in->c_prelude; j++)
            dup |= e->intrins[j]->c_prelude && !strcmp(e->intrins[j]->c_prelude, in->c_prelude);
        if (in->c_prelude && !dup)
            te__sb_printf(o, "%s\n", in->c_prelude);
    }
    for (int i = 0; i < e->n_intrins; i++) {
        const te_tensor_intrin *in = e->intrins[i];
        te__sb_printf(o, "\n// %s\n#ifndef TE_INTRIN_%s\n#define TE_INTRIN_%s\n",
                      in->doc[0] ? in->doc : in->name, in->name, in->name);
        emit_signature(e, o, in, "");
        te__sb_printf(o, "%s}\n", in->c_update);
        if (in->c_overwrite) {
            emit_signature(e, o, in, "_overwrite");
            te__sb_printf(o, "%s}\n", in->c_overwrite);
        }
        te__sb_printf(o, "#endif\n");
    }
    te__sb_puts(o, "\n");
}

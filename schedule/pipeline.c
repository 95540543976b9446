/*
 * The lowering pipeline as a table (Halide's Lower.cpp, TVM's tir pass list): every step from a
 * schedule to the loop program a backend prints, in the order it runs, with when it runs. Each
 * pass is a te__pass_fn in its own file under schedule/passes/ (loop_nests is in lower.c), with
 * its own test. docs/ARCHITECTURE.md carries this table; tests/test_pipeline.c checks that the
 * two agree.
 *
 * Debugging: TESSERA_DUMP_IR=all (or =vectorize,unroll) prints the IR after the named passes,
 * as does `tessera lower OP --shape ... --dump[=PASSES]`.
 */
#include <stdio.h>
#include <string.h>

#include "schedule/passes.h"

const te__pass te__pipeline[] = {
    {"loop_nests", te__pass_loop_nests, TE_PASS_ALWAYS,
     "inline, bound inference, one loop nest per stage (schedule -> statement)"},
    {"cross_thread_reduce", te__pass_cross_thread_reduce, TE_PASS_GPU,
     "reductions bound to threadIdx become a shared-memory tree"},
    {"simplify", te__pass_simplify, TE_PASS_ALWAYS,
     "arithmetic, trivial loops and provable conditions"},
    {"inject_vthread", te__pass_inject_vthread, TE_PASS_ALWAYS,
     "virtual-thread loops interleaved inward; their register tiles get a copy each"},
    {"loop_partition", te__pass_loop_partition, TE_PASS_ALWAYS,
     "split loops at tail guards: main part unguarded"},
    {"simplify", te__pass_simplify, TE_PASS_ALWAYS, "again, on the partitioned loops"},
    {"double_buffer", te__pass_double_buffer, TE_PASS_GPU,
     "shared buffers marked double_buffer alternate halves"},
    {"hoist_shared", te__pass_hoist_shared, TE_PASS_GPU,
     "shared allocations to the top of each block body"},
    {"storage_flatten", te__pass_storage_flatten, TE_PASS_ALWAYS,
     "multi-dimensional accesses become flat indices"},
    {"gpu_vector_filter", te__pass_gpu_vector_filter, TE_PASS_CUDA,
     "only copies stay vectorized on CUDA; the rest unroll"},
    {"vectorize", te__pass_vectorize, TE_PASS_ALWAYS,
     "vectorized loops become RAMP/BCAST vector code"},
    {"unroll", te__pass_unroll, TE_PASS_ALWAYS, "unrolled loops become copies of their body"},
    {"simplify", te__pass_simplify, TE_PASS_ALWAYS, "again, on the unrolled code"},
    {"barrier", te__pass_barrier, TE_PASS_GPU, "__syncthreads where shared buffers need it"},
    {"gpu_check", te__pass_gpu_check, TE_PASS_CUDA,
     "threads, grid and shared memory within the target's limits"},
    {"thread_split", te__pass_thread_split, TE_PASS_GPU_ON_C,
     "GPU code runs on the CPU: thread loops split at barriers"},
    {"simplify", te__pass_simplify, TE_PASS_GPU_ON_C, "again, on the thread loops"},
    {"merge_guards", te__pass_merge_guards, TE_PASS_ALWAYS,
     "ifs of one condition merged; invariant guards moved out of serial loops"},
    {"hoist_invariants", te__pass_hoist_invariants, TE_PASS_C,
     "math calls a loop does not move computed once before it"},
    {"store_motion", te__pass_store_motion, TE_PASS_C,
     "elements a loop reads and writes at fixed addresses kept in a local buffer"},
    {"legalize_vectors", te__pass_legalize_vectors, TE_PASS_C,
     "vectors wider than a register split into register-wide parts"},
    {"promote_registers", te__pass_promote_registers, TE_PASS_C,
     "small local buffers with constant indices marked to live in variables"},
};

const int te__pipeline_n = (int)(sizeof te__pipeline / sizeof te__pipeline[0]);

static bool applies(te__pass_when w, bool gpu, bool cuda)
{
    switch (w) {
    case TE_PASS_ALWAYS:
        return true;
    case TE_PASS_GPU:
        return gpu;
    case TE_PASS_CUDA:
        return cuda;
    case TE_PASS_C:
        return !cuda;
    case TE_PASS_GPU_ON_C:
        return gpu && !cuda;
    }
    return false;
}

/* Whether name appears in the comma-separated list (or the list is "all"). */
static bool listed(const char *list, const char *name)
{
    if (!list)
        return false;
    if (strcmp(list, "all") == 0)
        return true;
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0)
            return true;
        p += len + (e ? 1 : 0);
    }
    return false;
}

static int check_dump_list(te_ctx *ctx, const char *list)
{
    if (!list || strcmp(list, "all") == 0)
        return TE_OK;
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        int len = e ? (int)(e - p) : (int)strlen(p);
        bool known = false;
        for (int i = 0; i < te__pipeline_n && !known; i++)
            known = (int)strlen(te__pipeline[i].name) == len &&
                    strncmp(p, te__pipeline[i].name, (size_t)len) == 0;
        if (!known) {
            char names[512] = "";
            size_t used = 0;
            for (int i = 0; i < te__pipeline_n && used < sizeof names; i++)
                if (!listed(names, te__pipeline[i].name))
                    used += (size_t)snprintf(names + used, sizeof names - used, "%s%s",
                                             used ? "," : "", te__pipeline[i].name);
            return te_ctx_set_error(ctx, TE_ERR_ARG,
                                    "IR dump: unknown pass '%.*s' (use 'all' or a comma-separated "
                                    "list of: %s)",
                                    len, p, names);
        }
        p += len + (e ? 1 : 0);
    }
    return TE_OK;
}

static void dump_ir(const te__pass_ctx *pc, const te_stmt *s, int step, FILE *out)
{
    fprintf(out, "// ---- IR after pass %d '%s' ----\nfunc %s(", step, te__pipeline[step].name,
            pc->name ? pc->name : "");
    for (int a = 0; a < pc->n_args; a++)
        fprintf(out, "%s%s", a ? ", " : "", pc->arg_bufs[a]->name);
    fputs(") {\n", out);
    te__stmt_print(s, out, 2);
    fputs("}\n", out);
}

te_stmt *te__pipeline_run(const te__pass_ctx *pc, const char *dump, FILE *out)
{
    if (check_dump_list(pc->ctx, dump))
        return NULL;
    bool cuda = pc->target && pc->target->backend == TE_BACKEND_CUDA, gpu = false;
    te_stmt *s = NULL;
    for (int i = 0; i < te__pipeline_n; i++) {
        const te__pass *p = &te__pipeline[i];
        if (i > 0 && !applies(p->when, gpu, cuda))
            continue;
        s = p->run(pc, s);
        if (!s) {
            if (te_ctx_errcode(pc->ctx) == TE_OK)
                te_ctx_set_error(pc->ctx, TE_ERR_LOWER, "produced no program");
            char prefix[96];
            snprintf(prefix, sizeof prefix, "lowering pass '%s': ", p->name);
            te__ctx_prefix_error(pc->ctx, prefix);
            return NULL;
        }
        if (i == 0)
            gpu = te__has_thread_loops(s);
        if (out && listed(dump, p->name))
            dump_ir(pc, s, i, out);
    }
    return s;
}

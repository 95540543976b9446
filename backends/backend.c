/*
 * backends/backend.c: the backend tables (backends/backend_impl.h) and their lookup. Each
 * backend defines its entries in its own directory; this file only lists them.
 */
#include "backends/backend_impl.h"
#include "backends/cuda/cuda_impl.h"

static const te__backend c_backend = {
    .kind = TE_BACKEND_C,
    .name = "c",
    .target = te__c_target,
    .emit = te_emit_c,
    .emit_unit = te__c_emit_unit,
    .emit_standalone = te__c_emit_standalone,
    .compile_many = te__c_compile_many,
    .run = te__c_run,
    .time = te__c_time,
    .entry = te__c_entry,
    .source = te__c_source,
    .free = te__c_free,
};

static const te__backend cuda_backend = {
    .kind = TE_BACKEND_CUDA,
    .name = "cuda",
    .target = te__cuda_target,
    .emit = te_emit_cuda,
    .prelude = te__cuda_prelude,
    .emit_standalone = te__cuda_emit_standalone,
    .run = te__cuda_run,
    .source = te__cuda_source,
    .free = te__cuda_free,
};

const te__backend *te__backend_get(te_backend_kind kind)
{
    switch (kind) {
    case TE_BACKEND_C:
        return &c_backend;
    case TE_BACKEND_CUDA:
        return &cuda_backend;
    }
    return NULL;
}

int te__build_check_args(te_schedule *s, bool have_out, const char *name, const char *fn)
{
    if (!s)
        return TE_ERR_ARG;
    if (!have_out || !name)
        return te_ctx_set_error(te_schedule_ctx(s), TE_ERR_ARG, "%s: name and out are required",
                                fn);
    return TE_OK;
}

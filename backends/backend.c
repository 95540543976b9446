/*
 * backends/backend.c: the backend tables (backends/backend_impl.h) and their lookup. Each
 * backend defines its entries in its own directory; this file only lists them.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/backend_impl.h"
#include "backends/cuda/cuda_impl.h"

unsigned long long te__hash_bytes(unsigned long long h, const void *p, size_t n)
{
    const unsigned char *z = p;
    for (size_t i = 0; i < n; i++) {
        h ^= z[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

char *te__cache_dir(void)
{
    const char *z, *fmt = "%s";
    char *out = NULL;
    if ((z = getenv("TESSERA_CACHE_DIR")) && *z)
        ;
    else if ((z = getenv("XDG_CACHE_HOME")) && *z)
        fmt = "%s/tessera";
    else if ((z = getenv("HOME")) && *z)
        fmt = "%s/.cache/tessera";
    else
        return asprintf(&out, "/tmp/tessera-cache-%ld", (long)getuid()) < 0 ? NULL : out;
    return asprintf(&out, fmt, z) < 0 ? NULL : out;
}

/* Creates `dir` and its missing parents (mkdir -p). Returns 0 or -1 with errno set. */
int te__mkdir_p(const char *dir)
{
    size_t n = strlen(dir);
    char *path = malloc(n + 1);
    if (!path) {
        errno = ENOMEM;
        return -1;
    }
    memcpy(path, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (path[i] != '/' && path[i] != '\0')
            continue;
        if (path[i - 1] == '/')
            continue; /* "a//b" */
        char saved = path[i];
        path[i] = '\0';
        if (mkdir(path, 0777) != 0 && errno != EEXIST) {
            int e = errno;
            free(path);
            errno = e;
            return -1;
        }
        path[i] = saved;
    }
    free(path);
    struct stat st;
    if (stat(dir, &st) != 0)
        return -1;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

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

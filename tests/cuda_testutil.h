/* Helpers shared by the CUDA tests (test_cuda.c, test_cuda_host.c, test_tensorize_cuda.c). */
#ifndef TESSERA_TESTS_CUDA_TESTUTIL_H
#define TESSERA_TESTS_CUDA_TESTUTIL_H

#include <stdbool.h>
#include <stdio.h>

#include "backends/cuda/cuda_impl.h"
#include "tessera/cuda.h"

/* Whether NVRTC can be loaded (probed once; prints a SKIP line the first time it cannot). */
static inline bool tt_have_nvrtc(void)
{
    static int ok = -1;
    if (ok < 0) {
        ok = te_nvrtc_probe() == TE_OK;
        if (!ok)
            printf("[  SKIP    ] NVRTC checks: %s\n", te_cuda_errmsg());
    }
    return ok;
}

/* Writes the host-shim program for emitted CUDA source `src` of program p into f: the shim,
 * the source, one launcher per kernel and the kernel table tsh_main runs (tests/cuda_shim). */
static inline void tt_write_shim_program(FILE *f, const char *src, const te__cuda_program *p)
{
    fprintf(f, "#include \"cuda_shim.h\"\n%s\n", src);
    for (int k = 0; k < p->nkernels; k++)
        fprintf(f, "static void tsh_call_%d(void **a) { tsh_apply(%s, a); }\n", k,
                p->kernels[k].name);
    fprintf(f, "static const tsh_kernel tsh_kernels[] = {\n");
    for (int k = 0; k < p->nkernels; k++) {
        const te__cuda_kernel *kk = &p->kernels[k];
        fprintf(f, "    {\"%s\", tsh_call_%d, {%d, %d, %d}, {%d, %d, %d}, %d, {", kk->name, k,
                kk->grid[0], kk->grid[1], kk->grid[2], kk->block[0], kk->block[1], kk->block[2],
                kk->nparams);
        for (int q = 0; q < kk->nparams; q++)
            fprintf(f, "%s%d", q ? ", " : "", kk->params[q]);
        fprintf(f, "}},\n");
    }
    fprintf(f,
            "};\nint main(int argc, char **argv)\n{\n    return tsh_main(argc, argv, "
            "tsh_kernels, %d);\n}\n",
            p->nkernels);
}

#endif

/*
 * tessera/target.h: the machine code is generated for (te_target), and detecting the host.
 *
 *     te_target t = te_target_host();        // this CPU: model, ISA features, cores
 *     char key[512];
 *     te_target_key(&t, key, sizeof key);   // "c;x86_64;<model>;avx2,fma;...": database key
 *
 * A CUDA target comes from te_target_cuda / te_cuda_target_device (tessera/cuda.h). Algorithms
 * read these facts, never constants.
 */
#ifndef TESSERA_TARGET_H
#define TESSERA_TARGET_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum te_backend_kind { TE_BACKEND_C, TE_BACKEND_CUDA } te_backend_kind;

/* Facts about the machine code is generated for. Algorithms read these, never constants. */
typedef struct te_target {
    te_backend_kind backend;
    int vector_bits;    /* widest native vector register (512 with AVX-512) */
    int num_cores;      /* threads for parallel loops */
    char cpu_model[96]; /* "AMD EPYC 9R14 96-Core Processor" */
    char isa[256];      /* comma-separated ISA features the code may use ("avx512f,fma") */
    const char *cc;     /* C compiler; NULL: $CC or "cc" */
    const char *cflags; /* NULL: $TESSERA_CFLAGS or the default "-O3 -march=native ..." */
    int sm;             /* CUDA: compute capability x10 (90 for sm_90); 0 for the C target */
    int cuda_driver;    /* CUDA: the driver's version (13000 for 13.0) when the target was read
                           from a device (te_cuda_target_device), else 0 */
} te_target;

/* Detects the host CPU for the C backend: model and ISA features from /proc/cpuinfo (less those
 * named in $TESSERA_ISA_EXCLUDE, comma-separated: "avx512f,amx_tile" makes Tessera decide as
 * for a CPU without them; the compiler's -march is left alone), vector width from them, cores from
 * $OMP_NUM_THREADS or the online CPUs. Returns the target by value (nothing to free); what it
 * cannot read keeps a safe default ("unknown" model, no ISA features, 128-bit vectors, one core).
 */
te_target te_target_host(void);
/* Canonical key of a target for the tuning database, written into buf (at most n bytes,
 * NUL-terminated when n > 0): "c;<arch>;<model>;<isa>;<cores>c;<cc version>" for a C target,
 * "cuda;sm_<sm>;<model>" for CUDA ("?" for a NULL target). Returns buf. */
char *te_target_key(const te_target *t, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_TARGET_H */

/* Fuzz target for the .npy reader (te_npy_read_buffer: the preamble, the header's dict literal,
 * the dtype, the shape against the bytes that follow).
 *
 * With clang: built with -fsanitize=fuzzer (libFuzzer supplies main) from tests/fuzz/corpus_npy.
 * With any compiler and -DTE_FUZZ_REPLAY: a plain program whose main() feeds every file named on
 * the command line (directories are walked one level) through the same function, so CTest
 * replays the seed corpus. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    te_npy_array a;
    memset(&a, 0x5a, sizeof a); /* must be reset on every path */
    char err[256];
    err[0] = 0;
    int rc = te_npy_read_buffer(data, size, "fuzz", &a, err, sizeof err);
    if (rc != TE_OK) {
        if (a.data != NULL || !err[0] || rc > 0)
            abort(); /* every failure explains itself and leaves no data */
        return 0;
    }
    /* A read array is consistent with what the buffer held. */
    int64_t n = 1;
    for (int d = 0; d < a.ndim; d++)
        n *= a.shape[d];
    if (!a.data || a.ndim < 0 || a.ndim > TE_MAX_DIMS || n != a.numel ||
        a.nbytes != (size_t)a.numel * te_dtype_size(a.dtype) || a.nbytes > size ||
        memcmp(a.data, data + size - a.nbytes, a.nbytes))
        abort();
    te_npy_array_free(&a);
    return 0;
}

#ifdef TE_FUZZ_REPLAY
#include "fuzz_replay.h"

int main(int argc, char **argv) { return te_fuzz_replay(argc, argv); }
#endif

/* Fuzz target for the ONNX importer (te_graph_from_onnx_buffer: protobuf-c decoding, tensor
 * data, shape folding, node conversion onto the graph).
 *
 * With clang: built with -fsanitize=fuzzer (libFuzzer supplies main); tests/fuzz/run-fuzz.sh
 * builds and runs it from tests/fuzz/corpus_onnx. With any compiler and -DTE_FUZZ_REPLAY: a
 * plain program whose main() feeds every file named on the command line (directories are walked
 * one level) through the same function, so the gcc build compiles it and CTest replays the
 * seed corpus. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/graph.h"
#include "tessera/onnx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    te_graph *g = (te_graph *)&size; /* must be reset on every path */
    char err[512];
    err[0] = 0;
    /* No base directory: external data is refused, so the call is a pure function. */
    int rc = te_graph_from_onnx_buffer(data, size, NULL, "fuzz", "batch=2,seq=4,N=2", &g, NULL, err,
                                       sizeof err);
    if (rc != TE_OK) {
        if (g != NULL || !err[0] || rc > 0)
            abort(); /* every failure explains itself and leaves no graph */
        return 0;
    }
    if (!g)
        abort();
    /* What was imported prints (weights as files is not for the fuzzer: no data dir). */
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (!f)
        abort();
    te_graph_print(g, f, NULL);
    fclose(f);
    free(buf);
    te_graph_free(g);
    return 0;
}

#ifdef TE_FUZZ_REPLAY
#include "fuzz_replay.h"

int main(int argc, char **argv)
{
    int rc = te_fuzz_replay(argc, argv);
    return rc;
}
#endif

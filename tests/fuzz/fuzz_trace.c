/* Fuzz target for the trace parser: te_schedule_apply_trace on arbitrary text.
 *
 * Same conventions as fuzz_db_import.c: with clang, built with -fsanitize=fuzzer (libFuzzer
 * supplies main) by tests/fuzz/run-fuzz.sh; with any compiler and -DTE_FUZZ_REPLAY, a plain
 * program that feeds every file named on the command line (directories one level deep) through
 * the same function, so the normal build compiles it and CTest replays the seed corpus
 * (tests/fuzz/corpus_trace).
 *
 * Invariants: no crash or sanitizer report; a refused trace returns a negative status equal to
 * the context's error code, with a message; an accepted trace prints (te_schedule_trace) a
 * trace that replays onto a fresh schedule of the same expression and prints identically. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/schedule.h"
#include "tessera/te.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* C = A x B (a reduction, so rfactor and cache_write apply), D = relu(C) + bias (a consumer,
 * for compute_at / compute_inline), with placeholders that cache_read can name. */
static te_schedule *make_schedule(te_ctx *ctx)
{
    te_tensor *A = te_placeholder(ctx, "A", TE_F32, 2, (int64_t[]){24, 16});
    te_tensor *B = te_placeholder(ctx, "B", TE_F32, 2, (int64_t[]){16, 20});
    te_tensor *bias = te_placeholder(ctx, "bias", TE_F32, 1, (int64_t[]){20});
    te_expr *i = te_axis(ctx, "i", 24), *j = te_axis(ctx, "j", 20);
    te_expr *k = te_reduce_axis(ctx, "k", 16);
    te_tensor *C =
        te_compute(ctx, "C", 2, (te_expr *[]){i, j},
                   te_sum(ctx, te_mul(ctx, TE_AT(ctx, A, i, k), TE_AT(ctx, B, k, j)), 1, &k));
    te_expr *i2 = te_axis(ctx, "i", 24), *j2 = te_axis(ctx, "j", 20);
    te_tensor *D = te_compute(
        ctx, "D", 2, (te_expr *[]){i2, j2},
        te_add(ctx, te_max(ctx, TE_AT(ctx, C, i2, j2), te_f32(ctx, 0)), TE_AT(ctx, bias, j2)));
    return D ? te_schedule_create(ctx, 1, &D) : NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0'; /* a NUL inside the input ends the trace there */

    te_ctx *ctx = te_ctx_create();
    te_schedule *s = ctx ? make_schedule(ctx) : NULL;
    if (!s)
        abort();
    int rc = te_schedule_apply_trace(s, text);
#ifdef TE_FUZZ_REPLAY
    if (getenv("TE_FUZZ_VERBOSE")) /* which seeds apply, and why the others do not */
        fprintf(stderr, "%d %s\n", rc, rc ? te_ctx_errmsg(ctx) : "ok");
#endif
    if (rc > 0)
        abort(); /* statuses are TE_OK or negative */
    if (rc != TE_OK && (te_ctx_errcode(ctx) != rc || !*te_ctx_errmsg(ctx)))
        abort(); /* every refusal explains itself */
    if (rc == TE_OK) {
        /* What was applied prints as a trace that replays to the same schedule. */
        const char *t1 = te_schedule_trace(s);
        if (!t1)
            abort();
        te_ctx *ctx2 = te_ctx_create();
        te_schedule *s2 = ctx2 ? make_schedule(ctx2) : NULL;
        if (!s2)
            abort();
        if (te_schedule_apply_trace(s2, t1) != TE_OK) {
            fprintf(stderr, "replay of the printed trace failed: %s\n--- trace:\n%s\n",
                    te_ctx_errmsg(ctx2), t1);
            abort();
        }
        const char *t2 = te_schedule_trace(s2);
        if (!t2 || strcmp(t1, t2) != 0) {
            fprintf(stderr, "trace changed on replay:\n--- first:\n%s\n--- replayed:\n%s\n", t1,
                    t2 ? t2 : "(null)");
            abort();
        }
        te_ctx_free(ctx2);
    }
    te_ctx_free(ctx);
    free(text);
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

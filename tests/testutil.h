/* Helpers shared by the cmocka tests. */
#ifndef TESSERA_TESTS_TESTUTIL_H
#define TESSERA_TESTS_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

#include "tessera/schedule.h"

/* A small deterministic PRNG (splitmix64) so failures reproduce from a printed seed. */
typedef struct {
    uint64_t s;
} tt_rng;

void tt_rng_seed(tt_rng *r, uint64_t seed);
uint64_t tt_rng_next(tt_rng *r);
/* Uniform in [lo, hi). */
double tt_rng_uniform(tt_rng *r, double lo, double hi);
/* Uniform integer in [0, n). */
int64_t tt_rng_int(tt_rng *r, int64_t n);
/* Fills n floats with uniform values in [-1, 1), never exactly zero. */
void tt_fill_f32(tt_rng *r, float *p, size_t n);
void tt_fill_f64(tt_rng *r, double *p, size_t n);
/* Fills n floats with NaN so that an output a kernel forgot to write is caught. */
void tt_poison_f32(float *p, size_t n);
/* Converts n elements of dtype `dtype` (a te_dtype) at p to floats in place (p has room for
 * n floats), so that outputs of any dtype compare as f32; f32 is left alone. */
void tt_output_as_f32(void *p, int dtype, size_t n);
/* Max over elements of |got - want| / max(1, |want|); NaN in got returns INFINITY. */
double tt_max_rel_err_f32(const float *got, const double *want, size_t n);
/* The same against f32 values (another run's outputs). */
double tt_max_rel_diff_f32(const float *got, const float *want, size_t n);
/* Seed from $TESSERA_TEST_SEED when set, else `dflt`. */
uint64_t tt_seed(uint64_t dflt);

/* Seconds on the monotonic clock (for deadlines in tests, never for timing assertions). */
double tt_now_s(void);
/* A fresh directory /tmp/tessera-test-<tag>-<pid>-XXXXXX, its path in dir (n bytes). 0, or -1
 * when it cannot be made. */
int tt_tmpdir_make(char *dir, size_t n, const char *tag);
/* Removes dir and everything in it. 0, or -1. */
int tt_tmpdir_remove(const char *dir);
/* A cmocka fixture over a fresh temporary directory: defines `static char dir[256]`, setup and
 * teardown (make and remove it) and path(name) ("dir/name", tt_path_in). */
#define TT_TMPDIR_FIXTURE(tag)                                                                     \
    static char dir[256];                                                                          \
    static int setup(void **state)                                                                 \
    {                                                                                              \
        (void)state;                                                                               \
        return tt_tmpdir_make(dir, sizeof dir, tag);                                               \
    }                                                                                              \
    static int teardown(void **state)                                                              \
    {                                                                                              \
        (void)state;                                                                               \
        return tt_tmpdir_remove(dir);                                                              \
    }                                                                                              \
    static const char *path(const char *name) { return tt_path_in(dir, name); }

/* "dir/name" in one of four static buffers that take turns (so a few can be alive at once). */
const char *tt_path_in(const char *dir, const char *name);

/* The fusion target the graph tests plan for: a 2-core CPU with 256-bit vectors, l2 bytes of
 * L2, 100 GFLOP/s, 20 GB/s and 2 us per kernel launch (fixed facts, so plans do not depend on
 * the machine running the test). */
struct te_fuse_target tt_fuse_target(size_t l2);

/* The one reduction axis of stage st split by `width` and its inner part factored (te_rfactor)
 * into a stage of `width` partial results per output element, their reduction loop outside
 * the lanes and the lanes vectorized: that stage, or NULL when a primitive fails (the message
 * is on the schedule's context). */
te_stage *tt_rf_lanes(te_schedule *s, te_stage *st, int64_t width);

/* Whether schedule s's trace replays onto a fresh schedule of the n_out outputs out (same
 * context) to the same trace, and its C translation (te_trace_to_c) contains c_needle. */
bool tt_trace_replays(te_schedule *s, int n_out, te_tensor *const *out, const char *c_needle);

#endif

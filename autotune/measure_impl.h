/*
 * autotune/measure_impl.h (private to the measurer): the measurer's state and the pieces its
 * three files share.
 *
 *   measure.c        the measurer's life cycle and a batch: building the candidates through
 *                    the backend table (several kernels per compiler run), then running them
 *   measure_child.c  the runner: forked children with per-candidate deadlines, timing
 *   measure_check.c  inputs, poisoned outputs, the reference output and comparing with it
 */
#ifndef TESSERA_AUTOTUNE_MEASURE_IMPL_H
#define TESSERA_AUTOTUNE_MEASURE_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "autotune/tune_impl.h"

/* Most kernel arguments (inputs and outputs) a measurer takes. */
#define MAX_ARGS 32

struct te__measurer {
    te_target target;
    te_measure_options o;
    int n_in, n_out;
    te_tensor *args[MAX_ARGS];
    void *bufs[MAX_ARGS];
    size_t bytes[MAX_ARGS];
    void *ref[MAX_ARGS]; /* outputs only (index n_in + o); shared mappings */
    double tol;
    int ref_ok;
    const char *ref_kind;
    double best_s;
    char *flush;
    size_t flush_bytes;
    uint32_t cold;           /* inputs evicted before each timed run (te__measurer_set_cold) */
    double compile_s, run_s; /* of the last batch */
};

/* Seconds on the monotonic clock. */
double te__meas_now(void);
/* The default compile limit for a machine with this 1-minute load average and core count:
 * 20 s, times the load per core when that is above 1, at most 200 s. */
double te__compile_timeout_for_load(double load1, int ncores);
/* te__compile_timeout_for_load of this machine now (getloadavg, online cores). */
double te__default_compile_timeout(void);

/* ---- measure_check.c */
/* Fills n elements of dtype dt with reproducible random values of the given seed. */
void te__meas_fill_random(void *p, te_dtype dt, size_t n, uint64_t seed);
/* Overwrites n elements so that an unwritten output is noticed (NaN for floats). */
void te__meas_poison(void *p, te_dtype dt, size_t n);
/* Max |got - ref| / max(1, |ref|) over every output of m (NaN counts as infinite); msg
 * (msgsize bytes) describes the worst element. */
double te__meas_check_outputs(const te__measurer *m, char *msg, size_t msgsize);

/* ---- measure_child.c */
/* Runs the built candidates fns[idx[0 .. n)] in forked children (a new child after a crash or a
 * timeout); results into c[idx[q]]: status, err, median_s, spread_s, repeats, max_err. */
void te__meas_run_batch(te__measurer *m, te__cand *c, te_packed_fn *fns, const int *idx, int n);

#endif

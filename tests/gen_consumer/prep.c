/*
 * tests/gen_consumer/prep.c: the Tessera side of the consumer test (run.sh runs it first).
 *
 *   gen_consumer_prep DIR
 *
 * writes DIR/tune.db, a tuning database with one ok record per workload of the test (a fixed
 * configuration of the operator's search space, so the generated kernels are tiled, vectorized
 * and parallel like tuned ones, the same on every run), and DIR/data/<case>_in<i>.f32 (random
 * inputs) and DIR/data/<case>_ref.f64 (outputs of te_reference_eval, the float64 interpreter)
 * for every case the consumer checks. The consumer reads these files; it never sees Tessera.
 */
#define _GNU_SOURCE

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tessera/autotune.h"
#include "tessera/backend.h"
#include "tessera/ops.h"
#include "tessera/tuner.h"
#include "tessera/tuning_db.h"

/* The cases: name (files), operator, shape, whether to record a tuned-like configuration. */
static const struct {
    const char *name, *op, *shape;
    int record;
} cases[] = {
    {"matmul", "matmul", "m=64,n=48,k=40", 1},
    {"multi_a", "matmul", "m=32,n=64,k=16", 1},
    {"multi_b", "matmul", "m=24,n=40,k=72", 0}, /* no record: default schedule */
    {"conv2d", "conv2d", "n=1,c=3,h=16,w=16,oc=8,kh=3,kw=3,pad=1", 1},
    {"softmax", "softmax", "m=32,n=100", 1},
    {"mlp_gate", "mlp_gate", "m=16,n=64,k=48", 1},
};

static int write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "gen_consumer_prep: cannot write %s\n", path);
        return 1;
    }
    return 0;
}

static uint64_t rng_state = 12345;
static float frand(void)
{
    rng_state += 0x9e3779b97f4a7c15ull;
    uint64_t z = rng_state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (float)((double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* A configuration of the operator's space that lowers, from a fixed seed. */
static const char *pick_trace(te_ctx *ctx, const char *op, int ni, te_tensor **in, int no,
                              te_tensor **out, const te_target *tgt, uint64_t seed)
{
    te_space *sp = te_space_create(ctx, op, ni, in, no, out, TE_SPACE_AUTO, tgt);
    if (!sp)
        return NULL;
    te_rng r;
    te_rng_seed(&r, seed);
    te_tensor *args[2 * TE_OP_MAX_IO];
    for (int i = 0; i < ni; i++)
        args[i] = in[i];
    for (int i = 0; i < no; i++)
        args[ni + i] = out[i];
    for (int attempt = 0; attempt < 50; attempt++) {
        const char *tr = te_space_sample(sp, &r);
        te_schedule *s = tr ? te_space_instantiate(sp, tr) : NULL;
        /* prefer parallel, vectorized configurations: they exercise the most of the C */
        if (s && te_lower(s, ni + no, args, op, tgt) && strstr(tr, "parallel") &&
            strstr(tr, "vectorize"))
            return tr;
        te_ctx_clear_error(ctx);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gen_consumer_prep DIR\n");
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/data", argv[1]);
    mkdir(argv[1], 0777);
    mkdir(path, 0777);
    snprintf(path, sizeof path, "%s/tune.db", argv[1]);
    remove(path);
    te_db *db = NULL;
    if (te_db_open(path, NULL, &db) != TE_OK) {
        fprintf(stderr, "gen_consumer_prep: %s: %s\n", path, te_db_errmsg(db));
        return 1;
    }
    te_target tgt = te_target_host();
    te_db_target dbt;
    char storage[1024];
    if (te_tuner_db_target(&tgt, &dbt, storage, sizeof storage) != TE_OK)
        return 1;
    int rc = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0] && !rc; c++) {
        te_ctx *ctx = te_ctx_create();
        te_tensor *in[TE_OP_MAX_IO], *out[TE_OP_MAX_IO];
        int ni = 0, no = 0;
        te_op_params kv;
        char key[512];
        if (te_op_build(ctx, cases[c].op, cases[c].shape, in, &ni, out, &no) != TE_OK ||
            te_op_params_parse(ctx, cases[c].shape, &kv) != TE_OK ||
            te_op_workload_key(ctx, te_op_lookup(cases[c].op), &kv, key, sizeof key) < 0) {
            fprintf(stderr, "gen_consumer_prep: %s: %s\n", cases[c].name, te_ctx_errmsg(ctx));
            rc = 1;
        }
        /* the record */
        if (!rc && cases[c].record) {
            const char *tr = pick_trace(ctx, cases[c].op, ni, in, no, out, &tgt, 7 + c);
            if (!tr) {
                fprintf(stderr, "gen_consumer_prep: %s: no configuration lowers: %s\n",
                        cases[c].name, te_ctx_errmsg(ctx));
                rc = 1;
            } else {
                double flops = te_tuner_flops(no, out);
                te_db_trial t = {.workload = {.key = key, .op = cases[c].op, .flops = flops},
                                 .target = dbt,
                                 .trace = tr,
                                 .status = TE_TRIAL_OK,
                                 .median_s = 2.5e-5,
                                 .spread_s = 1e-7,
                                 .repeats = 10,
                                 .gflops = flops / 2.5e-5 * 1e-9};
                if (te_db_record_trial(db, &t, NULL) != TE_OK) {
                    fprintf(stderr, "gen_consumer_prep: %s\n", te_db_errmsg(db));
                    rc = 1;
                }
            }
        }
        /* inputs and reference outputs */
        void *in_data[TE_OP_MAX_IO] = {0};
        double *ref[TE_OP_MAX_IO] = {0};
        for (int i = 0; i < ni && !rc; i++) {
            size_t n = (size_t)te_tensor_numel(in[i]);
            float *p = malloc(n * sizeof *p);
            in_data[i] = p;
            if (!p)
                rc = 1;
            for (size_t e = 0; p && e < n; e++)
                p[e] = frand();
            snprintf(path, sizeof path, "%s/data/%s_in%d.f32", argv[1], cases[c].name, i);
            if (!rc)
                rc = write_file(path, p, n * sizeof *p);
        }
        for (int i = 0; i < no && !rc; i++)
            if (!(ref[i] = malloc((size_t)te_tensor_numel(out[i]) * sizeof(double))))
                rc = 1;
        if (!rc &&
            te_reference_eval(ctx, ni, in, (const void *const *)in_data, no, out, ref) != TE_OK) {
            fprintf(stderr, "gen_consumer_prep: %s: %s\n", cases[c].name, te_ctx_errmsg(ctx));
            rc = 1;
        }
        for (int i = 0; i < no && !rc; i++) {
            snprintf(path, sizeof path, "%s/data/%s_ref%d.f64", argv[1], cases[c].name, i);
            rc = write_file(path, ref[i], (size_t)te_tensor_numel(out[i]) * sizeof(double));
        }
        for (int i = 0; i < TE_OP_MAX_IO; i++) {
            free(in_data[i]);
            free(ref[i]);
        }
        te_ctx_free(ctx);
    }
    te_db_close(db);
    return rc;
}

/*
 * `tessera target`: the host target's database key, features and recorded peaks; with
 * --measure, measures the peaks (FMA throughput per dtype and vector ISA, copy bandwidth, on
 * one thread and on all of them) and records them with the target in the database, where
 * `tessera db roofline` and `tessera bench --roofline` read them.
 *
 *   tessera target
 *   tessera target --measure --db tune.db
 *   tessera target --measure --quick      # short runs: proves it works, figures are noise
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tessera/target.h"
#include "tessera/tensorize.h"
#include "tessera/tuner.h"
#include "tessera/tuning_db.h"
#include "tools/cli.h"
#include "tools/peak.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: tessera target [--measure [--quick]] [--threads N] [--db FILE]\n\n"
               "Prints the host target's database key, ISA features and the peaks recorded for\n"
               "it. With --measure, first measures them and records them in the database\n"
               "(replacing earlier ones): the FMA peak of f32 and f64 with scalar instructions\n"
               "and with the widest vectors, and the copy bandwidth of a 256 MiB memcpy, each\n"
               "the median of 5 runs on 1 thread and on N. Takes about a minute; run it on an\n"
               "otherwise idle machine.\n\n"
               "  --measure     measure and record the peaks\n"
               "  --quick       with --measure: short runs (for tests; the figures are noise)\n"
               "  --threads N   the thread count of the target (default: $OMP_NUM_THREADS or\n"
               "                the online CPUs), which is part of its key\n"
               "  --db FILE     the database (default: $TESSERA_DB, else ./tessera.db)\n");
}

static void print_peaks(te_db *db, const char *key, const char *path)
{
    te_db_peak_list *l = NULL;
    if (te_db_peaks(db, key, &l) != TE_OK) {
        fprintf(stderr, "tessera target: %s\n", te_db_errmsg(db));
        return;
    }
    if (l->n == 0) {
        printf("peaks:    none recorded in %s (tessera target --measure)\n", path);
    } else {
        time_t t = (time_t)(l->items[0].measured_us / 1000000);
        char when[32];
        strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", gmtime(&t));
        printf("peaks:    recorded in %s, measured %s\n", path, when);
        for (size_t i = 0; i < l->n; i++) {
            const te_db_peak *p = &l->items[i];
            int fma = !strcmp(p->kind, "fma");
            printf("  %-5s %-4s %-7s %3d thread%s %10.2f %s\n", p->kind, p->dtype, p->isa,
                   (int)p->threads, p->threads == 1 ? " " : "s", p->value,
                   fma ? "GFLOP/s" : "GB/s");
        }
    }
    te_db_peak_list_free(l);
}

int te_cmd_target(int argc, char **argv)
{
    static const struct option lo[] = {
        {"measure", no_argument, NULL, 'm'},       {"quick", no_argument, NULL, 'q'},
        {"threads", required_argument, NULL, 't'}, {"db", required_argument, NULL, 'd'},
        {"help", no_argument, NULL, 'h'},          {0}};
    int measure = 0, quick = 0, threads = 0;
    const char *path = NULL;
    opterr = 0;
    optind = 0;
    for (int c; (c = getopt_long(argc, argv, ":h", lo, NULL)) != -1;) {
        char *end;
        switch (c) {
        case 'm':
            measure = 1;
            break;
        case 'q':
            quick = 1;
            break;
        case 't':
            threads = (int)strtol(optarg, &end, 10);
            if (*end || threads < 1 || threads > 4096) {
                fprintf(stderr, "tessera target: bad thread count '%s'\n\n", optarg);
                usage(stderr);
                return 2;
            }
            break;
        case 'd':
            path = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case ':':
            fprintf(stderr, "tessera target: option '%s' needs a value\n\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        default:
            fprintf(stderr, "tessera target: unknown option '%s'\n\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "tessera target: unexpected argument '%s'\n\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (quick && !measure) {
        fprintf(stderr, "tessera target: --quick only goes with --measure\n\n");
        usage(stderr);
        return 2;
    }
    if (!path) {
        const char *env = getenv("TESSERA_DB");
        path = env && *env ? env : "tessera.db";
    }
    te_target tgt = te_target_host();
    if (threads)
        tgt.num_cores = threads;
    te_db_target dbt;
    char storage[1024], key[512];
    if (te_tuner_db_target(&tgt, &dbt, storage, sizeof storage) != TE_OK) {
        fprintf(stderr, "tessera target: cannot describe the host target\n");
        return 1;
    }
    te_db_target_key(&dbt, key, sizeof key);
    dbt.key = key;

    te_db *db = NULL;
    te_db_options o = {.flags = measure ? 0 : TE_DB_NO_CREATE};
    int rc = te_db_open(path, &o, &db);
    if (rc == TE_ERR_READONLY && !measure) {
        te_db_close(db);
        o.flags |= TE_DB_READONLY;
        rc = te_db_open(path, &o, &db);
    }
    if (rc != TE_OK && (measure || rc != TE_ERR_NOT_FOUND)) {
        fprintf(stderr, "tessera target: %s\n", te_db_errmsg(db));
        te_db_close(db);
        return 1;
    }
    if (rc != TE_OK) {
        te_db_close(db);
        db = NULL;
    }

    int status = 0;
    if (measure) {
        long iters = quick ? 20000 : 10000000;
        int runs = quick ? 3 : 5;
        size_t copy_bytes = quick ? (size_t)8 << 20 : 0;
        te_peak_isa widest = te_peak_widest_isa();
        int nt[2] = {1, tgt.num_cores}, nnt = tgt.num_cores > 1 ? 2 : 1;
        te_db_peak peaks[16];
        size_t n = 0;
        for (int d = 0; d < 2; d++)
            for (int k = 0; k < 2; k++) {
                te_peak_isa isa = k ? widest : TE_PEAK_SCALAR;
                for (int t = 0; t < nnt; t++) {
                    double v = te_peak_fma(d, isa, nt[t], iters, runs);
                    fprintf(stderr, "measured: fma %s %s on %d thread(s): %.2f GFLOP/s\n",
                            d ? "f64" : "f32", te_peak_isa_name(isa), nt[t], v);
                    if (v > 0)
                        peaks[n++] = (te_db_peak){
                            "fma", d ? "f64" : "f32", te_peak_isa_name(isa), nt[t], v, 0};
                }
            }
        for (int t = 0; t < nnt; t++) {
            double v = te_peak_copy_gbps(nt[t], copy_bytes, runs);
            fprintf(stderr, "measured: copy on %d thread(s): %.2f GB/s\n", nt[t], v);
            if (v > 0)
                peaks[n++] = (te_db_peak){"copy", "", "", nt[t], v, 0};
        }
        if (te_db_record_peaks(db, &dbt, peaks, n) != TE_OK) {
            fprintf(stderr, "tessera target: %s\n", te_db_errmsg(db));
            status = 1;
        }
    }
    printf("target:   %s\n", key);
    printf("cpu:      %s\n", tgt.cpu_model);
    printf("features: %s\n", tgt.isa);
    printf("vectors:  %d bits\n", tgt.vector_bits);
    printf("threads:  %d\n", tgt.num_cores);
    /* The tensor intrinsics te_tensorize (and the tensorize template) can use here. */
    int ni = te_tensor_intrin_count(), shown = 0;
    for (int i = 0; i < ni; i++) {
        const te_tensor_intrin *in = te_tensor_intrin_at(i);
        if (!te_tensor_intrin_supported(in, &tgt))
            continue;
        printf("%s %-22s %s\n", shown++ ? "         " : "intrins: ", te_tensor_intrin_name(in),
               te_tensor_intrin_doc(in));
    }
    if (!shown)
        printf("intrins:  none of the %d registered tensor intrinsics fits this target\n", ni);
    if (db)
        print_peaks(db, key, path);
    else
        printf("peaks:    none recorded (%s does not exist; tessera target --measure)\n", path);
    te_db_close(db);
    return status;
}

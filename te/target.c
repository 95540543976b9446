/*
 * te/target.c: the host CPU as a te_target, and canonical target keys.
 *
 * The key names everything that makes a compiled kernel's speed or validity differ between
 * machines: architecture, CPU model, the ISA features code may use, threads, and the compiler
 * version ("c;x86_64;AMD EPYC 9R14 96-Core Processor;avx2,avx512f,fma;2c;12.2.0").
 */
#define _GNU_SOURCE

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tessera/target.h"

/* ISA features recorded, in this order. Others (sse2 on x86_64, ...) are implied or do not
 * change generated code. */
static const char *const isa_features[] = {
    "sse4_2",     "avx",      "avx2",     "fma",         "f16c",        "avx512f",     "avx512bw",
    "avx512dq",   "avx512vl", "avx512cd", "avx512_bf16", "avx512_vnni", "avx512_fp16", "avx512ifma",
    "avx512vbmi", "amx_tile", "amx_bf16", "amx_int8",    NULL};

static bool has_flag(const char *flags, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = flags; (p = strstr(p, name)) != NULL; p += n) {
        bool start = p == flags || p[-1] == ' ' || p[-1] == '\t';
        bool end = p[n] == 0 || p[n] == ' ' || p[n] == '\n' || p[n] == '\t';
        if (start && end)
            return true;
    }
    return false;
}

/* Whether the CPU flag `name` is present and not excluded by $TESSERA_ISA_EXCLUDE (a comma- or
 * space-separated list of features to treat as absent: tests and users reproduce the
 * decisions Tessera makes for an older CPU, e.g. "avx512f,amx_tile"; the C compiler's -march
 * is not changed by it). */
static bool host_has(const char *flags, const char *name)
{
    const char *ex = getenv("TESSERA_ISA_EXCLUDE");
    if (ex && *ex) {
        char list[512];
        snprintf(list, sizeof list, "%s", ex);
        for (char *p = list; *p; p++)
            if (*p == ',')
                *p = ' ';
        if (has_flag(list, name))
            return false;
    }
    return has_flag(flags, name);
}

static void trim(char *z)
{
    size_t n = strlen(z);
    while (n && (z[n - 1] == '\n' || z[n - 1] == ' ' || z[n - 1] == '\t'))
        z[--n] = 0;
}

te_target te_target_host(void)
{
    te_target t;
    memset(&t, 0, sizeof t);
    t.backend = TE_BACKEND_C;
    t.vector_bits = 128;
    snprintf(t.cpu_model, sizeof t.cpu_model, "unknown");

    FILE *fp = fopen("/proc/cpuinfo", "r");
    char *flags = NULL;
    if (fp) {
        char *ln = NULL;
        size_t cap = 0;
        bool have_model = false;
        while (getline(&ln, &cap, fp) > 0 && !(have_model && flags)) {
            char *colon = strchr(ln, ':');
            if (!colon)
                continue;
            const char *val = colon + 1;
            while (*val == ' ' || *val == '\t')
                val++;
            if (!have_model && strncmp(ln, "model name", 10) == 0) {
                snprintf(t.cpu_model, sizeof t.cpu_model, "%s", val);
                trim(t.cpu_model);
                have_model = true;
            } else if (!flags && strncmp(ln, "flags", 5) == 0) {
                flags = strdup(val);
            }
        }
        free(ln);
        fclose(fp);
    }
    if (flags) {
        size_t n = 0;
        for (int i = 0; isa_features[i]; i++) {
            if (!host_has(flags, isa_features[i]))
                continue;
            int w = snprintf(t.isa + n, sizeof t.isa - n, "%s%s", n ? "," : "", isa_features[i]);
            if (w < 0 || (size_t)w >= sizeof t.isa - n)
                break;
            n += (size_t)w;
        }
        if (host_has(flags, "avx512f"))
            t.vector_bits = 512;
        else if (host_has(flags, "avx2") || host_has(flags, "avx"))
            t.vector_bits = 256;
        free(flags);
    }
    /* The cpu model may contain ';' which would break the key's fields. */
    for (char *p = t.cpu_model; *p; p++)
        if (*p == ';')
            *p = ',';

    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const char *omp = getenv("OMP_NUM_THREADS");
    if (omp && atoi(omp) > 0)
        cores = atoi(omp);
    t.num_cores = cores > 0 ? (int)cores : 1;
    return t;
}

/* `<cc> -dumpfullversion` (gcc; clang answers -dumpversion); "unknown" when it fails. */
static void read_cc_version(const char *cc, char *out, size_t n)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "%s -dumpfullversion 2>/dev/null || %s -dumpversion 2>/dev/null", cc,
             cc);
    snprintf(out, n, "unknown");
    FILE *p = popen(cmd, "r");
    if (!p)
        return;
    char ln[64];
    if (fgets(ln, sizeof ln, p)) {
        trim(ln);
        if (*ln)
            snprintf(out, n, "%s", ln);
    }
    pclose(p);
}

/* The default compiler's version, read once per process. */
static char default_cc_version[64];
static pthread_once_t default_cc_once = PTHREAD_ONCE_INIT;

static const char *default_cc(void)
{
    const char *cc = getenv("CC");
    return cc && *cc ? cc : "cc";
}

static void read_default_cc_version(void)
{
    read_cc_version(default_cc(), default_cc_version, sizeof default_cc_version);
}

char *te_target_key(const te_target *t, char *buf, size_t n)
{
    if (!buf || !n)
        return buf;
    if (!t) {
        snprintf(buf, n, "?");
        return buf;
    }
    if (t->backend == TE_BACKEND_CUDA) {
        snprintf(buf, n, "cuda;sm_%d;%s", t->sm, t->cpu_model);
        return buf;
    }
    char other[64];
    const char *ver;
    if (t->cc && *t->cc && strcmp(t->cc, default_cc()) != 0) {
        read_cc_version(t->cc, other, sizeof other);
        ver = other;
    } else {
        pthread_once(&default_cc_once, read_default_cc_version);
        ver = default_cc_version;
    }
#if defined(__x86_64__)
    const char *arch = "x86_64";
#elif defined(__aarch64__)
    const char *arch = "aarch64";
#else
    const char *arch = "unknown";
#endif
    snprintf(buf, n, "c;%s;%s;%s;%dc;%s", arch, t->cpu_model, t->isa, t->num_cores, ver);
    return buf;
}

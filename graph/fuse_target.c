/* Target facts for fusion: cores, vectors, the L2 from sysfs, clock and bandwidth estimates,
 * read at run time. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "graph/fuse_internal.h"
#include "tessera/backend.h"

/* ---- Target facts ------------------------------------------------------------------------- */

static long long read_sysfs_size(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char buf[64] = "";
    long long v = -1;
    if (fgets(buf, sizeof buf, f)) {
        char *end;
        v = strtoll(buf, &end, 10);
        if (end == buf)
            v = -1;
        else if (*end == 'K')
            v *= 1024;
        else if (*end == 'M')
            v *= 1024 * 1024;
    }
    fclose(f);
    return v;
}

int te_fuse_target_host(te_fuse_target *t)
{
    if (!t)
        return TE_ERR_ARG;
    memset(t, 0, sizeof *t);
    te_target h = te_target_host();
    snprintf(t->name, sizeof t->name, "cpu");
    snprintf(t->isa, sizeof t->isa, "%s", h.isa);
    t->cores = h.num_cores > 0 ? h.num_cores : 1;
    t->vector_bits = h.vector_bits > 0 ? h.vector_bits : 128;
    const char *l2src = NULL;
    for (int i = 0; i < 8 && !t->l2_bytes; i++) {
        char path[96];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        if (read_sysfs_size(path) != 2)
            continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        long long v = read_sysfs_size(path);
        if (v > 0) {
            t->l2_bytes = (size_t)v;
            l2src = "sysfs";
        }
    }
#ifdef _SC_LEVEL2_CACHE_SIZE
    if (!t->l2_bytes) {
        long v = sysconf(_SC_LEVEL2_CACHE_SIZE);
        if (v > 0) {
            t->l2_bytes = (size_t)v;
            l2src = "sysconf";
        }
    }
#endif
    double ghz = 0;
    const char *clksrc = "assumed 2.0 GHz";
    long long khz = read_sysfs_size("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");
    if (khz > 0) {
        ghz = (double)khz / 1e6;
        clksrc = "cpufreq";
    } else {
        FILE *f = fopen("/proc/cpuinfo", "r");
        char line[256];
        while (f && fgets(line, sizeof line, f))
            if (!strncmp(line, "cpu MHz", 7)) {
                const char *c = strchr(line, ':');
                if (c)
                    ghz = strtod(c + 1, NULL) / 1000.0;
                clksrc = "/proc/cpuinfo";
                break;
            }
        if (f)
            fclose(f);
    }
    if (!(ghz > 0))
        ghz = 2.0;
    t->peak_gflops = t->cores * ghz * (t->vector_bits / 32) * 2.0 * 2.0;
    const char *bw = getenv("TESSERA_MEM_GBPS");
    t->mem_gbps = bw && strtod(bw, NULL) > 0 ? strtod(bw, NULL) : 8.0 * t->cores;
    t->launch_us = 2.0;
    snprintf(t->source, sizeof t->source, "L2 from %s, clock %.2f GHz from %s, bandwidth %s",
             l2src ? l2src : "nowhere", ghz, clksrc, bw ? "$TESSERA_MEM_GBPS" : "estimated");
    return t->l2_bytes ? TE_OK : TE_ERR_IO;
}

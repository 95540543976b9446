/*
 * The replay driver the fuzz targets share when they are built as plain programs
 * (-DTE_FUZZ_REPLAY, any compiler; CTest replays the seed corpora with them): every file named
 * on the command line, and every file one level inside a directory named there, goes through
 * LLVMFuzzerTestOneInput once. Header-only; include it after the target's entry point.
 */
#ifndef TESSERA_TESTS_FUZZ_REPLAY_H
#define TESSERA_TESTS_FUZZ_REPLAY_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Feeds the whole file at path to the target. 0, or 1 when it cannot be read. */
static int te_fuzz_replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return 1;
    }
    char *buf = NULL;
    size_t n = 0, cap = 0, k;
    char chunk[4096];
    while ((k = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (n + k > cap) {
            cap = (n + k) * 2;
            char *p = realloc(buf, cap);
            if (!p)
                abort();
            buf = p;
        }
        memcpy(buf + n, chunk, k);
        n += k;
    }
    fclose(f);
    LLVMFuzzerTestOneInput((const uint8_t *)(buf ? buf : ""), n);
    free(buf);
    return 0;
}

/* Replays argv[1..]: the exit status (0 when every input was read and there was one). */
static int te_fuzz_replay(int argc, char **argv)
{
    int failed = 0, runs = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            perror(argv[i]);
            failed = 1;
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            failed |= te_fuzz_replay_file(argv[i]);
            runs++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        for (struct dirent *e; d && (e = readdir(d));) {
            if (e->d_name[0] == '.')
                continue;
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", argv[i], e->d_name);
            failed |= te_fuzz_replay_file(p);
            runs++;
        }
        if (d)
            closedir(d);
    }
    printf("replayed %d inputs%s\n", runs, failed ? " (some could not be read)" : "");
    return failed || runs == 0;
}

#endif

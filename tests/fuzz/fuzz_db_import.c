/* Fuzz target for the JSON-lines importer (te_db_import_buffer) and the JSON reader under it.
 *
 * With clang: built with -fsanitize=fuzzer (libFuzzer supplies main); tests/fuzz/run-fuzz.sh
 * builds and runs it. With any compiler and -DTE_FUZZ_REPLAY: a plain program whose main()
 * feeds every file named on the command line (directories are walked one level) through the
 * same function, so the gcc build always compiles it and CTest replays the seed corpus. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tessera/tuning_db.h"
#include "tuning_db/json.h"

static te_db *db;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (db) {
        /* Keep the per-input export cheap: start over once the database has grown. */
        te_db_info in;
        if (te_db_get_info(db, &in) != TE_OK)
            abort();
        if (in.n_trials > 2000) {
            te_db_close(db);
            db = NULL;
        }
    }
    if (!db) {
        te_db_options o = {.flags = TE_DB_NO_SYSTEM};
        if (te_db_open(":memory:", &o, &db) != TE_OK)
            abort();
    }
    /* The reader alone, on the whole input. */
    te__json_doc doc = {0};
    te__json_parse(&doc, (const char *)data, size);
    te__json_doc_free(&doc);

    /* The importer: success or a clean error, never a crash, and never a partial import. */
    te_db_info before, after;
    if (te_db_get_info(db, &before) != TE_OK)
        abort();
    te_db_import_stats s;
    int rc = te_db_import_buffer(db, (const char *)data, size, &s);
    if (rc != TE_OK && !*te_db_errmsg(db))
        abort(); /* every failure explains itself */
    if (te_db_get_info(db, &after) != TE_OK)
        abort();
    if (rc != TE_OK && after.n_trials != before.n_trials)
        abort(); /* a failed import kept rows */
    if (rc == TE_OK && after.n_trials != before.n_trials + s.imported)
        abort();
    if (rc == TE_OK && s.imported) {
        /* What was imported exports and re-imports as duplicates only. */
        char *buf = NULL;
        size_t n = 0;
        FILE *f = open_memstream(&buf, &n);
        if (!f || te_db_export(db, f, NULL, NULL, NULL) != TE_OK)
            abort();
        fclose(f);
        if (te_db_import_buffer(db, buf, n, &s) != TE_OK || s.imported != 0)
            abort();
        free(buf);
    }
    return 0;
}

#ifdef TE_FUZZ_REPLAY
static int run_file(const char *path)
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

int main(int argc, char **argv)
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
            failed |= run_file(argv[i]);
            runs++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        for (struct dirent *e; d && (e = readdir(d));) {
            if (e->d_name[0] == '.')
                continue;
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", argv[i], e->d_name);
            failed |= run_file(p);
            runs++;
        }
        if (d)
            closedir(d);
    }
    te_db_close(db);
    printf("replayed %d inputs%s\n", runs, failed ? " (some could not be read)" : "");
    return failed || runs == 0;
}
#endif

/* Fuzz target for the JSON-lines importer (te_db_import_buffer) and the JSON reader under it.
 *
 * With clang: built with -fsanitize=fuzzer (libFuzzer supplies main); tests/fuzz/run-fuzz.sh
 * builds and runs it. With any compiler and -DTE_FUZZ_REPLAY: a plain program whose main()
 * feeds every file named on the command line (directories are walked one level) through the
 * same function, so the gcc build always compiles it and CTest replays the seed corpus. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
#include "fuzz_replay.h"

int main(int argc, char **argv)
{
    int rc = te_fuzz_replay(argc, argv);
    te_db_close(db);
    return rc;
}
#endif

/*
 * tools/db_print.h (CLI-private): the one output path of `tessera db`. Every subcommand prints
 * records through a db_printer: with --json each record is one line holding one JSON object,
 * otherwise the records are rows of a table printed with aligned columns. A field names its
 * JSON member (with a typed value) and its table cell separately, so a record can carry
 * members that the table does not show (uids, traces) and cells formatted for people (times
 * with units) whose JSON value stays a plain number.
 *
 *     db_printer p;
 *     dbp_init(&p, json, 2, (const char *[]){"WORKLOAD", "TRIALS"});
 *     dbp_begin(&p);
 *     dbp_str(&p, "workload", key, key);
 *     dbp_int(&p, "trials", n, db_fmt_i64(buf, sizeof buf, n));
 *     dbp_end(&p);
 *     dbp_finish(&p);
 *
 * JSON goes to stdout as the fields arrive; the table is printed to stdout by dbp_finish.
 */
#ifndef TESSERA_TOOLS_DB_PRINT_H
#define TESSERA_TOOLS_DB_PRINT_H

#include <stddef.h>
#include <stdint.h>

#include "tessera/tuning_db.h"

typedef struct db_printer {
    int json;     /* JSON lines instead of a table */
    int ncol;     /* table columns (at most DBP_MAX_COLS) */
    char **cells; /* table cells, row-major, malloc'ed */
    size_t n, cap;
    size_t rows;   /* records ended so far */
    int nfields;   /* JSON members of the current record (for the commas) */
    int with_head; /* the table's first row is its headings */
} db_printer;

#define DBP_MAX_COLS 16

/* Starts the output: JSON lines when json, else a table of ncol columns whose first row is
 * `headings` (ncol strings, copied; NULL for no heading row). Never fails: a table whose cells
 * cannot be allocated prints the rows it could keep. */
void dbp_init(db_printer *p, int json, int ncol, const char *const *headings);
/* Starts a record (JSON: writes '{'). */
void dbp_begin(db_printer *p);
/* One field of the current record. `key` names its JSON member (NULL: the field is only a
 * table cell) and the typed value is written as JSON (a NULL string as null, a non-finite
 * number as null); `cell` is its table cell (NULL: the field is only a JSON member). In table
 * mode the cells of a record are its columns, in call order. The strings are copied. */
void dbp_str(db_printer *p, const char *key, const char *v, const char *cell);
void dbp_int(db_printer *p, const char *key, int64_t v, const char *cell);
void dbp_num(db_printer *p, const char *key, double v, const char *cell);
void dbp_bool(db_printer *p, const char *key, int v, const char *cell);
/* A field whose JSON value is the preformatted JSON text `json_text` (written as is). */
void dbp_raw(db_printer *p, const char *key, const char *json_text, const char *cell);
/* Ends the record (JSON: writes "}\n"; table: the row must have had ncol cells). */
void dbp_end(db_printer *p);
/* Prints the table with aligned columns (nothing in JSON mode) and frees the printer's memory.
 * Returns the number of records (heading row excluded). */
size_t dbp_finish(db_printer *p);

/* The trials of a list, one record each (best, history): with JSON every column of the trial;
 * as a table, status, times, target and date, then each row's trace as an indented block
 * after the table when with_trace. */
void dbp_trials(const te_db_trial_list *l, int json, int with_trace);

/* Formatting of table cells into buf (n bytes); each returns buf. "-" stands for a missing
 * value (NaN, or a time stamp <= 0). */
const char *db_fmt_time(char *buf, size_t n, double seconds); /* "1.000 ms", "10.00 us", ... */
const char *db_fmt_num(char *buf, size_t n, double x, const char *fmt);
const char *db_fmt_i64(char *buf, size_t n, int64_t x);
/* A byte count: "512 B", "48.0 KiB", "3.0 MiB", ...; "-" for NaN (unknown). */
const char *db_fmt_bytes(char *buf, size_t n, double bytes);
const char *db_fmt_stamp(char *buf, size_t n, int64_t us); /* UTC "2026-12-01 08:31:56Z" */

#endif

/* Opening, validating, migrating and closing tuning databases; errors and transactions. */
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tuning_db/db_impl.h"
#include "tuning_db/schema.h"

/* ---- errors -------------------------------------------------------------------------------- */

int te__db_err(te_db *db, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(db->errmsg, sizeof db->errmsg, fmt, ap);
    va_end(ap);
    return code;
}

void te__db_clear_err(te_db *db) { db->errmsg[0] = '\0'; }

int te__db_wrap(te_db *db, int code, const char *prefix, const char *suffix)
{
    char msg[sizeof db->errmsg];
    memcpy(msg, db->errmsg, sizeof msg);
    size_t n = 0, cap = sizeof db->errmsg - 1;
    const char *parts[3] = {prefix, msg, suffix};
    for (int i = 0; i < 3; i++)
        for (const char *p = parts[i]; p && *p && n < cap; p++)
            db->errmsg[n++] = *p;
    db->errmsg[n] = '\0';
    return code;
}

int te__status_from_sqlite(int rc)
{
    switch (rc & 0xff) {
    case SQLITE_OK:
    case SQLITE_DONE:
    case SQLITE_ROW:
        return TE_OK;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return TE_ERR_BUSY;
    case SQLITE_READONLY:
        return TE_ERR_READONLY;
    case SQLITE_NOMEM:
        return TE_ERR_NOMEM;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
        return TE_ERR_CORRUPT;
    case SQLITE_IOERR:
    case SQLITE_CANTOPEN:
    case SQLITE_FULL:
        return TE_ERR_IO;
    case SQLITE_CONSTRAINT:
    case SQLITE_MISMATCH:
    case SQLITE_RANGE:
        return TE_ERR_ARG;
    default:
        return TE_ERR_DB;
    }
}

int te__db_sqlerr(te_db *db, te__conn *c, int rc, const char *what)
{
    const char *msg = c && c->h ? sqlite3_errmsg(c->h) : sqlite3_errstr(rc);
    if ((rc & 0xff) == SQLITE_BUSY)
        return te__db_err(db, TE_ERR_BUSY,
                          "%s: %s: another process held the database for more than %d ms",
                          c && c->path ? c->path : "database", what, db->busy_timeout_ms);
    return te__db_err(db, te__status_from_sqlite(rc), "%s: %s: %s",
                      c && c->path ? c->path : "database", what, msg);
}

const char *te_db_errmsg(const te_db *db) { return db ? db->errmsg : "out of memory"; }

/* ---- small utilities ----------------------------------------------------------------------- */

struct te__arena_block {
    te__arena_block *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

void *te__arena_alloc(te__arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    te__arena_block *b = a->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 8192 ? n : 8192;
        b = malloc(sizeof *b + cap);
        if (!b)
            return NULL;
        b->used = 0;
        b->cap = cap;
        b->next = a->head;
        a->head = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    return p;
}

char *te__arena_strdup(te__arena *a, const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *p = te__arena_alloc(a, n);
    if (p)
        memcpy(p, s, n);
    return p;
}

void te__arena_free(te__arena *a)
{
    for (te__arena_block *b = a->head, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    a->head = NULL;
}

int64_t te_db_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void te__uuid(char out[37])
{
    unsigned char r[16];
    size_t got = 0;
    while (got < sizeof r) {
        ssize_t k = getrandom(r + got, sizeof r - got, GRND_NONBLOCK);
        if (k <= 0)
            break;
        got += (size_t)k;
    }
    if (got < sizeof r) {
        /* No entropy yet (early boot): time, pid and a counter still make collisions implausible.
         */
        static uint64_t counter;
        uint64_t x = (uint64_t)te_db_now_us() ^ ((uint64_t)getpid() << 40) ^ ++counter;
        for (int i = 0; i < 16; i++) {
            x ^= x >> 33;
            x *= 0xff51afd7ed558ccdull;
            x ^= x >> 29;
            r[i] = (unsigned char)x;
        }
    }
    /* Version 7 (RFC 9562): 48 bits of Unix milliseconds, then 74 random bits. Time-ordered
     * ids append to the end of the uid index instead of landing at random pages, which keeps
     * batched inserts fast in a large database. */
    uint64_t ms = (uint64_t)te_db_now_us() / 1000;
    for (int i = 0; i < 6; i++)
        r[i] = (unsigned char)(ms >> (40 - 8 * i));
    r[6] = (unsigned char)((r[6] & 0x0f) | 0x70);
    r[8] = (unsigned char)((r[8] & 0x3f) | 0x80);
    static const char hex[] = "0123456789abcdef";
    char *p = out;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            *p++ = '-';
        *p++ = hex[r[i] >> 4];
        *p++ = hex[r[i] & 15];
    }
    *p = '\0';
}

void te_db_trace_hash(const char *trace, char out[17])
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)(trace ? trace : ""); *p; p++) {
        h ^= *p;
        h *= 0x100000001b3ull;
    }
    snprintf(out, 17, "%016llx", (unsigned long long)h);
}

static const char *const trial_status_names[] = {
#define TE__TRIAL_NAME(name, str) str,
    TE_TRIAL_STATUS_MAP(TE__TRIAL_NAME)
#undef TE__TRIAL_NAME
};

const char *te_trial_status_str(te_trial_status status)
{
    return (unsigned)status < TE_TRIAL_STATUS_COUNT ? trial_status_names[status] : "?";
}

int te_trial_status_parse(const char *text, te_trial_status *out)
{
    for (int i = 0; text && i < TE_TRIAL_STATUS_COUNT; i++)
        if (!strcmp(text, trial_status_names[i])) {
            *out = (te_trial_status)i;
            return TE_OK;
        }
    return TE_ERR_ARG;
}

const char *te_job_status_str(te_job_status status)
{
    static const char *const names[] = {"running", "finished", "interrupted", "failed"};
    return (unsigned)status < 4 ? names[status] : "?";
}

/* ---- statements and transactions ----------------------------------------------------------- */

#define TE__TRIAL_INSERT_SQL                                                                       \
    "INSERT INTO trials(uid, workload_id, target_id, job_id, trace, trace_hash, status, error, "   \
    "median_s, spread_s, repeats, gflops, created_us, tessera_version, transient, bytes) "         \
    "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)"

const char *const te__trial_cols_sql = TE__TRIAL_SELECT TE__TRIAL_FROM;

static const char *stmt_sql(te__stmt_id id)
{
    switch (id) {
    case TE__ST_TARGET_INSERT:
        return "INSERT INTO targets(key, backend, arch, device, features, sm, cores, compiler, "
               "driver) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) ON CONFLICT(key) DO NOTHING";
    case TE__ST_TARGET_ID:
        return "SELECT id FROM targets WHERE key = ?1";
    case TE__ST_WORKLOAD_INSERT:
        return "INSERT INTO workloads(key, op, expr_hash, shapes, flops) "
               "VALUES(?1, ?2, ?3, ?4, ?5) ON CONFLICT(key) DO NOTHING";
    case TE__ST_WORKLOAD_ID:
        return "SELECT id FROM workloads WHERE key = ?1";
    case TE__ST_TRIAL_INSERT:
        return TE__TRIAL_INSERT_SQL;
    case TE__ST_TRIAL_INSERT_IGNORE:
        return TE__TRIAL_INSERT_SQL " ON CONFLICT(uid) DO NOTHING";
    case TE__ST_JOB_COUNT:
        return "UPDATE jobs SET trials_done = trials_done + ?2 WHERE id = ?1";
    case TE__ST_JOB_INSERT_IGNORE:
        return "INSERT INTO jobs(uid, command, started_us, ended_us, trials_done, "
               "trials_planned, status, host, pid) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) "
               "ON CONFLICT(uid) DO NOTHING";
    case TE__ST_JOB_ID_BY_UID:
        return "SELECT id FROM jobs WHERE uid = ?1";
    case TE__ST_HAS_TRACE:
        return "SELECT 1 FROM trials tr JOIN workloads w ON w.id = tr.workload_id "
               "JOIN targets t ON t.id = tr.target_id "
               "WHERE w.key = ?1 AND t.key = ?2 AND tr.trace_hash = ?3 LIMIT 1";
    case TE__ST_CLAIM_RELEASE:
        return "DELETE FROM claims WHERE workload = ?1 AND target = ?2 AND trace_hash = ?3";
    case TE__ST_TOPK:
        return NULL; /* built at first use from te__trial_cols_sql */
    case TE__ST_COUNT:
        break;
    }
    return NULL;
}

sqlite3_stmt *te__stmt(te_db *db, te__conn *c, te__stmt_id id)
{
    if (!c->st[id]) {
        char sql[2048];
        const char *z = stmt_sql(id);
        if (id == TE__ST_TOPK) {
            snprintf(sql, sizeof sql,
                     "%sWHERE w.key = ?1 AND t.key = ?2 AND tr.status = 'ok' AND "
                     "tr.median_s IS NOT NULL ORDER BY tr.median_s, tr.created_us, tr.id",
                     te__trial_cols_sql);
            z = sql;
        }
        int rc = sqlite3_prepare_v3(c->h, z, -1, SQLITE_PREPARE_PERSISTENT, &c->st[id], NULL);
        if (rc != SQLITE_OK) {
            te__db_sqlerr(db, c, rc, "preparing a statement");
            c->st[id] = NULL;
            return NULL;
        }
    }
    sqlite3_reset(c->st[id]);
    sqlite3_clear_bindings(c->st[id]);
    return c->st[id];
}

int te__exec(te_db *db, te__conn *c, const char *sql)
{
    char *err = NULL;
    int rc = sqlite3_exec(c->h, sql, NULL, NULL, &err);
    if (rc != SQLITE_OK) {
        int code = te__status_from_sqlite(rc);
        if ((rc & 0xff) == SQLITE_BUSY)
            te__db_sqlerr(db, c, rc, "waiting for the write lock");
        else
            te__db_err(db, code, "%s: %s", c->path ? c->path : "database",
                       err ? err : sqlite3_errstr(rc));
        sqlite3_free(err);
        return code;
    }
    return TE_OK;
}

int te__check_writable(te_db *db)
{
    if (db->user.readonly)
        return te__db_err(db, TE_ERR_READONLY, "%s: opened read-only", db->user.path);
    return TE_OK;
}

int te__begin(te_db *db)
{
    /* BEGIN IMMEDIATE takes the write lock up front, so two writers never deadlock upgrading
     * a read transaction; the busy handler waits busy_timeout_ms, and a few more attempts
     * cover the cases where SQLite returns SQLITE_BUSY without calling it (WAL recovery). */
    int rc = SQLITE_BUSY;
    for (int attempt = 0; attempt < 5; attempt++) {
        rc = sqlite3_exec(db->user.h, "BEGIN IMMEDIATE", NULL, NULL, NULL);
        if ((rc & 0xff) != SQLITE_BUSY)
            break;
        usleep(1000u << attempt);
    }
    if (rc != SQLITE_OK)
        return te__db_sqlerr(db, &db->user, rc, "starting a write transaction");
    db->in_txn = 1;
    return TE_OK;
}

int te__commit(te_db *db)
{
    int rc = SQLITE_BUSY;
    for (int attempt = 0; attempt < 5; attempt++) {
        rc = sqlite3_exec(db->user.h, "COMMIT", NULL, NULL, NULL);
        if ((rc & 0xff) != SQLITE_BUSY)
            break;
        usleep(1000u << attempt);
    }
    if (rc != SQLITE_OK) {
        int code = te__db_sqlerr(db, &db->user, rc, "committing");
        te__rollback(db);
        return code;
    }
    db->in_txn = 0;
    return TE_OK;
}

void te__rollback(te_db *db)
{
    if (sqlite3_get_autocommit(db->user.h) == 0)
        sqlite3_exec(db->user.h, "ROLLBACK", NULL, NULL, NULL);
    db->in_txn = 0;
    te__cache_reset(db);
}

void te__cache_reset(te_db *db)
{
    te__id_cache *caches[] = {&db->target_cache, &db->workload_cache, &db->job_cache};
    for (int i = 0; i < 3; i++) {
        free(caches[i]->key);
        caches[i]->key = NULL;
        caches[i]->id = 0;
    }
}

/* ---- opening ------------------------------------------------------------------------------- */

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* 1 when the directory holding `path` may be written by this process. */
static int dir_writable(const char *path)
{
    char *copy = strdup(path);
    if (!copy)
        return 1; /* let SQLite report it */
    int ok = access(dirname(copy), W_OK) == 0;
    free(copy);
    return ok;
}

/* 1 when the file `path` + `suffix` exists; with nonempty, only when it also has bytes. */
static int side_file(const char *path, const char *suffix, int nonempty)
{
    size_t n = strlen(path), k = strlen(suffix);
    char *p = malloc(n + k + 1);
    if (!p)
        return 1;
    memcpy(p, path, n);
    memcpy(p + n, suffix, k + 1);
    struct stat st;
    int yes = stat(p, &st) == 0 && (!nonempty || st.st_size > 0);
    free(p);
    return yes;
}

/* Whether a read-only open must use SQLite's immutable=1: the file is in WAL mode, has no
 * -shm file and no WAL content, and the directory cannot be written, so the -shm that a WAL
 * reader needs cannot be created (SQLite then fails with "attempt to write a readonly
 * database"). With no WAL content, the main file is the whole committed state, and nobody
 * without write access to the directory can be writing it through SQLite's WAL. */
static int needs_immutable(const char *path)
{
    unsigned char h[20];
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    size_t got = fread(h, 1, sizeof h, f);
    fclose(f);
    if (got < sizeof h || h[18] != 2 || h[19] != 2)
        return 0;
    return !side_file(path, "-shm", 0) && !side_file(path, "-wal", 1) && !dir_writable(path);
}

/* "file:" URI of `path` with the query `query`: '%', '?' and '#' are percent-encoded.
 * malloc'ed, NULL when out of memory. */
static char *uri_of(const char *path, const char *query)
{
    size_t n = strlen(path), q = strlen(query);
    char *u = malloc(5 + 3 * n + 1 + q + 1), *p = u;
    if (!u)
        return NULL;
    memcpy(p, "file:", 5);
    p += 5;
    for (const char *s = path; *s; s++) {
        if (*s == '%' || *s == '?' || *s == '#')
            p += sprintf(p, "%%%02X", (unsigned char)*s);
        else
            *p++ = *s;
    }
    *p++ = '?';
    memcpy(p, query, q + 1);
    return u;
}

static int identity_refusal(te_db *db, const char *path, int64_t version, int64_t app,
                            int has_objects);
static int readonly_refusal(te_db *db, const char *path, int64_t version);

/* Checks the file before SQLite sees it, so that nothing SQLite might do to a damaged or
 * foreign file (hot-journal rollback, header rewrite) can happen. *is_new = 1 for a missing or
 * empty file. */
static int precheck_file(te_db *db, const char *path, int readonly, int no_create, int *is_new)
{
    struct stat st;
    *is_new = 0;
    if (stat(path, &st) != 0) {
        if (errno != ENOENT)
            return te__db_err(db, TE_ERR_IO, "%s: %s", path, strerror(errno));
        char *copy = strdup(path);
        if (!copy)
            return te__db_err(db, TE_ERR_NOMEM, "out of memory");
        const char *dir = dirname(copy);
        struct stat dst;
        int dir_ok = stat(dir, &dst) == 0 && S_ISDIR(dst.st_mode);
        int code = TE_OK;
        if (!dir_ok)
            code = te__db_err(db, TE_ERR_IO, "%s: directory '%s' does not exist", path, dir);
        else if (readonly || no_create)
            code = te__db_err(db, TE_ERR_NOT_FOUND, "%s: no such database file", path);
        else if (access(dir, W_OK) != 0)
            code = te__db_err(db, TE_ERR_READONLY,
                              "%s: cannot create the database: directory '%s' is not writable",
                              path, dir);
        free(copy);
        *is_new = 1;
        return code;
    }
    if (!S_ISREG(st.st_mode))
        return te__db_err(db, TE_ERR_IO, "%s: not a regular file", path);
    if (!readonly && ((st.st_mode & 0222) == 0 || access(path, W_OK) != 0))
        return te__db_err(db, TE_ERR_READONLY,
                          "%s: the file is read-only; open it read-only to query it", path);
    if (!readonly && !dir_writable(path))
        return te__db_err(db, TE_ERR_READONLY,
                          "%s: the directory is not writable (SQLite keeps its journal files "
                          "beside the database); open it read-only to query it",
                          path);
    if (st.st_size == 0) {
        /* An empty file becomes a new database, but only when creating is allowed: a
         * query must not write. */
        if (readonly || no_create)
            return te__db_err(db, TE_ERR_CORRUPT, "%s: empty file, not a Tessera database", path);
        *is_new = 1;
        return TE_OK;
    }
    unsigned char h[100];
    FILE *f = fopen(path, "rb");
    if (!f)
        return te__db_err(db, TE_ERR_IO, "%s: %s", path, strerror(errno));
    size_t got = fread(h, 1, sizeof h, f);
    fclose(f);
    if (got < 16 || memcmp(h, "SQLite format 3", 16) != 0)
        return te__db_err(db, TE_ERR_CORRUPT,
                          "%s: not an SQLite database (no SQLite header); file left unchanged",
                          path);
    if (got < sizeof h)
        return te__db_err(db, TE_ERR_CORRUPT,
                          "%s: truncated SQLite database (%zu bytes, shorter than its header); "
                          "file left unchanged",
                          path, got);
    uint32_t page = (uint32_t)h[16] << 8 | h[17];
    if (page == 1)
        page = 65536;
    if (page < 512 || (page & (page - 1)))
        return te__db_err(db, TE_ERR_CORRUPT, "%s: corrupt SQLite header (page size %u)", path,
                          page);
    /* The in-header page count is trustworthy when the change counter matches the
     * version-valid-for number. With a non-empty WAL beside it, the file may legitimately lag
     * (a checkpoint was interrupted), so only check when there is none. */
    size_t n = strlen(path);
    char *wal = malloc(n + 5);
    if (!wal)
        return te__db_err(db, TE_ERR_NOMEM, "out of memory");
    memcpy(wal, path, n);
    memcpy(wal + n, "-wal", 5);
    struct stat wst;
    int has_wal = stat(wal, &wst) == 0 && wst.st_size > 0;
    free(wal);
    uint32_t pages = be32(h + 28);
    if (pages && be32(h + 24) == be32(h + 92)) {
        uint64_t want = (uint64_t)pages * page;
        if (!has_wal && (uint64_t)st.st_size < want)
            return te__db_err(db, TE_ERR_CORRUPT,
                              "%s: truncated database (%lld bytes, its header says %llu); "
                              "file left unchanged",
                              path, (long long)st.st_size, (unsigned long long)want);
    }
    /* Without a non-empty WAL beside it the header is the committed state: refuse a foreign,
     * newer or (read-only) unusable file here, before SQLite opens it. SQLite opening a
     * WAL-mode file creates -wal and -shm files, and a read-only connection leaves them
     * behind, next to a file that is then refused as not modified. read_identity repeats the
     * checks on what SQLite reads (a WAL may hold newer commits). */
    if (has_wal)
        return TE_OK;
    int64_t version = (int32_t)be32(h + 60), app = (int32_t)be32(h + 68);
    int code = identity_refusal(db, path, version, app, be32(h + 40) != 0);
    if (!code && readonly)
        code = readonly_refusal(db, path, version);
    return code;
}

static int query_int(te_db *db, te__conn *c, const char *sql, int64_t *out)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(c->h, sql, -1, &st, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            *out = sqlite3_column_int64(st, 0);
            rc = SQLITE_OK;
        } else if (rc == SQLITE_DONE) {
            *out = 0;
            rc = SQLITE_OK;
        }
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_OK) {
        if ((rc & 0xff) == SQLITE_NOTADB)
            return te__db_err(db, TE_ERR_CORRUPT,
                              "%s: not an SQLite database; file left "
                              "unchanged",
                              c->path);
        return te__db_sqlerr(db, c, rc, "reading the database");
    }
    return TE_OK;
}

/* The refusals that follow from a file's identity: user_version, application_id and whether
 * it holds any schema objects. Shared by the header check (before SQLite opens the file) and
 * read_identity (after), so both refuse the same files with the same words. */
static int identity_refusal(te_db *db, const char *path, int64_t version, int64_t app,
                            int has_objects)
{
    if (app != 0 && app != TE_DB_APPLICATION_ID)
        return te__db_err(db, TE_ERR_CORRUPT,
                          "%s: an SQLite database of another application (application_id "
                          "0x%llx), not a Tessera database; file left unchanged",
                          path, (unsigned long long)app);
    if ((version == 0 && has_objects) || (version > 0 && app == 0))
        return te__db_err(db, TE_ERR_CORRUPT,
                          "%s: an SQLite database but not a Tessera database; file left "
                          "unchanged",
                          path);
    if (version > TE_DB_SCHEMA_VERSION)
        return te__db_err(db, TE_ERR_VERSION,
                          "%s: database schema version %lld is newer than this Tessera "
                          "(%s) supports (version %d); upgrade Tessera to use it. The file "
                          "was not modified",
                          path, (long long)version, te_version(), TE_DB_SCHEMA_VERSION);
    return TE_OK;
}

/* What a read-only open refuses beyond identity_refusal: it can neither create the schema
 * nor migrate an old one. */
static int readonly_refusal(te_db *db, const char *path, int64_t version)
{
    if (version == 0)
        return te__db_err(db, TE_ERR_CORRUPT, "%s: empty database, not a Tessera database", path);
    if (version < TE_DB_SCHEMA_VERSION)
        return te__db_err(db, TE_ERR_VERSION,
                          "%s: schema version %lld is older than this Tessera's (%d) and "
                          "the file is opened read-only; open it read-write once to "
                          "upgrade it",
                          path, (long long)version, TE_DB_SCHEMA_VERSION);
    return TE_OK;
}

/* Identifies the file: *version = user_version; refuses foreign and newer files. */
static int read_identity(te_db *db, te__conn *c, int64_t *version)
{
    /* One statement, so one snapshot: while another process creates the file, separate
     * queries could see the version from before its commit and the tables from after. */
    int64_t app = 0, n_objects = 0;
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(c->h,
                                "SELECT (SELECT user_version FROM pragma_user_version), "
                                "(SELECT application_id FROM pragma_application_id), "
                                "(SELECT count(*) FROM sqlite_master)",
                                -1, &st, NULL);
    if (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        *version = sqlite3_column_int64(st, 0);
        app = sqlite3_column_int64(st, 1);
        n_objects = sqlite3_column_int64(st, 2);
        rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_OK) {
        if ((rc & 0xff) == SQLITE_NOTADB)
            return te__db_err(db, TE_ERR_CORRUPT, "%s: not an SQLite database; file left unchanged",
                              c->path);
        return te__db_sqlerr(db, c, rc, "reading the database header");
    }
    return identity_refusal(db, c->path, *version, app, n_objects > 0);
}

/* Reads the last row of every table: a truncated or damaged file fails here, at open time,
 * rather than in the middle of a tuning job. */
static int probe_tables(te_db *db, te__conn *c)
{
    static const char *const probes[] = {"SELECT max(id) FROM targets",
                                         "SELECT max(id) FROM workloads",
                                         "SELECT max(id) FROM jobs", "SELECT max(id) FROM trials"};
    int64_t v;
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
        int code = query_int(db, c, probes[i], &v);
        if (code)
            return code;
    }
    return TE_OK;
}

static int migrate(te_db *db, te__conn *c)
{
    int code = te__begin(db);
    if (code)
        return code;
    int64_t version = 0;
    /* Another process may have created or migrated the file while we waited for the lock. */
    code = read_identity(db, c, &version);
    for (int v = (int)version; !code && v < TE_DB_SCHEMA_VERSION; v++)
        code = te__exec(db, c, te__schema_migration(v));
    if (!code && version < TE_DB_SCHEMA_VERSION) {
        char sql[96];
        snprintf(sql, sizeof sql, "PRAGMA application_id = %d; PRAGMA user_version = %d",
                 TE_DB_APPLICATION_ID, TE_DB_SCHEMA_VERSION);
        code = te__exec(db, c, sql);
    }
    if (code) {
        te__rollback(db);
        return code;
    }
    return te__commit(db);
}

static int env_true(const char *name)
{
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

/* Sets the journal mode with retries: switching needs the file to itself for a moment, and
 * several processes may be opening a brand new file at the same time. */
static int set_journal_mode(te_db *db, te__conn *c, const char *mode)
{
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA journal_mode = %s", mode);
    int rc = SQLITE_BUSY;
    for (int attempt = 0; attempt < 50 && (rc & 0xff) == SQLITE_BUSY; attempt++) {
        sqlite3_stmt *st = NULL;
        rc = sqlite3_prepare_v2(c->h, sql, -1, &st, NULL);
        if (rc == SQLITE_OK) {
            rc = sqlite3_step(st);
            if (rc == SQLITE_ROW) {
                snprintf(db->journal_mode, sizeof db->journal_mode, "%s",
                         (const char *)sqlite3_column_text(st, 0));
                rc = SQLITE_OK;
            }
        }
        sqlite3_finalize(st);
        if ((rc & 0xff) == SQLITE_BUSY)
            usleep(2000);
    }
    if (rc != SQLITE_OK)
        return te__db_sqlerr(db, c, rc, "setting the journal mode");
    return TE_OK;
}

/* Opens one connection; a read-write open also configures and migrates the file. */
static int conn_open(te_db *db, te__conn *c, const char *path, int flags)
{
    int readonly = !!(flags & TE_DB_READONLY);
    int memory = !strcmp(path, ":memory:");
    int is_new = memory;
    c->readonly = readonly;
    c->path = strdup(path);
    if (!c->path)
        return te__db_err(db, TE_ERR_NOMEM, "out of memory");
    if (!memory) {
        int code = precheck_file(db, path, readonly, !!(flags & TE_DB_NO_CREATE), &is_new);
        if (code)
            return code;
    }
    /* URI names are on so that merge can ATTACH with ?mode=ro; a plain path that happens to
     * start with "file:" is kept a path by prefixing "./". */
    char *name = NULL;
    if (readonly && !memory && needs_immutable(path)) {
        if (!(name = uri_of(path, "immutable=1")))
            return te__db_err(db, TE_ERR_NOMEM, "out of memory");
    } else if (!strncmp(path, "file:", 5)) {
        name = malloc(strlen(path) + 3);
        if (!name)
            return te__db_err(db, TE_ERR_NOMEM, "out of memory");
        strcpy(name, "./");
        strcat(name, path);
    }
    int oflags = (readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) |
                 SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX;
    int rc = sqlite3_open_v2(name ? name : path, &c->h, oflags, NULL);
    free(name);
    if (rc != SQLITE_OK)
        return te__db_sqlerr(db, c, rc, "opening");
    sqlite3_extended_result_codes(c->h, 1);
    sqlite3_busy_timeout(c->h, db->busy_timeout_ms);

    int64_t version = 0;
    int code = read_identity(db, c, &version);
    if (code)
        return code;
    c->schema_version = (int)version;
    if (readonly) {
        if ((code = readonly_refusal(db, path, version)))
            return code;
        code = te__exec(db, c, "PRAGMA query_only = 1");
        if (!code)
            code = probe_tables(db, c);
        return code;
    }
    /* Only now, with the file known to be ours and not newer, may anything be written. */
    if (!memory) {
        int no_wal = (flags & TE_DB_NO_WAL) || env_true("TESSERA_DB_NO_WAL");
        code = set_journal_mode(db, c, no_wal ? "DELETE" : "WAL");
        if (code)
            return code;
    } else {
        snprintf(db->journal_mode, sizeof db->journal_mode, "memory");
    }
    /* WAL + synchronous=NORMAL: a commit survives a crash of the process; a power loss may
     * drop the last commits but never corrupts. A rollback journal needs FULL for the same.
     * A 32 MiB page cache (SQLite's default is 2 MiB) keeps the trace-hash index of a large
     * database in memory while a batch inserts at random places in it. */
    code = te__exec(db, c,
                    !strcmp(db->journal_mode, "wal")
                        ? "PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON; "
                          "PRAGMA cache_size = -32768"
                        : "PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON; "
                          "PRAGMA cache_size = -32768");
    if (code)
        return code;
    if (is_new || version < TE_DB_SCHEMA_VERSION) {
        code = migrate(db, c);
        if (code)
            return code;
        c->schema_version = TE_DB_SCHEMA_VERSION;
    }
    return probe_tables(db, c);
}

static void conn_close(te__conn *c, int *rc_out)
{
    for (int i = 0; i < TE__ST_COUNT; i++)
        sqlite3_finalize(c->st[i]);
    if (c->h) {
        int rc = sqlite3_close(c->h);
        if (rc != SQLITE_OK && rc_out)
            *rc_out = rc;
    }
    free(c->path);
    memset(c, 0, sizeof *c);
}

int te_db_open(const char *path, const te_db_options *opts, te_db **out)
{
    if (!out)
        return TE_ERR_ARG;
    te_db *db = calloc(1, sizeof *db);
    *out = db;
    if (!db)
        return TE_ERR_NOMEM;
    te_db_options o = opts ? *opts : (te_db_options){0};
    db->busy_timeout_ms = o.busy_timeout_ms > 0 ? o.busy_timeout_ms : 10000;
    if (!path || !*path)
        return te__db_err(db, TE_ERR_ARG, "te_db_open: no database path given");
    int code = conn_open(db, &db->user, path, o.flags);
    if (code) {
        conn_close(&db->user, NULL);
        return code;
    }
    const char *sys = o.system_path;
    if (!sys && !(o.flags & TE_DB_NO_SYSTEM)) {
        sys = getenv("TESSERA_SYSTEM_DB");
        if (sys && !*sys)
            sys = NULL;
    }
    if (sys) {
        code = conn_open(db, &db->sys, sys, TE_DB_READONLY);
        if (code) {
            te__db_wrap(db, code, "system database (TESSERA_SYSTEM_DB or option): ", NULL);
            conn_close(&db->sys, NULL);
            conn_close(&db->user, NULL);
            return code;
        }
        db->has_sys = 1;
    }
    te__db_clear_err(db);
    return TE_OK;
}

int te_db_close(te_db *db)
{
    if (!db)
        return TE_OK;
    int rc = SQLITE_OK;
    if (db->in_txn && db->user.h)
        te__rollback(db);
    te__cache_reset(db);
    conn_close(&db->user, &rc);
    conn_close(&db->sys, &rc);
    free(db);
    return rc == SQLITE_OK ? TE_OK : TE_ERR_DB;
}

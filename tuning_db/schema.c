/* The schema and its forward migrations.
 *
 * migrations[v] turns a version-v database into version v+1. A new database runs all of them in
 * order, so the path every old file takes is exercised by every new one. Each step runs inside
 * the caller's BEGIN IMMEDIATE transaction, so a crash leaves the old version intact. Never edit
 * a published step: add a new one and raise TE_DB_SCHEMA_VERSION. */
#include "tuning_db/schema.h"

#include "tessera/tuning_db.h"

static const char *const migrations[] = {
    /* 0 -> 1: the tables, their indexes and the `best` view. */
    "CREATE TABLE targets(\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  key TEXT NOT NULL UNIQUE,\n"
    "  backend TEXT NOT NULL CHECK(backend IN ('c','cuda')),\n"
    "  arch TEXT NOT NULL DEFAULT '',\n"
    "  device TEXT NOT NULL DEFAULT '',\n"
    "  features TEXT NOT NULL DEFAULT '',\n"
    "  sm INTEGER NOT NULL DEFAULT 0,\n"
    "  cores INTEGER NOT NULL DEFAULT 0,\n"
    "  compiler TEXT NOT NULL DEFAULT '',\n"
    "  driver TEXT NOT NULL DEFAULT '');\n"
    "CREATE TABLE workloads(\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  key TEXT NOT NULL UNIQUE,\n"
    "  op TEXT NOT NULL,\n"
    "  expr_hash TEXT NOT NULL DEFAULT '',\n"
    "  shapes TEXT NOT NULL DEFAULT '{}',\n"
    "  flops REAL NOT NULL DEFAULT 0);\n"
    "CREATE TABLE jobs(\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  uid TEXT NOT NULL UNIQUE,\n"
    "  command TEXT NOT NULL DEFAULT '',\n"
    "  started_us INTEGER NOT NULL,\n"
    "  ended_us INTEGER,\n"
    "  trials_done INTEGER NOT NULL DEFAULT 0,\n"
    "  trials_planned INTEGER NOT NULL DEFAULT 0,\n"
    "  status TEXT NOT NULL DEFAULT 'running'\n"
    "    CHECK(status IN ('running','finished','interrupted','failed')));\n"
    "CREATE TABLE trials(\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  uid TEXT NOT NULL UNIQUE,\n"
    "  workload_id INTEGER NOT NULL REFERENCES workloads(id),\n"
    "  target_id INTEGER NOT NULL REFERENCES targets(id),\n"
    "  job_id INTEGER REFERENCES jobs(id) ON DELETE SET NULL,\n"
    "  trace TEXT NOT NULL,\n"
    "  trace_hash TEXT NOT NULL,\n"
    "  status TEXT NOT NULL,\n"
    "  error TEXT NOT NULL DEFAULT '',\n"
    "  median_s REAL,\n"
    "  spread_s REAL,\n"
    "  repeats INTEGER NOT NULL DEFAULT 0,\n"
    "  gflops REAL,\n"
    "  created_us INTEGER NOT NULL,\n"
    "  tessera_version TEXT NOT NULL);\n"
    "CREATE INDEX trials_by_speed ON trials(workload_id, target_id, status, median_s);\n"
    "CREATE INDEX trials_by_hash ON trials(workload_id, target_id, trace_hash);\n"
    "CREATE INDEX trials_by_job ON trials(job_id);\n"
    "CREATE INDEX trials_by_time ON trials(created_us);\n"
    "CREATE VIEW best AS\n"
    "  SELECT w.key AS workload, t.key AS target, tr.*\n"
    "  FROM trials tr\n"
    "  JOIN workloads w ON w.id = tr.workload_id\n"
    "  JOIN targets t ON t.id = tr.target_id\n"
    "  WHERE tr.id = (SELECT x.id FROM trials x\n"
    "                 WHERE x.workload_id = tr.workload_id AND x.target_id = tr.target_id\n"
    "                   AND x.status = 'ok' AND x.median_s IS NOT NULL\n"
    "                 ORDER BY x.median_s, x.created_us, x.id LIMIT 1);\n",

    /* 1 -> 2: jobs remember host and pid (a dead "running" job reads as interrupted), and
     * trials become append-only: rows may be deleted (prune) but never rewritten. */
    "ALTER TABLE jobs ADD COLUMN host TEXT NOT NULL DEFAULT '';\n"
    "ALTER TABLE jobs ADD COLUMN pid INTEGER NOT NULL DEFAULT 0;\n"
    "CREATE TRIGGER trials_append_only BEFORE UPDATE ON trials\n"
    "BEGIN SELECT RAISE(ABORT, 'trials are append-only'); END;\n",

    /* 2 -> 3: claims, so concurrent jobs on one workload never measure a configuration twice
     * (a job claims a trace hash before measuring it; recording the trial or ending the job
     * releases it; an old claim, or one of a job that is no longer running, is stale), and
     * trials remember whether a failure came from the environment (a compiler or run timeout,
     * out of memory), which a later job may retry. */
    "CREATE TABLE claims(\n"
    "  workload TEXT NOT NULL,\n"
    "  target TEXT NOT NULL,\n"
    "  trace_hash TEXT NOT NULL,\n"
    "  job_id INTEGER NOT NULL,\n"
    "  claimed_us INTEGER NOT NULL,\n"
    "  PRIMARY KEY(workload, target, trace_hash));\n"
    "CREATE INDEX claims_by_job ON claims(job_id);\n"
    "ALTER TABLE trials ADD COLUMN transient INTEGER NOT NULL DEFAULT 0;\n",

    /* 3 -> 4: the measured peaks of a target (`tessera target --measure`), for roofline
     * reports: FMA throughput per dtype, vector ISA and thread count, and copy bandwidth per
     * thread count. A new measurement of a target replaces its rows. Nothing else changes, so
     * every existing record is kept as it is. */
    "CREATE TABLE target_peaks(\n"
    "  target_id INTEGER NOT NULL REFERENCES targets(id),\n"
    "  kind TEXT NOT NULL CHECK(kind IN ('fma','copy')),\n"
    "  dtype TEXT NOT NULL DEFAULT '',\n"
    "  isa TEXT NOT NULL DEFAULT '',\n"
    "  threads INTEGER NOT NULL CHECK(threads >= 1),\n"
    "  value REAL NOT NULL,\n"
    "  measured_us INTEGER NOT NULL,\n"
    "  tessera_version TEXT NOT NULL,\n"
    "  PRIMARY KEY(target_id, kind, dtype, isa, threads));\n",

    /* 4 -> 5: trials remember the bytes one run of the measured kernel(s) moves, counted from
     * the lowered IR when the tuner measured it (te_kernel_count), so a roofline report needs
     * no library operator to rebuild: user expressions and fused graph groups get theirs too.
     * NULL = unknown, which every trial recorded before this version reads as; nothing else
     * changes. */
    "ALTER TABLE trials ADD COLUMN bytes REAL;\n",
};

_Static_assert(sizeof migrations / sizeof migrations[0] == TE_DB_SCHEMA_VERSION,
               "one migration step per schema version");

const char *te__schema_migration(int from_version)
{
    if (from_version < 0 || from_version >= TE_DB_SCHEMA_VERSION)
        return NULL;
    return migrations[from_version];
}

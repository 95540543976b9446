/* Private: the SQL of each schema migration step. */
#ifndef TESSERA_TUNING_DB_SCHEMA_H
#define TESSERA_TUNING_DB_SCHEMA_H

/* SQL that upgrades a database from `from_version` to from_version + 1, or NULL when there is
 * no such step (from_version outside [0, TE_DB_SCHEMA_VERSION)). */
const char *te__schema_migration(int from_version);

#endif

/*
 * backends/c/cc.h (private): turn C source text into loaded native code.
 *
 * Source is written into a cache directory keyed by a hash of (source, compiler, flags),
 * compiled with the system C compiler into a shared object, and loaded with dlopen. A second
 * request for the same key reuses the shared object without compiling.
 */
#ifndef TESSERA_BACKENDS_C_CC_H
#define TESSERA_BACKENDS_C_CC_H

#include <stddef.h>
#include <sys/types.h>

/* Compiler settings. NULL fields take the defaults:
 *   cc:    $CC, else "cc"
 *   flags: $TESSERA_CFLAGS, else "-O3 -march=native -fPIC -shared -fopenmp -std=gnu11"
 *   cache_dir: $TESSERA_CACHE_DIR, else $XDG_CACHE_HOME/tessera, else ~/.cache/tessera,
 *              else /tmp/tessera-cache-$UID */
typedef struct te__cc_opts {
    const char *cc;
    const char *flags;
    const char *cache_dir;
} te__cc_opts;

/* A loaded shared object. */
typedef struct te__cc_lib te__cc_lib;

/* Compiles `source` (NUL-terminated C) unless the cache already holds it, then dlopens it.
 * On success returns TE_OK and stores a new handle in *out (free with te__cc_lib_free).
 * On failure returns TE_ERR_COMPILE (compiler diagnostics, the command line and the path of
 * the source file are copied into errbuf), TE_ERR_IO (cache directory not writable) or
 * TE_ERR_LOAD (dlopen failed, dlerror() in errbuf); *out is set to NULL. errbuf may be NULL.
 * Thread-safe and safe against concurrent processes sharing the cache (write to a temporary
 * name, then rename). */
int te__cc_build(const char *source, const te__cc_opts *opts, te__cc_lib **out, char *errbuf,
                 size_t errbuf_size);

/* Compiles several sources with one compiler invocation per source, running up to `jobs`
 * compiles at once (jobs <= 0: one per online core). results[i] receives the status of
 * source i, libs[i] the handle or NULL, errbufs (may be NULL) each errbuf_size bytes. Returns
 * TE_OK when every source built, else the first failing status. */
int te__cc_build_many(int n, const char *const *sources, const te__cc_opts *opts, int jobs,
                      te__cc_lib **libs, int *results, char **errbufs, size_t errbuf_size);

/* Looks up a symbol; NULL if absent. */
void *te__cc_lib_sym(te__cc_lib *lib, const char *name);
/* Path of the cached source file / shared object (owned by the handle). */
const char *te__cc_lib_source_path(const te__cc_lib *lib);
const char *te__cc_lib_so_path(const te__cc_lib *lib);
/* dlcloses and frees. Accepts NULL. */
void te__cc_lib_free(te__cc_lib *lib);

/* cc_proc.c. Starts `/bin/sh -c command` (stdin /dev/null, stdout and stderr on out_fd) under
 * a supervisor that leads a new process group (*pid, which kill(-*pid) ends entirely) and
 * kills that group when this process dies. Returns 0 or an errno value. */
int te__cc_spawn(const char *command, int out_fd, pid_t *pid);
/* Removes the temporaries `<name>.tmp.<pid>.<n>` in dir that are older than a minute and whose
 * process is gone (a job killed while compiling). Returns how many. */
int te__cc_sweep_tmp(const char *dir);
/* te__cc_sweep_tmp(dir), at most once a minute per directory and process. */
void te__cc_sweep_once(const char *dir);

/* te__hash_bytes (the cache keys): backends/backend_impl.h. */

#endif

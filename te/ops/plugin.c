/* Plugins (te_plugin_load): shared libraries that register operators from tessera_plugin_init,
 * checked against the ABI version they were built for. */
#define _GNU_SOURCE

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "te/ops/ops_internal.h"

#define MAX_PLUGINS 64

static void *loaded[MAX_PLUGINS]; /* handles whose init ran */
static int n_loaded;
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;

static int fail(char *err, size_t errsize, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t errsize, int code, const char *fmt, ...)
{
    if (err && errsize) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errsize, fmt, ap);
        va_end(ap);
    }
    return code;
}

static int load_locked(const char *path, char *err, size_t errsize)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        return fail(err, errsize, TE_ERR_IO, "cannot load: %s", why ? why : "dlopen failed");
    }
    for (int i = 0; i < n_loaded; i++)
        if (loaded[i] == h) { /* the same file again: its operators are registered */
            dlclose(h);
            return TE_OK;
        }
    if (n_loaded == MAX_PLUGINS) {
        dlclose(h);
        return fail(err, errsize, TE_ERR_OVERFLOW, "%d plugins are loaded already", MAX_PLUGINS);
    }
    te_plugin_init_fn init;
    void *sym = dlsym(h, "tessera_plugin_init");
    memcpy(&init, &sym, sizeof init); /* ISO C: no direct object-to-function pointer cast */
    const int *abi = dlsym(h, "tessera_plugin_abi_version");
    if (!init || !abi) {
        dlclose(h);
        return fail(err, errsize, TE_ERR_NOT_FOUND,
                    "not a Tessera plugin: it defines no %s (a plugin defines "
                    "tessera_plugin_init and TE_PLUGIN_ABI_DECLARE; include/tessera/ops.h)",
                    !init ? "function tessera_plugin_init" : "tessera_plugin_abi_version");
    }
    if (*abi != TE_PLUGIN_ABI_VERSION) {
        int v = *abi;
        dlclose(h);
        return fail(err, errsize, TE_ERR_UNSUPPORTED,
                    "built for plugin ABI version %d, but this Tessera implements version %d; "
                    "rebuild the plugin against this Tessera's headers",
                    v, TE_PLUGIN_ABI_VERSION);
    }
    /* From here on the plugin stays loaded: what its init registered points into it. */
    loaded[n_loaded++] = h;
    char why[512] = "";
    te__op_set_origin(path);
    int rc = init(TE_PLUGIN_ABI_VERSION, why, sizeof why);
    te__op_set_origin(NULL);
    if (rc)
        return fail(err, errsize, rc < 0 ? rc : TE_ERR_INTERNAL, "tessera_plugin_init failed: %s",
                    why[0] ? why : te_status_str(rc < 0 ? rc : TE_ERR_INTERNAL));
    return TE_OK;
}

int te_plugin_load(const char *path, char *err, size_t errsize)
{
    if (err && errsize)
        err[0] = 0;
    if (!path || !*path)
        return fail(err, errsize, TE_ERR_ARG, "te_plugin_load: no path");
    pthread_mutex_lock(&load_lock);
    int rc = load_locked(path, err, errsize);
    pthread_mutex_unlock(&load_lock);
    return rc;
}

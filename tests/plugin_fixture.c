/* Broken plugins for tests/test_plugin.c, one per FIXTURE value:
 *   1  no tessera_plugin_init           2  built for another ABI version
 *   3  registers "matmul", a library operator's name
 *   4  registers an operator whose attribute has no default (te_op_register refuses it)
 *   5  registers "batch_norm", a graph operator's name (the CLI refuses it) */
#include <stddef.h>

#include "tessera/ops.h"

#if FIXTURE == 2
__attribute__((visibility("default"))) const int tessera_plugin_abi_version =
    TE_PLUGIN_ABI_VERSION + 1;
#else
TE_PLUGIN_ABI_DECLARE
#endif

#if FIXTURE != 1
static int build(te_ctx *ctx, int n_in, te_tensor *const *in, const te_op_params *attrs,
                 const char *name, te_tensor **out, void *user)
{
    (void)ctx, (void)n_in, (void)attrs, (void)name, (void)user;
    out[0] = in[0];
    return TE_OK;
}

__attribute__((visibility("default"))) int tessera_plugin_init(int abi, char *err, size_t errsize);
int tessera_plugin_init(int abi, char *err, size_t errsize)
{
    (void)abi;
    static const te_op_key keys[] = {{"m", NULL, 0, "rows", 0}, {"alpha", NULL, 0, "scale", 0}};
    te_op_def d = {.name = FIXTURE == 3   ? "matmul"
                           : FIXTURE == 5 ? "batch_norm"
                                          : "fixture_op",
                   .nkeys = FIXTURE == 4 ? 2 : 1,
                   .keys = keys,
                   .inputs = "X[m]",
                   .build = build};
    return te_op_register(&d, err, errsize);
}
#else
/* Something else, so the library is not empty. */
__attribute__((visibility("default"))) int not_a_plugin(void);
int not_a_plugin(void) { return 0; }
#endif

/* Placeholders for subcommands whose modules are not built yet; each file that implements
 * a command removes its line here. */
#include <stdio.h>

#include "tools/cli.h"

int te_cmd_bench(int argc, char **argv)
{
    (void)argc;
    fprintf(stderr, "tessera %s: not available in this build yet\n", argv[0]);
    return 1;
}

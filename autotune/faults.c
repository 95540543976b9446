/*
 * autotune/faults.c: the tuner's test hook for faulty candidates (TESSERA_TUNE_INJECT).
 */
#define _GNU_SOURCE

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autotune/tune_impl.h"
#include "backends/c/c_backend.h"
#include "te/internal.h"

/* TESSERA_TUNE_INJECT=segv,hang,wrong,compile replaces the sources of the first candidates of
 * the first batch of each task by kernels that crash, loop forever, write wrong values or do
 * not compile, so the tests can watch the measurer record them and the job go on. */
void te__inject_faults(te__task *k, te__cand *c, int n)
{
    const char *spec = getenv("TESSERA_TUNE_INJECT");
    if (!spec || !*spec || k->injected)
        return;
    k->injected = 1;
    char ident[160];
    te__c_kernel_ident("cand", ident, sizeof ident);
    char list[256];
    snprintf(list, sizeof list, "%s", spec);
    int i = 0;
    for (char *save = NULL, *w = strtok_r(list, ",", &save); w && i < n;
         w = strtok_r(NULL, ",", &save)) {
        while (i < n && c[i].done)
            i++;
        if (i >= n)
            break;
        const char *body;
        if (!strcmp(w, "segv"))
            body = "volatile int *p = (int *)0; *p = 1; return 0;";
        else if (!strcmp(w, "hang"))
            body = "for (;;) __asm__ volatile(\"\"); return 0;";
        else if (!strcmp(w, "wrong"))
            body = NULL;
        else if (!strcmp(w, "compile"))
            body = "this is not C;";
        else
            continue;
        char *src = te__sprintf(k->bctx,
                                "/* injected fault '%s' for %s */\n"
                                "int %s_packed(void **args) { (void)args; %s }\n",
                                w, c[i].hash, ident, body ? body : "");
        if (!body) {
            te_tensor *o = k->outs[0];
            src = te__sprintf(k->bctx,
                              "/* injected fault 'wrong' for %s */\n"
                              "int %s_packed(void **args) {\n"
                              "    float *o = (float *)args[%d];\n"
                              "    for (long i = 0; i < %lld; i++) o[i] = 12345.0f;\n"
                              "    return 0;\n}\n",
                              c[i].hash, ident, k->n_in, (long long)te_tensor_numel(o));
        }
        c[i].source = src;
        i++;
    }
}

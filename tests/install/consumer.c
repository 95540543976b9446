/* A program built against an installed Tessera, through pkg-config or find_package: it
 * defines, schedules, builds and runs a small fused operator and checks the result. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <tessera.h>

int main(void)
{
    if (strcmp(te_version(), TE_VERSION) != 0) {
        fprintf(stderr, "header version %s, library version %s\n", TE_VERSION, te_version());
        return 1;
    }
    te_ctx *ctx = te_ctx_create();
    te_tensor *X = te_placeholder(ctx, "X", TE_F32, 2, (int64_t[]){8, 32});
    te_tensor *Y = te_op_silu(ctx, X, "Y");
    te_schedule *s = te_schedule_create(ctx, 1, &Y);
    te_stage *sy = te_schedule_stage(s, Y);
    te_target tgt = te_target_host();
    te_module *m = NULL;
    if (!s || te_vectorize(sy, te_stage_axis(sy, 1)) ||
        te_build(s, 2, (te_tensor *[]){X, Y}, "silu", &tgt, &m)) {
        fprintf(stderr, "%s\n", te_ctx_errmsg(ctx));
        return 1;
    }
    float x[256], y[256];
    for (int i = 0; i < 256; i++)
        x[i] = (float)(i - 128) / 32.0f;
    te_module_run(m, (void *[]){x, y});
    for (int i = 0; i < 256; i++) {
        double want = x[i] / (1.0 + exp(-(double)x[i]));
        if (fabs(y[i] - want) > 1e-5 * fmax(1.0, fabs(want))) {
            fprintf(stderr, "y[%d] = %g, want %g\n", i, y[i], want);
            return 1;
        }
    }
    printf("installed Tessera %s works\n", te_version());
    te_module_free(m);
    te_ctx_free(ctx);
    return 0;
}

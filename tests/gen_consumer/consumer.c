/*
 * tests/gen_consumer/consumer.c: a project that uses kernels written by `tessera gen` and
 * nothing else of Tessera. It includes only the generated headers (kernels/), loads the inputs
 * and the reference outputs Tessera wrote (data/), runs every kernel and compares; with
 * HAVE_CBLAS it also checks the matmul against OpenBLAS.
 *
 *   ./consumer DATA_DIR        exit status 0 when every result matches
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv2d.h"
#include "matmul.h"
#include "matmul_multi.h"
#include "mlp_gate.h"
#include "softmax.h"

#ifdef HAVE_CBLAS
#include <cblas.h>
#endif

static const char *data_dir;
static int failures;

static void *load(const char *name, size_t elem, size_t count)
{
    char path[1024];
    sprintf(path, "%.900s/%s", data_dir, name);
    FILE *f = fopen(path, "rb");
    void *p = malloc(elem * count + 1);
    size_t got = 0;
    if (f && p) {
        got = fread(p, elem, count, f);
        if (fgetc(f) != EOF)
            got = 0; /* longer than the shape says */
        fclose(f);
    }
    if (!f || !p || got != count) {
        fprintf(stderr, "consumer: %s: cannot read %lu elements\n", path, (unsigned long)count);
        exit(1);
    }
    return p;
}

static float *outbuf(size_t n)
{
    float *p = malloc(n * sizeof *p);
    size_t i;
    if (!p)
        exit(1);
    for (i = 0; i < n; i++)
        p[i] = (float)NAN; /* an element a kernel forgets to write shows up */
    return p;
}

static void check(const char *what, const float *got, const double *want, size_t n, double tol)
{
    double worst = 0;
    size_t i, at = 0;
    for (i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]) / (fabs(want[i]) > 1 ? fabs(want[i]) : 1);
        if (!(d <= worst)) { /* NaN counts as the worst */
            worst = d != d ? INFINITY : d;
            at = i;
        }
    }
    printf("%-28s max rel. error %.3g%s\n", what, worst, worst <= tol ? "" : "  FAILED");
    if (!(worst <= tol)) {
        fprintf(stderr, "  element %lu: got %g, want %g\n", (unsigned long)at, got[at], want[at]);
        failures++;
    }
}

static void expect_rc(const char *what, int rc, int want)
{
    if (rc != want) {
        fprintf(stderr, "%s returned %d, expected %d\n", what, rc, want);
        failures++;
    }
}

int main(int argc, char **argv)
{
    float *a, *b, *c, *w, *x, *y;
    double *ref;
    if (argc != 2) {
        fprintf(stderr, "usage: consumer DATA_DIR\n");
        return 2;
    }
    data_dir = argv[1];

    /* matmul 64 x 48 x 40: C = A B */
    a = load("matmul_in0.f32", 4, 64 * 40);
    b = load("matmul_in1.f32", 4, 40 * 48);
    ref = load("matmul_ref0.f64", 8, 64 * 48);
    c = outbuf(64 * 48);
    expect_rc("matmul", matmul(a, b, c), 0);
    check("matmul 64x48x40", c, ref, 64 * 48, 1e-4);
#ifdef HAVE_CBLAS
    {
        float *cb = outbuf(64 * 48);
        double *d = malloc(64 * 48 * sizeof *d);
        int i;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 64, 48, 40, 1.0f, a, 40, b, 48, 0.0f,
                    cb, 48);
        for (i = 0; i < 64 * 48; i++)
            d[i] = cb[i];
        check("matmul vs OpenBLAS sgemm", c, d, 64 * 48, 1e-5);
        free(cb);
        free(d);
    }
#endif
    free(a), free(b), free(c), free(ref);

    /* two shapes behind one dispatcher */
    a = load("multi_a_in0.f32", 4, 32 * 16);
    b = load("multi_a_in1.f32", 4, 16 * 64);
    ref = load("multi_a_ref0.f64", 8, 32 * 64);
    c = outbuf(32 * 64);
    expect_rc("matmul_multi(32, 64, 16)", matmul_multi(32, 64, 16, a, b, c), 0);
    check("dispatch m=32,n=64,k=16", c, ref, 32 * 64, 1e-4);
    expect_rc("matmul_multi(3, 4, 5)", matmul_multi(3, 4, 5, a, b, c), -2);
    free(a), free(b), free(c), free(ref);
    a = load("multi_b_in0.f32", 4, 24 * 72);
    b = load("multi_b_in1.f32", 4, 72 * 40);
    ref = load("multi_b_ref0.f64", 8, 24 * 40);
    c = outbuf(24 * 40);
    expect_rc("matmul_multi(24, 40, 72)", matmul_multi(24, 40, 72, a, b, c), 0);
    check("dispatch m=24,n=40,k=72", c, ref, 24 * 40, 1e-4);
    free(a), free(b), free(c), free(ref);

    /* conv2d NCHW 1x3x16x16, 8 filters 3x3, padding 1 */
    x = load("conv2d_in0.f32", 4, 3 * 16 * 16);
    w = load("conv2d_in1.f32", 4, 8 * 3 * 3 * 3);
    ref = load("conv2d_ref0.f64", 8, 8 * 16 * 16);
    y = outbuf(8 * 16 * 16);
    expect_rc("conv2d", conv2d(x, w, y), 0);
    check("conv2d 1x3x16x16 * 8x3x3x3", y, ref, 8 * 16 * 16, 1e-4);
    free(x), free(w), free(y), free(ref);

    /* softmax over the rows of 32 x 100 */
    x = load("softmax_in0.f32", 4, 32 * 100);
    ref = load("softmax_ref0.f64", 8, 32 * 100);
    y = outbuf(32 * 100);
    expect_rc("softmax", softmax(x, y), 0);
    check("softmax 32x100", y, ref, 32 * 100, 1e-5);
    free(x), free(y), free(ref);

    /* MLP gate: silu(X W1) * (X W3), X 16 x 48, W 48 x 64 */
    x = load("mlp_gate_in0.f32", 4, 16 * 48);
    a = load("mlp_gate_in1.f32", 4, 48 * 64);
    b = load("mlp_gate_in2.f32", 4, 48 * 64);
    ref = load("mlp_gate_ref0.f64", 8, 16 * 64);
    y = outbuf(16 * 64);
    expect_rc("mlp_gate", mlp_gate(x, a, b, y), 0);
    check("mlp_gate 16x64x48", y, ref, 16 * 64, 1e-4);
    free(x), free(a), free(b), free(y), free(ref);

    if (failures)
        fprintf(stderr, "consumer: %d check(s) failed\n", failures);
    return failures ? 1 : 0;
}

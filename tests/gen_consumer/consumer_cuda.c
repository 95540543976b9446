/*
 * tests/gen_consumer/consumer_cuda.c: runs CUDA kernels written by `tessera gen` (matmul.cu,
 * softmax.cu) through their host launchers, both the host-pointer one and the device-pointer
 * one on a stream, and compares with the reference values Tessera wrote. Built by run.sh with
 * nvcc only when a GPU is present.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "matmul.h"
#include "softmax.h"

static int failures;

static void *load(const char *dir, const char *name, size_t bytes)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    void *p = malloc(bytes);
    if (!f || !p || fread(p, 1, bytes, f) != bytes) {
        fprintf(stderr, "consumer_cuda: cannot read %s\n", path);
        exit(1);
    }
    fclose(f);
    return p;
}

static void check(const char *what, const float *got, const double *want, size_t n)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(got[i] - want[i]) / (fabs(want[i]) > 1 ? fabs(want[i]) : 1);
        if (!(d <= worst))
            worst = d != d ? INFINITY : d;
    }
    printf("%-34s max rel. error %.3g%s\n", what, worst, worst <= 1e-4 ? "" : "  FAILED");
    failures += !(worst <= 1e-4);
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "data";
    float *a = load(dir, "matmul_in0.f32", 64 * 40 * 4),
          *b = load(dir, "matmul_in1.f32", 40 * 48 * 4);
    double *ref = load(dir, "matmul_ref0.f64", 64 * 48 * 8);
    float *c = malloc(64 * 48 * 4);
    int rc = matmul_host(a, b, c);
    if (rc)
        fprintf(stderr, "matmul_host: %d\n", rc), failures++;
    check("CUDA matmul (host pointers)", c, ref, 64 * 48);

    /* device pointers on a stream */
    void *da, *db, *dc;
    cudaStream_t st;
    cudaStreamCreate(&st);
    cudaMalloc(&da, 64 * 40 * 4);
    cudaMalloc(&db, 40 * 48 * 4);
    cudaMalloc(&dc, 64 * 48 * 4);
    cudaMemcpy(da, a, 64 * 40 * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(db, b, 40 * 48 * 4, cudaMemcpyHostToDevice);
    rc = matmul_launch(da, db, dc, st);
    cudaStreamSynchronize(st);
    cudaMemcpy(c, dc, 64 * 48 * 4, cudaMemcpyDeviceToHost);
    if (rc)
        fprintf(stderr, "matmul_launch: %d\n", rc), failures++;
    check("CUDA matmul (device pointers)", c, ref, 64 * 48);
    cudaFree(da), cudaFree(db), cudaFree(dc), cudaStreamDestroy(st);

    float *x = load(dir, "softmax_in0.f32", 32 * 100 * 4), *y = malloc(32 * 100 * 4);
    double *sref = load(dir, "softmax_ref0.f64", 32 * 100 * 8);
    rc = softmax_host(x, y);
    if (rc)
        fprintf(stderr, "softmax_host: %d\n", rc), failures++;
    check("CUDA softmax (host pointers)", y, sref, 32 * 100);
    free(a), free(b), free(c), free(ref), free(x), free(y), free(sref);
    return failures ? 1 : 0;
}

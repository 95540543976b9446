/* te_npy_read / te_npy_write (tessera/npy.h): files written byte by byte from hand-made headers
 * of every format version, round trips, the refusals (Fortran order, big-endian, unknown
 * dtypes), and corrupt headers: every truncation of a valid file, bad magic, shapes claiming
 * more than the file holds or than any file can hold, and random byte mutations. */
// clang-format off
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
// clang-format on

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/npy.h"
#include "testutil.h"

static char g_dir[256];

/* A .npy image: magic, version major.0, the header dict padded to 64 bytes, then data. */
static size_t make_npy(unsigned char *buf, int major, const char *dict, const void *data,
                       size_t nbytes)
{
    size_t lenbytes = major == 1 ? 2 : 4, pre = 8 + lenbytes;
    size_t dl = strlen(dict), total = (pre + dl + 1 + 63) / 64 * 64, hlen = total - pre;
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major;
    buf[7] = 0;
    buf[8] = (unsigned char)(hlen & 0xff);
    buf[9] = (unsigned char)(hlen >> 8);
    if (lenbytes == 4)
        buf[10] = buf[11] = 0;
    memcpy(buf + pre, dict, dl);
    memset(buf + pre + dl, ' ', hlen - dl - 1);
    buf[pre + hlen - 1] = '\n';
    if (nbytes)
        memcpy(buf + total, data, nbytes);
    return total + nbytes;
}

static const char *write_file(const char *name, const unsigned char *buf, size_t n)
{
    const char *path = tt_path_in(g_dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
    return path;
}

static int setup(void **state)
{
    (void)state;
    return tt_tmpdir_make(g_dir, sizeof g_dir, "npy");
}

static int teardown(void **state)
{
    (void)state;
    return tt_tmpdir_remove(g_dir);
}

static void test_hand_made_headers_of_each_version_and_dtype_read(void **state)
{
    (void)state;
    static unsigned char buf[4096];
    float f[6] = {1.5f, -2, 3, 4, 5, 6.25f};
    size_t n = make_npy(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", f,
                        sizeof f);
    te_npy_array a;
    char err[256];
    assert_int_equal(te_npy_read(write_file("v1.npy", buf, n), &a, err, sizeof err), TE_OK);
    assert_int_equal(a.dtype, TE_F32);
    assert_int_equal(a.ndim, 2);
    assert_int_equal(a.shape[0], 2);
    assert_int_equal(a.shape[1], 3);
    assert_int_equal(a.numel, 6);
    assert_int_equal(a.nbytes, sizeof f);
    assert_memory_equal(a.data, f, sizeof f);
    te_npy_array_free(&a);
    assert_null(a.data);

    /* 2.0, double quotes, keys in another order, no trailing comma, a 1-d shape "(4,)". */
    int64_t l[4] = {1, -2, 1LL << 40, 7};
    n = make_npy(buf, 2, "{\"shape\": (4,), \"fortran_order\": False, \"descr\": \"<i8\"}", l,
                 sizeof l);
    assert_int_equal(te_npy_read(write_file("v2.npy", buf, n), &a, err, sizeof err), TE_OK);
    assert_int_equal(a.dtype, TE_I64);
    assert_int_equal(a.ndim, 1);
    assert_int_equal(a.shape[0], 4);
    assert_memory_equal(a.data, l, sizeof l);
    te_npy_array_free(&a);

    /* 3.0, a scalar of bool. */
    unsigned char b = 1;
    n = make_npy(buf, 3, "{'descr': '|b1', 'fortran_order': False, 'shape': (), }", &b, 1);
    assert_int_equal(te_npy_read_buffer(buf, n, "v3", &a, err, sizeof err), TE_OK);
    assert_int_equal(a.dtype, TE_BOOL);
    assert_int_equal(a.ndim, 0);
    assert_int_equal(a.numel, 1);
    assert_int_equal(((unsigned char *)a.data)[0], 1);
    te_npy_array_free(&a);

    double d[2] = {0.25, -1e300};
    n = make_npy(buf, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 2), }", d,
                 sizeof d);
    assert_int_equal(te_npy_read_buffer(buf, n, NULL, &a, err, sizeof err), TE_OK);
    assert_int_equal(a.dtype, TE_F64);
    assert_memory_equal(a.data, d, sizeof d);
    te_npy_array_free(&a);

    int32_t i[3] = {-1, 0, 5};
    n = make_npy(buf, 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (3, 1, 1), }", i,
                 sizeof i);
    assert_int_equal(te_npy_read_buffer(buf, n, NULL, &a, err, sizeof err), TE_OK);
    assert_int_equal(a.dtype, TE_I32);
    assert_int_equal(a.ndim, 3);
    assert_memory_equal(a.data, i, sizeof i);
    te_npy_array_free(&a);

    /* An empty array is valid. */
    n = make_npy(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 5), }", NULL, 0);
    assert_int_equal(te_npy_read_buffer(buf, n, NULL, &a, err, sizeof err), TE_OK);
    assert_int_equal(a.numel, 0);
    te_npy_array_free(&a);
}

static void test_write_then_read_round_trips_with_a_64_byte_aligned_header(void **state)
{
    (void)state;
    float f[24];
    for (int k = 0; k < 24; k++)
        f[k] = (float)k * 0.5f - 3;
    const char *path = tt_path_in(g_dir, "rt.npy");
    char err[256];
    assert_int_equal(te_npy_write(path, TE_F32, 3, (int64_t[]){2, 3, 4}, f, err, sizeof err),
                     TE_OK);
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    unsigned char head[128];
    assert_int_equal(fread(head, 1, sizeof head, fp), sizeof head);
    fclose(fp);
    assert_memory_equal(head, "\x93NUMPY\x01\x00", 8);
    size_t hlen = head[8] | (size_t)head[9] << 8;
    assert_int_equal((10 + hlen) % 64, 0);
    assert_int_equal(head[10 + hlen - 1], '\n');
    assert_memory_equal(head + 10, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 4), }",
                        61);
    te_npy_array a;
    assert_int_equal(te_npy_read(path, &a, err, sizeof err), TE_OK);
    assert_int_equal(a.ndim, 3);
    assert_int_equal(a.shape[2], 4);
    assert_memory_equal(a.data, f, sizeof f);
    te_npy_array_free(&a);

    /* One dimension is written "(5,)", as Python spells a 1-tuple. */
    int64_t l[5] = {1, 2, 3, 4, 5};
    assert_int_equal(te_npy_write(path, TE_I64, 1, (int64_t[]){5}, l, err, sizeof err), TE_OK);
    assert_int_equal(te_npy_read(path, &a, err, sizeof err), TE_OK);
    assert_int_equal(a.dtype, TE_I64);
    assert_memory_equal(a.data, l, sizeof l);
    te_npy_array_free(&a);

    /* Refused dtypes and paths. */
    assert_int_equal(te_npy_write(path, TE_DTYPE_COUNT, 1, (int64_t[]){1}, l, err, sizeof err),
                     TE_ERR_ARG);
    assert_int_equal(
        te_npy_write("/nonexistent-dir/x.npy", TE_I64, 1, (int64_t[]){1}, l, err, sizeof err),
        TE_ERR_IO);
    assert_non_null(strstr(err, "/nonexistent-dir/x.npy"));
    assert_int_equal(te_npy_read("/nonexistent-dir/x.npy", &a, err, sizeof err), TE_ERR_IO);
    assert_non_null(strstr(err, "cannot open"));
}

static void expect_fail(const unsigned char *buf, size_t n, int code, const char *needle)
{
    te_npy_array a;
    char err[256];
    int rc = te_npy_read_buffer(buf, n, "t.npy", &a, err, sizeof err);
    if (rc != code || !strstr(err, needle))
        fail_msg("rc %d (want %d), message '%s' (want '%s')", rc, code, err, needle);
    assert_null(a.data);
    /* The file path gives the same answer. */
    rc = te_npy_read(write_file("bad.npy", buf, n), &a, err, sizeof err);
    if (rc != code || !strstr(err, needle))
        fail_msg("file: rc %d (want %d), message '%s' (want '%s')", rc, code, err, needle);
    assert_null(a.data);
}

static void test_fortran_order_big_endian_and_other_dtypes_are_refused_clearly(void **state)
{
    (void)state;
    static unsigned char buf[4096];
    float f[4] = {1, 2, 3, 4};
    size_t n =
        make_npy(buf, 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", f, sizeof f);
    expect_fail(buf, n, TE_ERR_UNSUPPORTED, "Fortran-order");
    n = make_npy(buf, 1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 2), }", f,
                 sizeof f);
    expect_fail(buf, n, TE_ERR_UNSUPPORTED, "big-endian data ('>f4')");
    n = make_npy(buf, 1, "{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", f, 16);
    expect_fail(buf, n, TE_ERR_UNSUPPORTED, "dtype '<c8' is not supported");
    n = make_npy(buf, 1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (4,), }", f,
                 sizeof f);
    expect_fail(buf, n, TE_ERR_CORRUPT, "structured dtypes");
    buf[6] = 4;
    expect_fail(buf, n, TE_ERR_UNSUPPORTED, "version 4.0 is not supported");
}

static void test_corrupt_headers_fail_with_a_message_and_never_allocate_the_claim(void **state)
{
    (void)state;
    static unsigned char buf[4096], good[4096];
    float f[6] = {1, 2, 3, 4, 5, 6};
    size_t n = make_npy(good, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", f,
                        sizeof f);
    /* Every truncation. */
    for (size_t k = 0; k < n; k++) {
        te_npy_array a;
        char err[256] = "";
        int rc = te_npy_read_buffer(good, k, "t.npy", &a, err, sizeof err);
        if (rc == TE_OK || !strstr(err, "t.npy: "))
            fail_msg("truncated to %zu bytes: rc %d, '%s'", k, rc, err);
        assert_null(a.data);
    }
    memcpy(buf, good, n);
    buf[1] = 'X';
    expect_fail(buf, n, TE_ERR_CORRUPT, "no \\x93NUMPY magic");
    expect_fail(good, n - 8, TE_ERR_CORRUPT, "claims 24 bytes of data but the file holds 16");
    memcpy(buf, good, n);
    buf[n] = 0;
    expect_fail(buf, n + 1, TE_ERR_CORRUPT, "claims 24 bytes of data but the file holds 25");
    /* A huge shape in a small file: refused before allocating. */
    n = make_npy(buf, 1,
                 "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000, 1000000000), }", f,
                 sizeof f);
    expect_fail(buf, n, TE_ERR_CORRUPT, "claims 4000000000000000000 bytes");
    n = make_npy(buf, 1,
                 "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", f,
                 sizeof f);
    expect_fail(buf, n, TE_ERR_CORRUPT, "more elements than any file can hold");
    n = make_npy(buf, 1,
                 "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", f,
                 sizeof f);
    expect_fail(buf, n, TE_ERR_CORRUPT, "too large");
    n = make_npy(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-2, 3), }", f,
                 sizeof f);
    expect_fail(buf, n, TE_ERR_CORRUPT, "non-negative integers");
    n = make_npy(buf, 1, "{'descr': '<f4', 'shape': (2, 3), }", f, sizeof f);
    expect_fail(buf, n, TE_ERR_CORRUPT, "lacks 'fortran_order'");
    n = make_npy(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1}", f,
                 sizeof f);
    expect_fail(buf, n, TE_ERR_CORRUPT, "unexpected key 'x'");
    n = make_npy(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } junk", f,
                 sizeof f);
    expect_fail(buf, n, TE_ERR_CORRUPT, "text after the header");
    n = make_npy(buf, 1, "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2, 3), }", f,
                 sizeof f);
    expect_fail(buf, n, TE_ERR_CORRUPT, "not True or False");
    n = make_npy(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,2,3,4,5,6,7,8,9)}",
                 f, sizeof f);
    expect_fail(buf, n, TE_ERR_CORRUPT, "more than 8 dimensions");
    /* Version 2.0 with a header length of 4 GiB - 1. */
    n = make_npy(buf, 2, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", f,
                 sizeof f);
    buf[8] = buf[9] = buf[10] = buf[11] = 0xff;
    expect_fail(buf, n, TE_ERR_CORRUPT, "the header claims 4294967295 bytes");
    /* Header length past the end of the file (version 1.0). */
    memcpy(buf, good, 64);
    buf[8] = 0xff;
    buf[9] = 0x7f;
    expect_fail(buf, 64, TE_ERR_CORRUPT, "truncated: the header claims 32767 bytes");

    /* Random mutations of the valid file: each reads (with consistent sizes) or fails with a
     * message; never a crash. */
    tt_rng r;
    tt_rng_seed(&r, tt_seed(7));
    size_t gn = make_npy(good, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", f,
                         sizeof f);
    for (int it = 0; it < 20000; it++) {
        memcpy(buf, good, gn);
        int muts = 1 + (int)tt_rng_int(&r, 4);
        for (int m = 0; m < muts; m++) {
            size_t at = (size_t)tt_rng_int(&r, 140);
            buf[at] = (unsigned char)tt_rng_int(&r, 256);
        }
        size_t len = tt_rng_int(&r, 8) ? gn : (size_t)tt_rng_int(&r, (int64_t)gn + 1);
        te_npy_array a;
        char err[256] = "";
        int rc = te_npy_read_buffer(buf, len, "m.npy", &a, err, sizeof err);
        if (rc == TE_OK) {
            assert_non_null(a.data);
            assert_true(a.nbytes <= len);
            te_npy_array_free(&a);
        } else {
            assert_null(a.data);
            assert_true(strncmp(err, "m.npy: ", 7) == 0 && strlen(err) > 7);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_made_headers_of_each_version_and_dtype_read),
        cmocka_unit_test(test_write_then_read_round_trips_with_a_64_byte_aligned_header),
        cmocka_unit_test(test_fortran_order_big_endian_and_other_dtypes_are_refused_clearly),
        cmocka_unit_test(test_corrupt_headers_fail_with_a_message_and_never_allocate_the_claim),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

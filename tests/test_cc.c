/* Tests for backends/c/cc.c: compile, cache, load, and every way that can fail. */
#define _GNU_SOURCE

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "backends/backend_impl.h"
#include "backends/c/cc.h"
#include "tessera/status.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ERRBUF 4096

/* Flags without -march=native or -fopenmp, which most tests do not need and compile faster. */
#define QUICK_FLAGS "-O1 -fPIC -shared -std=gnu11"

typedef int (*int_fn)(void);

/* Each test run uses fresh sources so that the compile path runs, not only the cache. */
static char nonce[64];

static int setup_nonce(void **state)
{
    (void)state;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(nonce, sizeof nonce, "%ld_%lld_%ld", (long)getpid(), (long long)ts.tv_sec,
             (long)ts.tv_nsec);
    return 0;
}

/* The cache directory the library will use when given no option: the test environment sets
 * TESSERA_CACHE_DIR; by hand it may be unset, then use one under /tmp. */
static const char *base_dir(void)
{
    static char dir[512];
    const char *z = getenv("TESSERA_CACHE_DIR");
    if (z && *z)
        return z;
    snprintf(dir, sizeof dir, "/tmp/tessera-test-cc-%ld", (long)getuid());
    setenv("TESSERA_CACHE_DIR", dir, 1);
    return dir;
}

/* A fresh directory under the base cache directory for tests that look at its contents. */
static char *fresh_dir(const char *tag)
{
    char *z = NULL;
    assert_true(asprintf(&z, "%s/%s-%s", base_dir(), tag, nonce) > 0);
    return z;
}

/* Source of `int <name>(void) { return <value>; }` plus a unique comment. */
static char *fn_source(const char *name, const char *value, const char *salt)
{
    char *z = NULL;
    assert_true(
        asprintf(&z, "/* %s %s */\nint %s(void) { return %s; }\n", nonce, salt, name, value) > 0);
    return z;
}

static int call_int(te__cc_lib *lib, const char *name)
{
    int_fn f;
    void *p = te__cc_lib_sym(lib, name);
    assert_non_null(p);
    memcpy(&f, &p, sizeof f);
    return f();
}

static int count_tmp_files(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strstr(e->d_name, ".tmp.") != NULL;
    closedir(d);
    return n;
}

static void build_calls_the_compiled_function(void **state)
{
    (void)state;
    char *src = fn_source("answer", "40 + 2", "basic");
    te__cc_lib *lib = (te__cc_lib *)1;
    char err[ERRBUF];
    te__cc_opts opts = {.flags = QUICK_FLAGS};
    int rc = te__cc_build(src, &opts, &lib, err, sizeof err);
    assert_int_equal(rc, TE_OK);
    assert_non_null(lib);
    assert_string_equal(err, "");
    assert_int_equal(call_int(lib, "answer"), 42);
    assert_null(te__cc_lib_sym(lib, "no_such_symbol"));

    /* The files live in the cache directory under a 16-hex-digit key. */
    const char *so = te__cc_lib_so_path(lib), *c = te__cc_lib_source_path(lib);
    assert_non_null(so);
    assert_non_null(c);
    assert_int_equal(strncmp(so, base_dir(), strlen(base_dir())), 0);
    const char *base = strrchr(so, '/') + 1;
    assert_int_equal(strlen(base), 16 + 3);
    assert_int_equal(strspn(base, "0123456789abcdef"), 16);
    assert_string_equal(base + 16, ".so");
    assert_int_equal(strlen(c), strlen(so) - 1);
    assert_int_equal(access(so, R_OK), 0);

    /* The cached source is the text we gave. */
    FILE *f = fopen(c, "r");
    assert_non_null(f);
    char text[512] = {0};
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    assert_int_equal(n, strlen(src));
    assert_string_equal(text, src);

    te__cc_lib_free(lib);
    free(src);
}

static void second_build_hits_the_cache(void **state)
{
    (void)state;
    char *src = fn_source("seven", "7", "cache");
    te__cc_opts opts = {.flags = QUICK_FLAGS};
    te__cc_lib *a = NULL, *b = NULL;
    char err[ERRBUF];
    assert_int_equal(te__cc_build(src, &opts, &a, err, sizeof err), TE_OK);
    struct stat st1, st2;
    assert_int_equal(stat(te__cc_lib_so_path(a), &st1), 0);

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(te__cc_build(src, &opts, &b, err, sizeof err), TE_OK);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    assert_string_equal(te__cc_lib_so_path(a), te__cc_lib_so_path(b));
    assert_int_equal(stat(te__cc_lib_so_path(b), &st2), 0);
    /* Not rewritten: same file, same modification time. */
    assert_int_equal(st1.st_ino, st2.st_ino);
    assert_int_equal(st1.st_mtim.tv_sec, st2.st_mtim.tv_sec);
    assert_int_equal(st1.st_mtim.tv_nsec, st2.st_mtim.tv_nsec);
    double dt = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    assert_true(dt < 2.0); /* no compiler ran; a compile takes tens of milliseconds at least */

    /* Both handles work and are freed independently (dlopen counts references). */
    te__cc_lib_free(a);
    assert_int_equal(call_int(b, "seven"), 7);
    te__cc_lib_free(b);

    /* A cache hit with the source file gone puts it back. */
    te__cc_lib *c = NULL;
    assert_int_equal(te__cc_build(src, &opts, &c, err, sizeof err), TE_OK);
    assert_int_equal(unlink(te__cc_lib_source_path(c)), 0);
    te__cc_lib_free(c);
    assert_int_equal(te__cc_build(src, &opts, &c, err, sizeof err), TE_OK);
    assert_int_equal(access(te__cc_lib_source_path(c), R_OK), 0);
    te__cc_lib_free(c);
    free(src);
}

static void syntax_error_reports_diagnostics_command_and_path(void **state)
{
    (void)state;
    char *src = NULL;
    assert_true(asprintf(&src, "/* %s */\nint broken(void) { return 1 }\n", nonce) > 0);
    te__cc_opts opts = {.flags = QUICK_FLAGS};
    te__cc_lib *lib = (te__cc_lib *)1;
    char err[ERRBUF];
    assert_int_equal(te__cc_build(src, &opts, &lib, err, sizeof err), TE_ERR_COMPILE);
    assert_null(lib);
    assert_non_null(strstr(err, "error"));     /* the compiler's own words */
    assert_non_null(strstr(err, QUICK_FLAGS)); /* the command line */
    assert_non_null(strstr(err, "-o "));

    /* The message names the source file, which holds the text for the user to inspect. */
    const char *p = strstr(err, "source: ");
    assert_non_null(p);
    p += strlen("source: ");
    char path[1024];
    size_t n = strcspn(p, "\n");
    assert_true(n < sizeof path);
    memcpy(path, p, n);
    path[n] = '\0';
    assert_int_equal(strncmp(path, base_dir(), strlen(base_dir())), 0);
    assert_non_null(strstr(err + (p - err) + n, path)); /* diagnostics mention it too */
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char text[512] = {0};
    assert_true(fread(text, 1, sizeof text - 1, f) > 0);
    fclose(f);
    assert_string_equal(text, src);

    /* The failed object is not left behind, neither under its final nor a temporary name. */
    char so[1024];
    snprintf(so, sizeof so, "%.*s.so", (int)(n - 2), path);
    assert_int_not_equal(access(so, F_OK), 0);

    /* Small or missing message buffers are safe. */
    char tiny[8];
    assert_int_equal(te__cc_build(src, &opts, &lib, tiny, sizeof tiny), TE_ERR_COMPILE);
    assert_int_equal(strlen(tiny), sizeof tiny - 1);
    assert_int_equal(te__cc_build(src, &opts, &lib, tiny, 1), TE_ERR_COMPILE);
    assert_string_equal(tiny, "");
    assert_int_equal(te__cc_build(src, &opts, &lib, NULL, 0), TE_ERR_COMPILE);
    assert_null(lib);
    free(src);
}

static void unwritable_cache_dir_is_an_io_error(void **state)
{
    (void)state;
    char *dir = fresh_dir("io");
    char *file = NULL, *below_file = NULL;
    assert_int_equal(mkdir(dir, 0777), 0);
    assert_true(asprintf(&file, "%s/plain-file", dir) > 0);
    assert_true(asprintf(&below_file, "%s/plain-file/cache", dir) > 0);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);

    /* A cache path that cannot be a directory fails, even for root. */
    char *src = fn_source("io", "1", "io");
    te__cc_opts opts = {.flags = QUICK_FLAGS, .cache_dir = below_file};
    te__cc_lib *lib = (te__cc_lib *)1;
    char err[ERRBUF];
    assert_int_equal(te__cc_build(src, &opts, &lib, err, sizeof err), TE_ERR_IO);
    assert_null(lib);
    assert_non_null(strstr(err, below_file));
    opts.cache_dir = file;
    assert_int_equal(te__cc_build(src, &opts, &lib, err, sizeof err), TE_ERR_IO);

    /* A directory without write permission fails on a miss (permissions bind only non-root)
     * and still serves hits. */
    char *ro = NULL;
    assert_true(asprintf(&ro, "%s/read-only", dir) > 0);
    opts.cache_dir = ro;
    assert_int_equal(te__cc_build(src, &opts, &lib, err, sizeof err), TE_OK);
    te__cc_lib_free(lib);
    assert_int_equal(chmod(ro, 0555), 0);
    assert_int_equal(te__cc_build(src, &opts, &lib, err, sizeof err), TE_OK);
    assert_int_equal(call_int(lib, "io"), 1);
    te__cc_lib_free(lib);
    if (geteuid() != 0) {
        char *other = fn_source("io2", "2", "io2");
        assert_int_equal(te__cc_build(other, &opts, &lib, err, sizeof err), TE_ERR_IO);
        assert_non_null(strstr(err, ro));
        free(other);
    }
    chmod(ro, 0755);

    /* Missing parents are created (mkdir -p). */
    char *deep = NULL;
    assert_true(asprintf(&deep, "%s/a/b//c/", dir) > 0);
    opts.cache_dir = deep;
    assert_int_equal(te__cc_build(src, &opts, &lib, err, sizeof err), TE_OK);
    te__cc_lib_free(lib);

    free(deep);
    free(ro);
    free(src);
    free(file);
    free(below_file);
    free(dir);
}

static void build_many_reports_each_source(void **state)
{
    (void)state;
    char *src[4];
    src[0] = fn_source("f0", "10", "many");
    src[1] = fn_source("f1", "11", "many");
    assert_true(asprintf(&src[2], "/* %s */\nint f2(void) { return undeclared_thing; }\n", nonce) >
                0);
    src[3] = fn_source("f3", "13", "many");
    te__cc_lib *libs[4];
    int results[4];
    char eb[4][ERRBUF];
    char *errbufs[4] = {eb[0], eb[1], eb[2], eb[3]};
    te__cc_opts opts = {.flags = QUICK_FLAGS};
    int rc =
        te__cc_build_many(4, (const char *const *)src, &opts, 2, libs, results, errbufs, ERRBUF);
    assert_int_equal(rc, TE_ERR_COMPILE);
    assert_int_equal(results[0], TE_OK);
    assert_int_equal(results[1], TE_OK);
    assert_int_equal(results[2], TE_ERR_COMPILE);
    assert_int_equal(results[3], TE_OK);
    assert_null(libs[2]);
    assert_non_null(strstr(eb[2], "error"));
    assert_non_null(strstr(eb[2], "undeclared_thing"));
    assert_string_equal(eb[0], "");
    assert_string_equal(eb[3], "");
    assert_int_equal(call_int(libs[0], "f0"), 10);
    assert_int_equal(call_int(libs[1], "f1"), 11);
    assert_int_equal(call_int(libs[3], "f3"), 13);
    for (int i = 0; i < 4; i++) {
        te__cc_lib_free(libs[i]);
        free(src[i]);
    }
}

static void build_many_handles_duplicates_nulls_and_default_jobs(void **state)
{
    (void)state;
    char *a = fn_source("dup", "5", "dup");
    const char *src[3] = {a, a, NULL};
    te__cc_lib *libs[3];
    int results[3];
    te__cc_opts opts = {.flags = QUICK_FLAGS};
    /* jobs <= 0 means one per core; errbufs may be NULL. */
    int rc = te__cc_build_many(3, src, &opts, 0, libs, results, NULL, 0);
    assert_int_equal(rc, TE_ERR_ARG);
    assert_int_equal(results[0], TE_OK);
    assert_int_equal(results[1], TE_OK);
    assert_int_equal(results[2], TE_ERR_ARG);
    assert_null(libs[2]);
    assert_string_equal(te__cc_lib_so_path(libs[0]), te__cc_lib_so_path(libs[1]));
    assert_int_equal(call_int(libs[0], "dup"), 5);
    assert_int_equal(call_int(libs[1], "dup"), 5);
    te__cc_lib_free(libs[0]);
    te__cc_lib_free(libs[1]);

    /* An empty batch is fine. */
    assert_int_equal(te__cc_build_many(0, NULL, NULL, 1, NULL, NULL, NULL, 0), TE_OK);
    free(a);
}

static void flags_and_compiler_options_are_honoured(void **state)
{
    (void)state;
    char *src = fn_source("value", "VALUE", "flags");
    te__cc_lib *l7 = NULL, *l9 = NULL, *lcc = NULL, *lenv = NULL;
    char err[ERRBUF];
    int rc;
    te__cc_opts o7 = {.flags = QUICK_FLAGS " -DVALUE=7"};
    te__cc_opts o9 = {.flags = QUICK_FLAGS " -DVALUE=9"};
    assert_int_equal(te__cc_build(src, &o7, &l7, err, sizeof err), TE_OK);
    assert_int_equal(te__cc_build(src, &o9, &l9, err, sizeof err), TE_OK);
    assert_int_equal(call_int(l7, "value"), 7);
    assert_int_equal(call_int(l9, "value"), 9);
    /* The flags are part of the key. */
    assert_string_not_equal(te__cc_lib_so_path(l7), te__cc_lib_so_path(l9));

    /* The compiler is a shell word list, like $CC, and is part of the key too. */
    te__cc_opts occ = {.cc = "cc -DVALUE=5", .flags = QUICK_FLAGS};
    assert_int_equal(te__cc_build(src, &occ, &lcc, err, sizeof err), TE_OK);
    assert_int_equal(call_int(lcc, "value"), 5);

    /* Without options, $TESSERA_CFLAGS and $CC apply. */
    setenv("TESSERA_CFLAGS", QUICK_FLAGS " -DVALUE=3", 1);
    rc = te__cc_build(src, NULL, &lenv, err, sizeof err);
    unsetenv("TESSERA_CFLAGS");
    assert_int_equal(rc, TE_OK);
    assert_int_equal(call_int(lenv, "value"), 3);
    te__cc_lib_free(lenv);
    setenv("CC", "cc -DVALUE=4", 1);
    te__cc_opts oflags = {.flags = QUICK_FLAGS};
    rc = te__cc_build(src, &oflags, &lenv, err, sizeof err);
    unsetenv("CC");
    assert_int_equal(rc, TE_OK);
    assert_int_equal(call_int(lenv, "value"), 4);

    te__cc_lib_free(lenv);
    te__cc_lib_free(l7);
    te__cc_lib_free(l9);
    te__cc_lib_free(lcc);
    free(src);
}

static void default_flags_build_openmp_code(void **state)
{
    (void)state;
    char *src = NULL;
    assert_true(asprintf(&src,
                         "/* %s */\n"
                         "#include <omp.h>\n"
                         "long omp_sum(int n)\n"
                         "{\n"
                         "    long s = 0;\n"
                         "#pragma omp parallel for reduction(+ : s)\n"
                         "    for (int i = 0; i < n; i++)\n"
                         "        s += i;\n"
                         "    return s;\n"
                         "}\n"
                         "int omp_threads(void) { return omp_get_max_threads(); }\n",
                         nonce) > 0);
    te__cc_lib *lib = NULL;
    char err[ERRBUF];
    int rc = te__cc_build(src, NULL, &lib, err, sizeof err);
    if (rc != TE_OK)
        fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, TE_OK);
    long (*sum)(int);
    void *p = te__cc_lib_sym(lib, "omp_sum");
    assert_non_null(p);
    memcpy(&sum, &p, sizeof sum);
    assert_int_equal(sum(100000), 100000L * 99999L / 2);
    assert_true(call_int(lib, "omp_threads") >= 1);
    te__cc_lib_free(lib);

    /* The OpenMP runtime the kernel brought in (this test program does not link one) stays
     * loaded after the kernel is closed: its worker threads are still there. */
    void *rt = dlopen("libgomp.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!rt)
        rt = dlopen("libomp.so.5", RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(rt);
    dlclose(rt);

    /* A second kernel after the first is gone still runs in parallel. */
    assert_int_equal(te__cc_build(src, NULL, &lib, err, sizeof err), TE_OK);
    p = te__cc_lib_sym(lib, "omp_sum");
    memcpy(&sum, &p, sizeof sum);
    assert_int_equal(sum(1000), 1000L * 999L / 2);
    te__cc_lib_free(lib);
    free(src);
}

static void missing_compiler_is_a_compile_error(void **state)
{
    (void)state;
    char *src = fn_source("nocc", "1", "nocc");
    te__cc_opts opts = {.cc = "/nonexistent/tessera-no-cc", .flags = QUICK_FLAGS};
    te__cc_lib *lib = NULL;
    char err[ERRBUF];
    assert_int_equal(te__cc_build(src, &opts, &lib, err, sizeof err), TE_ERR_COMPILE);
    assert_null(lib);
    assert_non_null(strstr(err, "/nonexistent/tessera-no-cc"));
    assert_non_null(strstr(err, "exit status 127"));
    free(src);
}

static void slow_compiler_times_out(void **state)
{
    (void)state;
    char *src = fn_source("slow", "1", "slow");
    /* The rest of the command line becomes the arguments of `true`. */
    te__cc_opts opts = {.cc = "sleep 30; true", .flags = QUICK_FLAGS};
    te__cc_lib *lib = NULL;
    char err[ERRBUF];
    setenv("TESSERA_CC_TIMEOUT", "1", 1);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = te__cc_build(src, &opts, &lib, err, sizeof err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    unsetenv("TESSERA_CC_TIMEOUT");
    assert_int_equal(rc, TE_ERR_COMPILE);
    assert_null(lib);
    assert_non_null(strstr(err, "compiler timed out"));
    double dt = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    assert_true(dt >= 0.9 && dt < 10.0);
    free(src);
}

static void unresolved_symbol_is_a_load_error(void **state)
{
    (void)state;
    char *src = NULL;
    assert_true(asprintf(&src,
                         "/* %s */\nextern int tessera_test_missing_symbol(void);\n"
                         "int uses_missing(void) { return tessera_test_missing_symbol(); }\n",
                         nonce) > 0);
    te__cc_opts opts = {.flags = QUICK_FLAGS};
    te__cc_lib *lib = (te__cc_lib *)1;
    char err[ERRBUF];
    assert_int_equal(te__cc_build(src, &opts, &lib, err, sizeof err), TE_ERR_LOAD);
    assert_null(lib);
    assert_non_null(strstr(err, "tessera_test_missing_symbol"));
    /* Again, now as a cache hit (which is rebuilt once, then reported the same way). */
    assert_int_equal(te__cc_build(src, &opts, &lib, err, sizeof err), TE_ERR_LOAD);
    assert_non_null(strstr(err, "tessera_test_missing_symbol"));
    free(src);
}

static void corrupt_cached_object_is_rebuilt(void **state)
{
    (void)state;
    char *src = fn_source("healed", "77", "corrupt");
    te__cc_opts opts = {.flags = QUICK_FLAGS};
    te__cc_lib *lib = NULL;
    char err[ERRBUF];
    assert_int_equal(te__cc_build(src, &opts, &lib, err, sizeof err), TE_OK);
    char *so = strdup(te__cc_lib_so_path(lib));
    te__cc_lib_free(lib);
    FILE *f = fopen(so, "w");
    assert_non_null(f);
    fputs("not an ELF file", f);
    fclose(f);
    assert_int_equal(te__cc_build(src, &opts, &lib, err, sizeof err), TE_OK);
    assert_int_equal(call_int(lib, "healed"), 77);
    te__cc_lib_free(lib);
    free(so);
    free(src);
}

static void null_arguments_are_rejected(void **state)
{
    (void)state;
    te__cc_lib *lib = (te__cc_lib *)1;
    char err[ERRBUF];
    assert_int_equal(te__cc_build(NULL, NULL, &lib, err, sizeof err), TE_ERR_ARG);
    assert_null(lib);
    assert_non_null(strstr(err, "source"));
    assert_int_equal(te__cc_build("int x;", NULL, NULL, err, sizeof err), TE_ERR_ARG);
    assert_non_null(strstr(err, "out"));
    assert_int_equal(te__cc_build(NULL, NULL, &lib, NULL, 0), TE_ERR_ARG);

    te__cc_lib *libs[1];
    int results[1];
    const char *srcs[1] = {"int x;"};
    assert_int_equal(te__cc_build_many(-1, srcs, NULL, 1, libs, results, NULL, 0), TE_ERR_ARG);
    assert_int_equal(te__cc_build_many(1, NULL, NULL, 1, libs, results, NULL, 0), TE_ERR_ARG);
    assert_int_equal(te__cc_build_many(1, srcs, NULL, 1, NULL, results, NULL, 0), TE_ERR_ARG);
    assert_int_equal(te__cc_build_many(1, srcs, NULL, 1, libs, NULL, NULL, 0), TE_ERR_ARG);

    assert_null(te__cc_lib_sym(NULL, "x"));
    assert_null(te__cc_lib_source_path(NULL));
    assert_null(te__cc_lib_so_path(NULL));
    te__cc_lib_free(NULL);
}

static void hash_is_fnv1a_64(void **state)
{
    (void)state;
    /* Published FNV-1a test vectors. */
    assert_true(te__hash_bytes(TE__HASH_INIT, "", 0) == 0xcbf29ce484222325ull);
    assert_true(te__hash_bytes(TE__HASH_INIT, "a", 1) == 0xaf63dc4c8601ec8cull);
    assert_true(te__hash_bytes(TE__HASH_INIT, "foobar", 6) == 0x85944171f73967e8ull);
    /* Continuing from a previous value equals hashing the concatenation. */
    unsigned long long h = te__hash_bytes(TE__HASH_INIT, "foo", 3);
    assert_true(te__hash_bytes(h, "bar", 3) == 0x85944171f73967e8ull);
}

/* Several processes and threads building the same new source at once all succeed, and no
 * temporary file is left behind. */
typedef struct {
    const char *src;
    const char *dir;
    int rc, value;
} race_arg;

static void *race_thread(void *p)
{
    race_arg *a = p;
    te__cc_opts opts = {.flags = QUICK_FLAGS, .cache_dir = a->dir};
    te__cc_lib *lib = NULL;
    a->rc = te__cc_build(a->src, &opts, &lib, NULL, 0);
    if (lib) {
        void *f = te__cc_lib_sym(lib, "raced");
        int_fn fn;
        memcpy(&fn, &f, sizeof fn);
        a->value = f ? fn() : -1;
    }
    te__cc_lib_free(lib);
    return NULL;
}

static void concurrent_builds_share_the_cache_safely(void **state)
{
    (void)state;
    char *dir = fresh_dir("race");
    char *src = fn_source("raced", "99", "processes");
    enum { N = 4 };
    fflush(NULL);
    pid_t pids[N];
    for (int i = 0; i < N; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            race_arg a = {src, dir, -1, -1};
            race_thread(&a);
            _exit(a.rc == TE_OK && a.value == 99 ? 0 : 1);
        }
    }
    for (int i = 0; i < N; i++) {
        int st;
        assert_int_equal(waitpid(pids[i], &st, 0), pids[i]);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
    }
    assert_int_equal(count_tmp_files(dir), 0);

    char *src2 = fn_source("raced", "99", "threads");
    pthread_t th[N];
    race_arg args[N];
    for (int i = 0; i < N; i++) {
        args[i] = (race_arg){src2, dir, -1, -1};
        assert_int_equal(pthread_create(&th[i], NULL, race_thread, &args[i]), 0);
    }
    for (int i = 0; i < N; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(args[i].rc, TE_OK);
        assert_int_equal(args[i].value, 99);
    }
    assert_int_equal(count_tmp_files(dir), 0);
    free(src);
    free(src2);
    free(dir);
}

int main(void)
{
    base_dir();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(hash_is_fnv1a_64),
        cmocka_unit_test(build_calls_the_compiled_function),
        cmocka_unit_test(second_build_hits_the_cache),
        cmocka_unit_test(syntax_error_reports_diagnostics_command_and_path),
        cmocka_unit_test(unwritable_cache_dir_is_an_io_error),
        cmocka_unit_test(build_many_reports_each_source),
        cmocka_unit_test(build_many_handles_duplicates_nulls_and_default_jobs),
        cmocka_unit_test(flags_and_compiler_options_are_honoured),
        cmocka_unit_test(missing_compiler_is_a_compile_error),
        cmocka_unit_test(slow_compiler_times_out),
        cmocka_unit_test(unresolved_symbol_is_a_load_error),
        cmocka_unit_test(corrupt_cached_object_is_rebuilt),
        cmocka_unit_test(null_arguments_are_rejected),
        cmocka_unit_test(concurrent_builds_share_the_cache_safely),
        /* Last: once the OpenMP runtime has started threads, fork() is best avoided. */
        cmocka_unit_test(default_flags_build_openmp_code),
    };
    return cmocka_run_group_tests(tests, setup_nonce, NULL);
}

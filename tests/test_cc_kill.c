/* A `tessera tune` job SIGKILLed while its compilers run (backends/c/cc.c, cc_proc.c):
 *  - no compiler process survives it (the driver and what it started die with the job);
 *  - the temporaries it left in the compile cache (`*.tmp.PID.N`, owner dead, older than a
 *    minute) are swept when the next job opens the cache; a live process's are kept. */
#define _GNU_SOURCE

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef TESSERA_CLI
#error "TESSERA_CLI (path of the tessera binary) must be defined by tests/tuner.cmake"
#endif

#include "testutil.h"

TT_TMPDIR_FIXTURE("cckill")

/* 1 while pid exists and is not a zombie. */
static int alive(long pid)
{
    char p[64], st[512];
    snprintf(p, sizeof p, "/proc/%ld/stat", pid);
    FILE *f = fopen(p, "r");
    if (!f)
        return 0;
    size_t n = fread(st, 1, sizeof st - 1, f);
    fclose(f);
    st[n] = 0;
    const char *close_paren = strrchr(st, ')');
    return close_paren && close_paren[1] == ' ' && close_paren[2] != 'Z' && close_paren[2] != 'X';
}

/* Reads the pids the fake compiler wrote; returns their count. */
static int read_pids(long *pids, int max)
{
    FILE *f = fopen(path("pids"), "r");
    if (!f)
        return 0;
    int n = 0;
    while (n < max && fscanf(f, "%ld", &pids[n]) == 1)
        n++;
    fclose(f);
    return n;
}

/* Temporaries left in the cache; with age_back, their times are moved that far back. */
static int count_tmp(const char *cache, long age_back)
{
    DIR *d = opendir(cache);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strstr(e->d_name, ".tmp."))
            continue;
        n++;
        if (age_back) {
            char p[1024];
            snprintf(p, sizeof p, "%s/%s", cache, e->d_name);
            struct timespec ts[2];
            clock_gettime(CLOCK_REALTIME, &ts[0]);
            ts[0].tv_sec -= age_back;
            ts[1] = ts[0];
            utimensat(AT_FDCWD, p, ts, 0);
        }
    }
    closedir(d);
    return n;
}

static void test_sigkill_mid_compile_leaves_no_compiler_and_no_temporaries(void **state)
{
    (void)state;
    /* A compiler that writes part of its output, starts a helper (as gcc starts cc1) and hangs:
     * both pids go to a file. Asked for its version, it answers. */
    FILE *f = fopen(path("fakecc"), "w");
    assert_non_null(f);
    fprintf(f,
            "#!/bin/sh\n"
            "case \" $* \" in *\" -o \"*) ;; *) echo 12.2.0; exit 0;; esac\n"
            "out=\n"
            "while [ $# -gt 0 ]; do [ \"$1\" = -o ] && out=$2; shift; done\n"
            "echo partial > \"$out\"\n"
            "sleep 60 &\n"
            "echo $$ $! >> '%s'\n"
            "wait\n",
            path("pids"));
    fclose(f);
    assert_int_equal(chmod(path("fakecc"), 0755), 0);
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "exec env TESSERA_CACHE_DIR='%s' CC='%s' '%s' tune matmul --shape m=8,n=8,k=8 "
             "--trials 4 --batch 2 --compile-timeout 100 --db '%s' >/dev/null 2>&1",
             path("cache"), path("fakecc"), TESSERA_CLI, path("k.db"));
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    long pids[64];
    int n = 0;
    for (double t0 = tt_now_s(); tt_now_s() - t0 < 60 && n < 2;) {
        usleep(20000);
        n = read_pids(pids, 64);
    }
    assert_true(n >= 2);
    kill(pid, SIGKILL);
    int ws;
    waitpid(pid, &ws, 0);
    /* Every compiler process is gone within a few seconds. */
    int survivors = 0;
    for (double t0 = tt_now_s(); tt_now_s() - t0 < 5;) {
        n = read_pids(pids, 64);
        survivors = 0;
        for (int i = 0; i < n; i++)
            survivors += alive(pids[i]);
        if (!survivors)
            break;
        usleep(50000);
    }
    printf("  %d compiler processes, %d survived the job\n", n, survivors);
    for (int i = 0; i < n; i++)
        if (alive(pids[i]))
            kill((pid_t)pids[i], SIGKILL);
    assert_int_equal(survivors, 0);
    /* Its temporaries are still there; once older than a minute, the next job sweeps them. */
    int left = count_tmp(path("cache"), 120);
    printf("  %d temporaries left by the killed job\n", left);
    assert_true(left > 0);
    /* A temporary of a live process (this one) stays, however old. */
    char mine[1024];
    snprintf(mine, sizeof mine, "%s/0123456789abcdef.so.tmp.%ld.1", path("cache"), (long)getpid());
    f = fopen(mine, "w");
    assert_non_null(f);
    fclose(f);
    count_tmp(path("cache"), 120);
    snprintf(cmd, sizeof cmd,
             "env TESSERA_CACHE_DIR='%s' CC='%s' '%s' tune matmul --shape m=8,n=8,k=8 "
             "--trials 2 --batch 2 --compile-timeout 0.5 --new-job --db '%s' >/dev/null 2>&1",
             path("cache"), path("fakecc"), TESSERA_CLI, path("k2.db"));
    assert_int_not_equal(system(cmd), -1);
    /* Its own fake compilers were killed at the timeout; wait for their helpers. */
    usleep(200000);
    n = read_pids(pids, 64);
    for (int i = 0; i < n; i++)
        if (alive(pids[i]))
            kill((pid_t)pids[i], SIGKILL);
    left = count_tmp(path("cache"), 0);
    printf("  %d temporaries after the next job\n", left);
    assert_int_equal(left, 1); /* only this process's */
    assert_int_equal(access(mine, F_OK), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sigkill_mid_compile_leaves_no_compiler_and_no_temporaries),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

/* Several writer processes on one file, and a writer killed with SIGKILL mid-run. */
#include "test_tuning_db_common.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <sys/wait.h>
#include <time.h>

TDB_FIXTURE("shared.db", 1)

enum { N_PROCS = 4, N_EACH = 2000 };

/* Child: opens its own handle (the file may not exist yet: all children race to create it)
 * and records N_EACH trials, one transaction each. Any error, SQLITE_BUSY included, fails. */
static int writer_child(int who)
{
    te_db *db = NULL;
    te_db_options o = {.flags = TE_DB_NO_SYSTEM};
    if (te_db_open(path, &o, &db) != TE_OK) {
        fprintf(stderr, "child %d: open: %s\n", who, te_db_errmsg(db));
        return 1;
    }
    char trace[64];
    te_db_target t = tdb_cpu;
    char dev[32];
    snprintf(dev, sizeof dev, "cpu %d", who % 2); /* two processes share each target */
    t.device = dev;
    for (int i = 0; i < N_EACH; i++) {
        snprintf(trace, sizeof trace, "p%d-i%d", who, i);
        te_db_trial tr = tdb_trial(trace, 1e-3 + i * 1e-7);
        tr.target = t;
        int rc = te_db_record_trial(db, &tr, NULL);
        if (rc != TE_OK) {
            fprintf(stderr, "child %d trial %d: %s (%s)\n", who, i, te_status_str(rc),
                    te_db_errmsg(db));
            te_db_close(db);
            return 1;
        }
    }
    return te_db_close(db) == TE_OK ? 0 : 1;
}

static void test_four_processes_insert_concurrently_without_busy_errors(void **state)
{
    (void)state;
    pid_t kids[N_PROCS];
    for (int k = 0; k < N_PROCS; k++) {
        kids[k] = fork();
        assert_true(kids[k] >= 0);
        if (kids[k] == 0)
            _exit(writer_child(k));
    }
    int failures = 0;
    for (int k = 0; k < N_PROCS; k++) {
        int ws;
        assert_int_equal(waitpid(kids[k], &ws, 0), kids[k]);
        failures += !(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    }
    assert_int_equal(failures, 0);
    te_db *db = tdb_open(path, 0);
    assert_int_equal(tdb_count(db), N_PROCS * N_EACH);
    te_db_info in;
    assert_int_equal(te_db_get_info(db, &in), TE_OK);
    assert_int_equal(in.n_targets, 2);
    assert_int_equal(in.n_workloads, 1);
    assert_int_equal(te_db_check(db, NULL), TE_OK);
    te_db_close(db);
}

enum { BATCH = 25 };

/* Child: records batches forever, reporting the committed total through the pipe after each
 * commit, until killed. */
static void killed_child(int fd)
{
    te_db *db = NULL;
    te_db_options o = {.flags = TE_DB_NO_SYSTEM};
    if (te_db_open(path, &o, &db) != TE_OK)
        _exit(1);
    int64_t job;
    if (te_db_job_start(db, "doomed writer", 1000000, &job) != TE_OK)
        _exit(1);
    static char traces[BATCH][48];
    te_db_trial b[BATCH];
    for (int64_t done = 0;;) {
        for (int i = 0; i < BATCH; i++) {
            snprintf(traces[i], sizeof traces[i], "k%lld", (long long)(done + i));
            b[i] = tdb_trial(traces[i], 1e-3);
            b[i].job_id = job;
        }
        if (te_db_record_trials(db, b, BATCH) != TE_OK)
            _exit(1);
        done += BATCH;
        if (write(fd, &done, sizeof done) != (ssize_t)sizeof done)
            _exit(1);
    }
}

static void test_sigkill_mid_run_keeps_committed_trials_and_integrity(void **state)
{
    (void)state;
    int64_t total_before = 0;
    for (int round = 0; round < 3; round++) {
        int fds[2];
        assert_int_equal(pipe(fds), 0);
        pid_t kid = fork();
        assert_true(kid >= 0);
        if (kid == 0) {
            close(fds[0]);
            killed_child(fds[1]);
        }
        close(fds[1]);
        /* Let it commit a varying number of batches, then kill it without warning. */
        int64_t last = 0, got;
        int want = 20 + round * 37;
        for (int i = 0; i < want; i++) {
            ssize_t k = read(fds[0], &got, sizeof got);
            assert_int_equal(k, (ssize_t)sizeof got);
            last = got;
        }
        struct timespec nap = {0, 150000L * round};
        nanosleep(&nap, NULL);
        assert_int_equal(kill(kid, SIGKILL), 0);
        int ws;
        assert_int_equal(waitpid(kid, &ws, 0), kid);
        assert_true(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL);
        /* Counts reported after the ones we read but before the kill are committed too. */
        while (read(fds[0], &got, sizeof got) == (ssize_t)sizeof got)
            last = got;
        close(fds[0]);

        te_db *db = tdb_open(path, 0);
        char *report = NULL;
        int rc = te_db_check(db, &report);
        if (rc != TE_OK)
            fail_msg("round %d: check failed: %s", round, report);
        free(report);
        int64_t n = tdb_count(db) - total_before;
        /* Every reported commit is there; at most the one batch committed after the last
         * report on top; never part of a batch. */
        assert_true(n >= last);
        assert_true(n <= last + BATCH);
        assert_int_equal(n % BATCH, 0);
        te_db_job_list *jobs;
        assert_int_equal(te_db_jobs(db, 0, &jobs), TE_OK);
        assert_int_equal(jobs->items[0].status, TE_JOB_INTERRUPTED); /* its process is gone */
        assert_int_equal(jobs->items[0].trials_done, n);
        te_db_job_list_free(jobs);
        total_before += n;
        te_db_close(db);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_four_processes_insert_concurrently_without_busy_errors,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_sigkill_mid_run_keeps_committed_trials_and_integrity,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

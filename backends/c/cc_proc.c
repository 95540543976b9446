/*
 * backends/c/cc_proc.c: the compiler's processes and the cache's leftovers.
 *
 * A compiler runs under a small supervisor process that leads its own process group (so a
 * timeout kills the driver and everything it started with one kill(-pgid)) and dies with the
 * thread that started it: PR_SET_PDEATHSIG sends it SIGTERM when that thread's process goes
 * (even by SIGKILL), and it then kills its whole group. Without it a SIGKILLed job left its
 * compilers running (their group is not the job's) and their half-written objects behind.
 *
 * Those objects, and any temporary of a process that died mid-write, are named
 * `<final>.tmp.<pid>.<n>` (cc.c unique_tmp); te__cc_sweep_tmp removes the ones older than a
 * minute whose process is gone, when a build opens the cache.
 */
#define _GNU_SOURCE

#include "backends/c/cc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* In the supervisor: its parent is gone, so is everything it started. */
static void on_parent_death(int sig)
{
    (void)sig;
    kill(0, SIGKILL);
}

/* The supervisor, after fork: only async-signal-safe calls from here on. */
static void supervise(char *const argv[], int out_fd, pid_t parent) __attribute__((noreturn));
static void supervise(char *const argv[], int out_fd, pid_t parent)
{
    setpgid(0, 0);
    struct sigaction dfl, die;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int s = 1; s < NSIG; s++)
        if (s != SIGKILL && s != SIGSTOP)
            sigaction(s, &dfl, NULL);
    memset(&die, 0, sizeof die);
    die.sa_handler = on_parent_death;
    sigaction(SIGTERM, &die, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) /* died before the request took effect */
        on_parent_death(SIGTERM);
    int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd < 0 || dup2(null_fd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(out_fd, 2) < 0)
        _exit(127);
    pid_t cc = fork();
    if (cc < 0)
        _exit(127);
    if (cc == 0) {
        sigaction(SIGTERM, &dfl, NULL);
        execve("/bin/sh", argv, environ);
        _exit(127);
    }
    int st = 0;
    while (waitpid(cc, &st, 0) < 0)
        if (errno != EINTR)
            _exit(127);
    if (WIFEXITED(st))
        _exit(WEXITSTATUS(st));
    int sig = WIFSIGNALED(st) ? WTERMSIG(st) : SIGKILL;
    sigaction(sig, &dfl, NULL); /* end the same way, so the caller reads the same status */
    kill(getpid(), sig);
    _exit(128 + sig);
}

int te__cc_spawn(const char *command, int out_fd, pid_t *pid)
{
    char *argv[] = {"sh", "-c", (char *)command, NULL};
    pid_t parent = getpid();
    pid_t p = fork();
    if (p < 0)
        return errno;
    if (p == 0)
        supervise(argv, out_fd, parent);
    setpgid(p, p); /* also here, so a kill(-p) right away reaches it */
    *pid = p;
    return 0;
}

/* The owner pid of a temporary `<final>.tmp.<pid>.<n>`, or 0 when the name is not one. */
static long tmp_owner(const char *name)
{
    const char *t = strstr(name, ".tmp.");
    if (!t)
        return 0;
    char *end = NULL;
    long pid = strtol(t + 5, &end, 10);
    if (pid <= 0 || *end != '.' || !end[1])
        return 0;
    for (const char *q = end + 1; *q; q++)
        if (*q < '0' || *q > '9')
            return 0;
    return pid;
}

int te__cc_sweep_tmp(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    time_t now = time(NULL);
    struct dirent *e;
    while ((e = readdir(d))) {
        long pid = tmp_owner(e->d_name);
        if (!pid || pid == (long)getpid())
            continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
            st.st_mtime > now - 60)
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue; /* its writer may still be at it */
        if (unlinkat(dirfd(d), e->d_name, 0) == 0)
            n++;
    }
    closedir(d);
    return n;
}

void te__cc_sweep_once(const char *dir)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static char last[4096];
    static time_t last_at;
    time_t now = time(NULL);
    pthread_mutex_lock(&mu);
    int due = strcmp(last, dir) != 0 || now - last_at >= 60;
    if (due) {
        snprintf(last, sizeof last, "%s", dir);
        last_at = now;
    }
    pthread_mutex_unlock(&mu);
    if (due)
        te__cc_sweep_tmp(dir);
}

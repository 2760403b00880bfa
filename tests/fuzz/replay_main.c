/*
 * Corpus replay for the normal test run: feeds every file of the given
 * directories (or single files) to a fuzz target's LLVMFuzzerTestOneInput,
 * each in a child process so that one crashing input is counted and the
 * rest still run. Files are taken in name order.
 *
 *   replay_<name> DIR_OR_FILE...
 *   replay_<name> --sequence DIR
 *
 * Prints one line per failing input and ends with exactly
 * "replay: N passed, N failed" (N counts inputs); exit status 1 when an
 * input failed or none was found. REPLAY_TIMEOUT (seconds, default 60)
 * bounds each input.
 *
 * --sequence runs the files of DIR in name order in this one process, for a
 * failure that depends on the inputs before it (a target that keeps state
 * across inputs saves such a sequence when a check fails); the first
 * failure aborts the run.
 */

#include "tests/fuzz/fuzz.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

struct tally {
    unsigned passed, failed;
};

static int
read_file(const char *path, uint8_t **data, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return -errno;
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        uint8_t *bigger = realloc(buf, cap * 2);
        if (bigger == NULL) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = bigger;
        cap *= 2;
    }
    int err = ferror(f) ? -EIO : 0;
    fclose(f);
    if (buf == NULL)
        return -ENOMEM;
    if (err) {
        free(buf);
        return err;
    }
    *data = buf;
    *size = n;
    return 0;
}

/* Run one input in a child; 0 when it returned normally. */
static int
run_one(const char *path, unsigned timeout)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return -errno;
    if (pid == 0) {
        uint8_t *data = NULL;
        size_t size = 0;
        alarm(timeout);
        if (read_file(path, &data, &size) != 0)
            _exit(2);
        LLVMFuzzerTestOneInput(data, size);
        free(data);
        exit(0); /* atexit handlers: the target's clean-up, leak checks */
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -errno;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    if (WIFSIGNALED(status))
        fprintf(stderr, "replay: FAIL %s (signal %d%s)\n", path,
                WTERMSIG(status),
                WTERMSIG(status) == SIGALRM ? ", timed out" : "");
    else
        fprintf(stderr, "replay: FAIL %s (exit status %d)\n", path,
                WEXITSTATUS(status));
    return -1;
}

static void
count(struct tally *t, int rc)
{
    if (rc == 0)
        t->passed++;
    else
        t->failed++;
}

static int
by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

static void
run_dir(const char *dir, unsigned timeout, struct tally *t)
{
    struct dirent **names;
    int n = scandir(dir, &names, NULL, by_name);
    if (n < 0) {
        fprintf(stderr, "replay: FAIL %s (%s)\n", dir, strerror(errno));
        t->failed++;
        return;
    }
    for (int i = 0; i < n; i++) {
        char path[4096];
        struct stat st;
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]->d_name);
        if (names[i]->d_name[0] != '.' && stat(path, &st) == 0 &&
            S_ISREG(st.st_mode))
            count(t, run_one(path, timeout));
        free(names[i]);
    }
    free(names);
}

/* Every file of dir, in name order, in this process. */
static int
run_sequence(const char *dir)
{
    struct dirent **names;
    int n = scandir(dir, &names, NULL, by_name), ran = 0;
    if (n < 0) {
        fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
        return 1;
    }
    for (int i = 0; i < n; i++) {
        char path[4096];
        uint8_t *data;
        size_t size;
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]->d_name);
        if (names[i]->d_name[0] != '.' && read_file(path, &data, &size) == 0) {
            fprintf(stderr, "replay: %s\n", path);
            LLVMFuzzerTestOneInput(data, size);
            free(data);
            ran++;
        }
        free(names[i]);
    }
    free(names);
    printf("replay: %d passed, 0 failed\n", ran);
    return ran > 0 ? 0 : 1;
}

int
main(int argc, char **argv)
{
    struct tally t = {0, 0};
    const char *env = getenv("REPLAY_TIMEOUT");
    unsigned timeout = env ? (unsigned)strtoul(env, NULL, 10) : 60;

    if (argc == 3 && strcmp(argv[1], "--sequence") == 0)
        return run_sequence(argv[2]);
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode))
            run_dir(argv[i], timeout, &t);
        else
            count(&t, run_one(argv[i], timeout));
    }
    if (t.passed + t.failed == 0)
        fprintf(stderr, "replay: no inputs given\n");
    printf("replay: %u passed, %u failed\n", t.passed, t.failed);
    return t.failed == 0 && t.passed > 0 ? 0 : 1;
}

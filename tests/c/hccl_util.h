/* hccl_util.h - running a test body on N ranks, each in its own process (forked before anything
 * is initialised), for test_hccl*.c. Rank 0 makes the RootInfo and hands it to the others through
 * an anonymous shared mapping; every rank joins the communicator, creates a stream and runs the
 * body. A rank fails if any CHECK failed in it, or if it crashed or hung (alarm).
 */
#ifndef HCCL_UTIL_H
#define HCCL_UTIL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "acl/acl.h"
#include "ctest_util.h"
#include "hccl_api.h"

#define MAX_RANKS 16

typedef struct shared_area {
    _Atomic int ready;
    HcclRootInfo root;
    uint64_t hash[MAX_RANKS];  /* a digest of each rank's result, to compare across ranks */
    double seconds[MAX_RANKS]; /* timings reported by the ranks */
} shared_area;

static shared_area *g_shared;

/* body(rank, n, comm, stream): returns nothing, CHECKs count failures in the rank's process. */
typedef void (*rank_body)(int rank, int n, HcclComm comm, aclrtStream stream);

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void rank_main(int rank, int n, rank_body body, bool join)
{
    ct_failures = 0; /* the parent's count is not this rank's */
    alarm(20);       /* a hang is a failure, not a stuck test */
    CHECK(aclInit(NULL) == ACL_SUCCESS);
    CHECK(aclrtSetDevice(0) == ACL_SUCCESS);
    if (rank == 0) {
        CHECK(HcclGetRootInfo(&g_shared->root) == HCCL_SUCCESS);
        atomic_store(&g_shared->ready, 1);
    } else {
        for (int i = 0; i < 10000 && !atomic_load(&g_shared->ready); i++)
            usleep(1000);
    }
    HcclComm comm = NULL;
    aclrtStream stream = NULL;
    CHECK(aclrtCreateStream(&stream) == ACL_SUCCESS);
    if (join) {
        HcclResult hr = HcclCommInitRootInfo((uint32_t)n, &g_shared->root, (uint32_t)rank, &comm);
        CHECK(hr == HCCL_SUCCESS);
        if (hr != HCCL_SUCCESS)
            fprintf(stderr, "rank %d: HcclCommInitRootInfo: %d %s\n", rank, hr,
                    aclGetRecentErrMsg());
    }
    if (!join || comm)
        body(rank, n, comm, stream);
    if (comm)
        CHECK(HcclCommDestroy(comm) == HCCL_SUCCESS);
    CHECK(aclrtDestroyStream(stream) == ACL_SUCCESS);
    CHECK(aclrtResetDevice(0) == ACL_SUCCESS);
    CHECK(aclFinalize() == ACL_SUCCESS);
    fflush(stdout);
    fflush(stderr);
    _exit(ct_failures ? 1 : 0);
}

/* Runs body on n ranks; join=false leaves the communicator to the body (comm is NULL). */
static const char *g_only; /* argv[1]: run only the tests whose name contains it */

static void run_ranks_ex(const char *name, int n, rank_body body, bool join)
{
    if (!g_shared) {
        g_shared = mmap(NULL, sizeof *g_shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                        -1, 0);
        if (g_shared == MAP_FAILED) {
            perror("mmap");
            exit(1);
        }
    }
    memset(g_shared, 0, sizeof *g_shared);
    if (g_only && !strstr(name, g_only))
        return;
    fflush(stdout);
    fflush(stderr);
    pid_t pids[MAX_RANKS];
    double t0 = now_seconds();
    for (int r = 0; r < n; r++) {
        pids[r] = fork();
        if (pids[r] == 0)
            rank_main(r, n, body, join);
        CHECK(pids[r] > 0);
    }
    int failed = 0;
    for (int r = 0; r < n; r++) {
        int status = 0;
        if (pids[r] <= 0 || waitpid(pids[r], &status, 0) != pids[r])
            continue;
        if (WIFSIGNALED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "%s: rank %d of %d failed (%s %d)\n", name, r, n,
                    WIFSIGNALED(status) ? "signal" : "exit",
                    WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
            failed++;
        }
    }
    CHECK(failed == 0);
    printf("%-44s %d ranks  %s  %.2f s\n", name, n, failed ? "FAILED" : "ok", now_seconds() - t0);
}

static void run_ranks(const char *name, int n, rank_body body) { run_ranks_ex(name, n, body, true); }

/* ---- device buffers ---- */
static void *dev_alloc(size_t bytes)
{
    void *p = NULL;
    CHECK(aclrtMalloc(&p, bytes, ACL_MEM_MALLOC_HUGE_FIRST) == ACL_SUCCESS);
    return p;
}

static void to_dev(void *dev, const void *host, size_t bytes)
{
    CHECK(aclrtMemcpy(dev, bytes, host, bytes, ACL_MEMCPY_HOST_TO_DEVICE) == ACL_SUCCESS);
}

static void from_dev(void *host, const void *dev, size_t bytes)
{
    CHECK(aclrtMemcpy(host, bytes, dev, bytes, ACL_MEMCPY_DEVICE_TO_HOST) == ACL_SUCCESS);
}

static uint64_t fnv(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* aclGetRecentErrMsg hands a message out once: the last one taken is kept here. */
static char g_msg[4096];

/* The message taken last contains needle (printed when it does not). */
static bool mentions(const char *needle)
{
    bool ok = strstr(g_msg, needle) != NULL;
    if (!ok)
        fprintf(stderr, "  message '%s' lacks '%s'\n", g_msg, needle);
    return ok;
}

/* Takes the recent error message and checks that it contains needle. */
static bool recent_mentions(const char *needle)
{
    const char *msg = aclGetRecentErrMsg();
    snprintf(g_msg, sizeof g_msg, "%s", msg ? msg : "(none)");
    return mentions(needle);
}

#endif /* HCCL_UTIL_H */

/* hccl.c - the HCCL subset (hccl/hccl.h) across processes on one host.
 *
 * Rendezvous: HcclGetRootInfo writes a random shared-memory name into the RootInfo blob. Every
 * rank's HcclCommInitRootInfo opens that POSIX shared-memory object (the first one creates and
 * sizes it, the others wait until it is ready), claims its rank slot and waits until all nRanks
 * have joined; the last to join unlinks the name, so nothing is left in /dev/shm.
 *
 * Execution: every call is checked at launch (communicator, type, op, count, ranks, buffers
 * inside live device allocations) and queued on the stream as an acl_host task, so it runs in
 * stream order. The task exchanges data through the shared segment:
 *  - collectives go chunk by chunk through two alternating stages; in a stage each rank has a
 *    slot of AH_HCCL_CHUNK bytes (plus one result slot for all-reduce). A rank writes its chunk
 *    and a description of its call, then waits on a barrier (every rank's arrival counter has
 *    reached the target); every rank then compares all descriptions, so a mismatch is seen by
 *    every rank at the same barrier. All-reduce is a reduce-scatter (rank r reduces its share of
 *    the chunk in rank order into the result slot), a second barrier, and a copy out.
 *    Two stages make a chunk's slots free for reuse two chunks later without another barrier.
 *  - send/recv use a channel per ordered pair of ranks: a counter of posted chunks and one of
 *    consumed chunks; a send completes when its last chunk has been consumed (HCCL's pairing).
 * Waiting is a futex on one process-shared word that every state change increments (waiters
 * are counted, so a change without waiters costs no system call).
 *
 * Failure: every wait has a deadline (CANN_LLM_HCCL_TIMEOUT seconds, default 60, read when the
 * communicator is made) and watches the processes it waits for: one that exited, or whose
 * communicator is gone (destroyed with nothing queued), fails the wait at once. A mismatch, a
 * timeout, a dead peer, a launch-time error or a buffer freed while queued on any rank marks the
 * communicator aborted, with a message naming what every rank called; every rank's pending and
 * later calls then fail with that message (at launch: an HcclResult; queued: the stream's
 * synchronize returns an error and aclGetRecentErrMsg says why). Nothing blocks forever and
 * nothing aborts the process. The segment is reserved with posix_fallocate, so a full /dev/shm
 * is an error at HcclCommInitRootInfo rather than a SIGBUS later.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "ah_rt.h"
#include "hccl_api.h"
#include "hccl_int.h"

#define AH_HCCL_MAX_RANKS 16
#define AH_HCCL_CHUNK ((size_t)1 << 20)      /* bytes per rank slot and stage, collectives */
#define AH_HCCL_P2P_CHUNK ((size_t)256 << 10) /* bytes per send/recv channel */
#define AH_HCCL_MSG 1024
#define AH_HCCL_VERSION 1u
#define SEG_READY 0x52454459u
#define ABORT_WRITING UINT32_MAX
static const char ROOT_MAGIC[8] = {'C', 'L', 'M', 'H', 'C', 'C', 'L', '1'};

/* ---- the RootInfo blob --------------------------------------------------------------------- */
typedef struct root_blob {
    char magic[8];
    uint32_t version;
    int32_t creator_pid;
    uint64_t nonce;
    char name[64]; /* shm_open name */
} root_blob;
_Static_assert(sizeof(root_blob) <= HCCL_ROOT_INFO_BYTES, "root info too small");

/* ---- the shared segment -------------------------------------------------------------------- */
enum call_kind { K_NONE, K_ALLREDUCE, K_ALLGATHER, K_BROADCAST, K_SEND, K_RECV };
static const char *const KIND_NAME[] = {"nothing", "HcclAllReduce", "HcclAllGather",
                                        "HcclBroadcast", "HcclSend", "HcclRecv"};

/* What a rank called: compared between ranks and quoted in messages. */
typedef struct sh_call {
    uint32_t kind, dtype, op, peer; /* peer: root (broadcast), destRank / srcRank (send/recv) */
    uint64_t count, seq;            /* seq: the rank's n-th collective, or n-th send to peer */
} sh_call;

enum rank_state { RS_IDLE, RS_RUNNING, RS_DONE, RS_FAILED, RS_GONE };
static const char *const STATE_NAME[] = {"idle", "in progress", "done", "failed", "destroyed"};

typedef struct sh_rank {
    _Atomic int32_t pid;      /* 0 until the rank joins */
    _Atomic uint32_t state;   /* rank_state of `last` */
    _Atomic uint64_t arrived; /* barriers this rank has arrived at */
    sh_call stage[2];         /* the call, per stage */
    sh_call last;             /* the call it runs (or ran last), for messages */
} sh_rank;

typedef struct sh_chan { /* src -> dst */
    _Atomic uint64_t posted, consumed;
    sh_call call;
    uint64_t bytes; /* in the posted chunk */
} sh_chan;

typedef struct sh_seg {
    _Atomic uint32_t ready;
    uint32_t version, n_ranks, pad;
    uint64_t nonce, size, data_off, p2p_off;
    _Atomic uint32_t joined;
    _Atomic uint32_t wake;    /* futex word: +1 at every state change */
    _Atomic uint32_t waiters; /* processes sleeping (or about to) on wake */
    _Atomic uint32_t aborted; /* 0; ABORT_WRITING while abort_msg is written; then 1 + rank */
    char abort_msg[AH_HCCL_MSG];
    sh_rank ranks[AH_HCCL_MAX_RANKS];
    sh_chan chan[AH_HCCL_MAX_RANKS][AH_HCCL_MAX_RANKS];
} sh_seg;

/* ---- the communicator (one per rank and process) -------------------------------------------- */
#define COMM_MAGIC 0x48434f4du
typedef struct ah_comm {
    uint32_t magic;
    _Atomic int refs; /* the handle + queued tasks */
    uint32_t rank, n;
    int device;
    double timeout_s; /* CANN_LLM_HCCL_TIMEOUT */
    sh_seg *seg;
    size_t map_size;
    pthread_mutex_t exec; /* one call of this communicator runs at a time */
    uint64_t bar;         /* barriers passed */
    uint64_t chunk_no;    /* collective chunks run (stage = chunk_no % 2) */
    uint64_t coll_seq;
    uint64_t send_seq[AH_HCCL_MAX_RANKS], recv_seq[AH_HCCL_MAX_RANKS];
} ah_comm;

static pthread_mutex_t g_comms_mutex = PTHREAD_MUTEX_INITIALIZER;
static ah_comm *g_comms[256]; /* live handles */

static HcclResult herr(HcclResult code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static HcclResult herr(HcclResult code, const char *fmt, ...)
{
    char buf[AH_ERRMSG_SIZE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    ah_error_set_message(buf);
    return code;
}

/* ---- element types and limits ----------------------------------------------------------------- */
static size_t dtype_size(uint32_t t)
{
    switch (t) {
    case HCCL_DATA_TYPE_INT8: case HCCL_DATA_TYPE_UINT8: return 1;
    case HCCL_DATA_TYPE_INT16: case HCCL_DATA_TYPE_UINT16: case HCCL_DATA_TYPE_FP16:
    case HCCL_DATA_TYPE_BFP16: return 2;
    case HCCL_DATA_TYPE_INT32: case HCCL_DATA_TYPE_UINT32: case HCCL_DATA_TYPE_FP32: return 4;
    case HCCL_DATA_TYPE_INT64: case HCCL_DATA_TYPE_UINT64: case HCCL_DATA_TYPE_FP64: return 8;
    default: return 0;
    }
}

static const char *dtype_name(uint32_t t)
{
    switch (t) {
    case HCCL_DATA_TYPE_INT8: return "int8";
    case HCCL_DATA_TYPE_INT16: return "int16";
    case HCCL_DATA_TYPE_INT32: return "int32";
    case HCCL_DATA_TYPE_FP16: return "fp16";
    case HCCL_DATA_TYPE_FP32: return "fp32";
    case HCCL_DATA_TYPE_INT64: return "int64";
    case HCCL_DATA_TYPE_UINT64: return "uint64";
    case HCCL_DATA_TYPE_UINT8: return "uint8";
    case HCCL_DATA_TYPE_UINT16: return "uint16";
    case HCCL_DATA_TYPE_UINT32: return "uint32";
    case HCCL_DATA_TYPE_FP64: return "fp64";
    case HCCL_DATA_TYPE_BFP16: return "bf16";
    case HCCL_DATA_TYPE_INT128: return "int128";
    default: return "unknown type";
    }
}

static const char *op_name(uint32_t op)
{
    static const char *const names[] = {"sum", "prod", "max", "min"};
    return op < 4 ? names[op] : "unknown op";
}

/* HcclAllReduce: int8, int16, int32, fp16, fp32, bf16 (the 8.1 header's list). */
static bool reduce_dtype_ok(uint32_t t)
{
    return t == HCCL_DATA_TYPE_INT8 || t == HCCL_DATA_TYPE_INT16 || t == HCCL_DATA_TYPE_INT32 ||
           t == HCCL_DATA_TYPE_FP16 || t == HCCL_DATA_TYPE_FP32 || t == HCCL_DATA_TYPE_BFP16;
}

static int describe_call(char *buf, size_t size, const sh_call *c)
{
    const char *kind = c->kind <= K_RECV ? KIND_NAME[c->kind] : "?";
    switch (c->kind) {
    case K_NONE: return snprintf(buf, size, "no call yet");
    case K_ALLREDUCE:
        return snprintf(buf, size, "%s #%" PRIu64 " (count %" PRIu64 ", %s, %s)", kind, c->seq,
                        c->count, dtype_name(c->dtype), op_name(c->op));
    case K_BROADCAST:
        return snprintf(buf, size, "%s #%" PRIu64 " (count %" PRIu64 ", %s, root %u)", kind,
                        c->seq, c->count, dtype_name(c->dtype), c->peer);
    case K_SEND: case K_RECV:
        return snprintf(buf, size, "%s #%" PRIu64 " %s rank %u (count %" PRIu64 ", %s)", kind,
                        c->seq, c->kind == K_SEND ? "to" : "from", c->peer, c->count,
                        dtype_name(c->dtype));
    default:
        return snprintf(buf, size, "%s #%" PRIu64 " (count %" PRIu64 ", %s)", kind, c->seq,
                        c->count, dtype_name(c->dtype));
    }
}

/* CANN_LLM_HCCL_TIMEOUT: seconds (a decimal number in (0, 86400]), default 60; -1 if malformed. */
static double timeout_seconds(void)
{
    const char *s = getenv("CANN_LLM_HCCL_TIMEOUT");
    if (!s || !*s)
        return 60;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || !(v > 0 && v <= 86400))
        return -1;
    return v;
}

/* ---- waiting -------------------------------------------------------------------------------- */
static long futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, (uint32_t *)addr, op, val, ts, NULL, 0);
}

static void seg_wake(sh_seg *seg)
{
    atomic_fetch_add(&seg->wake, 1);
    if (atomic_load(&seg->waiters) > 0)
        futex(&seg->wake, FUTEX_WAKE, INT_MAX, NULL);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static bool pid_alive(int32_t pid)
{
    if (pid <= 0)
        return true;
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return false;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return true;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return true;
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* "pid (comm) S ..." */
    return !(p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X'));
}

/* The communicator's abort message ("" if not aborted). */
static const char *abort_message(sh_seg *seg)
{
    uint32_t a = atomic_load(&seg->aborted);
    for (int i = 0; a == ABORT_WRITING && i < 100000; i++) { /* the writer is in snprintf */
        sched_yield();
        a = atomic_load(&seg->aborted);
    }
    return a && a != ABORT_WRITING ? seg->abort_msg : a ? "(the communicator failed)" : "";
}

/* Marks the communicator aborted with msg (the first abort wins) and wakes every waiter. */
static void comm_abort(ah_comm *c, const char *msg)
{
    uint32_t expect = 0;
    if (atomic_compare_exchange_strong(&c->seg->aborted, &expect, ABORT_WRITING)) {
        size_t n = strnlen(msg, sizeof c->seg->abort_msg - 1); /* truncated to the slot */
        memcpy(c->seg->abort_msg, msg, n);
        c->seg->abort_msg[n] = '\0';
        atomic_store(&c->seg->aborted, c->rank + 1);
    }
    seg_wake(c->seg);
}

/* "rank 0: HcclAllReduce #2 (...) [in progress]; rank 1: ..." */
static void describe_ranks(ah_comm *c, char *buf, size_t size)
{
    size_t off = 0;
    for (uint32_t r = 0; r < c->n && off < size; r++) {
        sh_rank *sr = &c->seg->ranks[r];
        char call[160];
        describe_call(call, sizeof call, &sr->last);
        uint32_t st = atomic_load(&sr->state);
        int32_t pid = atomic_load(&sr->pid);
        int w = snprintf(buf + off, size - off, "%srank %u: %s [%s%s]", r ? "; " : "", r, call,
                         st <= RS_GONE ? STATE_NAME[st] : "?",
                         pid > 0 && !pid_alive(pid) ? ", process exited" : "");
        if (w < 0)
            break;
        off += (size_t)w;
    }
}

typedef bool (*cond_fn)(ah_comm *c, void *ctx, uint32_t *blocker);

/* Waits until cond holds. Fails (and aborts the communicator) on timeout or when a process it
 * waits for (*blocker, set by cond) has exited; fails when another rank aborted. */
static aclError wait_for(ah_comm *c, cond_fn cond, void *ctx, const char *api, double deadline)
{
    sh_seg *seg = c->seg;
    double next_check = now_s() + 0.05;
    for (int spin = 0;; spin++) {
        uint32_t w = atomic_load(&seg->wake);
        uint32_t blocker = UINT32_MAX;
        if (cond(c, ctx, &blocker)) /* an abort after this point is seen by the next wait */
            return ACL_SUCCESS;
        if (atomic_load(&seg->aborted))
            return ah_error(ACL_ERROR_RT_SUSPECT_REMOTE_ERROR, "%s on rank %u failed: %s", api,
                            c->rank, abort_message(seg));
        if (spin < 64)
            continue;
        double t = now_s();
        char msg[AH_HCCL_MSG], ranks[AH_HCCL_MSG - 160];
        if (t >= next_check) {
            next_check = t + 0.05;
            bool dead = blocker < c->n && !pid_alive(atomic_load(&seg->ranks[blocker].pid));
            bool gone = blocker < c->n && atomic_load(&seg->ranks[blocker].state) == RS_GONE;
            if (dead || gone) {
                describe_ranks(c, ranks, sizeof ranks);
                snprintf(msg, sizeof msg, "%s: rank %u (pid %d) %s while rank %u waited for it; %s",
                         api, blocker, (int)atomic_load(&seg->ranks[blocker].pid),
                         dead ? "exited" : "destroyed its communicator", c->rank, ranks);
                comm_abort(c, msg);
                return ah_error(ACL_ERROR_RT_SUSPECT_REMOTE_ERROR, "%s", msg);
            }
        }
        if (t >= deadline) {
            describe_ranks(c, ranks, sizeof ranks);
            snprintf(msg, sizeof msg,
                     "%s: timed out after %g s (CANN_LLM_HCCL_TIMEOUT) on rank %u waiting for "
                     "rank %u; %s", api, c->timeout_s, c->rank, blocker, ranks);
            comm_abort(c, msg);
            return ah_error(ACL_ERROR_RT_TASK_TIMEOUT, "%s", msg);
        }
        double slice = deadline - t < 0.05 ? deadline - t : 0.05;
        struct timespec ts = {0, (long)(slice * 1e9)};
        atomic_fetch_add(&seg->waiters, 1);
        if (!cond(c, ctx, &blocker) && !atomic_load(&seg->aborted))
            futex(&seg->wake, FUTEX_WAIT, w, &ts);
        atomic_fetch_sub(&seg->waiters, 1);
    }
}

/* ---- RootInfo and communicator creation ----------------------------------------------------- */
AH_API HcclResult HcclGetRootInfo(HcclRootInfo *rootInfo)
{
    if (!rootInfo)
        return herr(HCCL_E_PTR, "HcclGetRootInfo: rootInfo is NULL");
    if (ah_rt_require_device("HcclGetRootInfo", NULL) != ACL_SUCCESS)
        return HCCL_E_RUNTIME;
    root_blob b;
    memset(&b, 0, sizeof b);
    memcpy(b.magic, ROOT_MAGIC, sizeof b.magic);
    b.version = AH_HCCL_VERSION;
    b.creator_pid = (int32_t)getpid();
    if (getrandom(&b.nonce, sizeof b.nonce, 0) != (ssize_t)sizeof b.nonce) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        b.nonce = ((uint64_t)ts.tv_nsec << 32) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 16);
    }
    snprintf(b.name, sizeof b.name, "/cann-llm-hccl-%d-%016" PRIx64, (int)b.creator_pid, b.nonce);
    memset(rootInfo, 0, sizeof *rootInfo);
    memcpy(rootInfo->internal, &b, sizeof b);
    return HCCL_SUCCESS;
}

static size_t page_up(size_t x) { return (x + 4095) & ~(size_t)4095; }

static void seg_layout(uint32_t n, size_t *data_off, size_t *p2p_off, size_t *size)
{
    *data_off = page_up(sizeof(sh_seg));
    *p2p_off = *data_off + 2 * (size_t)(n + 1) * AH_HCCL_CHUNK;
    *size = *p2p_off + (size_t)n * n * AH_HCCL_P2P_CHUNK;
}

static unsigned char *stage_slot(ah_comm *c, uint64_t stage, uint32_t slot)
{
    return (unsigned char *)c->seg + c->seg->data_off +
           ((size_t)stage * (c->n + 1) + slot) * AH_HCCL_CHUNK;
}

static unsigned char *chan_buf(ah_comm *c, uint32_t src, uint32_t dst)
{
    return (unsigned char *)c->seg + c->seg->p2p_off + ((size_t)src * c->n + dst) * AH_HCCL_P2P_CHUNK;
}

/* The last reference (the handle destroyed, no task queued) marks the rank gone: a rank waiting
 * for it fails at once instead of at the timeout. */
static void comm_unref(ah_comm *c)
{
    if (atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    if (c->rank < c->seg->n_ranks && atomic_load(&c->seg->ranks[c->rank].pid) == (int32_t)getpid()) {
        atomic_store(&c->seg->ranks[c->rank].state, RS_GONE);
        seg_wake(c->seg);
    }
    munmap(c->seg, c->map_size);
    pthread_mutex_destroy(&c->exec);
    c->magic = 0;
    free(c);
}

static bool all_joined(ah_comm *c, void *ctx, uint32_t *blocker)
{
    (void)ctx;
    if (atomic_load(&c->seg->joined) >= c->n)
        return true;
    for (uint32_t r = 0; r < c->n; r++)
        if (atomic_load(&c->seg->ranks[r].pid) == 0) {
            *blocker = r;
            break;
        }
    return false;
}

/* Opens (creating if first) the segment named by the blob; fills c->seg / c->map_size. */
static HcclResult seg_attach(ah_comm *c, const root_blob *b, double deadline)
{
    const char *api = "HcclCommInitRootInfo";
    size_t data_off, p2p_off, size;
    seg_layout(c->n, &data_off, &p2p_off, &size);
    int fd = shm_open(b->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) { /* the first rank here: reserve (which sizes it) and initialise it */
        int e = posix_fallocate(fd, 0, (off_t)size);
        if (e != 0) {
            close(fd);
            shm_unlink(b->name);
            return herr(HCCL_E_MEMORY, "%s: cannot reserve %.1f MiB of shared memory for %s (%u "
                        "ranks) in /dev/shm: %s", api, size / 1048576.0, b->name, c->n,
                        strerror(e));
        }
        void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (p == MAP_FAILED) {
            shm_unlink(b->name);
            return herr(HCCL_E_MEMORY, "%s: cannot map the shared segment: %s", api, strerror(errno));
        }
        sh_seg *seg = p; /* posix_fallocate zero-filled it */
        seg->version = AH_HCCL_VERSION;
        seg->n_ranks = c->n;
        seg->nonce = b->nonce;
        seg->size = size;
        seg->data_off = data_off;
        seg->p2p_off = p2p_off;
        atomic_store(&seg->ready, SEG_READY);
        c->seg = seg;
        c->map_size = size;
        return HCCL_SUCCESS;
    }
    if (errno != EEXIST)
        return herr(HCCL_E_SYSCALL, "%s: shm_open(%s): %s", api, b->name, strerror(errno));
    /* another rank creates it: wait until it is sized and marked ready */
    for (;;) {
        fd = shm_open(b->name, O_RDWR | O_CLOEXEC, 0600);
        struct stat st;
        if (fd >= 0 && fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof(sh_seg)) {
            sh_seg *seg = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            close(fd);
            if (seg == MAP_FAILED)
                return herr(HCCL_E_MEMORY, "%s: cannot map the shared segment: %s", api,
                            strerror(errno));
            while (atomic_load(&seg->ready) != SEG_READY && now_s() < deadline)
                usleep(1000);
            c->seg = seg;
            c->map_size = (size_t)st.st_size;
            if (atomic_load(&seg->ready) != SEG_READY)
                return herr(HCCL_E_TIMEOUT, "%s: the shared segment %s was never initialised "
                            "(timed out after %g s, CANN_LLM_HCCL_TIMEOUT)", api, b->name,
                            c->timeout_s);
            if (seg->nonce != b->nonce || seg->version != AH_HCCL_VERSION)
                return herr(HCCL_E_PARA, "%s: %s belongs to another communicator", api, b->name);
            return HCCL_SUCCESS;
        }
        if (fd >= 0)
            close(fd);
        if (now_s() >= deadline)
            return herr(HCCL_E_TIMEOUT, "%s: timed out after %g s (CANN_LLM_HCCL_TIMEOUT) waiting "
                        "for rank 0's %s to be created", api, c->timeout_s, b->name);
        usleep(1000);
    }
}

static HcclResult register_comm(ah_comm *c)
{
    pthread_mutex_lock(&g_comms_mutex);
    for (size_t i = 0; i < sizeof g_comms / sizeof g_comms[0]; i++)
        if (!g_comms[i]) {
            g_comms[i] = c;
            pthread_mutex_unlock(&g_comms_mutex);
            return HCCL_SUCCESS;
        }
    pthread_mutex_unlock(&g_comms_mutex);
    return herr(HCCL_E_UNAVAIL, "HcclCommInitRootInfo: too many communicators in this process");
}

/* A live handle, with a reference taken; NULL (message set) otherwise. */
static ah_comm *comm_get(HcclComm handle, const char *api)
{
    ah_comm *found = NULL;
    pthread_mutex_lock(&g_comms_mutex);
    for (size_t i = 0; handle && i < sizeof g_comms / sizeof g_comms[0]; i++)
        if (g_comms[i] == handle) {
            found = g_comms[i];
            atomic_fetch_add(&found->refs, 1);
            break;
        }
    pthread_mutex_unlock(&g_comms_mutex);
    if (!found)
        herr(HCCL_E_PARA, "%s: %p is not a live communicator (HcclCommInitRootInfo)", api, handle);
    return found;
}

AH_API HcclResult HcclCommInitRootInfo(uint32_t nRanks, const HcclRootInfo *rootInfo, uint32_t rank,
                                       HcclComm *comm)
{
    const char *api = "HcclCommInitRootInfo";
    if (!rootInfo || !comm)
        return herr(HCCL_E_PTR, "%s: %s is NULL", api, rootInfo ? "comm" : "rootInfo");
    if (nRanks == 0 || nRanks > AH_HCCL_MAX_RANKS)
        return herr(nRanks ? HCCL_E_NOT_SUPPORT : HCCL_E_PARA,
                    "%s: nRanks %u is outside 1..%d (acl_host supports one host's devices)", api,
                    nRanks, AH_HCCL_MAX_RANKS);
    if (rank >= nRanks)
        return herr(HCCL_E_PARA, "%s: rank %u is not below nRanks %u", api, rank, nRanks);
    int device = -1;
    if (ah_rt_require_device(api, &device) != ACL_SUCCESS)
        return HCCL_E_RUNTIME;
    root_blob b;
    memcpy(&b, rootInfo->internal, sizeof b);
    if (memcmp(b.magic, ROOT_MAGIC, sizeof b.magic) != 0 || b.version != AH_HCCL_VERSION ||
        memchr(b.name, '\0', sizeof b.name) == NULL || b.name[0] != '/')
        return herr(HCCL_E_PARA, "%s: rootInfo was not made by HcclGetRootInfo", api);

    double timeout_s = timeout_seconds();
    if (timeout_s < 0)
        return herr(HCCL_E_PARA, "%s: CANN_LLM_HCCL_TIMEOUT='%s' is not a number of seconds in "
                    "(0, 86400]", api, getenv("CANN_LLM_HCCL_TIMEOUT"));
    ah_comm *c = calloc(1, sizeof *c);
    if (!c)
        return herr(HCCL_E_MEMORY, "%s: out of host memory", api);
    c->magic = COMM_MAGIC;
    atomic_init(&c->refs, 1);
    c->rank = rank;
    c->n = nRanks;
    c->device = device;
    c->timeout_s = timeout_s;
    pthread_mutex_init(&c->exec, NULL);
    double deadline = now_s() + timeout_s;
    HcclResult hr = seg_attach(c, &b, deadline);
    if (hr != HCCL_SUCCESS) {
        if (c->seg)
            munmap(c->seg, c->map_size);
        free(c);
        return hr;
    }
    sh_seg *seg = c->seg;
    char msg[AH_HCCL_MSG];
    if (seg->n_ranks != nRanks || c->map_size < seg->size) {
        snprintf(msg, sizeof msg, "%s: rank %u passed nRanks %u but the communicator was created "
                 "with nRanks %u", api, rank, nRanks, seg->n_ranks);
        comm_abort(c, msg);
        hr = herr(HCCL_E_PARA, "%s", msg);
    } else {
        int32_t zero = 0;
        if (!atomic_compare_exchange_strong(&seg->ranks[rank].pid, &zero, (int32_t)getpid())) {
            snprintf(msg, sizeof msg, "%s: rank %u joined twice (pids %d and %d)", api, rank,
                     (int)zero, (int)getpid());
            comm_abort(c, msg);
            hr = herr(HCCL_E_PARA, "%s", msg);
        } else {
            if (atomic_fetch_add(&seg->joined, 1) + 1 == nRanks)
                shm_unlink(b.name); /* everyone has it mapped */
            seg_wake(seg);
            aclError rc = wait_for(c, all_joined, NULL, api, deadline);
            if (rc != ACL_SUCCESS)
                hr = rc == ACL_ERROR_RT_TASK_TIMEOUT ? HCCL_E_TIMEOUT : HCCL_E_REMOTE;
        }
    }
    if (hr == HCCL_SUCCESS)
        hr = register_comm(c);
    if (hr != HCCL_SUCCESS) {
        if (atomic_load(&seg->joined) < nRanks)
            shm_unlink(b.name); /* nobody else can complete this communicator */
        comm_unref(c);
        return hr;
    }
    *comm = c;
    return HCCL_SUCCESS;
}

AH_API HcclResult HcclCommDestroy(HcclComm comm)
{
    ah_comm *c = NULL;
    pthread_mutex_lock(&g_comms_mutex);
    for (size_t i = 0; comm && i < sizeof g_comms / sizeof g_comms[0]; i++)
        if (g_comms[i] == comm) {
            c = g_comms[i];
            g_comms[i] = NULL;
            break;
        }
    pthread_mutex_unlock(&g_comms_mutex);
    if (!c)
        return herr(HCCL_E_PARA, "HcclCommDestroy: %p is not a live communicator", comm);
    atomic_store(&c->seg->ranks[c->rank].state, RS_GONE);
    seg_wake(c->seg);
    comm_unref(c); /* queued tasks keep it mapped until they are released */
    return HCCL_SUCCESS;
}

AH_API HcclResult HcclGetRankSize(HcclComm comm, uint32_t *rankSize)
{
    if (!rankSize)
        return herr(HCCL_E_PTR, "HcclGetRankSize: rankSize is NULL");
    ah_comm *c = comm_get(comm, "HcclGetRankSize");
    if (!c)
        return HCCL_E_PARA;
    *rankSize = c->n;
    comm_unref(c);
    return HCCL_SUCCESS;
}

AH_API HcclResult HcclGetRankId(HcclComm comm, uint32_t *rank)
{
    if (!rank)
        return herr(HCCL_E_PTR, "HcclGetRankId: rank is NULL");
    ah_comm *c = comm_get(comm, "HcclGetRankId");
    if (!c)
        return HCCL_E_PARA;
    *rank = c->rank;
    comm_unref(c);
    return HCCL_SUCCESS;
}

AH_API const char *HcclGetErrorString(HcclResult code)
{
    static const char *const names[] = {
        "no error", "parameter error", "empty pointer", "memory error", "internal error",
        "not supported", "resource not found", "resource unavailable", "system call error",
        "timeout", "open file failure", "tcp connect failure", "roce connect failure",
        "tcp transfer failure", "roce transfer failure", "runtime error", "driver error",
        "profiling error", "cce error", "network error", "try again", "remote error",
        "communicator suspending", "retry failed", "out of memory"};
    if ((unsigned)code < sizeof names / sizeof names[0])
        return names[code];
    return "unknown error";
}

/* ---- running a call -------------------------------------------------------------------------- */
typedef struct hccl_task {
    ah_comm *comm;
    sh_call call; /* seq is assigned when it runs */
    unsigned char *send, *recv;
    ah_range ranges[2]; /* re-checked when the task runs */
    size_t n_ranges;
} hccl_task;

static void task_release(void *arg)
{
    hccl_task *t = arg;
    comm_unref(t->comm);
    free(t);
}

typedef struct barrier_ctx {
    uint64_t target;
} barrier_ctx;

static bool barrier_reached(ah_comm *c, void *ctx, uint32_t *blocker)
{
    uint64_t target = ((barrier_ctx *)ctx)->target;
    for (uint32_t r = 0; r < c->n; r++)
        if (atomic_load(&c->seg->ranks[r].arrived) < target) {
            *blocker = r;
            return false;
        }
    return true;
}

static aclError barrier(ah_comm *c, const char *api, double deadline)
{
    barrier_ctx ctx = {++c->bar};
    atomic_store(&c->seg->ranks[c->rank].arrived, c->bar);
    seg_wake(c->seg);
    return wait_for(c, barrier_reached, &ctx, api, deadline);
}

static bool same_call(const sh_call *a, const sh_call *b)
{
    return a->kind == b->kind && a->dtype == b->dtype && a->op == b->op && a->peer == b->peer &&
           a->count == b->count && a->seq == b->seq;
}

/* After a barrier: every rank compares every rank's call in the stage (so all see a mismatch). */
static aclError check_stage(ah_comm *c, uint64_t stage, const char *api)
{
    sh_seg *seg = c->seg;
    for (uint32_t r = 1; r < c->n; r++)
        if (!same_call(&seg->ranks[r].stage[stage], &seg->ranks[0].stage[stage])) {
            char msg[AH_HCCL_MSG];
            size_t off = (size_t)snprintf(msg, sizeof msg,
                                          "%s: the ranks' calls do not match (every rank must "
                                          "make the same collective with the same count, type, "
                                          "op and root):", api);
            for (uint32_t j = 0; j < c->n && off < sizeof msg; j++) {
                char call[160];
                describe_call(call, sizeof call, &seg->ranks[j].stage[stage]);
                off += (size_t)snprintf(msg + off, sizeof msg - off, "%s rank %u called %s",
                                        j ? ";" : "", j, call);
            }
            comm_abort(c, msg);
            return ah_error(ACL_ERROR_RT_SUSPECT_REMOTE_ERROR, "%s", msg);
        }
    return ACL_SUCCESS;
}

static aclError run_collective(ah_comm *c, hccl_task *t, const char *api, double deadline)
{
    const sh_call *call = &t->call;
    size_t es = dtype_size(call->dtype);
    size_t per_chunk = AH_HCCL_CHUNK / es;
    uint64_t count = call->count;
    sh_rank *me = &c->seg->ranks[c->rank];
    for (uint64_t done = 0; done < count;) {
        size_t len = count - done < per_chunk ? (size_t)(count - done) : per_chunk;
        uint64_t stage = c->chunk_no++ & 1;
        me->stage[stage] = *call;
        size_t off = (size_t)done * es, bytes = len * es;
        if (call->kind != K_BROADCAST || call->peer == c->rank)
            memcpy(stage_slot(c, stage, c->rank), (call->kind == K_BROADCAST ? t->recv : t->send) + off,
                   bytes);
        aclError rc = barrier(c, api, deadline);
        if (rc == ACL_SUCCESS)
            rc = check_stage(c, stage, api);
        if (rc != ACL_SUCCESS)
            return rc;
        if (call->kind == K_ALLREDUCE) {
            size_t lo = len * c->rank / c->n, hi = len * (c->rank + 1) / c->n;
            const void *srcs[AH_HCCL_MAX_RANKS];
            for (uint32_t r = 0; r < c->n; r++)
                srcs[r] = stage_slot(c, stage, r) + lo * es;
            if (hi > lo)
                ah_hccl_reduce(call->dtype, call->op, stage_slot(c, stage, c->n) + lo * es, srcs,
                               c->n, hi - lo);
            rc = barrier(c, api, deadline);
            if (rc != ACL_SUCCESS)
                return rc;
            memcpy(t->recv + off, stage_slot(c, stage, c->n), bytes);
        } else if (call->kind == K_ALLGATHER) {
            for (uint32_t r = 0; r < c->n; r++)
                memcpy(t->recv + (size_t)r * count * es + off, stage_slot(c, stage, r), bytes);
        } else if (call->peer != c->rank) { /* broadcast */
            memcpy(t->recv + off, stage_slot(c, stage, call->peer), bytes);
        }
        done += len;
    }
    return ACL_SUCCESS;
}

typedef struct chan_ctx {
    sh_chan *ch;
    uint32_t peer;
    bool want_posted; /* recv: a chunk is posted; send: everything posted was consumed */
} chan_ctx;

static bool chan_ready(ah_comm *c, void *arg, uint32_t *blocker)
{
    chan_ctx *x = arg;
    (void)c;
    *blocker = x->peer;
    uint64_t posted = atomic_load(&x->ch->posted), consumed = atomic_load(&x->ch->consumed);
    return x->want_posted ? posted > consumed : posted == consumed;
}

static aclError run_send(ah_comm *c, hccl_task *t, const char *api, double deadline)
{
    const sh_call *call = &t->call;
    size_t es = dtype_size(call->dtype), total = (size_t)call->count * es;
    sh_chan *ch = &c->seg->chan[c->rank][call->peer];
    chan_ctx ctx = {ch, call->peer, false};
    unsigned char *buf = chan_buf(c, c->rank, call->peer);
    for (size_t off = 0; off < total;) {
        size_t bytes = total - off < AH_HCCL_P2P_CHUNK ? total - off : AH_HCCL_P2P_CHUNK;
        aclError rc = wait_for(c, chan_ready, &ctx, api, deadline);
        if (rc != ACL_SUCCESS)
            return rc;
        memcpy(buf, t->send + off, bytes);
        ch->call = *call;
        ch->bytes = bytes;
        atomic_fetch_add(&ch->posted, 1);
        seg_wake(c->seg);
        off += bytes;
    }
    return wait_for(c, chan_ready, &ctx, api, deadline); /* the last chunk taken */
}

static aclError run_recv(ah_comm *c, hccl_task *t, const char *api, double deadline)
{
    const sh_call *call = &t->call;
    size_t es = dtype_size(call->dtype), total = (size_t)call->count * es;
    sh_chan *ch = &c->seg->chan[call->peer][c->rank];
    chan_ctx ctx = {ch, call->peer, true};
    const unsigned char *buf = chan_buf(c, call->peer, c->rank);
    for (size_t off = 0; off < total;) {
        aclError rc = wait_for(c, chan_ready, &ctx, api, deadline);
        if (rc != ACL_SUCCESS)
            return rc;
        const sh_call *s = &ch->call;
        size_t bytes = total - off < AH_HCCL_P2P_CHUNK ? total - off : AH_HCCL_P2P_CHUNK;
        if (s->count != call->count || s->dtype != call->dtype || s->seq != call->seq ||
            ch->bytes != bytes) {
            char mine[160], theirs[160], msg[AH_HCCL_MSG];
            describe_call(mine, sizeof mine, call);
            describe_call(theirs, sizeof theirs, s);
            snprintf(msg, sizeof msg, "%s: send and receive do not match (count and type must "
                     "be equal): rank %u called %s; rank %u called %s", api, call->peer, theirs,
                     c->rank, mine);
            comm_abort(c, msg);
            return ah_error(ACL_ERROR_RT_SUSPECT_REMOTE_ERROR, "%s", msg);
        }
        memcpy(t->recv + off, buf, bytes);
        atomic_fetch_add(&ch->consumed, 1);
        seg_wake(c->seg);
        off += bytes;
    }
    return ACL_SUCCESS;
}

static aclError task_run(void *arg)
{
    hccl_task *t = arg;
    ah_comm *c = t->comm;
    const char *api = KIND_NAME[t->call.kind];
    double deadline = now_s() + c->timeout_s;
    pthread_mutex_lock(&c->exec);
    sh_rank *me = &c->seg->ranks[c->rank];
    aclError rc = ACL_SUCCESS;
    /* a buffer freed while the call was queued: this rank cannot take part, so the others must
     * not wait for it */
    for (size_t i = 0; i < t->n_ranges && rc == ACL_SUCCESS; i++)
        rc = ah_mem_check_live(&t->ranges[i], api);
    if (rc != ACL_SUCCESS) {
        char why[AH_ERRMSG_SIZE], msg[AH_HCCL_MSG + 32];
        ah_error_take(why, sizeof why);
        snprintf(msg, sizeof msg, "rank %u: %s", c->rank, why);
        comm_abort(c, msg);
        rc = ah_error(ACL_ERROR_RT_AICORE_EXCEPTION, "%s", why);
        pthread_mutex_unlock(&c->exec);
        return rc;
    }
    if (atomic_load(&c->seg->aborted)) {
        rc = ah_error(ACL_ERROR_RT_SUSPECT_REMOTE_ERROR,
                      "%s on rank %u: the communicator failed earlier: %s", api, c->rank,
                      abort_message(c->seg));
        pthread_mutex_unlock(&c->exec);
        return rc;
    }
    if (t->call.kind == K_SEND)
        t->call.seq = ++c->send_seq[t->call.peer];
    else if (t->call.kind == K_RECV)
        t->call.seq = ++c->recv_seq[t->call.peer];
    else
        t->call.seq = ++c->coll_seq;
    me->last = t->call;
    atomic_store(&me->state, RS_RUNNING);
    if (t->call.kind == K_SEND)
        rc = run_send(c, t, api, deadline);
    else if (t->call.kind == K_RECV)
        rc = run_recv(c, t, api, deadline);
    else
        rc = run_collective(c, t, api, deadline);
    atomic_store(&me->state, rc == ACL_SUCCESS ? RS_DONE : RS_FAILED);
    pthread_mutex_unlock(&c->exec);
    return rc;
}

/* ---- launching ----------------------------------------------------------------------------- */
/* A launch-time error on a live communicator aborts it too, so that the other ranks (which
 * would wait for this rank's call) fail at once instead of at the timeout. */
static HcclResult launch_fail(ah_comm *c, HcclResult code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static HcclResult launch_fail(ah_comm *c, HcclResult code, const char *fmt, ...)
{
    char buf[AH_HCCL_MSG], msg[AH_HCCL_MSG + 64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    snprintf(msg, sizeof msg, "rank %u refused a call at launch: %s", c->rank, buf);
    comm_abort(c, msg);
    ah_error_set_message(buf);
    comm_unref(c);
    return code;
}

/* Checks a buffer of `bytes` at p: device memory of the communicator's device, aligned. */
static HcclResult check_buffer(ah_comm *c, const char *api, const char *what, const void *p,
                               size_t bytes, size_t es)
{
    char name[96];
    snprintf(name, sizeof name, "%s: %s", api, what);
    if (ah_mem_check_device(p, bytes, name) != ACL_SUCCESS) {
        char why[AH_ERRMSG_SIZE];
        ah_error_take(why, sizeof why);
        return launch_fail(c, HCCL_E_PARA, "%s", why);
    }
    ah_mem_kind kind;
    int dev = -1;
    if (ah_mem_classify(p, bytes, &kind, &dev) == ACL_SUCCESS && dev != c->device)
        return launch_fail(c, HCCL_E_PARA, "%s %p is memory of device %d, but the communicator "
                           "belongs to device %d", name, p, dev, c->device);
    if ((uintptr_t)p % es)
        return launch_fail(c, HCCL_E_PARA, "%s %p is not aligned to its %zu-byte elements", name,
                           p, es);
    return HCCL_SUCCESS;
}

static bool overlap(const unsigned char *a, size_t na, const unsigned char *b, size_t nb)
{
    return a < b + nb && b < a + na;
}

static HcclResult launch(HcclComm comm, uint32_t kind, void *send, void *recv, uint64_t count,
                         uint32_t dtype, uint32_t op, uint32_t peer, aclrtStream stream)
{
    const char *api = KIND_NAME[kind];
    int device = -1;
    if (ah_rt_require_device(api, &device) != ACL_SUCCESS)
        return HCCL_E_RUNTIME;
    if (count == 0) /* success before any other check, as HCCL's op_base does */
        return HCCL_SUCCESS;
    if (!comm)
        return herr(HCCL_E_PTR, "%s: comm is NULL", api);
    ah_comm *c = comm_get(comm, api);
    if (!c)
        return HCCL_E_PARA;
    if (!stream)
        return launch_fail(c, HCCL_E_PTR, "%s: stream is NULL (HCCL takes an explicit stream)",
                           api);
    if (device != c->device)
        return launch_fail(c, HCCL_E_PARA, "%s: this thread's device is %d but the communicator "
                           "belongs to device %d", api, device, c->device);
    bool needs_send = kind == K_ALLREDUCE || kind == K_ALLGATHER || kind == K_SEND;
    bool needs_recv = kind != K_SEND;
    if ((needs_send && !send) || (needs_recv && !recv))
        return launch_fail(c, HCCL_E_PTR, "%s: %s is NULL", api,
                           needs_send && !send ? "sendBuf" : kind == K_BROADCAST ? "buf" : "recvBuf");
    size_t es = dtype_size(dtype);
    if (kind == K_ALLREDUCE) {
        if (!reduce_dtype_ok(dtype))
            return launch_fail(c, HCCL_E_NOT_SUPPORT, "%s: data type %s (%u) is not supported; "
                               "HCCL reduces int8, int16, int32, fp16, fp32 and bf16", api,
                               dtype_name(dtype), dtype);
        if (op > HCCL_REDUCE_MIN)
            return launch_fail(c, HCCL_E_NOT_SUPPORT, "%s: reduce op %u is not sum, prod, max or "
                               "min", api, op);
        if (op == HCCL_REDUCE_PROD && (dtype == HCCL_DATA_TYPE_INT16 || dtype == HCCL_DATA_TYPE_BFP16))
            return launch_fail(c, HCCL_E_NOT_SUPPORT, "%s: prod of %s is not supported on Atlas A2 "
                               "(910B)", api, dtype_name(dtype));
    } else if (!es) {
        return launch_fail(c, HCCL_E_NOT_SUPPORT, "%s: data type %s (%u) is not supported; HCCL "
                           "moves int8/16/32/64, uint8/16/32/64, fp16, fp32, fp64 and bf16", api,
                           dtype_name(dtype), dtype);
    }
    if ((kind == K_BROADCAST || kind == K_SEND || kind == K_RECV) && peer >= c->n)
        return launch_fail(c, HCCL_E_PARA, "%s: %s %u is not below the rank size %u", api,
                           kind == K_BROADCAST ? "root" : kind == K_SEND ? "destRank" : "srcRank",
                           peer, c->n);
    if ((kind == K_SEND || kind == K_RECV) && peer == c->rank)
        return launch_fail(c, HCCL_E_PARA, "%s: rank %u cannot %s itself", api, c->rank,
                           kind == K_SEND ? "send to" : "receive from");
    uint64_t n_out = kind == K_ALLGATHER ? c->n : 1;
    if (count > (uint64_t)SIZE_MAX / es / n_out / 2)
        return launch_fail(c, HCCL_E_PARA, "%s: count %" PRIu64 " is too large", api, count);
    size_t bytes = (size_t)count * es, out_bytes = bytes * n_out;
    HcclResult hr = HCCL_SUCCESS;
    ah_range ranges[2];
    size_t n_ranges = 0;
    if (needs_send) {
        if ((hr = check_buffer(c, api, "sendBuf", send, bytes, es)))
            return hr;
        ranges[n_ranges++] = (ah_range){send, bytes};
    }
    if (needs_recv) {
        const char *what = kind == K_BROADCAST ? "buf" : "recvBuf";
        if ((hr = check_buffer(c, api, what, recv, out_bytes, es)))
            return hr;
        ranges[n_ranges++] = (ah_range){recv, out_bytes};
    }
    if (kind == K_ALLREDUCE && send != recv && overlap(send, bytes, recv, bytes))
        return launch_fail(c, HCCL_E_PARA, "%s: sendBuf and recvBuf overlap without being equal",
                           api);
    if (kind == K_ALLGATHER && overlap(send, bytes, recv, out_bytes) &&
        (unsigned char *)send != (unsigned char *)recv + (size_t)c->rank * bytes)
        return launch_fail(c, HCCL_E_PARA, "%s: sendBuf overlaps recvBuf other than at this "
                           "rank's own block (recvBuf + rank * sendCount)", api);

    hccl_task *t = calloc(1, sizeof *t);
    if (!t)
        return launch_fail(c, HCCL_E_MEMORY, "%s: out of host memory", api);
    t->comm = c; /* the reference taken by comm_get passes to the task */
    t->call = (sh_call){kind, dtype, kind == K_ALLREDUCE ? op : 0, peer, count, 0};
    t->send = send;
    t->recv = recv;
    memcpy(t->ranges, ranges, sizeof ranges);
    t->n_ranges = n_ranges;
    /* the ranges were checked above; task_run re-checks them (the stream would skip the task,
     * leaving the other ranks waiting) */
    aclError rc = ah_stream_submit(stream, api, task_run, t, task_release, NULL, 0);
    if (rc != ACL_SUCCESS) {
        /* the task (and its reference) was released; abort with the runtime's reason */
        char why[AH_ERRMSG_SIZE];
        ah_error_take(why, sizeof why);
        ah_comm *again = comm_get(comm, api);
        if (again)
            return launch_fail(again, HCCL_E_PARA, "%s", why);
        ah_error_set_message(why);
        return HCCL_E_PARA;
    }
    return HCCL_SUCCESS;
}

AH_API HcclResult HcclAllReduce(void *sendBuf, void *recvBuf, uint64_t count, HcclDataType dataType,
                                HcclReduceOp op, HcclComm comm, aclrtStream stream)
{
    return launch(comm, K_ALLREDUCE, sendBuf, recvBuf, count, (uint32_t)dataType, (uint32_t)op, 0,
                  stream);
}

AH_API HcclResult HcclBroadcast(void *buf, uint64_t count, HcclDataType dataType, uint32_t root,
                                HcclComm comm, aclrtStream stream)
{
    return launch(comm, K_BROADCAST, NULL, buf, count, (uint32_t)dataType, 0, root, stream);
}

AH_API HcclResult HcclAllGather(void *sendBuf, void *recvBuf, uint64_t sendCount,
                                HcclDataType dataType, HcclComm comm, aclrtStream stream)
{
    return launch(comm, K_ALLGATHER, sendBuf, recvBuf, sendCount, (uint32_t)dataType, 0, 0,
                  stream);
}

AH_API HcclResult HcclSend(void *sendBuf, uint64_t count, HcclDataType dataType, uint32_t destRank,
                           HcclComm comm, aclrtStream stream)
{
    return launch(comm, K_SEND, sendBuf, NULL, count, (uint32_t)dataType, 0, destRank, stream);
}

AH_API HcclResult HcclRecv(void *recvBuf, uint64_t count, HcclDataType dataType, uint32_t srcRank,
                           HcclComm comm, aclrtStream stream)
{
    return launch(comm, K_RECV, NULL, recvBuf, count, (uint32_t)dataType, 0, srcRank, stream);
}

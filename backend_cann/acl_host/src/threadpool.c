/* threadpool.c - the one process-wide pool that kernels split their work over.
 *
 * CANN_LLM_THREADS sets its size (default: the online cores); size - 1 worker threads are
 * started at the first parallel job and the calling thread is the last member. Jobs from
 * several streams run one after another. A job is cut into chunks whose boundaries depend only
 * on n, grain and the pool size; which thread runs which chunk varies, the result does not.
 * A job started from inside a job (a chunk callback calling ah_parallel_for) runs the same
 * chunks inline.
 *
 * Waits poll, then sleep. A worker that finishes a job watches for the next one for up to
 * CANN_LLM_POLL microseconds (PAUSE, with a sched_yield and a clock read every 16 rounds) before
 * it sleeps on a futex; the caller likewise polls for the last chunks of its job before it
 * sleeps. A graph's ops follow each other within microseconds, so while one runs the workers
 * stay awake and a dispatch costs no system call; an idle pool sleeps after CANN_LLM_POLL and
 * costs no CPU. When a poller finds it was off the CPU (the cores may be oversubscribed),
 * polling stops for a time in proportion to the time it lost. With 0 every wait is a futex wait.
 * A dispatch costs at most one futex wake (only when a worker sleeps and there are chunks for
 * it); a worker that wakes after the job was finished goes back to waiting without touching it.
 *
 * ah_parallel_for_tapered cuts its job into chunks of decreasing size (guided self-scheduling:
 * each takes 1/(2 * size) of what is left, at least the grain), whose boundaries the submitter
 * writes to a table before it posts the job. With even chunks a thread that starts late (the
 * worker's wake-up, its own packing of shared inputs) makes the others wait for its last chunk;
 * with tapered ones the last chunks are a grain or two, so the threads finish together.
 *
 * The job word packs (generation, chunk count, next chunk): claiming a chunk is one CAS on it,
 * so a late worker can never claim a chunk of a newer job by mistake, and the job's fields (fn,
 * ctx, n) stay valid for whoever holds a claimed chunk until the chunk is counted as done.
 */
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "ah_rt.h"

#define CHUNKS_PER_THREAD 4
#define MAX_THREADS 1024 /* chunks: at most MAX_THREADS * CHUNKS_PER_THREAD < 2^16 */
#define MAX_TAPERED_CHUNKS 4096 /* < 2^16; the last chunk takes what is left */
#define DEFAULT_POLL_US 50
#define MAX_POLL_US 100000

static pthread_mutex_t g_config_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t g_job_mutex = PTHREAD_MUTEX_INITIALIZER; /* one job at a time */
static atomic_int g_size;                                        /* 0: not read yet */
static atomic_int g_poll_us;                                     /* read with g_size */

static struct {
    pthread_t *threads;
    int n_threads;
    atomic_uint wake;     /* futex word of sleeping workers: +1 per job and at stop */
    atomic_int sleepers;  /* workers in (or about to enter) the wake futex */
    atomic_bool stop;
    atomic_ullong job;    /* generation << 32 | n_chunks << 16 | next chunk */
    atomic_uint done;     /* chunks of the current job finished; the caller's futex word */
    atomic_bool caller_waits;
    uint32_t generation;
    ah_parallel_fn fn;    /* the current job; written only while no chunk of it is claimed */
    void *ctx;
    int64_t n;
    const int64_t *bounds; /* chunk i is [bounds[i], bounds[i + 1]); NULL: even chunks */
} g_pool;

static int64_t g_tapered_bounds[MAX_TAPERED_CHUNKS + 1]; /* written under g_job_mutex */

static _Thread_local bool tl_in_job;

static void futex_wait(atomic_uint *word, unsigned expected)
{
    syscall(SYS_futex, (unsigned *)word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake(atomic_uint *word, int count)
{
    syscall(SYS_futex, (unsigned *)word, FUTEX_WAKE_PRIVATE, count, NULL, NULL, 0);
}

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A bounded spin. Each call pauses once; every 16 calls (~0.5 us) it yields the CPU to any
 * thread waiting for it and reads the clock. False once poll_us have passed (at once for 0), or
 * when the clock shows this thread was off the CPU for a while (a yield that ran another thread,
 * or a preemption): the CPUs may be oversubscribed, and a spinner would only burn the time slice
 * its own chunks will need (the scheduler favours a thread that slept), so polling stops
 * everywhere in the pool for BACKOFF_FACTOR times the time lost (at most BACKOFF_MAX_NS) and every
 * wait is a futex wait, as with CANN_LLM_POLL=0. In proportion, because one lost slice is common
 * when the cores are not oversubscribed at all: the application's thread, woken at the end of
 * a graph, may land on a polling worker's CPU and keep it for the millisecond it spends between
 * graphs. A fixed 100 ms pause after each such event left batched decode without polling most of
 * the time (docs/acl_host.md, "Waits"). Real oversubscription loses a slice every few ms and so
 * keeps polling off. */
typedef struct poll_budget {
    uint64_t deadline; /* 0: clock not read yet */
    uint64_t last;     /* the previous clock reading */
    unsigned rounds;   /* 0: a fresh budget */
    int poll_us;
} poll_budget;

#define DESCHEDULED_NS 20000ull
#define BACKOFF_FACTOR 8u
#define BACKOFF_MAX_NS 100000000ull
static _Atomic uint64_t g_no_poll_until; /* CLOCK_MONOTONIC ns */

static bool keep_polling(poll_budget *p)
{
    if (p->poll_us <= 0)
        return false;
    if (p->rounds == 0 && atomic_load_explicit(&g_no_poll_until, memory_order_relaxed) > now_ns())
        return false;
    cpu_relax();
    if (++p->rounds % 16)
        return true;
    sched_yield();
    uint64_t t = now_ns();
    if (!p->deadline) {
        p->deadline = t + (uint64_t)p->poll_us * 1000u;
        p->last = t;
        return true;
    }
    uint64_t lost = t - p->last;
    if (lost > DESCHEDULED_NS) {
        uint64_t pause = lost < BACKOFF_MAX_NS / BACKOFF_FACTOR ? lost * BACKOFF_FACTOR : BACKOFF_MAX_NS;
        atomic_store_explicit(&g_no_poll_until, t + pause, memory_order_relaxed);
        return false;
    }
    p->last = t;
    return t < p->deadline;
}

static int read_env_int(const char *name, long fallback, long lo, long hi)
{
    const char *env = getenv(name);
    char *end;
    long v = env && *env ? strtol(env, &end, 10) : fallback;
    if (env && *env && end == env)
        v = fallback;
    return (int)(v < lo ? lo : v > hi ? hi : v);
}

int ah_n_threads(void)
{
    int size = atomic_load(&g_size);
    if (size > 0)
        return size;
    pthread_mutex_lock(&g_config_mutex);
    if ((size = atomic_load(&g_size)) == 0) {
        const char *env = getenv("CANN_LLM_THREADS");
        long n = env && *env ? strtol(env, NULL, 10) : 0;
        if (n <= 0)
            n = sysconf(_SC_NPROCESSORS_ONLN);
        size = n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (int)n;
        atomic_store(&g_poll_us, read_env_int("CANN_LLM_POLL", DEFAULT_POLL_US, 0, MAX_POLL_US));
        atomic_store(&g_size, size);
    }
    pthread_mutex_unlock(&g_config_mutex);
    return size;
}

/* Chunk i of n items cut into n_chunks near-equal contiguous pieces. */
static void run_even_chunk(ah_parallel_fn fn, void *ctx, int64_t n, int64_t n_chunks, int64_t i)
{
    int64_t base = n / n_chunks, rem = n % n_chunks;
    int64_t begin = i * base + (i < rem ? i : rem);
    fn(ctx, begin, begin + base + (i < rem ? 1 : 0));
}

/* Chunk i of the pool's job: its tapered boundaries, or an even piece. */
static void run_chunk(ah_parallel_fn fn, void *ctx, int64_t n, int64_t n_chunks, int64_t i)
{
    if (g_pool.bounds)
        fn(ctx, g_pool.bounds[i], g_pool.bounds[i + 1]);
    else
        run_even_chunk(fn, ctx, n, n_chunks, i);
}

/* Claims and runs chunks of job `generation` until none is left. */
static void work_on(uint32_t generation)
{
    unsigned long long w = atomic_load(&g_pool.job);
    for (;;) {
        unsigned next = (unsigned)(w & 0xffff), n_chunks = (unsigned)(w >> 16 & 0xffff);
        if ((uint32_t)(w >> 32) != generation || next >= n_chunks)
            return;
        if (!atomic_compare_exchange_weak(&g_pool.job, &w, w + 1))
            continue; /* w reloaded */
        run_chunk(g_pool.fn, g_pool.ctx, g_pool.n, n_chunks, next);
        if (atomic_fetch_add(&g_pool.done, 1) + 1 == n_chunks && atomic_load(&g_pool.caller_waits))
            futex_wake(&g_pool.done, 1);
        w = atomic_load(&g_pool.job);
    }
}

#if defined(__linux__) && !defined(SCHED_BATCH)
#define SCHED_BATCH 3 /* <sched.h> names it only under _GNU_SOURCE */
#endif

void ah_thread_as_device(void)
{
#ifdef __linux__
    const struct sched_param param = {0};
    (void)sched_setscheduler(0, SCHED_BATCH, &param); /* a hint: a refusal changes nothing else */
#endif
}

static void *pool_worker(void *unused)
{
    (void)unused;
    ah_thread_as_device();
    tl_in_job = true; /* nested jobs from a worker run inline */
    unsigned seen = atomic_load(&g_pool.wake);
    poll_budget poll = {0, 0, 0, atomic_load(&g_poll_us)};
    while (!atomic_load(&g_pool.stop)) {
        unsigned now = atomic_load(&g_pool.wake);
        if (now != seen) {
            seen = now;
            work_on((uint32_t)(atomic_load(&g_pool.job) >> 32));
            poll.deadline = 0, poll.rounds = 0; /* a fresh budget after every job */
            continue;
        }
        if (keep_polling(&poll))
            continue;
        /* the submitter bumps wake before reading sleepers; we count ourselves before reading
         * wake (inside the futex): one of the two sees the other. A polling worker is not
         * counted, so a dispatch to polling workers makes no system call. */
        atomic_fetch_add(&g_pool.sleepers, 1);
        if (!atomic_load(&g_pool.stop))
            futex_wait(&g_pool.wake, seen);
        atomic_fetch_sub(&g_pool.sleepers, 1);
    }
    return NULL;
}

/* Starts the workers once; g_job_mutex held. Returns how many run. */
static int ensure_workers(int size)
{
    if (g_pool.threads || size <= 1)
        return g_pool.n_threads;
    g_pool.threads = calloc((size_t)size - 1, sizeof *g_pool.threads);
    if (!g_pool.threads)
        return 0;
    atomic_store(&g_pool.stop, false);
    while (g_pool.n_threads < size - 1 &&
           pthread_create(&g_pool.threads[g_pool.n_threads], NULL, pool_worker, NULL) == 0)
        g_pool.n_threads++;
    return g_pool.n_threads;
}

/* Cuts [0, n) for ah_parallel_for_tapered: each chunk takes ceil(rest / (2 * size)) items, at
 * least grain, and a rest under one grain joins the chunk before it. Returns the chunk count. */
static int64_t taper(int64_t n, int64_t grain, int size, int64_t *bounds)
{
    int64_t k = 0, begin = 0;
    bounds[0] = 0;
    while (begin < n) {
        int64_t rest = n - begin, take = (rest + 2 * (int64_t)size - 1) / (2 * (int64_t)size);
        if (take < grain)
            take = grain;
        if (rest - take < grain || k == MAX_TAPERED_CHUNKS - 1)
            take = rest;
        begin += take;
        bounds[++k] = begin;
    }
    return k;
}

/* Runs a job of n_chunks > 1 chunks over the pool (even ones, or tapered ones when `tapered`:
 * taper's for (n, grain), computed here under the job lock). */
static void run_job(int64_t n, int64_t grain, int64_t n_chunks, bool tapered, ah_parallel_fn fn, void *ctx)
{
    int size = ah_n_threads();
    pthread_mutex_lock(&g_job_mutex);
    int workers = ensure_workers(size);
    g_pool.bounds = NULL;
    if (tapered) {
        n_chunks = taper(n, grain, size, g_tapered_bounds);
        g_pool.bounds = g_tapered_bounds;
    }
    g_pool.fn = fn;
    g_pool.ctx = ctx;
    g_pool.n = n;
    atomic_store(&g_pool.done, 0);
    atomic_store(&g_pool.caller_waits, false);
    uint32_t generation = ++g_pool.generation;
    atomic_store(&g_pool.job, (unsigned long long)generation << 32 | (unsigned long long)n_chunks << 16);
    if (workers > 0) {
        atomic_fetch_add(&g_pool.wake, 1);
        int want = n_chunks - 1 < workers ? (int)n_chunks - 1 : workers;
        if (atomic_load(&g_pool.sleepers) > 0)
            futex_wake(&g_pool.wake, want);
    }
    tl_in_job = true;
    work_on(generation);
    tl_in_job = false;
    /* Every chunk is claimed; wait for the ones still running elsewhere. */
    unsigned done = atomic_load(&g_pool.done);
    poll_budget poll = {0, 0, 0, atomic_load(&g_poll_us)};
    while (done != (unsigned)n_chunks && keep_polling(&poll))
        done = atomic_load(&g_pool.done);
    if (done != (unsigned)n_chunks) {
        /* we set caller_waits before reading done; the last finisher adds to done before
         * reading caller_waits: one of the two sees the other */
        atomic_store(&g_pool.caller_waits, true);
        while ((done = atomic_load(&g_pool.done)) != (unsigned)n_chunks)
            futex_wait(&g_pool.done, done);
    }
    pthread_mutex_unlock(&g_job_mutex);
}

void ah_parallel_for(int64_t n, int64_t grain, ah_parallel_fn fn, void *ctx)
{
    if (n <= 0 || !fn)
        return;
    if (grain < 1)
        grain = 1;
    int size = ah_n_threads();
    int64_t n_chunks = n / grain;
    if (n_chunks > (int64_t)size * CHUNKS_PER_THREAD)
        n_chunks = (int64_t)size * CHUNKS_PER_THREAD;
    if (n_chunks <= 1) {
        fn(ctx, 0, n);
        return;
    }
    if (size == 1 || tl_in_job) { /* inline: the pool's job (and its bounds) may be another's */
        for (int64_t i = 0; i < n_chunks; i++)
            run_even_chunk(fn, ctx, n, n_chunks, i);
        return;
    }
    run_job(n, grain, n_chunks, false, fn, ctx);
}

void ah_parallel_for_tapered(int64_t n, int64_t grain, ah_parallel_fn fn, void *ctx)
{
    if (n <= 0 || !fn)
        return;
    if (grain < 1)
        grain = 1;
    if (n < 2 * grain || ah_n_threads() == 1 || tl_in_job) {
        fn(ctx, 0, n);
        return;
    }
    run_job(n, grain, 0, true, fn, ctx);
}

void ah_pool_shutdown(void)
{
    pthread_mutex_lock(&g_job_mutex);
    if (g_pool.threads) {
        atomic_store(&g_pool.stop, true);
        atomic_fetch_add(&g_pool.wake, 1);
        futex_wake(&g_pool.wake, INT_MAX);
        for (int i = 0; i < g_pool.n_threads; i++)
            pthread_join(g_pool.threads[i], NULL);
        free(g_pool.threads);
        g_pool.threads = NULL;
        g_pool.n_threads = 0;
        atomic_store(&g_pool.stop, false);
    }
    atomic_store(&g_size, 0); /* CANN_LLM_THREADS is read again by the next job */
    pthread_mutex_unlock(&g_job_mutex);
}

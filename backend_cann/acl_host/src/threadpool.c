/* threadpool.c - the one process-wide pool that kernels split their work over.
 *
 * CANN_LLM_THREADS sets its size (default: the online cores); size - 1 worker threads are
 * started at the first parallel job and the calling thread is the last member. Jobs from
 * several streams run one after another. A job is cut into chunks whose boundaries depend only
 * on n, grain and the pool size; which thread runs which chunk varies, the result does not.
 * A job started from inside a job (a chunk callback calling ah_parallel_for) runs the same
 * chunks inline. All waits block on condition variables: no spinning.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "ah_rt.h"

#define CHUNKS_PER_THREAD 4
#define MAX_THREADS 1024

static pthread_mutex_t g_config_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t g_job_mutex = PTHREAD_MUTEX_INITIALIZER; /* one job at a time */
static atomic_int g_size;                                        /* 0: not read yet */

static struct {
    pthread_mutex_t mutex;
    pthread_cond_t wake_cv; /* workers: a job opened, or stop */
    pthread_cond_t done_cv; /* the caller: a worker left the job */
    pthread_t *threads;
    int n_threads;
    bool stop;
    uint64_t job_id;
    bool job_open;
    int active; /* workers inside the current job */
    ah_parallel_fn fn;
    void *ctx;
    int64_t n, n_chunks;
    atomic_llong next_chunk;
} g_pool = {.mutex = PTHREAD_MUTEX_INITIALIZER,
            .wake_cv = PTHREAD_COND_INITIALIZER,
            .done_cv = PTHREAD_COND_INITIALIZER};

static _Thread_local bool tl_in_job;

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
        atomic_store(&g_size, size);
    }
    pthread_mutex_unlock(&g_config_mutex);
    return size;
}

/* Chunk i of n items cut into n_chunks near-equal contiguous pieces. */
static void run_chunk(ah_parallel_fn fn, void *ctx, int64_t n, int64_t n_chunks, int64_t i)
{
    int64_t base = n / n_chunks, rem = n % n_chunks;
    int64_t begin = i * base + (i < rem ? i : rem);
    int64_t end = begin + base + (i < rem ? 1 : 0);
    fn(ctx, begin, end);
}

static void *pool_worker(void *unused)
{
    (void)unused;
    tl_in_job = true; /* nested jobs from a worker run inline */
    uint64_t seen = 0;
    pthread_mutex_lock(&g_pool.mutex);
    for (;;) {
        while (!g_pool.stop && !(g_pool.job_open && g_pool.job_id != seen))
            pthread_cond_wait(&g_pool.wake_cv, &g_pool.mutex);
        if (g_pool.stop)
            break;
        seen = g_pool.job_id;
        g_pool.active++;
        ah_parallel_fn fn = g_pool.fn;
        void *ctx = g_pool.ctx;
        int64_t n = g_pool.n, n_chunks = g_pool.n_chunks;
        pthread_mutex_unlock(&g_pool.mutex);
        for (int64_t i; (i = atomic_fetch_add(&g_pool.next_chunk, 1)) < n_chunks;)
            run_chunk(fn, ctx, n, n_chunks, i);
        pthread_mutex_lock(&g_pool.mutex);
        if (--g_pool.active == 0)
            pthread_cond_signal(&g_pool.done_cv);
    }
    pthread_mutex_unlock(&g_pool.mutex);
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
    g_pool.stop = false;
    while (g_pool.n_threads < size - 1 &&
           pthread_create(&g_pool.threads[g_pool.n_threads], NULL, pool_worker, NULL) == 0)
        g_pool.n_threads++;
    return g_pool.n_threads;
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
    if (size == 1 || tl_in_job) {
        for (int64_t i = 0; i < n_chunks; i++)
            run_chunk(fn, ctx, n, n_chunks, i);
        return;
    }
    pthread_mutex_lock(&g_job_mutex);
    if (ensure_workers(size) > 0) {
        pthread_mutex_lock(&g_pool.mutex);
        g_pool.fn = fn;
        g_pool.ctx = ctx;
        g_pool.n = n;
        g_pool.n_chunks = n_chunks;
        atomic_store(&g_pool.next_chunk, 0);
        g_pool.job_id++;
        g_pool.job_open = true;
        pthread_cond_broadcast(&g_pool.wake_cv);
        pthread_mutex_unlock(&g_pool.mutex);
    } else {
        atomic_store(&g_pool.next_chunk, 0); /* no workers: the caller does it all */
    }
    tl_in_job = true;
    for (int64_t i; (i = atomic_fetch_add(&g_pool.next_chunk, 1)) < n_chunks;)
        run_chunk(fn, ctx, n, n_chunks, i);
    tl_in_job = false;
    /* Every chunk is claimed; wait for the workers still running theirs. */
    pthread_mutex_lock(&g_pool.mutex);
    while (g_pool.active > 0)
        pthread_cond_wait(&g_pool.done_cv, &g_pool.mutex);
    g_pool.job_open = false;
    pthread_mutex_unlock(&g_pool.mutex);
    pthread_mutex_unlock(&g_job_mutex);
}

void ah_pool_shutdown(void)
{
    pthread_mutex_lock(&g_job_mutex);
    if (g_pool.threads) {
        pthread_mutex_lock(&g_pool.mutex);
        g_pool.stop = true;
        pthread_cond_broadcast(&g_pool.wake_cv);
        pthread_mutex_unlock(&g_pool.mutex);
        for (int i = 0; i < g_pool.n_threads; i++)
            pthread_join(g_pool.threads[i], NULL);
        free(g_pool.threads);
        g_pool.threads = NULL;
        g_pool.n_threads = 0;
        g_pool.stop = false;
    }
    atomic_store(&g_size, 0); /* CANN_LLM_THREADS is read again by the next job */
    pthread_mutex_unlock(&g_job_mutex);
}

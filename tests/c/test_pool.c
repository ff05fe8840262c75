/* test_pool.c - the acl_host thread pool: every item covered once, chunk boundaries fixed by
 * (n, grain, size) alone, nested jobs inline, several submitting threads hammering the pool with
 * CANN_LLM_POLL at 0, the default and a large value (no lost wake-up: a lost one hangs here
 * until ctest's timeout), tapered jobs (chunks of decreasing size) covering every item once,
 * polling workers dispatched without sleeping, no polling while the CPUs
 * are oversubscribed, and an idle pool that sleeps and burns no CPU. CT_BENCH=1 also prints
 * the cost of dispatching a job over 2 threads, with and without polling.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctest_util.h"

/* The pool is internal (hidden) to libacl_host; this test compiles its own copy of it. */
#include "../../backend_cann/acl_host/src/threadpool.c"

typedef struct cover {
    atomic_int *hits;
    atomic_llong *ends; /* ends[begin] = end of the chunk that began there, + 1 */
    int64_t n;
    atomic_int calls;
    bool nested;
} cover;

static void count_hits(void *ctx, int64_t begin, int64_t end)
{
    cover *c = ctx;
    atomic_fetch_add(&c->calls, 1);
    atomic_fetch_add(&c->ends[begin], end + 1);
    for (int64_t i = begin; i < end; i++)
        atomic_fetch_add(&c->hits[i], 1);
    if (c->nested) { /* a job inside a job runs inline, without deadlock */
        cover inner = {calloc(100, sizeof(atomic_int)), calloc(101, sizeof(atomic_llong)), 100, 0,
                       false};
        ah_parallel_for(100, 1, count_hits, &inner);
        for (int i = 0; i < 100; i++)
            if (atomic_load(&inner.hits[i]) != 1)
                atomic_fetch_add(&c->calls, 1000000);
        free(inner.hits);
        free(inner.ends);
    }
}

/* Runs a job of n items; true when every item was covered once by exactly the chunks that
 * (n, grain, pool size) define, whoever ran them. */
static bool covered_once(int64_t n, int64_t grain, bool nested)
{
    cover c = {calloc((size_t)n + 1, sizeof(atomic_int)), calloc((size_t)n + 1, sizeof(atomic_llong)),
               n, 0, nested};
    ah_parallel_for(n, grain, count_hits, &c);
    int64_t n_chunks = n / grain, size = ah_n_threads();
    if (n_chunks > size * CHUNKS_PER_THREAD)
        n_chunks = size * CHUNKS_PER_THREAD;
    if (n_chunks < 1)
        n_chunks = 1;
    bool ok = atomic_load(&c.calls) == n_chunks; /* a failed nested job adds 1000000 */
    for (int64_t i = 0; i < n; i++)
        ok = ok && atomic_load(&c.hits[i]) == 1;
    for (int64_t i = 0, begin = 0; i < n_chunks; i++) {
        int64_t end = begin + n / n_chunks + (i < n % n_chunks ? 1 : 0);
        ok = ok && atomic_load(&c.ends[begin]) == end + 1;
        begin = end;
    }
    free(c.hits);
    free(c.ends);
    return ok;
}

/* A tapered job of n items: every item covered once, by chunks that start where the previous one
 * ended and are at least `grain`, never growing but for the last one, which is under two grains;
 * one call when it is not worth splitting. Nested jobs inside run inline. */
static bool tapered_once(int64_t n, int64_t grain, bool nested)
{
    cover c = {calloc((size_t)n + 1, sizeof(atomic_int)), calloc((size_t)n + 1, sizeof(atomic_llong)),
               n, 0, nested};
    ah_parallel_for_tapered(n, grain, count_hits, &c);
    bool ok = true;
    for (int64_t i = 0; i < n; i++)
        ok = ok && atomic_load(&c.hits[i]) == 1;
    int64_t begin = 0, prev = n, calls = 0, last = 0;
    while (ok && begin < n) {
        int64_t end = atomic_load(&c.ends[begin]) - 1;
        ok = end > begin && (end - begin <= prev || end == n) && (end - begin >= grain || n < grain);
        prev = last = end - begin;
        begin = end;
        calls++;
    }
    bool one_call = n < 2 * grain || ah_n_threads() == 1;
    ok = ok && begin == n && calls == atomic_load(&c.calls) % 1000000 && atomic_load(&c.calls) < 1000000;
    ok = ok && (one_call ? calls == 1 : calls > 1 && last < 2 * grain);
    free(c.hits);
    free(c.ends);
    return ok;
}

static void *pool_client(void *arg)
{
    bool *ok = arg;
    for (int i = 0; i < 400; i++)
        *ok = *ok && covered_once(1 + (i * 37) % 5000, 1 + i % 5, false) &&
              tapered_once(1 + (i * 53) % 3000, 1 + i % 7, false);
    return NULL;
}

/* Several threads submit at once (jobs from several streams): all serialised, none lost. */
static bool hammer(int n_clients)
{
    bool ok[8];
    pthread_t threads[8];
    for (int i = 0; i < n_clients; i++) {
        ok[i] = true;
        pthread_create(&threads[i], NULL, pool_client, &ok[i]);
    }
    bool all = true;
    for (int i = 0; i < n_clients; i++) {
        pthread_join(threads[i], NULL);
        all = all && ok[i];
    }
    return all;
}

static double seconds(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void sleep_ms(int ms)
{
    nanosleep(&(struct timespec){ms / 1000, (long)(ms % 1000) * 1000000L}, NULL);
}

/* Waits up to 5 s for every worker to sleep in the futex. */
static bool workers_asleep(void)
{
    for (int i = 0; i < 5000 && atomic_load(&g_pool.sleepers) != g_pool.n_threads; i++)
        sleep_ms(1);
    return atomic_load(&g_pool.sleepers) == g_pool.n_threads;
}

/* CPU time the whole process burns over 1 s of idling, in seconds. */
static double idle_cpu(void)
{
    double t0 = seconds(CLOCK_PROCESS_CPUTIME_ID);
    sleep_ms(1000);
    return seconds(CLOCK_PROCESS_CPUTIME_ID) - t0;
}

static void burst(void)
{
    for (int i = 0; i < 200; i++)
        covered_once(4096, 16, false);
}

static void run_with(const char *threads, const char *poll, int expect_poll)
{
    ah_pool_shutdown();
    setenv("CANN_LLM_THREADS", threads, 1);
    setenv("CANN_LLM_POLL", poll, 1);
    CHECK(ah_n_threads() == atoi(threads));
    CHECK(atomic_load(&g_poll_us) == expect_poll);
    CHECK(covered_once(1, 1, false));
    CHECK(covered_once(5, 100, false)); /* below the grain: inline */
    CHECK(covered_once(1000, 7, false));
    CHECK(covered_once(100003, 1, true));
    CHECK(tapered_once(1, 1, false));
    CHECK(tapered_once(7, 4, false)); /* under two grains: one call */
    CHECK(tapered_once(8, 4, false));
    CHECK(tapered_once(18, 1, false));
    CHECK(tapered_once(1536, 1, false));
    CHECK(tapered_once(100003, 3, true));
    CHECK(tapered_once((int64_t)MAX_TAPERED_CHUNKS * 50, 1, false)); /* more chunks than the table */
    CHECK(hammer(4));
    /* an idle pool sleeps once the poll time has passed, and burns nothing after that */
    burst();
    CHECK(workers_asleep());
    double cpu = idle_cpu();
    if (cpu > 0.02)
        fprintf(stderr, "  POLL=%s: %.3f s of CPU over 1 s idle\n", poll, cpu);
    CHECK(cpu < 0.02);
}

/* One chunk: 2 us of spinning. */
static void touch(void *ctx, int64_t begin, int64_t end)
{
    double t0 = seconds(CLOCK_MONOTONIC);
    while (seconds(CLOCK_MONOTONIC) - t0 < 2e-6)
        ;
    atomic_fetch_add((atomic_llong *)ctx, end - begin);
}

/* Microseconds per job of 2 chunks of 2 us on 2 threads, back to back (the median of 9 rounds
 * of 20000 jobs): 2 us when the chunks run side by side and dispatch is free, 4 us when one
 * thread runs both. */
static void bench_dispatch(const char *poll)
{
    ah_pool_shutdown();
    setenv("CANN_LLM_THREADS", "2", 1);
    setenv("CANN_LLM_POLL", poll, 1);
    atomic_llong sum = 0;
    double us[9];
    for (int r = 0; r < 9; r++) {
        double t0 = seconds(CLOCK_MONOTONIC);
        for (int i = 0; i < 20000; i++)
            ah_parallel_for(2, 1, touch, &sum);
        us[r] = (seconds(CLOCK_MONOTONIC) - t0) * 1e6 / 20000;
    }
    for (int r = 1; r < 9; r++)
        for (int k = r; k > 0 && us[k] < us[k - 1]; k--) {
            double t = us[k];
            us[k] = us[k - 1];
            us[k - 1] = t;
        }
    printf("bench: CANN_LLM_POLL=%s: %.2f us per 2-thread job (%lld items)\n", poll, us[4],
           (long long)atomic_load(&sum));
}

/* The alternative design, a ggml-style parallel region: both threads walk the ops and meet at a
 * spinning barrier after each one. Microseconds per round of 2 us of work on each thread and one
 * barrier (the median of 9 rounds of 20000). */
static atomic_int g_arrived;
static atomic_int g_phase;

static void spin_barrier(int *phase)
{
    int next = *phase + 1;
    if (atomic_fetch_add(&g_arrived, 1) == 1) {
        atomic_store(&g_arrived, 0);
        atomic_store(&g_phase, next);
    } else {
        while (atomic_load(&g_phase) != next)
            cpu_relax();
    }
    *phase = next;
}

static void *region_partner(void *arg)
{
    int phase = 0;
    atomic_llong sum = 0;
    for (int r = 0; r < 9 * 20000; r++) {
        touch(&sum, 0, 1);
        spin_barrier(&phase);
    }
    (void)arg;
    return NULL;
}

static void bench_region(void)
{
    atomic_store(&g_arrived, 0);
    atomic_store(&g_phase, 0);
    pthread_t partner;
    if (pthread_create(&partner, NULL, region_partner, NULL) != 0)
        return;
    int phase = 0;
    atomic_llong sum = 0;
    double us[9];
    for (int r = 0; r < 9; r++) {
        double t0 = seconds(CLOCK_MONOTONIC);
        for (int i = 0; i < 20000; i++) {
            touch(&sum, 0, 1);
            spin_barrier(&phase);
        }
        us[r] = (seconds(CLOCK_MONOTONIC) - t0) * 1e6 / 20000;
    }
    pthread_join(partner, NULL);
    for (int r = 1; r < 9; r++)
        for (int k = r; k > 0 && us[k] < us[k - 1]; k--) {
            double t = us[k];
            us[k] = us[k - 1];
            us[k - 1] = t;
        }
    printf("bench: spinning 2-thread region: %.2f us per op of 2 us on each thread + barrier\n",
           us[4]);
}

int main(void)
{
    if (getenv("CT_BENCH")) {
        bench_dispatch("50");
        bench_dispatch("0");
        bench_region();
    }
    run_with("3", "0", 0);
    run_with("3", "", DEFAULT_POLL_US); /* unset or empty: the default */
    run_with("2", "junk", DEFAULT_POLL_US);
    run_with("4", "-5", 0);
    run_with("3", "100000", 100000);
    run_with("2", "999999999", MAX_POLL_US);

    /* Polling workers take the next job without sleeping: with 100 ms of polling a worker is
     * still awake 1 ms after a job; with 0 it sleeps as soon as it has nothing to do. */
    ah_pool_shutdown();
    setenv("CANN_LLM_THREADS", "2", 1);
    setenv("CANN_LLM_POLL", "100000", 1);
    bool awake = false; /* a poller taken off the CPU stops polling for a while: retry */
    for (int i = 0; i < 20 && !awake; i++) {
        atomic_store(&g_no_poll_until, 0);
        CHECK(covered_once(1000, 1, false));
        sleep_ms(1);
        awake = atomic_load(&g_pool.sleepers) == 0;
    }
    CHECK(awake);
    CHECK(workers_asleep()); /* and sleeps after the 100 ms */
    /* while the CPUs are found oversubscribed nobody polls: the worker sleeps at once */
    atomic_store(&g_no_poll_until, now_ns() + 10000000000ull);
    CHECK(covered_once(1000, 1, false));
    poll_budget budget = {0, 0, 0, 100000};
    CHECK(!keep_polling(&budget));
    CHECK(workers_asleep());
    atomic_store(&g_no_poll_until, 0);
    /* A poller that lost the CPU pauses polling in proportion to the time lost: BACKOFF_FACTOR
     * times 1 ms, and at most BACKOFF_MAX_NS for a long loss. The next round reads the clock. */
    uint64_t lost_ns[] = {1000000ull, 50000000ull};
    for (int i = 0; i < 2; i++) {
        uint64_t t0 = now_ns();
        poll_budget lost = {t0 + 1000000000ull, t0 - lost_ns[i], 15, 100000};
        CHECK(!keep_polling(&lost));
        uint64_t want = lost_ns[i] * BACKOFF_FACTOR < BACKOFF_MAX_NS ? lost_ns[i] * BACKOFF_FACTOR
                                                                      : BACKOFF_MAX_NS;
        uint64_t until = atomic_load(&g_no_poll_until), t1 = now_ns();
        /* the loss measured also counts the time since t0 (the yield) */
        CHECK(until >= t0 + want && until <= t1 + want + BACKOFF_FACTOR * (t1 - t0));
        poll_budget fresh = {0, 0, 0, 100000};
        CHECK(!keep_polling(&fresh)); /* nobody polls during the pause */
    }
    CHECK(lost_ns[0] * BACKOFF_FACTOR < BACKOFF_MAX_NS && lost_ns[1] * BACKOFF_FACTOR > BACKOFF_MAX_NS);
    atomic_store(&g_no_poll_until, 0);
    ah_pool_shutdown();
    setenv("CANN_LLM_POLL", "0", 1);
    CHECK(covered_once(1000, 1, false));
    CHECK(workers_asleep());

    ah_pool_shutdown();
    setenv("CANN_LLM_THREADS", "1", 1);
    CHECK(ah_n_threads() == 1 && covered_once(1000, 1, false) && tapered_once(1000, 1, false));
    ah_pool_shutdown();
    return CT_RESULT();
}

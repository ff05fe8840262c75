/* test_pools.c - the CANN backend's scratch pools through the public entry points
 * (clm_cann_pool_alloc/free, clm_cann_backend_stats): random alloc/free sequences never hand out
 * overlapping live blocks and every block keeps what was written to it (device copies), memory
 * comes back, the slot table's limits and the VMM pool's LIFO rule are error statuses, and the
 * VMM pool maps in granularity steps. GGML_CANN_MEM_POOL is read at backend init. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "acl/acl.h"
#include "cann_llm.h"
#include "ctest_util.h"

#define MAX_LIVE 48

typedef struct block {
    char *ptr;
    size_t size;     /* as returned */
    uint32_t tag;
} block;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

static size_t random_size(void) {
    uint32_t r = rnd() % 100;
    if (r < 60) return 1 + rnd() % 4096;
    if (r < 95) return 4096 + rnd() % (1u << 20);
    return (4u << 20) + rnd() % (4u << 20);
}

static clm_backend *new_backend(const char *pool_kind) {
    setenv("GGML_CANN_MEM_POOL", pool_kind, 1);
    clm_reg *reg;
    clm_device *dev;
    clm_backend *backend = NULL;
    if (clm_cann_reg(&reg) != CLM_OK || clm_reg_device(reg, 0, &dev) != CLM_OK ||
        clm_device_init_backend(dev, &backend) != CLM_OK) {
        fprintf(stderr, "backend: %s\n", clm_last_error());
        CHECK(0);
        return NULL;
    }
    return backend;
}

static clm_cann_stats stats_of(clm_backend *backend) {
    clm_cann_stats s;
    CHECK(clm_cann_backend_stats(backend, &s) == CLM_OK);
    return s;
}

/* Fill the first and last 64 bytes of a block with its tag (through device copies). */
static void write_tag(const block *b) {
    uint32_t buf[16];
    for (int i = 0; i < 16; i++) buf[i] = b->tag + (uint32_t)i;
    size_t n = b->size < sizeof(buf) ? b->size : sizeof(buf);
    CHECK(aclrtMemcpy(b->ptr, n, buf, n, ACL_MEMCPY_HOST_TO_DEVICE) == ACL_SUCCESS);
    CHECK(aclrtMemcpy(b->ptr + b->size - n, n, buf, n, ACL_MEMCPY_HOST_TO_DEVICE) == ACL_SUCCESS);
}

static void check_tag(const block *b) {
    uint32_t want[16], got[16];
    for (int i = 0; i < 16; i++) want[i] = b->tag + (uint32_t)i;
    size_t n = b->size < sizeof(want) ? b->size : sizeof(want);
    CHECK(aclrtMemcpy(got, n, b->ptr, n, ACL_MEMCPY_DEVICE_TO_HOST) == ACL_SUCCESS);
    CHECK(memcmp(got, want, n) == 0);
    CHECK(aclrtMemcpy(got, n, b->ptr + b->size - n, n, ACL_MEMCPY_DEVICE_TO_HOST) == ACL_SUCCESS);
    CHECK(memcmp(got, want, n) == 0);
}

static bool overlaps_live(const block *live, int n, const char *ptr, size_t size) {
    for (int i = 0; i < n; i++) {
        if (ptr < live[i].ptr + live[i].size && live[i].ptr < ptr + size) return true;
    }
    return false;
}

/* steps random operations; lifo: frees only the most recent block. */
static void random_sequence(clm_backend *backend, bool lifo, int steps) {
    block live[MAX_LIVE];
    int n = 0;
    uint32_t tag = 1;
    for (int step = 0; step < steps; step++) {
        bool do_alloc = n == 0 || (n < MAX_LIVE && rnd() % 100 < 55);
        if (do_alloc) {
            size_t want = random_size();
            void *ptr = NULL;
            size_t got = 0;
            if (clm_cann_pool_alloc(backend, want, &ptr, &got) != CLM_OK) {
                fprintf(stderr, "alloc %zu: %s\n", want, clm_last_error());
                CHECK(0);
                break;
            }
            CHECK(got >= want && got % 128 == 0 && (uintptr_t)ptr % 64 == 0);   /* aclrtMalloc aligns to 64 */
            CHECK(!overlaps_live(live, n, ptr, got));
            live[n] = (block){ptr, got, tag};
            tag += 1000;
            write_tag(&live[n]);
            n++;
        } else {
            int i = lifo ? n - 1 : (int)(rnd() % (uint32_t)n);
            check_tag(&live[i]);
            CHECK(clm_cann_pool_free(backend, live[i].ptr, live[i].size) == CLM_OK);
            live[i] = live[--n];
        }
        if (rnd() % 50 == 0) CHECK(clm_backend_synchronize(backend) == CLM_OK);
        size_t sum = 0;
        for (int i = 0; i < n; i++) sum += live[i].size;
        CHECK(stats_of(backend).pool_in_use == sum);
    }
    while (n > 0) {
        int i = lifo ? n - 1 : 0;
        check_tag(&live[i]);
        CHECK(clm_cann_pool_free(backend, live[i].ptr, live[i].size) == CLM_OK);
        live[i] = live[--n];
    }
    CHECK(stats_of(backend).pool_in_use == 0);
}

static void test_legacy(void) {
    clm_backend *backend = new_backend("leg");
    if (backend == NULL) return;
    clm_cann_stats s = stats_of(backend);
    CHECK(s.pool_kind == CLM_POOL_LEGACY && s.pool_slots_total == 256 && s.pool_in_use == 0);

    /* reuse: a freed buffer comes back for a request that fits within the margin; best fit */
    void *a, *b, *c;
    size_t sa, sb, sc;
    CHECK(clm_cann_pool_alloc(backend, 8192, &a, &sa) == CLM_OK);
    CHECK(clm_cann_pool_alloc(backend, 4096, &b, &sb) == CLM_OK);
    CHECK(clm_cann_pool_free(backend, a, sa) == CLM_OK);
    CHECK(clm_cann_pool_free(backend, b, sb) == CLM_OK);
    CHECK(clm_cann_pool_alloc(backend, 4000, &c, &sc) == CLM_OK);
    CHECK(c == b && sc == 4096);
    CHECK(clm_cann_pool_free(backend, c, sc) == CLM_OK);
    CHECK(clm_cann_pool_free(backend, c, sc) == CLM_ERR_INVALID_ARG);   /* double free */
    CHECK(strstr(clm_last_error(), "double free") != NULL);
    int x;
    CHECK(clm_cann_pool_free(backend, &x, 4) == CLM_ERR_INVALID_ARG);   /* not from the pool */

    random_sequence(backend, false, 600);
    s = stats_of(backend);
    CHECK(s.pool_in_use == 0 && s.pool_peak > 0 && s.pool_slots_used > 0);
    printf("legacy after random sequence: peak %zu held %zu slots %d/%d\n", s.pool_peak, s.pool_reserved,
           s.pool_slots_used, s.pool_slots_total);

    /* idle buffers are released after enough synchronizes */
    for (int i = 0; i < 10; i++) CHECK(clm_backend_synchronize(backend) == CLM_OK);
    s = stats_of(backend);
    CHECK(s.pool_slots_used == 0 && s.pool_reserved == 0);

    /* a table whose slots all hold live buffers is an error; the pool goes on */
    void *ptrs[256];
    size_t sizes[256];
    int ok = 0;
    for (int i = 0; i < 256; i++) ok += clm_cann_pool_alloc(backend, 128 + 128 * (size_t)i, &ptrs[i], &sizes[i]) == CLM_OK;
    CHECK(ok == 256);
    void *extra;
    size_t sextra;
    CHECK(clm_cann_pool_alloc(backend, 1 << 20, &extra, &sextra) == CLM_ERR_OUT_OF_MEMORY);
    CHECK(strstr(clm_last_error(), "slots") != NULL);
    for (int i = 0; i < 256; i += 2) CHECK(clm_cann_pool_free(backend, ptrs[i], sizes[i]) == CLM_OK);
    /* free cached buffers are released to record a new one */
    CHECK(clm_cann_pool_alloc(backend, 1 << 20, &extra, &sextra) == CLM_OK);
    CHECK(clm_cann_pool_free(backend, extra, sextra) == CLM_OK);
    for (int i = 1; i < 256; i += 2) CHECK(clm_cann_pool_free(backend, ptrs[i], sizes[i]) == CLM_OK);
    CHECK(stats_of(backend).pool_in_use == 0);
    clm_backend_free(backend);
}

static void test_vmm(void) {
    clm_backend *backend = new_backend("vmm");
    if (backend == NULL) return;
    clm_cann_stats s = stats_of(backend);
    if (s.pool_kind != CLM_POOL_VMM) {
        /* only a runtime without VMM may fall back; acl_host implements it */
        CHECK(strcmp(clm_runtime_name(), "acl_host") != 0);
        clm_backend_free(backend);
        return;
    }
    aclrtPhysicalMemProp prop = {ACL_MEM_HANDLE_TYPE_NONE, ACL_MEM_ALLOCATION_TYPE_PINNED, ACL_HBM_MEM_HUGE,
                                 {0, ACL_MEM_LOCATION_TYPE_DEVICE}, 0};
    size_t gran = 0;
    CHECK(aclrtMemGetAllocationGranularity(&prop, ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED, &gran) == ACL_SUCCESS);
    CHECK(gran > 0 && s.pool_mapped == 0 && s.pool_in_use == 0);

    /* growth in granularity steps; bump addresses */
    void *a, *b, *c;
    size_t sa, sb, sc;
    CHECK(clm_cann_pool_alloc(backend, 1000, &a, &sa) == CLM_OK);
    s = stats_of(backend);
    CHECK(sa == 1024 && s.pool_mapped == gran && s.pool_reserved >= gran && s.pool_reserved % gran == 0);
    CHECK(clm_cann_pool_alloc(backend, gran, &b, &sb) == CLM_OK);
    CHECK((char *)b == (char *)a + sa);
    s = stats_of(backend);
    CHECK(s.pool_mapped == 2 * gran && s.pool_in_use == sa + sb);
    /* real pages: bytes written through device copies read back across the chunk boundary */
    size_t n = sb;
    unsigned char *host = malloc(n), *back = malloc(n);
    for (size_t i = 0; i < n; i++) host[i] = (unsigned char)(i * 7 + 3);
    CHECK(aclrtMemcpy(b, n, host, n, ACL_MEMCPY_HOST_TO_DEVICE) == ACL_SUCCESS);
    CHECK(aclrtMemcpy(back, n, b, n, ACL_MEMCPY_DEVICE_TO_HOST) == ACL_SUCCESS);
    CHECK(memcmp(host, back, n) == 0);
    free(host);
    free(back);
    /* an out-of-order free is an error and changes nothing */
    CHECK(clm_cann_pool_alloc(backend, 256, &c, &sc) == CLM_OK);
    CHECK(clm_cann_pool_free(backend, b, sb) == CLM_ERR_INVALID_ARG);
    CHECK(strstr(clm_last_error(), "out-of-order") != NULL);
    CHECK(stats_of(backend).pool_in_use == sa + sb + sc);
    CHECK(clm_cann_pool_free(backend, c, sc) == CLM_OK);
    CHECK(clm_cann_pool_free(backend, b, sb) == CLM_OK);
    CHECK(clm_cann_pool_free(backend, a, sa) == CLM_OK);
    /* the same request gets the same address again (capture relies on it) */
    CHECK(clm_cann_pool_alloc(backend, 1000, &c, &sc) == CLM_OK && c == a);
    CHECK(clm_cann_pool_free(backend, c, sc) == CLM_OK);

    random_sequence(backend, true, 600);
    s = stats_of(backend);
    CHECK(s.pool_in_use == 0 && s.pool_mapped % gran == 0 && s.pool_mapped >= s.pool_peak);
    printf("vmm after random sequence: peak %zu mapped %zu reserved %zu granularity %zu\n", s.pool_peak,
           s.pool_mapped, s.pool_reserved, gran);
    /* a request beyond the reserved range is an error; the pool goes on */
    CHECK(clm_cann_pool_alloc(backend, s.pool_reserved + 1, &c, &sc) == CLM_ERR_OUT_OF_MEMORY);
    CHECK(clm_cann_pool_alloc(backend, 100, &c, &sc) == CLM_OK);
    CHECK(clm_cann_pool_free(backend, c, sc) == CLM_OK);
    clm_backend_free(backend);
}

int main(void) {
    test_legacy();
    test_vmm();
    return CT_RESULT();
}

/* test_comm_ops.c - the collective graph ops of tensor parallelism through libcann_llm: 2 ranks,
 * each a forked process with its own registry and CANN backend; rank 0's RootInfo
 * (clm_cann_comm_root_info) goes to rank 1 through a shared mapping, both join
 * (clm_cann_comm_init), then one graph with ALL_REDUCE (F32, F16) and ALL_GATHER nodes runs
 * twice (the second time replayed from the captured graph). Also: the constructors' checks, a
 * collective on a backend without a communicator, a second communicator on one backend, an
 * ALL_GATHER whose rank count is not the communicator's. Run under ASan/UBSan in CI too.
 */
#include <math.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cann_llm.h"
#include "ctest_util.h"

typedef struct shared {
    _Atomic int ready;
    unsigned char root[CLM_COMM_ROOT_INFO_BYTES];
} shared;

static shared *g_shared;

static clm_tensor *new_1d(clm_context *ctx, int32_t type, int64_t n) {
    clm_tensor *t = NULL;
    CHECK(clm_new_tensor(ctx, type, 1, &n, &t) == CLM_OK);
    return t;
}

static void alloc_all(clm_buffer *buf, clm_tensor **ts, int n) {
    size_t offset = 0;
    for (int i = 0; i < n; i++) {
        CHECK(clm_tensor_alloc(buf, ts[i], offset) == CLM_OK);
        offset += (clm_nbytes(ts[i]) + 127) / 128 * 128;
    }
}

static int rank_main(int rank) {
    ct_failures = 0;
    alarm(30);
    clm_reg *reg;
    clm_device *dev;
    clm_backend *backend;
    if (clm_cann_reg(&reg) != CLM_OK || clm_reg_device(reg, 0, &dev) != CLM_OK ||
        clm_device_init_backend(dev, &backend) != CLM_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, clm_last_error());
        return 1;
    }
    if (rank == 0) {
        unsigned char small[16];
        CHECK(clm_cann_comm_root_info(backend, small, sizeof small) == CLM_ERR_INVALID_ARG);
        CHECK(clm_cann_comm_root_info(backend, g_shared->root, CLM_COMM_ROOT_INFO_BYTES) == CLM_OK);
        atomic_store(&g_shared->ready, 1);
    } else {
        while (!atomic_load(&g_shared->ready))
            usleep(1000);
    }
    CHECK(clm_cann_comm_init(backend, 2, 2, g_shared->root, CLM_COMM_ROOT_INFO_BYTES) == CLM_ERR_INVALID_ARG);
    clm_status st = clm_cann_comm_init(backend, 2, rank, g_shared->root, CLM_COMM_ROOT_INFO_BYTES);
    CHECK(st == CLM_OK);
    if (st != CLM_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, clm_last_error());
        return 1;
    }
    CHECK(clm_cann_comm_init(backend, 2, rank, g_shared->root, CLM_COMM_ROOT_INFO_BYTES) == CLM_ERR_STATE);
    CHECK(strstr(clm_last_error(), "already belongs") != NULL);

    clm_context *ctx;
    CHECK(clm_context_new(32, &ctx) == CLM_OK);
    clm_tensor *a = new_1d(ctx, CLM_TYPE_F32, 1000), *h = new_1d(ctx, CLM_TYPE_F16, 64);
    int64_t ne_g[2] = {6, 2};
    clm_tensor *g = NULL, *sum_a, *sum_h, *gathered;
    CHECK(clm_new_tensor(ctx, CLM_TYPE_F32, 2, ne_g, &g) == CLM_OK);
    CHECK(clm_all_reduce(ctx, a, &sum_a) == CLM_OK && clm_all_reduce(ctx, h, &sum_h) == CLM_OK);
    CHECK(clm_all_gather(ctx, g, 2, &gathered) == CLM_OK);
    CHECK(gathered->ne[0] == 6 && gathered->ne[1] == 2 && gathered->ne[2] == 1 && gathered->ne[3] == 2);
    CHECK(clm_device_supports_op(dev, sum_a) && clm_device_supports_op(dev, gathered));
    CHECK(strcmp(clm_op_name(sum_a->op), "ALL_REDUCE") == 0 && strcmp(clm_op_name(gathered->op), "ALL_GATHER") == 0);

    clm_buffer *buf;
    CHECK(clm_buft_alloc_buffer(clm_device_buffer_type(dev), 1 << 16, &buf) == CLM_OK);
    clm_tensor *all[] = {a, h, g, sum_a, sum_h, gathered};
    alloc_all(buf, all, 6);
    clm_graph *graph;
    CHECK(clm_graph_new(ctx, 16, &graph) == CLM_OK);
    CHECK(clm_graph_build_forward(graph, sum_a) == CLM_OK);
    CHECK(clm_graph_build_forward(graph, sum_h) == CLM_OK);
    CHECK(clm_graph_build_forward(graph, gathered) == CLM_OK);
    for (int round = 0; round < 2; round++) {   /* eager + capture, then a replay */
        float va[1000], vg[12], out[1000], outg[24];
        uint16_t vh[64], outh[64];
        for (int i = 0; i < 1000; i++) va[i] = (float)(i % 97) * (float)(rank + 1) + (float)round;
        for (int i = 0; i < 64; i++) vh[i] = (uint16_t)(0x3c00 + (rank ? 0x0400 : 0)); /* 1.0, 2.0 */
        for (int i = 0; i < 12; i++) vg[i] = (float)(100 * rank + i + round);
        CHECK(clm_tensor_set(a, va, 0, sizeof va) == CLM_OK);
        CHECK(clm_tensor_set(h, vh, 0, sizeof vh) == CLM_OK);
        CHECK(clm_tensor_set(g, vg, 0, sizeof vg) == CLM_OK);
        st = clm_backend_graph_compute(backend, graph);
        if (st == CLM_OK) st = clm_backend_synchronize(backend);
        CHECK(st == CLM_OK);
        if (st != CLM_OK) fprintf(stderr, "rank %d: %s\n", rank, clm_last_error());
        CHECK(clm_tensor_get(sum_a, out, 0, sizeof out) == CLM_OK);
        CHECK(clm_tensor_get(sum_h, outh, 0, sizeof outh) == CLM_OK);
        CHECK(clm_tensor_get(gathered, outg, 0, sizeof outg) == CLM_OK);
        int bad = 0;
        for (int i = 0; i < 1000; i++) bad += out[i] != (float)(i % 97) * 3.0f + 2.0f * (float)round;
        for (int i = 0; i < 64; i++) bad += outh[i] != 0x4200; /* 3.0 */
        for (int r = 0; r < 2; r++)
            for (int i = 0; i < 12; i++) bad += outg[r * 12 + i] != (float)(100 * r + i + round);
        CHECK(bad == 0);
    }
    clm_cann_stats stats;
    CHECK(clm_cann_backend_stats(backend, &stats) == CLM_OK);
    printf("rank %d: graph captures %lld, replays %lld\n", rank, (long long)stats.graph_captures,
           (long long)stats.graph_replays);

    /* an ALL_GATHER of 3 ranks on a communicator of 2 */
    clm_tensor *wrong;
    CHECK(clm_all_gather(ctx, g, 3, &wrong) == CLM_OK);
    clm_buffer *buf2;
    CHECK(clm_buft_alloc_buffer(clm_device_buffer_type(dev), 4096, &buf2) == CLM_OK);
    CHECK(clm_tensor_alloc(buf2, wrong, 0) == CLM_OK);
    clm_graph *graph2;
    CHECK(clm_graph_new(ctx, 4, &graph2) == CLM_OK);
    CHECK(clm_graph_build_forward(graph2, wrong) == CLM_OK);
    CHECK(clm_backend_graph_compute(backend, graph2) == CLM_ERR_INVALID_ARG);
    CHECK(strstr(clm_last_error(), "gathers 3 ranks") != NULL);

    clm_buffer_free(buf2);
    clm_buffer_free(buf);
    clm_context_free(ctx);
    clm_backend_free(backend); /* destroys the communicator */
    return ct_failures ? 1 : 0;
}

/* No communicator, and the constructors' checks: one process. */
static void test_without_communicator(void) {
    clm_reg *reg;
    clm_device *dev;
    clm_backend *backend;
    if (clm_cann_reg(&reg) != CLM_OK || clm_reg_device(reg, 0, &dev) != CLM_OK ||
        clm_device_init_backend(dev, &backend) != CLM_OK) {
        fprintf(stderr, "%s\n", clm_last_error());
        CHECK(0);
        return;
    }
    clm_context *ctx;
    CHECK(clm_context_new(16, &ctx) == CLM_OK);
    clm_tensor *a = new_1d(ctx, CLM_TYPE_F32, 8), *i32 = new_1d(ctx, CLM_TYPE_I32, 8), *out, *t;
    CHECK(clm_all_reduce(ctx, i32, &t) == CLM_ERR_INVALID_ARG);
    int64_t ne4[4] = {2, 2, 2, 2};
    clm_tensor *four;
    CHECK(clm_new_tensor(ctx, CLM_TYPE_F32, 4, ne4, &four) == CLM_OK);
    CHECK(clm_all_gather(ctx, four, 2, &t) == CLM_ERR_INVALID_ARG);
    CHECK(clm_all_gather(ctx, a, 0, &t) == CLM_ERR_INVALID_ARG);
    clm_tensor *view;
    CHECK(clm_view_4d(ctx, four, 2, 2, 1, 1, 16, 16, 16, 0, &view) == CLM_OK); /* strided */
    CHECK(clm_all_reduce(ctx, view, &t) == CLM_ERR_INVALID_ARG);
    CHECK(clm_all_reduce(ctx, a, &out) == CLM_OK);
    clm_buffer *buf;
    CHECK(clm_buft_alloc_buffer(clm_device_buffer_type(dev), 4096, &buf) == CLM_OK);
    clm_tensor *all[] = {a, out};
    alloc_all(buf, all, 2);
    clm_graph *graph;
    CHECK(clm_graph_new(ctx, 4, &graph) == CLM_OK);
    CHECK(clm_graph_build_forward(graph, out) == CLM_OK);
    CHECK(clm_backend_graph_compute(backend, graph) == CLM_ERR_STATE);
    CHECK(strstr(clm_last_error(), "has no communicator") != NULL);
    clm_buffer_free(buf);
    clm_context_free(ctx);
    clm_backend_free(backend);
}

int main(void) {
    g_shared = mmap(NULL, sizeof *g_shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (g_shared == MAP_FAILED) return 1;
    memset(g_shared, 0, sizeof *g_shared);
    fflush(stdout);
    pid_t pids[2];
    for (int r = 0; r < 2; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            int rc = rank_main(r);
            fflush(stdout);
            fflush(stderr);
            _exit(rc);
        }
    }
    for (int r = 0; r < 2; r++) {
        int status = 0;
        CHECK(pids[r] > 0 && waitpid(pids[r], &status, 0) == pids[r]);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fprintf(stderr, "rank %d failed\n", r);
    }
    test_without_communicator();
    return CT_RESULT();
}

/* launch.h - the host shim's kernel launch: what the aclrtlaunch_<kernel> entry points of
 * launch.cpp call (runtime.cpp implements it). Exported from libacl_host for the C tests, which
 * launch kernels of their own through it. */
#ifndef CLM_ASCENDC_HOST_LAUNCH_H
#define CLM_ASCENDC_HOST_LAUNCH_H

#include <cstdint>
#include <functional>

#include "acl/acl.h"

namespace ascendc_host {

/* A global-memory argument of a kernel, named for error messages; an optional one may be NULL. */
struct GmArg {
    const char *name;
    void *ptr;
    bool optional = false;
};

/* Checks the launch (blockDim in [1, 65535], a live stream, every GM argument in device memory of
 * the stream's device or a peer) and queues one stream task that runs body() once per block on
 * the thread pool, with GetBlockIdx() / GetBlockNum() set. Returns 0 or an ACL error code (the
 * message in aclGetRecentErrMsg); faults inside the blocks are reported by the stream's next
 * synchronize as ACL_ERROR_RT_AICORE_EXCEPTION. */
__attribute__((visibility("default"))) uint32_t Launch(const char *name, uint32_t block_dim, aclrtStream stream,
                                                       const GmArg *args, int n_args, std::function<void()> body);

}  // namespace ascendc_host

#endif /* CLM_ASCENDC_HOST_LAUNCH_H */

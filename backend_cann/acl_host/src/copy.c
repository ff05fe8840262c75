/* copy.c - aclrtMemcpy(Async) and aclrtMemset(Async), checked against where the pointers live.
 *
 * The copy kind must match the pointers (HOST_TO_DEVICE: destination in device memory and
 * source not, and so on; DEFAULT infers it), and the device side of a copy must lie inside a
 * live allocation. The synchronous calls run at once with no stream sync, as on CANN. The async
 * calls are checked at launch and queued; when the host side is ordinary (pageable) memory,
 * the call returns only after the copy has run, as the CANN docs describe.
 *
 * During a graph capture the synchronous calls, and async copies with a pageable host side,
 * are "unsafe" (capture.c): an error that invalidates the capture, unless the capture mode
 * allows them. Async copies on a capturing stream are recorded like any task. Async copies
 * within one device need 64-byte aligned addresses (acl_rt.h).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ah_rt.h"

static const char *const k_kind_names[] = {
    "ACL_MEMCPY_HOST_TO_HOST",          "ACL_MEMCPY_HOST_TO_DEVICE",
    "ACL_MEMCPY_DEVICE_TO_HOST",        "ACL_MEMCPY_DEVICE_TO_DEVICE",
    "ACL_MEMCPY_DEFAULT",               "ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE",
    "ACL_MEMCPY_INNER_DEVICE_TO_DEVICE", "ACL_MEMCPY_INTER_DEVICE_TO_DEVICE",
};

static const char *where(ah_mem_kind kind)
{
    return kind == AH_MEM_DEVICE        ? "device memory"
           : kind == AH_MEM_HOST_PINNED ? "pinned host memory"
           : kind == AH_MEM_REGISTERED  ? "host memory mapped by aclrtHostRegister"
                                        : "host memory";
}

/* acl_rt.h: the device address aclrtHostRegister returns cannot be used for memory operations
 * such as copies. On the host that address is the host address too, so a registered range on
 * the side a copy's kind calls host memory (or any side of a DEFAULT copy) is the host address,
 * an ordinary host buffer; on a device side it is refused. */
static aclError registered_side(const char *api, const char *side, const void *p, bool host_side,
                                ah_mem_kind *kind)
{
    if (*kind != AH_MEM_REGISTERED)
        return ACL_SUCCESS;
    if (host_side) {
        *kind = AH_MEM_NONE;
        return ACL_SUCCESS;
    }
    return ah_error(ACL_ERROR_INVALID_PARAM,
                    "%s: %s %p lies in a range mapped by aclrtHostRegister, whose device address "
                    "cannot be used for memory operations; use the host address directly", api,
                    side, p);
}

typedef struct copy_sides {
    ah_mem_kind dst_kind, src_kind;
    int dst_device, src_device;
} copy_sides;

static aclError check_copy(const char *api, void *dst, size_t destMax, const void *src, size_t count,
                           aclrtMemcpyKind kind, copy_sides *sides)
{
    if (!dst || !src)
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: %s pointer is NULL", api,
                        dst ? "source" : "destination");
    if (count > destMax)
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: count %zu exceeds destMax %zu", api, count,
                        destMax);
    if ((int)kind < 0 || (int)kind > ACL_MEMCPY_INTER_DEVICE_TO_DEVICE)
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: unknown copy kind %d", api, (int)kind);
    char what[96];
    snprintf(what, sizeof what, "%s: destination", api);
    aclError rc = ah_mem_classify_named(dst, count, what, &sides->dst_kind, &sides->dst_device);
    if (rc != ACL_SUCCESS)
        return rc;
    snprintf(what, sizeof what, "%s: source", api);
    rc = ah_mem_classify_named(src, count, what, &sides->src_kind, &sides->src_device);
    bool dst_host = kind == ACL_MEMCPY_HOST_TO_HOST || kind == ACL_MEMCPY_DEVICE_TO_HOST ||
                    kind == ACL_MEMCPY_DEFAULT;
    bool src_host = kind == ACL_MEMCPY_HOST_TO_HOST || kind == ACL_MEMCPY_HOST_TO_DEVICE ||
                    kind == ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE || kind == ACL_MEMCPY_DEFAULT;
    if (rc == ACL_SUCCESS)
        rc = registered_side(api, "destination", dst, dst_host, &sides->dst_kind);
    if (rc == ACL_SUCCESS)
        rc = registered_side(api, "source", src, src_host, &sides->src_kind);
    if (rc != ACL_SUCCESS)
        return rc;

    bool dst_dev = sides->dst_kind == AH_MEM_DEVICE, src_dev = sides->src_kind == AH_MEM_DEVICE;
    bool ok = true;
    switch (kind) {
    case ACL_MEMCPY_HOST_TO_HOST: ok = !dst_dev && !src_dev; break;
    case ACL_MEMCPY_HOST_TO_DEVICE:
    case ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE: ok = dst_dev && !src_dev; break;
    case ACL_MEMCPY_DEVICE_TO_HOST: ok = !dst_dev && src_dev; break;
    case ACL_MEMCPY_DEVICE_TO_DEVICE: ok = dst_dev && src_dev; break;
    case ACL_MEMCPY_INNER_DEVICE_TO_DEVICE:
        ok = dst_dev && src_dev && sides->dst_device == sides->src_device;
        break;
    case ACL_MEMCPY_INTER_DEVICE_TO_DEVICE:
        ok = dst_dev && src_dev && sides->dst_device != sides->src_device;
        break;
    default: break; /* DEFAULT: inferred from the addresses */
    }
    if (!ok) {
        /* A host-looking side may be a device block that is already gone. */
        char hint[300] = "";
        char why[256];
        if (sides->dst_kind == AH_MEM_NONE && ah_mem_recently_freed(dst, why, sizeof why))
            snprintf(hint, sizeof hint, "; destination: %s", why);
        else if (sides->src_kind == AH_MEM_NONE && ah_mem_recently_freed(src, why, sizeof why))
            snprintf(hint, sizeof hint, "; source: %s", why);
        return ah_error(ACL_ERROR_RT_INVALID_MEMORY_TYPE,
                        "%s: kind %s does not match the pointers: destination %p is %s (device %d), "
                        "source %p is %s (device %d)%s", api, k_kind_names[kind], dst,
                        where(sides->dst_kind), sides->dst_device, src, where(sides->src_kind),
                        sides->src_device, hint);
    }
    if (dst_dev && src_dev && sides->dst_device != sides->src_device &&
        !ah_rt_peer_enabled(sides->dst_device, sides->src_device))
        return ah_error(ACL_ERROR_INVALID_PARAM,
                        "%s: copy from device %d to device %d needs aclrtDeviceEnablePeerAccess "
                        "first", api, sides->src_device, sides->dst_device);
    return ACL_SUCCESS;
}

AH_API aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count,
                            aclrtMemcpyKind kind)
{
    const char *api = "aclrtMemcpy";
    copy_sides sides;
    int device = 0;
    aclError rc = ah_rt_require_device(api, &device);
    if (rc == ACL_SUCCESS)
        rc = ah_capture_check_unsafe(api, device);
    if (rc == ACL_SUCCESS)
        rc = check_copy(api, dst, destMax, src, count, kind, &sides);
    if (rc == ACL_SUCCESS && count)
        memmove(dst, src, count);
    return rc;
}

typedef struct copy_task {
    void *dst;
    const void *src;
    size_t count;
    int value; /* memset byte, or -1 for a copy */
} copy_task;

static aclError run_copy(void *arg)
{
    copy_task *t = arg;
    if (t->value < 0)
        memmove(t->dst, t->src, t->count);
    else
        ah_mem_set(t->dst, t->value, t->count);
    return ACL_SUCCESS;
}

/* Queues the task; ranges in acl memory are rechecked when it runs. With `complete`, waits for
 * the stream up to and including the task. */
static aclError queue_task(const char *api, struct ah_stream *s, copy_task job,
                           const ah_range *ranges, size_t n_ranges, bool complete)
{
    copy_task *arg = malloc(sizeof *arg);
    if (!arg)
        return ah_error(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of host memory", api);
    *arg = job;
    if (complete)
        return ah_stream_enqueue_and_wait(s, api, run_copy, arg, free, ranges, n_ranges);
    return ah_stream_enqueue(s, api, run_copy, arg, free, ranges, n_ranges, NULL);
}

/* acl_rt.h (8.1.RC1), aclrtMemcpyAsync: "For on-chip Device-to-Device memory copy, both the source
 * and destination addresses must be 64-byte aligned". The synchronous aclrtMemcpy documents no
 * such rule. */
static aclError check_d2d_alignment(const char *api, void *dst, const void *src,
                                    const copy_sides *sides)
{
    if (sides->dst_kind != AH_MEM_DEVICE || sides->src_kind != AH_MEM_DEVICE ||
        sides->dst_device != sides->src_device)
        return ACL_SUCCESS;
    const void *bad = ((uintptr_t)dst % 64) ? dst : ((uintptr_t)src % 64) ? src : NULL;
    if (!bad)
        return ACL_SUCCESS;
    return ah_error(ACL_ERROR_RT_ADDR_UNALIGNED,
                    "%s: device-to-device copy needs 64-byte aligned source and destination; "
                    "%s %p is %zu bytes past a 64-byte boundary", api,
                    bad == dst ? "destination" : "source", bad, (size_t)((uintptr_t)bad % 64));
}

AH_API aclError aclrtMemcpyAsync(void *dst, size_t destMax, const void *src, size_t count,
                                 aclrtMemcpyKind kind, aclrtStream stream)
{
    const char *api = "aclrtMemcpyAsync";
    struct ah_stream *s = NULL;
    copy_sides sides;
    aclError rc = ah_stream_resolve(stream, api, &s);
    if (rc == ACL_SUCCESS)
        rc = check_copy(api, dst, destMax, src, count, kind, &sides);
    if (rc != ACL_SUCCESS)
        return rc;
    ah_range ranges[2];
    size_t n_ranges = 0;
    if (sides.dst_kind != AH_MEM_NONE)
        ranges[n_ranges++] = (ah_range){dst, count};
    if (sides.src_kind != AH_MEM_NONE)
        ranges[n_ranges++] = (ah_range){src, count};
    bool pageable = sides.dst_kind == AH_MEM_NONE || sides.src_kind == AH_MEM_NONE;
    if (pageable && (rc = ah_capture_check_unsafe(api, ah_stream_device(s))) != ACL_SUCCESS)
        return rc;
    if ((rc = check_d2d_alignment(api, dst, src, &sides)) != ACL_SUCCESS)
        return rc;
    return queue_task(api, s, (copy_task){dst, src, count, -1}, ranges, n_ranges, pageable);
}

static aclError check_memset(const char *api, void *devPtr, size_t maxCount, size_t count)
{
    if (!devPtr)
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: devPtr is NULL", api);
    if (count > maxCount)
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: count %zu exceeds maxCount %zu", api, count,
                        maxCount);
    ah_mem_kind kind = AH_MEM_NONE;
    int device = -1;
    aclError rc = ah_mem_classify_named(devPtr, count, api, &kind, &device);
    if (rc == ACL_SUCCESS)
        rc = registered_side(api, "devPtr", devPtr, false, &kind);
    if (rc == ACL_SUCCESS && kind == AH_MEM_NONE) /* the device check explains why not */
        rc = ah_mem_check_device(devPtr, count, api);
    return rc;
}

AH_API aclError aclrtMemset(void *devPtr, size_t maxCount, int32_t value, size_t count)
{
    const char *api = "aclrtMemset";
    int device = 0;
    aclError rc = ah_rt_require_device(api, &device);
    if (rc == ACL_SUCCESS)
        rc = ah_capture_check_unsafe(api, device);
    if (rc == ACL_SUCCESS)
        rc = check_memset(api, devPtr, maxCount, count);
    if (rc == ACL_SUCCESS && count)
        ah_mem_set(devPtr, (unsigned char)value, count);
    return rc;
}

AH_API aclError aclrtMemsetAsync(void *devPtr, size_t maxCount, int32_t value, size_t count,
                                 aclrtStream stream)
{
    const char *api = "aclrtMemsetAsync";
    struct ah_stream *s = NULL;
    aclError rc = ah_stream_resolve(stream, api, &s);
    if (rc == ACL_SUCCESS)
        rc = check_memset(api, devPtr, maxCount, count);
    if (rc != ACL_SUCCESS)
        return rc;
    ah_range range = {devPtr, count};
    return queue_task(api, s, (copy_task){devPtr, NULL, count, (unsigned char)value}, &range, 1,
                      false);
}

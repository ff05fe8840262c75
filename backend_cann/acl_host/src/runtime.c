/* runtime.c - aclInit/aclFinalize, configuration from the environment, devices and peer access.
 *
 * Environment, read at the first aclInit:
 *   CANN_LLM_HOST_DEVICES   number of devices (default 1, at most AH_MAX_DEVICES)
 *   ASCEND_RT_VISIBLE_DEVICES  as in CANN: the comma list of device ids this process may use
 *                           (each < CANN_LLM_HOST_DEVICES, each once); the process sees them
 *                           renumbered from 0, in the list's order. Ray sets it for actors
 *                           that request its "NPU" resource.
 *   CANN_LLM_HOST_MEMORY    capacity of each device in bytes, K/M/G/T suffixes (binary);
 *                           default: half of physical RAM
 *   CANN_LLM_HOST_DEFERRED  1: queued work runs only when the host synchronizes
 *   CANN_LLM_HOST_HUGEPAGES 0: no transparent-huge-page advice for HUGE_* allocations
 */
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ah_rt.h"

static pthread_mutex_t g_rt_mutex = PTHREAD_MUTEX_INITIALIZER;
static int g_init_count;
static atomic_bool g_initialized;
/* Bumped at every first aclInit so a thread's device binding does not outlive aclFinalize. */
static atomic_uint g_generation;
static bool g_deferred;
static bool g_hugepages = true;
static int g_device_count = 1;
static size_t g_capacity;
static atomic_int g_device_refs[AH_MAX_DEVICES];
static atomic_uint g_peer_mask[AH_MAX_DEVICES]; /* bit b of [a]: a may access b */

static _Thread_local int tl_device = -1;
static _Thread_local unsigned tl_generation;

bool ah_initialized(void) { return atomic_load(&g_initialized); }
int ah_device_count(void) { return g_device_count; }
bool ah_rt_deferred(void) { return g_deferred; }
bool ah_rt_hugepages(void) { return g_hugepages; }
size_t ah_rt_device_capacity(void) { return g_capacity; }

int ah_current_device(void)
{
    if (!atomic_load(&g_initialized) || tl_device < 0 ||
        tl_generation != atomic_load(&g_generation) || atomic_load(&g_device_refs[tl_device]) <= 0)
        return -1;
    return tl_device;
}

aclError ah_rt_require_device(const char *api, int *device)
{
    if (!ah_initialized())
        return ah_error(ACL_ERROR_UNINITIALIZE, "%s: aclInit has not been called", api);
    int dev = ah_current_device();
    if (dev < 0)
        return ah_error(ACL_ERROR_RT_CONTEXT_NULL,
                        "%s: no device is set on this thread (call aclrtSetDevice first)", api);
    if (device)
        *device = dev;
    return ACL_SUCCESS;
}

bool ah_rt_peer_enabled(int a, int b)
{
    return (atomic_load(&g_peer_mask[a]) >> b & 1u) || (atomic_load(&g_peer_mask[b]) >> a & 1u);
}

/* "64G", "512M", "1048576" -> bytes; false if malformed. */
static bool parse_size(const char *text, size_t *out)
{
    char *end = NULL;
    errno = 0;
    unsigned long long value = strtoull(text, &end, 10);
    if (errno != 0 || end == text)
        return false;
    unsigned shift = 0;
    switch (toupper((unsigned char)*end)) {
    case 'K': shift = 10; end++; break;
    case 'M': shift = 20; end++; break;
    case 'G': shift = 30; end++; break;
    case 'T': shift = 40; end++; break;
    default: break;
    }
    if (shift && *end == 'i')
        end++;
    if (toupper((unsigned char)*end) == 'B')
        end++;
    if (*end != '\0' || value == 0 || (shift && value > (~0ull >> shift)))
        return false;
    *out = (size_t)(value << shift);
    return true;
}

static aclError read_device_count(const char *api, int *count)
{
    const char *devices = getenv("CANN_LLM_HOST_DEVICES");
    *count = 1;
    if (devices && *devices) {
        char *end = NULL;
        long n = strtol(devices, &end, 10);
        if (*end != '\0' || n < 1 || n > AH_MAX_DEVICES)
            return ah_error(ACL_ERROR_INVALID_PARAM,
                            "%s: CANN_LLM_HOST_DEVICES='%s' must be an integer in 1..%d", api,
                            devices, AH_MAX_DEVICES);
        *count = (int)n;
    }
    const char *visible = getenv("ASCEND_RT_VISIBLE_DEVICES");
    if (!visible)
        return ACL_SUCCESS;
    int n_visible = 0;
    unsigned seen = 0;
    for (const char *p = visible; *p;) {
        char *end = NULL;
        errno = 0;
        long id = isdigit((unsigned char)*p) ? strtol(p, &end, 10) : -1;
        if (id < 0 || errno != 0 || id >= *count || (*end != ',' && *end != '\0') ||
            (end[0] == ',' && end[1] == '\0'))
            return ah_error(ACL_ERROR_INVALID_PARAM,
                            "%s: ASCEND_RT_VISIBLE_DEVICES='%s' must list device ids in 0..%d "
                            "(CANN_LLM_HOST_DEVICES=%d), separated by commas",
                            api, visible, *count - 1, *count);
        if (seen >> id & 1u)
            return ah_error(ACL_ERROR_INVALID_PARAM,
                            "%s: ASCEND_RT_VISIBLE_DEVICES='%s' lists device %ld twice", api,
                            visible, id);
        seen |= 1u << id;
        n_visible++;
        p = *end == ',' ? end + 1 : end;
    }
    *count = n_visible; /* may be 0: "" hides every device, as in CANN */
    return ACL_SUCCESS;
}

static aclError read_config(void)
{
    aclError rc = read_device_count("aclInit", &g_device_count);
    if (rc != ACL_SUCCESS)
        return rc;
    const char *memory = getenv("CANN_LLM_HOST_MEMORY");
    if (memory && *memory) {
        if (!parse_size(memory, &g_capacity))
            return ah_error(ACL_ERROR_INVALID_PARAM,
                            "aclInit: CANN_LLM_HOST_MEMORY='%s' is not a size such as 8G or 512M",
                            memory);
    } else {
        long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
        g_capacity = pages > 0 && page_size > 0 ? (size_t)pages * (size_t)page_size / 2
                                                : (size_t)4 << 30;
    }
    const char *deferred = getenv("CANN_LLM_HOST_DEFERRED");
    g_deferred = deferred && *deferred && strcmp(deferred, "0") != 0;
    const char *huge = getenv("CANN_LLM_HOST_HUGEPAGES");
    g_hugepages = !(huge && strcmp(huge, "0") == 0);
    return ACL_SUCCESS;
}

AH_API aclError aclInit(const char *configPath)
{
    if (configPath && *configPath) {
        FILE *f = fopen(configPath, "r");
        if (!f)
            return ah_error(ACL_ERROR_INVALID_PARAM, "aclInit: cannot open config file '%s'",
                            configPath);
        fclose(f); /* dump/profiling options have no meaning on the host */
    }
    pthread_mutex_lock(&g_rt_mutex);
    aclError rc = ACL_SUCCESS;
    if (g_init_count > 0) {
        g_init_count++;
        rc = ah_error(ACL_ERROR_REPEAT_INITIALIZE, "aclInit: ACL is already initialized");
    } else if ((rc = read_config()) == ACL_SUCCESS) {
        for (int i = 0; i < AH_MAX_DEVICES; i++) {
            atomic_store(&g_device_refs[i], 0);
            atomic_store(&g_peer_mask[i], 0);
        }
        atomic_fetch_add(&g_generation, 1);
        g_init_count = 1;
        atomic_store(&g_initialized, true);
    }
    pthread_mutex_unlock(&g_rt_mutex);
    return rc;
}

static void teardown(void)
{
    ah_stream_destroy_device(-1);
    ah_capture_release_all();
    ah_event_release_all();
    ah_mem_release_all();
    ah_vmm_release_all();
    ah_pool_shutdown();
    atomic_store(&g_initialized, false);
}

AH_API aclError aclFinalize(void)
{
    pthread_mutex_lock(&g_rt_mutex);
    aclError rc = ACL_SUCCESS;
    if (g_init_count == 0)
        rc = ah_error(ACL_ERROR_REPEAT_FINALIZE, "aclFinalize: ACL is not initialized");
    else if (--g_init_count == 0)
        teardown();
    pthread_mutex_unlock(&g_rt_mutex);
    return rc;
}

/* Process exit without aclFinalize: join the worker threads. */
__attribute__((destructor)) static void teardown_at_exit(void)
{
    if (pthread_mutex_trylock(&g_rt_mutex) != 0)
        return;
    if (g_init_count > 0) {
        ah_stream_destroy_device(-1);
        ah_pool_shutdown();
    }
    pthread_mutex_unlock(&g_rt_mutex);
}

static aclError check_device_id(const char *api, int32_t device)
{
    if (!ah_initialized())
        return ah_error(ACL_ERROR_UNINITIALIZE, "%s: aclInit has not been called", api);
    if (device < 0 || device >= g_device_count)
        return ah_error(ACL_ERROR_RT_INVALID_DEVICEID,
                        "%s: device %d does not exist (%d device(s); CANN_LLM_HOST_DEVICES)", api,
                        (int)device, g_device_count);
    return ACL_SUCCESS;
}

AH_API aclError aclrtSetDevice(int32_t deviceId)
{
    aclError rc = check_device_id("aclrtSetDevice", deviceId);
    if (rc != ACL_SUCCESS)
        return rc;
    pthread_mutex_lock(&g_rt_mutex);
    if (atomic_load(&g_device_refs[deviceId]) == 0)
        rc = ah_stream_create_default(deviceId);
    if (rc == ACL_SUCCESS) {
        atomic_fetch_add(&g_device_refs[deviceId], 1);
        tl_device = deviceId;
        tl_generation = atomic_load(&g_generation);
    }
    pthread_mutex_unlock(&g_rt_mutex);
    return rc;
}

static aclError reset_device(const char *api, int32_t deviceId, bool force)
{
    aclError rc = check_device_id(api, deviceId);
    if (rc != ACL_SUCCESS)
        return rc;
    pthread_mutex_lock(&g_rt_mutex);
    int refs = atomic_load(&g_device_refs[deviceId]);
    if (refs > 0) {
        refs = force ? 0 : refs - 1;
        if (refs == 0) {
            /* Streams first: their workers may still read the device's state. */
            ah_stream_destroy_device(deviceId);
            atomic_store(&g_peer_mask[deviceId], 0);
        }
        atomic_store(&g_device_refs[deviceId], refs);
    }
    if (tl_device == deviceId)
        tl_device = -1;
    pthread_mutex_unlock(&g_rt_mutex);
    return ACL_SUCCESS;
}

AH_API aclError aclrtResetDevice(int32_t deviceId)
{
    return reset_device("aclrtResetDevice", deviceId, false);
}

AH_API aclError aclrtResetDeviceForce(int32_t deviceId)
{
    return reset_device("aclrtResetDeviceForce", deviceId, true);
}

AH_API aclError aclrtGetDevice(int32_t *deviceId)
{
    if (!deviceId)
        return ah_error(ACL_ERROR_INVALID_PARAM, "aclrtGetDevice: deviceId is NULL");
    int dev = 0;
    aclError rc = ah_rt_require_device("aclrtGetDevice", &dev);
    if (rc == ACL_SUCCESS)
        *deviceId = dev;
    return rc;
}

AH_API aclError aclrtGetDeviceCount(uint32_t *count)
{
    if (!count)
        return ah_error(ACL_ERROR_INVALID_PARAM, "aclrtGetDeviceCount: count is NULL");
    int n = g_device_count;
    /* Like the driver query it stands for, it works before aclInit too. */
    aclError rc = ah_initialized() ? ACL_SUCCESS : read_device_count("aclrtGetDeviceCount", &n);
    if (rc == ACL_SUCCESS)
        *count = (uint32_t)n;
    return rc;
}

AH_API const char *aclrtGetSocName(void) { return "acl_host"; }

AH_API aclError aclrtGetRunMode(aclrtRunMode *runMode)
{
    if (!runMode)
        return ah_error(ACL_ERROR_INVALID_PARAM, "aclrtGetRunMode: runMode is NULL");
    *runMode = ACL_HOST;
    return ACL_SUCCESS;
}

AH_API aclError aclrtGetVersion(int32_t *majorVersion, int32_t *minorVersion,
                                int32_t *patchVersion)
{
    if (!majorVersion || !minorVersion || !patchVersion)
        return ah_error(ACL_ERROR_INVALID_PARAM, "aclrtGetVersion: NULL output pointer");
    *majorVersion = ACL_MAJOR_VERSION;
    *minorVersion = ACL_MINOR_VERSION;
    *patchVersion = ACL_PATCH_VERSION;
    return ACL_SUCCESS;
}

static aclError synchronize_device(const char *api, int32_t timeout_ms)
{
    int dev = 0;
    aclError rc = ah_rt_require_device(api, &dev);
    if (rc == ACL_SUCCESS)
        rc = ah_capture_check_unsafe(api, dev);
    if (rc != ACL_SUCCESS)
        return rc;
    return ah_stream_sync_device(dev, timeout_ms);
}

AH_API aclError aclrtSynchronizeDevice(void)
{
    return synchronize_device("aclrtSynchronizeDevice", -1);
}

AH_API aclError aclrtSynchronizeDeviceWithTimeout(int32_t timeout)
{
    if (timeout == 0 || timeout < -1)
        return ah_error(ACL_ERROR_INVALID_PARAM,
                        "aclrtSynchronizeDeviceWithTimeout: timeout %d must be -1 or > 0",
                        (int)timeout);
    return synchronize_device("aclrtSynchronizeDeviceWithTimeout", timeout);
}

/* ---- peer access: every pair of distinct devices may be connected ----------------------------- */

AH_API aclError aclrtDeviceCanAccessPeer(int32_t *canAccessPeer, int32_t deviceId,
                                         int32_t peerDeviceId)
{
    if (!canAccessPeer)
        return ah_error(ACL_ERROR_INVALID_PARAM, "aclrtDeviceCanAccessPeer: output is NULL");
    aclError rc = check_device_id("aclrtDeviceCanAccessPeer", deviceId);
    if (rc == ACL_SUCCESS)
        rc = check_device_id("aclrtDeviceCanAccessPeer", peerDeviceId);
    if (rc != ACL_SUCCESS)
        return rc;
    if (deviceId == peerDeviceId)
        return ah_error(ACL_ERROR_INVALID_PARAM,
                        "aclrtDeviceCanAccessPeer: deviceId and peerDeviceId are both %d",
                        (int)deviceId);
    *canAccessPeer = 1;
    return ACL_SUCCESS;
}

static aclError set_peer_access(const char *api, int32_t peer, bool enable)
{
    int dev = 0;
    aclError rc = ah_rt_require_device(api, &dev);
    if (rc == ACL_SUCCESS)
        rc = check_device_id(api, peer);
    if (rc != ACL_SUCCESS)
        return rc;
    if (peer == dev)
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: peer %d is the current device", api,
                        (int)peer);
    if (enable)
        atomic_fetch_or(&g_peer_mask[dev], 1u << peer);
    else
        atomic_fetch_and(&g_peer_mask[dev], ~(1u << peer));
    return ACL_SUCCESS;
}

AH_API aclError aclrtDeviceEnablePeerAccess(int32_t peerDeviceId, uint32_t flags)
{
    if (flags != 0)
        return ah_error(ACL_ERROR_INVALID_PARAM,
                        "aclrtDeviceEnablePeerAccess: flags must be 0 (got %u)", flags);
    return set_peer_access("aclrtDeviceEnablePeerAccess", peerDeviceId, true);
}

AH_API aclError aclrtDeviceDisablePeerAccess(int32_t peerDeviceId)
{
    return set_peer_access("aclrtDeviceDisablePeerAccess", peerDeviceId, false);
}

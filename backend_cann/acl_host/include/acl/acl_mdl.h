/* acl/acl_mdl.h (acl_host) - model runtime types. Only the graph-capture (aclmdlRI) types so
 * far; the capture functions come with graph mode. Values follow CANN 8.1.RC1.
 */
#ifndef ACL_HOST_ACL_MDL_H
#define ACL_HOST_ACL_MDL_H

#include <stddef.h>
#include <stdint.h>

#include "acl_base.h"
#include "acl_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef void *aclmdlRI;

typedef enum {
    ACL_MODEL_RI_CAPTURE_MODE_GLOBAL = 0,
    ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL,
    ACL_MODEL_RI_CAPTURE_MODE_RELAXED,
} aclmdlRICaptureMode;

typedef enum {
    ACL_MODEL_RI_CAPTURE_STATUS_NONE = 0,
    ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE,
    ACL_MODEL_RI_CAPTURE_STATUS_INVALIDATED,
} aclmdlRICaptureStatus;

#ifdef __cplusplus
}
#endif

#endif /* ACL_HOST_ACL_MDL_H */

/* acl/acl.h (acl_host) - the ACL entry header: init/finalize, versions, recent error text, and
 * the runtime and model headers. Prototypes and values follow CANN 8.1.RC1.
 */
#ifndef ACL_HOST_ACL_H
#define ACL_HOST_ACL_H

#include "acl_rt.h"
#include "acl_mdl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ACL interface version of CANN 8.1.RC1. */
#define ACL_MAJOR_VERSION 1
#define ACL_MINOR_VERSION 13
#define ACL_PATCH_VERSION 0

ACL_FUNC_VISIBILITY aclError aclInit(const char *configPath);
ACL_FUNC_VISIBILITY aclError aclFinalize(void);
ACL_FUNC_VISIBILITY aclError aclrtGetVersion(int32_t *majorVersion, int32_t *minorVersion,
                                             int32_t *patchVersion);
ACL_FUNC_VISIBILITY const char *aclGetRecentErrMsg(void);

#ifdef __cplusplus
}
#endif

#endif /* ACL_HOST_ACL_H */

/* error.c - the per-thread "recent error" text behind aclGetRecentErrMsg. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ah_rt.h"

static _Thread_local char tl_message[AH_ERRMSG_SIZE];
static _Thread_local bool tl_has_message;
/* What aclGetRecentErrMsg handed out; valid until this thread's next call. */
static _Thread_local char tl_returned[AH_ERRMSG_SIZE];

aclError ah_error(aclError code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tl_message, sizeof tl_message, fmt, ap);
    va_end(ap);
    tl_has_message = true;
    return code;
}

void ah_error_set_message(const char *msg)
{
    if (msg == NULL || msg[0] == '\0') {
        tl_has_message = false;
        return;
    }
    snprintf(tl_message, sizeof tl_message, "%s", msg);
    tl_has_message = true;
}

void ah_error_take(char *buf, size_t size)
{
    if (size == 0)
        return;
    snprintf(buf, size, "%s", tl_has_message ? tl_message : "");
    tl_has_message = false;
}

AH_API const char *aclGetRecentErrMsg(void)
{
    if (!tl_has_message)
        return NULL;
    memcpy(tl_returned, tl_message, sizeof tl_returned);
    tl_has_message = false;
    return tl_returned;
}

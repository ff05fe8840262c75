/* error.c - per-thread error messages behind clm_last_error(). */
#include <stdarg.h>
#include <stdio.h>

#include "clm_impl.h"

#define CLM_ERROR_SIZE 2048

static _Thread_local char last_error[CLM_ERROR_SIZE];

static clm_status set_error(clm_status status, const char *fmt, va_list args) {
    vsnprintf(last_error, sizeof(last_error), fmt, args);
    return status;
}

clm_status clm_error(clm_status status, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    set_error(status, fmt, args);
    va_end(args);
    return status;
}

clm_status clm_error_keep(clm_status status, const char *fmt, ...) {
    if (last_error[0] != '\0') return status;
    va_list args;
    va_start(args, fmt);
    set_error(status, fmt, args);
    va_end(args);
    return status;
}

const char *clm_last_error(void) { return last_error; }

void clm_clear_error(void) { last_error[0] = '\0'; }

int32_t clm_abi_version(void) { return CLM_ABI_VERSION; }

const char *clm_version(void) { return "0.1.0"; }

const char *clm_runtime_name(void) { return CLM_RUNTIME_NAME; }

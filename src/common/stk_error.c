/*
 * stk_error.c: status texts, per-handle error formatting, and the per-thread "last error" buffer
 * for failures that happen before a handle exists (turbojpeg/stb pattern).
 */
#include "stk_internal.h"

#include <string.h>

static _Thread_local char last_errmsg[STK__LAST_ERRMSG_SIZE];

const char *stk_strerror(stk_status code)
{
    switch (code) {
    case STK_OK:
        return "success";
    case STK_END:
        return "end of epoch";
    case STK_EINVAL:
        return "invalid argument";
    case STK_ENOMEM:
        return "out of memory";
    case STK_EIO:
        return "I/O error";
    case STK_EFORMAT:
        return "malformed or corrupt data";
    case STK_ELIMIT:
        return "limit exceeded";
    case STK_ENOTSUP:
        return "not supported";
    case STK_ESTATE:
        return "invalid state for this call";
    case STK_ECANCELED:
        return "cancelled";
    case STK_EAGAIN:
        return "nothing ready yet: try again";
    case STK_EBUSY:
        return "the next ring slot is held by the caller";
    default:
        return "unknown status code";
    }
}

const char *stk_last_errmsg(void)
{
    return last_errmsg;
}

/* Format into a scratch buffer first, then copy: an argument may be the destination itself (a
 * message extended with its own text), which vsnprintf straight into it would garble (issue 30:
 * glibc wrote the terminating NUL first and the message came out empty). Messages longer than
 * the scratch buffer are cut, as they would be by any error buffer. */
static void format_into(char *buf, size_t size, const char *fmt, va_list ap)
{
    char tmp[4 * STK_ERRMSG_SIZE];
    vsnprintf(tmp, sizeof(tmp), fmt, ap);
    size_t n = strnlen(tmp, sizeof(tmp) - 1);
    if (n >= size)
        n = size - 1;
    memcpy(buf, tmp, n);
    buf[n] = '\0';
}

stk_status stk__set_error(char *buf, size_t size, stk_status code, const char *fmt, ...)
{
    if (buf && size) {
        va_list ap;
        va_start(ap, fmt);
        format_into(buf, size, fmt, ap);
        va_end(ap);
    }
    return code;
}

stk_status stk__set_last_error(stk_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    format_into(last_errmsg, sizeof(last_errmsg), fmt, ap);
    va_end(ap);
    return code;
}

stk_status stk__last_error_copy(stk_status code, const char *msg)
{
    /* msg may alias last_errmsg itself */
    if (msg != last_errmsg)
        snprintf(last_errmsg, sizeof(last_errmsg), "%s", msg ? msg : "");
    return code;
}

void stk__clear_last_error(void)
{
    last_errmsg[0] = '\0';
}

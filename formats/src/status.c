#include "kp/status.h"

const char *kp_strerror(kp_status status)
{
    switch (status) {
    case KP_OK: return "success";
    case KP_ERR_NOMEM: return "out of memory";
    case KP_ERR_IO: return "input/output error";
    case KP_ERR_INVAL: return "invalid argument";
    case KP_ERR_FORMAT: return "unrecognised format";
    case KP_ERR_COMPRESS: return "corrupt or unsupported compressed data";
    case KP_ERR_EMPTY: return "no usable data";
    case KP_ERR_LIMIT: return "size limit reached";
    }
    return "unknown error";
}

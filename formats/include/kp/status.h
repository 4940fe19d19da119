/* Status codes shared by every formats/ function.
 *
 * Every fallible function returns a kp_status: KP_OK (0) on success, a negative
 * code otherwise. Nothing in formats/ prints or exits; the caller decides what
 * to tell the user.
 */
#ifndef KP_STATUS_H
#define KP_STATUS_H

typedef enum {
    KP_OK = 0,
    KP_ERR_NOMEM = -1,    /* an allocation failed; the object is still usable */
    KP_ERR_IO = -2,       /* a read, write, rename or close failed; errno is kept */
    KP_ERR_INVAL = -3,    /* an argument is out of its documented range */
    KP_ERR_FORMAT = -4,   /* input is not in the expected format at all */
    KP_ERR_COMPRESS = -5, /* the gzip or zstd library reported an error */
    KP_ERR_EMPTY = -6,    /* input held no usable record */
    KP_ERR_LIMIT = -7     /* a size limit was reached (e.g. a line over 16 MiB) */
} kp_status;

/* Returns a short, static, lowercase description of `status` (never NULL). */
const char *kp_strerror(kp_status status);

#endif

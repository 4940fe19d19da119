/* zlib allocates through kp_alloc too, so allocation-failure tests reach
 * the gzip paths of sinks and sources. Internal to formats/. */
#ifndef KP_ZLIB_ALLOC_H
#define KP_ZLIB_ALLOC_H

#include <zlib.h>

voidpf kp_zlib_alloc(voidpf opaque, uInt items, uInt size);
void kp_zlib_free(voidpf opaque, voidpf ptr);

#endif

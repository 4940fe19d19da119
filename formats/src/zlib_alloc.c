#include "zlib_alloc.h"

#include "kp/alloc.h"

voidpf kp_zlib_alloc(voidpf opaque, uInt items, uInt size)
{
    (void)opaque;
    return kp_calloc(items, size);
}

void kp_zlib_free(voidpf opaque, voidpf ptr)
{
    (void)opaque;
    kp_free(ptr);
}

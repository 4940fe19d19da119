#include "kp/alloc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static kp_allocator current = {malloc, realloc, free};

void kp_set_allocator(const kp_allocator *allocator)
{
    if (allocator) {
        current = *allocator;
    } else {
        current.malloc_fn = malloc;
        current.realloc_fn = realloc;
        current.free_fn = free;
    }
}

void *kp_malloc(size_t size)
{
    return current.malloc_fn(size ? size : 1);
}

void *kp_calloc(size_t count, size_t size)
{
    if (size && count > SIZE_MAX / size)
        return NULL;
    void *p = kp_malloc(count * size);
    if (p)
        memset(p, 0, count * size);
    return p;
}

void *kp_realloc(void *ptr, size_t size)
{
    return current.realloc_fn(ptr, size ? size : 1);
}

void *kp_realloc_array(void *ptr, size_t count, size_t size)
{
    if (size && count > SIZE_MAX / size)
        return NULL;
    return kp_realloc(ptr, count * size);
}

void kp_free(void *ptr)
{
    if (ptr)
        current.free_fn(ptr);
}

char *kp_strdup(const char *text)
{
    size_t len = strlen(text) + 1;
    char *copy = kp_malloc(len);
    if (copy)
        memcpy(copy, text, len);
    return copy;
}

/* Allocation entry points of formats/.
 *
 * All memory in formats/ is obtained through these functions so that tests can
 * inject allocation failures. The default allocator is the C library's.
 */
#ifndef KP_ALLOC_H
#define KP_ALLOC_H

#include <stddef.h>

typedef struct {
    void *(*malloc_fn)(size_t size);
    void *(*realloc_fn)(void *ptr, size_t size);
    void (*free_fn)(void *ptr);
} kp_allocator;

/* Installs `allocator` for every later allocation, or restores the C library's
 * when `allocator` is NULL. Not thread-safe: call it before creating objects.
 * Memory must be freed by the allocator that allocated it. */
void kp_set_allocator(const kp_allocator *allocator);

/* Like malloc/realloc/free. They return NULL on failure or on size overflow
 * (kp_malloc_array). kp_free(NULL) does nothing. */
void *kp_malloc(size_t size);
void *kp_calloc(size_t count, size_t size);
void *kp_realloc(void *ptr, size_t size);
void *kp_realloc_array(void *ptr, size_t count, size_t size);
void kp_free(void *ptr);
/* A copy of the NUL-terminated `text`, or NULL when out of memory. */
char *kp_strdup(const char *text);

#endif

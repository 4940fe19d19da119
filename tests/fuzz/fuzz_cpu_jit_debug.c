/* Fuzz target: any bytes as one JIT registration's symfile
 * (cpu/jit_debug.c), then as a node's memory holding a descriptor and a
 * list of entries. A parsed entry's ranges must lie within its module's
 * code, in the bytes, none empty; the list's walk and the load into a perf
 * map must end, whatever the links. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fuzz_check.h"
#include "cpu/jit_debug.h"

typedef struct {
    const uint8_t *data;
    size_t size;
    const kp_jit_debug_entry *entry;
    size_t ranges;
} seen;

static int check_range(void *ctx, uint64_t start, uint64_t end, const char *name, size_t name_len)
{
    seen *s = ctx;
    FUZZ_CHECK(start < end);
    if (s->entry->tagged) /* the flat format's ranges are checked against it alike */
        FUZZ_CHECK(start >= s->entry->base && end - s->entry->base <= s->entry->code_size);
    FUZZ_CHECK((const uint8_t *)name >= s->data &&
               (const uint8_t *)name + name_len < s->data + s->size);
    FUZZ_CHECK(memchr(name, 0, name_len) == NULL);
    s->ranges++;
    return 0;
}

/* the input as memory from address 0x1000 */
static int read_input(void *ctx, uint64_t addr, void *buf, size_t len)
{
    const seen *s = ctx;
    if (addr < 0x1000 || addr - 0x1000 > s->size || len > s->size - (addr - 0x1000))
        return -1;
    memcpy(buf, s->data + (addr - 0x1000), len);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kp_jit_debug_entry e;
    memset(&e, 0, sizeof e);
    seen s = {data, size, &e, 0};
    if (kp_jit_debug_parse(data, size, &e, check_range, &s) == 0 && e.kind == KP_JIT_DEBUG_MODULE) {
        FUZZ_CHECK(s.ranges == e.n_ranges);
        FUZZ_CHECK(e.base <= UINT64_MAX - e.code_size);
        FUZZ_CHECK((const uint8_t *)e.module >= data && e.module_len < size);
    }
    kp_jit_debug_ref refs[16];
    long n = kp_jit_debug_list(read_input, &s, 0x1000, refs, 16);
    FUZZ_CHECK(n >= -2 && n <= 16);
    kp_perf_map *map = kp_perf_map_create();
    if (map) {
        kp_jit_debug_stats st;
        if (kp_jit_debug_load(read_input, &s, 0x1000, map, &st) == 0)
            FUZZ_CHECK(st.modules + st.skipped <= KP_JIT_DEBUG_MAX_ENTRIES);
        kp_perf_map_free(map);
    }
    if (n >= 0) { /* the kept list, without a map: no module is read */
        kp_jit_debug_stats st;
        if (kp_jit_debug_load_refs(read_input, &s, refs, (size_t)n, NULL, &st) == 0)
            FUZZ_CHECK(st.modules == 0 && st.ranges == 0 && st.skipped <= (size_t)n);
    }
    return 0;
}

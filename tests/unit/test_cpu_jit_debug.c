/* cpu/jit_debug: the JIT's GDB registrations, on entries read from a live
 * OTP 25.2.3 node (tests/golden/jit_debug/otp25_*.bin, no +JPperf: the
 * emulator's entry, erl_init's and the JIT's "global" code), whose ranges
 * an independent reading wrote as perf-map lines (otp25_*.lines); on OTP
 * 24's flat format, built here; and on lists in a node's memory made up of
 * those entries, laid out here, damaged or changing under the walk. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cpu/jit_debug.h"
#include "cpu/perf_map.h"

static uint8_t *slurp(const char *name, size_t *len)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", KP_JIT_GOLDEN, name);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static uint8_t data[4][65536];
    static int next;
    uint8_t *buf = data[next++ % 4];
    *len = fread(buf, 1, sizeof data[0], f);
    fclose(f);
    return buf;
}

typedef struct {
    char text[65536];
    size_t len;
} rendered;

static int render(void *ctx, uint64_t start, uint64_t end, const char *name, size_t name_len)
{
    rendered *r = ctx;
    r->len += (size_t)snprintf(r->text + r->len, sizeof r->text - r->len, "0x%llx %llx $%.*s\n",
                               (unsigned long long)start, (unsigned long long)(end - start),
                               (int)name_len, name);
    return 0;
}

static void parses_a_live_module(void **state)
{
    (void)state;
    size_t len, want_len;
    const uint8_t *bin = slurp("otp25_erl_init.bin", &len);
    const char *want = (const char *)slurp("otp25_erl_init.lines", &want_len);
    kp_jit_debug_entry e;
    static rendered r;
    r.len = 0;
    assert_int_equal(kp_jit_debug_parse(bin, len, &e, render, &r), 0);
    assert_int_equal(e.kind, KP_JIT_DEBUG_MODULE);
    assert_int_equal(e.tagged, 1);
    assert_int_equal(e.module_len, 8);
    assert_memory_equal(e.module, "erl_init", 8);
    assert_int_equal(e.base, 0x7f8b80004f40ull);
    assert_int_equal(e.code_size, 2216);
    assert_int_equal(e.n_ranges, 20);
    assert_int_equal(r.len, want_len);
    assert_memory_equal(r.text, want, want_len);

    bin = slurp("otp25_global.bin", &len);
    want = (const char *)slurp("otp25_global.lines", &want_len);
    r.len = 0;
    assert_int_equal(kp_jit_debug_parse(bin, len, &e, render, &r), 0);
    assert_int_equal(e.n_ranges, 75);
    assert_memory_equal(e.module, "global", 6);
    assert_int_equal(r.len, want_len);
    assert_memory_equal(r.text, want, want_len);

    bin = slurp("otp25_emulator.bin", &len);
    assert_int_equal(kp_jit_debug_parse(bin, len, &e, render, &r), 0);
    assert_int_equal(e.kind, KP_JIT_DEBUG_EMULATOR);
    assert_int_equal(e.frame_layout, 0);
    assert_int_equal(e.normal_exit, 0x7f8b80000c30ull);
}

/* Every prefix of a live entry, and the entry with a byte more, is refused:
 * an entry is consumed exactly. */
static void refuses_cut_entries(void **state)
{
    (void)state;
    size_t len;
    const uint8_t *bin = slurp("otp25_erl_init.bin", &len);
    static uint8_t copy[65536];
    memcpy(copy, bin, len);
    kp_jit_debug_entry e;
    for (size_t n = 0; n < len; n++)
        assert_int_equal(kp_jit_debug_parse(copy, n, &e, NULL, NULL), -1);
    copy[len] = 0;
    assert_int_equal(kp_jit_debug_parse(copy, len + 1, &e, NULL, NULL), -1);
    /* a range past the module's code */
    copy[20] = 0x10; /* code_size 0x810, below the last range's end */
    copy[21] = 0x08;
    assert_int_equal(kp_jit_debug_parse(copy, len, &e, NULL, NULL), -1);
}

static size_t put(uint8_t *p, uint64_t v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
    return n;
}

static size_t put_text(uint8_t *p, const char *s)
{
    memcpy(p, s, strlen(s) + 1);
    return strlen(s) + 1;
}

/* OTP 24's module header and one of its ranges, as the JIT writes them */
static size_t flat_module(uint8_t *p, uint64_t n_ranges, uint64_t base, uint64_t size,
                          const char *name)
{
    size_t n = put(p, n_ranges, 8);
    n += put(p + n, base, 8);
    n += put(p + n, size, 8);
    return n + put_text(p + n, name);
}

static size_t flat_range(uint8_t *p, uint64_t start, uint64_t end, const char *name)
{
    size_t n = put(p, start, 8);
    n += put(p + n, end, 8);
    return n + put_text(p + n, name);
}

static void parses_otp24_entries(void **state)
{
    (void)state;
    uint8_t b[256];
    size_t n = put(b, 0, 8) + put(b + 8, 0x7000c30, 8);
    kp_jit_debug_entry e;
    assert_int_equal(kp_jit_debug_parse(b, n, &e, NULL, NULL), 0);
    assert_int_equal(e.kind, KP_JIT_DEBUG_EMULATOR);
    assert_int_equal(e.tagged, 0);
    assert_int_equal(e.frame_layout, -1);
    assert_int_equal(e.normal_exit, 0x7000c30);
    /* two ranges, one a quoted fun */
    n = flat_module(b, 2, 0x5000, 0x100, "lists");
    n += flat_range(b + n, 0x5000, 0x5040, "lists:map/2");
    n += flat_range(b + n, 0x5040, 0x5100, "lists:'-filter/2-lc$^0/1-0-'/2");
    static rendered r;
    r.len = 0;
    assert_int_equal(kp_jit_debug_parse(b, n, &e, render, &r), 0);
    assert_int_equal(e.kind, KP_JIT_DEBUG_MODULE);
    assert_int_equal(e.tagged, 0);
    assert_memory_equal(e.module, "lists", 5);
    assert_string_equal(r.text,
                        "0x5000 40 $lists:map/2\n0x5040 c0 $lists:'-filter/2-lc$^0/1-0-'/2\n");
    /* one range: its first word is the tagged module's header, 1 */
    n = flat_module(b, 1, 0x6000, 0x40, "m");
    n += flat_range(b + n, 0x6000, 0x6040, "m:f/0");
    assert_int_equal(kp_jit_debug_parse(b, n, &e, NULL, NULL), 0);
    assert_int_equal(e.tagged, 0);
    assert_int_equal(e.n_ranges, 1);
    /* a range outside the module */
    put(b + 32, 0x6041, 8);
    assert_int_equal(kp_jit_debug_parse(b, n, &e, NULL, NULL), -1);
}

/* A node's memory, made of regions. */
typedef struct {
    uint64_t addr;
    uint8_t *bytes;
    size_t len;
} region;

typedef struct {
    region r[16];
    size_t n;
    int reads;
    int change_first_at; /* the descriptor read at which `first` changes */
    uint64_t new_first;
} memory;

static int read_memory(void *ctx, uint64_t addr, void *buf, size_t len)
{
    memory *m = ctx;
    m->reads++;
    for (size_t i = 0; i < m->n; i++) {
        region *g = &m->r[i];
        if (addr >= g->addr && addr - g->addr <= g->len && len <= g->len - (addr - g->addr)) {
            memcpy(buf, g->bytes + (addr - g->addr), len);
            if (m->change_first_at && i == 0 && m->reads >= m->change_first_at) {
                put((uint8_t *)buf + 16, m->new_first, 8);
            }
            return 0;
        }
    }
    return -1;
}

static void add_region(memory *m, uint64_t addr, uint8_t *bytes, size_t len)
{
    m->r[m->n++] = (region){addr, bytes, len};
}

/* descriptor at 0x1000 (region 0), entries at 0x2000 + 32 k, symfiles
 * where given */
static uint8_t descriptor[24], entries[4][32];

static void lay_out(memory *m, const uint64_t *symfiles, const size_t *sizes, size_t n)
{
    memset(m, 0, sizeof *m);
    put(descriptor, 1, 4);
    put(descriptor + 4, 1, 4);
    put(descriptor + 8, n ? 0x2000 : 0, 8);
    put(descriptor + 16, n ? 0x2000 : 0, 8);
    add_region(m, 0x1000, descriptor, sizeof descriptor);
    for (size_t k = 0; k < n; k++) {
        put(entries[k], k + 1 < n ? 0x2000 + 32 * (k + 1) : 0, 8);
        put(entries[k] + 8, k ? 0x2000 + 32 * (k - 1) : 0, 8);
        put(entries[k] + 16, symfiles[k], 8);
        put(entries[k] + 24, sizes[k], 8);
        add_region(m, 0x2000 + 32 * k, entries[k], 32);
    }
}

static void loads_a_node_list(void **state)
{
    (void)state;
    size_t glen, elen, ilen;
    uint8_t *global = slurp("otp25_global.bin", &glen);
    uint8_t *emulator = slurp("otp25_emulator.bin", &elen);
    uint8_t *init = slurp("otp25_erl_init.bin", &ilen);
    /* newest first, as linked: erl_init, then the emulator, then global */
    const uint64_t symfiles[] = {0x10000, 0x20000, 0x30000};
    const size_t sizes[] = {ilen, elen, glen};
    memory m;
    lay_out(&m, symfiles, sizes, 3);
    add_region(&m, 0x10000, init, ilen);
    add_region(&m, 0x20000, emulator, elen);
    add_region(&m, 0x30000, global, glen);
    kp_jit_debug_ref refs[8];
    assert_int_equal(kp_jit_debug_list(read_memory, &m, 0x1000, refs, 8), 3);
    assert_int_equal(refs[0].symfile, 0x10000);
    assert_int_equal(refs[2].size, glen);
    assert_int_equal(kp_jit_debug_list(read_memory, &m, 0x1000, refs, 2), -2);

    kp_perf_map *map = kp_perf_map_create();
    kp_jit_debug_stats st;
    assert_int_equal(kp_jit_debug_load(read_memory, &m, 0x1000, map, &st), 0);
    assert_int_equal(st.modules, 2);
    assert_int_equal(st.ranges, 95);
    assert_int_equal(st.skipped, 0);
    assert_int_equal(st.frame_layout, 0);
    assert_int_equal(st.normal_exit, 0x7f8b80000c30ull);
    /* erl_init:start/2 is 0x7f8b80005080 + 0xe8, named as its perf map line */
    const kp_jit_symbol *s = kp_perf_map_find(map, 0x7f8b80005080ull + 0x10);
    assert_non_null(s);
    assert_int_equal(s->kind, KP_JIT_ERLANG);
    assert_memory_equal(s->module, "erl_init", s->module_len);
    assert_memory_equal(s->function, "start", s->function_len);
    assert_int_equal(s->arity, 2);
    s = kp_perf_map_find(map, 0x7f8b7ffff000ull);
    assert_non_null(s);
    assert_int_equal(s->kind, KP_JIT_RUNTIME);
    assert_null(kp_perf_map_find(map, 0x7f8b80004f40ull + 2216));
    kp_perf_map_free(map);

    /* from a kept list, without a map: the emulator's entry only, erl_init
     * (newer) not read */
    memset(&st, 0xff, sizeof st);
    assert_int_equal(kp_jit_debug_load_refs(read_memory, &m, refs, 3, NULL, &st), 0);
    assert_int_equal(st.modules, 0);
    assert_int_equal(st.ranges, 0);
    assert_int_equal(st.skipped, 0);
    assert_int_equal(st.frame_layout, 0);
    assert_int_equal(st.normal_exit, 0x7f8b80000c30ull);
    init[34] = 'x'; /* damaged, and not reached */
    assert_int_equal(kp_jit_debug_load_refs(read_memory, &m, refs, 3, NULL, &st), 0);
    assert_int_equal(st.skipped, 0);
    init[34] = 0;

    /* a damaged symfile is skipped and counted, the rest loaded */
    init[34] = 'x'; /* the NUL after "erl_init" */
    map = kp_perf_map_create();
    assert_int_equal(kp_jit_debug_load(read_memory, &m, 0x1000, map, &st), 0);
    assert_int_equal(st.modules, 1);
    assert_int_equal(st.skipped, 1);
    kp_perf_map_free(map);
    init[34] = 0;
}

static void refuses_broken_lists(void **state)
{
    (void)state;
    kp_jit_debug_ref refs[8];
    memory m;
    const uint64_t symfiles[] = {0x10000, 0x20000};
    const size_t sizes[] = {32, 32};
    /* nothing registered yet */
    lay_out(&m, NULL, NULL, 0);
    assert_int_equal(kp_jit_debug_list(read_memory, &m, 0x1000, refs, 8), 0);
    /* not a descriptor */
    put(descriptor, 2, 4);
    assert_int_equal(kp_jit_debug_list(read_memory, &m, 0x1000, refs, 8), -1);
    assert_int_equal(kp_jit_debug_list(read_memory, &m, 0x9000, refs, 8), -1);
    /* links that go round, found before the room's end */
    lay_out(&m, symfiles, sizes, 2);
    put(entries[1], 0x2000, 8);
    assert_int_equal(kp_jit_debug_list(read_memory, &m, 0x1000, refs, 8), -1);
    put(entries[1], 0x2020, 8); /* onto itself */
    assert_int_equal(kp_jit_debug_list(read_memory, &m, 0x1000, refs, 8), -1);
    /* a link into nothing */
    put(entries[1], 0x8000, 8);
    assert_int_equal(kp_jit_debug_list(read_memory, &m, 0x1000, refs, 8), -1);
    /* an entry added during the walk: walked again, from the new first */
    lay_out(&m, symfiles, sizes, 2);
    m.change_first_at = 4; /* the descriptor's read after the first walk */
    m.new_first = 0x2020;
    assert_int_equal(kp_jit_debug_list(read_memory, &m, 0x1000, refs, 8), 1);
    assert_int_equal(refs[0].entry, 0x2020);
}

/* The descriptor found by its looks in a writable segment of noise, past
 * a decoy whose list does not end in the emulator's entry. */
static void finds_the_descriptor_by_its_looks(void **state)
{
    (void)state;
    size_t elen, ilen;
    uint8_t *emulator = slurp("otp25_emulator.bin", &elen);
    uint8_t *init = slurp("otp25_erl_init.bin", &ilen);
    const uint64_t symfiles[] = {0x10000, 0x20000};
    const size_t sizes[] = {ilen, elen};
    memory m;
    lay_out(&m, symfiles, sizes, 2);
    add_region(&m, 0x10000, init, ilen);
    add_region(&m, 0x20000, emulator, elen);
    static uint8_t data[3000];
    uint32_t x = 12345;
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (uint8_t)((x = x * 1103515245 + 12345) >> 16);
    put(data + 0x100, 1, 4); /* decoys: a list into nothing, one of erl_init alone */
    put(data + 0x104, 0, 4);
    put(data + 0x108, 0, 8);
    put(data + 0x110, 0x3000, 8);
    put(data + 0x200, 1, 4);
    put(data + 0x204, 0, 4);
    put(data + 0x208, 0, 8);
    put(data + 0x210, 0x2040, 8);
    memcpy(data + 0x808, descriptor, sizeof descriptor);
    put(data + 0x818, 0x2000, 8); /* first: erl_init, then the emulator */
    add_region(&m, 0x40000, data, sizeof data);
    static uint8_t lone[32]; /* erl_init's entry with no next */
    put(lone + 16, 0x10000, 8);
    put(lone + 24, ilen, 8);
    add_region(&m, 0x2040, lone, sizeof lone);
    uint64_t found = 0;
    assert_int_equal(kp_jit_debug_scan(read_memory, &m, 0x40000, sizeof data, &found), 0);
    assert_int_equal(found, 0x40808);
    /* from an odd start, and with the region cut just after it */
    assert_int_equal(kp_jit_debug_scan(read_memory, &m, 0x40003, 0x808 - 3 + 24, &found), 0);
    assert_int_equal(found, 0x40808);
    /* cut before its end: not found */
    assert_int_equal(kp_jit_debug_scan(read_memory, &m, 0x40000, 0x808 + 23, &found), -1);
    /* two of them: which one is unknown */
    memcpy(data + 0x900, data + 0x808, 24);
    assert_int_equal(kp_jit_debug_scan(read_memory, &m, 0x40000, sizeof data, &found), -1);
    /* a region that cannot be read */
    assert_int_equal(kp_jit_debug_scan(read_memory, &m, 0x90000, 4096, &found), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parses_a_live_module), cmocka_unit_test(refuses_cut_entries),
        cmocka_unit_test(parses_otp24_entries), cmocka_unit_test(loads_a_node_list),
        cmocka_unit_test(refuses_broken_lists), cmocka_unit_test(finds_the_descriptor_by_its_looks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

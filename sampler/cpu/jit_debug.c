/* The JIT's GDB registrations; see jit_debug.h. */
#include "cpu/jit_debug.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "kp/alloc.h"

/* Little-endian reads of unaligned fields (the records are packed). */
static uint64_t le(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = n; i-- > 0;)
        v = v << 8 | p[i];
    return v;
}

/* A name of `n` bytes at buf[at], its last one the NUL: 1 when it fits
 * within `len` and holds no other NUL. */
static int nul_name(const uint8_t *buf, size_t len, size_t at, size_t n)
{
    return n >= 1 && at <= len && n <= len - at && buf[at + n - 1] == 0 &&
           memchr(buf + at, 0, n - 1) == NULL;
}

/* OTP 25 and later. With `range` NULL it only checks. */
static int parse_tagged(const uint8_t *buf, size_t len, kp_jit_debug_entry *e,
                        kp_jit_debug_range_fn range, void *ctx)
{
    if (len < 32)
        return -1;
    uint32_t header = (uint32_t)le(buf, 4);
    if (header == 0) {
        int32_t layout = (int32_t)le(buf + 8, 4);
        if (len != 32 || (layout != 0 && layout != 1))
            return -1;
        e->kind = KP_JIT_DEBUG_EMULATOR;
        e->frame_layout = layout;
        e->normal_exit = le(buf + 16, 8);
        return 0;
    }
    if (header != 1)
        return -1;
    e->kind = KP_JIT_DEBUG_MODULE;
    e->base = le(buf + 8, 8);
    e->n_ranges = (uint32_t)le(buf + 16, 4);
    e->code_size = le(buf + 20, 4);
    size_t name_len = (size_t)le(buf + 24, 2);
    if (!nul_name(buf, len, 26, name_len) || e->base > UINT64_MAX - e->code_size)
        return -1;
    e->module = (const char *)buf + 26;
    e->module_len = name_len - 1;
    size_t at = 32 + name_len; /* the name, then pad up to a multiple of 8 past 26 */
    for (uint32_t r = 0; r < e->n_ranges; r++) {
        if (at > len || len - at < 14)
            return -1;
        uint64_t start = le(buf + at, 4), end = le(buf + at + 4, 4);
        uint32_t lines = (uint32_t)le(buf + at + 8, 4);
        size_t n = (size_t)le(buf + at + 12, 2);
        if (!nul_name(buf, len, at + 14, n) || start >= end || end > e->code_size)
            return -1;
        if (range && range(ctx, e->base + start, e->base + end, (const char *)buf + at + 14, n - 1))
            return -1;
        at += 16 + n;
        for (uint32_t l = 0; l < lines; l++) {
            if (at > len || len - at < 10)
                return -1;
            size_t file = (size_t)le(buf + at + 8, 2);
            if (!nul_name(buf, len, at + 10, file))
                return -1;
            at += 12 + file;
        }
    }
    return at == len ? 0 : -1;
}

/* OTP 24. With `range` NULL it only checks. */
static int parse_flat(const uint8_t *buf, size_t len, kp_jit_debug_entry *e,
                      kp_jit_debug_range_fn range, void *ctx)
{
    if (len == 16 && le(buf, 8) == 0) {
        e->kind = KP_JIT_DEBUG_EMULATOR;
        e->frame_layout = -1;
        e->normal_exit = le(buf + 8, 8);
        return 0;
    }
    if (len < 25)
        return -1;
    uint64_t n_ranges = le(buf, 8);
    e->kind = KP_JIT_DEBUG_MODULE;
    e->base = le(buf + 8, 8);
    e->code_size = le(buf + 16, 8);
    const uint8_t *nul = memchr(buf + 24, 0, len - 24);
    /* each range takes 17 bytes at least */
    if (!nul || e->base > UINT64_MAX - e->code_size || n_ranges > len / 17)
        return -1;
    e->n_ranges = (uint32_t)n_ranges;
    e->module = (const char *)buf + 24;
    e->module_len = (size_t)(nul - (buf + 24));
    size_t at = (size_t)(nul - buf) + 1;
    for (uint64_t r = 0; r < n_ranges; r++) {
        if (len - at < 17)
            return -1;
        uint64_t start = le(buf + at, 8), end = le(buf + at + 8, 8);
        const uint8_t *name = buf + at + 16;
        const uint8_t *end_of_name = memchr(name, 0, len - at - 16);
        if (!end_of_name || start >= end || start < e->base || end > e->base + e->code_size)
            return -1;
        if (range && range(ctx, start, end, (const char *)name, (size_t)(end_of_name - name)))
            return -1;
        at = (size_t)(end_of_name - buf) + 1;
    }
    return at == len ? 0 : -1;
}

int kp_jit_debug_parse(const uint8_t *buf, size_t len, kp_jit_debug_entry *entry,
                       kp_jit_debug_range_fn range, void *ctx)
{
    kp_jit_debug_entry e;
    memset(&e, 0, sizeof e);
    /* tagged first: a flat module of one range begins with the tagged
     * module's header (1), and is then told by its length */
    if (parse_tagged(buf, len, &e, NULL, NULL) == 0) {
        e.tagged = 1;
        if (range && parse_tagged(buf, len, &e, range, ctx) != 0)
            return -1;
    } else {
        memset(&e, 0, sizeof e);
        if (parse_flat(buf, len, &e, NULL, NULL) != 0 ||
            (range && parse_flat(buf, len, &e, range, ctx) != 0))
            return -1;
    }
    *entry = e;
    return 0;
}

/* One walk of the list; -1 when a read or a link fails or the links go
 * round (Brent's cycle finding: an entry kept at each power of two), -2
 * past `cap`. */
static long walk(kp_jit_debug_read_fn read, void *ctx, uint64_t first, kp_jit_debug_ref *refs,
                 size_t cap)
{
    size_t n = 0, power = 1, steps = 0;
    uint64_t kept = 0;
    for (uint64_t at = first; at; n++) {
        if (at == kept)
            return -1;
        if (++steps == power) {
            kept = at;
            power *= 2;
            steps = 0;
        }
        if (n == cap)
            return -2;
        uint8_t raw[32];
        if (at % 8 != 0 || read(ctx, at, raw, sizeof raw) != 0)
            return -1;
        refs[n].entry = at;
        refs[n].symfile = le(raw + 16, 8);
        refs[n].size = le(raw + 24, 8);
        at = le(raw, 8);
    }
    return (long)n;
}

long kp_jit_debug_list(kp_jit_debug_read_fn read, void *ctx, uint64_t descriptor,
                       kp_jit_debug_ref *refs, size_t cap)
{
    uint8_t d[24];
    if (read(ctx, descriptor, d, sizeof d) != 0 || le(d, 4) != 1)
        return -1;
    for (int attempt = 0; attempt < 4; attempt++) {
        uint64_t first = le(d + 16, 8);
        long n = walk(read, ctx, first, refs, cap);
        if (n == -2)
            return -2;
        if (read(ctx, descriptor, d, sizeof d) != 0 || le(d, 4) != 1)
            return -1;
        if (n >= 0 && le(d + 16, 8) == first)
            return n;
    }
    return -1;
}

/* 1 when the list of the descriptor at `at` reads whole and holds the
 * emulator's entry among its oldest (the JIT registers its own code, then
 * the emulator's facts, before any module). */
static int is_descriptor(kp_jit_debug_read_fn read, void *ctx, uint64_t at, kp_jit_debug_ref *refs,
                         size_t cap)
{
    long n = kp_jit_debug_list(read, ctx, at, refs, cap);
    for (long k = n - 1; k >= 0 && k >= n - 8; k--) {
        uint8_t buf[32];
        kp_jit_debug_entry e;
        if (refs[k].size >= 16 && refs[k].size <= 32 &&
            read(ctx, refs[k].symfile, buf, refs[k].size) == 0 &&
            kp_jit_debug_parse(buf, refs[k].size, &e, NULL, NULL) == 0 &&
            e.kind == KP_JIT_DEBUG_EMULATOR)
            return 1;
    }
    return 0;
}

int kp_jit_debug_scan(kp_jit_debug_read_fn read, void *ctx, uint64_t start, uint64_t len,
                      uint64_t *descriptor)
{
    enum { CHUNK = 65536, ROOM = KP_JIT_DEBUG_MAX_ENTRIES / 10 };
    uint8_t *chunk = kp_malloc(CHUNK);
    kp_jit_debug_ref *refs = kp_malloc(ROOM * sizeof *refs);
    int found = 0, rc = 0;
    uint64_t end = start + len < start ? UINT64_MAX : start + len;
    uint64_t at = (start + 7) & ~(uint64_t)7;
    if (!chunk || !refs)
        rc = -1;
    /* chunks overlapping by 16 bytes, so that a descriptor across two is
     * seen, at the second */
    while (rc == 0 && found < 2 && at < end && end - at >= 24) {
        size_t n = (size_t)(end - at < CHUNK ? end - at : CHUNK) & ~(size_t)7;
        if (read(ctx, at, chunk, n) != 0) {
            rc = -1;
            break;
        }
        for (size_t k = 0; k + 24 <= n && found < 2; k += 8) {
            const uint8_t *d = chunk + k;
            uint64_t relevant = le(d + 8, 8), first = le(d + 16, 8);
            if (le(d, 4) != 1 || le(d + 4, 4) > 2 || relevant % 8 != 0 || first == 0 ||
                first % 8 != 0)
                continue;
            if (is_descriptor(read, ctx, at + k, refs, ROOM)) {
                *descriptor = at + k;
                found++;
            }
        }
        at += n - 16;
    }
    kp_free(chunk);
    kp_free(refs);
    return rc == 0 && found == 1 ? 0 : -1;
}

/* The perf map's lines of one module, as kp_jit_debug_load renders them. */
typedef struct {
    char *text;
    size_t len, cap;
    size_t ranges;
    int failed;
} lines;

static int add_line(void *ctx, uint64_t start, uint64_t end, const char *name, size_t name_len)
{
    lines *l = ctx;
    /* a name with a line break would end its line early: left out (the
     * JIT writes names escaped, so only a damaged entry has one) */
    if (memchr(name, '\n', name_len) || memchr(name, '\r', name_len))
        return 0;
    size_t need = name_len + 64;
    if (l->cap - l->len < need) {
        size_t cap = l->cap * 2 + need;
        char *text = kp_realloc(l->text, cap);
        if (!text) {
            l->failed = 1;
            return -1;
        }
        l->text = text;
        l->cap = cap;
    }
    l->len +=
        (size_t)snprintf(l->text + l->len, l->cap - l->len, "0x%" PRIx64 " %" PRIx64 " $%.*s\n",
                         start, end - start, (int)name_len, name);
    l->ranges++;
    return 0;
}

long kp_jit_debug_list_all(kp_jit_debug_read_fn read, void *ctx, uint64_t descriptor,
                           kp_jit_debug_ref **refs, size_t *cap)
{
    for (;;) {
        long n = *cap ? kp_jit_debug_list(read, ctx, descriptor, *refs, *cap) : -2;
        if (n != -2 || *cap >= KP_JIT_DEBUG_MAX_ENTRIES)
            return n;
        /* longer than the room: a cycle, too, ends at the bound */
        size_t grown_cap = *cap ? *cap * 4 : 1024;
        if (grown_cap > KP_JIT_DEBUG_MAX_ENTRIES)
            grown_cap = KP_JIT_DEBUG_MAX_ENTRIES;
        kp_jit_debug_ref *grown = kp_realloc(*refs, grown_cap * sizeof *grown);
        if (!grown)
            return -1;
        *refs = grown;
        *cap = grown_cap;
    }
}

int kp_jit_debug_load(kp_jit_debug_read_fn read, void *ctx, uint64_t descriptor, kp_perf_map *map,
                      kp_jit_debug_stats *stats)
{
    size_t cap = 0;
    kp_jit_debug_ref *refs = NULL;
    long n = kp_jit_debug_list_all(read, ctx, descriptor, &refs, &cap);
    int rc = n < 0 ? -1 : kp_jit_debug_load_refs(read, ctx, refs, (size_t)n, map, stats);
    kp_free(refs);
    return rc;
}

int kp_jit_debug_load_refs(kp_jit_debug_read_fn read, void *ctx, const kp_jit_debug_ref *refs,
                           size_t n, kp_perf_map *map, kp_jit_debug_stats *stats)
{
    memset(stats, 0, sizeof *stats);
    stats->frame_layout = -1;
    uint8_t *buf = NULL;
    size_t buf_cap = 0;
    lines l = {NULL, 0, 0, 0, 0};
    int rc = 0;
    for (size_t k = n; k-- > 0 && rc == 0;) { /* oldest first */
        const kp_jit_debug_ref *r = &refs[k];
        if (r->size < 16 || r->size > KP_JIT_DEBUG_MAX_SYMFILE) {
            stats->skipped++;
            continue;
        }
        if (r->size > buf_cap) {
            uint8_t *grown = kp_realloc(buf, r->size);
            if (!grown) {
                rc = -1;
                break;
            }
            buf = grown;
            buf_cap = r->size;
        }
        kp_jit_debug_entry e;
        l.len = l.ranges = 0;
        if (read(ctx, r->symfile, buf, r->size) != 0 ||
            kp_jit_debug_parse(buf, r->size, &e, map ? add_line : NULL, &l) != 0) {
            if (l.failed)
                rc = -1;
            stats->skipped++;
            continue;
        }
        stats->tagged = e.tagged;
        if (e.kind == KP_JIT_DEBUG_EMULATOR) {
            stats->frame_layout = e.frame_layout;
            stats->normal_exit = e.normal_exit;
            if (!map) /* all that was wanted */
                break;
            continue;
        }
        if (!map)
            continue;
        if (l.len && kp_perf_map_add_text(map, l.text, l.len) < 0) {
            rc = -1;
            break;
        }
        stats->modules++;
        stats->ranges += l.ranges;
    }
    kp_free(l.text);
    kp_free(buf);
    return rc;
}

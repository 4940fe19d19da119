#define _GNU_SOURCE
#include "node/term.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A big-endian unsigned integer of `width` bytes (0 to 4). */
static uint32_t big_endian(const unsigned char *p, unsigned width)
{
    uint32_t v = 0;
    while (width--)
        v = v << 8 | *p++;
    return v;
}

/* How a term is laid out after its tag (the external term format of
 * erts, tag names from ei.h): `fixed` bytes, of which `size_width` bytes at
 * `size_at` count raw bytes that follow, and `count_width` bytes at
 * `count_at` count terms that follow (times `count_mul`, plus `count_add`).
 * `node`: a node atom comes before the fixed bytes (pids, ports,
 * references). Tags not listed are refused. */
typedef struct {
    unsigned char known, node, fixed;
    unsigned char size_at, size_width;
    unsigned char count_at, count_width, count_mul, count_add;
} term_shape;

static const term_shape shapes[256] = {
    [ERL_SMALL_INTEGER_EXT] = {.known = 1, .fixed = 1},
    [ERL_INTEGER_EXT] = {.known = 1, .fixed = 4},
    [NEW_FLOAT_EXT] = {.known = 1, .fixed = 8},
    [ERL_FLOAT_EXT] = {.known = 1, .fixed = 31},
    [ERL_NIL_EXT] = {.known = 1},
    [ERL_ATOM_EXT] = {.known = 1, .fixed = 2, .size_width = 2},
    [ERL_ATOM_UTF8_EXT] = {.known = 1, .fixed = 2, .size_width = 2},
    [ERL_STRING_EXT] = {.known = 1, .fixed = 2, .size_width = 2},
    [ERL_SMALL_ATOM_EXT] = {.known = 1, .fixed = 1, .size_width = 1},
    [ERL_SMALL_ATOM_UTF8_EXT] = {.known = 1, .fixed = 1, .size_width = 1},
    [ERL_BINARY_EXT] = {.known = 1, .fixed = 4, .size_width = 4},
    [ERL_BIT_BINARY_EXT] = {.known = 1, .fixed = 5, .size_width = 4}, /* Len, Bits */
    [ERL_SMALL_BIG_EXT] = {.known = 1, .fixed = 2, .size_width = 1},  /* n, Sign */
    [ERL_LARGE_BIG_EXT] = {.known = 1, .fixed = 5, .size_width = 4},  /* n, Sign */
    [ERL_PID_EXT] = {.known = 1, .node = 1, .fixed = 9},              /* ID, Serial, Creation u8 */
    [ERL_NEW_PID_EXT] = {.known = 1, .node = 1, .fixed = 12},         /* ID, Serial, Creation */
    [ERL_PORT_EXT] = {.known = 1, .node = 1, .fixed = 5},             /* ID, Creation u8 */
    [ERL_NEW_PORT_EXT] = {.known = 1, .node = 1, .fixed = 8},         /* ID, Creation */
    [ERL_V4_PORT_EXT] = {.known = 1, .node = 1, .fixed = 12},         /* ID u64, Creation */
    [ERL_REFERENCE_EXT] = {.known = 1, .node = 1, .fixed = 5},        /* ID, Creation u8 */
    [ERL_SMALL_TUPLE_EXT] = {.known = 1, .fixed = 1, .count_width = 1, .count_mul = 1},
    [ERL_LARGE_TUPLE_EXT] = {.known = 1, .fixed = 4, .count_width = 4, .count_mul = 1},
    /* keys and values */
    [ERL_MAP_EXT] = {.known = 1, .fixed = 4, .count_width = 4, .count_mul = 2},
    /* elements and tail */
    [ERL_LIST_EXT] = {.known = 1, .fixed = 4, .count_width = 4, .count_mul = 1, .count_add = 1},
    /* ERL_EXPORT_EXT: Module, Function, Arity, checked in kp_term_check */
    /* Size Arity Uniq Index NumFree, then Module OldIndex OldUniq Pid Free... */
    [ERL_NEW_FUN_EXT] =
        {.known = 1, .fixed = 29, .count_at = 25, .count_width = 4, .count_mul = 1, .count_add = 4},
    /* NumFree, then Pid Module Index Uniq Free... */
    [ERL_FUN_EXT] = {.known = 1, .fixed = 4, .count_width = 4, .count_mul = 1, .count_add = 4},
};

/* The size of the atom naming a node at `p` (a pid's, port's or
 * reference's first part), or -1 when it is not a whole atom. */
static long node_atom(const unsigned char *p, const unsigned char *end)
{
    size_t left = (size_t)(end - p), size;
    if (left >= 2 && (*p == ERL_SMALL_ATOM_EXT || *p == ERL_SMALL_ATOM_UTF8_EXT))
        size = 2u + p[1];
    else if (left >= 3 && (*p == ERL_ATOM_EXT || *p == ERL_ATOM_UTF8_EXT))
        size = 3u + big_endian(p + 1, 2);
    else
        return -1;
    return size <= left ? (long)size : -1;
}

int kp_term_check(const char *buf, size_t len)
{
    const unsigned char *p = (const unsigned char *)buf, *end = p + len;
    if (p < end && *p == 131) /* the version byte */
        p++;
    /* Terms still to read. A term takes at least one byte, so more pending
     * terms than bytes left is malformed, and the count cannot overflow. */
    uint64_t pending = 1;
    while (pending--) {
        if (p == end)
            return -1;
        unsigned tag = *p++;
        size_t fixed, size = 0;
        if (tag == ERL_NEW_REFERENCE_EXT || tag == ERL_NEWER_REFERENCE_EXT) {
            /* Len u16, Node, Creation (u8 or u32), Len IDs of u32 */
            if (end - p < 2)
                return -1;
            size_t ids = big_endian(p, 2);
            p += 2;
            long atom = node_atom(p, end);
            if (atom < 0)
                return -1;
            p += atom;
            fixed = (tag == ERL_NEW_REFERENCE_EXT ? 1 : 4) + 4 * ids;
        } else if (tag == ERL_EXPORT_EXT) {
            /* Module and Function atoms, a small integer Arity: ei_decode_fun
             * (which ei_skip_term calls) leaks what it allocated when they
             * are not (found by fuzz_tier_events) */
            for (int part = 0; part < 2; part++) {
                long atom = node_atom(p, end);
                if (atom < 0)
                    return -1;
                p += atom;
            }
            if (end - p < 2 || *p != ERL_SMALL_INTEGER_EXT)
                return -1;
            fixed = 2;
        } else {
            const term_shape *s = &shapes[tag];
            if (!s->known)
                return -1;
            if (s->node) {
                long atom = node_atom(p, end);
                if (atom < 0)
                    return -1;
                p += atom;
            }
            fixed = s->fixed;
            if ((size_t)(end - p) < fixed)
                return -1;
            size = big_endian(p + s->size_at, s->size_width);
            pending +=
                s->count_add + (uint64_t)s->count_mul * big_endian(p + s->count_at, s->count_width);
        }
        if ((size_t)(end - p) < fixed || (size_t)(end - p) - fixed < size)
            return -1;
        p += fixed + size;
        if (pending > (uint64_t)(end - p))
            return -1;
    }
    return 0;
}

int kp_term_decode_int(const char *buf, int *i, int64_t *value)
{
    long long x;
    if (ei_decode_longlong(buf, i, &x) != 0)
        return -1;
    *value = x;
    return 0;
}

int kp_term_decode_text(const char *buf, int *i, char *out, size_t cap)
{
    int type, size;
    long len;
    if (ei_get_type(buf, i, &type, &size) != 0 || size < 0 || (size_t)size >= cap)
        return -1;
    if (type == ERL_BINARY_EXT) {
        if (ei_decode_binary(buf, i, out, &len) != 0)
            return -1;
        out[len] = '\0';
        return 0;
    }
    if (type == ERL_STRING_EXT)
        return ei_decode_string(buf, i, out) == 0 ? 0 : -1;
    if (type == ERL_NIL_EXT) {
        out[0] = '\0';
        return ei_skip_term(buf, i) == 0 ? 0 : -1;
    }
    return -1;
}

int kp_term_decode_atom(const char *buf, int *i, char *out, size_t cap)
{
    char atom[MAXATOMLEN];
    if (ei_decode_atom(buf, i, atom) != 0 || strlen(atom) >= cap)
        return -1;
    memcpy(out, atom, strlen(atom) + 1);
    return 0;
}

int kp_term_decode_pid_numbers(const char *buf, int *i, uint32_t *num, uint32_t *serial)
{
    erlang_pid p;
    if (ei_decode_pid(buf, i, &p) != 0)
        return -1;
    *num = p.num;
    *serial = p.serial;
    return 0;
}

const char *kp_term_text(const char *buf, int index, const char *fallback, char *out, size_t cap)
{
    char *s = NULL;
    int i = index;
    snprintf(out, cap, "%s", ei_s_print_term(&s, buf, &i) >= 0 && s ? s : fallback);
    free(s);
    return out;
}

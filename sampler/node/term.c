#define _GNU_SOURCE
#include "node/term.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint32_t be16(const unsigned char *p)
{
    return (uint32_t)p[0] << 8 | p[1];
}

/* The external format's tags (erts/emulator/beam/external.h). */
enum {
    NEW_FLOAT = 70,
    BIT_BINARY = 77,
    NEW_PID = 88,
    NEW_PORT = 89,
    NEWER_REFERENCE = 90,
    SMALL_INTEGER = 97,
    INTEGER = 98,
    FLOAT = 99,
    ATOM = 100,
    REFERENCE = 101,
    PORT = 102,
    PID = 103,
    SMALL_TUPLE = 104,
    LARGE_TUPLE = 105,
    NIL = 106,
    STRING = 107,
    LIST = 108,
    BINARY = 109,
    SMALL_BIG = 110,
    LARGE_BIG = 111,
    NEW_FUN = 112,
    EXPORT = 113,
    NEW_REFERENCE = 114,
    SMALL_ATOM = 115,
    MAP = 116,
    FUN = 117,
    ATOM_UTF8 = 118,
    SMALL_ATOM_UTF8 = 119,
    V4_PORT = 120
};

/* The size of the atom naming a node at `p` (a pid's, port's or
 * reference's first part), or -1 when it is not a whole atom. */
static long node_atom(const unsigned char *p, const unsigned char *end)
{
    size_t left = (size_t)(end - p), size;
    if (left >= 2 && (*p == SMALL_ATOM || *p == SMALL_ATOM_UTF8))
        size = 2u + p[1];
    else if (left >= 3 && (*p == ATOM || *p == ATOM_UTF8))
        size = 3u + be16(p + 1);
    else
        return -1;
    return size <= left ? (long)size : -1;
}

int kp_term_check(const char *buf, size_t len)
{
    const unsigned char *p = (const unsigned char *)buf, *end = p + len;
    if (p < end && *p == 131)
        p++;
    /* Terms still to read. A term takes at least one byte, so more pending
     * terms than bytes left is malformed, and the count cannot overflow. */
    uint64_t pending = 1;
#define NEED(n)                              \
    do {                                     \
        if ((size_t)(end - p) < (size_t)(n)) \
            return -1;                       \
    } while (0)
    while (pending) {
        pending--;
        NEED(1);
        unsigned tag = *p++;
        uint64_t n;
        switch (tag) {
        case SMALL_INTEGER:
            NEED(1);
            p += 1;
            break;
        case INTEGER:
            NEED(4);
            p += 4;
            break;
        case NEW_FLOAT:
            NEED(8);
            p += 8;
            break;
        case FLOAT:
            NEED(31);
            p += 31;
            break;
        case NIL: break;
        case ATOM:
        case ATOM_UTF8:
        case STRING:
            NEED(2);
            n = be16(p);
            p += 2;
            NEED(n);
            p += n;
            break;
        case SMALL_ATOM:
        case SMALL_ATOM_UTF8:
            NEED(1);
            n = *p++;
            NEED(n);
            p += n;
            break;
        case BINARY:
            NEED(4);
            n = be32(p);
            p += 4;
            NEED(n);
            p += n;
            break;
        case BIT_BINARY:
            NEED(5);
            n = be32(p);
            p += 5;
            NEED(n);
            p += n;
            break;
        case SMALL_BIG:
            NEED(2);
            n = *p;
            p += 2;
            NEED(n);
            p += n;
            break;
        case LARGE_BIG:
            NEED(5);
            n = be32(p);
            p += 5;
            NEED(n);
            p += n;
            break;
        case SMALL_TUPLE:
            NEED(1);
            pending += *p++;
            break;
        case LARGE_TUPLE:
            NEED(4);
            pending += be32(p);
            p += 4;
            break;
        case MAP:
            NEED(4);
            pending += 2 * (uint64_t)be32(p);
            p += 4;
            break;
        case LIST:
            NEED(4);
            pending += (uint64_t)be32(p) + 1;
            p += 4;
            break;
        /* node atom first, then fixed fields: checked as a small term read
         * before the fields (the fields are skipped by the next tag's NEED) */
        case PID:
        case NEW_PID:
        case PORT:
        case NEW_PORT:
        case V4_PORT:
        case REFERENCE: {
            long atom = node_atom(p, end);
            size_t tail = tag == PID        ? 9
                          : tag == NEW_PID  ? 12
                          : tag == NEW_PORT ? 8
                          : tag == V4_PORT  ? 12
                                            : 5; /* PORT, REFERENCE */
            if (atom < 0)
                return -1;
            p += atom;
            NEED(tail);
            p += tail;
            break;
        }
        case NEW_REFERENCE:
        case NEWER_REFERENCE: {
            NEED(2);
            size_t ids = be16(p);
            p += 2;
            long atom = node_atom(p, end);
            if (atom < 0)
                return -1;
            p += atom;
            size_t tail = (tag == NEW_REFERENCE ? 1 : 4) + 4 * ids;
            NEED(tail);
            p += tail;
            break;
        }
        case EXPORT: pending += 3; break;
        case NEW_FUN: /* Size Arity Uniq Index NumFree, Module OldIndex OldUniq Pid Free... */
            NEED(4 + 1 + 16 + 4 + 4);
            n = be32(p + 25);
            p += 29;
            pending += 4 + n;
            break;
        case FUN: /* NumFree Pid Module Index Uniq Free... */
            NEED(4);
            n = be32(p);
            p += 4;
            pending += 4 + n;
            break;
        default: return -1;
        }
        if (pending > (uint64_t)(end - p))
            return -1;
    }
#undef NEED
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

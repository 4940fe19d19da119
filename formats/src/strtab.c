#include "kp/strtab.h"

#include <string.h>
#include <xxhash.h>

#include "kp/alloc.h"

/* Open addressing with linear probing. A slot holds id + 1 (0 = empty) and the
 * low 32 bits of the key's hash, so most mismatches are rejected without
 * touching the arena. */
typedef struct {
    uint32_t id_plus_one;
    uint32_t hash_lo;
} slot;

typedef struct {
    uint64_t offset; /* into the arena */
    uint32_t len;
} entry;

struct kp_strtab {
    slot *slots;
    size_t slot_mask; /* capacity - 1, capacity a power of two */
    entry *entries;
    uint32_t count;
    uint32_t entry_cap;
    char *arena;
    size_t arena_len;
    size_t arena_cap;
};

uint64_t kp_strtab_hash(const void *key, size_t len)
{
    return XXH3_64bits(key, len);
}

kp_strtab *kp_strtab_create(void)
{
    kp_strtab *t = kp_calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->slots = kp_calloc(64, sizeof *t->slots);
    if (!t->slots) {
        kp_free(t);
        return NULL;
    }
    t->slot_mask = 63;
    return t;
}

void kp_strtab_free(kp_strtab *t)
{
    if (!t)
        return;
    kp_free(t->slots);
    kp_free(t->entries);
    kp_free(t->arena);
    kp_free(t);
}

static int key_equals(const kp_strtab *t, uint32_t id, const void *key, size_t len)
{
    const entry *e = &t->entries[id];
    return e->len == len && memcmp(t->arena + e->offset, key, len) == 0;
}

static kp_status grow_slots(kp_strtab *t)
{
    size_t cap = (t->slot_mask + 1) * 2;
    slot *slots = kp_calloc(cap, sizeof *slots);
    if (!slots)
        return KP_ERR_NOMEM;
    for (uint32_t id = 0; id < t->count; id++) {
        const entry *e = &t->entries[id];
        uint64_t h = XXH3_64bits(t->arena + e->offset, e->len);
        size_t i = (size_t)h & (cap - 1);
        while (slots[i].id_plus_one)
            i = (i + 1) & (cap - 1);
        slots[i].id_plus_one = id + 1;
        slots[i].hash_lo = (uint32_t)h;
    }
    kp_free(t->slots);
    t->slots = slots;
    t->slot_mask = cap - 1;
    return KP_OK;
}

/* Reserves room for one more entry and `len` arena bytes, so that adding the
 * key afterwards cannot fail half-way. */
static kp_status reserve(kp_strtab *t, size_t len)
{
    if (t->count == t->entry_cap) {
        /* doubling past 2^31 would wrap to 0 below the 2^32-1 limit */
        uint32_t cap = !t->entry_cap                   ? 64
                       : t->entry_cap > UINT32_MAX / 2 ? UINT32_MAX
                                                       : t->entry_cap * 2;
        entry *e = kp_realloc_array(t->entries, cap, sizeof *e);
        if (!e)
            return KP_ERR_NOMEM;
        t->entries = e;
        t->entry_cap = cap;
    }
    size_t start = (t->arena_len + 3) & ~(size_t)3;
    if (start + len > t->arena_cap || !t->arena) {
        size_t cap = t->arena_cap ? t->arena_cap : 4096;
        while (cap < start + len)
            cap *= 2;
        char *a = kp_realloc(t->arena, cap);
        if (!a)
            return KP_ERR_NOMEM;
        t->arena = a;
        t->arena_cap = cap;
    }
    return KP_OK;
}

/* Returns the slot holding `key`, or the empty slot where it would go. */
static size_t probe(const kp_strtab *t, const void *key, size_t len, uint64_t h)
{
    size_t i = (size_t)h & t->slot_mask;
    for (;;) {
        const slot *s = &t->slots[i];
        if (!s->id_plus_one ||
            (s->hash_lo == (uint32_t)h && key_equals(t, s->id_plus_one - 1, key, len)))
            return i;
        i = (i + 1) & t->slot_mask;
    }
}

int kp_strtab_find(const kp_strtab *t, const void *key, size_t len, uint64_t h, uint32_t *id)
{
    const slot *s = &t->slots[probe(t, key, len, h)];
    if (!s->id_plus_one)
        return 0;
    *id = s->id_plus_one - 1;
    return 1;
}

kp_status kp_strtab_intern_hashed(kp_strtab *t, const void *key, size_t len, uint64_t h,
                                  uint32_t *id, int *is_new)
{
    if (len > UINT32_MAX)
        return KP_ERR_LIMIT;
    size_t i = probe(t, key, len, h);
    if (t->slots[i].id_plus_one) {
        *id = t->slots[i].id_plus_one - 1;
        if (is_new)
            *is_new = 0;
        return KP_OK;
    }
    if (t->count == UINT32_MAX - 1)
        return KP_ERR_LIMIT;
    kp_status st = reserve(t, len);
    if (st != KP_OK)
        return st;
    /* keep the load factor under 3/4 */
    if ((size_t)(t->count + 1) * 4 > (t->slot_mask + 1) * 3) {
        st = grow_slots(t);
        if (st != KP_OK)
            return st;
        i = (size_t)h & t->slot_mask;
        while (t->slots[i].id_plus_one)
            i = (i + 1) & t->slot_mask;
    }
    size_t start = (t->arena_len + 3) & ~(size_t)3;
    if (len)
        memcpy(t->arena + start, key, len);
    t->arena_len = start + len;
    t->entries[t->count].offset = start;
    t->entries[t->count].len = (uint32_t)len;
    t->slots[i].id_plus_one = t->count + 1;
    t->slots[i].hash_lo = (uint32_t)h;
    *id = t->count++;
    if (is_new)
        *is_new = 1;
    return KP_OK;
}

kp_status kp_strtab_intern(kp_strtab *t, const void *key, size_t len, uint32_t *id, int *is_new)
{
    if (len > UINT32_MAX)
        return KP_ERR_LIMIT; /* refuse before hashing 4 GiB */
    return kp_strtab_intern_hashed(t, key, len, XXH3_64bits(key, len), id, is_new);
}

const void *kp_strtab_get(const kp_strtab *t, uint32_t id, size_t *len)
{
    const entry *e = &t->entries[id];
    *len = e->len;
    return t->arena + e->offset;
}

uint32_t kp_strtab_count(const kp_strtab *t)
{
    return t->count;
}

size_t kp_strtab_memory(const kp_strtab *t)
{
    return sizeof *t + (t->slot_mask + 1) * sizeof(slot) + (size_t)t->entry_cap * sizeof(entry) +
           t->arena_cap;
}

#include "kp/otlp.h"

#include <string.h>
#include <xxhash.h>

#include "kp/alloc.h"
#include "kp/protobuf.h"
#include "kp/strtab.h"
#include "kp/symbol.h"

#define MAX_PROFILES 64

/* Field numbers of opentelemetry-proto 1.10+ (profiles/v1development,
 * collector/profiles/v1development, common/v1, resource/v1). */
enum {
    REQUEST_RESOURCE_PROFILES = 1,
    REQUEST_DICTIONARY = 2,
    DICT_MAPPING = 1,
    DICT_LOCATION = 2,
    DICT_FUNCTION = 3,
    DICT_LINK = 4,
    DICT_STRING = 5,
    DICT_ATTRIBUTE = 6,
    DICT_STACK = 7,
    RESOURCE_PROFILES_RESOURCE = 1,
    RESOURCE_PROFILES_SCOPE_PROFILES = 2,
    RESOURCE_ATTRIBUTES = 1,
    SCOPE_PROFILES_SCOPE = 1,
    SCOPE_PROFILES_PROFILES = 2,
    SCOPE_NAME = 1,
    SCOPE_VERSION = 2,
    PROFILE_SAMPLE_TYPE = 1,
    PROFILE_SAMPLES = 2,
    PROFILE_TIME = 3,
    PROFILE_DURATION = 4,
    PROFILE_PERIOD_TYPE = 5,
    PROFILE_PERIOD = 6,
    PROFILE_ID = 7,
    VALUE_TYPE_TYPE = 1,
    VALUE_TYPE_UNIT = 2,
    SAMPLE_STACK = 1,
    SAMPLE_ATTRIBUTES = 2,
    SAMPLE_VALUES = 4,
    MAPPING_FILENAME = 4,
    MAPPING_ATTRIBUTES = 5,
    STACK_LOCATIONS = 1,
    LOCATION_MAPPING = 1,
    LOCATION_ADDRESS = 2,
    LOCATION_LINES = 3,
    LOCATION_ATTRIBUTES = 4,
    LINE_FUNCTION = 1,
    FUNCTION_NAME = 1,
    FUNCTION_SYSTEM_NAME = 2,
    KVU_KEY = 1,
    KVU_VALUE = 2,
    KEY_VALUE_KEY = 1,
    KEY_VALUE_VALUE = 2,
    ANY_STRING = 1,
    ANY_INT = 3
};

/* A dictionary table: its entries' keys interned (id = index; the empty
 * key is entry 0, the empty message) and its entries encoded as the
 * dictionary's repeated field, in index order. */
typedef struct {
    kp_strtab *keys;
    kp_buf wire;
    unsigned field;
} table;

typedef struct {
    uint32_t type, unit; /* strings */
    int64_t period;
    uint64_t time, duration;
} profile;

typedef struct {
    uint32_t profile, stack;
    uint32_t attr_at, n_attrs; /* in attr_pool */
    int64_t value;
} sample;

struct kp_otlp {
    kp_strtab *strings;
    table mappings, locations, functions, attributes, stacks;
    kp_strtab *sample_keys; /* sample id = its key's id */
    sample *samples;
    size_t n_samples, cap_samples;
    uint32_t *attr_pool;
    size_t n_pool, cap_pool;
    kp_buf resource; /* Resource's attributes, encoded */
    uint32_t scope_name, scope_version;
    profile profiles[MAX_PROFILES];
    uint32_t n_profiles;
    kp_buf scratch, inner;
};

const char *kp_otlp_frame_type_name(kp_otlp_frame_type type)
{
    switch (type) {
    case KP_OTLP_FRAME_BEAM: return "beam";
    case KP_OTLP_FRAME_NATIVE: return "native";
    case KP_OTLP_FRAME_KERNEL: return "kernel";
    case KP_OTLP_FRAME_NONE: break;
    }
    return NULL;
}

static kp_status string_id(kp_otlp *o, const char *s, size_t len, uint32_t *id)
{
    return kp_strtab_intern(o->strings, len ? s : "", len, id, NULL);
}

static kp_status table_init(table *t, unsigned field)
{
    uint32_t empty;
    t->field = field;
    t->keys = kp_strtab_create();
    if (!t->keys || kp_strtab_intern(t->keys, "", 0, &empty, NULL) != KP_OK)
        return KP_ERR_NOMEM;
    return kp_pb_field_bytes(&t->wire, field, NULL, 0);
}

static void table_free(table *t)
{
    kp_strtab_free(t->keys);
    kp_buf_free(&t->wire);
}

/* Interns `key`; a new entry's message is then taken from `msg`. */
static kp_status table_intern(table *t, const void *key, size_t len, const kp_buf *msg,
                              uint32_t *id)
{
    int fresh;
    kp_status st = kp_strtab_intern(t->keys, key, len, id, &fresh);
    if (st == KP_OK && fresh)
        st = kp_pb_field_bytes(&t->wire, t->field, msg->data, msg->len);
    return st;
}

/* Looks `key` up; 1 with `*id` when present. */
static int table_find(const table *t, const void *key, size_t len, uint32_t *id)
{
    return kp_strtab_find(t->keys, key, len, kp_strtab_hash(key, len), id);
}

kp_otlp *kp_otlp_create(const char *scope_name, const char *scope_version)
{
    kp_otlp *o = kp_calloc(1, sizeof *o);
    if (!o)
        return NULL;
    uint32_t empty;
    o->strings = kp_strtab_create();
    o->sample_keys = kp_strtab_create();
    if (!o->strings || !o->sample_keys ||
        kp_strtab_intern(o->strings, "", 0, &empty, NULL) != KP_OK ||
        table_init(&o->mappings, DICT_MAPPING) != KP_OK ||
        table_init(&o->locations, DICT_LOCATION) != KP_OK ||
        table_init(&o->functions, DICT_FUNCTION) != KP_OK ||
        table_init(&o->attributes, DICT_ATTRIBUTE) != KP_OK ||
        table_init(&o->stacks, DICT_STACK) != KP_OK ||
        string_id(o, scope_name, strlen(scope_name), &o->scope_name) != KP_OK ||
        string_id(o, scope_version, strlen(scope_version), &o->scope_version) != KP_OK) {
        kp_otlp_free(o);
        return NULL;
    }
    return o;
}

void kp_otlp_free(kp_otlp *o)
{
    if (!o)
        return;
    kp_strtab_free(o->strings);
    kp_strtab_free(o->sample_keys);
    table_free(&o->mappings);
    table_free(&o->locations);
    table_free(&o->functions);
    table_free(&o->attributes);
    table_free(&o->stacks);
    kp_free(o->samples);
    kp_free(o->attr_pool);
    kp_buf_free(&o->resource);
    kp_buf_free(&o->scratch);
    kp_buf_free(&o->inner);
    kp_free(o);
}

/* A KeyValue (common/v1) of `key` and an AnyValue already encoded. */
static kp_status resource_attribute(kp_otlp *o, const char *key, const kp_buf *any)
{
    kp_buf_clear(&o->scratch);
    kp_status st = kp_pb_field_bytes(&o->scratch, KEY_VALUE_KEY, key, strlen(key));
    if (st == KP_OK)
        st = kp_pb_field_bytes(&o->scratch, KEY_VALUE_VALUE, any->data, any->len);
    return st == KP_OK ? kp_pb_field_bytes(&o->resource, RESOURCE_ATTRIBUTES, o->scratch.data,
                                           o->scratch.len)
                       : st;
}

kp_status kp_otlp_resource_string(kp_otlp *o, const char *key, const char *value)
{
    kp_buf_clear(&o->inner);
    kp_status st = kp_pb_field_bytes(&o->inner, ANY_STRING, value, strlen(value));
    return st == KP_OK ? resource_attribute(o, key, &o->inner) : st;
}

kp_status kp_otlp_resource_int(kp_otlp *o, const char *key, int64_t value)
{
    kp_buf_clear(&o->inner);
    kp_status st = kp_pb_field_varint(&o->inner, ANY_INT, (uint64_t)value);
    return st == KP_OK ? resource_attribute(o, key, &o->inner) : st;
}

kp_status kp_otlp_profile(kp_otlp *o, const char *type, const char *unit, int64_t period,
                          uint64_t time_unix_nano, uint64_t duration_nano, uint32_t *index)
{
    if (o->n_profiles == MAX_PROFILES)
        return KP_ERR_LIMIT;
    profile *p = &o->profiles[o->n_profiles];
    kp_status st = string_id(o, type, strlen(type), &p->type);
    if (st == KP_OK)
        st = string_id(o, unit, strlen(unit), &p->unit);
    if (st != KP_OK)
        return st;
    p->period = period;
    p->time = time_unix_nano;
    p->duration = duration_nano;
    *index = o->n_profiles++;
    return KP_OK;
}

void kp_otlp_set_time(kp_otlp *o, uint64_t time_unix_nano, uint64_t duration_nano)
{
    for (uint32_t k = 0; k < o->n_profiles; k++) {
        o->profiles[k].time = time_unix_nano;
        o->profiles[k].duration = duration_nano;
    }
}

kp_status kp_otlp_attribute(kp_otlp *o, const char *key, const char *value, size_t value_len,
                            uint32_t *attribute)
{
    uint32_t key_id;
    kp_status st = string_id(o, key, strlen(key), &key_id);
    if (st != KP_OK)
        return st;
    /* the key: the key's string id, then the value's bytes */
    kp_buf_clear(&o->inner);
    st = kp_buf_append(&o->inner, &key_id, sizeof key_id);
    if (st == KP_OK)
        st = kp_buf_append(&o->inner, value, value_len);
    if (st != KP_OK)
        return st;
    if (table_find(&o->attributes, o->inner.data, o->inner.len, attribute))
        return KP_OK;
    kp_buf any = KP_BUF_INIT;
    kp_buf_clear(&o->scratch);
    st = kp_pb_field_bytes(&any, ANY_STRING, value, value_len);
    if (st == KP_OK)
        st = kp_pb_field_varint(&o->scratch, KVU_KEY, key_id);
    if (st == KP_OK)
        st = kp_pb_field_bytes(&o->scratch, KVU_VALUE, any.data, any.len);
    kp_buf_free(&any);
    return st == KP_OK
               ? table_intern(&o->attributes, o->inner.data, o->inner.len, &o->scratch, attribute)
               : st;
}

/* The function named `name`: its name is the frame readable (kprof's
 * percent-encoding of folded-file separators undone), its system name the
 * same. */
static kp_status function_of(kp_otlp *o, const char *name, size_t len, uint32_t *function)
{
    kp_buf readable = KP_BUF_INIT;
    kp_status st = KP_OK;
    uint32_t name_id;
    if (memchr(name, '%', len)) {
        st = kp_symbol_decode(&readable, name, len);
        if (st == KP_OK && readable.len)
            name = readable.data, len = readable.len;
    }
    if (st == KP_OK)
        st = string_id(o, name, len, &name_id);
    kp_buf_free(&readable);
    if (st != KP_OK)
        return st;
    if (table_find(&o->functions, &name_id, sizeof name_id, function))
        return KP_OK;
    kp_buf_clear(&o->scratch);
    st = kp_pb_field_varint(&o->scratch, FUNCTION_NAME, name_id);
    if (st == KP_OK)
        st = kp_pb_field_varint(&o->scratch, FUNCTION_SYSTEM_NAME, name_id);
    return st == KP_OK
               ? table_intern(&o->functions, &name_id, sizeof name_id, &o->scratch, function)
               : st;
}

/* The mapping of `file` (and its build id), or 0 for none. */
static kp_status mapping_of(kp_otlp *o, const char *file, const char *build_id, uint32_t *mapping)
{
    *mapping = 0;
    if (!file || !file[0])
        return KP_OK;
    uint32_t key[2] = {0, 0};
    kp_status st = string_id(o, file, strlen(file), &key[0]);
    if (st == KP_OK && build_id && build_id[0])
        st = kp_otlp_attribute(o, "process.executable.build_id.gnu", build_id, strlen(build_id),
                               &key[1]);
    if (st != KP_OK)
        return st;
    if (table_find(&o->mappings, key, sizeof key, mapping))
        return KP_OK;
    kp_buf_clear(&o->scratch);
    st = kp_pb_field_varint(&o->scratch, MAPPING_FILENAME, key[0]);
    if (st == KP_OK && key[1])
        st = kp_pb_field_packed_u32(&o->scratch, MAPPING_ATTRIBUTES, &key[1], 1);
    return st == KP_OK ? table_intern(&o->mappings, key, sizeof key, &o->scratch, mapping) : st;
}

kp_status kp_otlp_location(kp_otlp *o, const kp_otlp_frame *f, uint32_t *location)
{
    if (!f->name_len)
        return KP_ERR_INVAL;
    struct {
        uint32_t mapping, function, type;
        uint32_t pad;
        uint64_t address;
    } key = {0, 0, 0, 0, f->address};
    const char *type = kp_otlp_frame_type_name(f->type);
    kp_status st = mapping_of(o, f->file, f->build_id, &key.mapping);
    if (st == KP_OK)
        st = function_of(o, f->name, f->name_len, &key.function);
    if (st == KP_OK && type)
        st = kp_otlp_attribute(o, "profile.frame.type", type, strlen(type), &key.type);
    if (st != KP_OK)
        return st;
    if (table_find(&o->locations, &key, sizeof key, location))
        return KP_OK;
    kp_buf_clear(&o->inner);
    st = kp_pb_field_varint(&o->inner, LINE_FUNCTION, key.function);
    kp_buf_clear(&o->scratch);
    if (st == KP_OK && key.mapping)
        st = kp_pb_field_varint(&o->scratch, LOCATION_MAPPING, key.mapping);
    if (st == KP_OK && key.address)
        st = kp_pb_field_varint(&o->scratch, LOCATION_ADDRESS, key.address);
    if (st == KP_OK)
        st = kp_pb_field_bytes(&o->scratch, LOCATION_LINES, o->inner.data, o->inner.len);
    if (st == KP_OK && key.type)
        st = kp_pb_field_packed_u32(&o->scratch, LOCATION_ATTRIBUTES, &key.type, 1);
    return st == KP_OK ? table_intern(&o->locations, &key, sizeof key, &o->scratch, location) : st;
}

static int all_below(const uint32_t *ids, size_t n, uint32_t limit)
{
    for (size_t k = 0; k < n; k++)
        if (ids[k] == 0 || ids[k] >= limit)
            return 0;
    return 1;
}

kp_status kp_otlp_sample(kp_otlp *o, uint32_t profile_index, const uint32_t *locations,
                         size_t n_locations, const uint32_t *attributes, size_t n_attributes,
                         int64_t value)
{
    if (profile_index >= o->n_profiles ||
        !all_below(locations, n_locations, kp_strtab_count(o->locations.keys)) ||
        !all_below(attributes, n_attributes, kp_strtab_count(o->attributes.keys)) ||
        n_attributes > UINT32_MAX)
        return KP_ERR_INVAL;
    uint32_t stack = 0;
    kp_status st = KP_OK;
    if (n_locations &&
        !table_find(&o->stacks, locations, n_locations * sizeof *locations, &stack)) {
        kp_buf_clear(&o->scratch);
        st = kp_pb_field_packed_u32(&o->scratch, STACK_LOCATIONS, locations, n_locations);
        if (st == KP_OK)
            st = table_intern(&o->stacks, locations, n_locations * sizeof *locations, &o->scratch,
                              &stack);
    }
    /* the sample's key: profile, stack, attributes */
    kp_buf_clear(&o->inner);
    uint32_t head[2] = {profile_index, stack};
    if (st == KP_OK)
        st = kp_buf_append(&o->inner, head, sizeof head);
    if (st == KP_OK && n_attributes)
        st = kp_buf_append(&o->inner, attributes, n_attributes * sizeof *attributes);
    uint32_t id;
    int fresh;
    if (st == KP_OK)
        st = kp_strtab_intern(o->sample_keys, o->inner.data, o->inner.len, &id, &fresh);
    if (st != KP_OK)
        return st;
    if (!fresh) {
        sample *s = &o->samples[id];
        s->value = value > INT64_MAX - s->value ? INT64_MAX : s->value + value;
        return KP_OK;
    }
    if (o->n_pool + n_attributes > o->cap_pool) {
        size_t cap = o->cap_pool ? o->cap_pool : 256;
        while (cap < o->n_pool + n_attributes)
            cap *= 2;
        uint32_t *p = kp_realloc_array(o->attr_pool, cap, sizeof *p);
        if (!p)
            return KP_ERR_NOMEM;
        o->attr_pool = p;
        o->cap_pool = cap;
    }
    if (o->n_samples == o->cap_samples) {
        size_t cap = o->cap_samples ? o->cap_samples * 2 : 256;
        sample *s = kp_realloc_array(o->samples, cap, sizeof *s);
        if (!s)
            return KP_ERR_NOMEM;
        o->samples = s;
        o->cap_samples = cap;
    }
    /* ids are dense: this key's id is the next sample */
    if (n_attributes)
        memcpy(o->attr_pool + o->n_pool, attributes, n_attributes * sizeof *attributes);
    o->samples[o->n_samples++] =
        (sample){profile_index, stack, (uint32_t)o->n_pool, (uint32_t)n_attributes, value};
    o->n_pool += n_attributes;
    return KP_OK;
}

size_t kp_otlp_samples(const kp_otlp *o)
{
    return o->n_samples;
}

/* ------------------------------------------------------------------ */
/* encoding */

static kp_status value_type(kp_buf *out, unsigned field, const profile *p, kp_buf *tmp)
{
    kp_buf_clear(tmp);
    kp_status st = kp_pb_field_varint(tmp, VALUE_TYPE_TYPE, p->type);
    if (st == KP_OK)
        st = kp_pb_field_varint(tmp, VALUE_TYPE_UNIT, p->unit);
    return st == KP_OK ? kp_pb_field_bytes(out, field, tmp->data, tmp->len) : st;
}

static kp_status encode_sample(const kp_otlp *o, const sample *s, kp_buf *out, kp_buf *tmp)
{
    kp_buf_clear(tmp);
    kp_status st = KP_OK;
    if (s->stack)
        st = kp_pb_field_varint(tmp, SAMPLE_STACK, s->stack);
    if (st == KP_OK)
        st = kp_pb_field_packed_u32(tmp, SAMPLE_ATTRIBUTES, o->attr_pool + s->attr_at, s->n_attrs);
    /* values: packed int64, one value */
    unsigned char v[11];
    size_t n = 0;
    for (uint64_t x = (uint64_t)s->value;; x >>= 7) {
        v[n] = (unsigned char)(x & 0x7f);
        if (x >> 7)
            v[n] |= 0x80;
        n++;
        if (!(x >> 7))
            break;
    }
    if (st == KP_OK)
        st = kp_pb_field_bytes(tmp, SAMPLE_VALUES, v, n);
    return st == KP_OK ? kp_pb_field_bytes(out, PROFILE_SAMPLES, tmp->data, tmp->len) : st;
}

/* A profile's id: 16 bytes, not all zero, from what makes it unique. */
static void profile_id(const kp_otlp *o, uint32_t index, unsigned char id[16])
{
    const profile *p = &o->profiles[index];
    uint64_t seed = XXH3_64bits(p, sizeof *p) ^ index;
    XXH128_hash_t h =
        XXH3_128bits_withSeed(o->resource.data ? o->resource.data : "", o->resource.len, seed);
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, h);
    memcpy(id, c.digest, 16);
    id[0] |= 1;
}

static kp_status encode_profile(const kp_otlp *o, uint32_t index, kp_buf *out, kp_buf *msg,
                                kp_buf *tmp)
{
    const profile *p = &o->profiles[index];
    kp_buf_clear(msg);
    kp_status st = value_type(msg, PROFILE_SAMPLE_TYPE, p, tmp);
    size_t samples = 0;
    for (size_t k = 0; k < o->n_samples && st == KP_OK; k++)
        if (o->samples[k].profile == index) {
            st = encode_sample(o, &o->samples[k], msg, tmp);
            samples++;
        }
    if (st != KP_OK || !samples)
        return st;
    unsigned char id[16];
    profile_id(o, index, id);
    if (p->time)
        st = kp_pb_field_fixed64(msg, PROFILE_TIME, p->time);
    if (st == KP_OK && p->duration)
        st = kp_pb_field_varint(msg, PROFILE_DURATION, p->duration);
    if (st == KP_OK)
        st = value_type(msg, PROFILE_PERIOD_TYPE, p, tmp);
    if (st == KP_OK && p->period)
        st = kp_pb_field_varint(msg, PROFILE_PERIOD, (uint64_t)p->period);
    if (st == KP_OK)
        st = kp_pb_field_bytes(msg, PROFILE_ID, id, sizeof id);
    return st == KP_OK ? kp_pb_field_bytes(out, SCOPE_PROFILES_PROFILES, msg->data, msg->len) : st;
}

static kp_status encode_dictionary(const kp_otlp *o, kp_buf *out, kp_buf *dict)
{
    kp_buf_clear(dict);
    kp_status st = kp_buf_append(dict, o->mappings.wire.data, o->mappings.wire.len);
    if (st == KP_OK)
        st = kp_buf_append(dict, o->locations.wire.data, o->locations.wire.len);
    if (st == KP_OK)
        st = kp_buf_append(dict, o->functions.wire.data, o->functions.wire.len);
    if (st == KP_OK) /* link_table: only its empty entry 0 */
        st = kp_pb_field_bytes(dict, DICT_LINK, NULL, 0);
    uint32_t n = kp_strtab_count(o->strings);
    for (uint32_t id = 0; id < n && st == KP_OK; id++) {
        size_t len;
        const void *s = kp_strtab_get(o->strings, id, &len);
        st = kp_pb_field_bytes(dict, DICT_STRING, s, len);
    }
    if (st == KP_OK)
        st = kp_buf_append(dict, o->attributes.wire.data, o->attributes.wire.len);
    if (st == KP_OK)
        st = kp_buf_append(dict, o->stacks.wire.data, o->stacks.wire.len);
    return st == KP_OK ? kp_pb_field_bytes(out, REQUEST_DICTIONARY, dict->data, dict->len) : st;
}

kp_status kp_otlp_encode(const kp_otlp *o, kp_buf *out)
{
    kp_buf scope = KP_BUF_INIT, msg = KP_BUF_INIT, tmp = KP_BUF_INIT, rp = KP_BUF_INIT;
    /* ScopeProfiles: the scope, then each profile */
    size_t len;
    const void *name = kp_strtab_get(o->strings, o->scope_name, &len);
    kp_status st = kp_pb_field_bytes(&tmp, SCOPE_NAME, name, len);
    const void *version = kp_strtab_get(o->strings, o->scope_version, &len);
    if (st == KP_OK)
        st = kp_pb_field_bytes(&tmp, SCOPE_VERSION, version, len);
    if (st == KP_OK)
        st = kp_pb_field_bytes(&scope, SCOPE_PROFILES_SCOPE, tmp.data, tmp.len);
    for (uint32_t k = 0; k < o->n_profiles && st == KP_OK; k++)
        st = encode_profile(o, k, &scope, &msg, &tmp);
    /* ResourceProfiles: the resource, its one ScopeProfiles */
    if (st == KP_OK)
        st = kp_pb_field_bytes(&rp, RESOURCE_PROFILES_RESOURCE, o->resource.data, o->resource.len);
    if (st == KP_OK)
        st = kp_pb_field_bytes(&rp, RESOURCE_PROFILES_SCOPE_PROFILES, scope.data, scope.len);
    if (st == KP_OK)
        st = kp_pb_field_bytes(out, REQUEST_RESOURCE_PROFILES, rp.data, rp.len);
    if (st == KP_OK)
        st = encode_dictionary(o, out, &msg);
    kp_buf_free(&scope);
    kp_buf_free(&msg);
    kp_buf_free(&tmp);
    kp_buf_free(&rp);
    return st;
}

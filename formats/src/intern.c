#include "kp/intern.h"

#include <string.h>

#include "kp/alloc.h"
#include "kp/buf.h"
#include "kp/frame_name.h"
#include "kp/strtab.h"
#include "kp/symbol.h"

/* A frame's key in the table is a tagged serialisation, so a pseudo-frame and
 * a function frame can never produce the same key:
 *   'F' arity(4) line(4) module_len(4) module function
 *   'P' kind NUL text
 * Its display strings live in a second table, indexed by frame id. */
typedef struct {
    uint32_t symbol; /* id in `display` */
    uint32_t module;
} display_ids;

struct kp_frames {
    kp_strtab *keys;
    kp_strtab *display; /* encoded symbols and module columns, shared */
    display_ids *ids;   /* by frame id */
    uint32_t ids_cap;
    int with_lines;
    kp_names names;
    kp_buf scratch; /* a key, then the frame's display strings */
    kp_buf name;    /* a function's name before encoding */
};

struct kp_stacks {
    kp_strtab *table;
};

kp_frames *kp_frames_create(unsigned flags)
{
    kp_frames *f = kp_calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->keys = kp_strtab_create();
    f->display = kp_strtab_create();
    if (!f->keys || !f->display) {
        kp_frames_free(f);
        return NULL;
    }
    f->with_lines = (flags & KP_FRAMES_LINES) != 0;
    f->names = flags & KP_FRAMES_ERLANG_NAMES ? KP_NAMES_ERLANG : KP_NAMES_ELIXIR;
    return f;
}

void kp_frames_free(kp_frames *f)
{
    if (!f)
        return;
    kp_strtab_free(f->keys);
    kp_strtab_free(f->display);
    kp_free(f->ids);
    kp_buf_free(&f->scratch);
    kp_buf_free(&f->name);
    kp_free(f);
}

static void put_u32(char *p, uint32_t v)
{
    memcpy(p, &v, 4);
}

/* Adds the frame whose key is in f->scratch[0..key_len) and whose display
 * strings follow it in the scratch buffer. Nothing is added on error: the
 * display strings are interned first (harmless if left over), the key last. */
static kp_status add_frame(kp_frames *f, size_t key_len, uint64_t h, size_t sym_len, uint32_t *id)
{
    uint32_t count = kp_strtab_count(f->keys);
    if (count == f->ids_cap) {
        /* doubling past 2^31 would wrap to 0 */
        uint32_t cap = !f->ids_cap ? 64 : f->ids_cap > UINT32_MAX / 2 ? UINT32_MAX : f->ids_cap * 2;
        display_ids *ids = kp_realloc_array(f->ids, cap, sizeof *ids);
        if (!ids)
            return KP_ERR_NOMEM;
        f->ids = ids;
        f->ids_cap = cap;
    }
    display_ids d;
    const char *sym = f->scratch.data + key_len;
    kp_status st = kp_strtab_intern(f->display, sym, sym_len, &d.symbol, NULL);
    if (st == KP_OK)
        st = kp_strtab_intern(f->display, sym + sym_len, f->scratch.len - key_len - sym_len,
                              &d.module, NULL);
    if (st == KP_OK)
        st = kp_strtab_intern_hashed(f->keys, f->scratch.data, key_len, h, id, NULL);
    if (st == KP_OK)
        f->ids[*id] = d;
    return st;
}

/* Finds the frame whose key is f->scratch[0..key_len), computing its hash. */
static int lookup(const kp_frames *f, size_t key_len, uint64_t *h, uint32_t *id)
{
    *h = kp_strtab_hash(f->scratch.data, key_len);
    return kp_strtab_find(f->keys, f->scratch.data, key_len, *h, id);
}

kp_status kp_frames_intern_mfa(kp_frames *f, const kp_mfa *m, uint32_t *id)
{
    if (m->module_len > UINT32_MAX || m->function_len > UINT32_MAX)
        return KP_ERR_LIMIT;
    kp_buf *b = &f->scratch;
    unsigned line = f->with_lines ? m->line : 0;
    kp_buf_clear(b);
    kp_status st = kp_buf_reserve(b, 13 + m->module_len + m->function_len);
    if (st != KP_OK)
        return st;
    b->data[0] = 'F';
    put_u32(b->data + 1, m->arity);
    put_u32(b->data + 5, line);
    put_u32(b->data + 9, (uint32_t)m->module_len);
    memcpy(b->data + 13, m->module, m->module_len);
    memcpy(b->data + 13 + m->module_len, m->function, m->function_len);
    b->len = 13 + m->module_len + m->function_len;
    size_t key_len = b->len;
    uint64_t h;
    if (lookup(f, key_len, &h, id))
        return KP_OK;
    kp_buf_clear(&f->name);
    if ((st = kp_frame_name(&f->name, m->module, m->module_len, m->function, m->function_len,
                            m->arity, f->names)) != KP_OK ||
        (st = kp_symbol_encode(b, f->name.data, f->name.len)) != KP_OK)
        return st;
    if (line &&
        ((st = kp_buf_append_char(b, ':')) != KP_OK || (st = kp_buf_append_u64(b, line)) != KP_OK))
        return st;
    size_t sym_len = b->len - key_len;
    if ((st = kp_module_encode(b, m->module, m->module_len)) != KP_OK ||
        (st = kp_buf_append(b, ".beam", 5)) != KP_OK)
        return st;
    return add_frame(f, key_len, h, sym_len, id);
}

kp_status kp_frames_intern_pseudo(kp_frames *f, const char *text, size_t len, const char *kind,
                                  uint32_t *id)
{
    kp_buf *b = &f->scratch;
    kp_buf_clear(b);
    kp_status st;
    if ((st = kp_buf_append_char(b, 'P')) != KP_OK ||
        (st = kp_buf_append(b, kind, strlen(kind) + 1)) != KP_OK ||
        (st = kp_buf_append(b, text, len)) != KP_OK)
        return st;
    size_t key_len = b->len;
    uint64_t h;
    if (lookup(f, key_len, &h, id))
        return KP_OK;
    if ((st = kp_symbol_encode(b, text, len)) != KP_OK)
        return st;
    size_t sym_len = b->len - key_len;
    if ((st = kp_module_encode(b, kind, strlen(kind))) != KP_OK)
        return st;
    return add_frame(f, key_len, h, sym_len, id);
}

uint32_t kp_frames_count(const kp_frames *f)
{
    return kp_strtab_count(f->keys);
}

const char *kp_frames_symbol(const kp_frames *f, uint32_t id, size_t *len)
{
    return kp_strtab_get(f->display, f->ids[id].symbol, len);
}

const char *kp_frames_module(const kp_frames *f, uint32_t id, size_t *len)
{
    return kp_strtab_get(f->display, f->ids[id].module, len);
}

size_t kp_frames_memory(const kp_frames *f)
{
    return sizeof *f + kp_strtab_memory(f->keys) + kp_strtab_memory(f->display) +
           f->ids_cap * sizeof *f->ids + f->scratch.cap + f->name.cap;
}

kp_stacks *kp_stacks_create(void)
{
    kp_stacks *s = kp_calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->table = kp_strtab_create();
    if (!s->table) {
        kp_free(s);
        return NULL;
    }
    return s;
}

void kp_stacks_free(kp_stacks *s)
{
    if (!s)
        return;
    kp_strtab_free(s->table);
    kp_free(s);
}

kp_status kp_stacks_intern(kp_stacks *s, const uint32_t *ids, size_t n, uint32_t *id)
{
    if (n > UINT32_MAX / sizeof *ids)
        return KP_ERR_LIMIT;
    return kp_strtab_intern(s->table, n ? (const void *)ids : "", n * sizeof *ids, id, NULL);
}

uint32_t kp_stacks_count(const kp_stacks *s)
{
    return kp_strtab_count(s->table);
}

const uint32_t *kp_stacks_get(const kp_stacks *s, uint32_t id, size_t *n)
{
    size_t len;
    const void *p = kp_strtab_get(s->table, id, &len);
    *n = len / sizeof(uint32_t);
    return p; /* kp_strtab keeps entries 4-byte aligned */
}

size_t kp_stacks_memory(const kp_stacks *s)
{
    return sizeof *s + kp_strtab_memory(s->table);
}

kp_status kp_frames_intern_in_module(kp_frames *f, const char *prefix, const char *module,
                                     size_t module_len, const char *suffix, size_t suffix_len,
                                     const char *kind, uint32_t *id)
{
    kp_buf_clear(&f->name);
    kp_status st;
    if ((st = kp_buf_append_str(&f->name, prefix)) != KP_OK ||
        (st = kp_module_name(&f->name, module, module_len, f->names)) != KP_OK ||
        (st = kp_buf_append(&f->name, suffix, suffix_len)) != KP_OK)
        return st;
    return kp_frames_intern_pseudo(f, f->name.data, f->name.len, kind, id);
}

kp_status kp_frames_intern_label(kp_frames *f, int registered, const char *label, size_t len,
                                 uint32_t *id)
{
    kp_buf_clear(&f->name);
    kp_status st = kp_label_name(&f->name, registered, label, len, f->names);
    if (st != KP_OK)
        return st;
    return kp_frames_intern_pseudo(f, f->name.data, f->name.len,
                                   registered ? "registered" : "initial", id);
}

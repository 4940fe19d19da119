#define _GNU_SOURCE
#include "cpu/perf_map.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "kp/alloc.h"
#include "kp/hex.h"

/* Names live in chunks that never move, so that the entries can point into
 * them while the entry arrays are reallocated. */
typedef struct chunk {
    struct chunk *next;
    char data[];
} chunk;

#define CHUNK_SIZE (64u << 10)
/* bytes read at once from the followed file */
#define READ_SIZE (64u << 10)

/* A parsed line waiting to be merged, with what undoing it needs: where its
 * line starts and the malformed lines counted before it. */
typedef struct {
    kp_jit_symbol sym;
    size_t line_start, malformed_before;
} parsed;

struct kp_perf_map {
    /* the entries that can be found: sorted by start, never overlapping */
    kp_jit_symbol *index;
    size_t n_index, cap_index;
    /* scratch: the lines of one call, and the merged middle of the index */
    parsed *batch;
    size_t n_batch, cap_batch;
    kp_jit_symbol *merged;
    size_t cap_merged;

    chunk *chunks;
    size_t chunk_used, chunk_cap;
    size_t malformed;

    /* the followed file */
    char *path;
    int fd;
    char *pending; /* read but not added yet: the start of a line */
    size_t pending_len, pending_cap;
    int skipping; /* dropping a line longer than KP_PERF_MAP_MAX_LINE */
};

kp_perf_map *kp_perf_map_create(void)
{
    kp_perf_map *m = kp_calloc(1, sizeof *m);
    if (m)
        m->fd = -1;
    return m;
}

void kp_perf_map_free(kp_perf_map *m)
{
    if (!m)
        return;
    if (m->fd >= 0)
        close(m->fd);
    for (chunk *c = m->chunks, *next; c; c = next) {
        next = c->next;
        kp_free(c);
    }
    kp_free(m->index);
    kp_free(m->batch);
    kp_free(m->merged);
    kp_free(m->path);
    kp_free(m->pending);
    kp_free(m);
}

int kp_perf_map_path(int os_pid, char *buf, size_t len)
{
    int n = snprintf(buf, len, "/tmp/perf-%d.map", os_pid);
    return n >= 0 && (size_t)n < len ? 0 : -1;
}

size_t kp_perf_map_count(const kp_perf_map *m)
{
    return m->n_index;
}

size_t kp_perf_map_malformed(const kp_perf_map *m)
{
    return m->malformed;
}

/* The array `p` of `*cap` elements of `size` bytes, grown to hold `need`
 * (need > 0): the array, with *cap updated, or NULL when out of memory (then
 * `p` is unchanged). */
static void *reserve(void *p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return p;
    size_t n = *cap ? *cap : 256;
    while (n < need)
        n *= 2;
    void *q = kp_realloc_array(p, n, size);
    if (q)
        *cap = n;
    return q;
}

/* `len` bytes that stay where they are until the map is freed. */
static char *store(kp_perf_map *m, size_t len)
{
    if (!m->chunks || m->chunk_cap - m->chunk_used < len) {
        size_t cap = len > CHUNK_SIZE ? len : CHUNK_SIZE;
        chunk *c = kp_malloc(sizeof *c + cap);
        if (!c)
            return NULL;
        c->next = m->chunks;
        m->chunks = c;
        m->chunk_used = 0;
        m->chunk_cap = cap;
    }
    char *p = m->chunks->data + m->chunk_used;
    m->chunk_used += len;
    return p;
}

/* ---- one line ------------------------------------------------------------ */

/* A hex number at *p (0x optional, at most 64 bits), then at least one blank. */
static int hex_field(const char **p, const char *end, uint64_t *out)
{
    const char *s = *p;
    if (end - s >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
        s += 2;
    uint64_t v;
    s = kp_hex_u64(s, end, &v);
    if (!s || s == end || (*s != ' ' && *s != '\t'))
        return -1;
    while (s < end && (*s == ' ' || *s == '\t'))
        s++;
    *p = s;
    *out = v;
    return 0;
}

/* An atom as erts prints it (erl_printf_term.c): bare, or quoted with
 * \' \\ \n \f \t \r \b \v and octal \NNN escapes. `off` and `len` locate
 * its text in the name (quotes excluded); `escaped` says whether that text
 * must be unescaped. Returns the position after it, or NULL. */
typedef struct {
    size_t off, len;
    int escaped;
} atom_ref;

static const char *atom(const char *name, const char *p, const char *end, atom_ref *a)
{
    const char *s = p;
    if (s < end && *s == '\'') {
        a->off = (size_t)(++s - name);
        a->escaped = 0;
        for (; s < end && *s != '\''; s++)
            if (*s == '\\') {
                a->escaped = 1;
                if (++s == end)
                    return NULL;
            }
        if (s == end)
            return NULL;
        a->len = (size_t)(s - name) - a->off;
        return s + 1;
    }
    /* a bare atom: what erts leaves unquoted never holds these */
    for (; s < end; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == ':' || c == '/' || c == '\'' || c == '\\' || c <= ' ' || c == 0x7f)
            break;
    }
    if (s == p)
        return NULL;
    a->off = (size_t)(p - name);
    a->len = (size_t)(s - p);
    a->escaped = 0;
    return s;
}

/* Writes the unescaped text of an escaped atom to `out`; returns its length
 * (never more than the escaped one). */
static size_t unescape(const char *s, size_t len, char *out)
{
    const char *end = s + len;
    size_t n = 0;
    while (s < end) {
        char c = *s++;
        if (c != '\\' || s == end) {
            out[n++] = c;
            continue;
        }
        c = *s++;
        if (c >= '0' && c <= '7') {
            /* \NNN: erts writes code points 0..31 and 128..159 so; the
             * atom holds them in UTF-8 */
            unsigned v = (unsigned)(c - '0');
            for (int i = 1; i < 3 && s < end && *s >= '0' && *s <= '7'; i++)
                v = v * 8 + (unsigned)(*s++ - '0');
            if (v < 0x80) {
                out[n++] = (char)v;
            } else {
                out[n++] = (char)(0xc0 | v >> 6);
                out[n++] = (char)(0x80 | (v & 0x3f));
            }
            continue;
        }
        switch (c) {
        case 'n': c = '\n'; break;
        case 'f': c = '\f'; break;
        case 't': c = '\t'; break;
        case 'r': c = '\r'; break;
        case 'b': c = '\b'; break;
        case 'v': c = '\v'; break;
        case 'e': c = 27; break;
        case 's': c = ' '; break;
        case 'd': c = 127; break;
        default: break; /* \' \\ and anything else: the character itself */
        }
        out[n++] = c;
    }
    return n;
}

static int ends_with(const char *s, size_t len, const char *suffix)
{
    size_t n = strlen(suffix);
    return len >= n && memcmp(s + len - n, suffix, n) == 0;
}

/* Parses a name (without '$') into `sym`'s kind, arity and atom positions
 * (offsets into the name until store_name() turns them into pointers). */
static void classify(const char *name, size_t len, kp_jit_symbol *sym, atom_ref *mod, atom_ref *fun)
{
    static const char prologue[] = "-CodeInfoPrologue";
    sym->kind = KP_JIT_RUNTIME;
    const char *end = name + len, *p;
    int is_prologue = ends_with(name, len, prologue);
    if (is_prologue)
        end -= sizeof prologue - 1;
    if (!(p = atom(name, name, end, mod)) || p == end || *p++ != ':')
        return;
    if (!(p = atom(name, p, end, fun)) || p == end || *p++ != '/')
        return;
    unsigned arity = 0;
    const char *digits = p;
    for (; p < end && *p >= '0' && *p <= '9' && p - digits < 3; p++)
        arity = arity * 10 + (unsigned)(*p - '0');
    if (p == digits || p != end || arity > 255)
        return;
    sym->arity = arity;
    sym->kind = is_prologue ? KP_JIT_PROLOGUE : KP_JIT_ERLANG;
}

/* Copies the name and the unescaped atoms into the chunks and points `sym`
 * at them. */
static int store_name(kp_perf_map *m, const char *name, size_t len, kp_jit_symbol *sym,
                      const atom_ref *mod, const atom_ref *fun)
{
    int erlang = sym->kind != KP_JIT_RUNTIME;
    size_t need = len + 1;
    if (erlang)
        need += (mod->escaped ? mod->len : 0) + (fun->escaped ? fun->len : 0);
    char *p = store(m, need);
    if (!p)
        return -1;
    memcpy(p, name, len);
    p[len] = '\0';
    sym->text = p;
    sym->text_len = (uint32_t)len;
    sym->module = sym->function = NULL;
    sym->module_len = sym->function_len = 0;
    if (!erlang) {
        sym->arity = 0;
        return 0;
    }
    char *extra = p + len + 1;
    const atom_ref *refs[2] = {mod, fun};
    const char **ptr[2] = {&sym->module, &sym->function};
    uint32_t *lens[2] = {&sym->module_len, &sym->function_len};
    for (int i = 0; i < 2; i++) {
        if (refs[i]->escaped) {
            size_t n = unescape(p + refs[i]->off, refs[i]->len, extra);
            *ptr[i] = extra;
            *lens[i] = (uint32_t)n;
            extra += n;
        } else {
            *ptr[i] = p + refs[i]->off;
            *lens[i] = (uint32_t)refs[i]->len;
        }
    }
    return 0;
}

/* Parses one line (without its '\n'): 1 with `sym` filled, 0 when
 * malformed, -1 when out of memory. */
static int parse_line(kp_perf_map *m, const char *line, size_t len, kp_jit_symbol *sym)
{
    const char *p = line, *end = line + len;
    if (len > KP_PERF_MAP_MAX_LINE || hex_field(&p, end, &sym->start) != 0 ||
        hex_field(&p, end, &sym->size) != 0)
        return 0;
    if (sym->size == 0 || sym->start > UINT64_MAX - sym->size)
        return 0;
    if (p < end && *p == '$')
        p++;
    if (p == end)
        return 0;
    atom_ref mod = {0}, fun = {0};
    classify(p, (size_t)(end - p), sym, &mod, &fun);
    return store_name(m, p, (size_t)(end - p), sym, &mod, &fun) == 0 ? 1 : -1;
}

/* ---- the sorted index ---------------------------------------------------- */

static uint64_t end_of(const kp_jit_symbol *s)
{
    return s->start + s->size;
}

/* The first entry of the index whose end lies above `addr`. */
static size_t first_ending_after(const kp_perf_map *m, uint64_t addr)
{
    size_t lo = 0, hi = m->n_index;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (end_of(&m->index[mid]) > addr)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* Merges `n` entries sorted by start and not overlapping each other, all
 * newer than the index: the entries of the index they overlap go. The JIT
 * writes a module's code in increasing addresses, so the lines of one call
 * are a few such runs, and merging run by run costs one pass over the part
 * of the index a run spans instead of one move of the index's tail per
 * line. Returns 0, or -1 when out of memory (index unchanged). */
static int merge_run(kp_perf_map *m, const parsed *run, size_t n)
{
    kp_jit_symbol *index = reserve(m->index, &m->cap_index, m->n_index + n, sizeof *index);
    if (!index)
        return -1;
    m->index = index;
    uint64_t lo_addr = run[0].sym.start, hi_addr = end_of(&run[n - 1].sym);
    size_t lo = first_ending_after(m, lo_addr), hi = lo;
    while (hi < m->n_index && m->index[hi].start < hi_addr)
        hi++;
    if (lo == hi) {
        /* nothing in the way: appending, the common case, or inserting in
         * a gap */
        memmove(m->index + lo + n, m->index + lo, (m->n_index - lo) * sizeof *m->index);
        for (size_t i = 0; i < n; i++)
            m->index[lo + i] = run[i].sym;
        m->n_index += n;
        return 0;
    }
    kp_jit_symbol *merged = reserve(m->merged, &m->cap_merged, hi - lo + n, sizeof *merged);
    if (!merged)
        return -1;
    m->merged = merged;
    /* index[lo, hi) meets the run's span: keep the entries that overlap no
     * entry of the run, in order with the run's */
    size_t k = 0, r = 0;
    for (size_t i = lo; i < hi; i++) {
        const kp_jit_symbol *old = &m->index[i];
        while (r < n && end_of(&run[r].sym) <= old->start)
            m->merged[k++] = run[r++].sym;
        if (r < n && run[r].sym.start < end_of(old))
            continue; /* overlapped: the run's entry r starts before it ends */
        m->merged[k++] = *old;
    }
    while (r < n)
        m->merged[k++] = run[r++].sym;
    memmove(m->index + lo + k, m->index + hi, (m->n_index - hi) * sizeof *m->index);
    memcpy(m->index + lo, m->merged, k * sizeof *m->merged);
    m->n_index = m->n_index - (hi - lo) + k;
    return 0;
}

const kp_jit_symbol *kp_perf_map_find(const kp_perf_map *m, uint64_t addr)
{
    size_t i = first_ending_after(m, addr);
    if (i < m->n_index && m->index[i].start <= addr)
        return &m->index[i];
    return NULL;
}

/* ---- lines --------------------------------------------------------------- */

/* Parses the lines of text[0, len) (the complete ones; with `final` also a
 * last one without '\n') and adds their entries in order. Sets *used to the
 * bytes done with: all of them, or on failure those before the first line
 * not added, so that they can be tried again. Returns the entries added or
 * -1 (errno ENOMEM). */
static long take_lines(kp_perf_map *m, const char *text, size_t len, int final, size_t *used)
{
    size_t pos = 0, malformed = m->malformed;
    int failed = 0;
    m->n_batch = 0;
    while (pos < len) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        if (!nl && !final)
            break;
        size_t line_len = nl ? (size_t)(nl - (text + pos)) : len - pos;
        size_t next = nl ? pos + line_len + 1 : len;
        if (line_len > 0) {
            parsed *batch = reserve(m->batch, &m->cap_batch, m->n_batch + 1, sizeof *batch);
            if (!batch) {
                failed = 1;
                break;
            }
            m->batch = batch;
            parsed *b = &m->batch[m->n_batch];
            int r = parse_line(m, text + pos, line_len, &b->sym);
            if (r < 0) {
                failed = 1;
                break;
            }
            if (r == 0) {
                malformed++;
            } else {
                b->line_start = pos;
                b->malformed_before = malformed;
                m->n_batch++;
            }
        }
        pos = next;
    }
    /* merge the batch run by run */
    size_t i = 0;
    while (i < m->n_batch) {
        size_t j = i + 1;
        while (j < m->n_batch && m->batch[j].sym.start >= end_of(&m->batch[j - 1].sym))
            j++;
        if (merge_run(m, m->batch + i, j - i) != 0) {
            /* the lines from run i on were not added */
            *used = m->batch[i].line_start;
            m->malformed = m->batch[i].malformed_before;
            errno = ENOMEM;
            return -1;
        }
        i = j;
    }
    *used = pos;
    m->malformed = malformed;
    if (failed) {
        errno = ENOMEM;
        return -1;
    }
    return (long)m->n_batch;
}

int kp_perf_map_add_text(kp_perf_map *m, const char *text, size_t len)
{
    size_t used;
    long n = take_lines(m, text, len, 1, &used);
    return n > INT_MAX ? INT_MAX : (int)n;
}

/* ---- the followed file --------------------------------------------------- */

/* Adds the complete lines of the pending bytes and keeps the rest. */
static long take_pending(kp_perf_map *m)
{
    if (m->pending_len == 0)
        return 0;
    if (m->skipping) {
        /* the end of an overlong line: drop it with its '\n' */
        char *nl = memchr(m->pending, '\n', m->pending_len);
        size_t drop = nl ? (size_t)(nl - m->pending) + 1 : m->pending_len;
        memmove(m->pending, m->pending + drop, m->pending_len - drop);
        m->pending_len -= drop;
        if (!nl)
            return 0;
        m->skipping = 0;
        m->malformed++;
    }
    size_t used = 0;
    long n = take_lines(m, m->pending, m->pending_len, 0, &used);
    memmove(m->pending, m->pending + used, m->pending_len - used);
    m->pending_len -= used;
    if (n >= 0 && m->pending_len > KP_PERF_MAP_MAX_LINE) {
        /* no '\n' in sight: the rest of this line goes as it comes */
        m->pending_len = 0;
        m->skipping = 1;
    }
    return n;
}

int kp_perf_map_refresh(kp_perf_map *m, const char *path)
{
    if (m->path && strcmp(m->path, path) != 0) {
        errno = EINVAL;
        return -1;
    }
    if (!m->path && !(m->path = kp_strdup(path))) {
        errno = ENOMEM;
        return -1;
    }
    if (m->fd < 0 && (m->fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return -1;
    long added = 0;
    for (;;) {
        /* lines left by an earlier call that ran out of memory go first */
        long n = take_pending(m);
        if (n < 0)
            return -1;
        added += n;
        char *pending = reserve(m->pending, &m->pending_cap, m->pending_len + READ_SIZE, 1);
        if (!pending) {
            errno = ENOMEM;
            return -1;
        }
        m->pending = pending;
        ssize_t got = read(m->fd, m->pending + m->pending_len, READ_SIZE);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            return -1;
        if (got == 0)
            break;
        m->pending_len += (size_t)got;
    }
    return added > INT_MAX ? INT_MAX : (int)added;
}

/* The kernel's symbols from /proc/kallsyms; see kernel_symbols.h. */
#define _GNU_SOURCE
#include "cpu/kernel_symbols.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kp/alloc.h"
#include "kp/hex.h"

#define NO_MODULE UINT32_MAX
/* The page perf rounds the end of a part's last symbol to. */
#define PAGE 4096u

/* One code symbol: its names are offsets into the table's `names`, which
 * moves while it grows. */
typedef struct {
    uint64_t start, end; /* [start, end) */
    uint32_t name, module;
    uint32_t seq; /* its place in the file: the last of an address wins */
} entry;

struct kp_kernel_symbols {
    entry *entries;
    size_t n, cap;
    char *names; /* NUL-terminated names and modules, one after the other */
    size_t names_len, names_cap;
    size_t malformed;
    size_t zero; /* code symbols at address 0 */
};

static void *grow(void *p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return p;
    size_t n = *cap ? *cap : 1024;
    while (n < need)
        n *= 2;
    void *q = kp_realloc_array(p, n, size);
    if (q)
        *cap = n;
    return q;
}

/* Copies `len` bytes and a NUL into the names; returns their offset, or
 * NO_MODULE when out of memory (or past 4 GB of names). */
static uint32_t add_name(kp_kernel_symbols *ks, const char *s, size_t len)
{
    if (ks->names_len + len + 1 >= NO_MODULE)
        return NO_MODULE;
    char *names = grow(ks->names, &ks->names_cap, ks->names_len + len + 1, 1);
    if (!names)
        return NO_MODULE;
    ks->names = names;
    uint32_t at = (uint32_t)ks->names_len;
    memcpy(names + at, s, len);
    names[at + len] = '\0';
    ks->names_len += len + 1;
    return at;
}

static int blank(char c)
{
    return c == ' ' || c == '\t';
}

/* A byte no name holds: a frame name goes into text formats as it is. */
static int control(char c)
{
    return (unsigned char)c < 0x20 || c == 0x7f;
}

/* The fields of one line. */
typedef struct {
    uint64_t addr;
    char type;
    const char *name, *module;
    size_t name_len, module_len; /* module_len 0: the core kernel */
} line_fields;

/* Splits the line [p, end) into `f`: 0, or -1 when malformed. */
static int split_line(const char *p, const char *end, line_fields *f)
{
    uint64_t addr;
    p = kp_hex_u64(p, end, &addr);
    if (!p || p == end || !blank(*p))
        return -1;
    while (p < end && blank(*p))
        p++;
    if (p == end || blank(*p) || end - p < 2 || !blank(p[1]))
        return -1;
    f->type = *p;
    p += 2;
    while (p < end && blank(*p))
        p++;
    f->name = p;
    for (; p < end && !blank(*p); p++)
        if (control(*p))
            return -1;
    f->name_len = (size_t)(p - f->name);
    if (f->name_len == 0 || f->name_len > KP_KERNEL_SYMBOL_MAX)
        return -1;
    while (p < end && blank(*p))
        p++;
    f->module = NULL;
    f->module_len = 0;
    if (p < end) {
        if (*p != '[')
            return -1;
        f->module = ++p;
        for (; p < end && *p != ']' && !blank(*p); p++)
            if (control(*p))
                return -1;
        f->module_len = (size_t)(p - f->module);
        if (p == end || *p != ']' || f->module_len == 0 || f->module_len > KP_KERNEL_SYMBOL_MAX)
            return -1;
        for (p++; p < end && blank(*p); p++)
            ;
        if (p != end)
            return -1;
    }
    f->addr = addr;
    return 0;
}

/* t, T: functions, local and global; w, W: weak ones. */
static int is_code(char type)
{
    return type == 't' || type == 'T' || type == 'w' || type == 'W';
}

/* Orders by address, then by place in the file. */
static int by_start(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int same_module(const kp_kernel_symbols *ks, uint32_t a, uint32_t b)
{
    if (a == NO_MODULE || b == NO_MODULE)
        return a == b;
    return a == b || strcmp(ks->names + a, ks->names + b) == 0;
}

/* Sorts the entries, keeps the last one of each address and sets the
 * ends; see kernel_symbols.h. */
static void finish(kp_kernel_symbols *ks)
{
    if (ks->n == 0)
        return;
    qsort(ks->entries, ks->n, sizeof *ks->entries, by_start);
    size_t kept = 0;
    for (size_t i = 0; i < ks->n; i++) {
        if (kept > 0 && ks->entries[kept - 1].start == ks->entries[i].start)
            kept--;
        ks->entries[kept++] = ks->entries[i];
    }
    ks->n = kept;
    for (size_t i = 0; i < ks->n; i++) {
        entry *e = &ks->entries[i];
        if (i + 1 < ks->n && same_module(ks, e->module, ks->entries[i + 1].module)) {
            e->end = ks->entries[i + 1].start;
        } else {
            /* roundup(start + PAGE, PAGE), without passing 2^64 */
            uint64_t last_page = UINT64_MAX - (UINT64_MAX % PAGE) - PAGE;
            e->end = e->start >= last_page ? UINT64_MAX : (e->start / PAGE + 2) * PAGE;
        }
    }
}

kp_kernel_symbols *kp_kernel_symbols_parse(const char *text, size_t len)
{
    kp_kernel_symbols *ks = kp_calloc(1, sizeof *ks);
    if (!ks)
        goto oom;
    /* consecutive symbols of one module share its name */
    uint32_t module = NO_MODULE;
    const char *end = text + len;
    uint32_t seq = 0;
    for (const char *p = text; p < end;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *line_end = nl ? nl : end;
        line_fields f;
        if (line_end == p) {
            /* an empty line */
        } else if (split_line(p, line_end, &f) != 0) {
            ks->malformed++;
        } else if (is_code(f.type)) {
            if (f.addr == 0) {
                ks->zero++;
            } else {
                entry *entries = grow(ks->entries, &ks->cap, ks->n + 1, sizeof *entries);
                if (!entries)
                    goto oom;
                ks->entries = entries;
                entry *e = &ks->entries[ks->n];
                e->start = f.addr;
                e->seq = seq++;
                if ((e->name = add_name(ks, f.name, f.name_len)) == NO_MODULE)
                    goto oom;
                if (f.module_len == 0) {
                    e->module = NO_MODULE;
                } else if (module != NO_MODULE && strlen(ks->names + module) == f.module_len &&
                           memcmp(ks->names + module, f.module, f.module_len) == 0) {
                    e->module = module;
                } else if ((e->module = module = add_name(ks, f.module, f.module_len)) ==
                           NO_MODULE) {
                    goto oom;
                }
                ks->n++;
            }
        }
        p = nl ? nl + 1 : end;
    }
    finish(ks);
    return ks;
oom:
    kp_kernel_symbols_free(ks);
    errno = ENOMEM;
    return NULL;
}

void kp_kernel_symbols_free(kp_kernel_symbols *ks)
{
    if (!ks)
        return;
    kp_free(ks->entries);
    kp_free(ks->names);
    kp_free(ks);
}

int kp_kernel_symbols_find(const kp_kernel_symbols *ks, uint64_t addr, kp_kernel_symbol *out)
{
    /* the first entry that starts above addr */
    size_t lo = 0, hi = ks->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ks->entries[mid].start <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return 0;
    const entry *e = &ks->entries[lo - 1];
    if (addr >= e->end)
        return 0;
    out->name = ks->names + e->name;
    out->module = e->module == NO_MODULE ? NULL : ks->names + e->module;
    out->start = e->start;
    out->offset = addr - e->start;
    return 1;
}

int kp_kernel_symbols_frame_name(const kp_kernel_symbol *sym, char *buf, size_t len)
{
    int n = sym->module ? snprintf(buf, len, "[kernel:%s]%s", sym->module, sym->name)
                        : snprintf(buf, len, "[kernel]%s", sym->name);
    return n >= 0 && (size_t)n < len ? n : -1;
}

size_t kp_kernel_symbols_count(const kp_kernel_symbols *ks)
{
    return ks->n;
}

size_t kp_kernel_symbols_malformed(const kp_kernel_symbols *ks)
{
    return ks->malformed;
}

int kp_kernel_symbols_hidden(const kp_kernel_symbols *ks)
{
    return ks->n == 0 && ks->zero > 0;
}

void kp_kernel_symbols_explain_hidden(int kptr_restrict, int perf_event_paranoid, char *buf,
                                      size_t len)
{
    static const char stay[] = "kernel frames stay [kernel]";
    if (kptr_restrict == 0)
        snprintf(buf, len,
                 "kernel addresses are hidden from kprof (kernel.kptr_restrict is 0, "
                 "kernel.perf_event_paranoid is %d): %s; set kernel.perf_event_paranoid to 1 "
                 "or less, or run kprof as root (CAP_SYSLOG)",
                 perf_event_paranoid, stay);
    else if (kptr_restrict == 1)
        snprintf(buf, len,
                 "kernel addresses are hidden from kprof (kernel.kptr_restrict is 1): %s; run "
                 "kprof as root (CAP_SYSLOG), or set kernel.kptr_restrict to 0 and "
                 "kernel.perf_event_paranoid to 1 or less",
                 stay);
    else if (kptr_restrict >= 2)
        snprintf(buf, len,
                 "kernel addresses are hidden from every user (kernel.kptr_restrict is %d): %s; "
                 "set kernel.kptr_restrict to 1 and run kprof as root, or to 0 with "
                 "kernel.perf_event_paranoid at 1 or less",
                 kptr_restrict, stay);
    else
        snprintf(buf, len,
                 "kernel addresses are hidden from kprof (kernel.kptr_restrict): %s; run kprof "
                 "as root, or set kernel.kptr_restrict to 0",
                 stay);
}

/* The integer in the file at `path`, or -1. */
static int read_sysctl(const char *path)
{
    int v = -1;
    FILE *f = fopen(path, "re");
    if (f) {
        if (fscanf(f, "%d", &v) != 1)
            v = -1;
        fclose(f);
    }
    return v;
}

/* The whole file at `path` (its size in /proc is 0: read to the end), or
 * NULL with errno. */
static char *read_all(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        char *b = grow(buf, &cap, n + 65536, 1);
        if (!b) {
            errno = ENOMEM;
            goto fail;
        }
        buf = b;
        ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            goto fail;
        if (got == 0)
            break;
        n += (size_t)got;
    }
    close(fd);
    *len = n;
    return buf;
fail:;
    int saved = errno;
    kp_free(buf);
    close(fd);
    errno = saved;
    return NULL;
}

kp_kernel_symbols *kp_kernel_symbols_load(const char *path, char *err, size_t err_len)
{
    size_t len = 0;
    char *text = read_all(path, &len);
    if (!text) {
        snprintf(err, err_len,
                 "cannot read the kernel's symbols (%s: %s): kernel frames stay "
                 "[kernel]",
                 path, strerror(errno));
        return NULL;
    }
    kp_kernel_symbols *ks = kp_kernel_symbols_parse(text, len);
    kp_free(text);
    if (!ks) {
        snprintf(err, err_len, "out of memory reading the kernel's symbols (%s)", path);
        return NULL;
    }
    if (kp_kernel_symbols_hidden(ks)) {
        kp_kernel_symbols_explain_hidden(read_sysctl("/proc/sys/kernel/kptr_restrict"),
                                         read_sysctl("/proc/sys/kernel/perf_event_paranoid"), err,
                                         err_len);
    } else if (ks->n == 0) {
        snprintf(err, err_len, "%s holds no kernel code symbol: kernel frames stay [kernel]", path);
    } else {
        return ks;
    }
    kp_kernel_symbols_free(ks);
    return NULL;
}

#define _GNU_SOURCE
#include "cpu/symbols.h"

#include <elfutils/libdwfl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/eh_frame_hdr.h"
#include "cpu/mapped_files.h"
#include "kp/alloc.h"

/* ---- a module's functions -------------------------------------------------
 * dwfl_module_addrinfo (elfutils 0.188) scans the whole symbol table on each
 * call: about 120 us an address in beam.smp's 4,600 .dynsym entries. So each
 * module's code symbols are read once, from libdwfl, into a table sorted by
 * address, and looked up in O(log n) with the rules of addrinfo: a sized
 * symbol holding the address (the closest one), else the closest sizeless
 * symbol before it (an assembly label) when no sized symbol ends between
 * the two, within its section. */

typedef struct {
    uint64_t start, end; /* [start, end): sized, or up to the section's end */
    const char *name;    /* in libelf's copy of the file: lives as long as the module */
    uint32_t cover;      /* the sized symbol of [0, this] ending last, or NO_COVER */
    unsigned char sized, rank;
} fn;

#define NO_COVER UINT32_MAX

typedef struct {
    fn *fns;
    size_t n;
    int has_elf;
    uint64_t bias; /* load address minus ELF address */
    /* the file's .eh_frame_hdr (libelf's copy) and its address: the starts
     * of its functions, named or not; NULL when it has none */
    const unsigned char *hdr;
    size_t hdr_len;
    uint64_t hdr_vaddr;
} module_table;

static int binding_rank(const GElf_Sym *sym)
{
    switch (GELF_ST_BIND(sym->st_info)) {
    case STB_GLOBAL: return 3;
    case STB_WEAK: return 2;
    default: return 1;
    }
}

/* By start; at one start the one to keep first: sized, bound widest, longest. */
static int compare_fns(const void *a, const void *b)
{
    const fn *x = a, *y = b;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    if (x->sized != y->sized)
        return y->sized - x->sized;
    if (x->rank != y->rank)
        return y->rank - x->rank;
    if (x->end != y->end)
        return x->end > y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* The module's executable section `shndx` of `elf`: its end, as a load
 * address, or 0 when it is not code. */
static uint64_t code_section_end(Elf *elf, GElf_Word shndx, Dwarf_Addr bias)
{
    Elf_Scn *scn = elf ? elf_getscn(elf, shndx) : NULL;
    GElf_Shdr shdr;
    if (!scn || !gelf_getshdr(scn, &shdr) || !(shdr.sh_flags & SHF_EXECINSTR))
        return 0;
    return shdr.sh_addr + shdr.sh_size + bias;
}

/* Points t->hdr at the .eh_frame_hdr of `elf`, where it has one. */
static void find_eh_frame_hdr(module_table *t, Elf *elf)
{
    size_t names;
    if (!elf || elf_getshdrstrndx(elf, &names) != 0)
        return;
    for (Elf_Scn *scn = NULL; (scn = elf_nextscn(elf, scn)) != NULL;) {
        GElf_Shdr shdr;
        const char *name;
        if (!gelf_getshdr(scn, &shdr) || !(name = elf_strptr(elf, names, shdr.sh_name)) ||
            strcmp(name, ".eh_frame_hdr") != 0)
            continue;
        Elf_Data *data = elf_getdata(scn, NULL);
        if (data && data->d_buf) {
            t->hdr = data->d_buf;
            t->hdr_len = data->d_size;
            t->hdr_vaddr = shdr.sh_addr;
        }
        return;
    }
}

/* Reads the module's code symbols. NULL when out of memory. */
static module_table *read_table(Dwfl_Module *mod)
{
    module_table *t = kp_calloc(1, sizeof *t);
    if (!t)
        return NULL;
    GElf_Addr bias = 0;
    Elf *main_elf = dwfl_module_getelf(mod, &bias);
    t->has_elf = main_elf != NULL;
    t->bias = bias;
    find_eh_frame_hdr(t, main_elf);
    int count = dwfl_module_getsymtab(mod);
    if (count <= 1)
        return t;
    if (!(t->fns = kp_calloc((size_t)count, sizeof *t->fns))) {
        kp_free(t);
        return NULL;
    }
    /* symbols come grouped by section: remember the last one's */
    Elf *last_elf = NULL;
    GElf_Word last_shndx = SHN_UNDEF;
    uint64_t last_end = 0;
    for (int i = 1; i < count; i++) {
        GElf_Sym sym;
        GElf_Addr addr;
        GElf_Word shndx;
        Elf *elf = NULL;
        Dwarf_Addr sym_bias = 0;
        const char *name = dwfl_module_getsym_info(mod, i, &sym, &addr, &shndx, &elf, &sym_bias);
        int type = GELF_ST_TYPE(sym.st_info);
        if (!name || !*name || shndx == SHN_UNDEF || shndx >= SHN_LORESERVE ||
            (type != STT_FUNC && type != STT_NOTYPE && type != STT_GNU_IFUNC))
            continue;
        if (elf != last_elf || shndx != last_shndx) {
            last_elf = elf;
            last_shndx = shndx;
            last_end = code_section_end(elf, shndx, sym_bias);
        }
        if (last_end == 0 || addr >= last_end)
            continue; /* not code */
        fn *f = &t->fns[t->n++];
        f->start = addr;
        f->sized = sym.st_size > 0;
        f->end = f->sized && sym.st_size <= UINT64_MAX - addr ? addr + sym.st_size : last_end;
        f->name = name;
        f->rank = (unsigned char)binding_rank(&sym);
    }
    qsort(t->fns, t->n, sizeof *t->fns, compare_fns);
    /* one symbol a start: the first, by the order above */
    size_t n = 0;
    for (size_t i = 0; i < t->n; i++)
        if (n == 0 || t->fns[i].start != t->fns[n - 1].start)
            t->fns[n++] = t->fns[i];
    t->n = n;
    uint32_t cover = NO_COVER;
    for (size_t i = 0; i < n; i++) {
        if (t->fns[i].sized && (cover == NO_COVER || t->fns[i].end > t->fns[cover].end))
            cover = (uint32_t)i;
        t->fns[i].cover = cover;
    }
    return t;
}

static const fn *table_find(const module_table *t, uint64_t addr)
{
    size_t lo = 0, hi = t->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->fns[mid].start <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    const fn *f = &t->fns[lo - 1];
    if (f->sized && addr < f->end)
        return f;
    const fn *cover = f->cover == NO_COVER ? NULL : &t->fns[f->cover];
    if (cover && addr < cover->end)
        return cover; /* a function holding a later symbol */
    if (!f->sized && addr < f->end && (!cover || cover->end <= f->start))
        return f;
    return NULL;
}

/* ---- the process ----------------------------------------------------------- */

typedef struct {
    uint64_t addr;
    kp_native_symbol sym;
    unsigned char state; /* SLOT_EMPTY, or what the lookup returned */
} slot;

enum { SLOT_EMPTY, SLOT_MAPPED, SLOT_UNMAPPED };

/* The cache grows (doubling, at most half full) up to this many slots, then
 * starts again empty: a process's distinct code addresses in call chains
 * are a few thousand, a few tens of thousands for a big one. */
#define CACHE_MIN 4096
#define CACHE_MAX (1u << 18)

struct kp_symbols {
    Dwfl *dwfl;
    int pid;
    uint64_t signature; /* of the modules, to see when they change */
    size_t modules;
    slot *cache;
    size_t cache_cap, cache_used;
};

/* Debug files are looked for by build id under /usr/lib/debug (where
 * Debian's -dbgsym packages put them) and nowhere else: the standard
 * callback would also ask the debuginfod servers of DEBUGINFOD_URLS, which
 * Debian sets in login shells, and a download (up to 90 s per file by
 * default) in the middle of sampling would stall it. */
static int find_debuginfo(Dwfl_Module *mod, void **userdata, const char *modname, Dwarf_Addr base,
                          const char *file_name, const char *debuglink_file,
                          GElf_Word debuglink_crc, char **debuginfo_file_name)
{
    return dwfl_build_id_find_debuginfo(mod, userdata, modname, base, file_name, debuglink_file,
                                        debuglink_crc, debuginfo_file_name);
}

static const Dwfl_Callbacks callbacks = {
    .find_elf = dwfl_linux_proc_find_elf,
    .find_debuginfo = find_debuginfo,
};

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static void free_table(module_table *t)
{
    if (t) {
        kp_free(t->fns);
        kp_free(t);
    }
}

/* dwfl_report_end's callback for each module gone: its table goes too.
 * Its second argument is declared void * but is, as for dwfl_getmodules,
 * the address of the module's user data (libdwfl's MODCB_ARGS). */
static int module_removed(Dwfl_Module *mod, void *userdata, const char *name, Dwarf_Addr base,
                          void *arg)
{
    (void)mod, (void)name, (void)base, (void)arg;
    void **table = userdata;
    free_table(*table);
    *table = NULL;
    return DWARF_CB_OK;
}

static int free_module_table(Dwfl_Module *mod, void **userdata, const char *name, Dwarf_Addr start,
                             void *arg)
{
    (void)mod, (void)name, (void)start, (void)arg;
    free_table(*userdata);
    *userdata = NULL;
    return DWARF_CB_OK;
}

typedef struct {
    uint64_t sum;
    size_t count;
} signature;

static int sign_module(Dwfl_Module *mod, void **userdata, const char *name, Dwarf_Addr start,
                       void *arg)
{
    (void)userdata;
    signature *sig = arg;
    Dwarf_Addr end = 0;
    dwfl_module_info(mod, NULL, NULL, &end, NULL, NULL, NULL, NULL);
    uint64_t h = mix(start) ^ mix(end + 1);
    for (const char *p = name ? name : ""; *p; p++)
        h = (h ^ (unsigned char)*p) * 0x100000001b3ULL;
    /* a sum: the same set in any order gives the same signature */
    sig->sum += mix(h);
    sig->count++;
    return DWARF_CB_OK;
}

/* Reports the process's mappings again. Returns 0 or -1 with errno. */
static int report(kp_symbols *s, char *err, size_t err_len)
{
    dwfl_report_begin(s->dwfl);
    int r = kp_mapped_files_report(s->dwfl, s->pid);
    /* ends the report even on failure: the modules not reported again go */
    int end = dwfl_report_end(s->dwfl, module_removed, NULL);
    if (r > 0) {
        if (err)
            snprintf(err, err_len, "cannot read /proc/%d/maps: %s", s->pid, strerror(r));
        errno = r;
        return -1;
    }
    if (r < 0 || end != 0) {
        if (err)
            snprintf(err, err_len, "cannot read the mappings of process %d: %s", s->pid,
                     dwfl_errmsg(-1));
        errno = EIO;
        return -1;
    }
    return 0;
}

/* Whether the modules changed since the last call; updates the count. */
static int modules_changed(kp_symbols *s)
{
    signature sig = {0, 0};
    dwfl_getmodules(s->dwfl, sign_module, &sig, 0);
    uint64_t h = sig.sum ^ mix(sig.count);
    int changed = h != s->signature;
    s->signature = h;
    s->modules = sig.count;
    return changed;
}

kp_symbols *kp_symbols_open(int os_pid, char *err, size_t err_len)
{
    if (os_pid <= 0) {
        snprintf(err, err_len, "no process %d", os_pid);
        return NULL;
    }
    kp_symbols *s = kp_calloc(1, sizeof *s);
    slot *cache = kp_calloc(CACHE_MIN, sizeof *cache);
    if (!s || !cache) {
        kp_free(s);
        kp_free(cache);
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    s->cache = cache;
    s->cache_cap = CACHE_MIN;
    s->pid = os_pid;
    if (!(s->dwfl = dwfl_begin(&callbacks))) {
        snprintf(err, err_len, "cannot start libdwfl: %s", dwfl_errmsg(-1));
        kp_symbols_close(s);
        return NULL;
    }
    if (report(s, err, err_len) != 0) {
        if (errno == ENOENT || errno == ESRCH)
            snprintf(err, err_len, "no process %d", os_pid);
        kp_symbols_close(s);
        return NULL;
    }
    modules_changed(s);
    return s;
}

void kp_symbols_close(kp_symbols *s)
{
    if (!s)
        return;
    if (s->dwfl) {
        dwfl_getmodules(s->dwfl, free_module_table, NULL, 0);
        dwfl_end(s->dwfl);
    }
    kp_free(s->cache);
    kp_free(s);
}

static const char *base_name(const char *path);

typedef struct {
    void (*fn)(void *ctx, const char *file, const char *build_id, const char *path);
    void *ctx;
} each_file;

static int each_file_of(Dwfl_Module *mod, void **userdata, const char *name, Dwarf_Addr start,
                        void *arg)
{
    (void)userdata, (void)start;
    each_file *e = arg;
    const unsigned char *bits;
    GElf_Addr vaddr;
    int len = dwfl_module_build_id(mod, &bits, &vaddr);
    if (len <= 0 || len > 64 || !name)
        return DWARF_CB_OK;
    char hex[129];
    for (int i = 0; i < len; i++)
        snprintf(hex + 2 * i, 3, "%02x", bits[i]);
    e->fn(e->ctx, base_name(name), hex, name);
    return DWARF_CB_OK;
}

void kp_symbols_each_file(kp_symbols *s,
                          void (*fn)(void *ctx, const char *file, const char *build_id,
                                     const char *path),
                          void *ctx)
{
    each_file e = {fn, ctx};
    dwfl_getmodules(s->dwfl, each_file_of, &e, 0);
}

typedef struct {
    const char *module, *name;
    uint64_t addr;
    int found;
} named_symbol;

static int find_named(Dwfl_Module *mod, void **userdata, const char *modname, Dwarf_Addr start,
                      void *arg)
{
    (void)userdata, (void)start;
    named_symbol *n = arg;
    if (!modname || strcmp(base_name(modname), n->module) != 0)
        return DWARF_CB_OK;
    int count = dwfl_module_getsymtab(mod);
    for (int i = 1; i < count; i++) {
        GElf_Sym sym;
        GElf_Addr addr;
        const char *name = dwfl_module_getsym_info(mod, i, &sym, &addr, NULL, NULL, NULL);
        if (name && sym.st_shndx != SHN_UNDEF && strcmp(name, n->name) == 0) {
            n->addr = addr;
            n->found = 1;
            return DWARF_CB_ABORT;
        }
    }
    return DWARF_CB_OK;
}

int kp_symbols_find_named(kp_symbols *s, const char *module, const char *name, uint64_t *addr)
{
    named_symbol n = {module, name, 0, 0};
    dwfl_getmodules(s->dwfl, find_named, &n, 0);
    if (n.found)
        *addr = n.addr;
    return n.found ? 0 : -1;
}

struct Dwfl *kp_symbols_dwfl(kp_symbols *s)
{
    return s->dwfl;
}

size_t kp_symbols_modules(kp_symbols *s)
{
    return s->modules;
}

static void clear_cache(kp_symbols *s)
{
    memset(s->cache, 0, s->cache_cap * sizeof *s->cache);
    s->cache_used = 0;
}

int kp_symbols_refresh(kp_symbols *s)
{
    int r = report(s, NULL, 0);
    int err = errno;
    /* a failed report removed modules too */
    int changed = modules_changed(s);
    if (changed)
        clear_cache(s);
    if (r != 0) {
        errno = err;
        return -1;
    }
    return changed;
}

static const char *base_name(const char *path)
{
    if (!path)
        return "?";
    /* libdwfl calls it "[vdso: PID]" */
    if (strncmp(path, "[vdso", 5) == 0)
        return "[vdso]";
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* The lookup; *complete is 0 when out of memory left the answer without
 * the name it may have (then it must not be cached). */
static int lookup(kp_symbols *s, uint64_t addr, kp_native_symbol *out, int *complete)
{
    *complete = 1;
    Dwfl_Module *mod = dwfl_addrmodule(s->dwfl, addr);
    if (!mod)
        return -1;
    void **userdata = NULL;
    Dwarf_Addr start = 0, end = 0;
    const char *path = dwfl_module_info(mod, &userdata, &start, &end, NULL, NULL, NULL, NULL);
    /* libdwfl (0.188) answers the highest module for any address above
     * its start, the kernel's included */
    if (addr < start || addr >= end)
        return -1;
    out->module = base_name(path);
    out->name = NULL;
    out->symbol_offset = 0;
    module_table *t = *userdata;
    if (!t && !(t = *userdata = read_table(mod))) {
        *complete = 0;
        out->offset = addr - start;
        return 0;
    }
    out->offset = t->has_elf ? addr - t->bias : addr - start;
    out->function_start = 0;
    const fn *f = table_find(t, addr);
    if (f) {
        out->name = f->name;
        out->symbol_offset = addr - f->start;
    } else if (t->has_elf) {
        uint64_t at;
        if (kp_eh_frame_hdr_find(t->hdr, t->hdr_len, t->hdr_vaddr, addr - t->bias, &at) == 0)
            out->function_start = at;
    }
    return 0;
}

int kp_symbols_find_uncached(kp_symbols *s, uint64_t addr, kp_native_symbol *out)
{
    int complete;
    return lookup(s, addr, out, &complete);
}

static slot *cache_slot(slot *cache, size_t cap, uint64_t addr)
{
    size_t i = (size_t)mix(addr) & (cap - 1);
    while (cache[i].state != SLOT_EMPTY && cache[i].addr != addr)
        i = (i + 1) & (cap - 1);
    return &cache[i];
}

/* Doubles the cache, or empties it at its largest. */
static void grow_cache(kp_symbols *s)
{
    size_t cap = s->cache_cap * 2;
    slot *bigger = cap <= CACHE_MAX ? kp_calloc(cap, sizeof *bigger) : NULL;
    if (!bigger) {
        clear_cache(s);
        return;
    }
    for (size_t i = 0; i < s->cache_cap; i++)
        if (s->cache[i].state != SLOT_EMPTY)
            *cache_slot(bigger, cap, s->cache[i].addr) = s->cache[i];
    kp_free(s->cache);
    s->cache = bigger;
    s->cache_cap = cap;
}

int kp_symbols_find(kp_symbols *s, uint64_t addr, kp_native_symbol *out)
{
    slot *c = cache_slot(s->cache, s->cache_cap, addr);
    if (c->state == SLOT_EMPTY) {
        kp_native_symbol sym;
        int complete;
        int r = lookup(s, addr, &sym, &complete);
        if (!complete) {
            *out = sym;
            return r;
        }
        if ((s->cache_used + 1) * 2 > s->cache_cap) {
            grow_cache(s);
            c = cache_slot(s->cache, s->cache_cap, addr);
        }
        c->addr = addr;
        c->sym = sym;
        c->state = r == 0 ? SLOT_MAPPED : SLOT_UNMAPPED;
        s->cache_used++;
    }
    if (c->state != SLOT_MAPPED)
        return -1;
    *out = c->sym;
    return 0;
}

#define _GNU_SOURCE
#include "cpu/symbols.h"

#include <elfutils/libdwfl.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "kp/alloc.h"

/* Direct-mapped: a profile's hot native addresses are a few thousand, and a
 * slot lost to a collision costs one libdwfl lookup (about a microsecond). */
#define CACHE_SLOTS 8192

typedef struct {
    uint64_t addr;
    kp_native_symbol sym;
    unsigned char state; /* SLOT_EMPTY, or what the lookup returned */
} slot;

enum { SLOT_EMPTY, SLOT_MAPPED, SLOT_UNMAPPED };

struct kp_symbols {
    Dwfl *dwfl;
    int pid;
    uint64_t signature; /* of the modules, to see when they change */
    size_t modules;
    slot *cache;
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
    int r = dwfl_linux_proc_report(s->dwfl, s->pid);
    /* ends the report even on failure: the modules not reported again go */
    int end = dwfl_report_end(s->dwfl, NULL, NULL);
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
    slot *cache = kp_calloc(CACHE_SLOTS, sizeof *cache);
    if (!s || !cache) {
        kp_free(s);
        kp_free(cache);
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    s->cache = cache;
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
    if (s->dwfl)
        dwfl_end(s->dwfl);
    kp_free(s->cache);
    kp_free(s);
}

size_t kp_symbols_modules(kp_symbols *s)
{
    return s->modules;
}

int kp_symbols_refresh(kp_symbols *s)
{
    int r = report(s, NULL, 0);
    int err = errno;
    /* a failed report removed modules too */
    int changed = modules_changed(s);
    if (changed)
        memset(s->cache, 0, CACHE_SLOTS * sizeof *s->cache);
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

int kp_symbols_find_uncached(kp_symbols *s, uint64_t addr, kp_native_symbol *out)
{
    Dwfl_Module *mod = dwfl_addrmodule(s->dwfl, addr);
    if (!mod)
        return -1;
    Dwarf_Addr start = 0, end = 0;
    const char *path = dwfl_module_info(mod, NULL, &start, &end, NULL, NULL, NULL, NULL);
    /* libdwfl (0.188) answers the highest module for any address above
     * its start, the kernel's included */
    if (addr < start || addr >= end)
        return -1;
    out->module = base_name(path);
    GElf_Addr bias = 0;
    out->offset = dwfl_module_getelf(mod, &bias) ? addr - bias : addr - start;
    GElf_Off offset = 0;
    GElf_Sym sym;
    const char *name = dwfl_module_addrinfo(mod, addr, &offset, &sym, NULL, NULL, NULL);
    if (name && *name) {
        out->name = name;
        out->symbol_offset = offset;
    } else {
        out->name = NULL;
        out->symbol_offset = 0;
    }
    return 0;
}

int kp_symbols_find(kp_symbols *s, uint64_t addr, kp_native_symbol *out)
{
    slot *c = &s->cache[mix(addr) & (CACHE_SLOTS - 1)];
    if (c->state == SLOT_EMPTY || c->addr != addr) {
        c->addr = addr;
        c->state = kp_symbols_find_uncached(s, addr, &c->sym) == 0 ? SLOT_MAPPED : SLOT_UNMAPPED;
    }
    if (c->state != SLOT_MAPPED)
        return -1;
    *out = c->sym;
    return 0;
}

/* A node's JIT code: names and Erlang callers; see jit_code.h. */
#define _GNU_SOURCE
#include "cpu/jit_code.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "common/u64_map.h"
#include "cpu/erlang_stack.h"
#include "cpu/jit_debug.h"
#include "kp/alloc.h"

struct kp_jit_code {
    int os_pid;
    kp_jit_names names;
    char map_path[4096];
    kp_perf_map *map;
    int have_descriptor;
    uint64_t descriptor;
    kp_jit_debug_ref *refs; /* the list the names were loaded from */
    size_t n_refs, refs_cap;
    int frame_pointers;
    uint64_t normal_exit;
    kp_u64_map checks; /* return address -> 1 + after a call; saved-E kinds */
    char describe[256];
};

static int read_node(void *ctx, uint64_t addr, void *buf, size_t len)
{
    const kp_jit_code *c = ctx;
    struct iovec local = {buf, len}, remote = {(void *)(uintptr_t)addr, len};
    return process_vm_readv(c->os_pid, &local, 1, &remote, 1, 0) == (ssize_t)len ? 0 : -1;
}

/* The registrations' list into `*refs` (grown as needed): how many, or -1. */
static long list_refs(kp_jit_code *c, kp_jit_debug_ref **refs, size_t *cap)
{
    return kp_jit_debug_list_all(read_node, c, c->descriptor, refs, cap);
}

/* beam.smp's writable mappings of the node, scanned for the descriptor
 * (kp_jit_debug_scan) when no symbol says where it is. */
static int scan_descriptor(kp_jit_code *c, uint64_t *descriptor)
{
    char path[64], line[4352];
    snprintf(path, sizeof path, "/proc/%d/maps", c->os_pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        unsigned long long start, end;
        char perms[8];
        int name_at = 0;
        if (sscanf(line, "%llx-%llx %7s %*s %*s %*s %n", &start, &end, perms, &name_at) < 3 ||
            !name_at || perms[1] != 'w')
            continue;
        char *name = line + name_at;
        name[strcspn(name, "\n")] = '\0';
        const char *base = strrchr(name, '/');
        if (!base || strcmp(base + 1, "beam.smp") != 0)
            continue;
        found = kp_jit_debug_scan(read_node, c, start, end - start, descriptor) == 0;
    }
    fclose(f);
    return found ? 0 : -1;
}

/* Lists the registrations and reads them: into a fresh map, which
 * replaces the names, when they name the code; else only up to the
 * emulator's entry, for the callers' walk. Returns 0, or -1. */
static int load_registrations(kp_jit_code *c)
{
    int named = c->names == KP_JIT_NAMES_REGISTRATIONS;
    kp_perf_map *map = named ? kp_perf_map_create() : NULL;
    kp_jit_debug_stats st;
    long n = !named || map ? list_refs(c, &c->refs, &c->refs_cap) : -1;
    if (n < 0 || kp_jit_debug_load_refs(read_node, c, c->refs, (size_t)n, map, &st) != 0) {
        kp_perf_map_free(map);
        return -1;
    }
    c->n_refs = (size_t)n;
    if (st.normal_exit) {
        c->normal_exit = st.normal_exit;
        c->frame_pointers = st.frame_layout != 0;
    }
    if (named) {
        kp_perf_map_free(c->map);
        c->map = map;
        kp_u64_map_clear(&c->checks);
    }
    return 0;
}

kp_jit_code *kp_jit_code_open(int os_pid, const char *map_path, int map_stale, kp_symbols *symbols,
                              char *err, size_t err_len)
{
    kp_jit_code *c = kp_calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    c->os_pid = os_pid;
    c->frame_pointers = 1; /* as a perf map's node has, unless told */
    snprintf(c->map_path, sizeof c->map_path, "%s", map_path);
    int map_errno = ENOENT;
    if (!map_stale) {
        c->map = kp_perf_map_create();
        if (!c->map) {
            snprintf(err, err_len, "out of memory");
            kp_jit_code_free(c);
            return NULL;
        }
        if (kp_perf_map_refresh(c->map, map_path) >= 0) {
            c->names = KP_JIT_NAMES_PERF_MAP;
        } else {
            map_errno = errno;
            kp_perf_map_free(c->map);
            c->map = NULL;
        }
    }
    if (!c->map)
        c->names = KP_JIT_NAMES_REGISTRATIONS;
    c->have_descriptor =
        kp_symbols_find_named(symbols, "beam.smp", "__jit_debug_descriptor", &c->descriptor) == 0 ||
        scan_descriptor(c, &c->descriptor) == 0;
    int loaded = c->have_descriptor && load_registrations(c) == 0;
    if (c->names == KP_JIT_NAMES_REGISTRATIONS && (!loaded || !c->normal_exit)) {
        if (map_errno == EACCES || map_errno == EPERM)
            snprintf(err, err_len,
                     "kprof may not read the node's perf map (%s: %s) nor its memory: run "
                     "kprof as root, or as the node's user with CAP_SYS_PTRACE",
                     map_path, strerror(map_errno));
        else
            snprintf(err, err_len,
                     "cannot read the JIT's code registrations in the node's memory (%s), and "
                     "the node writes no perf map: start it with +JPperf true",
                     c->have_descriptor ? "unreadable or malformed" : "not found in beam.smp");
        kp_jit_code_free(c);
        return NULL;
    }
    snprintf(c->describe, sizeof c->describe, "JIT code named from %s; Erlang callers %s",
             c->names == KP_JIT_NAMES_PERF_MAP ? "the node's perf map"
                                               : "the JIT's registrations (no perf map needed)",
             c->frame_pointers ? "read from each process's stack and its frame pointers"
                               : "read from each process's stack");
    return c;
}

void kp_jit_code_free(kp_jit_code *c)
{
    if (!c)
        return;
    kp_perf_map_free(c->map);
    kp_free(c->refs);
    kp_u64_map_free(&c->checks);
    kp_free(c);
}

kp_jit_names kp_jit_code_names(const kp_jit_code *c)
{
    return c->names;
}

int kp_jit_code_frame_pointers(const kp_jit_code *c)
{
    return c->frame_pointers;
}

uint64_t kp_jit_code_normal_exit(const kp_jit_code *c)
{
    return c->normal_exit;
}

const char *kp_jit_code_describe(const kp_jit_code *c)
{
    return c->describe;
}

const kp_jit_symbol *kp_jit_code_find(const kp_jit_code *c, uint64_t addr)
{
    return kp_perf_map_find(c->map, addr);
}

/* Has the registrations' list changed since the names were loaded? */
static int list_changed(kp_jit_code *c)
{
    kp_jit_debug_ref *now = NULL;
    size_t cap = 0;
    long n = list_refs(c, &now, &cap);
    int changed =
        n < 0 ? -1
              : (size_t)n != c->n_refs || (n && memcmp(now, c->refs, (size_t)n * sizeof *now) != 0);
    kp_free(now);
    return changed;
}

int kp_jit_code_refresh(kp_jit_code *c)
{
    if (c->names == KP_JIT_NAMES_PERF_MAP) {
        int added = kp_perf_map_refresh(c->map, c->map_path);
        if (added > 0)
            kp_u64_map_clear(&c->checks);
        return added > 0 ? 1 : added < 0 && errno != ENOMEM ? -1 : 0;
    }
    int changed = list_changed(c);
    if (changed <= 0)
        return changed;
    return load_registrations(c) == 0 ? 1 : -1;
}

/* Cached answers per return address: bit 0 known, bit 1 after a call. */
static int is_return(void *ctx, uint64_t ret)
{
    kp_jit_code *c = ctx;
    uint32_t known;
    if (kp_u64_map_get(&c->checks, ret, &known) && (known & 1))
        return (int)(known >> 1 & 1);
    int after = kp_erlang_stack_after_call(read_node, c, ret);
    uint32_t prior = 0;
    kp_u64_map_get(&c->checks, ret, &prior);
    (void)kp_u64_map_put(&c->checks, ret, (prior & ~3u) | 1u | (uint32_t)after << 1);
    return after;
}

/* Bytes readable from `addr` up to its page's end, at most `len`: a read
 * that crosses into an unmapped page fails whole. */
static size_t page_piece(uint64_t addr, size_t len)
{
    size_t left = 4096 - (size_t)(addr & 4095);
    return len < left ? len : left;
}

size_t kp_jit_code_callers(kp_jit_code *c, uint64_t e, const uint8_t *copy, size_t copy_len,
                           uint64_t *out, size_t cap, int *complete)
{
    uint64_t words[512];
    size_t k = 0, off = 0;
    *complete = 0;
    if (!c->normal_exit || (e & 7))
        return 0;
    while (copy && copy_len - off >= 8 && k < cap && !*complete) {
        size_t n = (copy_len - off) / 8;
        if (n > sizeof words / 8)
            n = sizeof words / 8;
        memcpy(words, copy + off, n * 8);
        k += kp_erlang_stack_walk(c->map, words, n, c->normal_exit, is_return, c, out + k, cap - k,
                                  complete);
        off += n * 8;
    }
    for (uint64_t at = e + off, end = at + KP_JIT_STACK_READ_MAX;
         at < end && k < cap && !*complete;) {
        size_t len = page_piece(at, sizeof words);
        if (read_node(c, at, words, len) != 0)
            break;
        k += kp_erlang_stack_walk(c->map, words, len / 8, c->normal_exit, is_return, c, out + k,
                                  cap - k, complete);
        at += len;
    }
    return k;
}

int kp_jit_code_saved_e(kp_jit_code *c, uint64_t ret, const kp_jit_caller_regs *regs, uint64_t *e)
{
    /* cached beside the after-call bits: bit 2 known, bits 3-4 the kind,
     * bits 5 on the offset */
    uint32_t known = 0;
    kp_u64_map_get(&c->checks, ret, &known);
    if (!(known & 4)) {
        uint8_t code[8];
        unsigned offset = 0;
        kp_saved_e kind = read_node(c, ret, code, sizeof code) == 0
                              ? kp_erlang_stack_saved_e(code, sizeof code, &offset)
                              : KP_SAVED_E_UNKNOWN;
        if (offset >= 1u << 26)
            kind = KP_SAVED_E_UNKNOWN;
        known = (known & 3u) | 4u | (uint32_t)kind << 3 | offset << 5;
        (void)kp_u64_map_put(&c->checks, ret, known);
    }
    kp_saved_e kind = (kp_saved_e)(known >> 3 & 3);
    unsigned offset = known >> 5;
    if (kind == KP_SAVED_E_RBP && regs->rbp_known) {
        *e = regs->rbp;
        return 1;
    }
    /* Process: Eterm *htop; Eterm *stop; side by side in every release */
    uint64_t saved[2];
    if (kind != KP_SAVED_E_PROCESS || !regs->c_p_known || !regs->htop_known || (regs->c_p & 7) ||
        offset < 8 || read_node(c, regs->c_p + offset - 8, saved, sizeof saved) != 0 ||
        saved[0] != regs->htop)
        return 0;
    *e = saved[1];
    return 1;
}

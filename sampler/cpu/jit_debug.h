/* The JIT's registrations with GDB's JIT interface, read from outside: how
 * kprof names a node's JIT code when the node was not started with
 * +JPperf (no /tmp/perf-PID.map).
 *
 * On Linux the BEAM JIT registers every module's code with GDB, flag or
 * no flag: a list hangs off the exported `__jit_debug_descriptor`
 *   struct { u32 version (1); u32 action_flag; entry *relevant; entry *first; }
 *   entry:  { entry *next; entry *prev; u8 *symfile; u64 symfile_size; }
 * newest first, and each entry's "symfile" is BEAM's own record (not an
 * ELF file) of one module's code (beam_jit_metadata.cpp):
 *   OTP 25 and later, tagged, fields unaligned and little-endian:
 *     u32 header (0 emulator, 1 module); u32 pad; then
 *     emulator: i32 frame_layout; u32 pad; u64 normal_exit    (32 bytes)
 *     module:   u64 base; u32 range_count; u32 code_size;
 *               u16 name_length (NUL included); name; up to byte 32 + name_length
 *     then range_count ranges, each
 *               u32 start; u32 end (offsets from base); u32 line_count;
 *               u16 name_length; name (NUL-terminated); 2 bytes of pad;
 *               line_count lines: u32 start; u32 line; u16 file_length;
 *               file (NUL-terminated); 2 bytes of pad
 *   OTP 24, flat:
 *     emulator: u64 0; u64 normal_exit                         (16 bytes)
 *     module:   u64 range_count; u64 base; u64 code_size; name NUL;
 *               range_count x { u64 start; u64 end (absolute); name NUL }
 * Range names are the perf map's: "timer:apply_after/4",
 * "timer:apply_after/4-CodeInfoPrologue", "timer::codeHeader",
 * "global::process_main".
 *
 * The node is never trusted: every length is checked against the bytes
 * read, and an entry must be consumed exactly. Single-threaded. */
#ifndef KP_CPU_JIT_DEBUG_H
#define KP_CPU_JIT_DEBUG_H

#include <stddef.h>
#include <stdint.h>

#include "cpu/perf_map.h"

/* The largest symfile read: erl_parse's, the biggest module of OTP, is
 * 126 kB. */
#define KP_JIT_DEBUG_MAX_SYMFILE (16u << 20)
/* The most entries walked: one per module ever loaded and not purged. */
#define KP_JIT_DEBUG_MAX_ENTRIES 100000u

typedef enum {
    KP_JIT_DEBUG_EMULATOR, /* the emulator's own facts */
    KP_JIT_DEBUG_MODULE,   /* one module's code (or the JIT's "global" code) */
} kp_jit_debug_kind;

typedef struct {
    kp_jit_debug_kind kind;
    int tagged; /* 1: OTP 25 and later's format, 0: OTP 24's */
    /* KP_JIT_DEBUG_EMULATOR: 0 when Erlang frames have only return
     * addresses, 1 with frame pointers (+JPperf fp); -1 when the format
     * does not say (OTP 24). And the address of beam_normal_exit, the
     * return address at the bottom of every process's stack. */
    int frame_layout;
    uint64_t normal_exit;
    /* KP_JIT_DEBUG_MODULE: where its code is, [base, base + code_size);
     * its name, not NUL-terminated, pointing into the parsed bytes; how
     * many ranges it has. */
    uint64_t base, code_size;
    const char *module;
    size_t module_len;
    uint32_t n_ranges;
} kp_jit_debug_entry;

/* One range of a module: [start, end) absolute, its name (not
 * NUL-terminated, pointing into the parsed bytes). Returns 0 to go on. */
typedef int (*kp_jit_debug_range_fn)(void *ctx, uint64_t start, uint64_t end, const char *name,
                                     size_t name_len);

/* Parses one symfile, `buf[0..len)`, of either format. Returns 0 with
 * `*entry` set and, for a module, `range` (when not NULL) called for each
 * range in order, only once the whole entry was found well-formed: each
 * range within the module's code, none empty; -1 when the bytes are not an
 * entry of either format, or `range` returned non-zero. */
int kp_jit_debug_parse(const uint8_t *buf, size_t len, kp_jit_debug_entry *entry,
                       kp_jit_debug_range_fn range, void *ctx);

/* Reads `len` bytes of the node at `addr` into `buf`. Returns 0, or -1
 * when they cannot all be read. */
typedef int (*kp_jit_debug_read_fn)(void *ctx, uint64_t addr, void *buf, size_t len);

/* One entry of the list: where it is, and its symfile. */
typedef struct {
    uint64_t entry, symfile, size;
} kp_jit_debug_ref;

/* The list of the descriptor at `descriptor`, newest first as linked, into
 * `refs` (room for `cap`). Walks it again (up to 4 times in all) when the
 * descriptor's first entry changed during the walk, or a link read back
 * wrong (an entry being added or removed meanwhile). Returns how many
 * entries; 0 when the JIT has registered nothing yet; -1 when the
 * descriptor cannot be read or is not one (version other than 1), or the
 * list stays inconsistent (a link that cannot be read, links that go
 * round); -2 when it is longer than `cap`. */
long kp_jit_debug_list(kp_jit_debug_read_fn read, void *ctx, uint64_t descriptor,
                       kp_jit_debug_ref *refs, size_t cap);

/* The same into `*refs`, of room `*cap` (NULL and 0 at first), grown as
 * the list needs up to KP_JIT_DEBUG_MAX_ENTRIES (the caller frees it).
 * Returns as kp_jit_debug_list, but -2 only past that bound; -1 also when
 * memory runs out. */
long kp_jit_debug_list_all(kp_jit_debug_read_fn read, void *ctx, uint64_t descriptor,
                           kp_jit_debug_ref **refs, size_t *cap);

/* Where the descriptor is when no symbol says (OTP 29 builds beam.smp
 * with hidden visibility: its .dynsym has no __jit_debug_descriptor): the
 * 8-aligned place in [start, start + len) (beam.smp's writable segment)
 * holding { 1, 0..2, 0 or 8-aligned, 8-aligned and not 0 } whose list
 * kp_jit_debug_list reads whole and holds the emulator's entry among its
 * 8 oldest.
 * Returns 0 with `*descriptor` set when exactly one place does; -1 when
 * none or several do, or the region cannot be read. */
int kp_jit_debug_scan(kp_jit_debug_read_fn read, void *ctx, uint64_t start, uint64_t len,
                      uint64_t *descriptor);

/* What kp_jit_debug_load found. */
typedef struct {
    size_t modules, ranges;
    size_t skipped; /* entries unreadable or malformed */
    int tagged;     /* the format of the last entry parsed */
    int frame_layout;
    uint64_t normal_exit; /* 0 when no emulator entry was found */
} kp_jit_debug_stats;

/* Reads every registration of the descriptor at `descriptor` into `map`,
 * oldest first, so that where a purged module's code was reused the newer
 * entry wins (kp_perf_map's rule): each range becomes the entry the perf
 * map's line "START SIZE $NAME" would, so that frames are named alike
 * either way. Returns 0 with `*stats` set, or -1 when the list cannot be
 * read (kp_jit_debug_list) or memory runs out. */
int kp_jit_debug_load(kp_jit_debug_read_fn read, void *ctx, uint64_t descriptor, kp_perf_map *map,
                      kp_jit_debug_stats *stats);

/* As kp_jit_debug_load, from the `n` registrations `refs` that
 * kp_jit_debug_list gave (newest first), for a caller that keeps the list.
 * With `map` NULL it reads only up to the emulator's entry, for its stats
 * (`frame_layout`, `normal_exit`), where a perf map names the code.
 * Returns 0 with `*stats` set, or -1 when memory runs out. */
int kp_jit_debug_load_refs(kp_jit_debug_read_fn read, void *ctx, const kp_jit_debug_ref *refs,
                           size_t n, kp_perf_map *map, kp_jit_debug_stats *stats);

#endif

/* Names of native code in another process (a node's beam.smp, its shared
 * libraries and NIFs), from the ELF files mapped into it (opened as
 * cpu/mapped_files.h says: the node's own, from any mount namespace), with
 * elfutils' libdwfl: .symtab when the file has one or its build id leads to a debug
 * file under /usr/lib/debug, else .dynsym (Debian's beam.smp has only that:
 * most of its functions have no name there, and are told by their offset).
 * JIT code is in no file: the perf map names it (cpu/perf_map.h).
 *
 * Each module's code symbols are read once, at the first lookup in it, into
 * a table sorted by address (libdwfl's own lookup scans the whole symbol
 * table on every call), and named as dwfl_module_addrinfo would, but for
 * code only: an address in data gets no name. Samples repeat the same few
 * thousand addresses, so answers are also cached per address.
 * Single-threaded: one per thread that uses it.
 * libdwfl allocates its own memory (not through kp_malloc): its failures are
 * reported as errors, not as ENOMEM. */
#ifndef KP_CPU_SYMBOLS_H
#define KP_CPU_SYMBOLS_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    /* The symbol covering the address, or NULL when no symbol of the module
     * covers it (an unnamed static function of a stripped file). */
    const char *name;
    /* The basename of the mapped file: "beam.smp", "libc.so.6", or what
     * /proc/PID/maps calls an unnamed mapping libdwfl reports ("[vdso]"). */
    const char *module;
    /* The address in the file's own terms (its ELF virtual address: the
     * load bias taken away), as `addr2line -e FILE` and `nm` take it, for
     * text like "beam.smp+0x1234"; the offset from the module's start when
     * the file cannot be read. */
    uint64_t offset;
    /* addr minus the symbol's start, when `name` is set; else 0. */
    uint64_t symbol_offset;
    /* When `name` is NULL: the start of the function holding the address,
     * in the file's terms as `offset`, from the file's unwind tables
     * (cpu/eh_frame_hdr.h), so that an unnamed function has a name of its own that stays
     * the same for that build of the file ("beam.smp@0x7ddb0"); 0 when the
     * tables cover no function there. */
    uint64_t function_start;
} kp_native_symbol;

typedef struct kp_symbols kp_symbols;
struct Dwfl;

/* Reads the mappings of process `os_pid` (/proc/PID/maps; the ELF files are
 * opened at the first lookup in each). NULL on failure, with a one-line
 * reason in `err` (such as "no process 123", or "cannot read
 * /proc/123/maps: Permission denied"). */
kp_symbols *kp_symbols_open(int os_pid, char *err, size_t err_len);

/* Frees everything; NULL does nothing. */
void kp_symbols_close(kp_symbols *syms);

/* Reads the process's mappings again, for libraries mapped since (a NIF
 * loaded later) or gone. Modules that did not move keep what was read of
 * their files, so this costs about one read of /proc/PID/maps: fine once a
 * second. Returns 1 when the mappings of files changed (the cache was
 * emptied), 0 when they did not, -1 with errno when they could not be read
 * (ESRCH or ENOENT: the process is gone; then no address is found). */
int kp_symbols_refresh(kp_symbols *syms);

/* Fills `out` for the native code address `addr`. Returns 0, or -1 when no
 * file of the process maps `addr`: not native code of this process (JIT
 * code, or garbage in a call chain). The strings in `out` stay valid until
 * the next kp_symbols_refresh or kp_symbols_close. */
int kp_symbols_find(kp_symbols *syms, uint64_t addr, kp_native_symbol *out);

/* The same without the cache (and without filling it): for tests and
 * benchmarks. */
int kp_symbols_find_uncached(kp_symbols *syms, uint64_t addr, kp_native_symbol *out);

/* The address in the process of the symbol `name` (code or data: such as
 * the JIT's __jit_debug_descriptor) of the mapped file whose basename is
 * `module`, from the file's .symtab, its debug file's, or its .dynsym.
 * Returns 0 with `*addr` set, or -1 when no such file or symbol is known. */
int kp_symbols_find_named(kp_symbols *syms, const char *module, const char *name, uint64_t *addr);

/* The libdwfl session holding the process's modules, for a
 * cpu/unwind.h unwinder to share (it reads the same files' CFI). Owned by
 * `syms`; kp_symbols_refresh reports the modules again. */
struct Dwfl *kp_symbols_dwfl(kp_symbols *syms);

/* Calls `fn` for each mapped file known now that has a build id: its
 * basename (as kp_native_symbol.module), its build id in hex, and its
 * path as the process maps it. For naming a recording again later from
 * the files' debug files (cpu/debug_names.h). */
void kp_symbols_each_file(kp_symbols *syms,
                          void (*fn)(void *ctx, const char *file, const char *build_id,
                                     const char *path),
                          void *ctx);

/* Modules (mapped files) known now. */
size_t kp_symbols_modules(kp_symbols *syms);

#endif

/* The kernel's own symbols, from /proc/kallsyms, to name the kernel frames
 * of native CPU samples as `perf report` does. Each line of the file is
 *   ffffffff82266810 T schedule
 *   ffffffffc0a01000 t nft_do_chain	[nf_tables]
 * (address in hex, a type letter, the name, and for a module's symbols a
 * TAB and the module in brackets). Only code is kept: the types t, T, w and
 * W. A symbol covers the addresses from its own up to the next symbol of the
 * same part (the core kernel, or one module); the last symbol of a part
 * covers up to the end of the page after its own, so that the gaps between
 * the core kernel, the modules and BPF code are not named after their
 * neighbours. Where several symbols share an address, the one the file
 * lists last names it. These are perf's rules (symbols__fixup_end, then
 * symbols__fixup_duplicate, which keeps the one symbol of non-zero size):
 * an address gets the name `perf report` gives it.
 *
 * The file is read once, when a recording starts: a table sorted by address
 * answers each lookup in O(log n), without allocating. The table is
 * read-only after loading: any number of threads may look up at once.
 *
 * Kernel frames are named `[kernel]NAME` for the core kernel and
 * `[kernel:MODULE]NAME` for a module's code (`[kernel:nf_tables]nft_do_chain`,
 * `[kernel:bpf]bpf_prog_6deef7357e7b4530_sd_fw_egress`), after kprof's
 * `[OBJECT]name` for native frames (`[vm]erts_schedule`,
 * `[libc.so.6]epoll_wait`); perf shows the same as `NAME ([kernel.kallsyms])`
 * and `NAME ([MODULE])`. An address no symbol covers stays `[kernel]`. The
 * offset within the function is not part of the name: one frame per
 * function, as in a flame graph. */
#ifndef KP_CPU_KERNEL_SYMBOLS_H
#define KP_CPU_KERNEL_SYMBOLS_H

#include <stddef.h>
#include <stdint.h>

typedef struct kp_kernel_symbols kp_kernel_symbols;

typedef struct {
    const char *name;   /* NUL-terminated, never empty */
    const char *module; /* NUL-terminated, without brackets; NULL for the
                         * core kernel */
    uint64_t start;     /* the symbol's address */
    uint64_t offset;    /* the address looked up, minus start */
} kp_kernel_symbol;

/* Where the kernel's symbols are. */
#define KP_KALLSYMS_PATH "/proc/kallsyms"

/* Reads the kernel's symbols from `path` (KP_KALLSYMS_PATH; another path
 * for tests) and sorts them: call it once per recording. Returns the
 * table, or NULL with one line in `err` that says why and, where something
 * would allow it, what:
 *   - the file holds only zero addresses: the kernel hides them from this
 *     reader (kernel.kptr_restrict, kernel.perf_event_paranoid and
 *     CAP_SYSLOG decide; see kp_kernel_symbols_explain_hidden);
 *   - the file cannot be read, or holds no code symbol;
 *   - out of memory.
 * A NULL table is a normal outcome: kernel frames then stay `[kernel]`. */
kp_kernel_symbols *kp_kernel_symbols_load(const char *path, char *err, size_t err_len);

/* The same parser on `len` bytes of kallsyms text (the last line may lack
 * its '\n'), without touching the system: for tests and fuzzing. Lines of
 * other types are ignored; malformed lines (no hex address of at most 16
 * digits, no single-letter type, no name, a module without its closing
 * bracket, a name or module longer than KP_KERNEL_SYMBOL_MAX or holding a
 * control character) are skipped and counted
 * (kp_kernel_symbols_malformed). Returns the table, possibly empty or
 * hidden, or NULL with errno ENOMEM. */
kp_kernel_symbols *kp_kernel_symbols_parse(const char *text, size_t len);

/* Frees the table; NULL does nothing. */
void kp_kernel_symbols_free(kp_kernel_symbols *ks);

/* The symbol that covers `addr`: returns 1 with `*out` filled, or 0 when
 * no symbol does (then `*out` is untouched). The strings of `*out` are
 * valid until kp_kernel_symbols_free. Never allocates. */
int kp_kernel_symbols_find(const kp_kernel_symbols *ks, uint64_t addr, kp_kernel_symbol *out);

/* Writes the frame name of `sym` ("[kernel]NAME" or "[kernel:MODULE]NAME")
 * into `buf`, NUL-terminated. Returns its length, or -1 when `len` is too
 * short (then `buf` holds nothing useful). */
int kp_kernel_symbols_frame_name(const kp_kernel_symbol *sym, char *buf, size_t len);

/* Code symbols that can be found. */
size_t kp_kernel_symbols_count(const kp_kernel_symbols *ks);
/* Lines skipped as malformed. */
size_t kp_kernel_symbols_malformed(const kp_kernel_symbols *ks);
/* 1 when the text held code symbols but every one at address 0: the
 * kernel hid the addresses from the reader (nothing can be found then). */
int kp_kernel_symbols_hidden(const kp_kernel_symbols *ks);

/* Writes into `buf` the one line that says why the kernel hides its
 * addresses from this reader and what would show them, from the values
 * of kernel.kptr_restrict and kernel.perf_event_paranoid (-1 when
 * unknown): with kptr_restrict 0 the addresses show to a reader with
 * CAP_SYSLOG or when perf_event_paranoid is 1 or less; with 1, only with
 * CAP_SYSLOG; with 2, never. */
void kp_kernel_symbols_explain_hidden(int kptr_restrict, int perf_event_paranoid, char *buf,
                                      size_t len);

/* The longest name kept (the kernel's KSYM_NAME_LEN is 512). */
#define KP_KERNEL_SYMBOL_MAX 512

#endif

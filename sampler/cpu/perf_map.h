/* The JIT's perf map: a node started with `erl +JPperf true` (or map)
 * appends one line per piece of code it emits to /tmp/perf-<ospid>.map,
 *   0x7f894dc21000 68 $global::apply_fun_shared
 *   0x7f894dc279d0 30 $erl_init:'-restart/0-fun-0-'/0-CodeInfoPrologue
 *   0x7f894dc27a00 50 $erl_init:'-restart/0-fun-0-'/0
 *   0x7fb3395ff340 100 $my mod::codeHeader
 * (start in hex with 0x, size in hex, then the name up to the end of the
 * line: a module's header and footer carry the module's name unquoted, so a
 * name may hold spaces). Modules are written as they load; a module loaded
 * again, or another one, may get code at the addresses of one that was
 * purged, so a later line wins over the earlier ones it overlaps.
 *
 * This reads the file as it grows and answers which entry holds an address,
 * in O(log n). Single-threaded: one map per thread that uses it. */
#ifndef KP_CPU_PERF_MAP_H
#define KP_CPU_PERF_MAP_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    KP_JIT_ERLANG,   /* "$mod:fun/arity": the body of an Erlang function */
    KP_JIT_PROLOGUE, /* "$mod:fun/arity-CodeInfoPrologue": its header and
                      * prologue, which a profile counts as the function */
    KP_JIT_RUNTIME,  /* anything else: "$global::apply_fun_shared",
                      * "$lists::codeHeader", "$lists::codeFooter", ... */
} kp_jit_kind;

typedef struct {
    uint64_t start, size; /* [start, start + size), size > 0 */
    /* The name without its leading '$' (the whole name when it has none),
     * followed by a NUL. */
    const char *text;
    /* KP_JIT_ERLANG and KP_JIT_PROLOGUE: the module's and the function's
     * atom texts, unquoted and unescaped ('-restart/0-fun-0-' becomes
     * -restart/0-fun-0-, 'it\'s' becomes it's), in UTF-8, NOT followed by a
     * NUL; and the arity (0..255). NULL, 0 and 0 for KP_JIT_RUNTIME. */
    const char *module, *function;
    uint32_t text_len, module_len, function_len;
    uint32_t arity;
    kp_jit_kind kind;
} kp_jit_symbol;

typedef struct kp_perf_map kp_perf_map;

/* An empty map, or NULL when out of memory. */
kp_perf_map *kp_perf_map_create(void);
/* Closes the followed file and frees everything; NULL does nothing. */
void kp_perf_map_free(kp_perf_map *map);

/* Writes the path where the JIT of the node with OS pid `os_pid` writes its
 * map ("/tmp/perf-<os_pid>.map") into `buf`. Returns 0, or -1 when `len` is
 * too short. */
int kp_perf_map_path(int os_pid, char *buf, size_t len);

/* Reads the whole lines appended to the file at `path` since the previous
 * call and adds their entries. The first call opens the file and binds the
 * map to it; later ones go on from where the previous one stopped, through
 * the same descriptor (a line still being written is kept and completed by
 * the next call), so a call when nothing changed costs one read() that
 * returns 0. A file replaced under the same path is not noticed: a new node
 * has a new OS pid.
 * Returns the number of entries added, or -1 with errno: ENOENT when the
 * file does not exist (yet: call again later), EINVAL when `path` is not the
 * path of the first call, ENOMEM when out of memory (the lines not added yet
 * are kept and added by the next call), or an error of open() or read(). */
int kp_perf_map_refresh(kp_perf_map *map, const char *path);

/* The same parser on `len` bytes of text holding whole lines (the last one
 * may lack its '\n'), independent of the followed file: for tests and
 * fuzzing. Malformed lines are skipped and counted (kp_perf_map_malformed);
 * empty lines are ignored. Returns the number of entries added, or -1 with
 * errno ENOMEM when out of memory (then the lines before the one that could
 * not be added are in the map, and the map stays usable). */
int kp_perf_map_add_text(kp_perf_map *map, const char *text, size_t len);

/* The entry whose [start, start + size) holds `addr`, or NULL. Each line
 * added removes the earlier entries it overlaps (the code they named was
 * purged). The entry, not its strings, is valid until the next
 * kp_perf_map_refresh or kp_perf_map_add_text; its strings stay valid until
 * kp_perf_map_free. */
const kp_jit_symbol *kp_perf_map_find(const kp_perf_map *map, uint64_t addr);

/* Entries that can be found now. */
size_t kp_perf_map_count(const kp_perf_map *map);
/* Lines skipped as malformed so far: no start, no size, a size of 0, a range
 * reaching 2^64, no name, or a line longer than KP_PERF_MAP_MAX_LINE. */
size_t kp_perf_map_malformed(const kp_perf_map *map);

/* The longest line kp_perf_map_refresh keeps waiting for the end of: an
 * Erlang name is at most two atoms of 255 characters, escaped. */
#define KP_PERF_MAP_MAX_LINE 65536

#endif

/* Benchmark of cpu/symbols.c: names the native addresses of a running
 * process (a node's beam.smp), as `kprof record` will for native call
 * chains, and times the lookups with and without the cache. Never run by
 * the tests.
 *
 *   bench_cpu_symbols PID [-v] < ADDRESSES
 *
 * ADDRESSES holds one hex address a line (0x optional), for instance the
 * instruction pointers of `perf script -F ip` made absolute. Prints, per
 * module, how many of the addresses it holds and how many got a name; then
 * the cost of one lookup in ns: without the cache (each address asked of
 * libdwfl), with the cache cold (the first pass) and warm (later passes).
 * With -v, first one line per address: ADDR MODULE+0xOFFSET NAME+0xOFF (or
 * ADDR - when no file maps it).
 *
 *   bench_cpu_symbols --kernel [< ADDRESSES]
 *
 * The same for cpu/kernel_symbols.c: the time to load /proc/kallsyms (the
 * best and the worst of 5 loads), how many of the kernel addresses got a
 * name, and the cost of one lookup. Without addresses (stdin empty), a
 * million taken inside the kernel's code symbols at random. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/kernel_symbols.h"
#include "cpu/symbols.h"

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

typedef struct {
    char name[256];
    size_t addresses, named;
} module_count;

/* Code addresses of the running kernel, a million at random (each a
 * symbol's start plus up to 63 bytes), into `addrs` (cap entries). */
static size_t kernel_addresses(uint64_t *addrs, size_t cap)
{
    FILE *f = fopen(KP_KALLSYMS_PATH, "re");
    if (!f)
        return 0;
    size_t n = 0, cap_starts = 1 << 18;
    uint64_t *starts = malloc(cap_starts * sizeof *starts);
    char line[1024];
    while (starts && n < cap_starts && fgets(line, sizeof line, f)) {
        unsigned long long a;
        char type;
        if (sscanf(line, "%llx %c", &a, &type) == 2 && a && strchr("tTwW", type))
            starts[n++] = a;
    }
    fclose(f);
    size_t k = 0;
    srand(1);
    for (; starts && n && k < cap; k++)
        addrs[k] = starts[(size_t)rand() % n] + (uint64_t)(rand() % 64);
    free(starts);
    return k;
}

static int bench_kernel(uint64_t *addrs, size_t n, size_t cap)
{
    char err[512];
    double best = 0, worst = 0;
    kp_kernel_symbols *ks = NULL;
    for (int i = 0; i < 5; i++) {
        kp_kernel_symbols_free(ks);
        double t0 = now_ns();
        ks = kp_kernel_symbols_load(KP_KALLSYMS_PATH, err, sizeof err);
        double t = now_ns() - t0;
        if (!ks) {
            fprintf(stderr, "bench_cpu_symbols: %s\n", err);
            return 1;
        }
        best = i == 0 || t < best ? t : best;
        worst = t > worst ? t : worst;
    }
    if (n == 0)
        n = kernel_addresses(addrs, cap);
    size_t named = 0;
    kp_kernel_symbol sym;
    for (size_t i = 0; i < n; i++)
        named += (size_t)kp_kernel_symbols_find(ks, addrs[i], &sym);
    int passes = 5;
    double t0 = now_ns();
    for (int p = 0; p < passes; p++)
        for (size_t i = 0; i < n; i++)
            kp_kernel_symbols_find(ks, addrs[i], &sym);
    double t_find = (now_ns() - t0) / passes;
    printf("%zu kernel code symbols; load %.1f ms (best of 5), %.1f ms (worst)\n",
           kp_kernel_symbols_count(ks), best / 1e6, worst / 1e6);
    printf("%zu addresses, %zu named; ns per lookup: %.0f\n", n, named,
           n ? t_find / (double)n : 0.0);
    kp_kernel_symbols_free(ks);
    return 0;
}

int main(int argc, char **argv)
{
    int kernel = argc == 2 && strcmp(argv[1], "--kernel") == 0;
    int verbose = argc == 3 && strcmp(argv[2], "-v") == 0;
    if (argc < 2 || argc > 3 || (argc == 3 && !verbose)) {
        fprintf(stderr, "usage: bench_cpu_symbols PID [-v] < ADDRESSES\n"
                        "       bench_cpu_symbols --kernel [< ADDRESSES]\n");
        return 2;
    }
    size_t n = 0, cap = 1 << 16;
    uint64_t *addrs = malloc(cap * sizeof *addrs);
    char line[256];
    while (addrs && fgets(line, sizeof line, stdin)) {
        char *end;
        uint64_t a = strtoull(line, &end, 16);
        if (end == line)
            continue;
        if (n == cap) {
            uint64_t *grown = realloc(addrs, (cap *= 2) * sizeof *addrs);
            if (!grown) {
                free(addrs);
                addrs = NULL;
                break;
            }
            addrs = grown;
        }
        addrs[n++] = a;
    }
    if (addrs && kernel) {
        if (n == 0 && cap < (1u << 20)) {
            uint64_t *grown = realloc(addrs, (cap = 1u << 20) * sizeof *addrs);
            if (!grown)
                free(addrs);
            addrs = grown;
        }
        int r = addrs ? bench_kernel(addrs, n, cap) : 1;
        free(addrs);
        return r;
    }
    if (!addrs || n == 0) {
        fprintf(stderr, "bench_cpu_symbols: %s\n", addrs ? "no address read" : "out of memory");
        return 1;
    }
    char err[256];
    double t0 = now_ns();
    kp_symbols *s = kp_symbols_open(atoi(argv[1]), err, sizeof err);
    double t_open = now_ns() - t0;
    if (!s) {
        fprintf(stderr, "bench_cpu_symbols: %s\n", err);
        return 1;
    }

    /* counts per module; the first pass also fills the cache (cold) */
    module_count mods[128];
    size_t n_mods = 0, unmapped = 0;
    kp_native_symbol sym;
    t0 = now_ns();
    for (size_t i = 0; i < n; i++)
        kp_symbols_find(s, addrs[i], &sym);
    double t_cold = now_ns() - t0;
    for (size_t i = 0; i < n; i++) {
        if (kp_symbols_find(s, addrs[i], &sym) != 0) {
            unmapped++;
            if (verbose)
                printf("%" PRIx64 " -\n", addrs[i]);
            continue;
        }
        if (verbose)
            printf("%" PRIx64 " %s+0x%" PRIx64 " %s+0x%" PRIx64 "\n", addrs[i], sym.module,
                   sym.offset, sym.name ? sym.name : "?", sym.symbol_offset);
        size_t m = 0;
        while (m < n_mods && strcmp(mods[m].name, sym.module) != 0)
            m++;
        if (m == n_mods && n_mods < sizeof mods / sizeof *mods) {
            snprintf(mods[m].name, sizeof mods[m].name, "%s", sym.module);
            mods[m].addresses = mods[m].named = 0;
            n_mods++;
        }
        if (m < n_mods) {
            mods[m].addresses++;
            mods[m].named += sym.name != NULL;
        }
    }
    printf("%zu addresses, %zu mapped by no file, %zu modules; open %.1f ms\n", n, unmapped,
           kp_symbols_modules(s), t_open / 1e6);
    for (size_t m = 0; m < n_mods; m++)
        printf("  %-28s %8zu addresses, %5.1f%% named\n", mods[m].name, mods[m].addresses,
               100.0 * (double)mods[m].named / (double)mods[m].addresses);

    int passes = 20;
    t0 = now_ns();
    for (int p = 0; p < passes; p++)
        for (size_t i = 0; i < n; i++)
            kp_symbols_find(s, addrs[i], &sym);
    double t_warm = (now_ns() - t0) / passes;
    t0 = now_ns();
    for (size_t i = 0; i < n; i++)
        kp_symbols_find_uncached(s, addrs[i], &sym);
    double t_uncached = now_ns() - t0;
    t0 = now_ns();
    int changed = kp_symbols_refresh(s);
    double t_refresh = now_ns() - t0;
    printf("ns per lookup: %.0f without the cache, %.0f with it cold (first pass), %.0f warm\n",
           t_uncached / (double)n, t_cold / (double)n, t_warm / (double)n);
    printf("refresh: %.0f us (mappings changed: %d)\n", t_refresh / 1e3, changed);
    kp_symbols_close(s);
    free(addrs);
    return 0;
}

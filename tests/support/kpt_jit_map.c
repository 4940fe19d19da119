/* kpt_jit_map PID: prints the JIT code of node PID as perf map lines
 * ("START SIZE NAME", hex), read from the JIT's registrations in its
 * memory (cpu/jit_debug.h), so that a test can name the JIT addresses of
 * Linux perf's samples of a node started without +JPperf (perf names only
 * code of an anonymous mapping from a map, and such a node's JIT code is
 * in a memfd mapping). The descriptor is found by the scan of beam.smp's
 * writable segment (kp_jit_debug_scan). Exits 1 with a line on stderr when
 * it cannot. A test tool, not installed. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "cpu/jit_debug.h"

static int pid;

static int read_node(void *ctx, uint64_t addr, void *buf, size_t len)
{
    (void)ctx;
    struct iovec local = {buf, len}, remote = {(void *)(uintptr_t)addr, len};
    return process_vm_readv(pid, &local, 1, &remote, 1, 0) == (ssize_t)len ? 0 : -1;
}

static int print_range(void *ctx, uint64_t start, uint64_t end, const char *name, size_t len)
{
    (void)ctx;
    printf("%" PRIx64 " %" PRIx64 " %.*s\n", start, end - start, (int)len, name);
    return 0;
}

static int find_descriptor(uint64_t *descriptor)
{
    char path[64], line[4352];
    snprintf(path, sizeof path, "/proc/%d/maps", pid);
    FILE *f = fopen(path, "r");
    int found = 0;
    while (f && !found && fgets(line, sizeof line, f)) {
        unsigned long long start, end;
        char perms[8];
        if (sscanf(line, "%llx-%llx %7s", &start, &end, perms) == 3 && perms[1] == 'w' &&
            strstr(line, "/beam.smp"))
            found = kp_jit_debug_scan(read_node, NULL, start, end - start, descriptor) == 0;
    }
    if (f)
        fclose(f);
    return found ? 0 : -1;
}

int main(int argc, char **argv)
{
    uint64_t descriptor;
    static kp_jit_debug_ref refs[KP_JIT_DEBUG_MAX_ENTRIES];
    if (argc != 2 || (pid = atoi(argv[1])) <= 0) {
        fprintf(stderr, "usage: kpt_jit_map PID\n");
        return 2;
    }
    long n = find_descriptor(&descriptor) == 0
                 ? kp_jit_debug_list(read_node, NULL, descriptor, refs, KP_JIT_DEBUG_MAX_ENTRIES)
                 : -1;
    if (n < 0) {
        fprintf(stderr, "kpt_jit_map: no JIT registrations readable in process %d\n", pid);
        return 1;
    }
    uint8_t *buf = malloc(KP_JIT_DEBUG_MAX_SYMFILE);
    for (long k = n - 1; buf && k >= 0; k--) {
        kp_jit_debug_entry e;
        if (refs[k].size <= KP_JIT_DEBUG_MAX_SYMFILE &&
            read_node(NULL, refs[k].symfile, buf, refs[k].size) == 0)
            (void)kp_jit_debug_parse(buf, refs[k].size, &e, print_range, NULL);
    }
    free(buf);
    return buf ? 0 : 1;
}

#define _GNU_SOURCE
#include "cpu/mapped_files.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

/* Is `path` the regular file of inode `ino` (on device major:minor, unless
 * `any_device`: a file of a container's overlayfs shows its own device
 * through the overlay, the lower layer's in /proc/PID/maps)? */
static int is_mapped(const char *path, uint64_t ino, unsigned major_, unsigned minor_,
                     int any_device)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_ino == ino &&
           (any_device || (major(st.st_dev) == major_ && minor(st.st_dev) == minor_));
}

/* The name under which to report the file mapped as `path` (see the
 * header), into `out`. */
static void choose(int pid, const char *path, uint64_t ino, unsigned major_, unsigned minor_,
                   char *out, size_t cap)
{
    if (is_mapped(path, ino, major_, minor_, 0)) {
        snprintf(out, cap, "%s", path);
        return;
    }
    snprintf(out, cap, "/proc/%d/root%s", pid, path);
    if (!is_mapped(out, ino, major_, minor_, 1))
        /* libdwfl opens no file of this name: "/proc/PID/root/..." is a
         * directory's child, and the suffix makes it no file of the node */
        snprintf(out, cap, "/proc/%d/root%s (not the mapped file)", pid, path);
}

/* Writes /proc/PID/maps to `out` with each mapped file renamed, and the
 * vDSO's line left out: its range, and where in `out` it was. Returns 0 or
 * an errno value. */
static int rewrite(int pid, FILE *maps, FILE *out, uint64_t *vdso_start, uint64_t *vdso_end,
                   long *vdso_at)
{
    char *line = NULL, last[PATH_MAX] = "", name[PATH_MAX + 64] = "";
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, maps)) > 0) {
        if (line[len - 1] == '\n')
            line[--len] = '\0';
        uint64_t start, end, offset, ino;
        unsigned major_, minor_;
        char perms[8];
        int at = -1;
        if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %7s %" SCNx64 " %x:%x %" SCNu64 " %n", &start,
                   &end, perms, &offset, &major_, &minor_, &ino, &at) != 7 ||
            at < 0) {
            fprintf(out, "%s\n", line);
            continue;
        }
        const char *path = line + at;
        if (strcmp(path, "[vdso]") == 0) {
            *vdso_start = start;
            *vdso_end = end;
            *vdso_at = ftell(out);
            continue;
        }
        /* a deleted file keeps its name: libdwfl reads it from memory */
        if (path[0] != '/' || ino == 0 || strstr(path, " (deleted)")) {
            fprintf(out, "%s\n", line);
            continue;
        }
        /* a file's mappings come one after the other: decided once */
        if (strcmp(path, last) != 0) {
            snprintf(last, sizeof last, "%s", path);
            choose(pid, path, ino, major_, minor_, name, sizeof name);
        }
        fprintf(out, "%.*s%s\n", at, line, name);
    }
    int rc = ferror(maps) ? EIO : 0;
    free(line);
    return rc;
}

/* dwfl_linux_proc_maps_report of `len` bytes of maps text. */
static int report_text(Dwfl *dwfl, char *text, size_t len)
{
    if (len == 0)
        return 0;
    FILE *in = fmemopen(text, len, "r");
    if (!in)
        return errno;
    int rc = dwfl_linux_proc_maps_report(dwfl, in);
    fclose(in);
    return rc;
}

int kp_mapped_files_report(Dwfl *dwfl, int pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/maps", pid);
    FILE *maps = fopen(path, "r");
    if (!maps)
        return errno;
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    if (!out) {
        int e = errno;
        fclose(maps);
        return e;
    }
    uint64_t vdso_start = 0, vdso_end = 0;
    long vdso_at = -1;
    int rc = rewrite(pid, maps, out, &vdso_start, &vdso_end, &vdso_at);
    fclose(maps);
    if (fclose(out) != 0 && rc == 0)
        rc = errno;
    /* in the order of addresses, as dwfl_linux_proc_report reports them
     * (libdwfl's address lookups expect it): the mappings below the vDSO,
     * the vDSO (whose ELF image libdwfl reads from the process's memory
     * under this name), the mappings above it */
    size_t split = vdso_at >= 0 && (size_t)vdso_at <= len ? (size_t)vdso_at : len;
    if (rc == 0)
        rc = report_text(dwfl, text, split);
    if (rc == 0 && vdso_end > vdso_start) {
        char vdso[32];
        snprintf(vdso, sizeof vdso, "[vdso: %d]", pid);
        if (!dwfl_report_module(dwfl, vdso, vdso_start, vdso_end))
            rc = -1;
    }
    if (rc == 0)
        rc = report_text(dwfl, text + split, len - split);
    free(text);
    return rc;
}

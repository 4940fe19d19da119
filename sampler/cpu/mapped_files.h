/* The files mapped into another process (a node's beam.smp, its libraries
 * and NIFs), reported to libdwfl under names that open the very file the
 * process mapped, from wherever kprof runs.
 *
 * /proc/PID/maps names a file as kprof's mount namespace and root would
 * reach it when they can, else as the process's own namespace names it:
 * kprof on the host sees a container's libc as /usr/lib/.../libc.so.6, and
 * opening that path opens the host's libc, another file. So each mapped
 * file is named by the first of these that is the mapped file (the same
 * inode, and device where the two can be compared):
 *   - its path, as /proc/PID/maps gives it (kprof and the node share the
 *     mount namespace, or the node's root is a directory of kprof's);
 *   - /proc/PID/root and the path: the file in the node's own mount
 *     namespace and root (a container, or kprof in one and the node not);
 * else by a name that opens nothing, so that no other file's symbols are
 * taken for its: its code is then unnamed, never misnamed. The vDSO is
 * reported as libdwfl's own report does ("[vdso: PID]", read from the
 * process's memory). */
#ifndef KP_CPU_MAPPED_FILES_H
#define KP_CPU_MAPPED_FILES_H

#include <elfutils/libdwfl.h>

/* Reports process `pid`'s mappings to `dwfl`, between dwfl_report_begin
 * and dwfl_report_end, as dwfl_linux_proc_report does. Returns 0, an errno
 * value when /proc/PID/maps cannot be read, or -1 when libdwfl failed
 * (dwfl_errmsg says why). */
int kp_mapped_files_report(Dwfl *dwfl, int pid);

#endif

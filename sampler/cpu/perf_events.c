/* perf_event_open per thread, one mmap'ed ring each; see perf_events.h. */
#define _GNU_SOURCE
#include "cpu/perf_events.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "kp/alloc.h"

#define MAX_THREADS 1024
/* Ring data pages. Each sample carries a copy of the user stack
 * (KP_PERF_STACK_SIZE, reserved in full whatever the kernel could copy), so
 * a thread running flat out at 997 Hz writes about 8.5 MB/s: 128 pages
 * (512 KB) hold about 60 ms of it, and the ring wakes the sampler (poll)
 * when half full, so a busy ring is drained every 30 ms at the longest.
 * Threads that rarely run (dirty I/O, the others) get less: the locked
 * memory of an unprivileged user is limited (kernel.perf_event_mlock_kb,
 * then RLIMIT_MEMLOCK), and map_ring halves a ring that does not fit. */
#define BUSY_PAGES 128
#define IO_PAGES 32
#define QUIET_PAGES 8

typedef struct {
    uint32_t tid;
    int fd;
    void *base;       /* the control page, then the data pages */
    size_t data_size; /* a power of two */
    char name[16];
    kp_thread_kind kind;
    int seen; /* in the latest scan */
} ring;

struct kp_perf_events {
    int os_pid;
    unsigned rate_hz;
    int with_kernel;
    int kernel_chain;      /* with_kernel, and the kernel's callchain too */
    char kernel_note[320]; /* why either is not recorded; "" when both are */
    size_t page;
    ring *rings;
    size_t n;
    struct pollfd *polls;         /* one per ring, for kp_perf_events_wait */
    unsigned char scratch[65536]; /* a record that wraps around the ring's end */
    kp_cpu_sample sample;         /* the one being handed out */
};

/* OTP 24 and 25 name threads N_scheduler, N_dirty_cpu_sch,
 * N_dirty_io_sched; OTP 26 and later erts_sched_N, erts_dcpus_N,
 * erts_dios_N (Linux keeps 15 bytes of a name). */
kp_thread_kind kp_thread_kind_of(const char *name)
{
    static const struct {
        const char *prefix;
        kp_thread_kind kind;
    } otp26[] = {{"erts_sched_", KP_THREAD_SCHEDULER},
                 {"erts_dcpus_", KP_THREAD_DIRTY_CPU},
                 {"erts_dios_", KP_THREAD_DIRTY_IO}};
    for (size_t i = 0; i < sizeof otp26 / sizeof otp26[0]; i++)
        if (strncmp(name, otp26[i].prefix, strlen(otp26[i].prefix)) == 0)
            return otp26[i].kind;
    const char *u = strchr(name, '_');
    if (!u || u == name || name[0] < '0' || name[0] > '9')
        return KP_THREAD_OTHER;
    if (strncmp(u, "_scheduler", 10) == 0)
        return KP_THREAD_SCHEDULER;
    if (strncmp(u, "_dirty_cpu", 10) == 0)
        return KP_THREAD_DIRTY_CPU;
    if (strncmp(u, "_dirty_io", 9) == 0)
        return KP_THREAD_DIRTY_IO;
    return KP_THREAD_OTHER;
}

const char *kp_thread_kind_name(kp_thread_kind kind)
{
    static const char *const names[] = {"scheduler", "dirty_cpu", "dirty_io", "other"};
    return kind <= KP_THREAD_OTHER ? names[kind] : "other";
}

static size_t ring_pages(kp_thread_kind kind)
{
    switch (kind) {
    case KP_THREAD_SCHEDULER:
    case KP_THREAD_DIRTY_CPU: return BUSY_PAGES;
    case KP_THREAD_DIRTY_IO: return IO_PAGES;
    default: return QUIET_PAGES;
    }
}

/* `wakeup_bytes`: the ring's fill that makes it readable for poll(). */
static int open_event(const kp_perf_events *e, uint32_t tid, int with_kernel, int kernel_chain,
                      size_t wakeup_bytes)
{
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.type = PERF_TYPE_SOFTWARE;
    a.config = PERF_COUNT_SW_CPU_CLOCK;
    a.freq = 1;
    a.sample_freq = e->rate_hz;
    a.sample_type = KP_PERF_SAMPLE_TYPE;
    a.sample_regs_user = KP_PERF_REGS;
    a.sample_stack_user = KP_PERF_STACK_SIZE;
    a.watermark = 1;
    a.wakeup_watermark = (uint32_t)wakeup_bytes;
    a.use_clockid = 1;
    a.clockid = CLOCK_MONOTONIC;
    a.exclude_kernel = !with_kernel;
    a.exclude_hv = 1;
    /* the kernel's frames name kernel time (cpu/kernel_symbols.h) */
    a.exclude_callchain_kernel = !kernel_chain;
    return (int)syscall(SYS_perf_event_open, &a, (pid_t)tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
}

static void thread_name(int os_pid, uint32_t tid, char *name, size_t cap)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task/%u/comm", os_pid, tid);
    name[0] = '\0';
    FILE *f = fopen(path, "re");
    if (f) {
        if (fgets(name, (int)cap, f))
            name[strcspn(name, "\n")] = '\0';
        fclose(f);
    }
}

/* Maps the ring of `r->fd`, smaller when locked memory runs short. */
static int map_ring(const kp_perf_events *e, ring *r)
{
    size_t pages = ring_pages(r->kind);
    for (; pages >= 1; pages /= 2) {
        void *p = mmap(NULL, (pages + 1) * e->page, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
        if (p != MAP_FAILED) {
            r->base = p;
            r->data_size = pages * e->page;
            return 0;
        }
        if (errno != EPERM && errno != ENOMEM)
            break;
    }
    return -1;
}

static void close_ring(ring *r)
{
    if (r->base)
        munmap(r->base, r->data_size + (size_t)sysconf(_SC_PAGESIZE));
    if (r->fd >= 0)
        close(r->fd);
    r->base = NULL;
    r->fd = -1;
}

/* Opens thread `tid`'s event and ring; returns 0, or -1 with errno. */
static int add_thread(kp_perf_events *e, uint32_t tid)
{
    if (e->n == MAX_THREADS) {
        errno = EMFILE;
        return -1;
    }
    ring *r = &e->rings[e->n];
    memset(r, 0, sizeof *r);
    r->tid = tid;
    r->seen = 1;
    thread_name(e->os_pid, tid, r->name, sizeof r->name);
    r->kind = kp_thread_kind_of(r->name);
    /* a ring that map_ring makes smaller wakes the sampler only when full:
     * the drain interval still empties it */
    r->fd = open_event(e, tid, e->with_kernel, e->kernel_chain, ring_pages(r->kind) * e->page / 2);
    if (r->fd < 0)
        return -1;
    if (map_ring(e, r) != 0) {
        int saved = errno;
        close_ring(r);
        errno = saved;
        return -1;
    }
    e->n++;
    return 0;
}

static ring *find_ring(const kp_perf_events *e, uint32_t tid)
{
    for (size_t i = 0; i < e->n; i++)
        if (e->rings[i].tid == tid)
            return &e->rings[i];
    return NULL;
}

size_t kp_perf_events_rescan(kp_perf_events *e)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", e->os_pid);
    DIR *d = opendir(path);
    if (!d)
        return e->n;
    for (size_t i = 0; i < e->n; i++)
        e->rings[i].seen = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        char *end;
        unsigned long tid = strtoul(de->d_name, &end, 10);
        if (*end || end == de->d_name)
            continue;
        ring *r = find_ring(e, (uint32_t)tid);
        if (r)
            r->seen = 1;
        else
            add_thread(e, (uint32_t)tid); /* a thread gone meanwhile: nothing to sample */
    }
    closedir(d);
    /* threads that ended: their rings go, after a last drain by the caller's
     * next kp_perf_events_drain would find nothing new anyway */
    size_t kept = 0;
    for (size_t i = 0; i < e->n; i++) {
        if (e->rings[i].seen)
            e->rings[kept++] = e->rings[i];
        else
            close_ring(&e->rings[i]);
    }
    e->n = kept;
    return e->n;
}

/* kernel.perf_event_paranoid, or -9 when it cannot be read */
static int read_paranoid(void)
{
    int paranoid = -9;
    FILE *f = fopen("/proc/sys/kernel/perf_event_paranoid", "re");
    if (f) {
        if (fscanf(f, "%d", &paranoid) != 1)
            paranoid = -9;
        fclose(f);
    }
    return paranoid;
}

static void explain(int err, int os_pid, char *buf, size_t len)
{
    if (err == EACCES || err == EPERM) {
        int paranoid = read_paranoid();
        snprintf(buf, len,
                 "perf_event_open is refused for process %d (kernel.perf_event_paranoid is %d): "
                 "run kprof as the node's user with the sysctl at 2 or less, or give kprof "
                 "CAP_PERFMON",
                 os_pid, paranoid);
    } else if (err == ESRCH) {
        snprintf(buf, len, "process %d is gone", os_pid);
    } else if (err == ENOENT || err == ENODEV || err == EOPNOTSUPP) {
        snprintf(buf, len, "this kernel has no cpu-clock perf event (%s)", strerror(err));
    } else {
        snprintf(buf, len, "perf_event_open on process %d failed: %s", os_pid, strerror(err));
    }
}

kp_perf_events *kp_perf_events_open(int os_pid, unsigned rate_hz, int *with_kernel, char *err,
                                    size_t err_len)
{
    kp_perf_events *e = kp_calloc(1, sizeof *e);
    ring *rings = kp_calloc(MAX_THREADS, sizeof *rings);
    struct pollfd *polls = kp_calloc(MAX_THREADS, sizeof *polls);
    if (!e || !rings || !polls) {
        kp_free(e);
        kp_free(rings);
        kp_free(polls);
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    e->os_pid = os_pid;
    e->rate_hz = rate_hz;
    e->page = (size_t)sysconf(_SC_PAGESIZE);
    e->rings = rings;
    e->polls = polls;
    /* kernel time too where allowed, with the kernel's frames: perf's
     * view, and what the node's CPU time (schedstat) counts. Each step
     * down is said in one line. */
    int fd = open_event(e, (uint32_t)os_pid, 1, 1, e->page);
    int chain_error = errno;
    e->with_kernel = e->kernel_chain = fd >= 0;
    if (fd < 0 && (fd = open_event(e, (uint32_t)os_pid, 1, 0, e->page)) >= 0) {
        e->with_kernel = 1;
        snprintf(e->kernel_note, sizeof e->kernel_note,
                 "the kernel refuses its call chain to kprof (%s): kernel time shows as one "
                 "[kernel] frame",
                 strerror(chain_error));
    }
    if (fd < 0 && (fd = open_event(e, (uint32_t)os_pid, 0, 0, e->page)) >= 0)
        snprintf(e->kernel_note, sizeof e->kernel_note,
                 "kernel time is not sampled (kernel.perf_event_paranoid is %d): run kprof as "
                 "root (or with CAP_PERFMON), or set kernel.perf_event_paranoid to 1 or less",
                 read_paranoid());
    if (fd < 0) {
        explain(errno, os_pid, err, err_len);
        kp_perf_events_close(e);
        return NULL;
    }
    close(fd);
    if (kp_perf_events_rescan(e) == 0) {
        snprintf(err, err_len, "cannot sample the threads of process %d: %s", os_pid,
                 strerror(errno));
        kp_perf_events_close(e);
        return NULL;
    }
    if (with_kernel)
        *with_kernel = e->with_kernel;
    return e;
}

/* Hands ring `r`'s waiting records to `fn`; see kp_perf_events_drain. */
static long drain_ring(kp_perf_events *e, ring *r, kp_cpu_sample_fn fn, void *ctx, uint64_t *lost)
{
    struct perf_event_mmap_page *meta = r->base;
    const unsigned char *data = (const unsigned char *)r->base + e->page;
    uint64_t head = __atomic_load_n(&meta->data_head, __ATOMIC_ACQUIRE);
    uint64_t tail = meta->data_tail;
    size_t mask = r->data_size - 1;
    long samples = 0;
    int stop = 0;
    while (tail < head && !stop) {
        struct perf_event_header h;
        size_t at = (size_t)(tail & mask);
        for (size_t i = 0; i < sizeof h; i++)
            ((unsigned char *)&h)[i] = data[(at + i) & mask];
        if (h.size < sizeof h || h.size > head - tail) {
            samples = -1; /* cannot happen with a sane kernel: give up on this ring */
            tail = head;
            break;
        }
        const unsigned char *rec = data + at;
        if (at + h.size > r->data_size) {
            size_t first = r->data_size - at;
            memcpy(e->scratch, data + at, first);
            memcpy(e->scratch + first, data, h.size - first);
            rec = e->scratch;
        }
        uint64_t n_lost = 0;
        switch (kp_perf_record_decode(rec, h.size, &e->sample, &n_lost)) {
        case KP_PERF_RECORD_SAMPLE:
            if (samples >= 0)
                samples++;
            stop = fn(ctx, &e->sample) != 0;
            break;
        case KP_PERF_RECORD_LOST: *lost += n_lost; break;
        case KP_PERF_RECORD_OTHER: break;
        case KP_PERF_RECORD_BAD: samples = -1; break;
        }
        tail += h.size;
    }
    __atomic_store_n(&meta->data_tail, tail, __ATOMIC_RELEASE);
    return samples;
}

long kp_perf_events_drain(kp_perf_events *e, kp_cpu_sample_fn fn, void *ctx, uint64_t *lost)
{
    long total = 0;
    int bad = 0;
    for (size_t i = 0; i < e->n; i++) {
        long n = drain_ring(e, &e->rings[i], fn, ctx, lost);
        if (n < 0)
            bad = 1;
        else
            total += n;
    }
    return bad ? -1 : total;
}

int kp_perf_events_wait(kp_perf_events *e, int timeout_ms)
{
    for (size_t i = 0; i < e->n; i++)
        e->polls[i] = (struct pollfd){e->rings[i].fd, POLLIN, 0};
    int r = poll(e->polls, e->n, timeout_ms);
    if (r < 0 && errno != EINTR)
        return -1;
    return r > 0;
}

int kp_perf_events_kernel_chain(const kp_perf_events *e)
{
    return e->kernel_chain;
}

const char *kp_perf_events_kernel_note(const kp_perf_events *e)
{
    return e->kernel_note[0] ? e->kernel_note : NULL;
}

const char *kp_perf_events_thread(const kp_perf_events *e, uint32_t tid, kp_thread_kind *kind)
{
    ring *r = find_ring(e, tid);
    if (!r)
        return NULL;
    if (kind)
        *kind = r->kind;
    return r->name;
}

void kp_perf_events_close(kp_perf_events *e)
{
    if (!e)
        return;
    for (size_t i = 0; i < e->n; i++)
        close_ring(&e->rings[i]);
    kp_free(e->rings);
    kp_free(e->polls);
    kp_free(e);
}

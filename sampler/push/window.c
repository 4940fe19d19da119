#define _GNU_SOURCE
#include "push/window.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/u64_map.h"
#include "cpu/perf_events.h"
#include "kp/alloc.h"
#include "kp/cpu_state.h"
#include "kp/otlp.h"
#include "kp/weights.h"
#include "kprof_version.h"

#define MAX_OPEN 4          /* windows open at once: the late ones and the next */
#define MAX_FRAMES 512      /* frames of a stack kept: the leaf's end */
#define MAX_LABELS 100000   /* process names remembered; then forgotten at once */
#define MAX_UNNAMED 1024    /* processes waiting to be named */
#define ASKED_RESET 200000u /* processes asked for, remembered; then forgotten */

/* The cooperative weights sent, each a profile: its sample type and unit. */
static const struct {
    int weight;
    const char *type, *unit;
} coop_types[] = {
    {KP_WEIGHT_SAMPLES, "beam_samples", "count"},
    {KP_WEIGHT_REDUCTIONS, "beam_reductions", "count"},
    {KP_WEIGHT_MEMORY, "beam_memory", "bytes"},
    {KP_WEIGHT_QUEUE, "beam_message_queue_len", "count"},
    {KP_WEIGHT_BIN_VHEAP, "beam_bin_vheap", "bytes"},
};
#define N_COOP (sizeof coop_types / sizeof *coop_types)

/* A frame table's frame -> the window's location + 1 (0: not yet). */
typedef struct {
    uint32_t *loc;
    size_t cap;
} loc_cache;

typedef struct {
    uint64_t index; /* k: [start + k * interval, ...) */
    kp_otlp *otlp;
    uint32_t cpu, coop[N_COOP]; /* profiles */
    loc_cache cpu_cache, coop_cache;
    uint32_t unnamed; /* location of a process not named yet */
    uint64_t samples;
} window;

struct kp_push_windows {
    pthread_mutex_t lock;
    char *service_name, *node, *host, *otp_release;
    char **extra;
    size_t n_extra;
    long os_pid;
    uint64_t start_us, interval_us, grace_us;
    unsigned cpu_rate;
    int64_t wall_minus_clock_ns;
    window open[MAX_OPEN]; /* by index, oldest first */
    size_t n_open;
    uint64_t next; /* the lowest index not closed */
    /* process names: pid -> frame of `names` + 1 */
    kp_frames *names;
    kp_u64_map name_of, asked;
    uint64_t unnamed[MAX_UNNAMED];
    size_t n_unnamed;
    uint32_t ids[MAX_FRAMES + 1];
    kp_push_window_stats stats;
};

static char *copy(const char *s)
{
    return s ? strdup(s) : NULL;
}

kp_push_windows *kp_push_windows_create(const kp_push_resource *r, uint64_t start_us,
                                        uint64_t interval_us, uint64_t grace_us, unsigned cpu_rate)
{
    kp_push_windows *w = kp_calloc(1, sizeof *w);
    if (!w)
        return NULL;
    pthread_mutex_init(&w->lock, NULL);
    w->service_name = copy(r->service_name);
    w->node = copy(r->node);
    w->host = copy(r->host);
    w->otp_release = copy(r->otp_release);
    w->os_pid = r->os_pid;
    w->extra = r->n_extra ? kp_calloc(2 * r->n_extra, sizeof *w->extra) : NULL;
    int ok = (!r->n_extra || w->extra) && w->service_name && w->node && w->host;
    for (size_t k = 0; ok && k < 2 * r->n_extra; k++)
        ok = (w->extra[k] = strdup(r->extra[k])) != NULL;
    w->n_extra = r->n_extra;
    w->names = kp_frames_create(0);
    w->start_us = start_us;
    w->interval_us = interval_us ? interval_us : 1;
    w->grace_us = grace_us;
    w->cpu_rate = cpu_rate;
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    w->wall_minus_clock_ns = (int64_t)wall.tv_sec * 1000000000 + wall.tv_nsec - kp_now_ns();
    if (!ok || !w->names) {
        kp_push_windows_free(w);
        return NULL;
    }
    return w;
}

int kp_push_windows_set_process(kp_push_windows *w, long os_pid, const char *otp_release)
{
    char *release = otp_release ? strdup(otp_release) : NULL;
    pthread_mutex_lock(&w->lock);
    if (os_pid != w->os_pid) {
        kp_u64_map_clear(&w->name_of);
        kp_u64_map_clear(&w->asked);
        w->n_unnamed = 0;
    }
    w->os_pid = os_pid;
    int rc = otp_release && !release ? -1 : 0;
    if (rc == 0) {
        free(w->otp_release);
        w->otp_release = release;
    }
    pthread_mutex_unlock(&w->lock);
    return rc;
}

static void window_free(window *win)
{
    kp_otlp_free(win->otlp);
    kp_free(win->cpu_cache.loc);
    kp_free(win->coop_cache.loc);
    memset(win, 0, sizeof *win);
}

void kp_push_windows_free(kp_push_windows *w)
{
    if (!w)
        return;
    for (size_t k = 0; k < w->n_open; k++)
        window_free(&w->open[k]);
    free(w->service_name);
    free(w->node);
    free(w->host);
    free(w->otp_release);
    for (size_t k = 0; w->extra && k < 2 * w->n_extra; k++)
        free(w->extra[k]);
    kp_free(w->extra);
    kp_frames_free(w->names);
    kp_u64_map_free(&w->name_of);
    kp_u64_map_free(&w->asked);
    pthread_mutex_destroy(&w->lock);
    kp_free(w);
}

static uint64_t wall_ns(const kp_push_windows *w, uint64_t clock_us)
{
    return (uint64_t)((int64_t)clock_us * 1000 + w->wall_minus_clock_ns);
}

/* The resource's attributes, OTEL_RESOURCE_ATTRIBUTES last: a backend
 * keeps the last of a key. */
static kp_status resource(const kp_push_windows *w, kp_otlp *o)
{
    kp_status st = kp_otlp_resource_string(o, "service.name", w->service_name);
    if (st == KP_OK)
        st = kp_otlp_resource_string(o, "service.instance.id", w->node);
    if (st == KP_OK)
        st = kp_otlp_resource_string(o, "host.name", w->host);
    if (st == KP_OK)
        st = kp_otlp_resource_string(o, "process.executable.name", "beam.smp");
    if (st == KP_OK)
        st = kp_otlp_resource_string(o, "process.runtime.name", "BEAM");
    if (st == KP_OK && w->otp_release)
        st = kp_otlp_resource_string(o, "process.runtime.version", w->otp_release);
    if (st == KP_OK && w->os_pid > 0)
        st = kp_otlp_resource_int(o, "process.pid", w->os_pid);
    for (size_t k = 0; k < w->n_extra && st == KP_OK; k++)
        st = kp_otlp_resource_string(o, w->extra[2 * k], w->extra[2 * k + 1]);
    return st;
}

/* Opens window `index` in slot `win`. */
static int window_open(kp_push_windows *w, window *win, uint64_t index)
{
    memset(win, 0, sizeof *win);
    win->index = index;
    win->otlp = kp_otlp_create("kprof", KPROF_VERSION);
    if (!win->otlp)
        return -1;
    uint64_t t = wall_ns(w, w->start_us + index * w->interval_us), d = w->interval_us * 1000;
    kp_status st = resource(w, win->otlp);
    if (st == KP_OK && w->cpu_rate)
        st = kp_otlp_profile(win->otlp, "cpu", "nanoseconds", 1000000000 / w->cpu_rate, t, d,
                             &win->cpu);
    for (size_t k = 0; k < N_COOP && st == KP_OK; k++)
        st = kp_otlp_profile(win->otlp, coop_types[k].type, coop_types[k].unit, 0, t, d,
                             &win->coop[k]);
    kp_otlp_frame unnamed = {"[process]", 9, KP_OTLP_FRAME_NONE, NULL, NULL, 0};
    if (st == KP_OK)
        st = kp_otlp_location(win->otlp, &unnamed, &win->unnamed);
    if (st != KP_OK) {
        window_free(win);
        return -1;
    }
    return 0;
}

/* The open window of a sample at `time_us`: the one it falls in, or for a
 * sample whose window is closed the oldest open one. NULL when out of
 * memory. */
static window *window_of(kp_push_windows *w, uint64_t time_us)
{
    uint64_t k = time_us < w->start_us ? 0 : (time_us - w->start_us) / w->interval_us;
    if (k < w->next) {
        w->stats.late++;
        k = w->next;
    }
    for (size_t i = 0; i < w->n_open; i++)
        if (w->open[i].index == k)
            return &w->open[i];
    if (w->n_open == MAX_OPEN) { /* kprof fell behind its closing: the newest takes it */
        w->stats.late++;
        return &w->open[MAX_OPEN - 1];
    }
    /* windows open in time order: a new one goes after those before it */
    size_t at = w->n_open;
    while (at > 0 && w->open[at - 1].index > k)
        at--;
    window fresh;
    if (window_open(w, &fresh, k) != 0)
        return NULL;
    memmove(&w->open[at + 1], &w->open[at], (w->n_open - at) * sizeof *w->open);
    w->open[at] = fresh;
    w->n_open++;
    return &w->open[at];
}

/* How kprof names what runs at a frame, from its frame table's module
 * column: Erlang functions (MODULE.beam), the JIT's fragments, native
 * code ([vm]NAME, [LIBRARY]NAME, [vm]FILE@0xSTART), the kernel
 * ([kernel]NAME, [kernel:MODULE]NAME). Anything else is no code. */
static kp_otlp_frame frame_of(const char *symbol, size_t len, const char *kind, size_t kind_len)
{
    kp_otlp_frame f = {symbol, len, KP_OTLP_FRAME_NONE, NULL, NULL, 0};
    if ((kind_len > 5 && memcmp(kind + kind_len - 5, ".beam", 5) == 0) ||
        (kind_len == 3 && memcmp(kind, "jit", 3) == 0)) {
        f.type = KP_OTLP_FRAME_BEAM;
    } else if (kind_len == 6 && memcmp(kind, "kernel", 6) == 0) {
        f.type = KP_OTLP_FRAME_KERNEL;
        const char *close = memchr(symbol, ']', len);
        if (close && (size_t)(close + 1 - symbol) < len) {
            f.name = close + 1;
            f.name_len = len - (size_t)(close + 1 - symbol);
        }
    } else if (kind_len == 6 && memcmp(kind, "native", 6) == 0) {
        f.type = KP_OTLP_FRAME_NATIVE;
        const char *close = memchr(symbol, ']', len);
        if (symbol[0] == '[' && close && (size_t)(close + 1 - symbol) < len) {
            static _Thread_local char file[256];
            size_t n = (size_t)(close - symbol - 1);
            snprintf(file, sizeof file, "%.*s", (int)n, symbol + 1);
            f.file = strcmp(file, "vm") == 0 ? "beam.smp" : file;
            f.name = close + 1;
            f.name_len = len - (size_t)(close + 1 - symbol);
            /* FILE@0xSTART: the address a backend with the debug file names */
            const char *at = memmem(f.name, f.name_len, "@0x", 3);
            if (at)
                f.address = strtoull(at + 3, NULL, 16);
        }
    }
    return f;
}

/* The window's location of frame `id` of `frames`, through `cache`; 0
 * when out of memory. */
static uint32_t location_of(window *win, loc_cache *cache, const kp_frames *frames, uint32_t id,
                            kp_native *native)
{
    if (id >= cache->cap) {
        size_t cap = cache->cap ? cache->cap : 1024;
        while (cap <= id)
            cap *= 2;
        uint32_t *a = kp_realloc_array(cache->loc, cap, sizeof *a);
        if (!a)
            return 0;
        memset(a + cache->cap, 0, (cap - cache->cap) * sizeof *a);
        cache->loc = a;
        cache->cap = cap;
    }
    if (cache->loc[id])
        return cache->loc[id] - 1;
    size_t len, kind_len;
    const char *symbol = kp_frames_symbol(frames, id, &len);
    const char *kind = kp_frames_module(frames, id, &kind_len);
    kp_otlp_frame f = frame_of(symbol, len, kind, kind_len);
    /* the file's build id, for a backend to find its debug file by */
    char build_id[128];
    if (native && f.file && kp_native_build_id(native, f.file, build_id, sizeof build_id))
        f.build_id = build_id;
    uint32_t loc;
    if (kp_otlp_location(win->otlp, &f, &loc) != KP_OK)
        return 0;
    cache->loc[id] = loc + 1;
    return loc;
}

static uint64_t pid_key(uint32_t num, uint32_t serial)
{
    return (uint64_t)num << 32 | serial;
}

/* The location of the process `pid` in `win`: its name, or [process]
 * until it is known (it is then asked for). */
static uint32_t process_location(kp_push_windows *w, window *win, kp_pid_numbers pid)
{
    uint64_t key = pid_key(pid.num, pid.serial);
    uint32_t name;
    if (kp_u64_map_get(&w->name_of, key, &name)) {
        size_t len;
        const char *symbol = kp_frames_symbol(w->names, name, &len);
        kp_otlp_frame f = {symbol, len, KP_OTLP_FRAME_NONE, NULL, NULL, 0};
        uint32_t loc;
        return kp_otlp_location(win->otlp, &f, &loc) == KP_OK ? loc : win->unnamed;
    }
    uint32_t seen;
    if (!kp_u64_map_get(&w->asked, key, &seen) && w->n_unnamed < MAX_UNNAMED) {
        if (w->asked.count >= ASKED_RESET)
            kp_u64_map_clear(&w->asked);
        if (kp_u64_map_put(&w->asked, key, 1) == 0)
            w->unnamed[w->n_unnamed++] = key;
    }
    return win->unnamed;
}

static uint32_t attribute(window *win, const char *key, const char *value)
{
    uint32_t a;
    return kp_otlp_attribute(win->otlp, key, value, strlen(value), &a) == KP_OK ? a : 0;
}

void kp_push_windows_cpu(void *ctx, const kp_native_sample *s)
{
    kp_push_windows *w = ctx;
    pthread_mutex_lock(&w->lock);
    window *win = w->cpu_rate ? window_of(w, s->time_ns / 1000) : NULL;
    if (win) {
        size_t n = 0, depth = s->depth < MAX_FRAMES ? s->depth : MAX_FRAMES;
        /* leaf first: the code stack is root first */
        for (size_t k = 0; k < depth; k++) {
            uint32_t loc =
                location_of(win, &win->cpu_cache, s->frames, s->code[s->depth - 1 - k], s->native);
            if (loc)
                w->ids[n++] = loc;
        }
        if (s->attributed)
            w->ids[n++] = process_location(w, win, s->pid);
        uint32_t attrs[2] = {attribute(win, "beam.thread.kind", kp_thread_kind_name(s->kind)),
                             attribute(win, "beam.thread.state", kp_cpu_state_name(s->state))};
        if (attrs[0] && attrs[1] &&
            kp_otlp_sample(win->otlp, win->cpu, w->ids, n, attrs, 2, (int64_t)s->period) == KP_OK)
            win->samples++;
    }
    pthread_mutex_unlock(&w->lock);
}

/* Makes room for a process's name: past MAX_LABELS the names are
 * forgotten at once. Returns 0, or -1 when out of memory. */
static int name_room(kp_push_windows *w)
{
    if (w->name_of.count < MAX_LABELS)
        return 0;
    kp_frames *fresh = kp_frames_create(0);
    if (!fresh)
        return -1;
    kp_u64_map_clear(&w->name_of);
    kp_frames_free(w->names);
    w->names = fresh;
    return 0;
}

/* Remembers process `key`'s name: frame `id` of `frames`. */
static void remember_name(kp_push_windows *w, uint64_t key, const kp_frames *frames, uint32_t id)
{
    uint32_t name;
    size_t len;
    const char *symbol = kp_frames_symbol(frames, id, &len);
    if (name_room(w) == 0 &&
        kp_frames_intern_pseudo(w->names, symbol, len, "registered", &name) == KP_OK)
        kp_u64_map_put(&w->name_of, key, name);
}

int kp_push_windows_sample(void *ctx, size_t node, uint64_t time_us, const kp_frames *frames,
                           const kp_stacks *stacks, const kp_proc_sample *s)
{
    (void)node;
    kp_push_windows *w = ctx;
    int64_t weights[KP_WEIGHT_COUNT];
    kp_weights_compute(s->value, s->delta, weights);
    size_t depth;
    const uint32_t *ids = kp_stacks_get(stacks, s->stack, &depth);
    pthread_mutex_lock(&w->lock);
    window *win = window_of(w, time_us);
    if (!win) {
        pthread_mutex_unlock(&w->lock);
        return -1;
    }
    /* root first: [node;] status; [at-receive;] pid; [name;] code */
    uint32_t attrs[2], process = 0;
    size_t n_attrs = 0, n = 0;
    for (size_t k = 0; k < depth && n < MAX_FRAMES; k++) {
        size_t len, kind_len;
        const char *symbol = kp_frames_symbol(frames, ids[k], &len);
        const char *kind = kp_frames_module(frames, ids[k], &kind_len);
        if (kind_len == 6 && memcmp(kind, "status", 6) == 0 && n_attrs < 2) {
            char value[64];
            snprintf(value, sizeof value, "%.*s", (int)len, symbol);
            attrs[n_attrs] = n_attrs == 0
                                 ? attribute(win, "beam.process.status", value)
                                 : attribute(win, "beam.stack_read_at_next_receive", "true");
            n_attrs += attrs[n_attrs] != 0;
        } else if ((kind_len == 10 && memcmp(kind, "registered", 10) == 0) ||
                   (kind_len == 7 && memcmp(kind, "initial", 7) == 0)) {
            process = location_of(win, &win->coop_cache, frames, ids[k], NULL);
            uint32_t known;
            if (!kp_u64_map_get(&w->name_of, pid_key(s->num, s->serial), &known))
                remember_name(w, pid_key(s->num, s->serial), frames, ids[k]);
        } else if (!(kind_len == 7 && memcmp(kind, "process", 7) == 0) &&
                   !(kind_len == 4 && memcmp(kind, "node", 4) == 0)) {
            w->ids[MAX_FRAMES - 1 - n++] = location_of(win, &win->coop_cache, frames, ids[k], NULL);
        }
    }
    /* leaf first: the code, reversed, then the process at the root */
    uint32_t *stack = w->ids + MAX_FRAMES - n;
    if (process)
        stack[n++] = process;
    int rc = 0;
    for (size_t k = 0; k < N_COOP && rc == 0; k++)
        if (weights[coop_types[k].weight] > 0 &&
            kp_otlp_sample(win->otlp, win->coop[k], stack, n, attrs, n_attrs,
                           weights[coop_types[k].weight]) == KP_ERR_NOMEM)
            rc = -1;
    win->samples++;
    pthread_mutex_unlock(&w->lock);
    return rc;
}

int kp_push_windows_close(kp_push_windows *w, uint64_t now_us, int all,
                          void (*emit)(void *ctx, kp_push_closed *closed), void *ctx)
{
    int handed = 0, failed = 0;
    pthread_mutex_lock(&w->lock);
    for (;;) {
        uint64_t end = w->start_us + (w->next + 1) * w->interval_us;
        if (!all && end + w->grace_us > now_us)
            break;
        if (all && w->start_us + w->next * w->interval_us >= now_us)
            break;
        window *win = w->n_open && w->open[0].index == w->next ? &w->open[0] : NULL;
        w->next++;
        if (!win || !win->samples) {
            w->stats.empty++;
            if (win) {
                window_free(win);
                memmove(&w->open[0], &w->open[1], --w->n_open * sizeof *w->open);
            }
            continue;
        }
        uint64_t start_ns = wall_ns(w, w->start_us + win->index * w->interval_us);
        uint64_t end_ns = wall_ns(w, all && end > now_us ? now_us : end);
        kp_otlp_set_time(win->otlp, start_ns, end_ns - start_ns);
        kp_push_closed closed = {KP_BUF_INIT, start_ns, end_ns, win->samples};
        if (kp_otlp_encode(win->otlp, &closed.request) == KP_OK) {
            emit(ctx, &closed);
            handed++;
            w->stats.windows++;
        } else {
            failed = 1;
            w->stats.lost_windows++;
        }
        kp_buf_free(&closed.request);
        window_free(win);
        memmove(&w->open[0], &w->open[1], --w->n_open * sizeof *w->open);
    }
    pthread_mutex_unlock(&w->lock);
    return failed ? -1 : handed;
}

size_t kp_push_windows_unnamed(kp_push_windows *w, uint32_t *nums, uint32_t *serials, size_t cap)
{
    pthread_mutex_lock(&w->lock);
    size_t n = w->n_unnamed < cap ? w->n_unnamed : cap;
    for (size_t k = 0; k < n; k++) {
        nums[k] = (uint32_t)(w->unnamed[k] >> 32);
        serials[k] = (uint32_t)w->unnamed[k];
    }
    memmove(w->unnamed, w->unnamed + n, (w->n_unnamed - n) * sizeof *w->unnamed);
    w->n_unnamed -= n;
    pthread_mutex_unlock(&w->lock);
    return n;
}

int kp_push_windows_label(void *ctx, uint32_t num, uint32_t serial, int registered,
                          const char *text, size_t len)
{
    kp_push_windows *w = ctx;
    pthread_mutex_lock(&w->lock);
    uint32_t name;
    if (name_room(w) == 0 &&
        kp_frames_intern_label(w->names, registered, text, len, &name) == KP_OK)
        kp_u64_map_put(&w->name_of, pid_key(num, serial), name);
    pthread_mutex_unlock(&w->lock);
    return 0;
}

void kp_push_windows_stats(kp_push_windows *w, kp_push_window_stats *stats)
{
    pthread_mutex_lock(&w->lock);
    *stats = w->stats;
    pthread_mutex_unlock(&w->lock);
}

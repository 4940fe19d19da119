/* Benchmarks of formats/: how fast samples are written and aggregated, and
 * how many bytes a sample takes on disk. Run by tests/bench/run; never timed
 * in the tests.
 *
 *   bench_formats [--runs N]              prints the figures (medians of N runs)
 *   bench_formats --generate FILE SIZE_MB writes a realistic perf-script file
 *                                         of about SIZE_MB megabytes (10^6 bytes)
 *
 * The samples look like a busy node's: 30-frame Erlang stacks (status and
 * process pseudo-frames at the root, then 28 calls), three metric fields,
 * a few thousand distinct stacks over a thousand processes, drawn with a
 * skew so that some stacks are much hotter than others. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kp/buf.h"
#include "kp/folded.h"
#include "kp/intern.h"
#include "kp/perf_reader.h"
#include "kp/perf_writer.h"
#include "kp/segment.h"
#include "kp/sink.h"
#include "kp/source.h"

#define DEPTH 30          /* frames per stack, pseudo-frames included */
#define CALLS (DEPTH - 2) /* Erlang calls per stack */
#define N_STACKS 4000     /* distinct stacks */
#define N_PROCS 1000      /* Erlang processes */
#define N_APP_MODULES 120
#define FUNS_PER_MODULE 12

static void check(kp_status st, const char *what)
{
    if (st != KP_OK) {
        fprintf(stderr, "bench_formats: %s: %s\n", what, kp_strerror(st));
        exit(1);
    }
}

/* CPU seconds of this process: the figures are per core, and other load on
 * the machine does not inflate them (file writes count, as system time). */
static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, compare_doubles);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* xorshift64*: reproducible, fast enough not to show in the figures */
static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static uint64_t rng(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1du;
}

/* 0..n-1, small values much more likely (product of two uniforms) */
static uint32_t skewed(uint32_t n)
{
    uint64_t a = rng() % n, b = rng() % n;
    return (uint32_t)(a * b / n);
}

/* ---- the profile: functions, processes, stacks ---- */

typedef struct {
    char module[48];
    char function[48];
    unsigned arity;
} func;

typedef struct {
    uint32_t calls[CALLS]; /* index into funcs, root first */
    uint32_t proc;         /* 0..N_PROCS-1 */
    uint32_t status;       /* 0..3 */
} stack_shape;

static const char *const otp_modules[] = {"gen_server",
                                          "proc_lib",
                                          "gen_statem",
                                          "supervisor",
                                          "lists",
                                          "maps",
                                          "ets",
                                          "erlang",
                                          "gen",
                                          "io_lib",
                                          "io_lib_format",
                                          "unicode",
                                          "binary",
                                          "string",
                                          "re",
                                          "timer",
                                          "queue",
                                          "gb_trees",
                                          "dict",
                                          "sets",
                                          "prim_inet",
                                          "inet_tcp",
                                          "gen_tcp",
                                          "ssl_gen_statem",
                                          "tls_sender",
                                          "cowboy_stream_h",
                                          "cowboy_handler",
                                          "ranch_conn_sup",
                                          "jsx_decoder",
                                          "jsone_encode",
                                          "mnesia_tm",
                                          "mnesia_locker",
                                          "logger",
                                          "logger_h_common",
                                          "erl_eval",
                                          "code_server",
                                          "application_master",
                                          "rpc",
                                          "global",
                                          "net_kernel"};

static const char *const statuses[] = {"running", "runnable", "waiting", "garbage_collecting"};

typedef struct {
    func *funcs;
    size_t n_funcs;
    stack_shape *shapes;
    kp_frames *frames;
    kp_stacks *stacks;
    uint32_t proc_frame[N_PROCS];
    uint32_t status_frame[4];
    uint32_t stack_id[N_STACKS];
    uint32_t frame_ids[N_STACKS][DEPTH]; /* each stack's frames, root first */
} profile;

static void make_functions(profile *p)
{
    size_t n_otp = sizeof otp_modules / sizeof *otp_modules;
    p->n_funcs = n_otp * 8 + (size_t)N_APP_MODULES * FUNS_PER_MODULE;
    p->funcs = calloc(p->n_funcs, sizeof *p->funcs);
    if (!p->funcs)
        check(KP_ERR_NOMEM, "functions");
    static const char *const otp_funs[] = {
        "loop",  "handle_msg", "try_handle_call", "init_p_do_apply",
        "foldl", "map",        "do_call",         "'-handle_info/2-fun-0-'"};
    size_t k = 0;
    for (size_t m = 0; m < n_otp; m++)
        for (size_t f = 0; f < 8; f++, k++) {
            snprintf(p->funcs[k].module, sizeof p->funcs[k].module, "%s", otp_modules[m]);
            snprintf(p->funcs[k].function, sizeof p->funcs[k].function, "%s", otp_funs[f]);
            p->funcs[k].arity = (unsigned)(f % 5 + 1);
        }
    for (int m = 0; m < N_APP_MODULES; m++)
        for (int f = 0; f < FUNS_PER_MODULE; f++, k++) {
            snprintf(p->funcs[k].module, sizeof p->funcs[k].module, "my_app_%s_%d",
                     m % 3 ? "worker" : "handler", m);
            snprintf(p->funcs[k].function, sizeof p->funcs[k].function, "%s_%d",
                     f % 4 == 0   ? "handle_call"
                     : f % 4 == 1 ? "process_item"
                                  : "do_step",
                     f);
            p->funcs[k].arity = (unsigned)(f % 4);
        }
}

static kp_mfa mfa_of(const func *f)
{
    kp_mfa m = {f->module, strlen(f->module), f->function, strlen(f->function), f->arity, 0};
    return m;
}

/* Interns the 30 frames of `shape` by name, then the stack; `ids` receives
 * the frame ids. */
static uint32_t intern_shape(profile *p, const stack_shape *shape, uint32_t *ids)
{
    char pid[32];
    int n = snprintf(pid, sizeof pid, "<0.%u.0>", 100 + shape->proc);
    check(kp_frames_intern_pseudo(p->frames, statuses[shape->status],
                                  strlen(statuses[shape->status]), "status", &ids[0]),
          "intern status");
    check(kp_frames_intern_pseudo(p->frames, pid, (size_t)n, "process", &ids[1]), "intern process");
    for (int i = 0; i < CALLS; i++) {
        kp_mfa m = mfa_of(&p->funcs[shape->calls[i]]);
        check(kp_frames_intern_mfa(p->frames, &m, &ids[2 + i]), "intern function");
    }
    uint32_t id;
    check(kp_stacks_intern(p->stacks, ids, DEPTH, &id), "intern stack");
    return id;
}

static void make_profile(profile *p)
{
    memset(p, 0, sizeof *p);
    make_functions(p);
    p->frames = kp_frames_create(0);
    p->stacks = kp_stacks_create();
    p->shapes = calloc(N_STACKS, sizeof *p->shapes);
    if (!p->frames || !p->stacks || !p->shapes)
        check(KP_ERR_NOMEM, "profile");
    size_t n_otp = sizeof otp_modules / sizeof *otp_modules;
    /* a few hundred call paths shared by many stacks, as in a real node:
     * processes run the same code and differ near the leaf */
    enum { PATHS = 300 };
    static uint32_t paths[PATHS][CALLS];
    for (int t = 0; t < PATHS; t++)
        for (int i = 0; i < CALLS; i++)
            paths[t][i] = i < 3 ? (uint32_t)(rng() % (n_otp * 8))
                                : (uint32_t)(n_otp * 8 + rng() % (N_APP_MODULES * FUNS_PER_MODULE));
    for (int s = 0; s < N_STACKS; s++) {
        stack_shape *sh = &p->shapes[s];
        const uint32_t *path = paths[skewed(PATHS)];
        int cut = CALLS - 1 - (int)(rng() % 6); /* the last few calls vary */
        for (int i = 0; i < CALLS; i++)
            sh->calls[i] = i < cut ? path[i] : (uint32_t)(rng() % p->n_funcs);
        sh->proc = skewed(N_PROCS);
        sh->status = (uint32_t)(rng() % 8 < 5 ? 0 : rng() % 4);
    }
    for (int s = 0; s < N_STACKS; s++)
        p->stack_id[s] = intern_shape(p, &p->shapes[s], p->frame_ids[s]);
}

static void free_profile(profile *p)
{
    kp_frames_free(p->frames);
    kp_stacks_free(p->stacks);
    free(p->shapes);
    free(p->funcs);
}

/* ---- one sample's record ---- */

typedef struct {
    uint64_t time_us;
    int64_t reductions[N_PROCS];
    int64_t memory[N_PROCS];
    kp_metric metrics[3];
} sampler_state;

static void init_state(sampler_state *st)
{
    memset(st, 0, sizeof *st);
    st->time_us = 1700000000u * (uint64_t)1000000 + 12345;
    for (int i = 0; i < N_PROCS; i++) {
        st->reductions[i] = (int64_t)(rng() % 100000000);
        st->memory[i] = 2704 + (int64_t)(rng() % 1000000);
    }
    st->metrics[0].name = "reductions";
    st->metrics[1].name = "memory";
    st->metrics[2].name = "message_queue_len";
}

/* Fills `r` for the next sample: a stack drawn with skew, metrics that move
 * as a busy process's do, time advancing by about 100 us. */
static uint32_t next_record(const profile *p, sampler_state *st, kp_perf_record *r)
{
    uint32_t s = skewed(N_STACKS);
    uint32_t proc = p->shapes[s].proc;
    uint64_t x = rng();
    int64_t dred = (int64_t)(x % 4000) + 1;
    int64_t dmem = (int64_t)((x >> 12) % 8192) - 4096;
    st->reductions[proc] += dred;
    st->memory[proc] = st->memory[proc] + dmem < 2704 ? 2704 : st->memory[proc] + dmem;
    st->metrics[0].value = st->reductions[proc];
    st->metrics[0].delta = dred;
    st->metrics[1].value = st->memory[proc];
    st->metrics[1].delta = dmem;
    st->metrics[2].value = (int64_t)((x >> 30) % 4);
    st->metrics[2].delta = (int64_t)((x >> 34) % 3) - 1;
    st->time_us += 50 + (x >> 40) % 100;
    r->pid = 4242;
    r->tid = 100 + proc;
    r->cpu = (uint32_t)((x >> 50) % 2);
    r->time_us = st->time_us;
    r->period = 1;
    r->metrics = st->metrics;
    r->n_metrics = 3;
    r->stack = p->stack_id[s];
    return s;
}

/* ---- temporary directories ---- */

static char *make_temp_dir(void)
{
    const char *base = getenv("TMPDIR");
    static char path[4096];
    snprintf(path, sizeof path, "%s/kprof-bench-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(path)) {
        fprintf(stderr, "bench_formats: cannot create %s: %s\n", path, strerror(errno));
        exit(1);
    }
    return path;
}

/* Total size of the files in `dir`; with `remove_them` they are deleted. */
static uint64_t dir_bytes(const char *dir, int remove_them)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    uint64_t total = 0;
    struct dirent *e;
    char path[8192];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat s;
        if (stat(path, &s) == 0)
            total += (uint64_t)s.st_size;
        if (remove_them)
            unlink(path);
    }
    closedir(d);
    return total;
}

/* ---- the measurements ---- */

static const char header_comment[] = "# kprof benchmark profile: beam.smp 4242, monotonic clock\n";

/* perf-script text of n samples into a kp_buf (handed off every MiB).
 * `intern` 0: the stack id is known; 1: the stack is interned from its 30
 * frame ids first (the sampler's case: the agent sends function ids, defined
 * once); 2: its 30 frames are interned by name first, then the stack.
 * Returns seconds; *bytes gets the text size. */
static double run_format(profile *p, uint64_t n, int intern, uint64_t *bytes)
{
    kp_perf_writer *w;
    check(kp_perf_writer_create("beam.smp", "cpu-clock", p->frames, p->stacks, &w), "writer");
    sampler_state *st = malloc(sizeof *st);
    if (!st)
        check(KP_ERR_NOMEM, "state");
    init_state(st);
    kp_buf buf = KP_BUF_INIT;
    uint64_t total = 0;
    kp_perf_record r;
    double t0 = now();
    for (uint64_t i = 0; i < n; i++) {
        uint32_t s = next_record(p, st, &r);
        if (intern == 1) {
            check(kp_stacks_intern(p->stacks, p->frame_ids[s], DEPTH, &r.stack), "intern stack");
        } else if (intern == 2) {
            uint32_t ids[DEPTH];
            r.stack = intern_shape(p, &p->shapes[s], ids);
        }
        check(kp_perf_writer_format(w, &r, &buf), "format");
        if (buf.len >= (1u << 20)) {
            total += buf.len;
            kp_buf_clear(&buf);
        }
    }
    double t = now() - t0;
    *bytes = total + buf.len;
    kp_buf_free(&buf);
    free(st);
    kp_perf_writer_free(w);
    return t;
}

/* n samples formatted and written to segment files in `dir`. Returns
 * seconds; *disk gets the bytes of the files left (then removed). */
static double run_segments(profile *p, uint64_t n, const char *dir, kp_compression c,
                           uint64_t rotate_bytes, unsigned keep, uint64_t *disk)
{
    kp_segment_config cfg = {dir, "bench", "perf", c, 0, rotate_bytes, 0, keep, header_comment};
    kp_segment_writer *seg;
    check(kp_segment_open(&cfg, &seg), "segment open");
    kp_perf_writer *w;
    check(kp_perf_writer_create("beam.smp", "cpu-clock", p->frames, p->stacks, &w), "writer");
    sampler_state *st = malloc(sizeof *st);
    if (!st)
        check(KP_ERR_NOMEM, "state");
    init_state(st);
    kp_buf buf = KP_BUF_INIT;
    kp_perf_record r;
    double t0 = now();
    for (uint64_t i = 0; i < n; i++) {
        next_record(p, st, &r);
        kp_buf_clear(&buf);
        check(kp_perf_writer_format(w, &r, &buf), "format");
        check(kp_segment_write(seg, buf.data, buf.len, r.time_us), "segment write");
    }
    check(kp_segment_close(seg, NULL), "segment close");
    double t = now() - t0;
    *disk = dir_bytes(dir, 1);
    kp_buf_free(&buf);
    free(st);
    kp_perf_writer_free(w);
    return t;
}

static double run_folded(profile *p, uint64_t n)
{
    kp_folded *f = kp_folded_create();
    if (!f)
        check(KP_ERR_NOMEM, "folded");
    sampler_state *st = malloc(sizeof *st);
    if (!st)
        check(KP_ERR_NOMEM, "state");
    init_state(st);
    kp_perf_record r;
    double t0 = now();
    for (uint64_t i = 0; i < n; i++) {
        next_record(p, st, &r);
        check(kp_folded_add_stack(f, p->frames, p->stacks, r.stack, "beam.smp", 1), "folded add");
    }
    double t = now() - t0;
    if (kp_folded_total(f) != n)
        check(KP_ERR_INVAL, "folded total");
    free(st);
    kp_folded_free(f);
    return t;
}

/* Reads perf text from memory and folds it, as `kprof convert` does without
 * the file I/O. Returns seconds. */
static double run_read(const char *text, size_t len, uint64_t expect_samples)
{
    kp_source *src;
    check(kp_source_open_memory(text, len, &src), "source");
    kp_perf_reader *rd = kp_perf_reader_create();
    kp_folded *f = kp_folded_create();
    if (!rd || !f)
        check(KP_ERR_NOMEM, "reader");
    const char *line;
    size_t n;
    kp_status st;
    double t0 = now();
    while ((st = kp_source_next_line(src, &line, &n)) == KP_OK) {
        const kp_perf_sample *s;
        check(kp_perf_reader_line(rd, line, n, &s), "read line");
        if (s)
            check(kp_folded_add(f, s->stack, s->stack_len, s->period), "folded add");
    }
    double t = now() - t0;
    if (st != KP_ERR_EMPTY)
        check(st, "read");
    if (kp_perf_reader_stats_get(rd)->samples != expect_samples ||
        kp_perf_reader_stats_get(rd)->malformed)
        check(KP_ERR_FORMAT, "read back");
    kp_folded_free(f);
    kp_perf_reader_free(rd);
    kp_source_close(src);
    return t;
}

static void print_rate(const char *what, double samples_per_s, const char *extra)
{
    printf("  %-52s %10.0f samples/s  %6.0f ns/sample%s\n", what, samples_per_s,
           1e9 / samples_per_s, extra);
}

static int bench(int runs)
{
    profile p;
    make_profile(&p);
    printf("kprof formats benchmark: median of %d runs, CPU time of one core\n", runs);
    printf("  profile: %d-frame stacks (%d calls + process + status), 3 metrics, %u distinct "
           "stacks, %u frames, %d processes\n\n",
           DEPTH, CALLS, kp_stacks_count(p.stacks), kp_frames_count(p.frames), N_PROCS);
    double *t = calloc((size_t)runs, sizeof *t);
    if (!t)
        check(KP_ERR_NOMEM, "runs");
    char extra[128];
    uint64_t bytes = 0, disk = 0;

    const uint64_t n_fmt = 500000;
    for (int i = 0; i < runs; i++)
        t[i] = run_format(&p, n_fmt, 0, &bytes);
    double fmt_rate = n_fmt / median(t, runs);
    snprintf(extra, sizeof extra, "  %6.0f MB/s", fmt_rate * ((double)bytes / n_fmt) / 1e6);
    print_rate("perf-script format into kp_buf (stack interned)", fmt_rate, extra);

    for (int i = 0; i < runs; i++)
        t[i] = run_format(&p, n_fmt, 1, &bytes);
    print_rate("intern stack of 30 frame ids, format into kp_buf", n_fmt / median(t, runs), "");
    for (int i = 0; i < runs; i++)
        t[i] = run_format(&p, n_fmt, 2, &bytes);
    print_rate("intern 30 frames by name + stack, format", n_fmt / median(t, runs), "");
    double bytes_per_sample = (double)bytes / n_fmt;

    char *dir = make_temp_dir();
    const uint64_t n_seg = 200000;
    for (int i = 0; i < runs; i++)
        t[i] = run_segments(&p, n_seg, dir, KP_COMPRESS_NONE, 64u << 20, 2, &disk);
    print_rate("format + kp_segment, plain files (64 MiB rotation)", n_seg / median(t, runs), "");

    /* sizes: one segment each, every byte kept */
    uint64_t size[3];
    const char *names[3] = {"plain", "gzip", "zstd"};
    int comp_runs = runs < 3 ? runs : 3;
    for (int c = 0; c < 3; c++) {
        for (int i = 0; i < comp_runs; i++)
            t[i] = run_segments(&p, n_seg, dir, (kp_compression)c, 0, 0, &size[c]);
        if (c) {
            char what[80];
            snprintf(what, sizeof what, "format + kp_segment, %s (default level)", names[c]);
            print_rate(what, n_seg / median(t, comp_runs), "");
        }
    }
    rmdir(dir);

    const uint64_t n_fold = 1000000;
    for (int i = 0; i < runs; i++)
        t[i] = run_folded(&p, n_fold);
    print_rate("folded aggregation (kp_folded_add_stack)", n_fold / median(t, runs), "");

    /* reading back: the text of 200k samples, in memory */
    {
        kp_perf_writer *w;
        check(kp_perf_writer_create("beam.smp", "cpu-clock", p.frames, p.stacks, &w), "writer");
        sampler_state *st = malloc(sizeof *st);
        if (!st)
            check(KP_ERR_NOMEM, "state");
        init_state(st);
        kp_buf text = KP_BUF_INIT;
        check(kp_buf_append_str(&text, header_comment), "text");
        kp_perf_record r;
        for (uint64_t i = 0; i < n_seg; i++) {
            next_record(&p, st, &r);
            check(kp_perf_writer_format(w, &r, &text), "format");
        }
        for (int i = 0; i < runs; i++)
            t[i] = run_read(text.data, text.len, n_seg);
        double s = median(t, runs);
        snprintf(extra, sizeof extra, "  %6.0f MB/s", (double)text.len / s / 1e6);
        print_rate("read + fold perf text in memory (source, reader, folded)", n_seg / s, extra);
        kp_buf_free(&text);
        free(st);
        kp_perf_writer_free(w);
    }

    printf("\n  bytes per sample (%llu samples, one segment each):\n", (unsigned long long)n_seg);
    for (int c = 0; c < 3; c++) {
        printf("    %-6s %8.1f bytes/sample", names[c], (double)size[c] / n_seg);
        if (c)
            printf("  (%.1fx smaller than plain)", (double)size[0] / (double)size[c]);
        printf("\n");
    }
    printf("    (text formatted into kp_buf: %.1f bytes/sample)\n", bytes_per_sample);
    printf("\n  target: >= 1,000,000 samples/s written on one core: %s\n",
           fmt_rate >= 1e6 ? "met" : "NOT met");
    free(t);
    free_profile(&p);
    return 0;
}

/* Writes about size_mb * 10^6 bytes of perf-script text to `path`. */
static int generate(const char *path, double size_mb)
{
    profile p;
    make_profile(&p);
    kp_perf_writer *w;
    check(kp_perf_writer_create("beam.smp", "cpu-clock", p.frames, p.stacks, &w), "writer");
    kp_sink *sink;
    kp_status s = kp_sink_open_file(path, KP_COMPRESS_NONE, 0, &sink);
    if (s != KP_OK) {
        fprintf(stderr, "bench_formats: cannot write %s: %s\n", path,
                s == KP_ERR_IO ? strerror(errno) : kp_strerror(s));
        return 1;
    }
    sampler_state *st = malloc(sizeof *st);
    if (!st)
        check(KP_ERR_NOMEM, "state");
    init_state(st);
    check(kp_sink_write(sink, header_comment, strlen(header_comment)), "write");
    kp_buf buf = KP_BUF_INIT;
    kp_perf_record r;
    uint64_t target = (uint64_t)(size_mb * 1e6), samples = 0;
    uint64_t written = strlen(header_comment);
    while (written < target || samples < 2) {
        next_record(&p, st, &r);
        check(kp_perf_writer_format(w, &r, &buf), "format");
        samples++;
        if (buf.len >= (1u << 20) || written + buf.len >= target) {
            check(kp_sink_write(sink, buf.data, buf.len), "write");
            written += buf.len;
            kp_buf_clear(&buf);
        }
    }
    check(kp_sink_write(sink, buf.data, buf.len), "write");
    s = kp_sink_commit(sink);
    if (s != KP_OK) {
        fprintf(stderr, "bench_formats: cannot write %s: %s\n", path,
                s == KP_ERR_IO ? strerror(errno) : kp_strerror(s));
        return 1;
    }
    fprintf(stderr, "bench_formats: wrote %s: %.1f MB, %llu samples, %u distinct stacks\n", path,
            (double)written / 1e6, (unsigned long long)samples, kp_stacks_count(p.stacks));
    kp_buf_free(&buf);
    free(st);
    kp_perf_writer_free(w);
    free_profile(&p);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--generate") == 0) {
        char *end;
        double mb = strtod(argv[3], &end);
        if (*end || !(mb > 0)) {
            fprintf(stderr, "bench_formats: SIZE_MB must be a positive number\n");
            return 2;
        }
        return generate(argv[2], mb);
    }
    int runs = 5;
    if (argc == 3 && strcmp(argv[1], "--runs") == 0) {
        runs = atoi(argv[2]);
        if (runs < 1 || runs > 100) {
            fprintf(stderr, "bench_formats: --runs takes 1 to 100\n");
            return 2;
        }
    } else if (argc != 1) {
        fprintf(stderr, "usage: bench_formats [--runs N] | --generate FILE SIZE_MB\n");
        return 2;
    }
    return bench(runs);
}

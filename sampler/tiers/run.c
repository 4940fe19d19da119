#define _GNU_SOURCE
#include "tiers/run.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/cli.h"
#include "common/clock.h"
#include "common/signals.h"
#include "kp/alloc.h"
#include "node/agent.h"
#include "node/connection.h"
#include "node/nif.h"
#include "node/trace_port.h"
#include "tiers/events.h"
#include "tiers/match.h"
#include "tiers/setup.h"
#include "tiers/slow_trace.h"
#include "node/nif_reader.h"

#define MAX_TIER_FILE (1u << 20)
#define QUIET_NS (50 * 1000000LL)     /* no event for this long: the stream is quiet */
#define NIF_FLUSH_NS (20 * 1000000LL) /* the NIF holds events at most this long */

typedef struct {
    const kp_tiers_options *o;
    kp_node node;
    kp_tiers_config cfg;
    kp_tier_stats *stats;
    kp_tier_match *match;
    kp_tier_decoder dec;
    kp_trace_port stream;   /* the ip trace port's events, or */
    kp_nif_reader *nif;     /* the kprof_tracer NIF's */
    int jsonl_fd, calls_fd; /* -1 when not written */
    char jsonl_path[4200], calls_path[4200], table_path[4200];
    char slow_dir[4200]; /* the slow requests' traces: DIR/slow, or "" */
    unsigned slow_seq;
    /* clock: node monotonic time = local monotonic - offset (an upper bound
     * of the lag by at most the smallest one-way delay seen) */
    int64_t offset;
    long clock_seq;
    int paused;
    int64_t paused_at, resume_at;
    int64_t fresh_from; /* node time of the last resume: older events belong to the pause */
    /* node time of the last pause: events before it still count; the
     * requests open once the stream has passed it are cut then */
    int64_t pause_from;
    int cut_pending;
    uint64_t dropped, pauses, paused_ns, rearms;
    uint64_t interval_ms, max_lag_ns, cooldown_ns;
    int lost; /* the node connection is gone */
} tiers_run;

static int read_file(const char *path, char **text, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    char *buf = kp_malloc(MAX_TIER_FILE + 1);
    size_t n = buf ? fread(buf, 1, MAX_TIER_FILE + 1, f) : 0;
    int bad = !buf || ferror(f) || n > MAX_TIER_FILE;
    fclose(f);
    if (bad) {
        kp_free(buf);
        errno = buf ? EFBIG : ENOMEM;
        return -1;
    }
    *text = buf;
    *len = n;
    return 0;
}

/* ------------------------------------------------------------------ */
/* output */

static void write_all(int fd, const char *data, size_t len, const char *path)
{
    while (fd >= 0 && len) {
        ssize_t n = write(fd, data, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            kp_warn("cannot write %s: %s; going on without it", path, strerror(errno));
            return;
        }
        data += n;
        len -= (size_t)n;
    }
}

static void on_tree(void *ctx, const char *text, size_t len)
{
    tiers_run *s = ctx;
    fwrite(text, 1, len, stderr); /* asked for with print_calls or a slow threshold */
    write_all(s->calls_fd, text, len, s->calls_path);
}

/* A slow request, with -o DIR: its trace in DIR/slow, named by its
 * identity (letters, digits, _ and - kept) and a number; the path goes
 * where its call tree went. */
static void on_slow(void *ctx, const kp_tier_request *r)
{
    tiers_run *s = ctx;
    char id[48];
    size_t n = 0;
    for (size_t k = 0; k < r->identity_len && n < 32; k++) {
        char c = r->identity[k];
        int keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                   c == '_' || c == '-';
        id[n++] = keep ? c : '_';
    }
    snprintf(id + n, sizeof id - n, "%s%u", n ? "-" : "", ++s->slow_seq);
    char folded[4400], why[512], line[4600];
    if (kp_tier_slow_trace_write(r, s->cfg.mfas, s->cfg.n_fns, s->slow_dir, id, folded,
                                 sizeof folded, why, sizeof why) != KP_OK) {
        kp_warn("cannot write the trace of a slow request into %s: %s", s->slow_dir, why);
        return;
    }
    int len = snprintf(line, sizeof line, "trace %s\n", folded);
    on_tree(s, line, len > 0 && (size_t)len < sizeof line ? (size_t)len : 0);
}

static void set_counters(tiers_run *s, int64_t now)
{
    kp_tier_match_counters mc = kp_tier_match_counts(s->match);
    uint64_t paused = s->paused_ns + (s->paused ? (uint64_t)(now - s->paused_at) : 0);
    kp_tier_counters c = {.requests = mc.requests,
                          .events = mc.events,
                          .dropped_events = s->dropped,
                          .unattributed_events = mc.unattributed + mc.late,
                          .cut_requests = mc.cut,
                          .pauses = s->pauses,
                          .paused_ms = paused / 1000000,
                          .rearms = s->rearms,
                          .paused = s->paused};
    kp_tier_stats_set_counters(s->stats, &c);
}

static void iso_now(char *out, size_t cap)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(out, cap, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, cap - n, ".%03ldZ", ts.tv_nsec / 1000000);
}

/* One report: the interval's JSON line, the live table, the node's copy.
 * The since-start line and table are made once: the node gets them every
 * time, the final report also writes and prints them. */
static void report(tiers_run *s, uint64_t interval_ms, int final)
{
    char when[64];
    kp_buf json = {0}, table = {0}, since = {0}, total = {0};
    kp_tier_match_flush(s->match, final);
    if (final) /* requests still running lost their ends to the stop */
        kp_tier_match_cut(s->match);
    set_counters(s, kp_now_ns());
    iso_now(when, sizeof when);
    kp_tier_stats_json(s->stats, KP_TIER_INTERVAL, when, s->node.target, interval_ms, &json);
    if (final || !s->lost) {
        kp_tier_stats_json(s->stats, KP_TIER_SINCE_START, when, s->node.target, interval_ms,
                           &since);
        kp_tier_stats_table(s->stats, KP_TIER_SINCE_START, s->o->stat, &total);
    }
    if (!final)
        kp_tier_stats_table(s->stats, KP_TIER_INTERVAL, s->o->stat, &table);
    const kp_buf *shown = final ? &total : &table;
    write_all(s->jsonl_fd, json.data, json.len, s->jsonl_path);
    if (final)
        write_all(s->jsonl_fd, since.data, since.len, s->jsonl_path);
    if (!s->o->quiet || final) {
        printf("%s\n%.*s\n", when, (int)shown->len, shown->data ? shown->data : "");
        fflush(stdout);
    }
    if (!s->lost)
        kp_tiers_send_report(&s->node, total.data ? total.data : "", total.len,
                             since.data ? since.data : "", since.len ? since.len - 1 : 0);
    if (final && s->table_path[0]) {
        int fd = open(s->table_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        write_all(fd, total.data, total.len, s->table_path);
        if (fd >= 0)
            close(fd);
    }
    kp_tier_stats_end_interval(s->stats);
    kp_buf_free(&json);
    kp_buf_free(&table);
    kp_buf_free(&since);
    kp_buf_free(&total);
}

/* ------------------------------------------------------------------ */
/* overload */

/* `node_from`: the node's time from which its events are lost to the pause
 * (the node's breaker says when it tripped), or 0 for now. */
static void pause_tracing(tiers_run *s, const char *why, int64_t node_from)
{
    if (s->paused)
        return;
    int64_t now = kp_now_ns();
    s->paused = 1;
    s->paused_at = now;
    s->resume_at = now + (int64_t)s->cooldown_ns;
    s->pauses++;
    s->pause_from = node_from ? node_from : now - s->offset;
    s->cut_pending = 1;
    kp_tiers_send_atom(&s->node, "pause");
    kp_warn("tracing paused for %llu ms: %s", (unsigned long long)(s->cooldown_ns / 1000000), why);
}

/* The events of before the pause are in (the stream passed its time, or
 * went quiet): the requests still open lost their ends to the pause. */
static void cut_open_requests(tiers_run *s)
{
    if (!s->cut_pending)
        return;
    s->cut_pending = 0;
    kp_tier_match_cut(s->match);
}

static void maybe_resume(tiers_run *s, int64_t now)
{
    if (!s->paused || now < s->resume_at)
        return;
    cut_open_requests(s);
    s->paused = 0;
    s->paused_ns += (uint64_t)(now - s->paused_at);
    s->fresh_from = now - s->offset;
    kp_tiers_send_atom(&s->node, "resume");
}

/* ------------------------------------------------------------------ */
/* the trace stream */

typedef struct {
    tiers_run *s;
    int64_t oldest; /* time of the first event read in this round, or 0 */
} read_round;

static void take(read_round *r, const kp_tier_event *ev)
{
    tiers_run *s = r->s;
    /* what happened before the pause was traced whole: a request that
     * ended before it is counted, not cut */
    if (s->cut_pending && ev->ts_ns < s->pause_from) {
        kp_tier_match_event(s->match, ev);
        return;
    }
    cut_open_requests(s);
    /* events from before the last resume piled up before the pause: their
     * requests were cut, and their age must not trip the breaker again */
    if (ev->ts_ns >= s->fresh_from) {
        if (!r->oldest)
            r->oldest = ev->ts_ns;
        if (!s->paused)
            kp_tier_match_event(s->match, ev);
    }
}

static int on_event(void *ctx, const char *term, size_t len)
{
    read_round *r = ctx;
    kp_tier_event ev;
    int rc = kp_tier_decode(&r->s->dec, term, len, &ev);
    if (rc == 1)
        take(r, &ev);
    return rc < 0 ? -1 : 0;
}

static void on_drop(void *ctx, uint32_t count);

static int on_nif_event(void *ctx, const kp_trace_event *nif)
{
    read_round *r = ctx;
    kp_tier_event ev;
    if (nif->kind == KP_TRACE_OTHER && nif->dropped)
        on_drop(ctx, nif->dropped); /* the NIF's buffer was full */
    else if (kp_tier_from_nif(&r->s->dec, nif, &ev) == 1)
        take(r, &ev);
    return 0;
}

static void on_drop(void *ctx, uint32_t count)
{
    read_round *r = ctx;
    char why[96];
    r->s->dropped += count;
    snprintf(why, sizeof why, "the node's %s dropped %u events",
             r->s->nif ? "tracer NIF" : "trace port", count);
    pause_tracing(r->s, why, 0);
}

/* Returns 1 while the stream is open, 0 at its end, -1 on error. */
static int read_stream(tiers_run *s)
{
    read_round r = {.s = s};
    kp_trace_port_handler h = {.ctx = &r, .on_event = on_event, .on_drop = on_drop};
    int rc =
        s->nif ? kp_nif_reader_read(s->nif, on_nif_event, &r) : kp_trace_port_read(&s->stream, &h);
    /* the age of the oldest event read now: events that waited longer than
     * max_lag to be read mean the collector lags, even if it has caught up
     * within this call; a quiet stream (nothing read) is not a late one */
    if (rc == 1 && !s->paused && r.oldest) {
        int64_t lag = (kp_now_ns() - s->offset) - r.oldest;
        if (lag > (int64_t)s->max_lag_ns) {
            char why[128];
            snprintf(why, sizeof why, "events arrive %lld ms after they happened (max lag %llu ms)",
                     (long long)(lag / 1000000), (unsigned long long)(s->max_lag_ns / 1000000));
            pause_tracing(s, why, 0);
        }
    }
    kp_tier_match_flush(s->match, 0);
    return rc;
}

/* {kprof_tiers_backlog, Bytes, NodeTime}: the node's own breaker tripped at
 * NodeTime (its trace backlog grew Bytes past its mark, or Bytes waited in
 * the tracer NIF when it passed its fill mark) and its patterns are off:
 * count the pause and resume after the cool-down, as for a trip here. */
static int node_tripped(tiers_run *s, const char *buf, int i)
{
    char tag[MAXATOMLEN], why[128];
    int arity;
    long long bytes, at;
    if (ei_decode_tuple_header(buf, &i, &arity) != 0 || arity != 3 ||
        ei_decode_atom(buf, &i, tag) != 0 || strcmp(tag, "kprof_tiers_backlog") != 0 ||
        ei_decode_longlong(buf, &i, &bytes) != 0 || ei_decode_longlong(buf, &i, &at) != 0)
        return 0;
    snprintf(why, sizeof why, "the node's trace backlog passed its mark (%.1f MB)",
             (double)bytes / (1024.0 * 1024.0));
    /* the returns of calls made before the trip still come (the patterns
     * are off, not the calls' return traces): with the trip's own time they
     * are not taken to close requests that lost their calls */
    pause_tracing(s, why, at ? at : 1);
    return 1;
}

/* Messages from the node: clock replies and the node's breaker; ticks are
 * answered by ei. */
static void read_node(tiers_run *s)
{
    erlang_msg msg;
    ei_x_buff x;
    ei_x_new(&x);
    int rc = ei_xreceive_msg_tmo(s->node.fd, &msg, &x, 10);
    if (rc == ERL_ERROR && erl_errno != ETIMEDOUT && erl_errno != EAGAIN) {
        s->lost = 1;
    } else if (rc == ERL_MSG && (msg.msgtype == ERL_SEND || msg.msgtype == ERL_REG_SEND)) {
        int i = 0, version, arity;
        char tag[MAXATOMLEN];
        long seq;
        long long remote;
        unsigned long rearms;
        if (ei_decode_version(x.buff, &i, &version) == 0 && node_tripped(s, x.buff, i)) {
            /* paused */
        } else if (ei_decode_tuple_header(x.buff, &i, &arity) == 0 && arity == 4 &&
                   ei_decode_atom(x.buff, &i, tag) == 0 && strcmp(tag, "kprof_tiers_clock") == 0 &&
                   ei_decode_long(x.buff, &i, &seq) == 0 &&
                   ei_decode_longlong(x.buff, &i, &remote) == 0 &&
                   ei_decode_ulong(x.buff, &i, &rearms) == 0) {
            int64_t offset = kp_now_ns() - remote;
            if (offset < s->offset)
                s->offset = offset;
            s->rearms = rearms;
        }
    }
    ei_x_free(&x);
}

static int open_outputs(tiers_run *s, char *err, size_t err_len)
{
    const char *dir = s->o->output_dir;
    s->jsonl_fd = s->calls_fd = -1;
    const char *stats_file = s->cfg.stats_file[0] ? s->cfg.stats_file : NULL;
    if (dir) {
        if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
            snprintf(err, err_len, "cannot create output directory %s: %s", dir, strerror(errno));
            return -1;
        }
        snprintf(s->jsonl_path, sizeof s->jsonl_path, "%s/tiers.jsonl", dir);
        snprintf(s->table_path, sizeof s->table_path, "%s/tiers.txt", dir);
        snprintf(s->calls_path, sizeof s->calls_path, "%s/calls.log", dir);
        if (s->cfg.slow_us)
            snprintf(s->slow_dir, sizeof s->slow_dir, "%s/slow", dir);
    }
    if (stats_file) /* {stats_dumper, {file, Path}} */
        snprintf(s->jsonl_path, sizeof s->jsonl_path, "%s", stats_file);
    if (s->jsonl_path[0]) {
        s->jsonl_fd =
            open(s->jsonl_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
        if (s->jsonl_fd < 0) {
            snprintf(err, err_len, "cannot create %.1000s: %s", s->jsonl_path, strerror(errno));
            return -1;
        }
    }
    if (dir && (s->cfg.print_calls || s->cfg.slow_us)) {
        s->calls_fd =
            open(s->calls_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
        if (s->calls_fd < 0) {
            snprintf(err, err_len, "cannot create %.1000s: %s", s->calls_path, strerror(errno));
            return -1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ */

/* kprof's tracer NIF, bounded by construction, serves where it can: kprof
 * brings it into a node on its host (a session's kprof application has it).
 * Returns the socket it is to connect to (its port in *port), or -1 for the
 * trace port. */
static int open_nif_listener(tiers_run *s, unsigned *port)
{
    char why[512];
    if (s->o->trace_port)
        return -1;
    if (!s->o->session && kp_nif_bring(&s->node, why, sizeof why) != 0) {
        if (!s->o->quiet)
            fprintf(stderr, "kprof: tier events go through the node's trace port: %s\n", why);
        return -1;
    }
    return kp_loopback_listen(port);
}

/* The NIF connected before kprof_tiers:start returned. */
static void accept_nif(tiers_run *s, int listener)
{
    int fd = listener >= 0 ? kp_loopback_accept(listener, 2000) : -1;
    if (fd >= 0 && !(s->nif = kp_nif_reader_create(fd)))
        close(fd);
}

static int setup(tiers_run *s, char *err, size_t err_len)
{
    const kp_tiers_options *o = s->o;
    char target[512], cookie[512], *text = NULL;
    size_t text_len = 0;
    if (kp_node_name(o->node, target, sizeof target, err, err_len) != 0)
        return KP_EXIT_USAGE;
    if (!o->session && read_file(o->tiers_file, &text, &text_len) != 0) {
        snprintf(err, err_len, "cannot read the tier file %s: %s", o->tiers_file, strerror(errno));
        return KP_EXIT_USAGE;
    }
    if (kp_cookie_load(o->cookie_file, cookie, sizeof cookie, err, err_len) != 0 ||
        kp_node_connect(&s->node, target, cookie, o->connect_timeout_ms, err, err_len) != 0) {
        kp_free(text);
        return KP_EXIT_NODE;
    }
    /* a session runs the node's own kprof application: loading other code
     * over it would purge the session process */
    kp_agent agent;
    if (!o->session && kp_agent_load(&agent, &s->node, KP_AGENT_TIERS, err, err_len) != 0) {
        kp_free(text);
        return KP_EXIT_NODE;
    }
    char why[2048];
    unsigned nif_port = 0;
    int listener = open_nif_listener(s, &nif_port);
    int rc =
        kp_tiers_start(&s->node, text, text_len, o->queue_size, nif_port, &s->cfg, why, sizeof why);
    kp_free(text);
    if (rc == KP_TIERS_START_OK && s->cfg.via_nif)
        accept_nif(s, listener);
    else if (rc == KP_TIERS_START_OK && s->cfg.nif_refused[0] && !o->quiet)
        fprintf(stderr,
                "kprof: tier events go through the node's trace port (the tracer NIF: %s)\n",
                s->cfg.nif_refused);
    if (listener >= 0)
        close(listener);
    if (rc == KP_TIERS_START_OK && s->cfg.via_nif && !s->nif) {
        snprintf(err, err_len, "%s: its tracer NIF did not connect to kprof; try --trace-port",
                 target);
        return KP_EXIT_NODE;
    }
    if (rc == KP_TIERS_START_BAD_CONFIG) {
        snprintf(err, err_len, "%s: %s", o->session ? "kprof:start_trace/1" : o->tiers_file, why);
        return KP_EXIT_DATA;
    }
    if (rc != KP_TIERS_START_OK) {
        snprintf(err, err_len, "%s: %s", target, why);
        return KP_EXIT_NODE;
    }
    s->offset = kp_now_ns() - s->cfg.node_time_ns;
    s->interval_ms =
        o->report_interval_us ? o->report_interval_us / 1000 : s->cfg.report_interval_ms;
    s->max_lag_ns = (o->max_lag_us ? o->max_lag_us / 1000 : s->cfg.max_lag_ms) * 1000000;
    s->cooldown_ns = (o->cooldown_us ? o->cooldown_us / 1000 : s->cfg.cooldown_ms) * 1000000;
    if (o->print_calls)
        s->cfg.print_calls = 1;
    if (o->slow_us)
        s->cfg.slow_us = o->slow_us;

    s->dec = (kp_tier_decoder){.mfas = s->cfg.mfas, .n = s->cfg.n_fns};
    s->stats = kp_tier_stats_create((const char *const *)s->cfg.tier_names, s->cfg.n_tiers,
                                    s->cfg.max_identities);
    kp_tier_match_limits lim = kp_tier_match_default_limits();
    s->match = s->stats ? kp_tier_match_create(s->stats, s->cfg.fns, s->cfg.n_fns, &lim) : NULL;
    if (!s->match) {
        snprintf(err, err_len, "out of memory");
        return KP_EXIT_FAILURE;
    }
    kp_tier_match_trees(s->match, s->cfg.print_calls, s->cfg.slow_us, on_tree, s);
    if (open_outputs(s, err, err_len) != 0)
        return KP_EXIT_FAILURE;
    if (s->slow_dir[0])
        kp_tier_match_slow(s->match, s->cfg.slow_us, on_slow, s);
    if (s->nif)
        return KP_EXIT_OK;
    return kp_trace_port_connect(&s->stream, target, s->cfg.port, err, err_len) != 0 ? KP_EXIT_NODE
                                                                                     : KP_EXIT_OK;
}

static void teardown(tiers_run *s)
{
    if (s->node.fd >= 0 && !s->lost)
        kp_tiers_send_atom(&s->node, "stop");
    kp_trace_port_close(&s->stream);
    kp_nif_reader_free(s->nif);
    if (s->jsonl_fd >= 0)
        close(s->jsonl_fd);
    if (s->calls_fd >= 0)
        close(s->calls_fd);
    kp_tier_match_free(s->match);
    kp_tier_stats_free(s->stats);
    kp_tiers_config_free(&s->cfg);
    kp_node_close(&s->node);
}

int kp_tiers_run(const kp_tiers_options *o)
{
    tiers_run s = {
        .o = o, .stream = {.fd = -1}, .jsonl_fd = -1, .calls_fd = -1, .fresh_from = INT64_MIN};
    s.node.fd = -1;
    char err[4096];
    kp_stop_on_signals();

    int code = setup(&s, err, sizeof err);
    if (code != KP_EXIT_OK) {
        kp_error("%s", err);
        teardown(&s);
        return code;
    }
    if (!o->quiet)
        fprintf(stderr, "kprof: tracing %zu tiers on %s; a table every %llu ms%s\n", s.cfg.n_tiers,
                s.node.target, (unsigned long long)s.interval_ms,
                o->duration_us ? "" : "; Ctrl-C to stop");
    int64_t start = kp_now_ns(), next_report = start + (int64_t)s.interval_ms * 1000000;
    int64_t deadline = o->duration_us ? start + (int64_t)o->duration_us * 1000 : INT64_MAX;
    int64_t last_report = start, last_data = start;
    const char *ended = NULL;
    while (!kp_stop_requested() && !ended) {
        int64_t now = kp_now_ns();
        if (now >= deadline)
            break;
        maybe_resume(&s, now);
        if (now >= next_report) {
            report(&s, (uint64_t)(now - last_report) / 1000000, 0);
            kp_tiers_send_clock(&s.node, ++s.clock_seq);
            last_report = now;
            next_report += (int64_t)s.interval_ms * 1000000;
            if (next_report <= now)
                next_report = now + (int64_t)s.interval_ms * 1000000;
        }
        int64_t wake = next_report < deadline ? next_report : deadline;
        int timeout = (int)((wake - now) / 1000000) + 1;
        if (timeout > 100)
            timeout = 100;
        int events_fd = s.nif ? kp_nif_reader_fd(s.nif) : s.stream.fd;
        struct pollfd fds[2] = {{.fd = events_fd, .events = POLLIN},
                                {.fd = s.node.fd, .events = POLLIN}};
        int ready = poll(fds, 2, timeout);
        if (ready < 0 && errno == EINTR)
            continue; /* a signal, e.g. SIGCONT: not a quiet stream */
        if (ready < 0)
            break;
        if (fds[1].revents)
            read_node(&s);
        if (s.lost) {
            ended = "lost";
        } else if (!fds[0].revents) {
            /* nothing to read for QUIET_NS: every event up to then is in
             * (the NIF writes what it holds every 20 ms), so the requests
             * that closed before the node went quiet need no newer event */
            int64_t now_ns = kp_now_ns();
            if (now_ns - last_data >= QUIET_NS) {
                cut_open_requests(&s);
                kp_tier_match_quiet(s.match, now_ns - s.offset - NIF_FLUSH_NS);
                kp_tier_match_flush(s.match, 0);
            }
        } else {
            last_data = kp_now_ns();
            int rc = read_stream(&s);
            if (rc == 0)
                ended = "stopped";
            else if (rc < 0)
                ended = "broken";
        }
    }
    if (ended && strcmp(ended, "lost") == 0)
        kp_error("lost the connection to %s; the totals so far follow%s%s", s.node.target,
                 s.jsonl_path[0] ? " and are in " : "", s.jsonl_path);
    else if (ended && strcmp(ended, "stopped") == 0)
        fprintf(stderr, "kprof: tier tracing was stopped on %s\n", s.node.target);
    else if (ended)
        kp_error("the trace stream from %s is malformed; stopping", s.node.target);
    report(&s, (uint64_t)(kp_now_ns() - last_report) / 1000000, 1);
    if (!o->quiet && s.jsonl_path[0])
        fprintf(stderr, "kprof: wrote %s%s%s\n", s.jsonl_path, s.table_path[0] ? " and " : "",
                s.table_path);
    teardown(&s);
    if (ended && strcmp(ended, "lost") == 0)
        return KP_EXIT_NODE;
    return ended && strcmp(ended, "broken") == 0 ? KP_EXIT_DATA : KP_EXIT_OK;
}

/* kprof_tracer: an erl_tracer NIF for request traces. Instead of building
 * a trace message term and sending it through a port (a term encoding and a
 * socket write per event), each event is appended as a small binary record
 * to one buffer, written to the kprof collector's socket in 64 KB writes.
 *
 * The records are kprof_tracer_records.h.
 *
 * For request traces that follow their messages, the NIF is also the
 * node's system seq tracer (seq_trace's `receive` events say when a
 * process takes in a message of a request) and, on a node listening for
 * another node's traces, the meta tracer of the gen_server callbacks' hook
 * (see pid_roles and pid_remote below).
 *
 * Safety: a scheduler never waits for the collector. Writes do not block;
 * what the socket does not take waits in a bounded buffer (8 MB), and past
 * that events are dropped and counted (the collector then cuts the traces
 * that lost events); a trace's begin and end marks have a reserve of their
 * own (MARK_RESERVE), so that a trace is cut, never lost. A broken
 * connection stops tracing through this tracer: enabled/3 then says
 * `remove`.
 *
 * Tier tracing (connect/2) adds two things: a call's seq_trace token and
 * request identity (its pattern's message) go into SEQ_CALL records, and a
 * breaker: once more than the fill mark waits, or an event is dropped, the
 * NIF discards every event (enabled/3 says `discard`, so none is even
 * built) until rearm/0. The node's memory for tier events is then this
 * buffer's touched part, whatever the event rate; kprof_tiers sees the trip
 * at its next flush/0 and takes the patterns off. */
#include <erl_nif.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kprof_tracer_records.h"

#define WRITE_AT (64 * 1024)      /* write once this much is waiting */
#define BUF_CAP (8 * 1024 * 1024) /* then drop */
#define TABLE KPT_MAX_IDS         /* slots; reset past half full, so ids stay below it */
/* The buffer's end is kept for the marks that begin and end a request trace
 * (and the drop notice and pid that go before one): a begin mark dropped
 * while the collector is behind would leave a trace the node handed an id
 * for, and no file; an end mark dropped before the notice of lost events,
 * a trace that looks whole. */
#define MARK_RESERVE (64 * 1024)

static ErlNifMutex *mu;
static int fd = -1;
static unsigned char buf[BUF_CAP];
static size_t head, len;           /* buf[head..len) waits to be written */
static size_t write_at = WRITE_AT; /* the events write once this much waits */
static uint32_t pending_drops;
/* what room() leaves free: 0 while a mark goes in */
static size_t spare = MARK_RESERVE;
static uint64_t pid_keys[TABLE];
static uint32_t pid_ids[TABLE];
static uint32_t n_pids;
static uint64_t mfa_keys[TABLE][3];
static uint32_t mfa_ids[TABLE];
static uint32_t n_mfas;
static uint64_t dropped;
/* Request traces, per pid id: the request trace its seq_trace token was
 * last seen to be for (N of its label {kprof, N}; 0: none; KPT_NO_ID: not
 * known since the last RESET) */
static uint32_t pid_labels[TABLE];
/* Following (request traces): a process a traced one sent a message of a
 * request to got the trace flags from the send pattern (see kprof_rtrace).
 * While the NIF is the node's system seq tracer, the seq_trace `receive`
 * event of such a message says when the process takes it in (RECEIVE): it
 * works for that request from there, until it calls again the function it
 * took the message in (its receive loop: `recv_fn`, the function its last
 * call, return or scheduling in named: `cur_fn`), where it waits for its
 * next message (LABEL 0). This holds for any receive loop, OTP behaviour or
 * not. Idle (no request, every message of a request taken in: `pending`,
 * counted from SEND), its events are discarded (enabled/3) but for its
 * calls, sends and spawns. Its flags stay: removing them (enabled/3's
 * `remove`) would race a request's send, whose pattern gives them anew but
 * whose SEND comes here only after; kprof_rtrace removes them when no
 * trace runs. The processes of a trace itself (its first, those they
 * spawn, and those a process spawns while it works for a request) are
 * members, never idle, whatever their token. */
enum { ROLE_NONE, ROLE_MEMBER, ROLE_FOLLOWED };
static unsigned char pid_roles[TABLE];
static uint16_t pid_pending[TABLE];
static uint32_t cur_fn[TABLE], recv_fn[TABLE]; /* MFA ids; KPT_NO_ID: none */
/* With the setting otp_calls off, OTP's modules have no call pattern but
 * for the receive loops of its behaviours (gen_server's loop, ...), whose
 * pattern's message is the atom kprof_loop (kprof_rtrace_patterns:set/2):
 * such a call tells that the process is back in its loop, and is no event
 * of the stream. A receive loop with no pattern at all (a plain process of
 * OTP's) is back when it is scheduled out (OUT) in the function it took
 * the message in after leaving it (`left_recv`) with no event naming its
 * way back (a process returned there, cur_fn, may be scheduled out midway
 * through its own work). */
static unsigned char left_recv[TABLE];
/* Listening for another node's traces (kprof_rtrace:listen/1): a process
 * that calls a gen_server callback with a request's token takes the
 * request in there (the meta pattern's event); its stretch ends when that
 * callback returns (its return_from), not at its loop. */
static unsigned char pid_remote[TABLE];
static uint32_t n_followed;  /* pids with ROLE_FOLLOWED */
static int seq_calls;        /* tier tracing: SEQ_CALL and exception records */
static size_t fill_mark;     /* tier tracing: trip past this much waiting */
static volatile int tripped; /* read without the lock by enabled/3 */
static size_t tripped_at;    /* bytes waiting when it tripped */

static ERL_NIF_TERM a_trace, a_discard, a_remove, a_trace_status, a_ok, a_error, a_undefined,
    a_match_spec_result, a_kprof_loop, a_call, a_return_to, a_in, a_out, a_gc_minor_start,
    a_gc_major_start, a_gc_minor_end, a_gc_major_end, a_spawn, a_exit, a_return_from, a_mark_module,
    a_begin_trace, a_pending, a_exception_from, a_tripped, a_too_long, a_send, a_extra, a_kprof,
    a_seq_trace, a_receive, a_call_mark, a_follow, a_true, a_end_trace;

static int load(ErlNifEnv *env, void **priv, ERL_NIF_TERM info)
{
    (void)priv;
    (void)info;
    mu = enif_mutex_create("kprof_tracer");
#define ATOM(v, s) v = enif_make_atom(env, s)
    ATOM(a_trace, "trace");
    ATOM(a_discard, "discard");
    ATOM(a_remove, "remove");
    ATOM(a_trace_status, "trace_status");
    ATOM(a_ok, "ok");
    ATOM(a_error, "error");
    ATOM(a_undefined, "undefined");
    ATOM(a_match_spec_result, "match_spec_result");
    ATOM(a_call, "call");
    ATOM(a_return_to, "return_to");
    ATOM(a_in, "in");
    ATOM(a_out, "out");
    ATOM(a_gc_minor_start, "gc_minor_start");
    ATOM(a_gc_major_start, "gc_major_start");
    ATOM(a_gc_minor_end, "gc_minor_end");
    ATOM(a_gc_major_end, "gc_major_end");
    ATOM(a_spawn, "spawn");
    ATOM(a_exit, "exit");
    ATOM(a_return_from, "return_from");
    ATOM(a_mark_module, "kprof_rtrace_mark");
    ATOM(a_begin_trace, "begin_trace");
    ATOM(a_end_trace, "end_trace");
    ATOM(a_kprof_loop, "kprof_loop");
    ATOM(a_pending, "pending");
    ATOM(a_exception_from, "exception_from");
    ATOM(a_tripped, "tripped");
    ATOM(a_too_long, "too_long");
    ATOM(a_send, "send");
    ATOM(a_extra, "extra");
    ATOM(a_kprof, "kprof");
    ATOM(a_seq_trace, "seq_trace");
    ATOM(a_receive, "receive");
    ATOM(a_call_mark, "kprof_rtrace_call");
    ATOM(a_follow, "follow");
    ATOM(a_true, "true");
    return mu ? 0 : 1;
}

static void unload(ErlNifEnv *env, void *priv)
{
    (void)env;
    (void)priv;
    if (fd >= 0)
        close(fd);
    fd = -1;
    enif_mutex_destroy(mu);
}

/* Writes what the socket takes now, without waiting. What it leaves waits
 * for another WRITE_AT bytes before the events try again (`write_at`): a
 * collector that falls behind would otherwise cost every event a send()
 * that fails. */
static void flush_locked(void)
{
    while (fd >= 0 && head < len) {
        ssize_t n = send(fd, buf + head, len - head, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            write_at = len - head + WRITE_AT;
            return;
        }
        if (n <= 0) { /* the collector went away: stop tracing through us */
            close(fd);
            fd = -1;
            head = len = 0;
            return;
        }
        head += (size_t)n;
    }
    if (head == len)
        head = len = 0;
    write_at = WRITE_AT;
}

/* Room for `need` more bytes, compacting if that helps; 0 if there is none
 * (the caller drops its record). */
static int room(size_t need)
{
    /* tier tracing uses only the buffer's first 2 x fill mark, so that the
     * memory a storm can touch in the node stays that small */
    size_t cap = seq_calls ? 2 * fill_mark : sizeof buf - spare;
    if (len + need <= cap)
        return 1;
    if (head) {
        memmove(buf, buf + head, len - head);
        len -= head;
        head = 0;
    }
    return len + need <= cap;
}

static void put8(unsigned v)
{
    buf[len++] = (unsigned char)v;
}
static void put16(unsigned v)
{
    memcpy(buf + len, &(uint16_t){(uint16_t)v}, 2);
    len += 2;
}
static void put32(uint32_t v)
{
    memcpy(buf + len, &v, 4);
    len += 4;
}
static void put64(int64_t v)
{
    memcpy(buf + len, &v, 8);
    len += 8;
}

/* Every pid and MFA id, and what is known of each pid, forgotten. */
static void clear_tables(void)
{
    memset(pid_keys, 0, sizeof pid_keys);
    memset(mfa_keys, 0, sizeof mfa_keys);
    memset(pid_labels, 0xff, sizeof pid_labels);
    memset(pid_roles, 0, sizeof pid_roles);
    memset(pid_pending, 0, sizeof pid_pending);
    memset(cur_fn, 0xff, sizeof cur_fn);
    memset(recv_fn, 0xff, sizeof recv_fn);
    memset(left_recv, 0, sizeof left_recv);
    memset(pid_remote, 0, sizeof pid_remote);
    n_followed = 0;
    n_pids = n_mfas = 0;
}

static void reset_tables_locked(void)
{
    clear_tables();
    if (room(1))
        put8(KPT_RESET);
}

static size_t slot(uint64_t key)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return (size_t)key & (TABLE - 1);
}

/* The pid's id, or KPT_NO_ID when it has none. */
static uint32_t find_pid(ERL_NIF_TERM pid)
{
    uint64_t key = (uint64_t)pid | 1, k;
    size_t s = slot(key);
    while ((k = __atomic_load_n(&pid_keys[s], __ATOMIC_ACQUIRE)) && k != key)
        s = (s + 1) & (TABLE - 1);
    return k ? pid_ids[s] : KPT_NO_ID;
}

/* A followed process that works for no request now (see pid_roles). */
static int is_idle(uint32_t id)
{
    return pid_roles[id] == ROLE_FOLLOWED && pid_labels[id] == 0 && pid_pending[id] == 0;
}

static void set_role(uint32_t id, unsigned role)
{
    n_followed += (role == ROLE_FOLLOWED) - (pid_roles[id] == ROLE_FOLLOWED);
    pid_roles[id] = (unsigned char)role;
}

/* Returns the pid's id, defining it in the stream the first time. */
static uint32_t pid_id(ErlNifEnv *env, ERL_NIF_TERM pid)
{
    uint64_t key = (uint64_t)pid | 1; /* 0 marks an empty slot */
    size_t s = slot(key);
    while (pid_keys[s] && pid_keys[s] != key)
        s = (s + 1) & (TABLE - 1);
    if (pid_keys[s])
        return pid_ids[s];
    ErlNifBinary ext;
    if (!enif_term_to_binary(env, pid, &ext))
        return KPT_NO_ID;
    if (ext.size > KPT_PID_TERM_MAX || !room(ext.size + 16)) {
        enif_release_binary(&ext);
        return KPT_NO_ID;
    }
    pid_ids[s] = n_pids++;
    /* after its id: find_pid reads without the lock */
    __atomic_store_n(&pid_keys[s], key, __ATOMIC_RELEASE);
    put8(KPT_PID);
    put32(pid_ids[s]);
    put16((unsigned)ext.size);
    memcpy(buf + len, ext.data, ext.size);
    len += ext.size;
    enif_release_binary(&ext);
    return pid_ids[s];
}

/* {M, F, Arity} (or {M, F, Args}): its id, defined the first time. */
static uint32_t mfa_id(ErlNifEnv *env, ERL_NIF_TERM mfa)
{
    const ERL_NIF_TERM *t;
    int arity;
    unsigned a;
    if (!enif_get_tuple(env, mfa, &arity, &t) || arity != 3)
        return KPT_NO_ID;
    if (!enif_get_uint(env, t[2], &a) && !enif_get_list_length(env, t[2], &a))
        return KPT_NO_ID;
    uint64_t k0 = (uint64_t)t[0] | 1, k1 = (uint64_t)t[1], k2 = a;
    size_t s = slot(k0 * 31 + k1 * 7 + k2);
    while (mfa_keys[s][0] && (mfa_keys[s][0] != k0 || mfa_keys[s][1] != k1 || mfa_keys[s][2] != k2))
        s = (s + 1) & (TABLE - 1);
    if (mfa_keys[s][0])
        return mfa_ids[s];
    char m[256], f[256];
    if (enif_get_atom(env, t[0], m, sizeof m, ERL_NIF_LATIN1) <= 0 ||
        enif_get_atom(env, t[1], f, sizeof f, ERL_NIF_LATIN1) <= 0)
        return KPT_NO_ID;
    size_t ml = strlen(m), fl = strlen(f);
    if (!room(ml + fl + 16))
        return KPT_NO_ID;
    mfa_keys[s][0] = k0;
    mfa_keys[s][1] = k1;
    mfa_keys[s][2] = k2;
    mfa_ids[s] = n_mfas++;
    put8(KPT_MFA);
    put32(mfa_ids[s]);
    put8((unsigned)ml);
    memcpy(buf + len, m, ml);
    len += ml;
    put8((unsigned)fl);
    memcpy(buf + len, f, fl);
    len += fl;
    put8(a > 255 ? 255 : a);
    return mfa_ids[s];
}

static ERL_NIF_TERM enabled(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)env;
    (void)argc;
    if (fd < 0) /* read without the lock: a stale answer costs one event */
        return argv[0] == a_trace_status ? a_remove : a_discard;
    if (tripped) /* tier tracing's breaker: build no more events */
        return argv[0] == a_trace_status ? a_trace : a_discard;
    /* an idle followed process's events are discarded, but for its calls
     * (trace/5 tracks its current function), sends (they gave another the
     * flags: send_event) and spawns (the child is idle too). Read without
     * the lock, on every event: a stale answer costs at most one event of
     * a process just going idle or busy. seq_trace events name a label,
     * not a process */
    if (n_followed && argv[0] != a_call && argv[0] != a_send && argv[0] != a_spawn &&
        argv[0] != a_seq_trace) {
        uint32_t id = find_pid(argv[2]);
        if (id < TABLE && is_idle(id))
            return a_discard;
    }
    return a_trace;
}

static int kind_of(ERL_NIF_TERM tag)
{
    if (tag == a_call)
        return KPT_CALL;
    if (tag == a_return_to)
        return KPT_RETURN_TO;
    if (tag == a_in)
        return KPT_IN;
    if (tag == a_out)
        return KPT_OUT;
    if (tag == a_gc_minor_start || tag == a_gc_major_start)
        return KPT_GC_START;
    if (tag == a_gc_minor_end || tag == a_gc_major_end)
        return KPT_GC_END;
    if (tag == a_spawn)
        return KPT_SPAWN;
    if (tag == a_exit)
        return KPT_EXIT;
    if (tag == a_return_from)
        return KPT_RETURN_FROM;
    if (tag == a_exception_from && seq_calls)
        return KPT_EXCEPTION_FROM;
    return 0;
}

static void count_drop(void)
{
    pending_drops++;
    dropped++;
}

/* Says what was lost (DROP) before a record goes on. */
static void say_drops(void)
{
    if (pending_drops && room(32)) {
        put8(KPT_DROP);
        put32(pending_drops);
        pending_drops = 0;
    }
}

/* A tier call: its pattern's message is the seq_trace Token, or
 * [Identity, Token] where it opens a request (kprof_tiers' match specs). */
static void seq_call(ErlNifEnv *env, uint32_t pid, ERL_NIF_TERM mfa, ERL_NIF_TERM msg, int64_t ts)
{
    ERL_NIF_TERM head, tail, identity = 0, token = msg;
    const ERL_NIF_TERM *t;
    int arity;
    if (enif_get_list_cell(env, msg, &head, &tail) && enif_get_list_cell(env, tail, &token, &tail))
        identity = head;
    uint32_t label = KPT_NO_ID, fn = mfa_id(env, mfa);
    if (enif_get_tuple(env, token, &arity, &t) && arity == 5 && enif_is_pid(env, t[1])) {
        label = pid_id(env, t[1]);
        if (label == KPT_NO_ID) { /* not "no label": the call would leave its request */
            count_drop();
            return;
        }
    }
    ErlNifBinary ext = {0};
    if (identity && !enif_term_to_binary(env, identity, &ext))
        identity = 0;
    if (identity && ext.size > KPT_IDENTITY_TERM_MAX) {
        enif_release_binary(&ext);
        if (!enif_term_to_binary(env, a_too_long, &ext))
            identity = 0;
    }
    size_t n = identity ? ext.size : 0;
    if (fn != KPT_NO_ID && room(KPT_SEQ_CALL_HEAD + n)) {
        put8(KPT_SEQ_CALL);
        put32(pid);
        put32(fn);
        put64(ts);
        put32(label);
        put32((uint32_t)n);
        if (n)
            memcpy(buf + len, ext.data, n);
        len += n;
    } else {
        count_drop();
    }
    if (identity)
        enif_release_binary(&ext);
}

/* The N of a traced call's request: its process's pid is its token's label
 * (a match spec cannot build a tuple that survives the token's travel), as
 * a number above those of {kprof, N} (at most 2^31 - 1, kprof_rtrace) and
 * below KPT_NO_ID. phash2 is the same on every node: another node's part of
 * the request names it by the same N. */
static uint32_t call_label(ERL_NIF_TERM pid)
{
    return 0x80000000u + (uint32_t)(enif_hash(ERL_NIF_PHASH2, pid, 0) % 0x7ffffffeu);
}

/* The request trace a seq_trace label is for: N of the label {kprof, N}
 * that kprof:trace_begin/1 gives its process's token, or the call_label of
 * a pid label (a call kprof trace --mfa follows), else 0. */
static uint32_t rtrace_label(ErlNifEnv *env, ERL_NIF_TERM label)
{
    const ERL_NIF_TERM *l;
    int arity;
    unsigned n;
    if (enif_is_pid(env, label))
        return call_label(label);
    if (enif_get_tuple(env, label, &arity, &l) && arity == 2 && l[0] == a_kprof &&
        enif_get_uint(env, l[1], &n) && n > 0 && n != KPT_NO_ID)
        return n;
    return 0;
}

/* The same for a whole token, {Flags, Label, Serial, From, LastCount}. */
static uint32_t token_label(ErlNifEnv *env, ERL_NIF_TERM token)
{
    const ERL_NIF_TERM *t;
    int arity;
    return enif_get_tuple(env, token, &arity, &t) && arity == 5 ? rtrace_label(env, t[1]) : 0;
}

/* Every call, return and scheduling in names the function the process is
 * in. Returns 1 when a followed process working for a request calls the
 * function it took the request's message in, or is scheduled out in it
 * after leaving it with no event naming its way back (see left_recv): back
 * in its receive loop, it works for none from here (see end_stretch). */
static int track_fn(uint32_t pid, int kind, uint32_t fn)
{
    int back_unseen = kind == KPT_OUT && fn != cur_fn[pid];
    if (kind == KPT_CALL || kind == KPT_RETURN_TO || kind == KPT_IN)
        cur_fn[pid] = fn;
    int working = pid_roles[pid] == ROLE_FOLLOWED && !pid_remote[pid] && pid_labels[pid] &&
                  pid_labels[pid] != KPT_NO_ID && recv_fn[pid] != KPT_NO_ID;
    if (!working)
        return 0;
    if (fn != recv_fn[pid]) {
        left_recv[pid] = 1;
        return 0;
    }
    return kind == KPT_CALL || (back_unseen && left_recv[pid]);
}

/* LABEL 0: the process works for no request from `ts`. */
static void end_stretch(uint32_t pid, int64_t ts)
{
    if (room(32)) {
        put8(KPT_LABEL);
        put32(pid);
        put32(0);
        put64(ts);
    } else {
        count_drop();
    }
    pid_labels[pid] = 0;
}

/* seq_trace's `receive` event (the NIF is the system seq tracer): a
 * process took in a message whose token is request trace N's. Written for
 * the processes the NIF knows as a trace's or reached by one; others (a
 * token spread beyond them) are nobody's concern here. Runs in the
 * receiver, before its next event. */
static void seq_receive(ErlNifEnv *env, ERL_NIF_TERM label, ERL_NIF_TERM info, int64_t ts)
{
    const ERL_NIF_TERM *t;
    int arity;
    uint32_t n = rtrace_label(env, label);
    if (!n || !enif_get_tuple(env, info, &arity, &t) || arity != 5 || t[0] != a_receive ||
        !enif_is_pid(env, t[3]))
        return;
    uint32_t to = find_pid(t[3]);
    if (to >= TABLE || pid_roles[to] == ROLE_NONE) /* read again under the lock */
        return;
    enif_mutex_lock(mu);
    to = find_pid(t[3]);
    if (fd >= 0 && to < TABLE && pid_roles[to] != ROLE_NONE) {
        uint32_t from = enif_is_pid(env, t[2]) ? pid_id(env, t[2]) : KPT_NO_ID;
        if (pid_roles[to] == ROLE_FOLLOWED) {
            if (pid_labels[to] != n) { /* it takes up the request here */
                recv_fn[to] = cur_fn[to];
                left_recv[to] = 0;
            }
            pid_labels[to] = n;
            if (pid_pending[to])
                pid_pending[to]--;
        }
        if (room(32)) {
            put8(KPT_RECEIVE);
            put32(to);
            put32(from);
            put32(n);
            put64(ts);
        } else {
            count_drop();
        }
        if (len - head >= write_at)
            flush_locked();
    }
    enif_mutex_unlock(mu);
}

/* A listened callback's meta event (see pid_remote): the call carries the
 * process's token, `token`. A process no trace here knows, or one taken
 * in so before and back at rest, takes in the request its label names
 * (RECEIVE, from the token's last sender). A token of someone else's
 * (tier tracing, a user's) leaves the process idle: the pattern gave it
 * the flags all the same. Returns 1 when the call is such a take-in. */
static int remote_take_in(ErlNifEnv *env, uint32_t pid, ERL_NIF_TERM token, uint32_t fn, int64_t ts)
{
    const ERL_NIF_TERM *t;
    int arity;
    if (!enif_get_tuple(env, token, &arity, &t) || arity != 5)
        return 0;
    uint32_t n = rtrace_label(env, t[1]);
    int fresh = pid_roles[pid] == ROLE_NONE;
    if (!fresh && !(pid_remote[pid] && is_idle(pid)))
        return 0; /* a process of a trace here, or followed here */
    set_role(pid, ROLE_FOLLOWED);
    pid_remote[pid] = 1;
    pid_pending[pid] = 0;
    pid_labels[pid] = n;
    recv_fn[pid] = fn;
    left_recv[pid] = 0;
    if (!n)
        return 1;
    uint32_t from = enif_is_pid(env, t[3]) ? pid_id(env, t[3]) : KPT_NO_ID;
    if (room(32)) {
        put8(KPT_RECEIVE);
        put32(pid);
        put32(from);
        put32(n);
        put64(ts);
    } else {
        count_drop();
    }
    return 1;
}

/* A message sent by a process of a request trace (send's pattern followed
 * its receiver: see kprof_rtrace): sender, receiver, the sender's label. */
static void send_event(ErlNifEnv *env, uint32_t pid, ERL_NIF_TERM opts, int64_t ts)
{
    ERL_NIF_TERM to, token;
    ErlNifPid named;
    uint32_t label = 0, to_id = KPT_NO_ID;
    if (!enif_get_map_value(env, opts, a_extra, &to))
        return;
    if (enif_is_atom(env, to)) { /* Name ! Msg: the pattern gave the flags to its process */
        if (!enif_whereis_pid(env, to, &named))
            return;
        to = enif_make_pid(env, &named);
    }
    if (enif_get_map_value(env, opts, a_match_spec_result, &token))
        label = token_label(env, token);
    if (enif_is_pid(env, to)) {
        to_id = pid_id(env, to);
        if (to_id == KPT_NO_ID) {
            count_drop();
            return;
        }
    } else if (!enif_is_tuple(env, to)) {
        return; /* {Name, Node}: on another node, whose process has no name here */
    }
    if (to_id != KPT_NO_ID && pid_roles[to_id] != ROLE_MEMBER) {
        /* the send pattern gave it the flags (the message has a token, and
         * the receiver is on this node); it has a message of a request to
         * take in when the token is kprof's */
        if (pid_roles[to_id] != ROLE_FOLLOWED) {
            pid_labels[to_id] = 0;
            pid_remote[to_id] = 0;
        }
        set_role(to_id, ROLE_FOLLOWED);
        if (label && pid_pending[to_id] < UINT16_MAX)
            pid_pending[to_id]++;
    }
    if (room(32)) {
        put8(KPT_SEND);
        put32(pid);
        put32(to_id);
        put32(label);
        put64(ts);
    } else {
        count_drop();
    }
}

/* A traced call's begin mark: `*msg` {kprof_rtrace_call, Id, Bounds}
 * becomes {Id, Bounds}, with `follow => true` replaced by its N (the
 * caller's token is labelled with its pid: call_label). Returns 1, or 0
 * when `*msg` is no such mark. */
static int call_mark(ErlNifEnv *env, ERL_NIF_TERM caller, ERL_NIF_TERM *msg)
{
    const ERL_NIF_TERM *t;
    int arity;
    ERL_NIF_TERM follow, bounds;
    if (!enif_get_tuple(env, *msg, &arity, &t) || arity != 3 || t[0] != a_call_mark ||
        !enif_is_map(env, t[2]))
        return 0;
    bounds = t[2];
    if (enif_get_map_value(env, bounds, a_follow, &follow) && follow == a_true &&
        !enif_make_map_put(env, t[2], a_follow, enif_make_uint(env, call_label(caller)), &bounds))
        return 0;
    *msg = enif_make_tuple2(env, t[1], bounds);
    return 1;
}

/* A begin (`begin`) or end mark of process `pid`, `msg` its message whole.
 * Called with the lock held and `spare` 0: the marks have the reserve. */
static void put_mark(ErlNifEnv *env, uint32_t pid, int begin, ERL_NIF_TERM msg, int64_t ts)
{
    ErlNifBinary ext;
    if (!enif_term_to_binary(env, msg, &ext)) {
        count_drop();
        return;
    }
    if (room(ext.size + 32)) {
        put8(KPT_MARK);
        put8(begin ? KPT_MARK_BEGIN : KPT_MARK_END);
        set_role(pid, begin ? ROLE_MEMBER : ROLE_NONE);
        put32(pid);
        put64(ts);
        put32((uint32_t)ext.size);
        memcpy(buf + len, ext.data, ext.size);
        len += ext.size;
    } else { /* the reserve is spent: the collector cuts what runs */
        count_drop();
    }
    enif_release_binary(&ext);
}

/* trace(Tag, State, Tracee, TraceTerm, Opts) */
static ERL_NIF_TERM trace(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    if (argv[0] == a_seq_trace && !seq_calls) {
        seq_receive(env, argv[2], argv[3], (int64_t)enif_monotonic_time(ERL_NIF_NSEC));
        return a_ok;
    }
    int kind = argv[0] == a_send && !seq_calls ? KPT_SEND : kind_of(argv[0]);
    if (!kind)
        return a_ok;
    int64_t ts = (int64_t)enif_monotonic_time(ERL_NIF_NSEC);
    enif_mutex_lock(mu);
    /* tripped: enabled/3 stops new events, but the returns of calls made
     * before still come here; written, they would close requests that lost
     * their calls since, which must be cut instead */
    if (fd < 0 || tripped) {
        enif_mutex_unlock(mu);
        return a_ok;
    }
    if (n_pids > TABLE / 2 || n_mfas > TABLE / 2)
        reset_tables_locked();
    ERL_NIF_TERM msg;
    const ERL_NIF_TERM *t;
    int arity;
    /* a begin or end mark: kprof_rtrace_mark's pattern gives its message,
     * or the meta pattern of a traced call (kprof_rtrace_calls) gives
     * {kprof_rtrace_call, Id, Bounds}, a begin mark */
    int has_msg = kind == KPT_CALL && !seq_calls &&
                  enif_get_map_value(env, argv[4], a_match_spec_result, &msg);
    int mark =
        has_msg && enif_get_tuple(env, argv[3], &arity, &t) && arity == 3 && t[0] == a_mark_module;
    if (!mark && has_msg && call_mark(env, argv[2], &msg)) {
        mark = 1;
        t = NULL;
    }
    if (mark)
        spare = 0;
    uint32_t pid = pid_id(env, argv[2]);
    say_drops();
    if (pid == KPT_NO_ID) { /* no room to define it: the event is lost */
        count_drop();
    } else if (kind == KPT_SEND) {
        send_event(env, pid, argv[4], ts);
    } else if (kind == KPT_CALL && seq_calls) {
        if (!enif_get_map_value(env, argv[4], a_match_spec_result, &msg))
            msg = a_undefined;
        seq_call(env, pid, argv[3], msg, ts);
    } else if (mark) {
        put_mark(env, pid, !t || t[1] == a_begin_trace, msg, ts);
    } else {
        uint32_t arg = KPT_NO_ID;
        int ends = 0, loop = 0;
        ERL_NIF_TERM token;
        if (kind == KPT_SPAWN) {
            /* a child of a trace's process, or of a followed one at work
             * for a request, is the request's; an idle one's, idle */
            arg = pid_id(env, argv[3]);
            int working = pid_roles[pid] == ROLE_MEMBER || !is_idle(pid);
            if (arg != KPT_NO_ID && pid_roles[pid] != ROLE_NONE) {
                set_role(arg, working ? ROLE_MEMBER : ROLE_FOLLOWED);
                pid_labels[arg] = working ? pid_labels[pid] : 0;
            }
        } else if (kind != KPT_GC_START && kind != KPT_GC_END && kind != KPT_EXIT) {
            arg = mfa_id(env, argv[3]);
            if (kind == KPT_CALL && enif_get_map_value(env, argv[4], a_match_spec_result, &token)) {
                if (token == a_kprof_loop)
                    loop = 1;
                else
                    remote_take_in(env, pid, token, arg, ts);
            }
            ends = track_fn(pid, kind, arg);
            /* a listened callback returns: the request's stretch ends */
            if (kind == KPT_RETURN_FROM && pid_remote[pid] && pid_roles[pid] == ROLE_FOLLOWED &&
                pid_labels[pid] && pid_labels[pid] != KPT_NO_ID && arg == recv_fn[pid])
                ends = 1;
        }
        if (is_idle(pid) || loop) {
            /* an idle followed process's call or spawn: nobody's work; a
             * loop's call (kprof_loop): no frame of the stream */
        } else if (room(32)) {
            put8((unsigned)kind);
            put32(pid);
            put32(arg);
            put64(ts);
        } else {
            count_drop();
        }
        if (ends) /* after its call: its stack is back in its loop */
            end_stretch(pid, ts);
    }
    if (seq_calls && !tripped && (pending_drops || len - head > fill_mark)) {
        tripped = 1;
        tripped_at = len - head;
    }
    spare = MARK_RESERVE;
    if (len - head >= write_at)
        flush_locked();
    enif_mutex_unlock(mu);
    return a_ok;
}

/* mark(begin_trace | end_trace, Msg): the calling process's mark, as its
 * call of kprof_rtrace_mark's function of that name would give it, for a
 * process whose own trace runs through this NIF (kprof_rtrace_own). The
 * same record, written in the process's own thread like its events and so
 * in their order, without the traced call and its return_to (2 events,
 * 3 to 4 us a mark on OTP 27). `ok', also when there is no connection (a
 * trace that ended is the collector's to ignore). */
static ERL_NIF_TERM nif_mark(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    ErlNifPid self;
    if ((argv[0] != a_begin_trace && argv[0] != a_end_trace) || !enif_self(env, &self))
        return enif_make_badarg(env);
    int64_t ts = (int64_t)enif_monotonic_time(ERL_NIF_NSEC);
    enif_mutex_lock(mu);
    if (fd >= 0 && !seq_calls) {
        if (n_pids > TABLE / 2 || n_mfas > TABLE / 2)
            reset_tables_locked();
        spare = 0;
        uint32_t pid = pid_id(env, enif_make_pid(env, &self));
        say_drops();
        if (pid == KPT_NO_ID)
            count_drop();
        else
            put_mark(env, pid, argv[0] == a_begin_trace, argv[1], ts);
        spare = MARK_RESERVE;
        if (len - head >= write_at)
            flush_locked();
    }
    enif_mutex_unlock(mu);
    return a_ok;
}

/* connect(Port) for request traces, connect(Port, FillMark) for tier
 * tracing: to the collector on 127.0.0.1. */
static ERL_NIF_TERM nif_connect(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    unsigned port, mark = 0;
    if (!enif_get_uint(env, argv[0], &port) || port == 0 || port > 65535)
        return enif_make_badarg(env);
    if (argc == 2 && (!enif_get_uint(env, argv[1], &mark) || mark == 0 || mark >= BUF_CAP / 2))
        return enif_make_badarg(env);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) != 0) {
        if (s >= 0)
            close(s);
        return enif_make_tuple2(env, a_error, enif_make_int(env, errno));
    }
    enif_mutex_lock(mu);
    if (fd >= 0)
        close(fd);
    fd = s;
    head = len = 0;
    write_at = WRITE_AT;
    pending_drops = 0;
    clear_tables();
    seq_calls = argc == 2;
    fill_mark = mark;
    tripped = 0;
    enif_mutex_unlock(mu);
    return a_ok;
}

/* rearm(): tier tracing goes on after a trip; what waits stays. */
static ERL_NIF_TERM nif_rearm(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)env;
    (void)argc;
    (void)argv;
    enif_mutex_lock(mu);
    tripped = 0;
    enif_mutex_unlock(mu);
    return a_ok;
}

static ERL_NIF_TERM nif_flush(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    (void)argv;
    enif_mutex_lock(mu);
    flush_locked();
    ERL_NIF_TERM r = fd < 0    ? a_error
                     : tripped ? enif_make_tuple2(env, a_tripped, enif_make_uint64(env, tripped_at))
                     : head < len ? a_pending
                                  : a_ok;
    enif_mutex_unlock(mu);
    return r;
}

static ERL_NIF_TERM nif_close(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)env;
    (void)argc;
    (void)argv;
    enif_mutex_lock(mu);
    flush_locked();
    if (fd >= 0)
        close(fd);
    fd = -1;
    enif_mutex_unlock(mu);
    return a_ok;
}

static ErlNifFunc funcs[] = {
    {"enabled", 3, enabled, 0},     {"trace", 5, trace, 0},     {"connect", 1, nif_connect, 0},
    {"connect", 2, nif_connect, 0}, {"rearm", 0, nif_rearm, 0}, {"flush", 0, nif_flush, 0},
    {"close", 0, nif_close, 0},     {"mark", 2, nif_mark, 0},
};

ERL_NIF_INIT(kprof_tracer, funcs, load, NULL, NULL, unload)

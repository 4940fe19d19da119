/* The records of the kprof_tracer NIF's stream: the contract between the
 * NIF that writes them (kprof_tracer.c, in the node) and the reader in
 * kprof (sampler/node/nif_reader.c). Both include this file; change it
 * only together with both.
 *
 * Each record starts with its kind byte. Integers are in the byte order of
 * the node's machine (kprof reads them on the same host, over loopback):
 *
 *   EVENT  kind (KPT_CALL..KPT_RETURN_FROM) u8, pid id u32,
 *          arg u32 (the MFA id, or for KPT_SPAWN the child's pid id;
 *          KPT_NO_ID when it could not be named), ts i64 (ns, monotonic)
 *   PID    kind, id u32, len u16, the pid in external term format (len bytes)
 *   MFA    kind, id u32, mlen u8, module (mlen bytes), flen u8,
 *          function (flen bytes), arity u8 (255 for 255 and more)
 *   MARK   kind, which u8 (KPT_MARK_BEGIN, KPT_MARK_END), pid id u32,
 *          ts i64, len u32, the pattern's message in external term format
 *          (the marks of kprof_rtrace_mark:begin_trace/1 and end_trace/1,
 *          or the same written by kprof_tracer:mark/2)
 *   RESET  kind: pid and MFA ids start afresh
 *   DROP   kind, count u32: that many events were dropped at this point
 *   SEQ_CALL  (tier tracing) kind, pid id u32, MFA id u32, ts i64,
 *          label u32 (the pid id of the seq_trace token's label, KPT_NO_ID
 *          when the token has no pid label), len u32, then len bytes: the
 *          request's identity in external term format when the call opens a
 *          request (its pattern's message was [Identity, Token]; one longer
 *          than KPT_IDENTITY_TERM_MAX is sent as the atom too_long), none
 *          (len 0) for a call inside one (the message was the Token)
 *
 *   LABEL  (request traces) kind, pid id u32, label u32, ts i64: a
 *          process reached by a request's message works for no request
 *          from here (label 0): it called again the function in which it
 *          took the request's message in (its receive loop)
 *   SEND   (request traces) kind, sender's pid id u32, receiver's pid id
 *          u32 (KPT_NO_ID: a name on another node, {Name, Node}), the
 *          sender's label u32 (N of its seq_trace token's label {kprof, N};
 *          0: another token), ts i64
 *   RECEIVE (request traces) kind, receiver's pid id u32, sender's pid id
 *          u32 (KPT_NO_ID when it could not be named), label u32 (N), ts
 *          i64: a process of a trace, or one its messages reached, took in
 *          a message of request trace N (the seq_trace `receive` event:
 *          the NIF is the node's system seq tracer while traces follow)
 *
 * Tier tracing also uses EVENT with KPT_RETURN_FROM and KPT_EXCEPTION_FROM.
 *
 * A PID or MFA record comes before the first record that uses its id. */
#ifndef KPROF_TRACER_RECORDS_H
#define KPROF_TRACER_RECORDS_H

enum {
    KPT_CALL = 1,
    KPT_RETURN_TO,
    KPT_IN,
    KPT_OUT,
    KPT_GC_START,
    KPT_GC_END,
    KPT_SPAWN,
    KPT_EXIT,
    KPT_RETURN_FROM,
    KPT_EXCEPTION_FROM, /* the last event kind */
    KPT_PID = 100,
    KPT_MFA = 101,
    KPT_MARK = 102,
    KPT_SEQ_CALL = 103,
    KPT_RESET = 104,
    KPT_DROP = 105,
    KPT_LABEL = 106,
    KPT_SEND = 107,
    KPT_RECEIVE = 108
};

enum { KPT_MARK_BEGIN = 1, KPT_MARK_END = 2 };

/* Sizes in bytes of the fixed parts. */
enum {
    KPT_EVENT_SIZE = 17, /* the whole EVENT record */
    KPT_PID_HEAD = 7,    /* PID up to its term */
    KPT_MFA_MIN = 8,     /* MFA with empty names */
    KPT_MARK_HEAD = 18,  /* MARK up to its term */
    KPT_DROP_SIZE = 5,
    KPT_LABEL_SIZE = 17,
    KPT_SEND_SIZE = 21,     /* RECEIVE too: the same layout */
    KPT_SEQ_CALL_HEAD = 25, /* SEQ_CALL up to its identity term */
    KPT_IDENTITY_TERM_MAX = 4096,
    KPT_PID_TERM_MAX = 1000, /* the NIF sends no longer pid term */
    KPT_MARK_TERM_MAX = 1 << 20
};

/* Ids are below KPT_MAX_IDS: the NIF resets its tables (RESET) before. */
#define KPT_MAX_IDS 65536u
#define KPT_NO_ID 0xffffffffu

#endif

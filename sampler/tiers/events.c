#include "tiers/events.h"

#include <ei.h>
#include <stdio.h>
#include <string.h>

#include "node/connection.h"
#include "node/term.h"

static kp_tier_pid pack(const erlang_pid *p)
{
    return ((uint64_t)p->num << 32) | p->serial;
}

static void clean(char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            s[i] = '?';
}

size_t kp_tier_identity_text(const char *buf, int *index, char *out, size_t cap, int first_word)
{
    int type, size;
    out[0] = '\0';
    if (cap < 2 || ei_get_type(buf, index, &type, &size) != 0)
        return 0;
    int start = *index;
    size_t len = 0;
    if (type == ERL_ATOM_EXT || type == ERL_SMALL_ATOM_EXT || type == ERL_ATOM_UTF8_EXT ||
        type == ERL_SMALL_ATOM_UTF8_EXT) {
        char atom[MAXATOMLEN_UTF8];
        if (ei_decode_atom(buf, index, atom) == 0)
            len = (size_t)snprintf(out, cap, "%s", atom);
    } else if (type == ERL_STRING_EXT && (size_t)size < cap) {
        if (ei_decode_string(buf, index, out) == 0)
            len = (size_t)size;
    } else if (type == ERL_BINARY_EXT && (size_t)size < cap) {
        long n;
        if (ei_decode_binary(buf, index, out, &n) == 0)
            len = (size_t)n;
    } else if (type == ERL_SMALL_INTEGER_EXT || type == ERL_INTEGER_EXT) {
        long v;
        if (ei_decode_long(buf, index, &v) == 0)
            len = (size_t)snprintf(out, cap, "%ld", v);
    } else if ((type == ERL_SMALL_TUPLE_EXT || type == ERL_LARGE_TUPLE_EXT) && size > 0) {
        int arity;
        ei_decode_tuple_header(buf, index, &arity);
        len = kp_tier_identity_text(buf, index, out, cap, first_word);
        for (int k = 1; k < arity; k++)
            ei_skip_term(buf, index);
        return len;
    }
    if (*index == start) { /* anything else: printed */
        len = strlen(kp_term_text(buf, start, "", out, cap));
        ei_skip_term(buf, index);
    }
    if (len >= cap)
        len = cap - 1;
    out[len] = '\0';
    if (first_word && (type == ERL_STRING_EXT || type == ERL_BINARY_EXT)) {
        /* text requests ("GET k1", "PUT /users/7 HTTP/1.1") are grouped by
         * their first word, not one group per request */
        char *space = memchr(out, ' ', len);
        if (space && space != out) {
            len = (size_t)(space - out);
            out[len] = '\0';
        }
    }
    clean(out, len);
    return len;
}

/* Token = {Flags, Label, Serial, From, LastCnt}: the label, when a pid. */
static int decode_token(const char *buf, int *i, kp_tier_event *ev)
{
    int arity, type, size;
    if (ei_decode_tuple_header(buf, i, &arity) != 0 || arity != 5 || ei_skip_term(buf, i) != 0 ||
        ei_get_type(buf, i, &type, &size) != 0)
        return -1;
    if (type == ERL_PID_EXT || type == ERL_NEW_PID_EXT) {
        erlang_pid label;
        if (ei_decode_pid(buf, i, &label) != 0)
            return -1;
        ev->has_label = 1;
        ev->label = pack(&label);
    } else if (ei_skip_term(buf, i) != 0) {
        return -1;
    }
    for (int k = 0; k < 3; k++)
        if (ei_skip_term(buf, i) != 0)
            return -1;
    return 0;
}

/* Call message: Token, or [Identity, Token]. */
static int decode_call_message(kp_tier_decoder *d, const char *buf, int *i, kp_tier_event *ev,
                               int first_word)
{
    int type, size;
    if (ei_get_type(buf, i, &type, &size) != 0)
        return -1;
    if (type == ERL_SMALL_TUPLE_EXT)
        return decode_token(buf, i, ev);
    if (type != ERL_LIST_EXT || size != 2)
        return ei_skip_term(buf, i) == 0 ? 0 : -1;
    int n;
    ei_decode_list_header(buf, i, &n);
    ev->identity_len = kp_tier_identity_text(buf, i, d->identity, sizeof d->identity, first_word);
    ev->identity = d->identity;
    if (decode_token(buf, i, ev) != 0)
        return -1;
    return ei_decode_list_header(buf, i, &n) == 0 && n == 0 ? 0 : -1;
}

static int lookup(const kp_tier_decoder *d, const char *mod, const char *fun, long arity)
{
    for (size_t k = 0; k < d->n; k++)
        if (d->mfas[k].arity == (unsigned long)arity && strcmp(d->mfas[k].function, fun) == 0 &&
            strcmp(d->mfas[k].module, mod) == 0)
            return (int)k;
    return -1;
}

int kp_tier_decode(kp_tier_decoder *d, const char *buf, size_t len, kp_tier_event *ev)
{
    int i = 0, version, arity;
    char tag[MAXATOMLEN_UTF8], what[MAXATOMLEN_UTF8];
    char mod[MAXATOMLEN_UTF8], fun[MAXATOMLEN_UTF8];
    erlang_pid pid;
    long fn_arity;
    long long ts;
    memset(ev, 0, sizeof *ev);
    if (len > INT32_MAX || kp_term_check(buf, len) != 0 ||
        ei_decode_version(buf, &i, &version) != 0 || ei_decode_tuple_header(buf, &i, &arity) != 0)
        return -1;
    if (arity != 6 || ei_decode_atom(buf, &i, tag) != 0 || strcmp(tag, "trace_ts") != 0)
        return 0;
    if (ei_decode_pid(buf, &i, &pid) != 0 || ei_decode_atom(buf, &i, what) != 0)
        return 0;
    if (strcmp(what, "call") == 0)
        ev->kind = KP_TEV_CALL;
    else if (strcmp(what, "return_from") == 0)
        ev->kind = KP_TEV_RETURN;
    else if (strcmp(what, "exception_from") == 0)
        ev->kind = KP_TEV_EXCEPTION;
    else
        return 0;
    if (ei_decode_tuple_header(buf, &i, &arity) != 0 || arity != 3 ||
        ei_decode_atom(buf, &i, mod) != 0 || ei_decode_atom(buf, &i, fun) != 0 ||
        ei_decode_long(buf, &i, &fn_arity) != 0)
        return 0;
    int fn = lookup(d, mod, fun, fn_arity);
    if (fn < 0)
        return 0;
    if (ev->kind == KP_TEV_CALL) {
        if (decode_call_message(d, buf, &i, ev, d->mfas[fn].first_word) != 0)
            return -1;
    } else if (ei_skip_term(buf, &i) != 0) {
        return -1;
    }
    if (ei_decode_longlong(buf, &i, &ts) != 0 || (size_t)i > len)
        return -1;
    ev->pid = pack(&pid);
    ev->fn = (size_t)fn;
    ev->ts_ns = ts;
    return 1;
}

int kp_tier_from_nif(kp_tier_decoder *d, const kp_trace_event *nif, kp_tier_event *ev)
{
    memset(ev, 0, sizeof *ev);
    switch (nif->kind) {
    case KP_TRACE_SEQ_CALL: ev->kind = KP_TEV_CALL; break;
    case KP_TRACE_RETURN_FROM: ev->kind = KP_TEV_RETURN; break;
    case KP_TRACE_EXCEPTION_FROM: ev->kind = KP_TEV_EXCEPTION; break;
    default: return 0;
    }
    int fn = lookup(d, nif->module, nif->function, nif->arity);
    if (fn < 0)
        return 0;
    if (nif->has_label) {
        ev->has_label = 1;
        ev->label = pack(&nif->label);
    }
    if (nif->identity) { /* checked whole by the reader */
        int i = 0, version;
        d->identity[0] = '\0';
        if (ei_decode_version(nif->identity, &i, &version) == 0)
            ev->identity_len = kp_tier_identity_text(nif->identity, &i, d->identity,
                                                     sizeof d->identity, d->mfas[fn].first_word);
        ev->identity = d->identity;
    }
    ev->pid = pack(&nif->pid);
    ev->fn = (size_t)fn;
    ev->ts_ns = nif->ts_ns;
    return 1;
}

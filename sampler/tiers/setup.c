#define _GNU_SOURCE
#include "tiers/setup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kp/alloc.h"
#include "kp/frame_name.h"
#include "node/term.h"

static int decode_u64(const char *buf, int *i, uint64_t *v)
{
    unsigned long long x;
    if (ei_decode_ulonglong(buf, i, &x) != 0)
        return -1;
    *v = x;
    return 0;
}

static void add_fn(kp_tiers_config *c, const char *mod, const char *fun, unsigned arity,
                   kp_tier_fn_role role, const char *name)
{
    size_t k = c->n_fns++;
    snprintf(c->mfas[k].module, sizeof c->mfas[k].module, "%s", mod);
    snprintf(c->mfas[k].function, sizeof c->mfas[k].function, "%s", fun);
    c->mfas[k].arity = arity;
    kp_buf mfa = KP_BUF_INIT;
    if (name)
        snprintf(c->fn_names[k], sizeof c->fn_names[k], "%s", name);
    else if (kp_frame_name(&mfa, mod, strlen(mod), fun, strlen(fun), arity, KP_NAMES_ELIXIR) ==
             KP_OK)
        snprintf(c->fn_names[k], sizeof c->fn_names[k], "%.*s", (int)mfa.len, mfa.data);
    else
        snprintf(c->fn_names[k], sizeof c->fn_names[k], "%s", mod); /* out of memory */
    kp_buf_free(&mfa);
    c->fns[k] = (kp_tier_fn){.role = role, .tier_index = k, .name = c->fn_names[k]};
}

/* {M, F, A}: appended as a function of `role`; or the atom none. */
static int decode_mfa(const char *buf, int *i, kp_tiers_config *c, kp_tier_fn_role role,
                      const char *name)
{
    int arity;
    char mod[MAXATOMLEN_UTF8], fun[MAXATOMLEN_UTF8];
    long a;
    if (ei_decode_tuple_header(buf, i, &arity) != 0)
        return ei_skip_term(buf, i); /* none */
    if (arity != 3 || ei_decode_atom(buf, i, mod) != 0 || ei_decode_atom(buf, i, fun) != 0 ||
        ei_decode_long(buf, i, &a) != 0 || c->n_fns >= KP_TIERS_MAX_FNS)
        return -1;
    add_fn(c, mod, fun, (unsigned)a, role, name);
    return 0;
}

static int decode_tiers(const char *buf, int *i, kp_tiers_config *c)
{
    int n, arity;
    if (ei_decode_list_header(buf, i, &n) != 0 || n > 64)
        return -1;
    for (int k = 0; k < n; k++) {
        char name[300], mod[MAXATOMLEN_UTF8], fun[MAXATOMLEN_UTF8];
        long a;
        if (ei_decode_tuple_header(buf, i, &arity) != 0 || arity != 4 ||
            kp_term_decode_text(buf, i, name, sizeof name) != 0 ||
            ei_decode_atom(buf, i, mod) != 0 || ei_decode_atom(buf, i, fun) != 0 ||
            ei_decode_long(buf, i, &a) != 0)
            return -1;
        c->tier_names[c->n_tiers++] = kp_strdup(name);
        add_fn(c, mod, fun, (unsigned)a, KP_TIER_FN_TIER, name);
        c->fns[c->n_fns - 1].tier_index = (size_t)k;
    }
    if (n > 0 && ei_decode_list_header(buf, i, &n) != 0)
        return -1;
    return 0;
}

static int decode_setting(const char *buf, int *i, const char *key, kp_tiers_config *c)
{
    uint64_t v = 0;
    if (strcmp(key, "port") == 0) {
        if (decode_u64(buf, i, &v) != 0)
            return -1;
        c->port = (unsigned)v;
        return 0;
    }
    if (strcmp(key, "time") == 0) {
        long long t;
        if (ei_decode_longlong(buf, i, &t) != 0)
            return -1;
        c->node_time_ns = t;
        return 0;
    }
    if (strcmp(key, "tiers") == 0)
        return decode_tiers(buf, i, c);
    if (strcmp(key, "entry") == 0) {
        size_t before = c->n_fns;
        int rc = decode_mfa(buf, i, c, KP_TIER_FN_ENTRY, NULL);
        if (c->n_fns > before) /* its identity is an argument, e.g. "GET k1" */
            c->mfas[before].first_word = 1;
        return rc;
    }
    if (strcmp(key, "print_calls") == 0) {
        int b;
        if (ei_decode_boolean(buf, i, &b) != 0)
            return -1;
        c->print_calls = b;
        return 0;
    }
    if (strcmp(key, "via") == 0) {
        char via[MAXATOMLEN];
        if (ei_decode_atom(buf, i, via) != 0)
            return -1;
        c->via_nif = strcmp(via, "nif") == 0;
        return 0;
    }
    if (strcmp(key, "nif_refused") == 0)
        return kp_term_decode_text(buf, i, c->nif_refused, sizeof c->nif_refused);
    if (strcmp(key, "stats_file") == 0)
        return kp_term_decode_text(buf, i, c->stats_file, sizeof c->stats_file);
    struct {
        const char *name;
        uint64_t *into;
    } numbers[] = {{"slow_threshold", &c->slow_us}, {"report_interval", &c->report_interval_ms},
                   {"max_lag", &c->max_lag_ms},     {"cooldown", &c->cooldown_ms},
                   {"queue_size", &c->queue_size},  {"max_identities", &c->max_identities}};
    for (size_t k = 0; k < sizeof numbers / sizeof numbers[0]; k++)
        if (strcmp(key, numbers[k].name) == 0)
            return decode_u64(buf, i, numbers[k].into);
    return ei_skip_term(buf, i); /* identity_arg and settings of later versions */
}

static int decode_settings(const char *buf, int *i, kp_tiers_config *c)
{
    int n, arity;
    if (ei_decode_list_header(buf, i, &n) != 0)
        return -1;
    for (int k = 0; k < n; k++) {
        char key[MAXATOMLEN_UTF8];
        if (ei_decode_tuple_header(buf, i, &arity) != 0 || arity != 2 ||
            ei_decode_atom(buf, i, key) != 0 || decode_setting(buf, i, key, c) != 0)
            return -1;
    }
    /* the request marks of kprof:do_apply/3 and kprof:set_token/1 */
    add_fn(c, "kprof_tier_mark", "request", 2, KP_TIER_FN_ENTRY, "kprof:do_apply/3");
    add_fn(c, "kprof_tier_mark", "begin_request", 1, KP_TIER_FN_BEGIN, "kprof:set_token/1");
    add_fn(c, "kprof_tier_mark", "end_request", 0, KP_TIER_FN_END, "kprof:clear_token/0");
    return 0;
}

int kp_tiers_start(kp_node *node, const char *text, size_t len, unsigned queue_size,
                   unsigned nif_port, kp_tiers_config *c, char *err, size_t err_len)
{
    memset(c, 0, sizeof *c);
    ei_x_buff args, reply;
    ei_x_new(&args);
    ei_x_new(&reply);
    ei_x_encode_list_header(&args, 3);
    ei_x_encode_pid(&args, &node->self);
    if (!text) {
        ei_x_encode_atom(&args, "session");
    } else {
        ei_x_encode_tuple_header(&args, 2);
        ei_x_encode_atom(&args, "text");
        /* a --queue-size is appended as one more term: options are read in
     * order, so it wins over the file's own */
        if (queue_size) {
            char extra[64];
            int n = snprintf(extra, sizeof extra, "\n{queue_size, %u}.\n", queue_size);
            char *joined = kp_malloc(len + (size_t)n);
            if (!joined) {
                snprintf(err, err_len, "out of memory");
                return KP_TIERS_START_REFUSED;
            }
            memcpy(joined, text, len);
            memcpy(joined + len, extra, (size_t)n);
            ei_x_encode_binary(&args, joined, (long)(len + (size_t)n));
            kp_free(joined);
        } else {
            ei_x_encode_binary(&args, text, (long)len);
        }
    }
    if (nif_port) {
        ei_x_encode_tuple_header(&args, 2);
        ei_x_encode_atom(&args, "nif");
        ei_x_encode_ulong(&args, nif_port);
    } else {
        ei_x_encode_atom(&args, "trace_port");
    }
    ei_x_encode_empty_list(&args);
    int rc = KP_TIERS_START_OK;
    if (kp_node_rpc(node, "kprof_tiers", "start", &args, &reply) != 0) {
        snprintf(err, err_len, "lost the connection to %s while starting tier tracing",
                 node->target);
        rc = KP_TIERS_START_LOST;
    } else {
        int i = 0, arity;
        char tag[MAXATOMLEN];
        if (ei_decode_tuple_header(reply.buff, &i, &arity) == 0 && arity == 2 &&
            ei_decode_atom(reply.buff, &i, tag) == 0 && strcmp(tag, "ok") == 0) {
            if (decode_settings(reply.buff, &i, c) != 0) {
                snprintf(err, err_len, "unexpected reply from kprof_tiers:start on %s",
                         node->target);
                rc = KP_TIERS_START_REFUSED;
            }
        } else {
            char why[1024];
            int type, size, config = 0;
            i = 0;
            /* {error, {config, Sentence}}: the tier file; {error, Sentence}: the node */
            int ok = ei_decode_tuple_header(reply.buff, &i, &arity) == 0 && arity == 2 &&
                     ei_skip_term(reply.buff, &i) == 0;
            if (ok && ei_decode_tuple_header(reply.buff, &i, &arity) == 0) {
                config = arity == 2 && ei_skip_term(reply.buff, &i) == 0;
                ok = config;
            }
            if (ok && ei_get_type(reply.buff, &i, &type, &size) == 0 &&
                (type == ERL_STRING_EXT || type == ERL_NIL_EXT) &&
                kp_term_decode_text(reply.buff, &i, why, sizeof why) == 0) {
                snprintf(err, err_len, "%s", why);
                rc = config ? KP_TIERS_START_BAD_CONFIG : KP_TIERS_START_REFUSED;
            } else {
                char s[512];
                snprintf(err, err_len, "tier tracing did not start on %s: %s", node->target,
                         kp_term_text(reply.buff, 0, "(unprintable reply)", s, sizeof s));
                rc = KP_TIERS_START_REFUSED;
            }
        }
    }
    ei_x_free(&args);
    ei_x_free(&reply);
    return rc;
}

void kp_tiers_config_free(kp_tiers_config *c)
{
    for (size_t k = 0; k < c->n_tiers; k++)
        kp_free(c->tier_names[k]);
    c->n_tiers = 0;
}

static int send_to_agent(kp_node *node, ei_x_buff *x)
{
    int rc = ei_reg_send(&node->ec, node->fd, "kprof_tiers", x->buff, x->index) < 0 ? -1 : 0;
    ei_x_free(x);
    return rc;
}

int kp_tiers_send_atom(kp_node *node, const char *message)
{
    ei_x_buff x;
    ei_x_new_with_version(&x);
    ei_x_encode_atom(&x, message);
    return send_to_agent(node, &x);
}

int kp_tiers_send_clock(kp_node *node, long seq)
{
    ei_x_buff x;
    ei_x_new_with_version(&x);
    ei_x_encode_tuple_header(&x, 3);
    ei_x_encode_atom(&x, "clock");
    ei_x_encode_pid(&x, &node->self);
    ei_x_encode_long(&x, seq);
    return send_to_agent(node, &x);
}

int kp_tiers_send_report(kp_node *node, const char *table, size_t table_len, const char *json,
                         size_t json_len)
{
    ei_x_buff x;
    ei_x_new_with_version(&x);
    ei_x_encode_tuple_header(&x, 3);
    ei_x_encode_atom(&x, "kprof_tier_report");
    ei_x_encode_binary(&x, table, (long)table_len);
    ei_x_encode_binary(&x, json, (long)json_len);
    return send_to_agent(node, &x);
}

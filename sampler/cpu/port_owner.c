/* See port_owner.h. */
#include "cpu/port_owner.h"

#include <string.h>

#include "kp/alloc.h"

#define PORT_TAG 0x7u    /* _TAG_IMMED1_PORT: a local port's id term */
#define EXAMPLES 8       /* Ports kept to learn from */
#define MAX_TRIES 50     /* learnings without an answer before giving up */
#define SURE_READINGS 30 /* readings that never parted two pairs: the same field */
#define NAME_WORDS ((KP_PORT_NAME_MAX + 7) / 8)

struct kp_port_owner {
    kp_pid_layout layout;
    kp_port_read_fn read;
    void *ctx;
    uint64_t examples[EXAMPLES];
    size_t n_examples;
    int learned, gave_up;
    unsigned tries;
    /* per (connected, name) offset pair, the readings of examples that
     * held one port's two there; and how many readings told anything */
    uint16_t *votes;
    unsigned readings;
    size_t connected_at, name_at; /* word offsets in a Port, once learned */
};

kp_port_owner *kp_port_owner_create(const kp_pid_layout *layout, kp_port_read_fn read, void *ctx)
{
    kp_port_owner *o = kp_calloc(1, sizeof *o);
    if (!o || !(o->votes = kp_calloc(KP_PORT_WORDS * KP_PORT_WORDS, sizeof *o->votes))) {
        kp_free(o);
        return NULL;
    }
    o->layout = *layout;
    o->read = read;
    o->ctx = ctx;
    return o;
}

void kp_port_owner_free(kp_port_owner *o)
{
    if (o)
        kp_free(o->votes);
    kp_free(o);
}

/* Could `w` point to a struct of the node (aligned, in user space)? */
static int pointer_like(uint64_t w)
{
    return (w & 7) == 0 && w >= 0x10000 && w < (1ull << 47);
}

static void keep_example(kp_port_owner *o, uint64_t port)
{
    for (size_t i = 0; i < o->n_examples; i++)
        if (o->examples[i] == port)
            return;
    if (o->n_examples < EXAMPLES)
        o->examples[o->n_examples++] = port;
}

size_t kp_port_owner_candidates(const kp_cpu_sample *s, const kp_unwind_result *r, size_t frame,
                                uint64_t *out)
{
    size_t k = 0;
    if (frame >= r->n_pcs)
        return 0;
    for (unsigned i = 0; i < KP_UNWIND_SAVED; i++)
        if (r->regs_known[frame] & (1u << i))
            out[k++] = r->regs[frame][i];
    /* the frame spans its sp up to its caller's */
    uint64_t from = r->sps[frame], to = frame + 1 < r->n_pcs ? r->sps[frame + 1]
                                        : r->reached_jit     ? r->jit_sp
                                                             : from;
    uint64_t base = s->regs[KP_REG_SP];
    for (uint64_t a = from; a + 8 <= to && k < KP_PORT_CANDIDATES; a += 8) {
        if (a < base || a - base + 8 > s->stack_size)
            break;
        memcpy(&out[k++], s->stack + (a - base), 8);
    }
    return k;
}

int kp_port_owner_find(kp_port_owner *o, const uint64_t *candidates, size_t n, uint64_t *port)
{
    uint64_t addrs[KP_PORT_CANDIDATES], words[KP_PORT_CANDIDATES];
    unsigned char ok[KP_PORT_CANDIDATES];
    size_t k = 0;
    for (size_t i = 0; i < n && k < KP_PORT_CANDIDATES; i++)
        if (pointer_like(candidates[i]))
            addrs[k++] = candidates[i];
    if (k == 0)
        return 0;
    if (o->read(o->ctx, addrs, k, words, ok) != 0)
        return -1;
    for (size_t i = 0; i < k; i++) {
        if (ok[i] && (words[i] & 0xf) == PORT_TAG) {
            *port = addrs[i];
            if (!o->learned && !o->gave_up)
                keep_example(o, addrs[i]);
            return 1;
        }
    }
    return 0;
}

int kp_port_owner_learned(const kp_port_owner *o)
{
    return o->learned;
}

int kp_port_owner_wants_facts(const kp_port_owner *o)
{
    return !o->learned && !o->gave_up && o->n_examples > 0;
}

/* The string at `addr` as far as its NUL within KP_PORT_NAME_MAX bytes
 * (cut there otherwise) into `out` (KP_PORT_NAME_MAX + 1 bytes). Returns
 * its length, or -1 when unreadable or not text. */
static long read_name(kp_port_owner *o, uint64_t addr, char *out)
{
    uint64_t addrs[NAME_WORDS], words[NAME_WORDS];
    unsigned char ok[NAME_WORDS];
    for (size_t i = 0; i < NAME_WORDS; i++)
        addrs[i] = addr + 8 * i;
    if (o->read(o->ctx, addrs, NAME_WORDS, words, ok) != 0 || !ok[0])
        return -1;
    size_t len = 0;
    for (size_t i = 0; i < NAME_WORDS && ok[i]; i++) {
        const unsigned char *b = (const unsigned char *)&words[i];
        for (size_t j = 0; j < 8 && len < KP_PORT_NAME_MAX; j++) {
            if (b[j] == 0) {
                out[len] = 0;
                return len ? (long)len : -1;
            }
            if (b[j] < 0x20 || b[j] == 0x7f)
                return -1;
            out[len++] = (char)b[j];
        }
    }
    out[len] = 0;
    return len == KP_PORT_NAME_MAX ? (long)len : -1;
}

/* Does a fact's name equal `text` as read (cut at KP_PORT_NAME_MAX)? */
static int same_name(const kp_port_fact *f, const char *text, size_t len)
{
    size_t want = f->name_len < KP_PORT_NAME_MAX ? f->name_len : KP_PORT_NAME_MAX;
    return want == len && memcmp(f->name, text, len) == 0;
}

/* Reads example `port` now, and adds one vote to each (connected, name)
 * offset pair at which it holds the connected process and the name of one
 * of `facts`; a reading that matched no pair (a port closed meanwhile, its
 * memory reused, or no Port at all) tells nothing and is not counted. */
static int vote(kp_port_owner *o, uint64_t port, const kp_port_fact *facts, size_t n_facts)
{
    uint64_t addrs[KP_PORT_WORDS], words[KP_PORT_WORDS];
    unsigned char ok[KP_PORT_WORDS];
    for (size_t i = 0; i < KP_PORT_WORDS; i++)
        addrs[i] = port + 8 * i;
    if (o->read(o->ctx, addrs, KP_PORT_WORDS, words, ok) != 0)
        return -1;
    if (!ok[0] || (words[0] & 0xf) != PORT_TAG)
        return 0; /* closed, and its memory reused */
    char names[KP_PORT_WORDS][KP_PORT_NAME_MAX + 1];
    long name_len[KP_PORT_WORDS];
    for (size_t m = 1; m < KP_PORT_WORDS; m++)
        name_len[m] = ok[m] && pointer_like(words[m]) ? read_name(o, words[m], names[m]) : -1;
    uint16_t *votes = o->votes;
    int told = 0;
    for (size_t c = 1; c < KP_PORT_WORDS; c++) {
        kp_pid_numbers pid;
        if (!ok[c] || kp_pid_term_decode(words[c], &o->layout, &pid) != 0)
            continue;
        for (size_t m = 1; m < KP_PORT_WORDS; m++) {
            if (name_len[m] < 0)
                continue;
            for (size_t f = 0; f < n_facts; f++) {
                if (facts[f].connected.num == pid.num && facts[f].connected.serial == pid.serial &&
                    same_name(&facts[f], names[m], (size_t)name_len[m])) {
                    votes[c * KP_PORT_WORDS + m]++;
                    told = 1;
                    break;
                }
            }
        }
    }
    o->readings += (unsigned)told;
    return 0;
}

int kp_port_owner_learn(kp_port_owner *o, const kp_port_fact *facts, size_t n)
{
    if (o->learned)
        return 1;
    if (o->gave_up)
        return -1;
    for (size_t e = 0; e < o->n_examples; e++)
        if (vote(o, o->examples[e], facts, n) != 0)
            return -1;
    /* the pairs every telling reading agreed with: one is the answer; two
     * or more wait for readings that part them, and after enough of them
     * are taken to be the same field twice (the first is kept) */
    size_t first = 0, agreeing = 0;
    for (size_t i = 0; o->readings && i < KP_PORT_WORDS * KP_PORT_WORDS; i++)
        if (o->votes[i] == o->readings && !agreeing++)
            first = i;
    o->tries++;
    if (agreeing == 1 || (agreeing > 1 && o->readings >= SURE_READINGS)) {
        o->connected_at = first / KP_PORT_WORDS;
        o->name_at = first % KP_PORT_WORDS;
        o->learned = 1;
        return 1;
    }
    if (o->tries >= MAX_TRIES) {
        o->gave_up = 1;
        return -1;
    }
    return 0;
}

int kp_port_owner_describe(kp_port_owner *o, uint64_t port, kp_pid_numbers *connected, char *name,
                           size_t name_len)
{
    if (!o->learned || name_len < KP_PORT_NAME_MAX + 1)
        return -1;
    uint64_t addrs[2] = {port + 8 * o->connected_at, port + 8 * o->name_at}, words[2];
    unsigned char ok[2];
    if (o->read(o->ctx, addrs, 2, words, ok) != 0 || !ok[0] || !ok[1] ||
        kp_pid_term_decode(words[0], &o->layout, connected) != 0 || !pointer_like(words[1]))
        return -1;
    return read_name(o, words[1], name) < 0 ? -1 : 0;
}

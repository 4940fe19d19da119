/* The native sampler: a thread drains the rings every DRAIN_MS, names each
 * sample's frames and counts it under its stack; see native.h. */
#define _GNU_SOURCE
#include "cpu/native.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/cli.h"
#include "common/clock.h"
#include "common/flame_files.h"
#include "common/pid_text.h"
#include "common/u64_map.h"
#include "cpu/perf_events.h"
#include "cpu/kernel_symbols.h"
#include "cpu/native_names.h"
#include "cpu/jit_code.h"
#include "cpu/port_owner.h"
#include "cpu/states.h"
#include "cpu/symbols.h"
#include "cpu/unwind.h"
#include "kp/alloc.h"
#include "kp/flame_svg.h"
#include "kp/folded.h"
#include "kp/intern.h"
#include "kp/perf_writer.h"
#include "kp/weights.h"

#define DRAIN_MS 20
#define RESCAN_US 1000000u /* new threads, new code in the perf map, new libraries */
/* Without segments (an observer's samples only: kprof top, kprof push)
 * the code stacks are a cache of each one's state: past this many they are
 * forgotten at once, as a busy node's distinct stacks would otherwise grow
 * its memory for as long as it runs (a few hundred kB a minute on the
 * sample app) */
#define OBSERVED_STACKS_MAX 50000u
#define NO_FRAME UINT32_MAX
#define MAX_PROCS (1u << 20)
/* Frames of a sample's code stack at most: the kernel's chain, the C
 * frames unwound, the user chain, and the JIT caller's two */
#define MAX_CODE (KP_KERNEL_CHAIN_MAX + KP_UNWIND_MAX + KP_CALLCHAIN_MAX + 2)

typedef struct {
    kp_pid_numbers pid;
    uint32_t pid_frame, label_frame; /* label: NO_FRAME until named */
} proc;

/* A sample waiting to be written to the segments in time order. */
typedef struct {
    uint64_t time_ns;
    uint64_t period;
    uint32_t tid, cpu;
    uint32_t stack; /* full: kind, process, code */
} pending;

/* One aggregate: a thread kind, a process (or none) and a code stack. */
typedef struct {
    uint64_t key;
    uint64_t samples;
} tally;

/* What the calibration's samples showed (kp_native_learn). */
#define LEARN_TERMS 16 /* distinct words read at the current-process register */
#define LEARN_SLOTS 16 /* words above the runtime stack searched for the caller */
typedef struct {
    pthread_mutex_t lock;
    uint64_t terms[LEARN_TERMS];
    uint32_t term_samples[LEARN_TERMS];
    uint32_t spin_samples;
    uint32_t slot_votes[LEARN_SLOTS];
    uint32_t light_bif_samples; /* under call_light_bif_shared, from hash/2 */
} learning;

struct kp_native {
    kp_native_options o;
    atomic_int learning; /* until kp_native_learn: samples are studied, not kept */
    learning learn;
    kp_perf_events *events;
    kp_jit_code *code;          /* JIT code's names; Erlang callers without frame pointers */
    uint64_t code_refreshed_us; /* when a miss last read the registrations again */
    kp_symbols *symbols;
    /* names of the kernel's frames; NULL when its chain is not recorded or
     * its addresses are hidden (kernel_note says why) */
    kp_kernel_symbols *kernel;
    char kernel_note[512];
    kp_frames *frames;
    kp_stacks *stacks;
    kp_u64_map frame_at; /* looked-up address -> frame */
    uint32_t kind_frames[KP_THREAD_OTHER + 1];
    uint32_t state_frames[KP_CPU_STATE_COUNT];
    kp_states *states;
    kp_u64_map state_of;  /* code stack << 4 | thread class -> state */
    uint32_t states_seen; /* kp_states_generation when state_of was filled */
    uint32_t kernel_frame, unmapped_frame;
    kp_u64_map proc_index; /* num << 32 | serial -> procs[] */
    proc *procs;
    size_t n_procs, procs_cap;
    kp_u64_map tally_index; /* tally key -> tallies[] */
    tally *tallies;
    size_t n_tallies, tallies_cap;
    uint32_t ids[MAX_CODE];
    kp_unwind *unwind; /* NULL when libdwfl refused: C leaves stay alone */
    /* port tasks: the frame of erts_port_task_execute, and the words of a
     * sample's that may hold its Port (none: not a port task) */
    uint32_t port_task_frame;
    uint64_t port_words[KP_PORT_CANDIDATES];
    size_t n_port_words;
    pthread_mutex_t ports_lock; /* over `ports`: the caller's thread teaches it */
    kp_port_owner *ports;       /* NULL until the first port task */
    uint64_t ports_asked_us;    /* when facts came last: asked at most 10 times a second */
    /* segments: samples of a drain wait here until sorted by time */
    kp_segment_writer *segments;
    kp_perf_writer *perf;
    kp_buf text;
    pending *pending;
    size_t n_pending, pending_cap;
    pthread_t thread;
    atomic_int stop;
    int started;
    int failed; /* out of memory in the thread: sampling stopped */
    kp_native_stats stats;
};

static int intern_text(kp_native *n, const char *text, const char *kind, uint32_t *id)
{
    return kp_frames_intern_pseudo(n->frames, text, strlen(text), kind, id) == KP_OK ? 0 : -1;
}

/* The frame of code address `addr` (a return address already moved back
 * into its call), or NO_FRAME when no code maps it: a frame-pointer chain
 * that ran into C code without frame pointers continues with garbage. */
static uint32_t frame_of(kp_native *n, uint64_t addr)
{
    uint32_t id;
    if (kp_u64_map_get(&n->frame_at, addr, &id))
        return id;
    id = NO_FRAME;
    const kp_jit_symbol *jit = kp_jit_code_find(n->code, addr);
    kp_native_symbol sym;
    char text[512];
    if (jit && jit->kind != KP_JIT_RUNTIME) {
        kp_mfa mfa = {jit->module,       jit->module_len, jit->function,
                      jit->function_len, jit->arity,      0};
        if (kp_frames_intern_mfa(n->frames, &mfa, &id) != KP_OK)
            return NO_FRAME;
    } else if (jit) {
        /* "MODULE::PART" (the module's codeHeader, codeFooter; global:: the
         * runtime's shared fragments): the module in the profile's
         * notation, as its functions are, so an Elixir module's header is
         * not the one frame left in Erlang's */
        const char *sep = NULL;
        for (const char *p = jit->text; (p = strstr(p, "::")) != NULL; p += 2)
            sep = p;
        if (sep) {
            size_t mod_len = (size_t)(sep - jit->text);
            if (kp_frames_intern_in_module(n->frames, "[jit]", jit->text, mod_len, sep,
                                           jit->text_len - mod_len, "jit", &id) != KP_OK)
                return NO_FRAME;
        } else {
            snprintf(text, sizeof text, "[jit]%.*s", (int)jit->text_len, jit->text);
            if (intern_text(n, text, "jit", &id) != 0)
                return NO_FRAME;
        }
    } else if (kp_symbols_find(n->symbols, addr, &sym) == 0) {
        kp_native_frame_text(&sym, text, sizeof text);
        if (intern_text(n, text, "native", &id) != 0)
            return NO_FRAME;
    }
    if (id != NO_FRAME && kp_u64_map_put(&n->frame_at, addr, id) != 0)
        return NO_FRAME;
    return id;
}

/* The frame of kernel address `addr` ([kernel]NAME, [kernel:MODULE]NAME),
 * or the bare [kernel] frame when no symbol covers it. */
static uint32_t kernel_frame_of(kp_native *n, uint64_t addr)
{
    uint32_t id;
    if (kp_u64_map_get(&n->frame_at, addr, &id))
        return id;
    kp_kernel_symbol sym;
    char text[KP_KERNEL_SYMBOL_MAX + 32];
    id = n->kernel_frame;
    if (kp_kernel_symbols_find(n->kernel, addr, &sym) &&
        kp_kernel_symbols_frame_name(&sym, text, sizeof text) > 0 &&
        intern_text(n, text, "kernel", &id) != 0)
        return NO_FRAME;
    return kp_u64_map_put(&n->frame_at, addr, id) == 0 ? id : NO_FRAME;
}

static int is_jit(void *ctx, uint64_t pc)
{
    kp_native *n = ctx;
    return kp_jit_code_find(n->code, pc) != NULL;
}

#define MISS_REFRESH_US 250000u

/* Code loaded since the last rescan, where the JIT's registrations name
 * it: a user leaf that no name covers reads them again (at most 4 times a
 * second), before anything of the sample is looked up. */
static void refresh_on_miss(kp_native *n, uint64_t leaf)
{
    kp_native_symbol sym;
    if (kp_jit_code_names(n->code) != KP_JIT_NAMES_REGISTRATIONS ||
        kp_jit_code_find(n->code, leaf) || kp_now_us() - n->code_refreshed_us < MISS_REFRESH_US ||
        kp_symbols_find(n->symbols, leaf, &sym) == 0)
        return;
    n->code_refreshed_us = kp_now_us();
    if (kp_jit_code_refresh(n->code) > 0)
        kp_u64_map_clear(&n->frame_at);
}

/* The frames of a sample, leaf first, as they are named. */
typedef struct {
    uint32_t ids[MAX_CODE];
    size_t k;
} frame_list;

/* Appends `id`; 0 when it is NO_FRAME (out of memory) or the list is full. */
static int push(frame_list *f, uint32_t id)
{
    if (id == NO_FRAME || f->k == sizeof f->ids / sizeof f->ids[0])
        return 0;
    f->ids[f->k++] = id;
    return 1;
}

/* The frame-pointer chain's return addresses `ret[0..n)`, while they name
 * code: past the first that does not, the chain is garbage. The process's
 * normal exit, its stack's bottom, ends it too: it is no caller. */
static void push_chain(kp_native *n, frame_list *f, const uint64_t *ret, size_t count)
{
    uint64_t normal_exit = kp_jit_code_normal_exit(n->code);
    for (size_t i = 0; i < count; i++) {
        if ((normal_exit && ret[i] == normal_exit) || !push(f, frame_of(n, ret[i] - 1)))
            break;
    }
}

/* Walks the frame pointers from `rbp` through the sample's stack copy, as
 * the kernel does through the live stack at sample time: the JIT's frames
 * are [saved rbp, return address] records, each caller's above its
 * callee's. Stops at the copy's end: the frames above it are no longer
 * there to read as they were. */
static void push_copied_frames(kp_native *n, frame_list *f, const kp_cpu_sample *s, uint64_t rbp)
{
    uint64_t base = s->regs[KP_REG_SP];
    for (size_t depth = 0; depth < KP_CALLCHAIN_MAX; depth++) {
        if (rbp < base || (rbp & 7) || rbp - base > s->stack_size ||
            s->stack_size - (rbp - base) < 16)
            return;
        uint64_t next, ret;
        memcpy(&next, s->stack + (rbp - base), 8);
        memcpy(&ret, s->stack + (rbp - base) + 8, 8);
        if (!push(f, frame_of(n, ret - 1)) || next <= rbp)
            return;
        rbp = next;
    }
}

/* The Erlang callers read from the stack from E (no frame pointers):
 * `copy[0..copy_len)` the sample's copy of it from E, if any
 * (kp_jit_code_callers). */
static void push_stack_callers(kp_native *n, frame_list *f, uint64_t e, const uint8_t *copy,
                               size_t copy_len)
{
    uint64_t ret[KP_CALLCHAIN_MAX];
    size_t room = sizeof f->ids / sizeof f->ids[0] - f->k;
    int complete; /* whether the bottom was reached: the frames are the same either way */
    size_t count =
        kp_jit_code_callers(n->code, e, copy, copy_len, ret,
                            room < KP_CALLCHAIN_MAX ? room : KP_CALLCHAIN_MAX, &complete);
    push_chain(n, f, ret, count);
}

/* Is JIT entry `jit` the runtime fragment `name` ("global::NAME")? */
static int is_fragment(const kp_jit_symbol *jit, const char *name)
{
    size_t len = strlen(name);
    return jit && jit->kind == KP_JIT_RUNTIME && jit->text_len == len &&
           memcmp(jit->text, name, len) == 0;
}

/* The Erlang caller of a BIF that call_light_bif_shared called: before
 * the call the fragment spills the caller's entry address to a scratch
 * slot just above the runtime stack (in OTP 25.2.3's code `mov
 * %rdx,-0x78(%rbx)` ... `lea -0x80(%rbx),%rsp` ... `call *%rax`: 8 bytes
 * above the BIF's return address). The slot is learned from the node
 * (kp_native_learn: 8 on OTP 25, 27 and 29), not assumed. Only an address
 * in an Erlang function's code is taken. Returns the frame, or NO_FRAME. */
/* The word `offset` bytes above the runtime stack pointer the unwinder
 * reached (r->jit_sp), from the sample's copy of the stack: 0, or -1 when
 * the copy does not hold it. */
static int stack_word(const kp_cpu_sample *s, const kp_unwind_result *r, uint64_t offset,
                      uint64_t *word)
{
    uint64_t base = s->regs[KP_REG_SP];
    if (r->jit_sp < base || r->jit_sp - base > s->stack_size ||
        s->stack_size - (r->jit_sp - base) < offset + 8)
        return -1;
    memcpy(word, s->stack + (r->jit_sp - base) + offset, 8);
    return 0;
}

static uint32_t light_bif_caller(kp_native *n, const kp_cpu_sample *s, const kp_unwind_result *r)
{
    uint64_t entry;
    int slot = n->o.light_bif_slot;
    if (slot < 0 || stack_word(s, r, (uint64_t)slot, &entry) != 0)
        return NO_FRAME;
    const kp_jit_symbol *jit = kp_jit_code_find(n->code, entry);
    return jit && jit->kind != KP_JIT_RUNTIME ? frame_of(n, entry) : NO_FRAME;
}

/* A light BIF's caller `caller` (light_bif_caller) at `f->ids[at]`, the
 * callers from the stack above it moved up. A light BIF called in its
 * caller's tail (gen:reply/2's send) left no return address on the stack:
 * its caller from the spill slot goes first, as the frame pointers' path
 * names it; one the stack named already is not named twice. */
static void put_light_bif_caller(kp_native *n, frame_list *f, size_t at, uint32_t caller)
{
    if (caller == NO_FRAME || (f->k > at && f->ids[at] == caller) ||
        f->k == sizeof f->ids / sizeof f->ids[0])
        return;
    memmove(f->ids + at + 1, f->ids + at, (f->k - at) * sizeof *f->ids);
    f->ids[at] = caller;
    f->k++;
    n->stats.light_bif++;
}

/* The JIT frame the CFI reached above a C leaf, and the frames above it
 * where they can be told exactly (see docs/native-cpu.md, "Unwinding C code"):
 *   - the frame itself, where the JIT called the C code: an Erlang
 *     function, or a runtime fragment ([jit]global::...);
 *   - with frame pointers, when the C frames left rbp as the JIT had it
 *     (the CFI's rbp at the JIT frame is the sampled one), the kernel's
 *     frame-pointer chain, which it walked from that rbp at sample time:
 *     the Erlang frames;
 *   - else the process's stack from the E the JIT saved as it called the
 *     C code (in rbp, or the process's `stop`, as the code it returns to
 *     says: kp_jit_code_saved_e), read from the node now; under
 *     call_light_bif_shared, the BIF's caller from the spill slot first
 *     where the stack does not hold it (a BIF called in a tail);
 *   - else, under call_light_bif_shared, the Erlang function that called
 *     the BIF, from the fragment's spill slot (light_bif_caller);
 *   - else, with frame pointers, when that rbp points into the stack copy,
 *     the frame pointers walked there.
 * The process: r13 as the CFI restored it at the JIT frame (the JIT's
 * c_p), except under the scheduler loop (process_main), where r13 holds
 * the process being scheduled out while erts_schedule picks the next. */
static void push_jit_caller(kp_native *n, frame_list *f, const kp_cpu_sample *s,
                            const kp_unwind_result *r, int *has_c_p, uint64_t *c_p)
{
    const kp_jit_symbol *jit = kp_jit_code_find(n->code, r->jit_pc - 1);
    int scheduler = is_fragment(jit, "global::process_main");
    int light = is_fragment(jit, "global::call_light_bif_shared");
    int fp = kp_jit_code_frame_pointers(n->code);
    kp_jit_caller_regs regs = {r->jit_rbp,   r->jit_r13,   r->jit_r15,
                               r->rbp_known, r->r13_known, r->r15_known};
    uint64_t e;
    push(f, frame_of(n, r->jit_pc - 1));
    if (scheduler) {
        /* the scheduler loop: no Erlang caller */
    } else if (fp && r->rbp_known && r->jit_rbp == s->regs[KP_REG_BP]) {
        n->stats.rbp_kept++;
        push_chain(n, f, s->chain + 1, s->n_chain - 1);
    } else if (kp_jit_code_saved_e(n->code, r->jit_pc, &regs, &e)) {
        /* the E the JIT saved as it called the C code: the stack above */
        size_t at = f->k;
        uint32_t caller = light ? light_bif_caller(n, s, r) : NO_FRAME;
        push_stack_callers(n, f, e, NULL, 0);
        put_light_bif_caller(n, f, at, caller);
    } else if (light) {
        put_light_bif_caller(n, f, f->k, light_bif_caller(n, s, r));
    } else if (fp && r->rbp_known) {
        size_t before = f->k;
        push_copied_frames(n, f, s, r->jit_rbp);
        n->stats.rbp_in_copy += f->k > before;
    }
    if ((*has_c_p = r->r13_known && !scheduler))
        *c_p = r->jit_r13;
}

/* Names the frames of sample `s` into n->ids, root first, and says which
 * r13 tells its process: the sampled one when the leaf is JIT code, the
 * one the CFI recovered at the JIT frame that called the C leaf, else none
 * (C code uses r13 for its own ends). Returns the number of frames. */
static size_t name_frames(kp_native *n, const kp_cpu_sample *s, int *has_c_p, uint64_t *c_p)
{
    frame_list f = {.k = 0};
    if (s->n_chain)
        refresh_on_miss(n, s->chain[0]);
    *has_c_p = 0;
    n->n_port_words = 0;
    if (s->in_kernel && n->kernel && s->n_kernel_chain) {
        /* leaf first; past the leaf, return addresses moved back into
         * their call */
        for (size_t i = 0; i < s->n_kernel_chain; i++)
            if (!push(&f, kernel_frame_of(n, i ? s->kernel_chain[i] - 1 : s->kernel_chain[i])))
                break;
    } else if (s->in_kernel) {
        push(&f, n->kernel_frame);
    }
    const uint64_t leaf = s->n_chain ? s->chain[0] : 0;
    const kp_jit_symbol *jit;
    if (s->n_chain == 0) {
        /* no user frame */
    } else if ((jit = kp_jit_code_find(n->code, leaf)) != NULL) {
        /* E is rsp: the callers are read from the sample's stack copy,
         * where every return address is, frame pointers or not. The
         * kernel's frame-pointer chain misses one when the leaf has left
         * its frame to call another function in its tail (between the
         * caller's leave and the callee's entry: a tight loop of tail
         * calls is there half of its time), and names garbage without
         * frame pointers; it is taken only where the stack cannot be read. */
        push(&f, frame_of(n, leaf));
        if (s->user_regs && s->regs[KP_REG_IP] == leaf && kp_jit_code_normal_exit(n->code))
            push_stack_callers(n, &f, s->regs[KP_REG_SP], s->stack, s->stack_size);
        else if (kp_jit_code_frame_pointers(n->code))
            push_chain(n, &f, s->chain + 1, s->n_chain - 1);
        /* r13 is c_p in JIT code, but for the scheduler loop's */
        *has_c_p = s->user_regs && !is_fragment(jit, "global::process_main");
        *c_p = s->c_p;
    } else {
        kp_unwind_result r;
        n->stats.c_leaf++;
        if (n->unwind && s->user_regs && s->regs[KP_REG_IP] == leaf) {
            int64_t t0 = kp_now_ns();
            kp_unwind_sample(n->unwind, s, is_jit, n, &r);
            n->stats.unwind_ns += (uint64_t)(kp_now_ns() - t0);
        } else {
            memset(&r, 0, sizeof r);
        }
        if (r.n_pcs == 0) {
            r.pcs[0] = leaf;
            r.n_pcs = 1;
        }
        for (size_t i = 0; i < r.n_pcs; i++) {
            uint32_t id = frame_of(n, i == 0 ? r.pcs[i] : r.pcs[i] - 1);
            push(&f, id == NO_FRAME ? n->unmapped_frame : id);
            if (id == n->port_task_frame && !n->n_port_words)
                n->n_port_words = kp_port_owner_candidates(s, &r, i, n->port_words);
        }
        if (r.reached_jit) {
            n->stats.unwound++;
            push_jit_caller(n, &f, s, &r, has_c_p, c_p);
        }
    }
    for (size_t i = 0; i < f.k; i++)
        n->ids[i] = f.ids[f.k - 1 - i];
    return f.k;
}

/* The process table's index of `pid`, added if new; -1 when full. */
static long proc_of(kp_native *n, kp_pid_numbers pid)
{
    uint64_t key = (uint64_t)pid.num << 32 | pid.serial;
    uint32_t at;
    if (kp_u64_map_get(&n->proc_index, key, &at))
        return at;
    if (n->n_procs == MAX_PROCS)
        return -1;
    if (n->n_procs == n->procs_cap) {
        size_t cap = n->procs_cap ? n->procs_cap * 2 : 64;
        proc *p = kp_realloc_array(n->procs, cap, sizeof *p);
        if (!p)
            return -1;
        n->procs = p;
        n->procs_cap = cap;
    }
    proc *p = &n->procs[n->n_procs];
    p->pid = pid;
    p->label_frame = NO_FRAME;
    char text[KP_PID_TEXT_MAX];
    int len = kp_pid_text(text, pid.num, pid.serial);
    if (kp_frames_intern_pseudo(n->frames, text, (size_t)len, "process", &p->pid_frame) != KP_OK ||
        kp_u64_map_put(&n->proc_index, key, (uint32_t)n->n_procs) != 0)
        return -1;
    return (long)n->n_procs++;
}

static int count(kp_native *n, uint64_t key)
{
    uint32_t at;
    if (kp_u64_map_get(&n->tally_index, key, &at)) {
        n->tallies[at].samples++;
        return 0;
    }
    if (n->n_tallies == n->tallies_cap) {
        size_t cap = n->tallies_cap ? n->tallies_cap * 2 : 1024;
        tally *t = kp_realloc_array(n->tallies, cap, sizeof *t);
        if (!t)
            return -1;
        n->tallies = t;
        n->tallies_cap = cap;
    }
    n->tallies[n->n_tallies] = (tally){key, 1};
    return kp_u64_map_put(&n->tally_index, key, (uint32_t)n->n_tallies++);
}

/* A tally key: the code stack (32 bits), the process index + 1 (0: none;
 * 26 bits, of which MAX_PROCS needs 21), the state (4 bits) and the thread
 * kind (2 bits). */
static uint64_t tally_key(uint32_t stack, long proc, kp_cpu_state state, kp_thread_kind kind)
{
    return (uint64_t)stack << 32 | (uint64_t)(proc + 1) << 6 | (uint64_t)state << 2 |
           (uint64_t)kind;
}

static uint32_t tally_stack(uint64_t key)
{
    return (uint32_t)(key >> 32);
}

static long tally_proc(uint64_t key)
{
    return (long)((key >> 6) & ((1u << 26) - 1)) - 1;
}

static kp_cpu_state tally_state(uint64_t key)
{
    return (kp_cpu_state)((key >> 2) & 15);
}

static kp_thread_kind tally_kind(uint64_t key)
{
    return (kp_thread_kind)(key & 3);
}

/* The stack written out for code stack `stack`: thread kind, state,
 * process (when attributed) and its label (once named, after the run),
 * then the code (kp/cpu_state.h). */
static kp_status rooted_stack(kp_native *n, uint32_t stack, long proc, kp_cpu_state state,
                              kp_thread_kind kind, uint32_t *out)
{
    size_t depth;
    const uint32_t *code = kp_stacks_get(n->stacks, stack, &depth);
    uint32_t ids[MAX_CODE + 5];
    size_t k = 0;
    ids[k++] = n->kind_frames[kind];
    ids[k++] = n->state_frames[state];
    if (proc >= 0) {
        ids[k++] = n->procs[proc].pid_frame;
        if (n->procs[proc].label_frame != NO_FRAME)
            ids[k++] = n->procs[proc].label_frame;
    }
    memcpy(ids + k, code, depth * sizeof *ids);
    return kp_stacks_intern(n->stacks, ids, k + depth, out);
}

/* Queues sample `s` (code stack `stack`) for the segments. */
static int queue(kp_native *n, const kp_cpu_sample *s, uint32_t stack, long proc,
                 kp_cpu_state state, kp_thread_kind kind)
{
    uint32_t full; /* no label yet: processes are named after the run */
    if (rooted_stack(n, stack, proc, state, kind, &full) != KP_OK)
        return -1;
    if (n->n_pending == n->pending_cap) {
        size_t cap = n->pending_cap ? n->pending_cap * 2 : 4096;
        pending *p = kp_realloc_array(n->pending, cap, sizeof *p);
        if (!p)
            return -1;
        n->pending = p;
        n->pending_cap = cap;
    }
    n->pending[n->n_pending++] = (pending){s->time_ns, s->period, s->tid, s->cpu, full};
    return 0;
}

static int by_time(const void *a, const void *b)
{
    uint64_t x = ((const pending *)a)->time_ns, y = ((const pending *)b)->time_ns;
    return x < y ? -1 : x > y;
}

/* Writes the queued samples taken before `until_ns` in time order; later
 * ones wait for the next drain, which may still find earlier samples in
 * rings drained after theirs. */
static void write_pending(kp_native *n, uint64_t until_ns)
{
    if (!n->segments || !n->n_pending)
        return;
    qsort(n->pending, n->n_pending, sizeof *n->pending, by_time);
    size_t i = 0;
    for (; i < n->n_pending && n->pending[i].time_ns < until_ns; i++) {
        const pending *p = &n->pending[i];
        kp_perf_record rec = {
            (uint32_t)n->o.os_pid, p->tid, p->cpu, p->time_ns / 1000, p->period, NULL, 0, p->stack};
        kp_buf_clear(&n->text);
        if (n->stats.write_error || kp_perf_writer_format(n->perf, &rec, &n->text) != KP_OK)
            continue;
        if (n->o.tap)
            n->o.tap->fn(n->o.tap->ctx, n->frames, n->stacks, p->stack, rec.time_us);
        if (kp_segment_write(n->segments, n->text.data, n->text.len, rec.time_us) != KP_OK)
            n->stats.write_error = errno ? errno : EIO;
    }
    memmove(n->pending, n->pending + i, (n->n_pending - i) * sizeof *n->pending);
    n->n_pending -= i;
}

/* Is `jit` the Erlang function kprof_calibrate:FUNCTION? */
static int is_calibration(const kp_jit_symbol *jit, const char *function)
{
    static const char module[] = "kprof_calibrate";
    return jit && jit->kind != KP_JIT_RUNTIME && jit->module_len == sizeof module - 1 &&
           memcmp(jit->module, module, sizeof module - 1) == 0 &&
           jit->function_len == strlen(function) &&
           memcmp(jit->function, function, jit->function_len) == 0;
}

/* A sample taken while learning: notes the current-process register of
 * the spinners' samples, and for samples in C code under call_light_bif_shared
 * each word above the runtime stack that points into hash/2. */
static void study(kp_native *n, const kp_cpu_sample *s)
{
    learning *l = &n->learn;
    const kp_jit_symbol *leaf = s->n_chain ? kp_jit_code_find(n->code, s->chain[0]) : NULL;
    pthread_mutex_lock(&l->lock);
    uint64_t term;
    unsigned char ok = 0;
    if (is_calibration(leaf, "spin") && s->user_regs) {
        /* read now: the spinners live until kprof has learned */
        l->spin_samples++;
        if (kp_current_process_terms(n->o.os_pid, &s->c_p, 1, &term, &ok) != 0 || !ok) {
            pthread_mutex_unlock(&l->lock);
            return;
        }
        size_t k = 0;
        while (k < LEARN_TERMS && l->term_samples[k] && l->terms[k] != term)
            k++;
        if (k < LEARN_TERMS) {
            l->terms[k] = term;
            l->term_samples[k]++;
        }
    } else if (!leaf && s->n_chain && n->unwind && s->user_regs &&
               s->regs[KP_REG_IP] == s->chain[0]) {
        kp_unwind_result r;
        kp_unwind_sample(n->unwind, s, is_jit, n, &r);
        if (r.reached_jit &&
            is_fragment(kp_jit_code_find(n->code, r.jit_pc - 1), "global::call_light_bif_shared")) {
            int from_caller = 0;
            uint64_t word;
            for (size_t k = 0; k < LEARN_SLOTS && stack_word(s, &r, 8 * k, &word) == 0; k++) {
                if (is_calibration(kp_jit_code_find(n->code, word), "hash")) {
                    l->slot_votes[k]++;
                    from_caller = 1;
                }
            }
            l->light_bif_samples += from_caller;
        }
    }
    pthread_mutex_unlock(&l->lock);
}

/* Does frame `id`, a sample's leaf, name a function by its symbol (an
 * Erlang function, a C or a kernel function), not by an address
 * (FILE@0xSTART), nor as bare kernel or unmapped code? */
static int leaf_is_named(kp_native *n, uint32_t id)
{
    if (id == n->kernel_frame || id == n->unmapped_frame)
        return 0;
    size_t len;
    const char *text = kp_frames_symbol(n->frames, id, &len);
    return !memmem(text, len, "@0x", 3);
}

/* What a code stack says of its sample on a thread of a class: its state,
 * and whether its leaf is named (leaf_is_named). Told once per stack and
 * class, from n->ids[0..depth) (cpu/states.h), and cached packed as
 * state | named << 4. Returns -1 when out of memory. */
static int state_of(kp_native *n, uint32_t stack, size_t depth, unsigned thread_class,
                    kp_cpu_state *state, int *named_leaf)
{
    uint64_t key = (uint64_t)stack << 4 | thread_class;
    uint32_t known;
    if (n->states_seen != kp_states_generation(n->states) ||
        !kp_u64_map_get(&n->state_of, key, &known)) {
        kp_state_frame frames[MAX_CODE];
        for (size_t i = 0; i < depth; i++)
            frames[i].text = kp_frames_symbol(n->frames, n->ids[i], &frames[i].len);
        kp_cpu_state told = kp_states_classify(n->states, thread_class, frames, depth);
        if (n->states_seen != kp_states_generation(n->states)) {
            kp_u64_map_clear(&n->state_of); /* a wait loop learned */
            n->states_seen = kp_states_generation(n->states);
        }
        known = (uint32_t)told | (uint32_t)(depth && leaf_is_named(n, n->ids[depth - 1])) << 4;
        if (kp_u64_map_put(&n->state_of, key, known) != 0)
            return -1;
    }
    *state = (kp_cpu_state)(known & 15);
    *named_leaf = (int)(known >> 4);
    return 0;
}

/* Starts the code stacks and their states afresh (OBSERVED_STACKS_MAX). */
static int forget_stacks(kp_native *n)
{
    kp_stacks *fresh = kp_stacks_create();
    if (!fresh)
        return -1;
    kp_stacks_free(n->stacks);
    n->stacks = fresh;
    kp_u64_map_clear(&n->state_of);
    return 0;
}

static int read_node(void *ctx, const uint64_t *addrs, size_t n, uint64_t *words, unsigned char *ok)
{
    const kp_native *native = ctx;
    return kp_current_process_terms(native->o.os_pid, addrs, n, words, ok);
}

/* The port a port task's sample ran (its [port]NAME frame) and the process
 * it is connected to, from the words name_frames kept. Returns 1 when
 * told, 0 when not (no Port found, offsets not learned yet), -1 when out
 * of memory. */
static int port_of(kp_native *n, uint32_t *port_frame, kp_pid_numbers *connected)
{
    pthread_mutex_lock(&n->ports_lock);
    if (!n->ports)
        n->ports = kp_port_owner_create(&n->o.layout, read_node, n);
    uint64_t port;
    char name[KP_PORT_NAME_MAX + 1], text[KP_PORT_NAME_MAX + 8];
    int rc = n->ports ? 0 : -1;
    if (rc == 0 && kp_port_owner_find(n->ports, n->port_words, n->n_port_words, &port) == 1 &&
        kp_port_owner_describe(n->ports, port, connected, name, sizeof name) == 0) {
        snprintf(text, sizeof text, "[port]%s", name);
        rc = intern_text(n, text, "port", port_frame) == 0 ? 1 : -1;
    }
    pthread_mutex_unlock(&n->ports_lock);
    return rc;
}

#define PORTS_ASK_US 100000u

int kp_native_ports_wanted(kp_native *n)
{
    pthread_mutex_lock(&n->ports_lock);
    int wanted = n->ports && kp_port_owner_wants_facts(n->ports) &&
                 kp_now_us() - n->ports_asked_us >= PORTS_ASK_US;
    pthread_mutex_unlock(&n->ports_lock);
    return wanted;
}

int kp_native_port_tasks_seen(kp_native *n)
{
    pthread_mutex_lock(&n->ports_lock);
    int seen = n->ports != NULL;
    pthread_mutex_unlock(&n->ports_lock);
    return seen;
}

int kp_native_port_facts(kp_native *n, const kp_port_fact *facts, size_t count)
{
    pthread_mutex_lock(&n->ports_lock);
    int rc = n->ports ? kp_port_owner_learn(n->ports, facts, count) : 0;
    n->ports_asked_us = kp_now_us();
    pthread_mutex_unlock(&n->ports_lock);
    return rc;
}

static int on_sample(void *ctx, const kp_cpu_sample *s)
{
    kp_native *n = ctx;
    if (atomic_load(&n->learning)) {
        study(n, s);
        return 0;
    }
    kp_thread_kind kind = KP_THREAD_OTHER;
    const char *thread = kp_perf_events_thread(n->events, s->tid, &kind);
    if (!thread)
        kind = KP_THREAD_OTHER;
    int has_c_p;
    uint64_t c_p = 0;
    size_t depth = name_frames(n, s, &has_c_p, &c_p);
    /* a port task: its port named above the code, and the sample counted
     * to the process the port is connected to */
    uint32_t port_frame = NO_FRAME;
    kp_pid_numbers owner;
    int owned = 0;
    if (n->n_port_words) {
        n->stats.port_tasks++;
        if ((owned = port_of(n, &port_frame, &owner)) < 0)
            return n->failed = 1;
        if (owned && depth < MAX_CODE) {
            memmove(n->ids + 1, n->ids, depth * sizeof *n->ids);
            n->ids[0] = port_frame;
            depth++;
        }
    }
    uint32_t stack;
    kp_cpu_state state;
    int named_leaf;
    if (!n->segments && kp_stacks_count(n->stacks) >= OBSERVED_STACKS_MAX && forget_stacks(n) != 0)
        return n->failed = 1;
    if (kp_stacks_intern(n->stacks, n->ids, depth, &stack) != KP_OK ||
        state_of(n, stack, depth, kp_states_thread_class(kind, thread), &state, &named_leaf) != 0)
        return n->failed = 1;
    long proc = -1;
    kp_pid_numbers pid = {0, 0};
    unsigned char ok = 0;
    if (has_c_p && kp_current_process_read(n->o.os_pid, &n->o.layout, &c_p, 1, &pid, &ok) > 0 &&
        ok) {
        proc = proc_of(n, pid);
    } else if (owned) {
        pid = owner;
        proc = proc_of(n, pid);
        n->stats.port_owned += proc >= 0;
    }
    n->stats.attributed += proc >= 0;
    if (n->segments && (count(n, tally_key(stack, proc, state, kind)) != 0 ||
                        queue(n, s, stack, proc, state, kind) != 0))
        return n->failed = 1;
    n->stats.by_state[kind][state]++;
    n->stats.named_leaf += (uint64_t)named_leaf;
    if (n->o.observer) {
        kp_native_sample seen = {n->frames, n->ids, depth,      kind,      state,
                                 proc >= 0, pid,    s->time_ns, s->period, n};
        n->o.observer->fn(n->o.observer->ctx, &seen);
    }
    n->stats.samples++;
    n->stats.in_kernel += s->in_kernel != 0;
    return 0;
}

/* New threads, new JIT code and new libraries; the address cache starts
 * again, as code may now live where other code was. */
static void rescan(kp_native *n)
{
    n->stats.threads = kp_perf_events_rescan(n->events);
    int added = kp_jit_code_refresh(n->code);
    if (kp_symbols_refresh(n->symbols) > 0 || added > 0)
        kp_u64_map_clear(&n->frame_at);
}

static void *sampler_thread(void *arg)
{
    kp_native *n = arg;
    uint64_t last_scan = kp_now_us();
    while (!atomic_load(&n->stop) && !n->failed) {
        kp_perf_events_wait(n->events, DRAIN_MS);
        /* every sample taken before now is in its ring by now */
        uint64_t drain_start = (uint64_t)kp_now_ns();
        kp_perf_events_drain(n->events, on_sample, n, &n->stats.lost);
        write_pending(n, drain_start);
        if (kp_now_us() - last_scan > RESCAN_US) {
            rescan(n);
            last_scan = kp_now_us();
        }
    }
    kp_perf_events_drain(n->events, on_sample, n, &n->stats.lost);
    write_pending(n, UINT64_MAX);
    return NULL;
}

static int setup_frames(kp_native *n)
{
    for (int k = 0; k <= KP_THREAD_OTHER; k++)
        if (intern_text(n, kp_thread_kind_name((kp_thread_kind)k), "thread", &n->kind_frames[k]) !=
            0)
            return -1;
    for (int k = 0; k < KP_CPU_STATE_COUNT; k++)
        if (intern_text(n, kp_cpu_state_name((kp_cpu_state)k), "state", &n->state_frames[k]) != 0)
            return -1;
    return intern_text(n, "[kernel]", "kernel", &n->kernel_frame) != 0 ||
                   intern_text(n, "[vm]erts_port_task_execute", "native", &n->port_task_frame) !=
                       0 ||
                   intern_text(n, "[unmapped]", "native", &n->unmapped_frame) != 0
               ? -1
               : 0;
}

/* Was the map at `path` last written before the node started (`ticks`
 * after boot, as /proc/PID/stat says)? Then it
 * is another's that had the same pid (in a container, every node is pid 1
 * of its namespace): the JIT writes its map from the node's boot on. */
static int stale_map(const char *path, unsigned long long ticks)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return 0; /* no map: kp_perf_map_refresh says so */
    long hz = sysconf(_SC_CLK_TCK);
    struct timespec real, boot;
    if (!ticks || hz <= 0 || clock_gettime(CLOCK_REALTIME, &real) != 0 ||
        clock_gettime(CLOCK_BOOTTIME, &boot) != 0)
        return 0;
    /* the node's start in wall-clock ns: the boot's, from the two clocks
     * now, plus its start in ticks since boot (10 ms each, hence the
     * slack of two) */
    int64_t booted =
        ((int64_t)real.tv_sec - boot.tv_sec) * 1000000000 + (real.tv_nsec - boot.tv_nsec);
    int64_t tick = 1000000000 / hz;
    int64_t started = booted + (int64_t)ticks * tick;
    int64_t written = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    return written + 2 * tick < started;
}

kp_native *kp_native_start(const kp_native_options *o, char *err, size_t err_len)
{
    kp_native *n = kp_calloc(1, sizeof *n);
    if (!n) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    n->o = *o;
    pthread_mutex_init(&n->learn.lock, NULL);
    pthread_mutex_init(&n->ports_lock, NULL);
    atomic_store(&n->learning, o->layout.kind == KP_PID_LAYOUT_NONE);
    n->frames = kp_frames_create(o->frame_flags);
    n->stacks = kp_stacks_create();
    n->states = kp_states_create();
    if (!n->frames || !n->stacks || !n->states || setup_frames(n) != 0) {
        snprintf(err, err_len, "out of memory");
        kp_native_free(n);
        return NULL;
    }
    n->symbols = kp_symbols_open(o->os_pid, err, err_len);
    if (!n->symbols) {
        kp_native_free(n);
        return NULL;
    }
    /* the perf map as the node's own mount namespace names it; one left
     * by an earlier process with the node's pid (an earlier node in its
     * container) is not the node's */
    char map_path[64];
    snprintf(map_path, sizeof map_path, "/proc/%d/root/tmp/perf-%d.map", o->os_pid, o->own_pid);
    n->code = kp_jit_code_open(o->os_pid, map_path, stale_map(map_path, o->start_ticks), n->symbols,
                               err, err_len);
    if (!n->code) {
        kp_native_free(n);
        return NULL;
    }
    /* without an unwinder, samples in C code keep their leaf only */
    char unwind_err[256];
    n->unwind =
        kp_unwind_create(kp_symbols_dwfl(n->symbols), o->os_pid, unwind_err, sizeof unwind_err);
    n->events = kp_perf_events_open(o->os_pid, o->rate_hz, &n->stats.with_kernel, err, err_len);
    if (!n->events) {
        kp_native_free(n);
        return NULL;
    }
    n->stats.threads = kp_perf_events_rescan(n->events);
    /* the kernel's symbols, once, where its frames are recorded */
    const char *note = kp_perf_events_kernel_note(n->events);
    if (note)
        snprintf(n->kernel_note, sizeof n->kernel_note, "%s", note);
    else if (kp_perf_events_kernel_chain(n->events) &&
             !(n->kernel = kp_kernel_symbols_load(KP_KALLSYMS_PATH, n->kernel_note,
                                                  sizeof n->kernel_note)) &&
             !n->kernel_note[0])
        snprintf(n->kernel_note, sizeof n->kernel_note, "cannot read %s", KP_KALLSYMS_PATH);
    if (o->segments &&
        (kp_perf_writer_create("beam.smp", "cpu-clock", n->frames, n->stacks, &n->perf) != KP_OK ||
         kp_segment_open(o->segments, &n->segments) != KP_OK)) {
        snprintf(err, err_len, "cannot open the cpu segments in %s: %s", o->segments->dir,
                 strerror(errno));
        kp_native_free(n);
        return NULL;
    }
    if (pthread_create(&n->thread, NULL, sampler_thread, n) != 0) {
        snprintf(err, err_len, "cannot start the sampling thread: %s", strerror(errno));
        kp_native_free(n);
        return NULL;
    }
    n->started = 1;
    return n;
}

void kp_native_learn_progress(kp_native *n, unsigned *spin_samples, unsigned *bif_samples)
{
    pthread_mutex_lock(&n->learn.lock);
    *spin_samples = n->learn.spin_samples;
    *bif_samples = n->learn.light_bif_samples;
    pthread_mutex_unlock(&n->learn.lock);
}

int kp_native_learn(kp_native *n, const kp_pid_numbers *spinners, size_t n_spinners,
                    unsigned table_bits, char *err, size_t err_len)
{
    learning *l = &n->learn;
    pthread_mutex_lock(&l->lock);
    /* the words the spinners' registers pointed to: each read in several
     * of their samples (a stray word, if ever, in one or two) */
    uint64_t terms[LEARN_TERMS];
    size_t read = 0;
    for (size_t i = 0; i < LEARN_TERMS && l->term_samples[i]; i++)
        if (l->term_samples[i] >= 3 && l->term_samples[i] * 20u >= l->spin_samples)
            terms[read++] = l->terms[i];
    uint32_t spin_samples = l->spin_samples;
    int slot = -1;
    uint32_t best = 0;
    for (size_t i = 0; i < LEARN_SLOTS; i++)
        if (l->slot_votes[i] > best) {
            best = l->slot_votes[i];
            slot = (int)(8 * i);
        }
    /* a slot that held the caller in nearly every such sample, or none */
    if (best < 10 || best * 10u < l->light_bif_samples * 9u)
        slot = -1;
    pthread_mutex_unlock(&l->lock);
    if (spin_samples < KP_NATIVE_LEARN_MIN_SPIN) {
        snprintf(err, err_len,
                 "only %u native samples of kprof's calibration processes: the node's "
                 "schedulers did not run them (is it overloaded?)",
                 spin_samples);
        return -1;
    }
    kp_pid_layout layout;
    int fits = kp_pid_layout_learn(terms, read, spinners, n_spinners, table_bits, &layout);
    if (fits != 1) {
        snprintf(err, err_len,
                 "cannot tell how this node's release lays out its pids (%d of the layouts "
                 "kprof knows fit what its calibration read)",
                 fits);
        return -1;
    }
    n->o.layout = layout;
    n->o.light_bif_slot = slot;
    atomic_store(&n->learning, 0);
    return 0;
}

int kp_native_os_pid(const kp_native *n)
{
    return n->o.os_pid;
}

const char *kp_native_kernel_note(const kp_native *n)
{
    return n->kernel ? NULL : n->kernel_note;
}

const char *kp_native_describe(const kp_native *n)
{
    return kp_jit_code_describe(n->code);
}

void kp_native_learned(const kp_native *n, kp_pid_layout *layout, int *light_bif_slot)
{
    *layout = n->o.layout;
    *light_bif_slot = n->o.light_bif_slot;
}

void kp_native_stop(kp_native *n, kp_native_stats *stats)
{
    if (n->started) {
        atomic_store(&n->stop, 1);
        pthread_join(n->thread, NULL);
        n->started = 0;
        kp_perf_events_close(n->events);
        n->events = NULL;
    }
    if (n->segments) {
        kp_status st = kp_segment_close(n->segments, &n->stats.segments);
        if (st != KP_OK && st != KP_ERR_EMPTY && !n->stats.write_error)
            n->stats.write_error = errno ? errno : EIO;
        n->segments = NULL;
    }
    if (stats)
        *stats = n->stats;
}

void kp_native_each_process(kp_native *n, void (*fn)(void *ctx, kp_pid_numbers pid), void *ctx)
{
    for (size_t i = 0; i < n->n_procs; i++)
        fn(ctx, n->procs[i].pid);
}

int kp_native_label(kp_native *n, kp_pid_numbers pid, int registered, const char *text, size_t len)
{
    uint32_t at;
    if (!kp_u64_map_get(&n->proc_index, (uint64_t)pid.num << 32 | pid.serial, &at))
        return 0;
    return kp_frames_intern_label(n->frames, registered, text, len, &n->procs[at].label_frame) ==
                   KP_OK
               ? 0
               : -1;
}

typedef struct {
    const char *file;
    char *out;
    size_t cap;
    int found;
} build_id_query;

static void match_file(void *ctx, const char *file, const char *build_id, const char *path)
{
    (void)path;
    build_id_query *q = ctx;
    if (!q->found && strcmp(file, q->file) == 0) {
        snprintf(q->out, q->cap, "%s", build_id);
        q->found = 1;
    }
}

int kp_native_build_id(kp_native *n, const char *file, char *out, size_t cap)
{
    build_id_query q = {file, out, cap, 0};
    kp_symbols_each_file(n->symbols, match_file, &q);
    return q.found;
}

static void write_file_line(void *ctx, const char *file, const char *build_id, const char *path)
{
    fprintf(ctx, "%s\t%s\t%s\n", file, build_id, path);
}

/* DIR/KP_NATIVE_FILES_NAME: which build of each file the samples named
 * (cpu/debug_names.h). Returns 0, or -1 with errno. */
static int write_files(kp_native *n, const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, KP_NATIVE_FILES_NAME);
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f, "# kprof: the files of the node's native code (name, build id, path): "
               "kprof report names their unnamed functions (FILE@0xSTART) from debug "
               "files found by build id\n");
    kp_symbols_each_file(n->symbols, write_file_line, f);
    return fclose(f) == 0 ? 0 : -1;
}

int kp_native_write(kp_native *n, const char *dir, const char *caption, char *err, size_t err_len)
{
    if (!n->n_tallies)
        return 0;
    if (write_files(n, dir) != 0) {
        snprintf(err, err_len, "cannot write %s/%s: %s", dir, KP_NATIVE_FILES_NAME,
                 strerror(errno));
        return -1;
    }
    kp_folded *f = kp_folded_create();
    kp_status st = f ? KP_OK : KP_ERR_NOMEM;
    for (size_t i = 0; i < n->n_tallies && st == KP_OK; i++) {
        uint32_t stack;
        uint64_t key = n->tallies[i].key;
        st = rooted_stack(n, tally_stack(key), tally_proc(key), tally_state(key), tally_kind(key),
                          &stack);
        if (st == KP_OK)
            st = kp_folded_add_stack(f, n->frames, n->stacks, stack, "beam.smp",
                                     n->tallies[i].samples);
    }
    kp_flame_options flame = {KP_CPU_WEIGHT_TITLE, caption, KP_CPU_WEIGHT_UNIT, 0};
    int rc = st == KP_OK ? kp_flame_files_save(f, dir, "cpu", &flame, err, err_len) : -1;
    if (st != KP_OK)
        snprintf(err, err_len, "cannot write %s/cpu.folded: %s", dir, kp_status_reason(st, 0));
    kp_folded_free(f);
    return rc == 0 ? 1 : -1;
}

void kp_native_free(kp_native *n)
{
    if (!n)
        return;
    kp_native_stop(n, NULL);
    kp_perf_events_close(n->events);
    kp_unwind_free(n->unwind);
    kp_symbols_close(n->symbols);
    kp_kernel_symbols_free(n->kernel);
    kp_jit_code_free(n->code);
    kp_frames_free(n->frames);
    kp_stacks_free(n->stacks);
    kp_perf_writer_free(n->perf);
    kp_buf_free(&n->text);
    kp_free(n->pending);
    kp_u64_map_free(&n->frame_at);
    kp_u64_map_free(&n->state_of);
    kp_states_free(n->states);
    kp_u64_map_free(&n->proc_index);
    kp_u64_map_free(&n->tally_index);
    pthread_mutex_destroy(&n->learn.lock);
    pthread_mutex_destroy(&n->ports_lock);
    kp_port_owner_free(n->ports);
    kp_free(n->procs);
    kp_free(n->tallies);
    kp_free(n);
}

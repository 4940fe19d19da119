/* Counting for kprof top's tables (top/view.h): functions by self and
 * total weight, processes by what they did, per window. */
#include <string.h>

#include "kp/alloc.h"
#include "top/view_internal.h"

kp_top *kp_top_create(unsigned cpu_rate)
{
    kp_top *t = kp_calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->cpu_rate = cpu_rate;
    t->window = 1;
    t->names = kp_strtab_create();
    if (!t->names) {
        kp_free(t);
        return NULL;
    }
    return t;
}

void kp_top_free(kp_top *t)
{
    if (!t)
        return;
    kp_strtab_free(t->names);
    kp_free(t->functions);
    kp_free(t->processes);
    kp_u64_map_free(&t->index);
    kp_free(t);
}

/* The function named `name`, added when new; NULL when out of memory. */
static top_function *function_of(kp_top *t, const kp_top_text *name)
{
    uint32_t id;
    int is_new;
    if (kp_strtab_intern(t->names, name->text, name->len, &id, &is_new) != KP_OK)
        return NULL;
    if (id >= t->functions_cap) {
        size_t cap = t->functions_cap ? t->functions_cap * 2 : 256;
        while (cap <= id)
            cap *= 2;
        top_function *f = kp_realloc_array(t->functions, cap, sizeof *f);
        if (!f)
            return NULL; /* the name stays interned, with no counts: harmless */
        memset(f + t->functions_cap, 0, (cap - t->functions_cap) * sizeof *f);
        t->functions = f;
        t->functions_cap = cap;
    }
    return &t->functions[id];
}

kp_status kp_top_add_stack(kp_top *t, const kp_top_text *frames, size_t depth, uint64_t weight)
{
    if (!weight || !depth)
        return KP_OK;
    /* intern first, count after: a failure leaves no half-counted sample */
    for (size_t i = 0; i < depth; i++)
        if (!function_of(t, &frames[i]))
            return KP_ERR_NOMEM;
    uint64_t sample = ++t->samples;
    for (size_t i = 0; i < depth; i++) {
        top_function *f = function_of(t, &frames[i]);
        if (f->last_sample != sample) { /* recursion: once per sample */
            f->last_sample = sample;
            f->open[TOTAL] += weight;
        }
    }
    function_of(t, &frames[depth - 1])->open[SELF] += weight;
    t->open_weight += weight;
    return KP_OK;
}

/* Process <0.num.serial>, added when new; NULL when out of memory. */
static top_process *process_of(kp_top *t, uint32_t num, uint32_t serial)
{
    uint64_t key = (uint64_t)num << 32 | serial;
    uint32_t at;
    if (kp_u64_map_get(&t->index, key, &at))
        return &t->processes[at];
    if (t->n_processes == t->processes_cap) {
        size_t cap = t->processes_cap ? t->processes_cap * 2 : 64;
        top_process *p = kp_realloc_array(t->processes, cap, sizeof *p);
        if (!p)
            return NULL;
        t->processes = p;
        t->processes_cap = cap;
    }
    if (kp_u64_map_put(&t->index, key, (uint32_t)t->n_processes) != 0)
        return NULL;
    top_process *p = &t->processes[t->n_processes++];
    memset(p, 0, sizeof *p);
    p->num = num;
    p->serial = serial;
    return p;
}

/* Copies `text` into a field of TOP_TEXT_MAX bytes, cut when longer (the
 * widest screen shows less). */
static void keep_text(char *field, const kp_top_text *text)
{
    size_t len = text->len < TOP_TEXT_MAX - 1 ? text->len : TOP_TEXT_MAX - 1;
    memcpy(field, text->text, len);
    field[len] = '\0';
}

kp_status kp_top_add_process(kp_top *t, const kp_top_process_sample *s)
{
    top_process *p = process_of(t, s->num, s->serial);
    if (!p)
        return KP_ERR_NOMEM;
    if (s->label.len)
        keep_text(p->label, &s->label);
    if (s->current.len)
        keep_text(p->current, &s->current);
    p->queue = s->queue;
    p->memory = s->memory;
    p->sampled = 1;
    p->open_reductions += s->reductions;
    p->seen_window = t->window;
    return KP_OK;
}

kp_status kp_top_add_cpu(kp_top *t, uint32_t num, uint32_t serial, uint64_t samples)
{
    top_process *p = process_of(t, num, serial);
    if (!p)
        return KP_ERR_NOMEM;
    p->open_cpu += samples;
    p->seen_window = t->window;
    return KP_OK;
}

size_t kp_top_unnamed(kp_top *t, uint32_t *nums, uint32_t *serials, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < t->n_processes && n < cap; i++) {
        top_process *p = &t->processes[i];
        if (p->in_shown && !p->label[0] && !p->asked) {
            p->asked = 1; /* once: a process gone by then stays unnamed */
            nums[n] = p->num;
            serials[n++] = p->serial;
        }
    }
    return n;
}

kp_status kp_top_name(kp_top *t, uint32_t num, uint32_t serial, const kp_top_text *label)
{
    uint32_t at;
    if (label->len && kp_u64_map_get(&t->index, (uint64_t)num << 32 | serial, &at))
        keep_text(t->processes[at].label, label);
    return KP_OK;
}

/* Drops the processes not seen for TOP_FORGET_WINDOWS windows, so that a
 * node that spawns many short-lived processes does not grow the table. */
static void forget_processes(kp_top *t)
{
    size_t kept = 0;
    for (size_t i = 0; i < t->n_processes; i++) {
        if (t->window - t->processes[i].seen_window < TOP_FORGET_WINDOWS)
            t->processes[kept++] = t->processes[i];
    }
    if (kept == t->n_processes)
        return;
    t->n_processes = kept;
    kp_u64_map_clear(&t->index);
    for (size_t i = 0; i < kept; i++) {
        const top_process *p = &t->processes[i];
        /* cannot fail: the map held more keys a moment ago */
        (void)kp_u64_map_put(&t->index, (uint64_t)p->num << 32 | p->serial, (uint32_t)i);
    }
}

void kp_top_close_window(kp_top *t, uint64_t us)
{
    size_t n = kp_strtab_count(t->names);
    for (size_t i = 0; i < n && i < t->functions_cap; i++) {
        top_function *f = &t->functions[i];
        for (int k = SELF; k <= TOTAL; k++) {
            f->shown[k] = f->open[k];
            f->all[k] += f->open[k];
            f->open[k] = 0;
        }
    }
    t->shown_weight = t->open_weight;
    t->all_weight += t->open_weight;
    t->open_weight = 0;
    for (size_t i = 0; i < t->n_processes; i++) {
        top_process *p = &t->processes[i];
        p->shown_reductions = p->open_reductions;
        p->all_reductions += p->open_reductions;
        p->open_reductions = 0;
        p->in_shown = p->seen_window == t->window;
        p->shown_cpu = p->open_cpu;
        p->all_cpu += p->open_cpu;
        p->open_cpu = 0;
    }
    for (int k = 0; k <= KP_THREAD_OTHER; k++)
        for (int s = 0; s < KP_CPU_STATE_COUNT; s++) {
            t->shown_states[k][s] = t->open_states[k][s];
            t->all_states[k][s] += t->open_states[k][s];
            t->open_states[k][s] = 0;
        }
    t->shown_us = us;
    t->all_us += us;
    t->window++;
    forget_processes(t);
}

void kp_top_add_state(kp_top *t, kp_thread_kind kind, kp_cpu_state state, uint64_t samples)
{
    if ((unsigned)kind <= KP_THREAD_OTHER && (unsigned)state < KP_CPU_STATE_COUNT)
        t->open_states[kind][state] += samples;
}

int kp_top_function_weights(const kp_top *t, const char *name, int cumulative, uint64_t *self,
                            uint64_t *total, uint64_t *all)
{
    size_t len = strlen(name);
    uint32_t id;
    *self = *total = 0;
    *all = cumulative ? t->all_weight : t->shown_weight;
    if (!kp_strtab_find(t->names, name, len, kp_strtab_hash(name, len), &id) ||
        id >= t->functions_cap)
        return 0;
    const top_function *f = &t->functions[id];
    *self = cumulative ? f->all[SELF] : f->shown[SELF];
    *total = cumulative ? f->all[TOTAL] : f->shown[TOTAL];
    return 1;
}

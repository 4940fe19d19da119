#include "report/live.h"

#include <pthread.h>

#include "kp/alloc.h"
#include "kp/buf.h"
#include "kp/folded.h"

struct kp_report_live {
    pthread_mutex_t mu;
    kp_report *report;
    kp_report_source *sources[KP_REPORT_KINDS];
    kp_buf text[KP_REPORT_KINDS]; /* one a kind: each kind is fed by one thread */
    uint64_t samples[KP_REPORT_KINDS];
    int failed;
};

kp_report_live *kp_report_live_create(void)
{
    kp_report_live *l = kp_calloc(1, sizeof *l);
    if (!l)
        return NULL;
    l->report = kp_report_create();
    for (int k = 0; k < KP_REPORT_KINDS && l->report; k++)
        if (!(l->sources[k] = kp_report_get_source(l->report, 0, (kp_report_kind)k))) {
            kp_report_free(l->report);
            l->report = NULL;
        }
    if (!l->report) {
        kp_free(l);
        return NULL;
    }
    pthread_mutex_init(&l->mu, NULL);
    return l;
}

void kp_report_live_free(kp_report_live *l)
{
    if (!l)
        return;
    kp_report_free(l->report);
    for (int k = 0; k < KP_REPORT_KINDS; k++)
        kp_buf_free(&l->text[k]);
    pthread_mutex_destroy(&l->mu);
    kp_free(l);
}

void kp_report_live_add(kp_report_live *l, kp_report_kind kind, const kp_frames *frames,
                        const kp_stacks *stacks, uint32_t stack, uint64_t time_ns, const int64_t *w)
{
    kp_buf *text = &l->text[kind];
    /* the text outside the lock: its frames and stacks are the caller's */
    kp_status st = kp_folded_stack_text(frames, stacks, stack, "beam.smp", text);
    pthread_mutex_lock(&l->mu);
    if (!l->failed && st == KP_OK)
        st = kp_report_add(l->report, l->sources[kind], time_ns, text->data, text->len, w);
    if (st == KP_OK)
        l->samples[kind]++;
    else if (st != KP_ERR_INVAL) /* a stack without a frame is no sample of a segment either */
        l->failed = 1;
    pthread_mutex_unlock(&l->mu);
}

void kp_report_live_add_cpu(void *live, const kp_frames *frames, const kp_stacks *stacks,
                            uint32_t stack, uint64_t time_us)
{
    static const int64_t one[1] = {1};
    kp_report_live_add(live, KP_REPORT_CPU, frames, stacks, stack, time_us * 1000, one);
}

int kp_report_live_write(kp_report_live *l, const char *dir, kp_report_read_stats *st,
                         const char *out, int quiet)
{
    pthread_mutex_lock(&l->mu);
    int failed = l->failed;
    pthread_mutex_unlock(&l->mu);
    if (failed)
        return -1;
    st->samples = l->samples[KP_REPORT_SAMPLES];
    st->cpu_samples = l->samples[KP_REPORT_CPU];
    const char *dirs[1] = {dir};
    return kp_report_write_page(l->report, dirs, st, 1, out, quiet);
}

/* Fuzz target: perf-script text (plain, gzip or zstd) through kp_source and
 * kp_perf_reader, aggregated into kp_folded and written out, checking what
 * perf_reader.h and folded.h promise. Built with libFuzzer (KPROF_FUZZ) or
 * with replay_main.c, which runs it over the seed corpus. */
#include "fuzz_common.h"

#include "kp/perf_reader.h"

static void check_sample(const kp_perf_sample *s, uint64_t line_no, uint64_t previous_end)
{
    FUZZ_CHECK(s->stack != NULL);
    /* the root frame is COMM, which /^(\S.+?)\s+/ makes 2 bytes at least */
    FUZZ_CHECK(s->stack_len >= 2);
    FUZZ_CHECK(memchr(s->stack, '\n', s->stack_len) == NULL);
    /* the header came after the previous sample was completed and before
     * the empty line that completes this one */
    FUZZ_CHECK(s->header_line > previous_end && s->header_line < line_no);
    FUZZ_CHECK(s->n_metrics == 0 || s->metrics != NULL);
    for (size_t i = 0; i < s->n_metrics; i++) {
        const kp_perf_metric *m = &s->metrics[i];
        FUZZ_CHECK(m->name != NULL && m->name_len > 0);
        FUZZ_CHECK(memchr(m->name, ':', m->name_len) == NULL);
        FUZZ_CHECK(memchr(m->name, '\n', m->name_len) == NULL);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_init();
    kp_source *src;
    FUZZ_CHECK(kp_source_open_memory(data, size, &src) == KP_OK);
    kp_perf_reader *reader = kp_perf_reader_create();
    kp_folded *by_samples = kp_folded_create();
    kp_folded *by_period = kp_folded_create();
    kp_folded *by_metric = kp_folded_create();
    FUZZ_CHECK(reader && by_samples && by_period && by_metric);

    const kp_perf_reader_stats *stats = kp_perf_reader_stats_get(reader);
    uint64_t fed = 0, returned = 0, last_end = 0, period_total = 0;
    const char *line;
    size_t len;
    kp_status st;
    int stopped = 0;
    while ((st = kp_source_next_line(src, &line, &len)) == KP_OK) {
        FUZZ_CHECK(line != NULL);
        FUZZ_CHECK(len <= KP_SOURCE_MAX_LINE);
        FUZZ_CHECK(memchr(line, '\n', len) == NULL);
        fed++;
        const kp_perf_sample *s = (const kp_perf_sample *)&fed; /* must be overwritten */
        FUZZ_CHECK(kp_perf_reader_line(reader, line, len, &s) == KP_OK);
        FUZZ_CHECK(stats->lines == fed);
        if (s) {
            FUZZ_CHECK(s != (const kp_perf_sample *)&fed);
            check_sample(s, fed, last_end);
            /* only an empty line completes a sample */
            FUZZ_CHECK(len == 0);
            last_end = fed;
            returned++;
            FUZZ_CHECK(stats->samples == returned);
            FUZZ_CHECK(kp_folded_add(by_samples, s->stack, s->stack_len, 1) == KP_OK);
            if (s->period) {
                FUZZ_CHECK(kp_folded_add(by_period, s->stack, s->stack_len, s->period) == KP_OK);
                period_total =
                    s->period > UINT64_MAX - period_total ? UINT64_MAX : period_total + s->period;
            }
            /* as `kprof convert --weight NAME` does with the first metric */
            if (s->n_metrics && s->metrics[0].value > 0)
                FUZZ_CHECK(kp_folded_add(by_metric, s->stack, s->stack_len,
                                         (uint64_t)s->metrics[0].value) == KP_OK);
        }
        if (kp_source_bytes(src) > FUZZ_MAX_TEXT) {
            stopped = 1;
            break;
        }
    }
    if (!stopped) {
        /* the end, or an error only compressed or huge input can give */
        FUZZ_CHECK(st == KP_ERR_EMPTY || st == KP_ERR_LIMIT ||
                   (st == KP_ERR_COMPRESS && kp_source_compression(src) != KP_COMPRESS_NONE));
        if (st == KP_ERR_EMPTY && kp_source_compression(src) == KP_COMPRESS_NONE)
            FUZZ_CHECK(kp_source_bytes(src) == size);
    }

    /* counters agree with what was seen: every sample took a header line and
     * an empty line of its own, and no line is counted twice */
    FUZZ_CHECK(stats->lines == fed);
    FUZZ_CHECK(stats->samples == returned);
    FUZZ_CHECK(stats->samples + stats->malformed <= stats->lines);
    FUZZ_CHECK(2 * stats->samples + stats->malformed + stats->skipped_events <= stats->lines);
    FUZZ_CHECK((stats->malformed == 0) == (stats->first_malformed == 0));
    FUZZ_CHECK(stats->first_malformed <= stats->lines);

    FUZZ_CHECK(kp_folded_total(by_samples) == returned);
    FUZZ_CHECK(kp_folded_lines(by_samples) <= returned);
    FUZZ_CHECK(kp_folded_total(by_period) == period_total);
    FUZZ_CHECK(kp_folded_lines(by_period) <= kp_folded_lines(by_samples));
    fuzz_write_and_check(by_samples, 0);
    fuzz_write_and_check(by_period, 0);
    fuzz_write_and_check(by_metric, 0);

    kp_folded_free(by_metric);
    kp_folded_free(by_period);
    kp_folded_free(by_samples);
    kp_perf_reader_free(reader);
    kp_source_close(src);
    return 0;
}

/* `kprof convert INPUT... -o OUTPUT`: perf-script to folded stacks (the same
 * lines stackcollapse-perf.pl prints), folded files merged, optionally
 * weighted by a metric field, written as folded text or drawn as a flame
 * graph. Formats come from file extensions. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "common/cli.h"
#include "kp/flame_svg.h"
#include "kp/folded.h"
#include "kp/perf_reader.h"
#include "kp/pprof.h"
#include "kp/sink.h"
#include "kp/source.h"

static const char convert_usage[] =
    "Usage: kprof convert [OPTIONS] INPUT... -o OUTPUT\n"
    "\n"
    "Converts perf-script text to folded stacks and merges folded files. Formats\n"
    "follow the file names: INPUT ends in .perf or .folded, optionally followed\n"
    "by .gz or .zst (compression is recognised from the content, too); OUTPUT\n"
    "ends in .folded, .folded.gz or .folded.zst, or is - for standard output,\n"
    "or ends in .svg for a flame graph to open in a web browser, or in .pb.gz\n"
    "for a pprof profile (go tool pprof, Pyroscope, Parca, Grafana). The folded\n"
    "lines are those stackcollapse-perf.pl prints for the same input, merged\n"
    "and sorted, ready for flamegraph.pl or speedscope.\n"
    "\n"
    "Options:\n"
    "  -o, --output FILE     where to write (required)\n"
    "  -w, --weight WHAT     what each perf sample adds to its stack [period]:\n"
    "                          period        the PERIOD column, as stackcollapse does\n"
    "                          samples       1 per sample\n"
    "                          NAME          the value of field metric_NAME\n"
    "                          NAME:delta    its growth since the previous sample\n"
    "                          NAME:release  its decrease since the previous sample\n"
    "                        samples without the field, or with a zero or negative\n"
    "                        weight, add nothing\n"
    "  -f, --from FORMAT     read inputs as perf or folded whatever their names\n"
    "                        (needed for standard input, -)\n"
    "  -q, --quiet           print errors only\n"
    "  -h, --help            show this help and exit\n"
    "\n"
    "Examples:\n"
    "  kprof convert samples-000001.perf.zst -o cpu.folded\n"
    "  kprof convert kprof-app/*.perf.gz -o memory.folded --weight memory\n"
    "  kprof convert a.folded b.folded -o merged.folded\n"
    "  kprof convert kprof-app/*.perf.gz -o cpu.svg\n"
    "  kprof convert kprof-app/*.perf.gz -o profile.pb.gz && go tool pprof -top profile.pb.gz\n"
    "  flamegraph.pl --hash cpu.folded > cpu.svg\n"
    "\n"
    "Exit status: 0 success, 1 I/O failure, 2 usage error, 3 unusable input.\n";

typedef enum { FORMAT_UNKNOWN, FORMAT_PERF, FORMAT_FOLDED } input_format;
typedef enum {
    WEIGHT_PERIOD,
    WEIGHT_SAMPLES,
    WEIGHT_VALUE,
    WEIGHT_DELTA,
    WEIGHT_RELEASE
} weight_kind;

typedef struct {
    weight_kind kind;
    const char *metric; /* for VALUE, DELTA and RELEASE */
    size_t metric_len;
} weight_spec;

typedef struct {
    uint64_t samples;      /* perf samples read */
    uint64_t folded_lines; /* folded records read */
    uint64_t weighted;     /* samples and records that added a weight */
} totals;

/* "1 line", "2 lines" */
static const char *plural(uint64_t n)
{
    return n == 1 ? "" : "s";
}

static input_format format_of(const char *path)
{
    static const char *const compressions[] = {"", ".gz", ".zst"};
    char suffix[32];
    for (size_t i = 0; i < 3; i++) {
        snprintf(suffix, sizeof suffix, ".perf%s", compressions[i]);
        if (kp_ends_with(path, suffix))
            return FORMAT_PERF;
        snprintf(suffix, sizeof suffix, ".folded%s", compressions[i]);
        if (kp_ends_with(path, suffix))
            return FORMAT_FOLDED;
    }
    return FORMAT_UNKNOWN;
}

static int parse_weight(const char *arg, weight_spec *w)
{
    memset(w, 0, sizeof *w);
    if (strcmp(arg, "period") == 0) {
        w->kind = WEIGHT_PERIOD;
        return 1;
    }
    if (strcmp(arg, "samples") == 0) {
        w->kind = WEIGHT_SAMPLES;
        return 1;
    }
    const char *colon = strchr(arg, ':');
    size_t len = colon ? (size_t)(colon - arg) : strlen(arg);
    if (len == 0)
        return 0;
    for (size_t i = 0; i < len; i++) {
        char c = arg[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_'))
            return 0;
    }
    w->metric = arg;
    w->metric_len = len;
    if (!colon || strcmp(colon, ":value") == 0)
        w->kind = WEIGHT_VALUE;
    else if (strcmp(colon, ":delta") == 0)
        w->kind = WEIGHT_DELTA;
    else if (strcmp(colon, ":release") == 0)
        w->kind = WEIGHT_RELEASE;
    else
        return 0;
    return 1;
}

/* The weight a sample adds; 0 = nothing. */
static uint64_t sample_weight(const kp_perf_sample *s, const weight_spec *w)
{
    if (w->kind == WEIGHT_PERIOD)
        return s->period;
    if (w->kind == WEIGHT_SAMPLES)
        return 1;
    for (size_t i = 0; i < s->n_metrics; i++) {
        const kp_perf_metric *m = &s->metrics[i];
        if (m->name_len != w->metric_len || memcmp(m->name, w->metric, w->metric_len) != 0)
            continue;
        if (w->kind == WEIGHT_RELEASE) /* -delta overflows for INT64_MIN */
            return m->delta < 0 ? 0 - (uint64_t)m->delta : 0;
        int64_t v = w->kind == WEIGHT_VALUE ? m->value : m->delta;
        return v > 0 ? (uint64_t)v : 0;
    }
    return 0;
}

/* Reports a failed read of `path`; returns the exit code. */
static int read_failure(const char *path, kp_status st, uint64_t line)
{
    switch (st) {
    case KP_ERR_IO: kp_error("cannot read %s: %s", path, strerror(errno)); return KP_EXIT_FAILURE;
    case KP_ERR_COMPRESS:
        kp_error("%s: corrupt or truncated compressed data; check the file with 'zstd -t' or "
                 "'gzip -t'",
                 path);
        return KP_EXIT_DATA;
    case KP_ERR_LIMIT:
        kp_error("%s: line %llu is longer than 16 MiB; is this a text profile?", path,
                 (unsigned long long)line + 1);
        return KP_EXIT_DATA;
    default: kp_error("%s: %s", path, kp_strerror(st)); return KP_EXIT_FAILURE;
    }
}

static int convert_perf(const char *path, kp_source *src, kp_folded *out, const weight_spec *w,
                        int quiet, totals *t)
{
    kp_perf_reader *r = kp_perf_reader_create();
    if (!r) {
        kp_error("out of memory");
        return KP_EXIT_FAILURE;
    }
    const char *line;
    size_t len;
    kp_status st;
    int rc = KP_EXIT_OK;
    while ((st = kp_source_next_line(src, &line, &len)) == KP_OK) {
        const kp_perf_sample *s;
        st = kp_perf_reader_line(r, line, len, &s);
        if (st == KP_OK && s) {
            uint64_t weight = sample_weight(s, w);
            if (weight) {
                st = kp_folded_add(out, s->stack, s->stack_len, weight);
                t->weighted++;
            }
        }
        if (st != KP_OK)
            break;
    }
    const kp_perf_reader_stats *stats = kp_perf_reader_stats_get(r);
    if (st != KP_ERR_EMPTY) {
        rc = read_failure(path, st, stats->lines);
    } else if (stats->samples == 0 && stats->malformed > 0) {
        kp_error("%s: no sample found (%llu unrecognised lines, the first at line %llu); is "
                 "this perf-script text?",
                 path, (unsigned long long)stats->malformed,
                 (unsigned long long)stats->first_malformed);
        rc = KP_EXIT_DATA;
    } else if (stats->malformed > 0 && !quiet) {
        kp_warn("%s: skipped %llu unrecognised line%s (the first at line %llu)", path,
                (unsigned long long)stats->malformed, plural(stats->malformed),
                (unsigned long long)stats->first_malformed);
    }
    t->samples += stats->samples;
    kp_perf_reader_free(r);
    return rc;
}

static int convert_folded(const char *path, kp_source *src, kp_folded *out, int quiet, totals *t)
{
    kp_folded_reader_stats stats = {0};
    const char *line;
    size_t len;
    kp_status st;
    while ((st = kp_source_next_line(src, &line, &len)) == KP_OK) {
        const char *stack;
        size_t stack_len;
        uint64_t count;
        if (kp_folded_parse_line(line, len, &stack, &stack_len, &count, &stats) == 1 && count) {
            st = kp_folded_add(out, stack, stack_len, count);
            if (st != KP_OK)
                break;
            t->weighted++;
        }
    }
    t->folded_lines += stats.records;
    if (st != KP_ERR_EMPTY)
        return read_failure(path, st, stats.lines);
    if (stats.records == 0 && stats.malformed > 0) {
        kp_error("%s: no folded stack found (%llu malformed lines, the first at line %llu); "
                 "expected 'frame;frame COUNT'",
                 path, (unsigned long long)stats.malformed,
                 (unsigned long long)stats.first_malformed);
        return KP_EXIT_DATA;
    }
    if (stats.malformed > 0 && !quiet)
        kp_warn("%s: skipped %llu malformed line%s (the first at line %llu)", path,
                (unsigned long long)stats.malformed, plural(stats.malformed),
                (unsigned long long)stats.first_malformed);
    return KP_EXIT_OK;
}

/* What the weights of a flame graph count: PERIOD is 1 a sample in kprof's
 * files, and CPU time or events in Linux perf's. */
static void count_name(const weight_spec *w, const kp_folded *folded, const totals *t, char *out,
                       size_t cap)
{
    static const char *const kinds[] = {"samples", "samples", "", " growth", " release"};
    if (w->kind == WEIGHT_PERIOD && t->folded_lines == 0 && kp_folded_total(folded) != t->samples)
        snprintf(out, cap, "period");
    else if (w->kind >= WEIGHT_VALUE)
        snprintf(out, cap, "%.*s%s", (int)w->metric_len, w->metric, kinds[w->kind]);
    else
        snprintf(out, cap, "%s", kinds[w->kind]);
}

/* Draws `folded` to `sink`, headed with the first input's name and, below,
 * what it was drawn `from` (and the weight, if not samples). */
static kp_status write_flame_graph(kp_sink *sink, const kp_folded *folded, const weight_spec *w,
                                   const totals *t, char **inputs, int n_inputs, const char *from)
{
    char title[600], counts[128], caption[300];
    const char *base = strrchr(inputs[0], '/');
    snprintf(title, sizeof title, "%.500s%s", base ? base + 1 : inputs[0],
             n_inputs > 1 ? " and more" : "");
    count_name(w, folded, t, counts, sizeof counts);
    if (w->kind >= WEIGHT_VALUE)
        snprintf(caption, sizeof caption, "weighted by %s, from %s", counts, from);
    else
        snprintf(caption, sizeof caption, "from %s", from);
    kp_flame_options fo = {title, caption, counts, 0};
    return kp_flame_svg_write(folded, &fo, sink);
}

static kp_status add_sample(void *ctx, const char *stack, size_t len, uint64_t weight)
{
    int64_t v = weight > INT64_MAX ? INT64_MAX : (int64_t)weight;
    return kp_pprof_add(ctx, stack, len, &v);
}

/* `folded` as a pprof profile: one sample per stack, its value what the
 * weights count (the flame graph's name for it, e.g. samples or
 * memory_growth, in units of "count"). */
static kp_status write_pprof(kp_sink *sink, const kp_folded *folded, const weight_spec *w,
                             const totals *t)
{
    char counts[128];
    count_name(w, folded, t, counts, sizeof counts);
    for (char *c = counts; *c; c++)
        if (*c == ' ')
            *c = '_';
    kp_pprof_type type = {counts, "count"};
    kp_pprof *p = kp_pprof_create(&type, 1);
    if (!p)
        return KP_ERR_NOMEM;
    kp_buf out = KP_BUF_INIT;
    kp_status st = kp_folded_each_by_frame(folded, add_sample, p);
    if (st == KP_OK)
        st = kp_pprof_encode(p, 0, 0, &out);
    if (st == KP_OK)
        st = kp_sink_write(sink, out.data, out.len);
    kp_buf_free(&out);
    kp_pprof_free(p);
    return st;
}

static int write_output(const char *path, const kp_folded *folded, const weight_spec *w,
                        const totals *t, char **inputs, int n_inputs, const char *from)
{
    int to_stdout = strcmp(path, "-") == 0;
    kp_compression c = kp_ends_with(path, ".gz")    ? KP_COMPRESS_GZIP
                       : kp_ends_with(path, ".zst") ? KP_COMPRESS_ZSTD
                                                    : KP_COMPRESS_NONE;
    kp_sink *sink;
    kp_status st = to_stdout ? kp_sink_open_fd(STDOUT_FILENO, KP_COMPRESS_NONE, 0, &sink)
                             : kp_sink_open_file(path, c, 0, &sink);
    if (st == KP_OK) {
        st = kp_ends_with(path, ".svg")
                 ? write_flame_graph(sink, folded, w, t, inputs, n_inputs, from)
             : kp_ends_with(path, ".pb.gz") ? write_pprof(sink, folded, w, t)
                                            : kp_folded_write(folded, sink);
        if (st == KP_OK) {
            st = kp_sink_commit(sink);
        } else {
            int e = errno;
            kp_sink_abort(sink);
            errno = e;
        }
    }
    if (st != KP_OK) {
        kp_error("cannot write %s: %s", to_stdout ? "standard output" : path,
                 kp_status_reason(st, errno));
        return KP_EXIT_FAILURE;
    }
    return KP_EXIT_OK;
}

/* What the command line asks for; the inputs are the operands left after it. */
typedef struct {
    const char *output;
    weight_spec weight;
    int weight_given, quiet;
    input_format forced; /* by --from; FORMAT_UNKNOWN: from each file's name */
} convert_options;

/* Takes -o, -w, -f and -q; returns -1 for another option, else KP_EXIT_OK or
 * KP_EXIT_USAGE for a bad value (reported). */
static int parse_option(int opt, const char *arg, convert_options *o)
{
    switch (opt) {
    case 'o': o->output = arg; return KP_EXIT_OK;
    case 'w':
        if (!parse_weight(arg, &o->weight))
            return kp_bad_value("--weight", arg,
                                "use period, samples, NAME, NAME:delta or NAME:release (NAME of a "
                                "metric_NAME field)");
        o->weight_given = 1;
        return KP_EXIT_OK;
    case 'f':
        if (strcmp(arg, "perf") == 0)
            o->forced = FORMAT_PERF;
        else if (strcmp(arg, "folded") == 0)
            o->forced = FORMAT_FOLDED;
        else
            return kp_bad_value("--from", arg, "use perf or folded");
        return KP_EXIT_OK;
    case 'q': o->quiet = 1; return KP_EXIT_OK;
    default: return -1;
    }
}

/* The checks that need every option and operand, made before any input is
 * read so that a usage error comes first and at once; returns the exit code. */
static int check_options(const convert_options *o, char **inputs, int n_inputs)
{
    if (n_inputs == 0) {
        kp_error("no input file; usage: kprof convert INPUT... -o OUTPUT");
        return KP_EXIT_USAGE;
    }
    if (!o->output) {
        kp_error("no output file; add -o OUTPUT.folded (or -o - for standard output)");
        return KP_EXIT_USAGE;
    }
    if (strcmp(o->output, "-") != 0 && format_of(o->output) != FORMAT_FOLDED &&
        !kp_ends_with(o->output, ".svg") && !kp_ends_with(o->output, ".pb.gz")) {
        kp_error("cannot write '%s': the output name must end in .folded, .folded.gz, "
                 ".folded.zst, .svg or .pb.gz, or be - for standard output",
                 o->output);
        return KP_EXIT_USAGE;
    }
    for (int i = 0; i < n_inputs; i++) {
        input_format f = o->forced ? o->forced : format_of(inputs[i]);
        if (f == FORMAT_UNKNOWN) {
            kp_error("cannot tell the format of '%s': name it .perf or .folded (with .gz or "
                     ".zst if compressed), or pass --from perf|folded",
                     inputs[i]);
            return KP_EXIT_USAGE;
        }
        if (f == FORMAT_FOLDED && o->weight_given && o->weight.kind != WEIGHT_PERIOD) {
            kp_error("--weight applies to perf-script input only, and '%s' is folded", inputs[i]);
            return KP_EXIT_USAGE;
        }
    }
    return KP_EXIT_OK;
}

/* Adds every input to `folded`, stopping at the first that fails; returns
 * that failure's exit code, or KP_EXIT_OK. */
static int read_inputs(const convert_options *o, char **inputs, int n_inputs, kp_folded *folded,
                       totals *t)
{
    int rc = KP_EXIT_OK;
    for (int i = 0; i < n_inputs && rc == KP_EXIT_OK; i++) {
        const char *path = inputs[i];
        kp_source *src;
        kp_status st = kp_source_open(path, &src);
        if (st != KP_OK) {
            kp_error("cannot open %s: %s", path, kp_status_reason(st, errno));
            return KP_EXIT_FAILURE;
        }
        input_format f = o->forced ? o->forced : format_of(path);
        rc = f == FORMAT_PERF ? convert_perf(path, src, folded, &o->weight, o->quiet, t)
                              : convert_folded(path, src, folded, o->quiet, t);
        kp_source_close(src);
    }
    return rc;
}

/* Inputs that read fine but added no weight would give an empty output,
 * which looks like success; says why instead, and returns KP_EXIT_DATA. */
static int nothing_weighted(const weight_spec *w, char **inputs, int n_inputs)
{
    if (w->kind >= WEIGHT_VALUE)
        kp_error("no sample carries a positive metric_%.*s %s; check the name with "
                 "'grep -m1 metric_ INPUT'",
                 (int)w->metric_len, w->metric, w->kind == WEIGHT_VALUE ? "value" : "change");
    else if (n_inputs == 1)
        kp_error("%s: holds no samples", inputs[0]);
    else
        kp_error("none of the %d inputs holds a sample", n_inputs);
    return KP_EXIT_DATA;
}

/* "3 samples and 2 folded lines in 2 files": one wording for the closing
 * message and the flame graph's caption. */
static void describe_inputs(const totals *t, int n_inputs, char *out, size_t cap)
{
    if (t->samples && t->folded_lines)
        snprintf(out, cap, "%llu sample%s and %llu folded line%s", (unsigned long long)t->samples,
                 plural(t->samples), (unsigned long long)t->folded_lines, plural(t->folded_lines));
    else if (t->samples)
        snprintf(out, cap, "%llu sample%s", (unsigned long long)t->samples, plural(t->samples));
    else
        snprintf(out, cap, "%llu folded line%s", (unsigned long long)t->folded_lines,
                 plural(t->folded_lines));
    size_t used = strlen(out);
    snprintf(out + used, cap - used, " in %d file%s", n_inputs, plural(n_inputs));
}

/* Reads the checked inputs and writes the output; returns the exit code. */
static int convert(const convert_options *o, char **inputs, int n_inputs)
{
    kp_folded *folded = kp_folded_create();
    if (!folded) {
        kp_error("out of memory");
        return KP_EXIT_FAILURE;
    }
    totals t = {0, 0, 0};
    int rc = read_inputs(o, inputs, n_inputs, folded, &t);
    if (rc == KP_EXIT_OK && t.weighted == 0)
        rc = nothing_weighted(&o->weight, inputs, n_inputs);
    char from[160];
    describe_inputs(&t, n_inputs, from, sizeof from);
    if (rc == KP_EXIT_OK)
        rc = write_output(o->output, folded, &o->weight, &t, inputs, n_inputs, from);
    if (rc == KP_EXIT_OK && !o->quiet)
        fprintf(stderr, "kprof: wrote %s: %zu stack%s from %s\n",
                strcmp(o->output, "-") == 0 ? "standard output" : o->output,
                kp_folded_lines(folded), plural(kp_folded_lines(folded)), from);
    kp_folded_free(folded);
    return rc;
}

int kp_cmd_convert(int argc, char **argv)
{
    static const struct option options[] = {
        {"output", required_argument, NULL, 'o'}, {"weight", required_argument, NULL, 'w'},
        {"from", required_argument, NULL, 'f'},   {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0}};
    convert_options o = {NULL, {WEIGHT_PERIOD, NULL, 0}, 0, 0, FORMAT_UNKNOWN};
    int opt, rc;
    optind = 1;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, ":o:w:f:qh", options, NULL)) != -1) {
        if (opt == 'h') {
            fputs(convert_usage, stdout);
            return KP_EXIT_OK;
        }
        rc = parse_option(opt, optarg, &o);
        if (rc < 0)
            return kp_bad_option("convert", opt, argv[optind - 1]);
        if (rc != KP_EXIT_OK)
            return rc;
    }
    rc = check_options(&o, argv + optind, argc - optind);
    return rc != KP_EXIT_OK ? rc : convert(&o, argv + optind, argc - optind);
}

/* Fuzz target: folded lines (plain, gzip or zstd) through kp_source and
 * kp_folded_parse_line, aggregated into kp_folded, written out and drawn as a
 * flame graph (which must be clean XML whatever the bytes). Each
 * parsed stack is also split into frames that go through kp_frames /
 * kp_stacks / kp_folded_add_stack, which must produce clean folded text
 * (encoded symbols: no empty frame, no space or control byte). Built with
 * libFuzzer (KPROF_FUZZ) or with replay_main.c over the seed corpus. */
#include "fuzz_common.h"

#include "kp/flame_svg.h"
#include "kp/intern.h"

static int encoded_hex_digit(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1; /* lowercase is not what kp_symbol_encode writes */
}

/* A symbol must hold none of the bytes FORMATS.md lists, and decode back to
 * the text it was made from ("" is written "%00"). */
static void check_symbol(const char *sym, size_t sym_len, const char *text, size_t len)
{
    FUZZ_CHECK(sym_len > 0);
    FUZZ_CHECK(!(sym_len == 9 && memcmp(sym, "[unknown]", 9) == 0));
    if (len == 0) {
        FUZZ_CHECK(sym_len == 3 && memcmp(sym, "%00", 3) == 0);
        return;
    }
    size_t j = 0;
    for (size_t i = 0; i < sym_len; i++) {
        unsigned char c = (unsigned char)sym[i];
        FUZZ_CHECK(c >= 0x20 && c != 0x7f);
        FUZZ_CHECK(strchr(";+()'\"\\ ", c) == NULL);
        FUZZ_CHECK(!(c == '>' && i > 0 && sym[i - 1] == '-'));
        if (c == '%') {
            FUZZ_CHECK(i + 2 < sym_len);
            int hi = encoded_hex_digit((unsigned char)sym[i + 1]),
                lo = encoded_hex_digit((unsigned char)sym[i + 2]);
            FUZZ_CHECK(hi >= 0 && lo >= 0);
            c = (unsigned char)(hi * 16 + lo);
            i += 2;
        }
        FUZZ_CHECK(j < len && (unsigned char)text[j] == c);
        j++;
    }
    FUZZ_CHECK(j == len);
}

typedef struct {
    uint32_t *ids;
    size_t cap;
} id_array;

static void add_as_frames(kp_frames *frames, kp_stacks *stacks, kp_folded *folded, id_array *a,
                          const char *stack, size_t len, uint64_t weight)
{
    size_t n = 0;
    const char *p = stack, *end = stack + len;
    for (;;) {
        const char *semi = memchr(p, ';', (size_t)(end - p));
        const char *frame_end = semi ? semi : end;
        if (n == a->cap) {
            a->cap = a->cap ? a->cap * 2 : 64;
            a->ids = realloc(a->ids, a->cap * sizeof *a->ids);
            FUZZ_CHECK(a->ids != NULL);
        }
        uint32_t before = kp_frames_count(frames), id;
        size_t flen = (size_t)(frame_end - p);
        FUZZ_CHECK(kp_frames_intern_pseudo(frames, p, flen, "frame", &id) == KP_OK);
        FUZZ_CHECK(id <= before && kp_frames_count(frames) >= before);
        if (id == before) {
            size_t sym_len, mod_len;
            const char *sym = kp_frames_symbol(frames, id, &sym_len);
            check_symbol(sym, sym_len, p, flen);
            const char *mod = kp_frames_module(frames, id, &mod_len);
            FUZZ_CHECK(mod_len == 5 && memcmp(mod, "frame", 5) == 0);
        }
        a->ids[n++] = id;
        if (!semi)
            break;
        p = semi + 1;
    }
    uint32_t sid;
    FUZZ_CHECK(kp_stacks_intern(stacks, a->ids, n, &sid) == KP_OK);
    size_t got_n;
    const uint32_t *got = kp_stacks_get(stacks, sid, &got_n);
    FUZZ_CHECK(got_n == n && memcmp(got, a->ids, n * sizeof *got) == 0);
    FUZZ_CHECK(kp_folded_add_stack(folded, frames, stacks, sid, NULL, weight) == KP_OK);
}

/* Draws `folded` and checks the drawing: complete, valid UTF-8 without a
 * control byte but LF, and no markup character left raw in a frame name. */
static void draw_and_check(const kp_folded *folded)
{
    kp_sink *sink;
    FUZZ_CHECK(kp_sink_open_fd(fuzz_null_fd, KP_COMPRESS_NONE, 0, &sink) == KP_OK);
    fuzz_out_len = 0;
    kp_status st = kp_flame_svg_write(folded, NULL, sink);
    FUZZ_CHECK(st == KP_OK || (st == KP_ERR_EMPTY && kp_folded_total(folded) == 0));
    FUZZ_CHECK(kp_sink_commit(sink) == KP_OK);
    if (st != KP_OK) {
        FUZZ_CHECK(fuzz_out_len == 0);
        return;
    }
    static const char tail[] = "</g>\n</svg>\n";
    FUZZ_CHECK(fuzz_out_len > 12 && memcmp(fuzz_out + fuzz_out_len - 12, tail, 12) == 0);
    for (size_t i = 0; i < fuzz_out_len;) {
        unsigned char c = (unsigned char)fuzz_out[i];
        FUZZ_CHECK(c >= 0x20 || c == '\n');
        FUZZ_CHECK(c != 0x7f);
        size_t n = c < 0x80 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
        FUZZ_CHECK(c < 0x80 || (c >= 0xc2 && c <= 0xf4));
        FUZZ_CHECK(i + n <= fuzz_out_len);
        for (size_t k = 1; k < n; k++)
            FUZZ_CHECK(((unsigned char)fuzz_out[i + k] & 0xc0) == 0x80);
        i += n;
    }
    for (size_t i = 0; i + 8 <= fuzz_out_len; i++) {
        if (memcmp(fuzz_out + i, "data-n=\"", 8) != 0)
            continue;
        for (i += 8; i < fuzz_out_len && fuzz_out[i] != '"'; i++)
            FUZZ_CHECK(fuzz_out[i] != '<' && fuzz_out[i] != '>');
        FUZZ_CHECK(i < fuzz_out_len);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_init();
    kp_source *src;
    FUZZ_CHECK(kp_source_open_memory(data, size, &src) == KP_OK);
    kp_folded *folded = kp_folded_create();
    kp_folded *encoded = kp_folded_create();
    kp_frames *frames = kp_frames_create(0);
    kp_stacks *stacks = kp_stacks_create();
    FUZZ_CHECK(folded && encoded && frames && stacks);
    id_array ids = {NULL, 0};

    kp_folded_reader_stats stats = {0, 0, 0, 0};
    uint64_t fed = 0, empty = 0, total = 0;
    const char *line;
    size_t len;
    kp_status st;
    int stopped = 0;
    while ((st = kp_source_next_line(src, &line, &len)) == KP_OK) {
        FUZZ_CHECK(line != NULL);
        FUZZ_CHECK(len <= KP_SOURCE_MAX_LINE);
        FUZZ_CHECK(memchr(line, '\n', len) == NULL);
        fed++;
        const char *stack = NULL;
        size_t stack_len = 0;
        uint64_t count = 0;
        int rc = kp_folded_parse_line(line, len, &stack, &stack_len, &count, &stats);
        FUZZ_CHECK(stats.lines == fed);
        if (rc == 0) {
            FUZZ_CHECK(len == 0 || (len == 1 && line[0] == '\r'));
            empty++;
        } else if (rc == 1) {
            /* "STACK<spaces/TABs>DIGITS[\r]", STACK without trailing blanks */
            FUZZ_CHECK(stack == line && stack_len > 0 && stack_len < len);
            FUZZ_CHECK(line[stack_len - 1] != ' ' && line[stack_len - 1] != '\t');
            size_t i = stack_len, end = len;
            if (line[end - 1] == '\r')
                end--;
            FUZZ_CHECK(line[i] == ' ' || line[i] == '\t');
            while (line[i] == ' ' || line[i] == '\t')
                i++;
            uint64_t value = 0;
            FUZZ_CHECK(i < end);
            for (; i < end; i++) {
                FUZZ_CHECK(fuzz_is_digit(line[i]));
                unsigned d = (unsigned)(line[i] - '0');
                FUZZ_CHECK(value <= (UINT64_MAX - d) / 10);
                value = value * 10 + d;
            }
            FUZZ_CHECK(value == count);
            FUZZ_CHECK(kp_folded_add(folded, stack, stack_len, count) == KP_OK);
            total = count > UINT64_MAX - total ? UINT64_MAX : total + count;
            add_as_frames(frames, stacks, encoded, &ids, stack, stack_len, count);
        } else {
            FUZZ_CHECK(rc == -1);
        }
        if (kp_source_bytes(src) > FUZZ_MAX_TEXT) {
            stopped = 1;
            break;
        }
    }
    if (!stopped) {
        FUZZ_CHECK(st == KP_ERR_EMPTY || st == KP_ERR_LIMIT ||
                   (st == KP_ERR_COMPRESS && kp_source_compression(src) != KP_COMPRESS_NONE));
        if (st == KP_ERR_EMPTY && kp_source_compression(src) == KP_COMPRESS_NONE)
            FUZZ_CHECK(kp_source_bytes(src) == size);
    }

    FUZZ_CHECK(stats.records + stats.malformed + empty == stats.lines);
    FUZZ_CHECK((stats.malformed == 0) == (stats.first_malformed == 0));
    FUZZ_CHECK(stats.first_malformed <= stats.lines);
    FUZZ_CHECK(kp_folded_total(folded) == total);
    FUZZ_CHECK(kp_folded_lines(folded) <= stats.records);
    FUZZ_CHECK(kp_folded_total(encoded) == total);
    /* distinct stacks stay distinct once encoded, but for an empty frame and
     * a frame of one NUL byte, which both become "%00" */
    FUZZ_CHECK(kp_folded_lines(encoded) <= kp_folded_lines(folded));
    fuzz_write_and_check(folded, 0);
    fuzz_write_and_check(encoded, 1);
    draw_and_check(folded);

    free(ids.ids);
    kp_stacks_free(stacks);
    kp_frames_free(frames);
    kp_folded_free(encoded);
    kp_folded_free(folded);
    kp_source_close(src);
    return 0;
}

/* kp_source: lines out of plain, gzip and zstd input (files and memory),
 * compressed data made here with zlib and libzstd directly. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <cmocka.h>

#include "faults.h"
#include "kp/source.h"

typedef struct {
    unsigned char *data;
    size_t len, cap;
} bytes;

static int setup_dir(void **state)
{
    *state = kp_test_tmpdir();
    return *state ? 0 : -1;
}

static int teardown_dir(void **state)
{
    kp_fault_alloc_reset();
    kp_test_rmdir(*state);
    free(*state);
    return 0;
}

static void append(bytes *b, const void *data, size_t len)
{
    if (b->len + len + 1 > b->cap) {
        b->cap = (b->len + len + 1) * 2;
        b->data = realloc(b->data, b->cap);
        assert_non_null(b->data);
    }
    memcpy(b->data + b->len, data, len);
    b->len += len;
}

/* One gzip member, appended to `out`. */
static void gzip_member(bytes *out, const void *text, size_t len)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    assert_int_equal(deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
    size_t cap = deflateBound(&z, (uLong)len);
    unsigned char *buf = malloc(cap);
    z.next_in = (unsigned char *)(uintptr_t)text;
    z.avail_in = (uInt)len;
    z.next_out = buf;
    z.avail_out = (uInt)cap;
    assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
    append(out, buf, cap - z.avail_out);
    deflateEnd(&z);
    free(buf);
}

/* One zstd frame, appended to `out`; with `checksum` as the zstd command
 * writes it, without as ZSTD_compress() does. */
static void zstd_frame(bytes *out, const void *text, size_t len, int checksum)
{
    ZSTD_CCtx *c = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, checksum);
    size_t cap = ZSTD_compressBound(len);
    unsigned char *buf = malloc(cap);
    size_t n = ZSTD_compress2(c, buf, cap, text, len);
    assert_false(ZSTD_isError(n));
    append(out, buf, n);
    ZSTD_freeCCtx(c);
    free(buf);
}

/* `text` in the given compression: 0 plain, 1 gzip, 2 zstd, 3 zstd without
 * checksum. */
static bytes encode(int how, const void *text, size_t len)
{
    bytes b = {NULL, 0, 0};
    if (how == 0)
        append(&b, text, len);
    else if (how == 1)
        gzip_member(&b, text, len);
    else
        zstd_frame(&b, text, len, how == 2);
    return b;
}

static const kp_compression detected[] = {KP_COMPRESS_NONE, KP_COMPRESS_GZIP, KP_COMPRESS_ZSTD,
                                          KP_COMPRESS_ZSTD};

static char *write_file(const char *dir, const char *name, const bytes *b)
{
    size_t cap = strlen(dir) + strlen(name) + 2;
    char *path = malloc(cap);
    snprintf(path, cap, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b->data, 1, b->len, f), b->len);
    fclose(f);
    return path;
}

/* Reads every line of `src` into one buffer, each followed by '\n' (so a last
 * line without one shows as if it had it); returns the final status. */
static kp_status read_all(kp_source *src, bytes *lines, size_t *n_lines)
{
    const char *line;
    size_t len;
    kp_status st;
    *n_lines = 0;
    while ((st = kp_source_next_line(src, &line, &len)) == KP_OK) {
        assert_null(memchr(line, '\n', len));
        append(lines, line, len);
        append(lines, "\n", 1);
        ++*n_lines;
    }
    return st;
}

/* Asserts that `input` read as a file and from memory gives exactly `want`
 * (lines joined with '\n', with a final '\n') in `want_lines` lines. */
static void assert_reads(const char *dir, const bytes *input, kp_compression c, const char *want,
                         size_t want_len, size_t want_lines)
{
    char *path = write_file(dir, "input.any", input);
    for (int from_file = 0; from_file < 2; from_file++) {
        kp_source *src = NULL;
        if (from_file)
            assert_int_equal(kp_source_open(path, &src), KP_OK);
        else
            assert_int_equal(kp_source_open_memory(input->data, input->len, &src), KP_OK);
        bytes got = {NULL, 0, 0};
        size_t n;
        assert_int_equal(read_all(src, &got, &n), KP_ERR_EMPTY);
        assert_int_equal(n, want_lines);
        assert_int_equal(got.len, want_len);
        if (want_len)
            assert_memory_equal(got.data, want, want_len);
        assert_int_equal(kp_source_compression(src), c);
        /* the end stays the end */
        const char *line;
        size_t len;
        assert_int_equal(kp_source_next_line(src, &line, &len), KP_ERR_EMPTY);
        kp_source_close(src);
        free(got.data);
    }
    unlink(path);
    free(path);
}

static void test_lines_in_every_compression(void **state)
{
    const char *dir = *state;
    static const char text[] = "# header\nbeam.smp 1/2 [0] 1.000001: 1 cpu-clock:\n\tx\n\nlast";
    static const char want[] = "# header\nbeam.smp 1/2 [0] 1.000001: 1 cpu-clock:\n\tx\n\nlast\n";
    for (int how = 0; how < 4; how++) {
        bytes b = encode(how, text, sizeof text - 1);
        assert_reads(dir, &b, detected[how], want, sizeof want - 1, 5);
        free(b.data);
    }
    /* the last line without '\n' is returned; with it, no extra empty line */
    bytes b = encode(0, "a\nb\n", 4);
    assert_reads(dir, &b, KP_COMPRESS_NONE, "a\nb\n", 4, 2);
    free(b.data);
    b = encode(0, "a\n\n", 3);
    assert_reads(dir, &b, KP_COMPRESS_NONE, "a\n\n", 3, 2);
    free(b.data);
    b = encode(0, "x", 1);
    assert_reads(dir, &b, KP_COMPRESS_NONE, "x\n", 2, 1);
    free(b.data);
}

static void test_empty_input(void **state)
{
    const char *dir = *state;
    for (int how = 0; how < 4; how++) {
        bytes b = encode(how, "", 0);
        if (how == 0)
            append(&b, "", 0); /* a valid pointer to 0 bytes */
        assert_reads(dir, &b, detected[how], "", 0, 0);
        free(b.data);
    }
}

static void test_crlf_is_kept(void **state)
{
    const char *dir = *state;
    bytes b = encode(1, "a\r\nb\r\n\r\n", 8);
    assert_reads(dir, &b, KP_COMPRESS_GZIP, "a\r\nb\r\n\r\n", 8, 3);
    free(b.data);
}

/* A file renamed to anything still reads by its content; bytes that only
 * look like a magic number at the start are plain text. */
static void test_detection_by_content(void **state)
{
    const char *dir = *state;
    bytes b = {NULL, 0, 0};
    append(&b,
           "\x1f"
           "abc\n",
           5);
    assert_reads(dir, &b, KP_COMPRESS_NONE,
                 "\x1f"
                 "abc\n",
                 5, 1);
    free(b.data);
    b = (bytes){NULL, 0, 0};
    append(&b, "\x28\xb5\x2f", 3); /* three bytes of the zstd magic */
    assert_reads(dir, &b, KP_COMPRESS_NONE, "\x28\xb5\x2f\n", 4, 1);
    free(b.data);
}

static void test_concatenated_members_and_frames(void **state)
{
    const char *dir = *state;
    static const char want[] = "first\nsplit line\n\nlast\n";
    /* the second line is cut across members/frames; an empty one in between */
    const char *parts[] = {"first\nspl", "", "it line\n", "\nlast"};
    for (int how = 1; how < 4; how++) {
        bytes b = {NULL, 0, 0};
        for (int i = 0; i < 4; i++) {
            if (how == 1)
                gzip_member(&b, parts[i], strlen(parts[i]));
            else
                zstd_frame(&b, parts[i], strlen(parts[i]), how == 2);
        }
        assert_reads(dir, &b, detected[how], want, sizeof want - 1, 4);
        free(b.data);
    }
}

/* Lines longer than every internal buffer, in every compression, plus many
 * MiB of ordinary lines so that buffers refill mid-line many times. */
static void test_long_lines(void **state)
{
    const char *dir = *state;
    size_t long_len = 3u << 20; /* 3 MiB */
    bytes text = {NULL, 0, 0};
    char *line = malloc(long_len);
    for (size_t i = 0; i < long_len; i++)
        line[i] = (char)('a' + (i * 7) % 26);
    size_t n_lines = 0;
    for (int i = 0; i < 2; i++) {
        append(&text, line, long_len - (size_t)i * 12345);
        append(&text, "\n", 1);
        n_lines++;
        for (int k = 0; k < 40000; k++) {
            char small[64];
            int n = snprintf(small, sizeof small, "\t%x my_mod:f%d/1 (my_mod.beam)\n", k, k);
            append(&text, small, (size_t)n);
            n_lines++;
        }
    }
    for (int how = 0; how < 4; how++) {
        bytes b = encode(how, text.data, text.len);
        assert_reads(dir, &b, detected[how], (const char *)text.data, text.len, n_lines);
        free(b.data);
    }
    free(line);
    free(text.data);
}

/* KP_SOURCE_MAX_LINE is the longest line accepted; one byte more is refused. */
static void test_line_limit(void **state)
{
    const char *dir = *state;
    size_t max = KP_SOURCE_MAX_LINE;
    char *text = malloc(max + 16);
    memset(text, 'x', max + 16);
    for (int how = 0; how < 3; how++) {
        /* exactly the limit, then a short line */
        text[max] = '\n';
        text[max + 1] = 'y';
        bytes b = encode(how, text, max + 2);
        kp_source *src;
        const char *line;
        size_t len;
        assert_int_equal(kp_source_open_memory(b.data, b.len, &src), KP_OK);
        assert_int_equal(kp_source_next_line(src, &line, &len), KP_OK);
        assert_int_equal(len, max);
        assert_int_equal(kp_source_next_line(src, &line, &len), KP_OK);
        assert_int_equal(len, 1);
        assert_int_equal(kp_source_next_line(src, &line, &len), KP_ERR_EMPTY);
        kp_source_close(src);
        free(b.data);

        /* one byte over, with and without '\n' */
        for (int nl = 0; nl < 2; nl++) {
            text[max] = 'x';
            text[max + 1] = nl ? '\n' : 'x';
            b = encode(how, text, max + 1 + (size_t)nl);
            char *path = write_file(dir, "long", &b);
            assert_int_equal(kp_source_open(path, &src), KP_OK);
            assert_int_equal(kp_source_next_line(src, &line, &len), KP_ERR_LIMIT);
            kp_source_close(src);
            unlink(path);
            free(path);
            free(b.data);
        }
    }
    free(text);
}

/* Cut anywhere before its end, compressed data is an error, never a short
 * but "complete" read. */
static void test_truncated_input(void **state)
{
    const char *dir = *state;
    bytes text = {NULL, 0, 0};
    for (int i = 0; i < 20000; i++) {
        char l[64];
        int n = snprintf(l, sizeof l, "line %d of a file cut short\n", i * 7919 % 10007);
        append(&text, l, (size_t)n);
    }
    for (int how = 1; how < 4; how++) {
        bytes b = encode(how, text.data, text.len);
        size_t cuts[] = {b.len - 1, b.len - 4, b.len - 8, b.len / 2, 20, 5, 4};
        for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
            bytes cut = {b.data, cuts[k], 0};
            char *path = write_file(dir, "cut", &cut);
            for (int from_file = 0; from_file < 2; from_file++) {
                kp_source *src;
                if (from_file)
                    assert_int_equal(kp_source_open(path, &src), KP_OK);
                else
                    assert_int_equal(kp_source_open_memory(cut.data, cut.len, &src), KP_OK);
                bytes got = {NULL, 0, 0};
                size_t n;
                assert_int_equal(read_all(src, &got, &n), KP_ERR_COMPRESS);
                /* what came out before the error was right */
                assert_true(got.len <= text.len);
                if (got.len)
                    assert_memory_equal(got.data, text.data, got.len);
                kp_source_close(src);
                free(got.data);
            }
            unlink(path);
            free(path);
        }
        /* a second member/frame cut short after a complete first one */
        bytes two = {NULL, 0, 0};
        append(&two, b.data, b.len);
        append(&two, b.data, b.len / 3);
        kp_source *src;
        assert_int_equal(kp_source_open_memory(two.data, two.len, &src), KP_OK);
        bytes got = {NULL, 0, 0};
        size_t n;
        assert_int_equal(read_all(src, &got, &n), KP_ERR_COMPRESS);
        kp_source_close(src);
        free(got.data);
        free(two.data);
        free(b.data);
    }
    free(text.data);
}

static void test_corrupt_gzip(void **state)
{
    (void)state;
    static const char text[] = "some text that will be damaged\nsecond line\n";
    bytes b = encode(1, text, sizeof text - 1);
    b.data[b.len - 6] ^= 0x55; /* in the CRC-32 */
    kp_source *src;
    assert_int_equal(kp_source_open_memory(b.data, b.len, &src), KP_OK);
    bytes got = {NULL, 0, 0};
    size_t n;
    assert_int_equal(read_all(src, &got, &n), KP_ERR_COMPRESS);
    kp_source_close(src);
    free(got.data);
    free(b.data);
}

static void test_open_errors(void **state)
{
    const char *dir = *state;
    size_t cap = strlen(dir) + 32;
    char *path = malloc(cap);
    snprintf(path, cap, "%s/missing.perf", dir);
    kp_source *src = NULL;
    errno = 0;
    assert_int_equal(kp_source_open(path, &src), KP_ERR_IO);
    assert_int_equal(errno, ENOENT);
    assert_null(src);
    /* a directory opens but cannot be read */
    assert_int_equal(kp_source_open(dir, &src), KP_OK);
    const char *line;
    size_t len;
    errno = 0;
    assert_int_equal(kp_source_next_line(src, &line, &len), KP_ERR_IO);
    assert_int_equal(errno, EISDIR);
    kp_source_close(src);
    kp_source_close(NULL);
    free(path);
}

static void test_standard_input(void **state)
{
    const char *dir = *state;
    bytes b = encode(2, "from\nstdin\n", 11);
    char *path = write_file(dir, "stdin.zst", &b);
    int saved = dup(0);
    int fd = open(path, O_RDONLY);
    assert_true(saved >= 0 && fd >= 0);
    dup2(fd, 0);
    close(fd);
    kp_source *src;
    assert_int_equal(kp_source_open("-", &src), KP_OK);
    bytes got = {NULL, 0, 0};
    size_t n;
    kp_status st = read_all(src, &got, &n);
    kp_source_close(src);
    int still_open = fcntl(0, F_GETFD) != -1; /* not ours to close */
    dup2(saved, 0);
    close(saved);
    assert_int_equal(st, KP_ERR_EMPTY);
    assert_true(still_open);
    assert_int_equal(n, 2);
    assert_memory_equal(got.data, "from\nstdin\n", 11);
    free(got.data);
    free(b.data);
    free(path);
}

static void test_bytes_counter(void **state)
{
    (void)state;
    static const char text[] = "ab\n\ncde\nf";
    bytes b = encode(1, text, sizeof text - 1);
    kp_source *src;
    assert_int_equal(kp_source_open_memory(b.data, b.len, &src), KP_OK);
    const char *line;
    size_t len;
    assert_int_equal(kp_source_bytes(src), 0);
    assert_int_equal(kp_source_next_line(src, &line, &len), KP_OK);
    assert_int_equal(kp_source_bytes(src), 3);
    while (kp_source_next_line(src, &line, &len) == KP_OK)
        ;
    assert_int_equal(kp_source_bytes(src), sizeof text - 1);
    kp_source_close(src);
    free(b.data);
}

static void test_out_of_memory(void **state)
{
    (void)state;
    bytes text = {NULL, 0, 0};
    for (int i = 0; i < 2000; i++)
        append(&text, "a line of text\n", 15);
    for (int how = 0; how < 3; how++) {
        bytes b = encode(how, text.data, text.len);
        for (long n = 0;; n++) {
            assert_true(n < 100);
            kp_source *src = NULL;
            bytes got = {NULL, 0, 0};
            size_t lines;
            kp_fault_alloc_after(n);
            kp_status st = kp_source_open_memory(b.data, b.len, &src);
            if (st == KP_OK) {
                st = read_all(src, &got, &lines);
                kp_source_close(src);
            }
            kp_fault_alloc_reset();
            free(got.data);
            if (st == KP_ERR_EMPTY) {
                assert_int_equal(lines, 2000);
                break;
            }
            assert_int_equal(st, KP_ERR_NOMEM);
        }
        free(b.data);
    }
    free(text.data);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup_dir, teardown_dir)
    const struct CMUnitTest tests[] = {
        T(test_lines_in_every_compression),
        T(test_empty_input),
        T(test_crlf_is_kept),
        T(test_detection_by_content),
        T(test_concatenated_members_and_frames),
        T(test_long_lines),
        T(test_line_limit),
        T(test_truncated_input),
        T(test_corrupt_gzip),
        T(test_open_errors),
        T(test_standard_input),
        T(test_bytes_counter),
        T(test_out_of_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* kp_sink: files that appear whole under their final name or not at all,
 * plain, gzip and zstd, with write and allocation failures injected. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <dirent.h>
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
#include "kp/sink.h"

static const kp_compression all_compressions[] = {KP_COMPRESS_NONE, KP_COMPRESS_GZIP,
                                                  KP_COMPRESS_ZSTD};

static int setup_dir(void **state)
{
    *state = kp_test_tmpdir();
    return *state ? 0 : -1;
}

static int teardown_dir(void **state)
{
    kp_fault_alloc_reset();
    kp_fault_write_reset();
    kp_test_rmdir(*state);
    free(*state);
    return 0;
}

static char *path_in(const char *dir, const char *name)
{
    size_t cap = strlen(dir) + strlen(name) + 2;
    char *p = malloc(cap);
    assert_non_null(p);
    snprintf(p, cap, "%s/%s", dir, name);
    return p;
}

/* The whole file as stored on disk. */
static unsigned char *read_raw(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    unsigned char *buf = malloc(cap);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap)
            buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    *len = n;
    return buf;
}

/* Decompresses with the libraries themselves, not with kp_source. */
static unsigned char *decompress(const unsigned char *data, size_t len, kp_compression c,
                                 size_t *out_len)
{
    size_t cap = 1 << 20, n = 0;
    unsigned char *out = malloc(cap);
    assert_non_null(out);
    if (c == KP_COMPRESS_NONE) {
        out = realloc(out, len + 1);
        memcpy(out, data, len);
        *out_len = len;
        return out;
    }
    if (c == KP_COMPRESS_GZIP) {
        z_stream z;
        memset(&z, 0, sizeof z);
        assert_int_equal(inflateInit2(&z, 15 + 16), Z_OK);
        z.next_in = (unsigned char *)(uintptr_t)data;
        z.avail_in = (uInt)len;
        int rc;
        do {
            if (n == cap)
                out = realloc(out, cap *= 2);
            z.next_out = out + n;
            z.avail_out = (uInt)(cap - n);
            rc = inflate(&z, Z_NO_FLUSH);
            n = cap - z.avail_out;
        } while (rc == Z_OK);
        assert_int_equal(rc, Z_STREAM_END);
        assert_int_equal(z.avail_in, 0); /* one member, nothing after it */
        inflateEnd(&z);
    } else {
        ZSTD_DCtx *d = ZSTD_createDCtx();
        ZSTD_inBuffer in = {data, len, 0};
        size_t rc;
        do {
            if (n == cap)
                out = realloc(out, cap *= 2);
            ZSTD_outBuffer o = {out, cap, n};
            rc = ZSTD_decompressStream(d, &o, &in);
            assert_false(ZSTD_isError(rc));
            n = o.pos;
        } while (rc != 0 || n == cap);
        assert_int_equal(in.pos, len);
        ZSTD_freeDCtx(d);
    }
    *out_len = n;
    return out;
}

/* Asserts that `path` holds exactly `want` once decompressed, and that its
 * first bytes are the format's magic number. */
static void assert_file_content(const char *path, kp_compression c, const void *want,
                                size_t want_len)
{
    size_t raw_len, len;
    unsigned char *raw = read_raw(path, &raw_len);
    assert_non_null(raw);
    if (c == KP_COMPRESS_GZIP) {
        assert_true(raw_len >= 2);
        assert_true(raw[0] == 0x1f && raw[1] == 0x8b);
    } else if (c == KP_COMPRESS_ZSTD) {
        assert_true(raw_len >= 4);
        assert_true(raw[0] == 0x28 && raw[1] == 0xb5 && raw[2] == 0x2f && raw[3] == 0xfd);
    }
    unsigned char *text = decompress(raw, raw_len, c, &len);
    assert_int_equal(len, want_len);
    if (len)
        assert_memory_equal(text, want, len);
    free(text);
    free(raw);
}

/* Text of `len` bytes, lines of varying length; `noisy` makes it nearly
 * incompressible, so compressed output is as large as the input. */
static char *make_text(size_t len, int noisy)
{
    char *t = malloc(len);
    uint32_t x = 12345;
    for (size_t i = 0; i < len; i++) {
        x = x * 1103515245u + 12345u;
        if (noisy)
            t[i] = (char)(' ' + (x >> 16) % 90);
        else
            t[i] = (char)('a' + i % 26);
        if ((x >> 8) % 97 == 0 || i + 1 == len)
            t[i] = '\n';
    }
    return t;
}

static void test_round_trip(void **state)
{
    const char *dir = *state;
    size_t len = 3 * 128 * 1024 + 777; /* several times the sink's buffer */
    char *text = make_text(len, 0);
    for (size_t k = 0; k < 3; k++) {
        kp_compression c = all_compressions[k];
        char name[32];
        snprintf(name, sizeof name, "out%zu.perf%s", k, kp_compression_suffix(c));
        char *path = path_in(dir, name);
        kp_sink *s = NULL;
        assert_int_equal(kp_sink_open_file(path, c, 0, &s), KP_OK);
        /* pieces of every size, from 0 bytes to larger than the buffer */
        size_t done = 0, piece = 0;
        while (done < len) {
            size_t n = piece < len - done ? piece : len - done;
            assert_int_equal(kp_sink_write(s, text + done, n), KP_OK);
            done += n;
            piece = piece * 3 + 1;
        }
        assert_int_equal(kp_sink_bytes_in(s), len);
        if (c == KP_COMPRESS_NONE)
            assert_int_equal(kp_sink_bytes_out(s), len);
        else
            assert_true(kp_sink_bytes_out(s) < len); /* compressible text */
        assert_int_equal(kp_sink_commit(s), KP_OK);
        assert_file_content(path, c, text, len);
        /* the test helper (through kp_source) reads it back the same */
        size_t got_len;
        char *got = kp_test_read_text(path, &got_len);
        assert_non_null(got);
        assert_int_equal(got_len, len);
        assert_memory_equal(got, text, len);
        free(got);
        free(path);
    }
    assert_int_equal(kp_test_count_files(dir, ""), 3);
    free(text);
}

static void test_levels_and_empty_files(void **state)
{
    const char *dir = *state;
    for (size_t k = 0; k < 3; k++) {
        kp_compression c = all_compressions[k];
        int levels[] = {0, 1, 9};
        for (int l = 0; l < 3; l++) {
            char *path = path_in(dir, "x");
            kp_sink *s;
            assert_int_equal(kp_sink_open_file(path, c, levels[l], &s), KP_OK);
            assert_int_equal(kp_sink_write(s, "# hello\n", 8), KP_OK);
            assert_int_equal(kp_sink_commit(s), KP_OK);
            assert_file_content(path, c, "# hello\n", 8);
            /* nothing written: a valid empty file of the format */
            assert_int_equal(kp_sink_open_file(path, c, levels[l], &s), KP_OK);
            assert_int_equal(kp_sink_commit(s), KP_OK);
            assert_file_content(path, c, "", 0);
            free(path);
        }
    }
    assert_int_equal(kp_test_count_files(dir, ""), 1);
}

/* Until commit there is nothing under the final name, only a dot-prefixed
 * temporary beside it; an existing file keeps its old content until then. */
static void test_file_appears_only_at_commit(void **state)
{
    const char *dir = *state;
    char *path = path_in(dir, "profile.perf.gz");
    FILE *old = fopen(path, "w");
    assert_non_null(old);
    fputs("old\n", old);
    fclose(old);

    kp_sink *s;
    assert_int_equal(kp_sink_open_file(path, KP_COMPRESS_GZIP, 0, &s), KP_OK);
    assert_int_equal(kp_test_count_files(dir, "."), 1);
    assert_int_equal(kp_test_count_files(dir, ".profile.perf.gz"), 1);
    char *big = make_text(1 << 20, 1); /* enough to reach the disk before commit */
    assert_int_equal(kp_sink_write(s, big, 1 << 20), KP_OK);
    assert_true(kp_sink_bytes_out(s) > 0);
    assert_file_content(path, KP_COMPRESS_NONE, "old\n", 4);
    assert_int_equal(kp_test_count_files(dir, ""), 2);
    assert_int_equal(kp_sink_commit(s), KP_OK);
    assert_int_equal(kp_test_count_files(dir, "."), 0);
    assert_int_equal(kp_test_count_files(dir, ""), 1);
    assert_file_content(path, KP_COMPRESS_GZIP, big, 1 << 20);
    free(big);
    free(path);
}

static void test_abort_leaves_nothing(void **state)
{
    const char *dir = *state;
    for (size_t k = 0; k < 3; k++) {
        char *path = path_in(dir, "aborted.perf");
        kp_sink *s;
        assert_int_equal(kp_sink_open_file(path, all_compressions[k], 0, &s), KP_OK);
        char *big = make_text(300000, 1);
        assert_int_equal(kp_sink_write(s, big, 300000), KP_OK);
        kp_sink_abort(s);
        assert_int_equal(kp_test_count_files(dir, ""), 0);
        free(big);
        free(path);
    }
    kp_sink_abort(NULL);
}

/* Writes `text` through a sink whose disk fills after `budget` bytes.
 * Asserts that the failure is KP_ERR_IO / ENOSPC, sticky, and that nothing at
 * all is left in `dir`. */
static void write_until_disk_full(const char *dir, kp_compression c, long long budget,
                                  const char *text, size_t len)
{
    char *path = path_in(dir, "full.perf");
    kp_sink *s;
    kp_fault_write_after(budget, ENOSPC);
    assert_int_equal(kp_sink_open_file(path, c, 0, &s), KP_OK);
    kp_status first = KP_OK;
    for (size_t done = 0; done < len; done += 4096) {
        size_t n = len - done < 4096 ? len - done : 4096;
        errno = 0;
        kp_status st = kp_sink_write(s, text + done, n);
        if (first != KP_OK) {
            assert_int_equal(st, first); /* sticky */
        } else if (st != KP_OK) {
            assert_int_equal(errno, ENOSPC);
            first = st;
        }
    }
    if (first != KP_OK) {
        assert_int_equal(first, KP_ERR_IO);
        kp_fault_write_reset(); /* the disk has room again: still failed */
        assert_int_equal(kp_sink_write(s, "x", 1), KP_ERR_IO);
    }
    errno = 0;
    assert_int_equal(kp_sink_commit(s), KP_ERR_IO);
    assert_int_equal(errno, ENOSPC);
    kp_fault_write_reset();
    assert_int_equal(kp_test_count_files(dir, ""), 0);
    free(path);
}

static void test_disk_full(void **state)
{
    const char *dir = *state;
    size_t len = 1 << 20;
    char *text = make_text(len, 1);
    long long budgets[] = {0,      1,      4095,  128 * 1024 - 1, 128 * 1024, 128 * 1024 + 1,
                           300000, 500000, 700000};
    for (size_t k = 0; k < 3; k++)
        for (size_t b = 0; b < sizeof budgets / sizeof budgets[0]; b++)
            write_until_disk_full(dir, all_compressions[k], budgets[b], text, len);
    /* a small file that only reaches the disk at commit */
    for (size_t k = 0; k < 3; k++)
        write_until_disk_full(dir, all_compressions[k], 4, "# small\n", 8);
    free(text);
}

/* kp_sink_write_file: the whole buffer or no file at all */
static void test_write_file(void **state)
{
    const char *dir = *state;
    char *path = path_in(dir, "README.txt");
    size_t len = 300000;
    char *text = make_text(len, 3);
    assert_int_equal(kp_sink_write_file(path, text, len), KP_OK);
    size_t got;
    unsigned char *back = read_raw(path, &got);
    assert_int_equal(got, len);
    assert_memory_equal(back, text, len);
    free(back);
    assert_int_equal(kp_test_count_files(dir, ""), 1);
    assert_int_equal(unlink(path), 0);
    kp_fault_write_after(1000, ENOSPC);
    errno = 0;
    assert_int_equal(kp_sink_write_file(path, text, len), KP_ERR_IO);
    assert_int_equal(errno, ENOSPC);
    kp_fault_write_reset();
    assert_int_equal(kp_test_count_files(dir, ""), 0);
    free(text);
    free(path);
}

static void test_missing_directory(void **state)
{
    const char *dir = *state;
    char *path = path_in(dir, "no/such/dir/x.perf");
    kp_sink *s = NULL;
    errno = 0;
    assert_int_equal(kp_sink_open_file(path, KP_COMPRESS_GZIP, 0, &s), KP_ERR_IO);
    assert_int_equal(errno, ENOENT);
    assert_null(s);
    assert_int_equal(kp_test_count_files(dir, ""), 0);
    free(path);
}

static void test_open_fd(void **state)
{
    const char *dir = *state;
    char *path = path_in(dir, "fd.out");
    for (size_t k = 0; k < 3; k++) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        assert_true(fd >= 0);
        kp_sink *s;
        assert_int_equal(kp_sink_open_fd(fd, all_compressions[k], 0, &s), KP_OK);
        assert_int_equal(kp_sink_write(s, "line 1\nline 2\n", 14), KP_OK);
        assert_int_equal(kp_sink_commit(s), KP_OK);
        assert_true(fcntl(fd, F_GETFD) != -1); /* still open: not ours to close */
        close(fd);
        assert_file_content(path, all_compressions[k], "line 1\nline 2\n", 14);
        assert_int_equal(kp_test_count_files(dir, ""), 1); /* no temporary, no rename */
    }
    free(path);
}

static void test_compression_names(void **state)
{
    (void)state;
    assert_int_equal(kp_compression_from_name("none"), KP_COMPRESS_NONE);
    assert_int_equal(kp_compression_from_name("gzip"), KP_COMPRESS_GZIP);
    assert_int_equal(kp_compression_from_name("zstd"), KP_COMPRESS_ZSTD);
    assert_int_equal(kp_compression_from_name("gz"), -1);
    assert_int_equal(kp_compression_from_name(""), -1);
    assert_string_equal(kp_compression_suffix(KP_COMPRESS_NONE), "");
    assert_string_equal(kp_compression_suffix(KP_COMPRESS_GZIP), ".gz");
    assert_string_equal(kp_compression_suffix(KP_COMPRESS_ZSTD), ".zst");
}

/* open, write and commit under every allocation failure: each failure is
 * KP_ERR_NOMEM and leaves no file; with enough memory, the file is right. */
static void test_out_of_memory(void **state)
{
    const char *dir = *state;
    char *path = path_in(dir, "oom.perf");
    char *text = make_text(200000, 0);
    for (size_t k = 0; k < 3; k++) {
        kp_compression c = all_compressions[k];
        for (long n = 0;; n++) {
            assert_true(n < 100);
            kp_sink *s = NULL;
            kp_fault_alloc_after(n);
            kp_status st = kp_sink_open_file(path, c, 0, &s);
            if (st == KP_OK)
                st = kp_sink_write(s, text, 100000);
            if (st == KP_OK)
                st = kp_sink_write(s, text + 100000, 100000);
            if (st == KP_OK) {
                st = kp_sink_commit(s);
            } else if (s) {
                kp_sink_abort(s);
            }
            kp_fault_alloc_reset();
            if (st == KP_OK)
                break;
            assert_int_equal(st, KP_ERR_NOMEM);
            assert_int_equal(kp_test_count_files(dir, ""), 0);
        }
        assert_file_content(path, c, text, 200000);
        unlink(path);
    }
    free(text);
    free(path);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup_dir, teardown_dir)
    const struct CMUnitTest tests[] = {
        T(test_round_trip),
        T(test_levels_and_empty_files),
        T(test_file_appears_only_at_commit),
        T(test_abort_leaves_nothing),
        T(test_disk_full),
        T(test_write_file),
        T(test_missing_directory),
        T(test_open_fd),
        T(test_compression_names),
        T(test_out_of_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#define _POSIX_C_SOURCE 200809L
#include "kp/sink.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "kp/alloc.h"
#include "zlib_alloc.h"

#define OUT_CAP (128 * 1024)
/* Input for a compressor is gathered up to this size first: kprof writes a
 * few hundred bytes at a time, and zlib called once per sample cost about a
 * tenth more CPU than called once per 64 KB (its tables stay in cache). */
#define IN_CAP (64 * 1024)

static kp_write_fn write_fn = write;

void kp_sink_set_write_fn(kp_write_fn fn)
{
    write_fn = fn ? fn : write;
}

struct kp_sink {
    int fd;
    int owns_fd;
    kp_compression compression;
    kp_status error;
    int saved_errno;
    z_stream gz;
    int gz_ready;
    ZSTD_CCtx *zstd;
    char *tmp_path; /* NULL for fd sinks */
    char *final_path;
    unsigned char *out; /* pending bytes for the file */
    size_t out_len;
    unsigned char *in; /* input gathered for the compressor (NULL: none) */
    size_t in_len;
    uint64_t bytes_in;
    uint64_t bytes_out;
};

static kp_status fail(kp_sink *s, kp_status st)
{
    if (s->error == KP_OK) {
        s->error = st;
        s->saved_errno = errno;
    }
    return s->error;
}

static kp_status flush_out(kp_sink *s)
{
    size_t done = 0;
    while (done < s->out_len) {
        ssize_t n = write_fn(s->fd, s->out + done, s->out_len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0)
                errno = EIO;
            return fail(s, KP_ERR_IO);
        }
        done += (size_t)n;
    }
    s->bytes_out += done;
    s->out_len = 0;
    return KP_OK;
}

static kp_status init_compressor(kp_sink *s, int level)
{
    if (s->compression == KP_COMPRESS_GZIP) {
        memset(&s->gz, 0, sizeof s->gz);
        s->gz.zalloc = kp_zlib_alloc;
        s->gz.zfree = kp_zlib_free;
        /* 15 + 16: a gzip header, which FlameScope and speedscope recognise.
         * Level 1 by default: a recording at 100 x 100 Hz writes about 4 MB/s
         * of text, and zlib's default level 6 spent 1.7% of a core on it
         * against 0.7% at level 1 (for a file 35% larger) */
        if (deflateInit2(&s->gz, level ? level : 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
            Z_OK)
            return KP_ERR_NOMEM;
        s->gz_ready = 1;
    } else if (s->compression == KP_COMPRESS_ZSTD) {
        s->zstd = ZSTD_createCCtx();
        if (!s->zstd)
            return KP_ERR_NOMEM;
        if (ZSTD_isError(
                ZSTD_CCtx_setParameter(s->zstd, ZSTD_c_compressionLevel, level ? level : 3)) ||
            ZSTD_isError(ZSTD_CCtx_setParameter(s->zstd, ZSTD_c_checksumFlag, 1)))
            return KP_ERR_COMPRESS;
    }
    return KP_OK;
}

static void free_sink(kp_sink *s)
{
    if (s->gz_ready)
        deflateEnd(&s->gz);
    ZSTD_freeCCtx(s->zstd);
    if (s->owns_fd && s->fd >= 0)
        close(s->fd);
    kp_free(s->tmp_path);
    kp_free(s->final_path);
    kp_free(s->out);
    kp_free(s->in);
    kp_free(s);
}

static kp_status new_sink(kp_compression compression, kp_sink **out)
{
    if (compression != KP_COMPRESS_NONE && compression != KP_COMPRESS_GZIP &&
        compression != KP_COMPRESS_ZSTD)
        return KP_ERR_INVAL;
    kp_sink *s = kp_calloc(1, sizeof *s);
    if (!s)
        return KP_ERR_NOMEM;
    s->fd = -1;
    s->compression = compression;
    s->out = kp_malloc(OUT_CAP);
    s->in = compression != KP_COMPRESS_NONE ? kp_malloc(IN_CAP) : NULL;
    if (!s->out || (compression != KP_COMPRESS_NONE && !s->in)) {
        kp_free(s->out);
        kp_free(s->in);
        kp_free(s);
        return KP_ERR_NOMEM;
    }
    *out = s;
    return KP_OK;
}

/* ".NAME.PID.tmp" beside `path`: dot-prefixed so viewers that list a directory
 * (FlameScope) skip it. */
static char *temp_name(const char *path)
{
    /* pid and a per-process counter: two sinks on one path never share it */
    static unsigned long counter;
    const char *slash = strrchr(path, '/');
    size_t dir_len = slash ? (size_t)(slash - path) + 1 : 0;
    const char *base = path + dir_len;
    size_t cap = strlen(path) + 48;
    char *tmp = kp_malloc(cap);
    if (tmp)
        snprintf(tmp, cap, "%.*s.%s.%ld-%lu.tmp", (int)dir_len, path, base, (long)getpid(),
                 counter++);
    return tmp;
}

kp_status kp_sink_open_file(const char *path, kp_compression compression, int level, kp_sink **out)
{
    kp_sink *s;
    kp_status st = new_sink(compression, &s);
    if (st != KP_OK)
        return st;
    s->owns_fd = 1;
    s->final_path = kp_strdup(path);
    s->tmp_path = temp_name(path);
    if (!s->final_path || !s->tmp_path) {
        free_sink(s);
        return KP_ERR_NOMEM;
    }
    st = init_compressor(s, level);
    if (st != KP_OK) {
        free_sink(s);
        return st;
    }
    s->fd = open(s->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (s->fd < 0) {
        int e = errno;
        free_sink(s);
        errno = e;
        return KP_ERR_IO;
    }
    *out = s;
    return KP_OK;
}

kp_status kp_sink_open_fd(int fd, kp_compression compression, int level, kp_sink **out)
{
    kp_sink *s;
    kp_status st = new_sink(compression, &s);
    if (st != KP_OK)
        return st;
    s->fd = fd;
    st = init_compressor(s, level);
    if (st != KP_OK) {
        free_sink(s);
        return st;
    }
    *out = s;
    return KP_OK;
}

/* Runs the compressor over `data` (or finishes it when `finish`), sending
 * output to the file whenever the output buffer fills. */
static kp_status run_compressor(kp_sink *s, const void *data, size_t len, int finish)
{
    if (s->compression == KP_COMPRESS_GZIP) {
        s->gz.next_in = (unsigned char *)(uintptr_t)data;
        s->gz.avail_in = (uInt)len;
        for (;;) {
            s->gz.next_out = s->out + s->out_len;
            s->gz.avail_out = (uInt)(OUT_CAP - s->out_len);
            int rc = deflate(&s->gz, finish ? Z_FINISH : Z_NO_FLUSH);
            if (rc == Z_STREAM_ERROR)
                return fail(s, KP_ERR_COMPRESS);
            s->out_len = OUT_CAP - s->gz.avail_out;
            if (s->out_len == OUT_CAP && flush_out(s) != KP_OK)
                return s->error;
            if (finish ? rc == Z_STREAM_END : s->gz.avail_in == 0)
                return KP_OK;
        }
    }
    ZSTD_inBuffer in = {data, len, 0};
    for (;;) {
        ZSTD_outBuffer o = {s->out, OUT_CAP, s->out_len};
        size_t rc = ZSTD_compressStream2(s->zstd, &o, &in, finish ? ZSTD_e_end : ZSTD_e_continue);
        if (ZSTD_isError(rc))
            return fail(s, KP_ERR_COMPRESS);
        s->out_len = o.pos;
        if (s->out_len == OUT_CAP && flush_out(s) != KP_OK)
            return s->error;
        if (finish ? rc == 0 : in.pos == in.size)
            return KP_OK;
    }
}

/* Compresses the gathered input. */
static kp_status compress_gathered(kp_sink *s)
{
    size_t n = s->in_len;
    s->in_len = 0;
    return n ? run_compressor(s, s->in, n, 0) : KP_OK;
}

kp_status kp_sink_write(kp_sink *s, const void *data, size_t len)
{
    if (s->error != KP_OK)
        return s->error;
    s->bytes_in += len;
    const char *p = data;
    if (s->compression != KP_COMPRESS_NONE) {
        if (s->in_len + len <= IN_CAP) {
            memcpy(s->in + s->in_len, p, len);
            s->in_len += len;
            return KP_OK;
        }
        if (compress_gathered(s) != KP_OK)
            return s->error;
        if (len < IN_CAP) {
            memcpy(s->in, p, len);
            s->in_len = len;
            return KP_OK;
        }
        /* zlib counts input in a uInt: hand it 4 GiB or more in pieces */
        for (;;) {
            size_t n = len > (1u << 30) ? (1u << 30) : len;
            kp_status st = run_compressor(s, p, n, 0);
            if (st != KP_OK || n == len)
                return st;
            p += n;
            len -= n;
        }
    }
    while (len) {
        size_t room = OUT_CAP - s->out_len;
        size_t n = len < room ? len : room;
        memcpy(s->out + s->out_len, p, n);
        s->out_len += n;
        p += n;
        len -= n;
        if (s->out_len == OUT_CAP && flush_out(s) != KP_OK)
            return s->error;
    }
    return KP_OK;
}

uint64_t kp_sink_bytes_in(const kp_sink *s)
{
    return s->bytes_in;
}

uint64_t kp_sink_bytes_out(const kp_sink *s)
{
    return s->bytes_out + s->out_len;
}

kp_status kp_sink_commit(kp_sink *s)
{
    if (s->error == KP_OK && s->compression != KP_COMPRESS_NONE && compress_gathered(s) == KP_OK)
        run_compressor(s, NULL, 0, 1);
    if (s->error == KP_OK)
        flush_out(s);
    if (s->owns_fd && s->fd >= 0) {
        if (close(s->fd) != 0)
            fail(s, KP_ERR_IO);
        s->fd = -1;
    }
    if (s->error == KP_OK && s->tmp_path && rename(s->tmp_path, s->final_path) != 0)
        fail(s, KP_ERR_IO);
    kp_status st = s->error;
    int e = s->saved_errno;
    if (st != KP_OK && s->tmp_path)
        unlink(s->tmp_path);
    free_sink(s);
    if (st != KP_OK)
        errno = e;
    return st;
}

kp_status kp_sink_write_file(const char *path, const void *data, size_t len)
{
    kp_sink *s;
    kp_status st = kp_sink_open_file(path, KP_COMPRESS_NONE, 0, &s);
    if (st != KP_OK)
        return st;
    kp_sink_write(s, data, len); /* an error is sticky: commit reports it */
    return kp_sink_commit(s);
}

void kp_sink_abort(kp_sink *s)
{
    if (!s)
        return;
    if (s->owns_fd && s->fd >= 0) {
        close(s->fd);
        s->fd = -1;
    }
    if (s->tmp_path)
        unlink(s->tmp_path);
    free_sink(s);
}

int kp_compression_from_name(const char *name)
{
    if (strcmp(name, "none") == 0)
        return KP_COMPRESS_NONE;
    if (strcmp(name, "gzip") == 0)
        return KP_COMPRESS_GZIP;
    if (strcmp(name, "zstd") == 0)
        return KP_COMPRESS_ZSTD;
    return -1;
}

const char *kp_compression_suffix(kp_compression c)
{
    return c == KP_COMPRESS_GZIP ? ".gz" : c == KP_COMPRESS_ZSTD ? ".zst" : "";
}

#define _POSIX_C_SOURCE 200809L
#include "kp/source.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "kp/alloc.h"
#include "zlib_alloc.h"

#define RAW_CAP (256 * 1024)
#define TEXT_CAP (1024 * 1024)

struct kp_source {
    int fd; /* -1 for memory sources */
    int owns_fd;
    const unsigned char *mem;
    size_t mem_len, mem_pos;
    int detected;
    kp_compression compression;
    z_stream gz;
    int gz_ready;
    int gz_member_done; /* a gzip member ended; another may follow */
    ZSTD_DCtx *zstd;
    size_t zstd_frame_left; /* 0 = at a frame boundary */
    unsigned char *raw;     /* compressed bytes read, not yet decompressed */
    size_t raw_pos, raw_len;
    int raw_eof;
    char *text; /* decompressed text; lines are handed out from here */
    size_t text_cap, text_pos, text_len;
    int text_eof;
    uint64_t bytes;
};

static kp_status new_source(kp_source **out)
{
    kp_source *s = kp_calloc(1, sizeof *s);
    if (!s)
        return KP_ERR_NOMEM;
    s->fd = -1;
    s->raw = kp_malloc(RAW_CAP);
    s->text = kp_malloc(TEXT_CAP);
    s->text_cap = TEXT_CAP;
    if (!s->raw || !s->text) {
        kp_source_close(s);
        return KP_ERR_NOMEM;
    }
    *out = s;
    return KP_OK;
}

kp_status kp_source_open(const char *path, kp_source **out)
{
    kp_source *s;
    kp_status st = new_source(&s);
    if (st != KP_OK)
        return st;
    if (strcmp(path, "-") == 0) {
        s->fd = 0;
    } else {
        s->fd = open(path, O_RDONLY | O_CLOEXEC);
        if (s->fd < 0) {
            int e = errno;
            kp_source_close(s);
            errno = e;
            return KP_ERR_IO;
        }
        s->owns_fd = 1;
    }
    *out = s;
    return KP_OK;
}

kp_status kp_source_open_memory(const void *data, size_t len, kp_source **out)
{
    kp_source *s;
    kp_status st = new_source(&s);
    if (st != KP_OK)
        return st;
    s->mem = data;
    s->mem_len = len;
    *out = s;
    return KP_OK;
}

void kp_source_close(kp_source *s)
{
    if (!s)
        return;
    if (s->gz_ready)
        inflateEnd(&s->gz);
    ZSTD_freeDCtx(s->zstd);
    if (s->owns_fd)
        close(s->fd);
    kp_free(s->raw);
    kp_free(s->text);
    kp_free(s);
}

/* Reads more compressed (or plain) bytes into raw[]. */
static kp_status fill_raw(kp_source *s)
{
    if (s->raw_pos > 0) {
        memmove(s->raw, s->raw + s->raw_pos, s->raw_len - s->raw_pos);
        s->raw_len -= s->raw_pos;
        s->raw_pos = 0;
    }
    if (s->raw_eof || s->raw_len == RAW_CAP)
        return KP_OK;
    if (s->fd < 0) {
        size_t n = s->mem_len - s->mem_pos;
        if (n > RAW_CAP - s->raw_len)
            n = RAW_CAP - s->raw_len;
        memcpy(s->raw + s->raw_len, s->mem + s->mem_pos, n);
        s->mem_pos += n;
        s->raw_len += n;
        if (s->mem_pos == s->mem_len)
            s->raw_eof = 1;
        return KP_OK;
    }
    for (;;) {
        ssize_t n = read(s->fd, s->raw + s->raw_len, RAW_CAP - s->raw_len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return KP_ERR_IO;
        if (n == 0)
            s->raw_eof = 1;
        s->raw_len += (size_t)n;
        return KP_OK;
    }
}

static kp_status detect(kp_source *s)
{
    while (s->raw_len < 4 && !s->raw_eof) {
        kp_status st = fill_raw(s);
        if (st != KP_OK)
            return st;
    }
    const unsigned char *r = s->raw;
    if (s->raw_len >= 2 && r[0] == 0x1f && r[1] == 0x8b) {
        s->compression = KP_COMPRESS_GZIP;
        s->gz.zalloc = kp_zlib_alloc;
        s->gz.zfree = kp_zlib_free;
        if (inflateInit2(&s->gz, 15 + 16) != Z_OK)
            return KP_ERR_NOMEM;
        s->gz_ready = 1;
    } else if (s->raw_len >= 4 && r[0] == 0x28 && r[1] == 0xb5 && r[2] == 0x2f && r[3] == 0xfd) {
        s->compression = KP_COMPRESS_ZSTD;
        s->zstd = ZSTD_createDCtx();
        if (!s->zstd)
            return KP_ERR_NOMEM;
    }
    s->detected = 1;
    return KP_OK;
}

/* Appends decompressed bytes to text[] (which has room). Returns KP_OK having
 * produced at least one byte or reached the end (text_eof). */
static kp_status decode_more(kp_source *s)
{
    for (;;) {
        size_t room = s->text_cap - s->text_len;
        if (s->raw_pos == s->raw_len) {
            if (s->raw_eof) {
                int truncated = (s->compression == KP_COMPRESS_GZIP && !s->gz_member_done) ||
                                (s->compression == KP_COMPRESS_ZSTD && s->zstd_frame_left);
                if (truncated)
                    return KP_ERR_COMPRESS;
                s->text_eof = 1;
                return KP_OK;
            }
            kp_status st = fill_raw(s);
            if (st != KP_OK)
                return st;
            continue;
        }
        size_t before = s->text_len;
        if (s->compression == KP_COMPRESS_NONE) {
            size_t n = s->raw_len - s->raw_pos;
            if (n > room)
                n = room;
            memcpy(s->text + s->text_len, s->raw + s->raw_pos, n);
            s->raw_pos += n;
            s->text_len += n;
        } else if (s->compression == KP_COMPRESS_GZIP) {
            if (s->gz_member_done) {
                if (inflateReset(&s->gz) != Z_OK)
                    return KP_ERR_COMPRESS;
                s->gz_member_done = 0;
            }
            s->gz.next_in = s->raw + s->raw_pos;
            s->gz.avail_in = (uInt)(s->raw_len - s->raw_pos);
            s->gz.next_out = (unsigned char *)s->text + s->text_len;
            s->gz.avail_out = (uInt)room;
            int rc = inflate(&s->gz, Z_NO_FLUSH);
            if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR)
                return rc == Z_MEM_ERROR ? KP_ERR_NOMEM : KP_ERR_COMPRESS;
            s->raw_pos = s->raw_len - s->gz.avail_in;
            s->text_len = s->text_cap - s->gz.avail_out;
            if (rc == Z_STREAM_END)
                s->gz_member_done = 1;
        } else {
            ZSTD_inBuffer in = {s->raw, s->raw_len, s->raw_pos};
            ZSTD_outBuffer o = {s->text, s->text_cap, s->text_len};
            size_t rc = ZSTD_decompressStream(s->zstd, &o, &in);
            if (ZSTD_isError(rc))
                return KP_ERR_COMPRESS;
            s->raw_pos = in.pos;
            s->text_len = o.pos;
            s->zstd_frame_left = rc;
        }
        if (s->text_len > before)
            return KP_OK;
    }
}

kp_status kp_source_next_line(kp_source *s, const char **line, size_t *len)
{
    if (!s->detected) {
        kp_status st = detect(s);
        if (st != KP_OK)
            return st;
    }
    size_t scanned = s->text_pos;
    for (;;) {
        char *nl = memchr(s->text + scanned, '\n', s->text_len - scanned);
        if (nl) {
            *line = s->text + s->text_pos;
            *len = (size_t)(nl - *line);
            s->bytes += *len + 1;
            s->text_pos = (size_t)(nl - s->text) + 1;
            return KP_OK;
        }
        if (s->text_eof) {
            if (s->text_pos == s->text_len)
                return KP_ERR_EMPTY;
            *line = s->text + s->text_pos;
            *len = s->text_len - s->text_pos;
            s->bytes += *len;
            s->text_pos = s->text_len;
            return KP_OK;
        }
        scanned = s->text_len;
        /* make room: drop consumed text, then grow for a long line */
        if (s->text_pos > 0) {
            memmove(s->text, s->text + s->text_pos, s->text_len - s->text_pos);
            s->text_len -= s->text_pos;
            scanned -= s->text_pos;
            s->text_pos = 0;
        }
        if (s->text_len == s->text_cap) {
            /* the buffer holds a line of KP_SOURCE_MAX_LINE bytes and its '\n' */
            if (s->text_cap > KP_SOURCE_MAX_LINE)
                return KP_ERR_LIMIT;
            size_t cap = s->text_cap * 2;
            if (cap > KP_SOURCE_MAX_LINE + 1)
                cap = KP_SOURCE_MAX_LINE + 1;
            char *t = kp_realloc(s->text, cap);
            if (!t)
                return KP_ERR_NOMEM;
            s->text = t;
            s->text_cap = cap;
        }
        kp_status st = decode_more(s);
        if (st != KP_OK)
            return st;
    }
}

kp_compression kp_source_compression(const kp_source *s)
{
    return s->compression;
}

uint64_t kp_source_bytes(const kp_source *s)
{
    return s->bytes;
}

#define _DEFAULT_SOURCE
#include "faults.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kp/alloc.h"
#include "kp/buf.h"
#include "kp/sink.h"
#include "kp/source.h"

static long alloc_budget;
static long alloc_attempts;

static void *failing_malloc(size_t size)
{
    alloc_attempts++;
    if (alloc_budget-- <= 0)
        return NULL;
    return malloc(size);
}

static void *failing_realloc(void *ptr, size_t size)
{
    alloc_attempts++;
    if (alloc_budget-- <= 0)
        return NULL;
    return realloc(ptr, size);
}

void kp_fault_alloc_after(long n)
{
    static const kp_allocator failing = {failing_malloc, failing_realloc, free};
    alloc_budget = n;
    alloc_attempts = 0;
    kp_set_allocator(&failing);
}

void kp_fault_alloc_reset(void)
{
    kp_set_allocator(NULL);
}

long kp_fault_alloc_attempts(void)
{
    return alloc_attempts;
}

static long long write_budget;
static int write_error;

static ssize_t failing_write(int fd, const void *data, size_t len)
{
    if (write_budget <= 0) {
        errno = write_error;
        return -1;
    }
    if ((long long)len > write_budget)
        len = (size_t)write_budget;
    ssize_t n = write(fd, data, len);
    if (n > 0)
        write_budget -= n;
    return n;
}

void kp_fault_write_after(long long bytes, int error)
{
    write_budget = bytes;
    write_error = error;
    kp_sink_set_write_fn(failing_write);
}

void kp_fault_write_reset(void)
{
    kp_sink_set_write_fn(NULL);
}

char *kp_test_tmpdir(void)
{
    const char *base = getenv("TMPDIR");
    char tmpl[4096];
    snprintf(tmpl, sizeof tmpl, "%s/kprof-test-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpl))
        return NULL;
    return strdup(tmpl);
}

void kp_test_rmdir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char path[4096];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

size_t kp_test_count_files(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0)
            n++;
    }
    closedir(d);
    return n;
}

char *kp_test_read_text(const char *path, size_t *len)
{
    kp_source *src;
    if (kp_source_open(path, &src) != KP_OK)
        return NULL;
    kp_buf b = KP_BUF_INIT;
    const char *line;
    size_t n;
    kp_status st;
    while ((st = kp_source_next_line(src, &line, &n)) == KP_OK) {
        kp_buf_append(&b, line, n);
        kp_buf_append_char(&b, '\n');
    }
    kp_source_close(src);
    if (st != KP_ERR_EMPTY) {
        kp_buf_free(&b);
        return NULL;
    }
    kp_buf_append_char(&b, '\0');
    if (len)
        *len = b.len - 1;
    return b.data;
}

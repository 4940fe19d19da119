/* Replay driver for builds without libFuzzer: runs LLVMFuzzerTestOneInput
 * once over every file named on the command line, and over every file in the
 * directories named there and in their direct subdirectories. Prints how many
 * inputs ran; exits non-zero when none did or a file cannot be read (a
 * violated invariant aborts inside the target). */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static unsigned long ran, failed;

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s: %s\n", path, strerror(errno));
        failed++;
        return;
    }
    size_t cap = 4096, len = 0;
    uint8_t *data = malloc(cap);
    for (;;) {
        if (!data) {
            fprintf(stderr, "replay: out of memory reading %s\n", path);
            failed++;
            fclose(f);
            return;
        }
        len += fread(data + len, 1, cap - len, f);
        if (len < cap)
            break;
        cap *= 2;
        uint8_t *grown = realloc(data, cap);
        if (!grown)
            free(data);
        data = grown;
    }
    int error = ferror(f);
    fclose(f);
    if (error) {
        fprintf(stderr, "replay: cannot read %s\n", path);
        failed++;
        free(data);
        return;
    }
    /* an exact-size copy, so that a sanitizer build sees reads past the end */
    uint8_t *exact = malloc(len ? len : 1);
    if (!exact) {
        free(data);
        failed++;
        return;
    }
    memcpy(exact, data, len);
    free(data);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    ran++;
}

static void run_path(const char *path, int depth)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        failed++;
        return;
    }
    if (!S_ISDIR(st.st_mode)) {
        if (S_ISREG(st.st_mode))
            run_file(path);
        return;
    }
    if (depth > 1)
        return;
    DIR *dir = opendir(path);
    if (!dir) {
        fprintf(stderr, "replay: cannot list %s: %s\n", path, strerror(errno));
        failed++;
        return;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **grown = realloc(names, cap * sizeof *names);
            if (!grown)
                break;
            names = grown;
        }
        size_t size = strlen(path) + strlen(e->d_name) + 2;
        names[n] = malloc(size);
        if (!names[n])
            break;
        snprintf(names[n], size, "%s/%s", path, e->d_name);
        n++;
    }
    closedir(dir);
    /* a stable order, so that a failure is reproducible */
    if (n)
        qsort(names, n, sizeof *names, compare_names);
    for (size_t i = 0; i < n; i++) {
        run_path(names[i], depth + 1);
        free(names[i]);
    }
    free(names);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE_OR_DIR...\n", argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++)
        run_path(argv[i], 0);
    printf("%s: ran %lu inputs\n", argv[0], ran);
    if (failed) {
        fprintf(stderr, "%s: %lu paths could not be read\n", argv[0], failed);
        return 1;
    }
    return ran ? 0 : 1;
}

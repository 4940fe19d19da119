/* Names from debug files; see debug_names.h. */
#define _GNU_SOURCE
#include "cpu/debug_names.h"

#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu/native_names.h"
#include "kp/alloc.h"
#include "kp/strtab.h"
#include "kp/symbol.h"

#define NO_NAME UINT32_MAX

typedef struct {
    uint64_t start, end;
    const char *name; /* in the mapped debug file */
} function;

/* One file of the recording: its build id, and once looked for, its debug
 * file's functions sorted by start. */
typedef struct {
    char file[256];
    char build_id[129];
    int looked; /* the debug file was looked for */
    int fd;
    Elf *elf;
    function *fns;
    size_t n;
} debug_file;

struct kp_debug_names {
    char root[1024];
    debug_file *files;
    size_t n_files;
    size_t found;
    kp_strtab *frames; /* frames looked up, by their text */
    kp_strtab *names;  /* their new texts; NO_NAME: stays */
    uint32_t *renamed; /* frames id -> names id or NO_NAME */
    size_t renamed_cap, named;
    kp_buf scratch;
};

kp_debug_names *kp_debug_names_open(const char *dir, const char *root)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/cpu-files.tsv", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    kp_debug_names *d = kp_calloc(1, sizeof *d);
    d->frames = d ? kp_strtab_create() : NULL;
    d->names = d ? kp_strtab_create() : NULL;
    if (!d || !d->frames || !d->names) {
        fclose(f);
        kp_debug_names_free(d);
        return NULL;
    }
    snprintf(d->root, sizeof d->root, "%s", root ? root : "/usr/lib/debug");
    char line[4096];
    size_t cap = 0;
    while (fgets(line, sizeof line, f)) {
        char file[256], id[129];
        if (line[0] == '#' || sscanf(line, "%255[^\t]\t%128[0-9a-f]\t", file, id) != 2)
            continue;
        if (d->n_files == cap) {
            cap = cap ? cap * 2 : 8;
            debug_file *p = kp_realloc_array(d->files, cap, sizeof *p);
            if (!p)
                break;
            d->files = p;
        }
        debug_file *df = &d->files[d->n_files++];
        memset(df, 0, sizeof *df);
        df->fd = -1;
        snprintf(df->file, sizeof df->file, "%s", file);
        snprintf(df->build_id, sizeof df->build_id, "%s", id);
    }
    fclose(f);
    return d;
}

static int by_start(const void *a, const void *b)
{
    const function *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* Reads the function symbols of `df`'s debug file, where there is one. */
static void load(kp_debug_names *d, debug_file *df)
{
    df->looked = 1;
    if (strlen(df->build_id) < 4)
        return;
    char path[1400];
    snprintf(path, sizeof path, "%s/.build-id/%.2s/%s.debug", d->root, df->build_id,
             df->build_id + 2);
    elf_version(EV_CURRENT);
    if ((df->fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return;
    if (!(df->elf = elf_begin(df->fd, ELF_C_READ_MMAP, NULL)))
        return;
    for (Elf_Scn *scn = NULL; (scn = elf_nextscn(df->elf, scn)) != NULL;) {
        GElf_Shdr shdr;
        if (!gelf_getshdr(scn, &shdr) || shdr.sh_type != SHT_SYMTAB || !shdr.sh_entsize)
            continue;
        Elf_Data *data = elf_getdata(scn, NULL);
        size_t count = data ? shdr.sh_size / shdr.sh_entsize : 0;
        function *fns = count ? kp_calloc(count, sizeof *fns) : NULL;
        if (!fns)
            return;
        size_t n = 0;
        for (size_t i = 0; i < count; i++) {
            GElf_Sym sym;
            const char *name;
            if (!gelf_getsym(data, (int)i, &sym) || GELF_ST_TYPE(sym.st_info) != STT_FUNC ||
                !sym.st_size || !(name = elf_strptr(df->elf, shdr.sh_link, sym.st_name)) || !*name)
                continue;
            fns[n++] = (function){sym.st_value, sym.st_value + sym.st_size, name};
        }
        qsort(fns, n, sizeof *fns, by_start);
        df->fns = fns;
        df->n = n;
        d->found++;
        return;
    }
}

/* The function of `df` covering `addr`, or NULL. */
static const function *covering(const debug_file *df, uint64_t addr)
{
    size_t lo = 0, hi = df->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (df->fns[mid].start <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo && addr < df->fns[lo - 1].end ? &df->fns[lo - 1] : NULL;
}

/* The new text of frame `f[0..len)` into d->scratch; 0 when it stays. */
static int rename_frame(kp_debug_names *d, const char *f, size_t len)
{
    const char *close = len > 2 && f[0] == '[' ? memchr(f, ']', len) : NULL;
    const char *at = close ? memmem(close, len - (size_t)(close - f), "@0x", 3) : NULL;
    if (!at)
        return 0;
    /* FILE@0xHEX to the end: not FILE@0xOFFSET? (no function start known) */
    char hex[24];
    size_t hex_len = len - (size_t)(at + 3 - f);
    if (hex_len == 0 || hex_len >= sizeof hex)
        return 0;
    memcpy(hex, at + 3, hex_len);
    hex[hex_len] = 0;
    char *end;
    uint64_t start = strtoull(hex, &end, 16);
    if (*end)
        return 0;
    kp_buf file = KP_BUF_INIT;
    const char *file_text = close + 1;
    if (kp_symbol_decode(&file, file_text, (size_t)(at - file_text)) != KP_OK ||
        kp_buf_append_char(&file, 0) != KP_OK) {
        kp_buf_free(&file);
        return 0;
    }
    const function *fn = NULL;
    for (size_t i = 0; i < d->n_files && !fn; i++) {
        debug_file *df = &d->files[i];
        if (strcmp(df->file, file.data) != 0)
            continue;
        if (!df->looked)
            load(d, df);
        fn = covering(df, start);
    }
    kp_buf_free(&file);
    if (!fn)
        return 0;
    char plain[512];
    kp_demangle(fn->name, plain, sizeof plain);
    kp_buf_clear(&d->scratch);
    return kp_buf_append(&d->scratch, f, (size_t)(close + 1 - f)) == KP_OK &&
           kp_symbol_encode(&d->scratch, plain, strlen(plain)) == KP_OK;
}

int kp_debug_names_rewrite(kp_debug_names *d, const char *stack, size_t len, kp_buf *out)
{
    kp_buf_clear(out);
    int any = 0;
    for (size_t i = 0; i <= len;) {
        size_t j = i;
        while (j < len && stack[j] != ';')
            j++;
        uint32_t id, name = NO_NAME;
        int is_new;
        if (kp_strtab_intern(d->frames, stack + i, j - i, &id, &is_new) != KP_OK)
            return -1;
        if (id >= d->renamed_cap) {
            size_t cap = d->renamed_cap ? d->renamed_cap * 2 : 256;
            while (cap <= id)
                cap *= 2;
            uint32_t *p = kp_realloc_array(d->renamed, cap, sizeof *p);
            if (!p)
                return -1;
            d->renamed = p;
            d->renamed_cap = cap;
        }
        if (is_new) {
            d->renamed[id] = NO_NAME;
            if (rename_frame(d, stack + i, j - i)) {
                if (kp_strtab_intern(d->names, d->scratch.data, d->scratch.len, &name, NULL) !=
                    KP_OK)
                    return -1;
                d->renamed[id] = name;
                d->named++;
            }
        }
        name = d->renamed[id];
        size_t name_len = 0;
        const void *text = name == NO_NAME ? stack + i : kp_strtab_get(d->names, name, &name_len);
        if (name == NO_NAME)
            name_len = j - i;
        any |= name != NO_NAME;
        if ((i && kp_buf_append_char(out, ';') != KP_OK) ||
            kp_buf_append(out, text, name_len) != KP_OK)
            return -1;
        i = j + 1;
    }
    return any;
}

void kp_debug_names_counts(const kp_debug_names *d, size_t *files, size_t *named)
{
    *files = d->found;
    *named = d->named;
}

void kp_debug_names_free(kp_debug_names *d)
{
    if (!d)
        return;
    for (size_t i = 0; i < d->n_files; i++) {
        kp_free(d->files[i].fns);
        if (d->files[i].elf)
            elf_end(d->files[i].elf);
        if (d->files[i].fd >= 0)
            close(d->files[i].fd);
    }
    kp_free(d->files);
    kp_strtab_free(d->frames);
    kp_strtab_free(d->names);
    kp_free(d->renamed);
    kp_buf_free(&d->scratch);
    kp_free(d);
}

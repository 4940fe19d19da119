/* See flame_files.h. */
#include "common/flame_files.h"

#include <errno.h>
#include <stdio.h>

#include "common/cli.h"

int kp_flame_files_save(const kp_folded *folded, const char *dir, const char *name,
                        const kp_flame_options *flame, char *err, size_t err_len)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.folded", dir, name);
    kp_status st = kp_folded_save(folded, path);
    if (st == KP_OK) {
        snprintf(path, sizeof path, "%s/%s.svg", dir, name);
        st = kp_flame_svg_save(folded, flame, path);
    }
    if (st != KP_OK) {
        snprintf(err, err_len, "cannot write %s: %s", path, kp_status_reason(st, errno));
        return -1;
    }
    return 0;
}

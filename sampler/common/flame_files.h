/* A profile's two files side by side: NAME.folded and its flame graph
 * NAME.svg, as every command that writes folded stacks leaves them. */
#ifndef KP_COMMON_FLAME_FILES_H
#define KP_COMMON_FLAME_FILES_H

#include <stddef.h>

#include "kp/flame_svg.h"
#include "kp/folded.h"

/* Writes DIR/NAME.folded and DIR/NAME.svg from `folded`. Returns 0, or -1
 * with "cannot write PATH: REASON" in `err`. */
int kp_flame_files_save(const kp_folded *folded, const char *dir, const char *name,
                        const kp_flame_options *flame, char *err, size_t err_len);

#endif

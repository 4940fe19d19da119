/* The erl_tracer NIF (erlang_agent/c_src/kprof_tracer.c, built as
 * kprof_tracer.so), embedded in the kprof binary by the build
 * (cmake/embed_nif.cmake), so that kprof can bring it into a node on its
 * host that does not have the kprof application (node/nif.h). */
#ifndef KP_NODE_NIF_EMBED_H
#define KP_NODE_NIF_EMBED_H

#include <stddef.h>

extern const unsigned char kp_nif_so[]; /* the .so file's bytes */
extern const size_t kp_nif_so_size;
extern const unsigned char kp_nif_so_md5[16]; /* erlang:md5/1 of those bytes */

#endif

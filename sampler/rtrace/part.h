/* A node's part of another node's request trace (see kprof_rtrace: "Across
 * nodes"): what the processes of this node did for it, sent to the trace's
 * own node and merged there into the trace before it is written.
 *
 * The part is an Erlang term, so that it crosses distribution as is:
 *   {Frames :: [{Symbol :: binary(), Kind :: binary()}],
 *    Stacks :: [[FrameIndex]],                      root (process) first
 *    Intervals :: [{StackIndex, ProcessFrameIndex, StartNs, DurNs}],
 *    Links :: [{FromFrameIndex, ToFrameIndex, TsNs, TsToNs, Message :: 0 | 1}],
 *    Received :: [{ToFrameIndex, SenderNode :: binary(), Num, Serial, TsNs}]}
 * Symbols and kinds are encoded as frame tables keep them (kp/intern.h);
 * times are the part's node's monotonic clock; Received are the messages
 * of the trace its processes took in from other nodes' processes. */
#ifndef KP_RTRACE_PART_H
#define KP_RTRACE_PART_H

#include <ei.h>
#include <stdint.h>

#include "rtrace/collect.h"

/* Encodes a finished part (`done`, whose origin is set) as the term above
 * at buf[*index], advancing *index past it, as ei's encoders do: with `buf`
 * NULL it only counts the bytes, so that the caller sizes the buffer once
 * (an ei_x_buff grows 100 bytes at a time; for a part of 20,000 intervals
 * that was seconds under ASan). Returns 0, or -1 when out of memory. */
int kp_rtrace_part_encode(const kp_rtrace_done *done, char *buf, int *index);

/* Merges the part that node `node` sent of trace `no` (the term at
 * buf[*index], advanced past it), its clock `offset_ns` ahead of this
 * node's within +-`error_ns`, into that trace if it still runs here: its
 * processes become roots NODE:<0.N.S> with their time, their arrows with
 * this node's processes are drawn. Returns 1 when merged, 0 when no such
 * trace runs (the part is dropped), -1 for a malformed part or out of
 * memory (the trace is left as it was, but for what was merged). */
int kp_rtrace_merge_part(kp_rtrace *rtrace, uint32_t no, const char *node, int64_t offset_ns,
                         int64_t error_ns, const char *buf, int *index);

#endif

// Device edges across lanes by stream memory operations (CUDA builds only; gpu/README.md,
// "Value edges"), behind FLOWLANE_GPU_VALUE_EDGES=1. A consumer on another lane does not
// wait for its producer's launch: its stream waits (cuStreamWaitValue64, >=) for a 64-bit
// slot of the producer's stream to reach the producer's seq (Instr::seq), which the
// producer's stream writes after the producer (cuStreamWriteValue64). Both lanes launch at
// their own pace.
//
// Hazards, and what is done about each:
//  - a value wait at the head of a hardware queue holds back every stream on that queue,
//    which could hold back the producer: value edges are used only while the process's
//    flowlane CUDA streams on the device fit its hardware queues (CUDA_DEVICE_MAX_
//    CONNECTIONS, default 8) one each, never for collective streams, and only within one
//    device; otherwise the edge is an ordinary event edge (counted as a fallback);
//  - a producer that is never launched (skipped, cancelled, its launch failed, its stream
//    could not be created) must still release the wait: its lane writes the value on the
//    producer's stream in stream order all the same (release());
//  - the consumer's kernel then runs on a poisoned input: the consumer completes only
//    after its producers have, and is then skipped (poisoned_pred), as are consumers of it;
//  - engine destroy drains, so every producer is reached by its lane and releases.
// Streams of other CUDA users of the process share the hardware queues too: value edges are
// opt-in for that reason.
#pragma once

#include "gpu/cuda.hpp"

namespace flowlane::gpu {

// The driver's stream memory operations could be resolved (cudaGetDriverEntryPointByVersion);
// else why not (for messages).
bool memops_available();

// A device stream state was created / is freed: its slot, and the process-wide count of
// device streams per device that the hardware-queue rule looks at.
void value_stream_created(StreamState* ss);
void value_stream_destroyed(StreamState* ss);

// DeviceBackend::value_edge (recording, under the operands' locks).
bool value_edge(Instr* pred, Instr* succ);

// Lane runner, issuing `i` on `ss` (device current, CUDA stream created): for each
// cross-stream predecessor (Dep::kIssueWait) that has not completed, orders i after it on
// the device — its event when it is issued, else a value wait — and notes whether i must be
// checked at completion (DeviceRecord::check_preds). An error: i->error says which call.
cudaError_t order_after_preds(StreamState* ss, Instr* i);
// Lane runner, right after i's launch succeeded: closes i's gate, and writes i's value on
// its stream if a consumer waits for it.
cudaError_t after_launch(StreamState* ss, Instr* i);
// Lane runner: i will never be launched (skipped, cancelled, failed): a consumer waiting
// for its value is released, in stream order. True when that enqueued a write on i's
// stream: i then completes after it (like work a failing launch left enqueued).
bool release(StreamState* ss, Instr* i);

// Completion of a consumer (DeviceRecord::check_preds): whether every cross-stream
// predecessor has completed; the first input that turned out poisoned, or null.
bool preds_completed(Instr* i);
const Instr* poisoned_pred(Instr* i);

}  // namespace flowlane::gpu

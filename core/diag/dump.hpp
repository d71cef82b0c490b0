// The state dump ("a hang explains itself", docs/design.md): what every lane with pending work is doing, what its
// oldest instruction waits for, the in-flight window, the communicators, and any cycle of
// waits.
//
// The wait-for graph. Nodes are lanes. A lane whose head instruction X is blocked waits for
// the lane of every unfinished predecessor of X (its recorded deps with an edge); a lane
// whose running callback waits in fl_object_wait for writer W waits for W's lane (W behind
// X on the same lane is a self-loop); one whose running callback waits in
// fl_stream_synchronize or fl_instr_wait_for for a stream S that has not reached the target
// waits for S's lane; a lane whose running collective waits for peer ranks
// waits for those ranks' lanes (same engine). Instructions only depend on earlier
// submissions and a lane runs in submission order, so a cycle always goes through at least
// one running wait, and — every wait being an AND of its inputs — a cycle can never resolve:
// it is a deadlock.
//
// Reading the engine while workers run: every record is read under the lane's diag_lock
// with a reference taken, and an instruction's deps are read only while it is the lane's
// blocked head (it cannot start, so complete() cannot be clearing them).
#pragma once

#include <string>

#include "engine/engine.hpp"

namespace flowlane::diag {

using core::Engine;

// The dump text. `reason` (may be empty) is the first line's explanation.
std::string build_dump(Engine& e, const std::string& reason);

// The structured form of the dump's lanes, as JSON members: `,"lanes":[...],"wait_cycles":[...]`.
// Each lane with pending work: {"lane","pending","head":{"instr","name","lane","stream","state",
// "lane_state": BLOCKED | RUNNING | NOT_RUN | COMPLETING, "waits_for":[{"object","writer":{..}} |
// {"call","object","writer"} | {"call"}], "waits_not_shown", "collective_wait"} | null,
// "queued":[{..}], "more_queued"}. Size: at most kQueuedShown + kMaxWaitsShown + 1
// instructions per lane with pending work, and at most 8 cycles (dump_json.cpp).
std::string lanes_json(Engine& e);

// Engine destroy: cancels the waits of running callbacks (fl_object_wait,
// fl_stream_synchronize, fl_instr_wait_for) that lie on a wait cycle (they would never
// return): each returns FL_ERR_CANCELLED. Returns how many were cancelled.
int cancel_cycle_waits(Engine& e);

}  // namespace flowlane::diag

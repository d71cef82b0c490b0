// The state dump ("a hang explains itself", docs/design.md): what every lane with pending work is doing, what its
// oldest instruction waits for, the in-flight window, the communicators, and any cycle of
// waits.
//
// The wait-for graph. Nodes are lanes and task groups. A lane whose head instruction X is
// blocked waits for the lane of every unfinished predecessor of X (its recorded deps with an
// edge); a lane whose running callback waits in fl_object_wait for writer W waits for W's
// lane (W behind X on the same lane is a self-loop); one whose running callback waits in
// fl_stream_synchronize or fl_instr_wait_for for a stream S that has not reached the target
// waits for S's lane, one that waits in fl_task_group_wait(_for) or fl_task_group_destroy
// for group G waits for G; a lane whose running collective waits for peer ranks waits for
// those ranks' lanes (same engine). A group waits for what its tasks' registered waits wait
// for (lanes, groups). Instructions only depend on earlier submissions and a lane runs in
// submission order, so a cycle always goes through at least one running wait, and — every
// wait being an AND of its inputs — a cycle can never resolve: it is a deadlock.
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
// "queued":[{..}], "more_queued"}; each cycle: {"lanes":[1,2],"task_groups":["0x.."],
// "edges":["..."]}. Size: at most kQueuedShown + kMaxWaitsShown + 1 instructions per lane
// with pending work, and at most 8 cycles (dump_json.cpp).
std::string lanes_json(Engine& e);

// fl_engine_drain and engine destroy: gives up the waits that lie on a cycle of waits (they
// would never return): the callbacks' fl_object_wait, fl_stream_synchronize,
// fl_instr_wait_for first, and waits for task groups only when a scan finds none of those;
// each returns FL_ERR_CANCELLED. Wakes again the waits given up earlier that still wait.
// Returns how many it gave up now (cancel_cycles.cpp).
int cancel_cycle_waits(Engine& e);

}  // namespace flowlane::diag

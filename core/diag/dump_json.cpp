// The state dump's structured form (diag/dump.hpp): the lanes with pending work, their heads
// and what those wait for, as JSON members for communicator dumps (comm/README.md, "Dumps").
#include <algorithm>

#include "base/json.hpp"
#include "diag/dump.hpp"
#include "diag/snapshot.hpp"

namespace flowlane::diag {

using core::Instr;
using core::InstrState;
using core::is_terminal;

namespace {

constexpr size_t kMaxNameBytes = 128;   // of an instruction's name
constexpr size_t kMaxTextBytes = 1024;  // of a wait's description

// An instruction: {"instr":7,"name":"grad","lane":1,"stream":"lane 1, host","state":"running"}.
std::string instr_json(const Instr& i) {
  std::string out = "{\"instr\":" + std::to_string(i.id) + ",\"name\":" + json_string(i.name, kMaxNameBytes) +
                    ",\"lane\":" + std::to_string(i.stream->lane->id) + ",\"stream\":" +
                    json_string(i.stream->describe()) + ",\"state\":" + json_string(state_name(i.load_state())) + "}";
  return out;
}

// What a head waits for: {"object":"0x..","writer":{instr...}} (a blocked head's predecessors,
// or fl_object_wait), or {"call":"fl_stream_synchronize (...): ..."}; at most kMaxWaitsShown.
void waits_json(std::string& out, const LaneSnap& ls) {
  out += ",\"waits_for\":[";
  size_t n = 0;
  for (const DepSnap& d : ls.waits) {
    if (n == kMaxWaitsShown) break;
    out += std::string(n++ ? "," : "") + "{\"object\":\"" + hex(d.object) + "\",\"writer\":" + instr_json(*d.pred.i) + "}";
  }
  for (const WaitSnap& w : ls.running_waits) {
    if (n == kMaxWaitsShown) break;
    out += n++ ? "," : "";
    if (w.on.i != nullptr)
      out += "{\"call\":\"fl_object_wait\",\"object\":\"" + hex(w.obj) + "\",\"writer\":" + instr_json(*w.on.i) + "}";
    else
      out += "{\"call\":" + json_string(w.call, kMaxTextBytes) + "}";
  }
  const size_t total = ls.waits.size() + ls.running_waits.size();
  out += "],\"waits_not_shown\":" + std::to_string(total - n);
}

// One lane with pending work.
void lane_json(std::string& out, const LaneSnap& ls) {
  out += "{\"lane\":" + std::to_string(ls.id) + ",\"pending\":" + std::to_string(ls.submitted - ls.completed);
  if (ls.head.i == nullptr) {
    out += ",\"head\":null}";
    return;
  }
  const char* state = ls.blocked ? "BLOCKED" : ls.not_started ? "NOT_RUN" : ls.completing ? "COMPLETING" : "RUNNING";
  std::string head = instr_json(*ls.head.i);
  head.pop_back();  // the head's object goes on
  out += ",\"head\":" + head + ",\"lane_state\":\"" + state + "\"";
  waits_json(out, ls);
  out += ",\"collective_wait\":" + (ls.coll != nullptr ? json_string(ls.coll->what, kMaxTextBytes) : std::string("null")) + "}";
  out += ",\"queued\":[";
  for (size_t q = 0; q < ls.queued.size(); ++q) out += (q ? "," : "") + instr_json(*ls.queued[q].i);
  out += "],\"more_queued\":" + std::string(ls.more_queued ? "true" : "false") + "}";
}

}  // namespace

std::string lanes_json(Engine& e) {
  Snapshot s = take_snapshot(e);
  std::string out = ",\"lanes\":[";
  for (size_t k = 0; k < s.lanes.size(); ++k) {
    out += k ? ",\n" : "\n";
    lane_json(out, s.lanes[k]);
  }
  out += "],\n\"wait_cycles\":[";
  auto cycles = find_cycles(s);
  for (size_t c = 0; c < cycles.size(); ++c) {
    out += c ? "," : "";
    // The lanes on the cycle, and the task groups (their handles) it runs through.
    std::string lanes, groups;
    for (size_t k : cycles[c]) {
      const Node n = s.edges[k].from;
      std::string& to = n.group ? groups : lanes;
      if (!to.empty()) to.push_back(',');
      to.append(n.group ? json_string(hex(n.id)) : std::to_string(n.id));
    }
    out.append("{\"lanes\":[").append(lanes).append("],\"task_groups\":[").append(groups).append("],\"edges\":[");
    for (size_t k = 0; k < cycles[c].size(); ++k) out += (k ? "," : "") + json_string(s.edges[cycles[c][k]].why, kMaxTextBytes);
    out += "]}";
  }
  out += "]";
  return out;
}

}  // namespace flowlane::diag

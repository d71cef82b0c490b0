// What waits for the calling instruction (engine/waits.hpp, Waits::find_waiter;
// core/engine/README.md, "Calls from callbacks"): a wait from its fn or cleanup for any of
// it could only end after the caller returns.
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/engine.hpp"

namespace flowlane::core {

Instr* Waits::find_waiter(const CallbackFrame* frame, fl_instr_id upto,
                           const std::function<bool(const Instr*)>& match, std::string* chain) {
  if (frame == nullptr || frame->instr == nullptr ||
      (frame->kind != CallbackKind::kFn && frame->kind != CallbackKind::kCleanup))
    return nullptr;
  Instr* self = frame->instr;
  // Safe without locks (but for the end of a lane's queue, below): self cannot complete
  // while its fn or cleanup runs, so every instruction reached waits for it, directly or
  // not, and can neither start nor be recycled during the walk; successor lists only grow until their instruction completes
  // (or, for issue lists, is issued) and seals them, and queue links only grow behind an
  // instruction that has not started. Each step goes to a later id (edges point to earlier
  // ids, a lane queues in id order), so nothing above `upto` can lead to a match.
  std::unordered_map<const Instr*, const Instr*> via;  // reached -> what it waits for
  std::vector<Instr*> todo;
  auto reach = [&](Instr* x, const Instr* from) {
    if (x != nullptr && x->id <= upto && via.emplace(x, from).second) todo.push_back(x);
  };
  auto reach_list = [&](const std::atomic<Edge*>& head, const Instr* from) {
    // Acquire pairs with the release CAS that published each edge in push_edge(): the
    // successor's id, stream and name were written before.
    Edge* e = head.load(std::memory_order_acquire);
    if (e == kSealed) return;  // completed or issued: its successors were released
    for (; e != nullptr; e = e->next) reach(e->succ, from);
  };
  auto reach_behind = [&](const Instr* x) {  // the next instruction queued on x's lane
    Lane* lane = x->stream->lane;
    auto next = [stub = &lane->stub](const Instr* p) {
      // Acquire pairs with the release store of the link in Lane::push().
      Instr* n = p->lane_next.load(std::memory_order_acquire);
      while (n == stub) n = n->lane_next.load(std::memory_order_acquire);  // pairs with Lane::push()
      return n;
    };
    Instr* n = next(x);
    if (n == nullptr) {
      // Nothing linked behind x yet, but an instruction of its lane may be recorded (its
      // edges published, so a target may already wait for it) and not yet pushed: its
      // submitter holds the lane's submit lock from recording to push. Taking the lock
      // waits for that push (the holder blocks on nothing the caller holds).
      std::lock_guard<SpinLock> lock(lane->submit_lock);
      n = next(x);
    }
    reach(n, x);
  };
  reach_list(self->succ_head, self);
  reach_list(self->issue_succ_head, self);
  // A host instruction holds up its lane until it completes; a device one only until it is
  // issued, which its fn does (a device instruction's cleanup runs after its lane moved on,
  // unless it was skipped or failed and its lane runner completes it at once: holds_lane).
  if (self->stream->is_host_executed() || frame->kind == CallbackKind::kFn || frame->holds_lane)
    reach_behind(self);
  while (!todo.empty()) {
    Instr* x = todo.back();
    todo.pop_back();
    if (match(x)) {
      if (chain != nullptr) {
        std::vector<const Instr*> path;
        for (const Instr* p = x; p != self; p = via.at(p)) path.push_back(p);
        chain->clear();
        for (auto it = path.rbegin(); it != path.rend(); ++it)
          *chain += (chain->empty() ? "" : " -> ") + (*it)->describe();
      }
      return x;
    }
    reach_list(x->succ_head, x);
    reach_list(x->issue_succ_head, x);
    reach_behind(x);  // not started: its lane waits for it
  }
  return nullptr;
}

}  // namespace flowlane::core

// The failure ledger (engine/ledger.hpp): families of failures, their lists and the
// per-stream outcome history.
#include "engine/ledger.hpp"

#include <algorithm>

#include "base/error.hpp"
#include "engine/engine.hpp"

namespace flowlane::core {

namespace {

void stream_link(StreamFailures& f, Instr* i) {
  i->stream_prev = f.failed_tail;
  i->stream_next = nullptr;
  (f.failed_tail ? f.failed_tail->stream_next : f.failed_head) = i;
  f.failed_tail = i;
}

void stream_unlink(StreamFailures& f, Instr* i) {
  (i->stream_prev ? i->stream_prev->stream_next : f.failed_head) = i->stream_next;
  (i->stream_next ? i->stream_next->stream_prev : f.failed_tail) = i->stream_prev;
  i->stream_prev = i->stream_next = nullptr;
}

// " (3 instructions that depended on it were skipped)"
std::string skipped_note(uint64_t n) {
  if (n == 0) return "";
  return " (" + std::to_string(n) + (n == 1 ? " instruction that depended on it was" : " instructions that depended on it were") +
         " skipped)";
}

// Under the mutex: the remembered failed, skipped or cancelled instruction `id` of s.
Instr* find_outcome(const StreamFailures& f, fl_instr_id id) {
  auto it = std::lower_bound(f.outcomes.begin(), f.outcomes.end(), id,
                             [](const Instr* x, fl_instr_id v) { return x->id < v; });
  return it != f.outcomes.end() && (*it)->id == id ? *it : nullptr;
}

}  // namespace

void FailureLedger::record(Instr* i) {
  std::lock_guard<std::mutex> lock(mu_);
  // The outcome history (fl_instr_query): bounded, oldest dropped.
  StreamFailures& f = i->stream->failures;
  i->ref();
  f.outcomes.push_back(i);
  if (f.outcomes.size() > FL_INSTR_OUTCOME_HISTORY) {
    Instr* old = f.outcomes.front();
    f.outcomes.pop_front();
    f.forgotten_upto = std::max(f.forgotten_upto, old->id);
    if (old->unref()) engine_.recycle(old);
  }
  Instr* root = i->root;
  if (root->returned) {  // its family was returned already (its poison was observed)
    if (root != i) ++root->skipped;
    return;
  }
  i->ref();  // pinned while listed
  i->listed = true;
  stream_link(f, i);
  if (root == i) {
    i->ledger_prev = tail_;
    i->ledger_next = nullptr;
    (tail_ ? tail_->ledger_next : head_) = i;
    tail_ = i;
    ++size_;
  } else {
    ++root->skipped;
    i->next_member = root->next_member;
    root->next_member = i;
  }
}

void FailureLedger::unlink_family(Instr* root) {
  root->returned = true;
  if (root->listed) {
    (root->ledger_prev ? root->ledger_prev->ledger_next : head_) = root->ledger_next;
    (root->ledger_next ? root->ledger_next->ledger_prev : tail_) = root->ledger_prev;
    root->ledger_prev = root->ledger_next = nullptr;
    --size_;
  }
  for (Instr* m = root->next_member; m != nullptr;) {
    Instr* next = m->next_member;
    stream_unlink(m->stream->failures, m);
    m->listed = false;
    m->next_member = nullptr;
    if (m->unref()) engine_.recycle(m);  // a member holds a reference on root: root outlives this loop
    m = next;
  }
  root->next_member = nullptr;
  if (root->listed) {
    stream_unlink(root->stream->failures, root);
    root->listed = false;
    if (root->unref()) engine_.recycle(root);
  }
}

void FailureLedger::family_returned(Instr* root) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!root->returned) unlink_family(root);
}

template <class Pick>
fl_status_t FailureLedger::take(Pick&& pick) {
  fl_status_t st = FL_OK;
  std::string msg;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Instr* member = pick();
    if (member == nullptr) return FL_OK;
    Instr* root = member->root;
    // The message and status are copied under the lock: the family's records may be
    // recycled the moment it is unlinked.
    st = member->status;
    msg = member->error + skipped_note(root->skipped);
    unlink_family(root);
  }
  return report(st, msg);
}

fl_status_t FailureLedger::take_oldest() {
  return take([this]() -> Instr* { return head_; });
}

fl_status_t FailureLedger::take_oldest_before(fl_instr_id before) {
  return take([this, before]() -> Instr* {
    for (Instr* r = head_; r != nullptr; r = r->ledger_next)  // oldest first; usually the head
      if (r->id < before) return r;
    return nullptr;
  });
}

fl_status_t FailureLedger::take_of_stream(Stream* s, uint64_t upto_seq) {
  // The stream's oldest listed member (its list is in completion = submission order).
  return take([s, upto_seq]() -> Instr* {
    Instr* m = s->failures.failed_head;
    return m != nullptr && m->seq <= upto_seq ? m : nullptr;
  });
}

fl_status_t FailureLedger::take_outcome(Stream* s, fl_instr_id id) {
  fl_status_t st = FL_OK;
  std::string msg;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (Instr* x = find_outcome(s->failures, id)) {
      st = x->status;
      msg = x->error + (x->root == x ? skipped_note(x->skipped) : std::string());
      if (!x->root->returned) unlink_family(x->root);  // observed: synchronize will not return it again
    }
  }
  if (st != FL_OK) return report(st, msg);
  return FL_OK;
}

fl_instr_state_t FailureLedger::completed_state(const Stream* s, fl_instr_id id) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (const Instr* x = find_outcome(s->failures, id)) {
    if (x->outcome == InstrState::kSkipped) return FL_INSTR_SKIPPED;
    return x->status == FL_ERR_CANCELLED ? FL_INSTR_CANCELLED : FL_INSTR_FAILED;
  }
  return id <= s->failures.forgotten_upto ? FL_INSTR_COMPLETED : FL_INSTR_DONE;
}

size_t FailureLedger::unreturned(std::string* oldest) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (oldest != nullptr && head_ != nullptr) *oldest = head_->error + skipped_note(head_->skipped);
  return size_;
}

void FailureLedger::clear(const std::vector<Stream*>& streams) {
  std::lock_guard<std::mutex> lock(mu_);
  while (head_ != nullptr) unlink_family(head_);  // failures never returned: dropped
  for (Stream* s : streams) {  // the outcome history
    for (Instr* x : s->failures.outcomes)
      if (x->unref()) engine_.recycle(x);
    s->failures.outcomes.clear();
  }
}

}  // namespace flowlane::core

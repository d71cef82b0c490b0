// libFuzzer target: the input is a sequence of C API calls on small handle tables.
//
// Each step reads an opcode byte and its argument bytes (missing bytes read as 0): create
// and destroy engines, objects, streams, task graphs and task groups; submit host
// instructions with random operands, accesses and flags whose callbacks succeed, fail, wait
// with a timeout or submit follow-ups; waits with timeouts; queries, cancels and drains;
// dumps and stats. Handles are also used stale (after their release), as the wrong type,
// and as arbitrary 64-bit values taken from the input: the library must answer every call
// with a status, never crash, leak or hang. This file never dereferences a handle; it only
// passes values.
//
// Every wait has a bounded timeout and no callback blocks for long, so every input
// terminates; everything still alive is destroyed at the end of the input (leaks are
// reported by ASan).
#include <cstdint>
#include <cstring>
#include <vector>

#include "flowlane/flowlane.h"

namespace {

struct Input {
  const uint8_t* p;
  size_t n;
  uint8_t u8() {
    if (n == 0) return 0;
    --n;
    return *p++;
  }
  uint64_t u64() {
    uint64_t v = 0;
    for (int k = 0; k < 8; ++k) v = (v << 8) | u8();
    return v;
  }
  bool done() const { return n == 0; }
};

constexpr int kEngines = 2, kObjects = 6, kStreams = 6, kGraphs = 2, kGroups = 2, kStale = 8;

struct State {
  fl_engine_t* engines[kEngines] = {};
  fl_object_t* objects[kObjects] = {};
  fl_stream_t* streams[kStreams] = {};
  fl_taskgraph_t* graphs[kGraphs] = {};
  fl_task_group_t* groups[kGroups] = {};
  void* stale[kStale] = {};  // released or destroyed handles of any type
  int stale_next = 0;
  fl_instr_id last_id = 0;
  void remember(void* h) {
    stale[stale_next] = h;
    stale_next = (stale_next + 1) % kStale;
  }
};

// Callbacks. user_data is a small integer code, never a pointer this target owns.
fl_status_t cb_ok(fl_instr_ctx_t*, void*) { return FL_OK; }
fl_status_t cb_fail(fl_instr_ctx_t* ctx, void*) {
  fl_instr_set_error(ctx, "fuzz failure");
  return FL_ERR_INSTRUCTION_FAILED;
}
fl_status_t cb_calls_back(fl_instr_ctx_t* ctx, void*) {
  fl_engine_t* e = fl_instr_engine(ctx);
  fl_engine_stats_t st = FL_ENGINE_STATS_INIT;
  fl_engine_stats(e, &st);
  fl_engine_synchronize_for(e, 100000);  // refused from a callback
  fl_engine_destroy(e);                  // refused from a callback
  fl_stream_t* s = nullptr;
  fl_device_t cpu{FL_DEVICE_CPU, 0};
  if (fl_stream_get(e, fl_instr_lane(ctx), cpu, FL_STREAM_HOST, &s) == FL_OK) {
    fl_stream_synchronize_for(s, 100000);  // own lane: refused
    fl_host_instr_t in = FL_HOST_INSTR_INIT;
    in.fn = &cb_ok;
    fl_submit_host(s, &in, nullptr);  // never blocks from a callback
  }
  return FL_OK;
}
fl_status_t task_ok(void*) { return FL_OK; }
fl_status_t task_fail(void*) { return FL_ERR_INSTRUCTION_FAILED; }
fl_status_t range_ok(uint64_t, uint64_t, void*) { return FL_OK; }

const fl_host_fn kFns[] = {&cb_ok, &cb_fail, &cb_calls_back};

fl_engine_t* pick_engine(State& s, Input& in) {
  uint8_t k = in.u8();
  if (k < 200) return s.engines[k % kEngines];
  if (k < 230) return reinterpret_cast<fl_engine_t*>(s.stale[k % kStale]);
  if (k < 245) return reinterpret_cast<fl_engine_t*>(s.objects[k % kObjects]);  // wrong type
  return reinterpret_cast<fl_engine_t*>(static_cast<uintptr_t>(in.u64()));    // arbitrary value
}
fl_object_t* pick_object(State& s, Input& in) {
  uint8_t k = in.u8();
  if (k < 200) return s.objects[k % kObjects];
  if (k < 230) return reinterpret_cast<fl_object_t*>(s.stale[k % kStale]);
  if (k < 245) return reinterpret_cast<fl_object_t*>(s.streams[k % kStreams]);
  return reinterpret_cast<fl_object_t*>(static_cast<uintptr_t>(in.u64()));
}
fl_stream_t* pick_stream(State& s, Input& in) {
  uint8_t k = in.u8();
  if (k < 200) return s.streams[k % kStreams];
  if (k < 230) return reinterpret_cast<fl_stream_t*>(s.stale[k % kStale]);
  if (k < 245) return reinterpret_cast<fl_stream_t*>(s.engines[k % kEngines]);
  return reinterpret_cast<fl_stream_t*>(static_cast<uintptr_t>(in.u64()));
}
fl_taskgraph_t* pick_graph(State& s, Input& in) {
  uint8_t k = in.u8();
  if (k < 220) return s.graphs[k % kGraphs];
  if (k < 240) return reinterpret_cast<fl_taskgraph_t*>(s.stale[k % kStale]);
  return reinterpret_cast<fl_taskgraph_t*>(s.objects[k % kObjects]);
}
fl_task_group_t* pick_group(State& s, Input& in) {
  uint8_t k = in.u8();
  if (k < 220) return s.groups[k % kGroups];
  if (k < 240) return reinterpret_cast<fl_task_group_t*>(s.stale[k % kStale]);
  return reinterpret_cast<fl_task_group_t*>(s.engines[k % kEngines]);
}
// Short timeouts only: 0 (poll) up to ~1 ms.
uint64_t timeout(Input& in) { return uint64_t(in.u8()) * 4000; }

void step(State& s, Input& in) {
  switch (in.u8() % 24) {
    case 0: {  // create an engine
      int k = in.u8() % kEngines;
      if (s.engines[k] != nullptr) break;
      fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
      d.num_workers = 1 + in.u8() % 2;
      d.max_lanes = in.u8() % 5;
      d.inflight_limit = in.u8() % 9;
      d.flags = in.u8() < 8 ? 1 : 0;  // unknown flags: refused
      fl_engine_create(&d, &s.engines[k]);
      break;
    }
    case 1: {  // destroy an engine (its objects and streams go stale)
      int k = in.u8() % kEngines;
      if (s.engines[k] == nullptr) break;
      fl_engine_t* e = s.engines[k];
      if (fl_engine_destroy(e) == FL_OK) {
        s.remember(e);
        s.engines[k] = nullptr;
        for (auto& o : s.objects) o = nullptr;  // freed by destroy (stale now, if of this engine)
        for (auto& st : s.streams) st = nullptr;
      }
      break;
    }
    case 2: {  // create an object
      int k = in.u8() % kObjects;
      fl_engine_t* e = pick_engine(s, in);
      fl_object_t* o = nullptr;
      if (fl_object_create(e, nullptr, nullptr, &o) == FL_OK) {
        if (s.objects[k] != nullptr && fl_object_release(s.objects[k]) == FL_OK) s.remember(s.objects[k]);
        s.objects[k] = o;
      }
      break;
    }
    case 3: {  // release an object (or anything given as one)
      fl_object_t* o = pick_object(s, in);
      if (fl_object_release(o) == FL_OK) {
        s.remember(o);
        for (auto& x : s.objects)
          if (x == o) x = nullptr;
      }
      break;
    }
    case 4: {  // get a stream (lane, device and kind from the input)
      int k = in.u8() % kStreams;
      fl_engine_t* e = pick_engine(s, in);
      uint32_t lane = in.u8() % 6;
      fl_device_t dev{int32_t(in.u8() % 3), int32_t(in.u8() % 2)};
      fl_stream_t* st = nullptr;
      if (fl_stream_get(e, lane, dev, fl_stream_kind_t(in.u8() % 6), &st) == FL_OK) s.streams[k] = st;
      break;
    }
    case 5:
    case 6:
    case 7: {  // submit a host instruction with operands
      fl_stream_t* st = pick_stream(s, in);
      fl_operand_t ops[4];
      uint8_t n = in.u8() % 5;
      for (uint8_t j = 0; j < n; ++j) ops[j] = fl_operand_t{pick_object(s, in), uint32_t(in.u8() % 5), in.u8() < 4 ? 1u : 0u};
      fl_host_instr_t hi = FL_HOST_INSTR_INIT;
      hi.fn = kFns[in.u8() % 3];
      hi.operands = n ? ops : (in.u8() < 8 ? ops : nullptr);
      hi.num_operands = n;
      hi.flags = in.u8() % 3 == 0 ? FL_SUBMIT_NONBLOCKING : 0;
      hi.name = "fuzz";
      fl_instr_id id = 0;
      if (fl_submit_host(st, &hi, &id) == FL_OK) s.last_id = id;
      break;
    }
    case 8: fl_object_wait_for(pick_object(s, in), in.u8() % 5, timeout(in)); break;
    case 9: fl_stream_synchronize_for(pick_stream(s, in), timeout(in)); break;
    case 10: fl_engine_synchronize_for(pick_engine(s, in), timeout(in)); break;
    case 11: {  // cancels
      uint8_t k = in.u8() % 3;
      if (k == 0) fl_instr_cancel(pick_stream(s, in), s.last_id + in.u8() % 3);
      else if (k == 1) fl_stream_cancel(pick_stream(s, in));
      else fl_engine_cancel(pick_engine(s, in));
      break;
    }
    case 12: {  // queries and waits by id
      uint32_t state = 0;
      fl_stream_t* st = pick_stream(s, in);
      fl_instr_id id = s.last_id > 2 ? s.last_id - in.u8() % 3 : in.u8();
      fl_instr_query(st, id, &state);
      fl_instr_wait_for(st, id, timeout(in));
      break;
    }
    case 13: fl_engine_drain(pick_engine(s, in), timeout(in)); break;
    case 14: {  // task graphs
      int k = in.u8() % kGraphs;
      if (s.graphs[k] == nullptr) {
        fl_taskgraph_create(pick_engine(s, in), &s.graphs[k]);
        break;
      }
      uint64_t node = 0;
      fl_taskgraph_t* g = pick_graph(s, in);
      switch (in.u8() % 4) {
        case 0: fl_taskgraph_add(g, in.u8() % 4 ? &task_ok : &task_fail, nullptr, "t", &node); break;
        case 1: fl_taskgraph_precede(g, in.u8() % 4, in.u8() % 4); break;  // may make a cycle
        case 2: fl_taskgraph_run(g, int64_t(in.u8() % 4) - 1); break;
        case 3:
          if (fl_taskgraph_destroy(g) == FL_OK) {
            s.remember(g);
            for (auto& x : s.graphs)
              if (x == g) x = nullptr;
          }
          break;
      }
      break;
    }
    case 15: {
      uint64_t b = in.u8(), e = b + in.u8() % 64;
      fl_parallel_for(pick_engine(s, in), in.u8() < 8 ? e + 1 : b, e, in.u8() % 8, in.u8() < 8 ? nullptr : &range_ok,
                      nullptr);
      break;
    }
    case 16: {  // task groups
      int k = in.u8() % kGroups;
      if (s.groups[k] == nullptr) {
        fl_task_group_create(pick_engine(s, in), &s.groups[k]);
        break;
      }
      fl_task_group_t* g = pick_group(s, in);
      switch (in.u8() % 4) {
        case 0: fl_task_group_spawn(g, in.u8() % 4 ? &task_ok : &task_fail, nullptr, nullptr); break;
        case 1: fl_task_group_wait(g); break;
        case 3: fl_task_group_wait_for(g, in.u8() % 2 ? 0 : 100'000); break;
        case 2:
          if (fl_task_group_destroy(g) == FL_OK) {
            s.remember(g);
            for (auto& x : s.groups)
              if (x == g) x = nullptr;
          }
          break;
      }
      break;
    }
    case 17: {  // lanes
      fl_engine_t* e = pick_engine(s, in);
      uint32_t lane = 0;
      if (in.u8() % 2) fl_lane_acquire(e, &lane);
      else fl_lane_release(e, in.u8() % 6);
      break;
    }
    case 18: {  // diagnostics
      fl_engine_t* e = pick_engine(s, in);
      fl_engine_stats_t st = FL_ENGINE_STATS_INIT;
      st.struct_size = in.u8() < 16 ? in.u8() : sizeof st;
      fl_engine_stats(e, &st);
      char buf[256];
      uint64_t needed = 0;
      fl_engine_dump(e, in.u8() % 2 ? buf : nullptr, in.u8() % 2 ? sizeof buf : 0, &needed);
      fl_engine_lane_count(e);
      fl_engine_worker_count(e);
      break;
    }
    case 19: {  // stream and object queries
      uint32_t lane = 0;
      fl_device_t dev;
      fl_stream_kind_t kind;
      fl_stream_info(pick_stream(s, in), &lane, &dev, &kind);
      void* ud = nullptr;
      fl_object_user_data(pick_object(s, in), &ud);
      break;
    }
    case 20: {  // the instruction-context calls outside a callback: 0/NULL, never a crash
      auto* ctx = reinterpret_cast<fl_instr_ctx_t*>(static_cast<uintptr_t>(in.u64()));
      fl_instr_lane(ctx);
      fl_instr_get_id(ctx);
      fl_instr_engine(ctx);
      fl_instr_set_error(ctx, "outside");
      break;
    }
    case 21: {  // watchdog on/off (no callback: stderr would flood the fuzzer's output)
      fl_watchdog_desc_t w = FL_WATCHDOG_DESC_INIT;
      w.timeout_ms = 0;
      w.flags = in.u8() < 8 ? 1 : 0;
      fl_engine_set_watchdog(pick_engine(s, in), &w);
      break;
    }
    case 22: fl_engine_synchronize_for(pick_engine(s, in), 0); break;
    case 23: {
      fl_status_t st = fl_status_t(in.u8() % 32);  // any value the enum can hold, known or not
      fl_status_name(st);
      fl_status_string(st);
      fl_last_error_message();
      break;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in{data, size};
  State s;
  for (int steps = 0; !in.done() && steps < 256; ++steps) step(s, in);
  // Teardown: graphs and groups first (a group's destroy waits for its tasks), then engines.
  for (auto* g : s.graphs) fl_taskgraph_destroy(g);
  for (auto* g : s.groups) fl_task_group_destroy(g);
  for (auto* e : s.engines) fl_engine_destroy(e);
  return 0;
}

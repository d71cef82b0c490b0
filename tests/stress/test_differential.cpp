// Randomized differential test: random programs over random lanes and objects, each
// instruction reading its inputs' values and writing a function of them. The engine's
// result must equal running the same program sequentially, for many seeds and worker
// counts. Object values are plain (non-atomic) memory: under ThreadSanitizer a missing
// edge is also reported as a data race.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "test_util.hpp"

namespace {

struct Op {
  uint32_t lane;
  std::vector<std::pair<int, uint32_t>> operands;  // (object index, access)
  bool fail = false;                               // injects a failure
};

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

struct Program {
  std::vector<Op> ops;
  int num_objects;
};

Program random_program(uint64_t seed, int num_ops, int num_objects, uint32_t lanes, bool with_failures) {
  std::mt19937_64 rng(seed);
  Program p{{}, num_objects};
  for (int k = 0; k < num_ops; ++k) {
    Op op;
    op.lane = uint32_t(rng() % lanes);
    int n = 1 + int(rng() % 4);
    for (int t = 0; t < n; ++t) {
      int o = int(rng() % uint64_t(num_objects));
      uint32_t acc = 1 + uint32_t(rng() % 3);
      bool dup = false;
      for (auto& [oo, aa] : op.operands)
        if (oo == o) {
          aa |= acc;
          dup = true;
        }
      if (!dup) op.operands.emplace_back(o, acc);
    }
    op.fail = with_failures && rng() % 97 == 0;
    p.ops.push_back(std::move(op));
  }
  return p;
}

// Value semantics shared by both runs. An object's value is (value, poisoned).
struct State {
  std::vector<uint64_t> value;
  std::vector<uint8_t> poisoned;
};

// Runs one instruction on a state; returns whether it "ran" (not skipped).
bool apply(const Op& op, size_t index, State& s) {
  bool input_poisoned = false;
  uint64_t h = index;
  for (auto [o, acc] : op.operands)
    if (acc & FL_READ) {
      h = mix(h, s.value[o]);
      input_poisoned |= s.poisoned[o] != 0;
    }
  bool failed = input_poisoned || op.fail;
  for (auto [o, acc] : op.operands)
    if (acc & FL_WRITE) {
      s.value[o] = failed ? 0 : mix(h, uint64_t(o));
      s.poisoned[o] = failed ? 1 : 0;
    }
  return !input_poisoned;
}

struct Run {
  const Program* program;
  State* state;
  std::vector<uint8_t>* ran;
};

struct Cookie {
  Run* run;
  size_t index;
};

fl_status_t run_op(fl_instr_ctx_t* ctx, void* ud) {
  auto* c = static_cast<Cookie*>(ud);
  const Op& op = c->run->program->ops[c->index];
  (*c->run->ran)[c->index] = 1;
  // A skipped (poisoned-input) instruction is never called, so here inputs are clean.
  apply(op, c->index, *c->run->state);
  if (op.fail) {
    fl_instr_set_error(ctx, "injected");
    return FL_ERR_INSTRUCTION_FAILED;
  }
  return FL_OK;
}

void check_program(uint64_t seed, uint64_t workers, uint32_t lanes, int num_ops, int num_objects, bool failures) {
  Program p = random_program(seed, num_ops, num_objects, lanes, failures);
  State expect{std::vector<uint64_t>(size_t(num_objects), 0), std::vector<uint8_t>(size_t(num_objects), 0)};
  std::vector<uint8_t> expect_ran(p.ops.size(), 0);
  for (size_t k = 0; k < p.ops.size(); ++k) expect_ran[k] = apply(p.ops[k], k, expect) ? 1 : 0;

  State got{std::vector<uint64_t>(size_t(num_objects), 0), std::vector<uint8_t>(size_t(num_objects), 0)};
  std::vector<uint8_t> ran(p.ops.size(), 0);
  Run run{&p, &got, &ran};
  std::vector<Cookie> cookies(p.ops.size());
  {
    EngineFixture f(workers, lanes, 256);
    std::vector<fl_object_t*> objs(static_cast<size_t>(num_objects));
    for (auto& o : objs) ASSERT_FL_OK(fl_object_create(f.engine, nullptr, nullptr, &o));
    std::vector<fl_stream_t*> streams(lanes);
    for (uint32_t l = 0; l < lanes; ++l) streams[l] = f.host(l);
    std::vector<fl_operand_t> ops;
    for (size_t k = 0; k < p.ops.size(); ++k) {
      cookies[k] = Cookie{&run, k};
      ops.clear();
      for (auto [o, acc] : p.ops[k].operands) ops.push_back(fl_operand_t{objs[size_t(o)], acc, 0});
      fl_host_instr_t in = FL_HOST_INSTR_INIT;
      in.fn = run_op;
      in.user_data = &cookies[k];
      in.operands = ops.data();
      in.num_operands = ops.size();
      ASSERT_FL_OK(fl_submit_host(streams[p.ops[k].lane], &in, nullptr));
    }
    fl_status_t st = fl_engine_synchronize(f.engine);
    if (!failures) {
      EXPECT_EQ(st, FL_OK) << fl_last_error_message();
    }
    // Poison as seen through the API matches the model.
    for (int o = 0; o < num_objects; ++o) {
      fl_status_t ws = fl_object_wait(objs[size_t(o)], FL_READ);
      EXPECT_EQ(ws != FL_OK, expect.poisoned[size_t(o)] != 0) << "object " << o << ": " << fl_last_error_message();
    }
    for (auto* o : objs) fl_object_release(o);
  }
  // Poisoned objects have no defined value in the engine (the writer did not run).
  for (int o = 0; o < num_objects; ++o)
    if (!expect.poisoned[size_t(o)]) {
      ASSERT_EQ(got.value[size_t(o)], expect.value[size_t(o)]) << "seed " << seed << " object " << o;
    }
  ASSERT_EQ(ran, expect_ran) << "seed " << seed << ": the set of skipped instructions differs";
}

class Differential : public ::testing::TestWithParam<uint64_t> {};

TEST_P(Differential, RandomProgramsMatchSequentialExecution) {
  const uint64_t workers = GetParam();
  const int seeds = int(fl_scaled(12, 3));
  const int num_ops = int(fl_scaled(4000, 800));
  for (int s = 0; s < seeds; ++s) {
    uint64_t seed = 1000 * workers + uint64_t(s);
    check_program(seed, workers, 1 + uint32_t(seed % 8), num_ops, 6 + int(seed % 40), false);
  }
}

TEST_P(Differential, RandomProgramsWithFailuresPoisonExactlyLikeTheModel) {
  const uint64_t workers = GetParam();
  const int seeds = int(fl_scaled(8, 2));
  const int num_ops = int(fl_scaled(3000, 600));
  for (int s = 0; s < seeds; ++s) {
    uint64_t seed = 777 + 1000 * workers + uint64_t(s);
    check_program(seed, workers, 2 + uint32_t(seed % 6), num_ops, 5 + int(seed % 20), true);
  }
}

// --- with programs: parts of the random program captured once and launched many times -----
//
// A step is an eager instruction or a launch of one of a few programs (each a random list of
// instructions captured at the start). The model runs a launch as its instructions in order
// at the launch's place (a launch is one instruction: its accesses are recorded atomically
// with respect to every other submission), with eager poisoning inside; a launch in which
// anything failed or was skipped then poisons every object its program writes (the engine
// keeps poison per instruction, and the launch is one).

struct Step {
  int program = -1;  // -1: an eager instruction (Program::ops[index]); else a launch of it
  uint32_t lane = 0;
  size_t index = 0;  // eager: its op's index in `eager`
};

struct WithLaunches {
  std::vector<Op> eager;
  std::vector<std::vector<Op>> programs;
  std::vector<Step> steps;
  int num_objects;
};

WithLaunches random_with_launches(uint64_t seed, int num_steps, int num_objects, uint32_t lanes, bool failures) {
  std::mt19937_64 rng(seed ^ 0x5bd1e995u);
  WithLaunches w;
  w.num_objects = num_objects;
  const int nprog = 1 + int(rng() % 3);
  for (int p = 0; p < nprog; ++p) {
    Program pr = random_program(seed * 31 + uint64_t(p), 1 + int(rng() % 40), num_objects, lanes, failures);
    w.programs.push_back(pr.ops);
  }
  Program eager = random_program(seed * 17 + 5, num_steps, num_objects, lanes, failures);
  for (int k = 0; k < num_steps; ++k) {
    Step st;
    st.lane = uint32_t(rng() % lanes);
    if (rng() % 4 == 0) {
      st.program = int(rng() % uint64_t(nprog));
    } else {
      st.index = w.eager.size();
      w.eager.push_back(eager.ops[size_t(k)]);
    }
    w.steps.push_back(st);
  }
  return w;
}

// Index of an op for apply()'s value function: eager ops by their index, program ops apart.
size_t program_op_index(int program, size_t node) { return 1000000 + size_t(program) * 10000 + node; }

struct LaunchRun {
  const std::vector<Op>* ops;
  State* state;
  std::vector<int>* ran;  // per op: times its function ran
};
struct LaunchCookie {
  LaunchRun* run;
  size_t op;         // index into ops and ran
  size_t value_index;
};

fl_status_t run_launch_op(fl_instr_ctx_t* ctx, void* ud) {
  auto* c = static_cast<LaunchCookie*>(ud);
  const Op& op = (*c->run->ops)[c->op];
  ++(*c->run->ran)[c->op];
  apply(op, c->value_index, *c->run->state);
  if (op.fail) {
    fl_instr_set_error(ctx, "injected");
    return FL_ERR_INSTRUCTION_FAILED;
  }
  return FL_OK;
}

void check_with_launches(uint64_t seed, uint64_t workers, uint32_t lanes, int num_steps, int num_objects,
                         bool failures) {
  WithLaunches w = random_with_launches(seed, num_steps, num_objects, lanes, failures);
  // The model: every op's runs counted (eager ones and each program node's).
  std::vector<std::vector<int>> expect_prog_ran(w.programs.size());
  for (size_t p = 0; p < w.programs.size(); ++p) expect_prog_ran[p].assign(w.programs[p].size(), 0);
  std::vector<int> expect_eager_ran(w.eager.size(), 0);
  State expect{std::vector<uint64_t>(size_t(num_objects), 0), std::vector<uint8_t>(size_t(num_objects), 0)};
  for (const Step& st : w.steps) {
    if (st.program < 0) {
      expect_eager_ran[st.index] = apply(w.eager[st.index], st.index, expect) ? 1 : 0;
      continue;
    }
    bool trouble = false;
    const std::vector<Op>& ops = w.programs[size_t(st.program)];
    for (size_t k = 0; k < ops.size(); ++k) {
      const bool ran = apply(ops[k], program_op_index(st.program, k), expect);
      expect_prog_ran[size_t(st.program)][k] += ran ? 1 : 0;
      trouble |= !ran || ops[k].fail;
    }
    if (trouble)
      for (const Op& op : ops)
        for (auto [o, acc] : op.operands)
          if (acc & FL_WRITE) {
            expect.poisoned[size_t(o)] = 1;
            expect.value[size_t(o)] = 0;
          }
  }

  State got{std::vector<uint64_t>(size_t(num_objects), 0), std::vector<uint8_t>(size_t(num_objects), 0)};
  std::vector<int> eager_ran(w.eager.size(), 0);
  std::vector<std::vector<int>> prog_ran(w.programs.size());
  Program eager_program{w.eager, num_objects};
  std::vector<uint8_t> eager_ran8(w.eager.size(), 0);
  Run eager_run{&eager_program, &got, &eager_ran8};
  std::vector<Cookie> cookies(w.eager.size());
  std::vector<LaunchRun> launch_runs(w.programs.size());
  std::vector<std::vector<LaunchCookie>> launch_cookies(w.programs.size());
  {
    EngineFixture f(workers, lanes, 256);
    std::vector<fl_object_t*> objs(static_cast<size_t>(num_objects));
    for (auto& o : objs) ASSERT_FL_OK(fl_object_create(f.engine, nullptr, nullptr, &o));
    std::vector<fl_stream_t*> streams(lanes);
    for (uint32_t l = 0; l < lanes; ++l) streams[l] = f.host(l);
    auto submit = [&](const Op& op, fl_host_fn fn, void* ud) {
      std::vector<fl_operand_t> ops;
      for (auto [o, acc] : op.operands) ops.push_back(fl_operand_t{objs[size_t(o)], acc, 0});
      fl_host_instr_t in = FL_HOST_INSTR_INIT;
      in.fn = fn;
      in.user_data = ud;
      in.operands = ops.data();
      in.num_operands = ops.size();
      ASSERT_FL_OK(fl_submit_host(streams[op.lane], &in, nullptr));
    };
    std::vector<fl_program_t*> programs;
    for (size_t p = 0; p < w.programs.size(); ++p) {
      prog_ran[p].assign(w.programs[p].size(), 0);
      launch_runs[p] = LaunchRun{&w.programs[p], &got, &prog_ran[p]};
      launch_cookies[p].resize(w.programs[p].size());
      ASSERT_FL_OK(fl_capture_begin(f.engine, nullptr));
      for (size_t k = 0; k < w.programs[p].size(); ++k) {
        launch_cookies[p][k] = LaunchCookie{&launch_runs[p], k, program_op_index(int(p), k)};
        submit(w.programs[p][k], run_launch_op, &launch_cookies[p][k]);
      }
      fl_program_t* prog = nullptr;
      ASSERT_FL_OK(fl_capture_end(f.engine, &prog));
      programs.push_back(prog);
    }
    for (const Step& st : w.steps) {
      if (st.program < 0) {
        cookies[st.index] = Cookie{&eager_run, st.index};
        submit(w.eager[st.index], run_op, &cookies[st.index]);
      } else {
        ASSERT_FL_OK(fl_program_launch(programs[size_t(st.program)], streams[st.lane], 0, nullptr));
      }
    }
    fl_status_t st = fl_engine_synchronize(f.engine);
    if (!failures) {
      EXPECT_EQ(st, FL_OK) << fl_last_error_message();
    }
    for (int o = 0; o < num_objects; ++o) {
      fl_status_t ws = fl_object_wait(objs[size_t(o)], FL_READ);
      EXPECT_EQ(ws != FL_OK, expect.poisoned[size_t(o)] != 0) << "seed " << seed << " object " << o << ": "
                                                               << fl_last_error_message();
    }
    for (fl_program_t* p : programs) ASSERT_FL_OK(fl_program_destroy(p));
    for (auto* o : objs) fl_object_release(o);
  }
  for (int o = 0; o < num_objects; ++o)
    if (!expect.poisoned[size_t(o)]) {
      ASSERT_EQ(got.value[size_t(o)], expect.value[size_t(o)]) << "seed " << seed << " object " << o;
    }
  for (size_t k = 0; k < w.eager.size(); ++k)
    eager_ran[k] = eager_ran8[k];
  ASSERT_EQ(eager_ran, expect_eager_ran) << "seed " << seed << ": the eager instructions that ran differ";
  ASSERT_EQ(prog_ran, expect_prog_ran) << "seed " << seed << ": the replayed instructions that ran differ";
}

TEST_P(Differential, RandomProgramsWithLaunchesMatchSequentialExecution) {
  const uint64_t workers = GetParam();
  const int seeds = int(fl_scaled(10, 3));
  const int num_steps = int(fl_scaled(1500, 300));
  for (int s = 0; s < seeds; ++s) {
    uint64_t seed = 5000 + 1000 * workers + uint64_t(s);
    check_with_launches(seed, workers, 1 + uint32_t(seed % 8), num_steps, 4 + int(seed % 20), false);
  }
}

TEST_P(Differential, RandomProgramsWithLaunchesAndFailuresPoisonExactlyLikeTheModel) {
  const uint64_t workers = GetParam();
  const int seeds = int(fl_scaled(8, 2));
  const int num_steps = int(fl_scaled(1500, 300));
  for (int s = 0; s < seeds; ++s) {
    uint64_t seed = 9000 + 1000 * workers + uint64_t(s);
    check_with_launches(seed, workers, 2 + uint32_t(seed % 6), num_steps, 4 + int(seed % 12), true);
  }
}

INSTANTIATE_TEST_SUITE_P(Workers, Differential, ::testing::Values(1, 2, 3, 4, 8),
                         [](const auto& info) { return std::to_string(info.param) + "workers"; });  // (not "w" + ...: GCC 12 false -Wrestrict)

// Many threads submitting to shared objects at once: per object, each submitter's writes
// are serialised; the final count is exact.
TEST(ConcurrentSubmission, ManyThreadsManyLanesSharedObjects) {
  EngineFixture f(4, 8, 512);
  const int kThreads = 4;
  const int kPerThread = int(fl_scaled(20000, 2000));
  fl_object_t* shared = nullptr;
  ASSERT_FL_OK(fl_object_create(f.engine, nullptr, nullptr, &shared));
  uint64_t counter = 0;  // plain: protected only by the engine's WAW ordering
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      fl_stream_t* s = f.host(uint32_t(t + 1));
      for (int k = 0; k < kPerThread; ++k) {
        fl_operand_t op{shared, FL_READ_WRITE, 0};
        fl_host_instr_t in = FL_HOST_INSTR_INIT;
        in.fn = [](fl_instr_ctx_t*, void* ud) {
          ++*static_cast<uint64_t*>(ud);
          return FL_OK;
        };
        in.user_data = &counter;
        in.operands = &op;
        in.num_operands = 1;
        if (fl_submit_host(s, &in, nullptr) != FL_OK) ADD_FAILURE() << fl_last_error_message();
      }
    });
  for (auto& th : threads) th.join();
  ASSERT_FL_OK(fl_object_wait(shared, FL_WRITE));
  EXPECT_EQ(counter, uint64_t(kThreads) * uint64_t(kPerThread));
  ASSERT_FL_OK(fl_object_release(shared));
}

// Serializable with launches mixed in: threads capture programs (while the others already
// submit eagerly to the same objects), then interleave launches with eager instructions.
// Every instruction appends (thread, step) to the log of each object it writes; the logs are
// plain vectors ordered by the engine only. A launch is one instruction: on every object,
// the entries of its inner instructions that write it come in one run, in capture order,
// and each thread's entries keep its submission order.
TEST(ConcurrentSubmission, LaunchesAmongEagerSubmissionsAreSerializable) {
  constexpr int kThreads = 4;
  constexpr int kObjects = 3;
  constexpr int kSteps = 3;  // inner instructions of each thread's program
  const int rounds = int(fl_scaled(400, 60));
  EngineFixture f(3, 8, 256);
  fl_object_t* objs[kObjects];
  for (auto& o : objs) ASSERT_FL_OK(fl_object_create(f.engine, nullptr, nullptr, &o));
  struct Entry {
    int thread, step;  // step -1: an eager instruction
    bool operator==(const Entry& e) const { return thread == e.thread && step == e.step; }
  };
  std::vector<Entry> logs[kObjects];  // plain: ordered by the engine only
  struct Cookie {
    std::vector<Entry>* logs;
    std::vector<int> writes;  // object indices
    Entry entry;
  };
  std::vector<std::unique_ptr<Cookie>> cookies[kThreads];
  // What each thread expects on each object, in its submission order.
  std::vector<Entry> expected[kThreads][kObjects];
  auto fn = [](fl_instr_ctx_t*, void* ud) -> fl_status_t {
    auto* c = static_cast<Cookie*>(ud);
    for (int o : c->writes) c->logs[o].push_back(c->entry);
    if (c->entry.step >= 0) {  // an inner instruction lasts a little: room for an intruder, were there one
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(5);
      while (std::chrono::steady_clock::now() < until) {
      }
    }
    return FL_OK;
  };
  auto submit = [&](fl_stream_t* s, Cookie* c) {
    std::vector<fl_operand_t> ops;
    for (int o : c->writes) ops.push_back(fl_operand_t{objs[o], FL_READ_WRITE, 0});
    fl_host_instr_t in = FL_HOST_INSTR_INIT;
    in.fn = fn;
    in.user_data = c;
    in.operands = ops.data();
    in.num_operands = ops.size();
    return fl_submit_host(s, &in, nullptr);
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      std::mt19937 rng(uint32_t(t) * 7919u + 1);
      auto cookie = [&](std::vector<int> w, int step) {
        cookies[t].push_back(std::make_unique<Cookie>(Cookie{logs, std::move(w), Entry{t, step}}));
        return cookies[t].back().get();
      };
      // The program: kSteps instructions on three lanes, each writing one or two objects.
      std::vector<Entry> per_launch[kObjects];
      ASSERT_FL_OK(fl_capture_begin(f.engine, nullptr));
      for (int k = 0; k < kSteps; ++k) {
        std::vector<int> w{int(rng() % kObjects)};
        if (rng() % 2) w.push_back((w[0] + 1) % kObjects);
        for (int o : w) per_launch[o].push_back(Entry{t, k});
        ASSERT_FL_OK(submit(f.host(uint32_t(1 + (t + k) % 3)), cookie(w, k)));
      }
      fl_program_t* p = nullptr;
      ASSERT_FL_OK(fl_capture_end(f.engine, &p));
      for (int r = 0; r < rounds; ++r) {
        if (rng() % 2) {
          ASSERT_FL_OK(fl_program_launch(p, f.host(uint32_t(4 + t)), 0, nullptr));
          for (int o = 0; o < kObjects; ++o)
            expected[t][o].insert(expected[t][o].end(), per_launch[o].begin(), per_launch[o].end());
        } else {
          const int o = int(rng() % kObjects);
          ASSERT_FL_OK(submit(f.host(uint32_t(4 + t)), cookie({o}, -1)));
          expected[t][o].push_back(Entry{t, -1});
        }
      }
      ASSERT_FL_OK(fl_program_destroy(p));
    });
  for (auto& th : threads) th.join();
  ASSERT_FL_OK(fl_engine_synchronize(f.engine));
  for (int o = 0; o < kObjects; ++o) {
    const std::vector<Entry>& log = logs[o];
    // Each thread's entries, in log order, are its submissions' in its order.
    for (int t = 0; t < kThreads; ++t) {
      std::vector<Entry> mine;
      for (const Entry& e : log)
        if (e.thread == t) mine.push_back(e);
      ASSERT_TRUE(mine == expected[t][o]) << "object " << o << ", thread " << t << ": order differs";
    }
    // A launch's entries on the object come in one run: an inner entry that is not its
    // program's first on this object follows the previous inner entry of the same thread.
    for (size_t x = 0; x < log.size(); ++x) {
      const Entry& e = log[x];
      if (e.step < 0) continue;
      bool first = true;  // the first inner step of its program that writes o
      for (const Entry& y : expected[e.thread][o])
        if (y.step >= 0) {
          first = y.step == e.step;
          break;
        }
      if (!first) {
        ASSERT_GT(x, 0u);
        EXPECT_EQ(log[x - 1].thread, e.thread) << "object " << o << ": another thread's entry inside a launch at " << x;
        EXPECT_TRUE(log[x - 1].step >= 0 && log[x - 1].step < e.step) << "object " << o << " entry " << x;
      }
    }
  }
  for (auto* o : objs) ASSERT_FL_OK(fl_object_release(o));
}

}  // namespace

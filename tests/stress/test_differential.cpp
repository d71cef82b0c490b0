// Randomized differential test: random programs over random lanes and objects, each
// instruction reading its inputs' values and writing a function of them. The engine's
// result must equal running the same program sequentially, for many seeds and worker
// counts. Object values are plain (non-atomic) memory: under ThreadSanitizer a missing
// edge is also reported as a data race.
#include <cstdint>
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

}  // namespace

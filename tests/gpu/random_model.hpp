// The randomized cross-stream model test's work, drawn once for both of its runs: against
// the fake runtime (tests/gpu/fake/fake_test_util.hpp, fakegpu::random_work) and on a real
// GPU (tests/gpu/test_gpu_model.cpp). Each step is dst = (dst * 31 + src + c) mod 1000003
// over 6 objects, on one of 4 lanes, one in 8 a host instruction; `model` is what
// sequential execution leaves. The engine must order every read-after-write,
// write-after-read and write-after-write through stream order, events, value waits and
// completion for the runs to end with the model's values.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace randmodel {

constexpr int kObjects = 6;

inline int mix(int dst, int src, int c) { return int((int64_t(dst) * 31 + src + c) % 1000003); }

struct Step {
  int dst = 0, src = 0, c = 0;
  uint32_t lane = 1;    // 1..4
  bool hold = false;    // first hold `lane` with a new gate (a host instruction that waits)
  bool host = false;    // a host instruction; else a kernel
  bool dawdle = false;  // the kernel dawdles on its stream first (a missing wait then shows)
  bool h2d = false;     // the kernel goes to the lane's H2D stream, else to its compute stream
  int open = -1;        // after the kernel, open the gate with this index (in order of holding)
};

struct Plan {
  std::vector<Step> steps;
  std::vector<int> initial, model;  // the objects' values before and after
};

// `ops` steps from `seed`: with `gates`, one CUDA stream per lane and lanes held now and then
// (so that other lanes run ahead of them); without, two CUDA streams per lane.
inline Plan random_plan(uint32_t seed, int ops, bool gates) {
  std::mt19937 rng(seed);
  Plan p;
  for (int k = 0; k < kObjects; ++k) p.initial.push_back(k + 1);
  p.model = p.initial;
  int held = 0;
  for (int n = 0; n < ops; ++n) {
    Step s;
    s.dst = int(rng() % kObjects);
    s.src = int(rng() % kObjects);
    s.c = int(rng() % 1000);
    s.lane = 1 + rng() % 4;
    if (gates && rng() % 200 == 0) {
      s.hold = true;
      ++held;
    }
    p.model[s.dst] = mix(p.model[s.dst], p.model[s.src], s.c);
    s.host = rng() % 8 == 0;
    if (!s.host) {
      s.dawdle = rng() % 16 == 0;
      s.h2d = !gates && rng() % 2;
      if (held > 0 && rng() % 64 == 0) s.open = int(rng() % held);
    }
    p.steps.push_back(s);
  }
  return p;
}

}  // namespace randmodel

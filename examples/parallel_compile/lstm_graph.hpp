// A toy graph compiler with real per-op work, run as a flowlane task graph through the
// public C API. Shared by examples/parallel_compile/main.cpp and bench/bench_pool.cpp.
//
// The op graph is an LSTM stack unrolled over seq_len steps: per step an embedding
// lookup, then for each of kLayers layers one LSTM cell (two matmuls per gate, bias adds,
// activations, the cell and hidden state updates), then an output projection and a loss
// term; the step losses are summed. Cell (layer l, step t) reads h/c of (l, t-1) and h of
// (l-1, t), so the graph is a wavefront with intra-cell fan-out.
//
// "Compiling" one op: shape inference over its inputs (with checks), a small memory plan
// (size class, alignment, strides, arena offset) and a digest of its attributes and its
// inputs' digests. Each op's result depends only on its inputs' results, so every thread
// count must produce the same digest.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "flowlane/flowlane.h"

namespace lstm {

enum class Kind : uint8_t { Input, Embed, MatMul, Add, BiasAdd, Sigmoid, Tanh, Mul, Concat, Project, Loss, Sum };

inline const char* kind_name(Kind k) {
  static const char* names[] = {"input", "embed", "matmul", "add", "bias_add", "sigmoid",
                                "tanh",  "mul",   "concat", "project", "loss", "sum"};
  return names[static_cast<int>(k)];
}

constexpr int kLayers = 12;
constexpr int64_t kBatch = 32;
constexpr int64_t kHidden = 512;
constexpr int64_t kVocab = 32000;

struct Op {
  Kind kind = Kind::Input;
  std::vector<uint32_t> inputs;
  std::array<int64_t, 4> attr{};  // kind-specific: weight dims, axis, ...
  std::string name;
  // Compile results (written by the op's task only).
  std::array<int64_t, 4> shape{};  // rank-2 shapes here; [rows, cols, 0, 0]
  int64_t bytes = 0;
  int64_t offset = 0;               // arena offset from the memory plan
  std::array<int64_t, 2> strides{};
  uint64_t digest = 0;
  bool ok = true;
};

struct Graph {
  std::vector<Op> ops;
  size_t edges = 0;

  uint32_t add(Kind k, std::vector<uint32_t> in, std::array<int64_t, 4> attr, std::string name) {
    Op op;
    op.kind = k;
    edges += in.size();
    op.inputs = std::move(in);
    op.attr = attr;
    op.name = std::move(name);
    ops.push_back(std::move(op));
    return uint32_t(ops.size() - 1);
  }
};

// Builds the unrolled LSTM: 2 + seq_len * (2 + kLayers * 25 + 3) ops, about 90k at 300.
inline Graph build(int seq_len) {
  Graph g;
  g.ops.reserve(size_t(seq_len) * (kLayers * 25 + 6) + 4);
  uint32_t h0 = g.add(Kind::Input, {}, {kBatch, kHidden, 0, 0}, "h0");
  uint32_t c0 = g.add(Kind::Input, {}, {kBatch, kHidden, 0, 0}, "c0");
  std::vector<uint32_t> h(kLayers, h0), c(kLayers, c0);
  uint32_t total = UINT32_MAX;
  for (int t = 0; t < seq_len; ++t) {
    std::string ts("t");  // not "t" + to_string(t): GCC 12 warns falsely (-Wrestrict, PR 105329)
    ts += std::to_string(t);
    uint32_t tok = g.add(Kind::Input, {}, {kBatch, 1, 0, 0}, ts + ".tokens");
    uint32_t x = g.add(Kind::Embed, {tok}, {kVocab, kHidden, 0, 0}, ts + ".embed");
    for (int l = 0; l < kLayers; ++l) {
      std::string p = ts + ".l" + std::to_string(l) + ".";
      uint32_t gate[4];
      const char* gn[4] = {"i", "f", "g", "o"};
      for (int k = 0; k < 4; ++k) {
        uint32_t wx = g.add(Kind::MatMul, {x}, {kHidden, kHidden, k, 0}, p + gn[k] + ".wx");
        uint32_t uh = g.add(Kind::MatMul, {h[l]}, {kHidden, kHidden, k, 1}, p + gn[k] + ".uh");
        uint32_t s = g.add(Kind::Add, {wx, uh}, {}, p + gn[k] + ".sum");
        uint32_t b = g.add(Kind::BiasAdd, {s}, {kHidden, 0, 0, 0}, p + gn[k] + ".bias");
        gate[k] = g.add(k == 2 ? Kind::Tanh : Kind::Sigmoid, {b}, {}, p + gn[k]);
      }
      uint32_t fc = g.add(Kind::Mul, {gate[1], c[l]}, {}, p + "f*c");
      uint32_t ig = g.add(Kind::Mul, {gate[0], gate[2]}, {}, p + "i*g");
      uint32_t cn = g.add(Kind::Add, {fc, ig}, {}, p + "c");
      uint32_t tc = g.add(Kind::Tanh, {cn}, {}, p + "tanh(c)");
      uint32_t hn = g.add(Kind::Mul, {gate[3], tc}, {}, p + "h");
      h[l] = hn;
      c[l] = cn;
      x = hn;
    }
    uint32_t cat = g.add(Kind::Concat, {h[kLayers - 1], h[kLayers / 2]}, {1, 0, 0, 0}, ts + ".concat");
    uint32_t logits = g.add(Kind::Project, {cat}, {2 * kHidden, kVocab, 0, 0}, ts + ".logits");
    uint32_t loss = g.add(Kind::Loss, {logits, tok}, {}, ts + ".loss");
    total = total == UINT32_MAX ? loss : g.add(Kind::Sum, {total, loss}, {}, ts + ".total");
  }
  return g;
}

// ---- compiling one op -----------------------------------------------------------------

inline uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  h *= 0xff51afd7ed558ccdull;
  return h ^ (h >> 33);
}

// Shape inference, memory plan, digest. Returns false on an inconsistent graph.
inline bool compile_op(Graph& g, uint32_t id) {
  Op& op = g.ops[id];
  auto in = [&](size_t k) -> const Op& { return g.ops[op.inputs[k]]; };
  int64_t rows = 0, cols = 0;
  bool ok = true;
  for (uint32_t i : op.inputs) ok = ok && g.ops[i].ok;
  switch (op.kind) {
    case Kind::Input: rows = op.attr[0]; cols = op.attr[1]; break;
    case Kind::Embed: rows = in(0).shape[0]; cols = op.attr[1]; ok = ok && in(0).shape[1] == 1; break;
    case Kind::MatMul:
    case Kind::Project:
      rows = in(0).shape[0];
      cols = op.attr[1];
      ok = ok && in(0).shape[1] == op.attr[0];
      break;
    case Kind::Add:
    case Kind::Mul:
      rows = std::max(in(0).shape[0], in(1).shape[0]);
      cols = std::max(in(0).shape[1], in(1).shape[1]);
      for (int k = 0; k < 2; ++k)  // broadcasting rule: equal or 1
        ok = ok && (in(size_t(k)).shape[0] == rows || in(size_t(k)).shape[0] == 1) &&
             (in(size_t(k)).shape[1] == cols || in(size_t(k)).shape[1] == 1);
      break;
    case Kind::BiasAdd: rows = in(0).shape[0]; cols = in(0).shape[1]; ok = ok && cols == op.attr[0]; break;
    case Kind::Sigmoid:
    case Kind::Tanh: rows = in(0).shape[0]; cols = in(0).shape[1]; break;
    case Kind::Concat:
      rows = in(0).shape[0];
      cols = in(0).shape[1] + in(1).shape[1];
      ok = ok && in(0).shape[0] == in(1).shape[0];
      break;
    case Kind::Loss: rows = 1; cols = 1; ok = ok && in(0).shape[0] == in(1).shape[0]; break;
    case Kind::Sum: rows = 1; cols = 1; break;
  }
  op.shape = {rows, cols, 0, 0};

  // Memory plan: fp32, rows padded to 64-byte lines, size classes of powers of two split
  // in quarters; the arena offset is a deterministic function of the op's bucket.
  int64_t row_bytes = ((cols * 4 + 63) / 64) * 64;
  int64_t bytes = rows * row_bytes;
  int64_t cls = 64;
  while (cls < bytes) cls <<= 1;
  int64_t quarter = cls / 4;
  int64_t rounded = ((bytes + quarter - 1) / quarter) * quarter;
  op.bytes = rounded;
  op.strides = {row_bytes / 4, 1};
  op.offset = int64_t(mix(uint64_t(rounded), id) % (1ull << 30)) & ~int64_t(255);

  // Digest: the op's kind, attributes, name and shape, then its inputs' digests in order.
  // Attribute hashing is iterated to stand in for canonicalizing a real attribute map.
  uint64_t h = mix(0x1234567ull, uint64_t(op.kind));
  for (int round = 0; round < 160; ++round)
    for (int64_t a : op.attr) h = mix(h, uint64_t(a) + uint64_t(round));
  for (char ch : op.name) h = mix(h, uint64_t(uint8_t(ch)));
  h = mix(mix(h, uint64_t(rows)), uint64_t(cols));
  h = mix(mix(h, uint64_t(op.bytes)), uint64_t(op.offset));
  for (uint32_t i : op.inputs) h = mix(h, g.ops[i].digest);
  op.digest = h;
  op.ok = ok;
  return ok;
}

// The compiled result of the whole graph, for comparing runs.
inline uint64_t digest(const Graph& g) {
  uint64_t h = 0;
  for (const Op& op : g.ops) h = mix(h, op.digest ^ uint64_t(op.offset) ^ (op.ok ? 0 : 1));
  return h;
}

inline void reset(Graph& g) {
  for (Op& op : g.ops) {
    op.shape = {};
    op.bytes = op.offset = 0;
    op.digest = 0;
    op.ok = true;
  }
}

// ---- the task graph (public C API) ----------------------------------------------------

struct TaskCtx {
  Graph* graph;
  uint32_t id;
};

inline fl_status_t compile_task(void* user_data) {
  auto* t = static_cast<TaskCtx*>(user_data);
  return compile_op(*t->graph, t->id) ? FL_OK : FL_ERR_INVALID_ARGUMENT;
}

// One fl_taskgraph node per op, one edge per producer -> consumer. `ctx` must outlive the
// graph. Returns the first failing status.
inline fl_status_t make_taskgraph(fl_engine_t* engine, Graph& g, std::vector<TaskCtx>& ctx,
                                  fl_taskgraph_t** out) {
  fl_taskgraph_t* tg = nullptr;
  fl_status_t s = fl_taskgraph_create(engine, &tg);
  if (s != FL_OK) return s;
  ctx.resize(g.ops.size());
  for (uint32_t i = 0; i < g.ops.size(); ++i) {
    ctx[i] = {&g, i};
    uint64_t node = 0;
    s = fl_taskgraph_add(tg, compile_task, &ctx[i], g.ops[i].name.c_str(), &node);
    if (s != FL_OK) break;
  }
  for (uint32_t i = 0; s == FL_OK && i < g.ops.size(); ++i)
    for (uint32_t p : g.ops[i].inputs) {
      s = fl_taskgraph_precede(tg, p, i);
      if (s != FL_OK) break;
    }
  if (s != FL_OK) {
    fl_taskgraph_destroy(tg);
    return s;
  }
  *out = tg;
  return FL_OK;
}

}  // namespace lstm

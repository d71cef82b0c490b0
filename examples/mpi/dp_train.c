/* Data-parallel training across processes with flowlane over MPI (run under mpirun).
 *
 *   mpirun -np 4 dp_train [--layers 4] [--width 64] [--batch 8] [--steps 20] [--work-us 2000]
 *
 * Every rank holds a replica of an L-layer model and a shard of each batch. A step is, per
 * rank: forward F_0..F_{L-1} and backward B_{L-1}..B_0 on lane 0; as soon as B_l has written
 * layer l's gradient, an all-reduce of it (fl_submit_collective on lane 1's COLLECTIVE
 * stream) sums it over the ranks while B_{l-1} computes (lane 0 never waits for it); the
 * optimizer step U_l (lane 2) applies it; the next forward reads the new weights. Nothing
 * orders these but the objects they read and write.
 *
 * The arithmetic is on whole numbers kept small (every value a float holding an integer, each
 * result reduced modulo a small prime), so that sums are exact in any order: after the last
 * step every rank compares its weights, bit for bit, with a sequential model of the whole
 * batch computed here without flowlane or MPI. --work-us adds that many microseconds of busy
 * compute to each backward (a model of the real work the all-reduces hide behind).
 */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <flowlane/flowlane.h>
#include <flowlane/flowlane_mpi.h>

#define CHECK(call)                                                                          \
  do {                                                                                       \
    fl_status_t st_ = (call);                                                                \
    if (st_ != FL_OK) {                                                                      \
      fprintf(stderr, "rank %d: %s failed: %s: %s\n", g_rank, #call, fl_status_name(st_),     \
              fl_last_error_message());                                                      \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                          \
    }                                                                                        \
  } while (0)

static int g_rank, g_size;
static int L = 4, H = 64, B = 8, STEPS = 20;
static double WORK_US = 0;

/* The model: weights[l] is H x H, activations act[l] (B x H) per step, deltas, gradients. */
typedef struct {
  float** w;    /* [L][H*H] */
  float** act;  /* [L+1][B*H]: act[0] the input */
  float** d;    /* [L+1][B*H]: d[L] the loss gradient */
  float** g;    /* [L][H*H] */
} Model;

static float mod(float x, float m) { return fmodf(x, m); }

static void input_of(int rank, int step, float* x) { /* this rank's shard of the step's batch */
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < H; ++i) x[b * H + i] = (float)((rank * 31 + step * 7 + b * 3 + i) % 9 - 4);
}
static float target_of(int rank, int b, int i) { return (float)((rank + b + 2 * i) % 5 - 2); }

static void forward(const float* w, const float* in, float* out) {
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < H; ++i) {
      float s = 0;
      for (int j = 0; j < H; ++j) s += w[i * H + j] * in[b * H + j];
      out[b * H + i] = mod(s, 13);
    }
}
/* Layer l's gradient (summed over this rank's samples) and the delta for the layer below. */
static void backward(const float* w, const float* in, const float* dout, float* g, float* din) {
  for (int i = 0; i < H * H; ++i) g[i] = 0;
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < H; ++i)
      for (int j = 0; j < H; ++j) g[i * H + j] += dout[b * H + i] * in[b * H + j];
  for (int i = 0; i < H * H; ++i) g[i] = mod(g[i], 7);
  for (int b = 0; b < B; ++b)
    for (int j = 0; j < H; ++j) {
      float s = 0;
      for (int i = 0; i < H; ++i) s += w[i * H + j] * dout[b * H + i];
      din[b * H + j] = mod(s, 13);
    }
}
static void update(float* w, const float* gsum) {
  for (int i = 0; i < H * H; ++i) w[i] = mod(w[i] - mod(gsum[i], 5), 11);
}

static void busy(double us) {
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do clock_gettime(CLOCK_MONOTONIC, &t);
  while ((t.tv_sec - t0.tv_sec) * 1e6 + (t.tv_nsec - t0.tv_nsec) / 1e3 < us);
}

static float** alloc2(int n, int m) {
  float** p = calloc((size_t)n, sizeof *p);
  for (int k = 0; k < n; ++k) p[k] = calloc((size_t)m, sizeof **p);
  return p;
}
static void init_weights(float** w) {
  for (int l = 0; l < L; ++l)
    for (int i = 0; i < H * H; ++i) w[l][i] = (float)((l * 5 + i * 3) % 7 - 3);
}

/* ---- the instructions ---------------------------------------------------------------- */

typedef struct {
  Model* m;
  int layer, step;
} Task;

static fl_status_t forward_fn(fl_instr_ctx_t* ctx, void* ud) {
  (void)ctx;
  Task* t = ud;
  if (t->layer == 0) input_of(g_rank, t->step, t->m->act[0]);
  forward(t->m->w[t->layer], t->m->act[t->layer], t->m->act[t->layer + 1]);
  if (t->layer == L - 1) /* the loss gradient */
    for (int b = 0; b < B; ++b)
      for (int i = 0; i < H; ++i) t->m->d[L][b * H + i] = mod(t->m->act[L][b * H + i] - target_of(g_rank, b, i), 13);
  return FL_OK;
}
static fl_status_t backward_fn(fl_instr_ctx_t* ctx, void* ud) {
  (void)ctx;
  Task* t = ud;
  int l = t->layer;
  backward(t->m->w[l], t->m->act[l], t->m->d[l + 1], t->m->g[l], t->m->d[l]);
  if (WORK_US > 0) busy(WORK_US);
  return FL_OK;
}
static fl_status_t update_fn(fl_instr_ctx_t* ctx, void* ud) {
  (void)ctx;
  Task* t = ud;
  update(t->m->w[t->layer], t->m->g[t->layer]);
  return FL_OK;
}

static void submit_host(fl_stream_t* s, fl_host_fn fn, Model* m, int layer, int step, fl_operand_t* ops, int n,
                        const char* name) {
  Task* t = malloc(sizeof *t);
  t->m = m;
  t->layer = layer;
  t->step = step;
  fl_host_instr_t h = FL_HOST_INSTR_INIT;
  h.fn = fn;
  h.user_data = t;
  h.cleanup = free;
  h.operands = ops;
  h.num_operands = (uint64_t)n;
  h.name = name;
  CHECK(fl_submit_host(s, &h, NULL));
}

/* The sequential model: the whole batch (every rank's shard) in one process. */
static void sequential(float** w) {
  Model m = {w, alloc2(L + 1, B * H), alloc2(L + 1, B * H), alloc2(L, H * H)};
  float** gsum = alloc2(L, H * H);
  for (int step = 0; step < STEPS; ++step) {
    for (int l = 0; l < L; ++l) memset(gsum[l], 0, sizeof(float) * (size_t)(H * H));
    for (int r = 0; r < g_size; ++r) {
      input_of(r, step, m.act[0]);
      for (int l = 0; l < L; ++l) forward(w[l], m.act[l], m.act[l + 1]);
      for (int b = 0; b < B; ++b)
        for (int i = 0; i < H; ++i) m.d[L][b * H + i] = mod(m.act[L][b * H + i] - target_of(r, b, i), 13);
      for (int l = L - 1; l >= 0; --l) {
        backward(w[l], m.act[l], m.d[l + 1], m.g[l], m.d[l]);
        for (int i = 0; i < H * H; ++i) gsum[l][i] += m.g[l][i];
      }
    }
    for (int l = 0; l < L; ++l) update(w[l], gsum[l]);
  }
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char** argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  for (int k = 1; k + 1 < argc; k += 2) {
    if (!strcmp(argv[k], "--layers")) L = atoi(argv[k + 1]);
    else if (!strcmp(argv[k], "--width")) H = atoi(argv[k + 1]);
    else if (!strcmp(argv[k], "--batch")) B = atoi(argv[k + 1]);
    else if (!strcmp(argv[k], "--steps")) STEPS = atoi(argv[k + 1]);
    else if (!strcmp(argv[k], "--work-us")) WORK_US = atof(argv[k + 1]);
  }

  fl_engine_desc_t ed = FL_ENGINE_DESC_INIT;
  ed.num_workers = 2;
  ed.max_lanes = 4;
  fl_engine_t* e = NULL;
  CHECK(fl_engine_create(&ed, &e));
  fl_comm_desc_t cd = FL_COMM_DESC_INIT; /* nranks 0: size and rank from the MPI communicator */
  cd.lane = 1;
  MPI_Comm world = MPI_COMM_WORLD;
  fl_comm_t* comm = NULL;
  CHECK(fl_mpi_comm_create(e, &cd, &world, &comm));
  fl_device_t cpu = {FL_DEVICE_CPU, 0};
  fl_stream_t *compute, *coll, *optim;
  CHECK(fl_stream_get(e, 0, cpu, FL_STREAM_HOST, &compute));
  CHECK(fl_stream_get(e, 1, cpu, FL_STREAM_COLLECTIVE, &coll));
  CHECK(fl_stream_get(e, 2, cpu, FL_STREAM_HOST, &optim));

  Model m = {alloc2(L, H * H), alloc2(L + 1, B * H), alloc2(L + 1, B * H), alloc2(L, H * H)};
  init_weights(m.w);
  /* One object per piece of state the instructions share. */
  fl_object_t **W = calloc((size_t)L, sizeof *W), **A = calloc((size_t)L + 1, sizeof *A),
              **D = calloc((size_t)L + 1, sizeof *D), **G = calloc((size_t)L, sizeof *G);
  for (int l = 0; l <= L; ++l) {
    CHECK(fl_object_create(e, NULL, NULL, &A[l]));
    CHECK(fl_object_create(e, NULL, NULL, &D[l]));
    if (l < L) CHECK(fl_object_create(e, NULL, NULL, &W[l]));
    if (l < L) CHECK(fl_object_create(e, NULL, NULL, &G[l]));
  }

  const double t0 = now_s();
  for (int step = 0; step < STEPS; ++step) {
    for (int l = 0; l < L; ++l) {
      fl_operand_t ops[3] = {{W[l], FL_READ, 0}, {A[l], FL_READ, 0}, {A[l + 1], FL_WRITE, 0}};
      if (l == L - 1) {
        fl_operand_t last[4] = {ops[0], ops[1], ops[2], {D[L], FL_WRITE, 0}};
        submit_host(compute, forward_fn, &m, l, step, last, 4, "forward");
      } else {
        submit_host(compute, forward_fn, &m, l, step, ops, 3, "forward");
      }
    }
    for (int l = L - 1; l >= 0; --l) {
      fl_operand_t ops[5] = {{W[l], FL_READ, 0}, {A[l], FL_READ, 0}, {D[l + 1], FL_READ, 0}, {G[l], FL_WRITE, 0},
                             {D[l], FL_WRITE, 0}};
      submit_host(compute, backward_fn, &m, l, step, ops, 5, "backward");
      /* Layer l's gradient, summed over the ranks while B_{l-1} computes. */
      fl_coll_part_t p = {FL_COLL_ALL_REDUCE, FL_DTYPE_FLOAT32, FL_REDOP_SUM, 0, m.g[l], m.g[l], (uint64_t)(H * H)};
      fl_operand_t gop = {G[l], FL_READ_WRITE, 0};
      fl_collective_instr_t ci = FL_COLLECTIVE_INSTR_INIT;
      ci.parts = &p;
      ci.num_parts = 1;
      ci.operands = &gop;
      ci.num_operands = 1;
      ci.name = "grad.allreduce";
      CHECK(fl_submit_collective(coll, comm, &ci, NULL));
      fl_operand_t uops[2] = {{G[l], FL_READ, 0}, {W[l], FL_READ_WRITE, 0}};
      submit_host(optim, update_fn, &m, l, step, uops, 2, "optimizer.step");
    }
  }
  CHECK(fl_engine_synchronize(e));
  const double took = now_s() - t0;

  /* The sequential model of the whole batch, here, without flowlane or MPI. */
  float** ref = alloc2(L, H * H);
  init_weights(ref);
  sequential(ref);
  int same = 1;
  for (int l = 0; l < L; ++l) same = same && memcmp(ref[l], m.w[l], sizeof(float) * (size_t)(H * H)) == 0;
  int all = 0;
  MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (g_rank == 0)
    printf("dp_train: %d ranks, %d layers of %dx%d, %d samples per rank, %d steps in %.3f s: weights %s the "
           "sequential model bit for bit on every rank\n",
           g_size, L, H, H, B, STEPS, took, all ? "match" : "DIFFER FROM");

  for (int l = 0; l <= L; ++l) {
    fl_object_release(A[l]);
    fl_object_release(D[l]);
    if (l < L) fl_object_release(W[l]);
    if (l < L) fl_object_release(G[l]);
  }
  CHECK(fl_comm_destroy(comm));
  CHECK(fl_engine_destroy(e));
  MPI_Finalize();
  return all ? 0 : 1;
}

/*
 * engine_info — the main demo: what this libflowlane is, and a tiny program on two lanes.
 *
 *   engine_info [--workers N] [--lanes N]
 *
 * Prints the library version, the status table, the engine's workers and lanes and the
 * GPU backend's state, then runs three host instructions:
 *
 *   lane 1:  produce   writes x  (x = 6 * 7)
 *   lane 0:  consume   reads x, writes y  (y = x + 100)
 *   lane 0:  fails     writes z, fails on purpose   -> z is poisoned
 *
 * `consume` waits for `produce` only because it reads x (program order per object); the
 * two lanes are otherwise independent. fl_object_wait(y) then waits for y's writers and
 * nothing else. Waiting on z shows how a failure flows: the wait returns the status and a
 * message naming the instruction. Exit status 0 when every result is as expected.
 */
#include <flowlane/flowlane.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The number of statuses: one per entry of the header's FL_STATUS_MAP table. */
#define COUNT_STATUS(name, value, text) +1
enum { kStatusCount = 0 FL_STATUS_MAP(COUNT_STATUS) };

typedef struct {
  const char* name;
  long* in;
  long* out;
  uint32_t lane; /* the lane the instruction ran on, from fl_instr_get_lane() */
  fl_instr_id id;
} step_t;

static fl_status_t produce(fl_instr_ctx_t* ctx, void* user_data) {
  step_t* s = (step_t*)user_data;
  s->lane = fl_instr_get_lane(ctx);
  *s->out = 6 * 7;
  return FL_OK;
}

static fl_status_t consume(fl_instr_ctx_t* ctx, void* user_data) {
  step_t* s = (step_t*)user_data;
  s->lane = fl_instr_get_lane(ctx);
  *s->out = *s->in + 100;
  return FL_OK;
}

static fl_status_t fails(fl_instr_ctx_t* ctx, void* user_data) {
  step_t* s = (step_t*)user_data;
  s->lane = fl_instr_get_lane(ctx);
  fl_instr_set_error(ctx, "the input file is missing (a failure on purpose)");
  return FL_ERR_INSTRUCTION_FAILED;
}

static int die(const char* what, fl_status_t st) {
  fprintf(stderr, "engine_info: %s failed: %s: %s\n", what, fl_status_name(st), fl_last_error_message());
  return 1;
}

static fl_status_t submit(fl_stream_t* stream, fl_host_fn fn, step_t* step, fl_object_t* reads,
                          fl_object_t* writes) {
  fl_operand_t ops[2];
  fl_host_instr_t instr = FL_HOST_INSTR_INIT;
  uint64_t n = 0;
  if (reads != NULL) {
    ops[n].object = reads;
    ops[n].access = FL_READ;
    ops[n].reserved = 0;
    ++n;
  }
  ops[n].object = writes;
  ops[n].access = FL_WRITE;
  ops[n].reserved = 0;
  ++n;
  instr.fn = fn;
  instr.user_data = step;
  instr.operands = ops;
  instr.num_operands = n;
  instr.name = step->name;
  return fl_submit_host(stream, &instr, &step->id);
}

static uint64_t arg_u64(int argc, char** argv, const char* flag, uint64_t fallback) {
  int i;
  for (i = 1; i + 1 < argc; ++i)
    if (strcmp(argv[i], flag) == 0) return strtoull(argv[i + 1], NULL, 10);
  return fallback;
}

int main(int argc, char** argv) {
  fl_engine_desc_t desc = FL_ENGINE_DESC_INIT;
  fl_device_t cpu = {FL_DEVICE_CPU, 0};
  fl_engine_t* engine = NULL;
  fl_stream_t *lane0 = NULL, *lane1 = NULL;
  fl_object_t *ox = NULL, *oy = NULL, *oz = NULL;
  long x = 0, y = 0, z = 0;
  step_t p = {"produce", NULL, &x, 0, 0};
  step_t c = {"consume", &x, &y, 0, 0};
  step_t f = {"fails", NULL, &z, 0, 0};
  fl_status_t st;
  int32_t ndev = 0;
  int ok = 1;
  int i;

  printf("flowlane %s (library 0x%06x, header %d.%d.%d)\n", fl_version_string(), (unsigned)fl_version_hex(),
         FL_VERSION_MAJOR, FL_VERSION_MINOR, FL_VERSION_PATCH);
  if ((fl_version_hex() >> 16) != FL_VERSION_MAJOR) {
    fprintf(stderr, "engine_info: library major version differs from the header's\n");
    return 1;
  }
  printf("status table: %d statuses (", kStatusCount);
  for (i = 0; i < kStatusCount; ++i) printf("%s%s", i ? ", " : "", fl_status_name((fl_status_t)i));
  printf(")\n");

  desc.num_workers = arg_u64(argc, argv, "--workers", 0); /* 0 = one per logical core */
  desc.max_lanes = arg_u64(argc, argv, "--lanes", 0);     /* 0 = 8 */
  if ((st = fl_engine_create(&desc, &engine)) != FL_OK) return die("fl_engine_create", st);
  printf("engine: %u worker threads, %u lanes\n", fl_engine_worker_count(engine), fl_engine_lane_count(engine));
  st = fl_cuda_device_count(&ndev);
  if (st == FL_OK)
    printf("gpu: %d CUDA device(s) visible\n", (int)ndev);
  else
    printf("gpu: %s (%s)\n", fl_status_name(st), fl_last_error_message());

  if ((st = fl_stream_get(engine, 0, cpu, FL_STREAM_HOST, &lane0)) != FL_OK ||
      (st = fl_stream_get(engine, 1, cpu, FL_STREAM_HOST, &lane1)) != FL_OK) {
    die("fl_stream_get", st);
    fl_engine_destroy(engine);
    return 1;
  }
  if ((st = fl_object_create(engine, &x, NULL, &ox)) != FL_OK ||
      (st = fl_object_create(engine, &y, NULL, &oy)) != FL_OK ||
      (st = fl_object_create(engine, &z, NULL, &oz)) != FL_OK) {
    die("fl_object_create", st);
    fl_engine_destroy(engine);
    return 1;
  }

  /* Submission returns at once; the engine orders the work from the operands. */
  if ((st = submit(lane1, produce, &p, NULL, ox)) != FL_OK || (st = submit(lane0, consume, &c, ox, oy)) != FL_OK ||
      (st = submit(lane0, fails, &f, NULL, oz)) != FL_OK) {
    die("fl_submit_host", st);
    fl_engine_destroy(engine);
    return 1;
  }

  if ((st = fl_object_wait(oy, FL_READ)) != FL_OK) {
    die("fl_object_wait(y)", st);
    ok = 0;
  } else {
    printf("program: %s (#%llu) on lane %u wrote x = %ld; %s (#%llu) on lane %u read it and wrote y = %ld\n", p.name,
           (unsigned long long)p.id, p.lane, x, c.name, (unsigned long long)c.id, c.lane, y);
    ok = ok && x == 42 && y == 142 && p.lane == 1 && c.lane == 0;
  }

  st = fl_object_wait(oz, FL_READ);
  printf("errors flow: waiting on z returned %s: %s\n", fl_status_name(st), fl_last_error_message());
  ok = ok && st == FL_ERR_INSTRUCTION_FAILED && strstr(fl_last_error_message(), "fails") != NULL;

  fl_object_release(ox);
  fl_object_release(oy);
  fl_object_release(oz);
  /* The failure was already returned by the wait on z; the engine stays usable. */
  if ((st = fl_engine_synchronize(engine)) != FL_OK) printf("synchronize: %s\n", fl_status_name(st));
  if ((st = fl_engine_destroy(engine)) != FL_OK) return die("fl_engine_destroy", st);
  printf("engine_info: %s\n", ok ? "ok" : "UNEXPECTED RESULT");
  return ok ? 0 : 1;
}

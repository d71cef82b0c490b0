/*
 * The C ABI as a C99 program sees it: compiled with -std=c99 -pedantic -Werror, includes
 * only <flowlane/flowlane.h> (plus the layout checks, which include nothing else), links
 * libflowlane.so. Checks the version, the status table, the thread-local error message,
 * descriptor validation, a few error paths of every family, and one host-instruction
 * round trip whose callbacks are C functions (struct layout and calling convention from C).
 * Prints one line per failed check and exits non-zero if any failed.
 */
#include <flowlane/flowlane.h> /* first: the header must be self-contained */

#include <stdio.h>
#include <string.h>

#include "abi_layout.h"

static int g_checks = 0;
static int g_failures = 0;

static void check_impl(int ok, const char* expr, const char* file, int line) {
  ++g_checks;
  if (!ok) {
    ++g_failures;
    fprintf(stderr, "%s:%d: check failed: %s (last error: \"%s\")\n", file, line, expr, fl_last_error_message());
  }
}
#define CHECK(expr) check_impl((expr) ? 1 : 0, #expr, __FILE__, __LINE__)

/* A call must return `want` and leave a non-empty message that contains `fragment`. */
static void expect_err_impl(fl_status_t got, fl_status_t want, const char* fragment, const char* call,
                            const char* file, int line) {
  const char* msg = fl_last_error_message();
  ++g_checks;
  if (got != want || msg == NULL || msg[0] == '\0' || strstr(msg, fragment) == NULL) {
    ++g_failures;
    fprintf(stderr, "%s:%d: %s returned %s, expected %s with a message containing \"%s\"; message: \"%s\"\n",
            file, line, call, fl_status_name(got), fl_status_name(want), fragment, msg ? msg : "(NULL)");
  }
}
#define EXPECT_ERR(call, want, fragment) expect_err_impl((call), (want), (fragment), #call, __FILE__, __LINE__)

static void expect_ok_impl(fl_status_t got, const char* call, const char* file, int line) {
  ++g_checks;
  if (got != FL_OK) {
    ++g_failures;
    fprintf(stderr, "%s:%d: %s returned %s: %s\n", file, line, call, fl_status_name(got), fl_last_error_message());
  }
}
#define EXPECT_OK(call) expect_ok_impl((call), #call, __FILE__, __LINE__)

/* ------------------------------------------------------------------------------------- */

static void test_version(void) {
  char expected[32];
  CHECK(fl_version_hex() == (uint32_t)FL_VERSION_HEX);
  CHECK((fl_version_hex() >> 16) == FL_VERSION_MAJOR);
  sprintf(expected, "%d.%d.%d", FL_VERSION_MAJOR, FL_VERSION_MINOR, FL_VERSION_PATCH);
  CHECK(fl_version_string() != NULL && strcmp(fl_version_string(), expected) == 0);
}

static int g_status_entries = 0;

static void check_status(fl_status_t status, const char* name, int value, const char* text) {
  ++g_status_entries;
  CHECK((int)status == value);
  CHECK(fl_status_name(status) != NULL && strcmp(fl_status_name(status), name) == 0);
  CHECK(fl_status_string(status) != NULL && strcmp(fl_status_string(status), text) == 0);
}

static void test_status_table(void) {
  /* The header's X-macro table and the library's name/text functions must agree. */
#define CHECK_STATUS_(name, value, text) check_status(name, #name, value, text);
  FL_STATUS_MAP(CHECK_STATUS_)
#undef CHECK_STATUS_
  /* One past the last value (the values are dense from 0) is not a status. */
  CHECK(strcmp(fl_status_name((fl_status_t)g_status_entries), "FL_STATUS_UNKNOWN") == 0);
  CHECK(strcmp(fl_status_name((fl_status_t)-1), "FL_STATUS_UNKNOWN") == 0);
  CHECK(fl_status_string((fl_status_t)9999) != NULL && fl_status_string((fl_status_t)9999)[0] != '\0');
}

static void test_descriptor_checks(void) {
  fl_engine_t* e = NULL;
  fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
  struct {
    fl_engine_desc_t base;
    uint64_t future_field; /* what a newer header might append */
  } big;

  CHECK(d.struct_size == sizeof(fl_engine_desc_t));
  EXPECT_ERR(fl_engine_create(NULL, NULL), FL_ERR_INVALID_ARGUMENT, "out_engine");
  d.struct_size = 8;
  EXPECT_ERR(fl_engine_create(&d, &e), FL_ERR_INVALID_ARGUMENT, "struct_size");
  CHECK(e == NULL); /* outputs untouched on failure */
  d = (fl_engine_desc_t)FL_ENGINE_DESC_INIT;
  d.flags = 1;
  EXPECT_ERR(fl_engine_create(&d, &e), FL_ERR_INVALID_ARGUMENT, "flags");
  d = (fl_engine_desc_t)FL_ENGINE_DESC_INIT;
  d.max_lanes = 5000;
  EXPECT_ERR(fl_engine_create(&d, &e), FL_ERR_OUT_OF_RANGE, "max_lanes");
  CHECK(e == NULL);

  memset(&big, 0, sizeof big);
  big.base.struct_size = sizeof big;
  big.base.num_workers = 1;
  big.future_field = 1;
  EXPECT_ERR(fl_engine_create(&big.base, &e), FL_ERR_INVALID_ARGUMENT, "non-zero");
  big.future_field = 0;
  EXPECT_OK(fl_engine_create(&big.base, &e));
  CHECK(strcmp(fl_last_error_message(), "") == 0); /* a success clears the message */
  EXPECT_OK(fl_engine_destroy(e));
  EXPECT_OK(fl_engine_destroy(NULL));
}

/* --- a host-instruction round trip with C callbacks --- */

typedef struct {
  long value;
  int released;
} cell_t;

typedef struct {
  cell_t* src;
  cell_t* dst;
  uint32_t ran_on_lane;
  int cleanups;
} job_t;

static void cell_release(void* user_data) { ((cell_t*)user_data)->released++; }
static void job_cleanup(void* user_data) { ((job_t*)user_data)->cleanups++; }

static fl_status_t produce(fl_instr_ctx_t* ctx, void* user_data) {
  job_t* job = (job_t*)user_data;
  job->ran_on_lane = fl_instr_get_lane(ctx);
  /* The deprecated spellings stay exported and agree; FL_DEPRECATED is silent here (no
     FL_WARN_DEPRECATED), so this compiles under -pedantic -Werror. */
  if (fl_instr_lane(ctx) != job->ran_on_lane || fl_instr_get_engine(ctx) == NULL ||
      fl_instr_engine(ctx) != fl_instr_get_engine(ctx))
    job->ran_on_lane = 9999;
  job->dst->value = 21;
  return FL_OK;
}

static fl_status_t consume(fl_instr_ctx_t* ctx, void* user_data) {
  job_t* job = (job_t*)user_data;
  job->ran_on_lane = fl_instr_get_lane(ctx);
  job->dst->value = job->src->value * 2;
  return FL_OK;
}

static fl_status_t fail_with_message(fl_instr_ctx_t* ctx, void* user_data) {
  (void)user_data;
  fl_instr_set_error(ctx, "c99 callback says no");
  return FL_ERR_INSTRUCTION_FAILED;
}

static void test_engine(void) {
  fl_engine_desc_t d = FL_ENGINE_DESC_INIT;
  fl_engine_t* e = NULL;
  fl_stream_t* lane0 = NULL;
  fl_stream_t* lane1 = NULL;
  fl_stream_t* s = NULL;
  fl_device_t cpu = {FL_DEVICE_CPU, 0};
  fl_device_t cpu1 = {FL_DEVICE_CPU, 1};
  fl_device_t gpu0 = {FL_DEVICE_CUDA, 0};
  cell_t x = {0, 0}, y = {0, 0}, z = {0, 0};
  fl_object_t *ox = NULL, *oy = NULL, *oz = NULL;
  job_t jp, jc, jf;
  fl_operand_t op_p[1], op_c[2], op_f[1];
  fl_host_instr_t hp = FL_HOST_INSTR_INIT, hc = FL_HOST_INSTR_INIT, hf = FL_HOST_INSTR_INIT;
  fl_instr_id idp = 0, idc = 0;
  fl_engine_stats_t stats = FL_ENGINE_STATS_INIT;
  fl_status_t st;
  uint32_t lane = 99;
  int32_t ndev = -1;

  d.num_workers = 2;
  d.max_lanes = 4;
  EXPECT_OK(fl_engine_create(&d, &e));
  if (e == NULL) return;
  CHECK(fl_engine_lane_count(e) == 4);
  CHECK(fl_engine_worker_count(e) == 2);
  CHECK(fl_engine_lane_count(NULL) == 0);

  /* streams: interning and error paths */
  EXPECT_OK(fl_stream_get(e, 0, cpu, FL_STREAM_HOST, &lane0));
  EXPECT_OK(fl_stream_get(e, 1, cpu, FL_STREAM_HOST, &lane1));
  EXPECT_OK(fl_stream_get(e, 1, cpu, FL_STREAM_HOST, &s));
  CHECK(s == lane1 && lane0 != lane1);
  EXPECT_OK(fl_stream_info(lane1, &lane, NULL, NULL));
  CHECK(lane == 1);
  s = NULL;
  EXPECT_ERR(fl_stream_get(e, 4, cpu, FL_STREAM_HOST, &s), FL_ERR_OUT_OF_RANGE, "lane 4");
  EXPECT_ERR(fl_stream_get(e, 0, cpu1, FL_STREAM_HOST, &s), FL_ERR_INVALID_ARGUMENT, "index");
  EXPECT_ERR(fl_stream_get(NULL, 0, cpu, FL_STREAM_HOST, &s), FL_ERR_INVALID_HANDLE, "NULL");
  CHECK(s == NULL);
  /* A CUDA stream: unsupported in a CPU-only build, no device on a GPU-less machine. */
  st = fl_stream_get(e, 0, gpu0, FL_STREAM_COMPUTE, &s);
  CHECK(st == FL_ERR_UNSUPPORTED || st == FL_ERR_NO_DEVICE || st == FL_OK);
  st = fl_cuda_device_count(&ndev);
  CHECK((st == FL_ERR_UNSUPPORTED && ndev == -1) || (st == FL_OK && ndev >= 0));
  EXPECT_ERR(fl_cuda_device_count(NULL), FL_ERR_INVALID_ARGUMENT, "out_count");

  /* lanes */
  EXPECT_OK(fl_lane_acquire(e, &lane));
  CHECK(lane >= 1 && lane < 4);
  EXPECT_OK(fl_lane_release(e, lane));
  EXPECT_ERR(fl_lane_release(e, 0), FL_ERR_INVALID_ARGUMENT, "0");
  EXPECT_ERR(fl_lane_release(e, 77), FL_ERR_OUT_OF_RANGE, "77");

  /* objects */
  EXPECT_OK(fl_object_create(e, &x, cell_release, &ox));
  EXPECT_OK(fl_object_create(e, &y, cell_release, &oy));
  EXPECT_OK(fl_object_create(e, &z, cell_release, &oz));
  EXPECT_ERR(fl_object_wait(ox, 0), FL_ERR_INVALID_ARGUMENT, "access");
  EXPECT_ERR(fl_object_wait(NULL, FL_READ), FL_ERR_INVALID_HANDLE, "NULL");

  /* x = 21 on lane 1; y = 2 * x on lane 0: ordered only through x. */
  memset(&jp, 0, sizeof jp);
  memset(&jc, 0, sizeof jc);
  memset(&jf, 0, sizeof jf);
  jp.dst = &x;
  jc.src = &x;
  jc.dst = &y;
  op_p[0].object = ox; op_p[0].access = FL_WRITE; op_p[0].reserved = 0;
  op_c[0].object = ox; op_c[0].access = FL_READ; op_c[0].reserved = 0;
  op_c[1].object = oy; op_c[1].access = FL_WRITE; op_c[1].reserved = 0;
  hp.fn = produce; hp.user_data = &jp; hp.cleanup = job_cleanup;
  hp.operands = op_p; hp.num_operands = 1; hp.name = "c99.produce";
  hc.fn = consume; hc.user_data = &jc; hc.cleanup = job_cleanup;
  hc.operands = op_c; hc.num_operands = 2; hc.name = "c99.consume";
  EXPECT_OK(fl_submit_host(lane1, &hp, &idp));
  EXPECT_OK(fl_submit_host(lane0, &hc, &idc));
  CHECK(idp != 0 && idc != 0 && idp != idc);
  EXPECT_OK(fl_object_wait(oy, FL_READ));
  CHECK(y.value == 42);
  CHECK(jp.ran_on_lane == 1);
  CHECK(jc.ran_on_lane == 0);

  /* submit error paths: nothing runs, nothing is cleaned up */
  hf.fn = NULL;
  EXPECT_ERR(fl_submit_host(lane0, &hf, NULL), FL_ERR_INVALID_ARGUMENT, "fn");
  hf.fn = fail_with_message;
  hf.struct_size = 0;
  EXPECT_ERR(fl_submit_host(lane0, &hf, NULL), FL_ERR_INVALID_ARGUMENT, "struct_size");
  hf.struct_size = sizeof hf;
  op_f[0].object = oz; op_f[0].access = 4; op_f[0].reserved = 0;
  hf.operands = op_f; hf.num_operands = 1;
  EXPECT_ERR(fl_submit_host(lane0, &hf, NULL), FL_ERR_INVALID_ARGUMENT, "access");
  EXPECT_ERR(fl_submit_host(NULL, &hf, NULL), FL_ERR_INVALID_HANDLE, "NULL");

  /* a failing C callback poisons what it writes; the wait names the instruction */
  op_f[0].access = FL_WRITE;
  hf.user_data = &jf; hf.cleanup = job_cleanup; hf.name = "c99.fails";
  EXPECT_OK(fl_submit_host(lane0, &hf, NULL));
  EXPECT_ERR(fl_object_wait(oz, FL_READ), FL_ERR_INSTRUCTION_FAILED, "c99 callback says no");
  CHECK(strstr(fl_last_error_message(), "c99.fails") != NULL);
  (void)fl_engine_synchronize(e); /* the failure may or may not still count here */

  EXPECT_OK(fl_engine_stats(e, &stats));
  CHECK(stats.submitted >= 3);

  EXPECT_OK(fl_object_release(ox));
  EXPECT_OK(fl_object_release(oy));
  EXPECT_OK(fl_object_release(oz));
  EXPECT_ERR(fl_object_release(ox), FL_ERR_INVALID_HANDLE, "stale");
  EXPECT_OK(fl_engine_destroy(e));

  /* after destroy: every callback ran exactly once, every handle is stale */
  CHECK(jp.cleanups == 1 && jc.cleanups == 1 && jf.cleanups == 1);
  CHECK(x.released == 1 && y.released == 1 && z.released == 1);
  EXPECT_ERR(fl_engine_synchronize(e), FL_ERR_INVALID_HANDLE, "stale");
  EXPECT_ERR(fl_stream_synchronize(lane0), FL_ERR_INVALID_HANDLE, "stale");
  CHECK(fl_engine_worker_count(e) == 0);
}

int main(void) {
  CHECK(fl_last_error_message() != NULL);
  test_version();
  test_status_table();
  test_descriptor_checks();
  test_engine();
  printf("flowlane %s C99 ABI test: %d checks, %d failed\n", fl_version_string(), g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}

#include <flowlane/flowlane.h>
#include <stdio.h>

static fl_status_t produce(fl_instr_ctx_t* ctx, void* p) { (void)ctx; *(int*)p = 42; return FL_OK; }
static fl_status_t consume(fl_instr_ctx_t* ctx, void* p) { (void)ctx; printf("read %d\n", *(int*)p); return FL_OK; }

int main(void) {
  fl_engine_t* e; fl_stream_t *lane0, *lane1; fl_object_t* x; int value = 0;
  fl_device_t cpu = {FL_DEVICE_CPU, 0};
  fl_engine_create(NULL, &e);                              /* NULL: default descriptor */
  fl_stream_get(e, 0, cpu, FL_STREAM_HOST, &lane0);
  fl_stream_get(e, 1, cpu, FL_STREAM_HOST, &lane1);
  fl_object_create(e, &value, NULL, &x);
  fl_operand_t w = {x, FL_WRITE, 0}, r = {x, FL_READ, 0};
  fl_host_instr_t a = FL_HOST_INSTR_INIT, b = FL_HOST_INSTR_INIT;
  a.fn = produce; a.user_data = &value; a.operands = &w; a.num_operands = 1; a.name = "produce";
  b.fn = consume; b.user_data = &value; b.operands = &r; b.num_operands = 1; b.name = "consume";
  fl_submit_host(lane1, &a, NULL);                         /* both return at once */
  fl_submit_host(lane0, &b, NULL);
  fl_status_t st = fl_object_wait(x, FL_WRITE);            /* waits for x's users only */
  if (st != FL_OK) fprintf(stderr, "%s: %s\n", fl_status_name(st), fl_last_error_message());
  fl_object_release(x);
  return fl_engine_destroy(e) == FL_OK ? 0 : 1;
}

/* A downstream C99 program built against an installed flowlane (CMake package or
   pkg-config): checks that header and library agree and runs one host instruction. */
#include <stdio.h>

#include <flowlane/flowlane.h>

static fl_status_t answer(fl_instr_ctx_t* ctx, void* user_data) {
  (void)ctx;
  *(int*)user_data = 42;
  return FL_OK;
}

int main(void) {
  fl_engine_desc_t desc = FL_ENGINE_DESC_INIT;
  fl_device_t cpu = {FL_DEVICE_CPU, 0};
  fl_engine_t* engine = NULL;
  fl_stream_t* stream = NULL;
  fl_object_t* obj = NULL;
  fl_operand_t op;
  fl_host_instr_t instr = FL_HOST_INSTR_INIT;
  fl_status_t st;
  int value = 0;

  if (fl_version_hex() != FL_VERSION_HEX) {
    fprintf(stderr, "consumer: header is %d.%d.%d but the library is %s\n", FL_VERSION_MAJOR, FL_VERSION_MINOR,
            FL_VERSION_PATCH, fl_version_string());
    return 1;
  }
  desc.num_workers = 2;
  if ((st = fl_engine_create(&desc, &engine)) != FL_OK ||
      (st = fl_stream_get(engine, 0, cpu, FL_STREAM_HOST, &stream)) != FL_OK ||
      (st = fl_object_create(engine, &value, NULL, &obj)) != FL_OK) {
    fprintf(stderr, "consumer: %s: %s\n", fl_status_name(st), fl_last_error_message());
    fl_engine_destroy(engine);
    return 1;
  }
  op.object = obj;
  op.access = FL_WRITE;
  op.reserved = 0;
  instr.fn = answer;
  instr.user_data = &value;
  instr.operands = &op;
  instr.num_operands = 1;
  instr.name = "consumer.answer";
  if ((st = fl_submit_host(stream, &instr, NULL)) != FL_OK || (st = fl_object_wait(obj, FL_READ)) != FL_OK) {
    fprintf(stderr, "consumer: %s: %s\n", fl_status_name(st), fl_last_error_message());
    fl_engine_destroy(engine);
    return 1;
  }
  fl_object_release(obj);
  if ((st = fl_engine_destroy(engine)) != FL_OK) {
    fprintf(stderr, "consumer: fl_engine_destroy: %s\n", fl_last_error_message());
    return 1;
  }
  printf("consumer: flowlane %s, instruction wrote %d\n", fl_version_string(), value);
  return value == 42 ? 0 : 1;
}

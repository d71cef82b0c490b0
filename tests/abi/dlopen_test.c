/*
 * Loads libflowlane at run time the way other languages do (Python ctypes, Rust
 * libloading, a JVM): dlopen by path, dlsym every exported function, no link-time
 * dependency on the library. This program is *not* linked with libflowlane.
 *
 *   abi_dlopen <path/to/libflowlane.so.0> [exported_symbols.txt]
 *
 * Checks: the library loads with RTLD_NOW (no unresolved symbols), every listed symbol
 * resolves and carries the FLOWLANE_0 version, the loaded major version equals the
 * header's FL_VERSION_MAJOR (and its minor is not older), an engine can be created and
 * destroyed, and an error path returns its status with a thread-local message.
 */
#define _GNU_SOURCE 1 /* dlvsym */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <flowlane/flowlane.h> /* types and macros only: no function is called directly */

static int g_failures = 0;

#define FAIL(...)                                 \
  do {                                            \
    fprintf(stderr, "abi_dlopen: " __VA_ARGS__); \
    fputc('\n', stderr);                          \
    ++g_failures;                                 \
  } while (0)

/* ISO C cannot convert void* to a function pointer; POSIX guarantees the bytes match. */
static void* resolve(void* lib, const char* name, void* out_fn, size_t fn_size) {
  void* sym = dlsym(lib, name);
  if (sym == NULL) {
    FAIL("dlsym(%s) failed: %s", name, dlerror());
    return NULL;
  }
  memcpy(out_fn, &sym, fn_size);
  return sym;
}
#define RESOLVE(lib, var) resolve((lib), #var, &(var##_p), sizeof(var##_p))

static void check_listed_symbols(void* lib, const char* list_path) {
  char line[256];
  int n = 0;
  FILE* f = fopen(list_path, "r");
  if (f == NULL) {
    FAIL("cannot open %s", list_path);
    return;
  }
  while (fgets(line, sizeof line, f) != NULL) {
    size_t len = strcspn(line, " \t\r\n");
    line[len] = '\0';
    if (len == 0 || line[0] == '#') continue;
    ++n;
    if (dlsym(lib, line) == NULL)
      FAIL("listed symbol %s does not resolve: %s", line, dlerror());
    else if (dlvsym(lib, line, "FLOWLANE_0") == NULL)
      FAIL("symbol %s is not versioned FLOWLANE_0 (see capi/flowlane.map)", line);
  }
  fclose(f);
  if (n == 0) FAIL("%s lists no symbols", list_path);
  printf("abi_dlopen: %d listed symbols resolve with version FLOWLANE_0\n", n);
}

/* One load/use/unload cycle; returns 0 when it could not load at all. */
static int exercise(const char* path) {
  uint32_t (*fl_version_hex_p)(void) = NULL;
  const char* (*fl_version_string_p)(void) = NULL;
  const char* (*fl_status_name_p)(fl_status_t) = NULL;
  const char* (*fl_last_error_message_p)(void) = NULL;
  fl_status_t (*fl_engine_create_p)(const fl_engine_desc_t*, fl_engine_t**) = NULL;
  fl_status_t (*fl_engine_destroy_p)(fl_engine_t*) = NULL;
  fl_status_t (*fl_engine_synchronize_p)(fl_engine_t*) = NULL;
  uint32_t (*fl_engine_lane_count_p)(const fl_engine_t*) = NULL;
  fl_engine_desc_t desc = FL_ENGINE_DESC_INIT;
  fl_engine_t* engine = NULL;
  fl_status_t st;
  uint32_t hex;
  const char* msg;

  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    FAIL("dlopen(%s) failed: %s", path, dlerror());
    return 0;
  }
  if (!RESOLVE(lib, fl_version_hex) || !RESOLVE(lib, fl_version_string) || !RESOLVE(lib, fl_status_name) ||
      !RESOLVE(lib, fl_last_error_message) || !RESOLVE(lib, fl_engine_create) ||
      !RESOLVE(lib, fl_engine_destroy) || !RESOLVE(lib, fl_engine_synchronize) ||
      !RESOLVE(lib, fl_engine_lane_count)) {
    dlclose(lib);
    return 1;
  }

  /* A binding checks the version once, at load. */
  hex = fl_version_hex_p();
  if ((hex >> 16) != FL_VERSION_MAJOR)
    FAIL("loaded major version %u, this program was built for %d", hex >> 16, FL_VERSION_MAJOR);
  if (((hex >> 8) & 0xffu) < FL_VERSION_MINOR)
    FAIL("loaded library %s is older than the header (%d.%d)", fl_version_string_p(), FL_VERSION_MAJOR,
         FL_VERSION_MINOR);
  printf("abi_dlopen: loaded %s (version %s, 0x%06x)\n", path, fl_version_string_p(), hex);

  /* Error path: the status, its name and the calling thread's message. */
  st = fl_engine_create_p(NULL, NULL);
  msg = fl_last_error_message_p();
  if (st != FL_ERR_INVALID_ARGUMENT) FAIL("fl_engine_create(NULL, NULL) returned %d", (int)st);
  if (strcmp(fl_status_name_p(st), "FL_ERR_INVALID_ARGUMENT") != 0)
    FAIL("fl_status_name(%d) = %s", (int)st, fl_status_name_p(st));
  if (msg == NULL || strstr(msg, "out_engine") == NULL) FAIL("unexpected error message: '%s'", msg ? msg : "(NULL)");

  /* Create, use, destroy; then the handle is stale. */
  desc.num_workers = 2;
  desc.max_lanes = 3;
  st = fl_engine_create_p(&desc, &engine);
  if (st != FL_OK) {
    FAIL("fl_engine_create: %s: %s", fl_status_name_p(st), fl_last_error_message_p());
  } else {
    if (fl_engine_lane_count_p(engine) != 3) FAIL("lane count %u, expected 3", fl_engine_lane_count_p(engine));
    if ((st = fl_engine_synchronize_p(engine)) != FL_OK) FAIL("fl_engine_synchronize: %s", fl_status_name_p(st));
    if ((st = fl_engine_destroy_p(engine)) != FL_OK) FAIL("fl_engine_destroy: %s", fl_status_name_p(st));
    if ((st = fl_engine_synchronize_p(engine)) != FL_ERR_INVALID_HANDLE)
      FAIL("a destroyed engine answered %s, expected FL_ERR_INVALID_HANDLE", fl_status_name_p(st));
  }
  if (dlclose(lib) != 0) FAIL("dlclose failed: %s", dlerror());
  return 1;
}

int main(int argc, char** argv) {
  const char* path = argc > 1 ? argv[1] : NULL;
  void* lib;
#ifdef FL_DLOPEN_DEFAULT_PATH
  if (path == NULL) path = FL_DLOPEN_DEFAULT_PATH;
#endif
  if (path == NULL) {
    fprintf(stderr, "usage: %s <path/to/libflowlane.so.0> [exported_symbols.txt]\n", argv[0]);
    return 2;
  }
  /* Before loading: this program must not already have flowlane linked in. */
  if (dlsym(RTLD_DEFAULT, "fl_version_hex") != NULL) FAIL("fl_version_hex is already linked into the host");

  if (argc > 2) {
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
      FAIL("dlopen(%s) failed: %s", path, dlerror());
      return 1;
    }
    check_listed_symbols(lib, argv[2]);
    dlclose(lib);
  }
  /* Twice: a binding may load, unload and load the library again in one process. */
  if (exercise(path)) exercise(path);
  printf("abi_dlopen: %s\n", g_failures ? "FAILED" : "ok");
  return g_failures ? 1 : 0;
}

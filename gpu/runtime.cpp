// Loading the CUDA runtime and NCCL at run time (gpu/runtime.hpp).
#if FLOWLANE_HAVE_CUDA

#include "gpu/runtime.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>

#ifndef FLOWLANE_CUDART_DIR
#define FLOWLANE_CUDART_DIR ""
#endif
#ifndef FLOWLANE_NCCL_DIR
#define FLOWLANE_NCCL_DIR ""
#endif

namespace flowlane::gpu {

namespace {

// The exported name of a runtime function: the header may map a name to a versioned or
// per-thread variant with a macro, which the stringification expands first.
#define FL_RT_NAME2(f) #f
#define FL_RT_NAME(f) FL_RT_NAME2(f)

// Each table entry has exactly the type of the header's declaration.
// (static_cast picks the overload of exactly that type: the C declaration.)
#define FL_RT_CHECK(f) static_assert(std::is_same_v<decltype(CudaApi::f), decltype(&::f)>, #f);
#define FL_RT_CHECK_T(f, T) \
  static_assert(std::is_same_v<decltype(CudaApi::f), decltype(static_cast<T>(&::f))>, #f);
FL_CUDA_FUNCTIONS(FL_RT_CHECK, FL_RT_CHECK_T)
#define FL_RT_CHECK_OPT(f) static_assert(std::is_same_v<decltype(CudaOptionalApi::f), decltype(&::f)>, #f);
#define FL_RT_CHECK_OPT_T(f, T) \
  static_assert(std::is_same_v<decltype(CudaOptionalApi::f), decltype(static_cast<T>(&::f))>, #f);
FL_CUDA_OPTIONAL_FUNCTIONS(FL_RT_CHECK_OPT, FL_RT_CHECK_OPT_T)

std::string dl_error() {
  const char* e = dlerror();
  return e != nullptr ? std::string(e) : std::string("(no dlerror text)");
}

// Resolves `name` in `h` into `slot`; false with *why naming the library and the symbol.
template <class F>
bool resolve(void* h, const std::string& file, const char* name, F* slot, std::string* why) {
  dlerror();
  void* p = dlsym(h, name);
  if (p == nullptr) {
    *why = file + " lacks " + name + ": " + dl_error();
    return false;
  }
  *slot = reinterpret_cast<F>(p);
  return true;
}

struct Spec {
  const char* what;          // "the CUDA runtime"
  const char* env;           // FLOWLANE_CUDART_PATH
  const char* soname;        // libcudart.so.13
  const char* build_dir;     // the toolkit's library folder at build time
  const char* probe_symbol;  // defined by every copy: finds one in the global scope
  // Resolves the table from an opened handle and checks the version; false with *why.
  std::function<bool(void* h, const std::string& file, std::string* why)> accept;
};

// The file `h` was opened from (for messages), through a symbol it defines.
std::string file_of(void* h, const char* symbol, const std::string& fallback) {
  Dl_info info{};
  void* p = dlsym(h, symbol);
  if (p != nullptr && dladdr(p, &info) != 0 && info.dli_fname != nullptr && *info.dli_fname != 0)
    return info.dli_fname;
  return fallback;
}

// Opens and accepts the library per the search order of gpu/runtime.hpp. Returns the
// handle (never closed: the tables point into it) and its file, or null with *why.
void* open_library(const Spec& s, std::string* file, std::string* why) {
  std::string tried;
  auto attempt = [&](void* h, const std::string& f) -> bool {
    std::string reason;
    if (s.accept(h, f, &reason)) {
      *file = f;
      return true;
    }
    tried += (tried.empty() ? "" : "; ") + reason;
    dlclose(h);
    return false;
  };
  // 1. The environment names the file.
  if (const char* v = std::getenv(s.env); v != nullptr && *v != 0) {
    if (std::strcmp(v, "none") == 0) {
      *why = std::string(s.what) + " is disabled (" + s.env + "=none)";
      return nullptr;
    }
    dlerror();
    void* h = dlopen(v, RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      *why = std::string(s.what) + " could not be loaded from " + s.env + "=" + v + ": " + dl_error();
      return nullptr;
    }
    if (attempt(h, v)) return h;
    *why = std::string(s.what) + " named by " + s.env + " is not usable: " + tried;
    return nullptr;
  }
  // 2. A copy the process already loaded: by soname, else whoever defines the probe symbol.
  if (void* h = dlopen(s.soname, RTLD_NOW | RTLD_NOLOAD)) {
    if (attempt(h, file_of(h, s.probe_symbol, s.soname))) return h;
  }
  if (void* p = dlsym(RTLD_DEFAULT, s.probe_symbol)) {
    Dl_info info{};
    if (dladdr(p, &info) != 0 && info.dli_fname != nullptr) {
      // The main program's own definitions (linked statically, exported) have no file to
      // reopen by name: dlopen(NULL) is the global scope.
      void* h = dlopen(*info.dli_fname != 0 ? info.dli_fname : nullptr, RTLD_NOW | RTLD_NOLOAD);
      if (h == nullptr && *info.dli_fname != 0) h = dlopen(nullptr, RTLD_NOW);
      if (h != nullptr && attempt(h, *info.dli_fname != 0 ? info.dli_fname : "the program")) return h;
    }
  }
  // 3. The soname through the loader's search path, 4. the build-time toolkit.
  dlerror();
  if (void* h = dlopen(s.soname, RTLD_NOW | RTLD_LOCAL)) {
    if (attempt(h, file_of(h, s.probe_symbol, s.soname))) return h;
  } else {
    tried += (tried.empty() ? "" : "; ") + std::string("dlopen(") + s.soname + "): " + dl_error();
  }
  if (*s.build_dir != 0) {
    std::string path = std::string(s.build_dir) + "/" + s.soname;
    dlerror();
    if (void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      if (attempt(h, path)) return h;
    } else {
      tried += "; dlopen(" + path + "): " + dl_error();
    }
  }
  *why = std::string(s.what) + " (" + s.soname + ") is not usable: " + tried + " (set " + s.env +
         " to its file, or to none)";
  return nullptr;
}

// A library's function table once loaded, or why it is not usable.
template <class Api>
struct Loaded {
  Api api;
  bool ok = false;
  std::string why;
  std::string file;
};

// The version check of a loaded library: its version call succeeded (`called`) and its
// major version is the build's. `have` and `want` describe the two versions for the message.
bool same_major(const std::string& file, const char* call, bool called, int have_major, int want_major,
                const std::string& have, const std::string& want, std::string* why) {
  if (!called) {
    *why = file + ": " + call + " failed";
    return false;
  }
  if (have_major != want_major) {
    *why = file + " is " + have + ", but this libflowlane was built with " + want + " (major versions differ)";
    return false;
  }
  return true;
}

// Opens the library of `s` once, filling its table with `fill(h, file, &api, why)` (resolve
// every function, check the version; false with *why). Never destroyed: engines may
// outlive statics.
template <class Api, class Fill>
const Loaded<Api>* load_library(Spec s, Fill fill) {
  auto* out = new Loaded<Api>();
  s.accept = [out, fill](void* h, const std::string& file, std::string* why) {
    Api t;
    if (!fill(h, file, &t, why)) return false;
    out->api = t;
    return true;
  };
  out->ok = open_library(s, &out->file, &out->why) != nullptr;
  return out;
}

// ---- CUDA graphs: resolved optionally from the accepted runtime (gpu/graph.cpp) ----------

#define FL_GRAPH_CHECK(f) static_assert(std::is_same_v<decltype(CudaGraphApi::f), decltype(&::f)>, #f);
#define FL_GRAPH_CHECK_T(f, T) \
  static_assert(std::is_same_v<decltype(CudaGraphApi::f), decltype(static_cast<T>(&::f))>, #f);
FL_CUDA_GRAPH_FUNCTIONS(FL_GRAPH_CHECK, FL_GRAPH_CHECK_T)
#undef FL_GRAPH_CHECK_T
#undef FL_GRAPH_CHECK

struct GraphCalls {
  CudaGraphApi api;
  std::string why = "the CUDA runtime is not loaded";
};
GraphCalls& graph_calls() {
  static GraphCalls* g = new GraphCalls();  // never destroyed, like the runtime's table
  return *g;
}

// Called once, with the handle of the runtime that was accepted.
void resolve_graph_calls(void* h, const std::string& file) {
  GraphCalls& g = graph_calls();
  std::string why;
#define FL_GRAPH_RESOLVE(f) \
  if (why.empty() && !resolve(h, file, FL_RT_NAME(f), &g.api.f, &why)) g.why = why;
#define FL_GRAPH_RESOLVE_T(f, T) FL_GRAPH_RESOLVE(f)
  FL_CUDA_GRAPH_FUNCTIONS(FL_GRAPH_RESOLVE, FL_GRAPH_RESOLVE_T)
#undef FL_GRAPH_RESOLVE_T
#undef FL_GRAPH_RESOLVE
  if (why.empty()) g.why.clear();
}
// ---- end of CUDA graphs --------------------------------------------------------------------

// ---- the CUDA runtime ------------------------------------------------------------------

constexpr int kCudaMajor = CUDART_VERSION / 1000;

const Loaded<CudaApi>& cuda_load() {
  static const Loaded<CudaApi>* l = [] {
    Spec s;
    s.what = "the CUDA runtime";
    s.env = "FLOWLANE_CUDART_PATH";
    static const std::string soname = "libcudart.so." + std::to_string(kCudaMajor);
    s.soname = soname.c_str();
    s.build_dir = FLOWLANE_CUDART_DIR;
    s.probe_symbol = "cudaRuntimeGetVersion";
    return load_library<CudaApi>(s, [](void* h, const std::string& file, CudaApi* t, std::string* why) {
#define FL_RT_RESOLVE(f) \
  if (!resolve(h, file, FL_RT_NAME(f), &t->f, why)) return false;
#define FL_RT_RESOLVE_T(f, T) FL_RT_RESOLVE(f)
      FL_CUDA_FUNCTIONS(FL_RT_RESOLVE, FL_RT_RESOLVE_T)
#undef FL_RT_RESOLVE_T
#undef FL_RT_RESOLVE
      int v = 0;
      const bool called = t->cudaRuntimeGetVersion(&v) == cudaSuccess;
      const bool ok = same_major(file, "cudaRuntimeGetVersion", called, v / 1000, kCudaMajor,
                                 "CUDA runtime " + std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10),
                                 "CUDA " + std::to_string(kCudaMajor), why);
      if (ok) resolve_graph_calls(h, file);  // CUDA graphs: optional
      return ok;
    });
  }();
  return *l;
}

// The optional entry points, from the library the runtime was loaded from (or the global
// scope, for a program's own runtime): null where missing.
CudaOptionalApi load_optional() {
  CudaOptionalApi t;
  const std::string& file = cuda_load().file;
  void* h = file.empty() || file == "the program" ? dlopen(nullptr, RTLD_NOW) : dlopen(file.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) return t;
#define FL_RT_OPTIONAL(f) t.f = reinterpret_cast<decltype(t.f)>(dlsym(h, FL_RT_NAME(f)));
#define FL_RT_OPTIONAL_T(f, T) FL_RT_OPTIONAL(f)
  FL_CUDA_OPTIONAL_FUNCTIONS(FL_RT_OPTIONAL, FL_RT_OPTIONAL_T)
#undef FL_RT_OPTIONAL_T
#undef FL_RT_OPTIONAL
  return t;
}

}  // namespace

const CudaOptionalApi& cu_optional() {
  static const CudaOptionalApi t = cuda_load().ok ? load_optional() : CudaOptionalApi{};
  return t;
}

const CudaApi& cu() { return cuda_load().api; }
bool cuda_loaded() { return cuda_load().ok; }
const CudaGraphApi& cu_graph() { return graph_calls().api; }
const std::string& cuda_graph_unavailable() {
  if (!cuda_load().ok) return cuda_load().why;
  return graph_calls().why;
}
const std::string& cuda_unavailable() { return cuda_load().why; }
const std::string& cuda_library() { return cuda_load().file; }

// ---- NCCL ------------------------------------------------------------------------------

#if FLOWLANE_HAVE_NCCL
namespace {

#define FL_NCCL_CHECK(f) static_assert(std::is_same_v<decltype(NcclApi::f), decltype(&::f)>, #f);
FL_NCCL_FUNCTIONS(FL_NCCL_CHECK)

// NCCL >= 2.9 encodes major * 10000 + minor * 100 + patch, older ones major * 1000 + ...
int nccl_major(int code) { return code >= 10000 ? code / 10000 : code / 1000; }

const Loaded<NcclApi>& nccl_load() {
  static const Loaded<NcclApi>* l = [] {
    Spec s;
    s.what = "NCCL";
    s.env = "FLOWLANE_NCCL_PATH";
    s.soname = "libnccl.so." FL_RT_NAME(NCCL_MAJOR);
    s.build_dir = FLOWLANE_NCCL_DIR;
    s.probe_symbol = "ncclGetVersion";
    return load_library<NcclApi>(s, [](void* h, const std::string& file, NcclApi* t, std::string* why) {
#define FL_RT_RESOLVE(f) \
  if (!resolve(h, file, FL_RT_NAME(f), &t->f, why)) return false;
      FL_NCCL_FUNCTIONS(FL_RT_RESOLVE)
#undef FL_RT_RESOLVE
      int v = 0;
      const bool called = t->ncclGetVersion(&v) == ncclSuccess;
      return same_major(file, "ncclGetVersion", called, nccl_major(v), nccl_major(NCCL_VERSION_CODE),
                        "NCCL version " + std::to_string(v), "NCCL " + std::to_string(NCCL_VERSION_CODE), why);
    });
  }();
  return *l;
}

}  // namespace

const NcclApi& nccl() { return nccl_load().api; }
bool nccl_loaded() { return nccl_load().ok; }
const std::string& nccl_unavailable() { return nccl_load().why; }
#endif

}  // namespace flowlane::gpu

#endif

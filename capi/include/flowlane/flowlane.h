/*
 * flowlane.h — the public C API of flowlane, an asynchronous execution engine.
 *
 * C99, self-contained. This header is the manual: every function says what it does,
 * who owns what, when a callback may still run and which statuses it returns.
 *
 * Conventions
 *  - Every function returns fl_status_t unless shown otherwise. On failure,
 *    fl_last_error_message() describes the calling thread's last failed call.
 *  - Handles are typed opaque pointers. NULL, stale (used after release/destroy) and
 *    foreign handles are detected and answered with FL_ERR_INVALID_HANDLE or
 *    FL_ERR_INVALID_ARGUMENT; they never crash. Using a handle concurrently with the call
 *    that releases it is a race in the caller, as with free(), except another release:
 *    of concurrent DESTRUCTOR calls on one handle exactly one frees it, and the others
 *    return FL_ERR_INVALID_HANDLE without touching it.
 *  - Descriptors are size-prefixed (struct_size first), zero means "default", and a
 *    descriptor larger than this version knows is accepted only if its unknown tail is
 *    all zero bytes (else FL_ERR_INVALID_ARGUMENT).
 *  - Outputs come last and are named out_*. On failure outputs are left unchanged.
 *  - No C++ exception ever crosses this boundary.
 *  - Every function's comment starts with its role, as sqlite3.h tags them:
 *      CONSTRUCTOR: T   makes a T (its out_* parameter);
 *      DESTRUCTOR: T    frees a T; NULL is a no-op;
 *      METHOD: T        works on a T given as its first parameter;
 *      FUNCTION         needs no handle (version, status names, process-wide CUDA calls).
 *    EXPERIMENTAL after the role: the call works and is tested, but its signature or
 *    semantics may still change in a minor version; the reason is given with it.
 *  - Renamed functions keep their old names exported, marked FL_DEPRECATED. The mark is
 *    silent unless the caller defines FL_WARN_DEPRECATED before including this header
 *    (then GCC and Clang warn), so builds with -Werror keep compiling.
 *
 * How failures are reported
 *  - An instruction fails when its function returns a status other than FL_OK (or throws,
 *    or its device work fails). It then poisons every object it writes; an instruction
 *    that reads a poisoned value is skipped (its function is not called, its cleanup is)
 *    and fails with FL_ERR_DEPENDENCY_FAILED, poisoning what it writes in turn. A later
 *    write-only instruction gives an object a clean value again.
 *  - A failure and the dependents it poisoned form one entry: the wait that returns it
 *    gives the failure's status and message (naming the instruction that failed) followed
 *    by "(N instructions that depended on it were skipped)". Dependents skipped after the
 *    entry was returned are not reported again.
 *  - Each entry is returned exactly once, to one of any number of concurrent waiters:
 *    fl_engine_synchronize returns the oldest entry among the work it waited for,
 *    fl_stream_synchronize the oldest with a member on its stream, fl_instr_wait_for the
 *    outcome of its instruction; the other waiters get FL_OK (or another entry).
 *    fl_object_wait returns the poison of the object's current value to every caller, and
 *    the entry then counts as returned. Each of these calls costs O(1) in the number of
 *    failures and dependents (the oldest entry is at the head of a list).
 *  - Entries are kept until a wait returns them, however many there are (only
 *    fl_engine_destroy drops the entries nobody returned), and each keeps the records of its
 *    instructions: failures that nobody waits for accumulate. A wait returns one entry, so a
 *    batch with several failures needs as many waits (repeat until one returns FL_OK).
 *
 * Calls from callbacks (an instruction's fn or cleanup, an object's release, a task or
 * fl_parallel_for body, the watchdog callback)
 *  - Submissions never block on the in-flight window from code the engine runs: they are
 *    admitted over the limit, so an engine cannot deadlock on itself.
 *  - A wait that could only wait for the calling instruction itself is refused with
 *    FL_ERR_INVALID_ARGUMENT (the engine stays usable):
 *      fl_engine_synchronize(_for) from an instruction's fn or cleanup, or from a release
 *        callback run by an instruction's completion;
 *      fl_stream_synchronize(_for) of any stream of the calling instruction's own lane;
 *      fl_object_wait(_for) when a user it would wait for is the calling instruction or
 *        an instruction of its own lane submitted after it that has not completed;
 *      fl_instr_wait_for of an instruction of its own lane submitted after it;
 *      from an instruction's fn or cleanup, fl_instr_wait_for, fl_stream_synchronize(_for)
 *        and fl_object_wait(_for) of work that waits for the calling instruction on any
 *        lane: through objects (a reader of what it writes, a writer of what it reads or
 *        writes) and through the order of the lanes in between, directly or through
 *        others; the message names that chain. Not traced: waits from a release
 *        callback or a task group's task (their instruction may be completing), and the
 *        lane order behind a caller run inline (FL_SUBMIT_INLINE);
 *      fl_engine_drain and fl_engine_destroy from any code the engine runs (including its
 *        worker threads and the watchdog callback);
 *      fl_task_group_wait(_for) / fl_task_group_destroy of a group from one of its own tasks.
 *    A fl_parallel_for body or task-graph task that an instruction's callback runs counts
 *    as part of that callback on whichever worker runs it (the same refusals apply there).
 *    So does a task of a task group created inside an instruction's callback, until that
 *    instruction completes (a group may outlive it: its later tasks wait freely).
 *  - Other waits are allowed: a worker that waits helps only with its own callback's work
 *    (never another instruction) and a spare worker stands in while it blocks, so waits
 *    inside callbacks deadlock only if they form a cycle (a hang the state dump names;
 *    fl_engine_drain and fl_engine_destroy cancel the waits on it: FL_ERR_CANCELLED). A
 *    cycle may run through task groups: a wait for a group (fl_task_group_wait(_for),
 *    fl_task_group_destroy) waits for what the group's unfinished tasks wait for.
 *  - While fl_engine_destroy drains, callbacks may still call in: submissions and new
 *    streams, communicators and task groups answer FL_ERR_SHUTDOWN; waits, queries, stats
 *    and dumps give their real answer.
 */
#ifndef FLOWLANE_FLOWLANE_H
#define FLOWLANE_FLOWLANE_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#  define FL_API
#elif defined(__GNUC__)
#  define FL_API __attribute__((visibility("default")))
#else
#  define FL_API
#endif

#if defined(FL_WARN_DEPRECATED) && defined(__GNUC__)
#  define FL_DEPRECATED(replacement) __attribute__((deprecated("use " replacement)))
#else
#  define FL_DEPRECATED(replacement)
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================== */
/* Version and status                                                        */
/* ======================================================================== */

#define FL_VERSION_MAJOR 0
#define FL_VERSION_MINOR 1
#define FL_VERSION_PATCH 0
#define FL_VERSION_HEX ((FL_VERSION_MAJOR << 16) | (FL_VERSION_MINOR << 8) | FL_VERSION_PATCH)

/* X-macro table of every status: (name, value, description). Values are pinned
   forever; new statuses are only appended. */
#define FL_STATUS_MAP(X)                                                              \
  X(FL_OK, 0, "success")                                                              \
  X(FL_ERR_INVALID_ARGUMENT, 1, "invalid argument (NULL pointer, bad flag, bad struct_size, cycle)") \
  X(FL_ERR_INVALID_HANDLE, 2, "stale, released or foreign handle")                    \
  X(FL_ERR_OUT_OF_RANGE, 3, "value out of range (lane, device index, count)")         \
  X(FL_ERR_NO_MEMORY, 4, "out of memory")                                             \
  X(FL_ERR_WOULD_BLOCK, 5, "in-flight window full and FL_SUBMIT_NONBLOCKING given")  \
  X(FL_ERR_EXHAUSTED, 6, "every lane is held")                                        \
  X(FL_ERR_SHUTDOWN, 7, "engine is being destroyed or was drained")                   \
  X(FL_ERR_INSTRUCTION_FAILED, 8, "an instruction reported failure")                  \
  X(FL_ERR_DEPENDENCY_FAILED, 9, "skipped: something it read was poisoned")           \
  X(FL_ERR_CANCELLED, 10, "cancelled")                                                \
  X(FL_ERR_TIMEOUT, 11, "timed out")                                                  \
  X(FL_ERR_UNSUPPORTED, 12, "not supported by this build or this object")            \
  X(FL_ERR_NO_DEVICE, 13, "no such device at run time")                               \
  X(FL_ERR_CUDA, 14, "CUDA error")                                                    \
  X(FL_ERR_NCCL, 15, "NCCL error")                                                    \
  X(FL_ERR_INTERNAL, 16, "internal error")                                            \
  X(FL_ERR_CAPTURING, 17, "refused while the calling thread captures on this engine")

typedef enum fl_status {
#define FL_STATUS_ENUM_(name, value, text) name = value,
  FL_STATUS_MAP(FL_STATUS_ENUM_)
#undef FL_STATUS_ENUM_
} fl_status_t;
/* The number of statuses is the number of FL_STATUS_MAP entries: count them with an X
   macro (e.g. `#define COUNT(n, v, t) +1` and `0 FL_STATUS_MAP(COUNT)`). */

/* FUNCTION — (major<<16)|(minor<<8)|patch of the loaded library; compare with
   FL_VERSION_HEX. Never fails. */
FL_API uint32_t fl_version_hex(void);
/* FUNCTION — "0.1.0" (static storage). Never fails. */
FL_API const char* fl_version_string(void);
/* FUNCTION — "FL_ERR_OUT_OF_RANGE"; "FL_STATUS_UNKNOWN" for values not in the table.
   Static storage. Never fails. */
FL_API const char* fl_status_name(fl_status_t status);
/* FUNCTION — a one-line English description of the status. Static storage. Never fails. */
FL_API const char* fl_status_string(fl_status_t status);
/* FUNCTION — the calling thread's last failed call, in words a user can act on; "" after
   a success. Valid until the next flowlane call on this thread. Never NULL. */
FL_API const char* fl_last_error_message(void);
/* FUNCTION — sets the calling thread's last error message to `message` (copied; NULL is
   "") and returns `status`: for libraries built on flowlane that report their failures as
   flowlane does (libflowlane_mpi.so). Never fails. */
FL_API fl_status_t fl_set_last_error_message(fl_status_t status, const char* message);

/* ======================================================================== */
/* Handles                                                                   */
/* ======================================================================== */

typedef struct fl_engine fl_engine_t;
typedef struct fl_stream fl_stream_t;
typedef struct fl_object fl_object_t;
typedef struct fl_taskgraph fl_taskgraph_t;
typedef struct fl_comm fl_comm_t;
typedef struct fl_instr_ctx fl_instr_ctx_t;
typedef uint64_t fl_instr_id;

/* ======================================================================== */
/* Engine                                                                    */
/* ======================================================================== */

typedef struct fl_engine_desc {
  uint64_t struct_size;    /* sizeof(fl_engine_desc_t) */
  uint64_t num_workers;    /* host worker threads; 0 = one per logical core */
  uint64_t max_lanes;      /* 0 = 8; lane ids are 0 .. max_lanes-1; lane 0 is the default (max 4096) */
  uint64_t inflight_limit; /* instructions submitted but not completed; 0 = default (4096) */
  uint64_t watchdog_ms;    /* 0 = off (or FLOWLANE_WATCHDOG_MS); see fl_engine_create, fl_engine_set_watchdog */
  uint64_t flags;          /* 0 (no flags defined yet; non-zero is FL_ERR_INVALID_ARGUMENT) */
} fl_engine_desc_t;
#define FL_ENGINE_DESC_INIT { sizeof(fl_engine_desc_t), 0, 0, 0, 0, 0 }

/* CONSTRUCTOR: fl_engine_t
   desc NULL means all defaults. Starts the worker threads. watchdog_ms != 0 turns the
   watchdog on with the stderr sink (as fl_engine_set_watchdog with that timeout_ms). The
   environment, read at each creation, can turn diagnostics on without code:
   FLOWLANE_WATCHDOG_MS=<ms> does the same as watchdog_ms for an engine created with
   watchdog_ms 0 (a value that is not a count of milliseconds up to one day is ignored,
   with a line on stderr); FLOWLANE_TRACE=<path> starts a trace (fl_trace_start).
   Returns FL_ERR_INVALID_ARGUMENT (NULL out_engine, struct_size smaller than the first
   version of the struct, non-zero unknown tail, unknown flags), FL_ERR_OUT_OF_RANGE
   (max_lanes > 4096, num_workers > 1024, inflight_limit too large, watchdog_ms over one
   day), FL_ERR_NO_MEMORY. */
FL_API fl_status_t fl_engine_create(const fl_engine_desc_t* desc, fl_engine_t** out_engine);

/* METHOD: fl_engine_t
   Waits for every instruction submitted (by any thread) before the call. Returns FL_OK,
   or the first failure among them not yet returned by another wait (each failure is
   returned once: "How failures are reported" above). FL_ERR_INVALID_HANDLE (NULL, stale);
   FL_ERR_INVALID_ARGUMENT from an instruction's fn or cleanup or a release its completion
   runs (it would wait for itself: "Calls from callbacks"). */
FL_API fl_status_t fl_engine_synchronize(fl_engine_t* engine);

/* DESTRUCTOR: fl_engine_t
   Drains all submitted work (errors are dropped: synchronize first to see them), runs
   every pending cleanup and release callback, joins threads and frees. NULL is a no-op.
   Afterwards its streams and objects are stale (FL_ERR_INVALID_HANDLE). Communicators are
   aborted first: collectives not yet matched by every rank fail with FL_ERR_CANCELLED; the
   comm handle is stale afterwards. Task graphs outlive it: running one answers
   FL_ERR_INVALID_HANDLE, and fl_taskgraph_destroy still frees it; so do task groups:
   every call of a group but fl_task_group_destroy answers FL_ERR_INVALID_HANDLE, and
   fl_task_group_destroy frees it. A wait of code the engine runs that sits on a cycle of
   waits (it can never return) is cancelled with FL_ERR_CANCELLED: a callback's or task's
   fl_object_wait, fl_stream_synchronize or fl_instr_wait_for, or, when the cycle has none
   of those, its wait for a task group (fl_task_group_wait(_for), fl_task_group_destroy:
   the group's tasks go on); a wait that is not on a cycle is never cancelled.
   While it drains, callbacks may still call in ("Calls from callbacks" above); your own
   threads must not (it frees what their calls use, a wait in progress included): stop
   them first. Once it has returned, the engine's handles answer FL_ERR_INVALID_HANDLE.
   FL_ERR_INVALID_ARGUMENT from any code the engine runs (an instruction, cleanup, release,
   task or loop body, the watchdog callback, one of its threads): refused, and the engine
   stays usable. FL_ERR_INVALID_HANDLE for a stale handle or when another thread is
   already destroying it (that call is answered at once and touches nothing of the engine). */
FL_API fl_status_t fl_engine_destroy(fl_engine_t* engine);

/* METHOD: fl_engine_t — number of lanes (max_lanes). 0 for a NULL or stale engine. */
FL_API uint32_t fl_engine_lane_count(const fl_engine_t* engine);
/* METHOD: fl_engine_t — number of host worker threads. 0 for a NULL or stale engine. */
FL_API uint32_t fl_engine_worker_count(const fl_engine_t* engine);

/* ======================================================================== */
/* Lanes                                                                     */
/* ======================================================================== */

/* METHOD: fl_engine_t
   Smallest free lane id >= 1, held until released; FL_ERR_EXHAUSTED when all are held.
   A released id is handed out again, so code that takes a fresh lane per iteration
   reuses the same streams and memory. FL_ERR_INVALID_HANDLE, FL_ERR_INVALID_ARGUMENT
   (NULL out_lane). */
FL_API fl_status_t fl_lane_acquire(fl_engine_t* engine, uint32_t* out_lane);

/* METHOD: fl_engine_t
   Work already submitted on the lane still runs. Lane 0 cannot be released
   (FL_ERR_INVALID_ARGUMENT); a lane that is not held gives FL_ERR_INVALID_ARGUMENT;
   an id >= lane count gives FL_ERR_OUT_OF_RANGE; FL_ERR_INVALID_HANDLE. */
FL_API fl_status_t fl_lane_release(fl_engine_t* engine, uint32_t lane);

/* ======================================================================== */
/* Streams                                                                   */
/* ======================================================================== */

typedef enum fl_device_type { FL_DEVICE_CPU = 0, FL_DEVICE_CUDA = 1 } fl_device_type_t;
typedef struct fl_device { int32_t type; int32_t index; } fl_device_t;
typedef enum fl_stream_kind {
  FL_STREAM_HOST = 0,
  FL_STREAM_COMPUTE = 1,
  FL_STREAM_H2D = 2,
  FL_STREAM_D2H = 3,
  FL_STREAM_COLLECTIVE = 4
} fl_stream_kind_t;

/* METHOD: fl_engine_t
   Interned: the same (lane, device, kind) always yields the same stream, valid until the
   engine is destroyed; there is nothing to release. Host streams use {FL_DEVICE_CPU, 0}
   and FL_STREAM_HOST; {FL_DEVICE_CPU, 0} with FL_STREAM_COLLECTIVE is the host
   collective stream used by host-memory communicators. CUDA kinds need a CUDA build
   (else FL_ERR_UNSUPPORTED) and an existing device (else FL_ERR_NO_DEVICE).
   Errors: FL_ERR_INVALID_HANDLE, FL_ERR_OUT_OF_RANGE (lane), FL_ERR_INVALID_ARGUMENT
   (NULL out_stream, kind, device type, CPU device index != 0, CPU with a GPU kind),
   FL_ERR_SHUTDOWN (the engine is being destroyed), FL_ERR_NO_MEMORY. */
FL_API fl_status_t fl_stream_get(fl_engine_t* engine, uint32_t lane, fl_device_t device,
                                 fl_stream_kind_t kind, fl_stream_t** out_stream);

/* METHOD: fl_stream_t
   Waits for everything submitted to this stream before the call; error rule as
   fl_engine_synchronize, restricted to this stream. From inside an instruction callback,
   a stream of the caller's own lane is refused (FL_ERR_INVALID_ARGUMENT: its later
   instructions queue behind the caller), and so is a stream holding an instruction that
   waits for the caller ("Calls from callbacks"); depend on objects instead.
   FL_ERR_CANCELLED from a callback when fl_engine_drain or fl_engine_destroy finds the
   wait on a cycle of waits. FL_ERR_INVALID_HANDLE. */
FL_API fl_status_t fl_stream_synchronize(fl_stream_t* stream);

/* METHOD: fl_stream_t — the stream's lane, device and kind. Any out pointer may be NULL.
   FL_ERR_INVALID_HANDLE. */
FL_API fl_status_t fl_stream_info(fl_stream_t* stream, uint32_t* out_lane, fl_device_t* out_device,
                                  fl_stream_kind_t* out_kind);

/* ======================================================================== */
/* Objects                                                                   */
/* ======================================================================== */

typedef void (*fl_release_fn)(void* user_data);

/* CONSTRUCTOR: fl_object_t
   A dependence object: a thing instructions read or write (a buffer, a tensor, or
   nothing — a "phony" used only for ordering). `release(user_data)` (may be NULL) runs
   exactly once, on some thread, after the caller released the object and the last
   instruction using it has completed (or during fl_engine_destroy).
   FL_ERR_INVALID_HANDLE, FL_ERR_INVALID_ARGUMENT (NULL out_object), FL_ERR_SHUTDOWN,
   FL_ERR_NO_MEMORY. */
FL_API fl_status_t fl_object_create(fl_engine_t* engine, void* user_data, fl_release_fn release,
                                    fl_object_t** out_object);

/* DESTRUCTOR: fl_object_t
   Drops the caller's reference; with no instruction using it, `release` runs in this
   call. Using the handle afterwards returns FL_ERR_INVALID_HANDLE (as does a stale or
   NULL handle here). */
FL_API fl_status_t fl_object_release(fl_object_t* object);

/* METHOD: fl_object_t
   Waits, as StarPU's data acquire does, until the caller may access the object:
   FL_READ  -> every write submitted before the call has completed;
   FL_WRITE -> every read and write submitted before the call has completed.
   It waits for nothing else. Called from a program thread it returns once their whole
   completion has finished (the release callbacks it runs included), so a stream wait,
   fl_instr_query or stats issued afterwards see them complete. Called from code an engine
   runs (a callback, a task) it returns as soon as their results are published, when their
   dependents may start: a release callback run by their completion may then wait for the
   caller without a deadlock. Returns FL_ERR_INSTRUCTION_FAILED or
   FL_ERR_DEPENDENCY_FAILED while the object's current value is poisoned, with a message
   naming the instruction that failed (every call that observes the poison returns it,
   and the failure then counts as returned for fl_engine_synchronize).
   FL_ERR_INVALID_ARGUMENT for an access other than FL_READ, FL_WRITE, FL_READ_WRITE, or
   from a callback when a user it would wait for is the calling instruction, one queued
   behind it on its lane, or one that waits for it ("Calls from callbacks"). FL_ERR_CANCELLED when fl_engine_drain
   or fl_engine_destroy finds the wait on a cycle of waits. FL_ERR_INVALID_HANDLE. */
FL_API fl_status_t fl_object_wait(fl_object_t* object, uint32_t access);

/* METHOD: fl_object_t — the user_data given at creation. FL_ERR_INVALID_HANDLE,
   FL_ERR_INVALID_ARGUMENT (NULL out_user_data). */
FL_API fl_status_t fl_object_user_data(fl_object_t* object, void** out_user_data);

/* ======================================================================== */
/* Host instructions                                                         */
/* ======================================================================== */

enum { FL_READ = 1, FL_WRITE = 2, FL_READ_WRITE = 3 };
typedef struct fl_operand {
  fl_object_t* object;
  uint32_t access;   /* FL_READ, FL_WRITE or FL_READ_WRITE */
  uint32_t reserved; /* 0 */
} fl_operand_t;

/* An instruction's function. Runs on a worker thread. Return FL_OK, or a failure status
   (any non-OK value; FL_ERR_INSTRUCTION_FAILED is typical): the instruction then fails
   and poisons every object it writes. */
typedef fl_status_t (*fl_host_fn)(fl_instr_ctx_t* ctx, void* user_data);

/* The context `ctx` is valid only inside the fn it was passed to, on that thread. It is
   checked like every handle: a NULL, stale or foreign ctx (another instruction's, or used
   after fn returned or from another thread) is never dereferenced; the call then answers
   as described and sets fl_last_error_message(). */

/* METHOD: fl_instr_ctx_t — attaches a message to this instruction's failure (copied; NULL
   means ""), used when fn returns a failure. Does nothing for an invalid ctx. */
FL_API void fl_instr_set_error(fl_instr_ctx_t* ctx, const char* message);
/* METHOD: fl_instr_ctx_t — the lane the instruction runs on; 0 for an invalid ctx. */
FL_API uint32_t fl_instr_get_lane(const fl_instr_ctx_t* ctx);
/* METHOD: fl_instr_ctx_t — the instruction's id; 0 for an invalid ctx. */
FL_API fl_instr_id fl_instr_get_id(const fl_instr_ctx_t* ctx);
/* METHOD: fl_instr_ctx_t — the engine the instruction belongs to (to submit follow-up
   work); NULL for an invalid ctx. */
FL_API fl_engine_t* fl_instr_get_engine(const fl_instr_ctx_t* ctx);
/* METHOD: fl_instr_ctx_t — deprecated spelling of fl_instr_get_lane (same behaviour). */
FL_API FL_DEPRECATED("fl_instr_get_lane") uint32_t fl_instr_lane(const fl_instr_ctx_t* ctx);
/* METHOD: fl_instr_ctx_t — deprecated spelling of fl_instr_get_engine (same behaviour). */
FL_API FL_DEPRECATED("fl_instr_get_engine") fl_engine_t* fl_instr_engine(const fl_instr_ctx_t* ctx);

#define FL_SUBMIT_NONBLOCKING 1u
/* fl_host_instr_t.flags: run fn (and cleanup) on the calling thread, before
   fl_submit_host returns, when the instruction is ready at once: its lane has nothing
   queued or running, and every instruction it depends on has completed. Otherwise it is
   queued as without the flag. Either way its id, its order, its dependencies and how its
   failure is reported are the same; fl_submit_host still returns FL_OK when fn fails (a
   wait reports it). Its completion runs on the caller too: so does the release callback
   of an operand object already released whose last use it was. Ignored (queued) when the
   caller is code the engine runs (a callback,
   a task or loop body, a worker): one callback never runs nested in another. Use it for
   short host work submitted when the engine is likely idle (the OpenMP "undeferred task"):
   a long fn holds up the submitting thread. Host instructions only. */
#define FL_SUBMIT_INLINE 2u

typedef struct fl_host_instr {
  uint64_t struct_size;
  fl_host_fn fn;              /* required */
  void* user_data;
  fl_release_fn cleanup;      /* may be NULL; called exactly once with user_data, after fn
                                 ran or after the instruction was skipped */
  const fl_operand_t* operands; /* copied at submit */
  uint64_t num_operands;
  const char* name;           /* copied; shown in errors, dumps and traces; may be NULL */
  uint64_t flags;             /* FL_SUBMIT_NONBLOCKING, FL_SUBMIT_INLINE */
} fl_host_instr_t;
#define FL_HOST_INSTR_INIT { sizeof(fl_host_instr_t), 0, 0, 0, 0, 0, 0, 0 }

/* METHOD: fl_stream_t
   Asynchronous (with FL_SUBMIT_INLINE, fn may run on the caller before the return). Blocks
   only while the in-flight window is full (or returns
   FL_ERR_WOULD_BLOCK with FL_SUBMIT_NONBLOCKING). Submissions made from inside an
   instruction callback never block: they are admitted even over the window, so an
   engine cannot deadlock on itself. If this returns an error, neither fn nor cleanup is
   ever called. An object listed more than once counts once, with the union of its
   accesses. The stream must be a host stream (FL_STREAM_HOST).
   Errors: FL_ERR_INVALID_HANDLE (stream, or an operand object stale/foreign),
   FL_ERR_INVALID_ARGUMENT (NULL instr/fn, bad struct_size, operands NULL with a count,
   access 0 or unknown, reserved != 0, unknown flags, non-host stream), FL_ERR_OUT_OF_RANGE
   (more than 2^20 operands), FL_ERR_SHUTDOWN (destroy or drain under way), FL_ERR_WOULD_BLOCK,
   FL_ERR_NO_MEMORY. */
FL_API fl_status_t fl_submit_host(fl_stream_t* stream, const fl_host_instr_t* instr,
                                  fl_instr_id* out_instr_id);

/* ======================================================================== */
/* Task graphs and parallel loops (no stream ordering)                       */
/* ======================================================================== */

typedef fl_status_t (*fl_task_fn)(void* user_data);
typedef fl_status_t (*fl_range_fn)(uint64_t lo, uint64_t hi, void* user_data);

/* METHOD: fl_engine_t
   Calls body on disjoint subranges [lo, hi) covering [begin, end), each at most `grain`
   long (grain 0: chosen by the library, about 1/64 of a thread's share), in parallel on the
   engine's workers; the calling thread helps. Ranges are split in halves only while other
   threads look for work, so a small grain costs little. Returns the first failure a body
   returned (remaining subranges are not started). May be called from inside a task or
   instruction. FL_ERR_INVALID_HANDLE,
   FL_ERR_INVALID_ARGUMENT (NULL body, begin > end), FL_ERR_SHUTDOWN. */
FL_API fl_status_t fl_parallel_for(fl_engine_t* engine, uint64_t begin, uint64_t end, uint64_t grain,
                                   fl_range_fn body, void* user_data);

/* CONSTRUCTOR: fl_taskgraph_t — an empty task graph that runs on `engine`'s workers (it
   may outlive the engine: see fl_engine_destroy). FL_ERR_INVALID_HANDLE,
   FL_ERR_INVALID_ARGUMENT (NULL out_graph), FL_ERR_NO_MEMORY. */
FL_API fl_status_t fl_taskgraph_create(fl_engine_t* engine, fl_taskgraph_t** out_graph);
/* METHOD: fl_taskgraph_t — adds a node; name copied, may be NULL. Node ids are dense from 0.
   FL_ERR_INVALID_HANDLE, FL_ERR_INVALID_ARGUMENT (NULL fn or out_node, graph running),
   FL_ERR_OUT_OF_RANGE (the graph is full), FL_ERR_NO_MEMORY. */
FL_API fl_status_t fl_taskgraph_add(fl_taskgraph_t* graph, fl_task_fn fn, void* user_data,
                                    const char* name, uint64_t* out_node);
/* METHOD: fl_taskgraph_t — `after` starts only once `before` has finished.
   FL_ERR_OUT_OF_RANGE for unknown nodes; FL_ERR_INVALID_ARGUMENT for before == after or
   while the graph is running; FL_ERR_INVALID_HANDLE. */
FL_API fl_status_t fl_taskgraph_precede(fl_taskgraph_t* graph, uint64_t before, uint64_t after);
/* METHOD: fl_taskgraph_t
   Runs every node once, respecting edges. num_threads: -1 all logical cores, 0 physical
   cores, N > 0 at most N threads. Cycle: FL_ERR_INVALID_ARGUMENT naming a node on it. A
   failing task stops unstarted tasks and its error is returned. A graph can be run many
   times; running one graph from two threads at once gives FL_ERR_INVALID_ARGUMENT.
   FL_ERR_INVALID_ARGUMENT also for num_threads < -1; FL_ERR_INVALID_HANDLE (graph, or its
   engine destroyed), FL_ERR_SHUTDOWN. */
FL_API fl_status_t fl_taskgraph_run(fl_taskgraph_t* graph, int64_t num_threads);
/* DESTRUCTOR: fl_taskgraph_t — NULL is a no-op. FL_ERR_INVALID_HANDLE (also to all but
   one of concurrent calls), FL_ERR_INVALID_ARGUMENT while the graph is running. */
FL_API fl_status_t fl_taskgraph_destroy(fl_taskgraph_t* graph);

/* ======================================================================== */
/* GPU (CUDA builds; every call returns FL_ERR_UNSUPPORTED in a CPU-only build)  */
/* ======================================================================== */

/* Every call of this section is EXPERIMENTAL: the CUDA backend is tested against a fake
   CUDA runtime on every CUDA build, but has not yet been validated at scale on GPUs.
   Descriptors and semantics may still change. A CUDA build loads the CUDA runtime and
   NCCL on first use: where they are missing, these calls answer FL_ERR_UNSUPPORTED with
   the reason, and everything else works. */

/* FUNCTION, EXPERIMENTAL (see above) — number of CUDA devices visible (0 when none).
   FL_ERR_INVALID_ARGUMENT (NULL out_count), FL_ERR_UNSUPPORTED in a CPU-only build. */
FL_API fl_status_t fl_cuda_device_count(int32_t* out_count);

typedef struct fl_dim3 { uint32_t x, y, z; } fl_dim3_t;

typedef struct fl_kernel_instr {
  uint64_t struct_size;
  const void* func;             /* a __global__ function's host-side handle (required) */
  fl_dim3_t grid;               /* 0 in a component = 1 */
  fl_dim3_t block;              /* 0 in a component = 1 */
  uint64_t shared_mem_bytes;
  const void* const* args;      /* args[i] points at argument i; the bytes are copied at submit */
  const uint64_t* arg_sizes;    /* arg_sizes[i] = sizeof(argument i) */
  uint64_t num_args;
  const fl_operand_t* operands; /* copied at submit */
  uint64_t num_operands;
  const char* name;             /* copied; may be NULL */
  uint64_t flags;               /* FL_SUBMIT_NONBLOCKING */
} fl_kernel_instr_t;
#define FL_KERNEL_INSTR_INIT { sizeof(fl_kernel_instr_t), 0, {0, 0, 0}, {0, 0, 0}, 0, 0, 0, 0, 0, 0, 0, 0 }

/* Errors every fl_submit_kernel / fl_submit_device / fl_submit_memcpy shares:
   FL_ERR_UNSUPPORTED (CPU-only build), FL_ERR_INVALID_HANDLE (stream, operand objects),
   FL_ERR_INVALID_ARGUMENT (not a CUDA stream, NULL or mis-sized descriptor, bad operands,
   unknown flags), FL_ERR_SHUTDOWN, FL_ERR_WOULD_BLOCK, FL_ERR_NO_MEMORY. Window, operand
   and callback rules are those of fl_submit_host. The instruction's device work is
   ordered after its device predecessors on the device, never by a host wait; a failure
   of the launch or of the work (FL_ERR_CUDA) fails the instruction like a host failure. */

/* METHOD: fl_stream_t, EXPERIMENTAL (see above) — launches a __global__ function on a CUDA
   stream (COMPUTE, H2D, D2H, COLLECTIVE kinds); the argument bytes are copied at submit.
   Plus FL_ERR_INVALID_ARGUMENT (NULL func, args NULL with num_args, an argument size of
   0), FL_ERR_OUT_OF_RANGE (too many arguments or argument bytes). */
FL_API fl_status_t fl_submit_kernel(fl_stream_t* stream, const fl_kernel_instr_t* instr,
                                    fl_instr_id* out_instr_id);

/* A device function: receives the instruction's cudaStream_t (as void*) and may enqueue
   anything on it (cuBLAS, several kernels). Return FL_OK or a failure status. */
typedef fl_status_t (*fl_device_fn)(fl_instr_ctx_t* ctx, void* cuda_stream, void* user_data);

typedef struct fl_device_instr {
  uint64_t struct_size;
  fl_device_fn fn;              /* required */
  void* user_data;
  fl_release_fn cleanup;        /* may be NULL; called exactly once, after the GPU work it
                                   enqueued has completed, or after the instruction was skipped */
  const fl_operand_t* operands;
  uint64_t num_operands;
  const char* name;
  uint64_t flags;
} fl_device_instr_t;
#define FL_DEVICE_INSTR_INIT { sizeof(fl_device_instr_t), 0, 0, 0, 0, 0, 0, 0 }

/* METHOD: fl_stream_t, EXPERIMENTAL (see above) — runs fn on the lane's worker with the
   CUDA stream, for it to enqueue work on; fn must not wait for that work. cleanup runs
   once, after the enqueued work completed or after the instruction was skipped. Plus
   FL_ERR_INVALID_ARGUMENT (NULL fn). */
FL_API fl_status_t fl_submit_device(fl_stream_t* stream, const fl_device_instr_t* instr,
                                    fl_instr_id* out_instr_id);

typedef enum fl_memcpy_kind {
  FL_MEMCPY_H2D = 1,
  FL_MEMCPY_D2H = 2,
  FL_MEMCPY_D2D = 3,
  FL_MEMSET = 4 /* dst[0..bytes) = (uint8_t)value; src unused */
} fl_memcpy_kind_t;

typedef struct fl_memcpy_instr {
  uint64_t struct_size;
  uint32_t kind;                /* fl_memcpy_kind_t */
  uint32_t value;               /* byte value for FL_MEMSET */
  void* dst;
  const void* src;
  uint64_t bytes;
  const fl_operand_t* operands;
  uint64_t num_operands;
  const char* name;
  uint64_t flags;
} fl_memcpy_instr_t;
#define FL_MEMCPY_INSTR_INIT { sizeof(fl_memcpy_instr_t), 0, 0, 0, 0, 0, 0, 0, 0, 0 }

/* METHOD: fl_stream_t, EXPERIMENTAL (see above) — an asynchronous copy or memset of
   `bytes` on a CUDA stream (cudaMemcpyAsync / cudaMemsetAsync); list the objects the
   buffers stand for as operands. Plus FL_ERR_INVALID_ARGUMENT (unknown kind, NULL dst, or
   NULL src for a copy, with bytes > 0; FL_MEMSET value > 255). */
FL_API fl_status_t fl_submit_memcpy(fl_stream_t* stream, const fl_memcpy_instr_t* instr,
                                    fl_instr_id* out_instr_id);

/* FUNCTION, EXPERIMENTAL (see above) — `bytes` of page-locked host memory (cudaHostAlloc),
   for copies that overlap with compute. FL_ERR_INVALID_ARGUMENT (NULL out_ptr, bytes 0),
   FL_ERR_NO_MEMORY, FL_ERR_CUDA, FL_ERR_UNSUPPORTED. */
FL_API fl_status_t fl_host_alloc_pinned(uint64_t bytes, void** out_ptr);
/* FUNCTION, EXPERIMENTAL (see above) — frees memory from fl_host_alloc_pinned
   (cudaFreeHost); NULL is a no-op. FL_ERR_CUDA (e.g. a pointer it did not allocate),
   FL_ERR_UNSUPPORTED. */
FL_API fl_status_t fl_host_free_pinned(void* ptr);

/* FUNCTION, EXPERIMENTAL (see above) — CUDA's stream priority range for a device (lower
   number = higher priority). FL_ERR_INVALID_ARGUMENT (NULL out pointer), FL_ERR_NO_DEVICE,
   FL_ERR_CUDA, FL_ERR_UNSUPPORTED. */
FL_API fl_status_t fl_cuda_priority_range(int32_t device, int32_t* out_least, int32_t* out_greatest);
/* METHOD: fl_stream_t, EXPERIMENTAL (see above) — sets the priority of a CUDA stream before
   its first instruction (FL_ERR_INVALID_ARGUMENT afterwards, or for a host stream); the
   value is clamped to the device's range and the applied value is returned in out_applied
   (may be NULL). FL_ERR_INVALID_HANDLE, FL_ERR_CUDA, FL_ERR_UNSUPPORTED. */
FL_API fl_status_t fl_stream_set_priority(fl_stream_t* stream, int32_t priority, int32_t* out_applied);

/* ======================================================================== */
/* Collectives                                                               */
/* ======================================================================== */

/* Every call of this section is EXPERIMENTAL: multi-rank NCCL behaviour is tested only
   against a fake NCCL (one rank per process against a real one), and FL_COMM_HOST_FAKE (a
   test and CPU-only backend: ranks inside one process) may be renamed. Collectives across
   processes on host memory go through a transport (fl_comm_create_transport, below): MPI's
   is the optional plugin libflowlane_mpi.so (<flowlane/flowlane_mpi.h>). */

typedef struct fl_comm_unique_id { char internal[128]; } fl_comm_unique_id_t;

typedef enum fl_comm_backend {
  FL_COMM_NCCL = 0,       /* NCCL over CUDA devices (CUDA builds) */
  FL_COMM_HOST_FAKE = 1   /* host-memory communicator for ranks inside one process (tests,
                             CPU-only builds): ranks that share a unique id rendezvous */
} fl_comm_backend_t;

typedef struct fl_comm_desc {
  uint64_t struct_size;
  uint64_t nranks;
  uint64_t rank;
  uint64_t device;     /* CUDA device index (NCCL) */
  uint64_t lane;       /* the lane whose COLLECTIVE stream issues this comm's collectives */
  uint64_t backend;    /* fl_comm_backend_t */
  uint64_t flags;      /* 0 or FL_COMM_UNORDERED */
} fl_comm_desc_t;
/* fl_comm_desc_t.flags: by default every NCCL collective of an engine is issued in one
   submission order, whatever its communicator or lane, so ranks that submit in one program
   order cannot cross two communicators (and NCCL kernels of two communicators never occupy
   one GPU at once). FL_COMM_UNORDERED leaves this communicator's collectives out of that
   order: they overlap with other communicators' work, and the caller guarantees that every
   rank issues them consistently. Host-fake communicators accept it and are never ordered. */
#define FL_COMM_UNORDERED ((uint64_t)1)
#define FL_COMM_DESC_INIT { sizeof(fl_comm_desc_t), 0, 0, 0, 0, 0, 0 }

/* FUNCTION, EXPERIMENTAL (see above) — a fresh unique id for `backend`, to be given to
   fl_comm_create by every rank of one communicator (one rank makes it and shares it, as
   with ncclGetUniqueId). FL_ERR_INVALID_ARGUMENT (NULL out_id, unknown backend),
   FL_ERR_UNSUPPORTED (FL_COMM_NCCL without NCCL in this build or process), FL_ERR_NCCL. */
FL_API fl_status_t fl_comm_get_unique_id(fl_comm_backend_t backend, fl_comm_unique_id_t* out_id);
/* CONSTRUCTOR: fl_comm_t, EXPERIMENTAL (see above) — this engine's membership as rank
   desc->rank of desc->nranks in the communicator named by `id`; its collectives go
   through lane desc->lane's COLLECTIVE stream. Returns once every rank has joined (NCCL:
   FL_ERR_TIMEOUT after the init timeout; host backend: ranks rendezvous as they create).
   FL_ERR_INVALID_HANDLE, FL_ERR_INVALID_ARGUMENT (NULL desc, id or out_comm, bad
   struct_size, unknown flags, an id of another backend, nranks disagreeing with the other
   ranks, a rank taken twice, two ranks of one communicator on one engine),
   FL_ERR_OUT_OF_RANGE (nranks, rank, lane), FL_ERR_NO_DEVICE, FL_ERR_UNSUPPORTED,
   FL_ERR_SHUTDOWN, FL_ERR_TIMEOUT, FL_ERR_CUDA, FL_ERR_NCCL, FL_ERR_NO_MEMORY. */
FL_API fl_status_t fl_comm_create(fl_engine_t* engine, const fl_comm_desc_t* desc,
                                  const fl_comm_unique_id_t* id, fl_comm_t** out_comm);
/* DESTRUCTOR: fl_comm_t, EXPERIMENTAL (see above) — leaves the communicator: collectives
   of it not yet matched by every rank fail with FL_ERR_CANCELLED (here and at the peers of
   a host communicator); an idle NCCL communicator is finalized first. The handle is stale
   afterwards. NULL is a no-op. FL_ERR_INVALID_HANDLE. */
FL_API fl_status_t fl_comm_destroy(fl_comm_t* comm);

typedef enum fl_coll_op {
  FL_COLL_ALL_REDUCE = 1, FL_COLL_ALL_GATHER = 2, FL_COLL_REDUCE_SCATTER = 3,
  FL_COLL_BROADCAST = 4, FL_COLL_SEND = 5, FL_COLL_RECV = 6
} fl_coll_op_t;
typedef enum fl_dtype {
  FL_DTYPE_INT8 = 0, FL_DTYPE_UINT8 = 1, FL_DTYPE_INT32 = 2, FL_DTYPE_UINT32 = 3,
  FL_DTYPE_INT64 = 4, FL_DTYPE_UINT64 = 5, FL_DTYPE_FLOAT16 = 6, FL_DTYPE_FLOAT32 = 7,
  FL_DTYPE_FLOAT64 = 8, FL_DTYPE_BFLOAT16 = 9
} fl_dtype_t;
typedef enum fl_redop { FL_REDOP_SUM = 0, FL_REDOP_PROD = 1, FL_REDOP_MAX = 2, FL_REDOP_MIN = 3 } fl_redop_t;

typedef struct fl_coll_part {
  uint32_t op;          /* fl_coll_op_t */
  uint32_t dtype;       /* fl_dtype_t */
  uint32_t redop;       /* fl_redop_t */
  uint32_t peer;        /* root (broadcast) or peer (send/recv) */
  const void* sendbuf;
  void* recvbuf;
  uint64_t count;       /* elements per rank */
} fl_coll_part_t;

typedef struct fl_collective_instr {
  uint64_t struct_size;
  const fl_coll_part_t* parts;  /* issued as one group (ncclGroupStart/End); copied */
  uint64_t num_parts;
  const fl_operand_t* operands;
  uint64_t num_operands;
  const char* name;
  uint64_t flags;               /* FL_SUBMIT_NONBLOCKING; FL_SUBMIT_INLINE for a transport's
                                   communicator (its start runs on the caller when the lane is
                                   idle and the inputs ready: one hand-off less) */
} fl_collective_instr_t;
#define FL_COLLECTIVE_INSTR_INIT { sizeof(fl_collective_instr_t), 0, 0, 0, 0, 0, 0 }

/* METHOD: fl_comm_t, EXPERIMENTAL (see above) — submits one collective instruction (its
   parts issued as one group) on the comm's lane COLLECTIVE stream; `stream` must be that
   stream (another lane is FL_ERR_INVALID_ARGUMENT, never a silent deadlock). Every rank
   must submit the same collectives in the same order: a mismatch fails every rank's
   instruction, naming both signatures. Window, operand and callback rules are those of
   fl_submit_host. FL_ERR_INVALID_HANDLE (stream, comm, operands), FL_ERR_INVALID_ARGUMENT
   (descriptor, parts: op, dtype, redop, NULL buffers), FL_ERR_OUT_OF_RANGE (root or peer,
   count, num_parts), FL_ERR_UNSUPPORTED (an op or dtype the backend lacks),
   FL_ERR_SHUTDOWN, FL_ERR_WOULD_BLOCK, FL_ERR_NO_MEMORY. */
FL_API fl_status_t fl_submit_collective(fl_stream_t* stream, fl_comm_t* comm,
                                        const fl_collective_instr_t* instr, fl_instr_id* out_instr_id);

/* METHOD: fl_comm_t, EXPERIMENTAL (see above) — writes the communicator dump of the rank
   `comm` belongs to: a JSON file (schema "flowlane.comm_dump/1", comm/README.md in the
   source) with every communicator of comm's engine — its id (equal on every rank), rank,
   counters and flight recorder (its last FLOWLANE_COMM_TRACE_SIZE collectives: sequence
   number, signature, state, times) — and the engine's lanes with pending work (each head
   instruction, what it waits for and who writes that). Written to `path`, or with NULL to
   this engine's file in the folder FLOWLANE_COMM_DUMP_DIR named when the engine created its
   first communicator ("flowlane-comm-rank<R>-pid<P>-e<N>.json"); an existing file is
   replaced atomically. flowlane-comm-analyze reads the files of every rank and explains a
   hang. Safe while collectives run and from callbacks; it takes no lock a collective holds
   while waiting for its peers. Dumps are also written without this call (on a collective
   timeout, by the watchdog, at an abort, on request, on signals): comm/README.md.
   FL_ERR_INVALID_HANDLE, FL_ERR_INVALID_ARGUMENT (empty path, NULL path without
   FLOWLANE_COMM_DUMP_DIR, a file that cannot be written: the message names it and the
   system's reason), FL_ERR_SHUTDOWN (the engine is being destroyed), FL_ERR_NO_MEMORY. */
FL_API fl_status_t fl_comm_dump(fl_comm_t* comm, const char* path);

/* METHOD: fl_comm_t, EXPERIMENTAL (see above) — the communicator's collective timeout, in
   milliseconds (0: none), replacing the value FLOWLANE_COMM_TIMEOUT_MS gave it at
   creation. A collective issued for longer than that (waiting for its peers) first
   writes the communicator dumps (when FLOWLANE_COMM_DUMP_DIR is set, else a line on
   stderr), then fails with FL_ERR_TIMEOUT, and the communicator is broken: the collectives
   queued behind it fail with FL_ERR_CANCELLED, as do later submissions when they run. The
   check runs every 100 ms, so a collective fails between timeout_ms and timeout_ms + 100
   ms after it was issued. What a timed-out collective's buffers become depends on the
   backend: NCCL aborts the communicator (its kernels exit); a transport (MPI) cannot
   cancel a request, which stays outstanding: its buffers may still be written until its
   peers complete it or the process exits (keep them allocated). FL_ERR_INVALID_HANDLE,
   FL_ERR_OUT_OF_RANGE (over one day). */
FL_API fl_status_t fl_comm_set_timeout(fl_comm_t* comm, uint64_t timeout_ms);

/* ---- Transports: collectives over another communication library (EXPERIMENTAL) ----
   A transport moves the bytes of a communicator's collectives (MPI's nonblocking
   collectives in libflowlane_mpi.so); the engine keeps everything else: sequence numbers,
   the one lane, operands and dependencies, poisoning, the window, timeouts, dumps. Its
   collectives are asynchronous host instructions: the lane runner starts one (start) and
   moves on; one process-wide progress thread of flowlane tests the outstanding requests
   (test), backing off when nothing moves and parked when nothing is outstanding; an
   instruction completes when its request does, in submission order on its stream. A thread
   of the program that waits on such a collective stream (fl_instr_wait_for, fl_object_wait,
   the synchronize calls) or polls it (fl_instr_query) tests the requests too, as MPI_Wait and
   MPI_Test drive MPI's progress: test may then be called on that thread, and the completions
   it finds (release callbacks included) run there. Waits from engine callbacks leave it to
   the progress thread. */

/* fl_comm_transport_op_t.flags. */
#define FL_TRANSPORT_SKIPPED ((uint64_t)1) /* this rank skipped the collective (an input was
   poisoned, or it was cancelled): take part so that no peer waits, without reading or
   writing the parts' buffers, and make every peer's collective fail */
#define FL_TRANSPORT_CHECK_STRICT ((uint64_t)2) /* FLOWLANE_COMM_CHECK=strict (the default):
   agree on the fingerprints before moving any data (a mismatched data operation is never
   issued); neither this nor FL_TRANSPORT_CHECK_OFF: `alongside`, check while the data moves */
#define FL_TRANSPORT_CHECK_OFF ((uint64_t)4) /* FLOWLANE_COMM_CHECK=off: no signature check,
   no skip propagation */

/* One collective, as the engine hands it to start(); valid during the call only. */
typedef struct fl_comm_transport_op {
  uint64_t struct_size;
  uint64_t seq;                 /* 1, 2, ...: its sequence number on this communicator */
  const fl_coll_part_t* parts;  /* issued as one group, as for fl_submit_collective */
  uint64_t num_parts;
  uint64_t fingerprint;         /* a hash of every part but send/recv: the ranks must agree on it */
  const char* signature;        /* "all_reduce(float32, sum, count=4)": for messages */
  uint64_t flags;               /* FL_TRANSPORT_* */
} fl_comm_transport_op_t;

/* What a transport provides. Every function is called by one flowlane thread at a time
   per communicator, never with a flowlane lock held that a callback could need. */
typedef struct fl_comm_transport {
  uint64_t struct_size;
  const char* name;   /* "mpi": in dumps and messages; copied */
  uint64_t id;        /* the communicator's id, equal on every rank (dumps match ranks by it) */
  void* state;        /* handed to every function */
  /* Starts collective op->seq (the next one, in sequence order) without waiting for any
     peer, on the lane runner (or the submitting thread, FL_SUBMIT_INLINE). FL_OK with *out_request set; another status, with msg
     filled (NUL-terminated, at most msg_size bytes): not started, and the communicator
     breaks. */
  fl_status_t (*start)(void* state, const fl_comm_transport_op_t* op, void** out_request, char* msg,
                       uint64_t msg_size);
  /* Never blocks; the progress thread (or a thread of the program waiting on the collective
     stream: fl_comm_create_transport) calls it until *out_done is 1, after which the
     request is the transport's to forget. FL_OK: no failure so far. A failure status with
     msg filled, once: the collective failed, and *out_done says whether the request is
     finished (0: it is still outstanding and keeps being tested, its buffers in use).
     FL_ERR_DEPENDENCY_FAILED: a peer skipped it (its output is not valid; the communicator
     stays usable); any other failure (a mismatch naming both signatures and the ranks, an
     error of the library) breaks the communicator. */
  fl_status_t (*test)(void* state, void* request, int32_t* out_done, char* msg, uint64_t msg_size);
  /* The communicator broke (timeout, failure) or is being destroyed, with requests
     possibly outstanding: `why` says which. May be NULL. */
  void (*abort)(void* state, const char* why);
  /* Called once, when the communicator is destroyed and no request is outstanding
     (possibly on the progress thread); frees `state`. */
  void (*destroy)(void* state);
  uint64_t flags;     /* 0 */
} fl_comm_transport_t;

/* CONSTRUCTOR: fl_comm_t, EXPERIMENTAL (see above) — this engine's membership as rank
   desc->rank of desc->nranks (the transport's own) in a communicator whose bytes move
   through `transport` (copied; desc->backend and desc->device are not read). The result
   is an ordinary fl_comm_t: fl_submit_collective on lane desc->lane's host COLLECTIVE
   stream ({FL_DEVICE_CPU, 0}), every op and dtype the transport supports, mismatches and
   skipped collectives failing on every rank (FLOWLANE_COMM_CHECK: strict (the default),
   alongside or off: comm/README.md, "Transports"), fl_comm_set_timeout, dumps. fl_comm_destroy of a communicator with
   collectives in flight fails them with FL_ERR_CANCELLED at once; their requests stay
   outstanding (their buffers in use) until they complete or the process exits. If the
   call fails, destroy is called before it returns. FL_ERR_INVALID_HANDLE,
   FL_ERR_INVALID_ARGUMENT (NULL pointers or functions, bad struct_size, flags),
   FL_ERR_OUT_OF_RANGE (nranks, rank, lane), FL_ERR_SHUTDOWN, FL_ERR_NO_MEMORY. */
FL_API fl_status_t fl_comm_create_transport(fl_engine_t* engine, const fl_comm_desc_t* desc,
                                            const fl_comm_transport_t* transport, fl_comm_t** out_comm);

/* ---- Ranks from the launcher, and a rendezvous through files (EXPERIMENTAL) ---- */

typedef struct fl_comm_env {
  uint64_t struct_size;
  uint64_t rank;        /* of the job */
  uint64_t size;        /* ranks in the job */
  uint64_t local_rank;  /* on this node (a device index, say) */
  uint64_t local_size;  /* ranks on this node */
  char launcher[16];    /* "torchrun", "ompi", "slurm", "pmi" */
} fl_comm_env_t;
#define FL_COMM_ENV_INIT { sizeof(fl_comm_env_t), 0, 0, 0, 0, {0} }

/* FUNCTION, EXPERIMENTAL (see above) — this process's rank, from the launcher's
   environment, the first that is set of: torchrun (RANK, WORLD_SIZE, LOCAL_RANK,
   LOCAL_WORLD_SIZE), Open MPI's mpirun (OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK,
   _LOCAL_SIZE), Slurm (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE),
   PMI (PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS). A local value the launcher
   does not give is 0 (local_rank) or 1 (local_size). FL_ERR_INVALID_ARGUMENT (NULL out,
   bad struct_size; none of these launchers' variables set, or a value that is not a
   number or a rank outside the size: the message names the variable). */
FL_API fl_status_t fl_comm_get_env(fl_comm_env_t* out_env);

/* FUNCTION, EXPERIMENTAL (see above) — shares a unique id through a folder every rank sees
   (a shared file system across machines): rank 0 passes the id it made
   (fl_comm_get_unique_id) in *inout_id and writes it to <dir>/<key>.id (aside, then
   renamed); every other rank waits up to timeout_ms for that file and reads it into
   *inout_id, then leaves <dir>/<key>.ack<rank>; rank 0 returns once every rank has
   acknowledged, and removes the files. `key` names this communicator of this job: a
   file of an earlier job with the same key may be read (use the job's id in it).
   FL_ERR_INVALID_ARGUMENT (NULL or empty dir or key, a key with '/', rank >= nranks, a
   folder that cannot be written or a file that cannot be read: the message names it),
   FL_ERR_TIMEOUT (the message says which ranks did not come). */
FL_API fl_status_t fl_comm_rendezvous_file(const char* dir, const char* key, uint64_t rank, uint64_t nranks,
                                           uint64_t timeout_ms, fl_comm_unique_id_t* inout_id);

/* ======================================================================== */
/* Diagnostics: watchdog, state dump, traces, counters                        */
/* ======================================================================== */

typedef void (*fl_dump_fn)(const char* dump, void* user_data);

typedef struct fl_watchdog_desc {
  uint64_t struct_size;
  uint64_t timeout_ms;   /* 0 = off */
  fl_dump_fn callback;   /* NULL = write to stderr (or to path) */
  void* user_data;
  const char* path;      /* NULL = stderr; copied */
  uint64_t flags;        /* 0 */
} fl_watchdog_desc_t;
#define FL_WATCHDOG_DESC_INIT { sizeof(fl_watchdog_desc_t), 0, 0, 0, 0, 0 }

/* METHOD: fl_engine_t — configures the watchdog (replacing the previous configuration):
   when nothing completes for timeout_ms while instructions are in flight or submitters
   wait for the window, the state dump (fl_engine_dump) is handed to `callback` or written
   to `path` / stderr, once per stall; it re-arms after the next completion. timeout_ms 0
   turns it off. The callback runs on the watchdog's thread ("Calls from callbacks").
   Called from a thread of your own, it returns once a callback already running has
   returned (its user_data may then be freed); called from a callback (any code an engine
   runs, the watchdog callback included) it does not wait for it, since that callback may be
   waiting for the caller: the previous user_data stays in use until that callback returns.
   FL_ERR_INVALID_HANDLE, FL_ERR_INVALID_ARGUMENT (NULL desc, bad struct_size, flags != 0,
   empty path), FL_ERR_OUT_OF_RANGE (timeout_ms over one day). */
FL_API fl_status_t fl_engine_set_watchdog(fl_engine_t* engine, const fl_watchdog_desc_t* desc);

/* METHOD: fl_engine_t — writes the state dump (NUL-terminated, truncated to size) and the
   size it needs including the NUL into out_needed (may be NULL). buffer may be NULL with size 0.
   FL_ERR_INVALID_HANDLE, FL_ERR_INVALID_ARGUMENT (NULL buffer with size > 0). */
FL_API fl_status_t fl_engine_dump(fl_engine_t* engine, char* buffer, uint64_t size, uint64_t* out_needed);

/* METHOD: fl_engine_t, EXPERIMENTAL: the trace's event names and tracks may change —
   records a timeline (instructions, cross-stream edges, waits, window stalls) in a bounded
   buffer, written to `path` as Chrome trace-event JSON by fl_trace_stop or at destroy
   (the FLOWLANE_TRACE environment variable starts one at engine creation).
   FL_ERR_INVALID_HANDLE, FL_ERR_INVALID_ARGUMENT (NULL or empty path, already tracing,
   path cannot be opened for writing), FL_ERR_SHUTDOWN (from a release callback that
   fl_engine_destroy runs after it wrote the engine's trace: it would never be written). */
FL_API fl_status_t fl_trace_start(fl_engine_t* engine, const char* path);
/* METHOD: fl_engine_t, EXPERIMENTAL (as fl_trace_start) — stops the trace and writes it.
   FL_ERR_INVALID_HANDLE, FL_ERR_INVALID_ARGUMENT (not tracing, or writing the file
   failed). */
FL_API fl_status_t fl_trace_stop(fl_engine_t* engine);

typedef struct fl_engine_stats {
  uint64_t struct_size;
  uint64_t submitted;
  uint64_t completed;
  uint64_t failed;
  uint64_t in_flight;
  uint64_t window_stalls;
  uint64_t steals;
  uint64_t parks;
  uint64_t cancelled;  /* instructions whose outcome is FL_INSTR_CANCELLED (counted in failed too) */
  uint64_t tasks;      /* pool tasks run: lane batches, parallel_for chunks' helpers, task-graph
                          nodes, task-group tasks (the pool's own measure of its work) */
} fl_engine_stats_t;
#define FL_ENGINE_STATS_INIT { sizeof(fl_engine_stats_t), 0, 0, 0, 0, 0, 0, 0, 0, 0 }

#if defined(__cplusplus) && defined(__GNUC__)
/* The next function shares its struct's name (fine in C and C++); g++ -Wshadow calls that
   "hides constructor": silenced for this one declaration. */
#  pragma GCC diagnostic push
#  pragma GCC diagnostic ignored "-Wshadow"
#endif
/* METHOD: fl_engine_t — fills the counters; out->struct_size must be set by the caller.
   FL_ERR_INVALID_HANDLE, FL_ERR_INVALID_ARGUMENT (NULL out_stats, bad struct_size). */
FL_API fl_status_t fl_engine_stats(fl_engine_t* engine, fl_engine_stats_t* out_stats);
#if defined(__cplusplus) && defined(__GNUC__)
#  pragma GCC diagnostic pop
#endif

/* ======================================================================== */
/* Waits with a timeout, queries, cancel and drain                           */
/* ======================================================================== */

/* timeout_ns of the *_for calls: FL_WAIT_FOREVER waits like the call without _for; 0 polls
   (answers at once). A wait that times out returns FL_ERR_TIMEOUT and changes nothing: no
   failure is returned or consumed, and it can simply be repeated. */
#define FL_WAIT_FOREVER UINT64_MAX

/* METHOD: fl_object_t — fl_object_wait with a timeout (0 polls: the non-blocking query of
   an object). Same results and rules, plus FL_ERR_TIMEOUT. */
FL_API fl_status_t fl_object_wait_for(fl_object_t* object, uint32_t access, uint64_t timeout_ns);
/* METHOD: fl_stream_t — fl_stream_synchronize with a timeout. Plus FL_ERR_TIMEOUT. */
FL_API fl_status_t fl_stream_synchronize_for(fl_stream_t* stream, uint64_t timeout_ns);
/* METHOD: fl_engine_t — fl_engine_synchronize with a timeout. Plus FL_ERR_TIMEOUT. */
FL_API fl_status_t fl_engine_synchronize_for(fl_engine_t* engine, uint64_t timeout_ns);

/* What became of a submitted instruction (fl_instr_query). */
typedef enum fl_instr_state {
  FL_INSTR_PENDING = 0,   /* not completed yet (queued, waiting for its inputs, or running) */
  FL_INSTR_DONE = 1,      /* completed successfully */
  FL_INSTR_FAILED = 2,    /* its callback or device work failed */
  FL_INSTR_SKIPPED = 3,   /* not run: an input was poisoned by a failure */
  FL_INSTR_CANCELLED = 4, /* not run: cancelled before it started (fl_instr_cancel, ...) */
  FL_INSTR_COMPLETED = 5  /* completed, but too long ago for its outcome to be known: each
                             stream remembers the outcome of its last
                             FL_INSTR_OUTCOME_HISTORY failed, skipped or cancelled ones */
} fl_instr_state_t;
#define FL_INSTR_OUTCOME_HISTORY 1024

/* METHOD: fl_stream_t
   The state of instruction `id`, which must be one fl_submit_* returned for this stream
   (an id of another stream is not detected and gives a meaningless answer). Never waits,
   never counts as observing a failure. FL_ERR_INVALID_ARGUMENT: id 0 or not submitted to
   this stream yet; FL_ERR_INVALID_HANDLE; FL_ERR_INVALID_ARGUMENT for a NULL out_state.
   On a transport communicator's collective stream, a call from a thread of the program
   tests its outstanding requests once (fl_comm_create_transport). */
FL_API fl_status_t fl_instr_query(fl_stream_t* stream, fl_instr_id id, uint32_t* out_state);

/* METHOD: fl_stream_t
   Waits (up to timeout_ns; 0 polls) until instruction `id` of this stream completed, and
   returns its outcome: FL_OK; its failure's status and message (FL_ERR_CANCELLED for a
   cancelled one, FL_ERR_DEPENDENCY_FAILED for a skipped one), which then counts as returned
   for synchronize, as with fl_object_wait; FL_OK also for a completion too old for its
   outcome to be remembered (see FL_INSTR_COMPLETED); FL_ERR_TIMEOUT. From inside a
   callback, waiting for an instruction of the caller's own lane submitted after the caller
   is refused (FL_ERR_INVALID_ARGUMENT: it cannot start before the caller returns), and so
   is waiting for an instruction of another lane that waits for the caller, through
   objects and lane order ("Calls from callbacks"; the message names the chain).
   FL_ERR_CANCELLED from a callback when fl_engine_drain or fl_engine_destroy finds the
   wait on a cycle of waits (the instruction has not completed).
   FL_ERR_INVALID_ARGUMENT also for id 0 or not submitted to this stream yet;
   FL_ERR_INVALID_HANDLE. */
FL_API fl_status_t fl_instr_wait_for(fl_stream_t* stream, fl_instr_id id, uint64_t timeout_ns);

/* METHOD: fl_stream_t
   Cancels instruction `id` of this stream if it has not started when its lane reaches it:
   it then fails with FL_ERR_CANCELLED without running, its cleanup runs, and instructions
   that read what it writes are skipped, as after any failure. An instruction that starts
   concurrently with the call runs normally: fl_instr_query / fl_instr_wait_for tell which
   happened. FL_OK: the request is registered. FL_ERR_INVALID_ARGUMENT: `id` already
   completed, or is 0 or not submitted to this stream yet. FL_ERR_INVALID_HANDLE. */
FL_API fl_status_t fl_instr_cancel(fl_stream_t* stream, fl_instr_id id);
/* METHOD: fl_stream_t — cancels, as fl_instr_cancel, every instruction submitted to this
   stream before the call. FL_ERR_INVALID_HANDLE. */
FL_API fl_status_t fl_stream_cancel(fl_stream_t* stream);
/* METHOD: fl_engine_t — cancels, as fl_instr_cancel, every instruction submitted to the
   engine before the call. FL_ERR_INVALID_HANDLE. */
FL_API fl_status_t fl_engine_cancel(fl_engine_t* engine);

/* METHOD: fl_engine_t
   Drains the engine without destroying it (NCCL's finalize, to destroy's free): from the
   call on, submissions and task-group spawns from threads of your own are refused with
   FL_ERR_SHUTDOWN (a submission still waiting for the in-flight window included; work
   submitted by the engine's own callbacks and tasks is still accepted: it belongs to the
   work being drained; one of your threads' calls accepted concurrently is drained too),
   and the call waits (up to timeout_ns) for every instruction to complete. Returns what
   fl_engine_synchronize would, or FL_ERR_TIMEOUT (the engine stays draining; call again to
   keep waiting; as with every timed wait, nothing was returned or consumed). While it
   waits, a callback's wait that sits on a cycle of waits is cancelled (FL_ERR_CANCELLED),
   as by fl_engine_destroy: the cycle could never complete. Waits, queries, stats and dumps
   keep working; fl_engine_destroy frees it. Calling it again is
   allowed; from any code the engine runs it is refused (FL_ERR_INVALID_ARGUMENT).
   FL_ERR_INVALID_HANDLE. A cycle of waits through task groups only (tasks of groups of
   your threads waiting for each other's groups) is broken too: the drain waits for every
   task as well. */
FL_API fl_status_t fl_engine_drain(fl_engine_t* engine, uint64_t timeout_ns);

/* ======================================================================== */
/* Task groups: fork–join for recursive work (no stream ordering)            */
/* ======================================================================== */

/* A set of tasks that are waited for together, as tbb::task_group and rayon::scope: the
   building block of recursive parallel algorithms (fib, quicksort, tree walks). Tasks run on
   the engine's workers; a task may spawn more tasks into any group, including its own, and
   wait for groups it created. A thread waiting for a group on one of the engine's workers
   helps run tasks of its own (a callback's or task's) work meanwhile, never an unrelated
   instruction, so a group can be used from inside instructions without deadlocking. A
   thread of the program's own (the main thread, say) takes part too: its spawns are as
   cheap as a worker's, and its fl_task_group_wait (not _wait_for with a timeout) runs the
   group's tasks and the tasks they spawn, nothing else, instead of sleeping; so does its
   fl_parallel_for. */
typedef struct fl_task_group fl_task_group_t;

/* CONSTRUCTOR: fl_task_group_t — an empty group of `engine`. FL_ERR_INVALID_HANDLE,
   FL_ERR_INVALID_ARGUMENT (NULL out_group), FL_ERR_SHUTDOWN, FL_ERR_NO_MEMORY. */
FL_API fl_status_t fl_task_group_create(fl_engine_t* engine, fl_task_group_t** out_group);
/* METHOD: fl_task_group_t
   Schedules fn(user_data) to run once on a worker. Never blocks. Once a task of the group
   has failed (returned non-OK), tasks that have not started are skipped (fn not called).
   cleanup (may be NULL) is called exactly once with user_data, after fn ran or after the
   task was skipped (a task that owns its user_data frees it there); if this call fails,
   neither fn nor cleanup is ever called.
   FL_ERR_INVALID_HANDLE (group, or its engine destroyed), FL_ERR_INVALID_ARGUMENT (NULL fn),
   FL_ERR_SHUTDOWN (the engine is being destroyed or drained), FL_ERR_NO_MEMORY. */
FL_API fl_status_t fl_task_group_spawn(fl_task_group_t* group, fl_task_fn fn, void* user_data,
                                       fl_release_fn cleanup);
/* METHOD: fl_task_group_t
   Waits until every task spawned into the group (before or during the wait) has finished.
   Returns FL_OK, or the first failure a task returned (the message names the status and,
   when the task set one, the worker's last flowlane error), after which the group is empty
   and usable again. FL_ERR_INVALID_HANDLE (stale, or the group's engine was destroyed);
   FL_ERR_INVALID_ARGUMENT from one of the group's own tasks (it would wait for itself).
   From code the engine runs (a callback, a task), the wait is in the state dump's wait-for
   graph while it blocks: FL_ERR_CANCELLED when fl_engine_drain or fl_engine_destroy finds
   it on a cycle of waits (the tasks go on running, a failure among them is returned by a
   later wait, and the group stays usable). */
FL_API fl_status_t fl_task_group_wait(fl_task_group_t* group);
/* METHOD: fl_task_group_t
   fl_task_group_wait with a timeout (0 polls; FL_WAIT_FOREVER waits as fl_task_group_wait).
   Same results and rules, plus FL_ERR_TIMEOUT when tasks are still unfinished at the
   timeout (the message says how many): they go on running, a failure among them is
   returned by a later wait, and the group stays usable; FL_ERR_CANCELLED as for
   fl_task_group_wait. On a worker the wait helps run its
   own work meanwhile, as fl_task_group_wait does, and gives up at the first check after
   the timeout (a task it runs meanwhile is not interrupted). */
FL_API fl_status_t fl_task_group_wait_for(fl_task_group_t* group, uint64_t timeout_ns);
/* DESTRUCTOR: fl_task_group_t — waits for the group's tasks (their failures are dropped:
   wait first to see them), then frees it. NULL is a no-op. While it waits, the group's own
   tasks may still spawn into it (destroy waits for those too); any other use of the handle
   from another thread during the call is a race in the caller, as with free(). Destroying
   a group from one of its own tasks is refused (FL_ERR_INVALID_ARGUMENT).
   FL_ERR_INVALID_HANDLE (stale, or destroyed concurrently: of two calls one frees, the
   other is answered at once). Once the group's engine is destroyed it only frees the group.
   FL_ERR_CANCELLED from code the engine runs when fl_engine_drain or fl_engine_destroy
   finds its wait on a cycle of waits: the group is then not destroyed (its tasks still
   run; destroy it again once they are done). */
FL_API fl_status_t fl_task_group_destroy(fl_task_group_t* group);


/* ======================================================================== */
/* Capture and replay: programs (EXPERIMENTAL)                               */
/* ======================================================================== */

/* Every call of this section is EXPERIMENTAL: the schedule of a replay and the way a
   program mixing host and device work is split may still change.

   A step of a training or inference loop submits the same instructions every iteration.
   Capturing them once makes each later iteration one instruction: between
   fl_capture_begin and fl_capture_end, the submissions of the calling thread to the engine
   are recorded instead of run — nothing runs, no instruction id is taken (out_instr_id
   receives 0) — together with the order the engine would give them eagerly: the
   dependencies inferred from their operands (read after write, write after write, write
   after read) and the order of each lane (a lane's host instructions run one at a time in
   submission order; a device stream's work in stream order). fl_capture_end turns them
   into a program; fl_program_launch runs it, as many times as wanted.

   What a launch is. One instruction of the stream it is launched on: waitable, queryable
   and cancellable by (stream, id) like any, counted once in the in-flight window, covered
   by synchronize, cancel (a launch that has not started is not run) and drain. Its operands
   are the union of its instructions' operands (per object the union of their accesses),
   so it is ordered against eager work — before and after it, from any thread — by the
   usual rules: its first instructions wait for what earlier users of the objects wrote,
   and later users wait for the whole launch. Launches of one program run one after the
   other, in launch order. A launch on a host stream occupies that stream's lane while it
   runs; it does not occupy the lanes its instructions were captured on (eager work
   submitted to those lanes is not ordered against it unless an object says so).
   Inside a launch the dependencies were computed at capture: no operand is resolved, no
   object lock taken, no window slot used per instruction; with one worker (or a program
   without parallelism) the instructions run one after the other on the launching thread,
   otherwise the independent ones run in parallel on the workers (chains as one task).

   Failures inside a launch poison and skip as they do eagerly: an instruction that fails
   poisons what it writes, and the instructions that read a poisoned value — written by an
   earlier instruction of the launch, or by work before the launch — are skipped. The
   launch then fails (or, when it only skipped instructions that read a value poisoned
   before it, is skipped) as one instruction: every object it writes is poisoned for work
   after it, even one whose last writer inside the launch succeeded. Its message names the
   first inner instruction that failed (by capture order) and how many were skipped.

   Callbacks. A captured host instruction's fn runs on every launch, with a context that
   works with fl_instr_set_error, fl_instr_get_lane (the lane it was captured on),
   fl_instr_get_id (the launch's id) and fl_instr_get_engine; a replayed fn counts as part
   of its launch for the rules of "Calls from callbacks" (its waits are refused when they
   would wait for the launch). Its cleanup runs once, when the program is freed (its
   user_data must live as long as the program), or at fl_capture_end when the capture is
   discarded. The program holds a reference on every object it uses: releasing an object
   a program uses is allowed, and its release callback runs once the program is freed and
   its last user completed.

   Device work (CUDA builds). Kernels, copies and memsets of a program become CUDA graphs,
   built and instantiated at fl_capture_end: one graph per group of device work that no
   host instruction of the program separates, with the stream order and the cross-stream
   edges of the capture as its edges. A device function runs at every launch (not
   captured into the graph), on the program's CUDA stream. A launch on a host stream issues
   each graph with one cudaGraphLaunch on a CUDA stream of the program's own and orders
   the program's host instructions around it by the same dependencies (a host instruction
   that reads a device result waits on its launching thread for the GPU). A program with
   device work only may also be launched on a CUDA stream of its device: the launch is then
   an asynchronous instruction of that stream, issued as one cudaGraphLaunch per graph,
   ordered on the GPU like any device instruction. Device work is skipped (or fails) by
   whole graph, not by kernel. A program's device work must be on one CUDA device.

   Refused while the calling thread captures on an engine, with FL_ERR_CAPTURING (they
   would wait for, or ask about, work that has not been submitted): fl_engine_synchronize
   (_for), fl_stream_synchronize(_for), fl_object_wait(_for), fl_instr_wait_for,
   fl_instr_query and fl_engine_drain of that engine, fl_program_launch on it, and
   fl_submit_collective (collectives cannot be captured yet: each launch would have to
   advance the communicator's sequence numbers on every rank; submit them eagerly between
   launches). Other threads' calls are not affected; neither are other engines.
   fl_parallel_for, task graphs and task groups are not instructions: they run at once,
   during a capture too. FL_SUBMIT_INLINE and FL_SUBMIT_NONBLOCKING are ignored while
   capturing. */
typedef struct fl_program fl_program_t;

typedef struct fl_capture_desc {
  uint64_t struct_size;
  const char* name;   /* the program's name (copied; may be NULL): its launches are named
                         "launch of '<name>'" in errors, dumps and traces */
  uint64_t flags;     /* 0 */
} fl_capture_desc_t;
#define FL_CAPTURE_DESC_INIT { sizeof(fl_capture_desc_t), 0, 0 }

/* METHOD: fl_engine_t, EXPERIMENTAL (see above) — starts capturing the calling thread's
   submissions to `engine` (desc NULL: no name). Capture state is per thread and per
   engine: other threads' submissions, and this thread's to other engines, stay eager.
   FL_ERR_INVALID_HANDLE; FL_ERR_INVALID_ARGUMENT (bad struct_size, flags != 0, called from
   code the engine runs — an instruction, cleanup, release, task or loop body, a worker —
   whose submissions always run eagerly); FL_ERR_CAPTURING (this thread already captures
   on this engine: captures do not nest); FL_ERR_SHUTDOWN (the engine is being destroyed or
   was drained); FL_ERR_NO_MEMORY. */
FL_API fl_status_t fl_capture_begin(fl_engine_t* engine, const fl_capture_desc_t* desc);

/* CONSTRUCTOR: fl_program_t, EXPERIMENTAL (see above) — ends the calling thread's capture
   on `engine` and makes its program (which may be empty). out_program NULL discards the
   capture: the cleanups of the captured instructions run now. Builds and instantiates the
   CUDA graphs of its device work. The capture ends in every case: on an error it is
   discarded (cleanups run) and nothing is returned. FL_ERR_INVALID_HANDLE (also when the
   engine was destroyed while the capture was open: destroy discarded it);
   FL_ERR_INVALID_ARGUMENT (this thread is not capturing on this engine); FL_ERR_CUDA,
   FL_ERR_UNSUPPORTED (the CUDA runtime lacks the graph calls); FL_ERR_NO_MEMORY. */
FL_API fl_status_t fl_capture_end(fl_engine_t* engine, fl_program_t** out_program);

/* METHOD: fl_program_t, EXPERIMENTAL (see above) — launches the program as one instruction
   of `stream` (flags: FL_SUBMIT_NONBLOCKING; FL_SUBMIT_INLINE on a host stream, as for
   fl_submit_host: the launch then runs on the calling thread when it is ready at once).
   `stream` is a host stream (FL_STREAM_HOST) of the program's engine, or, for a program
   with device work only, a CUDA stream of its device. Asynchronous; window rules as
   fl_submit_host. FL_ERR_INVALID_HANDLE (program, stream, or a stream of another engine);
   FL_ERR_INVALID_ARGUMENT (another stream kind, a CUDA stream for a program with host
   instructions or of another device, unknown flags); FL_ERR_CAPTURING (the calling thread
   captures on this engine); FL_ERR_SHUTDOWN, FL_ERR_WOULD_BLOCK, FL_ERR_NO_MEMORY. */
FL_API fl_status_t fl_program_launch(fl_program_t* program, fl_stream_t* stream, uint64_t flags,
                                     fl_instr_id* out_instr_id);

typedef struct fl_program_info {
  uint64_t struct_size;
  uint64_t instructions;        /* captured instructions */
  uint64_t host_instructions;   /* of which host instructions */
  uint64_t edges;               /* dependencies between them (after removing repeats) */
  uint64_t tasks;               /* units a parallel replay schedules (chains run as one) */
  uint64_t device_graphs;       /* CUDA graphs built for its device work */
  uint64_t operands;            /* objects the launch uses (its operands) */
  uint64_t bytes;               /* memory the program holds, besides the CUDA graphs */
  uint64_t launches;            /* launches completed so far */
} fl_program_info_t;
#define FL_PROGRAM_INFO_INIT { sizeof(fl_program_info_t), 0, 0, 0, 0, 0, 0, 0, 0 }

#if defined(__cplusplus) && defined(__GNUC__)
/* As for fl_engine_stats: the function shares its struct's name. */
#  pragma GCC diagnostic push
#  pragma GCC diagnostic ignored "-Wshadow"
#endif
/* METHOD: fl_program_t, EXPERIMENTAL (see above) — fills out_info (struct_size must be
   set, FL_PROGRAM_INFO_INIT). FL_ERR_INVALID_HANDLE, FL_ERR_INVALID_ARGUMENT (NULL
   out_info, bad struct_size). */
FL_API fl_status_t fl_program_info(fl_program_t* program, fl_program_info_t* out_info);
#if defined(__cplusplus) && defined(__GNUC__)
#  pragma GCC diagnostic pop
#endif

/* DESTRUCTOR: fl_program_t, EXPERIMENTAL (see above) — the handle is stale at once;
   launches already submitted still run, and the program is freed after the last of them
   completes (the cleanups of its instructions run then, on the thread that completes it,
   and its references on objects are dropped). NULL is a no-op. fl_engine_destroy frees
   the programs of the engine that are left (their handles go stale). From inside one of
   the program's own replayed functions the program is freed after that launch.
   FL_ERR_INVALID_HANDLE (stale: destroyed, or its engine was destroyed). */
FL_API fl_status_t fl_program_destroy(fl_program_t* program);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FLOWLANE_FLOWLANE_H */

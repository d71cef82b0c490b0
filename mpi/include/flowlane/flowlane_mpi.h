/* flowlane_mpi.h — flowlane's collectives across processes over MPI (EXPERIMENTAL).
 *
 * The optional plugin libflowlane_mpi.so, built against the MPI it was compiled with (its
 * mpi.h, its libmpi: one build per MPI family, since MPI has no common binary interface).
 * The core library libflowlane.so never depends on MPI. Link with
 * `pkg-config --cflags --libs flowlane-mpi` (which brings flowlane and the MPI flags of the
 * build), or, with CMake, find_package(flowlane) and link flowlane::flowlane_mpi.
 *
 * The communicators it makes are ordinary fl_comm_t (flowlane.h, "Collectives"): the same
 * fl_submit_collective on the lane's host COLLECTIVE stream, operands, dependencies,
 * poisoning, window, timeout (fl_comm_set_timeout) and destroy rules as the other backends.
 * Collectives are MPI's nonblocking ones on a duplicate of your communicator (its traffic
 * never mixes with your program's), started by the lane runner and tested by flowlane's
 * progress thread, so MPI progresses while your lanes compute. Every fl_coll_op_t and
 * fl_dtype_t works (float16 and bfloat16 reductions through MPI user operations, counts
 * above INT_MAX in chunks).
 *
 * Threads: flowlane calls MPI from its lane runners and its progress thread, so MPI must be
 * initialized with MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided), or with
 * MPI_THREAD_SERIALIZED and FL_MPI_SERIALIZED in fl_comm_desc_t.flags: your program then
 * promises to make no MPI call while flowlane communicators exist, and flowlane serializes
 * its own calls. Any other level is refused with a message saying so.
 */
#ifndef FLOWLANE_FLOWLANE_MPI_H
#define FLOWLANE_FLOWLANE_MPI_H

#include <mpi.h>

#include "flowlane/flowlane.h"

#ifdef __cplusplus
extern "C" {
#endif

/* fl_comm_desc_t.flags, for fl_mpi_comm_create only: MPI was initialized with
   MPI_THREAD_SERIALIZED and the program makes no MPI call of its own while flowlane
   communicators exist (flowlane serializes its calls with one lock). */
#define FL_MPI_SERIALIZED ((uint64_t)1 << 32)

/* CONSTRUCTOR: fl_comm_t, EXPERIMENTAL — collective over `mpi_comm` (every rank of it calls
   it, in the same order as its other collectives on mpi_comm): this engine's membership as
   desc->rank of desc->nranks in a communicator whose collectives run on MPI, issued by lane
   desc->lane's COLLECTIVE stream ({FL_DEVICE_CPU, 0}). desc->nranks and desc->rank must be
   mpi_comm's size and rank (or nranks 0: both taken from mpi_comm); desc->backend and
   desc->device are not read; desc->flags: 0, FL_COMM_UNORDERED (accepted, no effect) or
   FL_MPI_SERIALIZED. `mpi_comm` is the address of your communicator's handle (mpi4py:
   MPI._addressof(comm)); flowlane duplicates it twice (data and checks,
   MPI_Comm_dup, with MPI_ERRORS_RETURN) and frees the duplicates at fl_comm_destroy, so
   you may free yours afterwards. Ranks agree on the outcome: when one rank's call fails,
   every rank's does (FL_ERR_INVALID_ARGUMENT naming that rank). Mismatched and skipped
   collectives fail on every rank (FLOWLANE_COMM_CHECK, flowlane.h); MPI's own errors fail
   the collective with FL_ERR_INSTRUCTION_FAILED and MPI's text, and break the
   communicator. FL_ERR_INVALID_HANDLE, FL_ERR_INVALID_ARGUMENT (NULL pointers, MPI not
   initialized or already finalized, a thread level flowlane cannot use: the message says
   what to pass to MPI_Init_thread, MPI_COMM_NULL, nranks or rank not mpi_comm's, unknown
   flags, FLOWLANE_COMM_CHECK not the same on every rank), FL_ERR_OUT_OF_RANGE (lane),
   FL_ERR_SHUTDOWN, FL_ERR_NO_MEMORY, FL_ERR_INTERNAL (an MPI call failed: MPI's text). */
FL_API fl_status_t fl_mpi_comm_create(fl_engine_t* engine, const fl_comm_desc_t* desc, const MPI_Comm* mpi_comm,
                                      fl_comm_t** out_comm);

/* CONSTRUCTOR: fl_comm_t, EXPERIMENTAL — collective over `mpi_comm`: an NCCL communicator
   (fl_comm_create with FL_COMM_NCCL) of mpi_comm's ranks, rank 0's unique id broadcast over
   mpi_comm (NVIDIA's own recipe). desc as for fl_comm_create, except nranks 0 (size and rank
   taken from mpi_comm); desc->device is yours to choose (fl_comm_get_env's local_rank, for
   one GPU per process). A failure to make the id on rank 0 fails every rank with its
   message; so do, before NCCL's init, nranks or rank not mpi_comm's, a NULL or stale engine
   and a lane or CUDA device the engine lacks on any rank (that rank: FL_ERR_INVALID_ARGUMENT,
   FL_ERR_INVALID_HANDLE, FL_ERR_OUT_OF_RANGE or FL_ERR_NO_DEVICE saying why; the others:
   FL_ERR_INVALID_ARGUMENT naming it). A rank whose fl_comm_create fails later (NCCL not loadable on that rank, say)
   leaves the others in NCCL's init until FLOWLANE_NCCL_INIT_TIMEOUT_MS (FL_ERR_TIMEOUT). Statuses: those of fl_comm_get_unique_id and fl_comm_create, plus
   FL_ERR_INVALID_ARGUMENT for MPI not initialized or MPI_COMM_NULL and FL_ERR_INTERNAL for
   a failed MPI call. MPI's thread level does not matter (flowlane makes no MPI call after
   this one returns). */
FL_API fl_status_t fl_mpi_nccl_comm_create(fl_engine_t* engine, const fl_comm_desc_t* desc, const MPI_Comm* mpi_comm,
                                           fl_comm_t** out_comm);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FLOWLANE_FLOWLANE_MPI_H */

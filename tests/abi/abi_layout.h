/*
 * abi_layout.h — compile-time checks of what the C ABI pins: status and enum values,
 * and the byte layout of every public struct. Included from the C99 test and from the
 * C++ test, so both languages see the same layout.
 *
 * Rules these checks encode (docs/design.md, "Commitments of the C API"):
 *  - status codes and enum values are pinned forever and only appended;
 *  - a size-prefixed descriptor (struct_size first) may only grow at its tail, so the
 *    offset of every existing field is pinned, and its size may only grow;
 *  - a struct that is not size-prefixed (fl_device_t, fl_operand_t, fl_dim3_t,
 *    fl_coll_part_t, fl_comm_unique_id_t) is passed by value or in arrays, so its size
 *    is pinned too.
 * Offsets are those of the LP64 ABI (x86-64, aarch64 Linux); elsewhere only the
 * values are checked. A failing check here is an ABI break: bump the SONAME or undo it.
 */
#ifndef FLOWLANE_TESTS_ABI_LAYOUT_H
#define FLOWLANE_TESTS_ABI_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include <flowlane/flowlane.h>

#define FL_ABI_CAT2_(a, b) a##b
#define FL_ABI_CAT_(a, b) FL_ABI_CAT2_(a, b)
#if defined(__cplusplus)
#  define FL_ABI_ASSERT(cond) static_assert(cond, #cond)
#else
/* C99 has no _Static_assert: a negative array size fails to compile. */
#  define FL_ABI_ASSERT(cond) typedef char FL_ABI_CAT_(fl_abi_assert_line_, __LINE__)[(cond) ? 1 : -1]
#endif
#define FL_ABI_OFFSET(type, field, off) FL_ABI_ASSERT(offsetof(type, field) == (off))
#define FL_ABI_SIZE(type, size) FL_ABI_ASSERT(sizeof(type) == (size))
#define FL_ABI_MIN_SIZE(type, size) FL_ABI_ASSERT(sizeof(type) >= (size))

/* --- values pinned forever --- */
FL_ABI_ASSERT(FL_OK == 0);
FL_ABI_ASSERT(FL_ERR_INVALID_ARGUMENT == 1);
FL_ABI_ASSERT(FL_ERR_INVALID_HANDLE == 2);
FL_ABI_ASSERT(FL_ERR_OUT_OF_RANGE == 3);
FL_ABI_ASSERT(FL_ERR_NO_MEMORY == 4);
FL_ABI_ASSERT(FL_ERR_WOULD_BLOCK == 5);
FL_ABI_ASSERT(FL_ERR_EXHAUSTED == 6);
FL_ABI_ASSERT(FL_ERR_SHUTDOWN == 7);
FL_ABI_ASSERT(FL_ERR_INSTRUCTION_FAILED == 8);
FL_ABI_ASSERT(FL_ERR_DEPENDENCY_FAILED == 9);
FL_ABI_ASSERT(FL_ERR_CANCELLED == 10);
FL_ABI_ASSERT(FL_ERR_TIMEOUT == 11);
FL_ABI_ASSERT(FL_ERR_UNSUPPORTED == 12);
FL_ABI_ASSERT(FL_ERR_NO_DEVICE == 13);
FL_ABI_ASSERT(FL_ERR_CUDA == 14);
FL_ABI_ASSERT(FL_ERR_NCCL == 15);
FL_ABI_ASSERT(FL_ERR_INTERNAL == 16);
FL_ABI_ASSERT(FL_ERR_CAPTURING == 17);
/* The status table has one entry per status, counted from the X macro (the enum has no
   count member). */
#define FL_ABI_COUNT_STATUS_(name, value, text) +1
FL_ABI_ASSERT((0 FL_STATUS_MAP(FL_ABI_COUNT_STATUS_)) >= 17);
FL_ABI_ASSERT(sizeof(fl_status_t) == sizeof(int));
FL_ABI_ASSERT(FL_VERSION_HEX == ((FL_VERSION_MAJOR << 16) | (FL_VERSION_MINOR << 8) | FL_VERSION_PATCH));

FL_ABI_ASSERT(FL_READ == 1);
FL_ABI_ASSERT(FL_WRITE == 2);
FL_ABI_ASSERT(FL_READ_WRITE == 3);
FL_ABI_ASSERT(FL_SUBMIT_NONBLOCKING == 1u);
FL_ABI_ASSERT(FL_DEVICE_CPU == 0);
FL_ABI_ASSERT(FL_DEVICE_CUDA == 1);
FL_ABI_ASSERT(FL_STREAM_HOST == 0);
FL_ABI_ASSERT(FL_STREAM_COMPUTE == 1);
FL_ABI_ASSERT(FL_STREAM_H2D == 2);
FL_ABI_ASSERT(FL_STREAM_D2H == 3);
FL_ABI_ASSERT(FL_STREAM_COLLECTIVE == 4);
FL_ABI_ASSERT(FL_MEMCPY_H2D == 1);
FL_ABI_ASSERT(FL_MEMCPY_D2H == 2);
FL_ABI_ASSERT(FL_MEMCPY_D2D == 3);
FL_ABI_ASSERT(FL_MEMSET == 4);
FL_ABI_ASSERT(FL_COMM_NCCL == 0);
FL_ABI_ASSERT(FL_COMM_HOST_FAKE == 1);
FL_ABI_ASSERT(FL_COLL_ALL_REDUCE == 1);
FL_ABI_ASSERT(FL_COLL_ALL_GATHER == 2);
FL_ABI_ASSERT(FL_COLL_REDUCE_SCATTER == 3);
FL_ABI_ASSERT(FL_COLL_BROADCAST == 4);
FL_ABI_ASSERT(FL_COLL_SEND == 5);
FL_ABI_ASSERT(FL_COLL_RECV == 6);
FL_ABI_ASSERT(FL_DTYPE_INT8 == 0);
FL_ABI_ASSERT(FL_DTYPE_UINT8 == 1);
FL_ABI_ASSERT(FL_DTYPE_INT32 == 2);
FL_ABI_ASSERT(FL_DTYPE_UINT32 == 3);
FL_ABI_ASSERT(FL_DTYPE_INT64 == 4);
FL_ABI_ASSERT(FL_DTYPE_UINT64 == 5);
FL_ABI_ASSERT(FL_DTYPE_FLOAT16 == 6);
FL_ABI_ASSERT(FL_DTYPE_FLOAT32 == 7);
FL_ABI_ASSERT(FL_DTYPE_FLOAT64 == 8);
FL_ABI_ASSERT(FL_DTYPE_BFLOAT16 == 9);
FL_ABI_ASSERT(FL_REDOP_SUM == 0);
FL_ABI_ASSERT(FL_REDOP_PROD == 1);
FL_ABI_ASSERT(FL_REDOP_MAX == 2);
FL_ABI_ASSERT(FL_REDOP_MIN == 3);
FL_ABI_ASSERT(sizeof(fl_instr_id) == 8);

/* --- struct layouts (LP64) --- */
#if UINTPTR_MAX == 0xffffffffffffffffu && UINT_LEAST64_MAX == 0xffffffffffffffffu

FL_ABI_OFFSET(fl_engine_desc_t, struct_size, 0);
FL_ABI_OFFSET(fl_engine_desc_t, num_workers, 8);
FL_ABI_OFFSET(fl_engine_desc_t, max_lanes, 16);
FL_ABI_OFFSET(fl_engine_desc_t, inflight_limit, 24);
FL_ABI_OFFSET(fl_engine_desc_t, watchdog_ms, 32);
FL_ABI_OFFSET(fl_engine_desc_t, flags, 40);
FL_ABI_MIN_SIZE(fl_engine_desc_t, 48);

FL_ABI_OFFSET(fl_device_t, type, 0);
FL_ABI_OFFSET(fl_device_t, index, 4);
FL_ABI_SIZE(fl_device_t, 8);

FL_ABI_OFFSET(fl_operand_t, object, 0);
FL_ABI_OFFSET(fl_operand_t, access, 8);
FL_ABI_OFFSET(fl_operand_t, reserved, 12);
FL_ABI_SIZE(fl_operand_t, 16);

FL_ABI_OFFSET(fl_host_instr_t, struct_size, 0);
FL_ABI_OFFSET(fl_host_instr_t, fn, 8);
FL_ABI_OFFSET(fl_host_instr_t, user_data, 16);
FL_ABI_OFFSET(fl_host_instr_t, cleanup, 24);
FL_ABI_OFFSET(fl_host_instr_t, operands, 32);
FL_ABI_OFFSET(fl_host_instr_t, num_operands, 40);
FL_ABI_OFFSET(fl_host_instr_t, name, 48);
FL_ABI_OFFSET(fl_host_instr_t, flags, 56);
FL_ABI_MIN_SIZE(fl_host_instr_t, 64);

FL_ABI_OFFSET(fl_dim3_t, x, 0);
FL_ABI_OFFSET(fl_dim3_t, y, 4);
FL_ABI_OFFSET(fl_dim3_t, z, 8);
FL_ABI_SIZE(fl_dim3_t, 12);

FL_ABI_OFFSET(fl_kernel_instr_t, struct_size, 0);
FL_ABI_OFFSET(fl_kernel_instr_t, func, 8);
FL_ABI_OFFSET(fl_kernel_instr_t, grid, 16);
FL_ABI_OFFSET(fl_kernel_instr_t, block, 28);
FL_ABI_OFFSET(fl_kernel_instr_t, shared_mem_bytes, 40);
FL_ABI_OFFSET(fl_kernel_instr_t, args, 48);
FL_ABI_OFFSET(fl_kernel_instr_t, arg_sizes, 56);
FL_ABI_OFFSET(fl_kernel_instr_t, num_args, 64);
FL_ABI_OFFSET(fl_kernel_instr_t, operands, 72);
FL_ABI_OFFSET(fl_kernel_instr_t, num_operands, 80);
FL_ABI_OFFSET(fl_kernel_instr_t, name, 88);
FL_ABI_OFFSET(fl_kernel_instr_t, flags, 96);
FL_ABI_MIN_SIZE(fl_kernel_instr_t, 104);

FL_ABI_OFFSET(fl_device_instr_t, struct_size, 0);
FL_ABI_OFFSET(fl_device_instr_t, fn, 8);
FL_ABI_OFFSET(fl_device_instr_t, user_data, 16);
FL_ABI_OFFSET(fl_device_instr_t, cleanup, 24);
FL_ABI_OFFSET(fl_device_instr_t, operands, 32);
FL_ABI_OFFSET(fl_device_instr_t, num_operands, 40);
FL_ABI_OFFSET(fl_device_instr_t, name, 48);
FL_ABI_OFFSET(fl_device_instr_t, flags, 56);
FL_ABI_MIN_SIZE(fl_device_instr_t, 64);

FL_ABI_OFFSET(fl_memcpy_instr_t, struct_size, 0);
FL_ABI_OFFSET(fl_memcpy_instr_t, kind, 8);
FL_ABI_OFFSET(fl_memcpy_instr_t, value, 12);
FL_ABI_OFFSET(fl_memcpy_instr_t, dst, 16);
FL_ABI_OFFSET(fl_memcpy_instr_t, src, 24);
FL_ABI_OFFSET(fl_memcpy_instr_t, bytes, 32);
FL_ABI_OFFSET(fl_memcpy_instr_t, operands, 40);
FL_ABI_OFFSET(fl_memcpy_instr_t, num_operands, 48);
FL_ABI_OFFSET(fl_memcpy_instr_t, name, 56);
FL_ABI_OFFSET(fl_memcpy_instr_t, flags, 64);
FL_ABI_MIN_SIZE(fl_memcpy_instr_t, 72);

FL_ABI_SIZE(fl_comm_unique_id_t, 128);

FL_ABI_OFFSET(fl_comm_desc_t, struct_size, 0);
FL_ABI_OFFSET(fl_comm_desc_t, nranks, 8);
FL_ABI_OFFSET(fl_comm_desc_t, rank, 16);
FL_ABI_OFFSET(fl_comm_desc_t, device, 24);
FL_ABI_OFFSET(fl_comm_desc_t, lane, 32);
FL_ABI_OFFSET(fl_comm_desc_t, backend, 40);
FL_ABI_OFFSET(fl_comm_desc_t, flags, 48);
FL_ABI_MIN_SIZE(fl_comm_desc_t, 56);

FL_ABI_OFFSET(fl_coll_part_t, op, 0);
FL_ABI_OFFSET(fl_coll_part_t, dtype, 4);
FL_ABI_OFFSET(fl_coll_part_t, redop, 8);
FL_ABI_OFFSET(fl_coll_part_t, peer, 12);
FL_ABI_OFFSET(fl_coll_part_t, sendbuf, 16);
FL_ABI_OFFSET(fl_coll_part_t, recvbuf, 24);
FL_ABI_OFFSET(fl_coll_part_t, count, 32);
FL_ABI_SIZE(fl_coll_part_t, 40);

FL_ABI_OFFSET(fl_collective_instr_t, struct_size, 0);
FL_ABI_OFFSET(fl_collective_instr_t, parts, 8);
FL_ABI_OFFSET(fl_collective_instr_t, num_parts, 16);
FL_ABI_OFFSET(fl_collective_instr_t, operands, 24);
FL_ABI_OFFSET(fl_collective_instr_t, num_operands, 32);
FL_ABI_OFFSET(fl_collective_instr_t, name, 40);
FL_ABI_OFFSET(fl_collective_instr_t, flags, 48);
FL_ABI_MIN_SIZE(fl_collective_instr_t, 56);

FL_ABI_OFFSET(fl_watchdog_desc_t, struct_size, 0);
FL_ABI_OFFSET(fl_watchdog_desc_t, timeout_ms, 8);
FL_ABI_OFFSET(fl_watchdog_desc_t, callback, 16);
FL_ABI_OFFSET(fl_watchdog_desc_t, user_data, 24);
FL_ABI_OFFSET(fl_watchdog_desc_t, path, 32);
FL_ABI_OFFSET(fl_watchdog_desc_t, flags, 40);
FL_ABI_MIN_SIZE(fl_watchdog_desc_t, 48);

FL_ABI_OFFSET(fl_engine_stats_t, struct_size, 0);
FL_ABI_OFFSET(fl_engine_stats_t, submitted, 8);
FL_ABI_OFFSET(fl_engine_stats_t, completed, 16);
FL_ABI_OFFSET(fl_engine_stats_t, failed, 24);
FL_ABI_OFFSET(fl_engine_stats_t, in_flight, 32);
FL_ABI_OFFSET(fl_engine_stats_t, window_stalls, 40);
FL_ABI_OFFSET(fl_engine_stats_t, steals, 48);
FL_ABI_OFFSET(fl_engine_stats_t, parks, 56);
FL_ABI_MIN_SIZE(fl_engine_stats_t, 64);

FL_ABI_OFFSET(fl_capture_desc_t, struct_size, 0);
FL_ABI_OFFSET(fl_capture_desc_t, name, 8);
FL_ABI_OFFSET(fl_capture_desc_t, flags, 16);
FL_ABI_MIN_SIZE(fl_capture_desc_t, 24);

FL_ABI_OFFSET(fl_program_info_t, struct_size, 0);
FL_ABI_OFFSET(fl_program_info_t, instructions, 8);
FL_ABI_OFFSET(fl_program_info_t, host_instructions, 16);
FL_ABI_OFFSET(fl_program_info_t, edges, 24);
FL_ABI_OFFSET(fl_program_info_t, tasks, 32);
FL_ABI_OFFSET(fl_program_info_t, device_graphs, 40);
FL_ABI_OFFSET(fl_program_info_t, operands, 48);
FL_ABI_OFFSET(fl_program_info_t, bytes, 56);
FL_ABI_OFFSET(fl_program_info_t, launches, 64);
FL_ABI_MIN_SIZE(fl_program_info_t, 72);

#endif /* LP64 */

#endif /* FLOWLANE_TESTS_ABI_LAYOUT_H */

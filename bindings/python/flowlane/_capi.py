"""ctypes declarations of the flowlane C API, generated from capi/include/flowlane/flowlane.h
by scripts/dev/gen_bindings.py (scripts/dev/gen-bindings.sh). Do not edit: change the header
and regenerate; `scripts/dev/gen-bindings.sh --check` fails when this file is out of date.

Everything mirrors C one to one: integer constants (macros and enumerators), the status
table of FL_STATUS_MAP, opaque handle types, structures with their fields in order,
function pointer types and the signature of every function (FUNCTIONS). _ffi.py loads the
library and applies FUNCTIONS; errors.py builds the exception classes from STATUSES.
"""

# flake8: noqa
# mypy: disable-error-code="misc"
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    Union,
    c_bool,
    c_byte,
    c_char,
    c_char_p,
    c_double,
    c_float,
    c_int,
    c_int8,
    c_int16,
    c_int32,
    c_int64,
    c_long,
    c_longlong,
    c_short,
    c_size_t,
    c_ssize_t,
    c_ubyte,
    c_uint,
    c_uint8,
    c_uint16,
    c_uint32,
    c_uint64,
    c_ulong,
    c_ulonglong,
    c_ushort,
    c_void_p,
)
from typing import Any, Dict, List, Tuple

# --------------------------------------------------------------------------------------
# Integer macros (#define)

FL_VERSION_MAJOR = 0
FL_VERSION_MINOR = 1
FL_VERSION_PATCH = 0
FL_VERSION_HEX = 256
FL_SUBMIT_NONBLOCKING = 1
FL_SUBMIT_INLINE = 2
FL_COMM_UNORDERED = 1
FL_TRANSPORT_SKIPPED = 1
FL_TRANSPORT_CHECK_STRICT = 2
FL_TRANSPORT_CHECK_OFF = 4
FL_WAIT_FOREVER = 18446744073709551615
FL_INSTR_OUTCOME_HISTORY = 1024

# --------------------------------------------------------------------------------------
# Enumerations (name, members) in header order; each member is also a constant

FL_OK = 0
FL_ERR_INVALID_ARGUMENT = 1
FL_ERR_INVALID_HANDLE = 2
FL_ERR_OUT_OF_RANGE = 3
FL_ERR_NO_MEMORY = 4
FL_ERR_WOULD_BLOCK = 5
FL_ERR_EXHAUSTED = 6
FL_ERR_SHUTDOWN = 7
FL_ERR_INSTRUCTION_FAILED = 8
FL_ERR_DEPENDENCY_FAILED = 9
FL_ERR_CANCELLED = 10
FL_ERR_TIMEOUT = 11
FL_ERR_UNSUPPORTED = 12
FL_ERR_NO_DEVICE = 13
FL_ERR_CUDA = 14
FL_ERR_NCCL = 15
FL_ERR_INTERNAL = 16
FL_ERR_CAPTURING = 17
FL_DEVICE_CPU = 0
FL_DEVICE_CUDA = 1
FL_STREAM_HOST = 0
FL_STREAM_COMPUTE = 1
FL_STREAM_H2D = 2
FL_STREAM_D2H = 3
FL_STREAM_COLLECTIVE = 4
FL_READ = 1
FL_WRITE = 2
FL_READ_WRITE = 3
FL_MEMCPY_H2D = 1
FL_MEMCPY_D2H = 2
FL_MEMCPY_D2D = 3
FL_MEMSET = 4
FL_COMM_NCCL = 0
FL_COMM_HOST_FAKE = 1
FL_COLL_ALL_REDUCE = 1
FL_COLL_ALL_GATHER = 2
FL_COLL_REDUCE_SCATTER = 3
FL_COLL_BROADCAST = 4
FL_COLL_SEND = 5
FL_COLL_RECV = 6
FL_DTYPE_INT8 = 0
FL_DTYPE_UINT8 = 1
FL_DTYPE_INT32 = 2
FL_DTYPE_UINT32 = 3
FL_DTYPE_INT64 = 4
FL_DTYPE_UINT64 = 5
FL_DTYPE_FLOAT16 = 6
FL_DTYPE_FLOAT32 = 7
FL_DTYPE_FLOAT64 = 8
FL_DTYPE_BFLOAT16 = 9
FL_REDOP_SUM = 0
FL_REDOP_PROD = 1
FL_REDOP_MAX = 2
FL_REDOP_MIN = 3
FL_INSTR_PENDING = 0
FL_INSTR_DONE = 1
FL_INSTR_FAILED = 2
FL_INSTR_SKIPPED = 3
FL_INSTR_CANCELLED = 4
FL_INSTR_COMPLETED = 5

ENUMS: Tuple[Tuple[str, Tuple[Tuple[str, int], ...]], ...] = (
    ('fl_status', (
        ('FL_OK', 0),
        ('FL_ERR_INVALID_ARGUMENT', 1),
        ('FL_ERR_INVALID_HANDLE', 2),
        ('FL_ERR_OUT_OF_RANGE', 3),
        ('FL_ERR_NO_MEMORY', 4),
        ('FL_ERR_WOULD_BLOCK', 5),
        ('FL_ERR_EXHAUSTED', 6),
        ('FL_ERR_SHUTDOWN', 7),
        ('FL_ERR_INSTRUCTION_FAILED', 8),
        ('FL_ERR_DEPENDENCY_FAILED', 9),
        ('FL_ERR_CANCELLED', 10),
        ('FL_ERR_TIMEOUT', 11),
        ('FL_ERR_UNSUPPORTED', 12),
        ('FL_ERR_NO_DEVICE', 13),
        ('FL_ERR_CUDA', 14),
        ('FL_ERR_NCCL', 15),
        ('FL_ERR_INTERNAL', 16),
        ('FL_ERR_CAPTURING', 17),
    )),
    ('fl_device_type', (
        ('FL_DEVICE_CPU', 0),
        ('FL_DEVICE_CUDA', 1),
    )),
    ('fl_stream_kind', (
        ('FL_STREAM_HOST', 0),
        ('FL_STREAM_COMPUTE', 1),
        ('FL_STREAM_H2D', 2),
        ('FL_STREAM_D2H', 3),
        ('FL_STREAM_COLLECTIVE', 4),
    )),
    ('', (
        ('FL_READ', 1),
        ('FL_WRITE', 2),
        ('FL_READ_WRITE', 3),
    )),
    ('fl_memcpy_kind', (
        ('FL_MEMCPY_H2D', 1),
        ('FL_MEMCPY_D2H', 2),
        ('FL_MEMCPY_D2D', 3),
        ('FL_MEMSET', 4),
    )),
    ('fl_comm_backend', (
        ('FL_COMM_NCCL', 0),
        ('FL_COMM_HOST_FAKE', 1),
    )),
    ('fl_coll_op', (
        ('FL_COLL_ALL_REDUCE', 1),
        ('FL_COLL_ALL_GATHER', 2),
        ('FL_COLL_REDUCE_SCATTER', 3),
        ('FL_COLL_BROADCAST', 4),
        ('FL_COLL_SEND', 5),
        ('FL_COLL_RECV', 6),
    )),
    ('fl_dtype', (
        ('FL_DTYPE_INT8', 0),
        ('FL_DTYPE_UINT8', 1),
        ('FL_DTYPE_INT32', 2),
        ('FL_DTYPE_UINT32', 3),
        ('FL_DTYPE_INT64', 4),
        ('FL_DTYPE_UINT64', 5),
        ('FL_DTYPE_FLOAT16', 6),
        ('FL_DTYPE_FLOAT32', 7),
        ('FL_DTYPE_FLOAT64', 8),
        ('FL_DTYPE_BFLOAT16', 9),
    )),
    ('fl_redop', (
        ('FL_REDOP_SUM', 0),
        ('FL_REDOP_PROD', 1),
        ('FL_REDOP_MAX', 2),
        ('FL_REDOP_MIN', 3),
    )),
    ('fl_instr_state', (
        ('FL_INSTR_PENDING', 0),
        ('FL_INSTR_DONE', 1),
        ('FL_INSTR_FAILED', 2),
        ('FL_INSTR_SKIPPED', 3),
        ('FL_INSTR_CANCELLED', 4),
        ('FL_INSTR_COMPLETED', 5),
    )),
)

# --------------------------------------------------------------------------------------
# FL_STATUS_MAP: (name, value, description) of every status, in order

STATUSES: Tuple[Tuple[str, int, str], ...] = (
    ('FL_OK', 0, 'success'),
    ('FL_ERR_INVALID_ARGUMENT', 1, 'invalid argument (NULL pointer, bad flag, bad struct_size, cycle)'),
    ('FL_ERR_INVALID_HANDLE', 2, 'stale, released or foreign handle'),
    ('FL_ERR_OUT_OF_RANGE', 3, 'value out of range (lane, device index, count)'),
    ('FL_ERR_NO_MEMORY', 4, 'out of memory'),
    ('FL_ERR_WOULD_BLOCK', 5, 'in-flight window full and FL_SUBMIT_NONBLOCKING given'),
    ('FL_ERR_EXHAUSTED', 6, 'every lane is held'),
    ('FL_ERR_SHUTDOWN', 7, 'engine is being destroyed or was drained'),
    ('FL_ERR_INSTRUCTION_FAILED', 8, 'an instruction reported failure'),
    ('FL_ERR_DEPENDENCY_FAILED', 9, 'skipped: something it read was poisoned'),
    ('FL_ERR_CANCELLED', 10, 'cancelled'),
    ('FL_ERR_TIMEOUT', 11, 'timed out'),
    ('FL_ERR_UNSUPPORTED', 12, 'not supported by this build or this object'),
    ('FL_ERR_NO_DEVICE', 13, 'no such device at run time'),
    ('FL_ERR_CUDA', 14, 'CUDA error'),
    ('FL_ERR_NCCL', 15, 'NCCL error'),
    ('FL_ERR_INTERNAL', 16, 'internal error'),
    ('FL_ERR_CAPTURING', 17, 'refused while the calling thread captures on this engine'),
)

# --------------------------------------------------------------------------------------
# Structures and unions (opaque ones are handles, used through POINTER)


class fl_engine(Structure):
    pass


class fl_stream(Structure):
    pass


class fl_object(Structure):
    pass


class fl_taskgraph(Structure):
    pass


class fl_comm(Structure):
    pass


class fl_instr_ctx(Structure):
    pass


class fl_engine_desc(Structure):
    pass


class fl_device(Structure):
    pass


class fl_operand(Structure):
    pass


class fl_host_instr(Structure):
    pass


class fl_dim3(Structure):
    pass


class fl_kernel_instr(Structure):
    pass


class fl_device_instr(Structure):
    pass


class fl_memcpy_instr(Structure):
    pass


class fl_comm_unique_id(Structure):
    pass


class fl_comm_desc(Structure):
    pass


class fl_coll_part(Structure):
    pass


class fl_collective_instr(Structure):
    pass


class fl_comm_transport_op(Structure):
    pass


class fl_comm_transport(Structure):
    pass


class fl_comm_env(Structure):
    pass


class fl_watchdog_desc(Structure):
    pass


class fl_engine_stats(Structure):
    pass


class fl_task_group(Structure):
    pass


class fl_program(Structure):
    pass


class fl_capture_desc(Structure):
    pass


class fl_program_info(Structure):
    pass


# --------------------------------------------------------------------------------------
# Typedefs, function pointer types and fields, in header order

fl_status_t = c_uint
fl_engine_t = fl_engine
fl_stream_t = fl_stream
fl_object_t = fl_object
fl_taskgraph_t = fl_taskgraph
fl_comm_t = fl_comm
fl_instr_ctx_t = fl_instr_ctx
fl_instr_id = c_uint64
fl_engine_desc._fields_ = [
    ('struct_size', c_uint64),
    ('num_workers', c_uint64),
    ('max_lanes', c_uint64),
    ('inflight_limit', c_uint64),
    ('watchdog_ms', c_uint64),
    ('flags', c_uint64),
]
fl_engine_desc_t = fl_engine_desc
fl_device_type_t = c_uint
fl_device._fields_ = [
    ('type', c_int32),
    ('index', c_int32),
]
fl_device_t = fl_device
fl_stream_kind_t = c_uint
fl_release_fn = CFUNCTYPE(None, c_void_p)
fl_operand._fields_ = [
    ('object', POINTER(fl_object_t)),
    ('access', c_uint32),
    ('reserved', c_uint32),
]
fl_operand_t = fl_operand
fl_host_fn = CFUNCTYPE(fl_status_t, POINTER(fl_instr_ctx_t), c_void_p)
fl_host_instr._fields_ = [
    ('struct_size', c_uint64),
    ('fn', fl_host_fn),
    ('user_data', c_void_p),
    ('cleanup', fl_release_fn),
    ('operands', POINTER(fl_operand_t)),
    ('num_operands', c_uint64),
    ('name', c_char_p),
    ('flags', c_uint64),
]
fl_host_instr_t = fl_host_instr
fl_task_fn = CFUNCTYPE(fl_status_t, c_void_p)
fl_range_fn = CFUNCTYPE(fl_status_t, c_uint64, c_uint64, c_void_p)
fl_dim3._fields_ = [
    ('x', c_uint32),
    ('y', c_uint32),
    ('z', c_uint32),
]
fl_dim3_t = fl_dim3
fl_kernel_instr._fields_ = [
    ('struct_size', c_uint64),
    ('func', c_void_p),
    ('grid', fl_dim3_t),
    ('block', fl_dim3_t),
    ('shared_mem_bytes', c_uint64),
    ('args', POINTER(c_void_p)),
    ('arg_sizes', POINTER(c_uint64)),
    ('num_args', c_uint64),
    ('operands', POINTER(fl_operand_t)),
    ('num_operands', c_uint64),
    ('name', c_char_p),
    ('flags', c_uint64),
]
fl_kernel_instr_t = fl_kernel_instr
fl_device_fn = CFUNCTYPE(fl_status_t, POINTER(fl_instr_ctx_t), c_void_p, c_void_p)
fl_device_instr._fields_ = [
    ('struct_size', c_uint64),
    ('fn', fl_device_fn),
    ('user_data', c_void_p),
    ('cleanup', fl_release_fn),
    ('operands', POINTER(fl_operand_t)),
    ('num_operands', c_uint64),
    ('name', c_char_p),
    ('flags', c_uint64),
]
fl_device_instr_t = fl_device_instr
fl_memcpy_kind_t = c_uint
fl_memcpy_instr._fields_ = [
    ('struct_size', c_uint64),
    ('kind', c_uint32),
    ('value', c_uint32),
    ('dst', c_void_p),
    ('src', c_void_p),
    ('bytes', c_uint64),
    ('operands', POINTER(fl_operand_t)),
    ('num_operands', c_uint64),
    ('name', c_char_p),
    ('flags', c_uint64),
]
fl_memcpy_instr_t = fl_memcpy_instr
fl_comm_unique_id._fields_ = [
    ('internal', (c_char * 128)),
]
fl_comm_unique_id_t = fl_comm_unique_id
fl_comm_backend_t = c_uint
fl_comm_desc._fields_ = [
    ('struct_size', c_uint64),
    ('nranks', c_uint64),
    ('rank', c_uint64),
    ('device', c_uint64),
    ('lane', c_uint64),
    ('backend', c_uint64),
    ('flags', c_uint64),
]
fl_comm_desc_t = fl_comm_desc
fl_coll_op_t = c_uint
fl_dtype_t = c_uint
fl_redop_t = c_uint
fl_coll_part._fields_ = [
    ('op', c_uint32),
    ('dtype', c_uint32),
    ('redop', c_uint32),
    ('peer', c_uint32),
    ('sendbuf', c_void_p),
    ('recvbuf', c_void_p),
    ('count', c_uint64),
]
fl_coll_part_t = fl_coll_part
fl_collective_instr._fields_ = [
    ('struct_size', c_uint64),
    ('parts', POINTER(fl_coll_part_t)),
    ('num_parts', c_uint64),
    ('operands', POINTER(fl_operand_t)),
    ('num_operands', c_uint64),
    ('name', c_char_p),
    ('flags', c_uint64),
]
fl_collective_instr_t = fl_collective_instr
fl_comm_transport_op._fields_ = [
    ('struct_size', c_uint64),
    ('seq', c_uint64),
    ('parts', POINTER(fl_coll_part_t)),
    ('num_parts', c_uint64),
    ('fingerprint', c_uint64),
    ('signature', c_char_p),
    ('flags', c_uint64),
]
fl_comm_transport_op_t = fl_comm_transport_op
fl_comm_transport._fields_ = [
    ('struct_size', c_uint64),
    ('name', c_char_p),
    ('id', c_uint64),
    ('state', c_void_p),
    ('start', CFUNCTYPE(fl_status_t, c_void_p, POINTER(fl_comm_transport_op_t), POINTER(c_void_p), c_char_p, c_uint64)),
    ('test', CFUNCTYPE(fl_status_t, c_void_p, c_void_p, POINTER(c_int32), c_char_p, c_uint64)),
    ('abort', CFUNCTYPE(None, c_void_p, c_char_p)),
    ('destroy', CFUNCTYPE(None, c_void_p)),
    ('flags', c_uint64),
]
fl_comm_transport_t = fl_comm_transport
fl_comm_env._fields_ = [
    ('struct_size', c_uint64),
    ('rank', c_uint64),
    ('size', c_uint64),
    ('local_rank', c_uint64),
    ('local_size', c_uint64),
    ('launcher', (c_char * 16)),
]
fl_comm_env_t = fl_comm_env
fl_dump_fn = CFUNCTYPE(None, c_char_p, c_void_p)
fl_watchdog_desc._fields_ = [
    ('struct_size', c_uint64),
    ('timeout_ms', c_uint64),
    ('callback', fl_dump_fn),
    ('user_data', c_void_p),
    ('path', c_char_p),
    ('flags', c_uint64),
]
fl_watchdog_desc_t = fl_watchdog_desc
fl_engine_stats._fields_ = [
    ('struct_size', c_uint64),
    ('submitted', c_uint64),
    ('completed', c_uint64),
    ('failed', c_uint64),
    ('in_flight', c_uint64),
    ('window_stalls', c_uint64),
    ('steals', c_uint64),
    ('parks', c_uint64),
    ('cancelled', c_uint64),
    ('tasks', c_uint64),
]
fl_engine_stats_t = fl_engine_stats
fl_instr_state_t = c_uint
fl_task_group_t = fl_task_group
fl_program_t = fl_program
fl_capture_desc._fields_ = [
    ('struct_size', c_uint64),
    ('name', c_char_p),
    ('flags', c_uint64),
]
fl_capture_desc_t = fl_capture_desc
fl_program_info._fields_ = [
    ('struct_size', c_uint64),
    ('instructions', c_uint64),
    ('host_instructions', c_uint64),
    ('edges', c_uint64),
    ('tasks', c_uint64),
    ('device_graphs', c_uint64),
    ('operands', c_uint64),
    ('bytes', c_uint64),
    ('launches', c_uint64),
]
fl_program_info_t = fl_program_info

#: Structures with a body, in header order (the layout test compares them with C).
RECORDS: Tuple[str, ...] = (
    'fl_engine_desc',
    'fl_device',
    'fl_operand',
    'fl_host_instr',
    'fl_dim3',
    'fl_kernel_instr',
    'fl_device_instr',
    'fl_memcpy_instr',
    'fl_comm_unique_id',
    'fl_comm_desc',
    'fl_coll_part',
    'fl_collective_instr',
    'fl_comm_transport_op',
    'fl_comm_transport',
    'fl_comm_env',
    'fl_watchdog_desc',
    'fl_engine_stats',
    'fl_capture_desc',
    'fl_program_info',
)

#: Structures whose first field is struct_size (size-prefixed descriptors).
SIZED: Tuple[str, ...] = (
    'fl_engine_desc',
    'fl_host_instr',
    'fl_kernel_instr',
    'fl_device_instr',
    'fl_memcpy_instr',
    'fl_comm_desc',
    'fl_collective_instr',
    'fl_comm_transport_op',
    'fl_comm_transport',
    'fl_comm_env',
    'fl_watchdog_desc',
    'fl_engine_stats',
    'fl_capture_desc',
    'fl_program_info',
)

# --------------------------------------------------------------------------------------
# Functions: name -> (restype, argtypes), in header order

FUNCTIONS: Dict[str, Tuple[Any, List[Any]]] = {
    'fl_version_hex': (c_uint32, []),
    'fl_version_string': (c_char_p, []),
    'fl_status_name': (c_char_p, [fl_status_t]),
    'fl_status_string': (c_char_p, [fl_status_t]),
    'fl_last_error_message': (c_char_p, []),
    'fl_set_last_error_message': (fl_status_t, [fl_status_t, c_char_p]),
    'fl_engine_create': (fl_status_t, [POINTER(fl_engine_desc_t), POINTER(POINTER(fl_engine_t))]),
    'fl_engine_synchronize': (fl_status_t, [POINTER(fl_engine_t)]),
    'fl_engine_destroy': (fl_status_t, [POINTER(fl_engine_t)]),
    'fl_engine_lane_count': (c_uint32, [POINTER(fl_engine_t)]),
    'fl_engine_worker_count': (c_uint32, [POINTER(fl_engine_t)]),
    'fl_lane_acquire': (fl_status_t, [POINTER(fl_engine_t), POINTER(c_uint32)]),
    'fl_lane_release': (fl_status_t, [POINTER(fl_engine_t), c_uint32]),
    'fl_stream_get': (fl_status_t, [POINTER(fl_engine_t), c_uint32, fl_device_t, fl_stream_kind_t, POINTER(POINTER(fl_stream_t))]),
    'fl_stream_synchronize': (fl_status_t, [POINTER(fl_stream_t)]),
    'fl_stream_info': (fl_status_t, [POINTER(fl_stream_t), POINTER(c_uint32), POINTER(fl_device_t), POINTER(fl_stream_kind_t)]),
    'fl_object_create': (fl_status_t, [POINTER(fl_engine_t), c_void_p, fl_release_fn, POINTER(POINTER(fl_object_t))]),
    'fl_object_release': (fl_status_t, [POINTER(fl_object_t)]),
    'fl_object_wait': (fl_status_t, [POINTER(fl_object_t), c_uint32]),
    'fl_object_user_data': (fl_status_t, [POINTER(fl_object_t), POINTER(c_void_p)]),
    'fl_instr_set_error': (None, [POINTER(fl_instr_ctx_t), c_char_p]),
    'fl_instr_get_lane': (c_uint32, [POINTER(fl_instr_ctx_t)]),
    'fl_instr_get_id': (fl_instr_id, [POINTER(fl_instr_ctx_t)]),
    'fl_instr_get_engine': (POINTER(fl_engine_t), [POINTER(fl_instr_ctx_t)]),
    'fl_instr_lane': (c_uint32, [POINTER(fl_instr_ctx_t)]),
    'fl_instr_engine': (POINTER(fl_engine_t), [POINTER(fl_instr_ctx_t)]),
    'fl_submit_host': (fl_status_t, [POINTER(fl_stream_t), POINTER(fl_host_instr_t), POINTER(fl_instr_id)]),
    'fl_parallel_for': (fl_status_t, [POINTER(fl_engine_t), c_uint64, c_uint64, c_uint64, fl_range_fn, c_void_p]),
    'fl_taskgraph_create': (fl_status_t, [POINTER(fl_engine_t), POINTER(POINTER(fl_taskgraph_t))]),
    'fl_taskgraph_add': (fl_status_t, [POINTER(fl_taskgraph_t), fl_task_fn, c_void_p, c_char_p, POINTER(c_uint64)]),
    'fl_taskgraph_precede': (fl_status_t, [POINTER(fl_taskgraph_t), c_uint64, c_uint64]),
    'fl_taskgraph_run': (fl_status_t, [POINTER(fl_taskgraph_t), c_int64]),
    'fl_taskgraph_destroy': (fl_status_t, [POINTER(fl_taskgraph_t)]),
    'fl_cuda_device_count': (fl_status_t, [POINTER(c_int32)]),
    'fl_submit_kernel': (fl_status_t, [POINTER(fl_stream_t), POINTER(fl_kernel_instr_t), POINTER(fl_instr_id)]),
    'fl_submit_device': (fl_status_t, [POINTER(fl_stream_t), POINTER(fl_device_instr_t), POINTER(fl_instr_id)]),
    'fl_submit_memcpy': (fl_status_t, [POINTER(fl_stream_t), POINTER(fl_memcpy_instr_t), POINTER(fl_instr_id)]),
    'fl_host_alloc_pinned': (fl_status_t, [c_uint64, POINTER(c_void_p)]),
    'fl_host_free_pinned': (fl_status_t, [c_void_p]),
    'fl_cuda_priority_range': (fl_status_t, [c_int32, POINTER(c_int32), POINTER(c_int32)]),
    'fl_stream_set_priority': (fl_status_t, [POINTER(fl_stream_t), c_int32, POINTER(c_int32)]),
    'fl_comm_get_unique_id': (fl_status_t, [fl_comm_backend_t, POINTER(fl_comm_unique_id_t)]),
    'fl_comm_create': (fl_status_t, [POINTER(fl_engine_t), POINTER(fl_comm_desc_t), POINTER(fl_comm_unique_id_t), POINTER(POINTER(fl_comm_t))]),
    'fl_comm_destroy': (fl_status_t, [POINTER(fl_comm_t)]),
    'fl_submit_collective': (fl_status_t, [POINTER(fl_stream_t), POINTER(fl_comm_t), POINTER(fl_collective_instr_t), POINTER(fl_instr_id)]),
    'fl_comm_dump': (fl_status_t, [POINTER(fl_comm_t), c_char_p]),
    'fl_comm_set_timeout': (fl_status_t, [POINTER(fl_comm_t), c_uint64]),
    'fl_comm_create_transport': (fl_status_t, [POINTER(fl_engine_t), POINTER(fl_comm_desc_t), POINTER(fl_comm_transport_t), POINTER(POINTER(fl_comm_t))]),
    'fl_comm_get_env': (fl_status_t, [POINTER(fl_comm_env_t)]),
    'fl_comm_rendezvous_file': (fl_status_t, [c_char_p, c_char_p, c_uint64, c_uint64, c_uint64, POINTER(fl_comm_unique_id_t)]),
    'fl_engine_set_watchdog': (fl_status_t, [POINTER(fl_engine_t), POINTER(fl_watchdog_desc_t)]),
    'fl_engine_dump': (fl_status_t, [POINTER(fl_engine_t), c_char_p, c_uint64, POINTER(c_uint64)]),
    'fl_trace_start': (fl_status_t, [POINTER(fl_engine_t), c_char_p]),
    'fl_trace_stop': (fl_status_t, [POINTER(fl_engine_t)]),
    'fl_engine_stats': (fl_status_t, [POINTER(fl_engine_t), POINTER(fl_engine_stats_t)]),
    'fl_object_wait_for': (fl_status_t, [POINTER(fl_object_t), c_uint32, c_uint64]),
    'fl_stream_synchronize_for': (fl_status_t, [POINTER(fl_stream_t), c_uint64]),
    'fl_engine_synchronize_for': (fl_status_t, [POINTER(fl_engine_t), c_uint64]),
    'fl_instr_query': (fl_status_t, [POINTER(fl_stream_t), fl_instr_id, POINTER(c_uint32)]),
    'fl_instr_wait_for': (fl_status_t, [POINTER(fl_stream_t), fl_instr_id, c_uint64]),
    'fl_instr_cancel': (fl_status_t, [POINTER(fl_stream_t), fl_instr_id]),
    'fl_stream_cancel': (fl_status_t, [POINTER(fl_stream_t)]),
    'fl_engine_cancel': (fl_status_t, [POINTER(fl_engine_t)]),
    'fl_engine_drain': (fl_status_t, [POINTER(fl_engine_t), c_uint64]),
    'fl_task_group_create': (fl_status_t, [POINTER(fl_engine_t), POINTER(POINTER(fl_task_group_t))]),
    'fl_task_group_spawn': (fl_status_t, [POINTER(fl_task_group_t), fl_task_fn, c_void_p, fl_release_fn]),
    'fl_task_group_wait': (fl_status_t, [POINTER(fl_task_group_t)]),
    'fl_task_group_wait_for': (fl_status_t, [POINTER(fl_task_group_t), c_uint64]),
    'fl_task_group_destroy': (fl_status_t, [POINTER(fl_task_group_t)]),
    'fl_capture_begin': (fl_status_t, [POINTER(fl_engine_t), POINTER(fl_capture_desc_t)]),
    'fl_capture_end': (fl_status_t, [POINTER(fl_engine_t), POINTER(POINTER(fl_program_t))]),
    'fl_program_launch': (fl_status_t, [POINTER(fl_program_t), POINTER(fl_stream_t), c_uint64, POINTER(fl_instr_id)]),
    'fl_program_info': (fl_status_t, [POINTER(fl_program_t), POINTER(fl_program_info_t)]),
    'fl_program_destroy': (fl_status_t, [POINTER(fl_program_t)]),
}

#: Parameter names of every function (for messages).
PARAMS: Dict[str, Tuple[str, ...]] = {
    'fl_version_hex': (),
    'fl_version_string': (),
    'fl_status_name': ('status', ),
    'fl_status_string': ('status', ),
    'fl_last_error_message': (),
    'fl_set_last_error_message': ('status', 'message', ),
    'fl_engine_create': ('desc', 'out_engine', ),
    'fl_engine_synchronize': ('engine', ),
    'fl_engine_destroy': ('engine', ),
    'fl_engine_lane_count': ('engine', ),
    'fl_engine_worker_count': ('engine', ),
    'fl_lane_acquire': ('engine', 'out_lane', ),
    'fl_lane_release': ('engine', 'lane', ),
    'fl_stream_get': ('engine', 'lane', 'device', 'kind', 'out_stream', ),
    'fl_stream_synchronize': ('stream', ),
    'fl_stream_info': ('stream', 'out_lane', 'out_device', 'out_kind', ),
    'fl_object_create': ('engine', 'user_data', 'release', 'out_object', ),
    'fl_object_release': ('object', ),
    'fl_object_wait': ('object', 'access', ),
    'fl_object_user_data': ('object', 'out_user_data', ),
    'fl_instr_set_error': ('ctx', 'message', ),
    'fl_instr_get_lane': ('ctx', ),
    'fl_instr_get_id': ('ctx', ),
    'fl_instr_get_engine': ('ctx', ),
    'fl_instr_lane': ('ctx', ),
    'fl_instr_engine': ('ctx', ),
    'fl_submit_host': ('stream', 'instr', 'out_instr_id', ),
    'fl_parallel_for': ('engine', 'begin', 'end', 'grain', 'body', 'user_data', ),
    'fl_taskgraph_create': ('engine', 'out_graph', ),
    'fl_taskgraph_add': ('graph', 'fn', 'user_data', 'name', 'out_node', ),
    'fl_taskgraph_precede': ('graph', 'before', 'after', ),
    'fl_taskgraph_run': ('graph', 'num_threads', ),
    'fl_taskgraph_destroy': ('graph', ),
    'fl_cuda_device_count': ('out_count', ),
    'fl_submit_kernel': ('stream', 'instr', 'out_instr_id', ),
    'fl_submit_device': ('stream', 'instr', 'out_instr_id', ),
    'fl_submit_memcpy': ('stream', 'instr', 'out_instr_id', ),
    'fl_host_alloc_pinned': ('bytes', 'out_ptr', ),
    'fl_host_free_pinned': ('ptr', ),
    'fl_cuda_priority_range': ('device', 'out_least', 'out_greatest', ),
    'fl_stream_set_priority': ('stream', 'priority', 'out_applied', ),
    'fl_comm_get_unique_id': ('backend', 'out_id', ),
    'fl_comm_create': ('engine', 'desc', 'id', 'out_comm', ),
    'fl_comm_destroy': ('comm', ),
    'fl_submit_collective': ('stream', 'comm', 'instr', 'out_instr_id', ),
    'fl_comm_dump': ('comm', 'path', ),
    'fl_comm_set_timeout': ('comm', 'timeout_ms', ),
    'fl_comm_create_transport': ('engine', 'desc', 'transport', 'out_comm', ),
    'fl_comm_get_env': ('out_env', ),
    'fl_comm_rendezvous_file': ('dir', 'key', 'rank', 'nranks', 'timeout_ms', 'inout_id', ),
    'fl_engine_set_watchdog': ('engine', 'desc', ),
    'fl_engine_dump': ('engine', 'buffer', 'size', 'out_needed', ),
    'fl_trace_start': ('engine', 'path', ),
    'fl_trace_stop': ('engine', ),
    'fl_engine_stats': ('engine', 'out_stats', ),
    'fl_object_wait_for': ('object', 'access', 'timeout_ns', ),
    'fl_stream_synchronize_for': ('stream', 'timeout_ns', ),
    'fl_engine_synchronize_for': ('engine', 'timeout_ns', ),
    'fl_instr_query': ('stream', 'id', 'out_state', ),
    'fl_instr_wait_for': ('stream', 'id', 'timeout_ns', ),
    'fl_instr_cancel': ('stream', 'id', ),
    'fl_stream_cancel': ('stream', ),
    'fl_engine_cancel': ('engine', ),
    'fl_engine_drain': ('engine', 'timeout_ns', ),
    'fl_task_group_create': ('engine', 'out_group', ),
    'fl_task_group_spawn': ('group', 'fn', 'user_data', 'cleanup', ),
    'fl_task_group_wait': ('group', ),
    'fl_task_group_wait_for': ('group', 'timeout_ns', ),
    'fl_task_group_destroy': ('group', ),
    'fl_capture_begin': ('engine', 'desc', ),
    'fl_capture_end': ('engine', 'out_program', ),
    'fl_program_launch': ('program', 'stream', 'flags', 'out_instr_id', ),
    'fl_program_info': ('program', 'out_info', ),
    'fl_program_destroy': ('program', ),
}

#: Deprecated spellings: `#define old new` in the header (old name -> function).
ALIASES: Dict[str, str] = {}

//! Raw declarations of the flowlane C API, one to one with
//! `capi/include/flowlane/flowlane.h` (the header is the manual: every function's
//! comment there gives its semantics, ownership and statuses).
//!
//! Everything here is `unsafe` to call; the `flowlane` crate is the safe interface.
#![allow(non_camel_case_types)]
#![warn(unsafe_op_in_unsafe_fn)]

use std::os::raw::{c_char, c_int, c_void};

// ---------------------------------------------------------------------------------------
// Version and status

pub const FL_VERSION_MAJOR: u32 = 0;
pub const FL_VERSION_MINOR: u32 = 1;
pub const FL_VERSION_PATCH: u32 = 0;
pub const FL_VERSION_HEX: u32 = (FL_VERSION_MAJOR << 16) | (FL_VERSION_MINOR << 8) | FL_VERSION_PATCH;

/// `fl_status_t` (a C enum: int-sized). Values are pinned; new ones are only appended.
pub type fl_status_t = c_int;
pub const FL_OK: fl_status_t = 0;
pub const FL_ERR_INVALID_ARGUMENT: fl_status_t = 1;
pub const FL_ERR_INVALID_HANDLE: fl_status_t = 2;
pub const FL_ERR_OUT_OF_RANGE: fl_status_t = 3;
pub const FL_ERR_NO_MEMORY: fl_status_t = 4;
pub const FL_ERR_WOULD_BLOCK: fl_status_t = 5;
pub const FL_ERR_EXHAUSTED: fl_status_t = 6;
pub const FL_ERR_SHUTDOWN: fl_status_t = 7;
pub const FL_ERR_INSTRUCTION_FAILED: fl_status_t = 8;
pub const FL_ERR_DEPENDENCY_FAILED: fl_status_t = 9;
pub const FL_ERR_CANCELLED: fl_status_t = 10;
pub const FL_ERR_TIMEOUT: fl_status_t = 11;
pub const FL_ERR_UNSUPPORTED: fl_status_t = 12;
pub const FL_ERR_NO_DEVICE: fl_status_t = 13;
pub const FL_ERR_CUDA: fl_status_t = 14;
pub const FL_ERR_NCCL: fl_status_t = 15;
pub const FL_ERR_INTERNAL: fl_status_t = 16;

// ---------------------------------------------------------------------------------------
// Handles (opaque)

macro_rules! opaque {
    ($($name:ident),*) => {$(
        #[repr(C)]
        pub struct $name {
            _private: [u8; 0],
            // Not Send/Sync/Unpin by itself: the safe crate decides per handle.
            _marker: core::marker::PhantomData<(*mut u8, core::marker::PhantomPinned)>,
        }
    )*};
}
opaque!(fl_engine_t, fl_stream_t, fl_object_t, fl_taskgraph_t, fl_comm_t, fl_instr_ctx_t);

pub type fl_instr_id = u64;

// ---------------------------------------------------------------------------------------
// Engine

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct fl_engine_desc_t {
    pub struct_size: u64,
    pub num_workers: u64,
    pub max_lanes: u64,
    pub inflight_limit: u64,
    pub watchdog_ms: u64,
    pub flags: u64,
}
impl fl_engine_desc_t {
    /// `FL_ENGINE_DESC_INIT`
    pub fn init() -> Self {
        fl_engine_desc_t { struct_size: core::mem::size_of::<Self>() as u64, ..Default::default() }
    }
}

// ---------------------------------------------------------------------------------------
// Streams

pub type fl_device_type_t = c_int;
pub const FL_DEVICE_CPU: fl_device_type_t = 0;
pub const FL_DEVICE_CUDA: fl_device_type_t = 1;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fl_device_t {
    pub type_: i32,
    pub index: i32,
}

pub type fl_stream_kind_t = c_int;
pub const FL_STREAM_HOST: fl_stream_kind_t = 0;
pub const FL_STREAM_COMPUTE: fl_stream_kind_t = 1;
pub const FL_STREAM_H2D: fl_stream_kind_t = 2;
pub const FL_STREAM_D2H: fl_stream_kind_t = 3;
pub const FL_STREAM_COLLECTIVE: fl_stream_kind_t = 4;

// ---------------------------------------------------------------------------------------
// Objects and host instructions

pub type fl_release_fn = Option<unsafe extern "C" fn(user_data: *mut c_void)>;

pub const FL_READ: u32 = 1;
pub const FL_WRITE: u32 = 2;
pub const FL_READ_WRITE: u32 = 3;

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fl_operand_t {
    pub object: *mut fl_object_t,
    pub access: u32,
    pub reserved: u32,
}

pub type fl_host_fn = Option<unsafe extern "C" fn(ctx: *mut fl_instr_ctx_t, user_data: *mut c_void) -> fl_status_t>;

pub const FL_SUBMIT_NONBLOCKING: u64 = 1;

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fl_host_instr_t {
    pub struct_size: u64,
    pub fn_: fl_host_fn,
    pub user_data: *mut c_void,
    pub cleanup: fl_release_fn,
    pub operands: *const fl_operand_t,
    pub num_operands: u64,
    pub name: *const c_char,
    pub flags: u64,
}
impl fl_host_instr_t {
    /// `FL_HOST_INSTR_INIT`
    pub fn init() -> Self {
        fl_host_instr_t {
            struct_size: core::mem::size_of::<Self>() as u64,
            fn_: None,
            user_data: core::ptr::null_mut(),
            cleanup: None,
            operands: core::ptr::null(),
            num_operands: 0,
            name: core::ptr::null(),
            flags: 0,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Task graphs and parallel loops

pub type fl_task_fn = Option<unsafe extern "C" fn(user_data: *mut c_void) -> fl_status_t>;
pub type fl_range_fn = Option<unsafe extern "C" fn(lo: u64, hi: u64, user_data: *mut c_void) -> fl_status_t>;

// ---------------------------------------------------------------------------------------
// GPU

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fl_dim3_t {
    pub x: u32,
    pub y: u32,
    pub z: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fl_kernel_instr_t {
    pub struct_size: u64,
    pub func: *const c_void,
    pub grid: fl_dim3_t,
    pub block: fl_dim3_t,
    pub shared_mem_bytes: u64,
    pub args: *const *const c_void,
    pub arg_sizes: *const u64,
    pub num_args: u64,
    pub operands: *const fl_operand_t,
    pub num_operands: u64,
    pub name: *const c_char,
    pub flags: u64,
}
impl fl_kernel_instr_t {
    /// `FL_KERNEL_INSTR_INIT`
    pub fn init() -> Self {
        fl_kernel_instr_t {
            struct_size: core::mem::size_of::<Self>() as u64,
            func: core::ptr::null(),
            grid: fl_dim3_t::default(),
            block: fl_dim3_t::default(),
            shared_mem_bytes: 0,
            args: core::ptr::null(),
            arg_sizes: core::ptr::null(),
            num_args: 0,
            operands: core::ptr::null(),
            num_operands: 0,
            name: core::ptr::null(),
            flags: 0,
        }
    }
}

pub type fl_device_fn =
    Option<unsafe extern "C" fn(ctx: *mut fl_instr_ctx_t, cuda_stream: *mut c_void, user_data: *mut c_void) -> fl_status_t>;

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fl_device_instr_t {
    pub struct_size: u64,
    pub fn_: fl_device_fn,
    pub user_data: *mut c_void,
    pub cleanup: fl_release_fn,
    pub operands: *const fl_operand_t,
    pub num_operands: u64,
    pub name: *const c_char,
    pub flags: u64,
}
impl fl_device_instr_t {
    /// `FL_DEVICE_INSTR_INIT`
    pub fn init() -> Self {
        fl_device_instr_t {
            struct_size: core::mem::size_of::<Self>() as u64,
            fn_: None,
            user_data: core::ptr::null_mut(),
            cleanup: None,
            operands: core::ptr::null(),
            num_operands: 0,
            name: core::ptr::null(),
            flags: 0,
        }
    }
}

pub type fl_memcpy_kind_t = u32;
pub const FL_MEMCPY_H2D: fl_memcpy_kind_t = 1;
pub const FL_MEMCPY_D2H: fl_memcpy_kind_t = 2;
pub const FL_MEMCPY_D2D: fl_memcpy_kind_t = 3;
pub const FL_MEMSET: fl_memcpy_kind_t = 4;

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fl_memcpy_instr_t {
    pub struct_size: u64,
    pub kind: u32,
    pub value: u32,
    pub dst: *mut c_void,
    pub src: *const c_void,
    pub bytes: u64,
    pub operands: *const fl_operand_t,
    pub num_operands: u64,
    pub name: *const c_char,
    pub flags: u64,
}
impl fl_memcpy_instr_t {
    /// `FL_MEMCPY_INSTR_INIT`
    pub fn init() -> Self {
        fl_memcpy_instr_t {
            struct_size: core::mem::size_of::<Self>() as u64,
            kind: 0,
            value: 0,
            dst: core::ptr::null_mut(),
            src: core::ptr::null(),
            bytes: 0,
            operands: core::ptr::null(),
            num_operands: 0,
            name: core::ptr::null(),
            flags: 0,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Collectives

#[repr(C)]
#[derive(Clone, Copy)]
pub struct fl_comm_unique_id_t {
    pub internal: [c_char; 128],
}
impl Default for fl_comm_unique_id_t {
    fn default() -> Self {
        fl_comm_unique_id_t { internal: [0; 128] }
    }
}

pub type fl_comm_backend_t = u32;
pub const FL_COMM_NCCL: fl_comm_backend_t = 0;
pub const FL_COMM_HOST_FAKE: fl_comm_backend_t = 1;
/// `fl_comm_desc_t::flags`: leave this communicator's NCCL collectives out of the engine's
/// collective order (the caller keeps the ranks' issue order consistent).
pub const FL_COMM_UNORDERED: u64 = 1;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct fl_comm_desc_t {
    pub struct_size: u64,
    pub nranks: u64,
    pub rank: u64,
    pub device: u64,
    pub lane: u64,
    pub backend: u64,
    pub flags: u64,
}
impl fl_comm_desc_t {
    /// `FL_COMM_DESC_INIT`
    pub fn init() -> Self {
        fl_comm_desc_t { struct_size: core::mem::size_of::<Self>() as u64, ..Default::default() }
    }
}

pub type fl_coll_op_t = u32;
pub const FL_COLL_ALL_REDUCE: fl_coll_op_t = 1;
pub const FL_COLL_ALL_GATHER: fl_coll_op_t = 2;
pub const FL_COLL_REDUCE_SCATTER: fl_coll_op_t = 3;
pub const FL_COLL_BROADCAST: fl_coll_op_t = 4;
pub const FL_COLL_SEND: fl_coll_op_t = 5;
pub const FL_COLL_RECV: fl_coll_op_t = 6;

pub type fl_dtype_t = u32;
pub const FL_DTYPE_INT8: fl_dtype_t = 0;
pub const FL_DTYPE_UINT8: fl_dtype_t = 1;
pub const FL_DTYPE_INT32: fl_dtype_t = 2;
pub const FL_DTYPE_UINT32: fl_dtype_t = 3;
pub const FL_DTYPE_INT64: fl_dtype_t = 4;
pub const FL_DTYPE_UINT64: fl_dtype_t = 5;
pub const FL_DTYPE_FLOAT16: fl_dtype_t = 6;
pub const FL_DTYPE_FLOAT32: fl_dtype_t = 7;
pub const FL_DTYPE_FLOAT64: fl_dtype_t = 8;
pub const FL_DTYPE_BFLOAT16: fl_dtype_t = 9;

pub type fl_redop_t = u32;
pub const FL_REDOP_SUM: fl_redop_t = 0;
pub const FL_REDOP_PROD: fl_redop_t = 1;
pub const FL_REDOP_MAX: fl_redop_t = 2;
pub const FL_REDOP_MIN: fl_redop_t = 3;

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fl_coll_part_t {
    pub op: u32,
    pub dtype: u32,
    pub redop: u32,
    pub peer: u32,
    pub sendbuf: *const c_void,
    pub recvbuf: *mut c_void,
    pub count: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fl_collective_instr_t {
    pub struct_size: u64,
    pub parts: *const fl_coll_part_t,
    pub num_parts: u64,
    pub operands: *const fl_operand_t,
    pub num_operands: u64,
    pub name: *const c_char,
    pub flags: u64,
}
impl fl_collective_instr_t {
    /// `FL_COLLECTIVE_INSTR_INIT`
    pub fn init() -> Self {
        fl_collective_instr_t {
            struct_size: core::mem::size_of::<Self>() as u64,
            parts: core::ptr::null(),
            num_parts: 0,
            operands: core::ptr::null(),
            num_operands: 0,
            name: core::ptr::null(),
            flags: 0,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Diagnostics

pub type fl_dump_fn = Option<unsafe extern "C" fn(dump: *const c_char, user_data: *mut c_void)>;

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fl_watchdog_desc_t {
    pub struct_size: u64,
    pub timeout_ms: u64,
    pub callback: fl_dump_fn,
    pub user_data: *mut c_void,
    pub path: *const c_char,
    pub flags: u64,
}
impl fl_watchdog_desc_t {
    /// `FL_WATCHDOG_DESC_INIT`
    pub fn init() -> Self {
        fl_watchdog_desc_t {
            struct_size: core::mem::size_of::<Self>() as u64,
            timeout_ms: 0,
            callback: None,
            user_data: core::ptr::null_mut(),
            path: core::ptr::null(),
            flags: 0,
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct fl_engine_stats_t {
    pub struct_size: u64,
    pub submitted: u64,
    pub completed: u64,
    pub failed: u64,
    pub in_flight: u64,
    pub window_stalls: u64,
    pub steals: u64,
    pub parks: u64,
}
impl fl_engine_stats_t {
    /// `FL_ENGINE_STATS_INIT`
    pub fn init() -> Self {
        fl_engine_stats_t { struct_size: core::mem::size_of::<Self>() as u64, ..Default::default() }
    }
}

// ---------------------------------------------------------------------------------------
// Functions

extern "C" {
    // version and status
    pub fn fl_version_hex() -> u32;
    pub fn fl_version_string() -> *const c_char;
    pub fn fl_status_name(status: fl_status_t) -> *const c_char;
    pub fn fl_status_string(status: fl_status_t) -> *const c_char;
    pub fn fl_last_error_message() -> *const c_char;

    // engine
    pub fn fl_engine_create(desc: *const fl_engine_desc_t, out_engine: *mut *mut fl_engine_t) -> fl_status_t;
    pub fn fl_engine_synchronize(engine: *mut fl_engine_t) -> fl_status_t;
    pub fn fl_engine_destroy(engine: *mut fl_engine_t) -> fl_status_t;
    pub fn fl_engine_lane_count(engine: *const fl_engine_t) -> u32;
    pub fn fl_engine_worker_count(engine: *const fl_engine_t) -> u32;

    // lanes
    pub fn fl_lane_acquire(engine: *mut fl_engine_t, out_lane: *mut u32) -> fl_status_t;
    pub fn fl_lane_release(engine: *mut fl_engine_t, lane: u32) -> fl_status_t;

    // streams
    pub fn fl_stream_get(
        engine: *mut fl_engine_t,
        lane: u32,
        device: fl_device_t,
        kind: fl_stream_kind_t,
        out_stream: *mut *mut fl_stream_t,
    ) -> fl_status_t;
    pub fn fl_stream_synchronize(stream: *mut fl_stream_t) -> fl_status_t;
    pub fn fl_stream_info(
        stream: *mut fl_stream_t,
        out_lane: *mut u32,
        out_device: *mut fl_device_t,
        out_kind: *mut fl_stream_kind_t,
    ) -> fl_status_t;

    // objects
    pub fn fl_object_create(
        engine: *mut fl_engine_t,
        user_data: *mut c_void,
        release: fl_release_fn,
        out_object: *mut *mut fl_object_t,
    ) -> fl_status_t;
    pub fn fl_object_release(object: *mut fl_object_t) -> fl_status_t;
    pub fn fl_object_wait(object: *mut fl_object_t, access: u32) -> fl_status_t;
    pub fn fl_object_user_data(object: *mut fl_object_t, out_user_data: *mut *mut c_void) -> fl_status_t;

    // host instructions
    pub fn fl_instr_set_error(ctx: *mut fl_instr_ctx_t, message: *const c_char);
    pub fn fl_instr_lane(ctx: *const fl_instr_ctx_t) -> u32;
    pub fn fl_instr_get_id(ctx: *const fl_instr_ctx_t) -> fl_instr_id;
    pub fn fl_instr_engine(ctx: *const fl_instr_ctx_t) -> *mut fl_engine_t;
    pub fn fl_submit_host(stream: *mut fl_stream_t, instr: *const fl_host_instr_t, out_instr_id: *mut fl_instr_id)
        -> fl_status_t;

    // task graphs and parallel loops
    pub fn fl_parallel_for(
        engine: *mut fl_engine_t,
        begin: u64,
        end: u64,
        grain: u64,
        body: fl_range_fn,
        user_data: *mut c_void,
    ) -> fl_status_t;
    pub fn fl_taskgraph_create(engine: *mut fl_engine_t, out_graph: *mut *mut fl_taskgraph_t) -> fl_status_t;
    pub fn fl_taskgraph_add(
        graph: *mut fl_taskgraph_t,
        fn_: fl_task_fn,
        user_data: *mut c_void,
        name: *const c_char,
        out_node: *mut u64,
    ) -> fl_status_t;
    pub fn fl_taskgraph_precede(graph: *mut fl_taskgraph_t, before: u64, after: u64) -> fl_status_t;
    pub fn fl_taskgraph_run(graph: *mut fl_taskgraph_t, num_threads: i64) -> fl_status_t;
    pub fn fl_taskgraph_destroy(graph: *mut fl_taskgraph_t) -> fl_status_t;

    // GPU
    pub fn fl_cuda_device_count(out_count: *mut i32) -> fl_status_t;
    pub fn fl_submit_kernel(
        stream: *mut fl_stream_t,
        instr: *const fl_kernel_instr_t,
        out_instr_id: *mut fl_instr_id,
    ) -> fl_status_t;
    pub fn fl_submit_device(
        stream: *mut fl_stream_t,
        instr: *const fl_device_instr_t,
        out_instr_id: *mut fl_instr_id,
    ) -> fl_status_t;
    pub fn fl_submit_memcpy(
        stream: *mut fl_stream_t,
        instr: *const fl_memcpy_instr_t,
        out_instr_id: *mut fl_instr_id,
    ) -> fl_status_t;
    pub fn fl_host_alloc_pinned(bytes: u64, out_ptr: *mut *mut c_void) -> fl_status_t;
    pub fn fl_host_free_pinned(ptr: *mut c_void) -> fl_status_t;
    pub fn fl_cuda_priority_range(device: i32, out_least: *mut i32, out_greatest: *mut i32) -> fl_status_t;
    pub fn fl_stream_set_priority(stream: *mut fl_stream_t, priority: i32, out_applied: *mut i32) -> fl_status_t;

    // collectives
    pub fn fl_comm_get_unique_id(backend: u32, out_id: *mut fl_comm_unique_id_t) -> fl_status_t;
    pub fn fl_comm_create(
        engine: *mut fl_engine_t,
        desc: *const fl_comm_desc_t,
        id: *const fl_comm_unique_id_t,
        out_comm: *mut *mut fl_comm_t,
    ) -> fl_status_t;
    pub fn fl_comm_destroy(comm: *mut fl_comm_t) -> fl_status_t;
    pub fn fl_submit_collective(
        stream: *mut fl_stream_t,
        comm: *mut fl_comm_t,
        instr: *const fl_collective_instr_t,
        out_instr_id: *mut fl_instr_id,
    ) -> fl_status_t;

    // diagnostics
    pub fn fl_engine_set_watchdog(engine: *mut fl_engine_t, desc: *const fl_watchdog_desc_t) -> fl_status_t;
    pub fn fl_engine_dump(engine: *mut fl_engine_t, buffer: *mut c_char, size: u64, out_needed: *mut u64) -> fl_status_t;
    pub fn fl_trace_start(engine: *mut fl_engine_t, path: *const c_char) -> fl_status_t;
    pub fn fl_trace_stop(engine: *mut fl_engine_t) -> fl_status_t;
    pub fn fl_engine_stats(engine: *mut fl_engine_t, out_stats: *mut fl_engine_stats_t) -> fl_status_t;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn links_and_reports_a_compatible_version() {
        // SAFETY: fl_version_hex takes no arguments and has no preconditions.
        let v = unsafe { fl_version_hex() };
        assert_eq!(v >> 16, FL_VERSION_MAJOR, "library major version differs from the declarations");
        // SAFETY: fl_status_name returns static storage for any value.
        let name = unsafe { CStr::from_ptr(fl_status_name(FL_ERR_OUT_OF_RANGE)) };
        assert_eq!(name.to_str().unwrap(), "FL_ERR_OUT_OF_RANGE");
    }

    #[test]
    fn struct_layouts_match_the_header() {
        use core::mem::size_of;
        assert_eq!(size_of::<fl_engine_desc_t>(), 48);
        assert_eq!(size_of::<fl_device_t>(), 8);
        assert_eq!(size_of::<fl_operand_t>(), 16);
        assert_eq!(size_of::<fl_host_instr_t>(), 64);
        assert_eq!(size_of::<fl_kernel_instr_t>(), 104);
        assert_eq!(size_of::<fl_device_instr_t>(), 64);
        assert_eq!(size_of::<fl_memcpy_instr_t>(), 72);
        assert_eq!(size_of::<fl_comm_unique_id_t>(), 128);
        assert_eq!(size_of::<fl_comm_desc_t>(), 56);
        assert_eq!(size_of::<fl_coll_part_t>(), 40);
        assert_eq!(size_of::<fl_collective_instr_t>(), 56);
        assert_eq!(size_of::<fl_watchdog_desc_t>(), 48);
        assert_eq!(size_of::<fl_engine_stats_t>(), 64);
    }
}

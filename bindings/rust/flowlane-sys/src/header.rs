//! What bindgen does not give, generated from capi/include/flowlane/flowlane.h by
//! scripts/dev/gen_bindings.py (scripts/dev/gen-bindings.sh): the FL_STATUS_MAP table,
//! `init()` for the size-prefixed descriptors (the header's FL_*_INIT), and integer macros
//! that bindgen cannot evaluate. Do not edit; `scripts/dev/gen-bindings.sh --check` fails
//! when this file is out of date.

use super::*;

/// `#define FL_COMM_UNORDERED` of the header (value 1).
pub const FL_COMM_UNORDERED: u64 = 1;
/// `#define FL_TRANSPORT_SKIPPED` of the header (value 1).
pub const FL_TRANSPORT_SKIPPED: u64 = 1;
/// `#define FL_TRANSPORT_CHECK_STRICT` of the header (value 2).
pub const FL_TRANSPORT_CHECK_STRICT: u64 = 2;
/// `#define FL_TRANSPORT_CHECK_OFF` of the header (value 4).
pub const FL_TRANSPORT_CHECK_OFF: u64 = 4;
/// `#define FL_WAIT_FOREVER` of the header (value 18446744073709551615).
pub const FL_WAIT_FOREVER: u64 = 18446744073709551615;

/// `FL_STATUS_MAP`: (name, value, description) of every status, in order.
pub const FL_STATUS_TABLE: &[(&str, fl_status_t, &str)] = &[
    ("FL_OK", FL_OK, "success"),
    ("FL_ERR_INVALID_ARGUMENT", FL_ERR_INVALID_ARGUMENT, "invalid argument (NULL pointer, bad flag, bad struct_size, cycle)"),
    ("FL_ERR_INVALID_HANDLE", FL_ERR_INVALID_HANDLE, "stale, released or foreign handle"),
    ("FL_ERR_OUT_OF_RANGE", FL_ERR_OUT_OF_RANGE, "value out of range (lane, device index, count)"),
    ("FL_ERR_NO_MEMORY", FL_ERR_NO_MEMORY, "out of memory"),
    ("FL_ERR_WOULD_BLOCK", FL_ERR_WOULD_BLOCK, "in-flight window full and FL_SUBMIT_NONBLOCKING given"),
    ("FL_ERR_EXHAUSTED", FL_ERR_EXHAUSTED, "every lane is held"),
    ("FL_ERR_SHUTDOWN", FL_ERR_SHUTDOWN, "engine is being destroyed or was drained"),
    ("FL_ERR_INSTRUCTION_FAILED", FL_ERR_INSTRUCTION_FAILED, "an instruction reported failure"),
    ("FL_ERR_DEPENDENCY_FAILED", FL_ERR_DEPENDENCY_FAILED, "skipped: something it read was poisoned"),
    ("FL_ERR_CANCELLED", FL_ERR_CANCELLED, "cancelled"),
    ("FL_ERR_TIMEOUT", FL_ERR_TIMEOUT, "timed out"),
    ("FL_ERR_UNSUPPORTED", FL_ERR_UNSUPPORTED, "not supported by this build or this object"),
    ("FL_ERR_NO_DEVICE", FL_ERR_NO_DEVICE, "no such device at run time"),
    ("FL_ERR_CUDA", FL_ERR_CUDA, "CUDA error"),
    ("FL_ERR_NCCL", FL_ERR_NCCL, "NCCL error"),
    ("FL_ERR_INTERNAL", FL_ERR_INTERNAL, "internal error"),
    ("FL_ERR_CAPTURING", FL_ERR_CAPTURING, "refused while the calling thread captures on this engine"),
];

/// Calls `$m!` with every failure status of `FL_STATUS_MAP` (all but `FL_OK`), in order:
/// `$m! { (FL_ERR_INVALID_ARGUMENT, InvalidArgument, "description"), ... }` (the second
/// item is the name without `FL_ERR_`, in CamelCase). The safe crate builds its `ErrorKind`
/// from it, so a status appended to the header appears there after regeneration.
#[macro_export]
macro_rules! fl_error_statuses {
    ($m:ident) => {
        $m! {
            (FL_ERR_INVALID_ARGUMENT, InvalidArgument, "invalid argument (NULL pointer, bad flag, bad struct_size, cycle)"),
            (FL_ERR_INVALID_HANDLE, InvalidHandle, "stale, released or foreign handle"),
            (FL_ERR_OUT_OF_RANGE, OutOfRange, "value out of range (lane, device index, count)"),
            (FL_ERR_NO_MEMORY, NoMemory, "out of memory"),
            (FL_ERR_WOULD_BLOCK, WouldBlock, "in-flight window full and FL_SUBMIT_NONBLOCKING given"),
            (FL_ERR_EXHAUSTED, Exhausted, "every lane is held"),
            (FL_ERR_SHUTDOWN, Shutdown, "engine is being destroyed or was drained"),
            (FL_ERR_INSTRUCTION_FAILED, InstructionFailed, "an instruction reported failure"),
            (FL_ERR_DEPENDENCY_FAILED, DependencyFailed, "skipped: something it read was poisoned"),
            (FL_ERR_CANCELLED, Cancelled, "cancelled"),
            (FL_ERR_TIMEOUT, Timeout, "timed out"),
            (FL_ERR_UNSUPPORTED, Unsupported, "not supported by this build or this object"),
            (FL_ERR_NO_DEVICE, NoDevice, "no such device at run time"),
            (FL_ERR_CUDA, Cuda, "CUDA error"),
            (FL_ERR_NCCL, Nccl, "NCCL error"),
            (FL_ERR_INTERNAL, Internal, "internal error"),
            (FL_ERR_CAPTURING, Capturing, "refused while the calling thread captures on this engine"),
        }
    };
}

impl fl_engine_desc {
    /// All zero with `struct_size` set to the size of this version of the struct (the
    /// header's `FL_..._INIT` initializer).
    pub fn init() -> Self {
        fl_engine_desc { struct_size: ::core::mem::size_of::<Self>() as u64, ..Default::default() }
    }
}

impl fl_host_instr {
    /// All zero with `struct_size` set to the size of this version of the struct (the
    /// header's `FL_..._INIT` initializer).
    pub fn init() -> Self {
        fl_host_instr { struct_size: ::core::mem::size_of::<Self>() as u64, ..Default::default() }
    }
}

impl fl_kernel_instr {
    /// All zero with `struct_size` set to the size of this version of the struct (the
    /// header's `FL_..._INIT` initializer).
    pub fn init() -> Self {
        fl_kernel_instr { struct_size: ::core::mem::size_of::<Self>() as u64, ..Default::default() }
    }
}

impl fl_device_instr {
    /// All zero with `struct_size` set to the size of this version of the struct (the
    /// header's `FL_..._INIT` initializer).
    pub fn init() -> Self {
        fl_device_instr { struct_size: ::core::mem::size_of::<Self>() as u64, ..Default::default() }
    }
}

impl fl_memcpy_instr {
    /// All zero with `struct_size` set to the size of this version of the struct (the
    /// header's `FL_..._INIT` initializer).
    pub fn init() -> Self {
        fl_memcpy_instr { struct_size: ::core::mem::size_of::<Self>() as u64, ..Default::default() }
    }
}

impl fl_comm_desc {
    /// All zero with `struct_size` set to the size of this version of the struct (the
    /// header's `FL_..._INIT` initializer).
    pub fn init() -> Self {
        fl_comm_desc { struct_size: ::core::mem::size_of::<Self>() as u64, ..Default::default() }
    }
}

impl fl_collective_instr {
    /// All zero with `struct_size` set to the size of this version of the struct (the
    /// header's `FL_..._INIT` initializer).
    pub fn init() -> Self {
        fl_collective_instr { struct_size: ::core::mem::size_of::<Self>() as u64, ..Default::default() }
    }
}

impl fl_comm_transport_op {
    /// All zero with `struct_size` set to the size of this version of the struct (the
    /// header's `FL_..._INIT` initializer).
    pub fn init() -> Self {
        fl_comm_transport_op { struct_size: ::core::mem::size_of::<Self>() as u64, ..Default::default() }
    }
}

impl fl_comm_transport {
    /// All zero with `struct_size` set to the size of this version of the struct (the
    /// header's `FL_..._INIT` initializer).
    pub fn init() -> Self {
        fl_comm_transport { struct_size: ::core::mem::size_of::<Self>() as u64, ..Default::default() }
    }
}

impl fl_comm_env {
    /// All zero with `struct_size` set to the size of this version of the struct (the
    /// header's `FL_..._INIT` initializer).
    pub fn init() -> Self {
        fl_comm_env { struct_size: ::core::mem::size_of::<Self>() as u64, ..Default::default() }
    }
}

impl fl_watchdog_desc {
    /// All zero with `struct_size` set to the size of this version of the struct (the
    /// header's `FL_..._INIT` initializer).
    pub fn init() -> Self {
        fl_watchdog_desc { struct_size: ::core::mem::size_of::<Self>() as u64, ..Default::default() }
    }
}

impl fl_engine_stats {
    /// All zero with `struct_size` set to the size of this version of the struct (the
    /// header's `FL_..._INIT` initializer).
    pub fn init() -> Self {
        fl_engine_stats { struct_size: ::core::mem::size_of::<Self>() as u64, ..Default::default() }
    }
}

impl fl_capture_desc {
    /// All zero with `struct_size` set to the size of this version of the struct (the
    /// header's `FL_..._INIT` initializer).
    pub fn init() -> Self {
        fl_capture_desc { struct_size: ::core::mem::size_of::<Self>() as u64, ..Default::default() }
    }
}

impl fl_program_info {
    /// All zero with `struct_size` set to the size of this version of the struct (the
    /// header's `FL_..._INIT` initializer).
    pub fn init() -> Self {
        fl_program_info { struct_size: ::core::mem::size_of::<Self>() as u64, ..Default::default() }
    }
}

//! `Error`: a failed status with its `ErrorKind` and `fl_last_error_message()`.

use std::ffi::CStr;
use std::fmt;

use flowlane_sys as sys;

/// What kind of failure: one variant per `fl_status_t` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// NULL pointer, bad flag, bad size, cycle, a wait that would wait for itself.
    InvalidArgument,
    /// Stale, released or foreign handle.
    InvalidHandle,
    /// Lane, device index or count out of range.
    OutOfRange,
    NoMemory,
    /// The in-flight window is full and the submission was non-blocking.
    WouldBlock,
    /// Every lane is held.
    Exhausted,
    /// The engine is being destroyed.
    Shutdown,
    /// An instruction reported failure (a closure returned `Err` or panicked).
    InstructionFailed,
    /// Skipped: something it read was poisoned by a failed instruction.
    DependencyFailed,
    Cancelled,
    Timeout,
    /// Not supported by this build (e.g. a GPU call without CUDA).
    Unsupported,
    NoDevice,
    Cuda,
    Nccl,
    Internal,
    /// A status this version of the crate does not know (a newer library).
    Unknown(i32),
}

impl ErrorKind {
    pub fn from_status(status: sys::fl_status_t) -> ErrorKind {
        match status {
            sys::FL_ERR_INVALID_ARGUMENT => ErrorKind::InvalidArgument,
            sys::FL_ERR_INVALID_HANDLE => ErrorKind::InvalidHandle,
            sys::FL_ERR_OUT_OF_RANGE => ErrorKind::OutOfRange,
            sys::FL_ERR_NO_MEMORY => ErrorKind::NoMemory,
            sys::FL_ERR_WOULD_BLOCK => ErrorKind::WouldBlock,
            sys::FL_ERR_EXHAUSTED => ErrorKind::Exhausted,
            sys::FL_ERR_SHUTDOWN => ErrorKind::Shutdown,
            sys::FL_ERR_INSTRUCTION_FAILED => ErrorKind::InstructionFailed,
            sys::FL_ERR_DEPENDENCY_FAILED => ErrorKind::DependencyFailed,
            sys::FL_ERR_CANCELLED => ErrorKind::Cancelled,
            sys::FL_ERR_TIMEOUT => ErrorKind::Timeout,
            sys::FL_ERR_UNSUPPORTED => ErrorKind::Unsupported,
            sys::FL_ERR_NO_DEVICE => ErrorKind::NoDevice,
            sys::FL_ERR_CUDA => ErrorKind::Cuda,
            sys::FL_ERR_NCCL => ErrorKind::Nccl,
            sys::FL_ERR_INTERNAL => ErrorKind::Internal,
            other => ErrorKind::Unknown(other),
        }
    }

    /// The `fl_status_t` value.
    pub fn status(self) -> sys::fl_status_t {
        match self {
            ErrorKind::InvalidArgument => sys::FL_ERR_INVALID_ARGUMENT,
            ErrorKind::InvalidHandle => sys::FL_ERR_INVALID_HANDLE,
            ErrorKind::OutOfRange => sys::FL_ERR_OUT_OF_RANGE,
            ErrorKind::NoMemory => sys::FL_ERR_NO_MEMORY,
            ErrorKind::WouldBlock => sys::FL_ERR_WOULD_BLOCK,
            ErrorKind::Exhausted => sys::FL_ERR_EXHAUSTED,
            ErrorKind::Shutdown => sys::FL_ERR_SHUTDOWN,
            ErrorKind::InstructionFailed => sys::FL_ERR_INSTRUCTION_FAILED,
            ErrorKind::DependencyFailed => sys::FL_ERR_DEPENDENCY_FAILED,
            ErrorKind::Cancelled => sys::FL_ERR_CANCELLED,
            ErrorKind::Timeout => sys::FL_ERR_TIMEOUT,
            ErrorKind::Unsupported => sys::FL_ERR_UNSUPPORTED,
            ErrorKind::NoDevice => sys::FL_ERR_NO_DEVICE,
            ErrorKind::Cuda => sys::FL_ERR_CUDA,
            ErrorKind::Nccl => sys::FL_ERR_NCCL,
            ErrorKind::Internal => sys::FL_ERR_INTERNAL,
            ErrorKind::Unknown(s) => s,
        }
    }

    /// The C name, e.g. "FL_ERR_OUT_OF_RANGE".
    pub fn status_name(self) -> &'static str {
        // SAFETY: fl_status_name accepts any value and returns static, NUL-terminated storage.
        let p = unsafe { sys::fl_status_name(self.status()) };
        // SAFETY: p is non-NULL static storage (see above).
        unsafe { CStr::from_ptr(p) }.to_str().unwrap_or("FL_STATUS_UNKNOWN")
    }

    /// True for the two kinds that mean "an instruction failed" (directly or upstream).
    pub fn is_instruction_failure(self) -> bool {
        matches!(self, ErrorKind::InstructionFailed | ErrorKind::DependencyFailed)
    }
}

/// A failed flowlane call: its kind (status) and what went wrong, in words
/// (`fl_last_error_message()` of the failed call, which names the instruction for
/// instruction failures, with the closure's error text or panic message).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error { kind, message: message.into() }
    }

    /// An error for `status` with the calling thread's `fl_last_error_message()`.
    pub(crate) fn last(status: sys::fl_status_t) -> Error {
        // SAFETY: fl_last_error_message never returns NULL; the text is valid until the next
        // flowlane call on this thread, and it is copied before any.
        let msg = unsafe { CStr::from_ptr(sys::fl_last_error_message()) }.to_string_lossy().into_owned();
        Error { kind: ErrorKind::from_status(status), message: msg }
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    pub fn status(&self) -> sys::fl_status_t {
        self.kind.status()
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            write!(f, "[{}]", self.kind.status_name())
        } else {
            write!(f, "{} [{}]", self.message, self.kind.status_name())
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Ok for FL_OK, else the error with the thread's last message.
pub(crate) fn check(status: sys::fl_status_t) -> Result<()> {
    if status == sys::FL_OK {
        Ok(())
    } else {
        Err(Error::last(status))
    }
}

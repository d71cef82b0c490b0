//! `Error`: a failed status with its `ErrorKind` and `fl_last_error_message()`.

use std::ffi::CStr;
use std::fmt;

use flowlane_sys as sys;

// ErrorKind has one variant per failure status of the header's FL_STATUS_MAP, built from
// the generated table (`sys::fl_error_statuses!`): a status appended to the header appears
// here after `scripts/dev/gen-bindings.sh`, with the header's description as its doc.
macro_rules! error_kinds {
    ($(($status:ident, $kind:ident, $text:literal)),* $(,)?) => {
        /// What kind of failure: one variant per failure status of the C header's
        /// `FL_STATUS_MAP` (documented with the header's description), plus `Unknown` for a
        /// status that a newer library returns and this version does not know.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum ErrorKind {
            $(
                #[doc = concat!("`", stringify!($status), "`: ", $text, ".")]
                $kind,
            )*
            /// A status this version of the crate does not know (a newer library).
            Unknown(sys::fl_status_t),
        }

        impl ErrorKind {
            /// The kind of a failed `fl_status_t` (`FL_OK` is not a failure: `Unknown(0)`).
            pub fn from_status(status: sys::fl_status_t) -> ErrorKind {
                match status {
                    $(sys::$status => ErrorKind::$kind,)*
                    other => ErrorKind::Unknown(other),
                }
            }

            /// The `fl_status_t` value.
            pub fn status(self) -> sys::fl_status_t {
                match self {
                    $(ErrorKind::$kind => sys::$status,)*
                    ErrorKind::Unknown(s) => s,
                }
            }
        }
    };
}
sys::fl_error_statuses!(error_kinds);

impl ErrorKind {
    /// The C name, e.g. "FL_ERR_OUT_OF_RANGE" ("FL_STATUS_UNKNOWN" for an unknown value).
    pub fn status_name(self) -> &'static str {
        // SAFETY: fl_status_name accepts any value and returns static, NUL-terminated storage.
        let p = unsafe { sys::fl_status_name(self.status()) };
        // SAFETY: p is non-NULL static storage (see above).
        unsafe { CStr::from_ptr(p) }.to_str().unwrap_or("FL_STATUS_UNKNOWN")
    }

    /// The header's one-line description of the status.
    pub fn description(self) -> &'static str {
        // SAFETY: fl_status_string accepts any value and returns static, NUL-terminated storage.
        let p = unsafe { sys::fl_status_string(self.status()) };
        // SAFETY: p is non-NULL static storage (see above).
        unsafe { CStr::from_ptr(p) }.to_str().unwrap_or("unknown status")
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
    /// An error of `kind` with `message` (for code that reports its own failures).
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

    /// The kind of failure.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The `fl_status_t` value.
    pub fn status(&self) -> sys::fl_status_t {
        self.kind.status()
    }

    /// What went wrong, in words (the library's message).
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

/// `Result<T, flowlane::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Ok for FL_OK, else the error with the thread's last message.
pub(crate) fn check(status: sys::fl_status_t) -> Result<()> {
    if status == sys::FL_OK {
        Ok(())
    } else {
        Err(Error::last(status))
    }
}

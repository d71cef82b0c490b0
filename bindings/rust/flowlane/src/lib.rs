//! Safe Rust interface to **flowlane**, an asynchronous execution engine: submit closures
//! to in-order streams owned by lanes; the engine infers dependencies from each
//! instruction's read/write operands on objects and runs everything else in parallel.
//!
//! ```no_run
//! use flowlane::Engine;
//!
//! fn main() -> Result<(), flowlane::Error> {
//!     let engine = Engine::builder().workers(4).build()?;
//!     let x = engine.object(3.0f64)?;
//!     let y = engine.object(0.0f64)?;
//!     let (hx, hy) = (x.handle(), y.handle());
//!     engine.stream(0)?.instr().name("double").read(&x).write(&y).submit(move || {
//!         *hy.write() = *hx.read() * 2.0;
//!         Ok::<(), String>(())
//!     })?;
//!     assert_eq!(y.get()?, 6.0); // waits only for y's writers
//!     Ok(())
//! }
//! ```
//!
//! Handles and thread-safety:
//!
//! | type | Send | Sync | notes |
//! | --- | --- | --- | --- |
//! | [`Engine`] | yes | yes | every method from any thread; dropping drains all work |
//! | [`Stream<'e>`] | yes | yes | `Copy`, borrows its engine; submit from any thread |
//! | [`Object<'e, T>`] | if `T: Send + Sync` | if `T: Send + Sync` | waits from any thread; released on drop |
//! | [`Handle<T>`] | if `T: Send + Sync` | if `T: Send + Sync` | the value, for closures |
//! | [`Lane<'e>`] | yes | yes | released on drop |
//! | [`TaskGraph<'e, 'f>`] | yes | no | `&mut self` to build and run |
//! | [`InstrCtx`] | no | no | only inside the running closure |
//!
//! The borrow checker enforces the ownership rules of the C API. A stream cannot outlive
//! its engine:
//!
//! ```compile_fail
//! let stream;
//! {
//!     let engine = flowlane::Engine::new().unwrap();
//!     stream = engine.stream(0).unwrap();
//! }
//! stream.synchronize().unwrap();
//! ```
//!
//! An instruction cannot borrow the caller's locals (it runs later, on a worker):
//!
//! ```compile_fail
//! let engine = flowlane::Engine::new().unwrap();
//! let local = vec![1, 2, 3];
//! engine.stream(0).unwrap().submit(|| { println!("{:?}", &local); Ok::<(), String>(()) }).unwrap();
//! ```
//!
//! An object's value must be shareable across threads:
//!
//! ```compile_fail
//! let engine = flowlane::Engine::new().unwrap();
//! let obj = engine.object(std::rc::Rc::new(1)).unwrap();
//! ```
//!
//! and the instruction context stays on its worker:
//!
//! ```compile_fail
//! fn send<T: Send>() {}
//! send::<flowlane::InstrCtx<'static>>();
//! ```

#![warn(unsafe_op_in_unsafe_fn)]

mod engine;
mod error;
mod gpu;
mod graph;
mod instr;
mod object;

pub use engine::{Device, Engine, EngineBuilder, Lane, Stats, Stream, StreamKind};
pub use error::{Error, ErrorKind, Result};
pub use gpu::{cuda_device_count, cuda_priority_range, Comm, CommBackend, CommUniqueId, Operands, PinnedBuffer};
pub use graph::{TaskGraph, TaskId};
pub use instr::{Instr, InstrCtx};
pub use object::{Access, Handle, Object};

/// The raw declarations, for what the safe interface does not cover.
pub use flowlane_sys as sys;

/// (major, minor, patch) of the loaded library.
pub fn library_version() -> (u32, u32, u32) {
    // SAFETY: fl_version_hex has no preconditions.
    let v = unsafe { sys::fl_version_hex() };
    (v >> 16, (v >> 8) & 0xff, v & 0xff)
}

//! Safe Rust interface to **flowlane**, an asynchronous execution engine: submit closures
//! to in-order streams owned by lanes; the engine infers dependencies from each
//! instruction's read/write operands on objects and runs everything else in parallel.
//!
//! ```
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
//! Handles are owned and reference-counted: an [`Engine`] is a cheap clone of one shared
//! engine, and every stream, lane, object, task graph and communicator keeps its engine
//! alive, so they can be stored together in a struct (see [`Engine`]). The engine is
//! drained and destroyed when the last handle is dropped.
//!
//! | type | Send | Sync | notes |
//! | --- | --- | --- | --- |
//! | [`Engine`] | yes | yes | `Clone`; every method from any thread; the last drop drains all work |
//! | [`Stream`] | yes | yes | `Clone`; submit from any thread |
//! | [`Object<T>`] | if `T: Send + Sync` | if `T: Send + Sync` | waits from any thread; released on drop |
//! | [`Handle<T>`] | if `T: Send + Sync` | if `T: Send + Sync` | the value, for closures |
//! | [`Lane`] | yes | yes | released on drop |
//! | [`TaskGraph<'f>`] | yes | no | `&mut self` to build and run; closures may borrow `'f` data |
//! | [`InstrHandle`] | yes | yes | `Clone`; what `submit` returns: state, wait, wait_for, cancel |
//! | [`Scope<'scope>`] | no | yes | inside [`Engine::scope`]; tasks spawn through `&Scope` |
//! | [`InstrCtx`] | no | no | only inside the running closure |
//! | [`Capture<'e>`] | no | no | the capturing thread's guard ([`Engine::capture`]) |
//! | [`Program`] | yes | yes | launch from any thread; freed on drop |
//!
//! The type system enforces what the C API needs. An instruction cannot borrow the
//! caller's locals (it runs later, on a worker):
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
//! the instruction context stays on its worker:
//!
//! ```compile_fail
//! fn send<T: Send>() {}
//! send::<flowlane::InstrCtx<'static>>();
//! ```
//!
//! and the chunks of [`Engine::par_chunks_mut`] cannot escape their body:
//!
//! ```compile_fail
//! let engine = flowlane::Engine::new().unwrap();
//! let mut v = vec![0u8; 8];
//! let mut kept: Vec<&mut [u8]> = Vec::new();
//! engine.par_chunks_mut(&mut v, 2, |_, c| { kept.push(c); Ok::<(), String>(()) }).unwrap();
//! ```
//!
//! A scope's tasks may borrow the caller's data, but nothing that the scope outlives:
//!
//! ```compile_fail
//! let engine = flowlane::Engine::new().unwrap();
//! engine.scope(|s| {
//!     let local = vec![1, 2, 3];
//!     s.spawn(|_| { println!("{:?}", &local); Ok::<(), String>(()) }).unwrap();
//! }).unwrap();
//! ```
//!
//! Every wait has a timed form (`Object::wait_for`, `Stream::synchronize_for`,
//! `Engine::synchronize_for`, `InstrHandle::wait_for`) that returns an error of kind
//! [`ErrorKind::Timeout`] and consumes nothing.
//!
//! Linking: `flowlane-sys` finds libflowlane through `FLOWLANE_LIB_DIR`, this checkout's
//! build tree, or `pkg-config flowlane`; see the bindings README for running programs
//! against a library installed outside the loader's default paths (rpath).

#![deny(missing_docs)]
#![warn(unsafe_op_in_unsafe_fn)]

mod control;
mod engine;
mod error;
mod gpu;
mod graph;
mod instr;
mod object;
mod program;
mod scope;

pub use control::{InstrHandle, InstrState};
pub use engine::{Device, Engine, EngineBuilder, Lane, Stats, Stream, StreamKind};
pub use error::{Error, ErrorKind, Result};
pub use gpu::{cuda_device_count, cuda_priority_range, Comm, CommBackend, CommUniqueId, Operands, PinnedBuffer};
pub use graph::{TaskGraph, TaskId};
pub use instr::{Instr, InstrCtx};
pub use object::{Access, Handle, Object};
pub use program::{Capture, Program, ProgramInfo};
pub use scope::Scope;

/// The raw declarations (generated from the C header), for what the safe interface does
/// not cover.
pub use flowlane_sys as sys;

/// (major, minor, patch) of the loaded library.
pub fn library_version() -> (u32, u32, u32) {
    // SAFETY: fl_version_hex has no preconditions.
    let v = unsafe { sys::fl_version_hex() };
    (v >> 16, (v >> 8) & 0xff, v & 0xff)
}

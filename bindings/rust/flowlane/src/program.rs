//! Capture and replay (EXPERIMENTAL): the safe side of the header's "Capture and replay"
//! section. [`Engine::capture`] returns a [`Capture`] guard; while it lives, this thread's
//! submissions to the engine are recorded instead of run; [`Capture::end`] turns them into a
//! [`Program`], and each [`Program::launch`] runs them all as one instruction.

use std::cell::RefCell;
use std::ffi::CString;
use std::marker::PhantomData;
use std::ptr::{self, NonNull};

use flowlane_sys as sys;

use crate::control::InstrHandle;
use crate::engine::{cstring, Engine, Stream};
use crate::error::{check, Error, ErrorKind, Result};

thread_local! {
    /// The engines (their C handles' addresses) this thread captures on: a closure that
    /// runs once (`submit`) cannot be captured, since a program runs it at every launch.
    static CAPTURING: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// True while this thread captures on `engine` (a [`Capture`] of it is alive).
pub(crate) fn capturing(engine: *mut sys::fl_engine_t) -> bool {
    CAPTURING.with(|c| c.borrow().contains(&(engine as usize)))
}

fn stop_capturing(engine: *mut sys::fl_engine_t) {
    CAPTURING.with(|c| c.borrow_mut().retain(|&e| e != engine as usize));
}

impl Engine {
    /// Starts capturing this thread's submissions to the engine (`fl_capture_begin`);
    /// `name` names the program's launches in errors, dumps and traces.
    ///
    /// While the returned guard lives, nothing this thread submits to the engine runs: each
    /// instruction is recorded with the dependencies the engine would give it eagerly, and
    /// its [`InstrHandle`] has id 0 (it has no outcome of its own). The closures must be
    /// submitted with [`Instr::submit_mut`](crate::Instr::submit_mut) (they run at every
    /// launch); `submit` (`FnOnce`) is refused with [`ErrorKind::Capturing`]. This engine's
    /// waits, synchronizes, queries, drain and launches from this thread fail with
    /// `Capturing`; other threads and other engines are not affected. Captures do not nest
    /// (`Capturing`); a closure the engine runs cannot capture (`InvalidArgument`).
    ///
    /// ```
    /// # fn main() -> Result<(), flowlane::Error> {
    /// let engine = flowlane::Engine::builder().workers(2).build()?;
    /// let x = engine.object(0u64)?;
    /// let hx = x.handle();
    /// let capture = engine.capture(Some("step"))?;
    /// engine.stream(0)?.instr().read_write(&x).submit_mut(move || {
    ///     *hx.write() += 1;
    ///     Ok::<(), String>(())
    /// })?;
    /// let program = capture.end()?;
    /// let lane0 = engine.stream(0)?;
    /// for _ in 0..3 {
    ///     program.launch(&lane0)?;
    /// }
    /// assert_eq!(x.get()?, 3);
    /// # Ok(()) }
    /// ```
    pub fn capture(&self, name: Option<&str>) -> Result<Capture<'_>> {
        let name: Option<CString> = name.map(cstring).transpose()?;
        let mut desc = sys::fl_capture_desc::init();
        desc.name = name.as_ref().map_or(ptr::null(), |c| c.as_ptr());
        // SAFETY: the engine handle is live while &self is; desc and name live across the call.
        check(unsafe { sys::fl_capture_begin(self.as_raw(), &desc) })?;
        CAPTURING.with(|c| c.borrow_mut().push(self.as_raw() as usize));
        Ok(Capture { engine: self, ended: false, _thread: PhantomData })
    }
}

/// An open capture ([`Engine::capture`]): [`end`](Capture::end) makes the program;
/// dropping it without `end` discards the capture (the captured closures are dropped).
///
/// **Thread-safety:** neither `Send` nor `Sync`: a capture belongs to the thread that began it.
#[must_use = "a capture is ended by .end(); dropping it discards what it recorded"]
pub struct Capture<'e> {
    engine: &'e Engine,
    ended: bool,
    _thread: PhantomData<*const ()>,
}

impl Capture<'_> {
    /// Ends the capture and returns its program (`fl_capture_end`; it may be empty). On an
    /// error the capture is discarded and the error returned.
    pub fn end(mut self) -> Result<Program> {
        self.ended = true;
        let raw = self.engine.as_raw();
        stop_capturing(raw);
        let mut out: *mut sys::fl_program_t = ptr::null_mut();
        // SAFETY: the engine is live (borrowed); out is a valid out pointer.
        check(unsafe { sys::fl_capture_end(raw, &mut out) })?;
        let raw_program = NonNull::new(out).ok_or_else(|| Error::new(ErrorKind::Internal, "fl_capture_end gave no program"))?;
        Ok(Program { raw: raw_program, engine: self.engine.clone() })
    }
}

impl Drop for Capture<'_> {
    fn drop(&mut self) {
        if !self.ended {
            let raw = self.engine.as_raw();
            stop_capturing(raw);
            // SAFETY: the engine is live (borrowed); a NULL out_program discards the capture.
            let _ = unsafe { sys::fl_capture_end(raw, ptr::null_mut()) };
        }
    }
}

/// What [`Program::info`] reports (`fl_program_info_t`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProgramInfo {
    /// Captured instructions.
    pub instructions: u64,
    /// Of which host instructions.
    pub host_instructions: u64,
    /// Dependencies between them (after removing repeats).
    pub edges: u64,
    /// Units a parallel replay schedules (chains run as one).
    pub tasks: u64,
    /// CUDA graphs built for its device work.
    pub device_graphs: u64,
    /// Objects a launch uses (its operands).
    pub operands: u64,
    /// Memory the program holds, besides the CUDA graphs.
    pub bytes: u64,
    /// Launches completed so far.
    pub launches: u64,
}

/// A captured program (`fl_program_t`, EXPERIMENTAL), made by [`Capture::end`]. It keeps
/// its engine alive; dropping it frees it (`fl_program_destroy`) once the launches already
/// made have completed, and drops its closures then.
///
/// **Thread-safety:** `Send` and `Sync`: any thread may launch it (launches of one program
/// run one after the other, in launch order).
pub struct Program {
    raw: NonNull<sys::fl_program_t>,
    engine: Engine,
}

// SAFETY: the C program handle may be used from any thread (the header's thread-safety
// rules); the closures it runs are Send (Instr::submit_mut requires it) and are called by
// one launch at a time.
unsafe impl Send for Program {}
// SAFETY: as for Send: every method takes &self and the C calls are thread-safe.
unsafe impl Sync for Program {}

impl Program {
    /// Runs the program once as one instruction of `stream` (`fl_program_launch`): a host
    /// stream of its engine, or, for a program with device work only, a CUDA stream of its
    /// device. Returns the launch's handle (wait, state, cancel).
    pub fn launch(&self, stream: &Stream) -> Result<InstrHandle> {
        self.launch_with(stream, 0)
    }

    /// [`launch`](Program::launch) with `FL_SUBMIT_INLINE`: on a host stream the launch
    /// runs on the calling thread when it is ready at once.
    pub fn launch_inline(&self, stream: &Stream) -> Result<InstrHandle> {
        self.launch_with(stream, sys::FL_SUBMIT_INLINE as u64)
    }

    fn launch_with(&self, stream: &Stream, flags: u64) -> Result<InstrHandle> {
        let mut id = 0u64;
        // SAFETY: the program is live (owned) and the stream holds its engine.
        check(unsafe { sys::fl_program_launch(self.raw.as_ptr(), stream.as_raw(), flags, &mut id) })?;
        Ok(InstrHandle::new(stream.clone(), id))
    }

    /// Its size and shape (`fl_program_info`).
    pub fn info(&self) -> Result<ProgramInfo> {
        let mut i = sys::fl_program_info::init();
        // SAFETY: the program is live; i is a valid, initialized out struct.
        check(unsafe { sys::fl_program_info(self.raw.as_ptr(), &mut i) })?;
        Ok(ProgramInfo {
            instructions: i.instructions,
            host_instructions: i.host_instructions,
            edges: i.edges,
            tasks: i.tasks,
            device_graphs: i.device_graphs,
            operands: i.operands,
            bytes: i.bytes,
            launches: i.launches,
        })
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The C handle, for the raw API ([`crate::sys`]).
    pub fn as_raw(&self) -> *mut sys::fl_program_t {
        self.raw.as_ptr()
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: the handle is live and owned; the engine outlives it (self.engine).
        let _ = unsafe { sys::fl_program_destroy(self.raw.as_ptr()) };
    }
}

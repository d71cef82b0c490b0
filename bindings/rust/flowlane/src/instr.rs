//! Host instructions: closures submitted to streams.

use std::any::Any;
use std::ffi::CString;
use std::fmt::Display;
use std::os::raw::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;
use std::sync::Weak;

use flowlane_sys as sys;

use crate::control::InstrHandle;
use crate::engine::{cstring, Engine, EngineInner, InCallback, Stream};
use crate::error::{Error, ErrorKind, Result};
use crate::object::{Access, Object};

type BoxedInstr = Box<dyn FnOnce(&InstrCtx<'_>) -> std::result::Result<(), String> + Send + 'static>;
type BoxedInstrMut = Box<dyn FnMut(&InstrCtx<'_>) -> std::result::Result<(), String> + Send + 'static>;

/// A host instruction's closure: one that runs once (`submit`), or one that may run again
/// (`submit_mut`: a captured instruction runs at every launch of its program).
enum Body {
    Once(Option<BoxedInstr>),
    Many(BoxedInstrMut),
}

/// What a running instruction knows about itself (valid only inside its closure).
///
/// **Thread-safety:** neither `Send` nor `Sync`: it lives on the worker running the closure.
pub struct InstrCtx<'a> {
    raw: *mut sys::fl_instr_ctx_t,
    engine: Engine,
    _life: std::marker::PhantomData<&'a ()>,
}

impl InstrCtx<'_> {
    /// The lane the instruction runs on.
    pub fn lane(&self) -> u32 {
        // SAFETY: raw is the live context of the running instruction.
        unsafe { sys::fl_instr_get_lane(self.raw) }
    }

    /// The instruction's id (as returned by submit).
    pub fn id(&self) -> u64 {
        // SAFETY: raw is the live context of the running instruction.
        unsafe { sys::fl_instr_get_id(self.raw) }
    }

    /// The engine, to submit follow-up work (never blocks on the window from here),
    /// create objects or run a `parallel_for`. `synchronize` returns `InvalidArgument`.
    /// This view does not keep the engine alive (see [`Engine::is_owning`]), so a closure
    /// that uses it creates no reference cycle; it is valid while the closure runs (the
    /// engine outlives its callbacks). A clone of it, and every handle made from it
    /// (stream, object, lane, graph), owns the engine like any other handle, so it may be
    /// kept or sent anywhere. Once the engine's last owning handle is gone (it is being
    /// destroyed and only waits for its callbacks), making a handle from the view fails
    /// with `Shutdown`, and a clone of it names no engine (its calls fail with
    /// `InvalidHandle`).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// This instruction's lane's host stream.
    pub fn stream(&self) -> Result<Stream> {
        self.engine.stream(self.lane())
    }
}

/// Builds one host instruction; see [`Stream::instr`].
///
/// ```no_run
/// # fn main() -> Result<(), flowlane::Error> {
/// let engine = flowlane::Engine::new()?;
/// let x = engine.object(2.0f64)?;
/// let y = engine.object(0.0f64)?;
/// let (hx, hy) = (x.handle(), y.handle());
/// engine.stream(0)?.instr().name("square").read(&x).write(&y).submit(move || {
///     *hy.write() = *hx.read() * *hx.read();
///     Ok::<(), String>(())
/// })?;
/// assert_eq!(y.get()?, 4.0);
/// # Ok(()) }
/// ```
#[must_use = "an instruction is only submitted by .submit()"]
pub struct Instr {
    stream: Stream,
    ops: Vec<sys::fl_operand_t>,
    name: Option<CString>,
    flags: u64,
    error: Option<Error>,
}

impl Instr {
    pub(crate) fn new(stream: Stream) -> Instr {
        Instr { stream, ops: Vec::new(), name: None, flags: 0, error: None }
    }

    /// Names the instruction (shown in errors, dumps and traces).
    pub fn name(mut self, name: &str) -> Self {
        match cstring(name) {
            Ok(c) => self.name = Some(c),
            Err(e) => self.error = Some(e),
        }
        self
    }

    /// Declares an access to `object`.
    pub fn access<T>(mut self, object: &Object<T>, access: Access) -> Self {
        self.ops.push(sys::fl_operand_t { object: object.as_raw(), access: access.raw(), reserved: 0 });
        self
    }

    /// Declares a read of `object`.
    pub fn read<T>(self, object: &Object<T>) -> Self {
        self.access(object, Access::Read)
    }

    /// Declares a write of `object`.
    pub fn write<T>(self, object: &Object<T>) -> Self {
        self.access(object, Access::Write)
    }

    /// Declares a read and a write of `object`.
    pub fn read_write<T>(self, object: &Object<T>) -> Self {
        self.access(object, Access::ReadWrite)
    }

    /// Return `WouldBlock` instead of waiting when the in-flight window is full.
    pub fn nonblocking(mut self) -> Self {
        self.flags |= sys::FL_SUBMIT_NONBLOCKING as u64;
        self
    }

    /// `FL_SUBMIT_INLINE`: run the closure on the submitting thread, before `submit`
    /// returns, when it is ready at once (its lane has nothing queued or running, and every
    /// instruction it depends on has completed); otherwise it is queued as usual. Ignored
    /// inside callbacks. For short work: a long closure holds up the caller.
    pub fn inline(mut self) -> Self {
        self.flags |= sys::FL_SUBMIT_INLINE as u64;
        self
    }

    /// Submits `f`; returns its [`InstrHandle`] (id, state, wait, cancel). `f` runs once on a worker after its
    /// dependencies; `Err(e)` or a panic fails the instruction (the message is `e`'s
    /// Display or the panic message), poisons what it writes and skips its dependents.
    /// The closure is dropped exactly once: after it ran, or when it is skipped, or here
    /// if submission fails.
    pub fn submit<F, E>(self, f: F) -> Result<InstrHandle>
    where
        F: FnOnce() -> std::result::Result<(), E> + Send + 'static,
        E: Display,
    {
        self.submit_with_ctx(move |_ctx| f())
    }

    /// Like [`submit`](Instr::submit), with the instruction's context (lane, id, engine).
    pub fn submit_with_ctx<F, E>(self, f: F) -> Result<InstrHandle>
    where
        F: FnOnce(&InstrCtx<'_>) -> std::result::Result<(), E> + Send + 'static,
        E: Display,
    {
        if crate::program::capturing(self.stream.engine().as_raw()) {
            return Err(Error::new(
                ErrorKind::Capturing,
                "submit: this thread captures on the engine, and a captured instruction runs at every launch of its \
                 program, but an FnOnce closure can run only once: submit it with submit_mut",
            ));
        }
        self.submit_body(Body::Once(Some(Box::new(move |ctx| f(ctx).map_err(|e| e.to_string())))))
    }

    /// Submits `f`, which may run more than once: once when submitted eagerly (as
    /// [`submit`](Instr::submit)), at every launch of the program when submitted while this
    /// thread captures ([`Engine::capture`]). The closure is dropped exactly once: when its
    /// instruction (or program) is done with it, or here if submission fails.
    pub fn submit_mut<F, E>(self, mut f: F) -> Result<InstrHandle>
    where
        F: FnMut() -> std::result::Result<(), E> + Send + 'static,
        E: Display,
    {
        self.submit_mut_with_ctx(move |_ctx| f())
    }

    /// Like [`submit_mut`](Instr::submit_mut), with the instruction's context (lane, id:
    /// inside a launch, the launch's id, engine).
    pub fn submit_mut_with_ctx<F, E>(self, mut f: F) -> Result<InstrHandle>
    where
        F: FnMut(&InstrCtx<'_>) -> std::result::Result<(), E> + Send + 'static,
        E: Display,
    {
        self.submit_body(Body::Many(Box::new(move |ctx| f(ctx).map_err(|e| e.to_string()))))
    }

    fn submit_body(self, body: Body) -> Result<InstrHandle> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let payload = Box::into_raw(Box::new(Payload { f: body, owner: self.stream.engine().downgrade() }));
        let mut instr = sys::fl_host_instr_t::init();
        instr.fn_ = Some(host_trampoline);
        instr.user_data = payload as *mut c_void;
        instr.cleanup = Some(host_cleanup);
        instr.operands = if self.ops.is_empty() { std::ptr::null() } else { self.ops.as_ptr() };
        instr.num_operands = self.ops.len() as u64;
        instr.name = self.name.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
        instr.flags = self.flags;
        let mut id = 0u64;
        // SAFETY: the stream is live (it holds its engine); instr and the operand/name buffers it points to
        // live across the call (C copies them); payload is owned by the engine on success.
        let st = unsafe { sys::fl_submit_host(self.stream.as_raw(), &instr, &mut id) };
        if st != sys::FL_OK {
            let err = Error::last(st);
            // SAFETY: on failure neither fn nor cleanup will ever run: the payload is ours.
            drop(unsafe { Box::from_raw(payload) });
            return Err(err);
        }
        Ok(InstrHandle::new(self.stream, id))
    }
}

struct Payload {
    f: Body,
    /// The engine, for the closure's view of it (InstrCtx::engine): its clones own it.
    owner: Weak<EngineInner>,
}

pub(crate) fn panic_message(p: &(dyn Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "a non-string panic payload".to_string()
    }
}

/// Drops a panic payload whose own destructor might panic.
pub(crate) fn drop_payload(p: Box<dyn Any + Send>) {
    let _ = catch_unwind(AssertUnwindSafe(move || drop(p)));
}

pub(crate) fn c_message(msg: &str) -> CString {
    CString::new(msg.replace('\0', "\\0")).unwrap_or_default()
}

unsafe extern "C" fn host_trampoline(ctx: *mut sys::fl_instr_ctx_t, ud: *mut c_void) -> sys::fl_status_t {
    let _cb = InCallback::enter();
    // SAFETY: ud is the Payload submitted with this instruction; the engine calls fn at most
    // once at a time (once, or once per launch of its program: launches of a program run one
    // after the other) and cleanup only afterwards, so this is the only access now.
    let payload = unsafe { &mut *(ud as *mut Payload) };
    // SAFETY: ctx is the running instruction's context.
    let engine_raw = unsafe { sys::fl_instr_get_engine(ctx) };
    let engine = match NonNull::new(engine_raw) {
        Some(e) => Engine::borrowed(e, payload.owner.clone()),
        None => return sys::FL_ERR_INTERNAL,
    };
    let ictx = InstrCtx { raw: ctx, engine, _life: std::marker::PhantomData };
    let outcome = match &mut payload.f {
        Body::Once(slot) => match slot.take() {
            Some(f) => catch_unwind(AssertUnwindSafe(|| f(&ictx))),
            None => Ok(Err("an FnOnce closure (submit) was asked to run again: use submit_mut".to_string())),
        },
        Body::Many(f) => catch_unwind(AssertUnwindSafe(|| f(&ictx))),
    };
    let message = match outcome {
        Ok(Ok(())) => return sys::FL_OK,
        Ok(Err(msg)) => msg,
        Err(p) => {
            let m = format!("panicked: {}", panic_message(&*p));
            drop_payload(p);
            m
        }
    };
    let c = c_message(&message);
    // SAFETY: ctx is live; c is NUL-terminated (the library copies it).
    unsafe { sys::fl_instr_set_error(ctx, c.as_ptr()) };
    sys::FL_ERR_INSTRUCTION_FAILED
}

unsafe extern "C" fn host_cleanup(ud: *mut c_void) {
    let _cb = InCallback::enter();
    // Dropping the closure runs the destructors of what it captured: keep panics out of C.
    let _ = catch_unwind(|| {
        // SAFETY: cleanup runs exactly once per successful submit, after fn (or instead of
        // it): this reclaims the Box leaked in submit_with_ctx exactly once.
        drop(unsafe { Box::from_raw(ud as *mut Payload) });
    });
}

//! Engine, lanes and streams.

use std::cell::Cell;
use std::ffi::{CStr, CString};
use std::hash::{Hash, Hasher};
use std::os::raw::{c_char, c_void};
use std::path::Path;
use std::ptr::{self, NonNull};
use std::sync::{Arc, Mutex, Weak};

use flowlane_sys as sys;

use crate::error::{check, Error, ErrorKind, Result};
use crate::instr::Instr;

thread_local! {
    /// > 0 while this thread runs a flowlane callback of this crate (instruction, cleanup,
    /// release, task, loop body): an engine dropped here must not be destroyed here.
    static CALLBACK_DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Marks the current thread as inside a callback for the guard's lifetime.
pub(crate) struct InCallback;

impl InCallback {
    pub(crate) fn enter() -> InCallback {
        CALLBACK_DEPTH.with(|d| d.set(d.get() + 1));
        InCallback
    }
}

impl Drop for InCallback {
    fn drop(&mut self) {
        CALLBACK_DEPTH.with(|d| d.set(d.get() - 1));
    }
}

pub(crate) fn in_callback() -> bool {
    CALLBACK_DEPTH.with(|d| d.get() > 0)
}

/// A device: [`Device::CPU`] or `Device::cuda(i)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Device {
    /// The host (`FL_DEVICE_CPU`, index 0).
    Cpu,
    /// CUDA device `i` (`FL_DEVICE_CUDA`).
    Cuda(i32),
}

impl Device {
    /// The host.
    pub const CPU: Device = Device::Cpu;

    /// CUDA device `index`.
    pub fn cuda(index: i32) -> Device {
        Device::Cuda(index)
    }

    pub(crate) fn raw(self) -> sys::fl_device_t {
        match self {
            Device::Cpu => sys::fl_device_t { type_: sys::FL_DEVICE_CPU as i32, index: 0 },
            Device::Cuda(i) => sys::fl_device_t { type_: sys::FL_DEVICE_CUDA as i32, index: i },
        }
    }

    fn from_raw(d: sys::fl_device_t) -> Device {
        if d.type_ == sys::FL_DEVICE_CUDA as i32 {
            Device::Cuda(d.index)
        } else {
            Device::Cpu
        }
    }
}

/// The kind of a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StreamKind {
    /// Host instructions (closures) on the engine's workers.
    Host,
    /// A CUDA stream for kernels and device functions.
    Compute,
    /// A CUDA stream for host-to-device copies.
    H2D,
    /// A CUDA stream for device-to-host copies.
    D2H,
    /// The stream of a communicator's collectives (CUDA, or the host for host-fake comms).
    Collective,
}

impl StreamKind {
    pub(crate) fn raw(self) -> sys::fl_stream_kind_t {
        match self {
            StreamKind::Host => sys::FL_STREAM_HOST,
            StreamKind::Compute => sys::FL_STREAM_COMPUTE,
            StreamKind::H2D => sys::FL_STREAM_H2D,
            StreamKind::D2H => sys::FL_STREAM_D2H,
            StreamKind::Collective => sys::FL_STREAM_COLLECTIVE,
        }
    }

    fn from_raw(k: sys::fl_stream_kind_t) -> StreamKind {
        match k {
            sys::FL_STREAM_COMPUTE => StreamKind::Compute,
            sys::FL_STREAM_H2D => StreamKind::H2D,
            sys::FL_STREAM_D2H => StreamKind::D2H,
            sys::FL_STREAM_COLLECTIVE => StreamKind::Collective,
            _ => StreamKind::Host,
        }
    }
}

/// Counters of `fl_engine_stats` (a snapshot).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Instructions submitted.
    pub submitted: u64,
    /// Instructions completed (successfully, failed or skipped).
    pub completed: u64,
    /// Instructions that failed or were skipped.
    pub failed: u64,
    /// Instructions submitted but not completed.
    pub in_flight: u64,
    /// Submissions that waited for the in-flight window.
    pub window_stalls: u64,
    /// Work-stealing steals between workers.
    pub steals: u64,
    /// Times a worker went to sleep.
    pub parks: u64,
    /// Instructions whose outcome is cancelled (`FL_INSTR_CANCELLED`; counted in `failed` too).
    pub cancelled: u64,
    /// Pool tasks run (lane batches, loop chunks' helpers, graph nodes, scope tasks).
    pub tasks: u64,
}

/// Configures an [`Engine`]; zero (the default) means the library default.
#[derive(Clone, Debug)]
pub struct EngineBuilder {
    desc: sys::fl_engine_desc_t,
}

impl Default for EngineBuilder {
    fn default() -> Self {
        EngineBuilder { desc: sys::fl_engine_desc_t::init() }
    }
}

impl EngineBuilder {
    /// Host worker threads (0: one per logical core).
    pub fn workers(mut self, n: u64) -> Self {
        self.desc.num_workers = n;
        self
    }
    /// Number of lanes, ids 0..n (0: 8; at most 4096).
    pub fn lanes(mut self, n: u64) -> Self {
        self.desc.max_lanes = n;
        self
    }
    /// Instructions submitted but not completed before submission blocks (0: 4096).
    pub fn inflight_limit(mut self, n: u64) -> Self {
        self.desc.inflight_limit = n;
        self
    }
    /// Hang watchdog period in milliseconds (0: off).
    pub fn watchdog_ms(mut self, ms: u64) -> Self {
        self.desc.watchdog_ms = ms;
        self
    }
    /// Creates the engine (starts its workers).
    pub fn build(self) -> Result<Engine> {
        let mut out: *mut sys::fl_engine_t = ptr::null_mut();
        // SAFETY: desc is a valid, initialised descriptor; out is a valid out pointer.
        check(unsafe { sys::fl_engine_create(&self.desc, &mut out) })?;
        let raw = NonNull::new(out).ok_or_else(|| Error::new(ErrorKind::Internal, "fl_engine_create returned NULL"))?;
        Ok(Engine { inner: EngineRef::Owned(Arc::new(EngineInner { raw, watchdogs: Mutex::new(Vec::new()) })) })
    }
}

type DumpCallback = Box<dyn Fn(&str) + Send + Sync + 'static>;

/// What an owning [`Engine`] shares among its clones: destroyed with the last of them.
pub(crate) struct EngineInner {
    raw: NonNull<sys::fl_engine_t>,
    // Boxed twice: the library holds the address of each inner box (its user_data), which
    // must not move when the vector grows.
    #[allow(clippy::vec_box)]
    watchdogs: Mutex<Vec<Box<DumpCallback>>>,
}

// SAFETY: the C API allows every fl_engine_* call from any thread, concurrently, except
// fl_engine_destroy, which runs in Drop, when no other reference to the inner value exists.
unsafe impl Send for EngineInner {}
// SAFETY: see Send: every call made through `&EngineInner` is a thread-safe C call.
unsafe impl Sync for EngineInner {}

struct SendPtr(*mut sys::fl_engine_t);
// SAFETY: the pointer is only handed to fl_engine_destroy on the helper thread, and nothing
// else uses the engine afterwards.
unsafe impl Send for SendPtr {}

impl Drop for EngineInner {
    fn drop(&mut self) {
        let raw = self.raw.as_ptr();
        let watchdogs = std::mem::take(&mut *self.watchdogs.lock().unwrap_or_else(|e| e.into_inner()));
        if in_callback() {
            let p = SendPtr(raw);
            let spawned = std::thread::Builder::new().name("flowlane-engine-destroy".into()).spawn(move || {
                let p = p;
                // SAFETY: the engine is owned by this thread now; it is not a worker of it.
                unsafe { sys::fl_engine_destroy(p.0) };
                drop(watchdogs);
            });
            if spawned.is_err() {
                eprintln!("flowlane: could not spawn a thread to destroy an engine dropped in a callback; leaking it");
            }
            return;
        }
        // SAFETY: raw is a live engine and this is the last reference to it.
        let st = unsafe { sys::fl_engine_destroy(raw) };
        debug_assert_eq!(st, sys::FL_OK, "fl_engine_destroy failed");
        drop(watchdogs); // after destroy: no dump callback can run any more
    }
}

enum EngineRef {
    /// A handle that keeps the engine alive (it is destroyed with the last one).
    Owned(Arc<EngineInner>),
    /// The engine of a running instruction ([`InstrCtx::engine`](crate::InstrCtx::engine)),
    /// lent for the callback: the engine outlives its callbacks (its destroy waits for
    /// them), so calls through the view are safe while the callback runs, and the view
    /// cannot leave it (only a `&Engine` to it is handed out). Anything that may outlive the
    /// callback (a clone, a stream, an object, ...) is made from `owner`, upgraded.
    Borrowed { raw: NonNull<sys::fl_engine_t>, owner: Weak<EngineInner> },
    /// A clone of a view made once its engine's last owner was gone (the engine is being
    /// destroyed): it names no engine, and every call through it fails with
    /// `InvalidHandle` (a NULL engine), never touching the engine being freed.
    Gone,
}

impl Clone for EngineRef {
    fn clone(&self) -> EngineRef {
        match self {
            EngineRef::Owned(inner) => EngineRef::Owned(Arc::clone(inner)),
            // A clone may outlive the callback: it owns the engine, or names none. (Before
            // this, a clone was a second view, and a call through it that raced the last
            // owner's drop used the engine while fl_engine_destroy freed it.)
            EngineRef::Borrowed { owner, .. } => owner.upgrade().map_or(EngineRef::Gone, EngineRef::Owned),
            EngineRef::Gone => EngineRef::Gone,
        }
    }
}

/// An execution engine: worker threads, lanes, streams and the in-flight window.
///
/// A cheaply clonable, reference-counted handle: clones, and every [`Stream`], [`Lane`],
/// [`Object`](crate::Object), [`TaskGraph`](crate::TaskGraph) and [`Comm`](crate::Comm)
/// made from it, keep the engine alive, so a struct may own an engine together with its
/// objects and streams. When the last of them is dropped, the engine drains all submitted
/// work (errors are dropped: call [`synchronize`](Engine::synchronize) first to see them),
/// runs every pending cleanup and release, and joins the workers.
///
/// ```
/// use flowlane::{Engine, Object, Stream};
///
/// struct Model {
///     weights: Object<Vec<f32>>, // keeps the engine alive
///     stream: Stream,
///     engine: Engine,
/// }
///
/// impl Model {
///     fn new() -> Result<Model, flowlane::Error> {
///         let engine = Engine::builder().workers(2).build()?;
///         let weights = engine.object(vec![0.5f32; 4])?;
///         let stream = engine.stream(0)?;
///         Ok(Model { weights, stream, engine })
///     }
/// }
///
/// let m = Model::new()?;
/// let w = m.weights.handle();
/// m.stream.instr().read_write(&m.weights).submit(move || {
///     w.write().iter_mut().for_each(|x| *x *= 2.0);
///     Ok::<(), String>(())
/// })?;
/// assert_eq!(m.weights.get()?, vec![1.0; 4]);
/// assert_eq!(m.engine.worker_count(), 2);
/// # Ok::<(), flowlane::Error>(())
/// ```
///
/// A closure submitted to the engine that captures an owning handle keeps the engine alive
/// until the closure is dropped (after it ran); if that drop releases the last handle, the
/// drain runs on a helper thread. Inside an instruction, use the context's
/// [`engine`](crate::InstrCtx::engine), a view that does not keep the engine alive (its
/// clones, and the handles made from it, do).
///
/// **Thread-safety:** `Send + Sync`. Every method may be called from any thread
/// concurrently (the C API synchronises submission, waits, lanes and streams).
#[derive(Clone)]
pub struct Engine {
    inner: EngineRef,
}

// SAFETY: an owning Engine is an Arc of a Send + Sync EngineInner; a borrowed one is a pointer
// used only for thread-safe fl_* calls (never destroyed through it).
unsafe impl Send for Engine {}
// SAFETY: as for Send.
unsafe impl Sync for Engine {}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("workers", &self.worker_count())
            .field("lanes", &self.lane_count())
            .finish()
    }
}

impl Engine {
    /// An engine with the library defaults.
    pub fn new() -> Result<Engine> {
        EngineBuilder::default().build()
    }

    /// An [`EngineBuilder`] to set workers, lanes, the in-flight window and the watchdog.
    pub fn builder() -> EngineBuilder {
        EngineBuilder::default()
    }

    /// The view of a running instruction's engine (see [`EngineRef::Borrowed`]); `owner`
    /// is the submitting handle's, downgraded.
    pub(crate) fn borrowed(raw: NonNull<sys::fl_engine_t>, owner: Weak<EngineInner>) -> Engine {
        Engine { inner: EngineRef::Borrowed { raw, owner } }
    }

    /// A weak reference to the engine, for a callback's view of it.
    pub(crate) fn downgrade(&self) -> Weak<EngineInner> {
        match &self.inner {
            EngineRef::Owned(inner) => Arc::downgrade(inner),
            EngineRef::Borrowed { owner, .. } => owner.clone(),
            EngineRef::Gone => Weak::new(),
        }
    }

    /// A copy of this handle for something that cannot outlive the call it is made in (a
    /// scope): a view stays a view, usable while the engine drains.
    pub(crate) fn lend(&self) -> Engine {
        match &self.inner {
            EngineRef::Borrowed { raw, owner } => Engine::borrowed(*raw, owner.clone()),
            _ => self.clone(),
        }
    }

    /// An owning handle to this engine, for a handle made from it that keeps it alive:
    /// `Shutdown` when this is the view of an engine whose last owner is gone (it is being
    /// destroyed, and waits only for the running callbacks).
    pub(crate) fn owning(&self) -> Result<Engine> {
        let e = self.clone();
        if let EngineRef::Gone = e.inner {
            return Err(Error::new(
                ErrorKind::Shutdown,
                "the engine is being destroyed (its last owning handle was dropped): no handle can be made from \
                 an instruction's view of it any more",
            ));
        }
        Ok(e)
    }

    /// The C handle, for the raw API ([`crate::sys`]); NULL for a clone of an instruction
    /// context's engine made while the engine was being destroyed.
    pub fn as_raw(&self) -> *mut sys::fl_engine_t {
        match &self.inner {
            EngineRef::Owned(inner) => inner.raw.as_ptr(),
            EngineRef::Borrowed { raw, .. } => raw.as_ptr(),
            EngineRef::Gone => ptr::null_mut(),
        }
    }

    /// True for handles that keep the engine alive: all but
    /// [`InstrCtx::engine`](crate::InstrCtx::engine)'s view (whose clones own the engine)
    /// and a clone of that view made while the engine was being destroyed.
    pub fn is_owning(&self) -> bool {
        matches!(self.inner, EngineRef::Owned(_))
    }

    /// Number of lanes (ids `0..lane_count()`).
    pub fn lane_count(&self) -> u32 {
        // SAFETY: the handle is live (or stale, which the library answers with 0).
        unsafe { sys::fl_engine_lane_count(self.as_raw()) }
    }

    /// Number of host worker threads.
    pub fn worker_count(&self) -> u32 {
        // SAFETY: the handle is live (or stale, which the library answers with 0).
        unsafe { sys::fl_engine_worker_count(self.as_raw()) }
    }

    /// Acquires a fresh lane (the smallest free id >= 1), released when the guard drops.
    /// `ErrorKind::Exhausted` when every lane is held.
    pub fn acquire_lane(&self) -> Result<Lane> {
        let engine = self.owning()?;
        let mut id = 0u32;
        // SAFETY: the handle is live; id is a valid out pointer.
        check(unsafe { sys::fl_lane_acquire(engine.as_raw(), &mut id) })?;
        Ok(Lane { engine, id, held: true })
    }

    /// The host stream of `lane`.
    pub fn stream(&self, lane: u32) -> Result<Stream> {
        self.stream_on(lane, Device::Cpu, StreamKind::Host)
    }

    /// The stream (lane, device, kind). Interned: the same triple is the same stream.
    pub fn stream_on(&self, lane: u32, device: Device, kind: StreamKind) -> Result<Stream> {
        let engine = self.owning()?;
        let mut out: *mut sys::fl_stream_t = ptr::null_mut();
        // SAFETY: the handle is live; out is a valid out pointer.
        check(unsafe { sys::fl_stream_get(engine.as_raw(), lane, device.raw(), kind.raw(), &mut out) })?;
        let raw = NonNull::new(out).ok_or_else(|| Error::new(ErrorKind::Internal, "fl_stream_get returned NULL"))?;
        Ok(Stream { raw, engine })
    }

    /// Waits for every instruction submitted before the call; returns the first failure
    /// among them not yet reported by another wait (each failure is reported once).
    /// `InvalidArgument` inside an instruction callback.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: the handle is live.
        check(unsafe { sys::fl_engine_synchronize(self.as_raw()) })
    }

    /// A snapshot of the engine's counters.
    pub fn stats(&self) -> Result<Stats> {
        let mut s = sys::fl_engine_stats_t::init();
        // SAFETY: the handle is live; s is initialised with its struct_size.
        check(unsafe { sys::fl_engine_stats(self.as_raw(), &mut s) })?;
        Ok(Stats {
            submitted: s.submitted,
            completed: s.completed,
            failed: s.failed,
            in_flight: s.in_flight,
            window_stalls: s.window_stalls,
            steals: s.steals,
            parks: s.parks,
            cancelled: s.cancelled,
            tasks: s.tasks,
        })
    }

    /// The state dump (streams, oldest pending instructions, window).
    pub fn dump(&self) -> Result<String> {
        let mut need = 0u64;
        // SAFETY: the handle is live; a NULL buffer with size 0 is allowed; need is a valid out pointer.
        check(unsafe { sys::fl_engine_dump(self.as_raw(), ptr::null_mut(), 0, &mut need) })?;
        loop {
            let size = need.max(1);
            let mut buf = vec![0u8; size as usize];
            // SAFETY: buf holds `size` writable bytes.
            check(unsafe { sys::fl_engine_dump(self.as_raw(), buf.as_mut_ptr() as *mut c_char, size, &mut need) })?;
            if need <= size {
                let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
                buf.truncate(end);
                return Ok(String::from_utf8_lossy(&buf).into_owned());
            }
        }
    }

    /// Starts a trace (Chrome trace-event JSON, for Perfetto) written to `path`.
    pub fn trace_start(&self, path: impl AsRef<Path>) -> Result<()> {
        let p = cstring(&path.as_ref().to_string_lossy())?;
        // SAFETY: the handle is live; p is NUL-terminated and outlives the call (copied by C).
        check(unsafe { sys::fl_trace_start(self.as_raw(), p.as_ptr()) })
    }

    /// Stops the trace and finishes its file.
    pub fn trace_stop(&self) -> Result<()> {
        // SAFETY: the handle is live.
        check(unsafe { sys::fl_trace_stop(self.as_raw()) })
    }

    /// Turns the hang watchdog on (`timeout_ms > 0`) or off. With `callback`, the dump is
    /// handed to it on a library thread; otherwise it goes to stderr. Callbacks are kept
    /// until the engine is destroyed. Needs an owning handle (`InvalidArgument` through
    /// [`InstrCtx::engine`](crate::InstrCtx::engine), which could not keep the callback).
    pub fn set_watchdog<F>(&self, timeout_ms: u64, callback: Option<F>) -> Result<()>
    where
        F: Fn(&str) + Send + Sync + 'static,
    {
        unsafe extern "C" fn dump_trampoline(text: *const c_char, ud: *mut c_void) {
            let _cb = InCallback::enter();
            let _ = std::panic::catch_unwind(|| {
                // SAFETY: ud is the Box<DumpCallback> registered below, alive until the engine drops.
                let f = unsafe { &*(ud as *const DumpCallback) };
                let s = if text.is_null() {
                    String::new()
                } else {
                    // SAFETY: the library passes a NUL-terminated string valid for the call.
                    unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned()
                };
                f(&s);
            });
        }
        let inner = match &self.inner {
            EngineRef::Owned(inner) => inner,
            EngineRef::Borrowed { .. } | EngineRef::Gone => {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    "Engine::set_watchdog needs an owning Engine handle, not the one of an instruction context",
                ))
            }
        };
        let mut d = sys::fl_watchdog_desc_t::init();
        d.timeout_ms = timeout_ms;
        let boxed: Option<Box<DumpCallback>> = callback.map(|f| Box::new(Box::new(f) as DumpCallback));
        if let Some(b) = &boxed {
            d.callback = Some(dump_trampoline);
            d.user_data = &**b as *const DumpCallback as *mut c_void;
        }
        // SAFETY: the handle is live; d is initialised; user_data points into a box kept below.
        check(unsafe { sys::fl_engine_set_watchdog(self.as_raw(), &d) })?;
        if let Some(b) = boxed {
            inner.watchdogs.lock().unwrap_or_else(|e| e.into_inner()).push(b);
        }
        Ok(())
    }
}

/// A held lane: released (work already submitted on it still runs) when dropped. Keeps
/// its engine alive.
///
/// **Thread-safety:** `Send + Sync`; lane ids are plain numbers and any thread may submit
/// to any lane's streams.
#[derive(Debug)]
pub struct Lane {
    engine: Engine,
    id: u32,
    held: bool,
}

impl Lane {
    /// The lane id.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// This lane's host stream.
    pub fn stream(&self) -> Result<Stream> {
        self.engine.stream(self.id)
    }

    /// This lane's stream of `device` and `kind`.
    pub fn stream_on(&self, device: Device, kind: StreamKind) -> Result<Stream> {
        self.engine.stream_on(self.id, device, kind)
    }

    /// Releases the lane now, reporting an error (Drop ignores it).
    pub fn release(mut self) -> Result<()> {
        self.held = false;
        // SAFETY: the engine is alive (self holds it); the id was acquired by this guard and
        // is released once (Drop skips it now).
        check(unsafe { sys::fl_lane_release(self.engine.as_raw(), self.id) })
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        if self.held {
            // SAFETY: the engine is alive (self holds it); the id was acquired by this guard.
            unsafe { sys::fl_lane_release(self.engine.as_raw(), self.id) };
        }
    }
}

/// An in-order instruction queue identified by (lane, device, kind). Streams are interned
/// and have nothing to release; a `Stream` keeps its engine alive and is cheap to clone.
///
/// **Thread-safety:** `Send + Sync`: any thread may submit to any stream concurrently.
#[derive(Clone)]
pub struct Stream {
    raw: NonNull<sys::fl_stream_t>,
    engine: Engine,
}

// SAFETY: fl_submit_host, fl_stream_synchronize and fl_stream_info may be called on one stream
// from several threads at once (submission takes the lane's submit lock in the engine).
unsafe impl Send for Stream {}
// SAFETY: as for Send.
unsafe impl Sync for Stream {}

impl PartialEq for Stream {
    fn eq(&self, other: &Stream) -> bool {
        self.raw == other.raw
    }
}

impl Eq for Stream {}

impl Hash for Stream {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.raw.hash(state)
    }
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Stream({:p})", self.raw.as_ptr())
    }
}

impl Stream {
    /// The C handle, for the raw API ([`crate::sys`]).
    pub fn as_raw(&self) -> *mut sys::fl_stream_t {
        self.raw.as_ptr()
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// (lane, device, kind) as the library reports them.
    pub fn info(&self) -> Result<(u32, Device, StreamKind)> {
        let mut lane = 0u32;
        let mut dev = sys::fl_device_t::default();
        let mut kind: sys::fl_stream_kind_t = 0;
        // SAFETY: the stream is live while its engine is; all out pointers are valid.
        check(unsafe { sys::fl_stream_info(self.raw.as_ptr(), &mut lane, &mut dev, &mut kind) })?;
        Ok((lane, Device::from_raw(dev), StreamKind::from_raw(kind)))
    }

    /// The stream's lane.
    pub fn lane(&self) -> Result<u32> {
        self.info().map(|(l, _, _)| l)
    }

    /// Waits for everything submitted to this stream before the call; error rule as
    /// [`Engine::synchronize`], restricted to this stream.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: the stream is live while its engine is.
        check(unsafe { sys::fl_stream_synchronize(self.raw.as_ptr()) })
    }

    /// Starts building a host instruction: `.name()`, `.read(&obj)`, `.write(&obj)`,
    /// `.nonblocking()`, then `.submit(closure)`.
    pub fn instr(&self) -> Instr {
        Instr::new(self.clone())
    }

    /// Submits a closure with no operands (ordered only by this stream); returns its
    /// [`InstrHandle`](crate::InstrHandle).
    pub fn submit<F, E>(&self, f: F) -> Result<crate::InstrHandle>
    where
        F: FnOnce() -> std::result::Result<(), E> + Send + 'static,
        E: std::fmt::Display,
    {
        self.instr().submit(f)
    }

    /// Sets a CUDA stream's priority before its first instruction; returns the applied
    /// (clamped) value. `Unsupported` in a CPU-only build.
    pub fn set_priority(&self, priority: i32) -> Result<i32> {
        let mut applied = 0i32;
        // SAFETY: the stream is live while its engine is; applied is a valid out pointer.
        check(unsafe { sys::fl_stream_set_priority(self.raw.as_ptr(), priority, &mut applied) })?;
        Ok(applied)
    }
}

pub(crate) fn cstring(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::new(ErrorKind::InvalidArgument, format!("{:?} contains a NUL byte", s)))
}

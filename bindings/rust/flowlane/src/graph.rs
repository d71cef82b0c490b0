//! parallel_for and task graphs: fork-join work with no stream ordering.

use std::any::Any;
use std::fmt::Display;
use std::ops::Range;
use std::os::raw::c_void;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::ptr::{self, NonNull};
use std::sync::Mutex;

use flowlane_sys as sys;

use crate::engine::{cstring, Engine, InCallback};
use crate::error::{Error, ErrorKind, Result};
use crate::instr::drop_payload;

/// The first failure of a synchronous parallel call: an error text or a panic to resume.
#[derive(Default)]
pub(crate) struct FirstFailure {
    slot: Mutex<Option<Failure>>,
}

pub(crate) enum Failure {
    Message(String),
    Panic(Box<dyn Any + Send>),
}

impl FirstFailure {
    pub(crate) fn record(&self, f: Failure) {
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(f);
        } else if let Failure::Panic(p) = f {
            drop_payload(p);
        }
    }

    /// After the C call: resumes a panic on the caller, or builds the error.
    pub(crate) fn finish(&self, status: sys::fl_status_t) -> Result<()> {
        let taken = self.slot.lock().unwrap_or_else(|e| e.into_inner()).take();
        if status == sys::FL_OK {
            return Ok(());
        }
        let err = Error::last(status);
        match taken {
            Some(Failure::Panic(p)) => resume_unwind(p),
            Some(Failure::Message(m)) => Err(Error::new(err.kind(), format!("{}: {}", err.message(), m))),
            None => Err(err),
        }
    }
}

pub(crate) fn run_guarded<E: Display>(fail: &FirstFailure, f: impl FnOnce() -> std::result::Result<(), E>) -> sys::fl_status_t {
    let _cb = InCallback::enter();
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => sys::FL_OK,
        Ok(Err(e)) => {
            fail.record(Failure::Message(e.to_string()));
            sys::FL_ERR_INSTRUCTION_FAILED
        }
        Err(p) => {
            fail.record(Failure::Panic(p));
            sys::FL_ERR_INSTRUCTION_FAILED
        }
    }
}

struct Body<'a, F> {
    f: &'a F,
    fail: FirstFailure,
}

unsafe extern "C" fn range_trampoline<F, E>(lo: u64, hi: u64, ud: *mut c_void) -> sys::fl_status_t
where
    F: Fn(Range<u64>) -> std::result::Result<(), E> + Sync,
    E: Display,
{
    // SAFETY: ud is the Body on parallel_for's stack, alive until fl_parallel_for returns;
    // only shared references are taken (F: Sync, FirstFailure is a Mutex).
    let body = unsafe { &*(ud as *const Body<'_, F>) };
    run_guarded(&body.fail, || (body.f)(lo..hi))
}

impl Engine {
    /// Calls `body(lo..hi)` on disjoint chunks covering `range`, each at most `grain` long
    /// (0: chosen by the engine), in parallel on the workers; the calling thread helps.
    /// The first `Err` stops chunks not yet started and is returned (kind
    /// `InstructionFailed`, with its text); a panic in a body is resumed on the caller
    /// once every running chunk has finished. May be called from inside an instruction.
    pub fn parallel_for<F, E>(&self, range: Range<u64>, grain: u64, body: F) -> Result<()>
    where
        F: Fn(Range<u64>) -> std::result::Result<(), E> + Sync,
        E: Display,
    {
        let b = Body { f: &body, fail: FirstFailure::default() };
        let end = range.end.max(range.start);
        // SAFETY: the engine is live; b outlives the call (fl_parallel_for returns only when
        // every chunk is done), and range_trampoline::<F, E> matches its type.
        let st = unsafe {
            sys::fl_parallel_for(
                self.as_raw(),
                range.start,
                end,
                grain,
                Some(range_trampoline::<F, E>),
                &b as *const Body<'_, F> as *mut c_void,
            )
        };
        b.fail.finish(st)
    }

    /// A new, empty task graph on this engine.
    pub fn taskgraph<'f>(&self) -> Result<TaskGraph<'f>> {
        TaskGraph::new(self)
    }
}

type TaskFn<'f> = Box<dyn FnMut() -> std::result::Result<(), String> + Send + 'f>;

struct Node<'f> {
    f: TaskFn<'f>,
    fail: *const FirstFailure,
}

unsafe extern "C" fn task_trampoline(ud: *mut c_void) -> sys::fl_status_t {
    // SAFETY: ud is a Box<Node> owned by the graph, alive while it runs; during a run each
    // node is called by exactly one thread (run takes &mut TaskGraph), so &mut is unique.
    let node = unsafe { &mut *(ud as *mut Node<'_>) };
    // SAFETY: fail points at the graph's boxed FirstFailure, alive as long as the graph.
    let fail = unsafe { &*node.fail };
    run_guarded(fail, || (node.f)())
}

/// An identifier of a node in a [`TaskGraph`] (dense from 0, in the order of `add`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TaskId(pub u64);

/// A reusable graph of closures with "runs before" edges (Taskflow style). Closures may
/// borrow data that outlives the graph (`'f`): they only run inside [`run`](TaskGraph::run).
///
/// **Thread-safety:** `Send` (its closures are `Send`), not `Sync`: building and running
/// take `&mut self`, so one graph never runs twice at once.
pub struct TaskGraph<'f> {
    raw: NonNull<sys::fl_taskgraph_t>,
    // Boxed: the library holds each node's address (its user_data), which must not move
    // when the vector grows.
    #[allow(clippy::vec_box)]
    nodes: Vec<Box<Node<'f>>>,
    fail: Box<FirstFailure>,
    _engine: Engine,
}

// SAFETY: the graph owns Send closures and a C graph that may be used from any one thread
// at a time; &mut self on every mutating call rules out concurrent use.
unsafe impl Send for TaskGraph<'_> {}

impl<'f> TaskGraph<'f> {
    /// A new, empty graph on `engine` (as [`Engine::taskgraph`]); it keeps the engine alive.
    pub fn new(engine: &Engine) -> Result<TaskGraph<'f>> {
        let engine = engine.owning()?;
        let mut out: *mut sys::fl_taskgraph_t = ptr::null_mut();
        // SAFETY: the engine is live; out is a valid out pointer.
        crate::error::check(unsafe { sys::fl_taskgraph_create(engine.as_raw(), &mut out) })?;
        let raw =
            NonNull::new(out).ok_or_else(|| Error::new(ErrorKind::Internal, "fl_taskgraph_create returned NULL"))?;
        Ok(TaskGraph { raw, nodes: Vec::new(), fail: Box::default(), _engine: engine })
    }

    /// Adds a node running `f` (once per run); `name` shows in errors.
    pub fn add<F, E>(&mut self, name: &str, mut f: F) -> Result<TaskId>
    where
        F: FnMut() -> std::result::Result<(), E> + Send + 'f,
        E: Display,
    {
        let cname = cstring(name)?;
        let mut node = Box::new(Node {
            f: Box::new(move || f().map_err(|e| e.to_string())),
            fail: &*self.fail as *const FirstFailure,
        });
        let ud = &mut *node as *mut Node<'f> as *mut c_void;
        let mut id = 0u64;
        // SAFETY: the graph is live; ud points into a Box kept in self.nodes until the graph
        // is destroyed; the name is copied.
        crate::error::check(unsafe {
            sys::fl_taskgraph_add(self.raw.as_ptr(), Some(task_trampoline), ud, cname.as_ptr(), &mut id)
        })?;
        self.nodes.push(node);
        Ok(TaskId(id))
    }

    /// `after` starts only once `before` has finished.
    pub fn precede(&mut self, before: TaskId, after: TaskId) -> Result<()> {
        // SAFETY: the graph is live.
        crate::error::check(unsafe { sys::fl_taskgraph_precede(self.raw.as_ptr(), before.0, after.0) })
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True when no node was added.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Runs every node once, respecting edges; blocks until done. `threads`: -1 all logical
    /// cores, 0 physical cores, N > 0 at most N. A node's `Err` stops nodes not yet started
    /// and is returned; a panic is resumed here; a cycle is `InvalidArgument`.
    pub fn run(&mut self, threads: i64) -> Result<()> {
        // SAFETY: the graph is live; every node's user_data is alive in self.nodes; &mut self
        // guarantees no concurrent run.
        let st = unsafe { sys::fl_taskgraph_run(self.raw.as_ptr(), threads) };
        self.fail.finish(st)
    }
}

impl Drop for TaskGraph<'_> {
    fn drop(&mut self) {
        // SAFETY: the graph is live and not running (&mut); destroyed before the nodes drop.
        unsafe { sys::fl_taskgraph_destroy(self.raw.as_ptr()) };
    }
}

/// A raw pointer into the slice of [`Engine::par_chunks_mut`], shared by the chunk bodies.
struct ChunkBase<T>(*mut T);
// SAFETY: each chunk body turns the pointer into a `&mut` of its own disjoint chunk (checked
// by the claim flags), so sharing it moves no `T` between threads beyond what `T: Send` allows.
unsafe impl<T: Send> Sync for ChunkBase<T> {}

impl Engine {
    /// Calls `body(index, chunk)` for the consecutive `chunk_size`-long chunks of `data`
    /// (the last may be shorter), in parallel on the workers, each chunk a disjoint `&mut`
    /// (like rayon's `par_chunks_mut().enumerate().try_for_each()`). Blocks until done; the
    /// first `Err` stops chunks not yet started and is returned (kind `InstructionFailed`),
    /// a panic is resumed here. `chunk_size == 0` is `InvalidArgument`.
    ///
    /// ```
    /// let engine = flowlane::Engine::builder().workers(2).build()?;
    /// let mut v = vec![0u32; 10];
    /// engine.par_chunks_mut(&mut v, 4, |i, chunk| {
    ///     chunk.iter_mut().for_each(|x| *x = i as u32);
    ///     Ok::<(), String>(())
    /// })?;
    /// assert_eq!(v, [0, 0, 0, 0, 1, 1, 1, 1, 2, 2]);
    /// # Ok::<(), flowlane::Error>(())
    /// ```
    pub fn par_chunks_mut<T, F, E>(&self, data: &mut [T], chunk_size: usize, body: F) -> Result<()>
    where
        T: Send,
        F: Fn(usize, &mut [T]) -> std::result::Result<(), E> + Sync,
        E: Display,
    {
        use std::sync::atomic::{AtomicBool, Ordering};
        if chunk_size == 0 {
            return Err(Error::new(ErrorKind::InvalidArgument, "Engine::par_chunks_mut: chunk_size must be > 0"));
        }
        let len = data.len();
        let chunks = (len + chunk_size - 1) / chunk_size;
        // One flag per chunk: a chunk handed out twice (a library bug) is refused, never aliased.
        let claimed: Vec<AtomicBool> = (0..chunks).map(|_| AtomicBool::new(false)).collect();
        let base = ChunkBase(data.as_mut_ptr());
        let base = &base;
        self.parallel_for(0..chunks as u64, 1, |r| -> std::result::Result<(), String> {
            for i in r.start as usize..r.end as usize {
                if claimed.get(i).map_or(true, |c| c.swap(true, Ordering::Relaxed)) {
                    return Err(format!("Engine::par_chunks_mut: chunk {} handed out twice or out of range", i));
                }
                let start = i * chunk_size;
                let end = (start + chunk_size).min(len);
                // SAFETY: [start, end) lies inside `data`, which is exclusively borrowed for this
                // call; chunk i was claimed by this body only (flag above), so this is the only
                // reference to these elements; T: Send allows using them on this thread.
                let chunk = unsafe { std::slice::from_raw_parts_mut(base.0.add(start), end - start) };
                body(i, chunk).map_err(|e| e.to_string())?;
            }
            Ok(())
        })
    }
}

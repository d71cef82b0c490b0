//! Waits with a timeout, instruction handles (query, wait, cancel), cancel and drain: the
//! safe side of the header's "Waits with a timeout, queries, cancel and drain" section
//! (`Object::wait_for` lives with `Object`).

use std::time::Duration;

use flowlane_sys as sys;

use crate::engine::{Engine, Stream};
use crate::error::{check, Result};

/// `timeout` in nanoseconds for a `*_for` call; never `FL_WAIT_FOREVER` (a timeout of
/// 584 years is one).
pub(crate) fn timeout_ns(timeout: Duration) -> u64 {
    timeout.as_nanos().min(u128::from(sys::FL_WAIT_FOREVER - 1)) as u64
}

/// What became of a submitted instruction ([`InstrHandle::state`], `fl_instr_query`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum InstrState {
    /// Not completed yet (queued, waiting for its inputs, or running).
    Pending,
    /// Completed successfully.
    Done,
    /// Its closure returned an error or panicked (or its device work failed).
    Failed,
    /// Not run: an input was poisoned by a failure.
    Skipped,
    /// Not run: cancelled before it started.
    Cancelled,
    /// Completed too long ago for its outcome to be remembered (each stream remembers its
    /// last `FL_INSTR_OUTCOME_HISTORY` failed, skipped or cancelled instructions).
    Completed,
}

impl InstrState {
    fn from_raw(v: u32) -> InstrState {
        match v {
            sys::FL_INSTR_PENDING => InstrState::Pending,
            sys::FL_INSTR_DONE => InstrState::Done,
            sys::FL_INSTR_FAILED => InstrState::Failed,
            sys::FL_INSTR_SKIPPED => InstrState::Skipped,
            sys::FL_INSTR_CANCELLED => InstrState::Cancelled,
            _ => InstrState::Completed,
        }
    }

    /// True once the instruction has completed, whatever its outcome.
    pub fn is_complete(self) -> bool {
        self != InstrState::Pending
    }
}

/// A submitted instruction: what `submit` returns. It keeps its stream (and engine) alive,
/// is cheap to clone, and may be used from any thread.
///
/// ```
/// # fn main() -> Result<(), flowlane::Error> {
/// use std::time::Duration;
/// let engine = flowlane::Engine::new()?;
/// let job = engine.stream(0)?.submit(|| Ok::<(), String>(()))?;
/// job.wait_for(Duration::from_secs(10))?; // Err(kind Timeout) if it takes longer
/// assert_eq!(job.state()?, flowlane::InstrState::Done);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct InstrHandle {
    stream: Stream,
    id: u64,
}

impl InstrHandle {
    /// The handle of instruction `id` of `stream` (for ids of the GPU and collective submit
    /// calls, which return the id alone). `id` must be one that a submit call returned for
    /// this stream: the library cannot tell another stream's id apart.
    pub fn new(stream: Stream, id: u64) -> InstrHandle {
        InstrHandle { stream, id }
    }

    /// The instruction's id (unique in its engine; errors name it as `#id`).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The stream it was submitted to.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// Its state now (`fl_instr_query`): never waits, never counts as observing a failure.
    pub fn state(&self) -> Result<InstrState> {
        let mut out = 0u32;
        // SAFETY: the stream is live (it holds its engine); out is a valid out pointer.
        check(unsafe { sys::fl_instr_query(self.stream.as_raw(), self.id, &mut out) })?;
        Ok(InstrState::from_raw(out))
    }

    /// Waits until it has completed and returns its outcome: `Ok(())`, or its failure
    /// (`InstructionFailed` with the closure's message, `DependencyFailed` for a skipped
    /// one, `Cancelled`), which then counts as reported for `synchronize`.
    pub fn wait(&self) -> Result<()> {
        self.wait_raw(sys::FL_WAIT_FOREVER)
    }

    /// [`wait`](InstrHandle::wait) for at most `timeout`: `Err` of kind `Timeout` if it has
    /// not completed by then (nothing is consumed: wait again). `Duration::ZERO` polls.
    pub fn wait_for(&self, timeout: Duration) -> Result<()> {
        self.wait_raw(timeout_ns(timeout))
    }

    fn wait_raw(&self, ns: u64) -> Result<()> {
        // SAFETY: the stream is live (it holds its engine).
        check(unsafe { sys::fl_instr_wait_for(self.stream.as_raw(), self.id, ns) })
    }

    /// Asks the engine not to run it (`fl_instr_cancel`). `Ok(true)`: the request is
    /// registered; if the instruction had not started when its lane reached it, it then
    /// fails with `Cancelled` without running (its closure is dropped), and what reads its
    /// outputs is skipped; one that starts concurrently runs normally ([`wait`] or
    /// [`state`] tell which happened). `Ok(false)`: it had already completed.
    ///
    /// [`wait`]: InstrHandle::wait
    /// [`state`]: InstrHandle::state
    pub fn cancel(&self) -> Result<bool> {
        // SAFETY: the stream is live (it holds its engine).
        let st = unsafe { sys::fl_instr_cancel(self.stream.as_raw(), self.id) };
        if st == sys::FL_ERR_INVALID_ARGUMENT && self.state()?.is_complete() {
            return Ok(false);
        }
        check(st).map(|()| true)
    }
}

impl Engine {
    /// [`synchronize`](Engine::synchronize) for at most `timeout`: `Err` of kind `Timeout`
    /// if the work is not done by then (nothing is consumed: call again).
    pub fn synchronize_for(&self, timeout: Duration) -> Result<()> {
        // SAFETY: the handle is live.
        check(unsafe { sys::fl_engine_synchronize_for(self.as_raw(), timeout_ns(timeout)) })
    }

    /// Cancels every instruction submitted before the call that has not started (as
    /// [`InstrHandle::cancel`]); `synchronize` then reports the cancellations.
    pub fn cancel(&self) -> Result<()> {
        // SAFETY: the handle is live.
        check(unsafe { sys::fl_engine_cancel(self.as_raw()) })
    }

    /// Drains the engine without destroying it: from now on, submissions from the
    /// program's threads are refused (`Shutdown`; work submitted by the engine's own
    /// callbacks is still accepted), and the call waits, for at most `timeout` (`None`:
    /// forever), until every instruction has completed. Returns what `synchronize` would,
    /// or `Err` of kind `Timeout` (the engine stays draining; call again to keep waiting).
    pub fn drain(&self, timeout: Option<Duration>) -> Result<()> {
        let ns = timeout.map_or(sys::FL_WAIT_FOREVER, timeout_ns);
        // SAFETY: the handle is live.
        check(unsafe { sys::fl_engine_drain(self.as_raw(), ns) })
    }
}

impl Stream {
    /// [`synchronize`](Stream::synchronize) for at most `timeout`: `Err` of kind `Timeout`
    /// if the stream's work is not done by then (nothing is consumed).
    pub fn synchronize_for(&self, timeout: Duration) -> Result<()> {
        // SAFETY: the stream is live while its engine is.
        check(unsafe { sys::fl_stream_synchronize_for(self.as_raw(), timeout_ns(timeout)) })
    }

    /// Cancels every instruction submitted to this stream before the call that has not
    /// started (as [`InstrHandle::cancel`]).
    pub fn cancel(&self) -> Result<()> {
        // SAFETY: the stream is live while its engine is.
        check(unsafe { sys::fl_stream_cancel(self.as_raw()) })
    }
}

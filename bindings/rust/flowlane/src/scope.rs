//! Task groups as scopes (`rayon::scope`): fork-join on the engine's workers, whose tasks
//! may borrow from the caller's stack.

use std::cell::Cell;
use std::fmt::Display;
use std::marker::PhantomData;
use std::os::raw::c_void;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::ptr::{self, NonNull};

use flowlane_sys as sys;

use crate::engine::{Engine, InCallback};
use crate::error::{check, Error, Result};
use crate::graph::{run_guarded, FirstFailure};

type ScopeFn<'scope> = Box<dyn FnOnce() -> std::result::Result<(), String> + Send + 'scope>;

/// One spawned task: owned by the engine from a successful spawn until its cleanup.
struct ScopeTask<'scope> {
    f: Option<ScopeFn<'scope>>,
    fail: *const FirstFailure,
}

/// The tasks of one [`Engine::scope`] call: spawn more with [`Scope::spawn`].
///
/// **Thread-safety:** `Sync`: tasks running on the workers spawn through the same `&Scope`.
pub struct Scope<'scope> {
    group: NonNull<sys::fl_task_group_t>,
    engine: Engine,
    fail: FirstFailure,
    // Invariant in 'scope, as rayon's Scope: what tasks borrow must outlive the scope.
    _marker: PhantomData<Cell<&'scope mut ()>>,
}

// SAFETY: fl_task_group_spawn may be called on one group from any thread (tasks spawn into
// it from workers), FirstFailure is a Mutex, and Engine is Sync.
unsafe impl Sync for Scope<'_> {}

impl Engine {
    /// Runs `f` with a [`Scope`] whose tasks ([`Scope::spawn`]) run on the engine's workers
    /// and may borrow anything that outlives the call, as `rayon::scope`; returns once
    /// every task (including tasks spawned by tasks) has finished.
    ///
    /// Returns `f`'s value, or the first task's error (kind `InstructionFailed`, with its
    /// text); once a task has failed, tasks not yet started are skipped (their closures
    /// are dropped). A panic in a task is resumed here once every task has finished; a
    /// panic in `f` too (after waiting). May be used inside instructions and tasks: a
    /// worker waiting for its scope runs the scope's tasks meanwhile.
    ///
    /// ```
    /// # fn main() -> Result<(), flowlane::Error> {
    /// let engine = flowlane::Engine::new()?;
    /// let mut halves = [0u64; 2];
    /// let (lo, hi) = halves.split_at_mut(1);
    /// engine.scope(|s| -> Result<(), flowlane::Error> {
    ///     s.spawn(|_| { lo[0] = (0..500).sum(); Ok::<(), String>(()) })?;
    ///     s.spawn(|_| { hi[0] = (500..1000).sum(); Ok::<(), String>(()) })?;
    ///     Ok(())
    /// })??;
    /// assert_eq!(halves[0] + halves[1], 499_500);
    /// # Ok(()) }
    /// ```
    pub fn scope<'scope, F, R>(&self, f: F) -> Result<R>
    where
        F: FnOnce(&Scope<'scope>) -> R,
    {
        let mut raw = ptr::null_mut();
        // SAFETY: the engine is live; raw is a valid out pointer.
        check(unsafe { sys::fl_task_group_create(self.as_raw(), &mut raw) })?;
        let group = NonNull::new(raw).ok_or_else(|| Error::last(sys::FL_ERR_INTERNAL))?;
        let scope = Scope { group, engine: self.lend(), fail: FirstFailure::default(), _marker: PhantomData };
        let out = catch_unwind(AssertUnwindSafe(|| f(&scope)));
        // Every task has finished (and its closure is dropped) when this returns, so
        // nothing borrowed for 'scope is used after this call.
        // SAFETY: the group is live until scope is dropped.
        let st = unsafe { sys::fl_task_group_wait(scope.group.as_ptr()) };
        let tasks = scope.fail.finish(st);
        match out {
            Err(p) => resume_unwind(p),
            Ok(r) => tasks.map(|()| r),
        }
    }
}

impl<'scope> Scope<'scope> {
    /// Schedules `f(scope)` to run once on a worker; never blocks. `f` may borrow anything
    /// that outlives the [`Engine::scope`] call and spawn more tasks through its argument.
    /// `Err(e)` or a panic fails the scope (see [`Engine::scope`]). If spawning fails
    /// (`Shutdown`), `f` is dropped here and never runs.
    pub fn spawn<F, E>(&self, f: F) -> Result<()>
    where
        F: FnOnce(&Scope<'scope>) -> std::result::Result<(), E> + Send + 'scope,
        E: Display,
    {
        let this = self as *const Scope<'scope> as usize;
        let task: ScopeFn<'scope> = Box::new(move || {
            // SAFETY: the scope lives on Engine::scope's stack until every task has
            // finished (fl_task_group_wait), and it is Sync.
            let scope = unsafe { &*(this as *const Scope<'scope>) };
            f(scope).map_err(|e| e.to_string())
        });
        let payload = Box::into_raw(Box::new(ScopeTask { f: Some(task), fail: &self.fail }));
        // SAFETY: the group is live; the trampolines match the payload's type; on success
        // the engine owns the payload until scope_cleanup.
        let st = unsafe {
            sys::fl_task_group_spawn(
                self.group.as_ptr(),
                Some(scope_trampoline),
                payload as *mut c_void,
                Some(scope_cleanup),
            )
        };
        if st != sys::FL_OK {
            let err = Error::last(st);
            // SAFETY: a failed spawn never calls fn or cleanup: the payload is ours again.
            drop(unsafe { Box::from_raw(payload) });
            return Err(err);
        }
        Ok(())
    }

    /// The engine the tasks run on.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }
}

impl Drop for Scope<'_> {
    fn drop(&mut self) {
        // SAFETY: the group is live and every task has finished (Engine::scope waited).
        unsafe { sys::fl_task_group_destroy(self.group.as_ptr()) };
    }
}

unsafe extern "C" fn scope_trampoline(ud: *mut c_void) -> sys::fl_status_t {
    // SAFETY: ud is the ScopeTask of this task; fn runs at most once, before its cleanup,
    // so this is the only access now.
    let task = unsafe { &mut *(ud as *mut ScopeTask<'_>) };
    // SAFETY: fail points into the Scope, alive until every task has finished.
    let fail = unsafe { &*task.fail };
    match task.f.take() {
        Some(f) => run_guarded(fail, f),
        None => sys::FL_ERR_INTERNAL,
    }
}

unsafe extern "C" fn scope_cleanup(ud: *mut c_void) {
    let _cb = InCallback::enter();
    // Dropping a skipped task's closure runs its captures' destructors: keep panics out of C.
    let _ = catch_unwind(|| {
        // SAFETY: cleanup runs exactly once per successful spawn, after fn ran or instead of
        // it: this reclaims the Box leaked in spawn exactly once.
        drop(unsafe { Box::from_raw(ud as *mut ScopeTask<'_>) });
    });
}

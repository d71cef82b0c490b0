//! Dependence objects carrying a Rust value.

use std::os::raw::c_void;
use std::ptr::{self, NonNull};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use flowlane_sys as sys;

use crate::control::timeout_ns;
use crate::engine::{Engine, InCallback};
use crate::error::{check, Error, ErrorKind, Result};

/// How an instruction or a wait accesses an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// Reads: ordered after the last earlier write.
    Read,
    /// Writes: ordered after every earlier read and write.
    Write,
    /// Both (ordered as a write).
    ReadWrite,
}

impl Access {
    pub(crate) fn raw(self) -> u32 {
        match self {
            Access::Read => sys::FL_READ,
            Access::Write => sys::FL_WRITE,
            Access::ReadWrite => sys::FL_READ_WRITE,
        }
    }
}

/// A shared handle to an object's value, for closures: `let h = obj.handle();` then
/// `move || { *h.write() += 1; Ok::<(), String>(()) }`.
///
/// The engine orders instructions by their declared operands, so the lock inside is
/// never contended when every access is declared; it keeps memory safe when one is not.
/// Locks ignore poisoning (a panicking instruction already fails and poisons the object
/// in the engine).
pub struct Handle<T> {
    cell: Arc<RwLock<T>>,
}

impl<T> Clone for Handle<T> {
    fn clone(&self) -> Self {
        Handle { cell: Arc::clone(&self.cell) }
    }
}

impl<T> Handle<T> {
    /// Read-locks the value (for the closures that declared a read).
    pub fn read(&self) -> RwLockReadGuard<'_, T> {
        self.cell.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Write-locks the value (for the closures that declared a write).
    pub fn write(&self) -> RwLockWriteGuard<'_, T> {
        self.cell.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Replaces the value, returning the old one.
    pub fn replace(&self, v: T) -> T {
        std::mem::replace(&mut *self.write(), v)
    }
}

impl<T: Clone> Handle<T> {
    /// A copy of the value.
    pub fn get(&self) -> T {
        self.read().clone()
    }
}

/// A dependence object holding a value of type `T`; keeps its engine alive.
///
/// Instructions declare it as an operand (`.read(&obj)`, `.write(&obj)`); the engine runs
/// reads after the last write and writes after every earlier access. From the program,
/// [`read`](Object::read)/[`get`](Object::get) wait for earlier writers and
/// [`write`](Object::write)/[`set`](Object::set) for every earlier access.
///
/// Dropping it releases the program's reference; the engine keeps the value (through its
/// own `Arc`) until the last instruction using the object completes, then drops it.
///
/// **Thread-safety:** `Send + Sync` when `T` is: waits and submissions naming it may come
/// from any thread; the release happens in `Drop`, which owns it.
pub struct Object<T> {
    raw: NonNull<sys::fl_object_t>,
    cell: Arc<RwLock<T>>,
    engine: Engine,
}

// SAFETY: fl_object_wait may be called from any thread; fl_object_release happens only in
// Drop (exclusive); the value is behind Arc<RwLock<T>>, which is Send + Sync for T: Send + Sync.
unsafe impl<T: Send + Sync> Send for Object<T> {}
// SAFETY: as for Send.
unsafe impl<T: Send + Sync> Sync for Object<T> {}

unsafe extern "C" fn release_value<T>(ud: *mut c_void) {
    let _cb = InCallback::enter();
    // The value's destructor may panic: keep the unwind out of C.
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: ud is the Box<Arc<RwLock<T>>> leaked in Object::new; the engine calls
        // release exactly once, so it is reclaimed exactly once.
        drop(unsafe { Box::from_raw(ud as *mut Arc<RwLock<T>>) });
    });
}

impl<T: Send + Sync + 'static> Object<T> {
    /// A dependence object of `engine` holding `value` (as [`Engine::object`]).
    pub fn new(engine: &Engine, value: T) -> Result<Object<T>> {
        let engine = engine.owning()?;
        let cell = Arc::new(RwLock::new(value));
        let ud = Box::into_raw(Box::new(Arc::clone(&cell)));
        let mut out: *mut sys::fl_object_t = ptr::null_mut();
        // SAFETY: the engine is live; ud is a valid pointer owned by the engine from here on
        // (release_value::<T> reclaims it), or by us if the call fails.
        let st = unsafe { sys::fl_object_create(engine.as_raw(), ud as *mut c_void, Some(release_value::<T>), &mut out) };
        if st != sys::FL_OK {
            let err = Error::last(st);
            // SAFETY: the call failed, so the engine never took ownership of ud.
            drop(unsafe { Box::from_raw(ud) });
            return Err(err);
        }
        let raw = NonNull::new(out).ok_or_else(|| Error::new(ErrorKind::Internal, "fl_object_create returned NULL"))?;
        Ok(Object { raw, cell, engine })
    }
}

impl<T> Object<T> {
    /// The C handle, for the raw API ([`crate::sys`]).
    pub fn as_raw(&self) -> *mut sys::fl_object_t {
        self.raw.as_ptr()
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// A handle to the value for instruction closures.
    pub fn handle(&self) -> Handle<T> {
        Handle { cell: Arc::clone(&self.cell) }
    }

    /// Blocks until the object may be accessed: `Read` waits for every earlier write,
    /// `Write`/`ReadWrite` also for every earlier read. Returns the failure
    /// (`InstructionFailed`/`DependencyFailed`, naming the instruction) while poisoned.
    pub fn wait(&self, access: Access) -> Result<()> {
        // SAFETY: the object is live (released only in Drop).
        check(unsafe { sys::fl_object_wait(self.raw.as_ptr(), access.raw()) })
    }

    /// [`wait`](Object::wait) for at most `timeout`: `Err` of kind `Timeout` (whose message
    /// names the pending instruction) if the object is not ready by then; nothing is
    /// consumed. `Duration::ZERO` polls.
    pub fn wait_for(&self, access: Access, timeout: std::time::Duration) -> Result<()> {
        // SAFETY: the object is live (released only in Drop).
        check(unsafe { sys::fl_object_wait_for(self.raw.as_ptr(), access.raw(), timeout_ns(timeout)) })
    }

    /// Waits for earlier writers, then read-locks the value.
    pub fn read(&self) -> Result<RwLockReadGuard<'_, T>> {
        self.wait(Access::Read)?;
        Ok(self.cell.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Waits for every earlier access, then write-locks the value.
    pub fn write(&self) -> Result<RwLockWriteGuard<'_, T>> {
        self.wait(Access::Write)?;
        Ok(self.cell.write().unwrap_or_else(|e| e.into_inner()))
    }

    /// Waits for earlier writers and replaces nothing: sets the value after every earlier
    /// access (a program-side write).
    pub fn set(&self, v: T) -> Result<()> {
        *self.write()? = v;
        Ok(())
    }
}

impl<T: Clone> Object<T> {
    /// Waits for earlier writers and returns a copy of the value.
    pub fn get(&self) -> Result<T> {
        Ok(self.read()?.clone())
    }
}

impl<T> Drop for Object<T> {
    fn drop(&mut self) {
        // SAFETY: the object is live (or stale, after a non-owning engine handle's engine was
        // destroyed, which the library detects) and this is its only release.
        unsafe { sys::fl_object_release(self.raw.as_ptr()) };
    }
}

impl<T> std::fmt::Debug for Object<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Object({:p})", self.raw.as_ptr())
    }
}

impl Engine {
    /// A dependence object holding `value`; see [`Object`].
    pub fn object<T: Send + Sync + 'static>(&self, value: T) -> Result<Object<T>> {
        Object::new(self, value)
    }

    /// An object with no value, used only to order instructions (fork/join).
    pub fn phony(&self) -> Result<Object<()>> {
        Object::new(self, ())
    }
}

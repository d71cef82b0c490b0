//! GPU and collective entry points. In a CPU-only build of the library they return
//! `ErrorKind::Unsupported`; the wrappers exist so code written against them runs
//! unchanged on a CUDA build. Raw device pointers make the submit calls `unsafe`.

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::{self, NonNull};

use flowlane_sys as sys;

use crate::engine::{cstring, Device, Engine, InCallback, Stream, StreamKind};
use crate::error::{check, Error, ErrorKind, Result};
use crate::instr::{c_message, drop_payload, panic_message};
use crate::object::{Access, Object};

/// Number of visible CUDA devices (`Unsupported` in a CPU-only build).
pub fn cuda_device_count() -> Result<i32> {
    let mut n = 0i32;
    // SAFETY: n is a valid out pointer.
    check(unsafe { sys::fl_cuda_device_count(&mut n) })?;
    Ok(n)
}

/// (least, greatest) stream priority of a device (lower number = higher priority).
pub fn cuda_priority_range(device: i32) -> Result<(i32, i32)> {
    let (mut least, mut greatest) = (0i32, 0i32);
    // SAFETY: both out pointers are valid.
    check(unsafe { sys::fl_cuda_priority_range(device, &mut least, &mut greatest) })?;
    Ok((least, greatest))
}

/// Operands for GPU instructions (the objects they read and write).
#[derive(Default)]
pub struct Operands {
    ops: Vec<sys::fl_operand_t>,
}

impl Operands {
    /// No operands.
    pub fn new() -> Self {
        Operands::default()
    }
    /// Adds an access to `o`.
    pub fn access<T>(mut self, o: &Object<T>, a: Access) -> Self {
        self.ops.push(sys::fl_operand_t { object: o.as_raw(), access: a.raw(), reserved: 0 });
        self
    }
    /// Adds a read of `o`.
    pub fn read<T>(self, o: &Object<T>) -> Self {
        self.access(o, Access::Read)
    }
    /// Adds a write of `o`.
    pub fn write<T>(self, o: &Object<T>) -> Self {
        self.access(o, Access::Write)
    }
    fn ptr(&self) -> *const sys::fl_operand_t {
        if self.ops.is_empty() {
            ptr::null()
        } else {
            self.ops.as_ptr()
        }
    }
}

fn name_ptr(name: &Option<std::ffi::CString>) -> *const std::os::raw::c_char {
    name.as_ref().map_or(ptr::null(), |c| c.as_ptr())
}

impl Stream {
    /// Launches a `__global__` function (its host-side handle) with argument bytes copied
    /// at submit: `args[i]` is the bytes of argument i.
    ///
    /// # Safety
    /// `func` must be a kernel handle whose parameters match `args`; any device pointers in
    /// `args` must stay valid until the kernel has run (order that through operands).
    #[allow(clippy::too_many_arguments)] // the fields of fl_kernel_instr_t
    pub unsafe fn submit_kernel(
        &self,
        func: *const c_void,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_mem_bytes: u64,
        args: &[&[u8]],
        operands: &Operands,
        name: Option<&str>,
    ) -> Result<u64> {
        let cname = name.map(cstring).transpose()?;
        let ptrs: Vec<*const c_void> = args.iter().map(|a| a.as_ptr() as *const c_void).collect();
        let sizes: Vec<u64> = args.iter().map(|a| a.len() as u64).collect();
        let mut instr = sys::fl_kernel_instr_t::init();
        instr.func = func;
        instr.grid = sys::fl_dim3_t { x: grid.0, y: grid.1, z: grid.2 };
        instr.block = sys::fl_dim3_t { x: block.0, y: block.1, z: block.2 };
        instr.shared_mem_bytes = shared_mem_bytes;
        instr.args = if ptrs.is_empty() { ptr::null() } else { ptrs.as_ptr() };
        instr.arg_sizes = if sizes.is_empty() { ptr::null() } else { sizes.as_ptr() };
        instr.num_args = args.len() as u64;
        instr.operands = operands.ptr();
        instr.num_operands = operands.ops.len() as u64;
        instr.name = name_ptr(&cname);
        let mut id = 0u64;
        // SAFETY: every pointer in instr refers to buffers alive across the call (copied by
        // C); the caller guarantees the kernel/argument contract.
        check(unsafe { sys::fl_submit_kernel(self.as_raw(), &instr, &mut id) })?;
        Ok(id)
    }

    /// Copies or sets device/host memory (`kind`: `sys::FL_MEMCPY_*` or `FL_MEMSET`, with
    /// `value` the byte for memset).
    ///
    /// # Safety
    /// `dst`/`src` must be valid for `bytes` until the instruction completes.
    #[allow(clippy::too_many_arguments)] // the fields of fl_memcpy_instr_t
    pub unsafe fn submit_memcpy(
        &self,
        kind: sys::fl_memcpy_kind_t,
        dst: *mut c_void,
        src: *const c_void,
        bytes: u64,
        value: u8,
        operands: &Operands,
        name: Option<&str>,
    ) -> Result<u64> {
        let cname = name.map(cstring).transpose()?;
        let mut instr = sys::fl_memcpy_instr_t::init();
        instr.kind = kind;
        instr.value = value as u32;
        instr.dst = dst;
        instr.src = src;
        instr.bytes = bytes;
        instr.operands = operands.ptr();
        instr.num_operands = operands.ops.len() as u64;
        instr.name = name_ptr(&cname);
        let mut id = 0u64;
        // SAFETY: instr's pointers are alive across the call; the caller guarantees dst/src.
        check(unsafe { sys::fl_submit_memcpy(self.as_raw(), &instr, &mut id) })?;
        Ok(id)
    }

    /// Submits `f(cuda_stream)`, which may enqueue any GPU work on that stream. Errors and
    /// panics fail the instruction as for host instructions. `f` is called at most once; it
    /// and everything it captured are dropped only after the GPU work it enqueued has
    /// completed (or when the instruction is skipped, or here if submission fails), so a
    /// capture may own memory that work uses. (Hence `FnMut` rather than `FnOnce`: calling
    /// an `FnOnce` would drop its captures as soon as it returned, while the work is queued.)
    pub fn submit_device<F, E>(&self, operands: &Operands, name: Option<&str>, f: F) -> Result<u64>
    where
        F: FnMut(*mut c_void) -> std::result::Result<(), E> + Send + 'static,
        E: std::fmt::Display,
    {
        type Boxed = Box<dyn FnMut(*mut c_void) -> std::result::Result<(), String> + Send>;
        struct DeviceFn {
            f: Boxed,
            called: bool,
        }
        unsafe extern "C" fn tramp(ctx: *mut sys::fl_instr_ctx_t, s: *mut c_void, ud: *mut c_void) -> sys::fl_status_t {
            let _cb = InCallback::enter();
            // SAFETY: ud is the DeviceFn submitted below; the engine calls fn at most once,
            // before cleanup, so this is the only access now.
            let slot = unsafe { &mut *(ud as *mut DeviceFn) };
            if slot.called {
                return sys::FL_ERR_INTERNAL;
            }
            slot.called = true;
            let msg = match catch_unwind(AssertUnwindSafe(|| (slot.f)(s))) {
                Ok(Ok(())) => return sys::FL_OK,
                Ok(Err(m)) => m,
                Err(p) => {
                    let m = format!("panicked: {}", panic_message(&*p));
                    drop_payload(p);
                    m
                }
            };
            let c = c_message(&msg);
            // SAFETY: ctx is live during fn; the message is copied.
            unsafe { sys::fl_instr_set_error(ctx, c.as_ptr()) };
            sys::FL_ERR_INSTRUCTION_FAILED
        }
        unsafe extern "C" fn cleanup(ud: *mut c_void) {
            let _cb = InCallback::enter();
            // SAFETY: cleanup runs exactly once per successful submit, after the GPU work fn
            // enqueued has completed (or instead of fn), and reclaims the box with f.
            let _ = catch_unwind(|| drop(unsafe { Box::from_raw(ud as *mut DeviceFn) }));
        }
        let cname = name.map(cstring).transpose()?;
        let mut f = f;
        let boxed: Boxed = Box::new(move |s| f(s).map_err(|e| e.to_string()));
        let ud = Box::into_raw(Box::new(DeviceFn { f: boxed, called: false }));
        let mut instr = sys::fl_device_instr_t::init();
        instr.fn_ = Some(tramp);
        instr.user_data = ud as *mut c_void;
        instr.cleanup = Some(cleanup);
        instr.operands = operands.ptr();
        instr.num_operands = operands.ops.len() as u64;
        instr.name = name_ptr(&cname);
        let mut id = 0u64;
        // SAFETY: instr and its buffers are alive across the call; ud belongs to the engine
        // on success.
        let st = unsafe { sys::fl_submit_device(self.as_raw(), &instr, &mut id) };
        if st != sys::FL_OK {
            let err = Error::last(st);
            // SAFETY: on failure neither fn nor cleanup runs: the box is ours again.
            drop(unsafe { Box::from_raw(ud) });
            return Err(err);
        }
        Ok(id)
    }
}

/// Page-locked host memory (`fl_host_alloc_pinned`), freed on drop.
///
/// **Thread-safety:** `Send + Sync` like a `Box<[u8]>`.
pub struct PinnedBuffer {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the buffer is plain memory exclusively owned by this value.
unsafe impl Send for PinnedBuffer {}
// SAFETY: shared access only hands out &[u8].
unsafe impl Sync for PinnedBuffer {}

impl PinnedBuffer {
    /// Allocates `len` bytes of page-locked memory (`Unsupported` in a CPU-only build).
    pub fn new(len: usize) -> Result<PinnedBuffer> {
        let mut p: *mut c_void = ptr::null_mut();
        // SAFETY: p is a valid out pointer.
        check(unsafe { sys::fl_host_alloc_pinned(len as u64, &mut p) })?;
        let ptr = NonNull::new(p as *mut u8)
            .ok_or_else(|| Error::new(ErrorKind::Internal, "fl_host_alloc_pinned returned NULL"))?;
        Ok(PinnedBuffer { ptr, len })
    }
    /// The buffer's address.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
    /// Its size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// True for a zero-byte buffer.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for len bytes for the buffer's lifetime.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
    /// The bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: ptr is valid for len bytes; &mut self gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        // SAFETY: ptr came from fl_host_alloc_pinned and is freed once.
        unsafe { sys::fl_host_free_pinned(self.ptr.as_ptr() as *mut c_void) };
    }
}

/// A communicator's backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommBackend {
    /// NCCL over CUDA devices (CUDA builds).
    Nccl,
    /// Host-memory communicator for ranks inside one process.
    HostFake,
}

impl CommBackend {
    fn raw(self) -> u32 {
        match self {
            CommBackend::Nccl => sys::FL_COMM_NCCL,
            CommBackend::HostFake => sys::FL_COMM_HOST_FAKE,
        }
    }
}

/// The rendezvous id shared by a communicator's ranks (128 opaque bytes).
#[derive(Clone, Copy)]
pub struct CommUniqueId(pub sys::fl_comm_unique_id_t);

impl CommUniqueId {
    /// A fresh id from the backend (rank 0 makes it and shares its bytes).
    pub fn new(backend: CommBackend) -> Result<CommUniqueId> {
        let mut id = sys::fl_comm_unique_id_t::default();
        // SAFETY: id is a valid out pointer.
        check(unsafe { sys::fl_comm_get_unique_id(backend.raw(), &mut id) })?;
        Ok(CommUniqueId(id))
    }
}

/// A communicator; its collectives go through one lane's COLLECTIVE stream in submission
/// order. Keeps its engine alive.
///
/// **Thread-safety:** `Send + Sync`: submission is ordered by the engine's stream.
pub struct Comm {
    raw: NonNull<sys::fl_comm_t>,
    lane: u32,
    device: Device,
    engine: Engine,
}

// SAFETY: fl_submit_collective may be called from any thread; destroy happens in Drop.
unsafe impl Send for Comm {}
// SAFETY: as for Send.
unsafe impl Sync for Comm {}

impl Comm {
    /// A rank of a communicator. Its NCCL collectives are issued in the engine's one
    /// collective order (across communicators and lanes).
    pub fn new(
        engine: &Engine,
        nranks: u64,
        rank: u64,
        id: &CommUniqueId,
        lane: u32,
        device: u32,
        backend: CommBackend,
    ) -> Result<Comm> {
        Self::create(engine, nranks, rank, id, lane, device, backend, 0)
    }

    /// As [`Comm::new`], with `FL_COMM_UNORDERED`: its collectives stay out of the engine's
    /// collective order, and the caller keeps the ranks' issue order consistent.
    pub fn new_unordered(
        engine: &Engine,
        nranks: u64,
        rank: u64,
        id: &CommUniqueId,
        lane: u32,
        device: u32,
        backend: CommBackend,
    ) -> Result<Comm> {
        Self::create(engine, nranks, rank, id, lane, device, backend, sys::FL_COMM_UNORDERED)
    }

    #[allow(clippy::too_many_arguments)]
    fn create(
        engine: &Engine,
        nranks: u64,
        rank: u64,
        id: &CommUniqueId,
        lane: u32,
        device: u32,
        backend: CommBackend,
        flags: u64,
    ) -> Result<Comm> {
        let mut d = sys::fl_comm_desc_t::init();
        d.flags = flags;
        d.nranks = nranks;
        d.rank = rank;
        d.device = device as u64;
        d.lane = lane as u64;
        d.backend = backend.raw() as u64;
        let engine = engine.owning()?;
        let mut out: *mut sys::fl_comm_t = ptr::null_mut();
        // SAFETY: engine is live; d and id are valid; out is a valid out pointer.
        check(unsafe { sys::fl_comm_create(engine.as_raw(), &d, &id.0, &mut out) })?;
        let raw = NonNull::new(out).ok_or_else(|| Error::new(ErrorKind::Internal, "fl_comm_create returned NULL"))?;
        let device = if backend == CommBackend::HostFake { Device::Cpu } else { Device::Cuda(device as i32) };
        Ok(Comm { raw, lane, device, engine })
    }

    /// Writes this rank's communicator dump (JSON, for `flowlane-comm-analyze`): to `path`,
    /// or with `None` to its file in `FLOWLANE_COMM_DUMP_DIR` (`fl_comm_dump`).
    pub fn dump(&self, path: Option<&std::path::Path>) -> Result<()> {
        let p = path.map(|p| cstring(&p.to_string_lossy())).transpose()?;
        let at = p.as_ref().map_or(ptr::null(), |c| c.as_ptr());
        // SAFETY: the comm is live; `at` is NULL or a NUL-terminated string alive across the call.
        check(unsafe { sys::fl_comm_dump(self.raw.as_ptr(), at) })
    }

    /// The COLLECTIVE stream this communicator issues on.
    pub fn stream(&self) -> Result<Stream> {
        self.engine.stream_on(self.lane, self.device, StreamKind::Collective)
    }

    /// Issues `parts` as one group.
    ///
    /// # Safety
    /// Every buffer in `parts` must be valid for its count and dtype until the collective
    /// completes (order that through `operands`).
    pub unsafe fn submit(
        &self,
        stream: &Stream,
        parts: &[sys::fl_coll_part_t],
        operands: &Operands,
        name: Option<&str>,
    ) -> Result<u64> {
        let cname = name.map(cstring).transpose()?;
        let mut instr = sys::fl_collective_instr_t::init();
        instr.parts = if parts.is_empty() { ptr::null() } else { parts.as_ptr() };
        instr.num_parts = parts.len() as u64;
        instr.operands = operands.ptr();
        instr.num_operands = operands.ops.len() as u64;
        instr.name = name_ptr(&cname);
        let mut id = 0u64;
        // SAFETY: instr's buffers are alive across the call; the caller guarantees parts.
        check(unsafe { sys::fl_submit_collective(stream.as_raw(), self.raw.as_ptr(), &instr, &mut id) })?;
        Ok(id)
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        // SAFETY: the comm is live and destroyed once.
        unsafe { sys::fl_comm_destroy(self.raw.as_ptr()) };
    }
}

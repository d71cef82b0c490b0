//! The GPU wrappers (kernels with argument bytes, device functions receiving the CUDA
//! stream, memcpy/memset, CUDA streams, priorities, pinned buffers) against the fake CUDA
//! runtime of tests/gpu/fake/fake_cudart.cpp, on a machine without a GPU: the wrappers'
//! marshaling really runs, which a CPU-only library (everything `Unsupported`) never shows.
//!
//! Needs the CUDA build of libflowlane and the fake loaded ahead of libcudart; the tests
//! skip (pass, with a note on stderr) unless `FLOWLANE_FAKE_CUDART` is set:
//!
//! ```text
//! cd bindings/rust
//! FLOWLANE_LIB_DIR=$PWD/../../build-gpu/capi LD_LIBRARY_PATH=$PWD/../../build-gpu/capi \
//! FLOWLANE_FAKE_CUDART=1 LD_PRELOAD=$PWD/../../build-gpu/tests/libflowlane_fake_cudart.so \
//!   cargo test --offline --test fake_gpu
//! ```
//!
//! A "kernel" of the fake is a [`FakeKernel`] descriptor passed as the function pointer:
//! the fake copies `sizes[i]` bytes of argument i at launch and calls `run` on the fake
//! stream's thread. "Device memory" is host memory. The fake's error state is global to
//! the process (a fault is sticky), so the tests here run one at a time (see [`fake`]).
//! Passing says the Rust wrappers and flowlane's side of the CUDA contract hold together;
//! it says nothing about real GPUs.

use std::ffi::{c_void, CString};
use std::mem::size_of;
use std::os::raw::c_char;
use std::sync::atomic::{AtomicI32, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use flowlane::{sys, Access, Device, Engine, ErrorKind, Operands, PinnedBuffer, Stream, StreamKind};

// --- the fake's kernel descriptor and a few kernels -----------------------------------

/// `fake::Kernel` of tests/gpu/fake/fake_kernel.hpp.
#[repr(C)]
struct FakeKernel {
    nargs: i32,
    sizes: [usize; 8],
    /// Non-zero: an asynchronous fault (the fake's sticky cudaErrorIllegalAddress).
    run: extern "C" fn(*const *const c_void) -> i32,
}

/// Argument `k` of a running fake kernel, as a `T` (the fake copied exactly its bytes).
///
/// # Safety
/// `args` is the fake's argument array and argument `k` has `size_of::<T>()` bytes.
unsafe fn arg<T: Copy>(args: *const *const c_void, k: usize) -> T {
    // SAFETY: per the contract above; the fake's copies need not be aligned for T.
    unsafe { std::ptr::read_unaligned(*args.add(k) as *const T) }
}

/// `*dst += v` (dst: `*const AtomicI32`, v: i32) as a load and a separate store, so that
/// two launches the engine failed to order would lose an update.
extern "C" fn run_add(args: *const *const c_void) -> i32 {
    // SAFETY: the launches below pass (pointer to a live AtomicI32, i32).
    unsafe {
        let dst: *const AtomicI32 = arg(args, 0);
        let v: i32 = arg(args, 1);
        let old = (*dst).load(Ordering::Relaxed);
        (*dst).store(old.wrapping_add(v), Ordering::Relaxed);
    }
    0
}
static ADD: FakeKernel = FakeKernel { nargs: 2, sizes: [8, 4, 0, 0, 0, 0, 0, 0], run: run_add };

const MIX_MOD: i64 = 1_000_003;

/// `*dst = (*dst * 31 + c) mod 1000003`: not commutative, so the result depends on the
/// launches running in submission order and each seeing its own `c`.
extern "C" fn run_mix(args: *const *const c_void) -> i32 {
    // SAFETY: the launches below pass (pointer to a live AtomicI64, i32).
    unsafe {
        let dst: *const AtomicI64 = arg(args, 0);
        let c: i32 = arg(args, 1);
        let old = (*dst).load(Ordering::Relaxed);
        (*dst).store((old * 31 + c as i64) % MIX_MOD, Ordering::Relaxed);
    }
    0
}
static MIX: FakeKernel = FakeKernel { nargs: 2, sizes: [8, 4, 0, 0, 0, 0, 0, 0], run: run_mix };

/// Arguments of odd sizes: `*dst = a * x + b + sum(blob) + tail`
/// (dst: `*const AtomicI64`, a: i64, x: i32, b: u8, blob: [u32; 5], tail: u16).
extern "C" fn run_affine(args: *const *const c_void) -> i32 {
    // SAFETY: the launches below pass exactly these six arguments.
    unsafe {
        let dst: *const AtomicI64 = arg(args, 0);
        let a: i64 = arg(args, 1);
        let x: i32 = arg(args, 2);
        let b: u8 = arg(args, 3);
        let blob: [u32; 5] = arg(args, 4);
        let tail: u16 = arg(args, 5);
        let sum: i64 = blob.iter().map(|&v| v as i64).sum();
        (*dst).store(a * x as i64 + b as i64 + sum + tail as i64, Ordering::Relaxed);
    }
    0
}
static AFFINE: FakeKernel = FakeKernel { nargs: 6, sizes: [8, 8, 4, 1, 20, 2, 0, 0], run: run_affine };

/// Sleeps `ms` (i64), then sets `*flag = 1` (flag: `*const AtomicI32`): GPU work that
/// visibly completes later than it was enqueued.
extern "C" fn run_sleep_set(args: *const *const c_void) -> i32 {
    // SAFETY: the launches below pass (pointer to a live AtomicI32, i64).
    unsafe {
        let flag: *const AtomicI32 = arg(args, 0);
        let ms: i64 = arg(args, 1);
        std::thread::sleep(Duration::from_millis(ms as u64));
        (*flag).store(1, Ordering::SeqCst);
    }
    0
}
static SLEEP_SET: FakeKernel = FakeKernel { nargs: 2, sizes: [8, 8, 0, 0, 0, 0, 0, 0], run: run_sleep_set };

/// An illegal memory access, as far as the fake is concerned.
extern "C" fn run_fault(_args: *const *const c_void) -> i32 {
    1
}
static FAULT: FakeKernel = FakeKernel { nargs: 0, sizes: [0; 8], run: run_fault };

fn bytes_of<T: Copy>(v: &T) -> &[u8] {
    // SAFETY: v is a live T of size_of::<T>() bytes; the types used here have no padding.
    unsafe { std::slice::from_raw_parts(v as *const T as *const u8, size_of::<T>()) }
}

/// `Stream::submit_kernel` of a fake kernel (grid 1, block `block` threads), checking first
/// that the argument bytes match the descriptor, so that a test mistake cannot let the fake
/// read past an argument.
///
/// # Safety
/// Every pointer in `args` must stay valid until the kernel has run (by operands or drain).
unsafe fn launch(
    s: &Stream,
    k: &'static FakeKernel,
    args: &[&[u8]],
    ops: &Operands,
    name: &str,
    block: u32,
) -> flowlane::Result<u64> {
    assert_eq!(args.len(), k.nargs as usize, "{}: argument count", name);
    for (i, a) in args.iter().enumerate() {
        assert_eq!(a.len(), k.sizes[i], "{}: size of argument {}", name, i);
    }
    // SAFETY: func is a FakeKernel, which is what the fake runtime takes as a kernel;
    // arguments match it (checked above); the caller keeps the pointers alive.
    unsafe {
        s.submit_kernel(k as *const FakeKernel as *const c_void, (1, 1, 1), (block, 1, 1), 0, args, ops, Some(name))
    }
}

/// A raw pointer moved into an instruction closure; the test orders every access to
/// what it points at through operands.
#[derive(Clone, Copy)]
struct SendPtr(*mut u8);
// SAFETY: see the type's doc: the pointee outlives the instructions and accesses are ordered.
unsafe impl Send for SendPtr {}

// --- the fake runtime, found at run time ------------------------------------------------

extern "C" {
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}
const RTLD_DEFAULT: *mut c_void = std::ptr::null_mut();

/// The address of `name` in the process (the fake, when it is preloaded), or NULL.
fn symbol(name: &str) -> *mut c_void {
    let c = CString::new(name).expect("symbol name");
    // SAFETY: c is NUL-terminated; RTLD_DEFAULT searches the global scope.
    unsafe { dlsym(RTLD_DEFAULT, c.as_ptr()) }
}

/// `dim3`.
#[repr(C)]
#[derive(Clone, Copy)]
struct Dim3 {
    x: u32,
    y: u32,
    z: u32,
}

type LaunchKernelFn = unsafe extern "C" fn(*const c_void, Dim3, Dim3, *mut *mut c_void, usize, *mut c_void) -> i32;
type MemsetAsyncFn = unsafe extern "C" fn(*mut c_void, i32, usize, *mut c_void) -> i32;

/// The CUDA runtime calls a device function makes on the stream it is handed.
#[derive(Clone, Copy)]
struct Cudart {
    launch_kernel: LaunchKernelFn,
    memset_async: MemsetAsyncFn,
}

impl Cudart {
    fn load() -> Cudart {
        let (l, m) = (symbol("cudaLaunchKernel"), symbol("cudaMemsetAsync"));
        assert!(!l.is_null() && !m.is_null(), "cudaLaunchKernel/cudaMemsetAsync not found in the process");
        // SAFETY: both are the CUDA runtime functions of these signatures (the fake's, as
        // fake() checked that it is loaded ahead of libcudart).
        unsafe {
            Cudart {
                launch_kernel: std::mem::transmute::<*mut c_void, LaunchKernelFn>(l),
                memset_async: std::mem::transmute::<*mut c_void, MemsetAsyncFn>(m),
            }
        }
    }
}

static SERIAL: Mutex<()> = Mutex::new(());

/// None (the test is skipped) unless FLOWLANE_FAKE_CUDART is set; then checks that the
/// fake really is what libflowlane talks to and returns a guard that runs the tests one at
/// a time: the fake's sticky fault is process-wide and would fail a neighbour's work.
fn fake(test: &str) -> Option<MutexGuard<'static, ()>> {
    if std::env::var_os("FLOWLANE_FAKE_CUDART").is_none() {
        eprintln!(
            "fake_gpu::{}: skipped: set FLOWLANE_FAKE_CUDART=1 with LD_PRELOAD=<build-gpu>/tests/libflowlane_fake_cudart.so \
             and a CUDA build of libflowlane to run it",
            test
        );
        return None;
    }
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(
        !symbol("fake_cudart_reset_sticky").is_null(),
        "FLOWLANE_FAKE_CUDART is set but the fake CUDA runtime is not loaded: run with \
         LD_PRELOAD=<build-gpu>/tests/libflowlane_fake_cudart.so"
    );
    match flowlane::cuda_device_count() {
        Ok(1) => {}
        other => panic!(
            "FLOWLANE_FAKE_CUDART is set, so the fake CUDA runtime (one device) should be loaded, but \
             cuda_device_count() = {:?}: is libflowlane the CUDA build (FLOWLANE_LIB_DIR=<build-gpu>/capi) \
             and the fake preloaded (LD_PRELOAD=<build-gpu>/tests/libflowlane_fake_cudart.so)?",
            other
        ),
    }
    Some(guard)
}

/// Clears the fake's sticky fault when dropped (also when an assertion failed before).
struct ResetSticky;
impl Drop for ResetSticky {
    fn drop(&mut self) {
        let p = symbol("fake_cudart_reset_sticky");
        if !p.is_null() {
            // SAFETY: fake_cudart_reset_sticky is `void (void)` in the fake.
            unsafe { std::mem::transmute::<*mut c_void, extern "C" fn()>(p)() };
        }
    }
}

fn engine() -> Engine {
    Engine::builder().workers(2).build().expect("engine")
}

fn gpu(e: &Engine, lane: u32, kind: StreamKind) -> Stream {
    e.stream_on(lane, Device::cuda(0), kind).expect("a CUDA stream")
}

/// Counts drops, recording what `flag` held at the drop.
struct DropProbe {
    drops: Arc<AtomicUsize>,
    flag: Arc<AtomicI32>,
    seen: Arc<AtomicI32>,
}
impl Drop for DropProbe {
    fn drop(&mut self) {
        self.seen.store(self.flag.load(Ordering::SeqCst), Ordering::SeqCst);
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

// --- (1) kernels ------------------------------------------------------------------------

#[test]
fn kernel_arguments_of_every_size_arrive_as_submitted() -> flowlane::Result<()> {
    let _g = match fake("kernel_arguments_of_every_size_arrive_as_submitted") {
        Some(g) => g,
        None => return Ok(()),
    };
    let sum = Box::new(AtomicI32::new(10));
    let out = Box::new(AtomicI64::new(-1));
    let e = engine();
    let o = e.phony()?;
    let s = gpu(&e, 1, StreamKind::Compute);
    let psum: *const AtomicI32 = &*sum;
    let pout: *const AtomicI64 = &*out;
    let v: i32 = 32;
    // SAFETY: sum and out outlive the engine (declared before it); o orders the launches.
    unsafe {
        launch(&s, &ADD, &[bytes_of(&psum), bytes_of(&v)], &Operands::new().access(&o, Access::ReadWrite), "add", 1)?;
        let (a, x, b, blob, tail) = (-7_000_000_000i64, 3i32, 200u8, [1u32, 20, 300, 4000, 50000], 65535u16);
        launch(
            &s,
            &AFFINE,
            &[bytes_of(&pout), bytes_of(&a), bytes_of(&x), bytes_of(&b), bytes_of(&blob), bytes_of(&tail)],
            &Operands::new().write(&o),
            "affine",
            1024, // the fake's largest block
        )?;
    }
    o.wait(Access::Read)?;
    assert_eq!(sum.load(Ordering::SeqCst), 42);
    assert_eq!(out.load(Ordering::SeqCst), -21_000_000_000 + 200 + 54321 + 65535);
    // The submit-time checks of the wrapper's descriptor, before anything runs.
    // SAFETY: each of these is refused at submit; nothing runs.
    unsafe {
        let err =
            launch(&e.stream(1)?, &ADD, &[bytes_of(&psum), bytes_of(&v)], &Operands::new(), "on-host", 1).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{}", err);
        assert!(err.message().contains("not a CUDA stream"), "{}", err);
        let err = s.submit_kernel(std::ptr::null(), (1, 1, 1), (1, 1, 1), 0, &[], &Operands::new(), None).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{}", err);
        assert!(err.message().contains("func is NULL"), "{}", err);
        let f = &ADD as *const FakeKernel as *const c_void;
        let err =
            s.submit_kernel(f, (1, 1, 1), (1, 1, 1), 0, &[bytes_of(&psum), &[]], &Operands::new(), None).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{}", err);
        assert!(err.message().contains("argument 1"), "{}", err);
        let big = vec![0u8; 40_000];
        let err = s.submit_kernel(f, (1, 1, 1), (1, 1, 1), 0, &[&big[..]], &Operands::new(), None).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::OutOfRange, "{}", err);
        let err = s.submit_kernel(f, (1, 1, 1), (1, 1, 1), 0, &[], &Operands::new(), Some("a\0b")).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{}", err);
    }
    e.synchronize()?;
    assert_eq!(sum.load(Ordering::SeqCst), 42, "a refused launch ran");
    Ok(())
}

#[test]
fn a_chain_of_1000_kernels_over_two_lanes_and_two_stream_kinds() -> flowlane::Result<()> {
    let _g = match fake("a_chain_of_1000_kernels_over_two_lanes_and_two_stream_kinds") {
        Some(g) => g,
        None => return Ok(()),
    };
    let mix = Box::new(AtomicI64::new(1));
    let total = Box::new(AtomicI32::new(0));
    let e = engine();
    let o = e.phony()?;
    let t = e.phony()?;
    let (pmix, ptotal): (*const AtomicI64, *const AtomicI32) = (&*mix, &*total);
    let mut model = 1i64;
    let mut expected_total = 0i32;
    // One argument buffer reused by every launch: each kernel must see the bytes it was
    // submitted with (copied at submit), not the buffer's last value.
    let mut c = [0u8; 4];
    for k in 0..1000u32 {
        let lane = 1 + k % 2;
        let kind = if k % 4 < 2 { StreamKind::Compute } else { StreamKind::H2D };
        let s = gpu(&e, lane, kind);
        let ci = (k as i32 * 7919) % 10007;
        c.copy_from_slice(&ci.to_ne_bytes());
        model = (model * 31 + ci as i64) % MIX_MOD;
        expected_total += k as i32 + 1;
        let add = (k as i32 + 1).to_ne_bytes();
        // SAFETY: mix and total outlive the engine; o and t order the launches.
        unsafe {
            launch(&s, &MIX, &[bytes_of(&pmix), &c], &Operands::new().access(&o, Access::ReadWrite), "mix", 32)?;
            launch(&s, &ADD, &[bytes_of(&ptotal), &add], &Operands::new().access(&t, Access::ReadWrite), "add", 32)?;
        }
        c = [0xff; 4];
    }
    // Waiting for the objects alone waits for their GPU writers.
    o.wait(Access::Read)?;
    assert_eq!(mix.load(Ordering::SeqCst), model, "launches out of order or with the wrong bytes");
    t.wait(Access::Read)?;
    assert_eq!(total.load(Ordering::SeqCst), expected_total);
    assert_eq!(expected_total, 500_500);
    e.synchronize()?;
    let st = e.stats()?;
    assert_eq!(st.submitted, 2000);
    assert_eq!(st.completed, 2000);
    assert_eq!(st.failed, 0);
    assert_eq!(st.in_flight, 0);
    // The four streams are distinct and report what they are.
    let mut seen = std::collections::HashSet::new();
    for lane in 1..=2 {
        for kind in [StreamKind::Compute, StreamKind::H2D] {
            let s = gpu(&e, lane, kind);
            assert_eq!(s.info()?, (lane, Device::Cuda(0), kind));
            assert!(seen.insert(s));
        }
    }
    Ok(())
}

// --- (2) device functions ----------------------------------------------------------------

#[test]
fn a_device_function_gets_its_cuda_stream_runs_once_and_is_dropped_after_its_gpu_work() -> flowlane::Result<()> {
    let _g = match fake("a_device_function_gets_its_cuda_stream_runs_once_and_is_dropped_after_its_gpu_work") {
        Some(g) => g,
        None => return Ok(()),
    };
    let cuda = Cudart::load();
    let mut dev = vec![0u8; 4096]; // "device memory"
    let flag = Arc::new(AtomicI32::new(0));
    let e = engine();
    let od = e.phony()?;
    let calls = Arc::new(AtomicUsize::new(0));
    let streams: Arc<Mutex<Vec<usize>>> = Arc::default();
    let (drops, seen) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicI32::new(-1)));
    let probe = DropProbe { drops: drops.clone(), flag: flag.clone(), seen: seen.clone() };
    let s = gpu(&e, 1, StreamKind::Compute);
    let pdev = SendPtr(dev.as_mut_ptr());
    let (c, st, fl) = (calls.clone(), streams.clone(), flag.clone());
    s.submit_device(&Operands::new().write(&od), Some("dev-fn"), move |stream| {
        let _keep = &probe; // dropped with the closure
        c.fetch_add(1, Ordering::SeqCst);
        st.lock().unwrap().push(stream as usize);
        if stream.is_null() {
            return Err("a NULL cuda stream".to_string());
        }
        let pdev = pdev;
        // SAFETY: dev outlives the engine; od orders its readers after this work completes.
        let r = unsafe { (cuda.memset_async)(pdev.0 as *mut c_void, 7, 4096, stream) };
        if r != 0 {
            return Err(format!("cudaMemsetAsync: {}", r));
        }
        let pflag: *const AtomicI32 = &*fl;
        let ms = 50i64;
        let mut args = [&pflag as *const _ as *mut c_void, &ms as *const i64 as *mut c_void];
        let one = Dim3 { x: 1, y: 1, z: 1 };
        let k = &SLEEP_SET as *const FakeKernel as *const c_void;
        // SAFETY: SLEEP_SET takes (pointer, i64); flag is kept alive by the probe's Arc.
        let r = unsafe { (cuda.launch_kernel)(k, one, one, args.as_mut_ptr(), 0, stream) };
        if r != 0 {
            return Err(format!("cudaLaunchKernel: {}", r));
        }
        Ok::<(), String>(())
    })?;
    // A host reader of od runs only after the device function's GPU work completed.
    let checked = e.object(String::new())?;
    let hc = checked.handle();
    let (pdev2, fl2) = (SendPtr(dev.as_mut_ptr()), flag.clone());
    e.stream(2)?.instr().name("host-reader").read(&od).write(&checked).submit(move || {
        let pdev2 = pdev2;
        // SAFETY: dev outlives the engine; od orders this read after the memset.
        let d = unsafe { std::slice::from_raw_parts(pdev2.0 as *const u8, 4096) };
        *hc.write() = format!("flag={} all7={}", fl2.load(Ordering::SeqCst), d.iter().all(|&b| b == 7));
        Ok::<(), String>(())
    })?;
    assert_eq!(checked.get()?, "flag=1 all7=true");
    e.synchronize()?;
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the device function ran {} times", calls.load(Ordering::SeqCst));
    assert_eq!(
        drops.load(Ordering::SeqCst),
        1,
        "the device closure was dropped {} times",
        drops.load(Ordering::SeqCst)
    );
    assert_eq!(seen.load(Ordering::SeqCst), 1, "the device closure was dropped before its GPU work completed");

    // The same flowlane stream hands the same CUDA stream again; another kind another one.
    for (name, lane, kind) in
        [("again", 1, StreamKind::Compute), ("d2h", 1, StreamKind::D2H), ("lane3", 3, StreamKind::Compute)]
    {
        let st = streams.clone();
        gpu(&e, lane, kind).submit_device(&Operands::new(), Some(name), move |stream| {
            st.lock().unwrap().push(stream as usize);
            Ok::<(), String>(())
        })?;
    }
    e.synchronize()?;
    let v = streams.lock().unwrap().clone();
    assert_eq!(v.len(), 4, "{:?}", v);
    assert!(v.iter().all(|&p| p != 0), "{:?}", v);
    assert_eq!(v[0], v[1], "one flowlane stream, two CUDA streams: {:?}", v);
    assert!(v[2] != v[0] && v[3] != v[0] && v[2] != v[3], "{:?}", v);
    drop((od, checked));
    drop(e);
    drop(dev);
    Ok(())
}

#[test]
fn device_function_errors_panics_and_skips_drop_the_closure_once() -> flowlane::Result<()> {
    let _g = match fake("device_function_errors_panics_and_skips_drop_the_closure_once") {
        Some(g) => g,
        None => return Ok(()),
    };
    let e = engine();
    let s = gpu(&e, 1, StreamKind::Compute);
    let flag = Arc::new(AtomicI32::new(0));
    let mk = || {
        let (d, x) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicI32::new(-1)));
        (DropProbe { drops: d.clone(), flag: flag.clone(), seen: x }, d)
    };
    let calls = Arc::new(AtomicUsize::new(0));

    let (p, drops) = mk();
    let c = calls.clone();
    let o = e.phony()?;
    s.submit_device(&Operands::new().write(&o), Some("dev-fails"), move |_s| {
        let _keep = &p;
        c.fetch_add(1, Ordering::SeqCst);
        Err::<(), _>("boom")
    })?;
    let (p2, drops2) = mk();
    let c2 = calls.clone();
    s.submit_device(&Operands::new().read(&o), Some("dev-skipped"), move |_s| {
        let _keep = &p2;
        c2.fetch_add(100, Ordering::SeqCst);
        Ok::<(), String>(())
    })?;
    let err = e.synchronize().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InstructionFailed, "{}", err);
    assert!(err.message().contains("dev-fails") && err.message().contains("boom"), "{}", err);
    // The skipped dependent is part of that failure, reported with it (once).
    assert!(err.message().contains("1 instruction that depended on it was skipped"), "{}", err);
    e.synchronize()?;
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the skipped device function ran");
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    assert_eq!(drops2.load(Ordering::SeqCst), 1);

    let (p3, drops3) = mk();
    s.submit_device(&Operands::new(), Some("dev-panics"), move |_s| {
        let _keep = &p3;
        if opaque_false() {
            return Ok::<(), String>(());
        }
        panic!("kaboom");
    })?;
    let err = e.synchronize().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InstructionFailed, "{}", err);
    assert!(err.message().contains("dev-panics") && err.message().contains("panicked: kaboom"), "{}", err);
    assert_eq!(drops3.load(Ordering::SeqCst), 1);
    // The lane goes on.
    let ran = Arc::new(AtomicUsize::new(0));
    let r = ran.clone();
    s.submit_device(&Operands::new(), Some("after"), move |_s| {
        r.fetch_add(1, Ordering::SeqCst);
        Ok::<(), String>(())
    })?;
    e.synchronize()?;
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    Ok(())
}

/// False, opaquely to the compiler (so the panicking closure above still returns a Result).
fn opaque_false() -> bool {
    std::env::var_os("FLOWLANE_FAKE_GPU_NEVER_SET").is_some()
}

// --- (3) memcpy / memset -------------------------------------------------------------------

#[test]
fn memset_and_copies_of_every_kind_then_a_host_reader() -> flowlane::Result<()> {
    let _g = match fake("memset_and_copies_of_every_kind_then_a_host_reader") {
        Some(g) => g,
        None => return Ok(()),
    };
    const N: usize = 256;
    let mut dev = vec![0u32; N];
    let mut dev2 = vec![0u32; N];
    let e = engine();
    let od = e.phony()?;
    let od2 = e.phony()?;
    // The host side: pinned, owned by an object, so the engine keeps it until its last use.
    let oh = e.object(PinnedBuffer::new(N * 4)?)?;
    let hdst = oh.handle().read().as_ptr() as *mut c_void;
    let bytes = (N * 4) as u64;
    let (pdev, pdev2) = (dev.as_mut_ptr() as *mut c_void, dev2.as_mut_ptr() as *mut c_void);
    let pattern: Vec<u32> = (0..N as u32).map(|k| k.wrapping_mul(2654435761)).collect();
    // SAFETY: dev, dev2 and pattern outlive the engine; the pinned buffer is kept by oh;
    // od, od2 and oh order every access.
    unsafe {
        let c1 = gpu(&e, 1, StreamKind::Compute);
        c1.submit_memcpy(
            sys::FL_MEMSET,
            pdev,
            std::ptr::null(),
            bytes,
            0x02,
            &Operands::new().write(&od),
            Some("memset"),
        )?;
        gpu(&e, 1, StreamKind::D2H).submit_memcpy(
            sys::FL_MEMCPY_D2H,
            hdst,
            pdev,
            bytes,
            0,
            &Operands::new().read(&od).write(&oh),
            Some("d2h"),
        )?;
    }
    let sum = e.object(0u64)?;
    let (hh, hs) = (oh.handle(), sum.handle());
    e.stream(2)?.instr().name("sum").read(&oh).write(&sum).submit(move || {
        let buf = hh.read();
        *hs.write() = buf.as_slice().chunks(4).map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]) as u64).sum();
        Ok::<(), String>(())
    })?;
    assert_eq!(sum.get()?, N as u64 * 0x0202_0202);

    // H2D of a pattern, D2D to another buffer, D2H into the pinned buffer.
    // SAFETY: as above.
    unsafe {
        gpu(&e, 2, StreamKind::H2D).submit_memcpy(
            sys::FL_MEMCPY_H2D,
            pdev,
            pattern.as_ptr() as *const c_void,
            bytes,
            0,
            &Operands::new().write(&od),
            Some("h2d"),
        )?;
        gpu(&e, 3, StreamKind::Compute).submit_memcpy(
            sys::FL_MEMCPY_D2D,
            pdev2,
            pdev,
            bytes,
            0,
            &Operands::new().read(&od).write(&od2),
            Some("d2d"),
        )?;
        gpu(&e, 1, StreamKind::D2H).submit_memcpy(
            sys::FL_MEMCPY_D2H,
            hdst,
            pdev2,
            bytes,
            0,
            &Operands::new().read(&od2).write(&oh),
            Some("d2h-2"),
        )?;
    }
    {
        let buf = oh.read()?;
        let got: Vec<u32> = buf.as_slice().chunks(4).map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]])).collect();
        assert_eq!(got, pattern);
    }
    // Submit-time checks of the memcpy descriptor.
    // SAFETY: refused at submit; nothing runs.
    unsafe {
        let c1 = gpu(&e, 1, StreamKind::Compute);
        // A memset needs no src (and here no operands: the wait on oh above already
        // ordered it after the copies that read dev).
        c1.submit_memcpy(sys::FL_MEMSET, pdev, std::ptr::null(), 4, 0, &Operands::new(), Some("memset-0"))?;
        let err = c1.submit_memcpy(9, pdev, pdev, 4, 0, &Operands::new(), None).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{}", err);
        assert!(err.message().contains("kind 9"), "{}", err);
        let err =
            c1.submit_memcpy(sys::FL_MEMCPY_H2D, pdev, std::ptr::null(), 4, 0, &Operands::new(), None).unwrap_err();
        assert!(err.message().contains("src is NULL"), "{}", err);
        let err = e
            .stream(1)?
            .submit_memcpy(sys::FL_MEMSET, pdev, std::ptr::null(), 4, 0, &Operands::new(), None)
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{}", err);
    }
    e.synchronize()?;
    assert_eq!(&dev2[..], &pattern[..]);
    assert_eq!(dev[0], 0, "the last memset (4 bytes of 0) ran after the copies");
    Ok(())
}

// --- (4) errors ------------------------------------------------------------------------------

#[test]
fn a_launch_error_fails_by_name_as_cuda_and_skips_readers() -> flowlane::Result<()> {
    let _g = match fake("a_launch_error_fails_by_name_as_cuda_and_skips_readers") {
        Some(g) => g,
        None => return Ok(()),
    };
    let x = Box::new(AtomicI32::new(0));
    let y = Box::new(AtomicI32::new(0));
    let e = engine();
    let o = e.phony()?;
    let o2 = e.phony()?;
    let (px, py): (*const AtomicI32, *const AtomicI32) = (&*x, &*y);
    let one = 1i32;
    let host_ran = Arc::new(AtomicUsize::new(0));
    // SAFETY: x and y outlive the engine; o orders the readers after the writer.
    unsafe {
        // block.x * y * z > 1024: cudaErrorInvalidConfiguration at launch.
        launch(
            &gpu(&e, 1, StreamKind::Compute),
            &ADD,
            &[bytes_of(&px), bytes_of(&one)],
            &Operands::new().write(&o),
            "too-big",
            2048,
        )?;
        launch(
            &gpu(&e, 2, StreamKind::Compute),
            &ADD,
            &[bytes_of(&py), bytes_of(&one)],
            &Operands::new().read(&o).write(&o2),
            "gpu-reader",
            1,
        )?;
    }
    let hr = host_ran.clone();
    e.stream(3)?.instr().name("host-reader").read(&o2).submit(move || {
        hr.fetch_add(1, Ordering::SeqCst);
        Ok::<(), String>(())
    })?;
    let err = e.synchronize().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Cuda, "{}", err);
    assert!(err.message().contains("too-big"), "{}", err);
    assert!(err.message().contains("cudaErrorInvalidConfiguration"), "{}", err);
    // The readers were skipped: reported with the failure that poisoned them, once.
    assert!(err.message().contains("2 instructions that depended on it were skipped"), "{}", err);
    e.synchronize()?;
    assert_eq!(x.load(Ordering::SeqCst), 0, "the failed launch ran");
    assert_eq!(y.load(Ordering::SeqCst), 0, "the GPU reader of a poisoned object ran");
    assert_eq!(host_ran.load(Ordering::SeqCst), 0, "the host reader of a poisoned object ran");
    let err = o2.wait(Access::Read).unwrap_err();
    // A reader of o2 is told the chain: its writer was skipped because of "too-big".
    assert_eq!(err.kind(), ErrorKind::DependencyFailed, "{}", err);
    assert!(err.message().contains("gpu-reader") && err.message().contains("too-big"), "{}", err);
    let st = e.stats()?;
    assert_eq!((st.failed, st.in_flight), (3, 0));
    // A launch error is not sticky: the stream goes on.
    // SAFETY: as above.
    unsafe {
        launch(&gpu(&e, 1, StreamKind::Compute), &ADD, &[bytes_of(&px), bytes_of(&one)], &Operands::new(), "after", 1)?
    };
    e.synchronize()?;
    assert_eq!(x.load(Ordering::SeqCst), 1);
    Ok(())
}

#[test]
fn an_asynchronous_fault_fails_as_cuda_by_name() -> flowlane::Result<()> {
    let _g = match fake("an_asynchronous_fault_fails_as_cuda_by_name") {
        Some(g) => g,
        None => return Ok(()),
    };
    let _reset = ResetSticky; // declared before the engine: cleared after it drained
    let ran = Arc::new(AtomicUsize::new(0));
    let e = engine();
    let o = e.phony()?;
    // SAFETY: FAULT takes no arguments.
    unsafe { launch(&gpu(&e, 1, StreamKind::Compute), &FAULT, &[], &Operands::new().write(&o), "wild-write", 1)? };
    let r = ran.clone();
    e.stream(2)?.instr().name("after-fault").read(&o).submit(move || {
        r.fetch_add(1, Ordering::SeqCst);
        Ok::<(), String>(())
    })?;
    let err = e.synchronize().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Cuda, "{}", err);
    assert!(err.message().contains("wild-write"), "{}", err);
    assert!(err.message().contains("cudaErrorIllegalAddress"), "{}", err);
    for _ in 0..10 {
        if e.synchronize().is_ok() {
            break;
        }
    }
    assert_eq!(ran.load(Ordering::SeqCst), 0, "the reader of a faulted kernel's output ran");
    drop(o);
    drop(e);
    Ok(())
}

// --- (5) priorities ---------------------------------------------------------------------------

#[test]
fn stream_priorities_are_clamped_to_the_device_range() -> flowlane::Result<()> {
    let _g = match fake("stream_priorities_are_clamped_to_the_device_range") {
        Some(g) => g,
        None => return Ok(()),
    };
    assert_eq!(flowlane::cuda_priority_range(0)?, (0, -5));
    let err = flowlane::cuda_priority_range(1).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NoDevice, "{}", err);
    let e = engine();
    assert_eq!(gpu(&e, 1, StreamKind::Compute).set_priority(-100)?, -5);
    assert_eq!(gpu(&e, 1, StreamKind::H2D).set_priority(100)?, 0);
    assert_eq!(gpu(&e, 2, StreamKind::Compute).set_priority(-3)?, -3);
    assert_eq!(gpu(&e, 2, StreamKind::D2H).set_priority(i32::MIN)?, -5);
    assert_eq!(gpu(&e, 3, StreamKind::Compute).set_priority(i32::MAX)?, 0);
    let err = e.stream(1)?.set_priority(-1).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{}", err);
    // Prioritised streams run work; a priority is set before the first instruction only.
    let x = Box::new(AtomicI32::new(0));
    let px: *const AtomicI32 = &*x;
    let one = 1i32;
    let o = e.phony()?;
    for (lane, kind) in [(1, StreamKind::Compute), (1, StreamKind::H2D), (2, StreamKind::Compute)] {
        // SAFETY: x outlives the engine (drained below); o orders the launches.
        unsafe {
            launch(
                &gpu(&e, lane, kind),
                &ADD,
                &[bytes_of(&px), bytes_of(&one)],
                &Operands::new().access(&o, Access::ReadWrite),
                "p",
                1,
            )?
        };
    }
    e.synchronize()?;
    assert_eq!(x.load(Ordering::SeqCst), 3);
    let err = gpu(&e, 1, StreamKind::Compute).set_priority(-1).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{}", err);
    assert!(err.message().contains("already has instructions"), "{}", err);
    Ok(())
}

// --- (6) pinned buffers -------------------------------------------------------------------------

#[test]
fn pinned_buffers_allocate_write_move_and_free() -> flowlane::Result<()> {
    let _g = match fake("pinned_buffers_allocate_write_move_and_free") {
        Some(g) => g,
        None => return Ok(()),
    };
    let err = PinnedBuffer::new(0).err().expect("a 0-byte pinned buffer");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{}", err);
    let mut bufs: Vec<PinnedBuffer> = Vec::new();
    for (k, len) in [1usize, 64, 4096, 1 << 20].iter().enumerate() {
        let mut b = PinnedBuffer::new(*len)?;
        assert_eq!(b.len(), *len);
        assert!(!b.is_empty());
        assert!(!b.as_ptr().is_null());
        for (i, v) in b.as_mut_slice().iter_mut().enumerate() {
            *v = (i as u8).wrapping_add(k as u8);
        }
        bufs.push(b);
    }
    // Distinct, non-overlapping, and freed on another thread.
    let ends: Vec<(usize, usize)> = bufs.iter().map(|b| (b.as_ptr() as usize, b.as_ptr() as usize + b.len())).collect();
    for (i, a) in ends.iter().enumerate() {
        for b in &ends[i + 1..] {
            assert!(a.1 <= b.0 || b.1 <= a.0, "pinned buffers overlap: {:?}", ends);
        }
    }
    let sums = std::thread::spawn(move || {
        bufs.iter()
            .enumerate()
            .map(|(k, b)| b.as_slice().iter().enumerate().all(|(i, &v)| v == (i as u8).wrapping_add(k as u8)))
            .collect::<Vec<bool>>()
    })
    .join()
    .expect("thread");
    assert_eq!(sums, vec![true; 4]);
    Ok(())
}

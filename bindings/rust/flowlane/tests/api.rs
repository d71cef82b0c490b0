//! The safe surface: errors of every kind, closures freed exactly once, panics as
//! instruction failures, lifetimes of values, task graphs and parallel_for.
mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::Gate;
use flowlane::{sys, Access, Device, Engine, Error, ErrorKind, StreamKind};

type R = Result<(), String>;

fn engine(workers: u64) -> Engine {
    Engine::builder().workers(workers).build().expect("engine")
}

#[test]
fn handles_are_send_and_sync_where_the_c_api_allows() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Engine>();
    send_sync::<flowlane::Stream>();
    send_sync::<flowlane::Object<Vec<u8>>>();
    send_sync::<flowlane::Lane>();
    send_sync::<flowlane::Handle<u64>>();
    send::<flowlane::TaskGraph<'static>>();
    send_sync::<Error>();
}

#[test]
fn version_and_engine_parameters() -> Result<(), Error> {
    assert_eq!(flowlane::library_version().0, sys::FL_VERSION_MAJOR);
    let e = Engine::builder().workers(2).lanes(5).inflight_limit(64).build()?;
    assert_eq!(e.worker_count(), 2);
    assert_eq!(e.lane_count(), 5);
    assert!(format!("{:?}", e).contains("lanes: 5"));
    Ok(())
}

#[test]
fn every_status_maps_to_its_kind_and_back() {
    for st in 1..=16 {
        let k = ErrorKind::from_status(st);
        assert_eq!(k.status(), st);
        assert!(!matches!(k, ErrorKind::Unknown(_)), "status {} unmapped", st);
        assert!(k.status_name().starts_with("FL_ERR_"));
    }
    assert_eq!(ErrorKind::from_status(99), ErrorKind::Unknown(99));
    let e = Error::new(ErrorKind::OutOfRange, "lane 9");
    assert_eq!(e.to_string(), "lane 9 [FL_ERR_OUT_OF_RANGE]");
}

#[test]
fn lanes_exhausted_out_of_range_and_invalid_argument() -> Result<(), Error> {
    let e = Engine::builder().workers(1).lanes(2).build()?;
    let held = e.acquire_lane()?;
    assert_eq!(held.id(), 1);
    let err = e.acquire_lane().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Exhausted);
    assert!(err.message().contains("held"), "{}", err);
    held.release()?;
    let again = e.acquire_lane()?;
    assert_eq!(again.id(), 1, "a released id is handed out again");
    drop(again);
    let err = e.stream(7).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::OutOfRange);
    assert!(err.message().contains("2 lanes"), "{}", err);
    let err = Engine::builder().lanes(5000).build().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::OutOfRange);
    // SAFETY: lane 0 cannot be released: a checked error, no UB.
    let st = unsafe { sys::fl_lane_release(e.as_raw(), 0) };
    assert_eq!(ErrorKind::from_status(st), ErrorKind::InvalidArgument);
    let err = e.object(0u8)?.wait(Access::Read);
    assert!(err.is_ok());
    Ok(())
}

#[test]
fn invalid_handles_are_reported_not_undefined() {
    // SAFETY: NULL handles are documented to return FL_ERR_INVALID_HANDLE.
    let st = unsafe { sys::fl_object_wait(std::ptr::null_mut(), sys::FL_READ) };
    assert_eq!(ErrorKind::from_status(st), ErrorKind::InvalidHandle);
    // SAFETY: as above.
    let st = unsafe { sys::fl_engine_synchronize(std::ptr::null_mut()) };
    assert_eq!(ErrorKind::from_status(st), ErrorKind::InvalidHandle);
}

#[test]
fn streams_are_interned_and_know_their_identity() -> Result<(), Error> {
    let e = Engine::builder().workers(1).lanes(3).build()?;
    assert_eq!(e.stream(2)?, e.stream(2)?);
    assert_ne!(e.stream(1)?, e.stream(2)?);
    assert_eq!(e.stream(2)?.info()?, (2, Device::CPU, StreamKind::Host));
    Ok(())
}

#[test]
fn gpu_entry_points_are_unsupported_in_a_cpu_build() -> Result<(), Error> {
    if flowlane::cuda_device_count().is_ok() {
        return Ok(()); // a CUDA build: covered by the GPU suite
    }
    assert_eq!(flowlane::cuda_device_count().unwrap_err().kind(), ErrorKind::Unsupported);
    assert_eq!(flowlane::cuda_priority_range(0).unwrap_err().kind(), ErrorKind::Unsupported);
    assert_eq!(flowlane::PinnedBuffer::new(64).err().unwrap().kind(), ErrorKind::Unsupported);
    let e = engine(1);
    let err = e.stream_on(0, Device::cuda(0), StreamKind::Compute).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported);
    let drops = Arc::new(AtomicUsize::new(0));
    struct D(Arc<AtomicUsize>);
    impl Drop for D {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let d = D(drops.clone());
    let r = e.stream(0)?.submit_device(&flowlane::Operands::new(), Some("dev"), move |_s| {
        let _d = &d;
        Ok::<(), String>(())
    });
    assert!(r.is_err());
    assert_eq!(drops.load(Ordering::SeqCst), 1, "a refused submit drops its closure once");
    Ok(())
}

#[test]
fn closures_are_dropped_exactly_once_run_skipped_or_refused() -> Result<(), Error> {
    struct Tracked(Arc<AtomicUsize>);
    impl Drop for Tracked {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let drops = Arc::new(AtomicUsize::new(0));
    let runs = Arc::new(AtomicUsize::new(0));
    {
        let e = Engine::builder().workers(2).inflight_limit(4).build()?;
        let s = e.stream(0)?;
        let o = e.object(0u32)?;
        for _ in 0..100 {
            let (t, r, h) = (Tracked(drops.clone()), runs.clone(), o.handle());
            s.instr().read_write(&o).submit(move || -> R {
                let _t = &t;
                r.fetch_add(1, Ordering::SeqCst);
                *h.write() += 1;
                Ok(())
            })?;
        }
        // Skipped: reads a poisoned object. Its closure never runs but is dropped.
        let bad = e.object(())?;
        s.instr().write(&bad).submit(|| Err::<(), _>("fail"))?;
        let (t, r) = (Tracked(drops.clone()), runs.clone());
        s.instr().read(&bad).submit(move || -> R {
            let _t = &t;
            r.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })?;
        // Refused: non-blocking submit while the window is full.
        let gate = Gate::new();
        let g = gate.clone();
        s.submit(move || g.wait())?;
        let mut refused = 0;
        for _ in 0..10 {
            let t = Tracked(drops.clone());
            match s.instr().nonblocking().submit(move || -> R {
                let _t = &t;
                Ok(())
            }) {
                Err(err) if err.kind() == ErrorKind::WouldBlock => refused += 1,
                Err(err) => panic!("{}", err),
                Ok(_) => {}
            }
        }
        assert!(refused > 0, "the window of 4 never filled");
        gate.open();
        let _ = e.synchronize();
        assert_eq!(o.get()?, 100);
    }
    assert_eq!(runs.load(Ordering::SeqCst), 100);
    // 100 run + 1 skipped + 10 non-blocking (refused or run), each dropped once.
    assert_eq!(drops.load(Ordering::SeqCst), 111);
    Ok(())
}

#[test]
fn inline_submissions_run_on_the_caller_when_ready_and_queue_otherwise() -> Result<(), Error> {
    let e = engine(1);
    let o = e.object(0u32)?;
    let me = std::thread::current().id();
    let ran_on = Arc::new(Mutex::new(Vec::new()));
    // Ready at once: runs during submit, on this thread.
    let (r, h) = (ran_on.clone(), o.handle());
    e.stream(1)?.instr().read_write(&o).inline().submit(move || -> R {
        r.lock().unwrap().push(std::thread::current().id());
        *h.write() += 1;
        Ok(())
    })?;
    assert_eq!(*ran_on.lock().unwrap(), vec![me]);
    // Its lane busy: queued behind the held instruction, run by the worker.
    let gate = Gate::new();
    let g = gate.clone();
    let s2 = e.stream(2)?;
    s2.instr().submit(move || -> R { g.wait() })?;
    let r = ran_on.clone();
    s2.instr().inline().submit(move || -> R {
        r.lock().unwrap().push(std::thread::current().id());
        Ok(())
    })?;
    assert_eq!(ran_on.lock().unwrap().len(), 1);
    gate.open();
    e.synchronize()?;
    let ran = ran_on.lock().unwrap().clone();
    assert_eq!(ran.len(), 2);
    assert_ne!(ran[1], me);
    assert_eq!(o.get()?, 1);
    // A failure run inline is reported by the wait, as without the flag.
    e.stream(1)?.instr().inline().submit(|| Err::<(), _>("inline failure"))?;
    let err = e.synchronize().unwrap_err();
    assert!(err.to_string().contains("inline failure"), "{}", err);
    Ok(())
}

#[test]
fn errors_and_panics_fail_the_instruction_and_skip_dependents() -> Result<(), Error> {
    let e = Engine::builder().workers(2).lanes(3).build()?;
    let x = e.object(1i32)?;
    let y = e.object(0i32)?;
    let z = e.object(0i32)?;
    let other = e.object(0i32)?;
    e.stream(0)?.instr().name("explode").read(&x).write(&y).submit(|| -> R {
        panic!("exploded with {}", 1);
    })?;
    let ran = Arc::new(AtomicUsize::new(0));
    let r = ran.clone();
    e.stream(1)?.instr().name("dependent").read(&y).write(&z).submit(move || -> R {
        r.fetch_add(1, Ordering::SeqCst);
        Ok(())
    })?;
    let h = other.handle();
    e.stream(2)?.instr().name("unrelated").write(&other).submit(move || -> R {
        *h.write() = 7;
        Ok(())
    })?;
    let err = z.get().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::DependencyFailed);
    assert!(err.kind().is_instruction_failure());
    for part in ["'dependent'", "'explode'", "panicked: exploded with 1"] {
        assert!(err.message().contains(part), "{:?} lacks {}", err.message(), part);
    }
    let err = y.get().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InstructionFailed);
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    assert_eq!(other.get()?, 7, "the engine stays usable");
    e.synchronize()?; // the waits observed the failures
    // An unobserved failure is reported once by synchronize, with the closure's error text.
    let w = e.object(())?;
    e.stream(0)?.instr().name("typed-error").write(&w).submit(|| Err::<(), _>(std::fmt::Error))?;
    let err = e.synchronize().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InstructionFailed);
    assert!(err.message().contains("'typed-error'"), "{}", err);
    assert!(err.message().contains("an error occurred when formatting"), "{}", err);
    e.synchronize()?;
    // Writing a poisoned object heals it.
    let h = y.handle();
    e.stream(0)?.instr().write(&y).submit(move || -> R {
        *h.write() = 5;
        Ok(())
    })?;
    assert_eq!(y.get()?, 5);
    Ok(())
}

#[test]
fn waits_inside_an_instruction_are_refused() -> Result<(), Error> {
    let e = engine(2);
    let out = e.object(Vec::<ErrorKind>::new())?;
    let h = out.handle();
    e.stream(0)?.instr().write(&out).submit_with_ctx(move |ctx| -> R {
        let mut kinds = h.write();
        kinds.push(ctx.engine().synchronize().unwrap_err().kind());
        kinds.push(ctx.stream().map_err(|e| e.to_string())?.synchronize().unwrap_err().kind());
        Ok(())
    })?;
    assert_eq!(out.get()?, vec![ErrorKind::InvalidArgument, ErrorKind::InvalidArgument]);
    Ok(())
}

#[test]
fn callbacks_can_submit_follow_up_work_on_their_lane() -> Result<(), Error> {
    let e = Engine::builder().workers(2).lanes(4).build()?;
    let lanes = Arc::new(Mutex::new(Vec::new()));
    let l = lanes.clone();
    e.stream(3)?.instr().name("outer").submit_with_ctx(move |ctx| -> Result<(), Error> {
        l.lock().unwrap().push(ctx.lane());
        assert!(ctx.id() > 0);
        let l2 = l.clone();
        ctx.stream()?.instr().name("inner").submit_with_ctx(move |c| -> R {
            l2.lock().unwrap().push(c.lane());
            Ok(())
        })?;
        // parallel_for from inside an instruction
        let n = AtomicUsize::new(0);
        ctx.engine().parallel_for(0..100, 10, |r| -> R {
            n.fetch_add((r.end - r.start) as usize, Ordering::SeqCst);
            Ok(())
        })?;
        assert_eq!(n.load(Ordering::SeqCst), 100);
        Ok(())
    })?;
    e.synchronize()?; // waits for "outer", which submitted "inner" before it completed
    e.synchronize()?; // so this one waits for "inner" (submitted after the first call began)
    assert_eq!(*lanes.lock().unwrap(), vec![3, 3]);
    Ok(())
}

#[test]
fn object_values_live_until_the_engine_releases_them() -> Result<(), Error> {
    let e = engine(1);
    let gate = Gate::new();
    let value = Arc::new(41u32);
    let obj = e.object(value.clone())?;
    let (g, h) = (gate.clone(), obj.handle());
    let seen = Arc::new(AtomicUsize::new(0));
    let s2 = seen.clone();
    e.stream(0)?.instr().read(&obj).submit(move || -> R {
        g.wait()?;
        s2.store(**h.read() as usize + 1, Ordering::SeqCst);
        Ok(())
    })?;
    drop(obj); // the program's reference is gone; the engine and the closure keep the value
    assert_eq!(Arc::strong_count(&value), 2);
    gate.open();
    e.synchronize()?;
    assert_eq!(seen.load(Ordering::SeqCst), 42);
    // The release callback ran after the last use: only our reference remains.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while Arc::strong_count(&value) != 1 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(Arc::strong_count(&value), 1);
    // Dropping the engine drains and runs the releases still pending.
    let gate = Gate::new();
    let v2 = Arc::new(0u8);
    let obj = e.object(v2.clone())?;
    let g = gate.clone();
    e.stream(0)?.instr().read(&obj).submit(move || g.wait())?;
    drop(obj);
    assert_eq!(Arc::strong_count(&v2), 2, "the engine holds the value while it is used");
    gate.open();
    drop(e);
    assert_eq!(Arc::strong_count(&v2), 1);
    Ok(())
}

#[test]
fn program_side_reads_and_writes_wait_for_instructions() -> Result<(), Error> {
    let e = engine(2);
    let o = e.object(vec![1, 2])?;
    let h = o.handle();
    e.stream(0)?.instr().read_write(&o).submit(move || -> R {
        std::thread::sleep(Duration::from_millis(20));
        h.write().push(3);
        Ok(())
    })?;
    assert_eq!(*o.read()?, vec![1, 2, 3]);
    o.set(vec![9])?;
    assert_eq!(o.get()?, vec![9]);
    o.write()?.push(10);
    assert_eq!(o.get()?, vec![9, 10]);
    Ok(())
}

#[test]
fn submit_during_engine_drop_is_shutdown() -> Result<(), Error> {
    let seen = Arc::new(Mutex::new(None));
    {
        let e = engine(1);
        let s = seen.clone();
        e.stream(0)?.submit_with_ctx_helper(s)?;
        std::thread::sleep(Duration::from_millis(50));
    } // drop drains; the late submit is refused
    assert_eq!(*seen.lock().unwrap(), Some(ErrorKind::Shutdown));
    Ok(())
}

trait LateSubmit {
    fn submit_with_ctx_helper(&self, seen: Arc<Mutex<Option<ErrorKind>>>) -> Result<flowlane::InstrHandle, Error>;
}

impl LateSubmit for flowlane::Stream {
    fn submit_with_ctx_helper(&self, seen: Arc<Mutex<Option<ErrorKind>>>) -> Result<flowlane::InstrHandle, Error> {
        self.instr().submit_with_ctx(move |ctx| -> R {
            // A stream made now would own the engine (and so hold off its destroy).
            std::thread::sleep(Duration::from_millis(200)); // the engine is being dropped now
            let r = ctx.stream().and_then(|stream| stream.submit(|| -> R { Ok(()) }));
            *seen.lock().unwrap() = Some(match r {
                Ok(_) => ErrorKind::Unknown(0),
                Err(e) => e.kind(),
            });
            Ok(())
        })
    }
}

#[test]
fn an_engine_dropped_inside_a_callback_is_destroyed_by_a_helper() -> Result<(), Error> {
    let e = Arc::new(engine(1));
    let done = Arc::new(AtomicUsize::new(0));
    let (e2, d) = (e.clone(), done.clone());
    e.stream(0)?.submit(move || -> R {
        std::thread::sleep(Duration::from_millis(50));
        d.store(1, Ordering::SeqCst);
        drop(e2); // may be the last reference (the test drops its own below)
        Ok(())
    })?;
    drop(e);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while done.load(Ordering::SeqCst) == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(done.load(Ordering::SeqCst), 1);
    Ok(())
}

#[test]
fn invalid_names_are_reported_before_submitting() -> Result<(), Error> {
    let e = engine(1);
    let err = e.stream(0)?.instr().name("bad\0name").submit(|| -> R { Ok(()) }).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    Ok(())
}

#[test]
fn parallel_for_covers_the_range_and_reports_failures() -> Result<(), Error> {
    let e = engine(2);
    let hits: Vec<AtomicUsize> = (0..1000).map(|_| AtomicUsize::new(0)).collect();
    e.parallel_for(0..1000, 7, |r| -> R {
        for i in r {
            hits[i as usize].fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    })?;
    assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
    e.parallel_for(5..5, 0, |_| -> R { panic!("empty range ran a body") })?;
    let err = e
        .parallel_for(0..1000, 10, |r| if r.contains(&500) { Err(format!("bad chunk {}", r.start)) } else { Ok(()) })
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InstructionFailed);
    assert!(err.message().contains("bad chunk 500"), "{}", err);
    Ok(())
}

#[test]
fn a_panic_in_parallel_for_is_resumed_on_the_caller() {
    let e = engine(2);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = e.parallel_for(0..100, 1, |r| -> R {
            if r.start == 42 {
                panic!("chunk 42");
            }
            Ok(())
        });
    }));
    let p = r.unwrap_err();
    assert_eq!(p.downcast_ref::<&str>().copied(), Some("chunk 42"));
    e.synchronize().unwrap(); // still usable
}

#[test]
fn task_graph_runs_in_dependency_order_and_borrows_locals() -> Result<(), Error> {
    let e = engine(2);
    let log = Mutex::new(Vec::new()); // borrowed, not 'static
    {
        let mut g = e.taskgraph()?;
        let node = |name: &'static str| {
            let log = &log;
            move || -> R {
                log.lock().unwrap().push(name);
                Ok(())
            }
        };
        let a = g.add("a", node("a"))?;
        let b = g.add("b", node("b"))?;
        let c = g.add("c", node("c"))?;
        let d = g.add("d", node("d"))?;
        g.precede(a, b)?;
        g.precede(a, c)?;
        g.precede(b, d)?;
        g.precede(c, d)?;
        assert_eq!(g.len(), 4);
        for threads in [-1, 0, 1, 2] {
            log.lock().unwrap().clear();
            g.run(threads)?;
            let l = log.lock().unwrap();
            assert_eq!(l.len(), 4);
            assert_eq!((l[0], l[3]), ("a", "d"));
        }
    }
    Ok(())
}

#[test]
fn task_graph_errors_cycles_and_panics() -> Result<(), Error> {
    let e = engine(2);
    let ran = AtomicUsize::new(0);
    let mut g = e.taskgraph()?;
    let a = g.add("divide", || Err::<(), _>("division by zero"))?;
    let b = g.add("after", || -> R {
        ran.fetch_add(1, Ordering::SeqCst);
        Ok(())
    })?;
    g.precede(a, b)?;
    let err = g.run(-1).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InstructionFailed);
    assert!(err.message().contains("divide") && err.message().contains("division by zero"), "{}", err);
    drop(g);
    assert_eq!(ran.load(Ordering::SeqCst), 0);

    let mut g = e.taskgraph()?;
    let x = g.add("x", || -> R { Ok(()) })?;
    let y = g.add("y", || -> R { Ok(()) })?;
    g.precede(x, y)?;
    g.precede(y, x)?;
    let err = g.run(-1).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.message().contains("cycle"), "{}", err);
    assert_eq!(g.precede(x, x).unwrap_err().kind(), ErrorKind::InvalidArgument);
    assert_eq!(g.precede(x, flowlane::TaskId(99)).unwrap_err().kind(), ErrorKind::OutOfRange);

    let mut g = e.taskgraph()?;
    g.add("boom", || -> R { panic!("task panicked") })?;
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| g.run(2)));
    assert!(r.is_err(), "the panic is resumed on the caller");
    Ok(())
}

#[test]
fn stats_count_instructions() -> Result<(), Error> {
    let e = engine(1);
    for _ in 0..10 {
        e.stream(0)?.submit(|| -> R { Ok(()) })?;
    }
    e.synchronize()?;
    let s = e.stats()?;
    assert_eq!((s.submitted, s.completed, s.in_flight), (10, 10, 0));
    match e.dump() {
        Ok(text) => assert!(!text.is_empty()),
        Err(err) => assert_eq!(err.kind(), ErrorKind::Unsupported),
    }
    Ok(())
}

/// Two ranks of a host-fake communicator (lanes 1 and 2 of one engine): all-reduce and
/// all-gather give the right values, for ordered and FL_COMM_UNORDERED communicators; a
/// second rank 0 and a broadcast root out of range are refused with their kinds.
#[test]
fn host_fake_collectives_on_two_ranks() -> Result<(), Error> {
    use flowlane::{Comm, CommBackend, CommUniqueId, Operands};
    let e = Engine::builder().workers(2).lanes(4).build()?;
    for unordered in [false, true] {
        let id = CommUniqueId::new(CommBackend::HostFake)?;
        let make = |rank: u64| {
            if unordered {
                Comm::new_unordered(&e, 2, rank, &id, 1 + rank as u32, 0, CommBackend::HostFake)
            } else {
                Comm::new(&e, 2, rank, &id, 1 + rank as u32, 0, CommBackend::HostFake)
            }
        };
        let comms = [make(0)?, make(1)?];
        let again = Comm::new(&e, 2, 0, &id, 3, 0, CommBackend::HostFake);
        assert_eq!(again.err().map(|x| x.kind()), Some(ErrorKind::InvalidArgument));
        let send = [[1.0f32, 2.0, 3.0], [10.0, 20.0, 30.0]];
        let mut reduced = [[0.0f32; 3]; 2];
        let mut gathered = [[0.0f32; 6]; 2];
        for r in 0..2 {
            let s = comms[r].stream()?;
            let part = |op: u32, recv: *mut f32, peer: u32| sys::fl_coll_part_t {
                op,
                dtype: sys::FL_DTYPE_FLOAT32,
                redop: sys::FL_REDOP_SUM,
                peer,
                sendbuf: send[r].as_ptr() as *const std::ffi::c_void,
                recvbuf: recv as *mut std::ffi::c_void,
                count: 3,
            };
            // SAFETY: the buffers live until the synchronize below.
            unsafe {
                comms[r].submit(&s, &[part(sys::FL_COLL_ALL_REDUCE, reduced[r].as_mut_ptr(), 0)], &Operands::new(), Some("ar"))?;
                comms[r].submit(&s, &[part(sys::FL_COLL_ALL_GATHER, gathered[r].as_mut_ptr(), 0)], &Operands::new(), Some("ag"))?;
                let bad = comms[r].submit(&s, &[part(sys::FL_COLL_BROADCAST, reduced[r].as_mut_ptr(), 7)], &Operands::new(), None);
                assert_eq!(bad.err().map(|x| x.kind()), Some(ErrorKind::OutOfRange));
            }
        }
        e.synchronize()?;
        for r in 0..2 {
            assert_eq!(reduced[r], [11.0, 22.0, 33.0], "unordered: {unordered}");
            assert_eq!(gathered[r], [1.0, 2.0, 3.0, 10.0, 20.0, 30.0]);
        }
        // The rank's communicator dump (fl_comm_dump): this engine's communicators and records.
        let path = std::env::temp_dir().join(format!("flowlane-rust-dump-{}-{unordered}.json", std::process::id()));
        comms[0].dump(Some(&path))?;
        let text = std::fs::read_to_string(&path).expect("the dump file");
        assert!(text.starts_with("{\"schema\":\"flowlane.comm_dump/1\""), "{text}");
        assert!(text.contains("\"name\":\"ag\""), "{text}");
        std::fs::remove_file(&path).ok();
        let bad = comms[0].dump(Some(std::path::Path::new("/nonexistent-flowlane-dir/x.json")));
        assert_eq!(bad.err().map(|x| x.kind()), Some(ErrorKind::InvalidArgument));
    }
    Ok(())
}

//! Capture and replay: Engine::capture, Capture::end, Program::launch, and their refusals.
mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;

use common::Gate;
use flowlane::{Engine, ErrorKind};

type R = Result<(), String>;

fn engine(workers: u64) -> Engine {
    Engine::builder().workers(workers).build().expect("engine")
}

/// Counts its drops: a captured closure is dropped once, when its program is freed.
struct Tracked(Arc<AtomicUsize>);
impl Drop for Tracked {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn program_is_send_and_sync_and_capture_is_neither() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<flowlane::Program>();
    send_sync::<flowlane::ProgramInfo>();
}

#[test]
fn nothing_runs_while_capturing_and_each_launch_runs_every_instruction() {
    let e = engine(2);
    let x = e.object(0u64).unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let capture = e.capture(Some("step")).unwrap();
    let hx = x.handle();
    let h = e.stream(0).unwrap().instr().name("inc").read_write(&x).submit_mut(move || -> R {
        *hx.write() += 1;
        Ok(())
    });
    assert_eq!(h.unwrap().id(), 0);
    let (hx, l) = (x.handle(), log.clone());
    e.stream(1).unwrap().instr().read(&x).submit_mut(move || -> R {
        l.lock().unwrap().push(*hx.read());
        Ok(())
    })
    .unwrap();
    let program = capture.end().unwrap();
    assert!(log.lock().unwrap().is_empty());
    let lane = e.stream(0).unwrap();
    for _ in 0..3 {
        program.launch(&lane).unwrap().wait().unwrap();
    }
    assert_eq!(*log.lock().unwrap(), vec![1, 2, 3]);
    assert_eq!(x.get().unwrap(), 3);
    let info = program.info().unwrap();
    assert_eq!((info.instructions, info.host_instructions, info.launches), (2, 2, 3));
    assert!(info.bytes > 0);
}

#[test]
fn a_failure_in_a_launch_fails_the_launch_naming_the_inner_instruction() {
    let e = engine(2);
    let x = e.object(0u64).unwrap();
    let capture = e.capture(None).unwrap();
    e.stream(0).unwrap().instr().name("bad").write(&x).submit_mut(|| -> R { Err("boom".into()) }).unwrap();
    let program = capture.end().unwrap();
    let err = program.launch(&e.stream(0).unwrap()).unwrap().wait().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InstructionFailed);
    assert!(err.message().contains("inner instruction 'bad'"), "{}", err.message());
    assert!(err.message().contains("boom"), "{}", err.message());
    assert!(x.get().is_err()); // poisoned by the launch
}

#[test]
fn closures_are_dropped_once_when_the_program_is_freed_or_the_capture_discarded() {
    let e = engine(1);
    let drops = Arc::new(AtomicUsize::new(0));
    let capture = e.capture(None).unwrap();
    let t = Tracked(drops.clone());
    e.stream(0).unwrap().submit_mut_dummy(move || {
        let _ = &t;
    });
    let program = capture.end().unwrap();
    program.launch(&e.stream(0).unwrap()).unwrap().wait().unwrap();
    program.launch(&e.stream(0).unwrap()).unwrap().wait().unwrap();
    assert_eq!(drops.load(Ordering::SeqCst), 0);
    drop(program);
    e.synchronize().unwrap();
    assert_eq!(drops.load(Ordering::SeqCst), 1);

    let capture = e.capture(None).unwrap();
    let t = Tracked(drops.clone());
    e.stream(0).unwrap().submit_mut_dummy(move || {
        let _ = &t;
    });
    drop(capture); // discarded
    assert_eq!(drops.load(Ordering::SeqCst), 2);
    e.stream(0).unwrap().submit(|| -> R { Ok(()) }).unwrap().wait().unwrap(); // eager again
}

/// Test helper: `instr().submit_mut` of a closure that never fails.
trait SubmitMutDummy {
    fn submit_mut_dummy<F: FnMut() + Send + 'static>(&self, f: F);
}
impl SubmitMutDummy for flowlane::Stream {
    fn submit_mut_dummy<F: FnMut() + Send + 'static>(&self, mut f: F) {
        self.instr()
            .submit_mut(move || -> R {
                f();
                Ok(())
            })
            .unwrap();
    }
}

#[test]
fn refusals_while_capturing() {
    let e = engine(1);
    let x = e.object(0u64).unwrap();
    let first = {
        let c = e.capture(None).unwrap();
        e.stream(0).unwrap().submit_mut_dummy(|| {});
        c.end().unwrap()
    };
    let capture = e.capture(None).unwrap();
    let s = e.stream(0).unwrap();
    // An FnOnce closure cannot be replayed.
    assert_eq!(s.submit(|| -> R { Ok(()) }).unwrap_err().kind(), ErrorKind::Capturing);
    assert_eq!(e.synchronize().unwrap_err().kind(), ErrorKind::Capturing);
    assert_eq!(s.synchronize().unwrap_err().kind(), ErrorKind::Capturing);
    assert_eq!(x.get().unwrap_err().kind(), ErrorKind::Capturing);
    assert_eq!(first.launch(&s).unwrap_err().kind(), ErrorKind::Capturing);
    // Captures do not nest.
    assert_eq!(e.capture(None).err().map(|e| e.kind()), Some(ErrorKind::Capturing));
    let empty = capture.end().unwrap();
    assert_eq!(empty.info().unwrap().instructions, 0);
    empty.launch(&s).unwrap().wait().unwrap();
    first.launch(&s).unwrap().wait().unwrap();
}

#[test]
fn a_closure_the_engine_runs_cannot_capture() {
    let e = engine(1);
    let seen = Arc::new(Mutex::new(None));
    let s2 = seen.clone();
    e.stream(0)
        .unwrap()
        .instr()
        .submit_with_ctx(move |ctx| -> R {
            *s2.lock().unwrap() = Some(ctx.engine().capture(None).err().map(|e| e.kind()));
            Ok(())
        })
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(*seen.lock().unwrap(), Some(Some(ErrorKind::InvalidArgument)));
}

#[test]
fn launch_on_a_stream_of_another_engine_is_refused() {
    let (a, b) = (engine(1), engine(1));
    let c = a.capture(None).unwrap();
    a.stream(0).unwrap().submit_mut_dummy(|| {});
    let program = c.end().unwrap();
    assert_eq!(program.launch(&b.stream(0).unwrap()).unwrap_err().kind(), ErrorKind::InvalidHandle);
}

#[test]
fn captures_are_per_thread_and_launches_from_many_threads_are_serializable() {
    let e = engine(3);
    let x = Arc::new(e.object((0i64, Vec::<u8>::new())).unwrap());
    let capture = e.capture(None).unwrap();
    // Another thread's submissions run eagerly meanwhile.
    let e2 = e.clone();
    thread::spawn(move || e2.stream(1).unwrap().submit(|| -> R { Ok(()) }).unwrap().wait().unwrap())
        .join()
        .unwrap();
    let hx = x.handle();
    e.stream(2).unwrap().instr().read_write(&x).submit_mut(move || -> R {
        let mut v = hx.write();
        v.0 *= 2;
        v.1.push(b'*');
        Ok(())
    })
    .unwrap();
    let program = Arc::new(capture.end().unwrap());
    let start = Arc::new(Barrier::new(4));
    let mut threads = Vec::new();
    for t in 0..4u32 {
        let (e, p, x, start) = (e.clone(), program.clone(), x.clone(), start.clone());
        threads.push(thread::spawn(move || {
            start.wait();
            let s = e.stream(t).unwrap();
            for _ in 0..25 {
                if t % 2 == 0 {
                    p.launch(&s).unwrap();
                } else {
                    let hx = x.handle();
                    s.instr().read_write(&x).submit(move || -> R {
                        let mut v = hx.write();
                        v.0 += 3;
                        v.1.push(b'+');
                        Ok(())
                    })
                    .unwrap();
                }
            }
        }));
    }
    for t in threads {
        t.join().unwrap();
    }
    e.synchronize().unwrap();
    let (value, log) = x.get().unwrap();
    assert_eq!(log.iter().filter(|&&c| c == b'*').count(), 50);
    assert_eq!(log.iter().filter(|&&c| c == b'+').count(), 50);
    let expect = log.iter().fold(0i64, |v, &c| if c == b'*' { v * 2 } else { v + 3 });
    assert_eq!(value, expect);
    assert_eq!(program.info().unwrap().launches, 50);
}

#[test]
fn dropping_a_program_while_its_launch_runs_frees_it_after_the_launch() {
    let e = engine(2);
    let gate = Gate::new();
    let ran = Arc::new(AtomicUsize::new(0));
    let c = e.capture(None).unwrap();
    let (g, r) = (gate.clone(), ran.clone());
    e.stream(1).unwrap().instr().submit_mut(move || -> R {
        g.wait()?;
        r.fetch_add(1, Ordering::SeqCst);
        Ok(())
    })
    .unwrap();
    let program = c.end().unwrap();
    let launch = program.launch(&e.stream(0).unwrap()).unwrap();
    drop(program);
    gate.open();
    launch.wait().unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}

//! Timed waits, instruction handles (state, wait, cancel), cancel and drain, and scopes
//! (task groups).
mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::Gate;
use flowlane::{Access, Engine, Error, ErrorKind, InstrHandle, InstrState, Lane};

type R = Result<(), String>;
const LONG: Duration = Duration::from_secs(60);

/// Counts its drops (a closure capturing it is dropped exactly once).
struct Tracked(Arc<AtomicUsize>);

impl Drop for Tracked {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A fresh lane whose head instruction waits on the returned gate (already running).
fn blocked_lane(engine: &Engine) -> Result<(Lane, Gate, InstrHandle), Error> {
    let lane = engine.acquire_lane()?;
    let (gate, started) = (Gate::new(), Gate::new());
    let (g, s) = (gate.clone(), started.clone());
    let blocker = lane.stream()?.instr().name("blocker").submit(move || -> R {
        s.open();
        g.wait()
    })?;
    started.wait().map_err(|e| Error::new(ErrorKind::Internal, e))?;
    Ok((lane, gate, blocker))
}

#[test]
fn timed_waits_time_out_consume_nothing_and_then_succeed() -> Result<(), Error> {
    let e = Engine::builder().workers(2).build()?;
    let o = e.object(0u32)?;
    let gate = Gate::new();
    let (g, h) = (gate.clone(), o.handle());
    let job = e.stream(0)?.instr().name("slow").write(&o).submit(move || -> R {
        g.wait()?;
        *h.write() = 7;
        Ok(())
    })?;
    let err = o.wait_for(Access::Read, Duration::from_millis(20)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout);
    assert!(err.message().contains("'slow'"), "{}", err);
    assert_eq!(job.wait_for(Duration::ZERO).unwrap_err().kind(), ErrorKind::Timeout);
    assert_eq!(e.stream(0)?.synchronize_for(Duration::from_millis(5)).unwrap_err().kind(), ErrorKind::Timeout);
    assert_eq!(e.synchronize_for(Duration::ZERO).unwrap_err().kind(), ErrorKind::Timeout);
    assert_eq!(job.state()?, InstrState::Pending);
    gate.open();
    o.wait_for(Access::Read, LONG)?;
    assert_eq!(o.get()?, 7);
    job.wait_for(LONG)?;
    assert_eq!(job.state()?, InstrState::Done);
    e.synchronize_for(LONG)
}

#[test]
fn an_instruction_handle_reports_a_failure_once() -> Result<(), Error> {
    let e = Engine::builder().workers(1).build()?;
    let o = e.object(())?;
    let bad = e.stream(0)?.instr().name("bad").write(&o).submit(|| Err::<(), _>("no such file"))?;
    let dependent = e.stream(0)?.instr().name("dependent").read(&o).submit(|| -> R { Ok(()) })?;
    let err = dependent.wait().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::DependencyFailed);
    assert!(err.message().contains("'bad'"), "{}", err);
    assert_eq!(bad.state()?, InstrState::Failed);
    assert_eq!(dependent.state()?, InstrState::Skipped);
    // Observed through the handle: synchronize does not report it again.
    e.synchronize()?;
    assert_eq!(bad.id() + 1, dependent.id());
    Ok(())
}

#[test]
fn cancel_a_queued_instruction_drops_its_closure_without_running_it() -> Result<(), Error> {
    let e = Engine::builder().workers(2).lanes(4).build()?;
    let (lane, gate, blocker) = blocked_lane(&e)?;
    let (ran, drops) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (r, t) = (ran.clone(), Tracked(drops.clone()));
    let out = e.object(1u32)?;
    let queued = lane.stream()?.instr().name("queued").write(&out).submit(move || -> R {
        let _t = &t;
        r.fetch_add(1, Ordering::SeqCst);
        Ok(())
    })?;
    let reader = e.stream(0)?.instr().name("reader").read(&out).submit(|| -> R { Ok(()) })?;
    assert!(queued.cancel()?);
    gate.open();
    assert_eq!(queued.wait().unwrap_err().kind(), ErrorKind::Cancelled);
    assert_eq!(queued.state()?, InstrState::Cancelled);
    assert_eq!(e.stats()?.cancelled, 1);
    assert_eq!(reader.wait().unwrap_err().kind(), ErrorKind::DependencyFailed);
    assert_eq!((ran.load(Ordering::SeqCst), drops.load(Ordering::SeqCst)), (0, 1));
    blocker.wait()?;
    assert!(!blocker.cancel()?, "a completed instruction cannot be cancelled");
    drop(lane);
    e.synchronize()
}

#[test]
fn engine_and_stream_cancel_everything_not_started() -> Result<(), Error> {
    let e = Engine::builder().workers(2).lanes(4).build()?;
    let (lane, gate, blocker) = blocked_lane(&e)?;
    let queued: Vec<InstrHandle> =
        (0..3).map(|_| lane.stream()?.submit(|| -> R { Ok(()) })).collect::<Result<_, _>>()?;
    lane.stream()?.cancel()?;
    gate.open();
    for q in &queued {
        assert_eq!(q.wait().unwrap_err().kind(), ErrorKind::Cancelled);
    }
    blocker.wait()?; // it had started: it ran normally
    let (lane2, gate2, _b) = blocked_lane(&e)?;
    let more = lane2.stream()?.submit(|| -> R { Ok(()) })?;
    e.cancel()?;
    gate2.open();
    assert_eq!(more.wait().unwrap_err().kind(), ErrorKind::Cancelled);
    drop((lane, lane2));
    e.synchronize()
}

#[test]
fn drain_refuses_new_work_from_the_program_and_waits() -> Result<(), Error> {
    let e = Engine::builder().workers(2).build()?;
    let count = Arc::new(AtomicUsize::new(0));
    let (c, gate) = (count.clone(), Gate::new());
    let g = gate.clone();
    let outer = e.stream(0)?.instr().name("outer").submit_with_ctx(move |ctx| {
        g.wait().map_err(|m| Error::new(ErrorKind::Internal, m))?;
        // Submitted by the engine's own callback while draining: accepted, part of the drain.
        ctx.engine().stream(1)?.submit(move || -> R {
            c.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })?;
        Ok::<(), Error>(())
    })?;
    assert_eq!(e.drain(Some(Duration::from_millis(5))).unwrap_err().kind(), ErrorKind::Timeout);
    let refused = e.stream(0)?.submit(|| -> R { Ok(()) }).unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Shutdown);
    gate.open();
    outer.wait()?; // the follow-up is submitted by now
    e.drain(Some(LONG))?;
    assert_eq!(count.load(Ordering::SeqCst), 1);
    e.drain(None)
}

#[test]
fn a_scope_runs_tasks_that_borrow_the_stack() -> Result<(), Error> {
    let e = Engine::builder().workers(3).build()?;
    let mut data = vec![0u64; 1000];
    let total = AtomicUsize::new(0);
    e.scope(|s| -> Result<(), Error> {
        for (i, chunk) in data.chunks_mut(100).enumerate() {
            let total = &total;
            s.spawn(move |_| -> R {
                for (j, x) in chunk.iter_mut().enumerate() {
                    *x = (i * 100 + j) as u64;
                }
                total.fetch_add(chunk.len(), Ordering::SeqCst);
                Ok(())
            })?;
        }
        Ok(())
    })??;
    assert_eq!(total.load(Ordering::SeqCst), 1000);
    assert!(data.iter().enumerate().all(|(i, &x)| x == i as u64));
    Ok(())
}

fn fib(e: &Engine, n: u64) -> Result<u64, Error> {
    if n < 10 {
        return Ok(if n < 2 { n } else { fib(e, n - 1)? + fib(e, n - 2)? });
    }
    let (mut a, mut b) = (0, 0);
    e.scope(|s| -> Result<(), Error> {
        let (ra, rb) = (&mut a, &mut b);
        s.spawn(move |_| fib(e, n - 1).map(|v| *ra = v))?;
        s.spawn(move |_| fib(e, n - 2).map(|v| *rb = v))
    })??;
    Ok(a + b)
}

#[test]
fn scopes_nest_inside_tasks_and_tasks_spawn_tasks() -> Result<(), Error> {
    let e = Engine::builder().workers(2).build()?;
    assert_eq!(fib(&e, 20)?, 6765);
    let seen = AtomicUsize::new(0);
    e.scope(|s| {
        s.spawn(|s| {
            for _ in 0..10 {
                s.spawn(|_| -> R {
                    seen.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                })?;
            }
            Ok::<(), Error>(())
        })
    })??;
    assert_eq!(seen.load(Ordering::SeqCst), 10);
    Ok(())
}

#[test]
fn a_scope_inside_an_instruction() -> Result<(), Error> {
    let e = Engine::builder().workers(1).build()?;
    let out = e.object(0u64)?;
    let h = out.handle();
    let job = e.stream(0)?.instr().write(&out).submit_with_ctx(move |ctx| {
        let mut parts = [0u64; 4];
        ctx.engine().scope(|s| -> Result<(), Error> {
            for (i, p) in parts.iter_mut().enumerate() {
                s.spawn(move |_| -> R {
                    *p = (i as u64 + 1) * 10;
                    Ok(())
                })?;
            }
            Ok(())
        })??;
        *h.write() = parts.iter().sum();
        Ok::<(), Error>(())
    })?;
    job.wait_for(LONG)?;
    assert_eq!(out.get()?, 100);
    Ok(())
}

#[test]
fn a_failing_task_fails_the_scope_and_skipped_closures_are_dropped_once() -> Result<(), Error> {
    let e = Engine::builder().workers(1).build()?;
    let drops = Arc::new(AtomicUsize::new(0));
    let err = e
        .scope(|s| -> Result<(), Error> {
            s.spawn(|_| Err::<(), _>("disk full"))?;
            for _ in 0..50 {
                let t = Tracked(drops.clone());
                s.spawn(move |_| -> R {
                    let _t = &t;
                    Ok(())
                })?;
            }
            Ok(())
        })
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InstructionFailed);
    assert!(err.message().contains("disk full"), "{}", err);
    assert_eq!(drops.load(Ordering::SeqCst), 50, "every closure, run or skipped, is dropped once");
    Ok(())
}

#[test]
fn a_panicking_task_is_resumed_on_the_caller() {
    let e = Engine::builder().workers(2).build().unwrap();
    let finished = AtomicUsize::new(0);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        e.scope(|s| {
            s.spawn(|_| -> R { panic!("task panicked") }).unwrap();
            s.spawn(|_| -> R {
                std::thread::sleep(Duration::from_millis(20));
                finished.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
            .unwrap();
        })
    }));
    let p = r.unwrap_err();
    assert_eq!(p.downcast_ref::<&str>(), Some(&"task panicked"));
}

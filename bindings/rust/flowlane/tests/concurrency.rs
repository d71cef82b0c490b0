//! Concurrency as programs bring it: handles shared by scoped threads, panicking closures,
//! closures that submit and wait, engines dropped inside callbacks and on other threads,
//! and concurrent waiters sharing a batch of failures. Verdicts are counts, orders and
//! outcomes; deadlines only guard against hangs.
mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use common::Gate;
use flowlane::{Engine, Error, ErrorKind, Object};

type R = Result<(), String>;

fn s<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// Counts its drops (the engine drops closures in their cleanup, values in their release).
struct Tracked(Arc<AtomicUsize>);

impl Drop for Tracked {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Waits (hang guard only) until `counter` reaches `want`; returns what it reached.
fn settle(counter: &AtomicUsize, want: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(60);
    while counter.load(Ordering::SeqCst) < want && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    counter.load(Ordering::SeqCst)
}

/// The instruction ids an error message names ("(#12, lane 0, ...").
fn named_id(message: &str) -> u64 {
    let at = message.find("(#").expect("the message names an instruction") + 2;
    message[at..].chars().take_while(|c| c.is_ascii_digit()).collect::<String>().parse().unwrap()
}

#[test]
fn scoped_threads_on_several_lanes_see_the_submission_order_of_a_shared_object() -> Result<(), Error> {
    const THREADS: usize = 4;
    const PER_THREAD: usize = 150;
    let engine = Engine::builder().workers(2).lanes(8).build()?;
    let log: Object<Vec<(u64, usize, usize)>> = engine.object(Vec::new())?;
    let snapshots = engine.object(Vec::<(u64, usize)>::new())?; // (reader id, entries it saw)
    let start = Barrier::new(THREADS);
    std::thread::scope(|sc| -> Result<(), Error> {
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (engine, log, snapshots, start) = (&engine, &log, &snapshots, &start);
                sc.spawn(move || -> Result<(), Error> {
                    let lane = engine.acquire_lane()?;
                    let stream = lane.stream()?;
                    start.wait();
                    for i in 0..PER_THREAD {
                        let l = log.handle();
                        stream.instr().name("append").read_write(log).submit_with_ctx(move |ctx| -> R {
                            l.write().push((ctx.id(), t, i));
                            Ok(())
                        })?;
                        if i % 10 == 9 {
                            let (l, sn) = (log.handle(), snapshots.handle());
                            // Reads the log, writes a shared snapshot list: ordered after every
                            // earlier append, before every later one.
                            stream.instr().name("snapshot").read(log).read_write(snapshots).submit_with_ctx(
                                move |ctx| -> R {
                                    sn.write().push((ctx.id(), l.read().len()));
                                    Ok(())
                                },
                            )?;
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        for w in workers {
            w.join().expect("a submitting thread panicked")?;
        }
        Ok(())
    })?;
    engine.synchronize()?;
    let entries = log.get()?;
    assert_eq!(entries.len(), THREADS * PER_THREAD);
    let ids: Vec<u64> = entries.iter().map(|e| e.0).collect();
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    assert_eq!(ids, sorted, "the writers of one object ran out of submission order");
    for t in 0..THREADS {
        let mine: Vec<usize> = entries.iter().filter(|e| e.1 == t).map(|e| e.2).collect();
        assert_eq!(mine, (0..PER_THREAD).collect::<Vec<_>>(), "thread {}'s program order", t);
    }
    let snaps = snapshots.get()?;
    assert_eq!(snaps.len(), THREADS * PER_THREAD / 10);
    for (reader, seen) in snaps {
        assert_eq!(seen, ids.iter().filter(|&&w| w < reader).count(), "reader #{}", reader);
    }
    Ok(())
}

#[test]
fn panics_from_several_threads_are_contained_and_skip_their_dependents() -> Result<(), Error> {
    const THREADS: usize = 4;
    let engine = Engine::builder().workers(2).lanes(8).build()?;
    let drops = Arc::new(AtomicUsize::new(0));
    let ran = Arc::new(AtomicUsize::new(0));
    let outcomes = Mutex::new(Vec::new());
    std::thread::scope(|sc| {
        for t in 0..THREADS {
            let (engine, drops, ran, outcomes) = (&engine, &drops, &ran, &outcomes);
            sc.spawn(move || {
                let run = || -> Result<(ErrorKind, String, ErrorKind, String), Error> {
                    let (x, y) = (engine.object(0u32)?, engine.object(0u32)?);
                    let tracked = Tracked(Arc::clone(drops));
                    engine.stream(1 + t as u32)?.instr().name("panics").write(&x).submit(move || -> R {
                        let _t = &tracked;
                        if t % 2 == 0 {
                            panic!("thread {} panicked on purpose", t);
                        }
                        std::panic::panic_any(t); // a payload that is not a string
                    })?;
                    let (tracked, ran) = (Tracked(Arc::clone(drops)), Arc::clone(ran));
                    engine.stream(5 + (t as u32 % 3))?.instr().name("dependent").read(&x).write(&y).submit(
                        move || -> R {
                            let _t = &tracked;
                            ran.fetch_add(1, Ordering::SeqCst);
                            Ok(())
                        },
                    )?;
                    let ey = y.get().unwrap_err();
                    let ex = x.get().unwrap_err();
                    Ok((ex.kind(), ex.message().to_string(), ey.kind(), ey.message().to_string()))
                };
                outcomes.lock().unwrap().push((t, run()));
            });
        }
    });
    engine.synchronize()?; // the object waits observed every failure
    assert_eq!(ran.load(Ordering::SeqCst), 0, "a dependent of a panicked instruction ran");
    assert_eq!(settle(&drops, 2 * THREADS), 2 * THREADS, "every closure is dropped once");
    for (t, outcome) in outcomes.into_inner().unwrap() {
        let (kx, mx, ky, my) = outcome?;
        assert_eq!(kx, ErrorKind::InstructionFailed, "{}", mx);
        assert_eq!(ky, ErrorKind::DependencyFailed, "{}", my);
        let text = if t % 2 == 0 { format!("panicked: thread {} panicked on purpose", t) } else {
            "panicked: a non-string panic payload".to_string()
        };
        assert!(mx.contains(&text), "{}", mx);
        assert!(my.contains("'panics'"), "{}", my);
    }
    // The engine and its workers are still fine.
    let o = engine.object(1u32)?;
    let h = o.handle();
    engine.stream(0)?.instr().read_write(&o).submit(move || -> R {
        *h.write() += 1;
        Ok(())
    })?;
    assert_eq!(o.get()?, 2);
    Ok(())
}

#[test]
fn closures_submit_wait_query_and_are_refused_waits_on_themselves() -> Result<(), Error> {
    let engine = Engine::builder().workers(2).lanes(4).build()?;
    let out = engine.object(Vec::<String>::new())?;
    let o = out.handle();
    engine.stream(1)?.instr().name("parent").write(&out).submit_with_ctx(move |ctx| -> R {
        let e = ctx.engine();
        let mut seen = Vec::new();
        // Work on another lane, waited for here through its handle and its object.
        let v = e.object(20u64).map_err(s)?;
        let h = v.handle();
        let child = e.stream(ctx.lane() + 1).map_err(s)?.instr().read_write(&v).submit(move || -> R {
            *h.write() += 22;
            Ok(())
        });
        child.map_err(s)?.wait().map_err(s)?;
        seen.push(format!("child {}", v.get().map_err(s)?));
        seen.push(format!("stats {}", e.stats().map_err(s)?.submitted >= 2));
        let lane = e.acquire_lane().map_err(s)?;
        seen.push(format!("lane {}", lane.id() < e.lane_count()));
        drop(lane);
        // What would wait for the caller itself is refused, and the engine stays usable.
        let refused = |r: Result<(), Error>| match r {
            Err(err) if err.kind() == ErrorKind::InvalidArgument => "refused".to_string(),
            other => format!("{:?}", other),
        };
        seen.push(format!("synchronize {}", refused(e.synchronize())));
        seen.push(format!("drain {}", refused(e.drain(Some(Duration::from_secs(30))))));
        seen.push(format!("own lane {}", refused(ctx.stream().and_then(|st| st.synchronize()))));
        *o.write() = seen;
        Ok(())
    })?;
    assert_eq!(
        out.get()?,
        vec![
            "child 42",
            "stats true",
            "lane true",
            "synchronize refused",
            "drain refused",
            "own lane refused"
        ]
    );
    engine.synchronize()
}

#[test]
fn the_last_handle_dropped_inside_a_callback_still_drains_every_queued_closure() -> Result<(), Error> {
    const QUEUED: usize = 100;
    let ran = Arc::new(AtomicUsize::new(0));
    let drops = Arc::new(AtomicUsize::new(0));
    let gate = Gate::new();
    {
        let engine = Engine::builder().workers(2).lanes(2).build()?;
        let acc = engine.object(Tracked(Arc::clone(&drops)))?;
        let owner = engine.clone();
        let g = gate.clone();
        // The first instruction holds the only owning handle left once this block ends; it
        // drops it inside its body, with the rest of the chain still queued behind it.
        engine.stream(0)?.instr().name("drop the engine").read_write(&acc).submit(move || -> R {
            g.wait()?;
            drop(owner);
            Ok(())
        })?;
        for _ in 0..QUEUED {
            let (ran, t) = (Arc::clone(&ran), Tracked(Arc::clone(&drops)));
            engine.stream(1)?.instr().read_write(&acc).submit(move || -> R {
                let _t = &t;
                ran.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })?;
        }
    } // engine, acc: dropped here; the engine lives on in the first closure
    gate.open();
    // The drain runs on a helper thread: every closure runs, then each closure and the
    // object's value are dropped once.
    assert_eq!(settle(&drops, QUEUED + 1), QUEUED + 1);
    assert_eq!(ran.load(Ordering::SeqCst), QUEUED);
    Ok(())
}

#[test]
fn the_last_handles_dropped_on_another_thread_drain_the_queued_work_there() -> Result<(), Error> {
    const QUEUED: usize = 200;
    let engine = Engine::builder().workers(2).lanes(4).build()?;
    let acc = engine.object(0usize)?;
    let gate = Gate::new();
    let g = gate.clone();
    engine.stream(0)?.instr().read_write(&acc).submit(move || g.wait())?;
    for i in 0..QUEUED {
        let h = acc.handle();
        engine.stream(i as u32 % 4)?.instr().read_write(&acc).submit(move || -> R {
            *h.write() += 1;
            Ok(())
        })?;
    }
    let value = acc.handle();
    let stream = engine.stream(3)?;
    // Engine, object and stream move to a thread that drops them: the drain (blocked on the
    // gate) happens there, while this thread is free to open the gate.
    let dropper = std::thread::spawn(move || {
        drop(acc);
        drop(engine);
        drop(stream);
    });
    gate.open();
    dropper.join().expect("dropping the engine panicked");
    assert_eq!(*value.read(), QUEUED);
    Ok(())
}

#[test]
fn concurrent_waiters_get_each_failure_of_a_flood_exactly_once() -> Result<(), Error> {
    const FAILURES: u64 = 400;
    const WAITERS: usize = 4;
    let engine = Engine::builder().workers(2).lanes(4).build()?;
    let drops = Arc::new(AtomicUsize::new(0));
    let mut ids = BTreeSet::new();
    for i in 0..FAILURES {
        let t = Tracked(Arc::clone(&drops));
        let target = engine.object(0u8)?;
        let h = engine.stream((i % 4) as u32)?.instr().name("fails").write(&target).submit(move || {
            let _t = &t;
            Err(format!("failure {}", i))
        })?;
        ids.insert(h.id());
    }
    let reported = Mutex::new(Vec::new());
    let start = Barrier::new(WAITERS);
    std::thread::scope(|sc| {
        for _ in 0..WAITERS {
            let (engine, reported, start) = (&engine, &reported, &start);
            sc.spawn(move || {
                start.wait();
                while let Err(e) = engine.synchronize() {
                    reported.lock().unwrap().push(e);
                }
            });
        }
    });
    let mut reported = reported.into_inner().unwrap();
    // A waiter may get Ok while another still holds an entry: collect what is left.
    while let Err(e) = engine.synchronize() {
        reported.push(e);
    }
    assert!(reported.iter().all(|e| e.kind() == ErrorKind::InstructionFailed));
    let mut got: Vec<u64> = reported.iter().map(|e| named_id(e.message())).collect();
    got.sort_unstable();
    assert_eq!(got, ids.into_iter().collect::<Vec<_>>(), "each failure reported once, to one waiter");
    assert_eq!(settle(&drops, FAILURES as usize), FAILURES as usize);
    assert_eq!(engine.stats()?.failed, FAILURES);
    Ok(())
}

/// What leaves a callback through its context's engine owns the engine: a clone of the
/// view, and a stream made from it, sent to another thread keep working there while the
/// last of the program's own handles is dropped, and the engine is destroyed only when
/// they go. (When a clone was a second non-owning view, its calls raced the destroy run by
/// that drop: a use-after-free reachable from safe code.)
#[test]
fn what_leaves_a_callback_through_its_context_owns_the_engine() -> Result<(), Error> {
    for _ in 0..100 {
        let engine = Engine::builder().workers(1).lanes(2).build()?;
        let (tx, rx) = std::sync::mpsc::channel();
        engine.stream(0)?.instr().submit_with_ctx(move |ctx| -> R {
            assert!(!ctx.engine().is_owning());
            let stream = ctx.engine().stream(1).map_err(s)?;
            tx.send((ctx.engine().clone(), stream)).map_err(s) // escapes: 'static and Send
        })?;
        let (escaped, stream) = rx.recv().unwrap();
        assert!(escaped.is_owning() && stream.engine().is_owning());
        let prober = std::thread::spawn(move || -> Result<u64, Error> {
            let mut ran = 0u64;
            for _ in 0..50 {
                escaped.stats()?;
                stream.submit(|| -> R { Ok(()) })?;
                stream.synchronize()?;
                ran += 1;
            }
            Ok(ran) // the last owner goes here (or with the main thread's drop)
        });
        drop(engine);
        assert_eq!(prober.join().unwrap()?, 50);
    }
    Ok(())
}

/// Once the engine's last owner is gone, the callbacks the destroy still runs see their
/// context's view work, but nothing can be made from it any more: handles fail with
/// `Shutdown`, and a clone names no engine (`InvalidHandle`), so nothing outlives the
/// engine.
#[test]
fn a_view_of_an_engine_being_destroyed_makes_no_handles() -> Result<(), Error> {
    let engine = Engine::builder().workers(1).lanes(2).build()?;
    let (tx, rx) = std::sync::mpsc::channel();
    engine.stream(0)?.instr().submit_with_ctx(move |ctx| -> R {
        // Wait for the main thread's drop: then a clone of the view no longer owns.
        let deadline = Instant::now() + Duration::from_secs(30);
        while ctx.engine().clone().is_owning() {
            if Instant::now() > deadline {
                return Err("the engine was never dropped".into());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let gone = ctx.engine().clone();
        let answers = (
            ctx.engine().stats().is_ok(),
            ctx.engine().stream(1).map(|_| ()).map_err(|e| e.kind()),
            ctx.engine().object(1u8).map(|_| ()).map_err(|e| e.kind()),
            ctx.engine().acquire_lane().map(|_| ()).map_err(|e| e.kind()),
            gone.stats().map(|_| ()).map_err(|e| e.kind()),
            gone.as_raw().is_null(),
        );
        tx.send(answers).map_err(s)
    })?;
    drop(engine); // the destroy drains: it waits for the callback above
    let (view_stats, stream, object, lane, gone_stats, gone_null) = rx.recv().unwrap();
    assert!(view_stats, "the view works while the engine drains");
    assert_eq!(stream, Err(ErrorKind::Shutdown));
    assert_eq!(object, Err(ErrorKind::Shutdown));
    assert_eq!(lane, Err(ErrorKind::Shutdown));
    assert_eq!(gone_stats, Err(ErrorKind::InvalidHandle));
    assert!(gone_null);
    Ok(())
}

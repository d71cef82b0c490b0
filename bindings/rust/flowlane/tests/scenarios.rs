//! The scenarios of docs/design.md through the safe Rust crate (same as the Python suite).
//! None relies on timing for its verdict: what must not be waited for is held behind a
//! gate that opens only after the property has been observed.
mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::{resident_kib, Gate};
use flowlane::{Engine, Error};

type R = Result<(), String>;

#[test]
fn print_loss_does_not_wait_for_backward() -> Result<(), Error> {
    let engine = Engine::builder().workers(2).lanes(4).build()?;
    let gate = Gate::new();
    let loss = engine.object(0.0f64)?;
    let grads = engine.object(0u64)?;
    let printed = engine.object(String::new())?;
    let lane0 = engine.stream(0)?;
    let l = loss.handle();
    lane0.instr().name("forward").write(&loss).submit(move || -> R {
        *l.write() = 2.5;
        Ok(())
    })?;
    let g = gate.clone();
    lane0.instr().name("backward.gate").read(&loss).write(&grads).submit(move || g.wait())?;
    for _ in 0..100 {
        let gr = grads.handle();
        lane0.instr().name("backward").read_write(&grads).submit(move || -> R {
            *gr.write() += 1;
            Ok(())
        })?;
    }
    let lane1 = engine.acquire_lane()?;
    assert!(lane1.id() >= 1);
    let (l, p) = (loss.handle(), printed.handle());
    lane1.stream()?.instr().name("print(loss)").read(&loss).write(&printed).submit(move || -> R {
        *p.write() = format!("loss={}", *l.read());
        Ok(())
    })?;
    // Returns while lane 0's chain is still held at its gate.
    assert_eq!(printed.get()?, "loss=2.5");
    // At most forward and print(loss) (the counter may trail the wait by a moment).
    assert!(engine.stats()?.completed <= 2, "print(loss) waited for backward");
    gate.open();
    engine.synchronize()?;
    assert_eq!(grads.get()?, 100);
    Ok(())
}

#[test]
fn if_nan_check_on_another_lane_never_stalls_lane0() -> Result<(), Error> {
    let engine = Engine::builder().workers(2).build()?;
    let gate = Gate::new();
    let x = engine.object(0.0f64)?;
    let copy = engine.object(f64::NAN)?;
    let y = engine.object(0.0f64)?;
    let hx = x.handle();
    engine.stream(0)?.instr().name("produce").write(&x).submit(move || -> R {
        *hx.write() = 1.0;
        Ok(())
    })?;
    let check_lane = engine.acquire_lane()?;
    let (hx, hc, g) = (x.handle(), copy.handle(), gate.clone());
    check_lane.stream()?.instr().name("copy-for-check").read(&x).write(&copy).submit(move || -> R {
        let v = *hx.read();
        g.wait()?;
        *hc.write() = v;
        Ok(())
    })?;
    let lane0 = engine.stream(0)?;
    for _ in 0..200 {
        let (hx, hy) = (x.handle(), y.handle());
        lane0.instr().name("step").read(&x).read_write(&y).submit(move || -> R {
            *hy.write() += *hx.read();
            Ok(())
        })?;
    }
    lane0.synchronize()?; // returns although the check is held
    assert_eq!(y.get()?, 200.0);
    gate.open();
    let v = copy.get()?;
    assert_eq!(v, 1.0);
    assert!(!v.is_nan());
    Ok(())
}

#[test]
fn for_loop_of_fresh_lanes_keeps_memory_flat() -> Result<(), Error> {
    let iters = 100_000usize;
    let warmup = iters / 10;
    let engine = Engine::builder().workers(2).build()?;
    let ran = Arc::new(AtomicUsize::new(0));
    let mut seen = HashSet::new();
    let mut rss_warm = 0;
    for k in 0..iters {
        {
            let lane = engine.acquire_lane()?;
            let s = lane.stream()?;
            seen.insert(s.clone());
            let o = engine.object(k)?;
            let (r, h) = (ran.clone(), o.handle());
            s.instr().name("work").read_write(&o).submit(move || -> R {
                *h.write() += 1;
                r.fetch_add(1, Ordering::Relaxed);
                Ok(())
            })?;
        } // object released, lane released
        if k == warmup {
            engine.synchronize()?;
            rss_warm = resident_kib();
        }
    }
    engine.synchronize()?;
    let rss_end = resident_kib();
    assert_eq!(ran.load(Ordering::Relaxed), iters);
    assert_eq!(seen.len(), 1, "a fresh lane each iteration should be the same recycled lane");
    assert_eq!(engine.stats()?.completed, iters as u64);
    assert!(
        rss_end - rss_warm < 16 * 1024,
        "RSS grew from {} KiB to {} KiB over {} iterations",
        rss_warm,
        rss_end,
        iters
    );
    Ok(())
}

#[test]
fn decoder_compute_loss_stages_are_ordered_per_batch() -> Result<(), Error> {
    let engine = Engine::builder().workers(3).lanes(4).build()?;
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut losses = Vec::new();
    for i in 0..12usize {
        let inp = engine.object(0usize)?;
        let out = engine.object(0usize)?;
        let loss = engine.object(0usize)?;
        let (lg, h) = (log.clone(), inp.handle());
        engine.stream(1)?.instr().name("h2d").write(&inp).submit(move || -> R {
            lg.lock().unwrap().push(("h2d", i));
            *h.write() = i;
            Ok(())
        })?;
        let (lg, hi, ho) = (log.clone(), inp.handle(), out.handle());
        engine.stream(0)?.instr().name("compute").read(&inp).write(&out).submit(move || -> R {
            lg.lock().unwrap().push(("compute", i));
            *ho.write() = *hi.read();
            Ok(())
        })?;
        let (lg, ho, hl) = (log.clone(), out.handle(), loss.handle());
        engine.stream(2)?.instr().name("loss").read(&out).write(&loss).submit(move || -> R {
            lg.lock().unwrap().push(("loss", i));
            *hl.write() = *ho.read();
            Ok(())
        })?;
        losses.push(loss);
    }
    engine.synchronize()?;
    let log = log.lock().unwrap();
    let pos = |e: (&str, usize)| log.iter().position(|x| *x == e).unwrap();
    for (i, loss) in losses.iter().enumerate() {
        assert!(pos(("h2d", i)) < pos(("compute", i)));
        assert!(pos(("compute", i)) < pos(("loss", i)));
        assert_eq!(loss.get()?, i);
    }
    Ok(())
}

#[test]
fn fork_join_through_phony_objects_orders_across_lanes() -> Result<(), Error> {
    let engine = Engine::builder().workers(2).lanes(4).build()?;
    let gate = Gate::new();
    let order = Arc::new(Mutex::new(Vec::new()));
    let a = engine.phony()?;
    let b = engine.phony()?;
    let phony = engine.phony()?;
    let push = |o: &Arc<Mutex<Vec<&'static str>>>, s: &'static str| {
        let o = o.clone();
        move || -> R {
            o.lock().unwrap().push(s);
            Ok(())
        }
    };
    let (g, o) = (gate.clone(), order.clone());
    engine.stream(1)?.instr().name("a").write(&a).submit(move || -> R {
        g.wait()?;
        o.lock().unwrap().push("a");
        Ok(())
    })?;
    engine.stream(1)?.instr().name("fork").read(&a).write(&phony).submit(push(&order, "fork"))?;
    engine.stream(2)?.instr().name("join").read(&phony).write(&b).submit(push(&order, "join"))?;
    engine.stream(2)?.instr().name("b").read_write(&b).submit(push(&order, "b"))?;
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert!(order.lock().unwrap().is_empty(), "join/b ran before a");
    gate.open();
    engine.synchronize()?;
    assert_eq!(*order.lock().unwrap(), vec!["a", "fork", "join", "b"]);
    Ok(())
}

#[test]
fn many_threads_submit_concurrently_through_a_shared_engine() -> Result<(), Error> {
    let engine = Engine::builder().workers(2).lanes(8).build()?;
    let counter = engine.object(0u64)?;
    std::thread::scope(|scope| {
        let producers: Vec<_> = (0..4)
            .map(|_| {
                scope.spawn(|| -> Result<(), Error> {
                let lane = engine.acquire_lane()?;
                let s = lane.stream()?;
                for _ in 0..500 {
                    let h = counter.handle();
                    s.instr().read_write(&counter).submit(move || -> R {
                        *h.write() += 1;
                        Ok(())
                    })?;
                }
                    Ok(())
                })
            })
            .collect();
        for p in producers {
            p.join().expect("producer panicked").expect("producer failed");
        }
    });
    assert_eq!(counter.get()?, 2000);
    Ok(())
}

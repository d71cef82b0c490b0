//! Instruction handles (state, timed waits, cancel) and scopes (fork-join that borrows the
//! stack), from bindings/rust: `cargo run --offline --example handles_and_scopes`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use flowlane::{Access, Engine, Error, ErrorKind, InstrState};

type R = Result<(), String>;

fn main() -> Result<(), Error> {
    let engine = Engine::builder().workers(4).lanes(4).build()?;

    // 1. A slow instruction: a timed wait that times out, then one that succeeds.
    let release = Arc::new(AtomicBool::new(false));
    let result = engine.object(0u64)?;
    let (r, h) = (release.clone(), result.handle());
    let slow = engine.stream(1)?.instr().name("slow").write(&result).submit(move || -> R {
        while !r.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        *h.write() = 42;
        Ok(())
    })?;
    match result.wait_for(Access::Read, Duration::from_millis(20)) {
        Err(e) if e.kind() == ErrorKind::Timeout => println!("handles_and_scopes: not ready after 20 ms: {}", e),
        other => panic!("expected a timeout, got {:?}", other),
    }
    release.store(true, Ordering::SeqCst);
    slow.wait_for(Duration::from_secs(60))?;
    println!("handles_and_scopes: #{} is {:?}, value {}", slow.id(), slow.state()?, result.get()?);

    // 2. Cancel what has not started: the lane is held by a running instruction.
    let hold = Arc::new(AtomicBool::new(false));
    let hd = hold.clone();
    let lane = engine.acquire_lane()?;
    lane.stream()?.instr().name("hold").submit(move || -> R {
        while !hd.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    })?;
    let queued = lane.stream()?.instr().name("queued").submit(|| -> R { panic!("cancelled: never runs") })?;
    let registered = queued.cancel()?;
    hold.store(true, Ordering::SeqCst);
    let outcome = queued.wait();
    println!("handles_and_scopes: cancel registered {}, outcome {:?}", registered, outcome.as_ref().map_err(|e| e.kind()));
    assert_eq!(queued.state()?, InstrState::Cancelled);

    // 3. A scope: tasks borrow disjoint parts of a local vector, and spawn more tasks.
    let mut squares = vec![0u64; 64];
    engine.scope(|s| -> Result<(), Error> {
        for (i, chunk) in squares.chunks_mut(16).enumerate() {
            s.spawn(move |s| {
                let (a, b) = chunk.split_at_mut(8);
                s.spawn(move |_| -> R {
                    for (j, x) in b.iter_mut().enumerate() {
                        *x = ((i * 16 + 8 + j) as u64).pow(2);
                    }
                    Ok(())
                })?;
                for (j, x) in a.iter_mut().enumerate() {
                    *x = ((i * 16 + j) as u64).pow(2);
                }
                Ok::<(), Error>(())
            })?;
        }
        Ok(())
    })??;
    let ok = squares.iter().enumerate().all(|(i, &x)| x == (i as u64).pow(2));
    println!("handles_and_scopes: scope filled {} squares", squares.len());
    drop(lane);
    engine.synchronize_for(Duration::from_secs(60)).or_else(|e| {
        // The cancellation is reported once, as any failure.
        if e.kind() == ErrorKind::Cancelled { Ok(()) } else { Err(e) }
    })?;
    println!("handles_and_scopes: {}", if ok { "ok" } else { "MISMATCH" });
    if ok { Ok(()) } else { Err(Error::new(ErrorKind::Internal, "wrong squares")) }
}

//! print(loss) in Rust: lane 1 reads the loss while lane 0's long backward chain runs.
//! Run: (cd bindings/rust && cargo run --offline --example quickstart)
use flowlane::{Engine, Error};

fn main() -> Result<(), Error> {
    let engine = Engine::builder().workers(2).build()?;
    let loss = engine.object(0.0f64)?;
    let grads = engine.object(vec![0.0f64; 4])?;
    let printed = engine.object(String::new())?;

    let lane0 = engine.stream(0)?;
    let (l, g) = (loss.handle(), grads.handle());
    lane0.instr().name("forward").write(&loss).submit(move || {
        *l.write() = 2.5;
        Ok::<(), Error>(())
    })?;
    for step in 0..100 {
        let g = g.clone();
        lane0.instr().name("backward").read(&loss).read_write(&grads).submit(move || {
            for x in g.write().iter_mut() {
                *x += step as f64;
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
            Ok::<(), Error>(())
        })?;
    }

    let lane1 = engine.acquire_lane()?;
    let (l, p) = (loss.handle(), printed.handle());
    lane1.stream()?.instr().name("print(loss)").read(&loss).write(&printed).submit(move || {
        *p.write() = format!("loss = {}", *l.read());
        Ok::<(), Error>(())
    })?;
    // Waits for print(loss) only, not for the backward chain.
    println!("{} (completed so far: {})", printed.get()?, engine.stats()?.completed);

    // A failing instruction: its error reaches whoever waits on what it wrote.
    let bad = engine.object(0u32)?;
    lane0.instr().name("divide").write(&bad).submit(|| Err::<(), _>("division by zero"))?;
    match bad.get() {
        Err(e) => println!("as expected: {}", e),
        Ok(v) => println!("unexpected value {}", v),
    }

    // Fork-join work on the same workers.
    let sum = std::sync::atomic::AtomicU64::new(0);
    engine.parallel_for(0..1_000_000, 0, |r| {
        sum.fetch_add(r.sum::<u64>(), std::sync::atomic::Ordering::Relaxed);
        Ok::<(), Error>(())
    })?;
    let sum = sum.into_inner();
    println!("sum = {}", sum);
    engine.synchronize()?;
    let grads = grads.get()?;
    println!("grads = {:?}", grads);
    assert_eq!(sum, 499_999_500_000);
    assert_eq!(grads, vec![4950.0; 4]);
    println!("quickstart: ok");
    Ok(())
}

//! Owned, reference-counted handles (a struct owns an engine with its objects; handles keep
//! the engine alive; the last one drains it) and `par_chunks_mut`.
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use flowlane::{Engine, Error, ErrorKind, Lane, Object, Stream};

type R = Result<(), String>;

/// Counts its drops: the engine drops an object's value in the object's release callback.
struct Tracked(Arc<AtomicUsize>);

impl Drop for Tracked {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

struct Pipeline {
    // Field order is drop order: the engine handle goes first, the others keep it alive.
    engine: Engine,
    weights: Object<Vec<f64>>,
    activations: Object<Vec<f64>>,
    stream: Stream,
    side: Lane,
}

impl Pipeline {
    fn new() -> Result<Pipeline, Error> {
        let engine = Engine::builder().workers(2).lanes(4).build()?;
        let weights = engine.object(vec![0.5; 8])?;
        let activations = engine.object(vec![0.0; 8])?;
        let stream = engine.stream(0)?;
        let side = engine.acquire_lane()?;
        Ok(Pipeline { engine, weights, activations, stream, side })
    }

    fn step(&self, x: f64) -> Result<flowlane::InstrHandle, Error> {
        let (w, a) = (self.weights.handle(), self.activations.handle());
        self.stream.instr().name("step").read(&self.weights).write(&self.activations).submit(move || -> R {
            let w = w.read();
            for (out, wi) in a.write().iter_mut().zip(w.iter()) {
                *out += wi * x;
            }
            Ok(())
        })
    }
}

#[test]
fn a_struct_owns_its_engine_objects_streams_and_lanes() -> Result<(), Error> {
    let p = Pipeline::new()?;
    for x in 1..=4 {
        p.step(x as f64)?;
    }
    assert_eq!(p.activations.get()?, vec![5.0; 8]);
    assert_eq!(p.side.id(), 1);
    assert_eq!(p.side.stream()?.lane()?, 1);
    assert_eq!(p.engine.worker_count(), 2);
    let boxed: Box<Pipeline> = Box::new(p); // movable: nothing borrows anything
    boxed.step(1.0)?;
    assert_eq!(boxed.activations.get()?, vec![5.5; 8]);
    Ok(())
}

#[test]
fn handles_keep_the_engine_alive_and_the_last_one_drains_it() -> Result<(), Error> {
    let released = Arc::new(AtomicUsize::new(0));
    let ran = Arc::new(AtomicUsize::new(0));
    let engine = Engine::builder().workers(2).build()?;
    let obj = engine.object(Tracked(released.clone()))?;
    let stream = engine.stream(0)?;
    drop(engine);
    // The object and the stream still work: they own the engine now.
    for _ in 0..200 {
        let r = ran.clone();
        stream.instr().read(&obj).submit(move || -> R {
            r.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })?;
    }
    obj.wait(flowlane::Access::Read)?;
    drop(obj); // released by the engine only once the engine lets go of it
    drop(stream); // the last handle: drains, runs every release, joins
    assert_eq!(ran.load(Ordering::SeqCst), 200, "dropping the last handle drains all work");
    assert_eq!(released.load(Ordering::SeqCst), 1, "the value was released by the engine's destroy");
    Ok(())
}

#[test]
fn clones_share_one_engine_across_threads() -> Result<(), Error> {
    let engine = Engine::builder().workers(2).build()?;
    let counter = engine.object(0u64)?;
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let e = engine.clone();
            let c = counter.handle();
            let obj_stream = e.stream(0).unwrap();
            std::thread::spawn(move || -> Result<(), Error> {
                for _ in 0..50 {
                    let c = c.clone();
                    obj_stream.submit(move || -> R {
                        *c.write() += 1;
                        Ok(())
                    })?;
                }
                e.synchronize()
            })
        })
        .collect();
    for t in threads {
        t.join().expect("thread")?;
    }
    engine.synchronize()?;
    assert_eq!(counter.get()?, 200);
    assert_eq!(engine.clone().as_raw(), engine.as_raw());
    Ok(())
}

/// The context's view does not own the engine (a closure using it makes no cycle); what is
/// made from it does, as it may leave the callback.
#[test]
fn the_context_engine_is_a_view_and_what_is_made_from_it_owns_the_engine() -> Result<(), Error> {
    let engine = Engine::builder().workers(1).build()?;
    let out = engine.object((true, true))?;
    let o = out.handle();
    engine.stream(0)?.instr().write(&out).submit_with_ctx(move |ctx| -> R {
        let inner = ctx.engine().object(5u8).map_err(|e| e.to_string())?;
        *o.write() = (ctx.engine().is_owning(), inner.engine().is_owning());
        Ok(())
    })?;
    assert_eq!(out.get()?, (false, true));
    assert!(engine.is_owning());
    engine.stream(0)?.instr().submit_with_ctx(|ctx| -> R {
        ctx.engine().set_watchdog(10, None::<fn(&str)>).map_err(|e| e.to_string())
    })?;
    let failed = engine.synchronize().unwrap_err();
    assert!(failed.message().contains("owning Engine"), "{}", failed);
    Ok(())
}

#[test]
fn par_chunks_mut_hands_out_disjoint_chunks() -> Result<(), Error> {
    let engine = Engine::builder().workers(2).build()?;
    let mut v = vec![u32::MAX; 1003];
    let calls = AtomicUsize::new(0);
    engine.par_chunks_mut(&mut v, 10, |i, chunk| -> R {
        calls.fetch_add(1, Ordering::Relaxed);
        assert!(chunk.len() == 10 || (i == 100 && chunk.len() == 3), "chunk {} has {}", i, chunk.len());
        for (k, x) in chunk.iter_mut().enumerate() {
            assert_eq!(*x, u32::MAX, "element {} of chunk {} written twice", k, i);
            *x = (i * 10 + k) as u32;
        }
        Ok(())
    })?;
    assert_eq!(calls.into_inner(), 101);
    assert!(v.iter().enumerate().all(|(k, &x)| x == k as u32));

    let mut empty: Vec<u8> = Vec::new();
    engine.par_chunks_mut(&mut empty, 4, |_, _| -> R { panic!("no chunk in an empty slice") })?;
    let err = engine.par_chunks_mut(&mut v, 0, |_, _| -> R { Ok(()) }).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.message().contains("chunk_size"), "{}", err);
    Ok(())
}

#[test]
fn par_chunks_mut_reports_errors_and_resumes_panics() -> Result<(), Error> {
    let engine = Engine::builder().workers(2).build()?;
    let mut v = vec![0i64; 64];
    let err = engine
        .par_chunks_mut(&mut v, 8, |i, _| -> R {
            if i == 3 {
                Err(format!("chunk {} is bad", i))
            } else {
                Ok(())
            }
        })
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InstructionFailed);
    assert!(err.message().contains("chunk 3 is bad"), "{}", err);
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = engine.par_chunks_mut(&mut v, 8, |i, _| -> R {
            if i == 5 {
                panic!("boom in chunk {}", i);
            }
            Ok(())
        });
    }));
    let payload = caught.unwrap_err();
    assert_eq!(payload.downcast_ref::<String>().map(String::as_str), Some("boom in chunk 5"));
    Ok(())
}

//! A struct that owns its engine, objects and lanes (owned, reference-counted handles),
//! three stages on three lanes ordered only through objects, and `par_chunks_mut` for the
//! data-parallel part of a stage.
//! Run: (cd bindings/rust && cargo run --offline --example owned_pipeline)
use flowlane::{Engine, Error, Lane, Object};

/// Loads, normalises and summarises batches; each stage runs on its own lane.
struct Pipeline {
    engine: Engine,
    load: Lane,
    compute: Lane,
    report: Lane,
    summaries: Object<Vec<String>>,
}

impl Pipeline {
    fn new() -> Result<Pipeline, Error> {
        let engine = Engine::builder().workers(2).lanes(4).build()?;
        let (load, compute, report) = (engine.acquire_lane()?, engine.acquire_lane()?, engine.acquire_lane()?);
        let summaries = engine.object(Vec::new())?;
        Ok(Pipeline { engine, load, compute, report, summaries })
    }

    /// Submits one batch through the three stages; returns at once.
    fn push(&self, batch: usize) -> Result<Object<Vec<f64>>, Error> {
        let data = self.engine.object(Vec::<f64>::new())?;
        let d = data.handle();
        self.load.stream()?.instr().name("load").write(&data).submit(move || {
            *d.write() = (0..10_000).map(|i| ((i * 7 + batch * 13) % 101) as f64).collect();
            Ok::<(), Error>(())
        })?;
        let d = data.handle();
        self.compute.stream()?.instr().name("normalise").read_write(&data).submit_with_ctx(move |ctx| {
            let mut v = d.write();
            let max = v.iter().cloned().fold(0.0, f64::max);
            // Data-parallel inside the instruction: disjoint &mut chunks on the workers.
            ctx.engine().par_chunks_mut(&mut v, 1024, |_, chunk| {
                chunk.iter_mut().for_each(|x| *x /= max);
                Ok::<(), Error>(())
            })
        })?;
        let (d, s) = (data.handle(), self.summaries.handle());
        self.report.stream()?.instr().name("report").read(&data).read_write(&self.summaries).submit(move || {
            let v = d.read();
            let mean = v.iter().sum::<f64>() / v.len() as f64;
            s.write().push(format!("batch {}: mean {:.4}", batch, mean));
            Ok::<(), Error>(())
        })?;
        Ok(data)
    }
}

fn main() -> Result<(), Error> {
    let pipeline = Pipeline::new()?;
    let batches: Vec<_> = (0..6).map(|b| pipeline.push(b)).collect::<Result<_, _>>()?;
    let last = batches.last().expect("batches").get()?;
    assert!(last.iter().all(|x| (0.0..=1.0).contains(x)));
    pipeline.engine.synchronize()?;
    let summaries = pipeline.summaries.get()?;
    for line in &summaries {
        println!("{}", line);
    }
    assert_eq!(summaries.len(), 6);
    println!("owned_pipeline: ok");
    Ok(())
}

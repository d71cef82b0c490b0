//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Something an instruction waits on; the test opens it after observing what must not
/// wait. Times out (an error, failing the instruction) so a broken engine cannot hang CI.
#[derive(Clone, Default)]
pub struct Gate(Arc<AtomicBool>);

impl Gate {
    pub fn new() -> Gate {
        Gate::default()
    }
    pub fn open(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
    pub fn wait(&self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.0.load(Ordering::SeqCst) {
            if Instant::now() > deadline {
                return Err("gate never opened".into());
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        Ok(())
    }
}

pub fn resident_kib() -> i64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    for line in s.lines() {
        if let Some(rest) = line.strip_prefix("VmRSS:") {
            return rest.trim().trim_end_matches("kB").trim().parse().unwrap_or(-1);
        }
    }
    -1
}

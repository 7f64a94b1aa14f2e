//! Bulk CPU work off the request runtime: a large object's stripes are sealed,
//! erasure-coded and checksummed on a few threads of lower CPU priority
//! ([`NICE`]), one per core.
//!
//! Why: a stripe is milliseconds of pure computation. On the runtime's worker
//! threads it holds a worker for that long, and a node busy with one tenant's
//! large transfers makes every small request (another tenant's 4 KiB GET, a
//! HEAD, a metadata call) wait behind it for a core: the slot scheduler
//! (cairn-qos) shares *admission* fairly, but not the CPU once admitted. Here the
//! kernel's scheduler does that: under contention the bulk threads get a small
//! share and the runtime, which answers the small requests, the rest; with the
//! cores idle, bulk work runs at full speed (nice only weighs contended time).

use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};

/// The bulk threads' nice value: weight 335 against the runtime's 1024, so
/// large transfers keep about a quarter of a contended core.
pub const NICE: i32 = 5;

type Job = Box<dyn FnOnce() + Send>;

struct Pool {
    jobs: mpsc::Sender<Job>,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        for i in 0..threads {
            let rx = rx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("bulk-{i}"))
                .spawn(move || {
                    if let Err(e) = cairn_sysutil::lower_thread_priority(NICE) {
                        tracing::warn!("bulk thread keeps its priority: {e}");
                    }
                    loop {
                        // The lock is held only to take a job, not to run it.
                        let job = match rx.lock().unwrap_or_else(|p| p.into_inner()).recv() {
                            Ok(job) => job,
                            Err(_) => return,
                        };
                        // A job that panics loses its answer (its caller sees
                        // that), not this thread.
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                    }
                });
            if let Err(e) = spawned {
                tracing::warn!("bulk thread {i} not started: {e}");
            }
        }
        Pool { jobs: tx }
    })
}

/// Runs `f` on a bulk thread and waits for it without holding a runtime
/// worker. If the pool cannot take it (no thread could start), `f` runs here.
pub(crate) async fn run<T, F>(f: F) -> T
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    let f = Arc::new(Mutex::new(Some(f)));
    let job = {
        let f = f.clone();
        Box::new(move || {
            if let Some(f) = f.lock().unwrap_or_else(|p| p.into_inner()).take() {
                let _ = tx.send(f());
            }
        })
    };
    if pool().jobs.send(job).is_ok() {
        if let Ok(v) = rx.await {
            return v;
        }
    }
    // Not run by the pool (gone, or the job panicked before answering: then
    // `f` was taken and this panics too, as it would have inline).
    let f = f.lock().unwrap_or_else(|p| p.into_inner()).take();
    f.expect("a bulk job that panicked")()
}

//! Work items handed to every core: each thread takes the next index until
//! none is left.

use std::sync::atomic::{AtomicUsize, Ordering};

/// The number of threads: `LIMIT_THREADS`, else every core.
pub fn threads() -> anyhow::Result<usize> {
    match std::env::var("LIMIT_THREADS") {
        Ok(v) => Ok(v.parse::<usize>()?.max(1)),
        Err(_) => Ok(std::thread::available_parallelism().map_or(1, |n| n.get())),
    }
}

/// Runs `job` on every item of `0..items` over `threads` threads, each
/// thread folding its results with `add` from `T::default()`; returns the
/// folds of all threads added together, or the first error.
pub fn on_all_cores<T, F>(
    items: usize,
    threads: usize,
    job: F,
    add: fn(&mut T, T),
) -> anyhow::Result<T>
where
    T: Default + Send,
    F: Fn(usize) -> anyhow::Result<T> + Sync,
{
    let next = AtomicUsize::new(0);
    let results = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads.min(items).max(1))
            .map(|_| {
                s.spawn(|| -> anyhow::Result<T> {
                    let mut acc = T::default();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= items {
                            return Ok(acc);
                        }
                        add(&mut acc, job(i)?);
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a thread panicked")))
            })
            .collect::<Vec<_>>()
    });
    let mut total = T::default();
    for r in results {
        add(&mut total, r?);
    }
    Ok(total)
}

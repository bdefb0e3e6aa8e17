//! Waiting with a deadline, and saying what was seen when the deadline passes.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::Error;

/// Polls `probe` every 100 ms until it returns `Ok`, or fails after `timeout` with the last
/// `Err` the probe gave (a description of what it observed).
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let started = Instant::now();
    loop {
        match probe().await {
            Ok(v) => return Ok(v),
            Err(observed) => {
                if started.elapsed() >= timeout {
                    return Err(Error::Timeout {
                        what: what.to_string(),
                        waited: timeout,
                        observed,
                    });
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

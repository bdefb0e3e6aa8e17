//! What the controller in this process says: its logs and its metrics.

use std::sync::OnceLock;

/// The reconciles of `controller` ("WorkerDeployment", ...) this test process has run, from the
/// controller's own metric.
pub fn reconciles(controller: &str) -> u64 {
    let prefix = format!("twc_reconcile_total{{controller=\"{controller}\"}}");
    twc_controller::metrics::global()
        .encode()
        .lines()
        .find(|l| l.starts_with(&prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The captured log lines mentioning `needle` (the last 60).
pub fn logs_about(needle: &str) -> String {
    let logs = capture_logs();
    let text =
        String::from_utf8_lossy(&logs.lock().map(|l| l.clone()).unwrap_or_default()).into_owned();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
        "../../target/controller-test-{}.log",
        std::process::id()
    ));
    if std::fs::write(&path, &text).is_ok() {
        eprintln!("full controller log: {}", path.display());
    }
    let lines: Vec<&str> = text.lines().filter(|l| l.contains(needle)).collect();
    lines[lines.len().saturating_sub(60)..].join("\n")
}

/// Captures this test binary's logs (debug and up) to check for error loops.
pub fn capture_logs() -> std::sync::Arc<std::sync::Mutex<Vec<u8>>> {
    use std::sync::{Arc, Mutex};
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let writer = buf.clone();
        let _ = tracing_subscriber::fmt()
            .with_env_filter("debug,hyper=info,h2=info,tower=info,rustls=info")
            .with_ansi(false)
            .with_writer(move || LogWriter(writer.clone()))
            .try_init();
        buf
    })
    .clone()
}

struct LogWriter(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut b) = self.0.lock() {
            b.extend_from_slice(data);
        }
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

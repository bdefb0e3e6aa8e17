//! What kstatus says of live objects: the verdict Helm 4's `--wait`, Flux and the cli-utils
//! status poller give, computed by their library (`sigs.k8s.io/cli-utils/pkg/kstatus/status`)
//! in `hack/kstatus`, never re-implemented here.

use std::io::Write;
use std::process::{Command, Stdio};

use serde::Deserialize;

use crate::{Error, paths};

/// kstatus' verdict on one object.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct Verdict {
    pub kind: String,
    pub name: String,
    /// `InProgress`, `Failed`, `Current`, `Terminating`, `NotFound` or `Unknown`.
    pub status: String,
    pub message: String,
}

/// The verdict on each of `objects` (as read from the apiserver, `kind` and `apiVersion` set).
pub fn compute(objects: &[serde_json::Value]) -> Result<Vec<Verdict>, Error> {
    let binary = paths::kstatus();
    let mut child = Command::new(&binary)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::Other(format!("{}: {e} (run hack/provision.sh)", binary.display())))?;
    {
        let mut stdin = child
            .stdin
            .take()
            .ok_or_else(|| Error::Other("kstatus: no stdin".into()))?;
        for o in objects {
            let line = serde_json::to_vec(o).map_err(|e| Error::Other(e.to_string()))?;
            stdin
                .write_all(&line)
                .and_then(|()| stdin.write_all(b"\n"))
                .map_err(|e| Error::Other(format!("kstatus: {e}")))?;
        }
    }
    let out = child
        .wait_with_output()
        .map_err(|e| Error::Other(format!("kstatus: {e}")))?;
    if !out.status.success() {
        return Err(Error::Other(format!(
            "kstatus failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).map_err(|e| Error::Other(format!("kstatus: {e}: {l}"))))
        .collect()
}

/// The verdict on one object.
pub fn of(object: &serde_json::Value) -> Result<Verdict, Error> {
    compute(std::slice::from_ref(object))?
        .pop()
        .ok_or_else(|| Error::Other("kstatus said nothing".into()))
}

//! Child processes that never outlive the test binary.
//!
//! Every process is started through one long-lived "spawner" thread, wrapped in
//! `setpriv --pdeathsig KILL`: Linux sends SIGKILL to a child when the *thread* that forked it
//! dies, and the spawner thread lives exactly as long as the test binary. So servers die with
//! the test binary whatever ends it (normal exit, panic, Ctrl-C, SIGKILL), with no unsafe code.
//! Each child also gets its own process group, so [`ChildProcess::kill`] reaches anything it
//! forked.
//!
//! A group is signalled only while its leader is not yet reaped: until then the leader (alive
//! or a zombie) holds its pid, so the group id cannot name anyone else. Once reaped, the pid is
//! free, and with `pid_max` at 32768 and thousands of threads coming and going in a test run,
//! it soon belongs to another process: a late `killpg` once SIGKILLed a Temporal dev server
//! started later in the same run. So the exit is first seen without reaping (`waitid` with
//! `WNOWAIT`), what is left of the group is killed, and only then is the leader reaped; after
//! that, [`ChildProcess::signal`] does nothing.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::Pid;

use crate::Error;

type SpawnRequest = (Command, mpsc::Sender<std::io::Result<Child>>);

fn spawner() -> &'static Mutex<mpsc::Sender<SpawnRequest>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("testenv-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
                // The sender lives in a static, so this loop never ends while the process runs.
                loop {
                    std::thread::park();
                }
            })
            .map(|_| ())
            .unwrap_or_else(|e| panic!("cannot start the testenv spawner thread: {e}"));
        Mutex::new(tx)
    })
}

/// What to run: a program, its arguments, environment and working directory.
#[derive(Clone, Debug)]
pub struct Spec {
    /// Short name used in messages and log file names (`etcd`, `kube-apiserver`, ...).
    pub name: String,
    pub program: PathBuf,
    pub args: Vec<String>,
    /// Environment variables set on top of an empty environment plus `PATH` and `HOME`.
    pub env: Vec<(String, String)>,
    pub inherit_env: bool,
    pub cwd: Option<PathBuf>,
    /// stdout and stderr go here (appended).
    pub log: PathBuf,
}

impl Spec {
    pub fn new(
        name: impl Into<String>,
        program: impl Into<PathBuf>,
        log: impl Into<PathBuf>,
    ) -> Self {
        Self {
            name: name.into(),
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            inherit_env: true,
            cwd: None,
            log: log.into(),
        }
    }

    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }
}

/// A running child. Dropping it kills its whole process group.
#[derive(Debug)]
pub struct ChildProcess {
    name: String,
    log: PathBuf,
    child: Child,
    /// The leader is reaped (or was not ours to reap): its group is never signalled again.
    gone: bool,
    /// Its exit status, if the reaping told.
    reaped: Option<ExitStatus>,
    /// What was started, for [`ChildProcess::restart`].
    spec: Spec,
}

impl ChildProcess {
    /// Starts `spec`. Fails with the component name when the program is missing or cannot run.
    pub fn start(spec: &Spec) -> Result<Self, Error> {
        if !spec.program.exists() {
            return Err(Error::MissingBinary {
                component: spec.name.clone(),
                path: spec.program.clone(),
            });
        }
        if let Some(dir) = spec.log.parent() {
            std::fs::create_dir_all(dir).map_err(|e| Error::io(&spec.name, dir, e))?;
        }
        let log = File::options()
            .create(true)
            .append(true)
            .open(&spec.log)
            .map_err(|e| Error::io(&spec.name, &spec.log, e))?;
        let log2 = log
            .try_clone()
            .map_err(|e| Error::io(&spec.name, &spec.log, e))?;

        let mut cmd = Command::new("setpriv");
        cmd.arg("--pdeathsig")
            .arg("KILL")
            .arg("--")
            .arg(&spec.program)
            .args(&spec.args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .process_group(0);
        if !spec.inherit_env {
            cmd.env_clear();
            for key in ["PATH", "HOME", "TMPDIR"] {
                if let Ok(v) = std::env::var(key) {
                    cmd.env(key, v);
                }
            }
        }
        cmd.envs(spec.env.iter().map(|(k, v)| (k, v)));
        if let Some(cwd) = &spec.cwd {
            cmd.current_dir(cwd);
        }
        let (tx, rx) = mpsc::channel();
        spawner()
            .lock()
            .map_err(|_| Error::Other("testenv spawner lock poisoned".into()))?
            .send((cmd, tx))
            .map_err(|_| Error::Other("testenv spawner thread is gone".into()))?;
        let child = rx
            .recv()
            .map_err(|_| Error::Other("testenv spawner thread is gone".into()))?
            .map_err(|e| Error::io(&spec.name, &spec.program, e))?;
        Ok(Self {
            name: spec.name.clone(),
            log: spec.log.clone(),
            child,
            gone: false,
            reaped: None,
            spec: spec.clone(),
        })
    }

    /// Stops the process (SIGTERM, SIGKILL after `grace`) and starts it again, same program,
    /// arguments and log.
    pub fn restart(&mut self, grace: Duration) -> Result<(), Error> {
        self.stop(grace);
        let spec = self.spec.clone();
        *self = Self::start(&spec)?;
        Ok(())
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `Some(status)` if the process has exited. The first time it is seen exited, anything
    /// left in its group is killed, and then the leader is reaped.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        if self.gone {
            return self.reaped;
        }
        let pid = Pid::from_raw(self.child.id() as i32);
        let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
        // Anything else: exited (a zombie now), or no longer ours to wait for.
        if let Ok(WaitStatus::StillAlive) = waitid(Id::Pid(pid), flags) {
            return None;
        }
        self.reap()
    }

    /// Kills what is left of the group while the leader (exited, or killed just now) still
    /// holds the group's id, then reaps the leader.
    fn reap(&mut self) -> Option<ExitStatus> {
        if !self.gone {
            let _ = killpg(Pid::from_raw(self.child.id() as i32), Signal::SIGKILL);
            self.reaped = self.child.wait().ok();
            self.gone = true;
        }
        self.reaped
    }

    /// Fails with the component name, exit status and log path if the process has exited.
    pub fn check_running(&mut self) -> Result<(), Error> {
        match self.try_wait() {
            None => Ok(()),
            Some(status) => Err(Error::ExitedEarly {
                component: self.name.clone(),
                status: status.to_string(),
                log: self.log.clone(),
                tail: log_tail(&self.log, 20),
            }),
        }
    }

    /// Sends `signal` to the whole process group; nothing once the leader is reaped (its pid,
    /// and so the group id, may be someone else's by then).
    pub fn signal(&self, signal: Signal) {
        if self.gone {
            return;
        }
        let pgid = Pid::from_raw(self.child.id() as i32);
        let _ = killpg(pgid, signal);
    }

    /// SIGTERM, then SIGKILL after `grace`; waits for the exit.
    pub fn stop(&mut self, grace: Duration) -> Option<ExitStatus> {
        if let Some(status) = self.try_wait() {
            return Some(status);
        }
        self.signal(Signal::SIGTERM);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            // Kills anything left in the group before reaping the leader.
            if let Some(status) = self.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill()
    }

    /// SIGKILL to the whole process group; waits for the exit.
    pub fn kill(&mut self) -> Option<ExitStatus> {
        self.reap()
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        self.reap();
    }
}

/// The last `lines` lines of a log file (empty if unreadable).
pub fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// How many times a server is started when a start loses a port it picked to another process
/// (the Temporal dev server, kube-apiserver).
pub const START_ATTEMPTS: usize = 3;

/// Whether a failed start is the process exiting because a port it picked was taken meanwhile:
/// its log, from byte `since` (where this start began writing), says so.
pub(crate) fn lost_a_port_race(e: &Error, since: u64) -> bool {
    match e {
        Error::ExitedEarly { log, .. } => {
            let bytes = std::fs::read(log).unwrap_or_default();
            let from = usize::try_from(since)
                .unwrap_or(usize::MAX)
                .min(bytes.len());
            String::from_utf8_lossy(&bytes[from..]).contains("address already in use")
        }
        _ => false,
    }
}

/// The size of a log file now (0 if it does not exist yet).
pub(crate) fn log_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> Result<u16, Error> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| Error::Other(format!("cannot find a free port: {e}")))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| Error::Other(format!("cannot find a free port: {e}")))
}

/// `n` distinct free ports (held open together so they differ).
pub fn free_ports(n: usize) -> Result<Vec<u16>, Error> {
    let listeners = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Error::Other(format!("cannot find free ports: {e}")))?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Error::Other(format!("cannot find free ports: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_binary_is_named_with_its_component() {
        let spec = Spec::new(
            "kube-apiserver",
            "/nonexistent/kube-apiserver",
            "/tmp/x.log",
        );
        let err = ChildProcess::start(&spec).err().map(|e| e.to_string());
        let msg = err.unwrap_or_default();
        assert!(msg.contains("kube-apiserver: binary not found"), "{msg}");
        assert!(msg.contains("hack/provision.sh"), "{msg}");
    }

    #[test]
    fn an_early_exit_names_the_component_and_its_log() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let log = dir.path().join("etcd.log");
        let spec = Spec::new("etcd", "/bin/sh", &log).args(["-c", "echo bad flag; exit 3"]);
        let mut p = ChildProcess::start(&spec).unwrap_or_else(|e| panic!("{e}"));
        let deadline = Instant::now() + Duration::from_secs(5);
        while p.try_wait().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let msg = p
            .check_running()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(msg.starts_with("etcd exited early"), "{msg}");
        assert!(msg.contains(&log.display().to_string()), "{msg}");
        assert!(msg.contains("bad flag"), "{msg}");
    }

    /// Live (non-zombie) processes whose process group is `pgid`.
    fn group_members(pgid: u32) -> usize {
        std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
            .filter(|stat| {
                // Field 5 of /proc/PID/stat is the process group (after the ")" of the name).
                // Field 3 is the state; zombies are already dead.
                let fields: Vec<&str> = stat
                    .rsplit_once(')')
                    .map(|(_, rest)| rest.split_whitespace().collect())
                    .unwrap_or_default();
                fields.len() > 2 && fields[0] != "Z" && fields[2] == pgid.to_string()
            })
            .count()
    }

    #[test]
    fn dropping_a_child_kills_its_process_group() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let spec = Spec::new("sleeper", "/bin/sh", dir.path().join("s.log"))
            .args(["-c", "sleep 300 & sleep 300"]);
        let p = ChildProcess::start(&spec).unwrap_or_else(|e| panic!("{e}"));
        let pgid = p.pid();
        drop(p);
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(
            group_members(pgid),
            0,
            "processes of group {pgid} survived the drop"
        );
    }

    /// The leftovers of a leader that exited on its own die before the leader is reaped (the
    /// one moment their group id is still surely theirs); afterwards the group is never
    /// signalled again.
    #[test]
    fn a_leader_that_exits_takes_its_group_along_before_it_is_reaped() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let spec = Spec::new("forker", "/bin/sh", dir.path().join("f.log"))
            .args(["-c", "sleep 300 & exit 0"]);
        let mut p = ChildProcess::start(&spec).unwrap_or_else(|e| panic!("{e}"));
        let pgid = p.pid();
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut status = None;
        while status.is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
            status = p.try_wait();
        }
        assert_eq!(
            status.and_then(|s| s.code()),
            Some(0),
            "the leader did not exit"
        );
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(
            group_members(pgid),
            0,
            "the sleep of group {pgid} outlived its leader"
        );
        assert_eq!(p.try_wait(), status, "the status is remembered");
    }
}

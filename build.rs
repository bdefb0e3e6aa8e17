//! Build information for `twc --version`'s log line and the `twc_build_info` metric: the git
//! commit (`$TWC_GIT_COMMIT` if set, as in an image built without `.git`; else `git rev-parse
//! HEAD`; else `unknown`) and the compiler's version.

use std::process::Command;

fn output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!text.is_empty()).then_some(text)
}

/// Rebuild when the checked-out commit moves: HEAD, the branch it points to, packed refs.
fn watch_git() {
    let mut files = vec!["HEAD".to_string(), "packed-refs".to_string()];
    if let Some(branch) = output("git", &["symbolic-ref", "-q", "HEAD"]) {
        files.push(branch);
    }
    for f in files {
        if let Some(path) = output("git", &["rev-parse", "--git-path", &f])
            && std::path::Path::new(&path).exists()
        {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}

fn main() {
    println!("cargo:rerun-if-env-changed=TWC_GIT_COMMIT");
    println!("cargo:rerun-if-changed=build.rs");
    let commit = match std::env::var("TWC_GIT_COMMIT") {
        Ok(c) if !c.trim().is_empty() => c.trim().to_string(),
        _ => {
            watch_git();
            output("git", &["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into())
        }
    };
    println!("cargo:rustc-env=TWC_GIT_COMMIT={commit}");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let rustc_version = output(&rustc, &["--version"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=TWC_RUSTC_VERSION={rustc_version}");
}

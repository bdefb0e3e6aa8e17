//! The `twc` binary as a user runs it: flags refused with a message naming them, and log
//! lines that carry no colour codes when stdout is not a terminal.

use std::process::{Command, Output};

fn twc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_twc"))
        .args(args)
        // No cluster: `twc run` logs its start, then fails to find a configuration.
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env("HOME", "/nonexistent")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("LOG_LEVEL")
        .env_remove("LOG_FORMAT")
        .env_remove("NO_COLOR")
        .output()
        .unwrap_or_else(|e| panic!("running twc: {e}"))
}

#[test]
fn an_unknown_log_level_is_an_error_naming_the_flag() {
    let out = twc(&["run", "--log-level", "bogus"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert!(stderr.contains("--log-level"), "{stderr}");
    assert!(stderr.contains("bogus"), "{stderr}");
    assert!(out.stdout.is_empty(), "nothing ran");
}

#[test]
fn log_lines_to_a_pipe_have_no_colour_and_name_the_build() {
    let out = twc(&["run", "--log-level", "info"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "no cluster: {stdout}");
    assert!(!stdout.contains('\u{1b}'), "ANSI codes in {stdout:?}");
    let line = stdout
        .lines()
        .find(|l| l.contains("twc build"))
        .unwrap_or_else(|| panic!("no build line in {stdout:?}"));
    assert!(
        line.contains(&format!("version=\"{}\"", env!("CARGO_PKG_VERSION"))),
        "{line}"
    );
    assert!(line.contains("commit="), "{line}");
}

#[test]
fn log_format_has_help() {
    let out = twc(&["run", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    let at = help
        .find("--log-format")
        .unwrap_or_else(|| panic!("{help}"));
    let text: String = help[at..].lines().take(4).collect();
    assert!(text.contains("json"), "{text}");
    assert!(text.contains("text"), "{text}");
    assert!(text.contains("terminal"), "{text}");
}

//! `twc`: the controller binary. Subcommands grow with the controller.
use clap::Parser;

#[derive(Parser)]
#[command(name = "twc", version, about = "Temporal Worker Controller (Rust)")]
struct Cli {}

fn main() -> anyhow::Result<()> {
    let _cli = Cli::parse();
    Ok(())
}

//! `twc`: the controller binary. Subcommands grow with the controller.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "twc", version, about = "Temporal Worker Controller (Rust)")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the CustomResourceDefinitions as YAML, or write one file per CRD into a directory.
    Crd {
        /// Write `temporal.io_<plural>.yaml` files here instead of printing.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Crd { dir } => crd(dir),
    }
}

fn crd(dir: Option<PathBuf>) -> anyhow::Result<()> {
    let crds = twc_api::crd::all();
    match dir {
        None => {
            for crd in &crds {
                print!("---\n{}", twc_api::crd::to_yaml(crd)?);
            }
        }
        Some(dir) => {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            for crd in &crds {
                let path = dir.join(twc_api::crd::file_name(crd));
                std::fs::write(&path, twc_api::crd::to_yaml(crd)?)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
        }
    }
    Ok(())
}

//! `tuic-bridge`: the stdio MCP server an agent launches; forwards to the local node.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use tuic_bridge::locate::locate_from_process;
use tuic_bridge::stdio::{BridgeConfig, run};

#[derive(Debug, Parser)]
#[command(
    name = "tuic-bridge",
    version,
    about = "stdio MCP server forwarding to the local tuic node's /mcp"
)]
struct Cli {
    /// Named instance (default: $TUIC_APP_INSTANCE, else the default instance).
    #[arg(long, global = true)]
    instance: Option<String>,
    /// Config dir, to find the default instance's socket (default: $TUIC_CONFIG_DIR, XDG, ~/.config).
    #[arg(long, global = true)]
    config_dir: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Publish this binary into <config_dir>/mcp-bridge/<sha256>/tuic-bridge, print its path,
    /// and point Claude Code and Codex configs at it.
    Install {
        /// Do nothing unless an agent config needs repair (a managed bridge command that is not
        /// this build's published copy, or a published copy that is missing). The primary
        /// node runs this at start.
        #[arg(long)]
        if_needed: bool,
    },
}

/// Runs the Claude and Codex migrations to `published`, continuing `report`.
fn migrate_all(
    published: &std::path::Path,
    config_dir: &std::path::Path,
    report: tuic_bridge::migrate::Report,
) -> tuic_bridge::migrate::Report {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let claude_dir = std::env::var("CLAUDE_CONFIG_DIR").ok();
    let mut report = tuic_bridge::migrate::migrate_claude_into(
        home.as_deref(),
        claude_dir.as_deref(),
        published,
        config_dir,
        report,
    );
    let codex_home = std::env::var("CODEX_HOME").ok();
    if let Some(codex) = tuic_bridge::migrate::codex_config(home.as_deref(), codex_home.as_deref())
        && let Err(e) =
            tuic_bridge::migrate::migrate_codex_file(&codex, published, config_dir, &mut report)
    {
        report.warnings.push(format!("{e:#}"));
    }
    report
}

fn install(config_dir: &std::path::Path, if_needed: bool) -> anyhow::Result<()> {
    let exe = std::env::current_exe()?;
    if if_needed {
        let planned = tuic_bridge::install::published_path(&exe, config_dir)?;
        let plan = migrate_all(
            &planned,
            config_dir,
            tuic_bridge::migrate::Report {
                dry_run: true,
                ..Default::default()
            },
        );
        for w in &plan.warnings {
            eprintln!("tuic-bridge: warning: {w}");
        }
        if plan.updated.is_empty() && !plan.needs_publish {
            eprintln!("tuic-bridge: no agent config needs repair");
            return Ok(());
        }
    }
    let p = tuic_bridge::install::publish(&exe, config_dir)?;
    println!("{}", p.path.display());
    if p.reused {
        eprintln!("tuic-bridge: already published");
    }
    let report = migrate_all(&p.path, config_dir, Default::default());
    for f in &report.updated {
        eprintln!(
            "tuic-bridge: pointed {} at {}",
            f.display(),
            p.path.display()
        );
    }
    if !if_needed {
        for w in &report.warnings {
            eprintln!("tuic-bridge: warning: {w}");
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let target = locate_from_process(cli.instance.as_deref(), cli.config_dir.as_deref());
    if let Some(Cmd::Install { if_needed }) = cli.cmd {
        return match install(&target.config_dir, if_needed) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("tuic-bridge: install failed: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    let cfg = BridgeConfig {
        instance_label: target.instance_label(),
        socket: target.socket,
        tuic_session: std::env::var("TUIC_SESSION").ok().filter(|s| !s.is_empty()),
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tuic-bridge: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(run(cfg));
    // stdin has ended; nothing left worth waiting for.
    rt.shutdown_timeout(Duration::from_millis(200));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tuic-bridge: {e:#}");
            ExitCode::FAILURE
        }
    }
}

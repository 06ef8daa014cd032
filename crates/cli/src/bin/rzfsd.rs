//! `rzfsd`: the rzfs daemon. Usually started on demand by `rzpool`/`rzfs`.
use clap::Parser;

#[derive(Parser)]
#[command(name = "rzfsd", about = "rzfs daemon: owns imported pools and serves datasets")]
struct Args {
    /// Control socket path (default: as the clients compute it).
    #[arg(long)]
    socket: Option<std::path::PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let sock = args.socket.unwrap_or_else(rzfs_cli::client::socket_path);
    rzfs_cli::daemon::serve(&sock)?;
    Ok(())
}

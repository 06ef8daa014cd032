//! `rzfsd`: the rzfs daemon. Usually started on demand by `rzpool`/`rzfs`.
use clap::Parser;

#[derive(Parser)]
#[command(name = "rzfsd", about = "rzfs daemon: owns imported pools and serves datasets")]
struct Args {
    /// Control socket path (default: as the clients compute it).
    #[arg(long)]
    socket: Option<std::path::PathBuf>,
    /// Group (name or gid) whose members may run read-only commands (list, get, status,
    /// history); default `$RZFS_READ_GROUP`, else nobody but root and the daemon's user.
    #[arg(long)]
    read_group: Option<String>,
    /// Connections served at once; more are answered "too many connections".
    #[arg(long, default_value_t = rzfs_cli::access::MAX_CONNECTIONS as u64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    max_connections: u64,
    /// Seconds a client has to send its request (not a limit on how long a command runs).
    #[arg(long, default_value_t = rzfs_cli::access::REQUEST_TIMEOUT.as_secs(), value_parser = clap::value_parser!(u64).range(1..=3600))]
    request_timeout: u64,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let sock = args.socket.unwrap_or_else(rzfs_cli::client::socket_path);
    let read_group =
        args.read_group.or_else(|| std::env::var("RZFS_READ_GROUP").ok()).filter(|g| !g.is_empty());
    let cfg = rzfs_cli::daemon::Config {
        read_group,
        max_connections: args.max_connections as usize,
        request_timeout: std::time::Duration::from_secs(args.request_timeout),
    };
    rzfs_cli::daemon::serve_with(&sock, &cfg)?;
    Ok(())
}

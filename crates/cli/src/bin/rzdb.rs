//! `rzdb`: inspect and recover pools without a daemon or a mount (the zdb(8) of rzfs).
//!
//! Opens exported pools directly and read-only. Exit status: 0 on success, 1 when an error
//! was found or the operation failed, 2 on usage errors.
use clap::Parser;
use rzfs_cli::inspect;
use std::path::PathBuf;

#[derive(Parser)]
#[command(name = "rzdb", about = "inspect and recover rzfs/OpenZFS pools without a kernel module")]
struct Args {
    /// Operate on an exported pool (the only mode for now; accepted for zdb compatibility).
    #[arg(short = 'e')]
    exported: bool,
    /// Directories (or files) to search for devices.
    #[arg(short = 'p', action = clap::ArgAction::Append)]
    dirs: Vec<PathBuf>,
    /// Print the labels of a device (then the target is a device path).
    #[arg(short = 'l')]
    labels: bool,
    /// Print the active uberblock.
    #[arg(short = 'u')]
    uberblock: bool,
    /// List datasets (and with -d -d, their objects).
    #[arg(short = 'd', action = clap::ArgAction::Count)]
    datasets: u8,
    /// Print the intent log of each file system and volume (header and records).
    #[arg(short = 'i')]
    intent_log: bool,
    /// Traverse every block and print block statistics.
    #[arg(short = 'b')]
    blocks: bool,
    /// With -b: read and verify every block, data included.
    #[arg(short = 'c', action = clap::ArgAction::Count)]
    verify: u8,
    /// Copy a file out: TARGET is POOL/DATASET, then PATH and DEST.
    #[arg(short = 'r')]
    copy: bool,
    /// Copy a whole dataset out into DEST (recovery). DEST must be empty or absent.
    #[arg(short = 'R')]
    copy_tree: bool,
    /// With -R: restore owners and groups, keep setuid/setgid bits and create device nodes
    /// (as `tar --same-owner`). Without it, everything belongs to the caller and
    /// setuid/setgid are dropped.
    #[arg(long)]
    same_owner: bool,
    /// Print a JSON manifest of every file of a dataset (paths, stat fields, sha256).
    #[arg(long)]
    manifest: bool,
    /// Cache limit in bytes.
    #[arg(long)]
    arc_max: Option<usize>,
    /// POOL, POOL/DATASET, or a device (with -l).
    target: String,
    /// Extra operands (PATH DEST for -r; DEST for -R).
    rest: Vec<String>,
}

fn main() {
    let a = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            std::process::exit(code);
        }
    };
    let dirs = if a.dirs.is_empty() { vec![PathBuf::from("/dev")] } else { a.dirs.clone() };
    let opts = inspect::Opts { dirs, arc_max: a.arc_max };
    let r = if a.labels {
        inspect::labels(&a.target)
    } else if a.copy {
        match a.rest.as_slice() {
            [path, dest] => inspect::copy_file(&opts, &a.target, path, dest),
            _ => Err("-r needs POOL/DATASET PATH DEST".into()),
        }
    } else if a.copy_tree {
        match a.rest.as_slice() {
            [dest] => inspect::copy_tree(&opts, &a.target, dest, a.same_owner),
            _ => Err("-R needs POOL/DATASET DEST".into()),
        }
    } else if a.manifest {
        inspect::manifest(&opts, &a.target)
    } else if a.blocks {
        match inspect::blocks(&opts, &a.target, a.verify > 0) {
            Ok((out, bad)) => {
                print!("{out}");
                if bad {
                    std::process::exit(1);
                }
                return;
            }
            Err(e) => Err(e),
        }
    } else if a.intent_log {
        inspect::intent_logs(&opts, &a.target)
    } else if a.uberblock {
        inspect::uberblock(&opts, &a.target)
    } else {
        inspect::datasets(&opts, &a.target, a.datasets.max(1))
    };
    match r {
        Ok(out) => {
            print!("{out}");
        }
        Err(e) => {
            eprintln!("rzdb: {e}");
            std::process::exit(1);
        }
    }
}

//! `rzfs` subcommands (zfs(8)): list, get, create, snapshot, set, mount, unmount.

use crate::cmd::{abs, clap_error};
use crate::daemon::{Mount, State};
use crate::format::Table;
use crate::proto::Response;
use crate::rwpool::pool_of;
use clap::{Parser, Subcommand};
use dsl::{Dataset, DatasetKind, DslPool};
use pool::Pool;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Parser)]
// A flag given twice counts once, as getopt's; the options zfs refuses twice (send's -i
// and -I) are checked where they are used. `-h` is no help flag, as in zfs (`zfs get -h`
// is a usage error); `--help` is.
#[command(
    name = "rzfs",
    about = "configure rzfs datasets",
    disable_version_flag = true,
    args_override_self = true,
    disable_help_flag = true
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
    /// Print help.
    #[arg(long = "help", action = clap::ArgAction::Help, global = true)]
    help: Option<bool>,
}

#[derive(Subcommand)]
enum Cmd {
    /// List datasets.
    List {
        #[arg(short = 'H')]
        scripted: bool,
        #[arg(short = 'p')]
        parsable: bool,
        #[arg(short = 'r')]
        recursive: bool,
        #[arg(short = 'd')]
        depth: Option<usize>,
        #[arg(short = 't', value_delimiter = ',')]
        types: Vec<String>,
        #[arg(short = 'o', value_delimiter = ',')]
        props: Vec<String>,
        /// Sort by this property, ascending (repeatable: later ones break ties).
        #[arg(short = 's', action = clap::ArgAction::Append)]
        sort_asc: Vec<String>,
        /// Sort by this property, descending.
        #[arg(short = 'S', action = clap::ArgAction::Append)]
        sort_desc: Vec<String>,
        names: Vec<String>,
    },
    /// Show dataset properties.
    Get {
        #[arg(short = 'H')]
        scripted: bool,
        #[arg(short = 'p')]
        parsable: bool,
        #[arg(short = 'r')]
        recursive: bool,
        #[arg(short = 'o', value_delimiter = ',')]
        fields: Vec<String>,
        #[arg(short = 't', value_delimiter = ',')]
        types: Vec<String>,
        /// Walk at most this many levels below each named dataset.
        #[arg(short = 'd')]
        depth: Option<usize>,
        /// Only values from these sources: local, default, inherited, temporary, received, none.
        #[arg(short = 's', value_delimiter = ',')]
        sources: Vec<String>,
        /// Comma-separated properties, or "all".
        props: String,
        names: Vec<String>,
    },
    /// Create a file system, or with -V a volume (a block device of SIZE bytes).
    Create {
        #[arg(short = 'o', action = clap::ArgAction::Append)]
        props: Vec<String>,
        /// Create missing parent file systems.
        #[arg(short = 'p')]
        parents: bool,
        /// Create a volume of this size (e.g. 150m, 10G).
        #[arg(short = 'V', value_name = "SIZE")]
        volsize: Option<String>,
        /// The volume's block size (volblocksize; default 16K).
        #[arg(short = 'b', value_name = "BLOCKSIZE", requires = "volsize")]
        blocksize: Option<String>,
        /// Sparse volume: no refreservation.
        #[arg(short = 's', requires = "volsize")]
        sparse: bool,
        /// Dry run: check and (with -v or -P) describe, create nothing.
        #[arg(short = 'n')]
        dry_run: bool,
        /// Leave the new file system unmounted.
        #[arg(short = 'u')]
        no_mount: bool,
        /// Describe what is created.
        #[arg(short = 'v')]
        verbose: bool,
        /// Describe what is created in a form for scripts (tab-separated).
        #[arg(short = 'P')]
        parsable: bool,
        name: String,
    },
    /// Create snapshots (POOL/FS@NAME).
    #[command(alias = "snap")]
    Snapshot {
        /// Snapshot every descendant file system and volume too, in the same txg.
        #[arg(short = 'r')]
        recursive: bool,
        /// A user property of the new snapshots (PROP=VALUE).
        #[arg(short = 'o')]
        props: Vec<String>,
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Remove a local property so the value is inherited again.
    Inherit {
        /// Also every descendant file system and volume.
        #[arg(short = 'r')]
        recursive: bool,
        /// Revert to the received value, if any (else inherit).
        #[arg(short = 'S')]
        received: bool,
        prop: String,
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Set properties: PROP=VALUE... NAME... (all in one txg per dataset).
    Set {
        /// Change mountpoint (or canmount) without mounting, unmounting or moving anything.
        #[arg(short = 'u')]
        no_mount: bool,
        #[arg(required = true, value_name = "PROP=VALUE... NAME")]
        args: Vec<String>,
    },
    /// Mount a dataset over FUSE (read-write on pools imported read-write); with no
    /// arguments, list mounts.
    Mount {
        /// Temporary mount options: ro, rw, exec, noexec, suid, nosuid, dev, nodev, atime,
        /// noatime, relatime, norelatime; remount (of a mounted file system).
        #[arg(short = 'o')]
        options: Option<String>,
        /// Mount over a directory that is not empty even when the overlay property is off.
        #[arg(short = 'O')]
        overlay: bool,
        /// Mount every file system whose canmount=on and mountpoint is a path.
        #[arg(short = 'a', conflicts_with_all = ["dataset", "dir"])]
        all: bool,
        /// Mount the named file systems and their descendants (those that mount).
        #[arg(short = 'R', conflicts_with = "all")]
        recursive: bool,
        dataset: Option<String>,
        /// Mount point (default: the dataset's mountpoint property); with -R, another file
        /// system.
        dir: Option<PathBuf>,
        /// With -R, more file systems.
        #[arg(requires = "recursive", hide = true)]
        more: Vec<String>,
    },
    /// Create a file system from a snapshot (a writable clone sharing its blocks).
    Clone {
        #[arg(short = 'o', action = clap::ArgAction::Append)]
        props: Vec<String>,
        /// Create missing parent file systems.
        #[arg(short = 'p')]
        parents: bool,
        snapshot: String,
        name: String,
    },
    /// Destroy a file system (with -r its children and snapshots) or a snapshot.
    Destroy {
        /// Destroy children and snapshots too.
        #[arg(short = 'r')]
        recursive: bool,
        /// Force: volumes in use are taken away. A busy file system (a current directory
        /// or open file in it) is still refused, as OpenZFS's forced unmount on Linux is.
        #[arg(short = 'f')]
        force: bool,
        /// Dry run: change nothing.
        #[arg(short = 'n')]
        dry_run: bool,
        /// Print each dataset destroyed.
        #[arg(short = 'v')]
        verbose: bool,
        /// Print each dataset destroyed as `destroy<TAB>NAME` (implies -v).
        #[arg(short = 'p')]
        parsable: bool,
        /// Snapshots kept by clones or holds are marked for deferred destruction instead.
        #[arg(short = 'd')]
        defer: bool,
        /// Destroy every dependent too: descendants, snapshots, and clones of those
        /// snapshots (with their own dependents).
        #[arg(short = 'R')]
        dependents: bool,
        /// FS, VOL, or FS@SNAP where SNAP may be a list `a,b,c` with ranges `a%b`.
        name: String,
    },
    /// What changed between SNAPSHOT and a later snapshot of its file system, or the file
    /// system itself: + added, - removed, M modified, R renamed.
    Diff {
        /// A column with the file type (F file, / directory, @ symlink, | fifo, = socket,
        /// B/C devices).
        #[arg(short = 'F')]
        classify: bool,
        /// Tab-separated, for scripts.
        #[arg(short = 'H')]
        scripted: bool,
        /// A first column with the change time.
        #[arg(short = 't')]
        timestamps: bool,
        /// Paths as they are (no escapes).
        #[arg(short = 'h')]
        no_mangle: bool,
        snapshot: String,
        /// A later snapshot, or the file system (the default).
        to: Option<String>,
    },
    /// Show file system (ZPL) versions: with no argument, the file systems not at the
    /// current version (5); -v the versions; -a or names upgrade (zfs upgrade).
    Upgrade {
        /// Upgrade the named file systems' descendants too.
        #[arg(short = 'r')]
        recursive: bool,
        /// List the file system versions.
        #[arg(short = 'v')]
        versions: bool,
        /// Upgrade to this version (default: the current one).
        #[arg(short = 'V', value_name = "VERSION")]
        version: Option<String>,
        /// Upgrade every file system of every imported pool.
        #[arg(short = 'a')]
        all: bool,
        names: Vec<String>,
    },
    /// Promote a clone: the snapshots it depends on (its origin and those before it) move
    /// to it, and the file system it was cloned from becomes its clone.
    Promote {
        /// The clone (file system or volume).
        name: String,
    },
    /// Rename a file system or volume (moving it under another parent of the pool), or a
    /// snapshot (FS@A to FS@B; -r: the same snapshot of every descendant).
    Rename {
        /// Snapshots: rename the snapshot of every descendant too.
        #[arg(short = 'r')]
        recursive: bool,
        /// Unmount busy file systems by force.
        #[arg(short = 'f')]
        force: bool,
        /// Create the new name's missing parent file systems.
        #[arg(short = 'p')]
        parents: bool,
        /// Do not unmount: mounted file systems stay where they are, under their new names.
        #[arg(short = 'u')]
        no_unmount: bool,
        old: String,
        new: String,
    },
    /// Place a user hold TAG on snapshots (a held snapshot cannot be destroyed).
    Hold {
        /// The same snapshot of every descendant too.
        #[arg(short = 'r')]
        recursive: bool,
        tag: String,
        #[arg(required = true)]
        snapshots: Vec<String>,
    },
    /// Space and objects used by each user of a file system or snapshot.
    Userspace(SpaceArgs),
    /// Space and objects used by each group of a file system or snapshot.
    Groupspace(SpaceArgs),
    /// Space and objects used by each project of a file system or snapshot.
    Projectspace(SpaceArgs),
    /// List the user holds of snapshots.
    Holds {
        #[arg(short = 'r')]
        recursive: bool,
        #[arg(short = 'H')]
        scripted: bool,
        #[arg(short = 'p')]
        parsable: bool,
        #[arg(required = true)]
        snapshots: Vec<String>,
    },
    /// Remove user hold TAG from snapshots.
    Release {
        #[arg(short = 'r')]
        recursive: bool,
        tag: String,
        #[arg(required = true)]
        snapshots: Vec<String>,
    },
    /// Roll a file system or volume back to a snapshot (its latest, or with -r an older one,
    /// destroying the later snapshots).
    Rollback {
        /// Destroy snapshots more recent than the one named.
        #[arg(short = 'r')]
        recursive: bool,
        /// As -r, and the clones of those snapshots too (with their descendants).
        #[arg(short = 'R')]
        clones: bool,
        /// Unmount by force when the file system is busy.
        #[arg(short = 'f')]
        force: bool,
        snapshot: String,
    },
    /// Write a send stream of a snapshot to standard output (full, or with -i incremental).
    Send {
        /// Carry the snapshots' user holds (a stream package); `receive` places them.
        #[arg(short = 'h', long = "holds")]
        holds: bool,
        /// Incremental from this earlier snapshot (`@snap` or `fs@snap`).
        #[arg(short = 'i', value_name = "SNAPSHOT", conflicts_with = "from_all")]
        from: Option<String>,
        /// Incremental from this earlier snapshot through every snapshot in between (a
        /// stream package).
        #[arg(short = 'I', value_name = "SNAPSHOT")]
        from_all: Option<String>,
        /// Keep blocks larger than 128 KiB whole.
        #[arg(short = 'L', long = "large-block")]
        large_blocks: bool,
        /// Send embedded blocks as they are stored.
        #[arg(short = 'e', long = "embed")]
        embed: bool,
        /// Send compressed blocks as they are stored.
        #[arg(short = 'c', long = "compressed")]
        compressed: bool,
        /// Dry run: only the estimate.
        #[arg(short = 'n', long = "dryrun")]
        dry_run: bool,
        #[arg(short = 'v', long = "verbose")]
        verbose: bool,
        /// Parsable estimate.
        #[arg(short = 'P', long = "parsable")]
        parsable: bool,
        /// Resume the stream a resumable receive kept (its `receive_resume_token`).
        #[arg(short = 't', value_name = "TOKEN", conflicts_with_all = ["from", "from_all", "snapshot"])]
        token: Option<String>,
        /// A replication stream package: the file system, every descendant file system
        /// and volume, their properties and snapshots (all of them up to SNAPSHOT, or with
        /// -i/-I the ones from the source on).
        #[arg(short = 'R', long = "replicate")]
        replicate: bool,
        /// Send the file system's properties (a stream package).
        #[arg(short = 'p', long = "props")]
        props: bool,
        /// Raw: blocks as they are stored. For a dataset that is not encrypted this is
        /// -L -e -c (as in OpenZFS).
        #[arg(short = 'w', long = "raw")]
        raw: bool,
        /// Backup: send the properties the dataset received (-p with the received values
        /// only, whatever local values override them).
        #[arg(short = 'b', long = "backup")]
        backup: bool,
        /// With -R: leave out descendants that lack the snapshot (with a warning) instead
        /// of failing.
        #[arg(short = 's', long = "skip-missing")]
        skip_missing: bool,
        /// Deduplicated streams are gone from OpenZFS (2.2): accepted with its warning, and
        /// a regular stream is sent.
        #[arg(short = 'D', long = "dedup")]
        dedup: bool,
        /// Send what a resumable receive (`receive -s`) has kept of a stream that broke
        /// off, from the file system (or its FS/%recv): a stream without its END, which
        /// another `receive -s` keeps in turn, to be finished with `send -t`.
        #[arg(short = 'S', long = "saved")]
        saved: bool,
        /// With -R: leave out these file systems and their descendants (comma-separated,
        /// repeatable).
        #[arg(short = 'X', long = "exclude", value_delimiter = ',', action = clap::ArgAction::Append)]
        exclude: Vec<String>,
        #[arg(required_unless_present = "token")]
        snapshot: Option<String>,
    },
    /// Create a snapshot (and for a full stream its file system) from a send stream read
    /// from standard input.
    #[command(alias = "recv")]
    Receive {
        /// Do not place the user holds a `send -h` stream carries.
        #[arg(short = 'h')]
        skip_holds: bool,
        /// Roll the destination back to the stream's source first (and destroy later
        /// snapshots).
        #[arg(short = 'F')]
        force: bool,
        /// Keep the partial state when the stream breaks off: `receive_resume_token` then
        /// names where a `zfs send -t TOKEN` resumes.
        #[arg(short = 's')]
        save: bool,
        /// Discard the partial state a resumable receive kept in TARGET.
        #[arg(short = 'A')]
        abort: bool,
        /// Corrective receive: heal the blocks of the existing snapshot TARGET that no
        /// copy can produce any more, from a stream of that same snapshot.
        #[arg(short = 'c')]
        heal: bool,
        /// Do not mount what was received.
        #[arg(short = 'u')]
        no_mount: bool,
        #[arg(short = 'v')]
        verbose: bool,
        #[arg(short = 'n')]
        dry_run: bool,
        /// Name it after the sent file system without its pool name, below TARGET.
        #[arg(short = 'd', conflicts_with = "last_only")]
        discard_first: bool,
        /// Name it after the last component of the sent file system, below TARGET.
        #[arg(short = 'e')]
        last_only: bool,
        /// Set PROP=VALUE locally on the received file system (its children inherit it).
        #[arg(short = 'o', action = clap::ArgAction::Append, value_name = "PROP=VALUE")]
        set: Vec<String>,
        /// The received value of PROP does not apply (inherited instead, or dropped).
        #[arg(short = 'x', action = clap::ArgAction::Append, value_name = "PROP")]
        exclude: Vec<String>,
        target: String,
    },
    /// Create a bookmark FS#NAME of a snapshot (or a copy of a bookmark).
    Bookmark { source: String, bookmark: String },
    /// Unmount a dataset (by name or mount point).
    #[command(alias = "umount")]
    Unmount {
        /// Accepted, as zfs takes it; a busy file system is still refused, as OpenZFS on
        /// Linux refuses it (`umount -f` cannot take a busy mount away). `zpool export -f`
        /// aborts a pool's mounts.
        #[arg(short = 'f')]
        force: bool,
        /// Unmount every mounted file system (deepest first, pool by pool).
        #[arg(short = 'a', conflicts_with = "target")]
        all: bool,
        #[arg(required_unless_present = "all")]
        target: Option<String>,
    },
}

/// The arguments of `zfs userspace`, `groupspace` and `projectspace`.
#[derive(clap::Args, Debug)]
pub struct SpaceArgs {
    #[arg(short = 'H')]
    scripted: bool,
    /// Translate SIDs to POSIX ids (no SMB principals here: accepted and ignored).
    #[arg(short = 'i')]
    sid2posix: bool,
    #[arg(short = 'n')]
    numeric: bool,
    #[arg(short = 'p')]
    parsable: bool,
    #[arg(short = 'o')]
    fields: Option<String>,
    #[arg(short = 's')]
    sort_asc: Vec<String>,
    #[arg(short = 'S')]
    sort_desc: Vec<String>,
    #[arg(short = 't')]
    types: Option<String>,
    target: String,
}

fn space_cmd(state: &State, owner: zpl::space::Owner, a: SpaceArgs) -> Result<Response, String> {
    use zpl::space::Owner;
    if owner == Owner::Project {
        for (set, c) in [(a.numeric, 'n'), (a.types.is_some(), 't'), (a.sid2posix, 'i')] {
            if set {
                return Ok(Response::usage(format!("invalid option '{c}'")));
            }
        }
    }
    let sort = a
        .sort_asc
        .into_iter()
        .map(|k| (k, false))
        .chain(a.sort_desc.into_iter().map(|k| (k, true)))
        .collect();
    let o = super::userspace::Opts {
        owner,
        scripted: a.scripted,
        parsable: a.parsable,
        numeric: a.numeric,
        fields: a.fields,
        types: a.types,
        sort,
    };
    super::userspace::userspace(state, &a.target, &o)
}

/// Runs one `rzfs` command.
pub fn run(state: &Arc<State>, argv: &[String], cwd: &Path) -> Response {
    run_with(state, argv, cwd, Vec::new(), "rzfs")
}

/// Runs one `rzfs` command with the file descriptors its client passed: `send` writes its
/// stream into the first, `receive` reads its stream from it (the client's standard output
/// and input, as OpenZFS's ioctls take them). `shown` is the program name pool history
/// records the command under.
pub fn run_with(
    state: &Arc<State>,
    argv: &[String],
    cwd: &Path,
    fds: Vec<std::os::fd::OwnedFd>,
    shown: &str,
) -> Response {
    // zfs's subcommands know no -h, except send, receive (holds) and diff: getopt answers '?',
    // a usage error (ZTS zfs_get_005_neg, 006_neg); `--help` still shows the help.
    let sub = argv.first().map(String::as_str).unwrap_or_default();
    if !matches!(sub, "send" | "receive" | "recv" | "diff")
        && argv.iter().skip(1).take_while(|a| *a != "--").any(|a| is_h_cluster(a))
    {
        return Response::usage(format!("invalid option 'h'\nusage: zfs {sub} ... (see zfs {sub} --help)"));
    }
    // zfs send takes one incremental source: a second -i or -I is a usage error
    // (zfs_do_send), not a replacement as for other repeated options.
    if sub == "send" && incremental_options(&argv[1..]) > 1 {
        return Response::usage("usage: zfs send: -i and -I may be given once (see zfs send --help)");
    }
    let cli = match Cli::try_parse_from(std::iter::once("rzfs".to_string()).chain(argv.iter().cloned())) {
        Ok(c) => c,
        Err(e) => {
            let mut r = clap_error(e);
            // `zfs get`, `set` and `inherit` with an argument missing also list the
            // properties (libzfs's usage(B_FALSE) prints the table; scripts read it).
            if r.exit == 2 && matches!(argv.first().map(String::as_str), Some("get" | "set" | "inherit")) {
                r.stderr.push_str(&property_table());
            }
            return r;
        }
    };
    let logged = match &cli.cmd {
        Cmd::Create { name, dry_run: false, .. } => Some(name.clone()),
        Cmd::Snapshot { names, .. } => names.first().cloned(),
        Cmd::Set { args, .. } => args.iter().find(|a| !a.contains('=')).cloned(),
        Cmd::Inherit { names, .. } => names.first().cloned(),
        Cmd::Destroy { name, dry_run: false, .. } => Some(name.clone()),
        Cmd::Clone { name, .. } => Some(name.clone()),
        Cmd::Hold { snapshots, .. } | Cmd::Release { snapshots, .. } => snapshots.first().cloned(),
        Cmd::Rename { new, .. } => Some(new.clone()),
        Cmd::Rollback { snapshot, .. } => Some(snapshot.clone()),
        Cmd::Promote { name } => Some(name.clone()),
        Cmd::Bookmark { bookmark, .. } => Some(bookmark.clone()),
        Cmd::Receive { target, dry_run: false, .. } => Some(target.clone()),
        _ => None,
    };
    // Hidden datasets (a receive's FS/%recv) can be looked at, not changed (libzfs's
    // zfs_validate_name with `modifying`).
    let changed: Vec<(&str, &String)> = match &cli.cmd {
        Cmd::Create { name, .. } => vec![("create", name)],
        Cmd::Snapshot { names, .. } => names.iter().map(|n| ("create snapshot", n)).collect(),
        Cmd::Clone { name, .. } => vec![("create", name)],
        Cmd::Rename { old, new, .. } => vec![("rename", old), ("rename to", new)],
        Cmd::Rollback { snapshot, .. } => vec![("rollback", snapshot)],
        Cmd::Promote { name } => vec![("promote", name)],
        Cmd::Bookmark { bookmark, .. } => vec![("create bookmark", bookmark)],
        _ => Vec::new(),
    };
    if let Some((verb, name)) = changed.into_iter().find(|(_, n)| n.contains('%')) {
        return Response::err(format!("cannot {verb} '{name}': invalid character '%' in name"));
    }
    let r = match cli.cmd {
        Cmd::List { scripted, parsable, recursive, depth, types, props, sort_asc, sort_desc, names } => {
            // -s keys, then -S keys (each in the order given).
            let sort: Vec<(String, bool)> = sort_asc
                .into_iter()
                .map(|k| (k, false))
                .chain(sort_desc.into_iter().map(|k| (k, true)))
                .collect();
            list(state, &names, recursive, depth, &types, &props, &sort)
                .map(|t| render(t, scripted, parsable))
        }
        Cmd::Get { scripted, parsable, recursive, fields, types, depth, sources, props, names } => {
            let walk = Walk { recursive, depth, types };
            get(state, &props, &names, &walk, &fields, &sources, scripted, parsable)
        }
        Cmd::Create {
            props,
            name,
            parents,
            volsize,
            blocksize,
            sparse,
            dry_run,
            no_mount,
            verbose,
            parsable,
        } => {
            let how = CreateHow { parents, dry_run, no_mount, verbose: verbose || parsable, parsable };
            let vol = volsize.as_deref().map(|v| (v, blocksize.as_deref(), sparse));
            create_cmd(state, &name, &props, vol, how)
        }
        Cmd::Clone { props, parents, snapshot, name } => clone(state, &snapshot, &name, &props, parents),
        Cmd::Destroy { recursive, dry_run, verbose, name, force, defer, parsable, dependents } => {
            let how = DestroyHow {
                recursive: recursive || dependents,
                dependents,
                dry_run,
                verbose: verbose || parsable,
                parsable,
                force,
                defer,
            };
            destroy(state, &name, &how)
        }
        Cmd::Promote { name } => promote(state, &name).map(|_| Response::ok(String::new())),
        Cmd::Upgrade { recursive, versions, version, all, names } => {
            upgrade(state, recursive, versions, version.as_deref(), all, &names)
        }
        Cmd::Diff { classify, scripted, timestamps, no_mangle, snapshot, to, .. } => {
            let o = crate::diff::DiffOpts { classify, scripted, timestamps, no_mangle };
            diff(state, &snapshot, to.as_deref(), o)
        }
        Cmd::Snapshot { names, props, recursive } => {
            crate::rwpool::snapshot(state, &names, &props, recursive).map(|_| Response::ok(String::new()))
        }
        Cmd::Inherit { recursive, received, prop, names } => {
            let names = if recursive { with_descendants(state, &names) } else { Ok(names) };
            names.and_then(|names| {
                with_remount(state, &prop, &names, || crate::rwpool::inherit(state, &prop, &names, received))
            })
        }
        Cmd::Set { no_mount, args } => {
            // `zfs set P=V [P=V]... NAME...`: the assignments come first.
            let n = args.iter().take_while(|a| a.contains('=')).count();
            let (assignments, names) = args.split_at(n);
            if assignments.is_empty() {
                Err(format!("missing property=value argument(s) before '{}'", names[0]))
            } else if names.is_empty() {
                Err("missing dataset name(s)".to_string())
            } else {
                let keys: Vec<&str> =
                    assignments.iter().filter_map(|a| a.split_once('=').map(|(k, _)| k)).collect();
                // As zfs_prop_valid_for_type: a file system property on a volume (atime,
                // mountpoint, snapdir, ...) is refused before anything changes.
                for name in names {
                    if let Ok(ds) =
                        state.pool(pool_of(name)).and_then(|p| p.dsl().find(name).map_err(|e| e.to_string()))
                    {
                        // (Snapshots get their own refusal further on.)
                        let bad = |k: &&&str| !applies_to(dsl::props::canonical(k), &ds);
                        if let Some(k) = keys.iter().find(bad).filter(|_| ds.kind != DatasetKind::Snapshot) {
                            return Response::err(format!(
                                "cannot set property for '{name}': '{k}' does not apply to datasets of this type"
                            ));
                        }
                    }
                }
                // Remounting follows the mount properties among them.
                let prop = ["mountpoint", "canmount", "exec", "setuid", "devices", "acltype", "snapdir"]
                    .into_iter()
                    .find(|p| keys.contains(p))
                    .unwrap_or(keys[0]);
                // canmount=noauto unmounts and remounts nothing (libzfs `zfs_prop_set_list`
                // skips the changelist for it), unless mountpoint changes with it.
                let noauto = prop == "canmount"
                    && assignments
                        .iter()
                        .any(|a| a.split_once('=').is_some_and(|(k, v)| k == "canmount" && v == "noauto"));
                let mut r = if no_mount || noauto {
                    // `zfs set -u`: the property changes; mounts stay as they are.
                    crate::rwpool::set(state, assignments, names).map(|_| Response::ok(String::new()))
                } else {
                    with_remount(state, prop, names, || crate::rwpool::set(state, assignments, names))
                };
                // The share properties are kept (OpenZFS shares by them when the pool moves
                // there), but rzfs runs no NFS or SMB export: say so rather than pretend.
                if let Ok(r) = &mut r {
                    let sharing = assignments
                        .iter()
                        .filter_map(|a| a.split_once('='))
                        .find(|(k, v)| (*k == "sharenfs" || *k == "sharesmb") && *v != "off");
                    if let (0, Some((k, _))) = (r.exit, sharing) {
                        r.stderr.push_str(&format!(
                            "note: '{k}' is set, but rzfs does not share file systems over NFS or SMB; \
                             export the mount point with the system's own server\n"
                        ));
                    }
                }
                r
            }
        }
        Cmd::Hold { recursive, tag, snapshots } => hold_release(state, &snapshots, recursive, |rw, names| {
            rw.spa.hold(names, &tag, crate::rwpool::now_pair().0).map_err(|e| e.to_string())
        }),
        Cmd::Release { recursive, tag, snapshots } => {
            hold_release(state, &snapshots, recursive, |rw, names| {
                rw.spa.release(names, &tag).map_err(|e| e.to_string())
            })
        }
        Cmd::Rename { recursive, force, parents, no_unmount, old, new } => {
            rename(state, &old, &new, RenameHow { recursive, force, parents, no_unmount })
        }
        Cmd::Userspace(a) => space_cmd(state, zpl::space::Owner::User, a),
        Cmd::Groupspace(a) => space_cmd(state, zpl::space::Owner::Group, a),
        Cmd::Projectspace(a) => space_cmd(state, zpl::space::Owner::Project, a),
        Cmd::Holds { recursive, scripted, parsable, snapshots } => {
            holds(state, &snapshots, recursive, scripted, parsable)
        }
        Cmd::Rollback { recursive, clones, force, snapshot } => {
            rollback(state, &snapshot, recursive || clones, clones, force)
                .map(|_| Response::ok(String::new()))
        }
        Cmd::Send {
            holds,
            from,
            from_all,
            large_blocks,
            embed,
            compressed,
            dry_run,
            verbose,
            parsable,
            token,
            snapshot,
            replicate,
            props,
            raw,
            backup,
            skip_missing,
            dedup,
            exclude,
            saved,
        } => {
            let intermediates = from_all.is_some();
            let o = crate::sendrecv::SendOpts {
                from: from.or(from_all),
                intermediates,
                large_blocks: large_blocks || raw,
                embed: embed || raw,
                compressed: compressed || raw,
                backup,
                skip_missing,
                dry_run,
                verbose,
                parsable,
                token,
                replicate,
                props: props || backup,
                holds,
                exclude,
                saved,
            };
            crate::sendrecv::send(state, snapshot.as_deref().unwrap_or(""), &o, fds).map(|mut r| {
                if dedup {
                    r.stderr.insert_str(
                        0,
                        "WARNING: deduplicated send is no longer supported.  A regular,\n\
                         non-deduplicated stream will be generated.\n\n",
                    );
                }
                r
            })
        }
        Cmd::Receive { abort: true, target, .. } => crate::sendrecv::abort_receive(state, &target),
        Cmd::Receive {
            force,
            save,
            no_mount,
            verbose,
            dry_run,
            discard_first,
            last_only,
            set,
            exclude,
            target,
            skip_holds,
            heal,
            ..
        } => {
            if let Some(a) = set.iter().find(|a| !a.contains('=')) {
                return Response::usage(format!("missing '=' for property=value argument: '{a}'"));
            }
            if let Some(a) = exclude.iter().find(|a| a.contains('=')) {
                return Response::usage(format!("invalid character '=' in property argument: '{a}'"));
            }
            let o = crate::sendrecv::RecvOpts {
                force,
                resumable: save,
                no_mount,
                discard_first,
                last_only,
                verbose,
                dry_run,
                set,
                exclude,
                skip_holds,
                origin: None,
                heal,
            };
            crate::sendrecv::receive(state, &target, &o, fds)
        }
        Cmd::Bookmark { source, bookmark } => {
            // `#NAME` alone names a bookmark of the source's file system (zfs-bookmark(8)).
            let bookmark = match bookmark.strip_prefix('#') {
                Some(_) => format!("{}{bookmark}", source.split(['@', '#']).next().unwrap_or(&source)),
                None => bookmark,
            };
            // And `@SNAP` / `#BOOKMARK` alone a source in the bookmark's file system.
            let source = if source.starts_with(['@', '#']) {
                format!("{}{source}", bookmark.split('#').next().unwrap_or(&bookmark))
            } else {
                source
            };
            let rw = crate::rwpool::writer_of(state, &bookmark)
                .ok_or_else(|| format!("cannot create bookmark '{bookmark}': pool is read-only"));
            rw.and_then(|rw| rw.spa.bookmark(&source, &bookmark).map_err(|e| e.to_string()))
                .map(|_| Response::ok(String::new()))
        }
        Cmd::Mount { all: true, .. } => mount_all(state),
        Cmd::Mount { recursive: true, dataset, dir, more, .. } => {
            let mut roots: Vec<String> = dataset.into_iter().collect();
            roots.extend(dir.map(|d| d.to_string_lossy().into_owned()));
            roots.extend(more);
            if roots.is_empty() {
                Err("missing dataset argument".to_string())
            } else {
                mount_recursive(state, &roots)
            }
        }
        Cmd::Mount { dataset: None, .. } => Ok(list_mounts(state)),
        Cmd::Mount { dataset: Some(ds), dir, options, overlay, .. } => {
            mount_o(state, &ds, dir.map(|d| abs(cwd, &d)), options.as_deref().unwrap_or(""), overlay)
        }
        Cmd::Unmount { all: true, .. } => unmount_all(state),
        Cmd::Unmount { target: Some(target), .. } => unmount(state, &target, cwd, false),
        Cmd::Unmount { target: None, .. } => Err("missing dataset or mount point".into()),
    };
    if let (Ok(resp), Some(name)) = (&r, &logged) {
        if resp.exit == 0 {
            crate::rwpool::log_history(state, pool_of(name), &format!("{shown} {}", argv.join(" ")));
        }
    }
    r.unwrap_or_else(Response::err)
}

/// A dataset with the pool it came from.
struct Entry {
    pool: Arc<Pool>,
    ds: Dataset,
}

fn wanted_types(types: &[String], default_fs_vol: bool) -> Result<Vec<DatasetKind>, String> {
    if types.is_empty() {
        return Ok(if default_fs_vol {
            vec![DatasetKind::Filesystem, DatasetKind::Volume]
        } else {
            vec![DatasetKind::Filesystem, DatasetKind::Volume, DatasetKind::Snapshot]
        });
    }
    let mut out = Vec::new();
    for t in types {
        match t.as_str() {
            "filesystem" => out.push(DatasetKind::Filesystem),
            "volume" => out.push(DatasetKind::Volume),
            "snapshot" | "snap" => out.push(DatasetKind::Snapshot),
            "all" => out.extend([
                DatasetKind::Filesystem,
                DatasetKind::Volume,
                DatasetKind::Snapshot,
                DatasetKind::Bookmark,
            ]),
            "bookmark" => out.push(DatasetKind::Bookmark),
            other => return Err(format!("invalid type '{other}'")),
        }
    }
    Ok(out)
}

fn depth_below(parent: &str, child: &str) -> Option<usize> {
    if child == parent {
        return Some(0);
    }
    let rest = child.strip_prefix(parent)?;
    if !(rest.starts_with('/') || rest.starts_with('@') || rest.starts_with('#')) {
        return None;
    }
    Some(rest.matches(['/', '@', '#']).count())
}

/// The datasets `zfs list`/`zfs get` walk: `names` (all pools' when empty), with their
/// descendants when recursive (to `depth`), of the given types. Goes on past names that do
/// not exist, giving a "cannot open" message for each (as zfs_for_each: zfs prints what it
/// can and exits 1).
fn collect_some(
    state: &State,
    names: &[String],
    recursive: bool,
    depth: Option<usize>,
    types: &[DatasetKind],
) -> Result<(Vec<Entry>, Vec<String>), String> {
    let mut out = Vec::new();
    let mut missing: std::collections::BTreeSet<&str> = Default::default();
    let pools: Vec<Arc<Pool>> = if names.is_empty() {
        state.all_pools()
    } else {
        let mut v: Vec<Arc<Pool>> = Vec::new();
        for n in names {
            let Ok(p) = state.pool(pool_of(n)) else {
                missing.insert(n);
                continue;
            };
            if !v.iter().any(|x| x.name() == p.name()) {
                v.push(p);
            }
        }
        v
    };
    // `zfs list -t snapshot FS` (and `get`): FS's own snapshots, as a depth-1 walk
    // (zfs_main.c does the same for -t snapshot or bookmark alone, without -r or -d).
    let only_snaps_or_bookmarks =
        !types.is_empty() && types.iter().all(|t| matches!(t, DatasetKind::Snapshot | DatasetKind::Bookmark));
    let (recursive, depth) = if only_snaps_or_bookmarks && !names.is_empty() && !recursive && depth.is_none()
    {
        (true, Some(1))
    } else {
        (recursive || depth.is_some(), depth)
    };
    for p in pools {
        let dsl = p.dsl();
        let mut all = dsl.list().map_err(|e| format!("cannot list datasets of '{}': {e}", p.name()))?;
        if types.contains(&DatasetKind::Bookmark) || names.iter().any(|n| n.contains('#')) {
            // Each head's bookmarks after its snapshots.
            let mut with = Vec::with_capacity(all.len());
            let mut pending: Option<Vec<Dataset>> = None;
            for d in all {
                if d.kind != DatasetKind::Snapshot {
                    with.extend(pending.take().unwrap_or_default());
                    pending = Some(dsl.bookmarks(&d).map_err(|e| e.to_string())?);
                }
                with.push(d);
            }
            with.extend(pending.take().unwrap_or_default());
            all = with;
        }
        let exists: std::collections::BTreeSet<String> = all.iter().map(|d| d.name.clone()).collect();
        for ds in all {
            let keep = if names.is_empty() {
                true
            } else {
                names.iter().any(|n| match depth_below(n, &ds.name) {
                    Some(0) => true,
                    Some(d) => recursive && depth.is_none_or(|m| d <= m),
                    None => false,
                })
            };
            // A dataset named without recursion is shown whatever its type; in a walk, the
            // types filter every dataset (zfs_for_each).
            // A bookmark named is shown in a walk too: it is where the walk starts and has
            // nothing below it (zfs get -r PROP FS#BM, ZTS zfs_get_001).
            let explicitly_named =
                names.contains(&ds.name) && (!recursive || ds.kind == DatasetKind::Bookmark);
            // Hidden datasets (a receive's FS/%recv) are not walked, only named (libzfs's
            // iterators skip `dataset_name_hidden` names).
            let hidden = ds.name.contains('%') && !names.contains(&ds.name);
            if keep && !hidden && (types.contains(&ds.kind) || explicitly_named) {
                out.push(Entry { pool: p.clone(), ds });
            }
        }
        for n in names {
            if pool_of(n) == p.name() && !exists.contains(n) {
                missing.insert(n);
            }
        }
    }
    // In the order the names were given.
    let missing = names
        .iter()
        .filter(|n| missing.contains(n.as_str()))
        .map(|n| format!("cannot open '{n}': dataset does not exist"))
        .collect();
    Ok((out, missing))
}

const LIST_DEFAULT: &[&str] = &["name", "used", "avail", "refer", "mountpoint"];

struct Listing {
    table: Table,
    rows: Vec<Vec<(String, String)>>,
    /// Names that do not exist ("cannot open ..."): the rest is listed, the exit code is 1.
    missing: Vec<String>,
}

fn render(l: Listing, scripted: bool, parsable: bool) -> Response {
    let mut t = l.table;
    let some = !l.rows.is_empty();
    for r in l.rows {
        t.rows.push(r.into_iter().map(|(human, exact)| if parsable { exact } else { human }).collect());
    }
    if !some && l.missing.is_empty() && !scripted {
        // zfs_do_list: nothing printed, not even the header.
        let mut r = Response::ok(String::new());
        r.stderr = "no datasets available\n".into();
        return r;
    }
    partial(if some { t.render(scripted) } else { String::new() }, l.missing)
}

/// The answer of a listing that went on past missing names: what was found, and the
/// messages with exit 1 if any name was missing.
fn partial(stdout: String, missing: Vec<String>) -> Response {
    if missing.is_empty() {
        return Response::ok(stdout);
    }
    let mut r = Response::err(missing.join("\n"));
    r.stdout = stdout;
    r
}

/// Which datasets `zfs get` walks.
struct Walk {
    recursive: bool,
    depth: Option<usize>,
    types: Vec<String>,
}

/// Orders two values of a sort key as libzfs's `zfs_sort` does: numbers numerically,
/// other values as strings, a missing value (`-`) after every present one.
fn sort_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    match (a == "-", b == "-") {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        _ => match (a.parse::<f64>(), b.parse::<f64>()) {
            (Ok(x), Ok(y)) => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
            _ => a.cmp(b),
        },
    }
}

fn list(
    state: &State,
    names: &[String],
    recursive: bool,
    depth: Option<usize>,
    types: &[String],
    props: &[String],
    sort: &[(String, bool)],
) -> Result<Listing, String> {
    let kinds = wanted_types(types, true)?;
    let (entries, missing) = collect_some(state, names, recursive, depth, &kinds)?;
    let cols: Vec<String> =
        if props.is_empty() { LIST_DEFAULT.iter().map(|s| s.to_string()).collect() } else { props.to_vec() };
    let right: Vec<bool> = cols.iter().map(|c| is_numeric(c)).collect();
    let hdr: Vec<&str> = cols.iter().map(|c| c.as_str()).collect();
    let mut rows = Vec::new();
    for e in &entries {
        let dsl = e.pool.dsl();
        let mut row = Vec::new();
        for c in &cols {
            let v = prop_value(&e.pool, &dsl, &e.ds, c)?;
            row.push((v.human, v.exact));
        }
        // The sort keys' exact values (a key need not be a column).
        let keys = sort
            .iter()
            .map(|(k, _)| prop_value(&e.pool, &dsl, &e.ds, k).map(|v| v.exact))
            .collect::<Result<Vec<_>, _>>()?;
        rows.push((keys, row));
    }
    if !sort.is_empty() {
        // Stable: datasets equal on every key keep the walk's (name) order.
        rows.sort_by(|(a, _), (b, _)| {
            for (i, (_, desc)) in sort.iter().enumerate() {
                let o = sort_cmp(&a[i], &b[i]);
                let o = if *desc { o.reverse() } else { o };
                if o.is_ne() {
                    return o;
                }
            }
            std::cmp::Ordering::Equal
        });
    }
    let rows = rows.into_iter().map(|(_, r)| r).collect();
    Ok(Listing { table: Table::new(&hdr, &right), rows, missing })
}

fn is_numeric(p: &str) -> bool {
    matches!(
        p,
        "used"
            | "avail"
            | "available"
            | "refer"
            | "referenced"
            | "logicalused"
            | "logicalreferenced"
            | "usedbysnapshots"
            | "usedbydataset"
            | "usedbychildren"
            | "written"
            | "quota"
            | "reservation"
            | "volsize"
            | "volblocksize"
            | "refreservation"
            | "usedbyrefreservation"
            | "recordsize"
            | "compressratio"
            | "refcompressratio"
            | "createtxg"
            | "guid"
            | "snapshots_changed"
            | "snapshots_changed_nsecs"
            | "filesystem_limit"
            | "snapshot_limit"
            | "filesystem_count"
            | "snapshot_count"
    )
}

/// One property value: human form, exact (-p) form, and source.
pub struct PropVal {
    pub human: String,
    pub exact: String,
    pub source: String,
}

fn num(n: u64) -> PropVal {
    PropVal { human: crate::format::nicenum(n), exact: n.to_string(), source: "-".into() }
}

/// A limit or count as zfs prints one (`zfs_prop_get`): UINT64_MAX is `none`, also with
/// `-p`; other values nicenum.
fn count_val(n: u64, source: &str) -> PropVal {
    if n == u64::MAX {
        return text("none", source);
    }
    PropVal { human: crate::format::nicenum(n), exact: n.to_string(), source: source.into() }
}

fn text(s: impl Into<String>, source: &str) -> PropVal {
    let s = s.into();
    PropVal { human: s.clone(), exact: s, source: source.into() }
}

/// Properties that are set but not inherited (`PROP_DEFAULT`/`PROP_ONETIME` in zfs_prop.c).
const NOT_INHERITED: &[&str] =
    &["quota", "refquota", "reservation", "refreservation", "canmount", "filesystem_limit", "snapshot_limit"];

/// The table of properties `zfs get`/`set`/`inherit` print after their usage, as libzfs's
/// `usage(B_FALSE)` does (PROPERTY, EDIT, INHERIT, VALUES), listing what rzfs has: EDIT is
/// YES where rzfs can set the property, INHERIT where it is inherited.
fn property_table() -> String {
    let mut names: Vec<&str> = GET_ALL.to_vec();
    names.extend(PROP_TYPES.iter().map(|(p, _)| *p));
    names.extend(dsl::props::DEFAULTS.iter().map(|(p, _)| *p));
    names.extend(["name", "mountpoint", "volsize", "volblocksize", "written", "userrefs"]);
    names.sort_unstable();
    names.dedup();
    let mut out = String::from(
        "\nThe following properties are supported:\n\n\tPROPERTY       EDIT  INHERIT   VALUES\n\n",
    );
    for p in names {
        let edit = p == "mountpoint"
            || p == "volsize"
            || dsl::props::parse_value(p, "").is_err_and(|e| !e.contains("cannot be set by rzfs yet"));
        let inherit = (p == "mountpoint" || dsl::props::DEFAULTS.iter().any(|(d, _)| *d == p))
            && !NOT_INHERITED.contains(&p);
        let values = match p {
            "mountpoint" => "<path> | legacy | none".to_string(),
            "recordsize" => "512 to 16M, power of 2".to_string(),
            "quota" | "refquota" | "reservation" | "refreservation" => "<size> | none".to_string(),
            "filesystem_limit" | "snapshot_limit" => "<count> | none".to_string(),
            "filesystem_count" | "snapshot_count" => "<count>".to_string(),
            "volsize" | "used" | "available" | "referenced" | "written" | "logicalused"
            | "logicalreferenced" => "<size>".to_string(),
            "compression" => "on | off | lzjb | gzip | gzip-[1-9] | zle | lz4 | zstd | zstd-[1-19] | \
                              zstd-fast | zstd-fast-[1-10,20,30,40,50,60,70,80,90,100,500,1000]"
                .to_string(),
            _ => match dsl::props::choices(p) {
                c if c.is_empty() => "-".to_string(),
                c => c,
            },
        };
        let yes = |b: bool| if b { "YES" } else { "NO" };
        out.push_str(&format!("\t{p:<15} {:>4}  {:>7}   {values}\n", yes(edit), yes(inherit)));
    }
    out.push_str(
        "\nSizes are specified in bytes with standard units such as K, M, G, etc.\n\n\
         User-defined properties can be specified by using a name containing a colon (:).\n",
    );
    out
}

/// Whether `zfs get` knows property name `p` (a native one, an alias, `written@SNAP`, or a
/// user property).
fn known_prop(p: &str) -> bool {
    let c = dsl::props::canonical(p);
    dsl::props::is_user_prop(c)
        || c.starts_with("written@")
        || zpl::space::SpaceProp::parse(c).is_some()
        || matches!(c, "name" | "written" | "inconsistent")
        || GET_ALL.contains(&c)
        || dsl::props::DEFAULTS.iter().any(|(k, _)| *k == c)
        || PROP_TYPES.iter().any(|(k, _)| *k == c)
}

/// `-h` or a cluster of short flags with `h` in it (`-rph`).
fn is_h_cluster(a: &str) -> bool {
    a.len() > 1
        && a.starts_with('-')
        && !a.starts_with("--")
        && a[1..].chars().all(|c| c.is_ascii_alphabetic())
        && a.contains('h')
}

/// With `POSIXLY_CORRECT` in the environment getopt stops at the first operand: `zfs get
/// all -r POOL` names a dataset `-r`. Marks where a subcommand's options end in `argv`
/// (subcommand first) with `--`, from the options each subcommand declares.
pub fn posix_argv(argv: &mut Vec<String>) {
    use clap::CommandFactory;
    let cmd = Cli::command();
    let Some(sub) = argv.first().and_then(|s| cmd.find_subcommand(s)) else { return };
    let takes_value = |a: &clap::Arg| a.get_action().takes_values();
    let mut i = 1;
    while let Some(a) = argv.get(i) {
        if a == "--" || !a.starts_with('-') || a == "-" {
            break;
        }
        if let Some(long) = a.strip_prefix("--") {
            let needs = !long.contains('=')
                && sub.get_arguments().any(|x| x.get_long() == Some(long) && takes_value(x));
            i += if needs { 2 } else { 1 };
            continue;
        }
        let mut step = 1;
        for (k, c) in a[1..].char_indices() {
            if sub.get_arguments().any(|x| x.get_short() == Some(c) && takes_value(x)) {
                // The rest of the cluster is the value, or else the next argument is.
                if k + c.len_utf8() == a.len() - 1 {
                    step = 2;
                }
                break;
            }
        }
        i += step;
    }
    if i < argv.len() && argv[i] != "--" {
        argv.insert(i, "--".into());
    }
}

/// A property the ZPL keeps in a file system's master node, set when it was created
/// (`zfs_get_zplprop`): `version`, `normalization`, `utf8only`, `casesensitivity`. An entry
/// the master node lacks has its default (an old ZPL version had none of the three); `-`
/// when the file system cannot be read (an unfinished receive).
fn zpl_prop(dsl: &DslPool, ds: &Dataset, prop: &str) -> PropVal {
    let key = if prop == "version" { "VERSION" } else { prop };
    let Ok(os) = dsl.open_objset(ds) else { return text("-", "-") };
    let Ok(v) = zap::lookup_u64(&os, zpl::MASTER_NODE_OBJ, key) else { return text("-", "-") };
    let v = v.unwrap_or(0);
    let shown = match prop {
        "version" => v.to_string(),
        // U8_TEXTPREP_NFD/NFKD/NFC/NFKC (include/sys/u8_textprep.h).
        "normalization" => match v {
            0 => "none".into(),
            0x10 => "formD".into(),
            0x20 => "formKD".into(),
            0x50 => "formC".into(),
            0x60 => "formKC".into(),
            n => n.to_string(),
        },
        "utf8only" => if v == 0 { "off" } else { "on" }.into(),
        // ZFS_CASE_SENSITIVE/INSENSITIVE/MIXED.
        _ => match v {
            0 => "sensitive".into(),
            1 => "insensitive".into(),
            2 => "mixed".into(),
            n => n.to_string(),
        },
    };
    text(shown, "-")
}

fn ratio(uncomp: u64, comp: u64) -> PropVal {
    let r = if comp == 0 { 1.0 } else { uncomp as f64 / comp as f64 };
    let r = (r * 100.0).floor() / 100.0;
    PropVal { human: format!("{r:.2}x"), exact: format!("{r:.2}"), source: "-".into() }
}

/// Resolves an inheritable property: local value on the dataset's directory, else the
/// nearest ancestor's, else the default.
fn inherited(pool: &Pool, dsl: &DslPool, ds: &Dataset, prop: &str) -> Result<PropVal, String> {
    let user = dsl::props::is_user_prop(prop);
    if user && ds.kind == DatasetKind::Snapshot {
        // A snapshot's own user properties are in its dataset's props object.
        let own = dsl::props::read_props_zap_all(dsl.mos(), ds.ds.props_obj).map_err(|e| e.to_string())?;
        if let Some((v, received)) = dsl::props::applies(&own, prop) {
            let shown = dsl::props::display_value(prop, &v);
            return Ok(text(shown, if received { "received" } else { "local" }));
        }
    }
    // Whether the value found on the dataset's own directory is a received one.
    let mut own_received = false;
    let found = dsl::props::resolve(ds.dir_obj, prop, |obj| -> Result<_, String> {
        let dir =
            if obj == ds.dir_obj { ds.dir.clone() } else { dsl.dir_phys(obj).map_err(|e| e.to_string())? };
        let all = dsl.all_props(&dir).map_err(|e| e.to_string())?;
        let v = dsl::props::applies(&all, prop);
        if obj == ds.dir_obj {
            own_received = v.as_ref().is_some_and(|(_, r)| *r);
        }
        Ok((v.map(|(v, _)| v), dir.parent_obj))
    })?;
    if let Some((v, hop)) = found {
        // The dataset `hop` directories up, which set the value.
        let base = ds.name.split('@').next().unwrap_or(&ds.name);
        let name = match base.match_indices('/').rev().nth(hop.saturating_sub(1)) {
            _ if hop == 0 => base.to_string(),
            Some((i, _)) => base[..i].to_string(),
            None => pool.name().to_string(),
        };
        let v = &v;
        let mut shown = dsl::props::display_value(prop, v);
        // An inherited mountpoint path gets the dataset's path below the ancestor that
        // set it (`pool/a` mounted at /m puts `pool/a/b/c` at /m/b/c).
        let base = ds.name.split('@').next().unwrap_or(&ds.name);
        if prop == "mountpoint" && hop > 0 && shown.starts_with('/') {
            let rel = base.get(name.len()..).unwrap_or("");
            shown = format!("{}{rel}", shown.trim_end_matches('/'));
        }
        let exact = match v {
            dsl::props::RawProp::Num(n)
                if prop == "recordsize"
                    || prop == "quota"
                    || prop == "refquota"
                    || prop == "reservation"
                    || prop == "refreservation" =>
            {
                n.to_string()
            }
            _ => shown.clone(),
        };
        let human = match v {
            dsl::props::RawProp::Num(n)
                if prop == "recordsize"
                    || prop == "quota"
                    || prop == "refquota"
                    || prop == "reservation"
                    || prop == "refreservation" =>
            {
                if *n == 0 {
                    "none".into()
                } else {
                    crate::format::nicenum(*n)
                }
            }
            _ => shown,
        };
        let source = if hop == 0 && ds.kind != DatasetKind::Snapshot {
            if own_received { "received" } else { "local" }.to_string()
        } else {
            format!("inherited from {name}")
        };
        return Ok(PropVal { human, exact, source });
    }
    if prop == "mountpoint" {
        let base = ds.name.split('@').next().unwrap_or(&ds.name);
        return Ok(text(format!("/{base}"), "default"));
    }
    if user {
        // An unset user property is shown as `-`, not refused (scripts such as syncoid
        // rely on it).
        return Ok(text("-", "-"));
    }
    let d = dsl::props::DEFAULTS.iter().find(|(k, _)| *k == prop).map(|(_, v)| *v);
    match d {
        Some(v) if prop == "recordsize" => Ok(PropVal {
            human: crate::format::nicenum(v.parse().unwrap_or(0)),
            exact: v.into(),
            source: "default".into(),
        }),
        Some(_) if ["quota", "refquota", "reservation", "refreservation"].contains(&prop) => {
            Ok(PropVal { human: "none".into(), exact: "0".into(), source: "default".into() })
        }
        Some(v) => Ok(text(v, "default")),
        None => Err(format!("invalid property '{prop}'")),
    }
}

/// The space head `ds` has left, given the pool's (`dsl::quota::head_available`: within
/// the quotas above it and its refquota, with its reservations).
pub fn head_available(pool: &Pool, dsl: &DslPool, ds: &Dataset, pool_avail: u64) -> Result<u64, String> {
    let n = |p: &str| -> Result<u64, String> { Ok(prop_value(pool, dsl, ds, p)?.exact.parse().unwrap_or(0)) };
    let head = dsl::quota::HeadSpace {
        dir: ds.ds.dir_obj,
        referenced: ds.ds.referenced_bytes,
        unique: ds.ds.unique_bytes,
        refquota: n("refquota")?,
        refreservation: n("refreservation")?,
    };
    // Space reserved elsewhere is not available here (what its own reservations hold comes
    // back to it on the way down).
    let pool_avail = pool_avail.saturating_sub(dsl.unused_reservations().map_err(|e| e.to_string())?);
    dsl::quota::head_available(&head, pool_avail, &mut |d| dsl.dir_phys(d)).map_err(|e| e.to_string())
}

/// The dataset types a native property applies to (`pd_types` in OpenZFS's zfs_prop.c):
/// F file system, V volume, S snapshot. A property that does not apply to a dataset's type
/// reads `-` there (`zfs_prop_get` refuses it) and is left out of `get all`. Properties not
/// listed apply to every type.
const PROP_TYPES: &[(&str, &str)] = &[
    ("sync", "FV"),
    ("checksum", "FV"),
    ("dedup", "FV"),
    ("compression", "FV"),
    ("snapdir", "F"),
    ("acltype", "FS"),
    ("copies", "FV"),
    ("xattr", "FS"),
    ("dnodesize", "F"),
    ("volmode", "FV"),
    ("primarycache", "FSV"),
    ("secondarycache", "FSV"),
    ("logbias", "FV"),
    ("redundant_metadata", "FV"),
    ("zoned", "F"),
    ("aclinherit", "F"),
    ("aclmode", "F"),
    ("version", "FS"),
    ("normalization", "FS"),
    ("utf8only", "FS"),
    ("casesensitivity", "FS"),
    ("atime", "F"),
    ("relatime", "F"),
    ("overlay", "F"),
    ("devices", "FS"),
    ("exec", "FS"),
    ("setuid", "FS"),
    ("readonly", "FV"),
    ("canmount", "F"),
    ("mounted", "F"),
    ("defer_destroy", "S"),
    ("origin", "FV"),
    ("clones", "S"),
    ("snapshots_changed", "FV"),
    ("snapshots_changed_nsecs", "FV"),
    ("mountpoint", "F"),
    ("receive_resume_token", "FV"),
    ("available", "FV"),
    ("volblocksize", "V"),
    ("usedbysnapshots", "FV"),
    ("usedbydataset", "FV"),
    ("usedbychildren", "FV"),
    ("usedbyrefreservation", "FV"),
    ("userrefs", "S"),
    ("logicalused", "FV"),
    ("quota", "F"),
    ("reservation", "FV"),
    ("volsize", "SV"),
    ("refquota", "F"),
    ("refreservation", "FV"),
    ("recordsize", "F"),
    ("sharenfs", "F"),
    ("sharesmb", "F"),
    ("filesystem_limit", "F"),
    ("snapshot_limit", "FV"),
    ("filesystem_count", "F"),
    ("snapshot_count", "FV"),
];

/// Does native property `prop` apply to `ds`'s type?
fn applies_to(prop: &str, ds: &Dataset) -> bool {
    let t = match ds.kind {
        DatasetKind::Filesystem => 'F',
        DatasetKind::Volume => 'V',
        DatasetKind::Snapshot => 'S',
        DatasetKind::Bookmark => return true,
    };
    applies_to_type(prop, t)
}

/// Whether native property `prop` applies to datasets of type `t` (F, V or S of
/// [`PROP_TYPES`]); user properties and unlisted ones apply to every type.
pub(crate) fn applies_to_type(prop: &str, t: char) -> bool {
    PROP_TYPES.iter().find(|(p, _)| *p == prop).is_none_or(|(_, types)| types.contains(t))
}

/// The value of `prop` for dataset `ds`.
pub fn prop_value(pool: &Pool, dsl: &DslPool, ds: &Dataset, prop: &str) -> Result<PropVal, String> {
    let prop = dsl::props::canonical(prop);
    if ds.kind == DatasetKind::Bookmark {
        // A bookmark has only what it records of its snapshot.
        return Ok(match prop {
            "name" => text(ds.name.clone(), "-"),
            "type" => text("bookmark", "-"),
            "creation" => {
                let mut v = text(ds.ds.creation_time.to_string(), "-");
                v.human = crate::format::ctime(ds.ds.creation_time);
                v
            }
            "guid" => text(ds.ds.guid.to_string(), "-"),
            "createtxg" => text(ds.ds.creation_txg.to_string(), "-"),
            p if dsl::props::is_user_prop(p) => text("-", "-"),
            // A name zfs does not know is refused, as for other datasets.
            p if !GET_ALL.contains(&p) && !dsl::props::DEFAULTS.iter().any(|(k, _)| *k == p) => {
                return Err(format!("invalid property '{p}'"));
            }
            _ => text("-", "-"),
        });
    }
    if !applies_to(prop, ds) {
        return Ok(text("-", "-"));
    }
    let snap = ds.kind == DatasetKind::Snapshot;
    // A mount option given with `zfs mount -o` overrides the property while mounted.
    if !snap && matches!(prop, "atime" | "relatime" | "exec" | "setuid" | "devices" | "readonly") {
        if let Some(v) = crate::daemon::mount_temp(&ds.name, prop) {
            return Ok(text(v, "temporary"));
        }
    }
    let p = &ds.ds;
    let d = &ds.dir;
    Ok(match prop {
        "name" => text(ds.name.clone(), "-"),
        "type" => text(ds.kind.as_str(), "-"),
        "creation" => {
            let mut v = text(ds.ds.creation_time.to_string(), "-");
            v.human = crate::format::ctime(ds.ds.creation_time);
            v
        }
        "used" => num(if snap { p.unique_bytes } else { d.used_bytes }),
        "referenced" | "refer" => num(p.referenced_bytes),
        "available" | "avail" => {
            if snap {
                text("-", "-")
            } else {
                // Unreadable space maps (failing devices) leave AVAIL unknown, not the
                // whole listing failed.
                match pool::status::space(pool) {
                    Ok(sp) => num(head_available(pool, dsl, ds, sp.available(pool))?),
                    Err(_) => text("-", "-"),
                }
            }
        }
        "compressratio" => {
            if snap {
                ratio(p.uncompressed_bytes, p.compressed_bytes)
            } else {
                ratio(d.uncompressed_bytes, d.compressed_bytes)
            }
        }
        "refcompressratio" => ratio(p.uncompressed_bytes, p.compressed_bytes),
        "logicalused" => num(if snap { p.uncompressed_bytes } else { d.uncompressed_bytes }),
        "logicalreferenced" | "lrefer" => num(p.uncompressed_bytes),
        "guid" => text(p.guid.to_string(), "-"),
        "createtxg" => text(p.creation_txg.to_string(), "-"),
        // When a snapshot of the file system was last taken, destroyed or renamed; never: `-`.
        "snapshots_changed" | "snapshots_changed_nsecs" => {
            let (sec, nsec) = dsl.snapshots_changed(ds.dir_obj).map_err(|e| e.to_string())?;
            if sec == 0 {
                text("-", "-")
            } else if prop == "snapshots_changed" {
                let mut v = text(sec.to_string(), "-");
                v.human = crate::format::ctime_full(sec);
                v
            } else {
                text(sec.saturating_mul(1_000_000_000).saturating_add(nsec).to_string(), "-")
            }
        }
        "version" | "normalization" | "utf8only" | "casesensitivity" => zpl_prop(dsl, ds, prop),
        // Not inherited: the directory's own value, or none (UINT64_MAX, also what
        // `zfs set ...=none` stores).
        "filesystem_limit" | "snapshot_limit" => {
            let all = dsl.all_props(d).map_err(|e| e.to_string())?;
            match dsl::props::applies(&all, prop) {
                Some((dsl::props::RawProp::Num(n), received)) => {
                    count_val(n, if received { "received" } else { "local" })
                }
                _ => count_val(u64::MAX, "default"),
            }
        }
        // Kept only where a limit made them count (see dsl::limits); elsewhere none.
        "filesystem_count" | "snapshot_count" => {
            let which = if prop == "filesystem_count" {
                dsl::limits::Count::Filesystems
            } else {
                dsl::limits::Count::Snapshots
            };
            match dsl.fs_ss_count(ds.dir_obj, which).map_err(|e| e.to_string())? {
                Some(n) => count_val(n, "local"),
                None => count_val(u64::MAX, "default"),
            }
        }
        "mountpoint" | "dnodesize" if snap || ds.kind == DatasetKind::Volume => text("-", "-"),
        "mounted" if snap => text("-", "-"),
        "mounted" => text(if crate::daemon::is_mounted(&ds.name) { "yes" } else { "no" }, "-"),
        "clones" => {
            // A snapshot's clones (heads whose origin it is), as a comma-separated list.
            let names: Vec<String> = if snap {
                let mut v: Vec<String> = dsl
                    .list()
                    .map_err(|e| e.to_string())?
                    .into_iter()
                    .filter(|x| x.kind != DatasetKind::Snapshot && x.dir.origin_obj == ds.ds_obj)
                    .map(|x| x.name)
                    .collect();
                v.sort();
                v
            } else {
                Vec::new()
            };
            // libzfs builds it in a ZFS_MAXPROPLEN (8192) buffer: at most 8191 bytes
            // (strlcat cuts the rest; ZTS zfs_clone_010_pos).
            let mut list = names.join(",");
            if list.len() > 8191 {
                let mut cut = 8191;
                while !list.is_char_boundary(cut) {
                    cut -= 1;
                }
                list.truncate(cut);
            }
            text(if names.is_empty() { "-".to_string() } else { list }, "-")
        }
        "origin" => {
            // Every file system is a clone of the hidden $ORIGIN@$ORIGIN; only user
            // snapshots are shown.
            let o = d.origin_obj;
            let name = if o == 0 || snap {
                None
            } else {
                dsl.list().map_err(|e| e.to_string())?.into_iter().find(|x| x.ds_obj == o).map(|x| x.name)
            };
            text(name.unwrap_or_else(|| "-".into()), "-")
        }
        "volsize" | "volblocksize" if ds.kind == DatasetKind::Volume || is_vol_snapshot(dsl, ds) => {
            let os = dsl.open_objset(ds).map_err(|e| e.to_string())?;
            let (size, bs) = zpl::zvol::info(&os).map_err(|e| e.to_string())?;
            let mut v = num(if prop == "volsize" { size } else { bs });
            v.source = if prop == "volsize" { "local".into() } else { "default".into() };
            if prop == "volblocksize" && bs != zpl::zvol::DEFAULT_VOLBLOCKSIZE {
                v.source = "-".into();
            }
            v
        }
        "volsize" | "volblocksize" => text("-", "-"),
        "usedbydataset" if !snap => num(d.used_breakdown[ondisk::dsl::DD_USED_HEAD]),
        "usedbysnapshots" if !snap => num(d.used_breakdown[ondisk::dsl::DD_USED_SNAP]),
        "usedbychildren" if !snap => {
            num(d.used_breakdown[ondisk::dsl::DD_USED_CHILD]
                + d.used_breakdown[ondisk::dsl::DD_USED_CHILD_RSRV])
        }
        "usedbyrefreservation" if !snap => num(d.used_breakdown[ondisk::dsl::DD_USED_REFRSRV]),
        // Since the previous snapshot (all it references when it has none).
        "written" => {
            let origin = dsl.origin_snapshot_obj().map_err(|e| e.to_string())?;
            if p.prev_snap_obj == 0 || Some(p.prev_snap_obj) == origin {
                num(p.referenced_bytes)
            } else {
                let prev = dsl.dataset_phys(p.prev_snap_obj).map_err(|e| e.to_string())?;
                let w = dsl
                    .space_written_phys((p.prev_snap_obj, &prev), (ds.ds_obj, p))
                    .map_err(|e| e.to_string())?;
                num(w.unwrap_or(0))
            }
        }
        u if zpl::space::SpaceProp::parse(u).is_some() => {
            let (sp, who) = zpl::space::SpaceProp::parse(u).expect("parsed above");
            match super::userspace::prop_value(dsl, ds, sp, who) {
                Some((exact, human)) => PropVal { exact, human, source: "local".into() },
                None => text("-", "-"),
            }
        }
        w if w.starts_with("written@") => {
            // A snapshot that does not exist or is not an earlier one of this dataset reads
            // as "-" (zfs_main.c get_callback: zfs_prop_get_written failing), so `get -r`
            // over datasets of which only some have the snapshot works.
            let since = &w["written@".len()..];
            let fs = ds.name.split('@').next().unwrap_or(&ds.name);
            let full = if since.contains('@') { since.to_string() } else { format!("{fs}@{since}") };
            let Ok(old) = dsl.find(&full) else { return Ok(text("-", "-")) };
            match dsl.space_written(&old, ds).map_err(|e| e.to_string())? {
                // The source is `local`, as zfs_main.c prints a written@ value it got.
                Some(n) if old.ds.creation_txg <= p.creation_txg || !snap => {
                    PropVal { source: "local".into(), ..num(n) }
                }
                _ => text("-", "-"),
            }
        }
        "usedbydataset" | "usedbysnapshots" | "usedbychildren" | "usedbyrefreservation" => text("-", "-"),
        "refreservation" if snap => text("-", "-"),
        "defer_destroy" if snap => {
            let on = p.flags & ondisk::dsl::DS_FLAG_DEFER_DESTROY != 0;
            text(if on { "on" } else { "off" }, "-")
        }
        "defer_destroy" => text("-", "-"),
        // Hidden in OpenZFS (not in `get all`): a receive into the dataset has not finished.
        "inconsistent" => {
            text(u64::from(ds.ds.flags & ondisk::dsl::DS_FLAG_INCONSISTENT != 0).to_string(), "-")
        }
        "userrefs" if snap => {
            let n = if p.userrefs_obj == 0 {
                0
            } else {
                zap::list(dsl.mos(), p.userrefs_obj).map_err(|e| e.to_string())?.len() as u64
            };
            text(n.to_string(), "-")
        }
        "userrefs" => text("-", "-"),
        "receive_resume_token" if !snap => {
            // A receive -F over this file system keeps its partial state in NAME/%recv
            // (OpenZFS's get_receive_resume_token looks there too).
            let tmp = format!("{}/{}", ds.name, pool::admin::RECV_TMP);
            let token = crate::sendrecv::resume_token(pool, ds.ds_obj)
                .or_else(|| dsl.find(&tmp).ok().and_then(|t| crate::sendrecv::resume_token(pool, t.ds_obj)));
            text(token.unwrap_or_else(|| "-".into()), "-")
        }
        "receive_resume_token" => text("-", "-"),
        "mountpoint" => with_altroot(pool, inherited(pool, dsl, ds, prop)?),
        _ => inherited(pool, dsl, ds, prop)?,
    })
}

/// A snapshot of a volume.
fn is_vol_snapshot(dsl: &DslPool, ds: &Dataset) -> bool {
    ds.kind == DatasetKind::Snapshot
        && dsl.open_objset(ds).is_ok_and(|os| os.os_type() == ondisk::objset::DMU_OST_ZVOL)
}

/// A mountpoint path under the pool's altroot, if it has one (`zpool import -R`): shown
/// and mounted there, stored without it.
fn with_altroot(pool: &Pool, mut v: PropVal) -> PropVal {
    if let Some(root) = &pool.opts.altroot {
        if v.exact.starts_with('/') {
            let p = format!("{}{}", root.display().to_string().trim_end_matches('/'), v.exact);
            v.exact = p.clone();
            v.human = p;
        }
    }
    v
}

/// What `zfs get all` lists, in OpenZFS's order (zfs_prop.c's registration order, as
/// `zfs get all` prints it), for the properties rzfs knows; those that do not apply to a
/// dataset's type are left out for it.
const GET_ALL: &[&str] = &[
    "type",
    "creation",
    "used",
    "available",
    "referenced",
    "compressratio",
    "mounted",
    "quota",
    "reservation",
    "recordsize",
    "mountpoint",
    "sharenfs",
    "volsize",
    "volblocksize",
    "checksum",
    "compression",
    "atime",
    "devices",
    "exec",
    "setuid",
    "readonly",
    "zoned",
    "snapdir",
    "aclmode",
    "aclinherit",
    "createtxg",
    "canmount",
    "xattr",
    "copies",
    "version",
    "utf8only",
    "normalization",
    "casesensitivity",
    "sharesmb",
    "refquota",
    "refreservation",
    "guid",
    "primarycache",
    "secondarycache",
    "usedbysnapshots",
    "usedbydataset",
    "usedbychildren",
    "usedbyrefreservation",
    "logbias",
    "dedup",
    "sync",
    "dnodesize",
    "refcompressratio",
    "written",
    "logicalused",
    "logicalreferenced",
    "volmode",
    "filesystem_limit",
    "snapshot_limit",
    "filesystem_count",
    "snapshot_count",
    "acltype",
    "relatime",
    "redundant_metadata",
    "overlay",
    "snapshots_changed",
];

/// The user properties that apply to `ds` (set on it or on an ancestor), by name.
fn user_props(dsl: &DslPool, ds: &Dataset) -> Result<Vec<String>, String> {
    let err = |e: dsl::DslError| e.to_string();
    let mut names = std::collections::BTreeSet::new();
    if ds.kind == DatasetKind::Snapshot {
        names.extend(dsl::props::names_set(
            &dsl::props::read_props_zap_all(dsl.mos(), ds.ds.props_obj).map_err(err)?,
        ));
    }
    let mut dir = ds.dir.clone();
    for _ in 0..256 {
        names.extend(dsl::props::names_set(&dsl.all_props(&dir).map_err(err)?));
        if dir.parent_obj == 0 {
            break;
        }
        dir = dsl.dir_phys(dir.parent_obj).map_err(err)?;
    }
    Ok(names.into_iter().filter(|n| dsl::props::is_user_prop(n)).collect())
}

/// The value `zfs receive` stored for `prop` on `ds` (`zfs get -o received`), `-` if none.
fn received_value(dsl: &DslPool, ds: &Dataset, prop: &str) -> Result<String, String> {
    let prop = dsl::props::canonical(prop);
    let all = if ds.kind == DatasetKind::Snapshot {
        dsl::props::read_props_zap_all(dsl.mos(), ds.ds.props_obj)
    } else {
        dsl.all_props(&ds.dir)
    }
    .map_err(|e| e.to_string())?;
    Ok(dsl::props::received(&all, prop)
        .map_or_else(|| "-".to_string(), |v| dsl::props::display_value(prop, &v)))
}

/// Does a value's source pass `zfs get -s`'s list?
fn source_wanted(source: &str, wanted: &[String]) -> Result<bool, String> {
    if wanted.is_empty() {
        return Ok(true);
    }
    let mut ok = false;
    for w in wanted {
        ok |= match w.as_str() {
            "local" => source == "local",
            "default" => source == "default",
            "inherited" => source.starts_with("inherited"),
            "none" => source == "-",
            "received" => source == "received",
            "temporary" => false,
            other => return Err(format!("invalid source '{other}'")),
        };
    }
    Ok(ok)
}

#[allow(clippy::too_many_arguments)]
fn get(
    state: &State,
    props: &str,
    names: &[String],
    walk: &Walk,
    fields: &[String],
    sources: &[String],
    scripted: bool,
    parsable: bool,
) -> Result<Response, String> {
    let kinds = wanted_types(&walk.types, false)?;
    source_wanted("-", sources)?;
    let (entries, missing) = collect_some(state, names, walk.recursive, walk.depth, &kinds)?;
    let plist: Vec<String> = if props == "all" {
        GET_ALL.iter().map(|s| s.to_string()).collect()
    } else {
        props.split(',').map(str::to_string).collect()
    };
    // Names are checked before any dataset is looked at (`zprop_get_list`): an unknown one
    // fails even where no dataset would be listed.
    if let Some(bad) = plist.iter().find(|p| !known_prop(p)) {
        return Err(format!("invalid property '{bad}'"));
    }
    let fields: Vec<String> = if fields.is_empty() {
        ["name", "property", "value", "source"].iter().map(|s| s.to_string()).collect()
    } else {
        fields.to_vec()
    };
    let hdr: Vec<&str> = fields.iter().map(|s| s.as_str()).collect();
    let mut t = Table::new(&hdr, &vec![false; fields.len()]);
    for e in &entries {
        let dsl = e.pool.dsl();
        let mut plist = plist.clone();
        if props == "all" {
            plist.retain(|p| applies_to(p, &e.ds));
            // A file system's snapshot has no volume size (zfs_prop_get fails on it).
            if e.ds.kind == DatasetKind::Snapshot && !is_vol_snapshot(&dsl, &e.ds) {
                plist.retain(|p| p != "volsize");
            }
            plist.extend(user_props(&dsl, &e.ds)?);
        }
        for p in &plist {
            let v = prop_value(&e.pool, &dsl, &e.ds, p)?;
            if !source_wanted(&v.source, sources)? {
                continue;
            }
            // `get all` leaves out what libzfs cannot give (zfs_prop_get fails on an unset
            // snapshots_changed; naming it prints `-`).
            if props == "all" && p == "snapshots_changed" && v.exact == "-" {
                continue;
            }
            let value = if parsable { v.exact.clone() } else { v.human.clone() };
            let row = fields
                .iter()
                .map(|f| match f.as_str() {
                    "name" => Ok(e.ds.name.clone()),
                    "property" => Ok(p.clone()),
                    "value" => Ok(value.clone()),
                    "received" => received_value(&dsl, &e.ds, p),
                    "source" => Ok(v.source.clone()),
                    other => Err(format!("invalid field '{other}'")),
                })
                .collect::<Result<Vec<_>, String>>()?;
            t.rows.push(row);
        }
    }
    let out = if t.rows.is_empty() { String::new() } else { t.render(scripted) };
    Ok(partial(out, missing))
}

fn list_mounts(state: &State) -> Response {
    prune_mounts(state);
    let m = state.mounts.lock().unwrap_or_else(|p| p.into_inner());
    let mut out = String::new();
    for x in m.iter() {
        out.push_str(&format!("{}\t{}\n", x.dataset, x.dir.display()));
    }
    Response::ok(out)
}

/// `zfs create [-p]`: creates the file system (and with -p its missing parents), then mounts
/// each new one whose mountpoint is a path and canmount=on, as zfs does.
/// How `zfs create` goes about it.
#[derive(Clone, Copy)]
struct CreateHow {
    parents: bool,
    dry_run: bool,
    no_mount: bool,
    verbose: bool,
    parsable: bool,
}

/// `zfs create [-Pnpuv] [-o P=V]... [-V SIZE [-b BS] [-s]] NAME`: `-n` checks and
/// describes without creating, `-v`/`-P` describe what is (or would be) created as
/// zfs_do_create prints it, `-u` leaves a new file system unmounted.
fn create_cmd(
    state: &Arc<State>,
    name: &str,
    props: &[String],
    vol: Option<(&str, Option<&str>, bool)>,
    how: CreateHow,
) -> Result<Response, String> {
    if how.no_mount && vol.is_some() {
        return Err(format!("cannot create '{name}': -u applies to file systems only, not to volumes"));
    }
    // With -p an existing target is success, nothing printed (zfs_do_create).
    if how.parents && state.pool(pool_of(name)).is_ok_and(|p| p.dsl().find(name).is_ok()) {
        return Ok(Response::ok(String::new()));
    }
    let given: Vec<(String, String)> = props
        .iter()
        .filter_map(|p| p.split_once('='))
        .filter(|(k, _)| vol.is_none() || !["volsize", "volblocksize"].contains(k))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let describe = |shown: &[(String, String)]| {
        let mut out = String::new();
        let (p, n) = (how.parsable, how.dry_run);
        if how.parents {
            out.push_str(&match (p, n) {
                (true, _) => format!("create_ancestors\t{name}\n"),
                (false, true) => format!("would create ancestors of {name}\n"),
                (false, false) => format!("create ancestors of {name}\n"),
            });
        }
        out.push_str(&match (p, n) {
            (true, _) => format!("create\t{name}\n"),
            (false, true) => format!("would create {name}\n"),
            (false, false) => format!("create {name}\n"),
        });
        for (k, v) in given.iter().chain(shown) {
            out.push_str(&if p { format!("property\t{k}\t{v}\n") } else { format!("\t{k}={v}\n") });
        }
        out
    };
    if how.dry_run {
        crate::rwpool::check_create(state, name, how.parents)?;
        let shown = match vol {
            Some((size, bs, sparse)) => {
                crate::rwpool::create_volume(state, name, size, bs, sparse, props, true)?
            }
            None => {
                crate::rwpool::check_fs_props(props)?;
                Vec::new()
            }
        };
        return Ok(Response::ok(if how.verbose { describe(&shown) } else { String::new() }));
    }
    let (mut resp, shown) = match vol {
        Some((size, bs, sparse)) => create_volume(state, name, props, how.parents, size, bs, sparse)?,
        None => (create_as(state, name, props, how.parents, !how.no_mount)?, Vec::new()),
    };
    if how.verbose {
        resp.stdout = describe(&shown);
    }
    Ok(resp)
}

pub(crate) fn create(
    state: &Arc<State>,
    name: &str,
    props: &[String],
    parents: bool,
) -> Result<Response, String> {
    create_as(state, name, props, parents, true)
}

/// [`create`]; `mount`: mount the new file systems (as their properties say).
fn create_as(
    state: &Arc<State>,
    name: &str,
    props: &[String],
    parents: bool,
    mount: bool,
) -> Result<Response, String> {
    let mut todo = Vec::new();
    if parents {
        // Refused before any parent is made (libzfs `zfs_create_ancestors_props`).
        if pool::admin::nesting_depth(name) >= pool::admin::max_dataset_nesting() {
            return Err(format!("cannot create '{name}': maximum name nesting depth exceeded"));
        }
        let mut prefix = String::new();
        for part in name.split('/') {
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(part);
            let exists = state.pool(pool_of(&prefix)).ok().is_some_and(|p| p.dsl().find(&prefix).is_ok());
            if prefix != name && !exists && prefix.contains('/') {
                todo.push((prefix.clone(), Vec::new()));
            }
        }
    }
    todo.push((name.to_string(), props.to_vec()));
    let mut resp = Response::ok(String::new());
    for (fs, p) in todo {
        crate::rwpool::create_fs(state, &fs, &p)?;
        if mount {
            resp.stderr.push_str(&automount(state, &fs)?);
        }
    }
    Ok(resp)
}

/// `zfs create -V`: missing parents (with -p) are file systems, as in OpenZFS.
fn create_volume(
    state: &Arc<State>,
    name: &str,
    props: &[String],
    parents: bool,
    volsize: &str,
    blocksize: Option<&str>,
    sparse: bool,
) -> Result<(Response, Vec<(String, String)>), String> {
    let mut resp = Response::ok(String::new());
    if parents {
        if let Some((parent, _)) = name.rsplit_once('/') {
            let exists = state.pool(pool_of(parent)).ok().is_some_and(|p| p.dsl().find(parent).is_ok());
            if !exists && parent.contains('/') {
                resp = create(state, parent, &[], true)?;
            }
        }
    }
    let shown = crate::rwpool::create_volume(state, name, volsize, blocksize, sparse, props, false)?;
    resp.stderr.push_str(&crate::volumes::serve(state, name));
    Ok((resp, shown))
}

/// `zfs destroy [-rnv] NAME`: the datasets go deepest first, each file system after its
/// snapshots; mounted ones are unmounted first. Everything is destroyed in one txg.
/// The snapshots `zfs hold`/`release`/`holds` act on: each named one, with `recursive`
/// the same snapshot of every descendant that has it.
fn named_snapshots(
    state: &State,
    names: &[String],
    recursive: bool,
) -> Result<Vec<(Arc<Pool>, Dataset)>, String> {
    let mut out = Vec::new();
    for n in names {
        let Some((fs, snap)) = n.split_once('@') else {
            return Err(format!("'{n}' is not a snapshot"));
        };
        let pool =
            state.pool(pool_of(n)).map_err(|_| format!("cannot open '{n}': dataset does not exist"))?;
        let all = pool.dsl().list().map_err(|e| e.to_string())?;
        if !all.iter().any(|d| d.name == *n) {
            return Err(format!("cannot open '{n}': dataset does not exist"));
        }
        for d in snapshot_spec(&all, fs, snap, recursive)? {
            out.push((pool.clone(), d));
        }
    }
    Ok(out)
}

/// `zfs diff SNAPSHOT [SNAPSHOT|FILESYSTEM]` ([`crate::diff`]); paths are shown under the
/// file system's mount (or mountpoint property), as OpenZFS shows them.
fn diff(
    state: &Arc<State>,
    from: &str,
    to: Option<&str>,
    o: crate::diff::DiffOpts,
) -> Result<Response, String> {
    let Some((fs, _)) = from.split_once('@') else {
        return Err(format!("Badly formed snapshot name {from}"));
    };
    let to_name = match to {
        None => fs.to_string(),
        Some(t) if t.starts_with('@') => format!("{fs}{t}"),
        Some(t) => t.to_string(),
    };
    if to_name.split('@').next() != Some(fs) {
        return Err(format!("cannot diff '{from}' and '{to_name}': not the same file system"));
    }
    let pool =
        state.pool(pool_of(fs)).map_err(|_| format!("cannot open '{from}': dataset does not exist"))?;
    // A live file system: what it holds now, so its open txg is written first.
    if !to_name.contains('@') {
        if let Some(rw) = crate::rwpool::writer_of(state, pool.name()) {
            rw.sync()?;
        }
    }
    let pool =
        state.pool(pool_of(fs)).map_err(|_| format!("cannot open '{from}': dataset does not exist"))?;
    let dsl = pool.dsl();
    let a = dsl.find(from).map_err(|_| format!("cannot open '{from}': dataset does not exist"))?;
    let b = dsl.find(&to_name).map_err(|_| format!("cannot open '{to_name}': dataset does not exist"))?;
    if b.kind == DatasetKind::Snapshot && b.ds.creation_txg < a.ds.creation_txg {
        return Err(format!("cannot diff '{from}' and '{to_name}': '{from}' is not an earlier snapshot"));
    }
    let head = dsl.find(fs).map_err(|_| format!("cannot open '{fs}': dataset does not exist"))?;
    if head.kind != DatasetKind::Filesystem {
        return Err(format!("cannot diff '{from}': not a file system snapshot"));
    }
    prune_mounts(state);
    let mounted = state
        .mounts
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .find(|m| m.dataset == fs)
        .map(|m| m.dir.clone());
    let mnt = match mounted {
        Some(d) => d.to_string_lossy().into_owned(),
        None => {
            let v = prop_value(&pool, &dsl, &head, "mountpoint")?.exact;
            if !v.starts_with('/') {
                return Err(format!("cannot diff '{from}': Cannot diff an unmounted snapshot"));
            }
            v
        }
    };
    crate::diff::diff(&pool, &a, &b, &mnt, o).map(Response::ok)
}

/// The flags of `zfs rename`.
#[derive(Default)]
struct RenameHow {
    recursive: bool,
    force: bool,
    parents: bool,
    no_unmount: bool,
}

/// `zfs rename [-r] [-f] [-p] [-u] OLD NEW`. A file system's mounts at or below it are
/// unmounted and mounted again under the new names: where the mountpoint property had put
/// them, at the property's new value (an inherited mountpoint follows the name); elsewhere
/// (`zfs mount FS DIR`), at the same directory. With `-u` nothing is unmounted: each mount
/// keeps its directory and is known by its new name from then on (a mount serves its
/// dataset by object number, so the rename does not disturb it). Volumes are served again
/// under their new names. `-p` creates the new name's missing parents first.
fn rename(state: &Arc<State>, old: &str, new: &str, how: RenameHow) -> Result<Response, String> {
    let RenameHow { recursive, force, parents, no_unmount } = how;
    let pool =
        state.pool(pool_of(old)).map_err(|_| format!("cannot open '{old}': dataset does not exist"))?;
    let rw = crate::rwpool::writer_of(state, pool.name())
        .ok_or_else(|| format!("cannot rename '{old}': pool is read-only"))?;
    let dsl = pool.dsl();
    let all = dsl.list().map_err(|e| e.to_string())?;
    if !all.iter().any(|d| d.name == old) {
        return Err(format!("cannot open '{old}': dataset does not exist"));
    }
    if old == new {
        return Ok(Response::ok(String::new()));
    }
    if let Some((fs, snap)) = old.split_once('@') {
        if parents {
            return Err("-p cannot be used with snapshots".into());
        }
        // A short target names a snapshot of the same file system: `@new`, or just `new`
        // (libzfs `zfs_rename`).
        let new_full = if new.starts_with('@') {
            format!("{fs}{new}")
        } else if !new.contains('@') {
            format!("{fs}@{new}")
        } else {
            new.to_string()
        };
        let snaps: Vec<String> = if recursive {
            snapshot_spec(&all, fs, snap, true)?.into_iter().map(|d| d.name).collect()
        } else {
            vec![old.to_string()]
        };
        rw.spa.rename(old, &new_full, &snaps).map_err(|e| e.to_string())?;
        let new_snap = new_full.split_once('@').map_or("", |x| x.1);
        crate::rwpool::forget_snapshot_names(state, &snaps);
        let came: Vec<String> =
            snaps.iter().filter_map(|n| n.split_once('@')).map(|(f, _)| format!("{f}@{new_snap}")).collect();
        crate::rwpool::forget_snapshot_names(state, &came);
        return Ok(Response::ok(String::new()));
    }
    if recursive {
        return Err("-r can only be used on snapshots".into());
    }
    let mut resp = Response::ok(String::new());
    if parents {
        if let Some((parent, _)) = new.rsplit_once('/') {
            if parent.contains('/') && dsl.find(parent).is_err() && pool_of(parent) == pool.name() {
                resp = create(state, parent, &[], true)?;
            }
        }
    }
    let below = |n: &str| n == old || n.starts_with(&format!("{old}/"));
    let renamed = |n: &str| format!("{new}{}", &n[old.len()..]);
    let vols: Vec<String> = all
        .iter()
        .map(|d| d.name.clone())
        .filter(|n| below(n) && crate::volumes::device_known(state, n))
        .collect();
    if no_unmount {
        crate::volumes::unserve(state, &vols, force)
            .map_err(|v| format!("cannot rename '{v}': dataset is busy"))?;
        let r = rw.spa.rename(old, new, &[]).map_err(|e| e.to_string());
        for v in &vols {
            crate::volumes::serve(state, &if r.is_ok() { renamed(v) } else { v.clone() });
        }
        if r.is_ok() {
            for m in state.mounts.lock().unwrap_or_else(|p| p.into_inner()).iter_mut() {
                if below(&m.dataset) {
                    crate::daemon::track_mount(&m.dataset, false);
                    m.dataset = renamed(&m.dataset);
                    crate::daemon::track_mount(&m.dataset, true);
                }
            }
        }
        r?;
        return Ok(resp);
    }
    // Mounts at or below, deepest first, with where the property put each.
    prune_mounts(state);
    let mut mounted: Vec<(String, PathBuf, bool)> = Vec::new();
    for m in state.mounts.lock().unwrap_or_else(|p| p.into_inner()).iter().filter(|m| below(&m.dataset)) {
        let ds = all.iter().find(|d| d.name == m.dataset);
        let by_prop = ds
            .and_then(|d| prop_value(&pool, &dsl, d, "mountpoint").ok())
            .is_some_and(|v| Path::new(&v.exact) == m.dir);
        mounted.push((m.dataset.clone(), m.dir.clone(), by_prop));
    }
    mounted.sort_by_key(|(n, _, _)| std::cmp::Reverse(n.matches('/').count()));
    crate::volumes::unserve(state, &vols, force)
        .map_err(|v| format!("cannot rename '{v}': dataset is busy"))?;
    for (n, _, _) in &mounted {
        unmount(state, n, Path::new("/"), force)?;
    }
    let r = rw.spa.rename(old, new, &[]).map_err(|e| e.to_string());
    // Whatever happened, mount and serve what was there (under the names they now have).
    let names = |n: &str| if r.is_ok() { renamed(n) } else { n.to_string() };
    let mut warnings = String::new();
    for (n, dir, by_prop) in mounted.iter().rev() {
        let res = if *by_prop {
            automount(state, &names(n))
        } else {
            mount(state, &names(n), Some(dir.clone())).map(|r| r.stderr)
        };
        match res {
            Ok(w) => warnings.push_str(&w),
            Err(e) => warnings.push_str(&format!(
                "{e}
"
            )),
        }
    }
    for v in &vols {
        crate::volumes::serve(state, &names(v));
    }
    r?;
    resp.stderr.push_str(&warnings);
    Ok(resp)
}

/// `zfs hold` and `zfs release`: `act` runs once per pool with its snapshots' names.
fn hold_release(
    state: &State,
    names: &[String],
    recursive: bool,
    act: impl Fn(&crate::rwpool::RwPool, &[String]) -> Result<(), String>,
) -> Result<Response, String> {
    let snaps = named_snapshots(state, names, recursive)?;
    let mut by_pool: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for (p, d) in snaps {
        by_pool.entry(p.name().to_string()).or_default().push(d.name);
    }
    for (pool, names) in by_pool {
        let rw =
            crate::rwpool::writer_of(state, &pool).ok_or_else(|| format!("pool '{pool}' is read-only"))?;
        act(&rw, &names)?;
    }
    Ok(Response::ok(String::new()))
}

/// `zfs holds [-rHp] SNAPSHOT...`: NAME, TAG, TIMESTAMP of every hold.
fn holds(
    state: &State,
    names: &[String],
    recursive: bool,
    scripted: bool,
    parsable: bool,
) -> Result<Response, String> {
    let mut t = Table::new(&["name", "tag", "timestamp"], &[false, false, false]);
    for (pool, d) in named_snapshots(state, names, recursive)? {
        let dsl = pool.dsl();
        if d.ds.userrefs_obj == 0 {
            continue;
        }
        let mut tags: Vec<(String, u64)> = zap::list(dsl.mos(), d.ds.userrefs_obj)
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|e| (e.name_string(), e.first_u64().unwrap_or(0)))
            .collect();
        tags.sort();
        for (tag, when) in tags {
            let ts = if parsable { when.to_string() } else { crate::format::ctime(when) };
            t.rows.push(vec![d.name.clone(), tag, ts]);
        }
    }
    Ok(Response::ok(t.render(scripted)))
}

/// The flags of `zfs destroy`.
#[derive(Default)]
struct DestroyHow {
    recursive: bool,
    /// `-R`: clones of the snapshots destroyed go too (with their dependents).
    dependents: bool,
    dry_run: bool,
    verbose: bool,
    parsable: bool,
    force: bool,
    defer: bool,
}

/// The dependency graph `zfs destroy` works on: which snapshots a head has, which child
/// file systems, and which clones each snapshot has (heads whose origin it is).
struct Dependents<'a> {
    all: &'a [Dataset],
}

impl<'a> Dependents<'a> {
    fn by_name(&self, name: &str) -> Option<&'a Dataset> {
        self.all.iter().find(|d| d.name == name)
    }

    /// What must be destroyed before `d`: a head's snapshots and child file systems; a
    /// snapshot's clones.
    fn before(&self, d: &Dataset) -> Vec<&'a Dataset> {
        match d.kind {
            DatasetKind::Snapshot => self
                .all
                .iter()
                .filter(|c| {
                    c.kind != DatasetKind::Snapshot && c.dir.origin_obj == d.ds_obj && c.ds_obj != d.ds_obj
                })
                .collect(),
            DatasetKind::Bookmark => Vec::new(),
            _ => {
                let snap = format!("{}@", d.name);
                let child = format!("{}/", d.name);
                let mut v: Vec<&Dataset> = self
                    .all
                    .iter()
                    .filter(|c| {
                        c.kind != DatasetKind::Bookmark
                            && (c.name.starts_with(&snap)
                                || (c.name.starts_with(&child)
                                    && c.kind != DatasetKind::Snapshot
                                    && !c.name[child.len()..].contains('/')))
                    })
                    .collect();
                v.sort_by_key(|c| (c.kind != DatasetKind::Snapshot, c.ds.creation_txg, c.name.clone()));
                v
            }
        }
    }

    /// `roots` and everything that depends on them (`zfs_iter_dependents`), in an order in
    /// which each can be destroyed: dependents first. `follow_clones`: clones of
    /// snapshots count as dependents (`-R`); otherwise they are left out.
    fn order(&self, roots: &[&'a Dataset], follow_clones: bool) -> Vec<&'a Dataset> {
        fn visit<'a>(
            g: &Dependents<'a>,
            d: &'a Dataset,
            follow: bool,
            seen: &mut std::collections::HashSet<u64>,
            out: &mut Vec<&'a Dataset>,
        ) {
            if !seen.insert(d.ds_obj) {
                return;
            }
            if d.kind != DatasetKind::Snapshot || follow {
                for b in g.before(d) {
                    visit(g, b, follow, seen, out);
                }
            }
            out.push(d);
        }
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for r in roots {
            visit(self, r, follow_clones, &mut seen, &mut out);
        }
        out
    }

    /// Clones (with their dependents) of the snapshots in `set` that are not in `set`.
    fn outside_clones(&self, set: &[&'a Dataset]) -> Vec<&'a Dataset> {
        let inside: std::collections::HashSet<u64> = set.iter().map(|d| d.ds_obj).collect();
        let full = self.order(set, true);
        full.into_iter().filter(|d| !inside.contains(&d.ds_obj)).collect()
    }
}

/// The snapshots `FS@SPEC` names: SPEC is a comma-separated list of snapshot names and
/// ranges `a%b` (either end may be left out: from the oldest, to the newest), in creation
/// order; with `recursive`, the same SPEC in every descendant file system and volume too
/// (where a name is missing, it is skipped). OpenZFS `zfs destroy` snapshot specs.
fn snapshot_spec(all: &[Dataset], fs: &str, spec: &str, recursive: bool) -> Result<Vec<Dataset>, String> {
    let below = format!("{fs}/");
    let bases: Vec<&Dataset> = all
        .iter()
        .filter(|d| d.kind != DatasetKind::Snapshot)
        .filter(|d| d.name == fs || (recursive && d.name.starts_with(&below)))
        .collect();
    if bases.is_empty() {
        return Err(format!("cannot open '{fs}': dataset does not exist"));
    }
    let mut out: Vec<Dataset> = Vec::new();
    for b in bases {
        let prefix = format!("{}@", b.name);
        let mut snaps: Vec<&Dataset> = all.iter().filter(|d| d.name.starts_with(&prefix)).collect();
        snaps.sort_by_key(|d| d.ds.creation_txg);
        let short = |d: &Dataset| d.name[prefix.len()..].to_string();
        let pos = |n: &str| snaps.iter().position(|d| short(d) == n);
        for item in spec.split(',').filter(|i| !i.is_empty()) {
            let picked: Vec<&Dataset> = match item.split_once('%') {
                Some((a, z)) => {
                    let from = if a.is_empty() { Some(0) } else { pos(a) };
                    let to = if z.is_empty() { snaps.len().checked_sub(1) } else { pos(z) };
                    match (from, to) {
                        (Some(f), Some(t)) if f <= t => snaps[f..=t].to_vec(),
                        _ => Vec::new(),
                    }
                }
                None => pos(item).map(|i| vec![snaps[i]]).unwrap_or_default(),
            };
            for d in picked {
                if !out.iter().any(|x| x.name == d.name) {
                    out.push(d.clone());
                }
            }
        }
    }
    if out.is_empty() {
        return Err("could not find any snapshots to destroy; check snapshot names.".into());
    }
    Ok(out)
}

fn destroy(state: &Arc<State>, name: &str, how: &DestroyHow) -> Result<Response, String> {
    let DestroyHow { recursive, dependents, dry_run, verbose, parsable, force, defer } = *how;
    let pool =
        state.pool(pool_of(name)).map_err(|_| format!("cannot open '{name}': dataset does not exist"))?;
    let dsl = pool.dsl();
    if name.contains('#') {
        if dry_run {
            return Ok(Response::ok(String::new()));
        }
        let rw = crate::rwpool::writer_of(state, name)
            .ok_or_else(|| format!("cannot destroy '{name}': pool is read-only"))?;
        rw.spa.destroy_bookmark(name).map_err(|e| e.to_string())?;
        return Ok(Response::ok(String::new()));
    }
    let is_root = !name.contains('/') && !name.contains('@');
    let all = dsl.list().map_err(|e| e.to_string())?;
    let g = Dependents { all: &all };
    let listing = |v: &[&Dataset]| v.iter().map(|d| d.name.as_str()).collect::<Vec<_>>().join("\n");
    let order: Vec<&Dataset> = if let Some((fs, spec)) = name.split_once('@') {
        let snaps =
            snapshot_spec(&all, fs, spec, recursive).map_err(|e| format!("cannot destroy '{name}': {e}"))?;
        let snaps: Vec<&Dataset> = snaps.iter().filter_map(|s| g.by_name(&s.name)).collect();
        if !dependents && !defer {
            // Each snapshot's clones must go first (`-R`), as zfs checks before anything.
            for s in &snaps {
                let clones = g.outside_clones(&[s]);
                if !clones.is_empty() {
                    return Err(format!(
                        "cannot destroy '{}': snapshot has dependent clones\nuse '-R' to destroy the following datasets:\n{}",
                        s.name,
                        listing(&clones)
                    ));
                }
            }
        }
        if dependents {
            g.order(&snaps, true)
        } else {
            snaps
        }
    } else {
        if defer {
            return Err(format!("cannot destroy '{name}': -d applies to snapshots only"));
        }
        let target =
            g.by_name(name).ok_or_else(|| format!("cannot open '{name}': dataset does not exist"))?;
        if is_root && !recursive {
            return Err(format!(
                "cannot destroy '{name}': operation does not apply to pools\n\
                 use 'rzfs destroy -r {name}' to destroy all datasets in the pool\n\
                 use 'rzpool destroy {name}' to destroy the pool itself"
            ));
        }
        let below = g.order(&[target], false);
        let others: Vec<&Dataset> = below.iter().copied().filter(|d| d.name != name).collect();
        if !recursive && !others.is_empty() {
            return Err(format!(
                "cannot destroy '{name}': {} has children\nuse '-r' to destroy the following datasets:\n{}",
                target.kind.as_str(),
                listing(&others)
            ));
        }
        let clones = g.outside_clones(&below);
        if !dependents && !clones.is_empty() {
            return Err(format!(
                "cannot destroy '{name}': {} has dependent clones\nuse '-R' to destroy the following datasets:\n{}",
                target.kind.as_str(),
                listing(&clones)
            ));
        }
        // The pool's root file system itself stays (zfs destroy -r POOL empties it).
        g.order(&[target], true).into_iter().filter(|d| !(is_root && d.name == name)).collect()
    };
    let mut out = String::new();
    if verbose {
        for d in &order {
            out.push_str(&match (parsable, dry_run) {
                (true, _) => format!("destroy\t{}\n", d.name),
                (false, true) => format!("would destroy {}\n", d.name),
                (false, false) => format!("will destroy {}\n", d.name),
            });
        }
    }
    if dry_run {
        return Ok(Response::ok(out));
    }
    if crate::rwpool::writer_of(state, name).is_none() {
        return Err(format!("cannot destroy '{name}': pool is read-only"));
    }
    prune_mounts(state);
    // Each dataset is taken out of service in the order it goes (clones, children and
    // snapshots before what they depend on): its snapshot view idle, its volume device
    // withdrawn, its mount unmounted. A recursive destroy (-r, -R) is a best effort, as
    // libzfs's destroy_callback: a dataset that is busy stays, and so does everything that
    // cannot go while it does (its parents, the file system of a busy snapshot, the origin
    // of a clone that stays); the rest is destroyed and the command fails naming the busy
    // ones. A busy file system (a process's current directory or open file in it) is not
    // destroyed even with -f, as on Linux, where OpenZFS's forced unmount
    // (`umount2(MNT_FORCE)`) still fails with EBUSY (zfs_destroy_004_pos); -f still takes
    // volumes in use away.
    let best_effort = recursive || dependents;
    let mut failed: Vec<String> = Vec::new();
    let mut stays: Vec<&Dataset> = Vec::new();
    let mut vols: Vec<String> = Vec::new();
    let mut keep: Vec<&Dataset> = Vec::new();
    for d in &order {
        let n = &d.name;
        let needs = |y: &&Dataset| {
            y.name.strip_prefix(n.as_str()).is_some_and(|r| r.starts_with('/') || r.starts_with('@'))
                || (d.kind == DatasetKind::Snapshot
                    && y.kind != DatasetKind::Snapshot
                    && y.dir.origin_obj == d.ds_obj)
        };
        if stays.iter().any(needs) {
            stays.push(d);
            continue;
        }
        let r = if let Some((fs, snap)) = n.split_once('@') {
            snapshot_idle(state, fs, snap)
                .map_err(|()| format!("cannot destroy snapshot {n}: dataset is busy"))
        } else if crate::volumes::device_known(state, n) {
            let r = crate::volumes::unserve(state, std::slice::from_ref(n), force)
                .map_err(|v| format!("cannot destroy '{v}': dataset is busy"));
            if r.is_ok() {
                vols.push(n.clone());
            }
            r
        } else if state.mounts.lock().unwrap_or_else(|p| p.into_inner()).iter().any(|m| m.dataset == *n) {
            unmount(state, n, Path::new("/"), false).map(|_| ())
        } else {
            Ok(())
        };
        match r {
            Ok(()) => keep.push(d),
            Err(e) if best_effort => {
                failed.push(e);
                stays.push(d);
            }
            Err(e) => {
                for v in &vols {
                    crate::volumes::serve(state, v);
                }
                return Err(e);
            }
        }
    }
    let names: Vec<String> = keep.iter().map(|d| d.name.clone()).collect();
    // The mount points to remove once destroyed: those of file systems whose mountpoint is
    // the default or inherited (libzfs `remove_mountpoint`: an empty directory left behind
    // by a destroy would otherwise show in its parent; one set locally is the admin's).
    let mut rmdirs: Vec<PathBuf> = keep
        .iter()
        .filter(|d| d.kind == DatasetKind::Filesystem)
        .filter_map(|d| prop_value(&pool, &dsl, d, "mountpoint").ok())
        .filter(|v| v.source == "default" || v.source.starts_with("inherited"))
        .filter(|v| v.exact.starts_with('/') && v.exact != "/")
        .map(|v| PathBuf::from(v.exact))
        .collect();
    rmdirs.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    let objs: Vec<u64> = keep.iter().map(|d| d.ds_obj).collect();
    if !names.is_empty() {
        if let Err(e) = crate::rwpool::destroy(state, &names, &objs, defer) {
            // Nothing was destroyed: the volumes are served again.
            for v in &vols {
                crate::volumes::serve(state, v);
            }
            return Err(e);
        }
    }
    for dir in &rmdirs {
        // Deepest first, silently, as libzfs: not empty, gone, or mounted over all leave it.
        let _ = std::fs::remove_dir(dir);
    }
    if !failed.is_empty() {
        return Err(failed.join("\n"));
    }
    Ok(Response::ok(out))
}

/// Waits until snapshot `snap` of file system `fs` has no file or directory open under the
/// mount's `.zfs/snapshot` (a snapshot in use is busy, even for -f: on Linux OpenZFS
/// unmounts the snapshot's automount with MNT_FORCE and still gets EBUSY;
/// zfs_destroy_001_pos). The kernel tells of a close(2) after the fact (FUSE RELEASE is sent
/// in the background), so a handle just closed gets half a second to arrive.
fn snapshot_idle(state: &State, fs: &str, snap: &str) -> Result<(), ()> {
    let busy = || {
        let mounts = state.mounts.lock().unwrap_or_else(|p| p.into_inner());
        mounts.iter().any(|m| m.dataset == fs && m.session.snapshot_busy(snap))
    };
    for tries in 0..=10 {
        if !busy() {
            return Ok(());
        }
        if tries < 10 {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
    Err(())
}

/// `mkdir .zfs/snapshot/NAME` of a mounted file system: `zfs snapshot FS@NAME`.
pub(crate) fn snapdir_snapshot(state: &Arc<State>, name: &str) -> Result<(), String> {
    crate::rwpool::snapshot(state, &[name.to_string()], &[], false)
}

/// `rmdir .zfs/snapshot/NAME`: `zfs destroy FS@NAME` (refused while it has clones or is in use).
pub(crate) fn snapdir_destroy(state: &Arc<State>, name: &str) -> Result<(), String> {
    destroy(state, name, &DestroyHow::default()).map(|_| ())
}

/// `mv .zfs/snapshot/OLD .zfs/snapshot/NEW`: `zfs rename FS@OLD FS@NEW`.
pub(crate) fn snapdir_rename(state: &Arc<State>, old: &str, new: &str) -> Result<(), String> {
    rename(state, old, new, RenameHow::default()).map(|_| ())
}

/// The ZPL version rzfs creates and runs (`ZPL_VERSION`: 5, system attributes).
const ZPL_VERSION: u64 = 5;

/// `zfs upgrade`: with no argument, the file systems whose ZPL version is older or newer
/// than the current one; `-v` the versions; `-a` or names (with `-r` their descendants)
/// upgrade to `-V` (default: current), in zfs_do_upgrade's words (each through
/// [`crate::rwpool::upgrade_fs`]).
fn upgrade(
    state: &Arc<State>,
    recursive: bool,
    versions: bool,
    version: Option<&str>,
    all: bool,
    names: &[String],
) -> Result<Response, String> {
    let usage = || "usage:\n\tupgrade [-v]\n\tupgrade [-r [-V version]] <-a | filesystem ...>".to_string();
    if (!all && names.is_empty() && (recursive || version.is_some()))
        || (versions && (recursive || all || version.is_some() || !names.is_empty()))
        || (all && !names.is_empty())
    {
        return Err(usage());
    }
    if versions {
        return Ok(Response::ok(
            "The following filesystem versions are supported:\n\n\
             VER  DESCRIPTION\n\
             ---  --------------------------------------------------------\n \
             1   Initial ZFS filesystem version\n \
             2   Enhanced directory entries\n \
             3   Case insensitive and filesystem user identifier (FUID)\n \
             4   userquota, groupquota properties\n \
             5   System attributes\n\n\
             For more information on a particular version, including supported releases,\n\
             see the ZFS Administration Guide.\n\n"
                .to_string(),
        ));
    }
    let fs_version = |e: &Entry| zpl_prop(&e.pool.dsl(), &e.ds, "version").exact.parse::<u64>().ok();
    if !all && names.is_empty() {
        let every = collect_some(state, &[], true, None, &[DatasetKind::Filesystem])?.0;
        let mut out = format!("This system is currently running ZFS filesystem version {ZPL_VERSION}.\n\n");
        let mut found = false;
        for newer in [false, true] {
            let mut first = true;
            for e in &every {
                let Some(v) = fs_version(e) else { continue };
                if (!newer && v < ZPL_VERSION) || (newer && v > ZPL_VERSION) {
                    if first {
                        out.push_str(if newer {
                            "The following filesystems are formatted using a newer software version and\n\
                             cannot be accessed on the current system.\n\n\n"
                        } else {
                            "The following filesystems are out of date, and can be upgraded.  After being\n\
                             upgraded, these filesystems (and any 'zfs send' streams generated from\n\
                             subsequent snapshots) will no longer be accessible by older software versions.\n\n\n"
                        });
                        out.push_str("VER  FILESYSTEM\n---  ------------\n");
                        first = false;
                        found = true;
                    }
                    out.push_str(&format!("{v:2}   {}\n", e.ds.name));
                }
            }
        }
        if !found {
            out.push_str("All filesystems are formatted with the current version.\n");
        }
        return Ok(Response::ok(out));
    }
    let target = match version {
        None | Some("current") => ZPL_VERSION,
        Some(v) => match v.parse::<u64>() {
            Ok(n) if (1..=ZPL_VERSION).contains(&n) => n,
            _ => return Err(format!("invalid version {v}\n{}", usage())),
        },
    };
    let (entries, missing) = collect_some(state, names, recursive || all, None, &[DatasetKind::Filesystem])?;
    let (mut upgraded, mut same, mut failed) = (0u64, 0u64, missing.len() as u64);
    let mut out = String::new();
    let mut err = missing;
    for e in &entries {
        let Some(v) = fs_version(e) else { continue };
        // The pool version the target needs (zfs_spa_version_map), checked from version 3
        // on as upgrade_set_callback does.
        let needed = crate::rwpool::spa_version_for_zpl(target);
        if target >= 3 && e.pool.version() < needed {
            out.push_str(&format!(
                "{}: can not be upgraded; the pool version needs to first be upgraded\nto version {needed}\n\n",
                e.ds.name
            ));
            failed += 1;
        } else if v < target {
            match crate::rwpool::upgrade_fs(state, &e.ds.name, target) {
                Ok(()) => upgraded += 1,
                Err(m) => {
                    err.push(m);
                    failed += 1;
                }
            }
        } else if v > target {
            out.push_str(&format!("{}: can not be downgraded; it is already at version {v}\n", e.ds.name));
            failed += 1;
        } else {
            same += 1;
        }
    }
    out.push_str(&format!("{upgraded} filesystems upgraded\n"));
    if same > 0 {
        out.push_str(&format!("{same} filesystems already at this version\n"));
    }
    if failed > 0 {
        let mut r = Response::err(err.join("\n"));
        r.stdout = out;
        return Ok(r);
    }
    Ok(Response::ok(out))
}

/// `zfs promote CLONE`.
fn promote(state: &Arc<State>, name: &str) -> Result<(), String> {
    let pool =
        state.pool(pool_of(name)).map_err(|_| format!("cannot open '{name}': dataset does not exist"))?;
    let dsl = pool.dsl();
    if name.contains('@') {
        return Err(format!("cannot promote '{name}': snapshots can not be promoted"));
    }
    let ds = dsl.find(name).map_err(|_| format!("cannot open '{name}': dataset does not exist"))?;
    let origin = prop_value(&pool, &dsl, &ds, "origin")?.exact;
    if origin.is_empty() || origin == "-" {
        return Err(format!("cannot promote '{name}': not a cloned filesystem"));
    }
    let rw = crate::rwpool::writer_of(state, name)
        .ok_or_else(|| format!("cannot promote '{name}': pool is read-only"))?;
    // Snapshot objsets do not change (only their directory does), so no cached view of
    // one goes stale.
    rw.spa.promote(name, &origin).map_err(|e| e.to_string())
}

/// Runs `f` with file system or volume `name` out of service: unmounted (by force with
/// `force`) or its volume device withdrawn, and the ZPL's cached state of it dropped
/// afterwards, since `f` replaces its contents (rollback, receive). The dataset is mounted
/// or served again afterwards whether `f` succeeded or not.
pub(crate) fn offline_while<R>(
    state: &Arc<State>,
    name: &str,
    force: bool,
    f: impl FnOnce() -> Result<R, String>,
) -> Result<R, String> {
    if let Some((rw, ds, root)) = in_place_target(state, name) {
        return in_place(state, name, &rw, ds, root, f);
    }
    // File systems mounted inside this one go first: a parent taken out from under its
    // children's mounts would leave them unreachable.
    let was_mounted = unmount_tree(state, name, force)?;
    let vol = crate::volumes::device_known(state, name);
    if vol {
        crate::volumes::unserve(state, &[name.to_string()], force)
            .map_err(|v| format!("cannot change '{v}': dataset is busy"))?;
    }
    let r = f();
    if let Some(rw) = crate::rwpool::writer_of(state, name) {
        if let Ok(ds) = state.pool(pool_of(name)).and_then(|p| p.dsl().find(name).map_err(|e| e.to_string()))
        {
            rw.zpl.lock().unwrap_or_else(|p| p.into_inner()).remove(&ds.ds_obj);
        }
    }
    remount(state, &was_mounted);
    if vol {
        crate::volumes::serve(state, name);
    }
    r
}

/// A mounted file system whose contents a rollback or receive may replace without
/// unmounting it: (its pool's writer, dataset object, ZPL root object). Volumes and file
/// systems served otherwise than read-write FUSE mounts are taken offline instead.
fn in_place_target(state: &Arc<State>, name: &str) -> Option<(Arc<crate::rwpool::RwPool>, u64, u64)> {
    if crate::volumes::device_known(state, name) {
        return None;
    }
    prune_mounts(state);
    let rw = crate::rwpool::writer_of(state, name)?;
    let ds = state.pool(pool_of(name)).ok()?.dsl().find(name).ok()?.ds_obj;
    let root = rw.zpl_root(ds)?;
    let mounts = state.mounts.lock().unwrap_or_else(|p| p.into_inner());
    let mine: Vec<_> = mounts.iter().filter(|m| m.dataset == name).collect();
    (!mine.is_empty() && mine.iter().all(|m| m.session.can_revalidate())).then_some((rw, ds, root))
}

/// Runs `f`, which replaces the contents of mounted file system `name` (dataset `ds`),
/// with its mounts held instead of unmounted, as OpenZFS's `zfs_suspend_fs`/
/// `zfs_resume_fs`: requests wait while `f` runs, then go on against the new contents;
/// open files the new contents lack (or hold as other files) turn stale, and the
/// kernel's cached attributes and pages are dropped. Processes keep their current
/// directories and open files, so a busy file system can be rolled back or received
/// into. When the new contents have another root directory (a full stream received over
/// the file system) the mounts are taken down and up instead, by force.
fn in_place<R>(
    state: &Arc<State>,
    name: &str,
    rw: &crate::rwpool::RwPool,
    ds: u64,
    root: u64,
    f: impl FnOnce() -> Result<R, String>,
) -> Result<R, String> {
    rw.suspend(ds);
    let r = f();
    let reopened = rw.reopen_zpl(ds);
    if reopened.as_ref().is_ok_and(|&now| now == root) {
        {
            let mounts = state.mounts.lock().unwrap_or_else(|p| p.into_inner());
            for m in mounts.iter().filter(|m| m.dataset == name) {
                m.session.revalidate(&mut crate::rwpool::Contents { rw, ds });
            }
        }
        rw.resume(ds);
        let mounts = state.mounts.lock().unwrap_or_else(|p| p.into_inner());
        for m in mounts.iter().filter(|m| m.dataset == name) {
            m.session.invalidate_cache();
        }
        return r;
    }
    match reopened {
        Ok(now) => {
            eprintln!("rzfsd: '{name}' has a new root directory (object {now}, was {root}): remounting")
        }
        Err(e) => eprintln!("rzfsd: '{name}' changed and cannot be served as it is: {e}; remounting"),
    }
    // Held requests now fail (EIO: no ZPL state) until the mounts are gone.
    rw.zpl.lock().unwrap_or_else(|p| p.into_inner()).remove(&ds);
    rw.resume(ds);
    match unmount_tree(state, name, true) {
        Ok(was) => remount(state, &was),
        Err(e) => eprintln!("rzfsd: cannot remount '{name}' after its contents changed: {e}"),
    }
    r
}

/// Unmounts file system `top` and every file system mounted below it, deepest first
/// (by force with `force`); returns their names, parents first. When one cannot be
/// unmounted, those already unmounted are mounted again and nothing is changed.
pub(crate) fn unmount_tree(state: &Arc<State>, top: &str, force: bool) -> Result<Vec<String>, String> {
    prune_mounts(state);
    let below = format!("{top}/");
    let mut names: Vec<String> = state
        .mounts
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|m| m.dataset.clone())
        .filter(|n| n == top || n.starts_with(&below))
        .collect();
    names.sort();
    names.dedup();
    for (i, n) in names.iter().enumerate().rev() {
        if let Err(e) = unmount(state, n, Path::new("/"), force) {
            remount(state, &names[i + 1..]);
            return Err(e);
        }
    }
    Ok(names)
}

/// Mounts `names` again (parents first) where their properties say; failures are logged.
pub(crate) fn remount(state: &Arc<State>, names: &[String]) {
    for n in names {
        if let Err(e) = mount(state, n, None) {
            eprintln!("rzfsd: cannot mount '{n}' again: {e}");
        }
    }
}

/// `zfs rollback [-rRf] SNAPSHOT`.
fn rollback(
    state: &Arc<State>,
    snapshot: &str,
    recursive: bool,
    clones: bool,
    force: bool,
) -> Result<(), String> {
    let Some((fs, _)) = snapshot.split_once('@') else {
        return Err(format!("cannot rollback '{snapshot}': not a snapshot"));
    };
    let pool =
        state.pool(pool_of(fs)).map_err(|_| format!("cannot open '{snapshot}': dataset does not exist"))?;
    let dsl = pool.dsl();
    let snap = dsl.find(snapshot).map_err(|_| format!("cannot open '{snapshot}': dataset does not exist"))?;
    let all = dsl.list().map_err(|e| e.to_string())?;
    let prefix = format!("{fs}@");
    let mut later: Vec<&Dataset> = all
        .iter()
        .filter(|d| d.name.starts_with(&prefix) && d.ds.creation_txg > snap.ds.creation_txg)
        .collect();
    later.sort_by_key(|d| std::cmp::Reverse(d.ds.creation_txg));
    let g = Dependents { all: &all };
    let dependent: Vec<String> = g.outside_clones(&later).iter().map(|d| d.name.clone()).collect();
    let later: Vec<String> = later.into_iter().map(|d| d.name.clone()).collect();
    if !later.is_empty() && !recursive {
        return Err(format!(
            "cannot rollback to '{snapshot}': more recent snapshots or bookmarks exist\nuse '-r' to force deletion of the following snapshots and bookmarks:\n{}",
            later.join("\n")
        ));
    }
    if !dependent.is_empty() && !clones {
        return Err(format!(
            "cannot rollback to '{snapshot}': clones of previous snapshots exist\nuse '-R' to force deletion of the following clones and dependents:\n{}",
            dependent.join("\n")
        ));
    }
    // -R: the later snapshots' clones go first, each with what depends on it (libzfs's
    // rollback_destroy). One destroy may take others of the list with it.
    for c in &dependent {
        let exists = state.pool(pool_of(c)).is_ok_and(|p| p.dsl().find(c).is_ok());
        if exists {
            let how = DestroyHow {
                recursive: true,
                dependents: true,
                dry_run: false,
                verbose: false,
                parsable: false,
                force,
                defer: false,
            };
            destroy(state, c, &how).map_err(|e| format!("cannot rollback to '{snapshot}': {e}"))?;
        }
    }
    let rw = crate::rwpool::writer_of(state, fs)
        .ok_or_else(|| format!("cannot rollback '{fs}': pool is read-only"))?;
    offline_while(state, fs, force, || rw.spa.rollback(snapshot, &later).map_err(|e| e.to_string()))
}

/// `zfs clone [-p] [-o prop=value]... SNAPSHOT FILESYSTEM`, mounted like a new file system.
fn clone(
    state: &Arc<State>,
    snapshot: &str,
    name: &str,
    props: &[String],
    parents: bool,
) -> Result<Response, String> {
    // With -p an existing target is success, as zfs_do_clone (and create -p) has it.
    if parents && state.pool(pool_of(name)).is_ok_and(|p| p.dsl().find(name).is_ok()) {
        return Ok(Response::ok(String::new()));
    }
    if let Some((parent, _)) = name.rsplit_once('/').filter(|_| parents) {
        let missing = state.pool(pool_of(parent)).ok().is_none_or(|p| p.dsl().find(parent).is_err());
        if parent.contains('/') && missing {
            create(state, parent, &[], true)?;
        }
    }
    crate::rwpool::clone_fs(state, snapshot, name, props)?;
    let mut resp = Response::ok(String::new());
    resp.stderr = automount(state, name)?;
    resp.stderr.push_str(&crate::volumes::serve(state, name));
    Ok(resp)
}

/// Mounts a new file system when its properties say so; returns the mount's warnings.
/// Mounts `name` where its mountpoint property says, if it is a path and canmount=on (as
/// `zfs create` and `zpool create` do); returns the mount's warnings.
pub(crate) fn automount(state: &Arc<State>, name: &str) -> Result<String, String> {
    let pool = state.pool(pool_of(name))?;
    let dsl = pool.dsl();
    let ds = dsl.find(name).map_err(|e| e.to_string())?;
    let mp = prop_value(&pool, &dsl, &ds, "mountpoint")?.exact;
    let canmount = prop_value(&pool, &dsl, &ds, "canmount")?.exact;
    if mp.starts_with('/') && canmount == "on" && !zoned(&pool, &dsl, &ds) {
        return Ok(mount(state, name, None)?.stderr);
    }
    Ok(String::new())
}

/// `zoned=on`: the file system belongs to a container (a user namespace given it with
/// `zfs zone`), and the host does not mount it (libzfs `zfs_is_mountable`).
fn zoned(pool: &Pool, dsl: &DslPool, ds: &Dataset) -> bool {
    prop_value(pool, dsl, ds, "zoned").is_ok_and(|v| v.exact == "on")
}

pub(crate) fn mount(state: &Arc<State>, name: &str, dir: Option<PathBuf>) -> Result<Response, String> {
    mount_o(state, name, dir, "", false)
}

/// `zfs mount [-O] [-o OPTS]`: options from the dataset's properties and `opts` (see
/// `mountopts`); `overlay` (-O) mounts over a directory that is not empty whatever the
/// `overlay` property says.
fn mount_o(
    state: &Arc<State>,
    name: &str,
    dir: Option<PathBuf>,
    opts: &str,
    overlay: bool,
) -> Result<Response, String> {
    prune_mounts(state);
    let pool =
        state.pool(pool_of(name)).map_err(|_| format!("cannot open '{name}': dataset does not exist"))?;
    let dsl = pool.dsl();
    let ds = dsl.find(name).map_err(|_| format!("cannot open '{name}': dataset does not exist"))?;
    if ds.kind == DatasetKind::Volume {
        return Err(format!("cannot mount '{name}': not a filesystem"));
    }
    if ds.ds.flags & ondisk::dsl::DS_FLAG_INCONSISTENT != 0 {
        return Err(format!(
            "cannot mount '{name}': the dataset is inconsistent (a receive into it has not finished)"
        ));
    }
    if zoned(&pool, &dsl, &ds) {
        return Err(format!("cannot mount '{name}': dataset is exported to a local zone"));
    }
    let dir = match dir {
        Some(d) => d,
        None => {
            // An explicit `zfs mount NAME` of a canmount=off file system (noauto mounts).
            if prop_value(&pool, &dsl, &ds, "canmount")?.exact == "off" {
                return Err(format!("cannot mount '{name}': 'canmount' property is set to 'off'"));
            }
            let mp = prop_value(&pool, &dsl, &ds, "mountpoint")?.exact;
            if mp == "none" || mp == "legacy" || mp == "-" {
                return Err(format!(
                    "cannot mount '{name}': no mountpoint set (mountpoint={mp}); give a directory"
                ));
            }
            PathBuf::from(mp)
        }
    };
    // `-o remount,...` of a mounted file system: unmounted (refused if busy) and mounted
    // again with the new options.
    let mounted_here =
        || state.mounts.lock().unwrap_or_else(|p| p.into_inner()).iter().any(|m| m.dataset == name);
    if opts.split(',').any(|o| o == "remount") && mounted_here() {
        unmount(state, name, Path::new("/"), false).map_err(|e| format!("cannot remount '{name}': {e}"))?;
    }
    if state.mounts.lock().unwrap_or_else(|p| p.into_inner()).iter().any(|m| m.dataset == name) {
        return Err(format!("cannot mount '{name}': filesystem already mounted"));
    }
    // overlay=off refuses a directory that is not empty, with libzfs's message naming the
    // directory (zfs_mount_at); another file system mounted there counts as content. With
    // overlay=on (the default) the mount covers what is there, as Linux stacks mounts.
    if !overlay
        && !opts.split(',').any(|o| o == "remount")
        && prop_value(&pool, &dsl, &ds, "overlay")?.exact == "off"
        && std::fs::read_dir(&dir).is_ok_and(|mut d| d.next().is_some())
    {
        return Err(format!("cannot mount '{}': directory is not empty", dir.display()));
    }
    let (mo, temps, warnings) = crate::mountopts::for_dataset(&pool, &dsl, &ds, name, opts)?;
    std::fs::create_dir_all(&dir)
        .map_err(|e| format!("cannot mount '{name}': cannot create {}: {e}", dir.display()))?;
    let session = match crate::rwpool::writer_of(state, name).filter(|_| !name.contains('@')) {
        Some(rw) => {
            let backend = Arc::new(crate::rwpool::DsBackend::open(state, rw, name)?);
            let snaps = crate::zplopen::live_snapshots(state, &pool, &ds);
            rzfs_fuse::rw::mount_rw_snapshots(backend, &dir, name, &mo, snaps)
                .map_err(|e| format!("cannot mount '{name}' on {}: {e}", dir.display()))?
        }
        None => {
            let fs =
                crate::zplopen::open_zpl(&pool, &ds).map_err(|e| format!("cannot mount '{name}': {e}"))?;
            rzfs_fuse::mount_with(fs, &dir, name, &mo)
                .map_err(|e| format!("cannot mount '{name}' on {}: {e}", dir.display()))?
        }
    };
    state.mounts.lock().unwrap_or_else(|p| p.into_inner()).push(Mount {
        dataset: name.to_string(),
        dir,
        session,
    });
    crate::daemon::set_mount_temps(name, temps);
    let mut resp = Response::ok(String::new());
    for w in warnings {
        eprintln!("rzfsd: {w}");
        resp.stderr.push_str(&w);
        resp.stderr.push('\n');
    }
    Ok(resp)
}

/// Changes `prop` of `names` through `apply`, unmounting and mounting as zfs does when the
/// property decides where or whether a file system mounts (libzfs's changelist):
/// both unmount the mounted file systems of the subtree first (children are mounted on
/// their parent) — a busy one makes the change fail, nothing changed. Then `mountpoint`
/// mounts each one that was mounted or has canmount=on at its new place; `canmount` mounts
/// again those that were mounted and still may be.
/// `names` and, after each, its descendant file systems and volumes (`zfs inherit -r`).
fn with_descendants(state: &State, names: &[String]) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for n in names {
        let pool = state.pool(pool_of(n))?;
        let all = pool.dsl().list().map_err(|e| e.to_string())?;
        if !all.iter().any(|d| d.name == *n) {
            return Err(format!("cannot open '{n}': dataset does not exist"));
        }
        out.push(n.clone());
        let below = format!("{n}/");
        out.extend(
            all.iter()
                .filter(|d| {
                    d.name.starts_with(&below)
                        && matches!(d.kind, DatasetKind::Filesystem | DatasetKind::Volume)
                })
                .map(|d| d.name.clone()),
        );
    }
    Ok(out)
}

/// After `exec`, `setuid` or `devices` changed on `names`: the mounts at and below them
/// get the flags the properties now give (a mount's temporary options still win), in place
/// as OpenZFS remounts them. Returns warnings for mounts whose flags could not change
/// (they change at the next mount).
fn refresh_mount_flags(state: &Arc<State>, names: &[String]) -> Vec<String> {
    prune_mounts(state);
    let mounted: Vec<(String, PathBuf)> = state
        .mounts
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter(|m| in_subtrees(names, &m.dataset))
        .map(|m| (m.dataset.clone(), m.dir.clone()))
        .collect();
    let root = nix::unistd::geteuid().is_root();
    let mut warnings = Vec::new();
    for (name, dir) in mounted {
        let r = (|| -> Result<(), String> {
            let pool = state.pool(pool_of(&name))?;
            let dsl = pool.dsl();
            let ds = dsl.find(&name).map_err(|e| e.to_string())?;
            let (mut mo, _, _) = crate::mountopts::for_dataset(&pool, &dsl, &ds, &name, "")?;
            for (p, v) in [("exec", &mut mo.exec), ("setuid", &mut mo.setuid), ("devices", &mut mo.devices)] {
                if let Some(t) = crate::daemon::mount_temp(&name, p) {
                    *v = t == "on";
                }
            }
            rzfs_fuse::set_mount_flags(&dir, &mo, root)
        })();
        if let Err(e) = r {
            warnings.push(format!("'{name}' keeps its mount flags until it is mounted again: {e}"));
        }
    }
    warnings
}

/// Is `dataset` one of `names` or below one of them?
fn in_subtrees(names: &[String], dataset: &str) -> bool {
    names.iter().any(|n| dataset == n || dataset.starts_with(&format!("{n}/")))
}

/// A successful response whose stderr carries `warnings`, one per line.
fn with_warnings(warnings: Vec<String>) -> Response {
    let mut resp = Response::ok(String::new());
    for w in warnings {
        resp.stderr.push_str(&w);
        resp.stderr.push('\n');
    }
    resp
}

/// The mounted file systems among `names` and their descendants, with their `acltype` now.
fn mounted_acltypes(state: &Arc<State>, names: &[String]) -> Vec<(String, String)> {
    prune_mounts(state);
    let mounted: Vec<String> = state
        .mounts
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter(|m| in_subtrees(names, &m.dataset))
        .map(|m| m.dataset.clone())
        .collect();
    mounted.into_iter().filter_map(|n| acltype_now(state, &n).map(|a| (n, a))).collect()
}

fn acltype_now(state: &State, name: &str) -> Option<String> {
    let pool = state.pool(pool_of(name)).ok()?;
    let dsl = pool.dsl();
    let ds = dsl.find(name).ok()?;
    prop_value(&pool, &dsl, &ds, "acltype").ok().map(|v| v.exact)
}

/// A mount's ACL handling is fixed when FUSE starts (POSIX ACLs are negotiated at INIT), so
/// a file system whose `acltype` changed is mounted again, with what is mounted below it, as
/// OpenZFS applies the property at once. One that is busy, or has temporary mount options
/// (a new mount would lose them), keeps its old behaviour until it is mounted again.
fn remount_for_acltype(state: &Arc<State>, before: Vec<(String, String)>) -> Vec<String> {
    let mut warnings = Vec::new();
    let mut done: Vec<String> = Vec::new();
    let mut changed: Vec<String> = before
        .into_iter()
        .filter(|(n, a)| acltype_now(state, n).is_some_and(|b| b != *a))
        .map(|(n, _)| n)
        .collect();
    changed.sort_by_key(|n| n.matches('/').count());
    for name in changed {
        if done.iter().any(|d| name.starts_with(&format!("{d}/"))) {
            continue;
        }
        let keep = |why: &str| format!("'{name}' keeps its ACL behaviour until it is mounted again: {why}");
        if crate::daemon::has_mount_temps(&name) {
            warnings.push(keep("it has temporary mount options"));
            continue;
        }
        let mut below: Vec<(usize, String)> = state
            .mounts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|m| m.dataset == name || m.dataset.starts_with(&format!("{name}/")))
            .map(|m| (m.dataset.matches('/').count(), m.dataset.clone()))
            .collect();
        below.sort();
        match unmount(state, &name, Path::new("/"), false) {
            Ok(_) => {
                remount(state, &below.into_iter().map(|(_, n)| n).collect::<Vec<_>>());
                done.push(name);
            }
            Err(e) => {
                // The ones below that were taken down before it refused are mounted again.
                let still: Vec<String> = state
                    .mounts
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .iter()
                    .map(|m| m.dataset.clone())
                    .collect();
                remount(
                    state,
                    &below.into_iter().map(|(_, n)| n).filter(|n| !still.contains(n)).collect::<Vec<_>>(),
                );
                warnings.push(keep(&e));
                done.push(name);
            }
        }
    }
    warnings
}

pub(crate) fn with_remount(
    state: &Arc<State>,
    prop: &str,
    names: &[String],
    apply: impl FnOnce() -> Result<(), String>,
) -> Result<Response, String> {
    let mount_new = match prop {
        "mountpoint" => true,
        "canmount" => false,
        "acltype" => {
            let before = mounted_acltypes(state, names);
            apply()?;
            return Ok(with_warnings(remount_for_acltype(state, before)));
        }
        "snapdir" => {
            apply()?;
            for m in state.mounts.lock().unwrap_or_else(|p| p.into_inner()).iter() {
                if in_subtrees(names, &m.dataset) {
                    m.session.invalidate_root_attrs();
                }
            }
            return Ok(Response::ok(String::new()));
        }
        "exec" | "setuid" | "devices" => {
            apply()?;
            return Ok(with_warnings(refresh_mount_flags(state, names)));
        }
        _ => {
            apply()?;
            return Ok(Response::ok(String::new()));
        }
    };
    prune_mounts(state);
    let mut affected: Vec<String> = Vec::new();
    for name in names {
        let pool = state.pool(pool_of(name))?;
        for ds in pool.dsl().list().map_err(|e| e.to_string())? {
            let below = ds.name.starts_with(&format!("{name}/"));
            if ds.kind == DatasetKind::Filesystem && (ds.name == *name || below) {
                affected.push(ds.name);
            }
        }
    }
    let mut was: Vec<(PathBuf, String)> = state
        .mounts
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter(|m| affected.contains(&m.dataset))
        .map(|m| (m.dir.clone(), m.dataset.clone()))
        .collect();
    was.sort_by_key(|(d, _)| std::cmp::Reverse(d.components().count()));
    let mut down: Vec<(PathBuf, String)> = Vec::new();
    for (dir, name) in &was {
        if let Err(e) = unmount(state, name, Path::new("/"), false) {
            for (d, n) in down.iter().rev() {
                let _ = mount(state, n, Some(d.clone()));
            }
            return Err(e);
        }
        down.push((dir.clone(), name.clone()));
    }
    let r = apply();
    let mut resp = Response::ok(String::new());
    // Mounted parents first by where they mount (libzfs's changelist is sorted by mount
    // point): a file system moved to a shallower directory than its parent's is mounted
    // before what now goes below it.
    let depth = |n: &String| -> (usize, usize) {
        let mp = state.pool(pool_of(n)).ok().and_then(|p| {
            let dsl = p.dsl();
            let ds = dsl.find(n).ok()?;
            prop_value(&p, &dsl, &ds, "mountpoint").ok().map(|v| v.exact)
        });
        (mp.map_or(usize::MAX, |m| Path::new(&m).components().count()), n.matches('/').count())
    };
    let mut keyed: Vec<((usize, usize), String)> = affected.into_iter().map(|n| (depth(&n), n)).collect();
    keyed.sort();
    let affected: Vec<String> = keyed.into_iter().map(|(_, n)| n).collect();
    for name in affected {
        let mounted_before = was.iter().any(|(_, n)| *n == name);
        if !(mounted_before || (mount_new && r.is_ok())) {
            continue;
        }
        if r.is_err() {
            // Nothing changed: put the mount back where it was.
            if let Some((d, _)) = was.iter().find(|(_, n)| *n == name) {
                let _ = mount(state, &name, Some(d.clone()));
            }
            continue;
        }
        // A mount that fails here is reported but does not fail the change, which is made
        // (libzfs's changelist_postfix ignores zfs_mount's result).
        match automount(state, &name) {
            Ok(w) => resp.stderr.push_str(&w),
            Err(e) => resp.stderr.push_str(&format!("{e}\n")),
        }
    }
    r?;
    Ok(resp)
}

/// `zfs mount -a`: every file system of every pool whose properties say it mounts
/// (canmount=on, a path as mountpoint) and that is not mounted yet, parents before children.
/// Failures are reported and the rest still mounted (exit 1), as zfs does.
/// `zfs mount -a` for the daemon itself (after importing cached pools): the errors, if any.
pub(crate) fn mount_all_pub(state: &Arc<State>) -> Result<(), String> {
    let r = mount_all(state)?;
    if r.exit == 0 {
        Ok(())
    } else {
        Err(r.stderr)
    }
}

fn mount_all(state: &Arc<State>) -> Result<Response, String> {
    mount_all_in(state, None, &|_| true)
}

/// The mounts `zpool import` makes: [`mount_all`] for pool `pool` only.
pub(crate) fn mount_pool_filesystems(state: &Arc<State>, pool: &str) -> Result<Response, String> {
    mount_all_in(state, Some(pool), &|_| true)
}

/// `zfs mount -R FS...`: each file system and its descendants that mount (canmount=on, a
/// path as mountpoint) and are not mounted yet, parents first.
fn mount_recursive(state: &Arc<State>, roots: &[String]) -> Result<Response, String> {
    for r in roots {
        let pool =
            state.pool(pool_of(r)).map_err(|_| format!("cannot open '{r}': dataset does not exist"))?;
        pool.dsl().find(r).map_err(|_| format!("cannot open '{r}': dataset does not exist"))?;
    }
    let under = |n: &str| roots.iter().any(|r| n == r || n.starts_with(&format!("{r}/")));
    mount_all_in(state, None, &under)
}

fn mount_all_in(
    state: &Arc<State>,
    only: Option<&str>,
    keep: &dyn Fn(&str) -> bool,
) -> Result<Response, String> {
    prune_mounts(state);
    let mut todo: Vec<(usize, String)> = Vec::new();
    for pool in state.all_pools().into_iter().filter(|p| only.is_none_or(|o| p.name() == o)) {
        let dsl = pool.dsl();
        for ds in dsl.list().map_err(|e| e.to_string())? {
            // Inconsistent ones (a receive in progress or cut short) are not mounted.
            if ds.kind != DatasetKind::Filesystem
                || ds.ds.flags & ondisk::dsl::DS_FLAG_INCONSISTENT != 0
                || !keep(&ds.name)
            {
                continue;
            }
            let mp = prop_value(&pool, &dsl, &ds, "mountpoint")?.exact;
            let canmount = prop_value(&pool, &dsl, &ds, "canmount")?.exact;
            if mp.starts_with('/') && canmount == "on" && !zoned(&pool, &dsl, &ds) {
                todo.push((Path::new(&mp).components().count(), ds.name));
            }
        }
    }
    todo.sort();
    let mounted: Vec<String> =
        state.mounts.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|m| m.dataset.clone()).collect();
    let mut resp = Response::ok(String::new());
    for (_, name) in todo.into_iter().filter(|(_, n)| !mounted.contains(n)) {
        match mount(state, &name, None) {
            Ok(r) => resp.stderr.push_str(&r.stderr),
            Err(e) => {
                resp.stderr.push_str(&e);
                resp.stderr.push('\n');
                resp.exit = 1;
            }
        }
    }
    Ok(resp)
}

/// `zfs unmount -a [-f]`: every mount of every pool, deepest first; a busy one (and what it
/// is mounted in) stays mounted and makes the exit status 1, the rest are unmounted.
fn unmount_all(state: &State) -> Result<Response, String> {
    prune_mounts(state);
    let mut resp = Response::ok(String::new());
    let gone = {
        let mut m = state.mounts.lock().unwrap_or_else(|p| p.into_inner());
        // Every pool's mounts together, deepest first (and of mounts stacked at one directory
        // the top one first), as zfs unmount -a sorts the mount table: a file system of one
        // pool may be mounted inside one of another.
        let mut order: Vec<usize> = (0..m.len()).collect();
        order.sort_by_key(|&i| (std::cmp::Reverse(m[i].dir.components().count()), std::cmp::Reverse(i)));
        let mut done = Vec::new();
        for i in order {
            match m[i].session.detach(false) {
                Ok(()) => done.push(i),
                Err(e) => {
                    resp.stderr.push_str(&unmount_error(&m[i].dir, &e));
                    resp.stderr.push('\n');
                    resp.exit = 1;
                }
            }
        }
        done.sort_unstable();
        let mut gone = Vec::new();
        for i in done.into_iter().rev() {
            let x = m.remove(i);
            crate::daemon::track_mount(&x.dataset, false);
            gone.push(x);
        }
        gone
    };
    for mut x in gone {
        x.session.wait();
    }
    Ok(resp)
}

/// zfs's message for an unmount that failed.
fn unmount_error(dir: &Path, e: &std::io::Error) -> String {
    if e.raw_os_error() == Some(libc::EBUSY) {
        format!("cannot unmount '{}': pool or dataset is busy", dir.display())
    } else {
        format!("cannot unmount '{}': {e}", dir.display())
    }
}

/// Forgets the mounts that ended without us (`umount`, `fusermount -u` from outside): the
/// daemon's list follows the kernel's.
pub fn prune_mounts(state: &State) {
    let gone: Vec<Mount> = {
        let mut m = state.mounts.lock().unwrap_or_else(|p| p.into_inner());
        let (gone, keep) = m.drain(..).partition(|x: &Mount| x.session.is_finished());
        *m = keep;
        gone
    };
    for mut x in gone {
        crate::daemon::track_mount(&x.dataset, false);
        x.session.wait();
    }
}

/// `zfs unmount [-f] DATASET|DIR`: refused while busy unless `-f`, which aborts the mount
/// (processes using it get EIO). The file systems mounted below it go first, deepest
/// first, as libzfs's `zfs_unmountall` takes the mounted descendants down with it: the
/// kernel refuses to unmount a directory that has mounts below it, and a forced (lazy)
/// unmount would detach them with it while the daemon went on serving them unseen. When
/// one of them cannot be unmounted, the ones already unmounted stay so (as in libzfs) and
/// the target stays mounted.
pub(crate) fn unmount(state: &State, target: &str, cwd: &Path, force: bool) -> Result<Response, String> {
    prune_mounts(state);
    let tdir = abs(cwd, Path::new(target));
    // As zfs: an argument starting with '/' is a mount point, anything else a dataset name
    // (`./dir` names no dataset).
    let is_path = target.starts_with('/');
    let mut m = state.mounts.lock().unwrap_or_else(|p| p.into_inner());
    // The last one mounted at a path is the one on top (overlay mounts stack).
    let Some(i) = m.iter().rposition(|x| x.dataset == target || is_path && x.dir == tdir) else {
        return Err(format!("cannot unmount '{target}': not currently mounted"));
    };
    let top = m[i].dir.clone();
    // Mounts below its directory made before it are in the layer it covers, not on it; the
    // ones made after it there (at its directory too: stacked over it) go first, deepest
    // and latest first, since an unmount by path takes the top one.
    let mut order: Vec<usize> = (i + 1..m.len()).filter(|&j| m[j].dir.starts_with(&top)).collect();
    order.sort_by_key(|&j| (std::cmp::Reverse(m[j].dir.components().count()), std::cmp::Reverse(j)));
    order.push(i);
    let (gone, err) = detach_in_order(&mut m, &order, force);
    drop(m);
    for mut x in gone {
        x.session.wait();
    }
    match err {
        Some(e) => Err(e),
        None => Ok(Response::ok(String::new())),
    }
}

/// Detaches the mounts `order` names (indices into `m`), in that order, stopping at the
/// first that fails (its error in zfs's words). Those detached leave `m` and are returned,
/// for the caller to wait for once it has let go of the list.
fn detach_in_order(m: &mut Vec<Mount>, order: &[usize], force: bool) -> (Vec<Mount>, Option<String>) {
    let mut done = Vec::new();
    let mut err = None;
    for &i in order {
        match m[i].session.detach(force) {
            Ok(()) => done.push(i),
            Err(e) => {
                err = Some(unmount_error(&m[i].dir, &e));
                break;
            }
        }
    }
    done.sort_unstable();
    let mut out = Vec::new();
    for i in done.into_iter().rev() {
        let x = m.remove(i);
        crate::daemon::track_mount(&x.dataset, false);
        out.push(x);
    }
    (out, err)
}

/// Unmounts every dataset of a pool, deepest mount point first (before an export). Stops
/// at the first busy one unless `force` (then every mount is aborted); mounts already
/// unmounted stay so. The mounts taken down are returned, detached: the caller waits for
/// them ([`rzfs_fuse::MountHandle::wait`]) once nothing can block their last requests.
pub fn unmount_pool(state: &State, pool: &str, force: bool) -> Result<Vec<Mount>, String> {
    prune_mounts(state);
    let mut m = state.mounts.lock().unwrap_or_else(|p| p.into_inner());
    let mut mine: Vec<usize> = (0..m.len()).filter(|&i| pool_of(&m[i].dataset) == pool).collect();
    // Deepest first; of mounts stacked at one directory, the latest (the top one) first.
    mine.sort_by_key(|&i| (std::cmp::Reverse(m[i].dir.components().count()), std::cmp::Reverse(i)));
    let (out, err) = detach_in_order(&mut m, &mine, force);
    drop(m);
    match err {
        Some(e) => {
            for mut x in out {
                x.session.wait();
            }
            Err(e)
        }
        None => Ok(out),
    }
}

/// How many `-i`/`-I` options `args` hold (getopt clusters: an option taking a value ends
/// its cluster).
fn incremental_options(args: &[String]) -> usize {
    let mut n = 0;
    let mut skip = false;
    for a in args.iter().take_while(|a| *a != "--") {
        if std::mem::take(&mut skip) || !a.starts_with('-') || a.starts_with("--") {
            continue;
        }
        for (i, c) in a.char_indices().skip(1) {
            // The options of zfs send that take a value: -i, -I, -t TOKEN, -d BOOKMARK
            // (--redact), -X DATASETS.
            if matches!(c, 'i' | 'I' | 't' | 'd' | 'X') {
                n += usize::from(matches!(c, 'i' | 'I'));
                skip = i + 1 == a.len();
                break;
            }
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    /// clap's own consistency checks of the command definitions (unique names, ...).
    #[test]
    fn command_definitions_are_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn send_takes_one_incremental_source() {
        let v = |a: &[&str]| incremental_options(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(v(&["-i", "@a", "p/f@b"]), 1);
        assert_eq!(v(&["-vi", "@a", "-I", "@b", "p/f@c"]), 2);
        assert_eq!(v(&["-i@a", "-i@b", "p/f@c"]), 2);
        assert_eq!(v(&["-t", "-i", "p/f@c"]), 0, "-i is -t's value there");
        assert_eq!(v(&["-Lce", "p/f@c"]), 0);
    }

    /// A flag given twice is the flag once, as getopt takes it (ZTS zfs_get_002_pos runs
    /// `zfs get -pp`).
    #[test]
    fn repeated_flags_are_accepted() {
        for argv in [&["rzfs", "get", "-pp", "quota", "p"][..], &["rzfs", "list", "-HH", "-o", "name"][..]] {
            assert!(Cli::try_parse_from(argv).is_ok(), "{argv:?}");
        }
    }
}

//! `rzpool` subcommands (zpool(8)): create, add, destroy, import, export, status, list.

use crate::cmd::{abs, clap_error};
use crate::daemon::State;
use crate::format::{size, Table};
use crate::proto::Response;
use clap::{Parser, Subcommand};
use pool::status::PoolHealth;
use pool::{ImportOpts, Pool};
use std::path::{Path, PathBuf};
use std::sync::Arc;

// Flags may repeat as getopt lets them (`zpool history -lil`). `-h` is no help flag, as
// in zpool (getopt answers '?'), clustered too (`zpool set -hP=x POOL` is a usage error,
// not help: ZTS user_property_002_neg draws such names); `--help` is.
#[derive(Parser)]
#[command(
    name = "rzpool",
    about = "configure rzfs storage pools",
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
    /// Create a pool.
    Create {
        /// Use devices even if they appear in use or the replication levels differ.
        #[arg(short = 'f')]
        force: bool,
        /// Pool property (ashift=, compatibility=, feature@NAME=, comment=).
        #[arg(short = 'o', action = clap::ArgAction::Append)]
        props: Vec<String>,
        /// Property of the root file system.
        #[arg(short = 'O', action = clap::ArgAction::Append)]
        fs_props: Vec<String>,
        /// Mount point of the root file system.
        #[arg(short = 'm')]
        mountpoint: Option<String>,
        /// Alternate root: prefixed to every mountpoint (sets altroot).
        #[arg(short = 'R')]
        altroot: Option<PathBuf>,
        /// Enable no feature (only those named with -o feature@NAME=enabled).
        #[arg(short = 'd')]
        no_features: bool,
        /// Dry run: check everything and show the layout, create nothing.
        #[arg(short = 'n')]
        dry_run: bool,
        /// Temporary name: the pool goes by it while imported, its labels carry POOL (not
        /// cached unless -o cachefile=).
        #[arg(short = 't')]
        temp_name: Option<String>,
        pool: String,
        /// Vdev specification: [mirror|raidz|raidz2|raidz3] device...
        #[arg(required = true, num_args = 1.., allow_hyphen_values = true)]
        vdevs: Vec<String>,
    },
    /// Add top-level vdevs to a pool.
    Add {
        /// Use devices of exported pools.
        #[arg(short = 'f')]
        force: bool,
        /// Show the resulting configuration without changing anything.
        #[arg(short = 'n')]
        dryrun: bool,
        /// Property of the new vdevs (only ashift=N).
        #[arg(short = 'o', action = clap::ArgAction::Append)]
        props: Vec<String>,
        /// Add vdevs whose ashift differs from the pool's.
        #[arg(long = "allow-ashift-mismatch")]
        allow_ashift_mismatch: bool,
        /// Add vdevs whose replication level differs from the pool's.
        #[arg(long = "allow-replication-mismatch")]
        allow_replication_mismatch: bool,
        pool: String,
        /// Vdev specification: [mirror|raidz|raidz2|raidz3] device...
        #[arg(required = true, num_args = 1.., allow_hyphen_values = true)]
        vdevs: Vec<String>,
    },
    /// Destroy a pool (its devices can no longer be imported without -D).
    Destroy {
        #[arg(short = 'f')]
        force: bool,
        pool: String,
    },
    /// List importable pools, or import one.
    Import {
        /// Directories (or files) to search for devices.
        #[arg(short = 'd', action = clap::ArgAction::Append)]
        dirs: Vec<PathBuf>,
        /// Pool properties for the import (readonly=on, altroot=DIR, cachefile=none, failmode=...).
        #[arg(short = 'o', action = clap::ArgAction::Append)]
        props: Vec<String>,
        /// Import even if the pool looks active elsewhere.
        #[arg(short = 'f')]
        force: bool,
        /// Include destroyed pools.
        #[arg(short = 'D')]
        destroyed: bool,
        /// Import all pools found.
        #[arg(short = 'a')]
        all: bool,
        /// Do not mount datasets.
        #[arg(short = 'N')]
        no_mount: bool,
        /// Alternate root: prefixed to every mountpoint (sets altroot).
        #[arg(short = 'R')]
        altroot: Option<PathBuf>,
        /// The new name is temporary: the pool goes by it while imported, its labels keep
        /// the old one (implies cachefile=none).
        #[arg(short = 't')]
        temp_name: bool,
        /// Scan the search path (the default here: there is no libblkid cache to consult).
        #[arg(short = 's')]
        scan: bool,
        /// Import even with a log device missing (it holds nothing rzfs needs: rzfs keeps no
        /// intent log; a pool with OpenZFS's unreplayed log is still refused).
        #[arg(short = 'm')]
        missing_log: bool,
        /// Read the pools' configurations from this cache file (`cachefile` property) and
        /// look for their devices where it says they are.
        #[arg(short = 'c')]
        cachefile: Option<PathBuf>,
        /// Pool name or numeric id.
        pool: Option<String>,
        /// New name: the pool is imported under it (and keeps it, unless -t).
        newname: Option<String>,
    },
    /// Export a pool.
    Export {
        /// Export even if datasets are busy: their mounts are aborted (later calls get EIO)
        /// and nothing more reaches the devices; a suspended pool's unsynced changes are lost.
        #[arg(short = 'f')]
        force: bool,
        /// Hard force: everything is synced but the labels keep the pool active and the
        /// cache file keeps it (OpenZFS's `export -F`; a later import needs no -f here).
        #[arg(short = 'F')]
        hardforce: bool,
        #[arg(required = true)]
        pools: Vec<String>,
    },
    /// Show pool health and devices.
    Status {
        /// Also list files with permanent errors.
        #[arg(short = 'v')]
        verbose: bool,
        /// Only pools that are not healthy.
        #[arg(short = 'x')]
        unhealthy_only: bool,
        /// Exact numbers.
        #[arg(short = 'p')]
        parsable: bool,
        /// Only the vdevs that are not ONLINE or have errors (and those above them).
        #[arg(short = 'e')]
        errors_only: bool,
        /// Slow I/O counts per leaf: rzfs has no slow-I/O detection (zio deadman), so this
        /// is accepted and adds nothing.
        #[arg(short = 's')]
        slow: bool,
        /// Full paths of the leaf vdevs. rzfs shows every leaf by the full path it was
        /// opened by (zpool shortens /dev/... disks without -P), so this changes nothing.
        #[arg(short = 'P')]
        full_paths: bool,
        pools: Vec<String>,
    },
    /// Enable every feature this software supports on pools (zpool upgrade): without
    /// arguments, list the pools that lack some.
    Upgrade {
        /// Every imported pool.
        #[arg(short = 'a')]
        all: bool,
        /// List the features (and legacy versions) this software supports.
        #[arg(short = 'v')]
        verbose: bool,
        /// Upgrade to this version (5000: feature flags, the only one rzfs writes).
        #[arg(short = 'V')]
        version: Option<String>,
        pools: Vec<String>,
    },
    /// Debugging aid (hidden in zpool(8) too): sync the pool, then write nothing more to its
    /// devices. Later changes stay in memory and are dropped at export, which leaves the pool
    /// as a crash would (its labels still say active).
    #[command(hide = true)]
    Freeze { pool: String },
    /// Write the open txg of every pool (or of the named ones) to disk now.
    Sync {
        /// Write dirty data to the main pool, not the intent log (rzfs has no intent log
        /// yet, so every sync does), and sync a txg even if nothing is dirty.
        #[arg(short = 'f')]
        force: bool,
        pools: Vec<String>,
    },
    /// Clear device errors and faults; resume a suspended pool.
    Clear {
        pool: String,
        /// A device of the pool (checked; every device's counters are cleared).
        device: Option<String>,
    },
    /// Verify every copy of every block and repair what is damaged (start, pause, cancel).
    Scrub {
        /// Stop (cancel) the scrub.
        #[arg(short = 's', conflicts_with = "pause")]
        stop: bool,
        /// Pause the scrub; `rzpool scrub` again resumes it.
        #[arg(short = 'p')]
        pause: bool,
        /// Wait until the scrub is done before returning.
        #[arg(short = 'w')]
        wait: bool,
        #[arg(required = true)]
        pools: Vec<String>,
    },
    /// Start a resilver: every block is read and every copy that differs is rewritten.
    Resilver {
        #[arg(required = true)]
        pools: Vec<String>,
    },
    /// Attach a device to a mirror or a top-level device (making a mirror); it resilvers.
    Attach {
        /// Use a device that belongs to an exported pool.
        #[arg(short = 'f')]
        force: bool,
        /// Sequential rebuild: accepted, done as a healing resilver (which verifies checksums).
        #[arg(short = 's')]
        sequential: bool,
        /// Wait until the resilver is done.
        #[arg(short = 'w')]
        wait: bool,
        pool: String,
        device: String,
        new_device: String,
    },
    /// Replace a device by a new one (or by the device now at its path); the new one
    /// resilvers, then the old one is detached.
    Replace {
        #[arg(short = 'f')]
        force: bool,
        /// Sequential rebuild: accepted, done as a healing resilver (which verifies checksums).
        #[arg(short = 's')]
        sequential: bool,
        #[arg(short = 'w')]
        wait: bool,
        pool: String,
        device: String,
        new_device: Option<String>,
    },
    /// Detach a device from a mirror (or cancel a replace by detaching the new device).
    Detach { pool: String, device: String },
    /// Remove inactive hot spares, cache devices or log vdevs from a pool (removing vdevs that
    /// hold data is not supported yet).
    Remove {
        pool: String,
        #[arg(required = true)]
        devices: Vec<String>,
    },
    /// Take devices offline: no more I/O reaches them until 'rzpool online'.
    Offline {
        /// Until the next import only (not recorded in the pool's configuration).
        #[arg(short = 't')]
        temporary: bool,
        /// Fault the device instead of taking it offline.
        #[arg(short = 'f')]
        fault: bool,
        pool: String,
        #[arg(required = true)]
        devices: Vec<String>,
    },
    /// Bring devices back online; each resilvers what it missed.
    Online {
        /// Expand the device's top-level vdev into all the space its devices now have.
        #[arg(short = 'e')]
        expand: bool,
        pool: String,
        #[arg(required = true)]
        devices: Vec<String>,
    },
    /// Wait until background activity (scrub, resilver) of a pool is done.
    Wait {
        /// Activities to wait for (scrub, resilver); all when absent.
        #[arg(short = 't', value_delimiter = ',')]
        activities: Vec<String>,
        pool: String,
    },
    /// Show the commands recorded in a pool's history.
    History {
        /// Also the pool's internal events (scans, device changes).
        #[arg(short = 'i')]
        internal: bool,
        /// Long format: who ran each command, and where.
        #[arg(short = 'l')]
        long: bool,
        pools: Vec<String>,
    },
    /// Show the daemon's pool events (scans, device changes, state changes).
    Events {
        /// Every event's payload.
        #[arg(short = 'v')]
        verbose: bool,
        /// Scripted: no header, fields separated by a tab.
        #[arg(short = 'H')]
        scripted: bool,
        /// Follow: print new events as they come, until interrupted.
        #[arg(short = 'f')]
        follow: bool,
        /// The events after this id only (how the client follows).
        #[arg(long = "after", hide = true)]
        after: Option<u64>,
        /// A follow's later request: no header again.
        #[arg(long = "continued", hide = true)]
        continued: bool,
        /// Clear the event queue.
        #[arg(short = 'c')]
        clear: bool,
        pool: Option<String>,
    },
    /// Remove the ZFS labels of a device that no imported pool uses (with -f also of an
    /// exported or possibly active pool's device, or an offline device of a pool here).
    Labelclear {
        #[arg(short = 'f')]
        force: bool,
        device: String,
    },
    /// Show I/O statistics: capacity, operations and bandwidth of pools (and, with -v,
    /// of their vdevs), since they were imported, then every INTERVAL seconds.
    Iostat {
        /// Every vdev, not only the pool.
        #[arg(short = 'v')]
        verbose: bool,
        /// Scripted: no header, fields separated by a tab.
        #[arg(short = 'H')]
        scripted: bool,
        /// Exact numbers.
        #[arg(short = 'p')]
        parsable: bool,
        /// Skip the first report (the one since the pool was imported).
        #[arg(short = 'y')]
        skip_first: bool,
        /// Vdevs by guid.
        #[arg(short = 'g')]
        guids: bool,
        /// Resolve symbolic links of device paths.
        #[arg(short = 'L')]
        follow_links: bool,
        /// Full paths of devices.
        #[arg(short = 'P')]
        full_paths: bool,
        /// Print a timestamp before each report: u (seconds since the epoch) or d (date).
        #[arg(short = 'T')]
        timestamp: Option<String>,
        /// Latency, queue and histogram statistics (not collected by rzfs).
        #[arg(short = 'l')]
        latency: bool,
        #[arg(short = 'q')]
        queues: bool,
        #[arg(short = 'r')]
        request_histo: bool,
        #[arg(short = 'w')]
        latency_histo: bool,
        /// The counters of the previous report (how the client computes rates per interval).
        #[arg(long = "prev", hide = true)]
        prev: Option<String>,
        /// A later report of a non-verbose series: no header again.
        #[arg(long = "continued", hide = true)]
        continued: bool,
        /// [POOL...] [INTERVAL [COUNT]]
        #[arg(allow_negative_numbers = true)]
        args: Vec<String>,
    },
    /// Set a pool property, or with VDEV a vdev property.
    Set { assignment: String, pool: String, vdev: Option<String> },
    /// Show pool properties.
    Get {
        #[arg(short = 'H')]
        scripted: bool,
        #[arg(short = 'p')]
        parsable: bool,
        #[arg(short = 'o', value_delimiter = ',')]
        fields: Vec<String>,
        /// Comma-separated properties, or "all".
        props: String,
        pools: Vec<String>,
    },
    /// List pools and their sizes.
    List {
        #[arg(short = 'H')]
        scripted: bool,
        #[arg(short = 'p')]
        parsable: bool,
        /// Also list each vdev (zpool list -v).
        #[arg(short = 'v')]
        verbose: bool,
        #[arg(short = 'o', value_delimiter = ',')]
        props: Vec<String>,
        pools: Vec<String>,
    },
}

/// Runs one `rzpool` command.
pub fn run(state: &Arc<State>, argv: &[String], cwd: &Path) -> Response {
    run_as(state, argv, cwd, "rzpool")
}

/// Runs one `rzpool` command; pool history records it under the program name `shown`.
pub fn run_as(state: &Arc<State>, argv: &[String], cwd: &Path, shown: &str) -> Response {
    // zpool's subcommands know no -h (getopt answers '?', a usage error: ZTS
    // zpool_scrub_001_neg); `--help` still shows the help.
    if argv.len() > 1 && argv[1..].iter().take_while(|a| *a != "--").any(|a| a == "-h") {
        return Response::usage(format!(
            "invalid option 'h'\nusage: zpool {} ... (see zpool {} --help)",
            argv[0], argv[0]
        ));
    }
    let cli = match Cli::try_parse_from(std::iter::once("rzpool".to_string()).chain(argv.iter().cloned())) {
        Ok(c) => c,
        Err(e) => return clap_error(e),
    };
    let logged = match &cli.cmd {
        Cmd::Create { pool, dry_run: false, temp_name, .. } => {
            Some(temp_name.clone().unwrap_or(pool.clone()))
        }
        Cmd::Set { pool, .. } => Some(pool.clone()),
        Cmd::Add { pool, dryrun: false, .. } => Some(pool.clone()),
        Cmd::Scrub { pools, .. } | Cmd::Resilver { pools } if pools.len() == 1 => Some(pools[0].clone()),
        Cmd::Offline { pool, .. } | Cmd::Online { pool, .. } | Cmd::Clear { pool, .. } => Some(pool.clone()),
        Cmd::Upgrade { pools, verbose: false, .. } if pools.len() == 1 => Some(pools[0].clone()),
        Cmd::Attach { pool, .. } | Cmd::Replace { pool, .. } | Cmd::Detach { pool, .. } => Some(pool.clone()),
        Cmd::Remove { pool, .. } => Some(pool.clone()),
        Cmd::Import { pool: Some(p), newname, props, .. } if !props.iter().any(|x| x == "readonly=on") => {
            Some(newname.clone().unwrap_or_else(|| p.clone()))
        }
        _ => None,
    };
    // Commands that change a pool's configuration rewrite its cache entry, as OpenZFS
    // rewrites the cache file at every config sync.
    let reconfigured = match &cli.cmd {
        Cmd::Add { pool, dryrun: false, .. }
        | Cmd::Attach { pool, .. }
        | Cmd::Replace { pool, .. }
        | Cmd::Detach { pool, .. }
        | Cmd::Remove { pool, .. }
        | Cmd::Online { pool, .. } => Some(pool.clone()),
        // The configuration carries the comment and compatibility.
        Cmd::Set { assignment, pool, vdev: None }
            if assignment.starts_with("comment=") || assignment.starts_with("compatibility=") =>
        {
            Some(pool.clone())
        }
        _ => None,
    };
    let r = match cli.cmd {
        Cmd::Create {
            force,
            mut props,
            fs_props,
            mountpoint,
            altroot,
            no_features,
            dry_run,
            temp_name,
            pool,
            vdevs,
        } => {
            // As zpool create -t: a temporary name makes the cachefile default none.
            if temp_name.is_some() && !props.iter().any(|p| p.starts_with("cachefile=")) {
                props.push("cachefile=none".into());
            }
            if let Some(r) = altroot {
                props.push(format!("altroot={}", r.display()));
            }
            if no_features {
                // `zpool create -d`: every feature disabled unless -o enables it.
                for f in pool::feature_table::all() {
                    if !props.iter().any(|p| p.starts_with(&format!("feature@{}=", f.name))) {
                        props.push(format!("feature@{}=disabled", f.name));
                    }
                }
            }
            let (name, label_name) = match temp_name {
                Some(t) => (t, Some(pool)),
                None => (pool, None),
            };
            let args = crate::rwpool::CreateArgs {
                name,
                label_name,
                force,
                vdev_words: vdevs,
                pool_props: props,
                fs_props,
                mountpoint,
                cwd: cwd.to_path_buf(),
            };
            if dry_run {
                return match crate::rwpool::create_dry_run(state, args) {
                    Ok(layout) => Response::ok(layout),
                    Err(e) => Response::err(e),
                };
            }
            let name = args.name.clone();
            let mp = args.mountpoint.clone();
            let cached = match cache_setting(&args.pool_props) {
                Ok(c) => c,
                Err(e) => return Response::err(e),
            };
            crate::rwpool::create(state, args).and_then(|_| {
                crate::cache::record_as(state, &name, &cached);
                // Like zpool create: the root file system is mounted unless mountpoint=none.
                if matches!(mp.as_deref(), Some("none") | Some("legacy")) {
                    return Ok(Response::ok(String::new()));
                }
                // The mountpoint property (under the altroot, if any) says where.
                crate::cmd::zfs::automount(state, &name).map(|warnings| {
                    let mut r = Response::ok(String::new());
                    r.stderr = warnings;
                    r
                })
            })
        }
        Cmd::Add { force, dryrun, props, allow_ashift_mismatch, allow_replication_mismatch, pool, vdevs } => {
            let ashift = match crate::rwadd::ashift_option(&props) {
                Ok(a) => a,
                Err(e) => return Response::err(e),
            };
            let args = crate::rwadd::AddArgs {
                pool,
                force,
                dryrun,
                vdev_words: vdevs,
                cwd: cwd.to_path_buf(),
                ashift,
                allow_ashift_mismatch,
                allow_replication_mismatch,
            };
            crate::rwadd::add(state, &args).map(Response::ok)
        }
        Cmd::Destroy { pool, force } => {
            // Logged first, as zfs_ioc_pool_destroy does: a pool imported again with -D
            // shows its destroy.
            if crate::rwpool::writer_of(state, &pool).is_some() {
                crate::rwpool::log_history(state, &pool, &format!("{shown} {}", argv.join(" ")));
            }
            destroy(state, &pool, force)
        }
        Cmd::Import {
            dirs,
            mut props,
            destroyed,
            all,
            pool,
            newname,
            force,
            altroot,
            no_mount,
            temp_name,
            scan: _,
            missing_log,
            cachefile,
        } => {
            if all && pool.is_some() {
                // zpool_do_import: -a takes no pool names.
                return Response::usage(
                    "too many arguments\nusage: zpool import [-a] [OPTIONS] | POOL [NEWNAME]",
                );
            }
            if temp_name && newname.is_none() {
                return Response::err("cannot import: -t needs a new name (zpool import -t POOL NEWNAME)");
            }
            if temp_name && !props.iter().any(|p| p.starts_with("cachefile=")) {
                // As zpool import -t: a pool under a temporary name is not cached.
                props.push("cachefile=none".into());
            }
            let from_cache = match cachefile {
                Some(f) => {
                    let f = abs(cwd, &f);
                    let entries = crate::cache::load(&f);
                    if entries.is_empty() {
                        return Response::err(format!(
                            "cannot import: no pools in cache file '{}'",
                            f.display()
                        ));
                    }
                    Some(entries)
                }
                None => None,
            };
            let dirs: Vec<PathBuf> = if let Some(entries) = &from_cache {
                let mut d: Vec<PathBuf> = dirs.iter().map(|d| abs(cwd, d)).collect();
                d.extend(entries.iter().flat_map(|e| e.dirs.iter().cloned()));
                d.sort();
                d.dedup();
                d
            } else if dirs.is_empty() {
                let mut d = vec![PathBuf::from("/dev")];
                d.extend(state.exported_dirs.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned());
                d
            } else {
                dirs.iter().map(|d| abs(cwd, d)).collect()
            };
            if let Some(r) = altroot {
                props.push(format!("altroot={}", r.display()));
            }
            let listing = pool.is_none() && !all;
            let before: Vec<String> = state.all_pools().iter().map(|p| p.name().to_string()).collect();
            let how = ImportHow { destroyed, all, force, temp: temp_name, missing_log, from_cache };
            import(state, &dirs, &props, &how, pool, newname).map(|mut r| {
                if r.exit == 0 && !listing && !no_mount {
                    // As zpool import does unless -N: the file systems of the pools
                    // imported are mounted (read-only ones read-only); a failure is
                    // reported (exit 1) and the pool stays imported.
                    let new = state.all_pools().into_iter().filter(|p| !before.iter().any(|b| b == p.name()));
                    for p in new {
                        match crate::cmd::zfs::mount_pool_filesystems(state, p.name()) {
                            Ok(m) => {
                                r.stderr.push_str(&m.stderr);
                                r.exit = r.exit.max(m.exit);
                            }
                            Err(e) => {
                                r.stderr.push_str(&format!("{e}\n"));
                                r.exit = 1;
                            }
                        }
                    }
                }
                r
            })
        }
        Cmd::Export { pools, force, hardforce } => {
            // Logged before the export, which syncs it (zfs_ioc_pool_export logs first), so
            // the history shows the export after the pool is imported again.
            for pool in &pools {
                if crate::rwpool::writer_of(state, pool).is_some() {
                    crate::rwpool::log_history(state, pool, &format!("{shown} {}", argv.join(" ")));
                }
            }
            export(state, &pools, force, hardforce)
        }
        Cmd::Status { verbose, unhealthy_only, parsable, errors_only, slow: _, full_paths: _, pools } => {
            status(state, &pools, verbose, unhealthy_only, parsable, errors_only)
        }
        Cmd::List { scripted, parsable, verbose, props, pools } => {
            list(state, &pools, scripted, parsable, verbose, &props)
        }
        Cmd::Labelclear { force, device } => labelclear(state, &device, force, cwd),
        Cmd::Iostat {
            verbose,
            scripted,
            parsable,
            skip_first: _,
            guids,
            follow_links: _,
            full_paths: _,
            timestamp,
            latency,
            queues,
            request_histo,
            latency_histo,
            prev,
            continued,
            args,
        } => {
            if latency || queues || request_histo || latency_histo {
                return Response::err(
                    "cannot show latency, queue or histogram statistics (-l, -q, -r, -w): rzfs does not collect them",
                );
            }
            let how =
                IostatHow { verbose, scripted, parsable, guids, timestamp, header: verbose || !continued };
            match split_interval(&args) {
                Ok((pools, _, _)) => iostat(state, &pools, &how, prev.as_deref()),
                Err(e) => return Response::usage(e),
            }
        }
        Cmd::History { internal, long, pools } => history(state, &pools, internal, long),
        Cmd::Events { verbose, scripted, follow, clear, after, continued, pool } => {
            events(state, verbose, scripted, follow, clear, (after, continued), pool)
        }
        Cmd::Set { assignment, pool, vdev: Some(vdev) } => {
            crate::vdevprops::set(state, &assignment, &pool, &vdev).map(|_| Response::ok(String::new()))
        }
        Cmd::Set { assignment, pool, vdev: None } => match assignment.strip_prefix("cachefile=") {
            Some(v) => crate::cache::parse_setting(v).and_then(|how| {
                state.pool(&pool)?;
                if crate::rwpool::writer_of(state, &pool).is_none() {
                    return Err(format!("cannot set property for '{pool}': pool is read-only"));
                }
                crate::cache::record_as(state, &pool, &how);
                Ok(Response::ok(String::new()))
            }),
            None => {
                crate::rwpool::set_pool_prop(state, &assignment, &pool).map(|_| Response::ok(String::new()))
            }
        },
        Cmd::Clear { pool, device } => clear(state, &pool, device.as_deref(), cwd),
        Cmd::Scrub { stop, pause, wait, pools } => scrub(state, &pools, stop, pause, wait),
        Cmd::Resilver { pools } => resilver(state, &pools),
        Cmd::Attach { force, sequential: _, wait, pool, device, new_device } => {
            let a = crate::rwattach::AttachArgs {
                pool,
                device,
                new_device: Some(new_device),
                force,
                wait,
                replacing: false,
                cwd: cwd.to_path_buf(),
            };
            crate::rwattach::attach(state, &a).map(Response::ok)
        }
        Cmd::Replace { force, sequential: _, wait, pool, device, new_device } => {
            let a = crate::rwattach::AttachArgs {
                pool,
                device,
                new_device,
                force,
                wait,
                replacing: true,
                cwd: cwd.to_path_buf(),
            };
            crate::rwattach::attach(state, &a).map(Response::ok)
        }
        Cmd::Detach { pool, device } => crate::rwattach::detach(state, &pool, &device, cwd).map(Response::ok),
        Cmd::Remove { pool, devices } => remove(state, &pool, &devices, cwd),
        Cmd::Offline { temporary, fault, pool, devices } => {
            offline(state, &pool, &devices, temporary, fault, cwd)
        }
        Cmd::Online { expand, pool, devices } => online(state, &pool, &devices, expand, cwd),
        Cmd::Wait { activities, pool } => wait(state, &pool, &activities),
        Cmd::Sync { force, pools } => sync(state, &pools, force),
        Cmd::Freeze { pool } => freeze(state, &pool),
        Cmd::Upgrade { all, verbose, version, pools } => upgrade(state, all, verbose, version, &pools),
        Cmd::Get { scripted, parsable, fields, props, pools } => {
            get(state, &props, &pools, scripted, parsable, &fields)
        }
    };
    if let (Ok(resp), Some(pool)) = (&r, &reconfigured) {
        if resp.exit == 0 {
            crate::cache::refresh(state, pool);
        }
    }
    if let (Ok(resp), Some(pool)) = (&r, &logged) {
        if resp.exit == 0 {
            crate::rwpool::log_history(state, pool, &format!("{shown} {}", argv.join(" ")));
        }
    }
    r.unwrap_or_else(Response::err)
}

/// `zpool clear POOL`: resets the error counts and FAULTED states of the pool's devices; a
/// suspended pool is synced and, if that works, resumed.
fn clear(state: &State, name: &str, device: Option<&str>, cwd: &Path) -> Result<Response, String> {
    // (Leaves back from a fault resilver the txgs they missed: see Spa::clear.)
    state.pool(name)?;
    let what = device.unwrap_or(name);
    // As zpool_clear: a pool imported read-only cannot have its errors cleared (clearing
    // writes the vdev state and may start a resilver).
    let rw = crate::rwpool::writer_of(state, name)
        .ok_or_else(|| format!("cannot clear errors for {what}: pool is read-only"))?;
    if let Some(d) = device {
        let d = device_arg(cwd, d);
        if !rw.spa.read(|w| w.find_vdev(&d).is_some()) {
            return Err(format!("cannot clear errors for {d}: no such device in pool"));
        }
    }
    // Every device's counters are cleared, the one named included.
    rw.spa.clear().map_err(|e| format!("cannot clear errors for {name}: {e}"))?;
    Ok(Response::ok(String::new()))
}

/// A device named on the command line: a relative path is taken from the caller's
/// directory; bare names and guids are matched by the pool.
fn device_arg(cwd: &Path, d: &str) -> String {
    if d.contains('/') && !d.starts_with('/') {
        abs(cwd, Path::new(d)).display().to_string()
    } else {
        d.to_string()
    }
}

/// `zpool remove POOL DEV...`: inactive hot spares and log vdevs (rzfs cannot yet remove
/// a vdev that holds data).
fn remove(state: &State, name: &str, devices: &[String], cwd: &Path) -> Result<Response, String> {
    let rw = rw_pool(state, name, "remove devices of")?;
    for d in devices {
        let d = device_arg(cwd, d);
        if rw.spa.read(|w| w.cache_named(&d).is_some()) {
            rw.spa.remove_cache(&d).map_err(|e| format!("cannot remove {d}: {e}"))?;
            continue;
        }
        let is_spare = rw.spa.read(|w| w.spare_named(&d).is_some());
        if !is_spare {
            rw.spa.remove_log(&d).map_err(|e| match e {
                pool::PoolError::Busy(m) | pool::PoolError::Unsupported(m) => m,
                e => format!("cannot remove {d}: {e}"),
            })?;
            continue;
        }
        rw.spa.remove_spare(&d).map_err(|e| match e {
            pool::PoolError::Busy(m) | pool::PoolError::Unsupported(m) => m,
            e => format!("cannot remove {d}: {e}"),
        })?;
    }
    Ok(Response::ok(String::new()))
}

/// `zpool offline [-t] [-f] POOL DEV...`.
fn offline(
    state: &State,
    name: &str,
    devices: &[String],
    temporary: bool,
    fault: bool,
    cwd: &Path,
) -> Result<Response, String> {
    let rw = rw_pool(state, name, "offline devices of")?;
    for d in devices {
        let d = device_arg(cwd, d);
        let r = if fault { rw.spa.fault(&d, temporary) } else { rw.spa.offline(&d, temporary) };
        r.map_err(|e| match e {
            pool::PoolError::NotFound(m) | pool::PoolError::Busy(m) | pool::PoolError::Unsupported(m) => m,
            e => format!("cannot offline {d}: {e}"),
        })?;
    }
    Ok(Response::ok(String::new()))
}

/// `zpool online [-e] POOL DEV...`.
fn online(
    state: &State,
    name: &str,
    devices: &[String],
    expand: bool,
    cwd: &Path,
) -> Result<Response, String> {
    let rw = rw_pool(state, name, "online devices of")?;
    let mut warnings = String::new();
    for d in devices {
        let d = device_arg(cwd, d);
        let r = if expand { rw.spa.online_expand(&d) } else { rw.spa.online(&d) };
        let w = r.map_err(|e| match e {
            pool::PoolError::NotFound(m) | pool::PoolError::Unsupported(m) => m,
            e => format!("cannot online {d}: {e}"),
        })?;
        if let Some(w) = w {
            warnings.push_str(&w);
            warnings.push('\n');
        }
    }
    let mut r = Response::ok(String::new());
    r.stderr = warnings;
    Ok(r)
}

/// The read-write owner of pool `name`, or the message zpool gives for a read-only one.
fn rw_pool(state: &State, name: &str, what: &str) -> Result<Arc<crate::rwpool::RwPool>, String> {
    state.pool(name)?;
    crate::rwpool::writer_of(state, name).ok_or_else(|| format!("cannot {what} {name}: pool is read-only"))
}

/// `zpool scrub [-s | -p] [-w] POOL...`.
fn scrub(state: &State, names: &[String], stop: bool, pause: bool, wait: bool) -> Result<Response, String> {
    for name in names {
        let rw = rw_pool(state, name, "scrub")?;
        let r = if stop {
            rw.spa.scan_cancel()
        } else if pause {
            rw.spa.scan_pause()
        } else {
            rw.spa.scan_start(pool::scan::ScanFunc::Scrub)
        };
        r.map_err(|e| match e {
            pool::PoolError::Busy(m) | pool::PoolError::Invalid(m) => format!("cannot scrub {name}: {m}"),
            e => format!("cannot scrub {name}: {e}"),
        })?;
        if wait && !stop && !pause {
            rw.spa.scan_wait().map_err(|e| format!("cannot wait for {name}: {e}"))?;
        }
    }
    Ok(Response::ok(String::new()))
}

/// `zpool resilver POOL...`.
fn resilver(state: &State, names: &[String]) -> Result<Response, String> {
    for name in names {
        let rw = rw_pool(state, name, "resilver")?;
        rw.spa.scan_start(pool::scan::ScanFunc::Resilver).map_err(|e| match e {
            pool::PoolError::Busy(m) | pool::PoolError::Invalid(m) => format!("cannot resilver {name}: {m}"),
            e => format!("cannot resilver {name}: {e}"),
        })?;
    }
    Ok(Response::ok(String::new()))
}

/// `zpool wait [-t ACTIVITY,...] POOL`: scrub, resilver and replace are the activities rzfs
/// has.
fn wait(state: &State, name: &str, activities: &[String]) -> Result<Response, String> {
    const KNOWN: [&str; 8] =
        ["discard", "free", "initialize", "replace", "remove", "resilver", "scrub", "trim"];
    for a in activities {
        if !KNOWN.contains(&a.as_str()) && a != "raidz_expand" {
            return Err(format!("invalid activity '{a}'"));
        }
    }
    let rw = rw_pool(state, name, "wait for")?;
    // A replace ends with its resilver (the old device is detached then).
    let want = |f: pool::scan::ScanFunc| {
        let n: &[&str] = if f == pool::scan::ScanFunc::Scrub { &["scrub"] } else { &["resilver", "replace"] };
        activities.is_empty() || activities.iter().any(|a| n.contains(&a.as_str()))
    };
    if let Some(s) = rw.spa.scan_status() {
        let f = if s.phys.func == pool::scan::ScanFunc::Resilver as u64 {
            pool::scan::ScanFunc::Resilver
        } else {
            pool::scan::ScanFunc::Scrub
        };
        if want(f) {
            rw.spa.scan_wait().map_err(|e| format!("cannot wait for {name}: {e}"))?;
        }
    }
    Ok(Response::ok(String::new()))
}

/// `zpool history [-il] [POOL]...`.
fn history(state: &State, names: &[String], internal: bool, long: bool) -> Result<Response, String> {
    use pool::history::Record;
    // Commands are logged in the open txg: sync it, so the history shows every command
    // that returned (as OpenZFS's, whose commands log in the txg they wait for). A pool
    // that cannot sync shows what is on disk.
    for p in selected(state, names)? {
        if let Some(rw) = crate::rwpool::writer_of(state, p.name()) {
            let _ = rw.sync();
        }
    }
    let mut out = String::new();
    for p in selected(state, names)? {
        out.push_str(&format!("History for '{}':\n", p.name()));
        for r in pool::history::read_records(&p).map_err(|e| e.to_string())? {
            let (time, host, who, zone) = match &r {
                Record::Command { time, command, who, host, zone } => {
                    out.push_str(&format!("{} {command}", crate::format::history_time(*time)));
                    (time, host, *who, zone.as_deref())
                }
                Record::Internal { time, txg, name, text, host } if internal => {
                    out.push_str(&format!(
                        "{} [txg:{txg}] {name} {text}",
                        crate::format::history_time(*time)
                    ));
                    (time, host, None, None)
                }
                Record::Internal { .. } => continue,
            };
            let _ = time;
            if long {
                // zpool's long format: " [user UID (NAME) on HOST:ZONE]".
                out.push_str(" [");
                if let Some(uid) = who {
                    out.push_str(&format!("user {uid} "));
                    if let Some(n) = crate::access::user_name(uid as u32) {
                        out.push_str(&format!("({n}) "));
                    }
                }
                if let Some(h) = host {
                    out.push_str(&format!("on {h}"));
                }
                if let Some(z) = zone {
                    out.push_str(&format!(":{z}"));
                }
                out.push(']');
            }
            out.push('\n');
        }
        out.push('\n');
    }
    Ok(Response::ok(out))
}

/// What `zpool online -e` would add to a pool imported read-write; `None` when nothing
/// (shown as `-`, as zpool does).
fn expand_size(state: &State, name: &str) -> Option<u64> {
    crate::rwpool::writer_of(state, name).map(|w| w.spa.expand_size()).filter(|&e| e > 0)
}

/// `zpool events [-vH] [POOL]`, `zpool events -c`.
fn events(
    state: &State,
    verbose: bool,
    scripted: bool,
    follow: bool,
    clear: bool,
    (after, continued): (Option<u64>, bool),
    pool: Option<String>,
) -> Result<Response, String> {
    if clear {
        if verbose || scripted || follow || pool.is_some() {
            return Err("invalid options combined with -c".into());
        }
        return Ok(Response::ok(format!("cleared {} events\n", pool::events::clear())));
    }
    if follow {
        // The client follows (see `client::follow_events`); a raw request cannot.
        return Err("rzpool events -f is followed by the rzpool command, not by the daemon".into());
    }
    // What the pools' sync threads have not posted yet (error reports, state changes).
    let writers: Vec<_> = state.writers.lock().unwrap_or_else(|p| p.into_inner()).values().cloned().collect();
    for w in writers {
        w.spa.post_state_changes();
    }
    let (list, dropped) = pool::events::list();
    let mut out = String::new();
    // A follow's later answers are continuations: no header again.
    let first = !continued;
    if !scripted && first {
        out.push_str(&format!("{:<30} {}\n", "TIME", "CLASS"));
    }
    if dropped > 0 && first {
        out.push_str(&format!("dropped {dropped} events\n"));
    }
    let newer = |e: &&pool::events::Event| after.is_none_or(|a| e.eid > a);
    for e in list.iter().filter(newer).filter(|e| pool.as_deref().is_none_or(|p| e.pool() == Some(p))) {
        let sep = if scripted { '\t' } else { ' ' };
        out.push_str(&format!("{}{sep}{}\n", crate::format::event_time(e.time.0, e.time.1), e.class));
        if verbose {
            let val = |v: &pool::events::EvVal| match v {
                pool::events::EvVal::U64(n) => format!("0x{n:x}"),
                pool::events::EvVal::Str(s) => format!("\"{s}\""),
            };
            let mut fields = e.fields.iter();
            if let Some((k, v)) = fields.next() {
                out.push_str(&format!("        {k} = {}\n", val(v)));
            }
            out.push_str(&format!("        class = \"{}\"\n", e.class));
            for (k, v) in fields {
                out.push_str(&format!("        {k} = {}\n", val(v)));
            }
            out.push_str(&format!("        time = 0x{:x} 0x{:x}\n", e.time.0, e.time.1));
            out.push_str(&format!("        eid = 0x{:x}\n\n", e.eid));
        }
    }
    let mut r = Response::ok(out);
    if let Some(a) = after {
        let last = list.last().map_or(a, |e| e.eid.max(a));
        r.stderr = format!("{}{last}\n", crate::proto::EVENTS_LAST_EID);
    }
    Ok(r)
}

fn parse_import_opts(props: &[String]) -> Result<ImportOpts, String> {
    let mut o = ImportOpts::default();
    let mut readonly = false;
    for p in props {
        let (k, v) =
            p.split_once('=').ok_or_else(|| format!("invalid property '{p}': expected name=value"))?;
        match (k, v) {
            ("readonly", "on") => readonly = true,
            ("readonly", "off") => readonly = false,
            ("readonly", _) => {
                return Err(format!("invalid value '{v}' for property 'readonly': use on or off"))
            }
            ("altroot", v) => {
                if !v.starts_with('/') {
                    return Err(format!(
                        "invalid value '{v}' for property 'altroot': must be an absolute path"
                    ));
                }
                o.altroot = Some(PathBuf::from(v));
            }
            ("cachefile", v) => {
                crate::cache::parse_setting(v)?;
            }
            _ => return Err(format!("property '{k}' cannot be set at import time")),
        }
    }
    o.readonly = readonly;
    if let Ok(v) = std::env::var("RZFS_ARC_MAX") {
        o.cache_bytes = v.parse().map_err(|_| format!("RZFS_ARC_MAX={v} is not a byte count"))?;
    }
    Ok(o)
}

/// How `zpool import` chooses and takes pools.
#[derive(Default)]
struct ImportHow {
    /// Destroyed pools too (-D).
    destroyed: bool,
    /// Every pool found (-a).
    all: bool,
    /// Even if another host seems to use it (-f).
    force: bool,
    /// The new name is temporary (-t).
    temp: bool,
    /// Go on without a missing log device (-m).
    missing_log: bool,
    /// Only the pools of this cache file (-c), with their cached settings.
    from_cache: Option<Vec<crate::cache::Entry>>,
}

fn import(
    state: &Arc<State>,
    dirs: &[PathBuf],
    props: &[String],
    how: &ImportHow,
    which: Option<String>,
    newname: Option<String>,
) -> Result<Response, String> {
    let ImportHow { destroyed, all, force, temp, missing_log, .. } = *how;
    let ours: Vec<u64> = state.all_pools().iter().map(|p| p.guid()).collect();
    let mut cands = pool::discover(dirs, destroyed).map_err(|e| e.to_string())?;
    if let Some(entries) = &how.from_cache {
        cands.retain(|c| entries.iter().any(|e| e.guid == c.guid));
    }
    // Pools this daemon has imported are not importable (zpool import does not list them).
    cands.retain(|c| !ours.contains(&c.guid));
    if which.is_none() && !all {
        if cands.is_empty() {
            return Ok(Response::err("no pools available to import"));
        }
        let mut out = String::new();
        for c in &cands {
            out.push_str(&pool::status::import_listing(c));
        }
        return Ok(Response::ok(out));
    }
    let mut opts = parse_import_opts(props)?;
    if let Some(n) = &newname {
        if all {
            return Err("cannot import: a new name needs a single pool, not -a".into());
        }
        crate::rwpool::check_pool_name(n).map_err(|e| e.replacen("cannot create", "cannot import", 1))?;
        opts.rename = Some(n.clone());
        opts.temp_name = temp;
    }
    opts.missing_log = missing_log;
    let targets: Vec<&pool::PoolCandidate> = match &which {
        Some(w) => vec![pool::discover::select(&cands, w).map_err(|e| e.to_string())?],
        None => cands.iter().collect(),
    };
    let mut warnings = String::new();
    for c in targets {
        let name = newname.clone().unwrap_or_else(|| c.name.clone());
        if state.pools.lock().unwrap_or_else(|p| p.into_inner()).contains_key(&name) {
            return Err(format!("cannot import '{name}': a pool with that name is already created/imported"));
        }
        match pool::status::in_use(c) {
            Some(pool::status::InUse::ThisSystem) => {
                return Err(format!(
                    "cannot import '{}': pool is in use by another process on this system (export it there first)",
                    c.name
                ))
            }
            Some(pool::status::InUse::OtherSystem { hostname, hostid }) if !force => {
                let when = c.best_uberblock_time().map(crate::format::history_time).unwrap_or_default();
                return Err(format!(
                    "cannot import '{}': pool was previously in use from another system.\n\
                     Last accessed by {hostname} (hostid={hostid:x}) at {when}\n\
                     The pool can be imported, use 'rzpool import -f' to import the pool.",
                    c.name
                ));
            }
            _ => {}
        }
        let p = match pool::import(c, &opts) {
            Err(e @ pool::PoolError::UnsupportedFeatures { .. }) => {
                return Ok(unsupported_import(&c.name, &e))
            }
            r => r.map_err(|e| format!("cannot import '{}': {e}", c.name))?,
        };
        if opts.readonly {
            state.pools.lock().unwrap_or_else(|p| p.into_inner()).insert(name, Arc::new(p));
        } else {
            if let Err(e @ pool::PoolError::UnsupportedFeatures { .. }) =
                pool::open_rw::check_write_features(&p)
            {
                return Ok(unsupported_import(&c.name, &e));
            }
            crate::rwpool::open(state, p)?;
            warnings.push_str(&crate::volumes::serve_pool(state, &name));
            // A pool imported from a cache file (-c) keeps the cache file its entry names.
            let named =
                how.from_cache.as_ref().and_then(|v| v.iter().find(|e| e.guid == c.guid)).and_then(|e| {
                    e.config
                        .as_ref()?
                        .get_str("cachefile")
                        .map(|p| crate::cache::Setting::File(PathBuf::from(p)))
                });
            let explicit = props.iter().any(|p| p.starts_with("cachefile="));
            let setting = match named {
                Some(n) if !explicit => n,
                _ => cache_setting(props)?,
            };
            crate::cache::record_as(state, &name, &setting);
        }
    }
    let mut r = Response::ok(String::new());
    r.stderr = warnings;
    Ok(r)
}

/// Imports the pool with `guid` from `dirs` read-write, as a cached pool at daemon start.
pub(crate) fn import_cached(state: &Arc<State>, dirs: &[PathBuf], guid: u64) -> Result<(), String> {
    let r = import(state, dirs, &[], &ImportHow::default(), Some(guid.to_string()), None)?;
    if r.exit == 0 {
        Ok(())
    } else {
        Err(format!("{}{}", r.stdout, r.stderr))
    }
}

/// Where a create's or import's `-o` list caches the pool: its `cachefile`, else none with
/// an altroot (as OpenZFS), else the daemon's cache.
fn cache_setting(props: &[String]) -> Result<crate::cache::Setting, String> {
    match props.iter().rev().find_map(|p| p.strip_prefix("cachefile=")) {
        Some(v) => crate::cache::parse_setting(v),
        None if props.iter().any(|p| p.starts_with("altroot=")) => Ok(crate::cache::Setting::None),
        None => Ok(crate::cache::Setting::Daemon),
    }
}

/// `zpool export [-f]`: unmounts the pool's datasets (refused while busy unless `-f`, which
/// aborts them), syncs, marks the pool exported and releases it. A pool that cannot be
/// synced stays imported with all its changes, unless `-f` fences it.
fn export(state: &State, names: &[String], force: bool, hard: bool) -> Result<Response, String> {
    for n in names {
        let pool = state.pool(n)?;
        let mut paths: Vec<PathBuf> = match crate::rwpool::writer_of(state, n) {
            Some(rw) => rw.spa.leaf_paths().into_iter().map(PathBuf::from).collect(),
            None => pool.candidate.devices.iter().map(|d| d.path.clone()).collect(),
        };
        drop(pool);
        release_as(state, n, false, force, hard)?;
        // Where to look again for an import without -d (see State::exported_dirs); /dev
        // is searched anyway.
        paths.retain(|p| !p.starts_with("/dev"));
        let mut dirs = state.exported_dirs.lock().unwrap_or_else(|p| p.into_inner());
        for dir in paths.iter().filter_map(|p| p.parent()) {
            if !dirs.iter().any(|d| d == dir) {
                dirs.push(dir.to_path_buf());
            }
        }
    }
    Ok(Response::ok(String::new()))
}

/// Unmounts, then exports or destroys pool `name`.
fn release(state: &State, name: &str, destroy: bool, force: bool) -> Result<(), String> {
    release_as(state, name, destroy, force, false)
}

/// [`release`]; `hard` (`export -F`): the pool stays active on disk and in the cache file.
fn release_as(state: &State, name: &str, destroy: bool, force: bool, hard: bool) -> Result<(), String> {
    let vols = crate::volumes::of_pool(state, name);
    crate::volumes::unserve(state, &vols, force).map_err(|v| {
        let what = if destroy { "destroy" } else { "export" };
        format!("cannot {what} '{name}': pool is busy (volume '{v}' is in use)")
    })?;
    let rmdirs = inherited_mount_dirs(state, name);
    let mounts = crate::cmd::zfs::unmount_pool(state, name, force)?;
    let r = crate::rwpool::close_as(state, name, destroy, force, hard);
    // With -f the mounts were aborted before the pool closed (which wakes any request
    // waiting on it); their serving threads end now.
    for mut m in mounts {
        m.session.wait();
    }
    r?;
    state.pools.lock().unwrap_or_else(|p| p.into_inner()).remove(name);
    if !hard {
        crate::cache::forget(state, name);
    }
    for dir in &rmdirs {
        // Deepest first and silently: not empty, gone or mounted over all leave it.
        let _ = std::fs::remove_dir(dir);
    }
    Ok(())
}

/// The directories of pool `pool`'s mounts whose `mountpoint` is the default or inherited,
/// deepest first: an export or destroy removes them once unmounted, as libzfs's
/// `zpool_disable_datasets` does (`remove_mountpoint`); one set locally is the admin's.
fn inherited_mount_dirs(state: &State, pool: &str) -> Vec<PathBuf> {
    let Ok(p) = state.pool(pool) else { return Vec::new() };
    let dsl = p.dsl();
    let mounts: Vec<(String, PathBuf)> = state
        .mounts
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|m| crate::rwpool::pool_of(&m.dataset) == pool)
        .map(|m| (m.dataset.clone(), m.dir.clone()))
        .collect();
    let mut out: Vec<PathBuf> = mounts
        .into_iter()
        .filter(|(ds, dir)| {
            let v =
                dsl.find(ds).ok().and_then(|d| crate::cmd::zfs::prop_value(&p, &dsl, &d, "mountpoint").ok());
            v.is_some_and(|v| {
                (v.source == "default" || v.source.starts_with("inherited")) && Path::new(&v.exact) == dir
            })
        })
        .map(|(_, dir)| dir)
        .filter(|d| d != Path::new("/"))
        .collect();
    out.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    out
}

fn destroy(state: &State, name: &str, force: bool) -> Result<Response, String> {
    state.pool(name)?;
    if !state.writers.lock().unwrap_or_else(|p| p.into_inner()).contains_key(name) {
        // As OpenZFS, which cannot mark the labels of a read-only pool destroyed: the pool
        // is let go of, as by an export, and can be imported again.
        release(state, name, false, force)?;
        let mut r = Response::ok(String::new());
        r.stderr = format!(
            "pool '{name}' was imported read-only: it was exported, not destroyed (its labels are unchanged)\n"
        );
        return Ok(r);
    }
    release(state, name, true, force)?;
    Ok(Response::ok(String::new()))
}

fn selected(state: &State, names: &[String]) -> Result<Vec<Arc<Pool>>, String> {
    if names.is_empty() {
        return Ok(state.all_pools());
    }
    names.iter().map(|n| state.pool(n)).collect()
}

fn status(
    state: &State,
    names: &[String],
    verbose: bool,
    unhealthy: bool,
    parsable: bool,
    errors_only: bool,
) -> Result<Response, String> {
    let pools = selected(state, names)?;
    if pools.is_empty() {
        return Ok(Response::ok("no pools available\n".into()));
    }
    let mut out = String::new();
    for p in pools {
        let mut st = crate::rwpool::pool_status(state, &p);
        if crate::rwpool::writer_of(state, p.name()).is_some() {
            st.features_disabled = pool::status::features_disabled(&p);
        }
        if errors_only {
            st.root = pool::status::unhealthy_only(&st.root);
        }
        // As zpool_get_status: a suspended pool, or a device with errors (FAILING_DEV),
        // is not healthy even when every vdev is ONLINE.
        fn counted(v: &pool::status::VdevStatus) -> bool {
            v.read + v.write + v.cksum > 0 || v.children.iter().any(counted)
        }
        if unhealthy
            && st.health == PoolHealth::Online
            && st.errors.is_empty()
            && st.suspended.is_none()
            && !counted(&st.root)
        {
            continue;
        }
        out.push_str(&pool::status::render_status(&st, verbose, parsable));
    }
    if out.is_empty() {
        out = "all pools are healthy\n".into();
    }
    Ok(Response::ok(out))
}

/// `zpool iostat`'s operands: (pools, interval in seconds, count).
pub type Operands = (Vec<String>, Option<f64>, Option<u64>);

/// `zpool iostat`'s trailing `[INTERVAL [COUNT]]` taken off its arguments, as zpool's
/// get_interval_count does: the last argument, when a number, is the interval; when the one
/// before is a number too, they are interval and count. Returns (pools, interval, count).
pub fn split_interval(args: &[String]) -> Result<Operands, String> {
    let number = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit() || c == '.');
    let mut rest = args.to_vec();
    let mut nums = Vec::new();
    while nums.len() < 2 && rest.last().is_some_and(|a| number(a)) {
        nums.insert(0, rest.pop().unwrap_or_default());
    }
    let parse = |s: &str| s.parse::<f64>().map_err(|_| format!("invalid interval '{s}'"));
    let (interval, count) = match nums.as_slice() {
        [] => (None, None),
        [i] => (Some(parse(i)?), None),
        [i, c] => {
            let c: f64 = c.parse().map_err(|_| format!("invalid count '{c}'"))?;
            (Some(parse(i)?), Some(c as u64))
        }
        _ => unreachable!("at most two numbers are taken"),
    };
    if interval == Some(0.0) {
        return Err(
            "interval cannot be zero\nusage: zpool iostat [-vHpy] [-T u|d] [pool ...] [interval [count]]"
                .into(),
        );
    }
    Ok((rest, interval, count))
}

struct IostatHow {
    verbose: bool,
    scripted: bool,
    parsable: bool,
    guids: bool,
    timestamp: Option<String>,
    header: bool,
}

/// The counters behind one report, keyed by vdev (or pool) guid, and when they were read:
/// `T;guid:rops:wops:rbytes:wbytes,...` (T in nanoseconds since the epoch). The client
/// hands a report's back with the next request, which then shows rates over the interval.
fn iostat_snapshot(t: u128, rows: &[(u64, vdev::IoCounts)]) -> String {
    let body: Vec<String> = rows
        .iter()
        .map(|(g, c)| format!("{g}:{}:{}:{}:{}", c.read_ops, c.write_ops, c.read_bytes, c.write_bytes))
        .collect();
    format!("{t};{}", body.join(","))
}

fn parse_iostat_snapshot(s: &str) -> Option<(u128, std::collections::HashMap<u64, vdev::IoCounts>)> {
    let (t, body) = s.split_once(';')?;
    let mut m = std::collections::HashMap::new();
    for item in body.split(',').filter(|x| !x.is_empty()) {
        let v: Vec<u64> = item.split(':').map(|x| x.parse().ok()).collect::<Option<Vec<u64>>>()?;
        let [g, ro, wo, rb, wb] = v[..] else { return None };
        m.insert(g, vdev::IoCounts { read_ops: ro, write_ops: wo, read_bytes: rb, write_bytes: wb });
    }
    Some((t.parse().ok()?, m))
}

/// Marks the snapshot line of an iostat response's stderr (the client takes it out).
pub const IOSTAT_SNAPSHOT: &str = "rzfs-iostat-snapshot ";

/// One `zpool iostat` report (zpool_do_iostat's default columns): since each vdev was
/// opened, or, given the previous report's counters (`prev`), over the time since it.
fn iostat(state: &State, names: &[String], how: &IostatHow, prev: Option<&str>) -> Result<Response, String> {
    let pools = selected(state, names)?;
    if pools.is_empty() {
        let mut r = Response::ok(String::new());
        r.stderr = "no pools available\n".into();
        r.exit = 1;
        return Ok(r);
    }
    let prev_given = prev.is_some();
    let prev = match prev.filter(|p| !p.is_empty()) {
        Some(p) => Some(parse_iostat_snapshot(p).ok_or("invalid previous iostat counters")?),
        None => None,
    };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let now_ns = now.as_nanos();
    // Each pool's rows, with the seconds its rates are over.
    let mut reports = Vec::new();
    for p in &pools {
        let (pool_space, tops) = match crate::rwpool::writer_of(state, p.name()) {
            Some(rw) => {
                let (size, alloc) = rw.spa.raw_space();
                (Some((alloc, size.saturating_sub(alloc))), rw.spa.top_space())
            }
            None => (space_of(state, p).map(|s| (s.alloc, s.size.saturating_sub(s.alloc))), Vec::new()),
        };
        let top_space = |id: u64| tops.iter().find(|t| t.0 == id).map(|t| (t.2, t.1.saturating_sub(t.2)));
        let mut rows = pool::status::iostat_rows(p, pool_space, &top_space);
        // Cache devices: what the second-level cache holds on them and its I/O.
        if let Some(rw) = crate::rwpool::writer_of(state, p.name()) {
            for c in rw.spa.cache_stats() {
                if let Some(r) = rows.iter_mut().find(|r| r.guid == c.guid && r.depth > 0) {
                    r.io = c.io;
                    r.space = Some((c.used, c.capacity.saturating_sub(c.used)));
                }
            }
        }
        let since_open = p.tops.first().map(|t| t.opened().elapsed().as_secs_f64()).unwrap_or(0.0);
        reports.push((rows, since_open));
    }
    let snapshot: Vec<(u64, vdev::IoCounts)> = reports
        .iter()
        .flat_map(|(rows, _)| rows.iter().filter(|r| !r.class).map(|r| (r.guid, r.io)))
        .collect();
    let name_of = |r: &pool::status::IoRow| {
        if how.guids && r.depth > 0 {
            r.guid.to_string()
        } else {
            r.name.clone()
        }
    };
    let width = if how.parsable { 15 } else { 5 };
    // The name column: the longest (indented) name, at least 10, at most what leaves the
    // 42 columns of numbers an 80-column line (zpool's get_namewidth_iostat).
    let namewidth = reports
        .iter()
        .flat_map(|(rows, _)| rows.iter().filter(|r| (how.verbose || r.depth == 0) && !r.class))
        .map(|r| name_of(r).len() + 2 * r.depth)
        .max()
        .unwrap_or(0)
        .clamp(10, 38);
    let dashes = {
        let mut d = "-".repeat(namewidth);
        for _ in 0..6 {
            d.push_str("  ");
            d.push_str(&"-".repeat(width));
        }
        d.push('\n');
        d
    };
    let mut out = String::new();
    match how.timestamp.as_deref() {
        None => {}
        Some("u") => out.push_str(&format!("{}\n", now.as_secs())),
        Some("d") => out.push_str(&format!("{}\n", crate::format::ctime_secs(now.as_secs()))),
        Some(other) => return Err(format!("invalid timestamp format '{other}': use u or d")),
    }
    if how.header && !how.scripted {
        // Labels centred over their two columns, as zpool's print_iostat_labels places them.
        let col2 = 2 * width + 2;
        let mut top = " ".repeat(namewidth);
        for l in ["capacity", "operations", "bandwidth"] {
            let start = (col2 / 2).saturating_sub(l.len() / 2);
            top.push_str(&format!(
                "  {}{l}{}",
                " ".repeat(start),
                " ".repeat(col2.saturating_sub(start + l.len()))
            ));
        }
        out.push_str(top.trim_end());
        out.push('\n');
        out.push_str(&format!("{:<namewidth$}", "pool"));
        for l in ["alloc", "free", "read", "write", "read", "write"] {
            out.push_str(&format!("  {l:>width$}"));
        }
        out.push('\n');
        out.push_str(&dashes);
    }
    let num = |v: u64| crate::format::size(v, how.parsable);
    for (rows, since_open) in &reports {
        for r in rows.iter().filter(|r| how.verbose || r.depth == 0) {
            if r.class {
                // A class heading: its name and a dash in every column.
                if how.verbose && !how.scripted {
                    out.push_str(&format!("{:<namewidth$}", r.name));
                    for _ in 0..6 {
                        out.push_str(&format!("  {:>width$}", "-"));
                    }
                    out.push('\n');
                }
                continue;
            }
            let (io, secs) = match prev.as_ref() {
                Some((t, m)) => {
                    let old = m.get(&r.guid).copied().unwrap_or_default();
                    let secs = (now_ns.saturating_sub(*t)) as f64 / 1e9;
                    let d = vdev::IoCounts {
                        read_ops: r.io.read_ops.saturating_sub(old.read_ops),
                        write_ops: r.io.write_ops.saturating_sub(old.write_ops),
                        read_bytes: r.io.read_bytes.saturating_sub(old.read_bytes),
                        write_bytes: r.io.write_bytes.saturating_sub(old.write_bytes),
                    };
                    (d, secs)
                }
                None => (r.io, *since_open),
            };
            // Rates per second (zpool scales by one only when no time has passed).
            let scale = if secs > 0.0 { 1.0 / secs } else { 1.0 };
            let rate = |v: u64| (v as f64 * scale) as u64;
            let na = if how.parsable { "0" } else { "-" };
            let (alloc, free) = match r.space {
                Some((a, f)) => (num(a), num(f)),
                None => (na.to_string(), na.to_string()),
            };
            let cells = [
                alloc,
                free,
                num(rate(io.read_ops)),
                num(rate(io.write_ops)),
                num(rate(io.read_bytes)),
                num(rate(io.write_bytes)),
            ];
            let name = name_of(r);
            if how.scripted {
                out.push_str(&name);
                for c in &cells {
                    out.push('\t');
                    out.push_str(c);
                }
            } else {
                let indent = 2 * r.depth;
                out.push_str(&format!("{}{name}", " ".repeat(indent)));
                out.push_str(&" ".repeat(namewidth.saturating_sub(indent + name.len())));
                for c in &cells {
                    out.push_str(&format!("  {c:>width$}"));
                }
            }
            out.push('\n');
        }
        if how.verbose && !how.scripted {
            out.push_str(&dashes);
        }
    }
    if reports.len() > 1 && !how.verbose && !how.scripted {
        out.push_str(&dashes);
    }
    if how.verbose {
        out.push('\n');
    }
    let mut r = Response::ok(out);
    if prev_given {
        r.stderr = format!("{IOSTAT_SNAPSHOT}{}\n", iostat_snapshot(now_ns, &snapshot));
    }
    Ok(r)
}

/// `zpool labelclear [-f] DEVICE` (zpool_do_labelclear): wipes the four labels, unless the
/// device belongs to a pool imported here (only an offline device of one, with -f), to an
/// exported pool or to a pool some other host may have imported (both need -f). A device
/// without labels is wiped all the same.
fn labelclear(state: &State, device: &str, force: bool, cwd: &Path) -> Result<Response, String> {
    use ondisk::label::PoolState;
    let path = if device.starts_with('/') {
        PathBuf::from(device)
    } else if cwd.join(device).exists() {
        cwd.join(device)
    } else {
        Path::new("/dev").join(device)
    };
    if !path.exists() {
        return Err(format!("failed to find device {device}, try specifying absolute path instead"));
    }
    let shown = path.display().to_string();
    let owner = pool::discover::label_owner(&path).map_err(|e| format!("failed to open {shown}: {e}"))?;
    // A hot spare of a pool imported here is in use whatever its label says.
    for p in state.all_pools() {
        if let Some(rw) = crate::rwpool::writer_of(state, p.name()) {
            if rw.spa.read(|w| w.spare_named(&shown).is_some()) {
                return Err(format!("{shown} is a member (SPARE) of pool \"{}\"", p.name()));
            }
            if rw.spa.read(|w| w.cache_named(&shown).is_some()) {
                return Err(format!("{shown} is a member (L2CACHE) of pool \"{}\"", p.name()));
            }
        }
    }
    let mut exclusive = true;
    if let Some(cfg) = owner {
        let name = cfg.name.clone().unwrap_or_default();
        let here = cfg.pool_guid.and_then(|g| state.all_pools().into_iter().find(|p| p.guid() == g));
        match (cfg.state, here) {
            (PoolState::Destroyed, _) => {}
            // An aux label (a spare or cache device no pool imported here lists, as checked
            // above) is free, as zpool_in_use finds it.
            (PoolState::Spare | PoolState::L2Cache, _) => {}
            (PoolState::Exported, _) if force => {}
            (PoolState::Exported, _) => {
                return Err(format!(
                    "use '-f' to override the following error:\n{shown} is a member of exported pool \"{name}\""
                ))
            }
            (_, Some(p)) => {
                let offline = crate::rwpool::writer_of(state, p.name()).is_some_and(|rw| {
                    rw.spa.read(|w| w.find_vdev(&shown).is_some_and(|v| v.offline() != vdev::Offline::No))
                });
                if !(force && offline) {
                    let hint = if force { ". Offline the disk first to clear its label." } else { "" };
                    return Err(format!("{shown} is a member (ACTIVE) of pool \"{}\"{hint}", p.name()));
                }
                // The daemon holds the pool's devices itself.
                exclusive = false;
            }
            (_, None) if force => {}
            (_, None) => {
                return Err(format!(
                    "use '-f' to override the following error:\n{shown} is a member of potentially active pool \"{name}\""
                ))
            }
        }
    }
    // Nothing to clear is an error, as zpool_clear_label finding no valid label (a label
    // of no pool, such as a detached device's txg-0 one, is cleared without -f).
    if !pool::discover::has_clearable_label(&path).map_err(|e| format!("failed to open {shown}: {e}"))? {
        return Err(format!("failed to clear label for {shown}"));
    }
    pool::discover::clear_device_labels(&path, exclusive)
        .map_err(|e| format!("failed to clear label for {shown}: {e}"))?;
    Ok(Response::ok(String::new()))
}

/// The user properties (`module:name`) of pool `p`, by name.
fn pool_user_props(p: &Pool) -> Vec<(String, String)> {
    let dir = pool::import::DMU_POOL_DIRECTORY_OBJECT;
    let Some(obj) = zap::lookup_u64(&p.mos, dir, "pool_props").ok().flatten() else { return Vec::new() };
    let mut v: Vec<(String, String)> = zap::list(&p.mos, obj)
        .unwrap_or_default()
        .into_iter()
        .map(|e| (String::from_utf8_lossy(&e.name).into_owned(), e.string_value()))
        .filter(|(k, _)| dsl::props::is_user_prop(k))
        .collect();
    v.sort();
    v
}

/// The legacy pool versions `zpool upgrade -v` lists (zpool_main.c's table).
const LEGACY_VERSIONS: &[&str] = &[
    "Initial ZFS version",
    "Ditto blocks (replicated metadata)",
    "Hot spares and double parity RAID-Z",
    "zpool history",
    "Compression using the gzip algorithm",
    "bootfs pool property",
    "Separate intent log devices",
    "Delegated administration",
    "refquota and refreservation properties",
    "Cache devices",
    "Improved scrub performance",
    "Snapshot properties",
    "snapused property",
    "passthrough-x aclinherit",
    "user/group space accounting",
    "stmf property support",
    "Triple-parity RAID-Z",
    "Snapshot user holds",
    "Log device removal",
    "Compression using zle (zero-length encoding)",
    "Deduplication",
    "Received properties",
    "Slim ZIL",
    "System attributes",
    "Improved scrub stats",
    "Improved snapshot deletion performance",
    "Improved snapshot creation performance",
    "Multiple vdev replacements",
];

/// `zpool upgrade [-v] [-V VERSION] [-a | POOL...]` in zpool_do_upgrade's words. "Supported"
/// features are those rzfs writes; pools at a legacy version (imported read-only here) are
/// listed but cannot be upgraded by rzfs yet.
fn upgrade(
    state: &State,
    all: bool,
    verbose: bool,
    version: Option<String>,
    names: &[String],
) -> Result<Response, String> {
    use pool::feature_table as ft;
    let target = match &version {
        None => ondisk::uberblock::SPA_VERSION_FEATURES,
        Some(v) => match v.parse::<u64>() {
            Ok(n) if ondisk::uberblock::spa_version_is_supported(n) => n,
            _ => {
                return Ok(Response::usage(format!(
                    "invalid version '{v}'\nusage: zpool upgrade [-V version] <-a | pool ...>"
                )))
            }
        },
    };
    if version.is_some() && !all && names.is_empty() {
        return Ok(Response::usage("-V option is incompatible with other arguments"));
    }
    if verbose && (all || !names.is_empty()) {
        return Ok(Response::usage("-v option is incompatible with other arguments"));
    }
    if all && !names.is_empty() {
        return Ok(Response::usage("-a option should not be used along with a pool name"));
    }
    let mut out = String::from("This system supports ZFS pool feature flags.\n\n");
    if verbose {
        out.push_str("The following features are supported:\n\nFEAT DESCRIPTION\n");
        out.push_str(&format!("{}\n", "-".repeat(61)));
        for f in ft::all().iter().filter(|f| ft::implemented_for_write(f.name)) {
            let ro = if f.readonly_compat() { " (read-only compatible)" } else { "" };
            out.push_str(&format!("{:<37}{ro}\n     {}\n", f.name, f.description));
        }
        out.push_str("\nThe following legacy versions are also supported:\n\nVER  DESCRIPTION\n");
        out.push_str(&format!("---  {}\n", "-".repeat(56)));
        for (i, d) in LEGACY_VERSIONS.iter().enumerate() {
            out.push_str(&format!(" {:<3} {d}\n", i + 1));
        }
        out.push_str("\nFor more information on a particular version, including supported releases,\nsee the ZFS Administration Guide.\n\n");
        return Ok(Response::ok(out));
    }
    let legacy = |p: &Pool| p.version() < ondisk::uberblock::SPA_VERSION_FEATURES;
    if !all && names.is_empty() {
        // The listing: legacy pools, then pools lacking supported features.
        let pools = state.all_pools();
        let old: Vec<&Arc<Pool>> = pools.iter().filter(|p| legacy(p)).collect();
        if old.is_empty() {
            out.push_str("All pools are formatted using feature flags.\n\n");
        } else {
            out.push_str("The following pools are formatted with legacy version numbers and can\nbe upgraded to use feature flags.  After being upgraded, these pools\nwill no longer be accessible by software that does not support feature\nflags.\n\nNote that setting a pool's 'compatibility' feature to 'legacy' will\ninhibit upgrades.\n\nVER  POOL\n---  ------------\n");
            for p in &old {
                out.push_str(&format!("{:2}   {}\n", p.version(), p.name()));
            }
            out.push_str("\nUse 'zpool upgrade -v' for a list of available legacy versions.\n");
        }
        let mut first = true;
        for p in pools.iter().filter(|p| !legacy(p)) {
            let enabled = pool::status::enabled_features(p);
            let missing: Vec<&str> = ft::all()
                .iter()
                .filter(|f| ft::implemented_for_write(f.name) && !enabled.contains(f.name))
                .map(|f| f.name)
                .collect();
            if missing.is_empty() {
                continue;
            }
            if first {
                out.push_str("\nSome supported features are not enabled on the following pools. Once a\nfeature is enabled the pool may become incompatible with software\nthat does not support the feature. See zpool-features(7) for details.\n\nNote that the pool 'compatibility' feature can be used to inhibit\nfeature upgrades.\n\nFeatures marked with (*) are not applied automatically on upgrade, and\nmust be applied explicitly with zpool-set(7).\n\nPOOL  FEATURE\n---------------\n");
                first = false;
            }
            out.push_str(&format!("{}\n", p.name()));
            for m in missing {
                out.push_str(&format!("      {m}\n"));
            }
        }
        out.push_str(if first {
            "Every feature flags pool has all supported and requested features enabled.\n"
        } else {
            "\n"
        });
        return Ok(Response::ok(out));
    }
    let pools = if all { state.all_pools() } else { selected(state, names)? };
    let mut changed_any = false;
    for p in &pools {
        let cur = p.version();
        if cur > target {
            out.push_str(&format!(
                "Pool '{}' is already formatted using more current version '{cur}'.\n\n",
                p.name()
            ));
            continue;
        }
        if target != ondisk::uberblock::SPA_VERSION_FEATURES && cur == target {
            out.push_str(&format!("Pool '{}' is already formatted using version {target}.\n\n", p.name()));
            continue;
        }
        if cur != target || crate::rwpool::writer_of(state, p.name()).is_none() {
            // Legacy versions and read-only imports: rzfs writes neither.
            return Err(format!(
                "cannot upgrade '{}': {}",
                p.name(),
                if cur != target {
                    "upgrading pools of a legacy version is not supported by rzfs yet"
                } else {
                    "pool is imported read-only"
                }
            ));
        }
        let todo = pool::status::features_to_enable(p);
        for (i, f) in todo.iter().enumerate() {
            crate::rwpool::set_pool_prop(state, &format!("feature@{}=enabled", f.name), p.name())?;
            if i == 0 {
                out.push_str(&format!("Enabled the following features on '{}':\n", p.name()));
            }
            out.push_str(&format!("  {}\n", f.name));
        }
        if !todo.is_empty() {
            changed_any = true;
            out.push('\n');
        } else if !all {
            out.push_str(&format!(
                "Pool '{}' already has all supported and requested features enabled.\n",
                p.name()
            ));
        }
    }
    if all && !changed_any {
        out.push_str("All pools are already formatted using feature flags.\n\nEvery feature flags pool already has all supported and requested features enabled.\n");
    }
    Ok(Response::ok(out))
}

/// `zpool sync [-f] [POOL]...`: pools imported read-only have nothing to write. `-f`
/// syncs a txg even when nothing is dirty, rewriting the configuration (as
/// zfs_ioc_pool_sync dirties the root vdev's config when forced).
/// `zpool freeze POOL` (`spa_freeze`): for tests of what an unclean stop leaves.
fn freeze(state: &State, name: &str) -> Result<Response, String> {
    state.pool(name).map_err(|_| format!("cannot open '{name}': no such pool"))?;
    let rw = crate::rwpool::writer_of(state, name)
        .ok_or_else(|| format!("cannot freeze '{name}': pool is read-only"))?;
    rw.spa.freeze().map_err(|e| format!("cannot freeze '{name}': {e}"))?;
    Ok(Response::ok(String::new()))
}

fn sync(state: &State, names: &[String], force: bool) -> Result<Response, String> {
    for p in selected(state, names)? {
        if let Some(rw) = crate::rwpool::writer_of(state, p.name()) {
            if force {
                rw.spa.read(|w| w.config_dirty = true);
            }
            rw.sync()?;
        }
    }
    Ok(Response::ok(String::new()))
}

const LIST_DEFAULT: &[&str] =
    &["name", "size", "alloc", "free", "ckpoint", "expandsz", "frag", "cap", "dedup", "health", "altroot"];

/// zpool's width of a fixed-width column (`zprop_width`: numbers take at least 5, the
/// health 8), whatever the values shown.
fn list_min_width(col: &str) -> usize {
    match col {
        "size" | "alloc" | "allocated" | "free" | "frag" | "fragmentation" | "cap" | "capacity" | "dedup"
        | "dedupratio" => 5,
        "ckpoint" | "checkpoint" => 7,
        "expandsz" | "expandsize" => 8,
        "health" => 8,
        _ => 0,
    }
}

/// The rows `zpool list -v` adds under a pool (`collect_list_stats`): its vdevs in status
/// order, each top-level one with its space, the log class and the spares under headings
/// of dashes. Cells: name (indented two spaces a level), size, alloc, free, ckpoint,
/// expandsz, frag, cap, dedup, health.
fn list_vdev_rows(state: &State, p: &Pool, parsable: bool) -> Vec<Vec<String>> {
    let st = crate::rwpool::pool_status(state, p);
    let spaces: Vec<(u64, u64, u64)> = match crate::rwpool::writer_of(state, p.name()) {
        Some(rw) => rw.spa.top_space(),
        None => pool::status::top_spaces(p).unwrap_or_default(),
    };
    let tops: Vec<&Arc<vdev::Vdev>> = p.tops.iter().filter(|t| *t.kind() != vdev::VdevKind::Hole).collect();
    let dash = || "-".to_string();
    let heading = |name: &str| {
        let mut r = vec![name.to_string()];
        r.extend((0..9).map(|_| dash()));
        r
    };
    fn walk(v: &pool::status::VdevStatus, depth: usize, out: &mut Vec<Vec<String>>) {
        let mut r = vec![format!("{}{}", "  ".repeat(depth), v.name)];
        r.extend((0..8).map(|_| "-".to_string()));
        r.push(v.health.as_str().to_string());
        out.push(r);
        for c in &v.children {
            walk(c, depth + 1, out);
        }
    }
    let mut rows = Vec::new();
    let mut logs = Vec::new();
    for (t, s) in tops.iter().zip(&st.root.children) {
        let mut sub = Vec::new();
        walk(s, 1, &mut sub);
        if let Some((_, total, alloc)) = spaces.iter().find(|x| x.0 == t.id()).copied().filter(|x| x.1 > 0) {
            let cap = alloc.saturating_mul(10000) / total;
            sub[0][1] = size(total, parsable);
            sub[0][2] = size(alloc, parsable);
            sub[0][3] = size(total.saturating_sub(alloc), parsable);
            sub[0][6] = if parsable { "0".into() } else { "0%".into() };
            // zpool prints a vdev's capacity in hundredths of a percent.
            sub[0][7] = if parsable {
                (cap / 100).to_string()
            } else if cap < 1000 {
                format!("{:.2}%", cap as f64 / 100.0)
            } else if cap < 10000 {
                format!("{:.1}%", cap as f64 / 100.0)
            } else {
                format!("{:.0}%", cap as f64 / 100.0)
            };
        }
        if s.log {
            logs.extend(sub);
        } else {
            rows.extend(sub);
        }
    }
    if !logs.is_empty() {
        rows.push(heading("logs"));
        rows.extend(logs);
    }
    // The aux devices under their headings: name and state only.
    let caches: Vec<(&str, &str)> = st.caches.iter().map(|c| (c.name.as_str(), c.state)).collect();
    let spares: Vec<(&str, &str)> = st.spares.iter().map(|s| (s.name.as_str(), s.state)).collect();
    for (title, devs) in [("cache", caches), ("spare", spares)] {
        if !devs.is_empty() {
            rows.push(heading(title));
        }
        for (name, state) in devs {
            let mut r = vec![format!("  {name}")];
            r.extend((0..8).map(|_| dash()));
            r.push(state.to_string());
            rows.push(r);
        }
    }
    rows
}

fn list(
    state: &State,
    names: &[String],
    scripted: bool,
    parsable: bool,
    verbose: bool,
    props: &[String],
) -> Result<Response, String> {
    let pools = selected(state, names)?;
    if pools.is_empty() && names.is_empty() {
        // Scripts (`-H`) get nothing, as from zpool.
        let msg = if scripted { String::new() } else { "no pools available\n".into() };
        return Ok(Response::ok(msg));
    }
    let cols: Vec<String> =
        if props.is_empty() { LIST_DEFAULT.iter().map(|s| s.to_string()).collect() } else { props.to_vec() };
    // zpool right-aligns the health too (`zpool_prop_align_right`).
    let right: Vec<bool> = cols.iter().map(|c| !matches!(c.as_str(), "name" | "altroot")).collect();
    let hdr: Vec<&str> = cols.iter().map(|s| s.as_str()).collect();
    let mut t = Table::new(&hdr, &right);
    t.min_width = cols.iter().map(|c| list_min_width(c)).collect();
    for p in pools {
        let sp = space_of(state, &p);
        let writable = crate::rwpool::writer_of(state, p.name()).is_some();
        let health = crate::rwpool::health_str(state, &p);
        let row = cols
            .iter()
            .map(|c| {
                // zpool list's short column names for the properties `zpool get` shows.
                let prop = match c.as_str() {
                    "alloc" => "allocated",
                    "ckpoint" => "checkpoint",
                    "frag" => "fragmentation",
                    "cap" => "capacity",
                    "dedup" => "dedupratio",
                    "expandsz" => "expandsize",
                    other => other,
                };
                let esize = if prop == "expandsize" { expand_size(state, p.name()) } else { None };
                pool_prop(&p, &health, writable, sp, esize, prop, parsable).map(|(v, _)| v)
            })
            .collect::<Result<Vec<String>, String>>()?;
        t.rows.push(row);
        // The vdev rows have zpool's default columns, whatever -o chose.
        if verbose {
            let rows = list_vdev_rows(state, &p, parsable);
            if scripted {
                // zpool -H: a vdev's row is its name (no indent) after a tab, then its
                // values; a class heading keeps its padded line of dashes.
                let width = rows.iter().map(|r| r[0].len()).chain([4]).max().unwrap_or(4);
                for r in rows {
                    if r[0].starts_with(' ') {
                        let mut cells = vec![String::new(), r[0].trim_start().to_string()];
                        cells.extend(r[1..].iter().cloned());
                        t.rows.push(cells);
                    } else {
                        t.rows.push(vec![format!(
                            "{:<width$}      -      -      -        -         -      -      -      -         -",
                            r[0]
                        )]);
                    }
                }
            } else {
                t.rows.extend(rows);
            }
        }
    }
    Ok(Response::ok(t.render(scripted)))
}

/// What `zpool get all` lists before the features, in zpool's order (`name` is not among
/// them: it is the NAME column).
const GET_ALL: &[&str] = &[
    "size",
    "capacity",
    "altroot",
    "health",
    "guid",
    "load_guid",
    "version",
    "bootfs",
    "delegation",
    "autoreplace",
    "cachefile",
    "failmode",
    "listsnapshots",
    "autoexpand",
    "dedupratio",
    "free",
    "allocated",
    "readonly",
    "ashift",
    "comment",
    "expandsize",
    "freeing",
    "fragmentation",
    "leaked",
    "multihost",
    "checkpoint",
    "autotrim",
    "compatibility",
    "bcloneused",
    "bclonesaved",
    "bcloneratio",
    "dedup_table_size",
    "dedup_table_quota",
    "last_scrubbed_txg",
];

/// The bytes a hidden directory of the pool's root (`$FREE`, `$LEAK`) holds; None when it
/// does not exist.
fn hidden_dir_used(p: &Pool, name: &str) -> Option<u64> {
    let dsl = p.dsl();
    let root = dsl.dir_phys(dsl.root_dir_obj().ok()?).ok()?;
    let obj = zap::lookup_u64(&p.mos, root.child_dir_zapobj, name).ok()??;
    Some(dsl.dir_phys(obj).ok()?.used_bytes)
}

/// (value, source) of one pool property.
/// Size and allocation of a pool: from the allocator of a pool held read-write, else from
/// its space maps; `None` when they cannot be read (failing devices), which the listings
/// show as `-` rather than failing — `zpool list` must work most when a pool is in trouble.
fn space_of(state: &State, p: &Pool) -> Option<pool::status::Space> {
    if let Some(rw) = crate::rwpool::writer_of(state, p.name()) {
        let (size, alloc) = rw.spa.raw_space();
        return Some(pool::status::Space { size, alloc });
    }
    pool::status::space(p).ok()
}

/// One pool property. `writable`: the daemon holds the pool read-write (the read view is
/// always opened read-only, so `p.opts.readonly` does not say); `sp`: see [`space_of`];
/// `esize`: see [`expand_size`].
fn pool_prop(
    p: &Pool,
    health: &str,
    writable: bool,
    sp: Option<pool::status::Space>,
    esize: Option<u64>,
    prop: &str,
    parsable: bool,
) -> Result<(String, String), String> {
    let dflt = |v: &str| Ok((v.to_string(), "default".to_string()));
    let none = |v: String| Ok((v, "-".to_string()));
    let zap_str = |name: &str| -> Option<String> {
        let dir = pool::import::DMU_POOL_DIRECTORY_OBJECT;
        let obj = zap::lookup_u64(&p.mos, dir, "pool_props").ok()??;
        zap::lookup(&p.mos, obj, name).ok()?.map(|e| e.string_value())
    };
    let zap_u64 = |name: &str| -> Option<u64> {
        let dir = pool::import::DMU_POOL_DIRECTORY_OBJECT;
        let obj = zap::lookup_u64(&p.mos, dir, "pool_props").ok()??;
        zap::lookup_u64(&p.mos, obj, name).ok()?
    };
    match prop {
        "size" | "allocated" | "free" | "capacity" if sp.is_none() => none("-".into()),
        "size" => none(size(sp.map_or(0, |s| s.size), parsable)),
        "allocated" => none(size(sp.map_or(0, |s| s.alloc), parsable)),
        "free" => none(size(sp.map_or(0, |s| s.size.saturating_sub(s.alloc)), parsable)),
        "capacity" => {
            let sp = sp.unwrap_or_default();
            let pct = (sp.alloc * 100).checked_div(sp.size).unwrap_or(0);
            none(if parsable { pct.to_string() } else { format!("{pct}%") })
        }
        "health" => none(health.to_string()),
        "guid" => none(p.guid().to_string()),
        "load_guid" => none(p.load_guid.to_string()),
        // Dedup and block cloning are not written by rzfs: their figures are those of a
        // pool that uses neither (zpool_prop.c's defaults).
        "dedup_table_quota" => dflt("auto"),
        "dedup_table_size" => none(size(0, parsable)),
        "bcloneused" | "bclonesaved" => none(size(0, parsable)),
        "bcloneratio" => none(if parsable { "1.00".into() } else { "1.00x".into() }),
        // The txg of the last scrub that finished (the MOS directory's
        // `last_scrubbed_txg`, OpenZFS 2.3), 0 before any.
        "last_scrubbed_txg" => {
            let dir = pool::import::DMU_POOL_DIRECTORY_OBJECT;
            none(zap::lookup_u64(&p.mos, dir, "last_scrubbed_txg").ok().flatten().unwrap_or(0).to_string())
        }
        "version" => none(if p.version() >= 5000 { "-".into() } else { p.version().to_string() }),
        "name" => none(p.name().to_string()),
        "readonly" => none(if writable { "off".into() } else { "on".into() }),
        "dedupratio" => none(if parsable { "1.00".into() } else { "1.00x".into() }),
        "fragmentation" => none(if parsable { "0".into() } else { "0%".into() }),
        "expandsize" => none(esize.map_or("-".into(), |e| size(e, parsable))),
        "checkpoint" => none("-".into()),
        // The bytes a destroy has yet to free, and those a destroy found it could not:
        // what the hidden $FREE and $LEAK directories hold (spa_prop_get_config).
        "freeing" | "leaked" => {
            let hidden =
                if prop == "freeing" { ondisk::dsl::FREE_DIR_NAME } else { ondisk::dsl::LEAK_DIR_NAME };
            none(size(hidden_dir_used(p, hidden).unwrap_or(0), parsable))
        }
        // What new vdevs get by default (0: each device's own), as `zpool create -o` or
        // `zpool set` stored it; not the ashift of the vdevs there are.
        "ashift" => match zap_u64("ashift") {
            Some(a) => Ok((a.to_string(), "local".into())),
            None => dflt("0"),
        },
        "comment" => match zap_str("comment") {
            Some(c) => Ok((c, "local".into())),
            None => dflt("-"),
        },
        "compatibility" => match zap_str("compatibility") {
            Some(c) if c != "off" => Ok((c, "local".into())),
            _ => dflt("off"),
        },
        "altroot" => match &p.opts.altroot {
            Some(r) => Ok((r.display().to_string(), "local".to_string())),
            None => dflt("-"),
        },
        "cachefile" => match &p.opts.altroot {
            // An altroot implies cachefile=none, as in OpenZFS.
            Some(_) => Ok(("none".to_string(), "local".to_string())),
            None => dflt("-"),
        },
        "bootfs" => match zap_u64("bootfs") {
            Some(obj) => {
                let name =
                    p.dsl().list().ok().and_then(|l| l.into_iter().find(|d| d.ds_obj == obj)).map(|d| d.name);
                Ok((name.unwrap_or_else(|| "-".into()), "local".into()))
            }
            None => dflt("-"),
        },
        "failmode" => match zap_u64("failmode") {
            Some(v) => Ok((
                ["wait", "continue", "panic"].get(v as usize).unwrap_or(&"wait").to_string(),
                "local".into(),
            )),
            None => dflt("wait"),
        },
        "delegation" | "autoreplace" | "listsnapshots" | "autoexpand" | "multihost" | "autotrim" => {
            match zap_u64(prop) {
                Some(v) => Ok((if v != 0 { "on" } else { "off" }.to_string(), "local".into())),
                None => dflt(if prop == "delegation" { "on" } else { "off" }),
            }
        }
        // A user property (`module:name`, OpenZFS 2.2): the pool_props ZAP's string.
        user if dsl::props::is_user_prop(user) => match zap_str(user) {
            Some(v) => Ok((v, "local".into())),
            None => dflt("-"),
        },
        other if other.starts_with("feature@") => {
            let f = pool::feature_table::by_name(&other["feature@".len()..])
                .ok_or_else(|| format!("bad property list: invalid property '{other}'"))?;
            none(match feature_refcount(p, f.guid) {
                Some(0) => "enabled".into(),
                Some(_) => "active".into(),
                None => "disabled".into(),
            })
            .map(|(v, _)| (v, "local".into()))
        }
        // A feature the pool lists that rzfs does not know (`zpool_prop_get_feature`):
        // `inactive` while its refcount is 0, `readonly` once active (the pool could then only
        // have been imported read-only).
        other if other.starts_with("unsupported@") => {
            let guid = &other["unsupported@".len()..];
            let state =
                if pool::feature_table::by_name(guid).is_some() { None } else { feature_refcount(p, guid) };
            Ok(match state {
                Some(0) => ("inactive".into(), "local".into()),
                Some(_) => ("readonly".into(), "local".into()),
                None => ("-".into(), "-".into()),
            })
        }
        other => Err(format!("bad property list: invalid property '{other}'")),
    }
}

/// What `zpool import` answers for a pool with features this system cannot read (or write,
/// for a read-write import): the list on stdout (`zpool_print_unsup_feat`, with the
/// read-only hint when only writing needs them) and zpool's error on stderr, exit 1.
fn unsupported_import(name: &str, e: &pool::PoolError) -> Response {
    let pool::PoolError::UnsupportedFeatures { features, readonly_ok, .. } = e else {
        return Response::err(format!("cannot import '{name}': {e}"));
    };
    let mut out = String::from("This pool uses the following feature(s) not supported by this system:\n");
    for (guid, desc) in features {
        if desc.is_empty() {
            out.push_str(&format!("\t{guid}\n"));
        } else {
            out.push_str(&format!("\t{guid} ({desc})\n"));
        }
    }
    if *readonly_ok {
        out.push_str(
            "All unsupported features are only required for writing to the pool.\n\
             The pool can be imported using '-o readonly=on'.\n",
        );
    }
    let mut r = Response::err(format!("cannot import '{name}': unsupported version or feature"));
    r.stdout = out;
    r
}

/// The refcount the pool's feature ZAPs give feature `guid`, if it lists it./// The refcount the pool's feature ZAPs give feature `guid`, if it lists it.
fn feature_refcount(p: &Pool, guid: &str) -> Option<u64> {
    let dir = pool::import::DMU_POOL_DIRECTORY_OBJECT;
    ["features_for_read", "features_for_write"].iter().find_map(|key| {
        let obj = zap::lookup_u64(&p.mos, dir, key).ok().flatten()?;
        zap::lookup_u64(&p.mos, obj, guid).ok().flatten()
    })
}

/// The features the pool lists that rzfs does not know (`zpool get all` shows them as
/// `unsupported@GUID`).
fn unknown_features(p: &Pool) -> Vec<String> {
    let dir = pool::import::DMU_POOL_DIRECTORY_OBJECT;
    let mut out = Vec::new();
    for key in ["features_for_read", "features_for_write"] {
        let Some(obj) = zap::lookup_u64(&p.mos, dir, key).ok().flatten() else { continue };
        for e in zap::list(&p.mos, obj).unwrap_or_default() {
            let guid = e.name_string();
            if pool::feature_table::by_name(&guid).is_none() && !out.contains(&guid) {
                out.push(guid);
            }
        }
    }
    out.sort();
    out
}

/// The columns `zpool get -o FIELDS` asks for (all four by default) and an empty table with
/// their headers; shared by pool and vdev properties.
pub(crate) fn get_table(fields: &[String]) -> (Vec<String>, Table) {
    let cols: Vec<String> = if fields.is_empty() {
        ["name", "property", "value", "source"].iter().map(|s| s.to_string()).collect()
    } else {
        fields.to_vec()
    };
    let hdr: Vec<String> = cols.iter().map(|c| c.to_uppercase()).collect();
    let hdr_ref: Vec<&str> = hdr.iter().map(|s| s.as_str()).collect();
    let t = Table::new(&hdr_ref, &vec![false; cols.len()]);
    (cols, t)
}

/// One row of `zpool get`, in the columns of [`get_table`].
pub(crate) fn get_row(
    cols: &[String],
    name: &str,
    prop: &str,
    value: &str,
    source: &str,
) -> Result<Vec<String>, String> {
    cols.iter()
        .map(|c| match c.as_str() {
            "name" => Ok(name.to_string()),
            "property" => Ok(prop.to_string()),
            "value" => Ok(value.to_string()),
            "source" => Ok(source.to_string()),
            other => Err(format!("invalid field '{other}'")),
        })
        .collect()
}

fn get(
    state: &State,
    props: &str,
    names: &[String],
    scripted: bool,
    parsable: bool,
    fields: &[String],
) -> Result<Response, String> {
    // `zpool get PROPS POOL VDEV...`: the first name a pool, the others (not all pools) its
    // vdevs, `root` or `all-vdevs`.
    if names.len() >= 2 && !names.iter().all(|n| state.pool(n).is_ok()) {
        let Ok(p) = state.pool(&names[0]) else {
            let mut r = Response::ok(String::new());
            r.stderr = format!("Cannot get properties of {}: no such pool available.\n", names[0]);
            r.exit = 1;
            return Ok(r);
        };
        let vdevs = &names[1..];
        let special = vdevs.len() == 1 && (vdevs[0] == "all-vdevs" || vdevs[0] == "root");
        if !special && !vdevs.iter().all(|n| crate::vdevprops::is_vdev(&p, n)) {
            let bad: Vec<&str> =
                vdevs.iter().filter(|n| !crate::vdevprops::is_vdev(&p, n)).map(|s| s.as_str()).collect();
            return Ok(Response::usage(format!(
                "Expected a list of vdevs in \"{}\", but got:\n{}\n",
                names[0],
                bad.join(" ")
            )));
        }
        return crate::vdevprops::get(state, &p, props, vdevs, scripted, parsable, fields);
    }
    let pools = selected(state, names)?;
    let wanted: Vec<String> = if props == "all" {
        let mut v: Vec<String> = GET_ALL.iter().map(|s| s.to_string()).collect();
        v.extend(pool::feature_table::all().iter().map(|f| format!("feature@{}", f.name)));
        v
    } else {
        props.split(',').map(|s| s.to_string()).collect()
    };
    let (cols, mut t) = get_table(fields);
    for p in pools {
        let health = crate::rwpool::health_str(state, &p);
        let writable = crate::rwpool::writer_of(state, p.name()).is_some();
        let sp = space_of(state, &p);
        // Looks at the devices' sizes: once per pool, only when asked for.
        let esize =
            if wanted.iter().any(|w| w == "expandsize") { expand_size(state, p.name()) } else { None };
        // `all` ends with the pool's user properties, by name.
        let mut wanted = wanted.clone();
        if props == "all" {
            wanted.extend(unknown_features(&p).into_iter().map(|g| format!("unsupported@{g}")));
            wanted.extend(pool_user_props(&p).into_iter().map(|(k, _)| k));
        }
        for prop in &wanted {
            let (value, source) = match prop.as_str() {
                // `-` in the daemon's cache, a path in a file of its own, `none` when
                // kept out (set so, an altroot, a daemon without a cache).
                "cachefile" if writable => match crate::cache::setting(state, p.name()) {
                    crate::cache::Setting::Daemon => ("-".to_string(), "default".to_string()),
                    crate::cache::Setting::None => ("none".to_string(), "local".to_string()),
                    crate::cache::Setting::File(f) => (f.to_string_lossy().into_owned(), "local".to_string()),
                },
                // Read-only imports are never cached.
                "cachefile" => ("none".to_string(), "local".to_string()),
                _ => pool_prop(&p, &health, writable, sp, esize, prop, parsable)?,
            };
            t.rows.push(get_row(&cols, p.name(), prop, &value, &source)?);
        }
    }
    Ok(Response::ok(t.render(scripted)))
}

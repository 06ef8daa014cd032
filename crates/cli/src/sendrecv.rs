//! `rzfs send` and `rzfs receive`: the daemon's side of replication.
//!
//! The client passes its standard output (send) or input (receive) with the request, and
//! the daemon does the stream I/O on it directly (`access::read_request_fds`), as OpenZFS's
//! ioctls take the caller's descriptor. The stream format and the DMU work live in the
//! `send` crate; here: names, checks against the pool, the dataset's life around a receive
//! (created, taken offline, rolled back or destroyed when the stream fails, snapshotted when
//! it ends) and the messages and output of zfs(8).
//!
//! `-I` sends a stream package as libzfs does (a compound BEGIN whose XDR nvlist names the
//! file system and its snapshots, its END, one incremental substream per snapshot, a closing
//! all-zero END), and receive takes such packages for one file system.
//!
//! `-R` sends a replication package the same way: every descendant file system and volume
//! in the header's `fss` (properties, snapshot guids, `parentfromsnap`), parents first,
//! each with its chain of substreams; `-p` a package carrying the properties. Receive takes
//! full and incremental replication packages, placing each substream below the target as
//! its file system lies below the package's top one, and sets each file system's properties
//! with its first substream.
//!
//! An incremental replication stream first renames what the sender renamed (snapshots and
//! file systems, found by their snapshots' guids), and with `-F` destroys what the sender
//! no longer has (snapshots and file systems below the target the stream does not list).
//!
//! Not yet: raw (`-w`) streams and clones inside a replication stream. A receive that
//! fails leaves the target as it was: a new file system is destroyed, an existing one
//! rolled back to the stream's source. With `-F`, a stream that would discard something
//! (a full stream over a file system, an incremental over later snapshots or changes)
//! goes into `FS/%recv` (an empty file system, or a clone of the source snapshot) and is
//! swapped in, the discarded snapshots destroyed, in one txg at its end: a failure before
//! then discards nothing.

use crate::daemon::State;
use crate::proto::Response;
use crate::rwpool::pool_of;
use send::recv::{self, RecvState};
use send::send::SendParams;
use send::stream::*;
use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::os::fd::OwnedFd;
use std::sync::Arc;

/// Options of `zfs send`.
#[derive(Clone, Debug, Default)]
pub struct SendOpts {
    pub from: Option<String>,
    /// `-I`: every snapshot between `from` and the one sent, as a stream package.
    pub intermediates: bool,
    /// `-t TOKEN`: resume the stream a resumable receive kept.
    pub token: Option<String>,
    pub large_blocks: bool,
    pub embed: bool,
    pub compressed: bool,
    pub dry_run: bool,
    pub verbose: bool,
    pub parsable: bool,
    /// `-R`: the file system and its descendants, with properties and every snapshot.
    pub replicate: bool,
    /// `-p`: a package carrying the file system's properties.
    pub props: bool,
    /// `-b`: the properties carried are the received values only.
    pub backup: bool,
    /// `-h`: a package carrying the snapshots' user holds (`snapholds`).
    pub holds: bool,
    /// `-s`: with -R, descendants that lack the snapshot are left out with a warning.
    pub skip_missing: bool,
    /// `-X`: with -R, file systems left out with their descendants.
    pub exclude: Vec<String>,
    /// `--saved`: the partial state a resumable receive kept ([`send_saved`]).
    pub saved: bool,
}

/// Options of `zfs receive`.
#[derive(Clone, Debug, Default)]
pub struct RecvOpts {
    pub force: bool,
    /// `-s`: keep the partial state when the stream breaks off, for `zfs send -t`.
    pub resumable: bool,
    pub no_mount: bool,
    pub discard_first: bool,
    pub last_only: bool,
    pub verbose: bool,
    pub dry_run: bool,
    /// `-o P=V`: set locally on the top file system received (its children inherit it).
    pub set: Vec<String>,
    /// `-x P`: the received value of P does not apply (the effective value is inherited,
    /// or for a property that is not inherited, the received one is dropped).
    pub exclude: Vec<String>,
    /// `-h`: the holds a `send -h` stream carries are not placed.
    pub skip_holds: bool,
    /// `-o origin=SNAP`: a full stream becomes a clone of SNAP (its blocks that the stream
    /// carries again are kept by nop-write); an incremental clone stream takes SNAP as its
    /// origin instead of looking one up by guid.
    pub origin: Option<String>,
    /// `-c`: corrective receive into an existing snapshot ([`heal`]).
    pub heal: bool,
}

/// Properties `receive -o`/`-x` may not name (libzfs `zfs_receive_checkprops`: read-only,
/// set-once, `version`, `volsize`).
const RECV_FIXED_PROPS: &[&str] = &[
    "type",
    "creation",
    "used",
    "available",
    "avail",
    "referenced",
    "refer",
    "compressratio",
    "refcompressratio",
    "mounted",
    "usedbysnapshots",
    "usedbydataset",
    "usedbychildren",
    "usedbyrefreservation",
    "userrefs",
    "written",
    "logicalused",
    "logicalreferenced",
    "lused",
    "lrefer",
    "createtxg",
    "guid",
    "objsetid",
    "clones",
    "receive_resume_token",
    "defer_destroy",
    "inconsistent",
    "snapshot_count",
    "filesystem_count",
    "version",
    "volsize",
    "normalization",
    "utf8only",
    "casesensitivity",
    "ratio",
];

/// Checks `receive -o`/`-x` before the stream is read: each property once, every name
/// valid, every `-o` value one `zfs set` takes.
fn check_cmdline_props(o: &RecvOpts) -> Result<(), String> {
    let mut seen = std::collections::BTreeSet::new();
    let names = o
        .set
        .iter()
        .map(|a| a.split_once('=').map_or(a.as_str(), |(k, _)| k))
        .chain(o.exclude.iter().map(String::as_str));
    for k in names {
        let k = dsl::props::canonical(k);
        if !seen.insert(k.to_string()) {
            return Err(format!("property '{k}' specified multiple times"));
        }
        if k == "origin" {
            if o.exclude.iter().any(|x| x == "origin") {
                return Err("cannot receive: invalid property 'origin'".into());
            }
            continue;
        }
        let known = dsl::props::is_user_prop(k)
            || dsl::props::DEFAULTS.iter().any(|(p, _)| *p == k)
            || dsl::props::parse_value(k, "").is_ok()
            || k == "mountpoint";
        if RECV_FIXED_PROPS.contains(&k) || !known {
            return Err(format!("cannot receive: invalid property '{k}'"));
        }
    }
    let props: Vec<String> = o
        .set
        .iter()
        .filter(|a| a.split_once('=').is_none_or(|(k, _)| dsl::props::canonical(k) != "origin"))
        .cloned()
        .collect();
    crate::rwpool::check_fs_props(&props).map_err(|e| format!("cannot receive: {e}"))
}

/// Pool feature `short`'s reference count, if it is enabled.
fn feature_refcount(p: &pool::Pool, short: &str) -> Option<u64> {
    let f = pool::feature_table::by_name(short)?;
    let dir = pool::import::DMU_POOL_DIRECTORY_OBJECT;
    let key = if f.readonly_compat() { "features_for_write" } else { "features_for_read" };
    let obj = zap::lookup_u64(&p.mos, dir, key).ok().flatten()?;
    zap::lookup_u64(&p.mos, obj, f.guid).ok().flatten()
}

/// Is pool feature `short` active (refcount above zero)?
fn feature_active(p: &pool::Pool, short: &str) -> bool {
    feature_refcount(p, short).is_some_and(|c| c > 0)
}

/// Is per-dataset feature `short` active on dataset object `ds_obj` (a ZAP entry named by
/// the feature's guid in the zapified dataset object; `dsl_dataset_feature_is_active`)?
fn ds_feature_active(p: &pool::Pool, ds_obj: u64, short: &str) -> bool {
    let Some(f) = pool::feature_table::by_name(short) else { return false };
    zap::lookup_u64(&p.mos, ds_obj, f.guid).ok().flatten().is_some()
}

/// Is pool feature `short` enabled (or active)?
fn feature_enabled(p: &pool::Pool, short: &str) -> bool {
    feature_refcount(p, short).is_some()
}

/// The pool features a stream's feature flags need on the receiving pool
/// (`dmu_recv_begin_check` refuses a stream whose blocks the pool could not hold).
const STREAM_POOL_FEATURES: &[(u64, &str)] = &[
    (FEATURE_LZ4, "lz4_compress"),
    (FEATURE_EMBED_DATA, "embedded_data"),
    (FEATURE_LARGE_BLOCKS, "large_blocks"),
    (FEATURE_LARGE_DNODE, "large_dnode"),
    (FEATURE_ZSTD, "zstd_compress"),
];

/// A stream's feature flags as `setup_featureflags` sets them, for the dataset object
/// `ds_obj` (objset `os`) sent with `-L`, `-e`, `-c` as asked: pool-wide features for
/// embedded blocks and lz4, the dataset's own for large blocks, zstd and large dnodes (a
/// stream of a dataset that never had a large block can be received by a pool without
/// large_blocks, even with -L), and SA spill for file systems.
fn stream_features(
    pool: &pool::Pool,
    ds_obj: u64,
    os: &dmu::Objset,
    large_blocks: bool,
    embed: bool,
    compressed: bool,
) -> u64 {
    let mut f = 0u64;
    if embed && feature_active(pool, "embedded_data") {
        f |= FEATURE_EMBED_DATA;
    }
    if compressed {
        f |= FEATURE_COMPRESSED;
    }
    if f & (FEATURE_EMBED_DATA | FEATURE_COMPRESSED) != 0 && feature_active(pool, "lz4_compress") {
        f |= FEATURE_LZ4;
    }
    if large_blocks && ds_feature_active(pool, ds_obj, "large_blocks") {
        f |= FEATURE_LARGE_BLOCKS;
    }
    if compressed && ds_feature_active(pool, ds_obj, "zstd_compress") {
        f |= FEATURE_ZSTD;
    }
    if ds_feature_active(pool, ds_obj, "large_dnode") {
        f |= FEATURE_LARGE_DNODE;
    }
    if os.os_type() == ondisk::objset::DMU_OST_ZFS {
        f |= FEATURE_SA_SPILL;
    }
    f
}

/// Counts bytes (the `-n` estimate).
struct Counter(u64);
impl Write for Counter {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0 += b.len() as u64;
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `zfs send [-Lecnv] [-P] [-i SNAP | -I SNAP] SNAPSHOT`.
pub fn send(state: &Arc<State>, snapshot: &str, o: &SendOpts, fds: Vec<OwnedFd>) -> Result<Response, String> {
    if o.saved {
        return send_saved(state, snapshot, o, fds);
    }
    if let Some(t) = &o.token {
        return send_resume(state, t, o, fds);
    }
    if !o.exclude.is_empty() {
        if !o.replicate {
            return Err("cannot send: -X (--exclude) applies to replication streams (-R) only".into());
        }
        let fs = snapshot.split('@').next().unwrap_or(snapshot);
        for x in &o.exclude {
            let ok = x.split('/').all(|c| {
                !c.is_empty() && c.chars().all(|ch| ch.is_ascii_alphanumeric() || "_-.: ".contains(ch))
            });
            if !ok {
                return Err(format!("cannot send: invalid dataset name '{x}' for -X"));
            }
            if x == fs || fs.starts_with(&format!("{x}/")) {
                return Err(format!("cannot send '{snapshot}': -X {x} excludes the file system sent"));
            }
        }
    }
    send_from(state, snapshot, o, fds, None)
}

/// `zfs send -t TOKEN`: the snapshot and source the token names (found by guid), from the
/// point it names, with the stream features the receive started with.
fn send_resume(state: &Arc<State>, token: &str, o: &SendOpts, fds: Vec<OwnedFd>) -> Result<Response, String> {
    let nv = send::token::decode(token).map_err(|e| format!("cannot resume send: {e}"))?;
    let (Some(toguid), Some(toname), Some(object), Some(offset)) =
        (nv.get_u64("toguid"), nv.get_str("toname"), nv.get_u64("object"), nv.get_u64("offset"))
    else {
        return Err("cannot resume send: the token lacks toguid, toname, object or offset".into());
    };
    let pool =
        state.pool(pool_of(toname)).map_err(|_| format!("cannot resume send: '{toname}' does not exist"))?;
    let dsl = pool.dsl();
    let all = dsl.list().map_err(|e| e.to_string())?;
    // A file system's own state was sent (`FS@--head--`): the file system itself, if it is
    // still the same one (its guid).
    let head = toname.ends_with(&format!("@{HEAD_SNAP}"));
    // Several snapshots may carry the guid (received copies): the one the token names
    // first, then one of its file system, then any (libzfs `guid_to_name` looks from the
    // token's name outwards).
    let named_fs = toname.split('@').next().unwrap_or(toname);
    let candidates: Vec<&dsl::Dataset> = all
        .iter()
        .filter(|d| {
            (d.kind == dsl::DatasetKind::Snapshot || head)
                && d.name.contains('@') != head
                && d.ds.guid == toguid
        })
        .collect();
    let to = candidates
        .iter()
        .find(|d| d.name == toname)
        .or_else(|| candidates.iter().find(|d| d.name.split('@').next() == Some(named_fs)))
        .or_else(|| candidates.first())
        .copied()
        .ok_or_else(|| {
            format!(
                "cannot resume send: '{toname}' is no longer the same snapshot (guid {toguid:#x} not found)"
            )
        })?;
    let (fs, _) = to.name.split_once('@').unwrap_or((&to.name, ""));
    let from = match nv.get_u64("fromguid") {
        None => None,
        Some(g) => {
            let head = dsl.find(fs).map_err(|e| e.to_string())?;
            let snap = all
                .iter()
                .find(|d| d.kind == dsl::DatasetKind::Snapshot && d.ds.guid == g && d.dir_obj == to.dir_obj);
            let found = match snap {
                Some(s) => s.name.clone(),
                None => dsl
                    .bookmarks(&head)
                    .map_err(|e| e.to_string())?
                    .into_iter()
                    .find(|b| b.ds.guid == g)
                    .map(|b| b.name)
                    .ok_or_else(|| {
                        format!("cannot resume send: incremental source {g:#x} no longer exists")
                    })?,
            };
            Some(found)
        }
    };
    let mut o2 = o.clone();
    o2.token = None;
    o2.from = from;
    o2.intermediates = false;
    o2.large_blocks |= nv.contains("largeblockok");
    o2.embed |= nv.contains("embedok");
    o2.compressed |= nv.contains("compressok");
    let name = to.name.clone();
    send_from(state, &name, &o2, fds, Some((object, offset)))
}

/// `zfs send --saved FS`: what a resumable receive into FS has kept so far (in FS/%recv, or
/// FS itself for a new file system or an incremental onto its head), as libzfs's
/// `zfs_send_saved` and `dmu_send`'s `savedok` send it: the stream the receive was taking
/// (its guid, name, source and stream features, from the kept resume state), holding the
/// partial file system's contents since the source, and no END record, so whoever receives
/// it with `-s` keeps it resumable in turn and finishes it with `send -t`.
fn send_saved(state: &Arc<State>, fs: &str, o: &SendOpts, fds: Vec<OwnedFd>) -> Result<Response, String> {
    if fs.is_empty() || fs.contains(['@', '#']) {
        return Err(format!(
            "cannot send '{fs}': --saved needs a file system holding a partially received stream"
        ));
    }
    if o.from.is_some() || o.replicate || o.props || o.holds || o.backup || o.token.is_some() {
        return Err(format!(
            "cannot send '{fs}': --saved cannot be combined with -i, -I, -R, -p, -b, -h or -t"
        ));
    }
    // Synced first: the partial state on disk is all there is to send.
    if let Some(rw) = crate::rwpool::writer_of(state, fs) {
        rw.sync()?;
    }
    let pool = state.pool(pool_of(fs)).map_err(|_| format!("cannot open '{fs}': dataset does not exist"))?;
    let dsl = pool.dsl();
    dsl.find(fs).map_err(|_| format!("cannot open '{fs}': dataset does not exist"))?;
    let tmp = format!("{fs}/{}", pool::admin::RECV_TMP);
    let (partial, saved) = [tmp.as_str(), fs]
        .iter()
        .filter_map(|n| dsl.find(n).ok())
        .find_map(|d| resume_state(&pool, d.ds_obj).map(|r| (d, r)))
        .ok_or_else(|| format!("cannot send '{fs}': it holds no partially received stream (receive -s)"))?;
    let from = if saved.fromguid == 0 {
        None
    } else {
        let all = dsl.list().map_err(|e| e.to_string())?;
        let f = all
            .into_iter()
            .find(|d| {
                d.kind == dsl::DatasetKind::Snapshot
                    && d.ds.guid == saved.fromguid
                    && (d.ds.dir_obj == partial.ds.dir_obj || partial.dir.origin_obj == d.ds_obj)
            })
            .ok_or_else(|| {
                format!("cannot send '{fs}': the source of its partial stream no longer exists")
            })?;
        Some(f)
    };
    let bp = partial.objset_bp().map_err(|e| e.to_string())?;
    let os = dmu::Objset::open(&pool.reader, &bp).map_err(|e| format!("cannot send '{fs}': {e}"))?;
    let features = stream_features(&pool, partial.ds_obj, &os, saved.largeblock, saved.embed, saved.compress);
    let mut flags = 0;
    if partial.ds.flags & ondisk::dsl::DS_FLAG_CI_DATASET != 0 {
        flags |= DRR_FLAG_CI_DATA;
    }
    let params = SendParams {
        toname: saved.toname.clone(),
        toguid: saved.toguid,
        fromguid: saved.fromguid,
        from_txg: from.as_ref().map_or(0, |f| f.ds.creation_txg),
        creation_time: partial.ds.creation_time,
        flags,
        features,
        resume: None,
        no_end: true,
    };
    let fd = fds.into_iter().next().ok_or_else(|| format!("cannot send '{fs}': no output stream"))?;
    let mut w = StreamWriter::new(BufWriter::with_capacity(64 << 10, File::from(fd)));
    let t0 = std::time::Instant::now();
    let stats = send::send::send(&os, &params, &mut w, &mut |_| true)
        .map_err(|e| format!("cannot send '{fs}': {e}"))?;
    w.get_mut().flush().map_err(|e| format!("cannot send '{fs}': {e}"))?;
    let mut r = Response::ok(String::new());
    if o.verbose {
        r.stderr = format!(
            "saved send of {fs} ({}): {} in {} records, {:.1} s\n",
            saved.toname,
            crate::format::nicenum(w.bytes_written()),
            stats.records,
            t0.elapsed().as_secs_f64()
        );
    }
    Ok(r)
}

/// The snapshot name a stream of a file system's own state carries (`FS@--head--`, as
/// `dmu_send_impl` names it); receive makes it a snapshot of that name.
const HEAD_SNAP: &str = "--head--";

fn send_from(
    state: &Arc<State>,
    snapshot: &str,
    o: &SendOpts,
    fds: Vec<OwnedFd>,
    resume: Option<(u64, u64)>,
) -> Result<Response, String> {
    // A file system (or volume) is sent as it stands, when nothing can change it: it must
    // not be mounted or served (OpenZFS owns the dataset for the send, which fails while
    // it is mounted). Its pool is synced first, so its committed state is all it has.
    let head = !snapshot.contains('@');
    let (fs, tosnap) = snapshot.split_once('@').unwrap_or((snapshot, HEAD_SNAP));
    if head {
        if o.replicate || o.intermediates || o.props || o.holds || o.backup {
            return Err(format!(
                "cannot send '{snapshot}': -R, -I, -p, -b and -h need a snapshot, not a file system"
            ));
        }
        if snapshot.contains('#') {
            return Err(format!("cannot send '{snapshot}': a bookmark cannot be sent, only sent from"));
        }
        state.pool(pool_of(fs)).map_err(|_| format!("cannot open '{snapshot}': dataset does not exist"))?;
        let mounted = state.mounts.lock().unwrap_or_else(|p| p.into_inner()).iter().any(|m| m.dataset == fs);
        if mounted || crate::volumes::device_known(state, fs) {
            return Err(format!(
                "cannot send '{fs}': dataset is busy (a file system is sent only while unmounted; send a snapshot of it instead)"
            ));
        }
        if let Some(rw) = crate::rwpool::writer_of(state, fs) {
            rw.sync()?;
        }
    }
    let pool =
        state.pool(pool_of(fs)).map_err(|_| format!("cannot open '{snapshot}': dataset does not exist"))?;
    let dsl = pool.dsl();
    let mut to =
        dsl.find(snapshot).map_err(|_| format!("cannot open '{snapshot}': dataset does not exist"))?;
    if head {
        if to.kind == dsl::DatasetKind::Snapshot {
            return Err(format!("cannot send '{snapshot}': not a file system"));
        }
        // Named as a snapshot in the stream; later than every snapshot it has.
        to.name = format!("{fs}@{HEAD_SNAP}");
        to.ds.creation_txg = u64::MAX;
    }
    let mut clone = false;
    let from = match &o.from {
        None => None,
        Some(f) => {
            let full = match (f.strip_prefix('@'), f.strip_prefix('#')) {
                (Some(s), _) => format!("{fs}@{s}"),
                (_, Some(b)) => format!("{fs}#{b}"),
                // A bare name is a snapshot of the same file system (zfs(8)).
                _ if !f.contains(['@', '#', '/']) => format!("{fs}@{f}"),
                _ => f.clone(),
            };
            let from = if full.contains('#') {
                if o.intermediates {
                    return Err(format!("cannot send '{snapshot}': -I cannot start at a bookmark"));
                }
                dsl.find_bookmark(&full)
                    .map_err(|_| format!("cannot open '{full}': bookmark does not exist"))?
            } else if full.contains('@') {
                dsl.find(&full).map_err(|_| format!("cannot open '{full}': dataset does not exist"))?
            } else {
                return Err(format!(
                    "cannot send '{snapshot}': incremental source '{f}' is not a snapshot or bookmark"
                ));
            };
            let same_fs = from.ds.dir_obj == to.ds.dir_obj;
            clone = dsl.find(fs).ok().map(|h| h.dir.origin_obj) == Some(from.ds_obj);
            if !(same_fs || clone) || from.ds.creation_txg >= to.ds.creation_txg {
                // -R and -I go through libzfs's dump_filesystem, which warns in its words.
                return Err(if o.replicate || o.intermediates {
                    format!(
                        "WARNING: could not send {snapshot}:\nincremental source ({full}) is not earlier than it"
                    )
                } else {
                    format!("cannot send '{snapshot}': incremental source ({full}) is not earlier than it")
                });
            }
            Some(from)
        }
    };
    // The (source, snapshot) pairs to send: one, or with -I every snapshot after the
    // source up to SNAPSHOT, each from the one before; with -R, those of every descendant.
    let mut warnings = String::new();
    let plans: Vec<FsPlan> = if o.replicate {
        replication_plan(&dsl, fs, tosnap, &to, from.as_ref(), o, &mut warnings)?
    } else {
        let mut chain: Vec<(Option<dsl::Dataset>, dsl::Dataset)> = Vec::new();
        if o.intermediates {
            let Some(from) = from else { return Err("-I needs an incremental source".into()) };
            let prefix = format!("{fs}@");
            let mut snaps: Vec<dsl::Dataset> = dsl
                .list()
                .map_err(|e| e.to_string())?
                .into_iter()
                .filter(|d| {
                    d.name.starts_with(&prefix)
                        && d.ds.creation_txg > from.ds.creation_txg
                        && d.ds.creation_txg <= to.ds.creation_txg
                })
                .collect();
            snaps.sort_by_key(|d| d.ds.creation_txg);
            let mut prev = from;
            for s in snaps {
                chain.push((Some(prev), s.clone()));
                prev = s;
            }
        } else {
            chain.push((from, to.clone()));
        }
        let head = dsl.find(fs).map_err(|e| e.to_string())?;
        let mut snaps: Vec<dsl::Dataset> = Vec::new();
        if let Some((Some(f), _)) = chain.first() {
            snaps.push(f.clone());
        }
        snaps.extend(chain.iter().map(|(_, t)| t.clone()));
        vec![FsPlan { head, snaps, chain, parentfromsnap: 0, clone }]
    };
    let open = |d: &dsl::Dataset| -> Result<dmu::Objset, String> {
        let bp = d.objset_bp().map_err(|e| e.to_string())?;
        dmu::Objset::open(&pool.reader, &bp).map_err(|e| format!("cannot send '{}': {e}", d.name))
    };
    let params = |from: &Option<dsl::Dataset>, to: &dsl::Dataset, os: &dmu::Objset, clone: bool| {
        let f = stream_features(&pool, to.ds_obj, os, o.large_blocks, o.embed, o.compressed);
        let mut flags = 0;
        if clone {
            flags |= DRR_FLAG_CLONE;
        }
        if to.ds.flags & ondisk::dsl::DS_FLAG_CI_DATASET != 0 {
            flags |= DRR_FLAG_CI_DATA;
        }
        SendParams {
            toname: to.name.clone(),
            toguid: to.ds.guid,
            fromguid: from.as_ref().map_or(0, |f| f.ds.guid),
            from_txg: from.as_ref().map_or(0, |f| f.ds.creation_txg),
            creation_time: to.ds.creation_time,
            flags,
            features: f,
            resume,
            no_end: false,
        }
    };
    // Each substream with whether it is the clone's first (sent from its origin).
    let substreams: Vec<(&Option<dsl::Dataset>, &dsl::Dataset, bool)> = plans
        .iter()
        .flat_map(|p| p.chain.iter().enumerate().map(move |(i, (f, t))| (f, t, p.clone && i == 0)))
        .collect();
    if o.dry_run {
        let mut out = String::new();
        let mut total = 0u64;
        for &(from, to, clone) in &substreams {
            let os = open(to)?;
            let mut w = StreamWriter::new(Counter(0));
            send::send::send(&os, &params(from, to, &os, clone), &mut w, &mut |_| true)
                .map_err(|e| format!("cannot send '{}': {e}", to.name))?;
            let size = w.bytes_written();
            total += size;
            match (from, o.parsable) {
                (Some(f), true) => out.push_str(&format!("incremental\t{}\t{}\t{size}\n", short(f), to.name)),
                (None, true) => out.push_str(&format!("full\t{}\t{size}\n", to.name)),
                (Some(f), false) if o.verbose => out.push_str(&format!(
                    "send from @{} to {} estimated size is {}\n",
                    short(f),
                    to.name,
                    crate::format::nicenum(size)
                )),
                (None, false) if o.verbose => out.push_str(&format!(
                    "full send of {} estimated size is {}\n",
                    to.name,
                    crate::format::nicenum(size)
                )),
                _ => {}
            }
        }
        if o.parsable {
            out.push_str(&format!("size\t{total}\n"));
        } else if o.verbose {
            out.push_str(&format!("total estimated size is {}\n", crate::format::nicenum(total)));
        }
        let mut r = Response::ok(out);
        r.stderr = warnings;
        return Ok(r);
    }
    let fd = fds.into_iter().next().ok_or_else(|| format!("cannot send '{snapshot}': no output stream"))?;
    // Records are gathered; block payloads (larger than the buffer) go straight to the fd.
    let mut w = StreamWriter::new(BufWriter::with_capacity(64 << 10, File::from(fd)));
    let io = |e: std::io::Error| format!("cannot send '{snapshot}': {e}");
    let package = o.intermediates || o.replicate || o.props || o.holds;
    if package {
        // The package header (libzfs `send_prelim_records`): the file systems and their
        // snapshots in the stream, then its own END.
        let mut fss = ondisk::nvlist::NvList::new();
        for p in &plans {
            let props = match (o.replicate || o.props, o.backup) {
                (false, _) => PropsSent::None,
                (true, false) => PropsSent::Effective,
                (true, true) => PropsSent::Received,
            };
            fss.add_nvlist(&format!("0x{:x}", p.head.ds.guid), fs_entry(&dsl, p, props, o.holds)?);
        }
        let mut hdr = ondisk::nvlist::NvList::new();
        if let Some(f) = &o.from {
            let f = f.rsplit(['@', '#']).next().unwrap_or(f);
            hdr.add_str("fromsnap", f);
        }
        hdr.add_str("tosnap", tosnap);
        if !o.replicate {
            hdr.add_boolean("not_recursive");
        }
        hdr.add_nvlist("fss", fss);
        let begin = Begin {
            magic: BACKUP_MAGIC,
            // The holds flag is set once, in the package's BEGIN (`send_prelim_records`).
            versioninfo: versioninfo(
                HDRTYPE_COMPOUNDSTREAM,
                FEATURE_SA_SPILL | if o.holds { FEATURE_HOLDS } else { 0 },
            ),
            toname: snapshot.to_string(),
            ..Default::default()
        };
        w.write(&Record::Begin(begin), &hdr.encode()).map_err(io)?;
        w.write(&Record::End(End::default()), &[]).map_err(io)?;
    }
    let t0 = std::time::Instant::now();
    let mut records = 0;
    for &(from, to, clone) in &substreams {
        let os = open(to)?;
        let stats = send::send::send(&os, &params(from, to, &os, clone), &mut w, &mut |_| true)
            .map_err(|e| format!("cannot send '{}': {e}", to.name))?;
        records += stats.records;
    }
    if package {
        // The closing END of the package: all zeros but its type.
        let end = encode_record(&Record::End(End::default()), 0, false);
        w.write_raw(&end, &[]).map_err(io)?;
    }
    w.get_mut().flush().map_err(io)?;
    let mut r = Response::ok(String::new());
    r.stderr = warnings;
    if o.verbose {
        r.stderr += &format!(
            "{} send of {snapshot}: {} in {records} records, {:.1} s\n",
            if o.from.is_some() { "incremental" } else { "full" },
            crate::format::nicenum(w.bytes_written()),
            t0.elapsed().as_secs_f64()
        );
    }
    Ok(r)
}

/// A snapshot's short name (after the `@`).
fn short(d: &dsl::Dataset) -> String {
    d.name.split_once('@').map_or(String::new(), |(_, s)| s.to_string())
}

/// What one file system contributes to a send: its (source, snapshot) pairs in order, and
/// for a package header the snapshots it has up to the one sent and the guid of the
/// snapshot its parent is sent from (`parentfromsnap`).
struct FsPlan {
    head: dsl::Dataset,
    snaps: Vec<dsl::Dataset>,
    chain: Vec<(Option<dsl::Dataset>, dsl::Dataset)>,
    parentfromsnap: u64,
    /// The first pair is an incremental from the clone's origin (`DRR_FLAG_CLONE`).
    clone: bool,
}

/// The values a props ZAP's entries set on their dataset itself, local or received
/// (libzfs `send_iterate_prop` sends a property whose source is the dataset or received).
fn effective(all: Vec<(String, dsl::props::RawProp)>) -> Vec<(String, dsl::props::RawProp)> {
    dsl::props::names_set(&all)
        .into_iter()
        .filter_map(|k| dsl::props::applies(&all, &k).map(|(v, _)| (k, v)))
        .collect()
}

/// The received values among a props ZAP's entries (`P$recvd` as `P`): what `send -b`
/// carries (libzfs `send_iterate_prop` with `received_only`).
fn received_only(all: Vec<(String, dsl::props::RawProp)>) -> Vec<(String, dsl::props::RawProp)> {
    all.into_iter()
        .filter_map(|(k, v)| k.strip_suffix(dsl::props::RECVD_SUFFIX).map(|k| (k.to_string(), v)))
        .collect()
}

/// Which properties a package carries.
#[derive(Clone, Copy, PartialEq, Eq)]
enum PropsSent {
    None,
    /// Those set on the dataset itself, local or received (`-p`, `-R`).
    Effective,
    /// The received values only (`-b`).
    Received,
}

/// A file system's entry in a package header's `fss` (libzfs `send_iterate_fs`): name,
/// `parentfromsnap`, properties (as `props` says), snapshot guids and each snapshot's own
/// properties.
fn fs_entry(
    dsl: &dsl::DslPool,
    p: &FsPlan,
    props: PropsSent,
    holds: bool,
) -> Result<ondisk::nvlist::NvList, String> {
    let pick = |all| if props == PropsSent::Received { received_only(all) } else { effective(all) };
    let nv_of = |list: Vec<(String, dsl::props::RawProp)>, snapshot: bool| {
        let mut nv = ondisk::nvlist::NvList::new();
        for (k, v) in list {
            // Received values (`P$recvd`), markers (`$hasrecvd`) and, on snapshots, space
            // limits are not sent (`send_iterate_prop`).
            if k.contains('$')
                || (snapshot && ["quota", "reservation", "refquota", "refreservation"].contains(&k.as_str()))
            {
                continue;
            }
            match v {
                dsl::props::RawProp::Num(n) => nv.add_u64(&k, n),
                dsl::props::RawProp::Str(t) => nv.add_str(&k, &t),
            };
        }
        nv
    };
    let err = |e: dsl::DslError| e.to_string();
    let mut snaps = ondisk::nvlist::NvList::new();
    let mut snapprops = ondisk::nvlist::NvList::new();
    // Each snapshot's holds, tag -> creation time (`lzc_get_holds`), with -h.
    let mut snapholds = ondisk::nvlist::NvList::new();
    for s in &p.snaps {
        snaps.add_u64(&short(s), s.ds.guid);
        if holds {
            let mut tags = ondisk::nvlist::NvList::new();
            if s.ds.userrefs_obj != 0 {
                for e in zap::list(dsl.mos(), s.ds.userrefs_obj).map_err(|e| e.to_string())? {
                    tags.add_u64(&e.name_string(), e.first_u64().unwrap_or(0));
                }
            }
            if !tags.pairs.is_empty() {
                snapholds.add_nvlist(&short(s), tags);
            }
        }
        let nv = if props == PropsSent::None {
            ondisk::nvlist::NvList::new()
        } else {
            nv_of(pick(dsl::props::read_props_zap_all(dsl.mos(), s.ds.props_obj).map_err(err)?), true)
        };
        snapprops.add_nvlist(&short(s), nv);
    }
    let local = if props == PropsSent::None {
        Default::default()
    } else {
        nv_of(pick(dsl.all_props(&p.head.dir).map_err(err)?), false)
    };
    let mut one = ondisk::nvlist::NvList::new();
    one.add_str("name", &p.head.name).add_u64("parentfromsnap", p.parentfromsnap);
    if p.clone {
        if let Some((Some(o), _)) = p.chain.first() {
            one.add_u64("origin", o.ds.guid);
        }
    }
    one.add_nvlist("props", local).add_nvlist("snaps", snaps).add_nvlist("snapprops", snapprops);
    if holds {
        one.add_nvlist("snapholds", snapholds);
    }
    Ok(one)
}

/// `zfs send -R FS@SNAP [-i|-I FROM]`: FS and every descendant file system and volume that
/// has SNAP, parents first (libzfs `send_iterate_fs`, `dump_filesystem`): without a source
/// every snapshot up to SNAP (the first in full); with `-i` the source and SNAP; with `-I`
/// everything between; a descendant that lacks the source is sent from its beginning. A
/// descendant created after SNAP was taken is left out; one that existed but lacks SNAP is
/// an error, unless `-s` (skip missing): then it is left out with its descendants and a
/// warning in `warnings`. A clone's first snapshot is sent as an incremental from its origin (parents and
/// origins first).
fn replication_plan(
    dsl: &dsl::DslPool,
    fs: &str,
    tosnap: &str,
    to: &dsl::Dataset,
    from: Option<&dsl::Dataset>,
    o: &SendOpts,
    warnings: &mut String,
) -> Result<Vec<FsPlan>, String> {
    if from.is_some_and(|f| f.kind == dsl::DatasetKind::Bookmark) {
        return Err(format!("cannot send '{fs}@{tosnap}': -R cannot start at a bookmark"));
    }
    let fromsnap = from.map(short);
    let all = dsl.list().map_err(|e| e.to_string())?;
    let below = format!("{fs}/");
    let excluded = |n: &str| o.exclude.iter().any(|x| n == x || n.starts_with(&format!("{x}/")));
    let mut heads: Vec<&dsl::Dataset> = all
        .iter()
        .filter(|d| d.kind != dsl::DatasetKind::Snapshot && d.kind != dsl::DatasetKind::Bookmark)
        .filter(|d| d.name == fs || d.name.starts_with(&below))
        .filter(|d| !excluded(&d.name))
        .collect();
    // A name sorts before every name it prefixes: parents come first.
    heads.sort_by(|a, b| a.name.cmp(&b.name));
    // Origins of the clones in the tree: sent even when -i would skip them.
    let origins: Vec<u64> = heads.iter().map(|h| h.dir.origin_obj).filter(|&o| o != 0).collect();
    let mut plans: Vec<FsPlan> = Vec::new();
    // tosnap's txg per file system sent, to judge descendants that lack it.
    let mut skipped: Vec<String> = Vec::new();
    for h in heads {
        if skipped.iter().any(|s| h.name.starts_with(&format!("{s}/"))) {
            continue;
        }
        let parent = h.name.rsplit_once('/').map(|(p, _)| p.to_string());
        let parent_plan = parent.as_deref().and_then(|p| plans.iter().find(|x| x.head.name == p));
        let prefix = format!("{}@", h.name);
        let mut snaps: Vec<&dsl::Dataset> = all.iter().filter(|d| d.name.starts_with(&prefix)).collect();
        snaps.sort_by_key(|d| d.ds.creation_txg);
        let Some(mine_to) = snaps.iter().find(|d| short(d) == tosnap).copied() else {
            let parent_to_txg = parent_plan
                .and_then(|p| p.snaps.iter().find(|s| short(s) == tosnap))
                .map(|s| s.ds.creation_txg);
            if h.name != fs && parent_to_txg.is_some_and(|t| h.ds.creation_txg > t) {
                skipped.push(h.name.clone());
                continue;
            }
            if h.name != fs && o.skip_missing {
                // libzfs `send_iterate_fs` with `skipmissing`.
                warnings.push_str(&format!(
                    "WARNING: skipping dataset {} and its children: snapshot {tosnap} does not exist\n",
                    h.name
                ));
                skipped.push(h.name.clone());
                continue;
            }
            return Err(format!(
                "cannot send {fs}@{tosnap} recursively: snapshot {}@{tosnap} does not exist",
                h.name
            ));
        };
        // A clone starts from its origin (sent before it, when inside the tree; otherwise
        // the receiver must have it), as libzfs's `fromorigin`.
        let origin =
            all.iter().find(|d| d.kind == dsl::DatasetKind::Snapshot && d.ds_obj == h.dir.origin_obj);
        let upto: Vec<&dsl::Dataset> =
            snaps.iter().copied().filter(|d| d.ds.creation_txg <= mine_to.ds.creation_txg).collect();
        let mine_from = fromsnap.as_deref().and_then(|f| upto.iter().find(|d| short(d) == f).copied());
        let mut chain: Vec<(Option<dsl::Dataset>, dsl::Dataset)> = Vec::new();
        let doall = o.intermediates || fromsnap.is_none();
        let mut prev: Option<&dsl::Dataset> = None;
        let mut seen_from = mine_from.is_none();
        let mut clone = false;
        for s in &upto {
            if !seen_from {
                if Some(s.ds_obj) == mine_from.map(|f| f.ds_obj) {
                    seen_from = true;
                    prev = Some(s);
                }
                continue;
            }
            // Without -I only the pair is sent, and the origins of clones in the tree.
            if !doall && s.ds_obj != mine_to.ds_obj && !origins.contains(&s.ds_obj) {
                continue;
            }
            if prev.is_none() && origin.is_some() {
                clone = true;
                prev = origin;
            }
            chain.push((prev.cloned(), (*s).clone()));
            prev = Some(s);
        }
        if chain.is_empty() {
            return Err(format!(
                "WARNING: could not send {}@{tosnap}:\nincremental source ({}@{}) is not earlier than it",
                h.name,
                h.name,
                fromsnap.as_deref().unwrap_or("")
            ));
        }
        // The guid of the snapshot the parent is sent from (or its SNAP when it has no
        // source), as libzfs records it for the receiver to find the parent.
        let parentfromsnap = parent_plan
            .map(|p| {
                let f = fromsnap.as_deref().and_then(|f| p.snaps.iter().find(|s| short(s) == f));
                f.or_else(|| p.snaps.iter().find(|s| short(s) == tosnap)).map_or(0, |s| s.ds.guid)
            })
            .unwrap_or(0);
        let _ = to;
        plans.push(FsPlan {
            head: h.clone(),
            snaps: upto.into_iter().cloned().collect(),
            chain,
            parentfromsnap,
            clone,
        });
    }
    // Parents, and the file systems holding clones' origins, go first (libzfs
    // `dump_filesystems` defers a clone until its origin was sent).
    let mut ordered: Vec<FsPlan> = Vec::with_capacity(plans.len());
    while !plans.is_empty() {
        let ready = plans.iter().position(|p| {
            let parent = p.head.name.rsplit_once('/').map(|(x, _)| x);
            let waits_parent = plans.iter().any(|q| Some(q.head.name.as_str()) == parent);
            let origin_fs = p.clone.then(|| p.chain.first().and_then(|(f, _)| f.as_ref())).flatten();
            let waits_origin = origin_fs.is_some_and(|o| plans.iter().any(|q| q.head.dir_obj == o.dir_obj));
            !waits_parent && !waits_origin
        });
        // A cycle cannot happen in a pool; send the rest as they come if it did.
        ordered.push(plans.remove(ready.unwrap_or(0)));
    }
    Ok(ordered)
}

/// `zfs receive [-Fuvnde] TARGET`.
pub fn receive(
    state: &Arc<State>,
    target: &str,
    o: &RecvOpts,
    fds: Vec<OwnedFd>,
) -> Result<Response, String> {
    if let Some((fs, snap)) = target.split_once('@') {
        if fs.is_empty() || snap.is_empty() || snap.contains(['@', '/']) {
            return Err(format!("cannot receive: invalid name '{target}'"));
        }
    }
    // -d and -e place the stream below a file system that must exist (libzfs refuses before
    // reading the stream; the path below it is made as needed).
    if (o.discard_first || o.last_only) && !target.contains('@') {
        let exists = state.pool(pool_of(target)).is_ok_and(|p| p.dsl().find(target).is_ok());
        if !exists {
            return Err(format!("cannot receive: specified fs ({target}) does not exist"));
        }
    }
    check_cmdline_props(o)?;
    if o.heal {
        check_heal(state, target, o)?;
    }
    // -o origin= is no property: it says what a new file system is cloned from.
    let is_origin = |a: &String| a.split_once('=').is_some_and(|(k, _)| dsl::props::canonical(k) == "origin");
    let mut with_origin = o.clone();
    // (Named once at most: check_cmdline_props refuses a repeat.)
    with_origin.origin =
        o.set.iter().find(|a| is_origin(a)).and_then(|a| a.split_once('=')).map(|(_, v)| v.to_string());
    with_origin.set.retain(|a| !is_origin(a));
    let o = &with_origin;
    if let Some(origin) = &o.origin {
        let Some((ofs, _)) = origin.split_once('@') else {
            return Err(format!("cannot receive: origin '{origin}' is not a snapshot"));
        };
        if pool_of(ofs) != pool_of(target) {
            return Err(format!("cannot receive: origin '{origin}' is in another pool"));
        }
        let exists = state.pool(pool_of(ofs)).is_ok_and(|p| p.dsl().find(origin).is_ok());
        if !exists {
            return Err(format!("cannot receive: cannot open '{origin}': dataset does not exist"));
        }
    }
    let fd = fds.into_iter().next().ok_or("cannot receive: no stream on standard input")?;
    let mut rd = StreamReader::new(BufReader::with_capacity(1 << 20, File::from(fd)));
    let begin = match rd.next() {
        Ok(Some((Record::Begin(b), payload))) => (b, payload),
        Ok(Some((r, _))) => return Err(format!("cannot receive: invalid stream (starts with {})", r.kind())),
        Ok(None) => return Err("cannot receive: failed to read from stream".into()),
        Err(e) => return Err(format!("cannot receive: invalid stream ({e})")),
    };
    let (begin, payload) = begin;
    if o.heal {
        return heal(state, target, &mut rd, &begin);
    }
    if begin.magic == BACKUP_MAGIC && begin.hdrtype() == HDRTYPE_COMPOUNDSTREAM {
        if o.origin.is_some() {
            return Err("cannot receive: -o origin= applies to a single file system's stream, \
                        not to a replication stream (send -R)"
                .into());
        }
        return receive_package(state, target, o, &mut rd, &begin, &payload);
    }
    // A `-o` value must apply to what the stream makes (libzfs `zfs_setup_cmdline_props`
    // checks it against the stream's type): `-o atime=off` of a volume stream is refused,
    // `-x atime` of one is not.
    let kind = if begin.objset_type == ondisk::objset::DMU_OST_ZVOL as u32 { 'V' } else { 'F' };
    for k in o.set.iter().filter_map(|a| a.split_once('=')).map(|(k, _)| dsl::props::canonical(k)) {
        if !crate::cmd::zfs::applies_to_type(k, kind) {
            return Err(format!("cannot receive: property '{k}' does not apply to datasets of this type"));
        }
    }
    let done = Default::default();
    let plan = PropsPlan { package: false, props: None, top: true, done: &done };
    receive_one(state, target, o, &mut rd, begin, &payload, &plan).map(|(r, _, _)| r)
}

/// `receive -c` is refused with the flags libzfs refuses it with, and needs an existing
/// snapshot (libzfs `zfs_receive_one`), before the stream is read.
fn check_heal(state: &Arc<State>, target: &str, o: &RecvOpts) -> Result<(), String> {
    if o.discard_first
        || o.last_only
        || o.force
        || o.resumable
        || o.no_mount
        || o.skip_holds
        || o.dry_run
        || !o.set.is_empty()
        || !o.exclude.is_empty()
    {
        return Err("cannot receive: corrective recv can not be used when combined with this flag".into());
    }
    let exists =
        target.contains('@') && state.pool(pool_of(target)).is_ok_and(|p| p.dsl().find(target).is_ok());
    if !exists {
        return Err("cannot receive: corrective recv must specify an existing snapshot to heal".into());
    }
    Ok(())
}

/// Corrective receive (`zfs receive -c FS@SNAP`, see [`pool::heal`]): every WRITE record of
/// a stream of snapshot SNAP is checked against SNAP's block at its place; a block no copy
/// of which verifies is rewritten in place with the record's bytes, compressed as its
/// pointer says, when they match its checksum. Other records are read and passed over.
/// Healthy blocks are read without the pool's lock, so only damaged ones hold up its txgs.
/// The entries of the pool's error list for objects that verify afterwards go.
fn heal(state: &Arc<State>, target: &str, rd: &mut Reader, begin: &Begin) -> Result<Response, String> {
    let fail = |why: String| format!("cannot receive: {why}");
    if begin.magic == BACKUP_MAGIC && begin.hdrtype() == HDRTYPE_COMPOUNDSTREAM {
        return Err(fail(
            "a corrective receive takes the stream of one snapshot, not a package (send -R/-I)".into(),
        ));
    }
    let rw = crate::rwpool::writer_of(state, target)
        .ok_or_else(|| fail(format!("'{target}': pool is read-only")))?;
    // The snapshot as the committed view has it: healthy blocks are read through it
    // without taking the pool's lock.
    let (guid, view) = {
        let pool = state.pool(pool_of(target))?;
        let dsl = pool.dsl();
        let snap = dsl
            .find(target)
            .map_err(|_| fail("corrective recv must specify an existing snapshot to heal".into()))?;
        let os = snap.objset_bp().ok().and_then(|bp| dmu::Objset::open(&pool.reader, &bp).ok());
        (snap.ds.guid, os)
    };
    let reads_fine = |object: u64, offset: u64, lsize: u64| -> bool {
        let Some(os) = &view else { return false };
        match pool::heal::stored_block(os, object, offset, lsize) {
            Ok(Some(bp)) => os.reader().zio.read_physical(&bp).is_ok(),
            Ok(None) => true,
            Err(_) => false,
        }
    };
    if begin.toguid != guid {
        return Err(fail("local snapshot doesn't match the snapshot in the provided stream".into()));
    }
    if begin.features() & (FEATURE_RAW | FEATURE_REDACTED) != 0 {
        return Err(fail("rzfs heals from plain streams only, not raw or redacted ones".into()));
    }
    let fs = target.split('@').next().unwrap_or(target).to_string();
    // The dataset's zstd level, for recompressing a zstd block whose record came
    // uncompressed (the pointer says only "zstd"; the level is in the lost block's header).
    let zstd_level = state
        .pool(pool_of(target))
        .ok()
        .and_then(|p| {
            let dsl = p.dsl();
            let ds = dsl.find(&fs).ok()?;
            crate::cmd::zfs::prop_value(&p, &dsl, &ds, "compression").ok()
        })
        .and_then(|v| v.exact.strip_prefix("zstd-").and_then(|l| l.parse::<u8>().ok()))
        .unwrap_or(3);
    let (mut healed, mut healthy, mut failed) = (0u64, 0u64, Vec::new());
    let mut objects = std::collections::BTreeSet::new();
    loop {
        let (rec, payload) = match rd.next() {
            Ok(Some(r)) => r,
            Ok(None) => {
                return Err(fail("failed to read from stream (it ends before its END record)".into()))
            }
            Err(e) => return Err(fail(format!("invalid stream ({e})"))),
        };
        let w = match rec {
            Record::End(_) => break,
            Record::Write(w) => w,
            _ => continue,
        };
        // A hostile stream must not size allocations: no block is larger than this.
        if w.logical_size > send::recv::MAX_BLOCK {
            return Err(fail(format!("invalid stream (a WRITE record of {} bytes)", w.logical_size)));
        }
        // Logical bytes of the record, and the stream's own compressed form when it has one.
        let (data, stream_phys) = if w.compressiontype != 0 {
            let k = codec::compress::kind_from_zio(w.compressiontype).ok_or_else(|| {
                fail(format!("invalid stream (compression {} in a WRITE record)", w.compressiontype))
            })?;
            let mut out = vec![0u8; w.logical_size as usize];
            codec::compress::decompress(k, &payload, &mut out)
                .map_err(|e| fail(format!("invalid stream (a WRITE record does not decompress: {e})")))?;
            (out, Some((w.compressiontype, payload)))
        } else {
            (payload, None)
        };
        let mut candidates = |bp: &ondisk::blkptr::BlkPtr| -> Vec<Vec<u8>> {
            let mut out = Vec::new();
            let psize = bp.psize() as usize;
            // The stream's compressed bytes, as OpenZFS stored them, when the algorithm is
            // the pointer's (a compressor of another version may not give them back).
            if let Some((c, p)) = &stream_phys {
                if *c == bp.compress() && p.len() <= psize {
                    let mut v = p.clone();
                    v.resize(psize, 0);
                    out.push(v);
                }
            }
            match codec::compress::kind_from_zio(bp.compress()) {
                Some(codec::compress::CompressKind::Off) | None => {
                    if data.len() == psize {
                        out.push(data.clone());
                    }
                }
                Some(k) => {
                    let mut v = vec![0u8; psize];
                    if let Some(n) = codec::compress::compress(k, zstd_level, &data, &mut v) {
                        v[n..].fill(0);
                        out.push(v);
                    }
                }
            }
            out
        };
        if reads_fine(w.object, w.offset, w.logical_size) {
            healthy += 1;
            continue;
        }
        let r = rw.spa.with_writer(|pw| {
            pw.heal_block(target, guid, w.object, w.offset, w.logical_size, &mut candidates)
        });
        match r {
            Ok(pool::heal::Heal::Healed) => {
                healed += 1;
                objects.insert(w.object);
            }
            Ok(pool::heal::Heal::Healthy | pool::heal::Heal::NotStored) => healthy += 1,
            Ok(pool::heal::Heal::NoMatch) => failed.push((w.object, w.offset)),
            Err(e) => return Err(fail(e.to_string())),
        }
    }
    // Error-list entries of objects that read back whole now, in the snapshot or its file
    // system, go (OpenZFS's `spa_remove_error` after the heal's read-back).
    if !objects.is_empty() {
        if let Ok(p) = state.pool(pool_of(target)) {
            for &obj in &objects {
                for name in [target, fs.as_str()] {
                    if rw.spa.with_writer(|pw| pw.object_verifies(name, obj)).unwrap_or(false) {
                        p.forget_errors(|e| e.object == obj && e.dataset == name);
                        if let Ok(ds) = p.dsl().find(name) {
                            rw.spa.forget_scan_errors(|dsobj, o| o == obj && dsobj == ds.ds_obj);
                        }
                    }
                }
            }
        }
    }
    if !failed.is_empty() {
        let list: Vec<String> =
            failed.iter().take(8).map(|(o, off)| format!("object {o} offset {off}")).collect();
        return Err(format!(
            "cannot receive: corrective receive was not able to reconstruct the data needed for healing ({} block(s): {}); {healed} healed",
            failed.len(),
            list.join(", ")
        ));
    }
    Ok(Response::ok(format!("healed {healed} block(s) of {target} ({healthy} already healthy)\n")))
}

/// The properties a substream's file system gets before its data is applied (OpenZFS sets
/// them first, so the data is written with the received compression, checksum and
/// recordsize): the stream's (`props`) and `receive -o`/`-x` ([`apply_cmdline_props`]),
/// once per file system (`done`).
struct PropsPlan<'a> {
    /// The substream is part of a stream package.
    package: bool,
    props: Option<&'a ondisk::nvlist::NvList>,
    /// The top file system of the receive (where `-o` values are local).
    top: bool,
    done: &'a std::cell::RefCell<std::collections::HashSet<String>>,
}

impl PropsPlan<'_> {
    fn apply(&self, state: &Arc<State>, o: &RecvOpts, fs: &str, r: &mut Response) -> Result<(), String> {
        if o.dry_run || !self.done.borrow_mut().insert(fs.to_string()) {
            return Ok(());
        }
        apply_cmdline_props(state, o, fs, self.top, self.props, r)
    }
}

/// After a file system's first substream: the properties the stream carries for it
/// (`props`, as received values) and `-o`/`-x`. On the top file system `-o` values are set
/// locally; on the others the `-o` names get an explicit inherit, so they take the top's
/// (libzfs `zfs_setup_cmdline_props`). `-x P` hides the received value behind an explicit
/// inherit, unless P is set locally there; a received P that is not inherited is dropped.
fn apply_cmdline_props(
    state: &Arc<State>,
    o: &RecvOpts,
    fs: &str,
    top: bool,
    props: Option<&ondisk::nvlist::NvList>,
    r: &mut Response,
) -> Result<(), String> {
    let rw =
        crate::rwpool::writer_of(state, fs).ok_or_else(|| format!("cannot receive: '{fs}' is read-only"))?;
    let mut markers: Vec<String> = Vec::new();
    let mut dropped: Vec<&str> = Vec::new();
    for k in o.exclude.iter().map(|k| dsl::props::canonical(k)) {
        if dsl::props::is_user_prop(k) || dsl::props::is_inheritable(k) {
            markers.push(k.to_string());
        } else {
            dropped.push(k);
        }
    }
    if !top {
        markers.extend(
            o.set.iter().filter_map(|a| a.split_once('=')).map(|(k, _)| dsl::props::canonical(k).to_string()),
        );
    }
    let mut received = props.map(|p| received_list(p, &dropped)).unwrap_or_default();
    received.retain(|(k, _)| !DELAYED_PROPS.contains(&k.as_str()));
    if props.is_some() || !markers.is_empty() {
        let rejected = rw
            .spa
            .set_received_props(fs, received, props.is_some(), markers)
            .map_err(|e| format!("cannot set the properties received for '{fs}': {e}"))?;
        warn_rejected(r, fs, &rejected);
    }
    if top && !o.set.is_empty() {
        // A new mountpoint or canmount moves the mounts as zfs set does.
        let mounting = ["mountpoint", "canmount"]
            .into_iter()
            .find(|p| o.set.iter().any(|a| a.split_once('=').is_some_and(|(k, _)| k == *p)))
            .unwrap_or("");
        let names = [fs.to_string()];
        let m = crate::cmd::zfs::with_remount(state, mounting, &names, || {
            crate::rwpool::set(state, &o.set, &names)
        })?;
        r.stderr.push_str(&m.stderr);
    }
    Ok(())
}

/// Warns of received properties the pool could not hold (the receive goes on, as
/// OpenZFS's does: "cannot receive P property on FS: reason").
fn warn_rejected(r: &mut Response, fs: &str, rejected: &[(String, String)]) {
    for (k, why) in rejected {
        r.stderr.push_str(&format!("cannot receive {k} property on {fs}: {why}\n"));
    }
}

/// A stream's property list as values to store, without the names in `dropped`.
/// The received values (`P$recvd`) file system `fs` has now; `None` if it does not exist.
fn received_now(state: &Arc<State>, fs: &str) -> Option<Vec<(String, zap::write::ZapVal)>> {
    let pool = state.pool(pool_of(fs)).ok()?;
    let dsl = pool.dsl();
    let ds = dsl.find(fs).ok()?;
    let all = dsl.all_props(&ds.dir).ok()?;
    Some(
        all.into_iter()
            .filter_map(|(k, v)| {
                let k = k.strip_suffix(dsl::props::RECVD_SUFFIX)?.to_string();
                Some((k, zap_value(&v)))
            })
            .collect(),
    )
}

/// A stored property value as the ZAP value that writes it back.
fn zap_value(v: &dsl::props::RawProp) -> zap::write::ZapVal {
    match v {
        dsl::props::RawProp::Num(n) => zap::write::ZapVal::u64(*n),
        dsl::props::RawProp::Str(t) => zap::write::ZapVal::string(t),
    }
}

/// The raw local entries of the properties `-o`/`-x` name (the value and its `$inherit`
/// marker) as file system `fs` has them now (`None` where absent); `None` if `-o`/`-x`
/// name nothing or `fs` does not exist.
fn local_entries_now(
    state: &Arc<State>,
    fs: &str,
    o: &RecvOpts,
) -> Option<Vec<(String, Option<zap::write::ZapVal>)>> {
    if o.set.is_empty() && o.exclude.is_empty() {
        return None;
    }
    let pool = state.pool(pool_of(fs)).ok()?;
    let dsl = pool.dsl();
    let ds = dsl.find(fs).ok()?;
    let all = dsl.all_props(&ds.dir).ok()?;
    let names = o
        .set
        .iter()
        .map(|a| a.split_once('=').map_or(a.as_str(), |(k, _)| k))
        .chain(o.exclude.iter().map(String::as_str))
        .map(|k| dsl::props::canonical(k).to_string());
    let mut out = Vec::new();
    for k in names {
        for key in [format!("{k}{}", dsl::props::INHERIT_SUFFIX), k] {
            let v = all.iter().find(|(n, _)| *n == key).map(|(_, v)| zap_value(v));
            out.push((key, v));
        }
    }
    Some(out)
}

/// Received properties set only after the data of each substream (`extract_delay_props`
/// in OpenZFS's `zfs_ioc_recv_impl`): an earlier snapshot of a replication stream may
/// reference more than the final `refquota` allows, and must still be received.
const DELAYED_PROPS: [&str; 1] = ["refquota"];

/// After a substream's data: the stream's [`DELAYED_PROPS`] for `fs`, as received values.
fn apply_delayed_props(
    state: &Arc<State>,
    o: &RecvOpts,
    fs: &str,
    props: Option<&ondisk::nvlist::NvList>,
) -> Result<(), String> {
    let Some(props) = props else { return Ok(()) };
    if o.dry_run {
        return Ok(());
    }
    let excluded: Vec<&str> = o.exclude.iter().map(|k| dsl::props::canonical(k)).collect();
    let mut list = received_list(props, &excluded);
    list.retain(|(k, _)| DELAYED_PROPS.contains(&k.as_str()));
    if list.is_empty() {
        return Ok(());
    }
    let rw =
        crate::rwpool::writer_of(state, fs).ok_or_else(|| format!("cannot receive: '{fs}' is read-only"))?;
    // refquota needs no pool feature: nothing is rejected.
    rw.spa
        .set_received_props(fs, list, false, Vec::new())
        .map(|_| ())
        .map_err(|e| format!("cannot set the properties received for '{fs}': {e}"))
}

fn received_list(props: &ondisk::nvlist::NvList, dropped: &[&str]) -> Vec<(String, zap::write::ZapVal)> {
    let mut list = Vec::new();
    for (k, v) in &props.pairs {
        if dropped.contains(&k.as_str()) {
            continue;
        }
        let val = match v {
            ondisk::nvlist::NvValue::Uint64(n) => zap::write::ZapVal::u64(*n),
            ondisk::nvlist::NvValue::String(t) => zap::write::ZapVal::string(t),
            _ => continue,
        };
        list.push((k.clone(), val));
    }
    list
}

/// A stream package (`zfs send -I`: a compound BEGIN whose payload lists the file system and
/// its snapshots, its END, one incremental substream per snapshot, a closing END), as
/// libzfs's `zfs_receive_package` takes it for one file system. Replication packages
/// (`-R`: descendants, properties) are refused.
fn receive_package(
    state: &Arc<State>,
    target: &str,
    o: &RecvOpts,
    rd: &mut Reader,
    begin: &Begin,
    payload: &[u8],
) -> Result<Response, String> {
    let hdr = ondisk::nvlist::NvList::decode(payload)
        .map_err(|e| format!("cannot receive: invalid stream (bad package header: {e})"))?;
    // `not_recursive` is a DATA_TYPE_BOOLEAN flag: present or not.
    let recursive = !hdr.contains("not_recursive");
    if recursive && target.contains('@') {
        return Err(format!(
            "cannot receive: '{target}': a replication stream (zfs send -R) is received into a file system"
        ));
    }
    // Substreams of a replication stream land below the target as their file systems lie
    // below the package's top one (unless -d or -e place them).
    let top = begin.toname.split('@').next().unwrap_or("").to_string();
    // The local properties a replication stream carries per file system, found by the
    // guids of its snapshots (each substream names its snapshot's guid).
    let mut props_of: std::collections::BTreeMap<u64, Arc<FsMeta>> = Default::default();
    {
        if let Some(fss) = hdr.get_nvlist("fss") {
            for (_, v) in &fss.pairs {
                let ondisk::nvlist::NvValue::NvList(one) = v else { continue };
                let Some(snaps) = one.get_nvlist("snaps") else { continue };
                let meta = Arc::new(FsMeta {
                    name: one.get_str("name").map(str::to_string),
                    props: one.get_nvlist("props").cloned(),
                    snaps: snaps
                        .pairs
                        .iter()
                        .filter_map(|(n, g)| match g {
                            ondisk::nvlist::NvValue::Uint64(g) => Some((n.clone(), *g)),
                            _ => None,
                        })
                        .collect(),
                    snapprops: one.get_nvlist("snapprops").cloned(),
                    snapholds: one.get_nvlist("snapholds").cloned(),
                });
                for (_, g) in &meta.snaps {
                    props_of.insert(*g, meta.clone());
                }
            }
        }
    }
    if hdr.get_bool("raw").is_some() {
        return Err("cannot receive: raw streams cannot be received by rzfs yet".into());
    }
    match rd.next() {
        Ok(Some((Record::End(_), _))) => {}
        Ok(_) => return Err("cannot receive: invalid stream (package header without its END)".into()),
        Err(e) => return Err(format!("cannot receive: invalid stream ({e})")),
    }
    // A replication stream changes a whole tree: its file systems are unmounted (deepest
    // first, so no parent goes while a child is mounted in it) and mounted again at the end,
    // with the ones it created.
    let was_mounted = if recursive && !o.dry_run {
        crate::cmd::zfs::unmount_tree(state, target, true)?
    } else {
        Vec::new()
    };
    // An incremental replication stream: snapshots and file systems the sender renamed are
    // renamed here to match, and with -F what the sender no longer has goes, first.
    let mut gone = String::new();
    // Where the package's top file system lands (libzfs's `top_zfs`).
    let local_top = if o.discard_first {
        top.split_once('/').map_or(target.to_string(), |(_, rest)| format!("{target}/{rest}"))
    } else if o.last_only {
        format!("{target}/{}", top.rsplit('/').next().unwrap_or(&top))
    } else {
        target.to_string()
    };
    if recursive && !o.dry_run && hdr.get_str("fromsnap").is_some() {
        gone = rename_as_sent(state, &local_top, &top, &props_of, o.verbose);
        if o.force {
            gone.push_str(&destroy_not_sent(state, &local_top, &props_of, o.verbose));
        }
    }
    // Holds travel when the package's BEGIN says so and `receive -h` does not refuse them.
    let holds = begin.features() & FEATURE_HOLDS != 0 && !o.skip_holds;
    let r = receive_substreams(state, target, o, rd, recursive, &top, &props_of, holds).map(
        |(mut resp, made)| {
            resp.stdout.insert_str(0, &gone);
            (resp, made)
        },
    );
    if recursive && !o.dry_run {
        // Mounts made during the receive (parents that -d/-e created, mounted at once while
        // the target was down) come down too, so that all go up again parents first: else
        // the target mounted afterwards would hide them.
        let during = match crate::cmd::zfs::unmount_tree(state, target, true) {
            Ok(v) => v,
            Err(e) => {
                eprintln!("rzfsd: after the receive into '{target}': {e}");
                Vec::new()
            }
        };
        let mut names: Vec<String> = state
            .pool(pool_of(target))
            .map(|p| p.dsl().list().unwrap_or_default())
            .unwrap_or_default()
            .into_iter()
            .filter(|d| d.kind == dsl::DatasetKind::Filesystem)
            .map(|d| d.name)
            .filter(|n| n == target || n.starts_with(&format!("{target}/")))
            .collect();
        names.sort();
        let reached = received_mount_reach(state, &local_top, &names);
        for n in names {
            let again = was_mounted.contains(&n) || during.contains(&n);
            let made = r.as_ref().is_ok_and(|(_, made)| made.contains(&n));
            if again || (!o.no_mount && made && reached.contains(&n)) {
                if let Err(e) = crate::cmd::zfs::automount(state, &n) {
                    eprintln!("rzfsd: cannot mount '{n}' after the receive: {e}");
                }
            }
        }
    }
    r.map(|(resp, _)| resp)
}

/// The file systems among `names` that a replication receive mounts when it made them:
/// libzfs mounts its top file system `top` and, below it, each descendant whose
/// `mountpoint` is default or inherited, not looking below one set locally or received
/// (`zfs_receive`'s final `changelist_gather(top_zfs, MOUNTPOINT, CL_GATHER_MOUNT_ALWAYS)`
/// and `change_one`). So a received tree whose own mountpoint came in the stream stays
/// unmounted until `zfs mount` (its sender's paths may be in use here).
fn received_mount_reach(
    state: &Arc<State>,
    top: &str,
    names: &[String],
) -> std::collections::HashSet<String> {
    let mut reached = std::collections::HashSet::new();
    let Ok(pool) = state.pool(pool_of(top)) else {
        return reached;
    };
    let dsl = pool.dsl();
    // `names` is sorted, so a parent comes before its children.
    for n in names {
        let ok = if n == top {
            true
        } else if let Some((parent, _)) = n.rsplit_once('/') {
            (n.starts_with(&format!("{top}/")) && reached.contains(parent))
                && dsl.find(n).is_ok_and(|ds| {
                    crate::cmd::zfs::prop_value(&pool, &dsl, &ds, "mountpoint")
                        .is_ok_and(|v| v.source == "default" || v.source.starts_with("inherited"))
                })
        } else {
            false
        };
        if ok {
            reached.insert(n.clone());
        }
    }
    reached
}

/// An incremental replication stream follows the sender's renames, as libzfs's
/// `recv_incremental_replication` does before the substreams (with or without -F): below
/// `local_top` (where the package's top file system `top` lands), a snapshot known by its
/// guid under another name is renamed to the stream's name, and a file system whose
/// snapshots the stream lists under another path (relative to `top`) is moved there, parents
/// first, when the new parent exists and the name is free. A rename that cannot be done is
/// reported and skipped, as libzfs goes on past a failed `recv_rename`. Returns the `-v`
/// lines ("attempting rename A to B").
fn rename_as_sent(
    state: &Arc<State>,
    local_top: &str,
    top: &str,
    sent: &std::collections::BTreeMap<u64, Arc<FsMeta>>,
    verbose: bool,
) -> String {
    let mut out = String::new();
    let mut rename = |old: &str, new: &str| -> bool {
        if verbose {
            out.push_str(&format!("attempting rename {old} to {new}\n"));
        }
        match crate::cmd::zfs::snapdir_rename(state, old, new) {
            Ok(()) => true,
            Err(e) => {
                eprintln!("rzfsd: receive: cannot rename '{old}' to '{new}': {e}");
                if verbose {
                    out.push_str(&format!("failed ({e})\n"));
                }
                false
            }
        }
    };
    // One rename at a time, the datasets listed again after each: a parent moved moves its
    // children's names. Bounded, in case two renames undo each other; one that failed is
    // not tried again.
    let mut failed: Vec<(String, String)> = Vec::new();
    for _ in 0..64 {
        let Ok(pool) = state.pool(pool_of(local_top)) else { break };
        let Ok(all) = pool.dsl().list() else { break };
        let below = |n: &str| n == local_top || n.starts_with(&format!("{local_top}/"));
        let exists = |n: &str| all.iter().any(|d| d.name == n);
        let mut next: Option<(String, String)> = None;
        // Snapshot names first.
        for snap in all.iter().filter(|d| d.kind == dsl::DatasetKind::Snapshot) {
            let Some((fs, short)) = snap.name.split_once('@') else { continue };
            if !below(fs) || fs.contains('%') {
                continue;
            }
            let Some(meta) = sent.get(&snap.ds.guid) else { continue };
            let Some((want, _)) = meta.snaps.iter().find(|(_, g)| *g == snap.ds.guid) else { continue };
            let new = format!("{fs}@{want}");
            if want != short && !exists(&new) && !failed.contains(&(snap.name.clone(), new.clone())) {
                next = Some((snap.name.clone(), new));
                break;
            }
        }
        // Then file systems, shallowest first.
        if next.is_none() {
            let mut heads: Vec<&dsl::Dataset> = all
                .iter()
                .filter(|d| d.kind != dsl::DatasetKind::Snapshot && below(&d.name) && d.name != local_top)
                .filter(|d| !d.name.contains('%'))
                .collect();
            heads.sort_by_key(|d| d.name.matches('/').count());
            for h in heads {
                let snap_guids = all.iter().filter(|s| {
                    s.kind == dsl::DatasetKind::Snapshot
                        && s.name.split_once('@').is_some_and(|(f, _)| f == h.name)
                });
                let Some(meta) = snap_guids.filter_map(|s| sent.get(&s.ds.guid)).next() else { continue };
                let Some(rel) = meta.name.as_deref().and_then(|n| n.strip_prefix(top)) else { continue };
                if !rel.starts_with('/') {
                    continue;
                }
                let want = format!("{local_top}{rel}");
                let parent = want.rsplit_once('/').map_or("", |(p, _)| p);
                if want != h.name
                    && !exists(&want)
                    && exists(parent)
                    && !want.starts_with(&format!("{}/", h.name))
                    && !failed.contains(&(h.name.clone(), want.clone()))
                {
                    next = Some((h.name.clone(), want));
                    break;
                }
            }
        }
        let Some((old, new)) = next else { break };
        if !rename(&old, &new) {
            failed.push((old, new));
        }
    }
    out
}

/// `receive -F` of an incremental replication stream mirrors the sender's deletions, as
/// libzfs's `recv_incremental_replication` does before the substreams: below `local_top`
/// (the file system the package's top lands on), a snapshot whose guid no file system of
/// the stream lists is destroyed, and so is a file system none of whose snapshots the
/// stream lists (with its snapshots; not the top, and not while it has a descendant that
/// stays). Each goes on its own; one that cannot (a clone, a hold) is reported and kept, as
/// libzfs goes on past a failed `recv_destroy`. Returns the `-v` lines ("attempting destroy").
fn destroy_not_sent(
    state: &Arc<State>,
    local_top: &str,
    sent: &std::collections::BTreeMap<u64, Arc<FsMeta>>,
    verbose: bool,
) -> String {
    let (Ok(pool), Some(rw)) = (state.pool(pool_of(local_top)), crate::rwpool::writer_of(state, local_top))
    else {
        return String::new();
    };
    let Ok(all) = pool.dsl().list() else { return String::new() };
    let below = |n: &str| n == local_top || n.starts_with(&format!("{local_top}/"));
    let snaps_of = |fs: &str| -> Vec<&dsl::Dataset> {
        all.iter()
            .filter(|s| {
                s.kind == dsl::DatasetKind::Snapshot && s.name.split_once('@').is_some_and(|(f, _)| f == fs)
            })
            .collect()
    };
    let heads: Vec<&dsl::Dataset> = all
        .iter()
        .filter(|d| d.kind != dsl::DatasetKind::Snapshot && below(&d.name) && !d.name.contains('%'))
        .collect();
    let unknown: Vec<&str> = heads
        .iter()
        .filter(|h| h.name != local_top && !snaps_of(&h.name).iter().any(|s| sent.contains_key(&s.ds.guid)))
        .map(|h| h.name.as_str())
        .collect();
    let mut out = String::new();
    let mut destroy = |names: Vec<String>, shown: &str| {
        if verbose {
            out.push_str(&format!("attempting destroy {shown}\n"));
        }
        if let Err(e) = rw.spa.destroy_datasets(&names) {
            eprintln!("rzfsd: receive -F: cannot destroy '{shown}': {e}");
            if verbose {
                out.push_str(&format!("failed ({e})\n"));
            }
        }
    };
    for h in &heads {
        if unknown.contains(&h.name.as_str()) {
            continue;
        }
        for s in snaps_of(&h.name) {
            if !sent.contains_key(&s.ds.guid) {
                destroy(vec![s.name.clone()], &s.name);
            }
        }
    }
    // Deepest first; one with a descendant that stays is kept.
    let mut doomed: Vec<&str> = unknown.clone();
    doomed.sort_by_key(|n| std::cmp::Reverse(n.matches('/').count()));
    for fs in doomed {
        let inside = format!("{fs}/");
        if heads.iter().any(|h| h.name.starts_with(&inside) && !unknown.contains(&h.name.as_str())) {
            continue;
        }
        let mut names: Vec<String> = snaps_of(fs).iter().map(|s| s.name.clone()).collect();
        names.push(fs.to_string());
        destroy(names, fs);
    }
    out
}

/// The substreams of a package, after its header; returns the answer and the file systems
/// created (by full substreams). With `holds`, each snapshot received gets the holds the
/// header lists for it (`zfs_receive_one`'s `lzc_hold`; failures are ignored as there).
#[allow(clippy::too_many_arguments)]
fn receive_substreams(
    state: &Arc<State>,
    target: &str,
    o: &RecvOpts,
    rd: &mut Reader,
    recursive: bool,
    top: &str,
    props_of: &std::collections::BTreeMap<u64, Arc<FsMeta>>,
    holds: bool,
) -> Result<(Response, Vec<String>), String> {
    let mut made = Vec::new();
    let mut resp = Response::ok(String::new());
    let mut n = 0;
    let props_set: std::cell::RefCell<std::collections::HashSet<String>> = Default::default();
    let mut top_fs: Option<String> = None;
    // Mounting is the package's business (see receive_package).
    let o = &RecvOpts { no_mount: o.no_mount || recursive, ..o.clone() };
    loop {
        let (sub, sub_payload) = match rd.next() {
            Ok(Some((Record::Begin(b), p))) => (b, p),
            // The closing END of the package.
            Ok(Some((Record::End(_), _))) => break,
            Ok(Some((r, _))) => {
                return Err(format!("cannot receive: invalid stream ({} between substreams)", r.kind()))
            }
            Ok(None) => {
                return Err("cannot receive: the stream ends before its closing END: incomplete stream".into())
            }
            Err(e) => return Err(format!("cannot receive: invalid stream ({e})")),
        };
        let toguid = sub.toguid;
        let sub_target = if recursive && !o.discard_first && !o.last_only {
            let src = sub.toname.split('@').next().unwrap_or("");
            match src.strip_prefix(top) {
                Some(rel) if rel.is_empty() || rel.starts_with('/') => format!("{target}{rel}"),
                _ => {
                    return Err(format!(
                        "cannot receive: invalid stream (substream {} is not below the package's {top})",
                        sub.toname
                    ))
                }
            }
        } else if recursive && o.last_only {
            // -e keeps the last element of the top's name and the descendants' paths below
            // it: the substream's target is the parent of where it lands (receive_one
            // appends the last element).
            let src = sub.toname.split('@').next().unwrap_or("");
            let last = top.rsplit('/').next().unwrap_or(top);
            let rel = src.strip_prefix(top).unwrap_or("");
            let lands = format!("{target}/{last}{rel}");
            lands.rsplit_once('/').map_or(target.to_string(), |(p, _)| p.to_string())
        } else {
            target.to_string()
        };
        // `-o` values are local on the top file system only (the first substream's, by its
        // sent name: with -d every substream's target is the same file system).
        let src_fs = sub.toname.split('@').next().unwrap_or("").to_string();
        let is_top = top_fs.as_ref().is_none_or(|t| *t == src_fs);
        let one = RecvOpts { set: if is_top { o.set.clone() } else { Vec::new() }, ..o.clone() };
        // A file system's properties (and -o/-x) are set with its first substream.
        let meta = props_of.get(&toguid);
        let plan = PropsPlan {
            package: true,
            props: meta.and_then(|m| m.props.as_ref()),
            top: is_top,
            done: &props_set,
        };
        let sent_snap = sub.toname.split_once('@').map_or(String::new(), |(_, s)| s.to_string());
        let (r, fs, full) = receive_one(state, &sub_target, &one, rd, sub, &sub_payload, &plan)?;
        if let (Some(m), true, false) = (meta, holds, o.dry_run) {
            let snap = sub_target.split_once('@').map_or(sent_snap.as_str(), |(_, s)| s);
            let name = format!("{fs}@{snap}");
            if let (Some(tags), Some(rw)) = (
                m.snapholds.as_ref().and_then(|h| h.get_nvlist(&sent_snap)),
                crate::rwpool::writer_of(state, &fs),
            ) {
                for (tag, _) in &tags.pairs {
                    if let Err(e) = rw.spa.hold(std::slice::from_ref(&name), tag, crate::rwpool::now_pair().0)
                    {
                        eprintln!("rzfsd: cannot place hold '{tag}' on '{name}' received: {e}");
                    }
                }
            }
        }
        top_fs.get_or_insert_with(|| src_fs.clone());
        if full && !o.dry_run {
            made.push(fs.clone());
        }
        if let (Some(m), false) = (meta, o.dry_run) {
            received_snapshot_props(state, o, &fs, m)?;
        }
        resp.stdout.push_str(&r.stdout);
        resp.stderr.push_str(&r.stderr);
        n += 1;
    }
    if n == 0 && o.verbose {
        resp.stdout.push_str("the stream package holds no snapshot\n");
    }
    Ok((resp, made))
}

type Reader = StreamReader<BufReader<File>>;

/// What a receive that does not resume sets up before applying its stream.
struct Fresh<'a> {
    fromguid: u64,
    toname: &'a str,
    features: u64,
}

/// Why applying a stream stopped: `keep` when the stream itself ended or failed to read
/// (a resumable receive keeps what it has then), not when its contents were refused.
struct Stop {
    keep: bool,
    msg: String,
}

/// Applies the records of a substream to file system `fs` (taken offline) and ends with
/// its snapshot `snapname`. On failure, a resumable receive (`-s`) whose stream broke off
/// keeps the partial state; otherwise the target returns to `undo` (a snapshot to roll
/// back to; `None`: the file system is destroyed). Returns the data bytes applied.
#[allow(clippy::too_many_arguments)]
fn apply_stream(
    state: &Arc<State>,
    o: &RecvOpts,
    rd: &mut Reader,
    begin: &Begin,
    fs: &str,
    snapname: &str,
    undo: Option<&str>,
    fresh: Option<Fresh>,
    swap_into: Option<&str>,
) -> Result<u64, String> {
    let rw = crate::rwpool::writer_of(state, fs)
        .ok_or_else(|| format!("cannot receive: pool '{}' is read-only", pool_of(fs)))?;
    let stop = |msg: String| Stop { keep: false, msg };
    let applied = crate::cmd::zfs::offline_while(state, fs, true, || {
        let r = (|| -> Result<u64, Stop> {
            if let Some(f) = &fresh {
                rw.spa.set_inconsistent(fs).map_err(|e| stop(e.to_string()))?;
                if o.resumable {
                    rw.spa
                        .begin_resumable(fs, f.fromguid, begin.toguid, f.toname, f.features)
                        .map_err(|e| stop(e.to_string()))?;
                }
            }
            rw.spa.reset_dataset_writer(fs).map_err(|e| stop(e.to_string()))?;
            let ds = state
                .pool(pool_of(fs))
                .map_err(stop)?
                .dsl()
                .find(fs)
                .map_err(|e| stop(e.to_string()))?
                .ds_obj;
            rw.spa.open_dataset(ds).map_err(|e| stop(e.to_string()))?;
            let mut st = RecvState {
                toguid: begin.toguid,
                data_bytes: 0,
                last_write: None,
                full: begin.fromguid == 0,
                generation: Some(file_generation),
                features: begin.features(),
                large_dnodes: begin.features() & send::stream::FEATURE_LARGE_DNODE != 0,
                onto_clone: begin.fromguid == 0 && o.origin.is_some(),
                next_unlisted: 1,
            };
            loop {
                let (rec, payload) = match rd.next() {
                    Ok(Some(r)) => r,
                    Ok(None) => {
                        return Err(Stop {
                            keep: true,
                            msg: "the stream ends before its END record: incomplete stream".into(),
                        })
                    }
                    // Damage stops before the damaged record: the reader hands out a record
                    // only once its header parses and the checksum covering it agrees, so
                    // what was applied is sound and a resumable receive keeps it whatever
                    // the damage (a cut, a checksum, or a header made unreadable: an unknown
                    // type, an impossible length), as OpenZFS keeps its state once the
                    // stream has begun (`drc_should_save`).
                    Err(e) => return Err(Stop { keep: true, msg: e.to_string() }),
                };
                if let Record::End(e) = &rec {
                    if e.toguid != begin.toguid {
                        return Err(Stop { keep: true, msg: "END record belongs to another stream".into() });
                    }
                    if st.onto_clone {
                        rw.spa
                            .with_dataset_receiving(
                                ds,
                                pool::space::Reserve::Write { len: 0, block: 512 },
                                |tx| {
                                    recv::finish_full_onto_clone(&mut tx.ds.os, &st)
                                        .map_err(|e| pool::PoolError::Invalid(e.to_string()))
                                },
                            )
                            .map_err(|e| stop(e.to_string()))?;
                    }
                    break;
                }
                let reserve = pool::space::Reserve::Write {
                    len: payload.len() as u64,
                    block: payload.len().max(512) as u64,
                };
                let pos = rd.offset();
                rw.spa
                    .with_dataset_receiving(ds, reserve, |tx| {
                        recv::apply(&mut tx.ds.os, &mut st, &rec, &payload)
                            .map_err(|e| pool::PoolError::Invalid(e.to_string()))?;
                        if o.resumable {
                            if let Some((obj, off)) = st.last_write {
                                tx.ds.resume = Some((obj, off, pos));
                            }
                        }
                        Ok(())
                    })
                    .map_err(|e| stop(e.to_string()))?;
            }
            match swap_into {
                Some(head) => crate::cmd::zfs::offline_while(state, head, true, || {
                    rw.spa
                        .receive_swap(head, fs, snapname, begin.toguid, begin.creation_time)
                        .map_err(|e| e.to_string())
                })
                .map_err(stop)?,
                None => rw
                    .spa
                    .snapshot_received(snapname, begin.toguid, begin.creation_time)
                    .map_err(|e| stop(e.to_string()))?,
            }
            Ok(st.data_bytes)
        })();
        // A failed receive into an existing file system takes it back to its source
        // snapshot while it is still unmounted, so it is mounted again as it was (the
        // inconsistent state never shows).
        if let (Err(Stop { keep, .. }), Some(src)) = (&r, undo) {
            if !(*keep && o.resumable) {
                return Ok((r, Some(rw.spa.rollback(src, &[]).map_err(|e| e.to_string()))));
            }
        }
        Ok((r, None))
    });
    let (applied, rolled_back) = applied?;
    let kind = if begin.fromguid != 0 { "incremental" } else { "new filesystem" };
    match applied {
        Ok(b) => Ok(b),
        Err(Stop { keep: true, msg }) if o.resumable => {
            // Written now, so the token shown next is where the partial state stands.
            let _ = rw.sync();
            // A receive into FS/%recv: FS shows the token.
            let shown = fs.strip_suffix(&format!("/{}", pool::admin::RECV_TMP)).unwrap_or(fs);
            Err(format!(
                "cannot receive {kind} stream: {msg}\npartially-complete state of '{shown}' saved: \
             'zfs get receive_resume_token {shown}' gives the token for 'zfs send -t'"
            ))
        }
        Err(Stop { msg, .. }) => {
            // The target goes back to what it was.
            let cleanup = match (undo, rolled_back) {
                (Some(_), Some(done)) => done,
                (Some(src), None) => crate::cmd::zfs::offline_while(state, fs, true, || {
                    rw.spa.rollback(src, &[]).map_err(|e| e.to_string())
                }),
                (None, _) => rw.spa.destroy_datasets(&[fs.to_string()]).map_err(|e| e.to_string()),
            };
            let mut m = format!("cannot receive {kind} stream: {msg}");
            if let Err(c) = cleanup {
                m.push_str(&format!("\n(and '{fs}' could not be returned to its earlier state: {c})"));
            }
            Err(m)
        }
    }
}

/// The resume state a resumable receive kept in dataset object `ds` (`DS_FIELD_RESUME_*`).
#[derive(Clone, Debug)]
pub struct ResumeState {
    pub fromguid: u64,
    pub toguid: u64,
    pub toname: String,
    pub object: u64,
    pub offset: u64,
    pub bytes: u64,
    pub largeblock: bool,
    pub embed: bool,
    pub compress: bool,
}

/// The resume state of dataset object `ds`, if a resumable receive left one.
pub fn resume_state(p: &pool::Pool, ds: u64) -> Option<ResumeState> {
    use pool::writer::*;
    let u = |k: &str| zap::lookup_u64(&p.mos, ds, k).ok().flatten();
    let toguid = u(RESUME_TOGUID)?;
    let toname =
        zap::lookup(&p.mos, ds, RESUME_TONAME).ok().flatten().map(|e| e.string_value()).unwrap_or_default();
    Some(ResumeState {
        fromguid: u(RESUME_FROMGUID).unwrap_or(0),
        toguid,
        toname,
        object: u(RESUME_OBJECT).unwrap_or(0),
        offset: u(RESUME_OFFSET).unwrap_or(0),
        bytes: u(RESUME_BYTES).unwrap_or(0),
        largeblock: u(RESUME_LARGEBLOCK).is_some(),
        embed: u(RESUME_EMBEDOK).is_some(),
        compress: u(RESUME_COMPRESSOK).is_some(),
    })
}

/// The `receive_resume_token` of dataset object `ds` (OpenZFS's format, see `send::token`).
pub fn resume_token(p: &pool::Pool, ds: u64) -> Option<String> {
    let r = resume_state(p, ds)?;
    let mut nv = ondisk::nvlist::NvList::new();
    if r.fromguid != 0 {
        nv.add_u64("fromguid", r.fromguid);
    }
    nv.add_u64("object", r.object).add_u64("offset", r.offset).add_u64("bytes", r.bytes);
    nv.add_u64("toguid", r.toguid).add_str("toname", &r.toname);
    if r.largeblock {
        nv.add_boolean("largeblockok");
    }
    if r.embed {
        nv.add_boolean("embedok");
    }
    if r.compress {
        nv.add_boolean("compressok");
    }
    Some(send::token::encode(&nv))
}

/// A resumed stream (`zfs send -t`): it must continue the partial receive `fs` kept, at
/// the point the receive recorded.
#[allow(clippy::too_many_arguments)]
fn receive_resumed(
    state: &Arc<State>,
    o: &RecvOpts,
    rd: &mut Reader,
    begin: &Begin,
    payload: &[u8],
    fs: &str,
    snapname: &str,
    saved: Option<ResumeState>,
    swap_into: Option<&str>,
) -> Result<(Response, String, bool), String> {
    let Some(saved) = saved else {
        return Err(format!(
            "cannot receive resume stream: destination {fs} has no partially-complete state to resume"
        ));
    };
    let nv = ondisk::nvlist::NvList::decode(payload)
        .map_err(|e| format!("cannot receive resume stream: invalid BEGIN payload: {e}"))?;
    let (Some(obj), Some(off)) = (nv.get_u64("resume_object"), nv.get_u64("resume_offset")) else {
        return Err("cannot receive resume stream: the stream does not say where it resumes".into());
    };
    if saved.toguid != begin.toguid || saved.fromguid != begin.fromguid {
        return Err(format!(
            "cannot receive resume stream: the partial state of {fs} is of another stream ({})",
            saved.toname
        ));
    }
    if (obj, off) != (saved.object, saved.offset) {
        return Err(format!(
            "cannot receive resume stream: the stream resumes at object {obj} offset {off}, the partial state stands at object {} offset {}",
            saved.object, saved.offset
        ));
    }
    if o.dry_run {
        return Ok((Response::ok(String::new()), fs.to_string(), false));
    }
    let p = state.pool(pool_of(fs))?;
    let dsl = p.dsl();
    let head = dsl.find(fs).map_err(|e| e.to_string())?;
    let latest = dsl.snapshots(&head).map_err(|e| e.to_string())?.pop().map(|s| s.name);
    let full = begin.fromguid == 0;
    let bytes = apply_stream(state, o, rd, begin, fs, snapname, latest.as_deref(), None, swap_into)?;
    let mut r = Response::ok(String::new());
    if o.verbose {
        r.stdout = format!(
            "resumed the receive of {} into {snapname}: {} more\n",
            begin.toname,
            crate::format::nicenum(bytes)
        );
    }
    if let Some(head) = swap_into {
        // FS/%recv was swapped into FS, which stayed in service.
        return Ok((r, head.to_string(), false));
    }
    // The partial state kept the file system out of service (unlike OpenZFS, which receives
    // incrementals into a hidden clone): it comes back as a new one would.
    if !o.no_mount {
        if begin.objset_type == 3 {
            r.stderr.push_str(&crate::volumes::serve(state, fs));
        } else if !crate::daemon::is_mounted(fs) {
            r.stderr.push_str(&crate::cmd::zfs::automount(state, fs)?);
        }
    }
    Ok((r, fs.to_string(), full))
}

/// `zfs receive -A FS`: discards the partial state of a resumable receive.
pub fn abort_receive(state: &Arc<State>, fs: &str) -> Result<Response, String> {
    let p = state.pool(pool_of(fs)).map_err(|_| format!("cannot resume send: '{fs}' does not exist"))?;
    let dsl = p.dsl();
    let head = dsl.find(fs).map_err(|_| format!("cannot resume send: '{fs}' does not exist"))?;
    if resume_state(&p, head.ds_obj).is_none() {
        // A receive -F over FS keeps its partial state in FS/%recv: that goes.
        let tmp = format!("{fs}/{}", pool::admin::RECV_TMP);
        if dsl.find(&tmp).is_ok_and(|t| resume_state(&p, t.ds_obj).is_some()) {
            let rw = crate::rwpool::writer_of(state, fs)
                .ok_or_else(|| format!("cannot abort: pool '{}' is read-only", pool_of(fs)))?;
            rw.spa.destroy_datasets(&[tmp]).map_err(|e| e.to_string())?;
            return Ok(Response::ok(String::new()));
        }
        return Err(format!("'{fs}' does not have any resumable receive state to abort"));
    }
    let own = !dsl.snapshots(&head).map_err(|e| e.to_string())?.is_empty();
    let rw = crate::rwpool::writer_of(state, fs)
        .ok_or_else(|| format!("cannot abort: pool '{}' is read-only", pool_of(fs)))?;
    crate::cmd::zfs::offline_while(state, fs, true, || {
        rw.spa.abort_resumable(fs, own).map_err(|e| e.to_string())
    })?;
    Ok(Response::ok(String::new()))
}

/// The snapshots' own properties a replication stream carries (`snapprops`), stored as
/// received values on the snapshots of `fs` that are the sender's (by guid): the ones
/// just received and the ones received before; `-x` names are left out.
fn received_snapshot_props(state: &Arc<State>, o: &RecvOpts, fs: &str, m: &FsMeta) -> Result<(), String> {
    let Some(sp) = &m.snapprops else { return Ok(()) };
    let pool = state.pool(pool_of(fs))?;
    let dsl = pool.dsl();
    let rw =
        crate::rwpool::writer_of(state, fs).ok_or_else(|| format!("cannot receive: '{fs}' is read-only"))?;
    let dropped: Vec<&str> = o.exclude.iter().map(String::as_str).collect();
    for (name, guid) in &m.snaps {
        let Some(props) = sp.get_nvlist(name) else { continue };
        let list = received_list(props, &dropped);
        if list.is_empty() {
            continue;
        }
        // The snapshot of that name here, if it is the sender's (same guid).
        let snap = format!("{fs}@{name}");
        if dsl.find(&snap).is_ok_and(|d| d.ds.guid == *guid) {
            // Snapshot properties are user properties: none needs a pool feature.
            rw.spa
                .set_received_props(&snap, list, false, Vec::new())
                .map_err(|e| format!("cannot set the properties received for '{snap}': {e}"))?;
        }
    }
    Ok(())
}

/// What a replication package's header says of one file system: its properties, its
/// snapshots (name, guid) and theirs.
struct FsMeta {
    /// The file system's name on the sending side (`name`).
    name: Option<String>,
    props: Option<ondisk::nvlist::NvList>,
    snaps: Vec<(String, u64)>,
    snapprops: Option<ondisk::nvlist::NvList>,
    /// `snapholds`: snapshot name -> { hold tag -> time } (`send -h`).
    snapholds: Option<ondisk::nvlist::NvList>,
}

/// The answer of `receive -n`: nothing, or with -v what would be received.
fn would_receive(o: &RecvOpts, kind: &str, toname: &str, snapname: &str) -> Response {
    Response::ok(if o.verbose {
        format!("would receive {kind} stream of {toname} into {snapname}\n")
    } else {
        String::new()
    })
}

/// Receives one substream whose BEGIN was read; returns the answer, the file system
/// received into and whether the stream was a full one.
/// May `receive -F` put a full stream in place of the existing `h` (named `fs`)? As
/// libzfs's `zfs_receive_one` asks: -F given, no snapshots, not a clone, the same kind
/// (a volume never replaces a file system with children or a pool's root).
fn check_overwrite(
    o: &RecvOpts,
    dsl: &dsl::DslPool,
    h: &dsl::Dataset,
    fs: &str,
    objset_type: u64,
) -> Result<(), String> {
    let fail = |m: String| Err(format!("cannot receive new filesystem stream: {m}"));
    if !o.force {
        return fail(format!("destination '{fs}' exists\nmust specify -F to overwrite it"));
    }
    let all = dsl.list().map_err(|e| e.to_string())?;
    let prefix = format!("{fs}@");
    if let Some(s) = all.iter().filter(|d| d.name.starts_with(&prefix)).min_by_key(|d| d.ds.creation_txg) {
        return fail(format!(
            "destination has snapshots (eg. {})\nmust destroy them to overwrite it",
            s.name
        ));
    }
    if h.dir.origin_obj != 0 && all.iter().any(|d| d.ds_obj == h.dir.origin_obj && !d.name.contains('$')) {
        return fail(format!("destination '{fs}' is a clone\nmust destroy it to overwrite it"));
    }
    let is_vol = h.kind == dsl::DatasetKind::Volume;
    if objset_type == 3 && !is_vol {
        if !fs.contains('/') {
            return fail(format!("destination {fs} is the root dataset\ncannot overwrite with a ZVOL"));
        }
        let below = format!("{fs}/");
        if let Some(c) = all.iter().find(|d| d.name.starts_with(&below)) {
            return fail(format!("destination has children (eg. {})\ncannot overwrite with a ZVOL", c.name));
        }
    }
    if (objset_type == 3) != is_vol {
        return fail(format!(
            "destination '{fs}' is a {}; the stream holds a {}",
            if is_vol { "volume" } else { "file system" },
            if objset_type == 3 { "volume" } else { "file system" }
        ));
    }
    Ok(())
}

fn receive_one(
    state: &Arc<State>,
    target: &str,
    o: &RecvOpts,
    rd: &mut Reader,
    begin: Begin,
    begin_payload: &[u8],
    plan: &PropsPlan<'_>,
) -> Result<(Response, String, bool), String> {
    recv::check_begin(&begin, rd.big_endian()).map_err(|e| format!("cannot receive: {e}"))?;
    let resuming = begin.features() & FEATURE_RESUMING != 0;
    if let Ok(p) = state.pool(pool_of(target)) {
        for (flag, feat) in STREAM_POOL_FEATURES {
            if begin.features() & flag != 0 && !feature_enabled(&p, feat) {
                return Err(format!(
                    "cannot receive: pool '{}' does not support the stream's feature {feat} \
                     (rzpool set feature@{feat}=enabled {} enables it)",
                    p.name(),
                    p.name()
                ));
            }
        }
    }
    let (src_fs, src_snap) = begin.toname.split_once('@').unwrap_or((&begin.toname, ""));
    let (fs, snap) = if let Some((f, s)) = target.split_once('@') {
        if o.discard_first || o.last_only {
            return Err(format!("cannot receive: '{target}': -d and -e need a file system, not a snapshot"));
        }
        (f.to_string(), s.to_string())
    } else if o.discard_first {
        let rest = src_fs.split_once('/').map_or("", |(_, r)| r);
        (if rest.is_empty() { target.to_string() } else { format!("{target}/{rest}") }, src_snap.to_string())
    } else if o.last_only {
        (format!("{target}/{}", src_fs.rsplit('/').next().unwrap_or(src_fs)), src_snap.to_string())
    } else {
        (target.to_string(), src_snap.to_string())
    };
    let snapname = format!("{fs}@{snap}");
    let pool = state
        .pool(pool_of(&fs))
        .map_err(|_| format!("cannot receive: pool '{}' does not exist", pool_of(&fs)))?;
    let rw = crate::rwpool::writer_of(state, &fs)
        .ok_or_else(|| format!("cannot receive: pool '{}' is read-only", pool_of(&fs)))?;
    let dsl = pool.dsl();
    let head = dsl.find(&fs).ok();
    let incremental = begin.fromguid != 0;
    if let Ok(there) = dsl.find(&snapname) {
        // In a package, a snapshot the target already has (the same one: same guid) is
        // passed over, as libzfs does when an -I package overlaps what was received before.
        if plan.package && there.ds.guid == begin.toguid {
            skip_substream(rd)?;
            let mut r = Response::ok(String::new());
            if o.verbose {
                r.stdout = format!("snapshot {snapname} is already there: skipped\n");
            }
            return Ok((r, fs, false));
        }
        return Err(format!("cannot receive: destination snapshot '{snapname}' exists"));
    }
    let saved = head.as_ref().and_then(|h| resume_state(&pool, h.ds_obj));
    // The partial state of a receive -F over FS, kept in FS/%recv.
    let tmp = format!("{fs}/{}", pool::admin::RECV_TMP);
    let saved_tmp = dsl.find(&tmp).ok().and_then(|t| resume_state(&pool, t.ds_obj));
    if resuming {
        if saved.is_none() && saved_tmp.is_some() {
            // Only a full stream resumed over an existing file system needs -F (libzfs's
            // "resuming newfs on existing dataset"); an incremental one resumes in FS/%recv.
            if !o.force && !incremental {
                return Err(format!(
                    "cannot receive resume stream: Resuming recv on existing destination '{fs}'\nmust specify -F to overwrite it"
                ));
            }
            return receive_resumed(
                state,
                o,
                rd,
                &begin,
                begin_payload,
                &tmp,
                &snapname,
                saved_tmp,
                Some(&fs),
            );
        }
        return receive_resumed(state, o, rd, &begin, begin_payload, &fs, &snapname, saved, None);
    }
    if saved_tmp.is_some() {
        return Err(format!(
            "cannot receive: destination {fs} contains partially-complete state from \"zfs receive -s\".\n\
             resume it with the token 'zfs get receive_resume_token {fs}' shows, or discard it with 'zfs receive -A {fs}'"
        ));
    }
    if saved.is_some() {
        return Err(format!(
            "cannot receive: destination {fs} contains partially-complete state from \"zfs receive -s\".\n\
             resume it with the token 'zfs get receive_resume_token {fs}' shows, or discard it with 'zfs receive -A {fs}'"
        ));
    }
    // What to return to when the stream fails: the source snapshot, or nothing (destroy).
    let mut overwrite = false;
    let mut into_clone: Option<String> = None;
    if let (false, Some(origin)) = (incremental, o.origin.as_deref()) {
        // A full stream as a clone of `origin` (`zfs receive -o origin=`): the clone is made,
        // then the stream applied over the origin's objects ([`recv::RecvState::onto_clone`]);
        // a failure destroys the clone.
        if head.is_some() {
            return Err(format!("cannot receive new filesystem stream: destination '{fs}' exists"));
        }
        if let Some((parent, _)) = fs.rsplit_once('/') {
            if dsl.find(parent).is_err() {
                return Err(format!(
                    "cannot receive new filesystem stream: parent '{parent}' does not exist"
                ));
            }
        }
        let ofs = origin.split_once('@').map_or(origin, |(f, _)| f);
        let of = dsl.find(ofs).map_err(|_| format!("cannot open '{origin}': dataset does not exist"))?;
        if (begin.objset_type == 3) != (of.kind == dsl::DatasetKind::Volume) {
            return Err(format!(
                "cannot receive new filesystem stream: origin '{origin}' is of another type"
            ));
        }
        if o.dry_run {
            return Ok((would_receive(o, "full", &begin.toname, &snapname), fs, false));
        }
        let now = crate::rwpool::now_pair().0;
        rw.spa
            .clone_filesystem(origin, &fs, Vec::new(), now)
            .map_err(|e| format!("cannot receive: cannot create clone '{fs}' of {origin}: {e}"))?;
        let step = Step { props_on: &fs, into: &fs, made: Some(&fs), undo: None, swap: false, kind: "full" };
        let mut r = fill(state, o, rd, &begin, plan, &snapname, &step)?;
        if !o.no_mount {
            r.stderr.push_str(&crate::cmd::zfs::automount(state, &fs)?);
        }
        return Ok((r, fs, true));
    }
    let undo: Option<String> = if !incremental {
        if let Some(h) = &head {
            check_overwrite(o, &dsl, h, &fs, u64::from(begin.objset_type))?;
            overwrite = true;
        }
        if let Some((parent, _)) = fs.rsplit_once('/') {
            if dsl.find(parent).is_err() {
                // -d and -e make the file systems the sender's path needs (zfs(8)).
                if (o.discard_first || o.last_only) && !o.dry_run {
                    crate::cmd::zfs::create(state, parent, &[], true)
                        .map_err(|e| format!("cannot receive new filesystem stream: {e}"))?;
                } else {
                    return Err(format!(
                        "cannot receive new filesystem stream: parent '{parent}' does not exist"
                    ));
                }
            }
        }
        None
    } else if head.is_none() && begin.flags & DRR_FLAG_CLONE != 0 {
        // A clone's first snapshot: the file system is made a clone of the local snapshot
        // with the stream's source guid (its origin), then the stream applied to it; a
        // failure destroys it again.
        let all = dsl.list().map_err(|e| e.to_string())?;
        let origin = match o.origin.as_deref() {
            // -o origin= names it; it must be the stream's source.
            Some(name) => all.iter().find(|d| d.name == name).filter(|d| d.ds.guid == begin.fromguid),
            None => all.iter().find(|d| d.kind == dsl::DatasetKind::Snapshot && d.ds.guid == begin.fromguid),
        };
        let Some(origin) = origin else {
            return Err(format!("cannot receive: local origin for clone {snapname} does not exist"));
        };
        check_large_blocks(&rw, origin, &begin)?;
        if o.dry_run {
            return Ok((would_receive(o, "incremental", &begin.toname, &snapname), fs, false));
        }
        if let Some((parent, _)) = fs.rsplit_once('/') {
            if dsl.find(parent).is_err() {
                return Err(format!("cannot receive: parent '{parent}' does not exist"));
            }
        }
        let now = crate::rwpool::now_pair().0;
        rw.spa
            .clone_filesystem(&origin.name, &fs, Vec::new(), now)
            .map_err(|e| format!("cannot receive: cannot create clone '{fs}' of {}: {e}", origin.name))?;
        let step =
            Step { props_on: &fs, into: &fs, made: Some(&fs), undo: None, swap: false, kind: "incremental" };
        let mut r = fill(state, o, rd, &begin, plan, &snapname, &step)?;
        if !o.no_mount {
            r.stderr.push_str(&crate::cmd::zfs::automount(state, &fs)?);
        }
        // Made here: the caller sets its properties and mounts it like a new one.
        return Ok((r, fs, true));
    } else {
        let Some(h) = head else {
            return Err(format!("cannot receive incremental stream: destination '{fs}' does not exist"));
        };
        let all = dsl.list().map_err(|e| e.to_string())?;
        let prefix = format!("{fs}@");
        let mut snaps: Vec<&dsl::Dataset> = all.iter().filter(|d| d.name.starts_with(&prefix)).collect();
        snaps.sort_by_key(|d| d.ds.creation_txg);
        let Some(src) = snaps.iter().find(|d| d.ds.guid == begin.fromguid) else {
            return Err(format!(
                "cannot receive incremental stream: most recent snapshot of {fs} does not\nmatch incremental source"
            ));
        };
        check_large_blocks(&rw, src, &begin)?;
        let later: Vec<String> = snaps
            .iter()
            .filter(|d| d.ds.creation_txg > src.ds.creation_txg)
            .rev()
            .map(|d| d.name.clone())
            .collect();
        if !later.is_empty() && !o.force {
            return Err(format!(
                "cannot receive incremental stream: destination {fs} has snapshots (eg. {})\nmust destroy them to overwrite it",
                later[later.len() - 1]
            ));
        }
        // Changes not yet written count too: sync, then look at the head as it is on disk.
        rw.sync()?;
        let fresh = state.pool(pool_of(&fs))?.dsl().find(&fs).ok();
        let modified =
            fresh.as_ref().and_then(|d| d.objset_bp().ok()).map_or(h.ds.prev_snap_txg, |b| b.logical_birth())
                > src.ds.creation_txg;
        if modified && !o.force && later.is_empty() {
            return Err(format!(
                "cannot receive incremental stream: destination {fs} has been modified\nsince most recent snapshot"
            ));
        }
        if o.dry_run {
            return Ok((would_receive(o, "incremental", &begin.toname, &snapname), fs, false));
        }
        // As OpenZFS's dmu_recv_begin for an existing file system: the stream goes into
        // FS/%recv, a clone of the source, swapped in (and the later snapshots destroyed
        // with -F) at its end. FS stays mounted and in use meanwhile, nothing is discarded
        // before the stream has arrived whole, and a resumable receive keeps its partial
        // state there (`zfs get inconsistent FS/%recv`).
        into_clone = Some(src.name.clone());
        Some(src.name.clone())
    };
    if o.dry_run {
        return Ok((would_receive(o, "full", &begin.toname, &snapname), fs, false));
    }
    let now = crate::rwpool::now_pair().0;
    if overwrite {
        // The stream goes into FS/%recv, swapped in at its end: until then FS stays as it
        // was, and a failed receive leaves it so. Not resumable (OpenZFS keeps such a state
        // in FS/%recv; rzfs starts over).
        let tmp = rw
            .spa
            .create_receive_tmp(&fs, u64::from(begin.objset_type), now)
            .map_err(|e| format!("cannot receive new filesystem stream: {e}"))?;
        // Its properties go on FS itself: FS/%recv inherits what is inherited.
        let step = Step { props_on: &fs, into: &tmp, made: Some(&tmp), undo: None, swap: true, kind: "full" };
        let r = fill(state, o, rd, &begin, plan, &snapname, &step)?;
        // Mounted again (if it was) when the swap brought it back online.
        return Ok((r, fs, false));
    }
    if let Some(from) = into_clone {
        // receive -F of an incremental over changes: FS/%recv, a clone of the source, takes
        // the stream; FS (later snapshots, changes and all) stays until the swap.
        let tmp = rw
            .spa
            .create_receive_clone(&fs, &from, now)
            .map_err(|e| format!("cannot receive incremental stream: {e}"))?;
        let step =
            Step { props_on: &fs, into: &tmp, made: Some(&tmp), undo: None, swap: true, kind: "incremental" };
        let r = fill(state, o, rd, &begin, plan, &snapname, &step)?;
        return Ok((r, fs, false));
    }
    if !incremental {
        let empty: pool::admin::ObjsetInit = Arc::new(|_, _| Ok(()));
        let r = if begin.objset_type == 3 {
            rw.spa.create_volume(&fs, Vec::new(), empty, now)
        } else {
            rw.spa.create_filesystem(&fs, Vec::new(), empty, now)
        };
        r.map_err(|e| format!("cannot receive new filesystem stream: {e}"))?;
    }
    let step = Step {
        props_on: &fs,
        into: &fs,
        made: (!incremental).then_some(fs.as_str()),
        undo: undo.as_deref(),
        swap: false,
        kind: if incremental { "incremental" } else { "full" },
    };
    let mut r = fill(state, o, rd, &begin, plan, &snapname, &step)?;
    if !incremental && !o.no_mount {
        if begin.objset_type == 3 {
            r.stderr.push_str(&crate::volumes::serve(state, &fs));
        } else {
            r.stderr.push_str(&crate::cmd::zfs::automount(state, &fs)?);
        }
    }
    Ok((r, fs, !incremental))
}

/// Reads a substream's records up to its END, applying nothing (every checksum is still
/// verified: a damaged stream is refused).
fn skip_substream(rd: &mut Reader) -> Result<(), String> {
    loop {
        match rd.next() {
            Ok(Some((Record::End(_), _))) => return Ok(()),
            Ok(Some(_)) => {}
            Ok(None) => {
                return Err("cannot receive: the stream ends before its END record: incomplete stream".into())
            }
            Err(e) => return Err(format!("cannot receive: invalid stream ({e})")),
        }
    }
}

/// Where one substream goes (see [`fill`]).
struct Step<'a> {
    /// The file system its properties are set on.
    props_on: &'a str,
    /// The file system the records are applied to.
    into: &'a str,
    /// Made for this receive: destroyed if the properties cannot be set.
    made: Option<&'a str>,
    /// The snapshot to roll back to on failure.
    undo: Option<&'a str>,
    /// `into` is `FS/%recv`, swapped into `props_on` at the end.
    swap: bool,
    /// "full" or "incremental", for -v.
    kind: &'a str,
}

/// The common part of a substream's receive: the properties first ([`PropsPlan`]), then
/// the records, then the `-v` report.
fn fill(
    state: &Arc<State>,
    o: &RecvOpts,
    rd: &mut Reader,
    begin: &Begin,
    plan: &PropsPlan<'_>,
    snapname: &str,
    step: &Step<'_>,
) -> Result<Response, String> {
    let t0 = std::time::Instant::now();
    let mut r = Response::ok(String::new());
    // The received values the file system had: a receive that fails puts them back
    // (`zfs_ioc_recv_impl` restores its `origrecvd`).
    let before = if plan.props.is_some() && step.made != Some(step.props_on) {
        received_now(state, step.props_on)
    } else {
        None
    };
    // And the local entries `-o`/`-x` change (`origprops`).
    let local_before =
        if step.made != Some(step.props_on) { local_entries_now(state, step.props_on, o) } else { None };
    let undo_local = |e: String| -> String {
        let (Some(list), Some(rw)) = (local_before.clone(), crate::rwpool::writer_of(state, step.props_on))
        else {
            return e;
        };
        match rw.spa.restore_prop_entries(step.props_on, list) {
            Ok(()) => e,
            Err(x) => format!("{e}\n(and the properties set by -o/-x could not be restored: {x})"),
        }
    };
    // Both undone; a mount that -o mountpoint/canmount (or a received value) moved goes
    // back where the restored properties put it.
    let undo_props = |e: String| -> String {
        if local_before.is_none() && before.is_none() {
            return e;
        }
        let names = [step.props_on.to_string()];
        let mut out = e.clone();
        let moved = crate::cmd::zfs::with_remount(state, "canmount", &names, || {
            out = undo_local(e);
            if let (Some(list), Some(rw)) = (before.clone(), crate::rwpool::writer_of(state, step.props_on)) {
                if let Err(x) = rw.spa.set_received_props(step.props_on, list, true, Vec::new()) {
                    out.push_str(&format!(
                        "\n(and the properties received before could not be restored: {x})"
                    ));
                }
            }
            Ok(())
        });
        if let Err(x) = moved {
            out.push_str(&format!("\n(and its mount could not be put back: {x})"));
        }
        out
    };
    if let Err(e) = plan.apply(state, o, step.props_on, &mut r) {
        let e = undo_props(e);
        if let Some(m) = step.made {
            if let Some(rw) = crate::rwpool::writer_of(state, m) {
                let _ = rw.spa.destroy_datasets(&[m.to_string()]);
            }
        }
        return Err(e);
    }
    let fresh = Fresh { fromguid: begin.fromguid, toname: &begin.toname, features: begin.features() };
    let swap = step.swap.then_some(step.props_on);
    let bytes = match apply_stream(state, o, rd, begin, step.into, snapname, step.undo, Some(fresh), swap) {
        Ok(b) => b,
        Err(e) => return Err(undo_props(e)),
    };
    apply_delayed_props(state, o, step.props_on, plan.props)?;
    if o.verbose {
        r.stdout = format!(
            "receiving {} stream of {} into {snapname}\nreceived {} stream in {:.2} seconds\n",
            step.kind,
            begin.toname,
            crate::format::nicenum(bytes),
            t0.elapsed().as_secs_f64()
        );
    }
    Ok(r)
}

/// An incremental stream without large blocks onto a snapshot that has them is refused
/// (`recv_check_large_blocks`): its 128 KiB pieces of a large-block file would shrink the
/// file's block size, which a receive cannot do without losing the blocks it does not carry.
fn check_large_blocks(rw: &crate::rwpool::RwPool, from: &dsl::Dataset, begin: &Begin) -> Result<(), String> {
    if begin.features() & send::stream::FEATURE_LARGE_BLOCKS != 0 {
        return Ok(());
    }
    let active = rw.spa.read(|w| w.ds_features(from.ds_obj)).map_err(|e| format!("cannot receive: {e}"))?;
    if active.contains(&"large_blocks") {
        return Err("cannot receive incremental stream: incremental send stream requires -L (--large-block), to match previous receive.".into());
    }
    Ok(())
}

/// The ZPL generation in a bonus buffer (for the receive's same-file test).
fn file_generation(os: &dmu::tx::DirtyObjset, bonus_type: u8, bonus: &[u8]) -> Result<Option<u64>, String> {
    zpl::write::bonus_generation(os, bonus_type, bonus).map_err(|e| e.to_string())
}

//! # Pool events (`zpool events`; OpenZFS's zevent queue)
//!
//! OpenZFS's kernel keeps a bounded queue of events (`zfs_zevent_len_max`, 512 by default):
//! `sysevent.fs.zfs.*` for what the pool does (a scrub or resilver starting and finishing, a
//! device attached, spared, onlined, cleared, removed), `resource.fs.zfs.statechange` when a
//! device changes state. zed and `zpool events` read it. The daemon keeps the same queue,
//! process-wide, with the same classes and payload names (`pool`, `pool_guid`,
//! `vdev_guid`, `vdev_path`, `vdev_state`, `time`, `eid`); `rzpool events` prints it as
//! `zpool events` does (`-f` is followed by the client, which asks for the events after the
//! newest it printed). Errors the vdevs count (a read or write that failed, a copy with
//! wrong bytes) become error reports, `ereport.fs.zfs.io` and `ereport.fs.zfs.checksum`, with
//! OpenZFS's payload names (`vdev_*`, `parent_*`, `zio_err`, `zio_offset`, `zio_size`); the
//! vdevs keep at most [`vdev::ERROR_RECORDS_MAX`] per device between two postings (the
//! sync thread posts them every tick), as OpenZFS rate-limits its ereports per vdev.

use std::collections::VecDeque;
use std::sync::Mutex;

/// Default bound of the queue (`zfs_zevent_len_max`).
pub const ZEVENT_LEN_MAX: usize = 512;

/// A value of an event's payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EvVal {
    U64(u64),
    Str(String),
}

/// One event.
#[derive(Clone, Debug)]
pub struct Event {
    /// Event id, increasing from 1 (`eid`).
    pub eid: u64,
    /// (seconds, nanoseconds) since the epoch (`time`).
    pub time: (u64, u64),
    /// `class`, e.g. `sysevent.fs.zfs.resilver_start`.
    pub class: String,
    /// Payload in order (`class`, `time` and `eid` excluded).
    pub fields: Vec<(String, EvVal)>,
}

impl Event {
    /// The pool the event is about (`pool`).
    pub fn pool(&self) -> Option<&str> {
        self.fields.iter().find(|(k, _)| k == "pool").and_then(|(_, v)| match v {
            EvVal::Str(s) => Some(s.as_str()),
            EvVal::U64(_) => None,
        })
    }
}

struct Queue {
    events: VecDeque<Event>,
    next_eid: u64,
    dropped: u64,
}

static QUEUE: Mutex<Queue> = Mutex::new(Queue { events: VecDeque::new(), next_eid: 1, dropped: 0 });

fn queue() -> std::sync::MutexGuard<'static, Queue> {
    QUEUE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Posts an event of `class` about pool `pool` (name, guid) with `extra` payload.
pub fn post(class: &str, pool: (&str, u64), extra: Vec<(String, EvVal)>) {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    post_at(class, pool, extra, (now.as_secs(), u64::from(now.subsec_nanos())));
}

/// [`post`] of something that happened at `time` (seconds, nanoseconds since the epoch).
pub fn post_at(class: &str, pool: (&str, u64), extra: Vec<(String, EvVal)>, time: (u64, u64)) {
    let mut fields = vec![
        ("version".to_string(), EvVal::U64(0)),
        ("pool".to_string(), EvVal::Str(pool.0.to_string())),
        ("pool_guid".to_string(), EvVal::U64(pool.1)),
        ("pool_state".to_string(), EvVal::U64(0)),
        ("pool_context".to_string(), EvVal::U64(0)),
    ];
    fields.extend(extra);
    let mut q = queue();
    let eid = q.next_eid;
    q.next_eid += 1;
    q.events.push_back(Event { eid, time, class: class.to_string(), fields });
    while q.events.len() > ZEVENT_LEN_MAX {
        q.events.pop_front();
        q.dropped += 1;
    }
}

/// Posts `sysevent.fs.zfs.{what}` about pool `pool`, for vdev (guid, path) when given.
pub fn sysevent(what: &str, pool: (&str, u64), vdev: Option<(u64, &str)>) {
    let mut extra = Vec::new();
    if let Some((g, p)) = vdev {
        extra.push(("vdev_guid".to_string(), EvVal::U64(g)));
        if !p.is_empty() {
            extra.push(("vdev_path".to_string(), EvVal::Str(p.to_string())));
        }
    }
    post(&format!("sysevent.fs.zfs.{what}"), pool, extra);
}

/// Every queued event, oldest first, and how many were dropped for lack of room.
pub fn list() -> (Vec<Event>, u64) {
    let q = queue();
    (q.events.iter().cloned().collect(), q.dropped)
}

/// Empties the queue (`zpool events -c`); returns how many events it held.
pub fn clear() -> usize {
    let mut q = queue();
    let n = q.events.len();
    q.events.clear();
    q.dropped = 0;
    n
}

/// `zio_err` of an I/O error report (Linux `EIO`).
const EIO: u64 = 5;
/// `zio_err` of a checksum report: OpenZFS's `ECKSUM`, which is Linux's `EBADE`.
const ECKSUM: u64 = 52;
/// `zio_type_t`: `ZIO_TYPE_READ`, `ZIO_TYPE_WRITE`.
const ZIO_TYPE_READ: u64 = 1;
const ZIO_TYPE_WRITE: u64 = 2;

/// `vdev_state_t` numbers as OpenZFS reports them in `vdev_state`.
pub fn state_number(s: vdev::VdevState) -> u64 {
    match s {
        vdev::VdevState::Offline => 2,
        vdev::VdevState::Unavail => 4,
        vdev::VdevState::Faulted => 5,
        vdev::VdevState::Degraded => 6,
        vdev::VdevState::Online => 7,
    }
}

impl crate::writer::PoolWriter {
    /// Posts `sysevent.fs.zfs.{what}` about this pool, for leaf `vdev` when given.
    pub fn event(&self, what: &str, vdev: Option<u64>) {
        let path = vdev.and_then(|g| self.paths.get(&g).cloned()).unwrap_or_default();
        sysevent(what, (&self.name, self.guid), vdev.map(|g| (g, path.as_str())));
    }

    /// Posts the error reports the vdevs kept since the last call (see the module comment).
    /// Returns how many.
    /// `failmode` is the pool's property value, as the reports carry it.
    pub fn post_error_reports(&self, failmode: &str) -> usize {
        let mut n = 0;
        for t in &self.tops {
            for r in t.take_error_reports(self.guid) {
                let (class, err) = match r.record.kind {
                    vdev::ErrorKind::Checksum => ("ereport.fs.zfs.checksum", ECKSUM),
                    vdev::ErrorKind::Read | vdev::ErrorKind::Write => ("ereport.fs.zfs.io", EIO),
                };
                let mut extra = vec![
                    ("pool_failmode".to_string(), EvVal::Str(failmode.to_string())),
                    ("vdev_guid".to_string(), EvVal::U64(r.vdev_guid)),
                    ("vdev_type".to_string(), EvVal::Str(r.vdev_type.to_string())),
                ];
                if let Some(p) = self.paths.get(&r.vdev_guid) {
                    extra.push(("vdev_path".to_string(), EvVal::Str(p.clone())));
                }
                extra.extend([
                    ("vdev_read_errors".to_string(), EvVal::U64(r.counts.0)),
                    ("vdev_write_errors".to_string(), EvVal::U64(r.counts.1)),
                    ("vdev_cksum_errors".to_string(), EvVal::U64(r.counts.2)),
                    ("parent_guid".to_string(), EvVal::U64(r.parent_guid)),
                    ("parent_type".to_string(), EvVal::Str(r.parent_type.to_string())),
                    ("zio_err".to_string(), EvVal::U64(err)),
                ]);
                if r.record.kind == vdev::ErrorKind::Write {
                    extra.push(("zio_type".to_string(), EvVal::U64(ZIO_TYPE_WRITE)));
                } else {
                    extra.push(("zio_type".to_string(), EvVal::U64(ZIO_TYPE_READ)));
                }
                if let Some(off) = r.record.offset {
                    extra.push(("zio_offset".to_string(), EvVal::U64(off)));
                }
                extra.push(("zio_size".to_string(), EvVal::U64(r.record.size)));
                post_at(class, (&self.name, self.guid), extra, r.record.time);
                n += 1;
            }
        }
        n
    }

    /// Posts `resource.fs.zfs.statechange` for every leaf whose state differs from the one
    /// recorded in `last` (which is updated): faults, devices gone or back, offline/online.
    /// Returns whether any changed.
    pub fn post_state_changes(&self, last: &mut std::collections::BTreeMap<u64, vdev::VdevState>) -> bool {
        let mut changed = false;
        for l in self.tops.iter().flat_map(|t| t.leaves()) {
            let now = l.state();
            match last.insert(l.guid(), now) {
                Some(was) if was != now => {
                    changed = true;
                    let path = self.paths.get(&l.guid()).cloned().unwrap_or_default();
                    post(
                        "resource.fs.zfs.statechange",
                        (&self.name, self.guid),
                        vec![
                            ("vdev_guid".into(), EvVal::U64(l.guid())),
                            ("vdev_path".into(), EvVal::Str(path)),
                            ("vdev_state".into(), EvVal::U64(state_number(now))),
                            ("vdev_laststate".into(), EvVal::U64(state_number(was))),
                        ],
                    );
                }
                _ => {}
            }
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_is_bounded_and_numbered() {
        clear();
        for i in 0..(ZEVENT_LEN_MAX + 3) {
            sysevent("scrub_start", ("evq", 7), (i == 0).then_some((1, "/d")));
        }
        let (ev, dropped) = list();
        assert_eq!(ev.len(), ZEVENT_LEN_MAX);
        assert_eq!(dropped, 3);
        assert!(ev.windows(2).all(|w| w[1].eid == w[0].eid + 1));
        assert_eq!(ev[0].class, "sysevent.fs.zfs.scrub_start");
        assert_eq!(ev[0].pool(), Some("evq"));
        assert_eq!(clear(), ZEVENT_LEN_MAX);
        assert!(list().0.is_empty());
    }
}

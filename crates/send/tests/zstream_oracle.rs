//! OpenZFS as the oracle for the send-stream codec:
//!
//! * streams written by [`StreamWriter`] are fed to OpenZFS's `zstream dump -v`, which must
//!   decode every field as we meant it and find every checksum correct;
//! * the send streams OpenZFS ships as test data (`*.zsend.bz2` of the rsend test suite) must
//!   read to the end with [`StreamReader`], every checksum verified, with the record counts
//!   `zstream dump` reports.
//!
//! Needs OpenZFS's userland in /opt/rzfs-oracles (scripts/install-test-deps.sh; CI installs
//! it). Without it the tests print a note and pass; `RZFS_ORACLE=1` makes its absence a
//! failure, `RZFS_ORACLE=0` skips them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use send::stream::*;

const ORACLE_ROOT: &str = "/opt/rzfs-oracles";

fn oracle_wanted() -> bool {
    if std::env::var("RZFS_ORACLE").is_ok_and(|v| v == "0") {
        eprintln!("oracle tier disabled (RZFS_ORACLE=0)");
        return false;
    }
    true
}

fn oracle_missing(what: &str) {
    assert!(!std::env::var("RZFS_ORACLE").is_ok_and(|v| v == "1"), "RZFS_ORACLE=1 but {what} is missing");
    eprintln!("{what} not installed; run scripts/install-test-deps.sh (skipping)");
}

/// The zstream binary, or None (with a note) when it is not installed.
fn zstream() -> Option<PathBuf> {
    if !oracle_wanted() {
        return None;
    }
    let bin = Path::new(ORACLE_ROOT).join("openzfs/sbin/zstream");
    if bin.is_file() {
        Some(bin)
    } else {
        oracle_missing(&bin.display().to_string());
        None
    }
}

/// Runs `zstream dump ARGS FILE`; returns (success, stdout + stderr).
fn zstream_dump(bin: &Path, args: &[&str], file: &Path) -> (bool, String) {
    let out = Command::new(bin)
        .arg("dump")
        .args(args)
        .arg(file)
        .env("LD_LIBRARY_PATH", format!("{ORACLE_ROOT}/openzfs/lib/x86_64-linux-gnu"))
        .output()
        .expect("run zstream");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

fn temp_file(name: &str, bytes: &[u8]) -> PathBuf {
    let path = std::env::temp_dir().join(format!("rzfs-send-{}-{name}", std::process::id()));
    std::fs::write(&path, bytes).unwrap();
    path
}

/// `Total DRR_X records = N (B bytes)` lines of zstream dump's summary: X -> (N, B).
fn summary(text: &str) -> BTreeMap<String, (u64, u64)> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix("Total DRR_") else { continue };
        let Some((name, rest)) = rest.split_once(" records = ") else { continue };
        let Some((n, rest)) = rest.split_once(" (") else { continue };
        let bytes = rest.trim_end_matches(" bytes)");
        out.insert(name.to_string(), (n.parse().unwrap(), bytes.parse().unwrap()));
    }
    out
}

/// The stream of the brief: one file of a plain filesystem (objset type 2) sent in full.
fn small_stream(big_endian: bool) -> (Vec<u8>, [u64; 4]) {
    let toguid = 0x1234;
    let mut w = StreamWriter::with_byte_order(Vec::new(), big_endian);
    let begin = Begin {
        magic: BACKUP_MAGIC,
        versioninfo: versioninfo(HDRTYPE_SUBSTREAM, 0),
        creation_time: 0x6000_0000,
        objset_type: 2,
        flags: 0,
        toguid,
        fromguid: 0,
        toname: "pool/fs@snap".into(),
    };
    w.write(&Record::Begin(begin), &[]).unwrap();
    let object = Object {
        object: 5,
        object_type: 19, // DMU_OT_PLAIN_FILE_CONTENTS
        bonustype: 44,   // DMU_OT_SA
        blksz: 131_072,
        bonuslen: 0,
        checksumtype: 7,
        compress: 2,
        dn_slots: 1,
        toguid,
        ..Default::default()
    };
    w.write(&Record::Object(object), &[]).unwrap();
    // A second object with a 5-byte bonus buffer: 8 payload bytes.
    let bonus = Object {
        object: 6,
        object_type: 19,
        bonustype: 44,
        blksz: 512,
        bonuslen: 5,
        toguid,
        ..Default::default()
    };
    w.write(&Record::Object(bonus), &[1, 2, 3, 4, 5, 0, 0, 0]).unwrap();
    let write = WriteRec {
        object: 5,
        object_type: 19,
        offset: 0,
        logical_size: 4096,
        toguid,
        checksumtype: 7,
        ..Default::default()
    };
    let data: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
    w.write(&Record::Write(write), &data).unwrap();
    w.write(&Record::Free(Free { object: 5, offset: 4096, length: OBJECT_END, toguid }), &[]).unwrap();
    w.write(&Record::FreeObjects(FreeObjects { firstobj: 7, numobjs: 25, toguid }), &[]).unwrap();
    let end_sum = w.checksum();
    w.write(&Record::End(End { checksum: [0; 4], toguid }), &[]).unwrap();
    (w.into_inner(), end_sum)
}

#[test]
fn zstream_dump_reads_our_streams() {
    let Some(bin) = zstream() else { return };
    for be in [false, true] {
        let (bytes, end_sum) = small_stream(be);
        let path = temp_file(if be { "be.zstream" } else { "le.zstream" }, &bytes);
        // The zstream of OpenZFS 2.2 compares a record's drr_checksum with the running sum
        // before byte-swapping the stored words, so it rejects every checksummed record of a
        // foreign-endian stream (the kernel's receive swaps first, dmu_recv.c, and newer zstream
        // does too). For big-endian streams it can only check the fields (-C); our own checksums
        // are checked against a one-shot big-endian fletcher-4 in the unit tests.
        let args: &[&str] = if be { &["-v", "-C"] } else { &["-v"] };
        let (ok, text) = zstream_dump(&bin, args, &path);
        let _ = std::fs::remove_file(&path);
        assert!(ok, "zstream dump failed (be {be}):\n{text}");
        // zstream reports bad record checksums with "Incorrect checksum in record header" and
        // a bad END checksum with "Expected checksum differs from checksum in stream".
        for bad in ["Incorrect checksum", "invalid checksum", "Expected checksum", "INVALID", "bad magic"] {
            assert!(!text.contains(bad), "zstream dump reports '{bad}' (be {be}):\n{text}");
        }
        let want_lines = [
            "\thdrtype = 1".to_string(),
            "\tfeatures = 0".into(),
            "\tmagic = 2f5bacbac".into(),
            "\ttype = 2".into(),
            "\ttoguid = 1234".into(),
            "\ttoname = pool/fs@snap".into(),
            "OBJECT object = 5 type = 19 bonustype = 44 blksz = 131072 bonuslen = 0 dn_slots = 1 \
             raw_bonuslen = 0 flags = 0 maxblkid = 0 indblkshift = 0 nlevels = 0 nblkptr = 0"
                .into(),
            "WRITE object = 5 type = 19 checksum type = 7 compression type = 0 flags = 0 offset = 0 \
             logical_size = 4096 compressed_size = 0 payload_size = 4096"
                .into(),
            "FREE object = 5 offset = 4096 length = -1".into(),
            "FREEOBJECTS firstobj = 7 numobjs = 25".into(),
            format!("END checksum = {:x}/{:x}/{:x}/{:x}", end_sum[0], end_sum[1], end_sum[2], end_sum[3]),
        ];
        for want in &want_lines {
            assert!(
                text.lines().any(|l| l.starts_with(want.as_str())),
                "missing {want:?} (be {be}):\n{text}"
            );
        }
        let s = summary(&text);
        let expect = [
            ("BEGIN", (1, 0)),
            ("END", (1, 0)),
            ("OBJECT", (2, 8)),
            ("FREEOBJECTS", (1, 0)),
            ("WRITE", (1, 4096)),
            ("FREE", (1, 0)),
        ];
        for (name, counts) in expect {
            assert_eq!(s.get(name), Some(&counts), "Total DRR_{name} (be {be}):\n{text}");
        }
        assert!(text.contains(&format!("Total stream length = {}", bytes.len())), "{text}");
    }
}

#[test]
fn zstream_dump_sees_damage_we_see() {
    // The oracle really checks: a flipped payload byte makes both it and us complain.
    let Some(bin) = zstream() else { return };
    let (mut bytes, _) = small_stream(false);
    let write_payload = 4 * RECORD_SIZE + 8 + 100; // BEGIN, OBJECT, OBJECT+8, WRITE, payload
    bytes[write_payload] ^= 1;
    let path = temp_file("damaged.zstream", &bytes);
    let (_, text) = zstream_dump(&bin, &["-v"], &path);
    let _ = std::fs::remove_file(&path);
    assert!(text.contains("Incorrect checksum in record header"), "{text}");
    let mut r = StreamReader::new(&bytes[..]);
    let err = loop {
        match r.next() {
            Ok(Some(_)) => {}
            Ok(None) => panic!("damage not detected"),
            Err(e) => break e,
        }
    };
    assert!(matches!(err, StreamError::Checksum { record: "FREE", .. }), "{err}");
}

/// `*.zsend.bz2` files under /opt/rzfs-oracles (bounded walk).
fn fixtures() -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![(PathBuf::from(ORACLE_ROOT), 0)];
    while let Some((dir, depth)) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let Ok(ft) = entry.file_type() else { continue };
            let path = entry.path();
            if ft.is_dir() && depth < 12 {
                dirs.push((path, depth + 1));
            } else if ft.is_file() && path.to_string_lossy().ends_with(".zsend.bz2") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

#[test]
fn openzfs_fixture_streams_read_to_the_end() {
    if !oracle_wanted() {
        return;
    }
    let files = fixtures();
    if files.is_empty() {
        oracle_missing("the OpenZFS rsend fixtures (*.zsend.bz2)");
        return;
    }
    let bin = zstream();
    for file in files {
        let out = Command::new("bzip2").arg("-dc").arg(&file).output().expect("run bzip2");
        assert!(out.status.success(), "bzip2 -dc {}", file.display());
        let bytes = out.stdout;
        let mut r = StreamReader::new(&bytes[..]);
        let mut counts: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        let mut ends = 0;
        loop {
            match r.next() {
                Ok(Some((rec, payload))) => {
                    let c = counts.entry(rec.kind().to_string()).or_default();
                    c.0 += 1;
                    c.1 += payload.len() as u64;
                    if let Record::End(_) = rec {
                        ends += 1;
                    }
                }
                Ok(None) => break,
                Err(e) => panic!("{}: {e}", file.display()),
            }
        }
        assert_eq!(r.offset(), bytes.len() as u64);
        assert!(ends > 0, "{}: no END record", file.display());
        eprintln!("{}: {} bytes, {counts:?}, big endian {}", file.display(), bytes.len(), r.big_endian());
        // The checksums are really checked: one flipped byte in the middle of the stream (a
        // record or a payload; the next checksummed record covers it) is caught.
        let mut bad = bytes.clone();
        let mid = bad.len() / 2;
        bad[mid] ^= 0x10;
        let mut r = StreamReader::new(&bad[..]);
        let caught = loop {
            match r.next() {
                Ok(Some(_)) => {}
                Ok(None) => break false,
                Err(_) => break true,
            }
        };
        assert!(caught, "{}: damage at byte {mid} not detected", file.display());
        // Same record counts and payload bytes as zstream dump.
        if let Some(bin) = &bin {
            let path = temp_file("fixture.zstream", &bytes);
            let (ok, text) = zstream_dump(bin, &[], &path);
            let _ = std::fs::remove_file(&path);
            assert!(ok, "zstream dump {}:\n{text}", file.display());
            for (name, (n, b)) in summary(&text) {
                let ours = counts.get(&name).copied().unwrap_or_default();
                assert_eq!(ours, (n, b), "{}: DRR_{name} records (count, payload bytes)", file.display());
            }
        }
    }
}

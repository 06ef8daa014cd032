//! # send — the OpenZFS send stream (`zfs send` / `zfs receive` wire format)
//!
//! A send stream is a flat sequence of records. Each record is a fixed 312-byte
//! `dmu_replay_record_t` (OpenZFS include/sys/zfs_ioctl.h): a u32 record type, a u32
//! `drr_payloadlen`, and a 304-byte union of the per-type structures. Some records are followed
//! by a payload whose length the record announces (block contents after WRITE, the bonus buffer
//! after OBJECT, a packed nvlist after BEGIN, …). Integers are in the sender's byte order; the
//! receiver learns it from the BEGIN record's magic, which reads as `0x2F5BACBAC` in one order
//! or byte-swapped in the other.
//!
//! Integrity: one fletcher-4 runs over every byte of the stream, records and payloads alike,
//! read as 32-bit words in the sender's order. Every record except BEGIN stores in its last 32
//! bytes (`drr_checksum`, offset 280) the running sum of everything before that field, so damage
//! anywhere is caught at the next record; the END record additionally carries the sum of
//! everything before END. All-zero checksum fields mean "not checksummed" (older senders).
//!
//! A plain stream is `BEGIN, (OBJECT | WRITE | FREE | …)*, END`. A compound stream (`zfs send
//! -R`/`-p`, header type 2) starts with a BEGIN whose payload is an XDR nvlist describing the
//! datasets and snapshots, followed by its own END, then one plain substream per snapshot, then
//! a final all-zero END. The running checksum starts from zero at every BEGIN and after every
//! END.
//!
//! [`stream`] holds the record codec: field layouts, [`stream::StreamWriter`] (fills in the
//! checksums) and [`stream::StreamReader`] (verifies them, bounds every payload).
#![forbid(unsafe_code)]

pub mod recv;
pub mod send;
pub mod stream;
pub mod token;

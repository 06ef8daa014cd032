//! # Applying a send stream to an objset (the DMU half of `zfs receive`)
//!
//! Each record of a substream changes the objset being received into as OpenZFS's
//! `dmu_recv.c` does (`receive_object`, `receive_freeobjects`, `receive_write`,
//! `receive_free`, `receive_write_embedded`):
//!
//! - OBJECT creates the object with the sender's number, type, block size, bonus type and
//!   bonus, or updates an existing one. An existing object whose dnode cannot take the new
//!   shape (fewer block pointers, another dnode size), or whose block size changes and that
//!   cannot be the same file, is freed and created again: the stream then carries all of
//!   its blocks. The same file whose block size grew (a `send -L` incremental after a
//!   stream without -L) keeps its blocks (see `same_file_grows`).
//! - FREEOBJECTS frees the allocated objects of a range; FREE frees a byte range of an
//!   object (to its end: a truncation).
//! - WRITE and WRITE_EMBEDDED write whole blocks. A compressed payload (`send -c`) and an
//!   embedded pointer's payload are decompressed to check them and kept as they came: the
//!   block is written with the sender's compression (`DirtyObjset::write_compressed`), as
//!   OpenZFS writes them; uncompressed payloads are compressed by the receiving dataset's
//!   properties.
//!
//! The pool layer above owns the dataset, its txgs and what happens on failure; here every
//! record is checked against what the objset can hold before anything changes, so a bad
//! record fails cleanly. Refused, with the reason: dedup (WRITE_BYREF), raw and redacted
//! streams, spill blocks, dnodes larger than 512 bytes, byte-swapped (big-endian) streams.

use crate::stream::*;
use dmu::tx::DirtyObjset;
use dmu::DmuError;

/// Errors of a receive.
#[derive(Debug, thiserror::Error)]
pub enum RecvError {
    #[error("{0}")]
    Stream(#[from] StreamError),
    #[error("{0}")]
    Dmu(#[from] DmuError),
    /// The stream needs something rzfs does not do yet.
    #[error("{0}")]
    Unsupported(String),
    /// The stream contradicts itself or the target.
    #[error("invalid stream: {0}")]
    Invalid(String),
}

pub type Result<T> = std::result::Result<T, RecvError>;

/// Stream features a receive accepts (the others are refused at BEGIN).
pub const ACCEPTED_FEATURES: u64 = FEATURE_SA_SPILL
    | FEATURE_EMBED_DATA
    | FEATURE_LZ4
    | FEATURE_LARGE_BLOCKS
    | FEATURE_COMPRESSED
    | FEATURE_LARGE_DNODE
    | FEATURE_ZSTD
    | FEATURE_HOLDS
    | FEATURE_RESUMING
    | FEATURE_SWITCH_TO_LARGE_BLOCKS;

/// Names of the stream features, for messages.
fn feature_names(f: u64) -> String {
    let names = [
        (FEATURE_DEDUP, "dedup"),
        (FEATURE_DEDUPPROPS, "dedup properties"),
        (FEATURE_RESUMING, "resuming"),
        (FEATURE_REDACTED, "redacted"),
        (FEATURE_RAW, "raw (encrypted)"),
        (FEATURE_LONGNAME, "long names"),
        (FEATURE_LARGE_MICROZAP, "large microzap"),
    ];
    let mut out: Vec<String> =
        names.iter().filter(|(b, _)| f & b != 0).map(|(_, n)| (*n).to_string()).collect();
    let known: u64 = names.iter().map(|(b, _)| b).fold(0, |a, b| a | b);
    if f & !known != 0 {
        out.push(format!("unknown flags {:#x}", f & !known));
    }
    out.join(", ")
}

/// Checks a substream's BEGIN record before anything is changed.
pub fn check_begin(b: &Begin, big_endian: bool) -> Result<()> {
    if big_endian {
        return Err(RecvError::Unsupported(
            "the stream comes from a big-endian sender, which rzfs cannot receive yet".into(),
        ));
    }
    if b.hdrtype() != HDRTYPE_SUBSTREAM {
        return Err(RecvError::Unsupported(
            "replication (-R) and compound streams cannot be received by rzfs yet".into(),
        ));
    }
    let f = b.features();
    if f & FEATURE_DEDUP != 0 {
        return Err(RecvError::Unsupported(
            "deduplicated streams (zfs send -D) cannot be received; convert the stream with 'zstream redup' first"
                .into(),
        ));
    }
    if f & !SUPPORTED_FEATURES != 0 {
        return Err(RecvError::Unsupported(format!(
            "stream has unsupported feature, feature flags = {f:#x} ({})",
            feature_names(f & !SUPPORTED_FEATURES)
        )));
    }
    if f & !ACCEPTED_FEATURES != 0 {
        return Err(RecvError::Unsupported(format!(
            "the stream uses features rzfs cannot receive yet: {}",
            feature_names(f & !ACCEPTED_FEATURES)
        )));
    }
    if !matches!(b.objset_type, 2 | 3) {
        return Err(RecvError::Invalid(format!(
            "objset type {} is not a file system or volume",
            b.objset_type
        )));
    }
    if !b.toname.contains('@') {
        return Err(RecvError::Invalid(format!("BEGIN names '{}', not a snapshot", b.toname)));
    }
    Ok(())
}

/// The bonus room of a 512-byte dnode (`DN_OLD_MAX_BONUSLEN`).
const MAX_BONUS: usize = 320;
/// Largest block OpenZFS allows (`SPA_MAXBLOCKSIZE`).
pub const MAX_BLOCK: u64 = 16 << 20;

/// Per-stream state of a receive.
#[derive(Debug, Default)]
pub struct RecvState {
    /// The stream's guid (every record must carry it).
    pub toguid: u64,
    /// Bytes of block data applied.
    pub data_bytes: u64,
    /// (object, offset) of the last WRITE applied: where a resumed stream may start.
    pub last_write: Option<(u64, u64)>,
    /// A full stream (no incremental source): it replaces whatever an object number held.
    pub full: bool,
    /// The ZPL generation of a bonus buffer of a bonus type in the objset (the layer above
    /// knows the ZPL): tells a file whose block size grew from another file under the same
    /// object number. None: such an object is always started over.
    pub generation: Option<GenerationFn>,
    /// The BEGIN record's feature flags.
    pub features: u64,
    /// The stream may hold dnodes above 512 bytes: its BEGIN has LARGE_DNODE, and the
    /// receiving pool has large_dnode enabled (`spa_maxdnodesize`).
    pub large_dnodes: bool,
    /// A full stream received onto a clone (`receive -o origin=`): the objset already holds
    /// the origin's objects, and those the stream does not list are freed, in the gaps
    /// between its OBJECT records (which come in ascending order) and past the last one at
    /// the end ([`finish_full_onto_clone`]), as `receive_writer_thread` does for `drc_clone`.
    pub onto_clone: bool,
    /// With `onto_clone`: the first object number no OBJECT record has covered yet.
    pub next_unlisted: u64,
}

/// See [`RecvState::generation`].
pub type GenerationFn = fn(&DirtyObjset, u8, &[u8]) -> std::result::Result<Option<u64>, String>;

fn check_guid(st: &RecvState, g: u64, what: &str) -> Result<()> {
    if g != st.toguid {
        return Err(RecvError::Invalid(format!("{what} record belongs to another stream (guid {g:#x})")));
    }
    Ok(())
}

/// Applies one record (not BEGIN or END) and its payload to `os`.
pub fn apply(os: &mut DirtyObjset, st: &mut RecvState, rec: &Record, payload: &[u8]) -> Result<()> {
    match rec {
        Record::Object(o) => {
            check_guid(st, o.toguid, "OBJECT")?;
            if st.onto_clone && o.object > st.next_unlisted.max(1) {
                let first = st.next_unlisted.max(1);
                free_objects(os, first, o.object - first)?;
            }
            object(os, st, o, payload)?;
            if st.onto_clone {
                st.next_unlisted = st.next_unlisted.max(o.object + u64::from(o.dn_slots.max(1)));
            }
            Ok(())
        }
        Record::FreeObjects(f) => {
            check_guid(st, f.toguid, "FREEOBJECTS")?;
            free_objects(os, f.firstobj, f.numobjs)
        }
        Record::Write(w) => {
            check_guid(st, w.toguid, "WRITE")?;
            let len = if w.compressiontype != 0 {
                check_compress_feature(st, w.compressiontype, "WRITE")?;
                let data = decompress(w.compressiontype, payload, w.logical_size)?;
                write_compressed(os, w.object, w.offset, &data, w.compressiontype, payload, false)?;
                data.len()
            } else {
                write(os, w.object, w.offset, payload)?;
                payload.len()
            };
            st.data_bytes += len as u64;
            st.last_write = Some((w.object, w.offset));
            Ok(())
        }
        Record::WriteEmbedded(w) => {
            check_guid(st, w.toguid, "WRITE_EMBEDDED")?;
            let body = payload.get(..w.psize as usize).ok_or_else(|| {
                RecvError::Invalid(format!("WRITE_EMBEDDED payload shorter than its psize {}", w.psize))
            })?;
            check_compress_feature(st, w.compression, "WRITE_EMBEDDED")?;
            let mut data = decompress(w.compression, body, u64::from(w.lsize))?;
            if w.length > MAX_BLOCK {
                return Err(RecvError::Invalid(format!("WRITE_EMBEDDED length {} too large", w.length)));
            }
            data.resize(w.length as usize, 0);
            // Only BP_EMBEDDED_TYPE_DATA (0) exists for data; the length must be the
            // embedded pointer's logical size for the pointer to be kept as it came.
            if w.etype == 0 && w.length == u64::from(w.lsize) {
                write_compressed(os, w.object, w.offset, &data, w.compression, body, true)?;
            } else {
                write(os, w.object, w.offset, &data)?;
            }
            st.data_bytes += data.len() as u64;
            st.last_write = Some((w.object, w.offset));
            Ok(())
        }
        Record::Free(f) => {
            check_guid(st, f.toguid, "FREE")?;
            if os.dnode(f.object)?.is_none() {
                return Err(RecvError::Invalid(format!("FREE of object {}, which does not exist", f.object)));
            }
            os.free_range(f.object, f.offset, f.length)?;
            Ok(())
        }
        Record::Spill(s) => {
            check_guid(st, s.toguid, "SPILL")?;
            if s.flags & DRR_SPILL_UNMODIFIED != 0 {
                // Sent for old receivers only: the object keeps the spill block it has.
                return Ok(());
            }
            Err(RecvError::Unsupported(format!(
                "object {} has a spill block (system attributes that do not fit its dnode), which rzfs cannot receive yet",
                s.object
            )))
        }
        Record::WriteByref(_) => Err(RecvError::Unsupported(
            "deduplicated streams (WRITE_BYREF) cannot be received; send without -D".into(),
        )),
        Record::ObjectRange(_) => {
            Err(RecvError::Unsupported("raw streams cannot be received by rzfs yet".into()))
        }
        Record::Redact(_) => {
            Err(RecvError::Unsupported("redacted streams cannot be received by rzfs yet".into()))
        }
        Record::Begin(_) | Record::End(_) => {
            Err(RecvError::Invalid(format!("unexpected {} record", rec.kind())))
        }
    }
}

fn object(os: &mut DirtyObjset, st: &RecvState, o: &Object, payload: &[u8]) -> Result<()> {
    let obj = o.object;
    if obj == 0 || obj >= dmu::tx::OBJECT_LIMIT {
        return Err(RecvError::Invalid(format!("OBJECT record for object {obj}")));
    }
    // Streams from before large dnodes say 0 (`receive_object`: one slot).
    let slots = o.dn_slots.max(1);
    let max_slots = if st.large_dnodes { ondisk::dnode::DNODE_MAX_SLOTS as u8 } else { 1 };
    if slots > max_slots {
        return Err(RecvError::Invalid(format!(
            "object {obj}: a {}-byte dnode in a stream without large dnodes (or above 16 KiB)",
            u32::from(slots) * 512
        )));
    }
    let per_block = 1u64 << (ondisk::dnode::DNODE_BLOCK_SHIFT - ondisk::dnode::DNODE_SHIFT);
    if obj % per_block + u64::from(slots) > per_block {
        return Err(RecvError::Invalid(format!("object {obj}: its {slots} dnode slots cross a dnode block")));
    }
    if o.object_type == 0 || o.object_type > 255 || o.bonustype > 255 {
        return Err(RecvError::Invalid(format!(
            "object {obj}: type {} / bonus type {}",
            o.object_type, o.bonustype
        )));
    }
    let bs = u64::from(o.blksz);
    if !(512..=MAX_BLOCK).contains(&bs) || bs % 512 != 0 {
        return Err(RecvError::Invalid(format!("object {obj}: block size {bs}")));
    }
    let bonuslen = o.bonuslen as usize;
    if bonuslen > dmu::tx::bonus_len_for_slots(usize::from(slots)) || payload.len() < bonuslen {
        return Err(RecvError::Invalid(format!("object {obj}: bonus of {bonuslen} bytes")));
    }
    let bonus = payload[..bonuslen].to_vec();
    let (otype, btype) = (o.object_type as u8, o.bonustype as u8);
    // A dnode that grows into slots other objects hold: they go first (`receive_object`
    // frees them; the sender freed them too, or they could not be there).
    for other in os.objects_in_slots(obj, slots)? {
        os.free_object(other)?;
    }
    match os.dnode(obj)? {
        Some(d) => {
            // What an existing object keeps (`receive_handle_existing_object`): its
            // contents go only when it cannot be the same file, or its dnode cannot take
            // the new shape (another size, fewer block pointers: `deduce_nblkptr`).
            let sa = ondisk::dmu_types::DmuObjectType::Sa.to_u8();
            let nblkptr = if btype == sa { 1 } else { (MAX_BONUS.saturating_sub(bonuslen) / 128 + 1).min(3) };
            let mut start_over = d.slots() != usize::from(slots) || nblkptr < usize::from(d.nblkptr);
            if d.data_block_size() != bs && !start_over {
                start_over = !same_file_grows(os, st, &d, o, &bonus)?;
            }
            if start_over {
                os.reclaim_object(obj, otype, bs, btype, bonus, slots)?;
            } else {
                // Same file (or one whose every changed block the stream carries): its
                // blocks and block size stay; type and bonus are the stream's.
                os.set_bonus(obj, bonus)?;
                let dd = os.dirty(obj)?;
                dd.phys.object_type = otype;
                dd.phys.bonustype = btype;
            }
        }
        None => os.claim_object_dnsize(obj, otype, bs, btype, bonus, slots)?,
    }
    let d = os.dirty(obj)?;
    d.phys.checksum = o.checksumtype;
    d.phys.compress = o.compress;
    Ok(())
}

/// An OBJECT record gives an existing object another block size. Either the sender freed
/// the object and a new file took its number (its contents go: the stream carries all of
/// the new file), or the file is the same and only the stream changed: an incremental
/// `send -L` after a full stream without it, whose 128 KiB records built the object with
/// 128 KiB blocks. Then the object keeps its block size and contents, or the blocks the
/// stream does not carry would be lost. OpenZFS decides so (`dmu_recv.c`,
/// `receive_handle_existing_object`): a full stream, anything but file contents, and a
/// single-block object start over; otherwise the ZPL generation decides, and the same file
/// may only see its block size grow (a shrink would be `-L` turned off, which
/// `recv_check_large_blocks` refuses at BEGIN).
/// True: keep the object's block size and contents.
fn same_file_grows(
    os: &DirtyObjset,
    st: &RecvState,
    d: &ondisk::dnode::DnodePhys,
    o: &Object,
    bonus: &[u8],
) -> Result<bool> {
    const PLAIN_FILE_CONTENTS: u8 = 19;
    let obj = o.object;
    if st.full || o.object_type != u32::from(PLAIN_FILE_CONTENTS) || d.object_type != PLAIN_FILE_CONTENTS {
        return Ok(false);
    }
    if d.maxblkid == 0 {
        return Ok(false);
    }
    let Some(generation) = st.generation else {
        return Ok(false);
    };
    let invalid = |e: String| RecvError::Invalid(format!("object {obj}: cannot read its generation: {e}"));
    let old = generation(os, d.bonustype, &d.bonus).map_err(invalid)?;
    let new = generation(os, o.bonustype as u8, bonus).map_err(invalid)?;
    match (old, new) {
        (Some(a), Some(b)) if a == b => {
            if u64::from(o.blksz) <= d.data_block_size() {
                return Err(RecvError::Invalid(format!(
                    "object {obj}: the block size of a file can only grow in an incremental stream ({} to {} bytes)",
                    d.data_block_size(),
                    o.blksz
                )));
            }
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// At the END of a full stream received onto a clone: the objects past the last one the
/// stream listed are not in the sent file system, so they go.
pub fn finish_full_onto_clone(os: &mut DirtyObjset, st: &RecvState) -> Result<()> {
    if !st.onto_clone {
        return Ok(());
    }
    let first = st.next_unlisted.max(1);
    free_objects(os, first, dmu::tx::OBJECT_LIMIT - first)
}

fn free_objects(os: &mut DirtyObjset, first: u64, count: u64) -> Result<()> {
    let end = first.saturating_add(count).min(dmu::tx::OBJECT_LIMIT);
    let first = first.max(1);
    if first >= end {
        return Ok(());
    }
    let doomed: Vec<u64> = if end - first <= 4096 {
        let mut v = Vec::new();
        for o in first..end {
            if os.dnode(o)?.is_some() {
                v.push(o);
            }
        }
        v
    } else {
        os.objects()?.into_iter().filter(|&o| o >= first && o < end).collect()
    };
    for o in doomed {
        os.free_object(o)?;
    }
    Ok(())
}

fn write(os: &mut DirtyObjset, obj: u64, offset: u64, data: &[u8]) -> Result<()> {
    if os.dnode(obj)?.is_none() {
        return Err(RecvError::Invalid(format!("WRITE to object {obj}, which does not exist")));
    }
    if data.len() as u64 > MAX_BLOCK || offset.checked_add(data.len() as u64).is_none() {
        return Err(RecvError::Invalid(format!("WRITE of {} bytes at {offset} to object {obj}", data.len())));
    }
    // A block of another size than the object's (a large block split into 128 KiB records)
    // is written piecewise: the DMU merges it.
    os.write(obj, offset, data)?;
    Ok(())
}

/// Writes a block that came compressed: kept as it came (see
/// [`DirtyObjset::write_compressed`]) when it is one whole block of the object, else
/// written from its decompressed `data` like any other.
fn write_compressed(
    os: &mut DirtyObjset,
    obj: u64,
    offset: u64,
    data: &[u8],
    compress: u8,
    phys: &[u8],
    embedded: bool,
) -> Result<()> {
    let dn = os
        .dnode(obj)?
        .ok_or_else(|| RecvError::Invalid(format!("WRITE to object {obj}, which does not exist")))?;
    let bs = dn.data_block_size();
    let whole =
        data.len() as u64 == bs && offset.is_multiple_of(bs) && !phys.is_empty() && phys.len() <= data.len();
    if !whole {
        return write(os, obj, offset, data);
    }
    os.write_compressed(obj, offset / bs, data, compress, phys.to_vec(), embedded)?;
    Ok(())
}

/// A compressed payload needs the stream feature its algorithm needs: lz4 and newer need
/// LZ4, zstd needs ZSTD (`recv_check_compress_feature`): the receiving pool was checked
/// for those features at BEGIN, so a block the pool cannot hold never gets in.
fn check_compress_feature(st: &RecvState, compress: u8, what: &str) -> Result<()> {
    use codec::compress::{ZIO_COMPRESS_LZ4 as LZ4, ZIO_COMPRESS_ZSTD as ZSTD};
    if compress == ZSTD && st.features & FEATURE_ZSTD == 0 {
        return Err(RecvError::Invalid(format!(
            "{what} record compressed with zstd in a stream without ZSTD"
        )));
    }
    if compress >= LZ4 && compress != ZSTD && st.features & FEATURE_LZ4 == 0 {
        return Err(RecvError::Invalid(format!(
            "{what} record compressed with algorithm {compress} in a stream without LZ4"
        )));
    }
    Ok(())
}

fn decompress(kind: u8, data: &[u8], lsize: u64) -> Result<Vec<u8>> {
    if lsize > MAX_BLOCK {
        return Err(RecvError::Invalid(format!("block of {lsize} bytes")));
    }
    let k = codec::compress::kind_from_zio(kind)
        .ok_or_else(|| RecvError::Invalid(format!("unknown compression {kind} in a WRITE record")))?;
    let mut out = vec![0u8; lsize as usize];
    codec::compress::decompress(k, data, &mut out)
        .map_err(|e| RecvError::Invalid(format!("cannot decompress a block ({}): {e}", k.name())))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A compressed record needs its algorithm's stream flag; legacy algorithms none.
    #[test]
    fn compressed_records_need_their_stream_flag() {
        let st = |features| RecvState { features, ..Default::default() };
        for (compress, ok_with) in [(15u8, FEATURE_LZ4), (16, FEATURE_ZSTD)] {
            assert!(check_compress_feature(&st(0), compress, "WRITE").is_err(), "{compress}");
            assert!(check_compress_feature(&st(ok_with), compress, "WRITE").is_ok(), "{compress}");
        }
        assert!(check_compress_feature(&st(FEATURE_LZ4), 16, "WRITE").is_err());
        for legacy in [3u8, 7, 14] {
            assert!(check_compress_feature(&st(0), legacy, "WRITE").is_ok(), "{legacy}");
        }
    }
}

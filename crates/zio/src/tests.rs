//! Pipeline tests over an in-memory vdev with two copies, one of which can be damaged.
//! They cover DVA fallback, holes, embedded pointers and compression; RAID-Z and mirror
//! reconstruction are covered in the vdev crate, real pools in the integration tests.

use super::*;
use codec::checksum::ChecksumKind;
use std::sync::Mutex;

struct MemVdev {
    bytes: Mutex<Vec<u8>>,
}

impl VdevIo for MemVdev {
    fn read_verified(
        &self,
        offset: u64,
        psize: u64,
        _birth: u64,
        verify: &dyn Fn(&[u8]) -> bool,
    ) -> std::result::Result<Vec<u8>, vdev_io::ReadError> {
        let b = self.bytes.lock().unwrap();
        let end = (offset + psize) as usize;
        let Some(d) = b.get(offset as usize..end) else {
            return Err(vdev_io::ReadError::Io("past end".into()));
        };
        if verify(d) {
            Ok(d.to_vec())
        } else {
            Err(vdev_io::ReadError::NoValidCopy)
        }
    }
}

fn setup(data: &[u8]) -> (Zio, Arc<MemVdev>, BlkPtr) {
    let vd = Arc::new(MemVdev { bytes: Mutex::new(vec![0u8; 1 << 20]) });
    {
        let mut b = vd.bytes.lock().unwrap();
        b[4096..4096 + data.len()].copy_from_slice(data);
        b[65536..65536 + data.len()].copy_from_slice(data);
    }
    let ctx = ChecksumCtx::default();
    let mut bp = BlkPtr::default();
    bp.dva[0] = Dva::new(0, 4096, data.len() as u64, false);
    bp.dva[1] = Dva::new(0, 65536, data.len() as u64, false);
    bp.set_prop(data.len() as u64, data.len() as u64, 2, 7, 19, 0, ByteOrder::Little);
    bp.birth = 5;
    bp.cksum = checksum::compute(ChecksumKind::Fletcher4, data, false, &ctx).0;
    let zio = Zio::new(vec![Some(vd.clone() as Arc<dyn VdevIo>)], ctx);
    (zio, vd, bp)
}

#[test]
fn reads_and_falls_back_to_second_dva() {
    let data: Vec<u8> = (0..8192u32).map(|i| (i * 7) as u8).collect();
    let (zio, vd, bp) = setup(&data);
    assert_eq!(zio.read(&bp).unwrap(), data);
    vd.bytes.lock().unwrap()[5000] ^= 1; // damage copy 1
    assert_eq!(zio.read(&bp).unwrap(), data);
    vd.bytes.lock().unwrap()[65536 + 10] ^= 1; // damage copy 2 too
    assert!(matches!(zio.read(&bp), Err(ZioError::Checksum { .. })));
    assert_eq!(zio.stats.checksum_errors.load(Ordering::Relaxed), 1);
}

#[test]
fn holes_read_as_zeros_and_embedded_decode() {
    let (zio, _, mut bp) = setup(&[1u8; 512]);
    bp.dva = [Dva::default(); 3];
    assert_eq!(zio.read(&bp).unwrap(), vec![0u8; 512]);
    let e = BlkPtr::new_embedded(b"hello world", 11, 2, 19, 0, 3, ByteOrder::Little).unwrap();
    assert_eq!(zio.read(&e).unwrap(), b"hello world");
}

#[test]
fn missing_top_level_vdev_is_an_io_error() {
    let (zio, _, mut bp) = setup(&[1u8; 512]);
    bp.dva[0] = Dva::new(3, 0, 512, false);
    bp.dva[1] = Dva::default();
    assert!(zio.read(&bp).is_err());
}

/// Sets the crypt bit and object type, then replaces checksum words 2..3 by a fake MAC as
/// OpenZFS does for blocks of encrypted datasets.
fn crypt(bp: &mut BlkPtr, object_type: u8, checksum_kind: u8) {
    let lsize = bp.lsize();
    let psize = bp.psize();
    bp.set_prop(lsize, psize, 2, checksum_kind, object_type, 0, ByteOrder::Little);
    bp.prop |= 1 << 61;
}

#[test]
fn encrypted_block_verifies_without_key_but_does_not_decode() {
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 13) as u8).collect();
    let (zio, _, mut bp) = setup(&data);
    // Plain file contents (type 19) are encrypted. fletcher4 is not dedup-capable: the
    // computed words 2..3 are folded into 0..1 before the compare.
    crypt(&mut bp, 19, 7);
    let full = checksum::compute(ChecksumKind::Fletcher4, &data, false, &ChecksumCtx::default()).0;
    bp.cksum = [full[0] ^ full[2], full[1] ^ full[3], 0x1111, 0x2222];
    bp.dva[2] = Dva { word: [0xabcd, 0xef01] }; // salt + IV1, never read
    assert!(bp.is_encrypted());
    assert_eq!(zio.read_physical(&bp).unwrap(), data);
    let err = zio.read(&bp).unwrap_err();
    assert!(matches!(err, ZioError::Unsupported(ref m) if m.contains("keys are not supported")));
    assert!(matches!(zio.read_keyless(&bp), Err(ZioError::Unsupported(_))));
    // The unfolded value must not verify.
    bp.cksum = [full[0], full[1], 0x1111, 0x2222];
    assert!(zio.read_physical(&bp).is_err());
}

#[test]
fn authenticated_and_dnode_blocks_read_without_key() {
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 5) as u8).collect();
    let (zio, _, mut bp) = setup(&data);
    // sha256 is dedup-capable: words 0..1 compared as computed, 2..3 are the MAC.
    let sha = checksum::compute(ChecksumKind::Sha256, &data, false, &ChecksumCtx::default()).0;
    crypt(&mut bp, 13, 8); // DSL directory child map: not an encrypted type
    bp.cksum = [sha[0], sha[1], 7, 9];
    assert!(bp.is_authenticated());
    assert_eq!(zio.read(&bp).unwrap(), data);
    // A dnode block of an encrypted dataset: uncompressed, read as is by read_keyless.
    crypt(&mut bp, 10, 8);
    assert!(bp.is_encrypted());
    assert!(zio.read(&bp).is_err());
    assert_eq!(zio.read_keyless(&bp).unwrap(), data);
    // Objset blocks keep their MACs in the header: all four words are compared.
    crypt(&mut bp, 11, 8);
    bp.cksum = sha;
    assert_eq!(zio.read(&bp).unwrap(), data);
    bp.cksum = [sha[0], sha[1], 7, 9];
    assert!(zio.read(&bp).is_err());
}

#[test]
fn zil_blocks_verify_with_their_embedded_checksum() {
    let ctx = ChecksumCtx::default();
    let mut block = vec![0u8; 4096];
    block[136..144].copy_from_slice(&200u64.to_le_bytes()); // zc_nused
    let verifier = Cksum([1, 2, 3, 4]);
    checksum::seal_zil_chain(&mut block, verifier, &ctx, false).unwrap();
    let (zio, vd, mut bp) = setup(&block);
    bp.set_prop(4096, 4096, 2, checksum::ZIO_CHECKSUM_ZILOG2, 9, 0, ByteOrder::Little);
    bp.cksum = verifier.0;
    assert_eq!(zio.read_physical(&bp).unwrap(), block);
    vd.bytes.lock().unwrap()[4096 + 300] ^= 1;
    vd.bytes.lock().unwrap()[65536 + 300] ^= 1;
    assert!(zio.read_physical(&bp).is_err());
}

/// A gang block of an encrypted dataset, with two copies of its header. OpenZFS seals every
/// copy with the verifier of DVA 0 (`BP_IDENTITY`) and, for crypt-bit pointers, stores only
/// the xor-folded words 0..1 of the header's SHA-256 (words 2..3 zero). Found on a ztest pool.
#[test]
fn encrypted_gang_header_with_folded_checksum_reads_from_either_copy() {
    let ctx = ChecksumCtx::default();
    let data: Vec<u8> = (0..512u32).map(|i| (i * 3) as u8).collect();
    let (zio, vd, _) = setup(&[0u8; 512]);
    // The single child: a plain copy of the data at 128 KiB.
    let mut child = BlkPtr::default();
    child.dva[0] = Dva::new(0, 131072, 512, false);
    child.set_prop(512, 512, 2, 7, 19, 0, ByteOrder::Little);
    child.birth = 5;
    child.cksum = checksum::compute(ChecksumKind::Fletcher4, &data, false, &ctx).0;
    let mut bp = BlkPtr::default();
    bp.dva[0] = Dva::new(0, 4096, 512, true);
    bp.dva[1] = Dva::new(0, 65536, 512, true);
    bp.set_prop(512, 512, 2, 7, 19, 0, ByteOrder::Little);
    bp.prop |= 1 << 61;
    bp.birth = 5;
    let full = child.cksum;
    bp.cksum = [full[0] ^ full[2], full[1] ^ full[3], 0x1111, 0x2222];
    let mut hdr = vec![0u8; SPA_GANGBLOCKSIZE];
    hdr[..BLKPTR_SIZE].copy_from_slice(&child.encode(ByteOrder::Little));
    let v = checksum::gang_verifier(0, 4096, 5);
    checksum::seal_embedded(ChecksumKind::Sha256, &mut hdr, v, &ctx).unwrap();
    let tail = SPA_GANGBLOCKSIZE - 32;
    let w = |i: usize| u64::from_le_bytes(hdr[tail + 8 * i..tail + 8 * i + 8].try_into().unwrap());
    let folded = [w(0) ^ w(2), w(1) ^ w(3), 0, 0];
    for (i, x) in folded.iter().enumerate() {
        hdr[tail + 8 * i..tail + 8 * i + 8].copy_from_slice(&x.to_le_bytes());
    }
    {
        let mut b = vd.bytes.lock().unwrap();
        b[4096..4096 + 512].copy_from_slice(&hdr);
        b[65536..65536 + 512].copy_from_slice(&hdr);
        b[131072..131072 + 512].copy_from_slice(&data);
    }
    assert_eq!(zio.read_physical(&bp).unwrap(), data);
    assert_eq!(zio.gang_children(&bp).unwrap().len(), 1);
    vd.bytes.lock().unwrap()[4096 + 7] ^= 1; // damage the first header copy
    assert_eq!(zio.read_physical(&bp).unwrap(), data);
    assert_eq!(zio.gang_children(&bp).unwrap().len(), 1);
    vd.bytes.lock().unwrap()[65536 + 7] ^= 1; // and the second
    assert!(zio.read_physical(&bp).is_err());
}

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

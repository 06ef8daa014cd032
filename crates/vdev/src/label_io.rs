//! Raw I/O of the four 256 KiB vdev label areas of a leaf device.
//!
//! Device layout (OpenZFS include/sys/vdev_impl.h, module/zfs/vdev_label.c):
//!
//! ```text
//!   0        256K      512K                 4M                 psize-512K  psize-256K  psize
//!   | label 0 | label 1 | boot area (3.5M)   | allocatable ...   | label 2    | label 3    |
//! ```
//!
//! `psize` is the device size rounded *down* to a multiple of the label size (vdev_open aligns
//! `osize` with P2ALIGN to `sizeof (vdev_label_t)`), so the tail labels sit at fixed places
//! regardless of a ragged device end. Parsing the nvlist / uberblocks inside is not done here.

use std::io;

use crate::device::BlockDevice;

/// Size of one label (`sizeof (vdev_label_t)`).
pub const VDEV_LABEL_SIZE: u64 = 256 << 10;
/// Number of labels per leaf device.
pub const VDEV_LABELS: usize = 4;

/// The label-aligned size OpenZFS uses as a leaf's `vdev_psize`.
pub fn label_aligned_size(dev_size: u64) -> u64 {
    dev_size & !(VDEV_LABEL_SIZE - 1)
}

/// Byte offset of label `l` on a device of `dev_size` bytes, or `None` if `l` is out of range
/// or the device cannot hold four labels.
pub fn label_offset(dev_size: u64, l: usize) -> Option<u64> {
    let psize = label_aligned_size(dev_size);
    let labels_total = VDEV_LABELS as u64 * VDEV_LABEL_SIZE;
    if l >= VDEV_LABELS || psize < labels_total {
        return None;
    }
    let base = l as u64 * VDEV_LABEL_SIZE;
    Some(if l < VDEV_LABELS / 2 { base } else { base + psize - labels_total })
}

fn bad_label(dev: &dyn BlockDevice, l: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{}: no label {l} on a device of {} bytes", dev.name(), dev.size()),
    )
}

/// Read the whole 256 KiB area of label `l` (0..4).
pub fn read_label_area(dev: &dyn BlockDevice, l: usize) -> io::Result<Vec<u8>> {
    let off = label_offset(dev.size(), l).ok_or_else(|| bad_label(dev, l))?;
    let mut buf = vec![0u8; VDEV_LABEL_SIZE as usize];
    dev.read_at(&mut buf, off)?;
    Ok(buf)
}

/// Write `buf` at byte `within` inside label area `l`; the write must stay inside the label.
pub fn write_label_area(dev: &dyn BlockDevice, l: usize, within: u64, buf: &[u8]) -> io::Result<()> {
    let off = label_offset(dev.size(), l).ok_or_else(|| bad_label(dev, l))?;
    let fits = within.checked_add(buf.len() as u64).is_some_and(|e| e <= VDEV_LABEL_SIZE);
    if !fits {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} bytes at {within:#x} overrun label {l}", buf.len()),
        ));
    }
    dev.write_at(buf, off + within)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemDevice;

    #[test]
    fn offsets() {
        let size = 64 << 20;
        assert_eq!(label_offset(size, 0), Some(0));
        assert_eq!(label_offset(size, 1), Some(256 << 10));
        assert_eq!(label_offset(size, 2), Some(size - (512 << 10)));
        assert_eq!(label_offset(size, 3), Some(size - (256 << 10)));
        assert_eq!(label_offset(size, 4), None);
        // A ragged end is ignored: labels sit below the aligned size.
        assert_eq!(label_offset(size + 1000, 3), Some(size - (256 << 10)));
        assert_eq!(label_offset(1 << 20, 3), Some(3 << 18));
        assert_eq!(label_offset((1 << 20) - 1, 0), None);
    }

    #[test]
    fn read_write_roundtrip() {
        let dev = MemDevice::new("m", (2 << 20) + 4096);
        for l in 0..4 {
            write_label_area(&dev, l, 100, &[l as u8 + 1; 8]).unwrap();
        }
        assert!(write_label_area(&dev, 0, VDEV_LABEL_SIZE - 4, &[0; 8]).is_err());
        for l in 0..4 {
            let a = read_label_area(&dev, l).unwrap();
            assert_eq!(a.len(), VDEV_LABEL_SIZE as usize);
            assert_eq!(&a[100..108], &[l as u8 + 1; 8]);
        }
        let raw = dev.contents();
        assert_eq!(raw[(2 << 20) - (256 << 10) + 100], 4);
        assert!(read_label_area(&dev, 7).is_err());
    }
}

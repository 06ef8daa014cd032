//! # What a block device already holds, before a pool is made on it
//!
//! `zpool create`/`add`/`attach` refuse, without `-f`, a disk that carries a file system or
//! other volume signature (OpenZFS asks libblkid for the device's `TYPE` in
//! `check_slice`): making a pool there would destroy it. rzfs does not link libblkid; this
//! module recognizes the common signatures by their superblock magic, at the offsets the
//! formats define:
//!
//! | type | where | magic |
//! |---|---|---|
//! | ext2/ext3/ext4 | superblock at 1024, `s_magic` at +56 | 0xEF53 (LE); the type from `s_feature_compat` has_journal (0x4) and `s_feature_incompat` extents (0x40) |
//! | xfs | 0 | `XFSB` |
//! | btrfs | 65536 + 64 | `_BHRfS_M` |
//! | swap | page size − 10 (4, 8, 16, 64 KiB pages) | `SWAPSPACE2` or `SWAP-SPACE` |
//! | crypto_LUKS | 0 | `LUKS` 0xBA 0xBE |
//! | LVM2_member | +24 in one of the first 4 sectors | `LVM2 001` |
//! | linux_raid_member | 4096 (md v1.2) | 0xA92B4EFC (LE) |
//! | f2fs | 1024 | 0xF2F52010 (LE) |
//! | ntfs | 3 | `NTFS    ` |
//! | vfat | 54 or 82, with 0x55AA at 510 | `FAT12   `, `FAT16   `, `FAT32   ` |
//! | iso9660 | 32769 | `CD001` |
//! | squashfs | 0 | `hsqs` |
//!
//! A ZFS label is not a signature here: pool membership is judged from the labels.

use std::io::Read;
use std::path::Path;

/// How much of the device the signatures need.
const PROBE_BYTES: usize = 66 * 1024;

/// The type of the file system (or volume) whose signature starts the bytes `b` of a
/// device, as libblkid names it; None when none is recognized.
pub fn fs_type(b: &[u8]) -> Option<&'static str> {
    let at = |off: usize, magic: &[u8]| b.get(off..off + magic.len()) == Some(magic);
    let le32 = |off: usize| b.get(off..off + 4).map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]));
    if at(1080, &[0x53, 0xEF]) {
        let compat = le32(1024 + 92).unwrap_or(0);
        let incompat = le32(1024 + 96).unwrap_or(0);
        return Some(if incompat & 0x40 != 0 {
            "ext4"
        } else if compat & 0x4 != 0 {
            "ext3"
        } else {
            "ext2"
        });
    }
    if at(0, b"XFSB") {
        return Some("xfs");
    }
    if at(65536 + 64, b"_BHRfS_M") {
        return Some("btrfs");
    }
    for page in [4096usize, 8192, 16384, 65536] {
        if at(page - 10, b"SWAPSPACE2") || at(page - 10, b"SWAP-SPACE") {
            return Some("swap");
        }
    }
    if at(0, b"LUKS\xba\xbe") {
        return Some("crypto_LUKS");
    }
    if (0..4).any(|s| at(s * 512 + 24, b"LVM2 001")) {
        return Some("LVM2_member");
    }
    if le32(4096) == Some(0xA92B_4EFC) {
        return Some("linux_raid_member");
    }
    if le32(1024) == Some(0xF2F5_2010) {
        return Some("f2fs");
    }
    if at(3, b"NTFS    ") {
        return Some("ntfs");
    }
    if at(510, &[0x55, 0xAA]) && (at(54, b"FAT12   ") || at(54, b"FAT16   ") || at(82, b"FAT32   ")) {
        return Some("vfat");
    }
    if at(32769, b"CD001") {
        return Some("iso9660");
    }
    if at(0, b"hsqs") {
        return Some("squashfs");
    }
    None
}

/// The signature on the device at `path` (its first [`PROBE_BYTES`]); None when none is
/// recognized or the device cannot be read.
pub fn probe(path: &Path) -> Option<&'static str> {
    let mut f = std::fs::File::open(path).ok()?;
    let mut buf = Vec::with_capacity(PROBE_BYTES);
    f.by_ref().take(PROBE_BYTES as u64).read_to_end(&mut buf).ok()?;
    fs_type(&buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(off: usize, magic: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; PROBE_BYTES];
        b[off..off + magic.len()].copy_from_slice(magic);
        b
    }

    #[test]
    fn recognizes_signatures() {
        assert_eq!(fs_type(&vec![0u8; PROBE_BYTES]), None);
        assert_eq!(fs_type(&[]), None);
        let mut ext = with(1080, &[0x53, 0xEF]);
        assert_eq!(fs_type(&ext), Some("ext2"));
        ext[1024 + 92] = 0x4;
        assert_eq!(fs_type(&ext), Some("ext3"));
        ext[1024 + 96] = 0x40;
        assert_eq!(fs_type(&ext), Some("ext4"));
        assert_eq!(fs_type(&with(0, b"XFSB")), Some("xfs"));
        assert_eq!(fs_type(&with(65600, b"_BHRfS_M")), Some("btrfs"));
        assert_eq!(fs_type(&with(4086, b"SWAPSPACE2")), Some("swap"));
        assert_eq!(fs_type(&with(65526, b"SWAP-SPACE")), Some("swap"));
        assert_eq!(fs_type(&with(0, b"LUKS\xba\xbe")), Some("crypto_LUKS"));
        assert_eq!(fs_type(&with(536, b"LVM2 001")), Some("LVM2_member"));
        assert_eq!(fs_type(&with(4096, &0xA92B_4EFCu32.to_le_bytes())), Some("linux_raid_member"));
        assert_eq!(fs_type(&with(3, b"NTFS    ")), Some("ntfs"));
        let mut fat = with(82, b"FAT32   ");
        assert_eq!(fs_type(&fat), None, "no boot signature");
        fat[510] = 0x55;
        fat[511] = 0xAA;
        assert_eq!(fs_type(&fat), Some("vfat"));
        assert_eq!(fs_type(&with(32769, b"CD001")), Some("iso9660"));
        // A truncated device is read as far as it goes, never past its end.
        assert_eq!(fs_type(&with(0, b"XFSB")[..100]), Some("xfs"));
        assert_eq!(fs_type(&[0x53u8; 1081]), None);
    }
}

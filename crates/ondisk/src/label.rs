//! Vdev labels: where they sit on a leaf device, what is inside, and the typed pool config
//! they carry.
//!
//! # Layout (OpenZFS include/sys/vdev_impl.h, module/zfs/vdev_label.c)
//!
//! Every leaf vdev holds four identical 256 KiB labels: L0 and L1 at the start of the device,
//! L2 and L3 at its end. The end labels are placed relative to the device size rounded *down*
//! to a multiple of 256 KiB (`vdev_open` aligns `vdev_psize` so). Between L1 and the first
//! allocatable byte lies a 3.5 MiB boot area, so the front reserve is 4 MiB:
//!
//! ```text
//! device: | L0 | L1 | boot 3.5M | ......... allocatable ......... | L2 | L3 |
//!         0   256K 512K         4M                      aligned-512K  aligned-256K
//! ```
//!
//! One label (`vdev_label_t`):
//!
//! | off    | size   | field                                                           |
//! |--------|--------|-----------------------------------------------------------------|
//! | 0      | 8 KiB  | `vl_pad1`: blank (left for VTOC / disk labels)                  |
//! | 8 KiB  | 8 KiB  | `vl_be`: boot environment block (see [`parse_bootenv`])         |
//! | 16 KiB | 112 KiB| `vl_vdev_phys`: packed XDR nvlist, then a 40-byte `zio_eck_t`  |
//! | 128 KiB| 128 KiB| `vl_uberblock`: ring of uberblock slots                         |
//!
//! The uberblock ring is cut into slots of `1 << clamp(ashift, 10, 13)` bytes (1 KiB to
//! 8 KiB, `VDEV_UBERBLOCK_SHIFT`), so there are 128 down to 16 slots; txg `t` is written to
//! slot `t % count`. With multihost (MMP) on, the last slot holds MMP writes instead.
//!
//! # Checksums (done by the caller; this crate does no hashing)
//!
//! The vdev_phys area, each uberblock slot and the boot block each end with a `zio_eck_t`
//! (`zec_magic` = `ZEC_MAGIC`, then a 32-byte checksum) holding an embedded SHA-256
//! (`ZIO_CHECKSUM_LABEL`). To verify, the checksum field is replaced by the *verifier*
//! `{device offset of the area, 0, 0, 0}` (`zio_checksum_label_verifier`), SHA-256 is taken
//! over the whole area, and the result is compared with the saved checksum. A byteswapped
//! `zec_magic` means the words are in the other byte order. The verifier offsets come from
//! [`vdev_phys_device_offset`], [`uberblock_device_offset`] and [`bootenv_device_offset`].

use crate::error::{Error, Result};
use crate::nvlist::NvList;

/// Size of one label (`sizeof (vdev_label_t)`).
pub const VDEV_LABEL_SIZE: u64 = 256 << 10;
/// Labels per leaf device.
pub const VDEV_LABELS: u32 = 4;
/// `VDEV_PAD_SIZE`: the blank pad and the boot environment block are 8 KiB each.
pub const VDEV_PAD_SIZE: usize = 8 << 10;
/// `VDEV_SKIP_SIZE`: pad plus boot environment block, skipped before vdev_phys.
pub const VDEV_SKIP_SIZE: usize = 2 * VDEV_PAD_SIZE;
/// Offset of the boot environment block inside a label.
pub const VDEV_BOOTENV_OFFSET: usize = VDEV_PAD_SIZE;
/// Offset of vdev_phys (the config nvlist) inside a label.
pub const VDEV_PHYS_OFFSET: usize = VDEV_SKIP_SIZE;
/// `VDEV_PHYS_SIZE`: size of the vdev_phys area, checksum tail included.
pub const VDEV_PHYS_SIZE: usize = 112 << 10;
/// Size of `zio_eck_t` (magic + 4-word checksum), the tail of every label-checksummed area.
pub const ZIO_ECK_SIZE: usize = 40;
/// `ZEC_MAGIC`, first word of a `zio_eck_t` (include/sys/zio.h).
pub const ZEC_MAGIC: u64 = 0x0210_da7a_b10c_7a11;
/// Room for the packed nvlist in vdev_phys (`vp_nvlist`).
pub const VDEV_PHYS_NVLIST_SIZE: usize = VDEV_PHYS_SIZE - ZIO_ECK_SIZE;
/// Offset of the uberblock ring inside a label.
pub const VDEV_UBERBLOCK_RING_OFFSET: usize = VDEV_PHYS_OFFSET + VDEV_PHYS_SIZE;
/// `VDEV_UBERBLOCK_RING`: size of the uberblock ring.
pub const VDEV_UBERBLOCK_RING: usize = 128 << 10;
/// `UBERBLOCK_SHIFT`: smallest uberblock slot, 1 KiB.
pub const UBERBLOCK_SHIFT: u32 = 10;
/// `MAX_UBERBLOCK_SHIFT`: largest uberblock slot, 8 KiB.
pub const MAX_UBERBLOCK_SHIFT: u32 = 13;
/// Slots at the end of the ring used by multihost (MMP) writes when MMP is on.
pub const MMP_BLOCKS_PER_LABEL: usize = 1;
/// `VDEV_BOOT_OFFSET`: the boot area follows L0 and L1.
pub const VDEV_BOOT_OFFSET: u64 = 2 * VDEV_LABEL_SIZE;
/// `VDEV_BOOT_SIZE`: 3.5 MiB boot area.
pub const VDEV_BOOT_SIZE: u64 = 7 << 19;
/// `VDEV_LABEL_START_SIZE`: bytes reserved at the front of every leaf (4 MiB).
pub const VDEV_LABEL_START_SIZE: u64 = 2 * VDEV_LABEL_SIZE + VDEV_BOOT_SIZE;
/// `VDEV_LABEL_END_SIZE`: bytes reserved at the end of every leaf (512 KiB).
pub const VDEV_LABEL_END_SIZE: u64 = 2 * VDEV_LABEL_SIZE;

const _: () = assert!(VDEV_UBERBLOCK_RING_OFFSET + VDEV_UBERBLOCK_RING == VDEV_LABEL_SIZE as usize);

/// Device offset of label `l` (0..4) on a device of `dev_size` bytes (`vdev_label_offset`
/// with offset 0). The size is first rounded down to 256 KiB, as `vdev_open` does.
pub fn label_offset(dev_size: u64, l: u32) -> Result<u64> {
    let psize = dev_size - dev_size % VDEV_LABEL_SIZE;
    if l >= VDEV_LABELS {
        return Err(Error::corrupt("vdev label", format!("label number {l} (max 3)")));
    }
    if psize < u64::from(VDEV_LABELS) * VDEV_LABEL_SIZE {
        return Err(Error::corrupt("vdev label", format!("device of {dev_size} bytes too small")));
    }
    let base = u64::from(l) * VDEV_LABEL_SIZE;
    Ok(if l < VDEV_LABELS / 2 { base } else { base + psize - 4 * VDEV_LABEL_SIZE })
}

/// Uberblock slot shift for a top-level vdev of this ashift: clamp(ashift, 10, 13).
pub fn uberblock_shift(ashift: u32) -> u32 {
    ashift.clamp(UBERBLOCK_SHIFT, MAX_UBERBLOCK_SHIFT)
}

/// Size of one uberblock slot (`VDEV_UBERBLOCK_SIZE`): 1 KiB..8 KiB.
pub fn uberblock_slot_size(ashift: u32) -> usize {
    1 << uberblock_shift(ashift)
}

/// Slots in the uberblock ring (`VDEV_UBERBLOCK_COUNT`): 128 down to 16.
pub fn uberblock_count(ashift: u32) -> usize {
    VDEV_UBERBLOCK_RING >> uberblock_shift(ashift)
}

/// Offset of uberblock slot `n` inside a label (`VDEV_UBERBLOCK_OFFSET`). `n` is taken modulo
/// the slot count, so a txg may be passed directly.
pub fn uberblock_offset_in_label(ashift: u32, n: u64) -> usize {
    let slot = (n % uberblock_count(ashift) as u64) as usize;
    VDEV_UBERBLOCK_RING_OFFSET + (slot << uberblock_shift(ashift))
}

/// Device offset of label `l`'s vdev_phys area: also its checksum verifier.
pub fn vdev_phys_device_offset(dev_size: u64, l: u32) -> Result<u64> {
    Ok(label_offset(dev_size, l)? + VDEV_PHYS_OFFSET as u64)
}

/// Device offset of label `l`'s boot environment block: also its checksum verifier.
pub fn bootenv_device_offset(dev_size: u64, l: u32) -> Result<u64> {
    Ok(label_offset(dev_size, l)? + VDEV_BOOTENV_OFFSET as u64)
}

/// Device offset of uberblock slot `n` of label `l`: also that slot's checksum verifier.
pub fn uberblock_device_offset(dev_size: u64, l: u32, ashift: u32, n: u64) -> Result<u64> {
    Ok(label_offset(dev_size, l)? + uberblock_offset_in_label(ashift, n) as u64)
}

/// Decodes the config nvlist of a vdev_phys area. `buf` is the 112 KiB area (or at least its
/// packed nvlist), read at [`vdev_phys_device_offset`]; the caller must already have verified
/// its embedded checksum. The `zio_eck_t` tail is never read as nvlist data.
pub fn parse_vdev_phys(buf: &[u8]) -> Result<NvList> {
    let area = buf.get(..VDEV_PHYS_NVLIST_SIZE).unwrap_or(buf);
    NvList::decode(area)
}

/// Builds a 112 KiB vdev_phys area holding `config` packed with XDR, the rest zero; the
/// `zio_eck_t` tail is left zero for the caller to seal. Fails when the packed config does not
/// fit (as `vdev_label_init` fails with EINVAL).
pub fn encode_vdev_phys(config: &NvList) -> Result<Vec<u8>> {
    let mut packed = config.encode();
    if packed.len() > VDEV_PHYS_NVLIST_SIZE {
        return Err(Error::unsupported(
            "vdev_phys",
            format!("packed config of {} bytes exceeds {VDEV_PHYS_NVLIST_SIZE}", packed.len()),
        ));
    }
    packed.resize(VDEV_PHYS_SIZE, 0);
    Ok(packed)
}

/// `vbe_version` of a boot environment block: text (GRUB's grubenv).
pub const VB_RAW: u64 = 0;
/// `vbe_version` of a boot environment block: a packed XDR nvlist.
pub const VB_NVLIST: u64 = 1;

/// Contents of the 8 KiB boot environment block (`vdev_boot_envblock_t`): a big-endian
/// `vbe_version`, then the environment, then a `zio_eck_t` (checksum verified by the caller).
#[derive(Clone, Debug, PartialEq)]
pub enum BootEnv {
    /// `VB_RAW`: NUL-terminated text.
    Raw(String),
    /// `VB_NVLIST`: a packed nvlist (an all-zero area decodes to `Empty`).
    NvList(NvList),
    /// Nothing stored (version `VB_NVLIST` with a zero area).
    Empty,
    /// An unknown `vbe_version`.
    Unknown(u64),
}

/// Parses the boot environment block. For `VB_NVLIST` whose content does not unpack,
/// OpenZFS falls back to reading a FreeBSD bootonce string; we report that as `Raw`.
pub fn parse_bootenv(buf: &[u8]) -> Result<BootEnv> {
    let version = crate::bytes::be_u64(buf, 0, "boot envblock")?;
    let body = crate::bytes::slice(buf, 8, VDEV_PAD_SIZE - 8 - ZIO_ECK_SIZE, "boot envblock")?;
    let text = || crate::nvlist::string_from_disk(body);
    Ok(match version {
        VB_RAW => BootEnv::Raw(text()),
        VB_NVLIST if body.iter().all(|&b| b == 0) => BootEnv::Empty,
        VB_NVLIST => match NvList::decode(body) {
            Ok(l) => BootEnv::NvList(l),
            Err(_) => BootEnv::Raw(text()),
        },
        v => BootEnv::Unknown(v),
    })
}

// ---------------------------------------------------------------------------------------------
// Typed label config

/// Pool state recorded in a label (`pool_state_t`, include/sys/fs/zfs.h). Only the first five
/// are ever written to disk; the rest are in-core/libzfs states.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PoolState {
    Active = 0,
    Exported = 1,
    Destroyed = 2,
    /// A label of a hot spare (not part of any one pool's config).
    Spare = 3,
    /// A label of an L2ARC cache device.
    L2Cache = 4,
    Uninitialized = 5,
    Unavail = 6,
    PotentiallyActive = 7,
}

impl PoolState {
    /// Maps the on-disk number, or `None` if unknown.
    pub fn from_u64(v: u64) -> Option<PoolState> {
        use PoolState::*;
        [Active, Exported, Destroyed, Spare, L2Cache, Uninitialized, Unavail, PotentiallyActive]
            .into_iter()
            .find(|s| *s as u64 == v)
    }
}

/// Nesting limit for vdev trees (real trees are root → top-level → [replacing/spare] → leaf).
pub const MAX_VDEV_TREE_DEPTH: usize = 16;

/// The label config (the vdev_phys nvlist) with its well-known fields typed.
///
/// Labels of active/exported pools carry everything; spare and L2ARC labels carry only
/// `version`, `state` and `guid`, hence the options.
#[derive(Clone, Debug, PartialEq)]
pub struct LabelConfig {
    /// `version`: SPA version (see [`crate::uberblock::spa_version_is_supported`]).
    pub version: u64,
    /// `name`: pool name.
    pub name: Option<String>,
    /// `state`.
    pub state: PoolState,
    /// `txg`: txg in which this label was last written (0 for a label of a spare not in use).
    pub txg: Option<u64>,
    /// `pool_guid`.
    pub pool_guid: Option<u64>,
    /// `errata`.
    pub errata: Option<u64>,
    /// `hostid` of the last host to import the pool.
    pub hostid: Option<u64>,
    /// `hostname` of that host.
    pub hostname: Option<String>,
    /// `top_guid`: guid of this device's top-level vdev.
    pub top_guid: Option<u64>,
    /// `guid`: this leaf's guid.
    pub guid: u64,
    /// `vdev_children`: number of top-level vdevs in the pool.
    pub vdev_children: Option<u64>,
    /// `comment`.
    pub comment: Option<String>,
    /// `split_guid`.
    pub split_guid: Option<u64>,
    /// `vdev_tree`: config of this device's top-level vdev, raw.
    pub vdev_tree: Option<NvList>,
    /// `vdev_tree`, typed.
    pub tree: Option<VdevTreeConfig>,
    /// Names in `features_for_read` (features a reader must support), in stored order.
    pub features_for_read: Vec<String>,
}

fn need_u64(nv: &NvList, name: &'static str, what: &'static str) -> Result<u64> {
    nv.get_u64(name).ok_or_else(|| Error::corrupt(what, format!("missing uint64 {name:?}")))
}

impl LabelConfig {
    /// Types the label nvlist. Fails when `version`, `state` or `guid` are missing or the
    /// vdev tree is malformed; unknown pairs are ignored (they stay in the raw nvlist).
    pub fn from_nvlist(nv: &NvList) -> Result<LabelConfig> {
        const WHAT: &str = "label config";
        let state = need_u64(nv, "state", WHAT)?;
        let state =
            PoolState::from_u64(state).ok_or_else(|| Error::corrupt(WHAT, format!("pool state {state}")))?;
        let vdev_tree = nv.get_nvlist("vdev_tree").cloned();
        let tree = match &vdev_tree {
            Some(t) => Some(VdevTreeConfig::from_nvlist(t)?),
            None => None,
        };
        let features_for_read = nv
            .get_nvlist("features_for_read")
            .map(|f| f.names().map(str::to_string).collect())
            .unwrap_or_default();
        Ok(LabelConfig {
            version: need_u64(nv, "version", WHAT)?,
            name: nv.get_str("name").map(str::to_string),
            state,
            txg: nv.get_u64("txg"),
            pool_guid: nv.get_u64("pool_guid"),
            errata: nv.get_u64("errata"),
            hostid: nv.get_u64("hostid"),
            hostname: nv.get_str("hostname").map(str::to_string),
            top_guid: nv.get_u64("top_guid"),
            guid: need_u64(nv, "guid", WHAT)?,
            vdev_children: nv.get_u64("vdev_children"),
            comment: nv.get_str("comment").map(str::to_string),
            split_guid: nv.get_u64("split_guid"),
            vdev_tree,
            tree,
            features_for_read,
        })
    }
}

/// One vdev of a config's `vdev_tree` (and of the MOS config's tree), typed. Built by
/// `vdev_config_generate` in module/zfs/vdev_label.c.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VdevTreeConfig {
    /// `type`: "root", "mirror", "raidz", "draid", "disk", "file", "replacing", "spare",
    /// "dspare", "hole", "missing", "indirect", "log", "l2cache".
    pub kind: String,
    /// `id`: index among its siblings (absent on aux vdevs).
    pub id: Option<u64>,
    /// `guid`.
    pub guid: u64,
    /// `path` of a leaf.
    pub path: Option<String>,
    /// `devid` of a leaf.
    pub devid: Option<String>,
    /// `phys_path` of a leaf.
    pub phys_path: Option<String>,
    /// `whole_disk`: the leaf is a partitioned whole disk.
    pub whole_disk: Option<u64>,
    /// `ashift` (top-level vdevs).
    pub ashift: Option<u64>,
    /// `asize` (top-level vdevs).
    pub asize: Option<u64>,
    /// `nparity` (raidz and draid).
    pub nparity: Option<u64>,
    /// `metaslab_array`: MOS object holding the metaslab space-map object numbers.
    pub metaslab_array: Option<u64>,
    /// `metaslab_shift`.
    pub metaslab_shift: Option<u64>,
    /// `is_log`: a log (SLOG) top-level vdev.
    pub is_log: bool,
    /// `is_hole`.
    pub is_hole: bool,
    /// `is_spare`.
    pub is_spare: bool,
    /// `create_txg`.
    pub create_txg: Option<u64>,
    /// `DTL`: MOS object of the dirty time log space map.
    pub dtl: Option<u64>,
    /// `com.delphix:vdev_zap_top`.
    pub top_zap: Option<u64>,
    /// `com.delphix:vdev_zap_leaf`.
    pub leaf_zap: Option<u64>,
    /// `com.delphix:indirect_object` (indirect vdevs after device removal).
    pub indirect_object: Option<u64>,
    /// `com.delphix:indirect_births`.
    pub indirect_births: Option<u64>,
    /// `not_present`.
    pub not_present: bool,
    /// `offline`.
    pub offline: bool,
    /// `faulted`.
    pub faulted: bool,
    /// `degraded`.
    pub degraded: bool,
    /// `removed`.
    pub removed: bool,
    /// `non_allocating`.
    pub non_allocating: bool,
    /// `removing`.
    pub removing: bool,
    /// `unspare`: the original device under a spare vdev came back; the spare is released
    /// once it has resilvered.
    pub unspare: bool,
    /// `draid_ndata`: data disks per redundancy group.
    pub draid_ndata: Option<u64>,
    /// `draid_nspares`: distributed spares.
    pub draid_nspares: Option<u64>,
    /// `draid_ngroups`: redundancy groups per slice.
    pub draid_ngroups: Option<u64>,
    /// `children`, in order.
    pub children: Vec<VdevTreeConfig>,
}

impl VdevTreeConfig {
    /// Types a vdev nvlist and its children (at most [`MAX_VDEV_TREE_DEPTH`] deep).
    pub fn from_nvlist(nv: &NvList) -> Result<VdevTreeConfig> {
        Self::parse(nv, 0)
    }

    fn parse(nv: &NvList, depth: usize) -> Result<VdevTreeConfig> {
        const WHAT: &str = "vdev tree";
        if depth > MAX_VDEV_TREE_DEPTH {
            return Err(Error::corrupt(WHAT, format!("deeper than {MAX_VDEV_TREE_DEPTH}")));
        }
        let kind =
            nv.get_str("type").ok_or_else(|| Error::corrupt(WHAT, "missing string \"type\""))?.to_string();
        let flag = |n: &str| nv.get_u64(n).is_some_and(|v| v != 0);
        let s = |n: &str| nv.get_str(n).map(str::to_string);
        let u = |n: &str| nv.get_u64(n);
        let children = match nv.get_nvlist_array("children") {
            Some(a) => a.iter().map(|c| Self::parse(c, depth + 1)).collect::<Result<_>>()?,
            None => Vec::new(),
        };
        Ok(VdevTreeConfig {
            kind,
            id: u("id"),
            guid: need_u64(nv, "guid", WHAT)?,
            path: s("path"),
            devid: s("devid"),
            phys_path: s("phys_path"),
            whole_disk: u("whole_disk"),
            ashift: u("ashift"),
            asize: u("asize"),
            nparity: u("nparity"),
            metaslab_array: u("metaslab_array"),
            metaslab_shift: u("metaslab_shift"),
            is_log: flag("is_log"),
            is_hole: flag("is_hole"),
            is_spare: flag("is_spare"),
            create_txg: u("create_txg"),
            dtl: u("DTL"),
            top_zap: u("com.delphix:vdev_zap_top"),
            leaf_zap: u("com.delphix:vdev_zap_leaf"),
            indirect_object: u("com.delphix:indirect_object"),
            indirect_births: u("com.delphix:indirect_births"),
            not_present: flag("not_present"),
            offline: flag("offline"),
            faulted: flag("faulted"),
            degraded: flag("degraded"),
            removed: flag("removed"),
            non_allocating: flag("non_allocating"),
            removing: flag("removing"),
            unspare: flag("unspare"),
            draid_ndata: u("draid_ndata"),
            draid_nspares: u("draid_nspares"),
            draid_ngroups: u("draid_ngroups"),
            children,
        })
    }

    /// True for leaf vdevs (those that are devices: disk, file, and draid spares).
    pub fn is_leaf(&self) -> bool {
        matches!(self.kind.as_str(), "disk" | "file" | "dspare")
    }

    /// Depth-first iterator over this vdev and all its descendants.
    pub fn walk(&self) -> Vec<&VdevTreeConfig> {
        let mut out = vec![self];
        let mut i = 0;
        while let Some(v) = out.get(i).copied() {
            out.extend(v.children.iter());
            i += 1;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_offsets() {
        let size = 64 << 20;
        assert_eq!(label_offset(size, 0).unwrap(), 0);
        assert_eq!(label_offset(size, 1).unwrap(), 256 << 10);
        assert_eq!(label_offset(size, 2).unwrap(), size - (512 << 10));
        assert_eq!(label_offset(size, 3).unwrap(), size - (256 << 10));
        // Sizes are aligned down to 256 KiB first.
        assert_eq!(label_offset(size + 1000, 3).unwrap(), size - (256 << 10));
        assert!(label_offset(size, 4).is_err());
        assert!(label_offset(1 << 20, 0).is_ok());
        assert!(label_offset((1 << 20) - 1, 0).is_err());
        assert_eq!(VDEV_LABEL_START_SIZE, 4 << 20);
        assert_eq!(vdev_phys_device_offset(size, 1).unwrap(), (256 + 16) << 10);
    }

    #[test]
    fn uberblock_slots() {
        assert_eq!(uberblock_slot_size(9), 1024);
        assert_eq!(uberblock_count(9), 128);
        assert_eq!(uberblock_slot_size(12), 4096);
        assert_eq!(uberblock_count(12), 32);
        assert_eq!(uberblock_slot_size(16), 8192);
        assert_eq!(uberblock_count(16), 16);
        assert_eq!(uberblock_offset_in_label(9, 0), 128 << 10);
        assert_eq!(uberblock_offset_in_label(12, 33), (128 << 10) + 4096);
        assert_eq!(uberblock_device_offset(64 << 20, 1, 9, 5).unwrap(), (384 << 10) + 5 * 1024);
    }

    #[test]
    fn vdev_phys_round_trip() {
        let mut nv = NvList::new();
        nv.add_u64("version", 5000).add_u64("state", 0).add_u64("guid", 7);
        let area = encode_vdev_phys(&nv).unwrap();
        assert_eq!(area.len(), VDEV_PHYS_SIZE);
        assert_eq!(parse_vdev_phys(&area).unwrap(), nv);
        let cfg = LabelConfig::from_nvlist(&nv).unwrap();
        assert_eq!((cfg.version, cfg.state, cfg.guid), (5000, PoolState::Active, 7));
        let mut big = NvList::new();
        big.add_bytes("x", vec![0; VDEV_PHYS_SIZE]);
        assert!(encode_vdev_phys(&big).is_err());
    }

    #[test]
    fn bootenv() {
        let mut b = vec![0u8; VDEV_PAD_SIZE];
        b[7] = 1;
        assert_eq!(parse_bootenv(&b).unwrap(), BootEnv::Empty);
        b[7] = 0;
        b[8..12].copy_from_slice(b"a=b\0");
        assert_eq!(parse_bootenv(&b).unwrap(), BootEnv::Raw("a=b".into()));
        b[7] = 1;
        let mut env = NvList::new();
        env.add_u64("version", 1);
        let packed = env.encode();
        b[8..8 + packed.len()].copy_from_slice(&packed);
        assert_eq!(parse_bootenv(&b).unwrap(), BootEnv::NvList(env));
        b[7] = 9;
        assert_eq!(parse_bootenv(&b).unwrap(), BootEnv::Unknown(9));
    }
}

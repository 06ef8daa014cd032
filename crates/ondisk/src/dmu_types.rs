//! DMU object types (`dmu_object_type_t`, see OpenZFS include/sys/dmu.h).
//!
//! A dnode records its type and its bonus type as one byte each. Values below 0x80 index the
//! legacy table (`dmu_ot[]` in module/zfs/dmu.c), which fixes per type whether the contents are
//! metadata, whether they are encrypted with the dataset, and which byteswap routine applies.
//! Values with bit 7 set (`DMU_OT_NEWTYPE`) carry those facts in the byte itself:
//!
//! ```text
//!    7         6          5           4..0
//! +--------+----------+-----------+-------------------+
//! | NEWTYPE| METADATA | ENCRYPTED |  byteswap kind    |
//! +--------+----------+-----------+-------------------+
//! ```
//!
//! Names follow zdb (`zdb_ot_name()`): legacy types print their table name, new types print
//! the name of their byteswap kind ("uint64", "zap", ...), anything else prints "UNKNOWN".

/// `DMU_OT_NEWTYPE`: the type byte encodes its own properties.
pub const DMU_OT_NEWTYPE: u8 = 0x80;
/// `DMU_OT_METADATA` bit of a new-style type.
pub const DMU_OT_METADATA: u8 = 0x40;
/// `DMU_OT_ENCRYPTED` bit of a new-style type.
pub const DMU_OT_ENCRYPTED: u8 = 0x20;
/// `DMU_OT_BYTESWAP_MASK`: low bits of a new-style type, a [`DmuByteswap`] number.
pub const DMU_OT_BYTESWAP_MASK: u8 = 0x1f;
/// `DMU_OT_NUMTYPES`: number of legacy types.
pub const DMU_OT_NUMTYPES: u8 = 54;

/// How a block of this type is byteswapped when read on a machine of the other endianness
/// (`dmu_object_byteswap_t`). The order of variants is the on-disk numbering.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DmuByteswap {
    Uint8,
    Uint16,
    Uint32,
    Uint64,
    Zap,
    Dnode,
    Objset,
    Znode,
    OldAcl,
    Acl,
}

impl DmuByteswap {
    /// Decodes a byteswap number (`DMU_BSWAP_*`); `None` at or past `DMU_BSWAP_NUMFUNCS`.
    pub fn from_u8(v: u8) -> Option<DmuByteswap> {
        use DmuByteswap::*;
        Some(match v {
            0 => Uint8,
            1 => Uint16,
            2 => Uint32,
            3 => Uint64,
            4 => Zap,
            5 => Dnode,
            6 => Objset,
            7 => Znode,
            8 => OldAcl,
            9 => Acl,
            _ => return None,
        })
    }

    /// The on-disk number of this kind.
    pub fn to_u8(self) -> u8 {
        self as u8
    }

    /// The name zdb prints for a new-style type of this kind (`dmu_ot_byteswap[].ob_name`).
    pub fn name(self) -> &'static str {
        use DmuByteswap::*;
        match self {
            Uint8 => "uint8",
            Uint16 => "uint16",
            Uint32 => "uint32",
            Uint64 => "uint64",
            Zap => "zap",
            Dnode => "dnode",
            Objset => "objset",
            Znode => "znode",
            OldAcl => "oldacl",
            Acl => "acl",
        }
    }
}

/// Per-type facts of the legacy table: byteswap kind, metadata, encrypted, zdb name.
struct LegacyInfo {
    bswap: DmuByteswap,
    metadata: bool,
    encrypted: bool,
    name: &'static str,
}

/// Declares the legacy object types once: the enum variants, their numbers and their table row.
macro_rules! legacy_types {
    ($( $num:literal $variant:ident $bswap:ident $meta:literal $enc:literal $name:literal; )*) => {
        /// A DMU object type. Legacy types are named variants; new-style types (bit 7 set)
        /// decode into [`DmuObjectType::New`]; any other byte is kept as `Other`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum DmuObjectType {
            $( $variant, )*
            /// A `DMU_OTN_*` type: properties are encoded in the byte itself.
            New { byteswap: DmuByteswap, metadata: bool, encrypted: bool },
            /// A value this code does not know (a legacy number past the table, or a new-style
            /// type with an invalid byteswap number).
            Other(u8),
        }

        impl DmuObjectType {
            /// Decodes a dnode's type byte. Never fails: unknown values become `Other`.
            pub fn from_u8(v: u8) -> DmuObjectType {
                match v {
                    $( $num => DmuObjectType::$variant, )*
                    _ => Self::decode_new(v),
                }
            }

            /// The byte stored on disk for this type.
            pub fn to_u8(self) -> u8 {
                match self {
                    $( DmuObjectType::$variant => $num, )*
                    DmuObjectType::New { byteswap, metadata, encrypted } => {
                        DMU_OT_NEWTYPE
                            | if metadata { DMU_OT_METADATA } else { 0 }
                            | if encrypted { DMU_OT_ENCRYPTED } else { 0 }
                            | byteswap.to_u8()
                    }
                    DmuObjectType::Other(v) => v,
                }
            }

            fn legacy_info(self) -> Option<LegacyInfo> {
                match self {
                    $( DmuObjectType::$variant => Some(LegacyInfo {
                        bswap: DmuByteswap::$bswap,
                        metadata: $meta,
                        encrypted: $enc,
                        name: $name,
                    }), )*
                    _ => None,
                }
            }
        }
    };
}

// Rows of `dmu_ot[]` (OpenZFS module/zfs/dmu.c): number, variant, byteswap, metadata, encrypt,
// name as zdb prints it.
legacy_types! {
    0 None Uint8 true false "unallocated";
    1 ObjectDirectory Zap true false "object directory";
    2 ObjectArray Uint64 true false "object array";
    3 PackedNvlist Uint8 true false "packed nvlist";
    4 PackedNvlistSize Uint64 true false "packed nvlist size";
    5 Bpobj Uint64 true false "bpobj";
    6 BpobjHdr Uint64 true false "bpobj header";
    7 SpaceMapHeader Uint64 true false "SPA space map header";
    8 SpaceMap Uint64 true false "SPA space map";
    9 IntentLog Uint64 true true "ZIL intent log";
    10 Dnode Dnode true true "DMU dnode";
    11 Objset Objset true false "DMU objset";
    12 DslDir Uint64 true false "DSL directory";
    13 DslDirChildMap Zap true false "DSL directory child map";
    14 DslDsSnapMap Zap true false "DSL dataset snap map";
    15 DslProps Zap true false "DSL props";
    16 DslDataset Uint64 true false "DSL dataset";
    17 Znode Znode true false "ZFS znode";
    18 OldAcl OldAcl true true "ZFS V0 ACL";
    19 PlainFileContents Uint8 false true "ZFS plain file";
    20 DirectoryContents Zap true true "ZFS directory";
    21 MasterNode Zap true false "ZFS master node";
    22 UnlinkedSet Zap true true "ZFS delete queue";
    23 Zvol Uint8 false true "zvol object";
    24 ZvolProp Zap true false "zvol prop";
    25 PlainOther Uint8 false true "other uint8[]";
    26 Uint64Other Uint64 false true "other uint64[]";
    27 ZapOther Zap true false "other ZAP";
    28 ErrorLog Zap true false "persistent error log";
    29 SpaHistory Uint8 true false "SPA history";
    30 SpaHistoryOffsets Uint64 true false "SPA history offsets";
    31 PoolProps Zap true false "Pool properties";
    32 DslPerms Zap true false "DSL permissions";
    33 Acl Acl true true "ZFS ACL";
    34 SysAcl Uint8 true true "ZFS SYSACL";
    35 Fuid Uint8 true true "FUID table";
    36 FuidSize Uint64 true false "FUID table size";
    37 NextClones Zap true false "DSL dataset next clones";
    38 ScanQueue Zap true false "scan work queue";
    39 UsergroupUsed Zap true true "ZFS user/group/project used";
    40 UsergroupQuota Zap true true "ZFS user/group/project quota";
    41 Userrefs Zap true false "snapshot refcount tags";
    42 DdtZap Zap true false "DDT ZAP algorithm";
    43 DdtStats Zap true false "DDT statistics";
    44 Sa Uint8 true true "System attributes";
    45 SaMasterNode Zap true true "SA master node";
    46 SaAttrRegistration Zap true true "SA attr registration";
    47 SaAttrLayouts Zap true true "SA attr layouts";
    48 ScanXlate Zap true false "scan translations";
    49 Dedup Uint8 false true "deduplicated block";
    50 Deadlist Zap true false "DSL deadlist map";
    51 DeadlistHdr Uint64 true false "DSL deadlist map hdr";
    52 DslClones Zap true false "DSL dir clones";
    53 BpobjSubobj Uint64 true false "bpobj subobj";
}

impl DmuObjectType {
    fn decode_new(v: u8) -> DmuObjectType {
        if v & DMU_OT_NEWTYPE == 0 {
            return DmuObjectType::Other(v);
        }
        match DmuByteswap::from_u8(v & DMU_OT_BYTESWAP_MASK) {
            Some(byteswap) => DmuObjectType::New {
                byteswap,
                metadata: v & DMU_OT_METADATA != 0,
                encrypted: v & DMU_OT_ENCRYPTED != 0,
            },
            None => DmuObjectType::Other(v),
        }
    }

    /// Is this a type OpenZFS accepts (`DMU_OT_IS_VALID`)?
    pub fn is_valid(self) -> bool {
        !matches!(self, DmuObjectType::Other(_))
    }

    /// `DMU_OT_IS_METADATA`. Unknown types count as metadata, the cautious answer (they get
    /// metadata treatment such as extra copies).
    pub fn is_metadata(self) -> bool {
        match self {
            DmuObjectType::New { metadata, .. } => metadata,
            DmuObjectType::Other(_) => true,
            t => t.legacy_info().is_some_and(|i| i.metadata),
        }
    }

    /// `DMU_OT_IS_ENCRYPTED`: is this type's content encrypted in an encrypted dataset?
    pub fn is_encrypted(self) -> bool {
        match self {
            DmuObjectType::New { encrypted, .. } => encrypted,
            DmuObjectType::Other(_) => false,
            t => t.legacy_info().is_some_and(|i| i.encrypted),
        }
    }

    /// `DMU_OT_BYTESWAP`: how the contents are byteswapped; `None` for unknown types.
    pub fn byteswap_kind(self) -> Option<DmuByteswap> {
        match self {
            DmuObjectType::New { byteswap, .. } => Some(byteswap),
            DmuObjectType::Other(_) => None,
            t => t.legacy_info().map(|i| i.bswap),
        }
    }

    /// Is this a ZAP object (its byteswap kind is ZAP)?
    pub fn is_zap(self) -> bool {
        self.byteswap_kind() == Some(DmuByteswap::Zap)
    }

    /// The name zdb prints for this type.
    pub fn name(self) -> &'static str {
        match self {
            DmuObjectType::New { byteswap, .. } => byteswap.name(),
            DmuObjectType::Other(_) => "UNKNOWN",
            t => t.legacy_info().map_or("UNKNOWN", |i| i.name),
        }
    }
}

impl std::fmt::Display for DmuObjectType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_round_trips() {
        for v in 0..=255u8 {
            assert_eq!(DmuObjectType::from_u8(v).to_u8(), v, "type byte {v}");
        }
    }

    #[test]
    fn legacy_table_facts() {
        let t = DmuObjectType::from_u8(20);
        assert_eq!(t, DmuObjectType::DirectoryContents);
        assert_eq!(t.name(), "ZFS directory");
        assert!(t.is_metadata() && t.is_encrypted() && t.is_zap());
        assert!(!DmuObjectType::PlainFileContents.is_metadata());
        assert_eq!(DmuObjectType::from_u8(53), DmuObjectType::BpobjSubobj);
        assert_eq!(DmuObjectType::from_u8(54), DmuObjectType::Other(54));
        assert_eq!(DmuObjectType::Dnode.byteswap_kind(), Some(DmuByteswap::Dnode));
    }

    #[test]
    fn new_types_decode_their_bits() {
        // DMU_OTN_ZAP_METADATA = 0x80 | 0x40 | 4
        let t = DmuObjectType::from_u8(0xc4);
        assert_eq!(t, DmuObjectType::New { byteswap: DmuByteswap::Zap, metadata: true, encrypted: false });
        assert_eq!(t.name(), "zap");
        assert!(t.is_metadata() && t.is_zap() && !t.is_encrypted());
        // DMU_OTN_UINT64_ENC_DATA = 0x80 | 0x20 | 3
        let t = DmuObjectType::from_u8(0xa3);
        assert!(!t.is_metadata() && t.is_encrypted());
        assert_eq!(t.byteswap_kind(), Some(DmuByteswap::Uint64));
        // Byteswap number 10 is past DMU_BSWAP_NUMFUNCS.
        assert_eq!(DmuObjectType::from_u8(0x8a), DmuObjectType::Other(0x8a));
        assert_eq!(DmuObjectType::from_u8(0x8a).name(), "UNKNOWN");
    }
}

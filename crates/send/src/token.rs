//! # Receive resume tokens (`receive_resume_token`, `zfs send -t`)
//!
//! Format (OpenZFS `get_receive_resume_token_impl`, `zfs_send_resume_token_to_nvlist`):
//! `1-CKSUM-LEN-HEX`, where HEX is the lowercase hex of a zlib stream (gzip level 6) of a
//! packed nvlist of LEN bytes, and CKSUM is the first word of the fletcher-4 of the zlib
//! bytes (a trailing partial word left out), in hex. The nvlist names the stream to resume:
//! `toguid`, `toname`, `fromguid` (incremental), `object`, `offset`, `bytes` (where the
//! partial receive stands), and the flags `largeblockok`, `embedok`, `compressok`,
//! `rawok`. OpenZFS packs it natively; unpacking accepts either encoding.

use ondisk::nvlist::NvList;

/// Why a token was refused.
#[derive(Debug, thiserror::Error)]
#[error("invalid resume token: {0}")]
pub struct TokenError(String);

fn bad(s: impl Into<String>) -> TokenError {
    TokenError(s.into())
}

/// The largest packed nvlist a token may claim (a token is a few hundred bytes).
const MAX_PACKED: usize = 1 << 20;

/// The token of `nv`.
pub fn encode(nv: &NvList) -> String {
    let packed = nv.encode_native(ondisk::ByteOrder::Little);
    let mut z = vec![0u8; packed.len() * 2 + 64];
    let n =
        codec::compress::compress(codec::compress::CompressKind::Gzip(6), 0, &packed, &mut z).unwrap_or(0);
    z.truncate(n);
    let ck = codec::checksum::fletcher4(&z, false).0[0];
    let hex: String = z.iter().map(|b| format!("{b:02x}")).collect();
    format!("1-{ck:x}-{:x}-{hex}", packed.len())
}

/// The nvlist of a token; refuses damaged or foreign ones.
pub fn decode(token: &str) -> Result<NvList, TokenError> {
    let mut parts = token.trim().splitn(4, '-');
    let (Some(ver), Some(ck), Some(len), Some(hex)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad("expected VERSION-CHECKSUM-LENGTH-DATA"));
    };
    if ver != "1" {
        return Err(bad(format!("version {ver} is not supported")));
    }
    let ck = u64::from_str_radix(ck, 16).map_err(|_| bad("checksum is not hex"))?;
    let len = usize::from_str_radix(len, 16).map_err(|_| bad("length is not hex"))?;
    if len == 0 || len > MAX_PACKED || hex.len() % 2 != 0 {
        return Err(bad("bad length"));
    }
    let z = (0..hex.len())
        .step_by(2)
        .map(|i| hex.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
        .collect::<Option<Vec<u8>>>()
        .ok_or_else(|| bad("data is not hex"))?;
    if codec::checksum::fletcher4(&z, false).0[0] != ck {
        return Err(bad("checksum mismatch (the token is damaged)"));
    }
    let mut packed = vec![0u8; len];
    codec::compress::decompress(codec::compress::CompressKind::Gzip(6), &z, &mut packed)
        .map_err(|e| bad(format!("cannot decompress: {e}")))?;
    NvList::decode(&packed).map_err(|e| bad(format!("bad nvlist: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage() {
        let mut nv = NvList::new();
        nv.add_u64("object", 7)
            .add_u64("offset", 131072)
            .add_u64("toguid", 0x1234)
            .add_str("toname", "p/fs@s");
        nv.add_boolean("embedok");
        let t = encode(&nv);
        assert!(t.starts_with("1-"), "{t}");
        let back = decode(&t).unwrap();
        assert_eq!(back.get_u64("object"), Some(7));
        assert_eq!(back.get_str("toname"), Some("p/fs@s"));
        assert!(back.contains("embedok"));
        let mut broken = t.clone().into_bytes();
        let last = broken.len() - 3;
        broken[last] = if broken[last] == b'0' { b'1' } else { b'0' };
        assert!(decode(std::str::from_utf8(&broken).unwrap()).is_err());
        assert!(decode("2-0-0-").is_err());
        assert!(decode("garbage").is_err());
    }
}

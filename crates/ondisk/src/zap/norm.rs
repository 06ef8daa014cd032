//! Name normalization of ZAP objects (`zap_normflags`), as OpenZFS's `u8_textprep_str`
//! applies it to the names of normalized directories and snapshot maps.
//!
//! A ZAP created with non-zero `normflags` hashes every name by its *normalized* form,
//! so that all spellings that normalize alike land on the same hash (and, in a fat ZAP, in
//! the same leaf), and a lookup may then match by normalized form (`MT_NORMALIZE`) instead of
//! by bytes. The flags (include/sys/u8_textprep.h) are a case fold, `U8_TEXTPREP_TOUPPER`
//! (0x2), and at most one Unicode normalization form: NFD 0x10, NFKD 0x20, NFC 0x50,
//! NFKC 0x60 — the same numbers the `normalization` property stores in the ZPL master node.
//! A file system with `casesensitivity=insensitive` or `mixed` adds TOUPPER to its
//! directories' flags (`zfsvfs_init`, `zfs_create_fs`).
//!
//! OpenZFS prepares names with `U8_TEXTPREP_IGNORE_INVALID` (`zap_normalize`): bytes that
//! are not valid UTF-8 pass through unchanged, and so they do here. Case folding maps each
//! character to its upper case one character at a time (a simple mapping: a character whose
//! upper case is several characters, such as `ß`, stays as it is), then the normalization
//! form is applied.
//!
//! Known differences from OpenZFS, which uses Unicode 5.0 tables (`U8_UNICODE_LATEST`):
//! characters that gained a decomposition or a case mapping in a later Unicode version
//! normalize differently here, as do the few characters whose simple upper case differs from
//! their full one (Greek letters with ypogegrammeni, e.g. U+1F80 → U+1F88 in OpenZFS, left
//! alone here). Names made only of such characters would hash differently from OpenZFS's.

use unicode_normalization::UnicodeNormalization;

/// `U8_TEXTPREP_TOUPPER`.
pub const U8_TEXTPREP_TOUPPER: u64 = 0x2;
/// `U8_TEXTPREP_TOLOWER` (never used by ZFS; refused).
pub const U8_TEXTPREP_TOLOWER: u64 = 0x4;
/// `U8_TEXTPREP_NFD`: canonical decomposition.
pub const U8_TEXTPREP_NFD: u64 = 0x10;
/// `U8_TEXTPREP_NFKD`: compatibility decomposition.
pub const U8_TEXTPREP_NFKD: u64 = 0x20;
/// `U8_TEXTPREP_NFC`: canonical decomposition, then canonical composition.
pub const U8_TEXTPREP_NFC: u64 = 0x50;
/// `U8_TEXTPREP_NFKC`: compatibility decomposition, then canonical composition.
pub const U8_TEXTPREP_NFKC: u64 = 0x60;
/// Bits of a normalization form.
const FORM_MASK: u64 = 0x70;

/// Whether `normflags` is a combination OpenZFS accepts: TOUPPER and/or one form, nothing
/// else (`u8_textprep_str` refuses other form bit patterns and TOUPPER|TOLOWER).
pub fn valid_normflags(normflags: u64) -> bool {
    if normflags & !(U8_TEXTPREP_TOUPPER | FORM_MASK) != 0 {
        return false;
    }
    matches!(
        normflags & FORM_MASK,
        0 | U8_TEXTPREP_NFD | U8_TEXTPREP_NFKD | U8_TEXTPREP_NFC | U8_TEXTPREP_NFKC
    )
}

/// The upper case of `c` as a single character (a simple case mapping).
fn upper(c: char) -> char {
    let mut it = c.to_uppercase();
    match (it.next(), it.next()) {
        (Some(u), None) => u,
        _ => c,
    }
}

/// Prepares one valid UTF-8 run.
fn prep_str(s: &str, normflags: u64, out: &mut Vec<u8>) {
    let folded: String =
        if normflags & U8_TEXTPREP_TOUPPER != 0 { s.chars().map(upper).collect() } else { s.to_string() };
    let done: String = match normflags & FORM_MASK {
        U8_TEXTPREP_NFD => folded.nfd().collect(),
        U8_TEXTPREP_NFKD => folded.nfkd().collect(),
        U8_TEXTPREP_NFC => folded.nfc().collect(),
        U8_TEXTPREP_NFKC => folded.nfkc().collect(),
        _ => folded,
    };
    out.extend_from_slice(done.as_bytes());
}

/// `name` as ZAP object with `normflags` hashes and compares it (`zap_normalize`). Invalid
/// UTF-8 bytes are kept as they are; flags [`valid_normflags`] refuses are the caller's to
/// check (they are treated as their valid bits).
pub fn normalize(name: &[u8], normflags: u64) -> Vec<u8> {
    if normflags & (U8_TEXTPREP_TOUPPER | FORM_MASK) == 0 {
        return name.to_vec();
    }
    if normflags & FORM_MASK == 0 && name.is_ascii() {
        return name.to_ascii_uppercase();
    }
    let mut out = Vec::with_capacity(name.len() + 8);
    for chunk in name.utf8_chunks() {
        prep_str(chunk.valid(), normflags, &mut out);
        out.extend_from_slice(chunk.invalid());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // The names of OpenZFS's casenorm tests (tests/functional/casenorm/casenorm.cfg).
    const C_ORIG: &str = "F\u{ef}L\u{eb}N\u{c4}m\u{eb}";
    const C_UPPER: &str = "F\u{cf}L\u{cb}N\u{c4}M\u{cb}";
    const C_LOWER: &str = "f\u{ef}l\u{eb}n\u{e4}m\u{eb}";
    const D_ORIG: &str = "Fi\u{308}Le\u{308}NA\u{308}me\u{308}";
    const D_UPPER: &str = "FI\u{308}LE\u{308}NA\u{308}ME\u{308}";

    #[test]
    fn forms_and_case_fold_as_the_casenorm_names_expect() {
        let n = |s: &str, f| normalize(s.as_bytes(), f);
        // formD: composed and decomposed spellings meet; case still differs.
        assert_eq!(n(C_ORIG, U8_TEXTPREP_NFD), n(D_ORIG, U8_TEXTPREP_NFD));
        assert_ne!(n(C_ORIG, U8_TEXTPREP_NFD), n(C_UPPER, U8_TEXTPREP_NFD));
        assert_eq!(n(C_ORIG, U8_TEXTPREP_NFD), D_ORIG.as_bytes());
        assert_eq!(n(D_ORIG, U8_TEXTPREP_NFC), C_ORIG.as_bytes());
        // Case fold only: case variants meet, forms do not.
        let up = U8_TEXTPREP_TOUPPER;
        assert_eq!(n(C_ORIG, up), n(C_LOWER, up));
        assert_eq!(n(C_ORIG, up), C_UPPER.as_bytes());
        assert_ne!(n(C_ORIG, up), n(D_UPPER, up));
        // Both: every spelling meets.
        let both = up | U8_TEXTPREP_NFD;
        for s in [C_ORIG, C_UPPER, C_LOWER, D_ORIG, D_UPPER] {
            assert_eq!(n(s, both), D_UPPER.as_bytes(), "{s}");
        }
        assert_eq!(n("Straße", up), "STRAßE".as_bytes());
        assert_eq!(n("abc", 0), b"abc");
    }

    #[test]
    fn invalid_utf8_passes_through() {
        let name = b"ab\xffcd\xc3";
        assert_eq!(normalize(name, U8_TEXTPREP_TOUPPER), b"AB\xffCD\xc3");
        assert_eq!(normalize(name, U8_TEXTPREP_NFD | U8_TEXTPREP_TOUPPER), b"AB\xffCD\xc3");
    }

    #[test]
    fn flag_combinations() {
        for f in [0, 2, 0x10, 0x12, 0x20, 0x50, 0x52, 0x60, 0x62] {
            assert!(valid_normflags(f), "{f:#x}");
        }
        for f in [0x4, 0x6, 0x30, 0x40, 0x70, 0x100, 1] {
            assert!(!valid_normflags(f), "{f:#x}");
        }
    }

    proptest::proptest! {
        // Any bytes under any accepted flags: no panic, and a name made only of ASCII
        // letters and digits without case folding is unchanged.
        #[test]
        fn any_bytes_normalize(name in proptest::collection::vec(proptest::num::u8::ANY, 0..80),
                               flags in proptest::sample::select(vec![0u64, 2, 0x10, 0x12, 0x20, 0x50, 0x52, 0x60, 0x62])) {
            let _ = normalize(&name, flags);
            let plain: Vec<u8> = name.iter().map(|b| b"abcdefghijklmnopqrstuvwxyz0123456789"[usize::from(*b) % 36]).collect();
            proptest::prop_assert_eq!(normalize(&plain, flags & !U8_TEXTPREP_TOUPPER), plain);
        }
    }
}

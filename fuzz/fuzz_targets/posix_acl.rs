//! POSIX ACL xattr values (`system.posix_acl_access` / `_default`, stored by OpenZFS on Linux
//! with acltype=posix): `PosixAcl::parse`, `validate`, and an encode/parse round trip of
//! whatever parses.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ondisk::posix_acl::PosixAcl;

fuzz_target!(|data: &[u8]| {
    let Ok(Some(acl)) = PosixAcl::parse(data) else { return };
    let _ = acl.validate();
    let again = PosixAcl::parse(&acl.encode()).expect("encoded ACL parses");
    assert_eq!(again, Some(acl), "encode round trip");
});

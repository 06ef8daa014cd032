//! Dnode blocks as readers walk them (`ondisk::dnode::dnode_block_entries`, used by
//! `Objset::for_each_dnode` and the traversal), including blocks shorter than their
//! meta-dnode claims. Input: byte 0 = slots the meta-dnode's block size claims (0..=255),
//! byte 1 bit 0 = byte order, then the block. Asserts every reported slot lies inside the
//! block and the claim, in increasing order.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ondisk::dnode::{dnode_block_entries, DNODE_SLOT_SIZE};
use ondisk::ByteOrder;

fuzz_target!(|data: &[u8]| {
    let [claim, flags, block @ ..] = data else { return };
    let order = if flags & 1 == 0 { ByteOrder::Little } else { ByteOrder::Big };
    let max = usize::from(*claim);
    let mut last = None;
    for (slot, dn) in dnode_block_entries(block, max, order) {
        assert!(slot < max && (slot + 1) * DNODE_SLOT_SIZE <= block.len(), "slot {slot} outside");
        assert!(last.is_none_or(|l| slot > l), "slots out of order");
        last = Some(slot);
        if let Ok(dn) = dn {
            let _ = (dn.slots(), dn.data_block_size(), dn.used_bytes());
        }
    }
});

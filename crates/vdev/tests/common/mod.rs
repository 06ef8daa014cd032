//! Shared helpers for the vdev integration tests.
#![allow(dead_code)]

use std::sync::Arc;

use rzfs_vdev::{BlockDevice, FaultyDevice, MemDevice, VdevKind, VdevSpec, VDEV_LABEL_START_SIZE};

/// Deterministic xorshift64* generator.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A leaf backed by memory, reachable both raw (`mem`) and through a fault injector (`faulty`).
pub struct Leaf {
    pub mem: Arc<MemDevice>,
    pub faulty: Arc<FaultyDevice>,
    pub guid: u64,
}

pub fn leaf(name: &str, guid: u64, size: usize) -> Leaf {
    let mem = Arc::new(MemDevice::new(name, size));
    let faulty = Arc::new(FaultyDevice::new(mem.clone() as Arc<dyn BlockDevice>));
    Leaf { mem, faulty, guid }
}

pub fn leaf_spec(l: &Leaf, id: u64) -> VdevSpec {
    VdevSpec {
        kind: VdevKind::File,
        id,
        guid: l.guid,
        ashift: 0,
        children: vec![],
        device: Some(l.faulty.clone() as Arc<dyn BlockDevice>),
    }
}

pub fn missing_spec(guid: u64, id: u64) -> VdevSpec {
    VdevSpec { kind: VdevKind::Missing, id, guid, ashift: 0, children: vec![], device: None }
}

pub fn top_spec(kind: VdevKind, ashift: u8, children: Vec<VdevSpec>) -> VdevSpec {
    VdevSpec { kind, id: 0, guid: 1000, ashift, children, device: None }
}

/// Overwrite `len` bytes at allocatable-space offset `off` of a leaf, bypassing the vdev.
pub fn scribble(l: &Leaf, off: u64, data: &[u8]) {
    l.mem.write_at(data, off + VDEV_LABEL_START_SIZE).unwrap();
}

pub fn raw(l: &Leaf, off: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    l.mem.read_at(&mut b, off + VDEV_LABEL_START_SIZE).unwrap();
    b
}

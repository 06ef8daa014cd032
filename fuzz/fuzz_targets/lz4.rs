//! The lz4 decompressor on arbitrary streams (input format in decompress_common.rs).
#![no_main]
use codec::compress::CompressKind;
use libfuzzer_sys::fuzz_target;

#[path = "decompress_common.rs"]
mod decompress_common;

fuzz_target!(|data: &[u8]| decompress_common::run(CompressKind::Lz4, data));

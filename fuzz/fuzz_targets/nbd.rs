//! The NBD server (`rzfs_nbd::serve_connection`) fed arbitrary client bytes: the handshake
//! parsers, option haggling and every transmission command, over a small in-memory export.
//! It must end with an error or at the end of the input, never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::io::{Cursor, Read, Write};
use std::sync::{Arc, Mutex};

struct Mem(Mutex<Vec<u8>>);

impl nbd::Exports for Mem {
    fn list(&self) -> Vec<String> {
        vec!["p/v".into()]
    }
    fn size(&self, _: &str) -> Result<u64, i32> {
        Ok(self.0.lock().unwrap().len() as u64)
    }
    fn readonly(&self, _: &str) -> bool {
        false
    }
    fn read(&self, _: &str, off: u64, buf: &mut [u8]) -> Result<(), i32> {
        let v = self.0.lock().unwrap();
        buf.copy_from_slice(&v[off as usize..off as usize + buf.len()]);
        Ok(())
    }
    fn write(&self, _: &str, off: u64, data: &[u8]) -> Result<(), i32> {
        let mut v = self.0.lock().unwrap();
        v[off as usize..off as usize + data.len()].copy_from_slice(data);
        Ok(())
    }
    fn discard(&self, _: &str, off: u64, len: u64) -> Result<(), i32> {
        let mut v = self.0.lock().unwrap();
        v[off as usize..(off + len) as usize].fill(0);
        Ok(())
    }
    fn sync(&self, _: &str) -> Result<(), i32> {
        Ok(())
    }
}

/// A connection whose client side is the fuzz input; what the server writes is dropped.
struct Conn(Arc<Mutex<Cursor<Vec<u8>>>>);

impl Read for Conn {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().read(b)
    }
}

impl Write for Conn {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl nbd::Conn for Conn {
    fn clone_box(&self) -> std::io::Result<Box<dyn nbd::Conn>> {
        Ok(Box::new(Conn(self.0.clone())))
    }
}

fuzz_target!(|data: &[u8]| {
    let m = Mem(Mutex::new(vec![0u8; 64 << 10]));
    let c = Conn(Arc::new(Mutex::new(Cursor::new(data.to_vec()))));
    let _ = nbd::serve_connection(&m, Box::new(c));
    let _ = nbd::wire::parse_info_request(data);
});

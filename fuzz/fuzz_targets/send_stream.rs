//! `StreamReader` over arbitrary bytes (byte order from the BEGIN magic, running fletcher-4,
//! payload bounds), and `decode_record` of the first 312 bytes in both byte orders; every
//! decoded record must survive `encode_record` → `decode_record` unchanged, and a payload must
//! have the length its record announces.
#![no_main]
use libfuzzer_sys::fuzz_target;
use send::stream::{decode_record, encode_record, Begin, Record, StreamReader, MAXNAMELEN, RECORD_SIZE};

fn check_round_trip(rec: &Record, payloadlen: u32, be: bool) {
    let buf = encode_record(rec, payloadlen, be);
    let (again, plen) = decode_record(&buf, be).expect("re-encoded record must decode");
    assert_eq!(plen, payloadlen, "drr_payloadlen round trip");
    assert_eq!(again.payload_len(), rec.payload_len());
    match (rec, &again) {
        // A name decoded lossily can outgrow drr_toname (U+FFFD is 3 bytes); encode cuts it.
        (Record::Begin(a), Record::Begin(b)) if a.toname.len() >= MAXNAMELEN => {
            assert!(a.toname.starts_with(&b.toname), "toname cut to a prefix");
            let blank = |x: &Begin| Begin { toname: String::new(), ..x.clone() };
            assert_eq!(blank(a), blank(b), "BEGIN round trip");
        }
        _ => assert_eq!(&again, rec, "record round trip"),
    }
}

fuzz_target!(|data: &[u8]| {
    if let Some(first) = data.get(..RECORD_SIZE).and_then(|s| <&[u8; RECORD_SIZE]>::try_from(s).ok()) {
        for be in [false, true] {
            if let Ok((rec, plen)) = decode_record(first, be) {
                check_round_trip(&rec, plen, be);
            }
        }
    }
    let mut reader = StreamReader::new(data);
    // Each record consumes at least 312 bytes, so this ends with the input.
    while let Ok(Some((rec, payload))) = reader.next() {
        assert!(reader.offset() <= data.len() as u64);
        let plen = match &rec {
            Record::Begin(_) => u32::try_from(payload.len()).expect("BEGIN payload is capped"),
            other => {
                assert_eq!(payload.len(), other.payload_len(), "payload length");
                0
            }
        };
        check_round_trip(&rec, plen, reader.big_endian());
        let _ = format!("{rec:?} {}", rec.kind());
    }
});

//! Any bytes as a filter image: a filter or a clear error, never a panic,
//! and no allocation the image's size does not justify. A loaded filter
//! must keep working (insert, look up, remove, migrate, save again).
#![no_main]
use cfdp_filter::Filter;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    check(data);
    // Most mutations break the checksum; also try the input re-sealed so
    // the parser's deeper checks are reached.
    if data.len() > 4 {
        let mut img = data.to_vec();
        let n = img.len() - 4;
        let crc = crc32fast::hash(&img[..n]);
        img[n..].copy_from_slice(&crc.to_le_bytes());
        check(&img);
    }
});

fn check(data: &[u8]) {
    let Ok(f) = Filter::from_bytes(data) else {
        return;
    };
    let before = f.len();
    for h in [1u64, 0xdead_beef, u64::MAX] {
        if f.insert_hash(h, 0).is_ok() {
            assert!(f.contains_hash(h));
            assert!(f.remove_hash(h, 0));
        }
    }
    assert_eq!(f.len(), before);
    f.migrate(4);
    assert_eq!(f.len(), before);
    let again = Filter::from_bytes(&f.to_bytes()).expect("own image loads");
    assert_eq!(again.len(), before);
}

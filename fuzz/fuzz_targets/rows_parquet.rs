//! A parquet file's bytes, whatever they are, become rows or an error naming the file: never a
//! panic, never a row group decoded without an error check (`workload::rows::parquet`).
//!
//! The reader's own calls run inside `catch_unwind` in the product, so this target replaces
//! libfuzzer's abort-on-panic hook with one that only prints: a panic the product catches is
//! not a crash, and one that escapes still aborts the run (libfuzzer-sys aborts on an unwinding
//! input).
#![no_main]

use std::sync::Once;

use libfuzzer_sys::fuzz_target;
use llmspeed::workload::rows::parquet::ParquetFile;

static HOOK: Once = Once::new();

fuzz_target!(|data: &[u8]| {
    HOOK.call_once(|| std::panic::set_hook(Box::new(|info| eprintln!("caught: {info}"))));
    let bytes = bytes::Bytes::copy_from_slice(data);
    for columns in [&[][..], &["text"][..]] {
        let Ok(file) = ParquetFile::from_bytes(bytes.clone(), "fuzz.parquet", columns) else {
            continue;
        };
        let _ = file.rows();
        for row in file.into_rows().take(1000) {
            match row {
                Ok(r) => assert!(serde_json::to_string(&r).is_ok()),
                Err(e) => {
                    assert!(e.to_string().contains("fuzz.parquet"), "{e}");
                    break;
                }
            }
        }
    }
});
